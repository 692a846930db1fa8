"""NonMaxSuppression for the onnx reference evaluator, vectorised: the same selections as onnx's own.

onnx's reference NonMaxSuppression compares boxes one pair at a time in Python (``suppress_by_iou``): on a
detector's tail fed seeded samples (YOLOv8n at 640 with ``nms=True``: 8,400 candidates, 80 classes) it took most of
an arm-cpu fp32 deploy. This one keeps its algorithm and its arithmetic: per batch and class, the candidates above
the score bar in the order onnx's pops them (score descending, the lower index first among equal scores), each
candidate kept unless a kept box overlaps it by more than the IoU bar, computed by the same operations on the
same dtype (float32, or float64 in :mod:`edgekit.core.exact`), elementwise over the remaining candidates. Boxes or
scores that are not all finite (where Python's ``max`` and numpy's differ) go to onnx's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _bounds(boxes: np.ndarray, center_point_box: int) -> tuple[np.ndarray, ...]:
    """(x_min, x_max, y_min, y_max) of each box, as onnx's ``suppress_by_iou`` computes them."""
    if center_point_box == 0:  # [y1, x1, y2, x2]
        return (
            np.minimum(boxes[:, 1], boxes[:, 3]),
            np.maximum(boxes[:, 1], boxes[:, 3]),
            np.minimum(boxes[:, 0], boxes[:, 2]),
            np.maximum(boxes[:, 0], boxes[:, 2]),
        )
    half_w, half_h = boxes[:, 2] / 2, boxes[:, 3] / 2  # [x_center, y_center, width, height]
    return boxes[:, 0] - half_w, boxes[:, 0] + half_w, boxes[:, 1] - half_h, boxes[:, 1] + half_h


def _suppressed(
    bounds: tuple[np.ndarray, ...], rest: np.ndarray, kept: int, iou_threshold: Any
) -> np.ndarray:
    """Whether the box ``kept`` suppresses each box of ``rest`` (``suppress_by_iou(rest, kept)``, elementwise)."""
    x_min, x_max, y_min, y_max = bounds
    x1_min, x1_max, y1_min, y1_max = x_min[rest], x_max[rest], y_min[rest], y_max[rest]
    x2_min, x2_max, y2_min, y2_max = x_min[kept], x_max[kept], y_min[kept], y_max[kept]
    ix_min, ix_max = np.maximum(x1_min, x2_min), np.minimum(x1_max, x2_max)
    iy_min, iy_max = np.maximum(y1_min, y2_min), np.minimum(y1_max, y2_max)
    inter = (ix_max - ix_min) * (iy_max - iy_min)
    area1 = (x1_max - x1_min) * (y1_max - y1_min)
    area2 = (x2_max - x2_min) * (y2_max - y2_min)
    union = area1 + area2 - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / union
    overlap = (ix_max > ix_min) & (iy_max > iy_min) & (inter > 0)
    return overlap & (area1 > 0) & (area2 > 0) & (union > 0) & (iou > iou_threshold)


def select(
    boxes: np.ndarray,
    scores: np.ndarray,
    max_output_boxes_per_class: np.ndarray | None,
    iou_threshold: np.ndarray | None,
    score_threshold: np.ndarray | None,
    center_point_box: int,
) -> np.ndarray:
    """The selected ``[batch, class, box]`` rows (int64), in onnx's order."""
    limit = int(max(max_output_boxes_per_class[0], 0)) if _given(max_output_boxes_per_class) else 0
    iou_bar = iou_threshold[0] if _given(iou_threshold) else 0  # onnx's default when the tensor is empty
    rows: list[np.ndarray] = []
    for batch in range(boxes.shape[0]):
        bounds = _bounds(boxes[batch], center_point_box)
        for cls in range(scores.shape[1]):
            class_scores = scores[batch, cls]
            candidates = np.arange(class_scores.shape[0])
            if _given(score_threshold):
                candidates = candidates[class_scores > score_threshold[0]]
            # onnx sorts ascending by (score, then the higher index first) and pops from the end
            order = candidates[np.lexsort((candidates, -class_scores[candidates]))]
            kept: list[int] = []
            while order.size and len(kept) < limit:
                best = int(order[0])
                kept.append(best)
                rest = order[1:]
                order = rest[~_suppressed(bounds, rest, best, iou_bar)]
            if kept:
                found = np.empty((len(kept), 3), np.int64)
                found[:, 0], found[:, 1], found[:, 2] = batch, cls, kept
                rows.append(found)
    return np.concatenate(rows) if rows else np.empty((0, 3), np.int64)


def _given(tensor: np.ndarray | None) -> bool:
    return tensor is not None and np.size(tensor) != 0


def reference_op() -> type:
    """The op class for ``ReferenceEvaluator(new_ops=[...])`` (imported lazily: onnx.reference is slow)."""
    from onnx.reference.ops.op_non_max_suppression import NonMaxSuppression as Reference

    class NonMaxSuppression(Reference):
        def _run(
            self,
            boxes,
            scores,
            max_output_boxes_per_class=None,
            iou_threshold=None,
            score_threshold=None,
            center_point_box=None,
        ):
            # onnx's own where it is not the plain case: values that are not all finite, no limit or no IoU bar
            finite = np.isfinite(boxes).all() and np.isfinite(scores).all()
            if not finite or not _given(max_output_boxes_per_class) or iou_threshold is None:
                return super()._run(
                    boxes,
                    scores,
                    max_output_boxes_per_class,
                    iou_threshold,
                    score_threshold,
                    center_point_box,
                )
            return (
                select(
                    boxes,
                    scores,
                    max_output_boxes_per_class,
                    iou_threshold,
                    score_threshold,
                    int(center_point_box or 0),
                ),
            )

    return NonMaxSuppression
