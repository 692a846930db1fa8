"""An int8 half-pixel bilinear upsampling by 2 as ops that round like QuantizeLinear.

QuantizeLinear rounds half to even. A bilinear upsampling by an integer factor ``k`` with half-pixel centres
weighs its two source values by odd multiples of ``1 / 2k``, so at one scale in and out its exact result is a
.5 tie on a fixed share of the values (x2: ``(9a + 3b + 3c + d) / 16`` is one whenever the sum is 8 mod 16).
TFLite's int8 RESIZE_BILINEAR (and XNNPACK's) round those up: PP-LiteSeg's decoder had 4 % of its upsampled
values one step above its QDQ model's.

The same upsampling by 2 is, per axis, the source padded by its edge value, repeated twice (nearest), and
filtered by ``[1, 2, 1] / 4``: both axes at once, a 3 x 3 depthwise convolution whose integer weights ``t_h[i] *
t_w[j]`` (1, 2, 4) are exact at the weight scale ``1 / 16``. (Other factors need more than a filter after a
nearest upsampling: x4's phases would read three source values through the 7-tap triangle; they stay a
RESIZE_BILINEAR.) With the input's scale as its output scale its requantization multiplier is that power of
two, and XNNPACK's int8 convolution (LiteRT's default on arm-cpu) rounds it half to even: the QDQ model's
arithmetic, bit for bit.
The edge pad is SLICE + CONCATENATION per axis, the nearest x2 four copies along the channels and DEPTH_TO_SPACE
(ops XNNPACK runs: MIRROR_PAD and RESIZE_NEAREST_NEIGHBOR split its partitions), then SLICE and
DEPTHWISE_CONV_2D: all exact copies but the last.
"""

from __future__ import annotations

import numpy as np
from edgekit.targets.tflite.graph import Graph, Op, Quant, Tensor
from edgekit.targets.tflite.schema import fb

#: The factors rewritten per axis (1: that axis is not resized).
FACTORS = (1, 2)


def _factor(x: Tensor, y: Tensor, axis: int) -> int | None:
    if x.shape[axis] <= 0 or y.shape[axis] % x.shape[axis]:
        return None
    k = y.shape[axis] // x.shape[axis]
    return k if k in FACTORS else None


def _triangle(k: int) -> np.ndarray:
    return np.array([*range(1, k + 1), *range(k - 1, 0, -1)], np.int64)


def exact_bilinear_upsampling(graph: Graph) -> Graph:
    """Each int8 RESIZE_BILINEAR (half-pixel centres, one scale in and out, factors of ``FACTORS``, not both 1)
    becomes the four ops of the module docstring."""
    for op in [op for op in graph.ops if op.code == "RESIZE_BILINEAR"]:
        x, y = op.inputs[0], op.outputs[0]
        opts = op.options
        if x is None or x.dtype != np.int8 or y.dtype != np.int8 or not x.quant or not x.quant.per_tensor:
            continue
        if not x.quant.same_as(y.quant) or opts is None or opts.alignCorners or not opts.halfPixelCenters:
            continue
        if x.rank != 4 or x.shape[0] != y.shape[0] or x.shape[3] != y.shape[3]:
            continue
        kh, kw = _factor(x, y, 1), _factor(x, y, 2)
        if kh is None or kw is None or kh == kw == 1:
            continue
        graph.ops[graph.ops.index(op) : graph.ops.index(op) + 1] = _upsampling(graph, op, x, y, kh, kw)
        graph.notes.append(
            f"RESIZE_BILINEAR x{kh}/x{kw} ({op.origin}) as edge pad, nearest upsampling and a depthwise triangle "
            "filter: rounds half to even, as QuantizeLinear"
        )
    return graph


def _upsampling(graph: Graph, op: Op, x: Tensor, y: Tensor, kh: int, kw: int) -> list[Op]:
    n, h, w, c = x.shape
    quant = x.quant

    def like(name: str, shape: tuple[int, ...]) -> Tensor:
        return graph.tensor(f"{y.name}/{name}", shape, np.int8, quant=Quant(quant.scale, quant.zero_point))

    ops: list[Op] = []

    def edge_pad(t: Tensor, axis: int) -> Tensor:
        """``t`` with its first and last row (``axis`` 1) or column (2) repeated: SLICE, SLICE, CONCATENATION."""
        shape = list(t.shape)
        size = [*shape[:axis], 1, *shape[axis + 1 :]]
        ends = []
        for start in (0, shape[axis] - 1):
            begin = [0, 0, 0, 0]
            begin[axis] = start
            ends.append(like("edge", tuple(size)))
            ops.append(Op("SLICE", [t, graph.const("begin", begin, np.int32), graph.const("size", size, np.int32)],
                          [ends[-1]], fb.SliceOptionsT(), op.origin))  # fmt: skip
        shape[axis] += 2
        out = like("edge_pad", tuple(shape))
        opts = fb.ConcatenationOptionsT()
        opts.axis = axis
        ops.append(Op("CONCATENATION", [ends[0], t, ends[1]], [out], opts, op.origin))
        return out

    padded = edge_pad(edge_pad(x, 1), 2)
    repeated = like("nearest", (n, (h + 2) * kh, (w + 2) * kw, c))
    if kh == kw == 2:
        # nearest x2 as XNNPACK runs it: four copies along the channels, DEPTH_TO_SPACE
        tiled = like("tiled", (n, h + 2, w + 2, 4 * c))
        cat = fb.ConcatenationOptionsT()
        cat.axis = 3
        d2s = fb.DepthToSpaceOptionsT()
        d2s.blockSize = 2
        ops += [Op("CONCATENATION", [padded] * 4, [tiled], cat, op.origin),
                Op("DEPTH_TO_SPACE", [tiled], [repeated], d2s, op.origin)]  # fmt: skip
    else:
        nearest_opts = fb.ResizeNearestNeighborOptionsT()
        nearest_opts.alignCorners, nearest_opts.halfPixelCenters = False, False
        size = graph.const("size", repeated.shape[1:3], np.int32)
        ops.append(Op("RESIZE_NEAREST_NEIGHBOR", [padded, size], [repeated], nearest_opts, op.origin))
    window = like("window", (n, h * kh + 2 * kh - 2, w * kw + 2 * kw - 2, c))
    filt = np.outer(_triangle(kh), _triangle(kw))  # [2kh - 1, 2kw - 1], integers up to 4
    weight_scale = 1.0 / float(kh * kh * kw * kw)
    weights = Tensor(
        graph.unique_name(f"{y.name}/triangle"),
        (1, *filt.shape, c),
        np.int8,
        data=np.repeat(filt[None, :, :, None], c, axis=3).astype(np.int8),
        quant=Quant([weight_scale], [0]),
    )
    bias_scale = float(np.float32(quant.scale[0]) * np.float32(weight_scale))
    bias = Tensor(
        graph.unique_name(f"{y.name}/triangle_bias"), (c,), np.int32, data=np.zeros(c, np.int32),
        quant=Quant([bias_scale], [0]),
    )  # fmt: skip
    conv_opts = fb.DepthwiseConv2DOptionsT()
    conv_opts.padding = fb.Padding.VALID
    conv_opts.strideH = conv_opts.strideW = conv_opts.depthMultiplier = 1
    conv_opts.dilationHFactor = conv_opts.dilationWFactor = 1
    return [
        *ops,
        Op("SLICE", [repeated, graph.const("begin", [0, 1, 1, 0], np.int32),
                     graph.const("size", window.shape, np.int32)], [window], fb.SliceOptionsT(), op.origin),
        Op("DEPTHWISE_CONV_2D", [window, weights, bias], [y], conv_opts, op.origin),
    ]  # fmt: skip
