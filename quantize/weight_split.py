"""``w8`` with calibration data: a dense layer whose int8 weight (one scale per output channel, GPTQ-rounded) leaves
its output on the data under :data:`~edgekit.quantize.weight_only.W8_MIN_OUTPUT_SQNR_DB` becomes ``k`` layers on
``k`` equal groups of its input channels, each with its own int8 weight and per-output-channel scales, summed.

That is int8 with ``k`` scales per output channel (blocked along the input), written in the per-channel form
every target runs with integer weights (LiteRT's hybrid and DEQUANTIZE kernels, OpenVINO's compressed weights,
onnxruntime), at any opset: a Slice of the input per group, the layer, and an Add. Where one scale per row must
cover a few large weights, the other weights get a coarse grid; with a scale per group, each group's grid fits
its own weights. The rows are GPTQ-rounded with the groups' scales (:func:`edgekit.quantize.gptq.gptq_round`,
one scale per column). The fewest groups (2 to :data:`MAX_GROUPS`, of at least :data:`MIN_GROUP_CHANNELS`
channels) that reach the bar are taken; none reaching it leaves the caller's float16 weight.

PP-OCRv4 rec's last backbone 1x1 convolution (480 x 480) on 128 word lines: 39.9 dB in one group, 44.4 dB in 3
(5.8 KB of scales more), the model's cosine to fp32 on 30 held-out lines 0.99883 -> 0.99978 (float16: 0.99976,
230 KB more).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import IrWriter, NameScope, attr
from edgekit.quantize import gptq, qdq

#: Most input-channel groups a layer is split into.
MAX_GROUPS = 8
#: Fewest input channels per group.
MIN_GROUP_CHANNELS = 16


@dataclass(frozen=True)
class Split:
    """A layer's weight as ``groups`` int8 weights (``q``: [O, I] rows, GPTQ-rounded; ``scales``: [O, groups])."""

    groups: int
    q: np.ndarray
    scales: np.ndarray
    sqnr_db: float


def _channels(node: ir.Node, weight: np.ndarray) -> int | None:
    """How many input channels the weight's rows cover, or None for a layer this does not split."""
    if node.op_type == "Conv" and attr(node, "group", 1) == 1 and weight.ndim >= 3:
        return weight.shape[1]
    if node.op_type == "MatMul" and weight.ndim == 2:
        return weight.shape[0]
    if node.op_type == "Gemm" and not attr(node, "transA", 0):
        return weight.shape[1] if attr(node, "transB", 0) else weight.shape[0]
    return None


def plan(node: ir.Node, weight: np.ndarray, hessian: np.ndarray, bar_db: float) -> Split | None:
    """The fewest groups whose GPTQ-rounded int8 weights reach ``bar_db`` of the layer's output on the data
    (``hessian``: the layer's ``E[x x^T]``), or None."""
    channels = _channels(node, weight)
    if channels is None or hessian.ndim != 2:
        return None
    rows = gptq.as_rows(node, weight).astype(np.float64)
    taps = rows.shape[1] // channels
    signal = gptq.output_error(rows, np.zeros_like(rows), hessian)
    for groups in range(2, MAX_GROUPS + 1):
        if channels % groups or channels // groups < MIN_GROUP_CHANNELS:
            continue
        width = channels // groups * taps
        absmax = np.abs(rows.reshape(rows.shape[0], groups, width)).max(axis=2)
        scales = qdq.float16_scales(np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32))
        q = gptq.gptq_round(rows, hessian, np.repeat(scales.astype(np.float64), width, axis=1), -127, 127)
        noise = gptq.output_error(rows, q * np.repeat(scales.astype(np.float64), width, axis=1), hessian)
        sqnr = gptq.sqnr_db(signal, noise)
        if sqnr >= bar_db:
            return Split(groups, q.astype(np.int8), scales, sqnr)
    return None


def apply(graph: ir.Graph, names: NameScope, node: ir.Node, weight: np.ndarray, split: Split) -> None:
    """Replace ``node`` (its constant weight at input 1) by ``split.groups`` layers on slices of its input, each
    reading its int8 weight through DequantizeLinear (per output channel), and the Adds of their outputs."""
    x, out = node.inputs[0], node.outputs[0]
    channels = _channels(node, weight)
    axis = 1 if node.op_type in ("Conv", "Gemm") else len(x.shape) - 1
    per_group = channels // split.groups
    width = split.q.shape[1] // split.groups
    base = node.inputs[1].name or "weight"
    writer = IrWriter(graph, names, node, x.dtype)
    total = None
    for j in range(split.groups):
        begin = j * per_group
        shape = list(x.shape)
        shape[axis] = per_group
        part = writer.op(
            "Slice",
            [
                x,
                writer.const("starts", np.array([begin], np.int64)),
                writer.const("ends", np.array([begin + per_group], np.int64)),
                writer.const("axes", np.array([axis], np.int64)),
            ],
            shape,
        )
        rows = split.q[:, j * width : (j + 1) * width]
        q, channel_axis = _weight_form(node, weight, rows, per_group)
        dq = writer.op(
            "DequantizeLinear",
            [
                writer.const(f"{base}_group{j}_quantized", q),
                writer.const(f"{base}_group{j}_scale", np.ascontiguousarray(split.scales[:, j])),
            ],
            q.shape,
            out_dtype=ir.DataType.FLOAT,
            axis=channel_axis,
        )
        inputs = [part, dq] + ([node.inputs[2]] if j == 0 and len(node.inputs) > 2 and node.inputs[2] else [])
        attributes = {k: a.value for k, a in node.attributes.items()}
        y = writer.op(node.op_type, inputs, out.shape, **attributes)
        total = y if total is None else writer.op("Add", [total, y], out.shape)
    writer.done(node, total)


def _weight_form(
    node: ir.Node, weight: np.ndarray, rows: np.ndarray, per_group: int
) -> tuple[np.ndarray, int]:
    """A group's int8 rows ([O, group columns]) in the layout of ``node``'s weight, and its output-channel axis."""
    if node.op_type == "Conv":
        return np.ascontiguousarray(rows.reshape((weight.shape[0], per_group) + weight.shape[2:])), 0
    if node.op_type == "Gemm" and attr(node, "transB", 0):
        return np.ascontiguousarray(rows), 0
    return np.ascontiguousarray(rows.T), 1
