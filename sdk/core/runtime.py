"""Host execution of ONNX models (fp32 and QDQ) on OpenVINO's CPU plugin in f32 precision.

Intermediate tensors are captured by adding them as graph outputs before compiling.

A QDQ model runs with the constant DequantizeLinear nodes of its convolutions and matrix products
(weights, biases) folded into float initializers, which is exactly what they compute. Left as they
are, OpenVINO runs those ops as u8 x s8 integer kernels, which on x86 CPUs without VNNI (AVX2 only)
can saturate their 16-bit intermediate sums: on such a CPU a 16-input Gemm with weights near 127 came
out 3.9 away from the QDQ model's answer (``tests/test_runtime.py``). Activation quantization still
runs, as float FakeQuantize.

A model with 16-bit activations (``int16x8``: int16/uint16 QuantizeLinear) runs on onnxruntime instead, graph
optimizations off (the QDQ nodes computed as written): OpenVINO 2026.4 strips 16-bit FakeQuantize
(``qdq_stripping.cpp``: those activations compute in float, not on the int16 grid) and fails to compile when
one feeds a model output (``tests/test_int16x8.py``).
"""

from __future__ import annotations

import os
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import onnx
from edgekit.core.errors import DataError, ModelError
from edgekit.core.ov_conv1d import grouped_conv1d_as_2d
from edgekit.core.protoutil import with_outputs
from edgekit.core.qdq_forms import (
    antialias_resizes_as_matmuls,
    concat_and_gather_forms,
    exact_input_quantize,
    fold_constant_dequantize,
    pad_before_dequantize,
    tabulate_elementwise,
)
from edgekit.core.unsigned import unsigned_activations
from edgekit.device_agents.runtimes import port_name

if TYPE_CHECKING:  # onnx_ir is slow to import: TFLite verification's child process runs without it
    import onnx_ir as ir

T = TypeVar("T")


@contextmanager
def _run_errors() -> Iterator[None]:
    """An OpenVINO kernel's failure at run time (its CPU plugin's check on a node it made from the graph: e.g.
    the ScatterUpdate of its own GroupQueryAttention decomposition) as one line naming the node and the check."""
    try:
        yield
    except RuntimeError as exc:
        from edgekit.core import isolated

        if isolated.IN_CHILD:  # the parent names the step: "... while running the source model on the host"
            raise
        first = isolated.first_message(str(exc)) or "unknown error"
        raise ModelError(f"OpenVINO failed while running the model: {first}") from None


#: OpenVINO's CPU plugin runs bf16 on capable CPUs unless told otherwise (results drift by ~1e-3). It also pins
#: its threads to cores by default, each process alike: two processes (the accuracy search's pool workers, a
#: compile beside them) then share one core at half speed each (MobileNetV2 fp32, two one-thread processes on two
#: cores: 11.1 ms an inference pinned, 5.6 unpinned, 5.4 alone; docs/benchmarks.md, stop 25). And it quantizes the
#: input of a MatMul with compressed (int8/int4) weights to int8 on the fly, in groups of 32: a weight-only ViT
#: came out 3e-3 to 1.2e-2 of its output range off the model's values (onnxruntime without optimizations: 1e-5 to
#: 3e-5 with the groups off), and a .tflite computing them exactly failed verification against it (probe 12r).
F32_CONFIG = {
    "INFERENCE_PRECISION_HINT": "f32",
    "PERFORMANCE_HINT": "LATENCY",
    "ENABLE_CPU_PINNING": False,
    "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0,
}


def _core():
    import openvino as ov

    return ov.Core()


def stable_top_k(ov_model):  # noqa: ANN001, ANN201 - an openvino.Model (openvino is imported lazily)
    """``ov_model`` with every TopK stable (``ov_model`` itself, changed in place).

    ONNX TopK puts the lower index first among equal values; OpenVINO 2026.4's ONNX frontend makes TopK-11 with
    ``stable=False``, which orders ties any way: on quantized scores (many equal values) a detector's top-k
    boxes came out in another order than onnxruntime's and LiteRT's (``tests/test_runtime.py``).
    """
    for op in ov_model.get_ordered_ops():
        attributes = op.get_attributes() if op.get_type_name() == "TopK" else {}
        # (a TopK that does not sort, e.g. the one Hardmax becomes, cannot be stable: its order is unused)
        if "stable" in attributes and attributes.get("sort") in ("value", "index"):
            op.set_attribute("stable", True)
    return ov_model


def _compile(path: str, config: Mapping[str, str]) -> Any:
    """The model file at ``path`` (ONNX or IR) read and compiled on OpenVINO's CPU plugin (TopK made stable)."""
    from edgekit.device_agents.runtimes import openvino_cpu_config

    core = _core()
    return core.compile_model(stable_top_k(core.read_model(path)), "CPU", openvino_cpu_config(dict(config)))


def local_parallelism() -> int:
    """Independent runs this host keeps in flight by default: one per core, up to 4 (the statistics pass's
    inference streams, the accuracy search's local workers). One stream per core outran one stream on every core:
    MobileNetV2's statistics pass on 100 photos, 2 cores, 3.42 -> 2.87 s, every statistic bit for bit the same."""
    return max(1, min(4, os.cpu_count() or 1))


def compile_export(path: str, config: Mapping[str, str]) -> bytes:
    """(Run in a child.) :func:`_compile`'s compile of a model file, exported: the caller imports it
    (MobileNetV2's calibration graph: import 0.15 s where a second read and compile took 0.5 s)."""
    blob = _compile(path, config).export_model()
    return blob if isinstance(blob, bytes) else blob.getvalue()


def preflight_ir(
    xml: str, source: bytes, samples: Sequence[Mapping[str, np.ndarray]], exact_qdq: Sequence[bool]
) -> dict[str, Any]:
    """(Run in a child.) Compile and run an IR on the CPU, then its ONNX source as :class:`HostRunner` runs it
    (once per ``exact_qdq`` mode), on ``samples``; says which step is at work. Returns what it compiled,
    exported (``ir``; ``hosts``: by ``exact_qdq``, None for a runner on onnxruntime): the caller imports them
    instead of compiling each model a second time (an int8 detector's packaging compiled five models, three of
    them twice)."""
    from edgekit.core import isolated

    isolated.stage("OpenVINO", "compiling and running the IR on the CPU")
    compiled = _compile(xml, F32_CONFIG)
    for sample in samples:
        compiled.create_infer_request().infer(dict(sample))
    blob = compiled.export_model()
    hosts: dict[bool, bytes | None] = {}
    proto = onnx.load_model_from_string(source)
    for exact in exact_qdq:
        isolated.stage("OpenVINO", "running the source model on the host")
        runner = HostRunner(proto, exact_qdq=exact)
        for sample in samples:
            runner.run(sample)
        hosts[exact] = runner.export()
    return {"ir": blob if isinstance(blob, bytes) else blob.getvalue(), "hosts": hosts}


def has_16bit_qdq(proto: onnx.ModelProto) -> bool:
    """The model quantizes activations to 16 bits (int16/uint16 QuantizeLinear zero points or output_dtype)."""
    sixteen = (onnx.TensorProto.INT16, onnx.TensorProto.UINT16)
    inits = {t.name: t.data_type for t in proto.graph.initializer}
    for n in proto.graph.node:
        if n.op_type != "QuantizeLinear" or n.domain not in ("", "ai.onnx"):
            continue
        if len(n.input) > 2 and inits.get(n.input[2]) in sixteen:
            return True
        if any(a.name == "output_dtype" and a.i in sixteen for a in n.attribute):
            return True
    return False


def squeeze_axes_written(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each Squeeze without axes whose input has a known rank, a dim of unknown size
    and dims of size 1 names those size-1 dims as its axes; ``proto`` itself when there is none.

    OpenVINO's CPU plugin cannot compile a Squeeze without axes whose input has a dim it cannot size ("doesn't
    support Squeeze operation with dynamic rank"): paddle2onnx 1.x writes two after the NonMaxSuppression of
    PaddleDetection's ``multiclass_nms3`` ([N, 1] -> [N], N the boxes kept), and ``edgekit quantize`` could not
    calibrate the detector. The axes are what the exporter meant: were N 1, the axes-less form would squeeze it
    too and the Gathers after it, which need a rank-1 input, would fail."""
    from edgekit.core.shape_checks import squeeze_axes_meant
    from onnx import helper, numpy_helper

    def no_axes(n: onnx.NodeProto) -> bool:
        return (
            n.op_type == "Squeeze"
            and n.domain in ("", "ai.onnx")
            and (len(n.input) < 2 or not n.input[1])
            and not any(a.name == "axes" for a in n.attribute)
        )

    if not any(no_axes(n) for n in proto.graph.node):
        return proto
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # noqa: BLE001 - no shapes, no rewrite: the model as it was
        return proto
    graph = inferred.graph
    shapes = {
        v.name: [
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in v.type.tensor_type.shape.dim
        ]
        for v in [*graph.input, *graph.value_info, *graph.output]
        if v.type.tensor_type.HasField("shape")
    }
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    changed = False
    for n in out.graph.node:
        dims = shapes.get(n.input[0]) if no_axes(n) else None
        if not dims or None not in dims or 1 not in dims:
            continue
        axes = squeeze_axes_meant(dims)
        if opset >= 13:
            name = f"{n.output[0]}/squeeze_axes"
            out.graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), name))
            del n.input[1:]
            n.input.append(name)
        else:
            n.attribute.append(helper.make_attribute("axes", axes))
        changed = True
    return out if changed else proto


def runner_form(proto: onnx.ModelProto, exact_qdq: bool, keep: Sequence[str] = ()) -> onnx.ModelProto:
    """``proto`` as :class:`HostRunner` compiles it (the same values): with ``exact_qdq`` the QDQ model's exact
    semantics (constant dequantizations folded, 8-bit element-wise ops tabulated, graph-input quantization
    written out), else as the intel-vpu target converts it; the tensors ``keep`` stay in the graph."""
    proto = unsigned_activations(proto)  # the same values, on the grid OpenVINO runs right
    proto = squeeze_axes_written(proto)
    proto = concat_and_gather_forms(proto, keep=keep)
    proto = antialias_resizes_as_matmuls(proto)
    if exact_qdq:
        return exact_input_quantize(tabulate_elementwise(fold_constant_dequantize(proto), keep=keep))
    # as the intel-vpu target converts it (targets/openvino_ir.py, qdq_forms.for_openvino)
    return grouped_conv1d_as_2d(pad_before_dequantize(proto))


#: What a 16-bit QDQ model needs on the host (onnxruntime is a dev extra: ``pip install -e ".[dev]"``).
ORT_NEEDED = "16-bit activations (int16x8) run on the host in onnxruntime, which is not installed: pip install onnxruntime"


def onnxruntime_available() -> bool:
    """onnxruntime imports here (the host runs 16-bit QDQ models there)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


class _OrtSession:
    """onnxruntime in place of a compiled OpenVINO model (16-bit QDQ models, see the module docstring)."""

    def __init__(self, proto: onnx.ModelProto, threads: int | None):
        try:
            import onnxruntime as ort
        except ImportError:
            raise ModelError(ORT_NEEDED) from None

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if threads:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(
                proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unknown error"
            raise ModelError(f"onnxruntime cannot load the model: {first}") from None
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self.session.run(self.output_names, dict(feeds)), strict=True))


class HostRunner:
    """Compile an ONNX model once and run it sample by sample."""

    def __init__(
        self,
        model: onnx.ModelProto | ir.Model,
        extra_outputs: Sequence[str] = (),
        *,
        threads: int | None = None,
        streams: int = 1,
        exact_qdq: bool = True,
        isolate: bool = False,
        onnxruntime: bool = False,
        prepared: bool = False,
        properties: Mapping[str, str] | None = None,
        compiled: bytes | None = None,
    ):
        """``exact_qdq=False`` runs a QDQ model as OpenVINO would deploy it, on its int8 kernels.

        ``onnxruntime=True`` runs it where 16-bit QDQ models run: onnxruntime, graph optimizations off (the
        accuracy search's cached activations for 16-bit candidates come from there).

        ``isolate=True`` first compiles the model in a child process (:mod:`edgekit.core.isolated`), so that an
        OpenVINO crash on a model edgekit wrote is a ModelError rather than the end of the process.

        ``prepared=True``: ``model`` is already in the form this runner gives it (:func:`runner_form`).
        ``properties``: more OpenVINO compile properties (over the f32 ones).
        ``compiled``: what :meth:`export` gave for the same model and options (imported, not compiled again).
        """
        if not isinstance(model, onnx.ModelProto):
            import onnx_ir as ir

            model = ir.to_proto(model)
        proto = model if prepared else runner_form(model, exact_qdq, extra_outputs)
        proto = with_outputs(proto, list(extra_outputs))
        initializers = {t.name for t in proto.graph.initializer}
        self.output_names = [o.name for o in proto.graph.output]
        self._input_info = {
            i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
            for i in proto.graph.input
            if i.name not in initializers
        }
        self._ort: _OrtSession | None = None
        if onnxruntime or has_16bit_qdq(proto):
            self._ort = _OrtSession(proto, threads)
            self.streams = 1
            self.input_names = list(self._input_info)
            return
        config = {**F32_CONFIG, **(properties or {})}
        if streams > 1:
            # Several requests in flight (see run_stream): one stream each, the cores shared between them.
            config["PERFORMANCE_HINT"] = "THROUGHPUT"
            config["NUM_STREAMS"] = str(streams)
        self.streams = streams
        if threads:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        with tempfile.TemporaryDirectory(prefix="edgekit-ov-") as tmp:
            path = Path(tmp, "model.onnx")
            path.write_bytes(proto.SerializeToString())
            blob = compiled
            if isolate and blob is None:  # compiled in a child first; this process imports what it compiled
                from edgekit.core import isolated

                blob = isolated.call(
                    compile_export,
                    str(path),
                    config,
                    what="OpenVINO",
                    doing="compiling the model on the host",
                    error=ModelError,
                )
            try:
                if blob is not None:
                    self._compiled = _core().import_model(blob, "CPU", config)
                else:
                    self._compiled = _compile(str(path), config)
            except RuntimeError as exc:
                from edgekit.core.isolated import first_message

                first = first_message(str(exc)) or "unknown error"  # not its "Exception from src/...cpp:117:"
                raise ModelError(f"OpenVINO cannot compile the model: {first}") from None
        self._request = self._compiled.create_infer_request()
        # the model's own input name, where OpenVINO gave the port others too
        self.input_names = [port_name(i, self._input_info) for i in self._compiled.inputs]
        self._outputs = {}
        for port in self._compiled.outputs:
            for name in port.get_names():
                self._outputs[name] = port

    def export(self) -> bytes | None:
        """The compiled model, exported (for ``HostRunner(..., compiled=)``); None on onnxruntime."""
        if self._ort is not None:
            return None
        blob = self._compiled.export_model()
        return blob if isinstance(blob, bytes) else blob.getvalue()

    def _check(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise DataError(f"missing input(s) {missing}; the model's inputs are {self.input_names}")
        for name in self.input_names:
            expected = self._input_info.get(name)
            got = tuple(np.shape(feeds[name]))
            if expected and all(d > 0 for d in expected) and expected != got:  # <= 0: a dynamic dim
                raise DataError(f"input {name!r}: expected shape {list(expected)}, got {list(got)}")
        # np.require, not ascontiguousarray: that makes a scalar input (Silero VAD's sample rate) [1]
        return {n: np.require(feeds[n], requirements="C") for n in self.input_names}

    def _read_outputs(self, request, copy: bool) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name in self.output_names:
            port = self._outputs.get(name)
            if port is None:
                raise ModelError(f"OpenVINO dropped output {name!r} of the compiled model")
            data = request.get_tensor(port).data
            out[name] = np.array(data, copy=True) if copy else data
        return out

    def run_stream(self, items: Iterable[tuple[T, Mapping[str, np.ndarray]]]) -> Iterator[tuple[T, dict]]:
        """Run ``(key, feeds)`` items with ``streams`` requests in flight; yields ``(key, outputs)`` in order.

        The outputs are views of the request's buffers, valid until the next item is taken: while the caller
        works on one result, the next inference runs.
        """
        if self._ort is not None:
            for key, feeds in items:
                yield key, self._ort.run(self._check(feeds))
            return
        # Two requests even with one stream: the next inference runs while the caller reads this one's outputs.
        requests = [self._compiled.create_infer_request() for _ in range(max(self.streams, 2))]
        pending: deque = deque()
        it = iter(items)
        for request in requests:
            item = next(it, None)
            if item is None:
                break
            request.start_async(self._check(item[1]))
            pending.append((request, item[0]))
        while pending:
            request, key = pending.popleft()
            with _run_errors():
                request.wait()
            yield key, self._read_outputs(request, copy=False)
            item = next(it, None)
            if item is not None:
                request.start_async(self._check(item[1]))
                pending.append((request, item[0]))

    def run(self, feeds: Mapping[str, np.ndarray], *, copy: bool = True) -> dict[str, np.ndarray]:
        """Run one inference. With ``copy=False`` the arrays are views of the runtime's buffers, valid only until
        the next call."""
        if self._ort is not None:
            return self._ort.run(self._check(feeds))
        with _run_errors():
            self._request.infer(self._check(feeds))
        return self._read_outputs(self._request, copy)
