"""RoiAlign over boxes whose count is known at run time only (a two-stage detector's RoI head after its RPN's
selection: torchvision's MultiScaleRoIAlign), written with builtins: TFLite has no RoiAlign.

A static box count is rewritten before conversion (``edgekit.core.roi_align``: one GridSample). Here the K boxes
come from a NonMaxSuppression, so every tensor has a first dim LiteRT sizes while the model runs, and no op may
take K from the file. Per axis (y: rows, x: columns) each box gives ``bins * s`` sample coordinates ``start + t *
size`` ([K, bins * s], ``t`` a constant row), onnxruntime's bilinear rule on each: a sample outside ``[-1, size]``
weighs 0, one in ``[-1, 0]`` is read at 0, one at or beyond ``size - 1`` at ``size - 1``; its two neighbours'
indices and weights are interleaved as [K, 2 * bins * s]. Rows times the map's width plus columns index the
NHWC map flattened to [H * W, C] (one GATHER, [K, 2A, 2B, C]); each read is weighed by its row and column
weights, a SUM over each bin's 2s x 2s reads (the s x s samples and their 2 x 2 neighbours) divided by s * s is
RoiAlign's average. Every op there sizes its output from its input while the model runs, also for no box
(LiteRT's AVERAGE_POOL_2D leaves its output's shape unset on an empty batch: not used).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import NCHW_TO_NHWC, NHWC_TO_NCHW, Context, attr_text
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.ops_gridsample import _c, _unary
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _column(ctx: Context, boxes: Tensor, index: int) -> Tensor:
    out = ctx.tmp(f"box_column{index}", (boxes.shape[0], 1))
    opts = fb.GatherOptionsT()
    opts.axis = 1
    ctx.op("GATHER", [boxes, ctx.graph.const("column", np.array([index], np.int32))], [out], opts)
    return out


def _interleave(ctx: Context, a: Tensor, b: Tensor, hint: str, dtype: type = np.float32) -> Tensor:
    """[K, n] and [K, n] -> [K, 2n] as a0 b0 a1 b1 ..."""
    k, n = a.shape
    pair = ctx.tmp(hint + "_pairs", (k, n, 2), dtype)
    opts = fb.ConcatenationOptionsT()
    opts.axis = 2
    ctx.op("CONCATENATION", [ctx.reshape(a, (-1, n, 1)), ctx.reshape(b, (-1, n, 1))], [pair], opts)
    return ctx.reshape(pair, (-1, 2 * n))


def _axis(
    ctx: Context, boxes: Tensor, first: int, bins: int, s: int, limit: int, offset: float, aligned: bool
) -> tuple[Tensor, Tensor]:
    """One axis' neighbour indices and bilinear weights [K, 2 * bins * s] (float32, the indices exact)."""
    k, n = boxes.shape[0], bins * s
    start = _column(ctx, boxes, first)
    end = _column(ctx, boxes, first + 2)
    if offset:
        start = binary(ctx, "SUB", start, _c(ctx, offset), ctx.tmp("start", start.shape))
        end = binary(ctx, "SUB", end, _c(ctx, offset), ctx.tmp("end", end.shape))
    size = binary(ctx, "SUB", end, start, ctx.tmp("size", start.shape))
    if not aligned:  # output_half_pixel: a box is at least one pixel
        size = binary(ctx, "MAXIMUM", size, _c(ctx, 1.0), ctx.tmp("size_min", size.shape))
    t = ((np.arange(bins)[:, None] + (np.arange(s)[None, :] + 0.5) / s) / bins).reshape(1, -1)
    spread = binary(ctx, "MUL", size, _c(ctx, t), ctx.tmp("spread", (k, n)))
    pos = binary(ctx, "ADD", start, spread, ctx.tmp("position", (k, n)))
    low_ok = _unary(ctx, "CAST", binary(ctx, "GREATER_EQUAL", pos, _c(ctx, -1.0), ctx.tmp("above", (k, n), np.bool_)),
                    "above_f")  # fmt: skip
    high_ok = _unary(ctx, "CAST", binary(ctx, "LESS_EQUAL", pos, _c(ctx, float(limit)), ctx.tmp("below", (k, n), np.bool_)),
                     "below_f")  # fmt: skip
    inside = binary(ctx, "MUL", low_ok, high_ok, ctx.tmp("inside", (k, n)))
    last = _c(ctx, float(limit - 1))
    clamped = binary(ctx, "MAXIMUM", pos, _c(ctx, 0.0), ctx.tmp("clamp_low", (k, n)))
    clamped = binary(ctx, "MINIMUM", clamped, last, ctx.tmp("clamped", (k, n)))
    low = _unary(ctx, "FLOOR", clamped, "low")
    high = binary(ctx, "ADD", low, _c(ctx, 1.0), ctx.tmp("high_unclamped", (k, n)))
    high = binary(ctx, "MINIMUM", high, last, ctx.tmp("high", (k, n)))
    frac = binary(ctx, "SUB", clamped, low, ctx.tmp("frac", (k, n)))
    rest = binary(ctx, "SUB", _c(ctx, 1.0), frac, ctx.tmp("rest", (k, n)))
    w_low = binary(ctx, "MUL", rest, inside, ctx.tmp("w_low", (k, n)))
    w_high = binary(ctx, "MUL", frac, inside, ctx.tmp("w_high", (k, n)))
    return _interleave(ctx, low, high, "index"), _interleave(ctx, w_low, w_high, "weight")


@converter("RoiAlign", since=10)
def roi_align(
    ctx: Context,
    node: ir.Node,
    *,
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
    coordinate_transformation_mode: str | None = None,
) -> None:
    x_shape = ctx.shape(node.inputs[0])
    mode_name = attr_text(mode)
    # opset 10 has no coordinate_transformation_mode: its rule is output_half_pixel
    ctm = attr_text(coordinate_transformation_mode) if coordinate_transformation_mode is not None else (
        "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
    )  # fmt: skip
    s = int(sampling_ratio)
    if len(x_shape) != 4 or x_shape[0] != 1 or mode_name != "avg" or s <= 0 or min(x_shape[2:]) < 1:
        raise ctx.error(
            f"RoiAlign with mode {mode_name!r}, sampling_ratio {s} on a map of shape {list(x_shape)} is not "
            "supported (mode avg, a fixed sampling_ratio above 0 and a batch-1 map are)"
        )
    _, c, h, w = x_shape
    if h * w >= 2**24:
        raise ctx.error(f"RoiAlign over a {h}x{w} map is too large (below 2**24 positions is supported)")
    oh, ow = int(output_height), int(output_width)
    x, rois = ctx.tensor(node.inputs[0]), ctx.tensor(node.inputs[1])
    if x.dtype != np.float32 or rois.dtype != np.float32:
        raise ctx.error(f"RoiAlign of {x.dtype} data and {rois.dtype} boxes is not supported (float32 is)")
    aligned = ctm == "half_pixel"
    boxes = binary(ctx, "MUL", rois, _c(ctx, float(spatial_scale)), ctx.tmp("scaled_boxes", rois.shape))
    offset = 0.5 if aligned else 0.0
    rows, wy = _axis(ctx, boxes, 1, oh, s, h, offset, aligned)
    cols, wx = _axis(ctx, boxes, 0, ow, s, w, offset, aligned)
    a, b = 2 * oh * s, 2 * ow * s
    row_base = binary(ctx, "MUL", rows, _c(ctx, float(w)), ctx.tmp("row_base", rows.shape))
    index = binary(ctx, "ADD", ctx.reshape(row_base, (-1, a, 1)), ctx.reshape(cols, (-1, 1, b)),
                   ctx.tmp("flat_index", (-1, a, b)))  # fmt: skip
    index = _unary(ctx, "CAST", index, "flat_index_i32", np.int32)
    weight = binary(ctx, "MUL", ctx.reshape(wy, (-1, a, 1)), ctx.reshape(wx, (-1, 1, b)),
                    ctx.tmp("weight", (-1, a, b)))  # fmt: skip
    table = ctx.reshape(ctx.transpose(x, NCHW_TO_NHWC), (h * w, c))
    reads = ctx.tmp("reads", (-1, a, b, c))
    opts = fb.GatherOptionsT()
    opts.axis = 0
    ctx.op("GATHER", [table, index], [reads], opts)
    weighted = binary(ctx, "MUL", reads, ctx.reshape(weight, (-1, a, b, 1)), ctx.tmp("weighted", reads.shape))
    # [K * oh, 2s, ow, 2s, C]: each bin's samples and their neighbours on axes 1 and 3
    bins = ctx.reshape(weighted, (-1, 2 * s, ow, 2 * s, c))
    summed = ctx.tmp("bin_sums", (-1, ow, c))
    keep = fb.ReducerOptionsT()
    keep.keepDims = False
    ctx.op("SUM", [bins, ctx.graph.const("axes", np.array([1, 3], np.int32))], [summed], keep)
    mean = binary(ctx, "MUL", summed, _c(ctx, 1.0 / (s * s)), ctx.tmp("bin_means", summed.shape))
    pooled = ctx.reshape(mean, (-1, oh, ow, c))
    ctx.transpose(pooled, NHWC_TO_NCHW, out=ctx.output(node.outputs[0]))
