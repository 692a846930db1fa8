"""What each target can do to win back a layer's accuracy: the one table of restores (issue 14).

A *restore* changes one layer of an int8 model so that it loses less accuracy, within what the target runs:

- ``int16x8``: the layer takes TFLite's 16x8 recipe (int16 activations, int8 weights); joins the arm-cpu
  choices as soon as the target runs that recipe (``Target.precisions["int16x8"] is None``) and the
  quantizer honours ``layer_precision``.
- ``float``: the layer stays float in the QDQ model (``QuantizeOptions.exclude``): a float kernel between
  DEQUANTIZE/QUANTIZE in TFLite, FP16-compressed weights with float compute in OpenVINO (which runs mixed
  precision), an op on the CPU partition beside the NNAPI delegate (only with ``--allow-cpu-fallback``).
- ``mse`` / ``percentile``: int8 still, the layer's output range chosen by that calibration method.
- ``bias-correction``: int8 still, the layer's bias absorbs the mean shift of its weight rounding.

:data:`RESTORES` lists, per target, the choices in the order the search tries them (the first available one
is a layer's restore on targets that restore by precision; the int8-only fixes are all tried per layer).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from edgekit.core.errors import QuantizationError


@dataclass(frozen=True)
class Restore:
    """One way to restore a layer."""

    name: str
    #: What it does, in the target's words (the report says it).
    what: str
    #: ``precision`` (the layer leaves int8), ``range`` (int8: another calibration method), ``bias`` (int8:
    #: bias correction).
    kind: str
    #: The recipe the target must run for this restore (``Target.precisions``), or None.
    recipe: str | None = None
    #: Only with ``--allow-cpu-fallback`` (the layer leaves the integer accelerator).
    fallback: bool = False

    @property
    def integer(self) -> bool:
        """The layer stays int8."""
        return self.kind != "precision"


_INT16 = Restore("int16x8", "int16 activations, int8 weights (TFLite 16x8)", "precision", recipe="int16x8")
_MSE = Restore("mse", "int8, output range by the mse method", "range")
_PERCENTILE = Restore("percentile", "int8, output range by the percentile method", "range")
_BIAS = Restore("bias-correction", "int8, bias corrected for the weight rounding", "bias")

#: Per target, the restores it can do, in the order the search prefers them.
RESTORES: Mapping[str, tuple[Restore, ...]] = {
    "arm-cpu": (
        _INT16,
        Restore("float", "float kernel between DEQUANTIZE/QUANTIZE", "precision", recipe="fp32"),
    ),
    "intel-vpu": (Restore("float", "float32 weights and compute (OpenVINO mixed precision)", "precision"),),
    # `edgekit quantize` without --target: the QDQ file's own choice.
    "onnx": (Restore("float", "the layer left float in the QDQ model", "precision"),),
    "nnapi": (
        _MSE,
        _PERCENTILE,
        _BIAS,
        Restore(
            "float", "float op on the CPU partition (leaves the NNAPI delegate)", "precision", fallback=True
        ),
    ),
}


def available_restores(target: Any, allow_cpu_fallback: bool = False) -> tuple[Restore, ...]:
    """The restores ``target`` (a :class:`edgekit.targets.base.Target`) can do now, in preference order."""
    choices = RESTORES.get(target.name)
    if choices is None:
        raise QuantizationError(f"target {target.name!r} has no accuracy restores")
    from edgekit.core.runtime import onnxruntime_available

    precisions = getattr(target, "precisions", {})
    # The host measures an int16x8 layer in onnxruntime (a dev extra): without it, the next choice (float).
    host_16bit = any(r.recipe == "int16x8" for r in choices) and onnxruntime_available()
    return tuple(
        r
        for r in choices
        if (r.recipe is None or precisions.get(r.recipe, None) is None)
        and (allow_cpu_fallback or not r.fallback)
        and (r.recipe != "int16x8" or host_16bit)
    )


def apply_restores(
    options: Any, restores: Mapping[str, str], followers: Mapping[str, str] | None = None
) -> Any:
    """``options`` (a ``QuantizeOptions``) with each ``node -> restore name`` applied.

    ``followers``: node -> the activation fused into it (:func:`fused_followers`): a layer left float takes
    its fused activation with it.
    """
    followers = followers or {}
    exclude = set(options.exclude)
    layer_precision = list(options.layer_precision)
    layer_method = list(options.layer_method)
    bias = set(options.layer_bias_correction)
    for node, name in restores.items():
        if name == "float":
            exclude.add(node)
            if node in followers:
                exclude.add(followers[node])
        elif name == "int16x8":
            layer_precision.append((node, "int16x8"))
        elif name in ("mse", "percentile"):
            layer_method.append((node, name))
        elif name == "bias-correction":
            bias.add(node)
        else:  # pragma: no cover - the names come from RESTORES
            raise AssertionError(name)
    return replace(
        options,
        exclude=frozenset(exclude),
        layer_precision=tuple(layer_precision),
        layer_method=tuple(layer_method),
        layer_bias_correction=frozenset(bias),
    )


def fused_followers(model: Any, plan: Any) -> dict[str, str]:
    """Node -> the activation node fused into it (``plan.fused`` is keyed by the node's output)."""
    producers = {o.name: n.name for n in model.graph for o in n.outputs}
    return {producers[out]: act for out, act in plan.fused.items() if out in producers}
