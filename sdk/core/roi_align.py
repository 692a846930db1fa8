"""ONNX RoiAlign (opset 16, ``mode="avg"``, a fixed ``sampling_ratio``) over a batch-1 feature map written out
as one GridSample: TFLite has no RoiAlign.

Box ``k``'s bin ``(by, bx)`` averages ``s x s`` bilinear samples at ``y = y1 * scale - off + (by + (iy + 0.5) /
s) * h / output_height`` (and x alike), ``off`` 0.5 for ``half_pixel`` (aligned) and 0 for ``output_half_pixel``
(where the box size is at least 1). With ``t = (b + (i + 0.5) / s) / output`` a constant vector, every sample
coordinate is ``start + t * size``: one broadcast Mul + Add per axis from the boxes. RoiAlign's bilinear clamps a
coordinate in ``[-1, 0]`` to 0 and in ``[size - 1, size]`` to ``size - 1`` and gives 0 beyond: GridSample with
``padding_mode="border"`` (``align_corners=1``, pixel coordinates scaled to [-1, 1]) times a mask of the samples
inside ``[-1, size]``. The grid of all boxes is one batch row ``[1, K * oh * s, ow * s, 2]`` (a batch-1 map: every
valid batch index is 0), the samples reordered to ``[K, C, oh * s, ow * s]`` and averaged by an AveragePool of
``s x s``. Other forms (max mode, adaptive sampling ratio 0, a batch above 1, dynamic shapes) keep the RoiAlign.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import IrWriter, NameScope, attr, grid_sample_linear, static_shape


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RoiAlignAsGridSamplePass(ir.passes.InPlacePass):
    """RoiAlign (avg, sampling_ratio > 0, batch-1 input, static shapes) -> GridSample + mask + AveragePool."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        linear = grid_sample_linear(model.opset_imports.get("", 1))
        for node in list(graph):
            if node.op_type != "RoiAlign" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
                continue
            xs, bs = static_shape(node.inputs[0].shape), static_shape(node.inputs[1].shape)
            s = int(attr(node, "sampling_ratio", 0))
            if (
                xs is None or bs is None or len(xs) != 4 or xs[0] != 1 or min(xs[2:]) < 2
                or len(bs) != 2 or bs[1] != 4 or s <= 0 or _text(attr(node, "mode", "avg")) != "avg"
            ):  # fmt: skip
                continue
            self._rewrite(graph, names, node, xs, bs[0], s, linear)
            modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _rewrite(graph, names, node, xs, k, s, linear) -> None:
        _, c, h, w = xs
        oh, ow = int(attr(node, "output_height", 1)), int(attr(node, "output_width", 1))
        scale = float(attr(node, "spatial_scale", 1.0))
        aligned = _text(attr(node, "coordinate_transformation_mode", "half_pixel")) == "half_pixel"
        wr = IrWriter(graph, names, node, node.inputs[0].dtype)
        boxes = wr.op("Mul", [node.inputs[1], wr.const("scale", np.array(scale, np.float32))], [k, 4])
        if aligned:
            boxes = wr.op("Sub", [boxes, wr.const("offset", np.array(0.5, np.float32))], [k, 4])
        start = wr.op(
            "Gather", [boxes, wr.const("starts", np.array([1, 0], np.int64))], [k, 2], axis=1
        )  # y, x
        end = wr.op("Gather", [boxes, wr.const("ends", np.array([3, 2], np.int64))], [k, 2], axis=1)
        size = wr.op("Sub", [end, start], [k, 2])
        if not aligned:
            size = wr.op("Max", [size, wr.const("one", np.array(1.0, np.float32))], [k, 2])
        coords = []
        for axis, (bins, limit) in enumerate(((oh, h), (ow, w))):
            t = ((np.arange(bins)[:, None] + (np.arange(s)[None, :] + 0.5) / s) / bins).reshape(1, -1)
            pick = wr.const("axis", np.array([axis], np.int64))
            a = wr.op("Gather", [start, pick], [k, 1], axis=1)
            b = wr.op("Gather", [size, pick], [k, 1], axis=1)
            pos = wr.op("Add", [a, wr.op("Mul", [b, wr.const("t", t.astype(np.float32))], [k, bins * s])],
                        [k, bins * s])  # fmt: skip
            inside = wr.op("Mul", [
                wr.op("Cast", [wr.op("GreaterOrEqual", [pos, wr.const("lo", np.array(-1.0, np.float32))],
                                     [k, bins * s], ir.DataType.BOOL)], [k, bins * s], to=ir.DataType.FLOAT),
                wr.op("Cast", [wr.op("LessOrEqual", [pos, wr.const("hi", np.array(float(limit), np.float32))],
                                     [k, bins * s], ir.DataType.BOOL)], [k, bins * s], to=ir.DataType.FLOAT),
            ], [k, bins * s])  # fmt: skip
            norm = wr.op(
                "Mul", [pos, wr.const("norm", np.array(2.0 / (limit - 1), np.float32))], [k, bins * s]
            )
            norm = wr.op("Sub", [norm, wr.const("one", np.array(1.0, np.float32))], [k, bins * s])
            coords.append((norm, inside))
        (gy, my), (gx, mx) = coords
        full = [k, oh * s, ow * s]
        gy3, gx3 = wr.reshape(gy, [k, oh * s, 1]), wr.reshape(gx, [k, 1, ow * s])
        zeros = wr.const("zeros", np.zeros((1, oh * s, ow * s), np.float32))
        gy3, gx3 = wr.op("Add", [gy3, zeros], full), wr.op("Add", [gx3, zeros], full)
        grid = wr.op("Concat", [wr.reshape(gx3, [*full, 1]), wr.reshape(gy3, [*full, 1])], [*full, 2], axis=3)
        grid = wr.reshape(grid, [1, k * oh * s, ow * s, 2])
        sampled = wr.op("GridSample", [node.inputs[0], grid], [1, c, k * oh * s, ow * s], mode=linear,
                        padding_mode="border", align_corners=1)  # fmt: skip
        mask = wr.op("Mul", [wr.reshape(my, [k, oh * s, 1]), wr.reshape(mx, [k, 1, ow * s])], full)
        sampled = wr.op(
            "Mul", [sampled, wr.reshape(mask, [1, 1, k * oh * s, ow * s])], [1, c, k * oh * s, ow * s]
        )
        sampled = wr.reshape(sampled, [c, k, oh * s, ow * s])
        sampled = wr.op("Transpose", [sampled], [k, c, oh * s, ow * s], perm=[1, 0, 2, 3])
        wr.done(node, wr.op("AveragePool", [sampled], [k, c, oh, ow], kernel_shape=[s, s], strides=[s, s]))
