"""Converters for comparisons, logical ops, Where (attention masks: ``where(mask == 0, min, 0)``) and CumSum."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb

_COMPARE = {
    "Equal": "EQUAL",
    "Less": "LESS",
    "LessOrEqual": "LESS_EQUAL",
    "Greater": "GREATER",
    "GreaterOrEqual": "GREATER_EQUAL",
}
_LOGICAL = {"And": "LOGICAL_AND", "Or": "LOGICAL_OR"}


def _operands(ctx: Context, node: ir.Node) -> list[Tensor]:
    return same_dtype_operands(ctx, node.inputs[0], node.inputs[1])


def _register(op_type: str, code: str) -> None:
    def convert(ctx: Context, node: ir.Node) -> None:
        ctx.op(code, _operands(ctx, node), [ctx.output(node.outputs[0], dtype=np.bool_)])

    convert.__name__ = f"convert_{op_type.lower()}"
    converter(op_type, since=1)(convert)


for _op_type, _code in {**_COMPARE, **_LOGICAL}.items():
    _register(_op_type, _code)


@converter("Not", since=1)
def not_(ctx: Context, node: ir.Node) -> None:
    ctx.op("LOGICAL_NOT", [ctx.tensor(node.inputs[0])], [ctx.output(node.outputs[0], dtype=np.bool_)])


@converter("Where", since=9)
def where(ctx: Context, node: ir.Node) -> None:
    """SELECT_V2: the broadcasting select (SELECT needs equal shapes)."""
    cond = ctx.tensor(node.inputs[0])
    x, y = same_dtype_operands(ctx, node.inputs[1], node.inputs[2])
    ctx.op("SELECT_V2", [cond, x, y], [ctx.output(node.outputs[0])])


def same_dtype_operands(ctx: Context, a_value: ir.Value, b_value: ir.Value) -> list[Tensor]:
    """Both values as tensors of one dtype: a constant takes the other's (ONNX int64 constants are int32
    here like int64 activations)."""
    a, b = ctx.tensor(a_value), ctx.tensor(b_value)
    if a.dtype == b.dtype:
        return [a, b]
    const, other = (a, b) if a.is_const else (b, a)
    if not const.is_const:
        raise ctx.error(f"inputs of different types ({a.dtype}, {b.dtype})")
    cast = ctx.graph.const(const.name, const.data.astype(other.dtype))
    return [cast, other] if const is a else [other, cast]


@converter("CumSum", since=11)
def cumsum(ctx: Context, node: ir.Node, *, exclusive: int = 0, reverse: int = 0) -> None:
    """CUMSUM (RoBERTa-style position ids: ``cumsum(ids != pad) * (ids != pad) + pad``)."""
    x = ctx.tensor(node.inputs[0])
    axis = int(ctx.require_const(node.inputs[1], "CumSum axis").reshape(-1)[0])
    axis = axis + x.rank if axis < 0 else axis
    opts = fb.CumsumOptionsT()
    opts.exclusive, opts.reverse = bool(exclusive), bool(reverse)
    axis_tensor = ctx.graph.const("axis", np.array(axis, np.int32))
    ctx.op("CUMSUM", [x, axis_tensor], [ctx.output(node.outputs[0])], opts)
