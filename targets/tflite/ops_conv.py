"""Converters for convolutions, pooling and matrix products (NCHW in ONNX, NHWC in TFLite)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite import taps
from edgekit.targets.tflite.context import NCHW_TO_NHWC, NHWC_TO_NCHW, Context, permute
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_index import runtime_shape
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb

_PADDING = {"SAME": fb.Padding.SAME, "VALID": fb.Padding.VALID}


def _decode(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _same_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """TFLite's SAME padding (extra padding at the end, like ONNX SAME_UPPER)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _explicit_pads(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    auto_pad: str,
    pads: Sequence[int] | None,
) -> list[tuple[int, int]]:
    n = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        result = []
        for i in range(n):
            before, after = _same_pads(spatial[i], kernel[i], strides[i], dilations[i])
            result.append((after, before) if auto_pad == "SAME_LOWER" else (before, after))
        return result
    if auto_pad == "VALID" or pads is None:
        return [(0, 0)] * n
    return [(int(pads[i]), int(pads[i + n])) for i in range(n)]


def _padding_mode(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: list[tuple[int, int]],
) -> str | None:
    """ "VALID" or "SAME" when the explicit pads are exactly that, else None (an explicit PAD is needed)."""
    if all(p == (0, 0) for p in pads):
        return "VALID"
    if all(pads[i] == _same_pads(spatial[i], kernel[i], strides[i], dilations[i]) for i in range(len(pads))):
        return "SAME"
    return None


def _pad_nhwc(ctx: Context, x: Tensor, pads: list[tuple[int, int]], value: float | None = None) -> Tensor:
    """Explicit spatial padding of an NHWC tensor (zeros, or ``value`` through PADV2)."""
    paddings = np.array([(0, 0), *pads, (0, 0)], dtype=np.int32)
    shape = tuple(d + int(b) + int(a) for d, (b, a) in zip(x.shape, paddings, strict=True))
    out = ctx.tmp("pad", shape, x.dtype)
    if value is None:
        ctx.op("PAD", [x, ctx.graph.const("paddings", paddings)], [out], fb.PadOptionsT())
    else:
        fill = ctx.graph.const("pad_value", np.array(value, dtype=x.dtype))
        ctx.op("PADV2", [x, ctx.graph.const("paddings", paddings), fill], [out], fb.PadV2OptionsT())
    return out


def _bias(ctx: Context, value: ir.Value | None, channels: int) -> Tensor:
    if value is None or not value.name:
        return ctx.graph.const("bias", np.zeros(channels, np.float32))
    return ctx.weight(value)


def _lift_1d(values: Sequence[int] | None, default: int, pads: bool = False) -> list[int] | None:
    """1-D attributes as 2-D ones over a unit H dimension."""
    if values is None:
        return None
    if pads:
        return [0, int(values[0]), 0, int(values[1])]
    return [default, int(values[0])]


@converter("Conv", since=1)
def conv(
    ctx: Context,
    node: ir.Node,
    *,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> None:
    x_value, w_value, y_value = node.inputs[0], node.inputs[1], node.outputs[0]
    b_value = node.inputs[2] if len(node.inputs) > 2 else None
    x_shape, y_shape = ctx.shape(x_value), ctx.shape(y_value)
    ctx.require_const(w_value, "Conv weights")
    x = ctx.tensor(x_value)
    if len(x_shape) == 3:  # 1-D: a 2-D convolution over [N, C, 1, W]
        x_shape, y_shape = (x_shape[0], x_shape[1], 1, x_shape[2]), (y_shape[0], y_shape[1], 1, y_shape[2])
        x = ctx.reshape(x, x_shape)
        strides, dilations = _lift_1d(strides, 1), _lift_1d(dilations, 1)
        pads = _lift_1d(pads, 0, pads=True)
        y = _conv2d(
            ctx, x, x_shape, w_value, b_value, y_shape, auto_pad, dilations, group, pads, strides, unit_h=True
        )
        ctx.reshape(y, ctx.shape(y_value), out=ctx.output(y_value))
    elif len(x_shape) == 4:
        y = _conv2d(ctx, x, x_shape, w_value, b_value, y_shape, auto_pad, dilations, group, pads, strides)
        ctx.transpose(y, NHWC_TO_NCHW, out=ctx.output(y_value))
    elif len(x_shape) == 5:
        y = _conv3d(ctx, x, x_shape, w_value, b_value, y_shape, auto_pad, dilations, group, pads, strides)
        ctx.transpose(y, (0, 4, 1, 2, 3), out=ctx.output(y_value))
    else:
        raise ctx.error(f"only 1-D, 2-D and 3-D convolutions are supported (input rank {len(x_shape)})")


def _conv3d(
    ctx: Context,
    x_ncdhw: Tensor,
    x_shape: Sequence[int],
    w_value: ir.Value,
    b_value: ir.Value | None,
    y_shape: Sequence[int],
    auto_pad: str,
    dilations: Sequence[int] | None,
    group: int,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Tensor:
    """A 3-D convolution as one CONV_2D over the output frames; returns [N, T', H', W', O].

    Each output frame's kT input frames (zero-padded in time) are gathered into the channels, ordered
    [C, kT] so that a group's channels stay contiguous, and the weights [O, C/g, kT, kH, kW] become
    [O, kH, kW, C/g * kT]: one accumulation per output, as CONV_3D computes it (LiteRT's conv3d.cc is float32
    only), so an int8 model keeps the QDQ model's single requantization."""
    n, c, t, h, w = (int(d) for d in x_shape)
    w_shape = ctx.require_const(w_value, "Conv weights").shape
    out_channels, in_per_group, kt, kh, kw = w_shape
    strides = list(strides or (1, 1, 1))
    dilations = list(dilations or (1, 1, 1))
    explicit = _explicit_pads((t, h, w), (kt, kh, kw), strides, dilations, _decode(auto_pad), pads)
    (before, after), spatial_pads = explicit[0], explicit[1:]
    t_out = int(y_shape[2])
    x = ctx.transpose(x_ncdhw, (0, 2, 3, 4, 1))  # [N, T, H, W, C]
    if before or after:
        paddings = np.array([(0, 0), (before, after), (0, 0), (0, 0), (0, 0)], np.int32)
        padded = ctx.tmp("pad_time", (n, t + before + after, h, w, c), x.dtype)
        ctx.op("PAD", [x, ctx.graph.const("paddings", paddings)], [padded], fb.PadOptionsT())
        x = padded
    frames = x.shape[1]
    x = ctx.reshape(x, (n * frames, h, w, c))
    # taps[b, o, k]: the input frame of batch b's output frame o, temporal tap k
    taps_index = (
        np.arange(n)[:, None, None] * frames
        + np.arange(t_out)[None, :, None] * strides[0]
        + np.arange(kt)[None, None, :] * dilations[0]
    ).reshape(-1)
    if not np.array_equal(taps_index, np.arange(n * frames)):
        x = taps.gather(ctx, x, 0, taps_index)
    if kt > 1:
        x = ctx.reshape(x, (n * t_out, kt, h, w, c))
        x = ctx.reshape(ctx.transpose(x, (0, 2, 3, 4, 1)), (n * t_out, h, w, c * kt))
    spatial = (h, w)
    mode = _padding_mode(spatial, (kh, kw), strides[1:], dilations[1:], spatial_pads)
    if mode is None:
        x = _pad_nhwc(ctx, x, spatial_pads)
        mode = "VALID"
    y_nhwc = ctx.tmp("conv3d_nhwc", (n * t_out, *(int(d) for d in y_shape[3:]), out_channels))
    bias = _bias(ctx, b_value, out_channels)
    if group == c and group > 1 and in_per_group * kt == 1:
        opts = fb.DepthwiseConv2DOptionsT()
        opts.depthMultiplier = out_channels // c
        code = "DEPTHWISE_CONV_2D"
        weights = ctx.weight(w_value, perm=(1, 3, 4, 0, 2), shape=(1, kh, kw, out_channels))
    else:
        opts, code = fb.Conv2DOptionsT(), "CONV_2D"
        weights = ctx.weight(w_value, perm=(0, 3, 4, 1, 2), shape=(out_channels, kh, kw, in_per_group * kt))
    opts.padding = _PADDING[mode]
    opts.strideH, opts.strideW = strides[1:]
    opts.dilationHFactor, opts.dilationWFactor = dilations[1:]
    ctx.op(code, [x, weights, bias], [y_nhwc], opts)
    return ctx.reshape(y_nhwc, (n, t_out, *y_nhwc.shape[1:]))


def _conv2d(
    ctx: Context,
    x_nchw: Tensor,
    x_shape: Sequence[int],
    w_value: ir.Value,
    b_value: ir.Value | None,
    y_shape: Sequence[int],
    auto_pad: str,
    dilations: Sequence[int] | None,
    group: int,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
    unit_h: bool = False,
) -> Tensor:
    """CONV_2D / DEPTHWISE_CONV_2D on NHWC; returns the NHWC result (or NCHW for ``unit_h``)."""
    insert = 2 if unit_h else None
    w_shape = ctx.require_const(w_value, "Conv weights").shape
    if unit_h:
        w_shape = (w_shape[0], w_shape[1], 1, w_shape[2])
    out_channels, in_per_group, kh, kw = w_shape
    strides = list(strides or (1, 1))
    dilations = list(dilations or (1, 1))
    spatial = x_shape[2:]
    explicit = _explicit_pads(spatial, (kh, kw), strides, dilations, _decode(auto_pad), pads)
    if unit_h:
        explicit[0] = (0, 0)
    mode = _padding_mode(spatial, (kh, kw), strides, dilations, explicit)
    x = ctx.transpose(x_nchw, NCHW_TO_NHWC)
    if mode is None:
        x = _pad_nhwc(ctx, x, explicit)
        mode = "VALID"
    y_nhwc = ctx.tmp("conv_nhwc", permute(y_shape, NCHW_TO_NHWC))
    bias = _bias(ctx, b_value, out_channels)
    in_channels = x_shape[1]
    if group == in_channels and in_per_group == 1 and group > 1:
        opts = fb.DepthwiseConv2DOptionsT()
        opts.depthMultiplier = out_channels // in_channels
        code, weights = "DEPTHWISE_CONV_2D", ctx.weight(w_value, perm=(1, 2, 3, 0), insert_axis=insert)
    else:
        opts = fb.Conv2DOptionsT()
        code, weights = "CONV_2D", ctx.weight(w_value, perm=(0, 2, 3, 1), insert_axis=insert)
    opts.padding = _PADDING[mode]
    opts.strideH, opts.strideW = strides
    opts.dilationHFactor, opts.dilationWFactor = dilations
    ctx.op(code, [x, weights, bias], [y_nhwc], opts)
    if unit_h:
        return ctx.transpose(y_nhwc, NHWC_TO_NCHW)
    return y_nhwc


def _output_shape(ctx: Context, x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """TRANSPOSE_CONV's output shape input: a constant, or with a batch sized at run time (RoIs after a
    detector's selection) the input's run-time batch beside the constant rest."""
    if shape[0] >= 0:
        return ctx.graph.const("output_shape", shape, np.int32)
    batch = ctx.tmp("batch", (1,), np.int32)
    begin, size = ctx.graph.const("begin", [0], np.int32), ctx.graph.const("size", [1], np.int32)
    ctx.op("SLICE", [runtime_shape(ctx, x), begin, size], [batch])
    out = ctx.tmp("output_shape", (4,), np.int32)
    opts = fb.ConcatenationOptionsT()
    opts.axis = 0
    ctx.op("CONCATENATION", [batch, ctx.graph.const("rest", shape[1:], np.int32)], [out], opts)
    return out


@converter("ConvTranspose", since=1)
def conv_transpose(
    ctx: Context,
    node: ir.Node,
    *,
    auto_pad: str = "NOTSET",
    dilations: Sequence[int] | None = None,
    group: int = 1,
    kernel_shape: Sequence[int] | None = None,
    output_padding: Sequence[int] | None = None,
    output_shape: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
) -> None:
    x_value, w_value = node.inputs[0], node.inputs[1]
    b_value = node.inputs[2] if len(node.inputs) > 2 else None
    x_shape = ctx.shape(x_value)
    w = ctx.require_const(w_value, "ConvTranspose weights")
    x = ctx.tensor(x_value)
    y_value = node.outputs[0]
    y_shape = ctx.shape(y_value)
    lifted = len(x_shape) == 3
    if lifted:  # 1-D: a 2-D transposed convolution over [N, C, 1, W]
        x_shape, y_shape = (*x_shape[:2], 1, x_shape[2]), (*y_shape[:2], 1, y_shape[2])
        x = ctx.reshape(x, x_shape)
        w = w[:, :, None, :]
        strides, dilations = _lift_1d(strides, 1), _lift_1d(dilations, 1)
        output_padding = _lift_1d(output_padding, 0)
        output_shape = None if output_shape is None else [1, *output_shape]
        pads = _lift_1d(pads, 0, pads=True)
    elif len(x_shape) == 5:
        args = (auto_pad, dilations, group, output_padding, output_shape, pads, strides)
        y = _conv_transpose3d(ctx, x, x_shape, w_value, b_value, y_shape, *args)
        ctx.transpose(y, (0, 4, 1, 2, 3), out=ctx.output(y_value))
        return
    elif len(x_shape) != 4:
        raise ctx.error(
            f"only 1-D, 2-D and 3-D transposed convolutions are supported (input rank {len(x_shape)})"
        )
    dilated = dilations is not None and any(d != 1 for d in dilations)
    if dilated:  # the kernel with zeros between its taps (TRANSPOSE_CONV has no dilation)
        dy, dx = (int(d) for d in dilations)
        spread = np.zeros((*w.shape[:2], (w.shape[2] - 1) * dy + 1, (w.shape[3] - 1) * dx + 1), w.dtype)
        spread[:, :, ::dy, ::dx] = w
        w = spread
    _, group_out, kh, kw = w.shape
    out_channels = group_out * group
    strides = list(strides or (1, 1))
    full = [(x_shape[2 + i] - 1) * strides[i] + (kh, kw)[i] for i in range(2)]
    # ONNX output = full + output_padding - pads_begin - pads_end: compute the full (VALID) result,
    # extended by output_padding (TRANSPOSE_CONV leaves positions no input reaches at bias), then crop.
    mode = _decode(auto_pad)
    extra_pad = list(output_padding or (0, 0))
    begin = []
    for i in range(2):
        total = full[i] + extra_pad[i] - y_shape[2 + i]  # pads_begin + pads_end
        if mode == "SAME_UPPER":
            start = total // 2
        elif mode == "SAME_LOWER" or output_shape is not None:
            start = total - total // 2
        else:
            start = int(pads[i]) if pads is not None else 0
        if start < 0:
            raise ctx.error(f"negative padding ({start}) is not supported")
        begin.append(start)
        full[i] = max(full[i], start + y_shape[2 + i])
    x = ctx.transpose(x, NCHW_TO_NHWC)
    full_shape = (y_shape[0], full[0], full[1], out_channels)
    opts = fb.TransposeConvOptionsT()
    opts.padding = fb.Padding.VALID
    opts.strideH, opts.strideW = strides
    bias = _bias(ctx, b_value, out_channels)
    y_full = ctx.tmp("tconv_nhwc", full_shape)
    if group == 1 and not dilated:  # the ONNX weights (keeping integer weights of a quantized model)
        weights = ctx.weight(w_value, perm=(1, 2, 3, 0), insert_axis=2 if lifted else None)
        out_shape = _output_shape(ctx, x, full_shape)
        ctx.op("TRANSPOSE_CONV", [out_shape, weights, x, bias], [y_full], opts)
    else:
        _grouped_transpose_conv(ctx, x, w, bias, group, opts, y_full)
    target = permute(y_shape, NCHW_TO_NHWC)
    if target != full_shape:
        cropped = ctx.tmp("crop", target)
        starts = ctx.graph.const("begin", [0, begin[0], begin[1], 0], np.int32)
        ctx.op(
            "SLICE",
            [y_full, starts, ctx.graph.const("size", target, np.int32)],
            [cropped],
            fb.SliceOptionsT(),
        )
        y_full = cropped
    if lifted:
        ctx.reshape(ctx.transpose(y_full, NHWC_TO_NCHW), ctx.shape(y_value), out=ctx.output(y_value))
    else:
        ctx.transpose(y_full, NHWC_TO_NCHW, out=ctx.output(y_value))


def _transpose_begin(mode: str | None, full: int, out: int, pad: int, output_shape: bool) -> int:
    """Where ONNX's ConvTranspose output starts inside the full (VALID + output_padding) result."""
    total = full - out  # pads_begin + pads_end
    if mode == "SAME_UPPER":
        return total // 2
    if mode == "SAME_LOWER" or output_shape:
        return total - total // 2
    return pad


def _conv_transpose3d(
    ctx: Context,
    x_ncdhw: Tensor,
    x_shape: Sequence[int],
    w_value: ir.Value,
    b_value: ir.Value | None,
    y_shape: Sequence[int],
    auto_pad: str,
    dilations: Sequence[int] | None,
    group: int,
    output_padding: Sequence[int] | None,
    output_shape: Sequence[int] | None,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
) -> Tensor:
    """A 3-D transposed convolution as one TRANSPOSE_CONV over the output frames; returns [N, T', H', W', O].

    Output frame f (of the full result) sums input frame t through temporal tap k where f = t * sT + k * dT:
    each output frame's kT taps (input frame (f - k * dT) / sT, or a zero frame where that is no input frame)
    are gathered into the channels, ordered [C, kT], and the weights [C, O, kT, kH, kW] become
    [O, kH, kW, C * kT]: one accumulation per output as in ``_conv3d`` (TFLite has no int8 CONV_3D_TRANSPOSE),
    so an int8 model keeps the QDQ model's single requantization. H and W are TRANSPOSE_CONV's, cropped."""
    n, c, t, h, w = (int(d) for d in x_shape)
    w_shape = ctx.require_const(w_value, "ConvTranspose weights").shape
    _, out_per_group, kt, kh, kw = w_shape
    if group != 1:
        raise ctx.error(f"a grouped 3-D ConvTranspose (group {group}) is not supported")
    dilations = [int(d) for d in (dilations or (1, 1, 1))]
    if dilations[1:] != [1, 1]:
        raise ctx.error(f"a 3-D ConvTranspose dilated in H or W ({dilations}) is not supported")
    strides = [int(s) for s in (strides or (1, 1, 1))]
    extra = [int(p) for p in (output_padding or (0, 0, 0))]
    pads = [int(p) for p in (pads or (0,) * 6)]
    mode = _decode(auto_pad)
    kernel = ((kt - 1) * dilations[0] + 1, kh, kw)
    full = [(x_shape[2 + i] - 1) * strides[i] + kernel[i] + extra[i] for i in range(3)]
    begin = [
        _transpose_begin(mode, full[i], int(y_shape[2 + i]), pads[i], output_shape is not None)
        for i in range(3)
    ]
    if min(begin) < 0:
        raise ctx.error(f"negative padding ({min(begin)}) is not supported")
    t_out = int(y_shape[2])
    x = ctx.transpose(x_ncdhw, (0, 2, 3, 4, 1))  # [N, T, H, W, C]
    paddings = np.array([(0, 0), (0, 1), (0, 0), (0, 0), (0, 0)], np.int32)  # frame T of each batch: zeros
    padded = ctx.tmp("pad_time", (n, t + 1, h, w, c), x.dtype)
    ctx.op("PAD", [x, ctx.graph.const("paddings", paddings)], [padded], fb.PadOptionsT())
    x = ctx.reshape(padded, (n * (t + 1), h, w, c))
    frames = np.arange(t_out)[:, None] + begin[0] - np.arange(kt)[None, :] * dilations[0]  # [T', kT]
    source = np.where(
        (frames >= 0) & (frames % strides[0] == 0) & (frames // strides[0] < t), frames // strides[0], t
    )
    index = (np.arange(n)[:, None, None] * (t + 1) + source[None]).reshape(-1)
    x = taps.gather(ctx, x, 0, index)
    x = ctx.reshape(x, (n * t_out, kt, h, w, c))
    x = ctx.reshape(ctx.transpose(x, (0, 2, 3, 4, 1)), (n * t_out, h, w, c * kt))
    full_shape = (n * t_out, full[1], full[2], out_per_group)
    opts = fb.TransposeConvOptionsT()
    opts.padding = fb.Padding.VALID
    opts.strideH, opts.strideW = strides[1:]
    weights = ctx.weight(w_value, perm=(1, 3, 4, 0, 2), shape=(out_per_group, kh, kw, c * kt))
    y = ctx.tmp("tconv3d_nhwc", full_shape)
    out_shape = ctx.graph.const("output_shape", full_shape, np.int32)
    ctx.op("TRANSPOSE_CONV", [out_shape, weights, x, _bias(ctx, b_value, out_per_group)], [y], opts)
    target = (n * t_out, int(y_shape[3]), int(y_shape[4]), out_per_group)
    if target != full_shape:
        cropped = ctx.tmp("crop", target)
        starts = ctx.graph.const("begin", [0, begin[1], begin[2], 0], np.int32)
        ctx.op("SLICE", [y, starts, ctx.graph.const("size", target, np.int32)], [cropped], fb.SliceOptionsT())
        y = cropped
    return ctx.reshape(y, (n, t_out, *target[1:]))


def _grouped_transpose_conv(
    ctx: Context, x: Tensor, w: np.ndarray, bias: Tensor, group: int, opts: object, y: Tensor
) -> None:
    """TRANSPOSE_CONV has no groups: one per group on its slice of the input channels, concatenated
    (``w``: the ONNX weights [C_in, C_out / group, kh, kw] as an array)."""
    in_per_group = x.shape[3] // group
    out_per_group = y.shape[3] // group
    bias_data = bias.data if bias.is_const else None
    if bias_data is None:
        raise ctx.error("a grouped ConvTranspose needs a constant bias")
    if group == 1:
        w_nhwc = np.ascontiguousarray(w.transpose(1, 2, 3, 0), np.float32)
        out_shape = ctx.graph.const("output_shape", y.shape, np.int32)
        ctx.op("TRANSPOSE_CONV", [out_shape, ctx.graph.const("weights", w_nhwc), x, bias], [y], opts)
        return
    parts = []
    for g in range(group):
        x_g = ctx.tmp(f"group{g}_in", (*x.shape[:3], in_per_group))
        begin = ctx.graph.const("begin", [0, 0, 0, g * in_per_group], np.int32)
        size = ctx.graph.const("size", x_g.shape, np.int32)
        ctx.op("SLICE", [x, begin, size], [x_g], fb.SliceOptionsT())
        w_g = w[g * in_per_group : (g + 1) * in_per_group].transpose(1, 2, 3, 0)
        b_g = bias_data.reshape(-1)[g * out_per_group : (g + 1) * out_per_group]
        y_g = ctx.tmp(f"group{g}_out", (*y.shape[:3], out_per_group))
        ctx.op(
            "TRANSPOSE_CONV",
            [
                ctx.graph.const("output_shape", y_g.shape, np.int32),
                ctx.graph.const("weights", np.ascontiguousarray(w_g, np.float32)),
                x_g,
                ctx.graph.const("bias", np.asarray(b_g, np.float32)),
            ],
            [y_g],
            opts,
        )
        parts.append(y_g)
    concat = fb.ConcatenationOptionsT()
    concat.axis = 3
    ctx.op("CONCATENATION", parts, [y], concat)


def _pool(
    ctx: Context,
    node: ir.Node,
    code: str,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    ceil_mode: int,
    dilations: Sequence[int] | None,
    count_include_pad: int = 0,
) -> None:
    x_value, y_value = node.inputs[0], node.outputs[0]
    x_shape = ctx.shape(x_value)
    x = ctx.tensor(x_value)
    y_shape = ctx.shape(y_value)
    dilated = dilations is not None and any(d != 1 for d in dilations)
    if dilated or len(x_shape) > 4:
        _pool_by_gathers(ctx, node, code, kernel_shape, strides, pads, auto_pad, dilations, count_include_pad)
        return
    if len(x_shape) == 3:  # 1-D: pool over [N, C, 1, W]
        x_shape, y_shape = (x_shape[0], x_shape[1], 1, x_shape[2]), (y_shape[0], y_shape[1], 1, y_shape[2])
        x = ctx.reshape(x, x_shape)
        kernel_shape, strides = _lift_1d(kernel_shape, 1), _lift_1d(strides, 1)
        pads, dilations = _lift_1d(pads, 0, pads=True), _lift_1d(dilations, 1)
    elif len(x_shape) != 4:
        raise ctx.error(f"only 1-D and 2-D pooling is supported (input rank {len(x_shape)})")
    if dilations is not None and any(d != 1 for d in dilations):
        raise ctx.error(f"pooling dilations {list(dilations)} are not supported")
    kernel = list(kernel_shape)
    strides = list(strides or (1, 1))
    spatial = x_shape[2:]
    explicit = _explicit_pads(spatial, kernel, strides, (1, 1), _decode(auto_pad), pads)
    given = list(explicit)
    # ceil_mode (or any output size bigger than VALID gives) needs extra padding at the end.
    for i in range(2):
        need = (y_shape[2 + i] - 1) * strides[i] + kernel[i] - spatial[i] - explicit[i][0]
        if need > explicit[i][1]:
            explicit[i] = (explicit[i][0], need)
    mode = _padding_mode(spatial, kernel, strides, (1, 1), explicit)
    counts = None
    if code == "AVERAGE_POOL_2D" and mode is not None and mode != "VALID" and count_include_pad:
        mode = None  # TFLite's SAME average excludes the padding; pad with zeros explicitly
    if code == "AVERAGE_POOL_2D" and mode is None:
        # Zero padding + VALID averages over the whole window; rescale each output by window size /
        # the number of elements ONNX averages there (inside the input, or inside input + pads).
        counts = _window_counts(spatial, kernel, strides, explicit, given if count_include_pad else None)
    x = ctx.transpose(x, NCHW_TO_NHWC)
    if mode is None:
        x = _pad_nhwc(
            ctx, x, explicit, value=None if code == "AVERAGE_POOL_2D" else float(np.finfo(np.float32).min)
        )
        mode = "VALID"
    opts = fb.Pool2DOptionsT()
    opts.padding = _PADDING[mode]
    opts.strideH, opts.strideW = strides
    opts.filterHeight, opts.filterWidth = kernel
    y_nhwc = ctx.tmp("pool_nhwc", permute(y_shape, NCHW_TO_NHWC))
    ctx.op(code, [x], [y_nhwc], opts)
    if counts is not None and not np.all(counts == kernel[0] * kernel[1]):
        factor = (kernel[0] * kernel[1] / counts).astype(np.float32)[None, :, :, None]
        rescaled = ctx.tmp("pool_rescaled", y_nhwc.shape)
        ctx.op("MUL", [y_nhwc, ctx.graph.const("window_scale", factor)], [rescaled], fb.MulOptionsT())
        y_nhwc = rescaled
    if len(ctx.shape(y_value)) == 3:
        ctx.reshape(ctx.transpose(y_nhwc, NHWC_TO_NCHW), ctx.shape(y_value), out=ctx.output(y_value))
    else:
        ctx.transpose(y_nhwc, NHWC_TO_NCHW, out=ctx.output(y_value))


def _pool_by_gathers(
    ctx: Context,
    node: ir.Node,
    code: str,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    dilations: Sequence[int] | None,
    count_include_pad: int,
) -> None:
    """Pooling TFLite's 2-D kernels cannot express (3-D, dilated windows), one spatial axis at a time:
    a max (or an average) of a box is the max (average) along each axis in turn. Per axis, GATHERs of
    the window's taps with constant indices, then MAXIMUM, or a sum weighted by 1 / ONNX's divisor."""
    x, y_shape = ctx.tensor(node.inputs[0]), ctx.shape(node.outputs[0])
    n = x.rank - 2
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    effective = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations, strict=True)]
    explicit = _explicit_pads(x.shape[2:], effective, strides, [1] * n, _decode(auto_pad), pads)
    for i in range(n):
        axis, size, out_len = 2 + i, x.shape[2 + i], y_shape[2 + i]
        before, after = explicit[i]
        # positions[t, o]: the input index tap t of output o's window reads (may lie in the padding)
        positions = (
            np.arange(out_len)[None, :] * strides[i]
            - before
            + np.arange(kernel_shape[i])[:, None] * dilations[i]
        )
        inside = (positions >= 0) & (positions < size)
        if not inside.any(axis=0).all():
            raise ctx.error("a pooling window that lies wholly in the padding is not supported")
        if code == "MAX_POOL_2D":
            # A padding tap reads a position inside the same window instead (the max is unchanged).
            first = positions[inside.argmax(axis=0), np.arange(out_len)]
            x = taps.maximum(ctx, x, axis, np.where(inside, positions, first[None, :]))
            continue
        counted = (positions >= -before) & (positions < size + after) if count_include_pad else inside
        weights = np.where(inside, 1.0, 0.0) / counted.sum(axis=0)[None, :]
        x = taps.weighted_sum(ctx, x, axis, np.clip(positions, 0, size - 1), weights)
    ctx.reshape(x, y_shape, out=ctx.output(node.outputs[0]))


def _window_counts(
    spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    padded: list[tuple[int, int]],
    counted_pads: list[tuple[int, int]] | None,
) -> np.ndarray:
    """Per output position, how many window elements ONNX's AveragePool divides by."""
    valid = np.ones(tuple(spatial), np.float64)
    if counted_pads is not None:  # count_include_pad: the given pads count, ceil_mode's extra does not
        valid = np.pad(valid, counted_pads, constant_values=1.0)
        extra = [(b - cb, a - ca) for (b, a), (cb, ca) in zip(padded, counted_pads, strict=True)]
        valid = np.pad(valid, extra, constant_values=0.0)
    else:
        valid = np.pad(valid, padded, constant_values=0.0)
    out = [(valid.shape[i] - kernel[i]) // strides[i] + 1 for i in range(2)]
    counts = np.zeros(out)
    for oy in range(out[0]):
        for ox in range(out[1]):
            y0, x0 = oy * strides[0], ox * strides[1]
            counts[oy, ox] = valid[y0 : y0 + kernel[0], x0 : x0 + kernel[1]].sum()
    return counts


@converter("MaxPool", since=1)
def max_pool(
    ctx: Context,
    node: ir.Node,
    *,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    dilations: Sequence[int] | None = None,
    storage_order: int = 0,
) -> None:
    if len(node.outputs) > 1 and node.outputs[1].name:
        raise ctx.error("the Indices output of MaxPool is not supported")
    _pool(ctx, node, "MAX_POOL_2D", kernel_shape, strides, pads, auto_pad, ceil_mode, dilations)


@converter("AveragePool", since=1)
def average_pool(
    ctx: Context,
    node: ir.Node,
    *,
    kernel_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: int = 0,
    count_include_pad: int = 0,
    dilations: Sequence[int] | None = None,
) -> None:
    _pool(
        ctx,
        node,
        "AVERAGE_POOL_2D",
        kernel_shape,
        strides,
        pads,
        auto_pad,
        ceil_mode,
        dilations,
        count_include_pad,
    )


def _global_pool(ctx: Context, node: ir.Node, code: str) -> None:
    x_value = node.inputs[0]
    rank = ctx.rank(x_value)
    axes = ctx.graph.const("axes", list(range(2, rank)), np.int32)
    opts = fb.ReducerOptionsT()
    opts.keepDims = True
    ctx.op(code, [ctx.tensor(x_value), axes], [ctx.output(node.outputs[0])], opts)


@converter("GlobalAveragePool", since=1)
def global_average_pool(ctx: Context, node: ir.Node) -> None:
    _global_pool(ctx, node, "MEAN")


@converter("GlobalMaxPool", since=1)
def global_max_pool(ctx: Context, node: ir.Node) -> None:
    _global_pool(ctx, node, "REDUCE_MAX")


def _fully_connected(ctx: Context, a: Tensor, weights: Tensor, bias: Tensor | None, out: Tensor) -> None:
    opts = fb.FullyConnectedOptionsT()
    opts.keepNumDims = a.rank > 2
    ctx.op("FULLY_CONNECTED", [a, weights, bias], [out], opts)


def _batch_matmul(
    ctx: Context, a: Tensor, b: Tensor, out: Tensor, adj_x: bool = False, adj_y: bool = False
) -> None:
    if max(a.rank, b.rank) > 5:  # batch_matmul.cc Prepare: ranks 2 to 5 (float and int8)
        raise ctx.error(
            f"MatMul of rank {max(a.rank, b.rank)} operands: TFLite's BATCH_MATMUL takes ranks 2 to 5"
        )
    opts = fb.BatchMatMulOptionsT()
    opts.adjX, opts.adjY = adj_x, adj_y
    ctx.op("BATCH_MATMUL", [a, b], [out], opts)


@converter("MatMul", since=1)
def matmul(ctx: Context, node: ir.Node) -> None:
    a_value, b_value = node.inputs
    y = ctx.output(node.outputs[0])
    b = ctx.const(b_value)
    if b is not None and b.ndim == 2 and not ctx.is_const(a_value) and ctx.rank(a_value) >= 2:
        _fully_connected(ctx, ctx.tensor(a_value), ctx.weight(b_value, perm=(1, 0)), None, y)
        return
    a_t, b_t = ctx.tensor(a_value), ctx.tensor(b_value)
    if a_t.rank >= 2 and b_t.rank >= 2:
        _batch_matmul(ctx, a_t, b_t, y)
        return
    # 1-D operands (numpy semantics): a [K] -> [1, K], b [K] -> [K, 1], then drop the added dim.
    a2 = ctx.reshape(a_t, (1, a_t.shape[0])) if a_t.rank == 1 else a_t
    b2 = ctx.reshape(b_t, (b_t.shape[0], 1)) if b_t.rank == 1 else b_t
    shape = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1])
    product = ctx.tmp("matmul", shape)
    _batch_matmul(ctx, a2, b2, product)
    ctx.reshape(product, y.shape, out=y)


@converter("Gemm", since=1)
def gemm(
    ctx: Context,
    node: ir.Node,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    transA: int = 0,
    transB: int = 0,  # noqa: N803
) -> None:
    a_value, b_value = node.inputs[0], node.inputs[1]
    c_value = (
        node.inputs[2]
        if len(node.inputs) > 2 and node.inputs[2] is not None and node.inputs[2].name
        else None
    )
    y_value = node.outputs[0]
    y_shape = ctx.shape(y_value)
    n = y_shape[1]
    a = ctx.tensor(a_value)
    if transA:
        a = ctx.transpose(a, (1, 0))
    c = ctx.const(c_value)
    fold_bias = c_value is None or (c is not None and c.size in (1, n) and (c.ndim < 2 or c.shape[0] == 1))
    if ctx.is_const(b_value):
        weights = ctx.weight(b_value, perm=None if transB else (1, 0))
        if alpha != 1.0:
            weights.data = (weights.data * np.float32(alpha)).astype(np.float32)
            if weights.qparams is not None:
                weights.qparams.scale = weights.qparams.scale * np.float32(alpha)
        bias = None
        if c_value is not None and fold_bias:
            bias = ctx.graph.const(
                c_value.name, np.broadcast_to(np.float32(beta) * c.reshape(-1), (n,)).astype(np.float32)
            )
            if beta == 1.0 and c.ndim == 1 and c.shape == (n,):
                bias = ctx.weight(c_value)
        mm = ctx.output(y_value) if c_value is None or fold_bias else ctx.tmp("matmul", y_shape)
        _fully_connected(ctx, a, weights, bias, mm)
    else:
        fold_bias = c_value is None
        mm = ctx.output(y_value) if fold_bias else ctx.tmp("matmul", y_shape)
        product = mm if alpha == 1.0 else ctx.tmp("product", y_shape)
        _batch_matmul(ctx, a, ctx.tensor(b_value), product, adj_y=bool(transB))
        if alpha != 1.0:
            ctx.op("MUL", [product, ctx.graph.const("alpha", np.float32(alpha))], [mm], fb.MulOptionsT())
    if not fold_bias:
        c_t = ctx.tensor(c_value)
        if beta != 1.0 and c_t.is_const:
            c_t = ctx.graph.const("beta_c", np.float32(beta) * c_t.data)
        elif beta != 1.0:
            scaled = ctx.tmp("beta_c", c_t.shape)
            ctx.op("MUL", [c_t, ctx.graph.const("beta", np.float32(beta))], [scaled], fb.MulOptionsT())
            c_t = scaled
        ctx.op("ADD", [mm, c_t], [ctx.output(y_value)], fb.AddOptionsT())
