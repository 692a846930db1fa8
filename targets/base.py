"""The target interface every deployment target implements, and the registry of targets.

A target is one small module: a :class:`Target` subclass decorated with :func:`register_target`, with
a ``name`` (what ``--target`` takes), the ``runtime`` its bundles need (``tflite`` | ``openvino``),
the ``activation_dtype`` its integer kernels want (the quantizer is asked for it), ``check(model)``
(problems, never raises for a model problem) and ``package(model, out_dir, options)`` (verifies the
artifact against the source model on the host, then writes a bundle atomically, returns its path).
Heavy runtimes are imported inside ``check``/``package``, never at module import.

Shared helpers every target uses: :func:`io_specs`, :func:`complete_provenance`,
:func:`default_verify_samples` and :func:`compare_outputs`.
"""

from __future__ import annotations

import hashlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import onnx_ir as ir
from edgekit.device_agents.bundle import TensorSpec
from edgekit.errors import TargetError

Severity = Literal["error", "warning", "info"]

#: Modules that define the built-in targets; imported on first registry lookup.
BUILTIN_TARGET_MODULES = (
    "edgekit.targets.arm_cpu",
    "edgekit.targets.nnapi_target",
    "edgekit.targets.openvino_ir",
)


@dataclass(frozen=True)
class Problem:
    """Something a target found while checking a model. ``error`` blocks packaging."""

    severity: Severity
    op_type: str | None
    node: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.op_type} {self.node!r}: " if self.op_type else ""
        return f"{self.severity}: {where}{self.message}"


@dataclass(frozen=True)
class PackageOptions:
    """Options common to every target's ``package``.

    ``verify_samples``: input dicts run through the artifact and the source model before writing
    (empty: the target makes a few seeded random ones). ``preprocessing`` and ``provenance`` go into
    the manifest as given (provenance is completed with the source sha256 and edgekit version).
    ``target_options``: the target's own frozen options dataclass (``Target.options_type``), or None
    for its defaults.
    """

    verify_samples: tuple[Mapping[str, np.ndarray], ...] = ()
    preprocessing: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    archive: bool = False
    device_hint: str | None = None
    target_options: Any = None


class Target(ABC):
    """Base class of the deployment targets (see the module docstring)."""

    name: ClassVar[str]
    runtime: ClassVar[str]
    activation_dtype: ClassVar[str]
    description: ClassVar[str] = ""
    #: False for targets that only run integer models (a float model needs calibration data).
    supports_float: ClassVar[bool] = True
    #: The accepted ``--device-hint`` values (empty: the target takes none).
    device_hints: ClassVar[tuple[str, ...]] = ()
    #: The frozen dataclass of target-specific options, or None.
    options_type: ClassVar[type | None] = None

    @abstractmethod
    def check(self, model: ir.Model) -> list[Problem]:
        """Every problem that stops (``error``) or degrades (``warning``) packaging of ``model``."""

    @abstractmethod
    def package(self, model: ir.Model, out_dir: Path, options: PackageOptions) -> Path:
        """Convert, verify on the host, write the bundle atomically; returns the bundle path."""

    def quantize_options(self, base: Any) -> Any:
        """The quantization scheme this target's integer kernels need, from the user's ``QuantizeOptions``
        (calibration method, samples): by default only the activation type is the target's."""
        from dataclasses import replace

        return replace(base, activations=self.activation_dtype)

    def target_options(self, options: PackageOptions) -> Any:
        """The target-specific options of ``options`` (defaults when None); checks their type."""
        if self.options_type is None:
            if options.target_options is not None:
                raise TargetError(f"target {self.name!r} takes no target-specific options")
            return None
        if options.target_options is None:
            return self.options_type()
        if not isinstance(options.target_options, self.options_type):
            raise TargetError(
                f"target {self.name!r} expects options of type {self.options_type.__name__}, "
                f"got {type(options.target_options).__name__}"
            )
        return options.target_options

    def check_device_hint(self, hint: str | None) -> str | None:
        if hint is None:
            return None
        normalised = hint.upper()
        if normalised not in self.device_hints:
            accepted = ", ".join(self.device_hints) or "none"
            raise TargetError(
                f"target {self.name!r} does not take --device-hint {hint!r}; accepted: {accepted}"
            )
        return normalised

    def raise_on_errors(self, problems: Sequence[Problem]) -> None:
        """A TargetError listing every error problem (one line), if there is any."""
        errors = [p for p in problems if p.severity == "error"]
        if errors:
            shown = "; ".join(str(p).removeprefix("error: ") for p in errors[:8])
            more = f" (and {len(errors) - 8} more)" if len(errors) > 8 else ""
            raise TargetError(f"target {self.name!r} cannot take this model: {shown}{more}")


_REGISTRY: dict[str, type[Target]] = {}
_builtins_loaded = False


def register_target(cls: type[Target]) -> type[Target]:
    """Class decorator adding a target to the registry; a second target of the same name is an error."""
    name = getattr(cls, "name", None)
    assert isinstance(name, str) and name, f"{cls.__name__} has no name"
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"target {name!r} is already registered by {_REGISTRY[name].__qualname__}")
    _REGISTRY[name] = cls
    return cls


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    for module in BUILTIN_TARGET_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:  # a missing dependency inside an existing target is a real error
                raise


def target_names() -> list[str]:
    """Names of every registered target, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_target(name: str) -> Target:
    """A new instance of the target called ``name``; unknown names list the supported ones."""
    _load_builtins()
    cls = _REGISTRY.get(name)
    if cls is None:
        raise TargetError(f"unknown target {name!r}; supported targets: {', '.join(sorted(_REGISTRY))}")
    return cls()


# ---------------------------------------------------------------------------------------------------
# helpers shared by the targets

_IR_TO_NUMPY = {
    ir.DataType.FLOAT: "float32",
    ir.DataType.FLOAT16: "float16",
    ir.DataType.INT8: "int8",
    ir.DataType.UINT8: "uint8",
    ir.DataType.INT16: "int16",
    ir.DataType.INT32: "int32",
    ir.DataType.INT64: "int64",
    ir.DataType.BOOL: "bool",
}


def numpy_dtype_name(dtype: ir.DataType | None) -> str:
    if dtype not in _IR_TO_NUMPY:
        raise TargetError(f"tensor type {dtype} is not supported by the bundle format")
    return _IR_TO_NUMPY[dtype]


def static_dims(value: ir.Value) -> tuple[int, ...] | None:
    """The value's shape when every dimension is a known positive integer, else None."""
    if value.shape is None:
        return None
    dims = tuple(value.shape)
    if not all(isinstance(d, int) and d > 0 for d in dims):
        return None
    return dims  # type: ignore[return-value]


def io_specs(
    model: ir.Model, layout: str | None = None
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Bundle tensor specs of a model's float inputs and outputs (static shapes required).

    ``layout`` is recorded for rank-4 tensors (e.g. ``NCHW``).
    """

    def spec(v: ir.Value) -> TensorSpec:
        dims = static_dims(v)
        if dims is None:
            raise TargetError(f"tensor {v.name!r} has no static shape ({v.shape}); pass --input-shape")
        return TensorSpec(
            name=v.name or "",
            shape=dims,
            dtype=numpy_dtype_name(v.dtype),
            layout=layout if len(dims) == 4 else None,
        )

    return tuple(spec(v) for v in model.graph.inputs), tuple(spec(v) for v in model.graph.outputs)


def model_sha256(model: ir.Model) -> str:
    """sha256 of the model's serialized proto (used when the source file's hash is not given)."""
    return hashlib.sha256(ir.to_proto(model).SerializeToString()).hexdigest()


def complete_provenance(model: ir.Model, provenance: Mapping[str, Any]) -> dict[str, Any]:
    """``provenance`` with the required ``source_sha256`` and ``edgekit_version`` filled in."""
    from edgekit import __version__

    out: dict[str, Any] = {
        "source_sha256": None,
        "edgekit_version": __version__,
        "quantization": None,
        "calibration_samples": None,
    }
    out.update(provenance)
    if not out["source_sha256"]:
        out["source_sha256"] = model_sha256(model)
    return out


def default_verify_samples(
    model: ir.Model, count: int = 3, seed: int = 0
) -> tuple[dict[str, np.ndarray], ...]:
    """Seeded random inputs of the model's static input shapes (standard normal for floats)."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        feeds: dict[str, np.ndarray] = {}
        for v in model.graph.inputs:
            dims = static_dims(v)
            if dims is None:
                raise TargetError(f"input {v.name!r} has no static shape ({v.shape}); pass --input-shape")
            dtype = np.dtype(numpy_dtype_name(v.dtype))
            if dtype.kind == "f":
                feeds[v.name or ""] = rng.standard_normal(dims).astype(dtype)
            elif dtype.kind == "b":
                feeds[v.name or ""] = rng.integers(0, 2, dims).astype(dtype)
            else:
                info = np.iinfo(dtype)
                feeds[v.name or ""] = rng.integers(max(info.min, -128), min(info.max, 127) + 1, dims).astype(
                    dtype
                )
        samples.append(feeds)
    return tuple(samples)


def worst_rel_error(figures: Mapping[str, Any]) -> float:
    """The largest ``max_rel_error`` over the outputs in ``figures`` (from :func:`compare_outputs`)."""
    return max((o["max_rel_error"] for o in figures["outputs"].values()), default=0.0)


def worst_error_within(
    figures: Mapping[str, Any], tolerance: float, target: str, artifact: str, samples: int
) -> float:
    """The largest error relative to the output range in ``figures`` (from :func:`compare_outputs`); a
    TargetError when it exceeds ``tolerance`` (the artifact is then not written)."""
    worst = worst_rel_error(figures)
    if worst > tolerance:
        raise TargetError(
            f"{target}: verification failed: {artifact} differs from the source model by {worst:.3g} of the "
            f"output range on {samples} sample(s) (tolerance {tolerance:g})"
        )
    return worst


def compare_outputs(
    reference: Sequence[Mapping[str, np.ndarray]], actual: Sequence[Mapping[str, np.ndarray]]
) -> dict[str, Any]:
    """Verification figures of ``actual`` against ``reference`` (same samples, same output names).

    Per output: max and mean absolute error, the reference's value range, the max error relative to
    that range, and for outputs with a class axis (last dim > 1) the top-1 agreement.
    """
    assert len(reference) == len(actual), "one result per sample"
    outputs: dict[str, dict[str, float]] = {}
    names = list(reference[0]) if reference else []
    for name in names:
        ref = np.stack([np.asarray(r[name], dtype=np.float64) for r in reference])
        got = np.stack([np.asarray(a[name], dtype=np.float64) for a in actual])
        if ref.shape != got.shape:
            raise TargetError(
                f"verification: output {name!r} has shape {got.shape[1:]}, expected {ref.shape[1:]}"
            )
        err = np.abs(ref - got)
        value_range = float(ref.max() - ref.min()) if ref.size else 0.0
        entry = {
            "max_abs_error": float(err.max()) if err.size else 0.0,
            "mean_abs_error": float(err.mean()) if err.size else 0.0,
            "reference_range": value_range,
            "max_rel_error": float(err.max() / value_range) if err.size and value_range > 0 else 0.0,
        }
        flat_ref = ref.reshape(len(reference), -1)
        if flat_ref.shape[1] > 1:
            flat_got = got.reshape(len(actual), -1)
            entry["top1_agreement"] = float(np.mean(flat_ref.argmax(1) == flat_got.argmax(1)))
        outputs[name] = entry
    return {"samples": len(reference), "outputs": outputs}
