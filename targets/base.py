"""The target interface every deployment target implements, and the registry of targets.

A target is one small module: a :class:`Target` subclass decorated with :func:`register_target`, with
a ``name`` (what ``--target`` takes), the ``runtime`` its bundles need (``tflite`` | ``openvino``),
the ``activation_dtype`` its integer kernels want (the quantizer is asked for it), ``check(model)``
(problems, never raises for a model problem) and ``package(model, out_dir, options)`` (verifies the
artifact against the source model on the host, then writes a bundle atomically, returns its path).
Heavy runtimes are imported inside ``check``/``package``, never at module import.

Shared helpers every target uses: :func:`io_specs`, :func:`complete_provenance`,
:func:`default_verify_samples`; the verification yardstick is :mod:`edgekit.targets.yardstick`.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import TargetError
from edgekit.core.irutil import static_shape
from edgekit.device_agents.bundle import TensorSpec

_log = logging.getLogger("edgekit")

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
    #: The recipe of the model handed to ``package`` (``edgekit.quantize.recipes.RECIPES``); None: read it
    #: off the model (QDQ: int8, else fp32 or the target's float default).
    precision: str | None = None


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
    #: Hints refused with a reason (a device its runtime no longer supports) -> the one-line reason.
    retired_device_hints: ClassVar[Mapping[str, str]] = {}
    #: The frozen dataclass of target-specific options, or None.
    options_type: ClassVar[type | None] = None
    #: Every recipe of ``edgekit.quantize.recipes.RECIPES`` -> None if this target runs it, else why not
    #: (one line). The one table of which target takes which ``--precision``.
    precisions: ClassVar[Mapping[str, str | None]] = {}

    @abstractmethod
    def check(self, model: ir.Model) -> list[Problem]:
        """Every problem that stops (``error``) or degrades (``warning``) packaging of ``model``."""

    def support_problems(self, model: ir.Model) -> list[Problem]:
        """:meth:`check`, and what only a costlier question to the runtime finds (``edgekit inspect``'s table):
        a target may leave those to :meth:`package`, which names them when the runtime fails."""
        return self.check(model)

    @abstractmethod
    def package(self, model: ir.Model, out_dir: Path, options: PackageOptions) -> Path:
        """Convert, verify on the host, write the bundle atomically; returns the bundle path."""

    def quantize_options(self, base: Any) -> Any:
        """The quantization scheme this target's integer kernels need, from the user's ``QuantizeOptions``
        (calibration method, samples): by default only the activation type is the target's."""

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

    def check_precision(self, name: str) -> None:
        """A TargetError when this target cannot run recipe ``name``, saying why and naming what it runs."""
        from edgekit.quantize.recipes import get_recipe

        get_recipe(name)  # an unknown name names the recipes there are
        why = self.precisions.get(name, "not supported")
        if why is not None:
            legal = ", ".join(r for r, reason in self.precisions.items() if reason is None)
            raise TargetError(f"target {self.name!r} cannot run --precision {name}: {why}; it runs: {legal}")

    def resolve_precision(self, model: ir.Model, options: PackageOptions, float_default: str = "fp32") -> str:
        """The recipe ``package`` builds: ``options.precision``, else read off the model (weight-only: ``w8`` or
        ``w4``; QDQ: ``int8`` or ``int16x8``; else ``float_default``). A TargetError when this target cannot run it, when a float recipe (fp32, fp16)
        is asked of a model that is already quantized, or a static one (int8, int16x8) of a float model."""
        from edgekit.core.model import is_quantized, qdq_precision
        from edgekit.quantize.recipes import get_recipe
        from edgekit.quantize.weight_only import weight_only_precision

        quantized = is_quantized(model)
        name = options.precision or weight_only_precision(model) or qdq_precision(model) or float_default
        self.check_precision(name)
        if quantized and get_recipe(name).weights in ("fp32", "fp16"):
            raise TargetError(
                f"target {self.name!r}: --precision {name} needs a float model; this one is already quantized"
            )
        if not quantized and get_recipe(name).activations != "float":
            raise TargetError(
                f"target {self.name!r}: --precision {name} needs a quantized (QDQ) model; quantize first "
                "(--calib DATA)"
            )
        return name

    def check_device_hint(self, hint: str | None) -> str | None:
        if hint is None:
            return None
        normalised = hint.upper()
        if normalised in self.retired_device_hints:
            raise TargetError(f"--device-hint {hint}: {self.retired_device_hints[normalised]}")
        if normalised not in self.device_hints:
            accepted = ", ".join(self.device_hints) or "none"
            raise TargetError(
                f"target {self.name!r} does not take --device-hint {hint!r}; accepted: {accepted}"
            )
        return normalised

    def early_refusal(self, model: ir.Model) -> str | None:
        """Why this target cannot take ``model`` at any precision, read from the graph alone (one line), or None:
        asked before any calibration or quantization is spent on the model (the TFLite targets: a selection tail
        they cannot size at run time; intel-vpu: outputs whose rows a selection sets)."""
        return None

    def refusal(self, problems: Sequence[Problem]) -> str | None:
        """The one line listing every error problem, or None when there is none."""
        errors = [p for p in problems if p.severity == "error"]
        if not errors:
            return None
        shown = "; ".join(str(p).removeprefix("error: ") for p in errors[:8])
        more = f" (and {len(errors) - 8} more)" if len(errors) > 8 else ""
        return f"target {self.name!r} cannot take this model: {shown}{more}"

    def raise_on_errors(self, problems: Sequence[Problem]) -> None:
        """A TargetError listing every error problem (one line), if there is any."""
        line = self.refusal(problems)
        if line is not None:
            raise TargetError(line)


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
    return static_shape(value.shape)


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


def _gather_bounds(model: ir.Model) -> dict[str, int]:
    """Graph inputs used (directly or through a Cast) as Gather indices into a constant table: the table's
    size along the gathered axis (the smallest, when there are several)."""
    bounds: dict[str, int] = {}
    inputs = {id(v): v.name or "" for v in model.graph.inputs}
    for node in model.graph.all_nodes():
        if (
            node.op_type != "Gather"
            or len(node.inputs) < 2
            or node.inputs[0] is None
            or node.inputs[1] is None
        ):
            continue
        indices = node.inputs[1]
        producer = indices.producer()
        if producer is not None and producer.op_type == "Cast" and producer.inputs[0] is not None:
            indices = producer.inputs[0]
        name = inputs.get(id(indices))
        table = node.inputs[0].const_value
        if name is None or table is None:
            continue
        attr = node.attributes.get("axis")
        axis = attr.as_int() if attr is not None else 0
        size = int(table.shape[axis])
        bounds[name] = min(size, bounds.get(name, size))
    return bounds


def _batch_index_inputs(model: ir.Model) -> dict[str, int | None]:
    """Graph inputs behind a RoiAlign's ``batch_indices`` (through Cast / Squeeze / Unsqueeze / Reshape /
    Flatten, and a Gather of one constant column on axis 1, as torchvision's export reads ``rois[:, 0]``): input
    name -> that column (None: the whole input)."""
    found: dict[str, int | None] = {}
    inputs = {id(v): v.name or "" for v in model.graph.inputs}
    for node in model.graph.all_nodes():
        if node.op_type != "RoiAlign" or len(node.inputs) < 3 or node.inputs[2] is None:
            continue
        value, column = node.inputs[2], None
        while (
            (producer := value.producer()) is not None and producer.inputs and producer.inputs[0] is not None
        ):
            if producer.op_type in ("Cast", "Squeeze", "Unsqueeze", "Reshape", "Flatten"):
                value = producer.inputs[0]
                continue
            index = (
                producer.inputs[1].const_value
                if producer.op_type == "Gather" and len(producer.inputs) > 1
                else None
            )
            axis = producer.attributes.get("axis")
            if (
                column is None
                and index is not None
                and index.size == 1
                and axis is not None
                and axis.as_int() == 1
            ):
                column, value = int(index.numpy().reshape(-1)[0]), producer.inputs[0]
                continue
            break
        if id(value) in inputs:
            found[inputs[id(value)]] = column
    return found


def default_verify_samples(
    model: ir.Model, count: int = 3, seed: int = 0, std: float = 1.0
) -> tuple[dict[str, np.ndarray], ...]:
    """Seeded inputs of the model's static input shapes, for when the deploy has no data.

    Floats: normal, of standard deviation ``std``. Integer inputs used as Gather indices into a constant table (token ids):
    uniform over the table's rows. Other integer and bool inputs (attention masks, token types): a
    padding mask, ones followed by a random number of zeros along the last axis (at least one one). A RoiAlign's
    batch indices (an input, or a column of the boxes input ``[K, 5]``) are 0: the one image of a batch-1 model
    (random ones name images that do not exist, which OpenVINO refuses).
    """
    rng = np.random.default_rng(seed)
    bounds = _gather_bounds(model)
    batch_indices = _batch_index_inputs(model)
    samples = []
    for _ in range(count):
        feeds: dict[str, np.ndarray] = {}
        for v in model.graph.inputs:
            dims = static_dims(v)
            if dims is None:
                raise TargetError(f"input {v.name!r} has no static shape ({v.shape}); pass --input-shape")
            dtype = np.dtype(numpy_dtype_name(v.dtype))
            name = v.name or ""
            if dtype.kind == "f":
                feeds[name] = (std * rng.standard_normal(dims)).astype(dtype)
            elif name in bounds:
                feeds[name] = rng.integers(0, bounds[name], dims).astype(dtype)
            else:
                mask = np.ones(dims, dtype=dtype)
                if dims:
                    kept = rng.integers(1, dims[-1] + 1)
                    mask[..., kept:] = 0
                feeds[name] = mask
            if name in batch_indices:
                if batch_indices[name] is None:
                    feeds[name] = np.zeros(dims, dtype)
                else:
                    feeds[name][..., batch_indices[name]] = 0
        samples.append(feeds)
    return tuple(samples)
