"""ONNX DeformConv (opset 19: DCNv1 / DCNv2, torchvision's ``ops.deform_conv2d``, mmcv's
ModulatedDeformConv2d) written out as one GridSample and a 1x1 Conv.

Neither TFLite nor OpenVINO's ONNX frontend has DeformConv ("No conversion rule found for operations:
DeformConv-19"). Kernel tap ``t = (i, j)`` of output pixel ``(oy, ox)`` reads the input bilinearly at
``(oy * sh - pad_top + i * dh + dy, ox * sw - pad_left + j * dw + dx)``, zero outside the input, with
``(dy, dx) = offset[:, 2t : 2t + 2]``, times ``mask[:, t]``; the output is the weight's sum over channels and
taps. So: the offsets (reordered to x, y) plus the taps' constant base positions, scaled to GridSample's
normalised coordinates (``align_corners=1``: pixel 0 at -1, pixel W - 1 at +1; ``padding_mode="zeros"`` is
DeformConv's zero outside the input), sample all taps at once as a grid of ``T * Ho`` rows; the samples times the
mask, reshaped to ``[N, C * T, Ho, Wo]`` (channel ``c * T + t``), and a 1x1 Conv by the weight reshaped to
``[M, C * T, 1, 1]`` with DeformConv's bias. ``group`` and ``offset_group`` 1, static shapes, H and W above 1;
anything else keeps the DeformConv (and each target's typed refusal).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import IrWriter, NameScope, attr, grid_sample_linear, static_shape


def tap_positions(
    out_hw: tuple[int, int], kernel: tuple[int, int], strides, pads, dilations, in_hw: tuple[int, int]
) -> np.ndarray:
    """[T, Ho, Wo, 2]: each tap's undeformed (x, y) in GridSample's normalised coordinates."""
    (ho, wo), (kh, kw), (h, w) = out_hw, kernel, in_hw
    grid = np.zeros((kh * kw, ho, wo, 2), np.float64)
    oy, ox = np.meshgrid(np.arange(ho), np.arange(wo), indexing="ij")
    for i in range(kh):
        for j in range(kw):
            y = oy * strides[0] - pads[0] + i * dilations[0]
            x = ox * strides[1] - pads[1] + j * dilations[1]
            grid[i * kw + j, ..., 0] = 2.0 * x / (w - 1) - 1.0
            grid[i * kw + j, ..., 1] = 2.0 * y / (h - 1) - 1.0
    return grid.astype(np.float32)


class DeformConvAsGridSamplePass(ir.passes.InPlacePass):
    """DeformConv (group 1, offset_group 1, static shapes) -> GridSample + Mul + 1x1 Conv (module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        linear = grid_sample_linear(model.opset_imports.get("", 1))
        for node in list(graph):
            if node.op_type != "DeformConv" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 3:
                continue
            x, w, offset = node.inputs[:3]
            bias = node.inputs[3] if len(node.inputs) > 3 else None
            mask = node.inputs[4] if len(node.inputs) > 4 else None
            xs, ws = static_shape(x.shape, 4), static_shape(w.shape, 4)
            os_, ys = static_shape(offset.shape, 4), static_shape(node.outputs[0].shape, 4)
            if xs is None or ws is None or os_ is None or ys is None:
                continue
            if int(attr(node, "group", 1)) != 1 or int(attr(node, "offset_group", 1)) != 1:
                continue
            n, c, h, wd = xs
            m, _, kh, kw = ws
            taps, (ho, wo) = kh * kw, ys[2:]
            if h < 2 or wd < 2 or os_ != (n, 2 * taps, ho, wo):
                continue
            strides = list(attr(node, "strides", [1, 1]))
            dilations = list(attr(node, "dilations", [1, 1]))
            pads = list(attr(node, "pads", [0, 0, 0, 0]))
            wr = IrWriter(graph, names, node, x.dtype)
            off = wr.reshape(offset, [n, taps, 2, ho, wo])
            off = wr.op(
                "Gather", [off, wr.const("xy", np.array([1, 0], np.int64))], [n, taps, 2, ho, wo], axis=2
            )
            off = wr.op("Transpose", [off], [n, taps, ho, wo, 2], perm=[0, 1, 3, 4, 2])
            scale = np.array([2.0 / (wd - 1), 2.0 / (h - 1)], np.float32)
            grid = wr.op("Mul", [off, wr.const("scale", scale)], [n, taps, ho, wo, 2])
            shift = tap_positions((ho, wo), (kh, kw), strides, pads, dilations, (h, wd))
            grid = wr.op("Add", [grid, wr.const("taps", shift)], [n, taps, ho, wo, 2])
            grid = wr.reshape(grid, [n, taps * ho, wo, 2])
            sampled = wr.op("GridSample", [x, grid], [n, c, taps * ho, wo], mode=linear, padding_mode="zeros",
                            align_corners=1)  # fmt: skip
            sampled = wr.reshape(sampled, [n, c, taps, ho, wo])
            if mask is not None:
                sampled = wr.op(
                    "Mul", [sampled, wr.reshape(mask, [n, 1, taps, ho, wo])], [n, c, taps, ho, wo]
                )
            cols = wr.reshape(sampled, [n, c * taps, ho, wo])
            if w.const_value is not None:
                weight = wr.const("weight", w.const_value.numpy().reshape(m, c * taps, 1, 1))
            else:
                weight = wr.reshape(w, [m, c * taps, 1, 1])
            inputs = [cols, weight] + ([bias] if bias is not None else [])
            wr.done(node, wr.op("Conv", inputs, [n, m, ho, wo], kernel_shape=[1, 1]))
            modified = True
        return ir.passes.PassResult(model, modified)
