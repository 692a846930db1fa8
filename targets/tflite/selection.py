"""A detector's selection of boxes on the CPU: the data-dependent tail (NonZero over a score threshold,
NonMaxSuppression and what reads their results) written with tensors LiteRT sizes at run time.

TFLite tensors may be dynamic: an op whose output size depends on values (WHERE, NON_MAX_SUPPRESSION_V4 and a
SLICE to its count) resizes its output while the model runs, and LiteRT prepares the ops after it again. The
static-shape passes and kernels never see those tensors: they come after every static op of the body. Their
unknown dims are -1 in the converter's graph and in the file's ``shape_signature``.

Only the ops in :data:`DYNAMIC_OPS` may run on such tensors (each converter checked on them); a tail with any
other op is refused as before, naming it.
"""

from __future__ import annotations

import onnx_ir as ir
from edgekit.core.errors import TargetError
from edgekit.core.shape_checks import data_dependent_tail, static_shapes_refusal

#: ONNX ops whose converters take tensors with dims sized at run time.
DYNAMIC_OPS = frozenset(
    {"NonZero", "NonMaxSuppression", "Transpose", "GatherND", "Gather", "Add", "Sub", "Mul", "Div", "Shape",
     "Unsqueeze", "Squeeze", "Concat", "Reshape", "ConstantOfShape", "Equal", "Where", "Expand", "Slice", "Cast",
     "Pad", "ScatterND", "ReduceMin", "ReduceMax", "TopK", "Identity", "Greater", "Less", "GreaterOrEqual",
     "LessOrEqual", "Not", "And", "Or", "Max", "Min", "Clip", "Sigmoid", "Exp", "Log", "Sqrt", "Abs", "Neg",
     "Floor", "Ceil", "Round", "Relu", "ArgMax", "Flatten", "Split", "Mod", "Xor", "RoiAlign", "Gemm", "Softmax",
     "ScatterElements", "Range", "Conv", "ConvTranspose", "Resize"}
)  # fmt: skip


def selection_refusal(model: ir.Model, target: str) -> str | None:
    """Why ``target`` cannot write ``model``'s data-dependent tail (an op there other than
    :data:`DYNAMIC_OPS`), in one line, or None."""
    tail = data_dependent_tail(model.graph)
    other = next(
        (
            n
            for n in model.graph
            if n in tail and (n.op_type not in DYNAMIC_OPS or n.domain not in ("", "ai.onnx"))
        ),
        None,
    )
    if other is None:
        return None
    op = other.op_type if other.domain in ("", "ai.onnx") else f"{other.domain}::{other.op_type}"
    return (
        f"{static_shapes_refusal(model, target)}; {op} node {other.name!r} after it does not run on tensors sized "
        f"at run time (those that do: {', '.join(sorted(DYNAMIC_OPS))})"
    )


def dynamic_values(model: ir.Model, target: str) -> frozenset[str]:
    """The names of the values in ``model``'s data-dependent tail, whose dims are sized at run time; a
    TargetError when :func:`selection_refusal` refuses it."""
    why = selection_refusal(model, target)
    if why is not None:
        raise TargetError(why)
    tail = data_dependent_tail(model.graph)
    return frozenset(v.name for n in tail for v in n.outputs if v.name)
