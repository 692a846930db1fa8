"""Inference runtimes the agent can use, imported lazily: ai_edge_litert or tflite_runtime for TFLite
bundles, openvino for IR bundles.

:func:`available` reports which are installed (and their versions) without importing them;
:func:`open_runner` loads a bundle's model into a :class:`Runner`. A runner's ``run`` returns the
outputs and the on-device compute time of that one invocation (the runtime's invoke/infer call
only; copying tensors in and out is excluded).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import AgentError

# module to import -> distribution name (for the version) and the bundle runtime it serves
RUNTIME_MODULES = {
    "ai_edge_litert": ("ai-edge-litert", "tflite"),
    "tflite_runtime": ("tflite-runtime", "tflite"),
    "openvino": ("openvino", "openvino"),
}
NNAPI_LIBRARIES = ("libnnapi_delegate.so", "libtensorflowlite_nnapi_delegate.so", "libedgetpu.so.1")
#: A TFLite bundle requires ``tflite-runtime >= X`` with X a TensorFlow Lite runtime version (from its
#: ops' versions). tflite-runtime's versions are TensorFlow's; ai-edge-litert (LiteRT, TensorFlow Lite
#: renamed in September 2024) numbers its releases anew: its first release, 1.0.1, was built from
#: TensorFlow sources after the 2.17 release, so every ai-edge-litert counts as TensorFlow Lite 2.17.
TFLITE_REQUIREMENT = "tflite-runtime"
TFLITE_SCALE = {"tflite-runtime": None, "ai-edge-litert": "2.17"}  # None: the package's own version


class RuntimeUnavailable(AgentError):
    code = "runtime_unavailable"


class RuntimeFailure(AgentError):
    code = "runtime_error"


class RuntimeTooOld(AgentError):
    """The bundle requires a newer runtime release than the one this device has."""

    code = "runtime_too_old"


def unmet_requirement(requirement: Any, module: str, version: str | None) -> str | None:
    """Why ``requirement`` is not met by runtime ``module`` at ``version``, or None when it is met.

    Only requirements about the runtime that loads the bundle are checked: one naming its package,
    or, for a TFLite runtime, ``tflite-runtime`` (compared on the TensorFlow Lite scale). An unknown
    installed version cannot be compared and passes.
    """
    dist, kind = RUNTIME_MODULES[module]
    if version is None or version == "unknown":
        return None
    if requirement.package == dist:
        have, shown = version, f"{dist} {version}"
    elif kind == "tflite" and requirement.package == TFLITE_REQUIREMENT:
        have = TFLITE_SCALE.get(dist) or version
        shown = f"{dist} {version}" + ("" if have == version else f" (TensorFlow Lite {have})")
    else:
        return None
    if requirement.met_by(have):
        return None
    return f"needs {requirement.package} >= {requirement.min_version}; this device has {shown}"


def check_requirements(manifest: Any, module: str) -> list[str]:
    """Refuse (RuntimeTooOld) a bundle whose requirements the installed ``module`` does not meet.

    Returns the files whose scoped requirement is not met (a compiled blob that only a newer runtime
    reads); the caller loads the bundle without them.
    """
    version = available().get(module)
    skipped = []
    for requirement in manifest.requirements:
        why = unmet_requirement(requirement, module, version)
        if why is None:
            continue
        if requirement.file is not None:
            skipped.append(requirement.file)
            continue
        raise RuntimeTooOld(f"the bundle {why}: upgrade the runtime (pip install -U {requirement.package})")
    return skipped


def available() -> dict[str, str | None]:
    """{module: version or None} for every supported runtime; nothing is imported."""
    out: dict[str, str | None] = {}
    for module, (dist, _) in RUNTIME_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            out[module] = None
            continue
        try:
            out[module] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[module] = "unknown"
    return out


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


class Runner:
    """A loaded model. ``run(feeds)`` takes arrays in ``inputs`` order."""

    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    info: dict[str, Any]

    def run(self, feeds: list[np.ndarray]) -> tuple[list[np.ndarray], float]:  # pragma: no cover
        raise NotImplementedError

    def close(self) -> None:
        pass


def _names(manifest_specs: Any, runtime_names: list[str]) -> list[int]:
    """Order of runtime tensors matching the manifest's order: by name when all match, else positional."""
    wanted = [spec.name for spec in manifest_specs]
    if sorted(wanted) == sorted(runtime_names) and len(set(wanted)) == len(wanted):
        return [runtime_names.index(n) for n in wanted]
    if len(wanted) != len(runtime_names):
        raise RuntimeFailure(
            f"the model has {len(runtime_names)} tensors where the manifest lists {len(wanted)}"
        )
    return list(range(len(wanted)))


class TFLiteRunner(Runner):
    def __init__(self, model_path: Path, manifest: Any, threads: int, delegate: str | None):
        module, interpreter_cls, load_delegate = _import_tflite()
        check_requirements(manifest, module)
        delegates = []
        if delegate is not None:
            if delegate.lower() != "nnapi":
                raise RuntimeUnavailable(f"unknown TFLite delegate {delegate!r}; supported: nnapi")
            options = dict(getattr(manifest, "delegate_options", {}).get("nnapi", {}))
            delegates.append(_load_nnapi(load_delegate, options))
        try:
            self.interp = interpreter_cls(
                model_path=str(model_path), num_threads=threads, experimental_delegates=delegates or None
            )
            self.interp.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            raise RuntimeFailure(f"TFLite cannot load {model_path.name}: {exc}") from None
        ins = self.interp.get_input_details()
        outs = self.interp.get_output_details()
        in_order = _names(manifest.inputs, [d["name"] for d in ins])
        out_order = _names(manifest.outputs, [d["name"] for d in outs])
        self._in_idx = [ins[i]["index"] for i in in_order]
        self._out_idx = [outs[i]["index"] for i in out_order]
        self.inputs = [
            TensorInfo(spec.name, tuple(int(x) for x in ins[i]["shape"]), np.dtype(ins[i]["dtype"]).name)
            for spec, i in zip(manifest.inputs, in_order)  # noqa: B905 - equal lengths; Python 3.9
        ]
        self.outputs = [
            TensorInfo(spec.name, tuple(int(x) for x in outs[i]["shape"]), np.dtype(outs[i]["dtype"]).name)
            for spec, i in zip(manifest.outputs, out_order)  # noqa: B905
        ]
        ops = self.interp._get_ops_details() if hasattr(self.interp, "_get_ops_details") else []
        original, delegated, kernels = count_delegated(ops)
        self.info = {
            "runtime": module,
            "version": available().get(module),
            "device": "CPU",
            "threads": threads,
            "delegate": delegate,
            "ops": original,
            "delegated_ops": delegated,  # by any delegate, including the runtime's default XNNPACK
            "delegate_kernels": kernels,
        }

    def run(self, feeds: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
        for idx, arr in zip(self._in_idx, feeds):  # noqa: B905 - checked by the caller
            self.interp.set_tensor(idx, arr)
        start = time.perf_counter()
        self.interp.invoke()
        elapsed = time.perf_counter() - start
        return [np.array(self.interp.get_tensor(i)) for i in self._out_idx], elapsed


def count_delegated(ops: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(original ops, ops taken over by delegates, delegate kernels) from the interpreter's node list.

    A delegate kernel node replaces a convex partition of the original graph: the original ops that
    lie on paths from the kernel's inputs to its outputs (found by walking producers backwards).
    """
    kernels = [op for op in ops if str(op.get("op_name", "")).upper() == "DELEGATE"]
    originals = [op for op in ops if str(op.get("op_name", "")).upper() != "DELEGATE"]
    producer = {int(t): i for i, op in enumerate(originals) for t in op.get("outputs", [])}
    taken: set[int] = set()
    for kernel in kernels:
        stop = {int(t) for t in kernel.get("inputs", [])}
        stack = [int(t) for t in kernel.get("outputs", [])]
        while stack:
            t = stack.pop()
            i = producer.get(t)
            if t in stop or i is None or i in taken:
                continue
            taken.add(i)
            stack.extend(int(x) for x in originals[i].get("inputs", []) if int(x) >= 0)
    return len(originals), len(taken), len(kernels)


def _import_tflite() -> tuple[str, Any, Any]:
    try:
        from ai_edge_litert.interpreter import Interpreter, load_delegate

        return "ai_edge_litert", Interpreter, load_delegate
    except ImportError:
        pass
    try:
        from tflite_runtime.interpreter import Interpreter, load_delegate

        return "tflite_runtime", Interpreter, load_delegate
    except ImportError:
        raise RuntimeUnavailable(
            "this bundle needs a TFLite runtime: pip install ai-edge-litert (or tflite-runtime)"
        ) from None


def _load_nnapi(load_delegate: Any, options: Any = None) -> Any:
    """The NNAPI delegate, given the bundle's ``delegate_options["nnapi"]`` (``allow_fp16``: relax float32
    computation to float16, what an ``fp16`` nnapi bundle asks for)."""
    candidates = [os.environ["EDGEKIT_NNAPI_DELEGATE"]] if os.environ.get("EDGEKIT_NNAPI_DELEGATE") else []
    candidates += list(NNAPI_LIBRARIES[:2])
    errors = []
    for lib in candidates:
        try:
            return load_delegate(lib, options) if options else load_delegate(lib)
        except (ValueError, OSError, RuntimeError) as exc:
            errors.append(f"{lib}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    raise RuntimeUnavailable(
        "the NNAPI delegate is not available on this device (tried "
        + "; ".join(errors)
        + "); load without a delegate or set EDGEKIT_NNAPI_DELEGATE to its library"
    )


def openvino_cpu_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` for a compile on OpenVINO's CPU plugin: its ``INFERENCE_NUM_THREADS`` (absent or 0: the plugin's
    default, one per core this process may run on) shared by its ``NUM_STREAMS``. With one thread a stream,
    snippets off: OpenVINO 2026.4's CPU snippets (its fused Subgraph kernels) compute wrong values there on an int8
    DistilBERT IR and its QDQ model (every logit the same; ``SNIPPETS_MODE`` ``DISABLE`` gives the values of two
    threads a stream, tests/targets/test_openvino_one_thread.py), and a host or device with one core runs on one
    thread whatever is asked."""
    available = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = min(int(config.get("INFERENCE_NUM_THREADS") or available), available)
    if threads // max(1, int(config.get("NUM_STREAMS", 1))) <= 1 and "SNIPPETS_MODE" not in config:
        return {**config, "SNIPPETS_MODE": "DISABLE"}
    return config


class OpenVINORunner(Runner):
    def __init__(
        self, model_path: Path, manifest: Any, threads: int, device: str | None, compiled: Path | None
    ):
        try:
            import openvino as ov
        except ImportError:
            raise RuntimeUnavailable("this bundle needs OpenVINO: pip install openvino") from None
        skipped = check_requirements(manifest, "openvino")
        if compiled is not None and compiled.name in skipped:
            compiled = None  # the blob needs a newer OpenVINO than this one: compile the IR instead
        core = ov.Core()
        device = (device or "CPU").upper()
        if device not in core.available_devices:
            raise RuntimeUnavailable(
                f"OpenVINO device {device} is not available here (available: {', '.join(core.available_devices)})"
            )
        config: dict[str, Any] = {}
        if device == "CPU":
            config = openvino_cpu_config(
                {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32"}
            )
        try:
            if compiled is not None and device != "CPU":
                with open(compiled, "rb") as f:
                    self.compiled = core.import_model(f.read(), device, config)
            else:
                self.compiled = core.compile_model(str(model_path), device, config)
        except RuntimeError as exc:
            raise RuntimeFailure(
                f"OpenVINO cannot load {model_path.name} on {device}: {str(exc)[:300]}"
            ) from None
        self.request = self.compiled.create_infer_request()
        in_ports, out_ports = list(self.compiled.inputs), list(self.compiled.outputs)
        in_order = _names(
            manifest.inputs, [port_name(p, [s.name for s in manifest.inputs]) for p in in_ports]
        )
        out_order = _names(
            manifest.outputs, [port_name(p, [s.name for s in manifest.outputs]) for p in out_ports]
        )
        self._in_order, self._out_order = in_order, out_order
        self.inputs = [_port_info(spec.name, in_ports[i]) for spec, i in zip(manifest.inputs, in_order)]  # noqa: B905
        self.outputs = [_port_info(spec.name, out_ports[i]) for spec, i in zip(manifest.outputs, out_order)]  # noqa: B905
        self._ov = ov
        self.info = {
            "runtime": "openvino",
            "version": available().get("openvino"),
            "device": device,
            "threads": threads,
            "delegate": None,
            "delegated_ops": 0,
            "skipped_files": skipped,
        }

    def run(self, feeds: list[np.ndarray]) -> tuple[list[np.ndarray], float]:
        for i, arr in zip(self._in_order, feeds):  # noqa: B905 - checked by the caller
            self.request.set_input_tensor(i, self._ov.Tensor(np.require(arr, requirements="C")))
        start = time.perf_counter()
        self.request.infer()
        elapsed = time.perf_counter() - start
        return [np.array(self.request.get_output_tensor(i).data) for i in self._out_order], elapsed


def port_name(port: Any, wanted: Iterable[str] = ()) -> str:
    """An OpenVINO port's name: the first of ``wanted`` among its tensor names (a port has several once OpenVINO
    folds ops next to a Parameter or Result: a Convert and an identity FakeQuantize after a uint8 input, say),
    else any of them ("" when it has none)."""
    try:
        names = port.get_names()
        return next((name for name in wanted if name in names), None) or port.get_any_name()
    except RuntimeError:
        return ""


def _port_info(name: str, port: Any) -> TensorInfo:
    shape = tuple(int(d) for d in port.get_shape())
    dtype = np.dtype(port.get_element_type().to_dtype()).name
    return TensorInfo(name, shape, dtype)


def open_runner(bundle: Any, threads: int = 2, delegate: str | None = None) -> Runner:
    """A runner for a verified bundle (``bundle.LoadedBundle``)."""
    if not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= 256:
        raise RuntimeFailure(f"threads must be an integer from 1 to 256, got {threads!r}")
    manifest = bundle.manifest
    model = bundle.primary_path
    if manifest.runtime == "tflite":
        return TFLiteRunner(model, manifest, threads, delegate)
    if manifest.runtime == "openvino":
        compiled = manifest.files_with_role("compiled")
        device = delegate or manifest.device_hint
        if device and device.upper() not in ("CPU", "NPU", "GPU", "MYRIAD"):
            raise RuntimeUnavailable(f"unknown OpenVINO device {device!r}; use CPU, NPU or GPU")
        if delegate is None and device and device.upper() != "CPU":
            device = _fallback_device(device)
        return OpenVINORunner(
            model, manifest, threads, device, bundle.path(compiled[0]) if compiled else None
        )
    raise RuntimeUnavailable(f"no runner for bundle runtime {manifest.runtime!r}")


def _fallback_device(hint: str) -> str:
    """The bundle's device hint when the device has it, else CPU (an explicit request never falls back)."""
    try:
        import openvino as ov
    except ImportError:
        return "CPU"
    return hint.upper() if hint.upper() in ov.Core().available_devices else "CPU"
