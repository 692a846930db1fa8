"""Converters for Softmax, reductions, LayerNormalization, InstanceNormalization, GroupNormalization, LRN, QuantizeLinear/DequantizeLinear and more."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import ml_dtypes
import numpy as np
import onnx_ir as ir
from edgekit.quantize import patterns
from edgekit.targets.tflite.context import NCHW_TO_NHWC, NHWC_TO_NCHW, Context, attr_text, permute
from edgekit.targets.tflite.graph import Quant, Tensor
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _optional(node: ir.Node, index: int) -> ir.Value | None:
    if len(node.inputs) > index and node.inputs[index] is not None and node.inputs[index].name:
        return node.inputs[index]
    return None


# -- Softmax ---------------------------------------------------------------------------------------
def _softmax_last_axis(ctx: Context, code: str, x: Tensor, out: Tensor) -> None:
    if code == "SOFTMAX":
        opts = fb.SoftmaxOptionsT()
        opts.beta = 1.0
        ctx.op("SOFTMAX", [x], [out], opts)
    else:
        ctx.op("LOG_SOFTMAX", [x], [out], fb.LogSoftmaxOptionsT())


def _softmax(ctx: Context, node: ir.Node, code: str, axis: int, flatten: bool) -> None:
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    rank = x.rank
    axis = axis + rank if axis < 0 else axis
    if flatten and axis != rank - 1:
        # Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])].
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        inner = int(np.prod(x.shape[axis:], dtype=np.int64))
        flat = ctx.reshape(x, (outer, inner))
        result = ctx.tmp("softmax2d", flat.shape)
        _softmax_last_axis(ctx, code, flat, result)
        ctx.reshape(result, y.shape, out=y)
        return
    if axis == rank - 1:
        _softmax_last_axis(ctx, code, x, y)
        return
    perm = [*range(axis), *range(axis + 1, rank), axis]
    moved = ctx.transpose(x, perm)
    result = ctx.tmp("softmax_t", moved.shape)
    _softmax_last_axis(ctx, code, moved, result)
    ctx.transpose(result, [perm.index(i) for i in range(rank)], out=y)


@converter("Softmax", since=1)
def softmax_v1(ctx: Context, node: ir.Node, *, axis: int = 1) -> None:
    _softmax(ctx, node, "SOFTMAX", axis, flatten=True)


@converter("Softmax", since=13)
def softmax_v13(ctx: Context, node: ir.Node, *, axis: int = -1) -> None:
    _softmax(ctx, node, "SOFTMAX", axis, flatten=False)


@converter("LogSoftmax", since=1)
def log_softmax_v1(ctx: Context, node: ir.Node, *, axis: int = 1) -> None:
    _softmax(ctx, node, "LOG_SOFTMAX", axis, flatten=True)


@converter("LogSoftmax", since=13)
def log_softmax_v13(ctx: Context, node: ir.Node, *, axis: int = -1) -> None:
    _softmax(ctx, node, "LOG_SOFTMAX", axis, flatten=False)


# -- reductions ------------------------------------------------------------------------------------
_REDUCE = {
    "ReduceMean": "MEAN",
    "ReduceMax": "REDUCE_MAX",
    "ReduceMin": "REDUCE_MIN",
    "ReduceSum": "SUM",
    "ReduceProd": "REDUCE_PROD",
}


#: Reductions TFLite has no builtin for, written as SUM over the squares [then SQRT] (float).
_SQUARED_REDUCE = {"ReduceSumSquare": None, "ReduceL2": "SQRT"}


def _reduce(
    ctx: Context,
    node: ir.Node,
    code: str,
    axes: Sequence[int] | None,
    keepdims: int,
    noop_with_empty_axes: int,
) -> None:
    if code == "MEAN" and _layer_norm_pattern(ctx, node):
        return
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    then = _SQUARED_REDUCE.get(code, "")
    if then != "":
        x = binary(ctx, "MUL", x, x, ctx.tmp("squared", x.shape))
        code = "SUM"
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes:
            if then:
                ctx.op(then, [x], [y])  # ONNX: a no-op reduction still squares (and takes the root)
            else:
                ctx.reshape(x, y.shape, out=y)
            return
        axes = range(x.rank)
    axes = sorted({a + x.rank if a < 0 else a for a in axes})
    opts = fb.ReducerOptionsT()
    opts.keepDims = bool(keepdims)
    total = ctx.tmp("sum_squares", y.shape) if then else y
    ctx.op(code, [x, ctx.graph.const("axes", axes, np.int32)], [total], opts)
    if then:
        ctx.op(then, [total], [y])


def _register_reduce(op_type: str, code: str, axes_input_since: int) -> None:
    def with_attribute(
        ctx: Context, node: ir.Node, *, axes: Sequence[int] | None = None, keepdims: int = 1
    ) -> None:
        _reduce(ctx, node, code, axes, keepdims, 0)

    def with_input(ctx: Context, node: ir.Node, *, keepdims: int = 1, noop_with_empty_axes: int = 0) -> None:
        axes_value = _optional(node, 1)
        axes = (
            None
            if axes_value is None
            else [int(a) for a in ctx.require_const(axes_value, "axes").reshape(-1)]
        )
        _reduce(ctx, node, code, axes, keepdims, noop_with_empty_axes)

    converter(op_type, since=1)(with_attribute)
    converter(op_type, since=axes_input_since)(with_input)


for _op_type, _code in _REDUCE.items():
    _register_reduce(_op_type, _code, 13 if _op_type == "ReduceSum" else 18)
for _op_type in _SQUARED_REDUCE:
    _register_reduce(_op_type, _op_type, 18)


# -- LayerNormalization ----------------------------------------------------------------------------
def _emit_layer_norm(
    ctx: Context,
    x: Tensor,
    axis: int,
    epsilon: float,
    scale: Tensor | None,
    bias: Tensor | None,
    y: Tensor,
    mean: Tensor | None = None,
    rstd: Tensor | None = None,
) -> None:
    """(x - mean) * rsqrt(mean((x - mean)^2) + eps) [* scale] [+ bias] over the axes from ``axis`` on, in float
    (TFLite has no LayerNorm builtin): MEAN, SQUARED_DIFFERENCE, MEAN, ADD, RSQRT, SUB, MUL [, MUL] [, ADD]."""
    rank = x.rank
    axes = ctx.graph.const("axes", list(range(axis, rank)), np.int32)
    reduced = tuple(d if i < axis else 1 for i, d in enumerate(x.shape))

    def keep() -> fb.ReducerOptionsT:
        opts = fb.ReducerOptionsT()
        opts.keepDims = True
        return opts

    mean = mean if mean is not None else ctx.tmp("mean", reduced)
    ctx.op("MEAN", [x, axes], [mean], keep())
    squared = ctx.tmp("squared", x.shape)
    ctx.op("SQUARED_DIFFERENCE", [x, mean], [squared])
    var = ctx.tmp("var", reduced)
    ctx.op("MEAN", [squared, axes], [var], keep())
    var_eps = binary(
        ctx, "ADD", var, ctx.graph.const("eps", np.float32(epsilon)), ctx.tmp("var_eps", reduced)
    )
    rstd = rstd if rstd is not None else ctx.tmp("rstd", reduced)
    ctx.op("RSQRT", [var_eps], [rstd])
    centered = binary(ctx, "SUB", x, mean, ctx.tmp("centered", x.shape))
    normed = binary(
        ctx, "MUL", centered, rstd, y if scale is None and bias is None else ctx.tmp("normed", x.shape)
    )
    if scale is not None:
        normed = binary(ctx, "MUL", normed, scale, y if bias is None else ctx.tmp("scaled", x.shape))
    if bias is not None:
        binary(ctx, "ADD", normed, bias, y)


@converter("LayerNormalization", since=17)
def layer_normalization(
    ctx: Context, node: ir.Node, *, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1
) -> None:
    x = ctx.tensor(node.inputs[0])
    axis = axis + x.rank if axis < 0 else axis
    reduced = tuple(d if i < axis else 1 for i, d in enumerate(x.shape))
    extra = [v if v is not None and v.name else None for v in [*node.outputs[1:], None, None][:2]]
    mean = ctx.output(extra[0], shape=reduced) if extra[0] is not None else None
    rstd = ctx.output(extra[1], shape=reduced) if extra[1] is not None else None
    bias_value = _optional(node, 2)
    bias = ctx.tensor(bias_value) if bias_value is not None else None
    y = ctx.output(node.outputs[0])
    _emit_layer_norm(ctx, x, axis, epsilon, ctx.tensor(node.inputs[1]), bias, y, mean, rstd)


@converter("InstanceNormalization", since=6)
def instance_normalization(ctx: Context, node: ir.Node, *, epsilon: float = 1e-5) -> None:
    """y = scale[c] * (x - mean) / sqrt(var + eps) + bias[c], the statistics over the spatial axes (2 on) of each
    sample and channel: the LayerNorm sequence from axis 2, with the [C] scale and bias broadcast as [C, 1, ...].
    PyTorch writes GroupNorm as Reshape [N, G, -1] -> InstanceNormalization(ones, zeros) -> Reshape -> Mul -> Add
    (SCRFD's heads): an identity scale and a zero bias emit no op."""
    x = ctx.tensor(node.inputs[0])
    if x.rank < 3:
        raise ctx.error(f"InstanceNormalization needs an input of rank 3 or more, got rank {x.rank}")
    trail = (1,) * (x.rank - 2)
    affine: list[Tensor | None] = []
    for value, neutral in ((node.inputs[1], 1.0), (node.inputs[2], 0.0)):
        const = ctx.const(value)
        if const is None:
            t = ctx.tensor(value)
            affine.append(ctx.reshape(t, (t.shape[0], *trail)))
        elif np.all(const == neutral):
            affine.append(None)
        else:
            data = np.asarray(const, np.float32).reshape(-1, *trail)
            affine.append(ctx.graph.const(value.name or "affine", data, np.float32))
    _emit_layer_norm(ctx, x, 2, epsilon, affine[0], affine[1], ctx.output(node.outputs[0]))


@converter("LRN", since=1)
def lrn(
    ctx: Context, node: ir.Node, *, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0
) -> None:
    """Local response normalization across channels (Caffe's AlexNet / GoogLeNet): y = x / (bias + alpha / size *
    sum of x^2 over the channels [c - (size - 1) // 2, c + ceil((size - 1) / 2)]) ** beta. TFLite's
    LOCAL_RESPONSE_NORMALIZATION is the same over the last axis with a symmetric window: radius (size - 1) / 2 and
    alpha / size, on the NHWC layout (float only: TFLite has no integer LRN kernel, so int8 models keep it float).
    An even size has an asymmetric window, which the kernel cannot express (Caffe requires an odd local_size)."""
    if size < 1 or size % 2 == 0:
        raise ctx.error(f"LRN size {size}: only an odd size (a window centred on the channel) is supported")
    x = ctx.tensor(node.inputs[0])
    if x.rank != 4:
        raise ctx.error(f"LRN: only a 4-D input (N, C, H, W) is supported, got rank {x.rank}")
    opts = fb.LocalResponseNormalizationOptionsT()
    opts.radius, opts.bias, opts.alpha, opts.beta = (
        (size - 1) // 2,
        float(bias),
        float(alpha) / size,
        float(beta),
    )
    y_nhwc = ctx.tmp("lrn_nhwc", permute(x.shape, NCHW_TO_NHWC))
    ctx.op("LOCAL_RESPONSE_NORMALIZATION", [ctx.transpose(x, NCHW_TO_NHWC)], [y_nhwc], opts)
    ctx.transpose(y_nhwc, NHWC_TO_NCHW, out=ctx.output(node.outputs[0]))


def _group_norm(ctx: Context, node: ir.Node, num_groups: int, epsilon: float, per_group: bool) -> None:
    """Reshape [N, G, -1], the LayerNorm sequence over the last axis, Reshape back, then the affine per channel
    (opset 18's scale and bias are per group: each value repeated over its group's channels)."""
    x = ctx.tensor(node.inputs[0])
    n, c = x.shape[0], x.shape[1]
    if x.rank < 3 or c % num_groups:
        raise ctx.error(f"GroupNormalization: {c} channels do not split into {num_groups} groups")
    grouped = ctx.reshape(x, (n, num_groups, -1 if 0 in x.shape else math.prod(x.shape[1:]) // num_groups))
    normed = ctx.tmp("normed", grouped.shape)
    _emit_layer_norm(ctx, grouped, 2, epsilon, None, None, normed)
    y = ctx.output(node.outputs[0])
    trail = (1,) * (x.rank - 2)
    affine = []
    for value in node.inputs[1:3]:
        const = ctx.const(value)
        if const is not None:
            data = np.asarray(const, np.float32).reshape(-1)
            data = np.repeat(data, c // num_groups) if per_group else data
            affine.append(ctx.graph.const(value.name or "affine", data.reshape(c, *trail), np.float32))
        elif per_group:
            raise ctx.error("GroupNormalization (opset 18): the per-group scale and bias must be constants")
        else:
            affine.append(ctx.reshape(ctx.tensor(value), (c, *trail)))
    scaled = binary(ctx, "MUL", ctx.reshape(normed, x.shape), affine[0], ctx.tmp("scaled", x.shape))
    binary(ctx, "ADD", scaled, affine[1], y)


@converter("GroupNormalization", since=18)
def group_normalization_18(
    ctx: Context, node: ir.Node, *, num_groups: int, epsilon: float = 1e-5, stash_type: int = 1
) -> None:
    _group_norm(ctx, node, num_groups, epsilon, per_group=True)


@converter("GroupNormalization", since=21)
def group_normalization(
    ctx: Context, node: ir.Node, *, num_groups: int, epsilon: float = 1e-5, stash_type: int = 1
) -> None:
    _group_norm(ctx, node, num_groups, epsilon, per_group=False)


def _reduce_axes(ctx: Context, node: ir.Node) -> list[int] | None:
    """A ReduceMean's axes (attribute or input), or None when it reduces everything."""
    attr = node.attributes.get("axes")
    if attr is not None:
        return [int(a) for a in attr.value]
    value = _optional(node, 1)
    return None if value is None else [int(a) for a in ctx.require_const(value, "axes").reshape(-1)]


def _written_out_layer_norm(ctx: Context, node: ir.Node) -> list[ir.Node] | None:
    """The LayerNorm written out (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div [Mul, Add]) that ``node`` starts,
    when its intermediate values are read only inside it and both means reduce the same trailing axes."""
    sub = next((u.node for u in node.outputs[0].uses() if u.node.op_type == "Sub"), None)
    div = next((u.node for u in sub.outputs[0].uses() if u.node.op_type == "Div"), None) if sub else None
    nodes = patterns.layer_norm_at(div) if div is not None else None
    if nodes is None or nodes[0] is not node:
        return None
    inside = {id(n) for n in nodes}
    for n in nodes[:-1]:
        for v in n.outputs:
            if v.is_graph_output() or any(id(u.node) not in inside for u in v.uses()):
                return None
    rank = ctx.rank(node.inputs[0])
    means = [n for n in nodes if n.op_type == "ReduceMean"]
    axes = [sorted(a % rank for a in (_reduce_axes(ctx, m) or range(rank))) for m in means]
    if axes[0] != axes[1] or axes[0] != list(range(rank - len(axes[0]), rank)):
        return None
    if any(m.attributes.get_int("keepdims", 1) != 1 for m in means):
        return None
    add = nodes[4]
    if not any(ctx.const(v) is not None and ctx.const(v).size == 1 for v in add.inputs):
        return None  # epsilon: one number
    return nodes


def _layer_norm_pattern(ctx: Context, node: ir.Node) -> bool:
    """Convert the written-out LayerNorm ``node`` starts as one LayerNorm (RSQRT instead of SQRT + DIV)."""
    nodes = _written_out_layer_norm(ctx, node)
    if nodes is None:
        return False
    eps = next(ctx.const(v) for v in nodes[4].inputs if ctx.const(v) is not None)
    affine = nodes[7:]
    scale = bias = None
    for n in affine:
        const = next(v for v in n.inputs if ctx.const(v) is not None)
        if n.op_type == "Mul":
            scale = ctx.tensor(const)
        else:
            bias = ctx.tensor(const)
    ctx.claimed.update(id(n) for n in nodes[1:])
    x = ctx.tensor(node.inputs[0])
    axis = x.rank - len(_reduce_axes(ctx, node) or range(x.rank))
    _emit_layer_norm(ctx, x, axis, float(eps.reshape(-1)[0]), scale, bias, ctx.output(nodes[-1].outputs[0]))
    return True


# -- QuantizeLinear / DequantizeLinear ---------------------------------------------------------------
def _qparams(ctx: Context, node: ir.Node, axis: int, rank: int, default: np.dtype) -> tuple[Quant, np.dtype]:
    """Scale/zero point of a Q/DQ node, as int8 params (uint8 zero points shift by -128)."""
    scale = ctx.require_const(node.inputs[1], "quantization scale").astype(np.float32)
    if not np.all(np.isfinite(scale)):  # NNCF on an attention mask of float32 min: XNNPACK crashes on it
        raise ctx.error(
            f"quantization scale {float(scale.reshape(-1)[~np.isfinite(scale.reshape(-1))][0])} is not a finite "
            "number (the quantizer overflowed on this tensor's range); quantize the model without this tensor"
        )
    zp_value = _optional(node, 2)
    zp = ctx.require_const(zp_value, "zero point") if zp_value is not None else np.zeros(scale.shape, default)
    dtype = zp.dtype
    zp = zp.astype(np.int64)
    if dtype == np.uint8:
        zp = zp - 128
    elif dtype not in (np.int8, np.int16, np.int32):
        raise ctx.error(f"quantization to {dtype} is not supported (int8, uint8, int16, int32 are)")
    axis = axis + rank if axis < 0 else axis
    return Quant(
        scale.reshape(-1),
        np.broadcast_to(zp.reshape(-1), scale.reshape(-1).shape),
        axis if scale.size > 1 else 0,
    ), dtype


def _int8(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.int8) if dtype == np.uint8 else np.dtype(dtype)


@converter("QuantizeLinear", since=10)
def quantize_linear(
    ctx: Context,
    node: ir.Node,
    *,
    axis: int = 1,
    saturate: int = 1,
    block_size: int = 0,
    output_dtype: int = 0,
    precision: int = 0,
) -> None:
    if block_size:
        raise ctx.error("blocked quantization is not supported")
    x_value = node.inputs[0]
    quant, dtype = _qparams(ctx, node, axis, ctx.rank(x_value), np.dtype(np.uint8))
    if not quant.per_tensor:
        _fake_quantize_per_axis(ctx, node, quant.axis)
        return
    out = ctx.output(node.outputs[0], shape=ctx.shape(x_value), dtype=_int8(dtype))
    out.quant = quant
    ctx.op("QUANTIZE", [ctx.tensor(x_value)], [out])


def _fake_quantize_per_axis(ctx: Context, node: ir.Node, axis: int) -> None:
    """A per-axis QuantizeLinear of an activation (NNCF puts one on each depthwise convolution's input) read only by
    DequantizeLinear nodes with its scale and zero point: TFLite has no per-axis activation tensor, so the pair is
    computed in float as ONNX defines it, ``(clip(round(x / s) + z, lo, hi) - z) * s`` per channel (ROUND is half
    to even, as QuantizeLinear); the ops around it stay float."""
    x_value = node.inputs[0]
    readers = [user for user, _ in node.outputs[0].uses()]
    params = [ctx.const(v) if v is not None else None for v in (node.inputs[1], _optional(node, 2))]
    for dq in readers:
        other = [ctx.const(v) if v is not None else None for v in (dq.inputs[1], _optional(dq, 2))]
        same = all(
            (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))
            for a, b in zip(params, other, strict=True)
        )
        if dq.op_type != "DequantizeLinear" or not same or node.outputs[0].is_graph_output():
            raise ctx.error("per-axis quantization of activations is supported only as a QuantizeLinear -> "
                            "DequantizeLinear pair with the same parameters")  # fmt: skip
    scale, zp = params
    zp = np.zeros(scale.shape, np.uint8) if zp is None else zp
    lo, hi = np.iinfo(zp.dtype).min, np.iinfo(zp.dtype).max
    rank = ctx.rank(x_value)
    shape = [1] * rank
    shape[axis] = -1
    s = ctx.graph.const("scale", scale.astype(np.float32).reshape(shape))
    z = ctx.graph.const("zero_point", zp.astype(np.float32).reshape(shape))
    x = ctx.tensor(x_value)
    steps = [("DIV", s), ("ROUND", None), ("ADD", z), ("MAXIMUM", ctx.graph.const("lo", np.float32(lo))),
             ("MINIMUM", ctx.graph.const("hi", np.float32(hi))), ("SUB", z), ("MUL", s)]  # fmt: skip
    for code, operand in steps:
        y = ctx.tmp(code.lower(), x.shape)
        if operand is None:
            ctx.op(code, [x], [y])
        else:
            binary(ctx, code, x, operand, y)
        x = y
    for dq in readers:
        ctx.bind(dq.outputs[0], x)
        ctx.claimed.add(id(dq))


@converter("DequantizeLinear", since=10)
def dequantize_linear(
    ctx: Context, node: ir.Node, *, axis: int = 1, block_size: int = 0, output_dtype: int = 0
) -> None:
    x_value, y_value = node.inputs[0], node.outputs[0]
    if block_size:
        _blocked_weights(ctx, node, axis, block_size)
        return
    rank = ctx.rank(x_value)
    q = ctx.const(x_value)
    if q is not None:
        x_dtype = q.dtype
    elif x_value.dtype is not None:
        x_dtype = x_value.dtype.numpy()
    else:
        x_dtype = np.dtype(np.int8)
    quant, dtype = _qparams(ctx, node, axis, rank, np.dtype(x_dtype))
    if q is not None:  # integer weights: a float constant that remembers its integer form
        shape = [1] * rank
        if not quant.per_tensor:
            shape[quant.axis] = -1
        qdata = q.astype(np.int64) - (128 if q.dtype == np.uint8 else 0)
        real = (qdata - quant.zero_point.reshape(shape)) * quant.scale.reshape(shape).astype(np.float64)
        ctx.set_const(y_value, real.astype(np.float32), quantized=(qdata.astype(_int8(dtype)), quant))
        return
    x = ctx.tensor(x_value)
    if x.dtype == np.uint8 and quant.zero_point is not None:
        # a uint8 tensor the graph reads as it is (a GATHER of a uint8 table): its own zero point, not int8's
        quant = replace(quant, zero_point=quant.zero_point + 128)
    if x.quant is None:
        x.quant = quant
    elif not x.quant.same_as(quant):
        raise ctx.error(
            f"DequantizeLinear params ({quant.describe()}) differ from its input's ({x.quant.describe()})"
        )
    ctx.op("DEQUANTIZE", [x], [ctx.output(y_value, shape=x.shape, dtype=np.float32)])


def _blocked_weights(ctx: Context, node: ir.Node, axis: int, block_size: int) -> None:
    """A blockwise DequantizeLinear of constant int4 weights (the ``w4`` recipe): a float constant that remembers
    its int4 form and one scale per block (:class:`Quant` ``block_size``)."""
    q = ctx.const(node.inputs[0])
    zp_value = _optional(node, 2)
    if q is None or q.dtype != np.dtype(ml_dtypes.int4) or q.ndim != 2:
        raise ctx.error("blocked quantization is supported for constant 2-D int4 weights only")
    if zp_value is not None and np.any(ctx.require_const(zp_value, "zero point").astype(np.int64)):
        raise ctx.error("blocked int4 weights must be symmetric (zero point 0)")
    scale = ctx.require_const(node.inputs[1], "quantization scale").astype(np.float32)
    axis = axis + q.ndim if axis < 0 else axis
    if q.shape[axis] % block_size:
        raise ctx.error(f"blocked weights: dim {q.shape[axis]} is not a multiple of the block {block_size}")
    real = q.astype(np.float32) * np.repeat(scale, block_size, axis=axis)
    quant = Quant(scale, np.zeros(1, np.int64), axis, block_size)
    ctx.set_const(node.outputs[0], real.astype(np.float32), quantized=(q, quant))


# -- BatchNormalization (inference), DepthToSpace / SpaceToDepth, ArgMax / ArgMin ------------------------
@converter("BatchNormalization", since=1)
def batch_normalization(
    ctx: Context,
    node: ir.Node,
    *,
    epsilon: float = 1e-5,
    momentum: float = 0.9,
    spatial: int = 1,
    is_test: int = 1,
    consumed_inputs: Sequence[int] | None = None,
    training_mode: int = 0,
) -> None:
    """y = x * a + b per channel (axis 1), a = scale / sqrt(var + eps), b = bias - mean * a.

    (``load_model`` folds BatchNormalization that follows a Conv/Gemm into its weights; this handles
    the others.)"""
    if training_mode or any(v.name and v.uses() for v in node.outputs[1:]):
        raise ctx.error("training-mode BatchNormalization is not supported")
    x = ctx.tensor(node.inputs[0])
    params = (
        ctx.require_const(v, "BatchNormalization parameters").astype(np.float64) for v in node.inputs[1:5]
    )
    scale, bias, mean, var = params
    a = (scale / np.sqrt(var + epsilon)).astype(np.float32)
    b = (bias - mean * a).astype(np.float32)
    y = ctx.output(node.outputs[0])
    if x.rank == 4:  # a 1x1 depthwise convolution: one kernel, with an int8 version, per-channel a and b
        opts = fb.DepthwiseConv2DOptionsT()
        opts.padding, opts.strideH, opts.strideW, opts.depthMultiplier = fb.Padding.VALID, 1, 1, 1
        weights = ctx.graph.const("bn_scale", a.reshape(1, 1, 1, -1))
        x_nhwc = ctx.transpose(x, NCHW_TO_NHWC)
        y_nhwc = ctx.tmp("bn_nhwc", permute(y.shape, NCHW_TO_NHWC))
        ctx.op("DEPTHWISE_CONV_2D", [x_nhwc, weights, ctx.graph.const("bn_shift", b)], [y_nhwc], opts)
        ctx.transpose(y_nhwc, NHWC_TO_NCHW, out=y)
        return
    shape = (x.shape[1],) + (1,) * (x.rank - 2)
    scaled = binary(
        ctx, "MUL", x, ctx.graph.const("bn_scale", a.reshape(shape)), ctx.tmp("bn_scaled", x.shape)
    )
    binary(ctx, "ADD", scaled, ctx.graph.const("bn_shift", b.reshape(shape)), y)


def _space_depth(ctx: Context, node: ir.Node, code: str, blocksize: int) -> None:
    x_value, y_value = node.inputs[0], node.outputs[0]
    if ctx.rank(x_value) != 4:
        raise ctx.error("only 4-D inputs are supported")
    opts = fb.DepthToSpaceOptionsT() if code == "DEPTH_TO_SPACE" else fb.SpaceToDepthOptionsT()
    opts.blockSize = int(blocksize)
    x = ctx.transpose(ctx.tensor(x_value), NCHW_TO_NHWC)
    y_nhwc = ctx.tmp(code.lower(), permute(ctx.shape(y_value), NCHW_TO_NHWC))
    ctx.op(code, [x], [y_nhwc], opts)
    ctx.transpose(y_nhwc, NHWC_TO_NCHW, out=ctx.output(y_value))


@converter("DepthToSpace", since=1)
def depth_to_space(ctx: Context, node: ir.Node, *, blocksize: int, mode: str = "DCR") -> None:
    if attr_text(mode) == "CRD":  # depth ordered (C, block_y, block_x): ONNX's own reshape/transpose/reshape
        x = ctx.tensor(node.inputs[0])
        if x.rank != 4:
            raise ctx.error("only 4-D inputs are supported")
        n, c, h, w = x.shape
        b = int(blocksize)
        split = ctx.reshape(x, (n, c // (b * b), b, b, h, w))
        moved = ctx.transpose(split, (0, 1, 4, 2, 5, 3))
        ctx.reshape(moved, (n, c // (b * b), h * b, w * b), out=ctx.output(node.outputs[0]))
        return
    if attr_text(mode) != "DCR":  # TFLite's DEPTH_TO_SPACE on NHWC orders depth as (block_y, block_x, C): DCR
        raise ctx.error(f"DepthToSpace mode {attr_text(mode)!r} is not supported (DCR, CRD are)")
    _space_depth(ctx, node, "DEPTH_TO_SPACE", blocksize)


@converter("SpaceToDepth", since=1)
def space_to_depth(ctx: Context, node: ir.Node, *, blocksize: int) -> None:
    _space_depth(ctx, node, "SPACE_TO_DEPTH", blocksize)


def _arg(ctx: Context, node: ir.Node, code: str, axis: int, keepdims: int, select_last_index: int) -> None:
    x = ctx.tensor(node.inputs[0])
    axis = axis + x.rank if axis < 0 else axis
    # int32 like every int64 ONNX value here (ids, Shape arithmetic): an index added to a shape product
    # (CLIP's EOS pooling) must not meet an int32 operand as INT64 (add.cc: input1->type != input2->type)
    y = ctx.output(node.outputs[0], dtype=np.int32)
    opts = fb.ArgMaxOptionsT() if code == "ARG_MAX" else fb.ArgMinOptionsT()
    opts.outputType = fb.TensorType.INT32
    reduced = tuple(d for i, d in enumerate(x.shape) if i != axis)
    target = y if not keepdims and not select_last_index else ctx.tmp(code.lower(), reduced, np.int32)
    axis_const = ctx.graph.const("axis", np.array([axis], np.int32))
    if select_last_index:
        # The first extremum of the reversed axis is the last one: index n - 1 - i in the input.
        reversed_x = ctx.tmp("reversed", x.shape, x.dtype)
        ctx.op("REVERSE_V2", [x, axis_const], [reversed_x])
        first = ctx.tmp(code.lower() + "_reversed", reduced, np.int32)
        ctx.op(code, [reversed_x, axis_const], [first], opts)
        last = ctx.graph.const("last", np.array(x.shape[axis] - 1, np.int32))
        binary(ctx, "SUB", last, first, target if keepdims else y)
    else:
        ctx.op(code, [x, axis_const], [target], opts)
    if keepdims:
        ctx.reshape(target, y.shape, out=y)


@converter("ArgMax", since=1)
def arg_max(
    ctx: Context, node: ir.Node, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0
) -> None:
    _arg(ctx, node, "ARG_MAX", axis, keepdims, select_last_index)


@converter("ArgMin", since=1)
def arg_min(
    ctx: Context, node: ir.Node, *, axis: int = 0, keepdims: int = 1, select_last_index: int = 0
) -> None:
    _arg(ctx, node, "ARG_MIN", axis, keepdims, select_last_index)
