"""Converters for shape and data-movement ops: Reshape, Transpose, Concat, Split, Slice, Pad, Gather..."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from edgekit.core.shape_checks import squeeze_axes_meant
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_index import _wrap_negative, runtime_shape
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _optional(node: ir.Node, index: int) -> ir.Value | None:
    if len(node.inputs) > index and node.inputs[index] is not None and node.inputs[index].name:
        return node.inputs[index]
    return None


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _to_output_shape(ctx: Context, node: ir.Node) -> None:
    """Reshape, Flatten, Squeeze, Unsqueeze: all a RESHAPE to the (inferred, static) output shape. After a
    detector's selection one dim may be sized at run time (-1, which RESHAPE infers); with more, a Reshape
    takes its run-time shape and Squeeze / Unsqueeze become SQUEEZE / EXPAND_DIMS."""
    y_value = node.outputs[0]
    shape = ctx.shape(y_value)
    if sum(d < 0 for d in shape) <= 1:
        ctx.reshape(ctx.tensor(node.inputs[0]), shape, out=ctx.output(y_value))
        return
    x = ctx.tensor(node.inputs[0])
    if node.op_type == "Flatten":  # [outer, inner]: one of them sized at run time is what RESHAPE infers
        axis = node.attributes.get_int("axis", 1)
        axis = axis + x.rank if axis < 0 else axis
        outer, inner = x.shape[:axis], x.shape[axis:]
        if min(inner, default=0) >= 0 or min(outer, default=0) >= 0:
            flat = (-1, int(np.prod(inner))) if min(inner, default=0) >= 0 else (int(np.prod(outer)), -1)
            ctx.reshape(x, flat, out=ctx.output(y_value, shape=flat))
            return
        # both sized at run time: [-1, prod(dims[axis:])] from the run-time shape
        dims = ctx.tmp("inner_dims", (len(inner),), np.int32)
        begin, size = (
            ctx.graph.const("begin", [axis], np.int32),
            ctx.graph.const("size", [len(inner)], np.int32),
        )
        ctx.op("SLICE", [runtime_shape(ctx, x), begin, size], [dims])
        keep = fb.ReducerOptionsT()
        keep.keepDims = True
        size_inner = ctx.tmp("inner", (1,), np.int32)
        ctx.op("REDUCE_PROD", [dims, ctx.graph.const("axis", [0], np.int32)], [size_inner], keep)
        target = ctx.tmp("flat_shape", (2,), np.int32)
        opts = fb.ConcatenationOptionsT()
        opts.axis = 0
        ctx.op("CONCATENATION", [ctx.graph.const("outer", [-1], np.int32), size_inner], [target], opts)
        ctx.op("RESHAPE", [x, target], [ctx.output(y_value, shape=(-1, -1))])
        return
    y = ctx.output(y_value)
    axes = _optional(node, 1) if node.op_type in ("Squeeze", "Unsqueeze") else None
    axes = node.attributes.get_ints("axes") if axes is None else ctx.require_const(axes, "axes").tolist()
    if node.op_type == "Reshape":
        target = ctx.tensor(node.inputs[1])
        if target.is_const and (target.data == 0).any():
            raise ctx.error(
                "a shape with 0 (copy the input's dim) on a tensor sized at run time is not supported"
            )
        ctx.op("RESHAPE", [x, _int32(ctx, target)], [y])
    elif node.op_type == "Squeeze" and axes:
        opts = fb.SqueezeOptionsT()
        opts.squeezeDims = [_axis(int(a), x.rank) for a in axes]
        ctx.op("SQUEEZE", [x], [y], opts)
    elif node.op_type == "Unsqueeze" and axes is not None and len(axes) == 1:
        ctx.op("EXPAND_DIMS", [x, ctx.graph.const("axis", np.int32(_axis(int(axes[0]), y.rank)))], [y])
    else:
        raise ctx.error(f"{node.op_type} to {list(shape)}: more than one dim sized at run time")


def _int32(ctx: Context, t: Tensor) -> Tensor:
    """An index tensor as int32 (a CAST of a run-time one)."""
    if t.dtype == np.int32:
        return t
    if t.is_const:
        return ctx.graph.const(t.name, t.data.astype(np.int32))
    out = ctx.tmp("i32", t.shape, np.int32)
    ctx.op("CAST", [t], [out])
    return out


@converter("Reshape", since=1)
def reshape(ctx: Context, node: ir.Node, *, allowzero: int = 0, shape: Sequence[int] | None = None) -> None:
    _to_output_shape(ctx, node)


@converter("Flatten", since=1)
def flatten(ctx: Context, node: ir.Node, *, axis: int = 1) -> None:
    _to_output_shape(ctx, node)


@converter("Squeeze", since=1)
def squeeze(ctx: Context, node: ir.Node, *, axes: Sequence[int] | None = None) -> None:
    y_value = node.outputs[0]
    if y_value.name in ctx.dynamic and y_value.shape is None and axes is None and _optional(node, 1) is None:
        # without axes on a tensor sized at run time (paddle2onnx 1.x after NonMaxSuppression): shape inference
        # cannot tell the rank; the axes are the dims of size 1
        dims = ctx.shape(node.inputs[0])
        dropped = set(squeeze_axes_meant(dims))
        y_value.shape = ir.Shape([d if d >= 0 else None for i, d in enumerate(dims) if i not in dropped])
    _to_output_shape(ctx, node)


@converter("Unsqueeze", since=1)
def unsqueeze(ctx: Context, node: ir.Node, *, axes: Sequence[int] | None = None) -> None:
    _to_output_shape(ctx, node)


@converter("Shape", since=1)
def shape(ctx: Context, node: ir.Node, *, start: int = 0, end: int | None = None) -> None:
    """Folded where the dims are static; SHAPE where one is sized at run time (after a detector's selection)."""
    dims = ctx.shape(node.inputs[0])
    if all(d >= 0 for d in dims[start:end]):
        ctx.set_const(node.outputs[0], np.asarray(dims[start:end], dtype=np.int64))
        return
    y = ctx.output(node.outputs[0], dtype=np.int32)
    whole = runtime_shape(ctx, ctx.tensor(node.inputs[0]))
    first, last, _ = slice(start, end).indices(len(dims))
    if (first, last) == (0, len(dims)):
        ctx.reshape(whole, y.shape, out=y)
        return
    begin, size = (
        ctx.graph.const("begin", [first], np.int32),
        ctx.graph.const("size", [max(last - first, 0)], np.int32),
    )
    ctx.op("SLICE", [whole, begin, size], [y], fb.SliceOptionsT())


@converter("Size", since=1)
def size(ctx: Context, node: ir.Node) -> None:
    """Folded: shapes are static."""
    ctx.set_const(node.outputs[0], np.asarray(int(np.prod(ctx.shape(node.inputs[0]))), dtype=np.int64))


@converter("Constant", since=1)
def constant(
    ctx: Context,
    node: ir.Node,
    *,
    value: object = None,
    value_float: object = None,
    value_floats: object = None,
    value_int: object = None,
    value_ints: object = None,
    value_string: object = None,
    value_strings: object = None,
    sparse_value: object = None,
) -> None:
    """Folded before conversion (constant folding evaluates it); registered so it counts as supported."""
    raise AssertionError("Constant nodes are folded before conversion")


@converter("Identity", since=1)
def identity(ctx: Context, node: ir.Node) -> None:
    ctx.bind(node.outputs[0], ctx.tensor(node.inputs[0]))


@converter("Dropout", since=1)
def dropout(ctx: Context, node: ir.Node, *, ratio: float = 0.5, seed: int = 0, is_test: int = 0) -> None:
    if len(node.outputs) > 1 and node.outputs[1].name and node.outputs[1].uses():
        raise ctx.error("the mask output of Dropout is not supported")
    training, ratio_input = _optional(node, 2), _optional(node, 1)
    if ratio_input is not None:
        ratio = float(ctx.require_const(ratio_input, "Dropout ratio").reshape(-1)[0])
    if training is not None and bool(ctx.require_const(training, "Dropout training_mode")) and ratio != 0.0:
        raise ctx.error(
            "training-mode Dropout (random masking) is not supported; export the model for inference"
        )
    ctx.bind(node.outputs[0], ctx.tensor(node.inputs[0]))


def _cast(ctx: Context, node: ir.Node) -> None:
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    if x.dtype == y.dtype:
        ctx.bind(node.outputs[0], x)
        return
    ctx.op("CAST", [x], [y])


@converter("Cast", since=1)
def cast(ctx: Context, node: ir.Node, *, to: int, saturate: int = 1, round_mode: str = "up") -> None:
    _cast(ctx, node)


@converter("CastLike", since=15)
def cast_like(ctx: Context, node: ir.Node, *, saturate: int = 1, round_mode: str = "up") -> None:
    """Cast to the type of input 1 (the output's type, from the graph): what ONNX functions use for constants."""
    _cast(ctx, node)


@converter("Transpose", since=1)
def transpose(ctx: Context, node: ir.Node, *, perm: Sequence[int] | None = None) -> None:
    x = ctx.tensor(node.inputs[0])
    perm = list(perm) if perm is not None else list(reversed(range(x.rank)))
    ctx.transpose(x, perm, out=ctx.output(node.outputs[0]))


@converter("Concat", since=1)
def concat(ctx: Context, node: ir.Node, *, axis: int = 1) -> None:
    # Empty inputs (e.g. the zero-size part of a Split) add nothing.
    values = [v for v in node.inputs if v is not None and v.name and 0 not in ctx.shape(v)]
    inputs = [ctx.tensor(v) for v in values]
    y = ctx.output(node.outputs[0])
    if len(inputs) == 1:
        ctx.reshape(inputs[0], y.shape, out=y)
        return
    opts = fb.ConcatenationOptionsT()
    opts.axis = _axis(axis, y.rank)
    ctx.op("CONCATENATION", inputs, [y], opts)


def _split(ctx: Context, node: ir.Node, axis: int) -> None:
    x = ctx.tensor(node.inputs[0])
    axis = _axis(axis, x.rank)
    outputs = []
    for v in node.outputs:
        shape = ctx.shape(v)
        if 0 in shape:  # an empty part: a constant with no elements, which Concat drops
            ctx.set_const(v, np.zeros(shape, v.dtype.numpy() if v.dtype is not None else np.float32))
        else:
            outputs.append(ctx.output(v))
    sizes = [t.shape[axis] for t in outputs]
    if len(outputs) == 1:  # one part, the whole (torch's split of one image's boxes after a selection too)
        if sum(d < 0 for d in x.shape) > 1:
            ctx.op("RESHAPE", [x, runtime_shape(ctx, x)], outputs)
        else:
            ctx.reshape(x, x.shape, out=outputs[0])
        return
    if any(size < 0 for size in sizes):
        raise ctx.error("splitting along an axis sized at run time is not supported")
    opts = fb.SplitVOptionsT()
    opts.numSplits = len(outputs)
    size_splits = ctx.graph.const("size_splits", sizes, np.int32)
    ctx.op("SPLIT_V", [x, size_splits, ctx.graph.const("axis", np.int32(axis))], outputs, opts)


@converter("Split", since=1)
def split(
    ctx: Context,
    node: ir.Node,
    *,
    axis: int = 0,
    split: Sequence[int] | None = None,
    num_outputs: int | None = None,
) -> None:
    _split(ctx, node, axis)


def _slice(
    ctx: Context,
    node: ir.Node,
    starts: np.ndarray,
    ends: np.ndarray,
    axes: np.ndarray | None,
    steps: np.ndarray | None,
) -> None:
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    rank = x.rank
    axes = [_axis(int(a), rank) for a in (axes if axes is not None else range(len(starts)))]
    steps = [int(s) for s in (steps if steps is not None else [1] * len(axes))]
    if any(d < 0 for d in x.shape):
        _dynamic_slice(ctx, x, y, axes, starts, ends, steps)
        return
    begin, end, stride = [0] * rank, list(x.shape), [1] * rank
    end_mask = 0
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        b, e2, st2 = slice(int(max(min(s, 2**62), -(2**62))), int(max(min(e, 2**62), -(2**62))), st).indices(
            x.shape[a]
        )
        begin[a], end[a], stride[a] = b, e2, st2
        if e2 < 0:  # a negative step running past index 0: "to the start", not "from the end"
            end_mask |= 1 << a
    if all(s == 1 for s in stride):
        size = [max(e - b, 0) for b, e in zip(begin, end, strict=True)]
        inputs = [x, ctx.graph.const("begin", begin, np.int32), ctx.graph.const("size", size, np.int32)]
        ctx.op("SLICE", inputs, [y], fb.SliceOptionsT())
        return
    opts = fb.StridedSliceOptionsT()
    opts.endMask = end_mask
    inputs = [
        x,
        *(ctx.graph.const(n, v, np.int32) for n, v in (("begin", begin), ("end", end), ("strides", stride))),
    ]
    ctx.op("STRIDED_SLICE", inputs, [y], opts)


def _dynamic_slice(
    ctx: Context,
    x: Tensor,
    y: Tensor,
    axes: list[int],
    starts: np.ndarray,
    ends: np.ndarray,
    steps: list[int],
) -> None:
    """A slice of a tensor sized at run time: STRIDED_SLICE, which wraps negative indices and clamps the rest
    to the dim as ONNX does; an end past int32 (ONNX's "to the end") and every axis not sliced are masked."""
    rank = x.rank
    begin, end, stride = [0] * rank, [0] * rank, [1] * rank
    begin_mask = end_mask = 0
    for a in range(rank):
        if a not in axes:
            begin_mask |= 1 << a
            end_mask |= 1 << a
    limit = int(np.iinfo(np.int32).max)
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        s, e = int(s), int(e)
        stride[a] = st
        if abs(s) >= limit:  # past either end: from the first (step > 0) or the last (step < 0) element
            begin_mask |= 1 << a
        else:
            begin[a] = s
        if abs(e) >= limit:
            end_mask |= 1 << a
        else:
            end[a] = e
    opts = fb.StridedSliceOptionsT()
    opts.beginMask = begin_mask
    opts.endMask = end_mask
    inputs = [
        x,
        *(ctx.graph.const(n, v, np.int32) for n, v in (("begin", begin), ("end", end), ("strides", stride))),
    ]
    ctx.op("STRIDED_SLICE", inputs, [y], opts)


@converter("Slice", since=1)
def slice_v1(
    ctx: Context,
    node: ir.Node,
    *,
    starts: Sequence[int],
    ends: Sequence[int],
    axes: Sequence[int] | None = None,
) -> None:
    _slice(ctx, node, np.asarray(starts), np.asarray(ends), None if axes is None else np.asarray(axes), None)


@converter("Slice", since=10)
def slice_v10(ctx: Context, node: ir.Node) -> None:
    if node.outputs[0].name in ctx.dynamic and not (
        ctx.is_const(node.inputs[1]) and ctx.is_const(node.inputs[2])
    ):
        _runtime_bounds_slice(ctx, node)
        return
    starts = ctx.require_const(node.inputs[1], "Slice starts")
    ends = ctx.require_const(node.inputs[2], "Slice ends")
    axes = _optional(node, 3)
    steps = _optional(node, 4)
    _slice(
        ctx,
        node,
        starts,
        ends,
        None if axes is None else ctx.require_const(axes, "Slice axes"),
        None if steps is None else ctx.require_const(steps, "Slice steps"),
    )


def _runtime_bounds_slice(ctx: Context, node: ir.Node) -> None:
    """A Slice after a detector's selection whose starts / ends are computed there (a count of boxes kept):
    STRIDED_SLICE with run-time begin / end (it wraps negative indices and clamps to the dim as ONNX does), the
    axes and steps constant, every other axis masked."""
    x = ctx.tensor(node.inputs[0])
    rank = x.rank
    axes_value, steps_value = _optional(node, 3), _optional(node, 4)
    count = ctx.shape(node.inputs[1])[0]
    axes = list(range(count)) if axes_value is None else ctx.require_const(axes_value, "Slice axes").tolist()
    axes = [_axis(int(a), rank) for a in axes]
    steps = [1] * count if steps_value is None else ctx.require_const(steps_value, "Slice steps").tolist()
    stride = [1] * rank
    for a, st in zip(axes, steps, strict=True):
        stride[a] = int(st)
    masked = sum(1 << a for a in range(rank) if a not in axes)

    def full(value: ir.Value, name: str) -> Tensor:
        """The [rank] bounds: the sliced axes' from ``value``, 0 elsewhere (masked)."""
        array = ctx.const(value)
        if array is not None:
            limit = np.iinfo(np.int32)
            bounds = np.zeros(rank, np.int64)
            bounds[axes] = np.clip(array, limit.min, limit.max)
            return ctx.graph.const(name, bounds.astype(np.int32))
        given = _int32(ctx, ctx.tensor(value))
        if axes == list(range(rank)):
            return given
        index = np.full(rank, count, np.int32)  # a zero appended at position ``count``
        index[axes] = np.arange(count)
        padded = ctx.tmp(name + "_padded", (count + 1,), np.int32)
        opts = fb.ConcatenationOptionsT()
        opts.axis = 0
        ctx.op("CONCATENATION", [given, ctx.graph.const("zero", [0], np.int32)], [padded], opts)
        out = ctx.tmp(name, (rank,), np.int32)
        gather = fb.GatherOptionsT()
        gather.axis = 0
        ctx.op("GATHER", [padded, ctx.graph.const("order", index)], [out], gather)
        return out

    opts = fb.StridedSliceOptionsT()
    opts.beginMask = opts.endMask = masked
    inputs = [
        x,
        full(node.inputs[1], "begin"),
        full(node.inputs[2], "end"),
        ctx.graph.const("strides", stride, np.int32),
    ]
    ctx.op("STRIDED_SLICE", inputs, [ctx.output(node.outputs[0])], opts)


def _pad(
    ctx: Context, node: ir.Node, mode: str, pads: np.ndarray, value: float, axes: np.ndarray | None
) -> None:
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    rank = x.rank
    axes_list = [_axis(int(a), rank) for a in axes] if axes is not None else list(range(rank))
    n = len(axes_list)
    paddings = np.zeros((rank, 2), dtype=np.int32)
    for i, a in enumerate(axes_list):
        paddings[a] = (int(pads[i]), int(pads[i + n]))
    if (paddings < 0).any():  # negative pads crop first, then the rest pads (as onnxruntime does)
        crop = np.maximum(-paddings, 0)
        size = [d - int(b) - int(e) for d, (b, e) in zip(x.shape, crop, strict=True)]
        cropped = ctx.tmp("pad_cropped", size, x.dtype)
        begin = ctx.graph.const("begin", crop[:, 0].astype(np.int32), np.int32)
        ctx.op("SLICE", [x, begin, ctx.graph.const("size", size, np.int32)], [cropped], fb.SliceOptionsT())
        x, paddings = cropped, np.maximum(paddings, 0)
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pad_const = ctx.graph.const("paddings", paddings)
    if mode == "constant":
        if value == 0.0:
            ctx.op("PAD", [x, pad_const], [y], fb.PadOptionsT())
        else:
            ctx.op(
                "PADV2",
                [x, pad_const, ctx.graph.const("value", np.array(value, x.dtype))],
                [y],
                fb.PadV2OptionsT(),
            )
    elif mode == "reflect":
        opts = fb.MirrorPadOptionsT()
        opts.mode = fb.MirrorPadMode.REFLECT
        ctx.op("MIRROR_PAD", [x, pad_const], [y], opts)
    elif mode in ("edge", "wrap"):
        _pad_by_gather(ctx, x, y, paddings, mode)
    else:
        raise ctx.error(f"Pad mode {mode!r} is not supported (constant, reflect, edge, wrap are)")


def _pad_by_gather(ctx: Context, x: Tensor, y: Tensor, paddings: np.ndarray, mode: str) -> None:
    """``edge`` (replicate: kornia's spatial gradients, ``F.pad(mode="replicate")``) and ``wrap`` (circular)
    padding, which TFLite has no op for: one GATHER per padded axis with constant source indices (clamped to the
    border, or modulo the size), exact in float and in int8 (a GATHER keeps its input's scale)."""
    axes = [a for a in range(x.rank) if paddings[a].any()]
    current = x
    for i, a in enumerate(axes):
        size = x.shape[a]
        before, after = (int(p) for p in paddings[a])
        source = np.arange(-before, size + after)
        source = np.clip(source, 0, size - 1) if mode == "edge" else np.mod(source, size)
        shape = list(current.shape)
        shape[a] = len(source)
        out = y if i == len(axes) - 1 else ctx.tmp("pad_" + mode, shape, x.dtype)
        opts = fb.GatherOptionsT()
        opts.axis = a
        ctx.op("GATHER", [current, ctx.graph.const("pad_source", source.astype(np.int32))], [out], opts)
        current = out
    if not axes:
        ctx.reshape(x, y.shape, out=y)


@converter("Pad", since=1)
def pad_v2(
    ctx: Context,
    node: ir.Node,
    *,
    mode: str = "constant",
    pads: Sequence[int] = (),
    paddings: Sequence[int] = (),
    value: float = 0.0,
) -> None:
    _pad(ctx, node, mode, np.asarray(list(pads) or list(paddings)), float(value), None)


@converter("Pad", since=11)
def pad_v11(ctx: Context, node: ir.Node, *, mode: str = "constant") -> None:
    if not ctx.is_const(node.inputs[1]) and node.outputs[0].name in ctx.dynamic:
        _runtime_pad(ctx, node, mode)
        return
    pads = ctx.require_const(node.inputs[1], "Pad pads")
    value_in = _optional(node, 2)
    value = float(ctx.require_const(value_in, "Pad constant_value")) if value_in is not None else 0.0
    axes_in = _optional(node, 3)
    axes = ctx.require_const(axes_in, "Pad axes") if axes_in is not None else None
    _pad(ctx, node, mode, pads, value, axes)


def _runtime_pad(ctx: Context, node: ir.Node, mode: str) -> None:
    """Pads computed at run time (after a detector's selection: padding the kept boxes to a fixed count): PAD /
    PADV2 with ONNX's [begins, ends] as TFLite's [rank, 2]."""
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant" or _optional(node, 3) is not None:
        raise ctx.error("pads computed at run time: only constant mode over every axis is supported")
    x = ctx.tensor(node.inputs[0])
    pads = _int32(ctx, ctx.tensor(node.inputs[1]))
    pairs = ctx.transpose(ctx.reshape(pads, (2, x.rank)), (1, 0))
    value_in = _optional(node, 2)
    value = float(ctx.require_const(value_in, "Pad constant_value")) if value_in is not None else 0.0
    y = ctx.output(node.outputs[0])
    if value == 0.0:
        ctx.op("PAD", [x, pairs], [y], fb.PadOptionsT())
    else:
        ctx.op(
            "PADV2", [x, pairs, ctx.graph.const("value", np.array(value, x.dtype))], [y], fb.PadV2OptionsT()
        )


#: Ops whose output is never negative, and ops that keep their (data) inputs' signs: run-time Gather indices
#: computed only through these need no wrapping of negative indices.
_NON_NEGATIVE_OPS = frozenset({"Shape", "Size", "ArgMax", "ArgMin", "NonZero", "Abs", "Relu", "Equal", "Less",
                               "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "IsNaN", "IsInf"})  # fmt: skip
_SIGN_KEEPING_OPS = frozenset({"Add", "Mul", "CumSum", "Max", "Concat", "Identity", "Cast", "Reshape", "Squeeze",
                               "Unsqueeze", "Flatten", "Expand", "Transpose", "Tile", "ReduceSum", "ReduceMax"})  # fmt: skip
#: the data input alone carries the sign (the others are indices, axes or shapes)
_DATA_ONLY_OPS = frozenset({"Slice", "Gather", "GatherElements", "GatherND", "Split", "TopK"})


def _never_negative(ctx: Context, value: ir.Value | None, depth: int = 0) -> bool:
    """Whether ``value`` (integer indices computed at run time) is provably >= 0: a constant, an integer graph
    input (ids a user feeds; the verification seeds them within the table), or computed from such values by ops
    that keep the sign. A Cast from float (TabNet casts its categorical columns to ids) or a Sub is not."""
    if value is None or depth > 64:
        return False
    constant = ctx.const(value)
    if constant is not None:
        return bool(constant.size == 0 or constant.min() >= 0)
    producer = value.producer()
    if producer is None:
        return value.dtype is not None and value.dtype.is_integer()
    op = producer.op_type
    if op == "TopK":
        return value is producer.outputs[1] or _never_negative(ctx, producer.inputs[0], depth + 1)
    if op in _NON_NEGATIVE_OPS:
        return True
    if op == "Cast":
        source = producer.inputs[0]
        if (
            source is None
            or source.dtype is None
            or not (source.dtype.is_integer() or source.dtype == ir.DataType.BOOL)
        ):
            return False
    if op in _SIGN_KEEPING_OPS:
        operands = producer.inputs[:1] if op in ("Reshape", "Expand", "Tile", "CumSum") else producer.inputs
        return all(_never_negative(ctx, v, depth + 1) for v in operands if v is not None)
    if op in _DATA_ONLY_OPS:
        return _never_negative(ctx, producer.inputs[0], depth + 1)
    if op == "Where":
        return all(_never_negative(ctx, v, depth + 1) for v in producer.inputs[1:])
    if op == "Range":
        start, delta = ctx.const(producer.inputs[0]), ctx.const(producer.inputs[2])
        return start is not None and delta is not None and start.min() >= 0 and delta.min() >= 0
    return False


@converter("Gather", since=1)
def gather(ctx: Context, node: ir.Node, *, axis: int = 0) -> None:
    """GATHER; run-time indices that may be negative (ONNX counts them from the end, TFLite's GATHER refuses
    them: "gather index out of bounds") are wrapped first, as GatherElements' are."""
    data_value, indices_value = node.inputs
    data = ctx.tensor(data_value)
    axis = _axis(axis, data.rank)
    indices = ctx.const(indices_value)
    if indices is not None and indices.min(initial=0) < 0 and data.shape[axis] < 0:
        indices = None  # counted from an end known at run time
    if indices is not None:
        indices = np.where(indices < 0, indices + data.shape[axis], indices).astype(np.int32)
        index_tensor = ctx.graph.const(indices_value.name, indices)
    elif _never_negative(ctx, indices_value):
        index_tensor = ctx.tensor(indices_value)
    else:
        if data.shape[axis] >= 0:
            dims = ctx.graph.const("dims", np.asarray(data.shape[axis], np.int32))
        else:
            dims = ctx.tmp("dims", (), np.int32)
            ctx.op(
                "GATHER",
                [runtime_shape(ctx, data), ctx.graph.const("axis", np.int32(axis))],
                [dims],
                fb.GatherOptionsT(),
            )
        index_tensor = _wrap_negative(ctx, ctx.tensor(indices_value), dims)
    opts = fb.GatherOptionsT()
    opts.axis = axis
    ctx.op("GATHER", [data, index_tensor], [ctx.output(node.outputs[0])], opts)


@converter("Expand", since=8)
def expand(ctx: Context, node: ir.Node) -> None:
    """BROADCAST_TO the output shape; sized at run time, the larger of each dim of the shape asked and the
    input's (ONNX broadcasts both ways: a 1 asked keeps the input's dim)."""
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    if all(d >= 0 for d in y.shape):
        ctx.op("BROADCAST_TO", [x, ctx.graph.const("shape", y.shape, np.int32)], [y])
        return
    asked = _int32(ctx, ctx.tensor(node.inputs[1]))
    if x.rank != y.rank or asked.shape != (y.rank,):
        raise ctx.error(
            f"expanding a rank-{x.rank} tensor sized at run time to rank {y.rank} is not supported"
        )
    target = ctx.tmp("expand_shape", (y.rank,), np.int32)
    ctx.op("MAXIMUM", [asked, runtime_shape(ctx, x)], [target])
    ctx.op("BROADCAST_TO", [x, target], [y])


@converter("Tile", since=6)
def tile(ctx: Context, node: ir.Node) -> None:
    repeats = ctx.require_const(node.inputs[1], "Tile repeats")
    ctx.op(
        "TILE",
        [ctx.tensor(node.inputs[0]), ctx.graph.const("multiples", repeats, np.int32)],
        [ctx.output(node.outputs[0])],
    )
