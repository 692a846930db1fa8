"""Converters for Resize and Upsample.

Where TFLite's RESIZE_NEAREST_NEIGHBOR / RESIZE_BILINEAR compute exactly what ONNX asks (spatial axes
of an NCHW tensor, the size ratio as scale, a coordinate mode they have), they are used: they are fast.
Any other Resize is lowered exactly: input and output sizes are static, so each resized axis is a fixed
linear map whose taps (source indices and weights) are computed here, at conversion time, following
ONNX's definition. Nearest is one GATHER per axis; linear (2 taps) and cubic (4 taps) are one GATHER
per tap, a MUL by the constant weights and ADDs. Antialias stays unsupported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite import taps
from edgekit.targets.tflite.context import NCHW_TO_NHWC, NHWC_TO_NCHW, Context, attr_text, permute
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _optional(node: ir.Node, index: int) -> ir.Value | None:
    if len(node.inputs) > index and node.inputs[index] is not None and node.inputs[index].name:
        return node.inputs[index]
    return None


@dataclass(frozen=True)
class _Resize:
    """One Resize, every parameter resolved per axis of the full rank."""

    mode: str
    coordinate_mode: str
    nearest_mode: str
    scales: tuple[float, ...]
    roi: tuple[tuple[float, float], ...]
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float = 0.0
    antialias: bool = False  # linear/cubic: downsampling stretches the filter by 1 / scale


# -- TFLite's resize kernels -------------------------------------------------------------------------
_NEAREST_FLAGS = {  # (coordinate mode, nearest mode) -> (alignCorners, halfPixelCenters)
    ("asymmetric", "floor"): (False, False),
    ("half_pixel", "round_prefer_ceil"): (False, True),
    ("tf_half_pixel_for_nn", "floor"): (False, True),
    ("align_corners", "round_prefer_ceil"): (True, False),
}
_LINEAR_FLAGS = {"asymmetric": (False, False), "half_pixel": (False, True), "align_corners": (True, False)}


def _tflite_flags(r: _Resize, x_shape: Sequence[int], y_shape: Sequence[int]) -> tuple[bool, bool] | None:
    """TFLite's (alignCorners, halfPixelCenters) computing exactly this resize, or None."""
    if len(x_shape) != 4 or tuple(x_shape[:2]) != tuple(y_shape[:2]):
        return None
    if r.antialias and r.mode != "nearest" and any(s < 1 for s in r.scales):
        return None  # TFLite's kernels sample 2 taps
    if any(
        not np.isclose(y / x, s, rtol=1e-6)
        for x, y, s in zip(x_shape[2:], y_shape[2:], r.scales[2:], strict=True)
    ):
        return None  # TFLite maps coordinates with the size ratio
    coordinate_mode = r.coordinate_mode
    if coordinate_mode == "pytorch_half_pixel" and all(d > 1 for d in y_shape[2:]):
        coordinate_mode = "half_pixel"
    if r.mode == "nearest":
        key = (coordinate_mode, r.nearest_mode)
        # With integer upscaling factors, half-pixel coordinates rounded to nearest pick source index
        # floor(y / factor): TFLite's default (the fractional offset stays within +-0.5).
        exact = all(y % x == 0 for x, y in zip(x_shape[2:], y_shape[2:], strict=True))
        rounding = r.nearest_mode in ("round_prefer_floor", "round_prefer_ceil")
        if exact and coordinate_mode == "half_pixel" and rounding:
            key = ("asymmetric", "floor")
        return _NEAREST_FLAGS.get(key)
    if r.mode == "linear":
        return _LINEAR_FLAGS.get(coordinate_mode)
    return None


def _tflite_resize(ctx: Context, r: _Resize, x: Tensor, y: Tensor, flags: tuple[bool, bool]) -> None:
    if r.mode == "nearest":
        code, opts = "RESIZE_NEAREST_NEIGHBOR", fb.ResizeNearestNeighborOptionsT()
    else:
        code, opts = "RESIZE_BILINEAR", fb.ResizeBilinearOptionsT()
    opts.alignCorners, opts.halfPixelCenters = flags
    x_nhwc = ctx.transpose(x, NCHW_TO_NHWC)
    y_nhwc = ctx.tmp("resize_nhwc", permute(y.shape, NCHW_TO_NHWC))
    ctx.op(code, [x_nhwc, ctx.graph.const("size", y.shape[2:], np.int32)], [y_nhwc], opts)
    ctx.transpose(y_nhwc, NHWC_TO_NCHW, out=y)


# -- the exact lowering: per-axis taps computed at conversion time ------------------------------------
def _source_coordinate(r: _Resize, axis: int, x: int, in_len: int, out_len: int) -> float:
    """ONNX's coordinate_transformation_mode: the input coordinate of output index ``x``."""
    scale = r.scales[axis]
    width = scale * in_len  # ONNX uses the scaled (not rounded) length here
    mode = r.coordinate_mode
    if mode == "align_corners":
        return 0.0 if width == 1 else x * (in_len - 1) / (width - 1)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        start, end = r.roi[axis]
        if width == 1:
            return (end - start) * (in_len - 1) / 2 + start * (in_len - 1)
        return x * (end - start) * (in_len - 1) / (width - 1) + start * (in_len - 1)
    if mode == "pytorch_half_pixel":
        return -0.5 if width == 1 else (x + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_len / 2 * (1 - out_len / width)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    raise ValueError(mode)


def _antialiased(r: _Resize, ratio: float, scale: float) -> list[float]:
    """ONNX Resize-18's antialiased filter for a downscaling ``scale``: the linear (triangle) or cubic kernel
    stretched by 1 / scale over as many taps as it covers, normalised to sum 1."""
    if r.mode == "linear":
        start = math.floor(-1 / scale) + 1
        args = [(i - ratio) * scale for i in range(start, 2 - start)]
        coeffs = [min(max(1 - abs(a), 0.0), 1.0) for a in args]
    else:
        start = math.floor(-2 / scale) + 1
        coeffs = [_keys(scale * (i - ratio), r.cubic_coeff_a) for i in range(start, 2 - start)]
    total = sum(coeffs)
    return [c / total for c in coeffs]


def _keys(d: float, a: float) -> float:
    """Keys' cubic convolution kernel."""
    d = abs(d)
    if d <= 1:
        return ((a + 2) * d - (a + 3)) * d * d + 1
    if d < 2:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return 0.0


def _coefficients(r: _Resize, ratio: float, scale: float = 1.0) -> list[float]:
    if r.antialias and r.mode != "nearest" and scale < 1:
        return _antialiased(r, ratio, scale)
    if r.mode == "nearest":
        if ratio == 1:
            return [0.0, 1.0]
        pick_ceil = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
        }[r.nearest_mode]
        return [0.0, 1.0] if pick_ceil else [1.0, 0.0]
    if r.mode == "linear":
        return [1 - ratio, ratio]
    a = r.cubic_coeff_a
    return [_keys(ratio + 1, a), _keys(ratio, a), _keys(1 - ratio, a), _keys(2 - ratio, a)]


def _axis_taps(r: _Resize, axis: int, in_len: int, out_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indices [taps, out], weights [taps, out], inside [out]) of one axis: output index o is
    sum_t weights[t, o] * input[indices[t, o]] where ``inside``, the extrapolation value elsewhere."""
    scale = r.scales[axis]
    taps = len(_coefficients(r, 0.5, scale))
    pad = math.ceil(taps / 2)
    indices = np.zeros((taps, out_len), np.int64)
    weights = np.zeros((taps, out_len), np.float64)
    inside = np.ones(out_len, bool)
    for o in range(out_len):
        x = _source_coordinate(r, axis, o, in_len, out_len)
        if r.coordinate_mode == "tf_crop_and_resize" and not 0 <= x <= in_len - 1:
            inside[o] = False
            continue
        ratio = 1.0 if float(x).is_integer() else x - math.floor(x)
        coeffs = np.asarray(_coefficients(r, ratio, scale), np.float64)
        # The ``taps`` nearest positions of the edge-padded axis (the lower one on a tie).
        padded = sorted(range(in_len + 2 * pad), key=lambda i: (abs(x + pad - i), i))[:taps]
        source = np.asarray(sorted(padded)) - pad
        if r.exclude_outside:
            coeffs = np.where((source < 0) | (source >= in_len), 0.0, coeffs)
            coeffs = coeffs / coeffs.sum()
        indices[:, o] = np.clip(source, 0, in_len - 1)
        weights[:, o] = coeffs
    return indices, weights, inside


def _lowered_resize(ctx: Context, r: _Resize, x: Tensor, y: Tensor) -> None:
    outside = np.zeros([1] * x.rank, bool)
    for axis, (in_len, out_len) in enumerate(zip(x.shape, y.shape, strict=True)):
        identity = in_len == out_len and r.scales[axis] == 1 and r.roi[axis] == (0.0, 1.0)
        if identity:
            continue
        indices, weights, inside = _axis_taps(r, axis, in_len, out_len)
        x = taps.weighted_sum(ctx, x, axis, indices, weights)
        shape = [1] * x.rank
        shape[axis] = out_len
        outside = outside | ~inside.reshape(shape)
    if np.any(outside) and r.extrapolation_value != 0:
        # tf_crop_and_resize: the extrapolation value where a coordinate falls outside the input (the
        # weights are zero there).
        fill = ctx.graph.const(
            "extrapolation", np.where(outside, r.extrapolation_value, 0).astype(np.float32)
        )
        binary(ctx, "ADD", x, fill, y)
    else:
        ctx.reshape(x, y.shape, out=y)


def _convert(ctx: Context, node: ir.Node, r: _Resize) -> None:
    x_value, y_value = node.inputs[0], node.outputs[0]
    x_shape, y_shape = ctx.shape(x_value), ctx.shape(y_value)
    if r.mode not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"Resize mode {r.mode!r} is not supported (nearest, linear, cubic are)")
    x, y = ctx.tensor(x_value), ctx.output(y_value)
    if x.dtype != np.float32:
        raise ctx.error(f"Resize of {x.dtype} tensors is not supported (float32 is)")
    flags = _tflite_flags(r, x_shape, y_shape)
    if flags is not None:
        _tflite_resize(ctx, r, x, y, flags)
    else:
        _lowered_resize(ctx, r, x, y)


def _full_scales(ctx: Context, node: ir.Node, x_shape: Sequence[int], y_shape: Sequence[int]) -> list[float]:
    """Scales from the ``scales`` input, or output/input sizes."""
    scales_value = _optional(node, 1)
    if scales_value is None:
        return [y / x for x, y in zip(x_shape, y_shape, strict=True)]
    return [float(s) for s in ctx.require_const(scales_value, "Resize scales").reshape(-1)]


@converter("Upsample", since=9)
@converter("Resize", since=10)
def upsample(ctx: Context, node: ir.Node, *, mode: str = "nearest") -> None:
    """Upsample (opset 9) and Resize-10: (X, scales), asymmetric coordinates, nearest rounds down."""
    x_shape, y_shape = ctx.shape(node.inputs[0]), ctx.shape(node.outputs[0])
    scales = _full_scales(ctx, node, x_shape, y_shape)
    roi = tuple((0.0, 1.0) for _ in x_shape)
    _convert(ctx, node, _Resize(attr_text(mode), "asymmetric", "floor", tuple(scales), roi))


@converter("Resize", since=11)
def resize_v11(
    ctx: Context,
    node: ir.Node,
    *,
    mode: str = "nearest",
    coordinate_transformation_mode: str = "half_pixel",
    nearest_mode: str = "round_prefer_floor",
    cubic_coeff_a: float = -0.75,
    exclude_outside: int = 0,
    extrapolation_value: float = 0.0,
    antialias: int = 0,
    axes: Sequence[int] | None = None,
    keep_aspect_ratio_policy: str = "stretch",
) -> None:
    if antialias and attr_text(mode) == "nearest":
        raise ctx.error("antialias is not supported with nearest mode")
    x_shape = ctx.shape(node.inputs[0])
    rank = len(x_shape)
    axes = [a % rank for a in axes] if axes is not None else list(range(rank))
    scales = [1.0] * rank
    roi = [(0.0, 1.0)] * rank
    roi_value, scales_value, sizes_value = _optional(node, 1), _optional(node, 2), _optional(node, 3)
    coordinate_mode = attr_text(coordinate_transformation_mode)
    if roi_value is not None and coordinate_mode == "tf_crop_and_resize":
        given = ctx.require_const(roi_value, "Resize roi").astype(np.float64).reshape(-1)
        if given.size:
            for i, a in enumerate(axes):
                roi[a] = (float(given[i]), float(given[len(axes) + i]))
    sizes = ctx.const(sizes_value) if sizes_value is not None else None
    if sizes is not None and sizes.size:
        ratios = [float(s) / x_shape[a] for a, s in zip(axes, sizes.reshape(-1), strict=True)]
        policy = attr_text(keep_aspect_ratio_policy)
        if policy != "stretch":
            ratios = [min(ratios) if policy == "not_larger" else max(ratios)] * len(axes)
        for a, ratio in zip(axes, ratios, strict=True):
            scales[a] = ratio
    elif scales_value is not None:
        given = ctx.require_const(scales_value, "Resize scales").astype(np.float64).reshape(-1)
        for a, s in zip(axes, given, strict=True):
            scales[a] = float(s)
    else:
        raise ctx.error("Resize needs constant scales or sizes")
    r = _Resize(
        attr_text(mode),
        coordinate_mode,
        attr_text(nearest_mode),
        tuple(scales),
        tuple(roi),
        float(cubic_coeff_a),
        bool(exclude_outside),
        float(extrapolation_value),
        bool(antialias),
    )
    _convert(ctx, node, r)
