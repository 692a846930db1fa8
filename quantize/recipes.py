"""The compression recipes: one table of what each ``--precision`` means (issue 13).

A recipe says what the weights and the activations become. ``edgekit quantize`` writes it as a standard
ONNX model (QDQ for the static recipes, DequantizeLinear on the weights only for the weight-only ones, fp16
tensors for fp16); each target turns that ONNX into its own form and declares, in
``Target.precisions``, which recipes it runs and why not the others. ``--layer-precision NAME=RECIPE``
gives one layer another recipe (the accuracy-aware search builds on it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgekit.core.errors import QuantizationError

if TYPE_CHECKING:
    import onnx_ir as ir


@dataclass(frozen=True)
class Recipe:
    """One ``--precision``.

    ``weights``: ``fp32`` | ``fp16`` | ``int8`` | ``int4``. ``activations``: ``float`` (float compute),
    ``8bit`` (static int8/uint8: each target chooses the signedness, ``Target.activation_dtype``) or
    ``int16`` (symmetric, zero point 0: TFLite's 16x8 scheme). ``calibrated``: needs calibration data
    (activation ranges).
    """

    name: str
    weights: str
    activations: str
    calibrated: bool
    summary: str

    @property
    def weight_only(self) -> bool:
        return self.activations == "float" and self.weights in ("int8", "int4")


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe("fp32", "fp32", "float", False, "the model as given"),
        Recipe("fp16", "fp16", "float", False, "fp16 weights, float compute"),
        Recipe("int8", "int8", "8bit", True, "static int8: int8 weights and 8-bit activations"),
        Recipe("int16x8", "int8", "int16", True, "int16 activations, int8 weights, int64 bias (16x8)"),
        Recipe("w8", "int8", "float", False, "weight-only int8, float activations"),
        Recipe("w4", "int4", "float", False, "weight-only int4, blockwise scales"),
    )
}


@dataclass(frozen=True)
class FileRuntimes:
    """Where the ONNX file ``edgekit quantize`` writes for a recipe runs right as given: ``runs_on``; ``note``: one
    line on what a runtime computes otherwise and what to use instead ("" when both compute the file's values)."""

    runs_on: tuple[str, ...]
    note: str = ""


WEIGHT_ONLY_NOTE = (
    "onnxruntime (default session) and OpenVINO (CPU) run this file's MatMul/Gemm on int8 inputs quantized on the "
    "fly (1e-3 to 4e-3 of the output range off its float activations); for its exact values use "
    "ORT_DISABLE_ALL / DYNAMIC_QUANTIZATION_GROUP_SIZE=0"
)

#: The written file on onnxruntime (default session) and on OpenVINO (CPU plugin, f32 hint, the file as given),
#: each against the recipe's exact numerics, measured on the zoo (docs/benchmarks.md, "The other recipes' files
#: on onnxruntime and OpenVINO"). Keyed by recipe; ``int8/int8`` is int8 with ``--activations int8``.
FILE_RUNTIMES: dict[str, FileRuntimes] = {
    "fp16": FileRuntimes(("onnxruntime", "OpenVINO")),
    "int8": FileRuntimes(("onnxruntime", "OpenVINO")),
    "int8/int8": FileRuntimes(
        ("onnxruntime",),
        "this file runs right on onnxruntime; OpenVINO computes signed 8-bit activations off its values (zoo "
        "U-Net: cosine 0.62 to the exact model, a Concat of int8 inputs; 0.9995 with uint8): for OpenVINO "
        "quantize with the default --activations uint8, or deploy --target intel-vpu --precision int8",
    ),
    "int16x8": FileRuntimes(
        ("onnxruntime",),
        "this file runs right on onnxruntime; OpenVINO strips 16-bit QuantizeLinear/DequantizeLinear "
        "(FQStrippingTransformation): those activations compute in float, not on the int16 grid: for "
        "OpenVINO deploy --target intel-vpu --precision int8 or fp16",
    ),
    "w8": FileRuntimes(("onnxruntime", "OpenVINO"), WEIGHT_ONLY_NOTE),
    "w4": FileRuntimes(("onnxruntime", "OpenVINO"), WEIGHT_ONLY_NOTE),
}


def file_runtimes(precision: str, activations: str = "uint8", int16: bool = False) -> FileRuntimes:
    """:data:`FILE_RUNTIMES` of a written file: its recipe ``precision``, its 8-bit ``activations`` type, and
    whether some layers have int16 activations (``--layer-precision NAME=int16x8``: the int16x8 entry)."""
    if int16 or precision == "int16x8":
        return FILE_RUNTIMES["int16x8"]
    if precision == "int8" and activations == "int8":
        return FILE_RUNTIMES["int8/int8"]
    return FILE_RUNTIMES[precision]


#: Block sizes of the blockwise int4 recipe (``w4``); the default is the first.
W4_BLOCK_SIZES = (32, 64, 128)


def get_recipe(name: str, where: str = "--precision") -> Recipe:
    """The recipe called ``name``, or a QuantizationError naming the recipes there are (and ``where`` it was
    given)."""
    try:
        return RECIPES[name]
    except KeyError:
        raise QuantizationError(f"{where} must be one of {', '.join(RECIPES)}, got {name!r}") from None


def resolve_layer_names(
    model: ir.Model, layer_precision: Iterable[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    """``--layer-precision`` pairs naming the loaded model's nodes: a name of the file as given that the
    model's preparation fused away (MatMul + Add -> Gemm) names the node it became; a QuantizationError when a
    name is neither, listing the closest names (best first), else some of the model's."""
    import difflib

    from edgekit.core.fusions import SOURCE_NODES

    names = [n.name for n in model.graph.all_nodes() if n.name]
    known = {name: name for name in names}
    for node in model.graph.all_nodes():
        for source in node.meta.get(SOURCE_NODES, ()):
            known.setdefault(source, node.name)
    pairs = tuple(layer_precision)
    unknown = [node for node, _ in pairs if node not in known]
    if not unknown:
        return tuple((known[node], recipe) for node, recipe in pairs)
    close = list(dict.fromkeys(c for node in unknown for c in difflib.get_close_matches(node, names, 3, 0.5)))
    hint = (
        f"closest: {', '.join(close)}"
        if close
        else f"the model's {len(names)} nodes include: {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}"
    )
    raise QuantizationError(f"--layer-precision names no node of the model: {', '.join(unknown)}; {hint}")
