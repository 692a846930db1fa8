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

from collections.abc import Callable

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import TargetError
from edgekit.core.shape_checks import data_dependent_tail, static_shapes_refusal
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.schema import fb

#: ONNX ops whose converters take tensors with dims sized at run time.
DYNAMIC_OPS = frozenset(
    {"NonZero", "NonMaxSuppression", "Transpose", "GatherND", "Gather", "Add", "Sub", "Mul", "Div", "Shape",
     "Unsqueeze", "Squeeze", "Concat", "Reshape", "ConstantOfShape", "Equal", "Where", "Expand", "Slice", "Cast",
     "Pad", "ScatterND", "ReduceMin", "ReduceMax", "TopK", "Identity", "Greater", "Less", "GreaterOrEqual",
     "LessOrEqual", "Not", "And", "Or", "Max", "Min", "Clip", "Sigmoid", "Exp", "Log", "Sqrt", "Abs", "Neg",
     "Floor", "Ceil", "Round", "Relu", "ArgMax", "Flatten", "Split", "Mod", "Xor", "RoiAlign", "Gemm", "Softmax",
     "ScatterElements", "Range", "Conv", "ConvTranspose", "Resize"}
)  # fmt: skip

#: Ops on a batch of RoIs sized at run time that cannot prepare an empty batch: XNNPACK's CONV_2D, TRANSPOSE_CONV
#: and RESIZE_BILINEAR fail to reshape with 0 rows, the builtin TRANSPOSE_CONV too ("BytesRequired number of
#: elements overflowed"). A two-stage detector's image with no box gives them 0 rows.
ONE_ROW_MORE = frozenset({"Conv", "ConvTranspose", "Resize"})


def with_one_row_more(ctx: Context, node: ir.Node, convert: Callable[[], None]) -> None:
    """Convert ``node`` (one of :data:`ONE_ROW_MORE`) on its input with one zero row appended, its output without
    the last row: the op never sees an empty batch, its output has the batch's rows (0 for no box)."""
    x_value, y_value = node.inputs[0], node.outputs[0]
    x = ctx.tensor(x_value)
    if x.shape[0] >= 0 or any(d < 0 for d in x.shape[1:]) or len(node.outputs) != 1:
        convert()
        return
    padded = ctx.tmp("one_row_more", x.shape, x.dtype)
    opts = fb.ConcatenationOptionsT()
    opts.axis = 0
    ctx.op(
        "CONCATENATION",
        [x, ctx.graph.const("zero_row", np.zeros((1, *x.shape[1:]), x.dtype))],
        [padded],
        opts,
    )
    ctx.bind(x_value, padded)
    try:
        convert()
    finally:
        ctx.bind(x_value, x)
    out = ctx.tensor(y_value)
    out.name = ctx.graph.unique_name(out.name + "/one_row_more")
    rows = Tensor(y_value.name, out.shape, out.dtype, quant=out.quant)
    rank = out.rank
    cut = fb.StridedSliceOptionsT()
    cut.beginMask = cut.endMask = sum(1 << a for a in range(1, rank))
    bounds = [ctx.graph.const(n, v, np.int32) for n, v in (("begin", [0] * rank), ("end", [-1] + [0] * (rank - 1)),
                                                          ("strides", [1] * rank))]  # fmt: skip
    ctx.op("STRIDED_SLICE", [out, *bounds], [rows], cut)
    ctx.bind(y_value, rows)


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
