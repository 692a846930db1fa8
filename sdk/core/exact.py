"""A QDQ model's exact semantics: the model run in float64 by the onnx reference evaluator.

An 8-bit QDQ model defines each quantized layer as ``Q(op(DQ(x), DQ(w), DQ(b)))``. An integer kernel (TFLite's,
NNAPI's) computes the same product sums exactly, in 32-bit integers, and rounds once with a 31-bit fixed-point
multiplier. A float32 runtime (OpenVINO, onnxruntime) sums the dequantized products in float32, about 1e-6 of a
value off, so it rounds some values that lie near a half step the other way; a network then grows those one-step
flips (``docs/benchmarks.md``: two float32 runs of one QDQ file agreed only to cosine 0.93 on EfficientNet-B0).
In float64 every product of two 8-bit values and their float32 scales is exact and the sums are 1e-16 off, so the
rounding is the exact model's: the integer kernels' results are what this runner gives, and a .tflite that
differs from it differs in its arithmetic, not in rounding noise.

Float tensors are float64 throughout: float initializers and constants are widened, ``Cast`` to float becomes a
cast to float64, ``DequantizeLinear`` gives float64 and ``QuantizeLinear`` reads it. Convolutions run on a
vectorised numpy implementation (the reference evaluator's own is exact but takes seconds on dilated and
transposed convolutions).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import onnx
from edgekit.core.errors import ModelError
from onnx import TensorProto, numpy_helper

_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE})
#: The integer types QuantizeLinear writes here (their ranges: ``np.iinfo``).
_INTEGER_TYPES = frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16))


def _widen_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    return numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)


def float64_model(proto: onnx.ModelProto, control_flow: bool = False) -> onnx.ModelProto:
    """A copy of ``proto`` whose float tensors are float64 (see the module docstring). Control-flow subgraphs
    are refused (a QDQ model's are declined before quantization anyway) unless ``control_flow``: then they are
    widened alike (a detector's tail: torchvision's batched NMS in an ``If``)."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    _widen_graph(model.graph, control_flow)
    return model


def _widen_graph(graph: onnx.GraphProto, control_flow: bool) -> None:
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and not any(a.name == "value" for a in node.attribute):
            # its default is a float32 zero (MultiScaleRoIAlign's canvas the levels are scattered into)
            node.attribute.append(onnx.helper.make_attribute("value", numpy_helper.from_array(np.zeros(1))))
        for attr in node.attribute:
            if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                if not control_flow:
                    raise ModelError(
                        f"{node.op_type} {node.name!r}: control flow has no exact QDQ semantics here"
                    )
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                    _widen_graph(sub, control_flow)
            if attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type in _FLOATS:
                attr.t.CopyFrom(_widen_tensor(attr.t))
            if node.op_type == "Cast" and attr.name == "to" and attr.i in _FLOATS:
                attr.i = TensorProto.DOUBLE
    widened = [_widen_tensor(t) if t.data_type in _FLOATS else t for t in graph.initializer]
    del graph.initializer[:]
    graph.initializer.extend(widened)
    for value in [*graph.input, *graph.output]:
        if value.type.tensor_type.elem_type in _FLOATS:
            value.type.tensor_type.elem_type = TensorProto.DOUBLE
    del graph.value_info[:]


def fold_constant_dequantize(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (a :func:`float64_model`, changed in place) with every DequantizeLinear of initializers (the
    weights) replaced by its float64 result, computed once by :func:`dequantize` as the op computes it on each
    run: the same values, without dequantizing every weight again for every sample."""
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    kept = []
    for node in graph.node:
        names = [n for n in node.input if n]
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if (
            node.op_type != "DequantizeLinear"
            or node.domain not in ("", "ai.onnx")
            or not names
            or any(n not in constants for n in names)
            or attributes.get("block_size", 0)
            or node.output[0] in outputs
        ):
            kept.append(node)
            continue
        x, scale, *zero = (numpy_helper.to_array(constants[n]) for n in names)
        value = dequantize(x, scale, zero[0] if zero else None, int(attributes.get("axis", 1)))
        graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
    del graph.node[:]
    graph.node.extend(kept)
    return model


# ------------------------------------------------------------------------------------------------ kernels


def _broadcast_axis(param: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    if param.ndim == 0 or param.size == 1:
        return param.reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return param.reshape(shape)


def dequantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int = 1) -> np.ndarray:
    """``(x - zero_point) * scale`` in float64 (per tensor or along ``axis``)."""
    s = _broadcast_axis(np.asarray(scale, np.float64), x.ndim, axis)
    z = 0.0 if zero_point is None else _broadcast_axis(np.asarray(zero_point, np.float64), x.ndim, axis)
    return (x.astype(np.float64) - z) * s


def quantize(
    x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int = 1, float32: bool = False
) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero_point)`` computed in float64; ``float32``: the division in
    float32, as QuantizeLinear of float32 data defines it (a graph input: its values are float32 exactly)."""
    dtype = np.dtype(np.uint8) if zero_point is None else np.asarray(zero_point).dtype
    if dtype not in _INTEGER_TYPES:
        raise ModelError(f"QuantizeLinear to {dtype}: no exact float64 semantics here")
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    y = np.asarray(steps(x, scale, axis, float32))  # a new array: rounded, shifted and clipped in place
    np.round(y, out=y)
    if zero_point is not None:
        y += _broadcast_axis(np.asarray(zero_point, np.float64), x.ndim, axis)
    np.clip(y, lo, hi, out=y)
    return y.astype(dtype)


def steps(x: np.ndarray, scale: np.ndarray, axis: int = 1, float32: bool = False) -> np.ndarray:
    """``x / scale`` (float64), the value in steps :func:`quantize` rounds; ``float32``: divided in float32."""
    s = _broadcast_axis(np.asarray(scale, np.float64), np.ndim(x), axis)
    if float32:
        return (np.asarray(x, np.float32) / s.astype(np.float32)).astype(np.float64)
    return np.divide(np.asarray(x, np.float64), s)  # always a new array (quantize writes into it)


#: The most memory a convolution's stacked input windows (its columns) take at a time.
COLUMNS_BYTES = 64 << 20


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in ``x``'s own precision (float64 here): scipy's where installed (vectorised), else
    ``math.erf`` per element. The onnx reference evaluator's Erf rounds to float32, one Python call per value."""
    x = np.asarray(x)
    try:
        from scipy.special import erf as vectorised
    except ImportError:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype)
    return vectorised(x).astype(x.dtype, copy=False)


def _split_pads(totals: Sequence[int], upper: bool) -> list[int]:
    """ONNX pads (all begins, then all ends) splitting each axis' total padding: the larger half at the end when
    ``upper`` (SAME_UPPER), else at the start."""
    small = [t // 2 for t in totals]
    big = [t - t // 2 for t in totals]
    return (small + big) if upper else (big + small)


def _same_pads(in_sizes, kernel, strides, dilations, upper: bool) -> list[int]:
    totals = [
        max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        for size, k, s, d in zip(in_sizes, kernel, strides, dilations, strict=True)
    ]
    return _split_pads(totals, upper)


def conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    group: int = 1,
    auto_pad: str = "NOTSET",
    columns_bytes: int | None = None,
) -> np.ndarray:
    """ONNX Conv (any number of spatial axes, groups, dilations): the kernel taps' input windows stacked into
    columns (at most ``columns_bytes``, default :data:`COLUMNS_BYTES`, at a time) and one matrix product per stack, so that the product sums
    run over channels x taps in BLAS; a depthwise convolution is a product per channel and tap."""
    nd = x.ndim - 2
    kernel = w.shape[2:]
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(x.shape[2:], kernel, strides, dilations, auto_pad == "SAME_UPPER")
    pads = list(pads or [0] * (2 * nd))
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    g = group
    og = o // g
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + nd]) for i in range(nd)])
    out = [(xp.shape[2 + i] - dilations[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    points = int(np.prod(out))
    taps = list(itertools.product(*(range(k) for k in kernel)))
    dtype = np.result_type(x, w)
    wg = w.reshape(g, og, cg, len(taps))
    y = np.zeros((n, g, og, points), dtype=dtype)

    def window(tap: tuple[int, ...]) -> np.ndarray:  # [n, c, *out], a view of xp
        return xp[
            (slice(None), slice(None))
            + tuple(
                slice(
                    tap[i] * dilations[i], tap[i] * dilations[i] + strides[i] * (out[i] - 1) + 1, strides[i]
                )
                for i in range(nd)
            )
        ]

    def patch(tap: tuple[int, ...]) -> np.ndarray:
        return window(tap).reshape(n, g, cg, points)

    if cg == 1 and o == g:  # depthwise: a product per channel and tap, on the strided windows in place
        acc = y.reshape(n, g, *out)
        product = np.empty_like(acc)
        for t, tap in enumerate(taps):
            np.multiply(window(tap), wg[:, :, 0, t].reshape(1, g, *([1] * nd)), out=product)
            acc += product
        return _with_bias(y.reshape(n, o, *out), b)
    per_stack = max(1, (columns_bytes or COLUMNS_BYTES) // max(1, n * c * points * dtype.itemsize))
    for start in range(0, len(taps), per_stack):
        part = taps[start : start + per_stack]
        if len(part) == 1:  # one tap (a 1x1 convolution): its window as it is
            cols = patch(part[0])
        else:
            cols = np.empty((n, g, cg, len(part), points), dtype=dtype)
            for j, tap in enumerate(part):
                cols[:, :, :, j] = patch(tap)
            cols = cols.reshape(n, g, cg * len(part), points)
        weights = np.ascontiguousarray(wg[..., start : start + len(part)]).reshape(g, og, cg * len(part))
        for i in range(n):
            if g == 1:  # a 2-D product: BLAS directly
                y[i, 0] += weights[0] @ cols[i, 0]
            else:
                y[i] += weights @ cols[i]
    return _with_bias(y.reshape(n, o, *out), b)


def _with_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    nd = y.ndim - 2
    return y if b is None else y + b.reshape(1, -1, *([1] * nd))


def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None = None,
    *,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    group: int = 1,
    output_padding: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
) -> np.ndarray:
    """ONNX ConvTranspose: each kernel tap's matrix product scattered into the strided output."""
    nd = x.ndim - 2
    kernel = w.shape[2:]
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    output_padding = list(output_padding or [0] * nd)
    sizes = x.shape[2:]
    full = [
        strides[i] * (sizes[i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
        for i in range(nd)
    ]
    if output_shape is not None:  # the spec: the larger half at the start unless SAME_UPPER
        wanted = list(output_shape)[-nd:]
        pads = _split_pads([full[k] - wanted[k] for k in range(nd)], auto_pad == "SAME_UPPER")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _split_pads([full[k] - sizes[k] * strides[k] for k in range(nd)], auto_pad == "SAME_UPPER")
    pads = list(pads or [0] * (2 * nd))
    n, c = x.shape[:2]
    g = group
    cg, og = c // g, w.shape[1]
    points = int(np.prod(sizes))
    xg = x.reshape(n, g, cg, points)
    wg = w.reshape(g, cg, og, *kernel)
    y = np.zeros((n, g, og, *full), dtype=np.result_type(x, w))
    for tap in itertools.product(*(range(k) for k in kernel)):
        contribution = np.swapaxes(wg[(slice(None), slice(None), slice(None), *tap)], 1, 2) @ xg
        window = tuple(
            slice(tap[i] * dilations[i], tap[i] * dilations[i] + strides[i] * (sizes[i] - 1) + 1, strides[i])
            for i in range(nd)
        )
        y[(slice(None), slice(None), slice(None), *window)] += contribution.reshape(n, g, og, *sizes)
    y = y.reshape(n, g * og, *full)
    crop = tuple(slice(pads[i], full[i] - pads[i + nd]) for i in range(nd))
    y = y[(slice(None), slice(None), *crop)]
    if b is not None:
        y = y + b.reshape(1, -1, *([1] * nd))
    return y


def max_pool(
    x: np.ndarray,
    kernel_shape: Sequence[int],
    *,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: int = 0,
) -> np.ndarray:
    """ONNX MaxPool without auto_pad: the maximum over one strided view per kernel tap (the reference evaluator
    loops over every output point in Python: half of YuNet's exact run; and with ``ceil_mode`` its output is a
    row too long where the last window would start in the end padding: GoogLeNet's Concat then failed).
    ``ceil_mode``: the output size rounds up, except for a window that would start past the input and the begin
    padding (ONNX's rule, as torch's)."""
    nd = x.ndim - 2
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    pads = list(pads or [0] * (2 * nd))
    spans = [dilations[i] * (kernel_shape[i] - 1) + 1 for i in range(nd)]
    padded = [x.shape[2 + i] + pads[i] + pads[i + nd] for i in range(nd)]
    out = [(padded[i] - spans[i]) // strides[i] + 1 for i in range(nd)]
    if ceil_mode:
        out = [-(-(padded[i] - spans[i]) // strides[i]) + 1 for i in range(nd)]
        out = [o - 1 if (o - 1) * strides[i] >= x.shape[2 + i] + pads[i] else o for i, o in enumerate(out)]
    # end padding up to the last window's end (ceil_mode's last window may reach past the padded input)
    ends = [
        max(pads[i + nd], (out[i] - 1) * strides[i] + spans[i] - x.shape[2 + i] - pads[i]) for i in range(nd)
    ]
    widths = [(0, 0), (0, 0)] + [(pads[i], ends[i]) for i in range(nd)]
    xp = np.pad(x, widths, constant_values=-np.inf) if any(w for pair in widths for w in pair) else x
    y = None
    for window in _tap_windows(kernel_shape, dilations, strides, out):
        patch = xp[(slice(None), slice(None), *window)]
        y = patch.copy() if y is None else np.maximum(y, patch)
    return y


def _tap_windows(
    kernel_shape: Sequence[int], dilations: Sequence[int], strides: Sequence[int], out: Sequence[int]
) -> Iterator[tuple[slice, ...]]:
    """Per kernel tap, the strided window of the (padded) spatial axes that tap reads for every output point."""
    for tap in itertools.product(*(range(k) for k in kernel_shape)):
        yield tuple(
            slice(t * d, t * d + s * (o - 1) + 1, s)
            for t, d, s, o in zip(tap, dilations, strides, out, strict=True)
        )


def average_pool(
    x: np.ndarray,
    kernel_shape: Sequence[int],
    *,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    count_include_pad: int = 0,
) -> np.ndarray:
    """ONNX AveragePool without auto_pad or ceil_mode: the sum of one strided view per kernel tap over the input
    padded with zeros, divided by the kernel's size (``count_include_pad``) or by how many of each window's taps
    fall inside the input (the same sum over ones). The reference evaluator loops over every output point in
    Python: 140 of the 156 s of Inception-v3's exact run (three samples, its 3x3 pools at 35 x 35 x 288)."""
    nd = x.ndim - 2
    strides = list(strides or [1] * nd)
    dilations = list(dilations or [1] * nd)
    pads = list(pads or [0] * (2 * nd))
    spans = [dilations[i] * (kernel_shape[i] - 1) + 1 for i in range(nd)]
    out = [(x.shape[2 + i] + pads[i] + pads[i + nd] - spans[i]) // strides[i] + 1 for i in range(nd)]
    widths = [(pads[i], pads[i + nd]) for i in range(nd)]

    def tap_sum(a: np.ndarray) -> np.ndarray:  # a: [..., *spatial] padded
        total = None
        for window in _tap_windows(kernel_shape, dilations, strides, out):
            patch = a[(Ellipsis, *window)]
            total = patch.astype(np.float64) if total is None else total + patch
        return total

    total = tap_sum(np.pad(x, [(0, 0), (0, 0), *widths]))
    if count_include_pad:
        return (total / float(np.prod(kernel_shape))).astype(x.dtype)
    counts = tap_sum(np.pad(np.ones(x.shape[2:]), widths))
    return (total / counts).astype(x.dtype)


def grid_sample(
    X: np.ndarray, grid: np.ndarray, mode: str = "linear", padding_mode: str = "zeros", align_corners: int = 0
) -> np.ndarray:
    """ONNX GridSample of a 4-D input (modes linear / nearest, padding zeros / border) with numpy arrays: the
    reference evaluator's definition (border clamps the coordinates, nearest rounds half to even, zeros reads 0
    outside) without its per-value Python loop."""
    n, c, h, w = X.shape
    gx, gy = grid[..., 0], grid[..., 1]
    if align_corners:
        x, y = (gx + 1) / 2 * (w - 1), (gy + 1) / 2 * (h - 1)
    else:
        x, y = ((gx + 1) * w - 1) / 2, ((gy + 1) * h - 1) / 2
    if mode == "nearest":
        corners = [(np.rint(x), np.rint(y), 1.0)]
    else:
        if padding_mode == "border":
            x, y = np.clip(x, 0, w - 1), np.clip(y, 0, h - 1)
        x0, y0 = np.floor(x), np.floor(y)
        fx, fy = x - x0, y - y0
        corners = [
            (x0, y0, (1 - fx) * (1 - fy)),
            (x0 + 1, y0, fx * (1 - fy)),
            (x0, y0 + 1, (1 - fx) * fy),
            (x0 + 1, y0 + 1, fx * fy),
        ]
    batch = np.arange(n).reshape(n, *([1] * (grid.ndim - 2)))
    out = np.zeros((n, *grid.shape[1:-1], c), X.dtype)
    for xi, yi, weight in corners:
        if padding_mode == "zeros":
            weight = weight * ((xi >= 0) & (xi <= w - 1) & (yi >= 0) & (yi <= h - 1))
        xc, yc = np.clip(xi, 0, w - 1).astype(np.int64), np.clip(yi, 0, h - 1).astype(np.int64)
        out += X[batch, :, yc, xc] * np.asarray(weight)[..., None]
    return np.moveaxis(out, -1, 1)


def roi_align(
    x: np.ndarray,
    rois: np.ndarray,
    batch_indices: np.ndarray,
    *,
    mode: str = "avg",
    output_height: int = 1,
    output_width: int = 1,
    sampling_ratio: int = 0,
    spatial_scale: float = 1.0,
    half_pixel: bool = True,
) -> np.ndarray:
    """ONNX RoiAlign computed as the reference evaluator computes it, in the dtype of ``x`` and ``rois`` and in the
    same order of operations (its float32 values bit for bit), elementwise over the boxes, bins and channels
    instead of its Python loop over every box, channel and bin (most of a Mask R-CNN tail's check: its mask head's
    [K, 256, 14, 14] RoiAlign). ``half_pixel``: opset 16's default coordinate rule, else ``output_half_pixel``
    (opset 10's, torchvision's ``aligned=False``). Boxes with the same sampling grid (``sampling_ratio``, else
    ceil of each box's bin size) are computed together."""
    n_rois, (_, channels, height, width) = len(rois), x.shape
    out = np.empty((n_rois, channels, output_height, output_width), dtype=x.dtype)
    if n_rois == 0:
        return out
    offset = 0.5 if half_pixel else 0.0
    # the reference's arithmetic, elementwise over the boxes: numpy scalars of rois' dtype and Python numbers
    start_w = rois[:, 0] * spatial_scale - offset
    start_h = rois[:, 1] * spatial_scale - offset
    end_w = rois[:, 2] * spatial_scale - offset
    end_h = rois[:, 3] * spatial_scale - offset
    roi_w, roi_h = end_w - start_w, end_h - start_h
    # opset 10's rule makes a box under one cell one cell: the reference's max(size, 1.0) is then Python's 1.0,
    # and the bin size and its products are doubles, rounded to the boxes' dtype where they meet them
    small_w = (roi_w < 1.0) if not half_pixel else np.zeros(n_rois, bool)
    small_h = (roi_h < 1.0) if not half_pixel else np.zeros(n_rois, bool)
    if not half_pixel:
        roi_w, roi_h = np.maximum(roi_w, 1.0), np.maximum(roi_h, 1.0)
    bin_h, bin_w = roi_h / output_height, roi_w / output_width
    if sampling_ratio > 0:
        grid_h = np.full(n_rois, int(sampling_ratio))
        grid_w = grid_h
    else:
        grid_h = np.ceil(roi_h / output_height).astype(np.int64)
        grid_w = np.ceil(roi_w / output_width).astype(np.int64)
    for gh, gw in sorted(set(zip(grid_h.tolist(), grid_w.tolist(), strict=True))):
        rows = np.nonzero((grid_h == gh) & (grid_w == gw))[0]
        count = max(gh * gw, 1)
        acc = None
        for iy in range(gh):
            # yy = start_h + ph * bin_h + (iy + 0.5) * bin_h / gh, in that order  [k, ph]
            yy = _positions(start_h[rows], bin_h[rows], small_h[rows], output_height, iy, gh)
            for ix in range(gw):
                xx = _positions(start_w[rows], bin_w[rows], small_w[rows], output_width, ix, gw)
                term = _bilinear(x, batch_indices[rows], yy, xx, height, width, mode)
                if acc is None:
                    acc = term
                elif mode == "avg":
                    acc = acc + term
                else:
                    acc = np.maximum(acc, term)
        if acc is None:  # a grid of 0 samples: the reference's output_val stays 0
            acc = np.zeros((len(rows), channels, output_height, output_width), dtype=x.dtype)
        elif mode == "avg":
            acc = acc / count
        out[rows] = acc
    return out


def _positions(start, bins, small, pooled, i, grid):
    """``start + p * bin + (i + 0.5) * bin / grid`` for every bin ``p`` of each box ([k, pooled]), in the reference's
    order and types."""
    p = np.arange(pooled).astype(bins.dtype)[None, :]
    along = p * bins[:, None]
    within = (i + 0.5) * bins[:, None] / grid
    if small.any():
        bin64 = 1.0 / pooled
        along = np.where(small[:, None], (np.arange(pooled) * bin64).astype(bins.dtype)[None, :], along)
        within = np.where(small[:, None], np.asarray((i + 0.5) * bin64 / grid, bins.dtype), within)
    return start[:, None] + along + within


def _bilinear(x, batch, yy, xx, height, width, mode):
    """One sample point per bin: [k, C, ph, pw]."""
    k, ph_n = yy.shape
    pw_n = xx.shape[1]
    y = np.broadcast_to(yy[:, :, None], (k, ph_n, pw_n))
    xg = np.broadcast_to(xx[:, None, :], (k, ph_n, pw_n))
    outside = (y < -1.0) | (y > height) | (xg < -1.0) | (xg > width)
    y = np.where(y < 0, np.zeros_like(y), y)  # max(y, 0)
    xg = np.where(xg < 0, np.zeros_like(xg), xg)
    y_low = y.astype(np.int64)
    x_low = xg.astype(np.int64)
    y_top = y_low >= height - 1
    x_top = x_low >= width - 1
    y_low = np.where(y_top, height - 1, y_low)
    x_low = np.where(x_top, width - 1, x_low)
    y_high = np.where(y_top, height - 1, y_low + 1)
    x_high = np.where(x_top, width - 1, x_low + 1)
    y = np.where(y_top, y_low.astype(y.dtype), y)
    xg = np.where(x_top, x_low.astype(xg.dtype), xg)
    ly = y - y_low.astype(y.dtype)
    lx = xg - x_low.astype(xg.dtype)
    hy, hx = 1.0 - ly, 1.0 - lx
    weights = [hy * hx, hy * lx, ly * hx, ly * lx]
    zero = np.zeros((), dtype=y.dtype)
    weights = [np.where(outside, zero, w) for w in weights]
    positions = [(y_low, x_low), (y_low, x_high), (y_high, x_low), (y_high, x_high)]
    b = batch.astype(np.int64).reshape(k, 1, 1)
    terms = []
    for (yi, xi), w in zip(positions, weights, strict=True):
        yi = np.where(outside, 0, yi)
        xi = np.where(outside, 0, xi)
        v = x[b, :, yi, xi]  # [k, ph, pw, C]
        terms.append(np.moveaxis(w[..., None].astype(x.dtype) * v, -1, 1))
    if mode == "avg":
        return terms[0] + terms[1] + terms[2] + terms[3]
    return np.maximum(np.maximum(np.maximum(terms[0], terms[1]), terms[2]), terms[3])


#: GridSample-16's mode names -> GridSample-20's (the reference evaluator's).
_GRID_SAMPLE_MODES = {"bilinear": "linear", "bicubic": "cubic"}


def _attrs(op, names: Sequence[str]) -> dict:
    """The attributes ``names`` an op has (given, or defaulted by the reference's schema), strings decoded."""
    found = {}
    for name in names:
        value = getattr(op, name, None)
        if value is not None:
            found[name] = value.decode() if isinstance(value, bytes) else value
    return found


def _ops(
    jitter: float = 0.0,
    seed: int = 0,
    observe: Observer | None = None,
    float32_inputs: frozenset[str] = frozenset(),
):
    """The reference evaluator's op classes this module replaces (imported lazily: onnx.reference is slow):
    the (de)quantization in float64 and :func:`kernel_ops`.
    ``jitter``: QuantizeLinear first scales each value by ``1 + jitter * u``, ``u`` uniform in [-1, 1] (seeded).
    ``observe``: see :class:`ExactRunner`. ``float32_inputs``: the graph's float32 inputs, which a
    QuantizeLinear divides in float32 (their values are float32; onnxruntime and LiteRT divide so)."""
    from onnx.reference.op_run import OpRun

    rng = np.random.default_rng(seed)

    def _axis(op: OpRun) -> int:
        axis = getattr(op, "axis", None)
        return 1 if axis is None else int(axis)

    class DequantizeLinear(OpRun):
        def _run(self, x, x_scale, x_zero_point=None, **_):
            if getattr(self, "block_size", 0):
                raise ModelError("blocked DequantizeLinear: no exact float64 semantics here")
            return (dequantize(x, x_scale, x_zero_point, _axis(self)),)

    class QuantizeLinear(OpRun):
        def _run(self, x, y_scale, y_zero_point=None, **_):
            if getattr(self, "block_size", 0):
                raise ModelError("blocked QuantizeLinear: no exact float64 semantics here")
            if jitter:
                x = np.asarray(x, np.float64) * (1.0 + jitter * rng.uniform(-1.0, 1.0, np.shape(x)))
            at_input = not jitter and self.onnx_node.input[0] in float32_inputs
            q = quantize(x, y_scale, y_zero_point, _axis(self), float32=at_input)
            if observe is not None:
                q = observe(self.onnx_node.output[0], q, steps(x, y_scale, _axis(self), at_input))
            return (q,)

    return [DequantizeLinear, QuantizeLinear, *kernel_ops()]


def kernel_ops() -> list:
    """The reference evaluator's kernels this module replaces by vectorised ones with the same ONNX semantics, in
    the dtype of their inputs (float64 here, float32 in :func:`edgekit.targets.selection_tail.onnx_tail_run`):
    the evaluator's own loop in Python over every output point (Conv, pools, GridSample, RoiAlign, NMS), or its
    bugs (GatherElements, BatchNormalization, LRN, GlobalMaxPool, RoiAlign-10, GridSample-16's mode names)."""
    from onnx.reference.op_run import OpRun

    class Conv(OpRun):
        def _run(self, X, W, B=None, **_):
            a = _attrs(self, ("pads", "strides", "dilations", "group", "auto_pad"))
            return (conv(X, W, B, **a),)

    class ConvTranspose(OpRun):
        def _run(self, X, W, B=None, **_):
            names = ("pads", "strides", "dilations", "group", "auto_pad", "output_padding", "output_shape")
            return (conv_transpose(X, W, B, **_attrs(self, names)),)

    from onnx.reference.ops.op_max_pool import MaxPool as ReferenceMaxPool

    class MaxPool(ReferenceMaxPool):
        def _run(self, x, **kwargs):
            a = _attrs(self, ("kernel_shape", "pads", "strides", "dilations", "auto_pad", "ceil_mode"))
            plain = a.pop("auto_pad", "NOTSET") in ("NOTSET", "VALID")
            if not plain or len(self.output) > 1 or not np.issubdtype(x.dtype, np.floating):
                return super()._run(x, **kwargs)  # indices, SAME auto_pad: the reference's own loop
            return (max_pool(x, **a),)

    from onnx.reference.ops.op_pool_common import CommonPool

    class AveragePool(CommonPool):
        def _run(self, x, **kwargs):
            a = _attrs(self, ("kernel_shape", "pads", "strides", "dilations", "auto_pad", "ceil_mode"))
            a["count_include_pad"] = int(getattr(self, "count_include_pad", 0) or 0)
            plain = a.pop("auto_pad", "NOTSET") in ("NOTSET", "VALID") and not a.pop("ceil_mode", 0)
            if not plain or not np.issubdtype(x.dtype, np.floating):  # the reference's own loop
                names = ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "strides")
                given = {n: getattr(self, n, None) for n in names}
                return CommonPool._run(self, "AVG", a["count_include_pad"], x, **given)
            return (average_pool(x, **a),)

    class GatherElements(OpRun):
        # onnx's own loses the index's columns when the gathered axis is longer than np.choose takes (32 or 64
        # choices): it raises, or returns the first column; RoBERTa gathers its 514 token-type rows so
        def _run(self, data, indices, axis=None):
            axis = 0 if axis is None else int(axis)
            indices = np.where(indices < 0, indices + data.shape[axis], indices)
            return (np.take_along_axis(data, indices.astype(np.int64), axis=axis),)

    class BatchNormalization(OpRun):
        # onnx's BatchNormalization-9 (1.17 to 1.23) normalises with the batch's statistics whenever the node has a
        # ``momentum`` attribute, a training-time parameter that paddle2onnx writes on every inference BatchNorm
        # (0.9): the inference form (one output, no training_mode) uses the running mean and variance
        def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, training_mode=None, **_):
            if training_mode or len(self.onnx_node.output) > 1:
                raise ModelError("training-mode BatchNormalization: no exact float64 semantics here")
            eps = 1e-5 if epsilon is None else float(epsilon)
            shape = (1, -1) + (1,) * (x.ndim - 2)
            a = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + eps)
            b = np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * a
            return ((x * a.reshape(shape) + b.reshape(shape)).astype(x.dtype),)

    class LRN(OpRun):
        # onnx's (1.17 to 1.23) loops over the batch axis instead of the channels: with one sample only channel 0
        # gets its window's sum of squares, every other channel is divided by bias ** beta alone
        def _run(self, x, alpha=None, beta=None, bias=None, size=None):
            alpha, beta = 1e-4 if alpha is None else float(alpha), 0.75 if beta is None else float(beta)
            bias, size = 1.0 if bias is None else float(bias), int(size)
            below, above = (size - 1) // 2, size - 1 - (size - 1) // 2
            squares = np.pad(np.square(x), [(0, 0), (below, above)] + [(0, 0)] * (x.ndim - 2))
            window = np.cumsum(np.concatenate([np.zeros_like(squares[:, :1]), squares], axis=1), axis=1)
            sums = window[:, size:] - window[:, :-size]
            return ((x / (bias + alpha / size * sums) ** beta).astype(x.dtype),)

    from onnx.reference.ops.op_grid_sample import GridSample as ReferenceGridSample

    class GridSample(ReferenceGridSample):
        # onnx's (1.23) knows only opset 20's mode names (an opset-16 "bilinear" raises) and loops per value in
        # Python (minutes for RT-DETR's deformable attention)
        def _run(self, X, grid, mode=None, padding_mode=None, align_corners=None):
            mode, padding_mode = (
                v.decode() if isinstance(v, bytes) else v
                for v in (mode or self.mode, padding_mode or self.padding_mode)
            )
            mode = _GRID_SAMPLE_MODES.get(mode, mode)
            align_corners = align_corners or self.align_corners
            if X.ndim != 4 or mode not in ("linear", "nearest") or padding_mode not in ("zeros", "border"):
                return super()._run(
                    X, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners
                )
            return (grid_sample(X, grid, mode, padding_mode, int(align_corners)),)

    class RoiAlign(OpRun):
        # onnx's (1.23) reads RoiAlign-10 (no coordinate_transformation_mode: its rule is output_half_pixel,
        # torchvision's aligned=False) with opset 16's half_pixel default, half a cell off, and loops per box,
        # channel and bin in Python
        def _run(self, X, rois, batch_indices, **_):
            given = {a.name for a in self.onnx_node.attribute}
            a = _attrs(self, ("mode", "output_height", "output_width", "sampling_ratio", "spatial_scale"))
            rule = _attrs(self, ("coordinate_transformation_mode",)).get("coordinate_transformation_mode")
            opset = self.run_params.get("opsets", {}).get("", 16)
            if "coordinate_transformation_mode" not in given:
                rule = "half_pixel" if opset >= 16 else "output_half_pixel"
            a["mode"] = str(a.get("mode", "avg")).lower()
            return (roi_align(X, rois, batch_indices, half_pixel=rule == "half_pixel", **a),)

    class Erf(OpRun):  # the reference evaluator's rounds every value to float32 (np.vectorize, otypes "f")
        def _run(self, x):
            return (erf(x),)

    class GlobalMaxPool(OpRun):
        # onnx's (1.17 to 1.23) takes the max over axes (ndim - 2, ndim - 1) and then appends ndim - 2 unit axes:
        # right for an image, but a [N, C, L] input loses its channels (max over C and L, shape [N, 1]; Magika)
        def _run(self, x):
            return (np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True),)

    from edgekit.core.reference_nms import reference_op

    return [
        reference_op(),  # NonMaxSuppression: onnx's selections, vectorised
        Conv,
        ConvTranspose,
        MaxPool,
        AveragePool,
        GatherElements,
        BatchNormalization,
        LRN,
        GridSample,
        RoiAlign,
        Erf,
        GlobalMaxPool,
    ]


#: The typical relative rounding error of a float32 dot product of about a thousand terms (sqrt(1000) x 2^-24, about
#: 2^-19; 2^-18 with the requantization's own rounding): the ``jitter`` that stands for "computed in float32". On
#: all-MiniLM-L6-v2's int8 models it flips as often as LiteRT's kernels do (20 to 21 dB against the exact
#: semantics over 8 sentences; LiteRT 20.9 to 23.0, OpenVINO's int8 kernels 22.7 to 23.9).
FLOAT32_JITTER = 2.0**-18


#: ``observe(name, q, steps)``: called at each QuantizeLinear with its output's name, the exact integers and the
#: value in steps before rounding (``x / scale``); what it returns is the output (a trace substitutes a runtime's).
Observer = Callable[[str, np.ndarray, np.ndarray], np.ndarray]


class ExactRunner:
    """Runs a QDQ model's exact semantics (see the module docstring); ``run`` takes and gives numpy arrays
    by tensor name, float outputs as float32 like the model's own.

    ``jitter`` (e.g. :data:`FLOAT32_JITTER`): every value is moved by up to that fraction (seeded) before it is
    quantized: the exact semantics under the rounding error of a float32 computation, which shows how far any
    runtime that computes a float op in float32, or requantizes in float32, can be from the exact values.
    ``observe`` (:data:`Observer`): sees, and may replace, every quantized tensor (``benchmarks/int8_trace.py
    --exact`` replaces each by LiteRT's: what each kernel adds by itself).
    """

    def __init__(
        self,
        proto: onnx.ModelProto,
        outputs: Sequence[str] | None = None,
        jitter: float = 0.0,
        seed: int = 0,
        observe: Observer | None = None,
    ):
        from edgekit.core.evaluator_run import release_plan
        from edgekit.core.protoutil import with_outputs
        from onnx.reference import ReferenceEvaluator

        if outputs:
            proto = with_outputs(proto, outputs)
        self._float_inputs = {i.name for i in proto.graph.input if i.type.tensor_type.elem_type in _FLOATS}
        float32_inputs = frozenset(
            i.name for i in proto.graph.input if i.type.tensor_type.elem_type == TensorProto.FLOAT
        )
        self._evaluator = ReferenceEvaluator(
            fold_constant_dequantize(float64_model(proto)),
            new_ops=_ops(jitter, seed, observe, float32_inputs),
        )
        self.output_names = [o.name for o in proto.graph.output]
        self._release = release_plan(self._evaluator, self.output_names)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        wide = {
            name: np.asarray(a, np.float64) if name in self._float_inputs else np.asarray(a)
            for name, a in feeds.items()
        }
        from edgekit.core.evaluator_run import run_releasing

        results = run_releasing(self._evaluator, self._release, self.output_names, wide)
        return {
            name: r.astype(np.float32) if r.dtype == np.float64 else r
            for name, r in zip(self.output_names, results, strict=True)
        }
