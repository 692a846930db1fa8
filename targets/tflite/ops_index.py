"""Converters for indexing ops: GatherElements, GatherND, ScatterND, ScatterElements, TopK, Trilu, OneHot, Hardmax,
and Range / ConstantOfShape where constant folding (``converter._fold``) could not evaluate them.

GatherElements and GatherND (with ``batch_dims``) become one GATHER_ND over full coordinates; ScatterND (constant
indices, as detector heads write slices in place) a SCATTER_ND of the updates selected over the data by a constant
mask, and ScatterElements the same over full coordinates (run-time indices: reduction "add" only); TopK the TOPK_V2
kernel (last axis, largest, sorted: other axes are transposed, smallest is the largest of the negated values).
None has an int8 rule: in a quantized model they stay float.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _optional(node: ir.Node, index: int) -> ir.Value | None:
    if len(node.inputs) > index and node.inputs[index] is not None and node.inputs[index].name:
        return node.inputs[index]
    return None


def _c(ctx: Context, value: object, dtype: np.dtype | type) -> Tensor:
    return ctx.graph.const("c", np.asarray(value, dtype=dtype))


def _wrap_negative(ctx: Context, index: Tensor, dims: Tensor) -> Tensor:
    """index + dims where index < 0 (run-time indices; constant ones are wrapped in numpy)."""
    if index.dtype != np.int32:
        cast = ctx.tmp("index_i32", index.shape, np.int32)
        ctx.op("CAST", [index], [cast])
        index = cast
    negative = ctx.tmp("negative", index.shape, np.bool_)
    ctx.op("LESS", [index, _c(ctx, 0, np.int32)], [negative])
    wrapped = binary(ctx, "ADD", index, dims, ctx.tmp("wrapped", index.shape, np.int32))
    out = ctx.tmp("index", index.shape, np.int32)
    ctx.op("SELECT_V2", [negative, wrapped, index], [out])
    return out


def _gather_nd(ctx: Context, data: Tensor, coords: Tensor, y: Tensor) -> None:
    ctx.op("GATHER_ND", [data, coords], [y])


# -- GatherElements / GatherND ---------------------------------------------------------------------
@converter("GatherElements", since=11)
def gather_elements(ctx: Context, node: ir.Node, *, axis: int = 0) -> None:
    """GATHER_ND over coordinates that are the index along ``axis`` and the position along every other."""
    data = ctx.tensor(node.inputs[0])
    axis = axis + data.rank if axis < 0 else axis
    coords = _element_coords(ctx, data, node.inputs[1], axis)
    if isinstance(coords, np.ndarray):
        coords = ctx.graph.const("coords", coords.astype(np.int32))
    _gather_nd(ctx, data, coords, ctx.output(node.outputs[0]))


def _element_coords(ctx: Context, data: Tensor, indices: ir.Value, axis: int) -> np.ndarray | Tensor:
    """The full coordinates in ``data`` of each element of GatherElements' / ScatterElements' ``indices`` (its
    index along ``axis``, its position along every other dim), [*indices' shape, rank]: an int64 array (negative
    indices wrapped) when the indices are constant, else a run-time int32 tensor (wrapped at run time)."""
    rank = data.rank
    shape = ctx.shape(indices)
    grids = np.meshgrid(*[np.arange(d, dtype=np.int64) for d in shape], indexing="ij")
    constant = ctx.const(indices)
    if constant is not None:
        index = np.where(constant < 0, constant + data.shape[axis], constant).astype(np.int64)
        return np.stack([index if d == axis else grids[d] for d in range(rank)], axis=-1)
    index = _wrap_negative(ctx, ctx.tensor(indices), _c(ctx, data.shape[axis], np.int32))
    index = ctx.reshape(index, (*shape, 1))
    parts = [
        index if d == axis else ctx.graph.const("grid", grids[d][..., None].astype(np.int32))
        for d in range(rank)
    ]
    coords = ctx.tmp("coords", (*shape, rank), np.int32)
    opts = fb.ConcatenationOptionsT()
    opts.axis = rank
    ctx.op("CONCATENATION", parts, [coords], opts)
    return coords


@converter("GatherND", since=11)
def gather_nd(ctx: Context, node: ir.Node, *, batch_dims: int = 0) -> None:
    """GATHER_ND; ``batch_dims`` leading dims become leading coordinates (the position in each batch dim)."""
    data = ctx.tensor(node.inputs[0])
    shape = ctx.shape(node.inputs[1])
    k = shape[-1]
    dims = np.asarray(data.shape[batch_dims : batch_dims + k], np.int32)
    y = ctx.output(node.outputs[0])
    grids = np.meshgrid(*[np.arange(d, dtype=np.int32) for d in shape[:-1]], indexing="ij")
    batch = [grids[d][..., None] for d in range(batch_dims)]
    constant = ctx.const(node.inputs[1])
    if constant is not None:
        index = np.where(constant < 0, constant + dims, constant).astype(np.int32)
        coords = np.concatenate([*batch, index], axis=-1) if batch else index
        _gather_nd(ctx, data, ctx.graph.const("coords", coords), y)
        return
    index = _wrap_negative(ctx, ctx.tensor(node.inputs[1]), ctx.graph.const("dims", dims))
    if batch:
        coords = ctx.tmp("coords", (*shape[:-1], batch_dims + k), np.int32)
        opts = fb.ConcatenationOptionsT()
        opts.axis = len(shape) - 1
        ctx.op("CONCATENATION", [*[ctx.graph.const("batch", b) for b in batch], index], [coords], opts)
        index = coords
    _gather_nd(ctx, data, index, y)


# -- ScatterND -------------------------------------------------------------------------------------
def _compact(mask: np.ndarray) -> np.ndarray:
    """``mask`` with every axis it is constant along reduced to size 1 (it broadcasts back)."""
    for axis in range(mask.ndim):
        first = np.take(mask, [0], axis=axis)
        if np.array_equal(np.broadcast_to(first, mask.shape), mask):
            mask = first
    return mask


def _rounds(flat: np.ndarray) -> list[np.ndarray]:
    """The update positions in rounds without a repeated index: round r holds each index's r-th update."""
    seen: dict[tuple[int, ...], int] = {}
    rounds: list[list[int]] = []
    for position, row in enumerate(map(tuple, flat.tolist())):
        r = seen.get(row, 0)
        seen[row] = r + 1
        if r == len(rounds):
            rounds.append([])
        rounds[r].append(position)
    return [np.asarray(r, np.int32) for r in rounds]


#: ONNX ScatterND / ScatterElements reductions: the TFLite op that combines the scattered values with the data
_COMBINE = {"none": None, "add": "ADD", "mul": "MUL", "max": "MAXIMUM", "min": "MINIMUM"}


def _reduction(ctx: Context, reduction: str | bytes, op: str) -> str:
    reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
    if reduction not in _COMBINE:
        raise ctx.error(f"reduction {reduction!r} is not an ONNX {op} reduction")
    return reduction


@converter("ScatterND", since=11)
def scatter_nd(ctx: Context, node: ir.Node, *, reduction: str = "none") -> None:
    """where(written, SCATTER_ND(updates), data) with a constant mask; reduction "add" is data + SCATTER_ND
    (which sums repeated indices), "mul"/"max"/"min" combine the scattered values with the data first. Repeated
    indices otherwise are applied in rounds, in order (the later update wins for "none"). Indices must be
    constant (run-time indices would need a run-time mask)."""
    reduction = _reduction(ctx, reduction, "ScatterND")
    data = ctx.tensor(node.inputs[0])
    if any(d < 0 for d in (*data.shape, *ctx.shape(node.inputs[2]))):
        raise ctx.error("scattering into or from a tensor sized at run time is not supported")
    indices = ctx.require_const(node.inputs[1], "ScatterND indices")
    k = indices.shape[-1]
    dims = np.asarray(data.shape[:k], np.int64)
    flat = np.where(indices < 0, indices + dims, indices).astype(np.int64).reshape(-1, k)
    _scatter_constant(ctx, data, flat, ctx.tensor(node.inputs[2]), reduction, ctx.output(node.outputs[0]))


def _scatter_constant(
    ctx: Context, data: Tensor, flat: np.ndarray, updates: Tensor, reduction: str, y: Tensor
) -> None:
    """Scatter ``updates`` (shape ``[*positions, *slice]``) into ``data`` at the constant coordinates ``flat``
    ([positions, k], non-negative) with an ONNX reduction."""
    k = flat.shape[-1]
    dims = np.asarray(data.shape[:k], np.int64)
    if np.any(flat < 0) or np.any(flat >= dims):
        raise ctx.error(f"indices out of range for data of shape {list(data.shape)}")
    shape = ctx.graph.const("shape", np.asarray(data.shape, np.int32))
    slice_shape = tuple(data.shape[k:])
    rounds = [np.arange(len(flat), dtype=np.int32)] if reduction == "add" else _rounds(flat)
    rows = updates if len(rounds) == 1 else ctx.reshape(updates, (len(flat), *slice_shape))
    current = data
    for i, positions in enumerate(rounds):
        part = rows
        if len(rounds) > 1:
            part = ctx.tmp("round_updates", (len(positions), *slice_shape), data.dtype)
            opts = fb.GatherOptionsT()
            opts.axis = 0
            ctx.op("GATHER", [rows, ctx.graph.const("positions", positions)], [part], opts)
        scattered = ctx.tmp("scattered", data.shape, data.dtype)
        written = flat[positions]
        index = ctx.graph.const(
            "indices", written.astype(np.int32).reshape(*part.shape[: part.rank - len(slice_shape)], k)
        )
        ctx.op("SCATTER_ND", [index, part, shape], [scattered])
        out = y if i == len(rounds) - 1 else ctx.tmp("scatter_round", data.shape, data.dtype)
        if reduction == "add":
            current = binary(ctx, "ADD", current, scattered, out)
            continue
        if _COMBINE[reduction] is not None:
            scattered = binary(
                ctx, _COMBINE[reduction], current, scattered, ctx.tmp("combined", data.shape, data.dtype)
            )
        mask = np.zeros(data.shape[:k], np.bool_)
        mask[tuple(written.T)] = True
        mask = _compact(mask.reshape(mask.shape + (1,) * (data.rank - k)))
        ctx.op("SELECT_V2", [ctx.graph.const("written", mask), scattered, current], [out])
        current = out


@converter("ScatterElements", since=11)
def scatter_elements(ctx: Context, node: ir.Node, *, axis: int = 0, reduction: str = "none") -> None:
    """ScatterND over full coordinates: each update's position in every dim but ``axis``, its index along it
    (torch's ``scatter_add`` / ``index_add`` / ``scatter_reduce``: torch_geometric's message aggregation and
    segment softmax). Constant indices (a fixed graph, folded) take every reduction, as ScatterND; indices
    computed at run time (``edge_index`` an input) take "add": data + SCATTER_ND at run-time coordinates, which
    sums repeated indices as ONNX's reduction does. Run-time indices with another reduction are refused: a
    repeated index needs its updates applied in order ("none", "mul") or a maximum TFLite has no scatter for."""
    reduction = _reduction(ctx, reduction, "ScatterElements")
    data = ctx.tensor(node.inputs[0])
    updates = ctx.tensor(node.inputs[2])
    axis = axis + data.rank if axis < 0 else axis
    y = ctx.output(node.outputs[0])
    rows = _row_indices(ctx, node.inputs[1]) if axis == 0 and reduction == "none" else None
    if rows is not None:
        _scatter_rows(ctx, data, rows, updates, y)
        return
    if any(d < 0 for d in (*data.shape, *updates.shape)):
        raise ctx.error(
            "scattering into or from a tensor sized at run time is supported for whole rows only (indices an "
            "Expand of one row index each, on axis 0, reduction 'none')"
        )
    if ctx.const(node.inputs[1]) is None and reduction != "add":
        raise ctx.error(
            f"ScatterElements with reduction {reduction!r} needs constant indices (these are computed at run "
            "time): TFLite's SCATTER_ND only sums repeated indices; fix the graph's index input (e.g. a "
            "constant edge_index) or scatter with reduction 'add'"
        )
    coords = _element_coords(ctx, data, node.inputs[1], axis)
    if isinstance(coords, np.ndarray):
        _scatter_constant(ctx, data, coords.reshape(-1, data.rank), updates, reduction, y)
        return
    scattered = ctx.tmp("scattered", data.shape, data.dtype)
    ctx.op(
        "SCATTER_ND",
        [coords, updates, ctx.graph.const("shape", np.asarray(data.shape, np.int32))],
        [scattered],
    )
    binary(ctx, "ADD", data, scattered, y)


def _row_indices(ctx: Context, indices: ir.Value) -> Tensor | None:
    """The [n] row index vector whose Expand (after a Reshape / Unsqueeze to [n, 1, ...]) gives ``indices``
    (torch's ``x.scatter(0, rows.view(-1, 1, 1, 1).expand(...), updates)``: torchvision's MultiScaleRoIAlign
    merging its levels), or None."""
    expand = indices.producer()
    if expand is None or expand.op_type != "Expand" or ctx.is_const(indices):
        return None
    column = expand.inputs[0].producer()
    if column is None or column.op_type not in ("Reshape", "Unsqueeze") or column.inputs[0] is None:
        return None
    source, shape = column.inputs[0], ctx.shape(column.outputs[0])
    if len(ctx.shape(source)) != 1 or any(d != 1 for d in shape[1:]) or ctx.is_const(source):
        return None
    return ctx.tensor(source)


def _scatter_rows(ctx: Context, data: Tensor, rows: Tensor, updates: Tensor, y: Tensor) -> None:
    """Whole rows of ``updates`` written into ``data`` at run-time row indices: where(written, SCATTER_ND,
    data), ``written`` a SCATTER_ND of ones. Repeated rows are undefined in ONNX (SCATTER_ND sums them)."""
    index = rows if rows.dtype == np.int32 else ctx.tmp("rows", rows.shape, np.int32)
    if index is not rows:
        ctx.op("CAST", [rows], [index])
    index = _wrap_negative(ctx, index, _c(ctx, data.shape[0], np.int32)) if data.shape[0] >= 0 else index
    index = ctx.reshape(index, (-1, 1))
    shape = runtime_shape(ctx, data) if any(d < 0 for d in data.shape) else _c(ctx, data.shape, np.int32)
    scattered = ctx.tmp("scattered", data.shape, data.dtype)
    ctx.op("SCATTER_ND", [index, updates, shape], [scattered])
    ones = ctx.tmp("ones", (rows.shape[0],), np.float32)
    ctx.op("FILL", [runtime_shape(ctx, rows), _c(ctx, 1.0, np.float32)], [ones])
    hits = ctx.tmp("hits", (data.shape[0],), np.float32)
    ctx.op("SCATTER_ND", [index, ones, _first(ctx, shape)], [hits])
    written = ctx.tmp("written", hits.shape, np.bool_)
    ctx.op("GREATER", [hits, _c(ctx, 0.0, np.float32)], [written])
    mask = ctx.reshape(written, (-1, *([1] * (data.rank - 1))))
    ctx.op("SELECT_V2", [mask, scattered, data], [y])


def runtime_shape(ctx: Context, x: Tensor) -> Tensor:
    """SHAPE of a tensor sized at run time, int32 (ops_shape's, which imports this module)."""
    out = ctx.tmp("shape", (x.rank,), np.int32)
    opts = fb.ShapeOptionsT()
    opts.outType = fb.TensorType.INT32
    ctx.op("SHAPE", [x], [out], opts)
    return out


def _first(ctx: Context, shape: Tensor) -> Tensor:
    """[dims[0]] of a shape tensor."""
    out = ctx.tmp("rows_shape", (1,), np.int32)
    begin = ctx.graph.const("begin", np.array([0], np.int32))
    size = ctx.graph.const("size", np.array([1], np.int32))
    ctx.op("SLICE", [shape, begin, size], [out])
    return out


# -- TopK ------------------------------------------------------------------------------------------
def _top_k(ctx: Context, node: ir.Node, k: int | Tensor, axis: int, largest: int, sorted_: int) -> None:
    """``k`` is a tensor when it is computed at run time (after a detector's selection: at most the boxes kept)."""
    x = ctx.tensor(node.inputs[0])
    rank = x.rank
    axis = axis + rank if axis < 0 else axis
    if isinstance(k, Tensor):
        k_tensor = k
        if k.dtype != np.int32:
            k_tensor = ctx.tmp("k", k.shape, np.int32)
            ctx.op("CAST", [k], [k_tensor])
        scalar = ctx.tmp("k", (), np.int32)
        ctx.reshape(k_tensor, (), out=scalar)
        k_tensor, k = scalar, -1
    elif k > 0 and (k <= x.shape[axis] or x.shape[axis] < 0):  # sized at run time: LiteRT checks k there
        k_tensor = _c(ctx, k, np.int32)
    else:
        raise ctx.error(
            f"k={k} is outside [1, {x.shape[axis]}] (the size of axis {axis}; LiteRT has no empty outputs)"
        )
    values, indices = ctx.output(node.outputs[0]), ctx.output(node.outputs[1], dtype=np.int32)
    last = axis == rank - 1
    perm = [*range(axis), *range(axis + 1, rank), axis]
    moved = ctx.transpose(x, perm)
    if not largest:  # the k smallest are the k largest of -x (ties keep the lower index first)
        moved = binary(ctx, "MUL", moved, _c(ctx, -1, x.dtype), ctx.tmp("negated", moved.shape, x.dtype))
    shape = (*moved.shape[:-1], k)
    top_values = values if last and largest else ctx.tmp("values", shape, x.dtype)
    top_indices = indices if last else ctx.tmp("indices", shape, np.int32)
    ctx.op("TOPK_V2", [moved, k_tensor], [top_values, top_indices], fb.TopKV2OptionsT())
    if not largest:
        out = values if last else ctx.tmp("values", shape, x.dtype)
        top_values = binary(ctx, "MUL", top_values, _c(ctx, -1, x.dtype), out)
    if not last:
        back = [perm.index(i) for i in range(rank)]
        ctx.transpose(top_values, back, out=values)
        ctx.transpose(top_indices, back, out=indices)


@converter("TopK", since=1)
def top_k_v1(ctx: Context, node: ir.Node, *, k: int, axis: int = -1) -> None:
    _top_k(ctx, node, int(k), axis, 1, 1)


@converter("TopK", since=10)
def top_k_v10(ctx: Context, node: ir.Node, *, axis: int = -1) -> None:
    k = int(ctx.require_const(node.inputs[1], "TopK k").reshape(-1)[0])
    _top_k(ctx, node, k, axis, 1, 1)


@converter("TopK", since=11)
def top_k_v11(ctx: Context, node: ir.Node, *, axis: int = -1, largest: int = 1, sorted: int = 1) -> None:  # noqa: A002
    """sorted=0 leaves the order unspecified in ONNX: the sorted order is one of them."""
    if not ctx.is_const(node.inputs[1]) and node.outputs[0].name in ctx.dynamic:
        _top_k(ctx, node, ctx.tensor(node.inputs[1]), axis, largest, sorted)
        return
    k = int(ctx.require_const(node.inputs[1], "TopK k").reshape(-1)[0])
    _top_k(ctx, node, k, axis, largest, sorted)


# -- Trilu, OneHot, Hardmax ------------------------------------------------------------------------
@converter("Trilu", since=14)
def trilu(ctx: Context, node: ir.Node, *, upper: int = 1) -> None:
    """where(constant band mask, x, 0) over the last two dims."""
    x = ctx.tensor(node.inputs[0])
    k_value = _optional(node, 1)
    k = int(ctx.require_const(k_value, "Trilu k").reshape(-1)[0]) if k_value is not None else 0
    rows, cols = x.shape[-2], x.shape[-1]
    diagonal = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = diagonal >= k if upper else diagonal <= k
    ctx.op(
        "SELECT_V2", [ctx.graph.const("band", keep), x, _c(ctx, 0, x.dtype)], [ctx.output(node.outputs[0])]
    )


def _one_hot(ctx: Context, index: Tensor, depth: int, off: Tensor, on: Tensor, axis: int, y: Tensor) -> None:
    opts = fb.OneHotOptionsT()
    opts.axis = axis
    ctx.op("ONE_HOT", [index, _c(ctx, depth, np.int32), on, off], [y], opts)


@converter("OneHot", since=9)
def one_hot(ctx: Context, node: ir.Node, *, axis: int = -1) -> None:
    """ONE_HOT; negative indices count from ``depth`` (ONNX), float indices are truncated to integers."""
    depth = int(ctx.require_const(node.inputs[1], "OneHot depth").reshape(-1)[0])
    values = ctx.require_const(node.inputs[2], "OneHot values").reshape(-1)
    y = ctx.output(node.outputs[0])
    dtype = y.dtype
    constant = ctx.const(node.inputs[0])
    if constant is not None:
        truncated = np.trunc(constant).astype(np.int64)
        index = ctx.graph.const(
            "index", np.where(truncated < 0, truncated + depth, truncated).astype(np.int32)
        )
    else:
        index = _wrap_negative(ctx, ctx.tensor(node.inputs[0]), _c(ctx, depth, np.int32))
    rank = len(y.shape)
    axis = axis + rank if axis < 0 else axis
    _one_hot(ctx, index, depth, _c(ctx, values[0], dtype), _c(ctx, values[1], dtype), axis, y)


def _hardmax(ctx: Context, x: Tensor, axis: int, y: Tensor) -> None:
    """ONE_HOT of the (first) ARG_MAX along ``axis``."""
    opts = fb.ArgMaxOptionsT()
    opts.outputType = fb.TensorType.INT32
    reduced = tuple(d for i, d in enumerate(x.shape) if i != axis)
    index = ctx.tmp("argmax", reduced, np.int32)
    ctx.op("ARG_MAX", [x, ctx.graph.const("axis", np.array([axis], np.int32))], [index], opts)
    _one_hot(ctx, index, x.shape[axis], _c(ctx, 0, x.dtype), _c(ctx, 1, x.dtype), axis, y)


@converter("Hardmax", since=1)
def hardmax_v1(ctx: Context, node: ir.Node, *, axis: int = 1) -> None:
    """Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])]."""
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    axis = axis + x.rank if axis < 0 else axis
    flat = ctx.reshape(
        x, (int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)))
    )
    result = ctx.tmp("hardmax2d", flat.shape, x.dtype)
    _hardmax(ctx, flat, 1, result)
    ctx.reshape(result, y.shape, out=y)


@converter("Hardmax", since=13)
def hardmax_v13(ctx: Context, node: ir.Node, *, axis: int = -1) -> None:
    x = ctx.tensor(node.inputs[0])
    _hardmax(ctx, x, axis + x.rank if axis < 0 else axis, ctx.output(node.outputs[0]))


# -- Range / ConstantOfShape left by constant folding -----------------------------------------------
@converter("Range", since=11)
def range_(ctx: Context, node: ir.Node) -> None:
    """Folded when start, limit and delta are constants; otherwise its length depends on the data: after a
    detector's selection (a count of boxes kept) it is RANGE, whose output LiteRT sizes while the model runs."""
    if node.outputs[0].name in ctx.dynamic:
        y = ctx.output(node.outputs[0])
        parts = []
        for value in node.inputs:
            array = ctx.const(value)
            if array is not None:
                parts.append(_c(ctx, array.reshape(()), y.dtype))
                continue
            t = ctx.reshape(ctx.tensor(value), ())
            if t.dtype != y.dtype:
                cast = ctx.tmp("range_operand", (), y.dtype)
                ctx.op("CAST", [t], [cast])
                t = cast
            parts.append(t)
        ctx.op("RANGE", parts, [y])
        return
    raise ctx.error(
        "start, limit and delta are computed at run time, so the output length depends on the data "
        "(TFLite models here have static shapes)"
    )


@converter("ConstantOfShape", since=9)
def constant_of_shape(ctx: Context, node: ir.Node, *, value: object = None) -> None:
    """Folded when the shape is a constant; a run-time shape whose value shape inference knows is one too."""
    y_value = node.outputs[0]
    if y_value.name in ctx.dynamic and not ctx.is_const(node.inputs[0]):  # FILL a shape known at run time
        fill = value.numpy().reshape(-1)[0] if value is not None else np.float32(0)
        dims = ctx.tensor(node.inputs[0])
        if dims.dtype != np.int32:
            cast = ctx.tmp("dims", dims.shape, np.int32)
            ctx.op("CAST", [dims], [cast])
            dims = cast
        fill = np.asarray(fill)
        y = ctx.output(y_value, dtype=np.int32 if fill.dtype == np.int64 else fill.dtype)
        ctx.op("FILL", [dims, ctx.graph.const("value", fill.astype(y.dtype))], [y])
        return
    if y_value.shape is None or not all(isinstance(d, int) and d >= 0 for d in y_value.shape):
        raise ctx.error("the shape is computed at run time, so the output shape depends on the data")
    fill = value.numpy().reshape(-1)[0] if value is not None else np.float32(0)
    ctx.set_const(y_value, np.full(ctx.shape(y_value), fill, dtype=np.asarray(fill).dtype))
