"""Converters for the data-dependent ops of a detector's selection: NonZero and NonMaxSuppression, whose output
sizes LiteRT sets while the model runs (see :mod:`.selection`).

NonZero is WHERE (coordinates as rows, int64) cast to int32 and transposed to ONNX's [rank, count].
NonMaxSuppression is one NON_MAX_SUPPRESSION_V4 per batch image and class (LiteRT's kernel takes one [boxes, 4]
set and its [boxes] scores): its selected indices, sliced to the count it returns, beside the batch and class
index as ONNX's [selected, 3] rows, in ONNX's order (batch, class, then descending score).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_shape import _optional, runtime_shape
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _i32(ctx: Context, value: object) -> Tensor:
    return ctx.graph.const("c", np.asarray(value, dtype=np.int32))


@converter("NonZero", since=9)
def non_zero(ctx: Context, node: ir.Node) -> None:
    x = ctx.tensor(node.inputs[0])
    if x.dtype != np.bool_:
        mask = ctx.tmp("nonzero", x.shape, np.bool_)
        ctx.op("NOT_EQUAL", [x, ctx.graph.const("zero", np.zeros((), x.dtype))], [mask])
        x = mask
    coords = ctx.tmp("where", (-1, x.rank), np.int64)
    ctx.op("WHERE", [x], [coords])
    rows = ctx.tmp("coords", (-1, x.rank), np.int32)
    ctx.op("CAST", [coords], [rows])
    ctx.transpose(rows, (1, 0), out=ctx.output(node.outputs[0], dtype=np.int32))


def _scalar(ctx: Context, value: ir.Value | None, what: str, default: float) -> float:
    if value is None:
        return default
    return float(ctx.require_const(value, what).reshape(-1)[0])


def _corners(ctx: Context, boxes: Tensor) -> Tensor:
    """[x_center, y_center, width, height] rows as corners (center_point_box=1): one FULLY_CONNECTED."""
    half = np.float32(0.5)
    weights = np.array(
        [[1, 0, -half, 0], [0, 1, 0, -half], [1, 0, half, 0], [0, 1, 0, half]], dtype=np.float32
    )  # out x in: x1 = xc - w/2, y1 = yc - h/2, x2 = xc + w/2, y2 = yc + h/2
    out = ctx.tmp("corners", boxes.shape, np.float32)
    opts = fb.FullyConnectedOptionsT()
    opts.keepNumDims = True
    ctx.op("FULLY_CONNECTED", [boxes, ctx.graph.const("corner_weights", weights), None], [out], opts)
    return out


def _apart(ctx: Context, boxes: Tensor, index: Tensor, b: int) -> Tensor:
    """``boxes`` [n, 4] with each box of zero area moved to a unit box of its own far from the others.

    ONNX never suppresses a box of zero area nor lets it suppress one (onnxruntime: its IoU is 0); LiteRT's
    kernel returns the first such box over and over (a seeded verification sample makes many, a detector whose
    boxes are clipped to the image can too). A unit box at 1e6 + 4 * index overlaps nothing, as ONNX has it."""
    sides = ctx.tmp(f"sides{b}", (boxes.shape[0], 2), np.float32)
    opts = fb.FullyConnectedOptionsT()
    opts.keepNumDims = True
    differences = np.array([[-1, 0, 1, 0], [0, -1, 0, 1]], dtype=np.float32)
    ctx.op("FULLY_CONNECTED", [boxes, ctx.graph.const("sides", differences), None], [sides], opts)
    lengths = ctx.tmp(f"lengths{b}", sides.shape, np.float32)
    ctx.op("ABS", [sides], [lengths])
    area = ctx.tmp(f"area{b}", (boxes.shape[0], 1), np.float32)
    keep = fb.ReducerOptionsT()
    keep.keepDims = True
    ctx.op("REDUCE_PROD", [lengths, _i32(ctx, [1])], [area], keep)
    real = ctx.tmp(f"real{b}", area.shape, np.bool_)
    ctx.op("GREATER", [area, ctx.graph.const("zero", np.float32(0))], [real])
    place = ctx.tmp(f"place{b}", index.shape, np.float32)
    ctx.op("CAST", [index], [place])
    low = ctx.tmp(f"far{b}", index.shape, np.float32)
    ctx.op("MUL", [place, ctx.graph.const("spacing", np.float32(4))], [low], fb.MulOptionsT())
    start = ctx.tmp(f"far{b}", index.shape, np.float32)
    ctx.op("ADD", [low, ctx.graph.const("far", np.float32(1e6))], [start], fb.AddOptionsT())
    end = ctx.tmp(f"far{b}", index.shape, np.float32)
    ctx.op("ADD", [start, ctx.graph.const("one", np.float32(1))], [end], fb.AddOptionsT())
    far = ctx.tmp(f"far_boxes{b}", boxes.shape, np.float32)
    pack = fb.PackOptionsT()
    pack.valuesCount = 4
    pack.axis = 1
    ctx.op("PACK", [start, start, end, end], [far], pack)
    out = ctx.tmp(f"apart{b}", boxes.shape, np.float32)
    ctx.op("SELECT_V2", [real, boxes, far], [out])
    return out


def _take(ctx: Context, x: Tensor, index: int, name: str) -> Tensor:
    """x[index] along the first axis."""
    out = ctx.tmp(name, x.shape[1:], x.dtype)
    ctx.op("GATHER", [x, _i32(ctx, index)], [out], fb.GatherOptionsT())
    return out


@converter("NonMaxSuppression", since=10)
def non_max_suppression(ctx: Context, node: ir.Node, *, center_point_box: int = 0) -> None:
    boxes = ctx.tensor(node.inputs[0])
    scores = ctx.tensor(node.inputs[1])
    if boxes.rank != 3 or scores.rank != 3 or boxes.shape[0] < 0 or scores.shape[1] < 0:
        raise ctx.error(
            f"boxes {list(boxes.shape)} and scores {list(scores.shape)} need a known batch and class count"
        )
    batches, classes = boxes.shape[0], scores.shape[1]
    limit = _optional(node, 2)
    per_class = int(ctx.require_const(limit, "max_output_boxes_per_class").reshape(-1)[0]) if limit else 0
    per_class = min(max(per_class, 0), np.iinfo(np.int32).max)
    if per_class == 0:
        raise ctx.error("max_output_boxes_per_class is 0 (or absent): the model keeps no box")
    # LiteRT suppresses a box whose overlap reaches the bar, ONNX one that passes it: the next float32 up
    iou = float(
        np.nextafter(np.float32(_scalar(ctx, _optional(node, 3), "iou_threshold", 0.0)), np.float32(np.inf))
    )
    threshold = _optional(node, 4)
    # ONNX drops a box whose score is not above score_threshold; without one it keeps every box
    score = _scalar(ctx, threshold, "score_threshold", float(np.finfo(np.float32).min))
    # the box count, each box's index and its rank score (count - position), the same for every image and class
    count, index = _box_index(ctx, boxes)
    left = ctx.tmp("left", (boxes.shape[1],), np.int32)
    ctx.op("SUB", [count, index], [left], fb.SubOptionsT())
    rank = ctx.tmp("rank", left.shape, np.float32)
    ctx.op("CAST", [left], [rank])
    size = ctx.tmp("max_output", (), np.int32)  # at most as many as there are boxes
    ctx.op("MINIMUM", [count, _i32(ctx, per_class)], [size])
    rows = []
    for b in range(batches):
        image_boxes = _take(ctx, boxes, b, f"boxes{b}")
        if center_point_box:
            image_boxes = _corners(ctx, image_boxes)
        image_boxes = _apart(ctx, image_boxes, index, b)
        image_scores = _take(ctx, scores, b, f"scores{b}")
        for c in range(classes):
            class_scores = _take(ctx, image_scores, c, f"scores{b}_{c}")
            ranked, order = _ranked(ctx, class_scores, count, rank, score, b, c)
            rows.append(_select(ctx, image_boxes, ranked, order, size, iou, b, c))
    y = ctx.output(node.outputs[0], shape=(-1, 3), dtype=np.int32)
    if len(rows) == 1:
        ctx.reshape(rows[0], (-1, 3), out=y)
        return
    opts = fb.ConcatenationOptionsT()
    opts.axis = 0
    ctx.op("CONCATENATION", rows, [y], opts)


def _box_index(ctx: Context, boxes: Tensor) -> tuple[Tensor, Tensor]:
    """The number of boxes in ``boxes`` [batch, n, 4] (a scalar) and 0 .. n - 1: constants when n is static."""
    n = boxes.shape[1]
    if n >= 0:
        return _i32(ctx, n), _i32(ctx, np.arange(n))
    count = ctx.tmp("box_count", (), np.int32)
    ctx.op("GATHER", [runtime_shape(ctx, boxes), _i32(ctx, 1)], [count], fb.GatherOptionsT())
    index = ctx.tmp("box_index", (-1,), np.int32)
    ctx.op("RANGE", [_i32(ctx, 0), count, _i32(ctx, 1)], [index])
    return count, index


def _ranked(
    ctx: Context, scores: Tensor, count: Tensor, rank: Tensor, score: float, b: int, c: int
) -> tuple[Tensor, Tensor]:
    """Scores LiteRT's NMS orders as onnxruntime does, and the box order they are in.

    LiteRT's kernel takes equal scores in no set order; onnxruntime takes the lower box index first (int8 scores
    tie often). TOPK_V2, which breaks ties by the lower index, sorts the boxes; the NMS then reads each box's
    rank as its score (``rank``: count - position, distinct, exact in float32 below 2**24), and -1 for a box at
    or below ``score``, which a threshold of 0 drops as ONNX drops it."""
    order = ctx.tmp(f"order{b}_{c}", (-1,), np.int32)
    sorted_scores = ctx.tmp(f"sorted{b}_{c}", (-1,), np.float32)
    ctx.op("TOPK_V2", [scores, count], [sorted_scores, order], fb.TopKV2OptionsT())
    above = ctx.tmp(f"above{b}_{c}", (-1,), np.bool_)
    ctx.op("GREATER", [sorted_scores, ctx.graph.const("score", np.float32(score))], [above])
    ranked = ctx.tmp(f"ranked{b}_{c}", (-1,), np.float32)
    ctx.op("SELECT_V2", [above, rank, ctx.graph.const("below", np.float32(-1))], [ranked])
    return ranked, order


def _select(
    ctx: Context, boxes: Tensor, ranked: Tensor, order: Tensor, size: Tensor, iou: float, b: int, c: int
) -> Tensor:
    """One class's [selected, 3] rows (b, c, box index), from its :func:`_ranked` scores and box order."""
    sorted_boxes = ctx.tmp(f"sorted_boxes{b}_{c}", boxes.shape, np.float32)
    ctx.op("GATHER", [boxes, order], [sorted_boxes], fb.GatherOptionsT())
    padded = ctx.tmp(f"selected{b}_{c}", (-1,), np.int32)
    valid = ctx.tmp(f"valid{b}_{c}", (), np.int32)
    bars = [ctx.graph.const("iou", np.float32(iou)), ctx.graph.const("score", np.float32(0))]
    ctx.op(
        "NON_MAX_SUPPRESSION_V4",
        [sorted_boxes, ranked, size, *bars],
        [padded, valid],
        fb.NonMaxSuppressionV4OptionsT(),
    )
    length = ctx.reshape(valid, (1,), out=ctx.tmp(f"length{b}_{c}", (1,), np.int32))
    kept = ctx.tmp(f"kept_ranks{b}_{c}", (-1,), np.int32)
    ctx.op("SLICE", [padded, _i32(ctx, [0]), length], [kept], fb.SliceOptionsT())
    selected = ctx.tmp(f"kept{b}_{c}", (-1,), np.int32)
    ctx.op("GATHER", [order, kept], [selected], fb.GatherOptionsT())
    zero = ctx.tmp(f"zeros{b}_{c}", (-1,), np.int32)
    ctx.op("MUL", [selected, _i32(ctx, 0)], [zero], fb.MulOptionsT())
    columns = []
    for value in (b, c):
        column = ctx.tmp(f"index{b}_{c}", (-1,), np.int32)
        ctx.op("ADD", [zero, _i32(ctx, value)], [column], fb.AddOptionsT())
        columns.append(column)
    rows = ctx.tmp(f"rows{b}_{c}", (-1, 3), np.int32)
    opts = fb.PackOptionsT()
    opts.valuesCount = 3
    opts.axis = 1
    ctx.op("PACK", [*columns, selected], [rows], opts)
    return rows
