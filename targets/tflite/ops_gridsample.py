"""GridSample (opset 16+) written with builtins: TFLite has no grid-sampling kernel.

The grid's normalised (x, y) become pixel coordinates as ONNX defines them (``align_corners``); each output
position reads K corners (bilinear: the 4 around the coordinate, nearest: the coordinate rounded half to even)
of the NHWC input flattened to [N*H*W, C] with one GATHER over all corners at once, weighs them and sums them.
Padding ``zeros`` gives a corner outside the input the weight 0 (its index clamped inside so the GATHER stays
in range); ``border`` clamps the coordinates into the input first. The corner indices are computed in float32
(exact integers below 2**24) and cast once. In a quantized model it has no int8 rule: it stays float.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import NCHW_TO_NHWC, NHWC_TO_NCHW, Context, attr_text
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb

_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest"}  # opset 16 / opset 20+ names
_PADDINGS = ("zeros", "border")
_CORNERS = {  # per mode: the (dx, dy) offsets of the corners read from the floored (or rounded) coordinate
    "linear": np.array([[0, 0], [1, 0], [0, 1], [1, 1]], np.float32),
    "nearest": np.array([[0, 0]], np.float32),
}


def _c(ctx: Context, value: object) -> Tensor:
    return ctx.graph.const("c", np.asarray(value, dtype=np.float32))


def _unary(ctx: Context, code: str, x: Tensor, hint: str, dtype: type = np.float32) -> Tensor:
    out = ctx.tmp(hint, x.shape, dtype)
    ctx.op(code, [x], [out])
    return out


def _reduce(ctx: Context, code: str, x: Tensor, axis: int, keep: bool) -> Tensor:
    opts = fb.ReducerOptionsT()
    opts.keepDims = keep
    shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape) if keep or i != axis)
    out = ctx.tmp(code.lower(), shape, x.dtype)
    ctx.op(code, [x, ctx.graph.const("axes", [axis], np.int32)], [out], opts)
    return out


def _pixels(ctx: Context, grid: Tensor, size: tuple[int, int], align_corners: bool) -> Tensor:
    """Normalised (x, y) -> pixel coordinates, in ONNX's order of operations (onnxruntime's too)."""
    plus_one = binary(ctx, "ADD", grid, _c(ctx, 1.0), ctx.tmp("plus_one", grid.shape))
    if align_corners:  # (x + 1) / 2 * (W - 1)
        half = binary(ctx, "MUL", plus_one, _c(ctx, 0.5), ctx.tmp("half", grid.shape))
        return binary(ctx, "MUL", half, _c(ctx, [s - 1 for s in size]), ctx.tmp("pixels", grid.shape))
    # ((x + 1) * W - 1) / 2
    scaled = binary(ctx, "MUL", plus_one, _c(ctx, size), ctx.tmp("scaled", grid.shape))
    minus_one = binary(ctx, "SUB", scaled, _c(ctx, 1.0), ctx.tmp("minus_one", grid.shape))
    return binary(ctx, "MUL", minus_one, _c(ctx, 0.5), ctx.tmp("pixels", grid.shape))


def _clamp(ctx: Context, x: Tensor, high: Tensor, hint: str) -> Tensor:
    low = binary(ctx, "MAXIMUM", x, _c(ctx, 0.0), ctx.tmp(hint + "_low", x.shape))
    return binary(ctx, "MINIMUM", low, high, ctx.tmp(hint, x.shape))


def _corner_weights(ctx: Context, pixels: Tensor, base: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Per bilinear corner and axis: 1 - frac (offset 0) or frac (offset 1)."""
    frac = binary(ctx, "SUB", pixels, base, ctx.tmp("frac", pixels.shape))
    offsets = _CORNERS["linear"][None, None]
    slope = binary(ctx, "MUL", frac, _c(ctx, 2 * offsets - 1), ctx.tmp("slope", shape))
    return binary(ctx, "ADD", slope, _c(ctx, 1 - offsets), ctx.tmp("axis_weights", shape))


@converter("GridSample", since=16)
def grid_sample(
    ctx: Context,
    node: ir.Node,
    *,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: int = 0,
) -> None:
    mode_name, padding = attr_text(mode), attr_text(padding_mode)
    x_shape, grid_shape = ctx.shape(node.inputs[0]), ctx.shape(node.inputs[1])
    if mode_name not in _MODES or padding not in _PADDINGS or len(x_shape) != 4:
        raise ctx.error(
            f"GridSample with mode {mode_name!r}, padding_mode {padding!r} on a {len(x_shape)}-D input is not "
            "supported (4-D inputs, mode bilinear/linear or nearest, padding_mode zeros or border are)"
        )
    x, grid = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    if x.dtype != np.float32 or grid.dtype != np.float32:
        raise ctx.error(f"GridSample of {x.dtype} data and a {grid.dtype} grid is not supported (float32 is)")
    n, c, h, w = x_shape
    if n * h * w >= 2**24:
        raise ctx.error(f"GridSample input of {n}x{h}x{w} positions is too large (below 2**24 is supported)")
    kind = _MODES[mode_name]
    corners = _CORNERS[kind]
    k, positions = len(corners), int(np.prod(grid_shape[1:3]))
    flat = (n, positions, 1, 2)
    pixels = _pixels(ctx, ctx.reshape(grid, flat), (w, h), bool(align_corners))
    limit = _c(ctx, [w - 1, h - 1])
    if padding == "border":
        pixels = _clamp(ctx, pixels, limit, "clamped_pixels")
    base = _unary(ctx, "FLOOR" if kind == "linear" else "ROUND", pixels, "base")
    spread = ctx.tmp("corners", (n, positions, k, 2))
    index = binary(ctx, "ADD", base, _c(ctx, corners[None, None]), spread)
    weights = _corner_weights(ctx, pixels, base, spread.shape) if kind == "linear" else None
    inside = _clamp(ctx, index, limit, "index_inside")
    if padding == "zeros":  # a corner its clamping moved is outside the input: weight 0
        kept = _unary(ctx, "CAST", _equal(ctx, index, inside), "kept")
        masked = ctx.tmp("masked", kept.shape)
        weights = kept if weights is None else binary(ctx, "MUL", weights, kept, masked)
    # Row of each corner in the [N*H*W, C] input: n*H*W + y*W + x.
    rows = binary(ctx, "MUL", inside, _c(ctx, [1, w]), ctx.tmp("row_terms", inside.shape))
    row = _reduce(ctx, "SUM", rows, 3, keep=False)
    batch = _c(ctx, (np.arange(n) * h * w).reshape(n, 1, 1))
    row = binary(ctx, "ADD", row, batch, ctx.tmp("row", row.shape))
    row_i32 = _unary(ctx, "CAST", row, "row_i32", np.int32)
    table = ctx.reshape(ctx.transpose(x, NCHW_TO_NHWC), (n * h * w, c))
    values = ctx.tmp("values", (n, positions, k, c))
    opts = fb.GatherOptionsT()
    opts.axis = 0
    ctx.op("GATHER", [table, row_i32], [values], opts)
    if weights is not None:
        weight = _reduce(ctx, "REDUCE_PROD", weights, 3, keep=True)
        values = binary(ctx, "MUL", values, weight, ctx.tmp("weighted", values.shape))
    total = _reduce(ctx, "SUM", values, 2, keep=False) if k > 1 else values
    nhwc = ctx.reshape(total, (n, *grid_shape[1:3], c))
    ctx.transpose(nhwc, NHWC_TO_NCHW, out=ctx.output(node.outputs[0]))


def _equal(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    out = ctx.tmp("equal", a.shape, np.bool_)
    ctx.op("EQUAL", [a, b], [out])
    return out
