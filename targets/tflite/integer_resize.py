"""An int8 half-pixel bilinear upsampling by 2 as ops that round like QuantizeLinear; by other powers of two
(``exact_levels_resize``) on the levels in float32; and (``exact_float_taps``) the 3-D Resize / AveragePool taps
between int8 tensors computed on the levels, rounded half to even.

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

from collections.abc import Callable

import numpy as np
from edgekit.targets.tflite import exact_matmul
from edgekit.targets.tflite.graph import Graph, Op, Quant, Tensor
from edgekit.targets.tflite.schema import fb

#: The factors rewritten per axis (1: that axis is not resized).
FACTORS = (1, 2)


def _factor(x: Tensor, y: Tensor, axis: int, fits: Callable[[int], bool]) -> int | None:
    """``y``'s size over ``x``'s along ``axis`` when it is a whole number that ``fits``, else None."""
    if x.shape[axis] <= 0 or y.shape[axis] % x.shape[axis]:
        return None
    k = y.shape[axis] // x.shape[axis]
    return k if fits(k) else None


def _triangle(k: int) -> np.ndarray:
    return np.array([*range(1, k + 1), *range(k - 1, 0, -1)], np.int64)


def _int8_half_pixel(op: Op) -> bool:
    """An int8 RESIZE_BILINEAR with half-pixel centres, one per-tensor scale in and out, of the spatial axes of an
    NHWC tensor: what the exact rewrites of this module take."""
    x, y = op.inputs[0], op.outputs[0]
    opts = op.options
    if x is None or x.dtype != np.int8 or y.dtype != np.int8 or not x.quant or not x.quant.per_tensor:
        return False
    if not x.quant.same_as(y.quant) or opts is None or opts.alignCorners or not opts.halfPixelCenters:
        return False
    return x.rank == 4 and x.shape[0] == y.shape[0] and x.shape[3] == y.shape[3]


def exact_bilinear_upsampling(graph: Graph) -> Graph:
    """Each int8 RESIZE_BILINEAR (half-pixel centres, one scale in and out, factors of ``FACTORS``, not both 1)
    becomes the four ops of the module docstring."""
    for op in [op for op in graph.ops if op.code == "RESIZE_BILINEAR" and _int8_half_pixel(op)]:
        x, y = op.inputs[0], op.outputs[0]
        kh, kw = (_factor(x, y, axis, lambda k: k in FACTORS) for axis in (1, 2))
        if kh is None or kw is None or kh == kw == 1:
            continue
        graph.replace_op(op, _upsampling(graph, op, x, y, kh, kw))
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


# -- other power-of-two factors: the resize on the levels ----------------------------------------------------
#: the largest factor per axis resized on the levels: weights are multiples of ``1 / 2k``, the products of two
#: and a level (|q - zp| <= 255) stay exact in float32 far beyond it
MAX_LEVELS_FACTOR = 64


def _power_of_two(k: int) -> bool:
    return k <= MAX_LEVELS_FACTOR and k & (k - 1) == 0


def exact_levels_resize(graph: Graph) -> Graph:
    """Each int8 RESIZE_BILINEAR left after ``exact_bilinear_upsampling`` (half-pixel centres, one scale in and
    out, power-of-two factors up to ``MAX_LEVELS_FACTOR`` per axis) resized in float32 on the integer levels and
    rounded half to even: CAST + SUB of the zero point, a float RESIZE_BILINEAR, ROUND, MUL by the scale and
    QUANTIZE (``exact_matmul.levels`` / ``quantize_levels``).

    A half-pixel upsampling by ``k`` weighs its source values by odd multiples of ``1 / 2k``: at one scale in and
    out its exact result is a .5 tie on a fixed share of the values, which QuantizeLinear rounds to even and
    TFLite's int8 RESIZE_BILINEAR rounds up (DeepLabV3-MobileNetV3's logits upsampled x16 to the input size: 0.16 %
    of the output one step off, int8 .tflite vs QDQ cosine 0.9836 on 8 photos). With ``k`` a power of two the
    weights, their products with the levels and the sums are exact in float32 (the builtin kernel's
    ``a * (1 - dy) * (1 - dx) + ...`` and XNNPACK's ``t + (b - t) * alpha`` alike), so ROUND sees the exact value.
    A source of 1 x 1 (a pooled branch broadcast: no ties) stays the int8 kernel."""
    rewritten = []
    for op in [op for op in graph.ops if op.code == "RESIZE_BILINEAR" and _int8_half_pixel(op)]:
        x, y = op.inputs[0], op.outputs[0]
        if x.shape[1:3] == (1, 1):
            continue
        kh, kw = _factor(x, y, 1, _power_of_two), _factor(x, y, 2, _power_of_two)
        if kh is None or kw is None or kh == kw == 1:
            continue
        ops, lv = exact_matmul.levels(graph, x, op.origin)
        resized = graph.tensor(f"{y.name}/levels_resized", y.shape, np.float32)
        float_opts = fb.ResizeBilinearOptionsT()
        float_opts.alignCorners, float_opts.halfPixelCenters = False, True
        size = graph.const("size", np.array(y.shape[1:3], np.int32), np.int32)
        new = [
            *ops,
            Op("RESIZE_BILINEAR", [lv, size], [resized], float_opts, op.origin),
            *exact_matmul.quantize_levels(graph, resized, y, op.origin),
        ]
        graph.replace_op(op, new, integer=True)
        rewritten.append(f"x{kh}/x{kw} ({op.origin})")
    if rewritten:
        graph.notes.append(
            f"{len(rewritten)} int8 RESIZE_BILINEAR(s) {exact_matmul.listed(rewritten)}"
            " resized on the int8 levels in float32 (exact) and rounded half to even (ROUND), as QuantizeLinear"
        )
    return graph


# -- linear maps lowered as float taps between int8 tensors ------------------------------------------------
#: float ops a lowered linear map (``taps.weighted_sum``: GATHER, MUL by constant weights, ADD) is made of
_TAP_OPS = ("ADD", "MUL", "GATHER")


def _taps_tree(
    graph: Graph, root: Tensor, quant: Quant, producers, consumers
) -> tuple[list[Op], list[Op]] | None:
    """(ops, leaf DEQUANTIZEs) of the float linear map that computes ``root`` from int8 tensors of ``quant``
    (each read by an int8 GATHER and a DEQUANTIZE: ``taps.weighted_sum`` on a quantized tensor), else None.
    Homogeneous: ADDs of two taps, MULs by constants, GATHERs with constant indices, no fused activation; every
    tensor inside read only inside (an axis's sum feeds the next axis's taps); so it computes the same map on
    ``q - zero_point`` as on ``scale * (q - zero_point)``."""
    ops: dict[int, Op] = {}
    leaves: dict[int, Op] = {}
    inner: list[Tensor] = []
    multiplied = False
    stack = [root]
    while stack:
        t = stack.pop()
        op = producers.get(id(t))
        if op is None or graph.is_graph_output(t) or getattr(op.options, "fusedActivationFunction", 0):
            return None
        if id(op) in ops or id(op) in leaves:
            continue
        if t is not root:
            inner.append(t)
        if op.code == "DEQUANTIZE":
            x = op.inputs[0]
            gathered = producers.get(id(x))
            if (
                x.dtype != np.int8
                or not quant.same_as(x.quant)
                or gathered is None
                or gathered.code != "GATHER"
            ):
                return None
            leaves[id(op)] = op
            continue
        if op.code not in _TAP_OPS or len(op.outputs) != 1:
            return None
        if op.code == "GATHER":
            if op.inputs[0].is_const or not op.inputs[1].is_const:
                return None
            stack.append(op.inputs[0])
        elif op.code == "MUL":
            variable = [i for i in op.inputs if not i.is_const]
            if len(variable) != 1 or variable[0].dtype != np.float32:
                return None
            multiplied = True
            stack.append(variable[0])
        else:  # ADD of two taps (a constant addend would not be homogeneous)
            if any(i.is_const for i in op.inputs):
                return None
            stack.extend(op.inputs)
        ops[id(op)] = op
    inside = ops.keys() | leaves.keys()
    if any(id(u) not in inside for t in inner for u in consumers.get(id(t), [])):
        return None
    return (list(ops.values()), list(leaves.values())) if multiplied and leaves else None


def exact_float_taps(graph: Graph) -> Graph:
    """A linear map lowered as float taps between int8 tensors of one scale (a 3-D linear Resize or AveragePool:
    GATHER, DEQUANTIZE, MUL by the weights, ADD, QUANTIZE) computed on the integer levels and rounded half to even.

    QuantizeLinear rounds half to even, and at one scale in and out a linear upsampling's exact result is a .5
    tie on a fixed share of the values (x2 trilinear, weights 1/4 and 3/4 per axis: a multiple of 1/64 of a
    step). In float32 DEQUANTIZE's ``scale * (q - zp)``, the weighted sum and QUANTIZE's division by the scale
    land those ties on either side, and QUANTIZE rounds half away from zero: MONAI SegResNet's decoder had 1 % of
    its upsampled values a step off its QDQ model's (int8 .tflite vs QDQ cosine 0.9971). Here each DEQUANTIZE
    becomes CAST + SUB of the zero point (the levels ``q - zp``, exact), the taps stay as they are (products of
    integers and quarters are exact in float32), and QUANTIZE becomes ROUND (LiteRT's is half to even,
    ``reference_ops::RoundToNearest``) + ADD of the zero point + a clamp to [-128, 127] + CAST.
    The 3-D AveragePool is the same map (weights 1/2 per axis: the mean of 2 x 2 x 2 levels is a tie when their sum
    is 4 mod 8): MONAI DenseNet121's transitions took its int8 .tflite vs QDQ cosine to 0.9687 (1.000000 after).
    """
    producers, consumers = graph.producers(), graph.consumers()
    rewritten = []
    for q in [op for op in graph.ops if op.code == "QUANTIZE"]:
        f, y = q.inputs[0], q.outputs[0]
        if f.dtype != np.float32 or y.dtype != np.int8 or y.quant is None or not y.quant.per_tensor:
            continue
        tree = _taps_tree(graph, f, y.quant, producers, consumers)
        if tree is None:
            continue
        for d in tree[1]:
            levels, _ = exact_matmul.levels(graph, d.inputs[0], d.origin, out=d.outputs[0])
            graph.replace_op(d, levels, integer=True)
        graph.replace_op(q, exact_matmul.requantize(graph, f, y, q.origin), integer=True)
        graph.integer_arithmetic.update(id(o) for o in tree[0])  # the taps themselves, as they are
        rewritten.append(tree[0][0].origin)
    if rewritten:
        graph.notes.append(
            f"{len(rewritten)} linear map(s) of float taps between int8 tensors ({exact_matmul.listed(rewritten)}) "
            "computed on the int8 levels and rounded half to even (ROUND), "
            "as QuantizeLinear"
        )
    return graph
