"""Converters for activations and math ops TFLite has no builtin for, written exactly with its builtins:
Softplus, Mish, Softsign, Selu, Celu, ThresholdedRelu; Sign, Round, Mod, IsNaN, IsInf, Mean, Xor;
ReduceLogSumExp, ReduceLogSum, ReduceL1, LpNormalization.

None of them has an int8 rule (``quantize/rules.py``): in a quantized model they stay float between DEQUANTIZE
and QUANTIZE (the converter's float islands).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.ops_logic import same_dtype_operands
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _c(ctx: Context, value: float, dtype: np.dtype | type = np.float32) -> Tensor:
    return ctx.graph.const("c", np.array(value, dtype=dtype))


def _unary(ctx: Context, code: str, x: Tensor, hint: str, options: object = None) -> Tensor:
    out = ctx.tmp(hint, x.shape, x.dtype)
    ctx.op(code, [x], [out], options)
    return out


# -- activations -----------------------------------------------------------------------------------
def _softplus(ctx: Context, x: Tensor, out: Tensor | None = None) -> Tensor:
    """log(1 + exp(x)) as relu(x) + log(1 + exp(-|x|)): no overflow for large x (exp(-|x|) <= 1)."""
    neg_abs = _unary(ctx, "NEG", _unary(ctx, "ABS", x, "abs", fb.AbsOptionsT()), "neg_abs", fb.NegOptionsT())
    exp = _unary(ctx, "EXP", neg_abs, "exp", fb.ExpOptionsT())
    log = _unary(ctx, "LOG", binary(ctx, "ADD", exp, _c(ctx, 1.0), ctx.tmp("one_plus", x.shape)), "log")
    relu = _unary(ctx, "RELU", x, "relu")
    return binary(ctx, "ADD", relu, log, out if out is not None else ctx.tmp("softplus", x.shape))


@converter("Softplus", since=1)
def softplus(ctx: Context, node: ir.Node) -> None:
    _softplus(ctx, ctx.tensor(node.inputs[0]), ctx.output(node.outputs[0]))


@converter("Mish", since=18)
def mish(ctx: Context, node: ir.Node) -> None:
    """x * tanh(softplus(x)) (the op; YOLOv4 exports write the same three ops, each converted as is)."""
    x = ctx.tensor(node.inputs[0])
    tanh = _unary(ctx, "TANH", _softplus(ctx, x), "tanh")
    binary(ctx, "MUL", x, tanh, ctx.output(node.outputs[0]))


@converter("Softsign", since=1)
def softsign(ctx: Context, node: ir.Node) -> None:
    x = ctx.tensor(node.inputs[0])
    ax = _unary(ctx, "ABS", x, "abs", fb.AbsOptionsT())
    denominator = binary(ctx, "ADD", ax, _c(ctx, 1.0), ctx.tmp("one_plus_abs", x.shape))
    binary(ctx, "DIV", x, denominator, ctx.output(node.outputs[0]))


def _exp_linear(ctx: Context, x: Tensor, alpha: float, inner: float, out: Tensor) -> Tensor:
    """relu(x) + alpha * (exp(min(x, 0) * inner) - 1): ELU (inner 1) and CELU (inner 1 / alpha)."""
    neg = binary(ctx, "MINIMUM", x, _c(ctx, 0.0), ctx.tmp("neg", x.shape))
    if inner != 1.0:
        neg = binary(ctx, "MUL", neg, _c(ctx, inner), ctx.tmp("neg_scaled", x.shape))
    em1 = binary(
        ctx, "SUB", _unary(ctx, "EXP", neg, "exp", fb.ExpOptionsT()), _c(ctx, 1.0), ctx.tmp("em1", x.shape)
    )
    scaled = binary(ctx, "MUL", em1, _c(ctx, alpha), ctx.tmp("scaled", x.shape))
    return binary(ctx, "ADD", _unary(ctx, "RELU", x, "pos"), scaled, out)


@converter("Selu", since=1)
def selu(
    ctx: Context,
    node: ir.Node,
    *,
    alpha: float = 1.67326319217681884765625,
    gamma: float = 1.05070102214813232421875,
) -> None:
    x = ctx.tensor(node.inputs[0])
    elu = _exp_linear(ctx, x, alpha, 1.0, ctx.tmp("elu", x.shape))
    binary(ctx, "MUL", elu, _c(ctx, gamma), ctx.output(node.outputs[0]))


@converter("Celu", since=12)
def celu(ctx: Context, node: ir.Node, *, alpha: float = 1.0) -> None:
    if alpha == 0.0:
        raise ctx.error("alpha 0 divides by zero (CELU is x / alpha inside the exponential)")
    _exp_linear(ctx, ctx.tensor(node.inputs[0]), alpha, 1.0 / alpha, ctx.output(node.outputs[0]))


@converter("ThresholdedRelu", since=10)
def thresholded_relu(ctx: Context, node: ir.Node, *, alpha: float = 1.0) -> None:
    x = ctx.tensor(node.inputs[0])
    above = ctx.tmp("above", x.shape, np.bool_)
    ctx.op("GREATER", [x, _c(ctx, alpha, x.dtype)], [above])
    ctx.op("SELECT_V2", [above, x, _c(ctx, 0.0, x.dtype)], [ctx.output(node.outputs[0])])


# -- math ------------------------------------------------------------------------------------------
@converter("Sign", since=9)
def sign(ctx: Context, node: ir.Node) -> None:
    ctx.op("SIGN", [ctx.tensor(node.inputs[0])], [ctx.output(node.outputs[0])])


@converter("Round", since=11)
def round_(ctx: Context, node: ir.Node) -> None:
    """ROUND rounds half to even, as ONNX does (TFLite's RoundToNearest; XNNPACK's bankers rounding)."""
    ctx.op("ROUND", [ctx.tensor(node.inputs[0])], [ctx.output(node.outputs[0])])


@converter("Mod", since=10)
def mod(ctx: Context, node: ir.Node, *, fmod: int = 0) -> None:
    """fmod 0 (integers): FLOOR_MOD, the divisor's sign. fmod 1: the dividend's sign, exactly
    sign(a) * floor_mod(|a|, |b|) (with both operands non-negative FLOOR_MOD is C's fmod)."""
    a, b = same_dtype_operands(ctx, node.inputs[0], node.inputs[1])
    y = ctx.output(node.outputs[0])
    if not fmod:
        if np.issubdtype(a.dtype, np.floating):
            raise ctx.error("fmod=0 on floating-point data is not defined by ONNX (use fmod=1)")
        ctx.op("FLOOR_MOD", [a, b], [y])
        return
    abs_a, abs_b = (
        ctx.graph.const(t.name, np.abs(t.data))
        if t.is_const
        else _unary(ctx, "ABS", t, "abs", fb.AbsOptionsT())
        for t in (a, b)
    )
    rem = ctx.tmp("rem", y.shape, y.dtype)
    ctx.op("FLOOR_MOD", [abs_a, abs_b], [rem])
    sign_a = _unary(ctx, "SIGN", a, "sign")
    binary(ctx, "MUL", sign_a, rem, y)


@converter("IsNaN", since=9)
def is_nan(ctx: Context, node: ir.Node) -> None:
    x = ctx.tensor(node.inputs[0])
    ctx.op("NOT_EQUAL", [x, x], [ctx.output(node.outputs[0], dtype=np.bool_)])


@converter("IsInf", since=10)
def is_inf(ctx: Context, node: ir.Node, *, detect_negative: int = 1, detect_positive: int = 1) -> None:
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0], dtype=np.bool_)
    if detect_negative and detect_positive:
        ctx.op("EQUAL", [_unary(ctx, "ABS", x, "abs", fb.AbsOptionsT()), _c(ctx, np.inf, x.dtype)], [y])
    elif detect_positive:
        ctx.op("EQUAL", [x, _c(ctx, np.inf, x.dtype)], [y])
    elif detect_negative:
        ctx.op("EQUAL", [x, _c(ctx, -np.inf, x.dtype)], [y])
    else:  # nothing detected: all false (x == NaN never holds)
        ctx.op("EQUAL", [x, _c(ctx, np.nan, x.dtype)], [y])


@converter("Mean", since=1)
def mean(ctx: Context, node: ir.Node) -> None:
    inputs = [ctx.tensor(v) for v in node.inputs]
    y = ctx.output(node.outputs[0])
    if len(inputs) == 1:
        ctx.reshape(inputs[0], y.shape, out=y)
        return
    total = inputs[0]
    for t in inputs[1:]:
        total = binary(ctx, "ADD", total, t, ctx.tmp("sum", np.broadcast_shapes(total.shape, t.shape)))
    binary(ctx, "DIV", total, _c(ctx, float(len(inputs))), y)


@converter("Xor", since=7)
def xor(ctx: Context, node: ir.Node) -> None:
    a, b = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    ctx.op("NOT_EQUAL", [a, b], [ctx.output(node.outputs[0], dtype=np.bool_)])


# -- reductions without a TFLite builtin -----------------------------------------------------------
def _axes(ctx: Context, node: ir.Node, axes: Sequence[int] | None, rank: int) -> list[int] | None:
    if axes is None and len(node.inputs) > 1 and node.inputs[1] is not None and node.inputs[1].name:
        axes = [int(a) for a in ctx.require_const(node.inputs[1], "axes").reshape(-1)]
    if not axes:
        return None
    return sorted({a + rank if a < 0 else a for a in axes})


def _sum(ctx: Context, x: Tensor, axes: list[int], keepdims: bool, out: Tensor | None = None) -> Tensor:
    opts = fb.ReducerOptionsT()
    opts.keepDims = keepdims
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
    out = out if out is not None else ctx.tmp("sum", shape, x.dtype)
    ctx.op("SUM", [x, ctx.graph.const("axes", axes, np.int32)], [out], opts)
    return out


def _log_sum_exp(ctx: Context, x: Tensor, axes: list[int], y: Tensor) -> None:
    """max + log(sum(exp(x - max))): no overflow (the max is subtracted first)."""
    opts = fb.ReducerOptionsT()
    opts.keepDims = True
    kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    high = ctx.tmp("max", kept, x.dtype)
    ctx.op("REDUCE_MAX", [x, ctx.graph.const("axes", axes, np.int32)], [high], opts)
    shifted = binary(ctx, "SUB", x, high, ctx.tmp("shifted", x.shape))
    total = _sum(ctx, _unary(ctx, "EXP", shifted, "exp", fb.ExpOptionsT()), axes, True)
    result = binary(ctx, "ADD", _unary(ctx, "LOG", total, "log"), high, ctx.tmp("lse", kept))
    ctx.reshape(result, y.shape, out=y)


def _extra_reduce(
    ctx: Context, node: ir.Node, kind: str, axes: Sequence[int] | None, keepdims: int, noop: int = 0
) -> None:
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    axes = _axes(ctx, node, axes, x.rank)
    if axes is None:
        if noop:  # ONNX: the element-wise part still applies
            axes = []
        else:
            axes = list(range(x.rank))
    if kind == "ReduceLogSumExp":
        if not axes:
            ctx.reshape(x, y.shape, out=y)  # log(exp(x)) = x
            return
        _log_sum_exp(ctx, x, axes, y)
        return
    if kind == "ReduceL1":
        x = _unary(ctx, "ABS", x, "abs", fb.AbsOptionsT())
    total = _sum(ctx, x, axes, True) if axes else x
    if kind == "ReduceLogSum":
        total = _unary(ctx, "LOG", total, "log")
    ctx.reshape(total, y.shape, out=y)


def _register_extra_reduce(op_type: str) -> None:
    def with_attribute(
        ctx: Context, node: ir.Node, *, axes: Sequence[int] | None = None, keepdims: int = 1
    ) -> None:
        _extra_reduce(ctx, node, op_type, axes, keepdims)

    def with_input(ctx: Context, node: ir.Node, *, keepdims: int = 1, noop_with_empty_axes: int = 0) -> None:
        _extra_reduce(ctx, node, op_type, None, keepdims, noop_with_empty_axes)

    with_attribute.__name__ = with_input.__name__ = f"convert_{op_type.lower()}"
    converter(op_type, since=1)(with_attribute)
    converter(op_type, since=18)(with_input)


for _op_type in ("ReduceLogSumExp", "ReduceLogSum", "ReduceL1"):
    _register_extra_reduce(_op_type)


@converter("LpNormalization", since=1)
def lp_normalization(ctx: Context, node: ir.Node, *, axis: int = -1, p: int = 2) -> None:
    """x / ||x||_p along ``axis`` (p 1 or 2); a zero norm gives 0, as onnxruntime does."""
    if p not in (1, 2):
        raise ctx.error(f"p={p}: ONNX defines LpNormalization for p 1 and 2 only")
    x = ctx.tensor(node.inputs[0])
    axis = axis + x.rank if axis < 0 else axis
    if p == 1:
        norm = _sum(ctx, _unary(ctx, "ABS", x, "abs", fb.AbsOptionsT()), [axis], True)
    else:
        norm = _unary(
            ctx, "SQRT", _sum(ctx, binary(ctx, "MUL", x, x, ctx.tmp("sq", x.shape)), [axis], True), "norm"
        )
    zero = ctx.tmp("zero_norm", norm.shape, np.bool_)
    ctx.op("EQUAL", [norm, _c(ctx, 0.0, norm.dtype)], [zero])
    safe = ctx.tmp("safe_norm", norm.shape, norm.dtype)
    ctx.op("SELECT_V2", [zero, _c(ctx, 1.0, norm.dtype), norm], [safe])
    binary(ctx, "DIV", x, safe, ctx.output(node.outputs[0]))
