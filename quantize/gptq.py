"""Second-order rounding of int8 weights from calibration activations (GPTQ: Frantar et al., 2022): ``w8``'s
with calibration data, and the static recipes' (int8, int16x8) with ``weight_rounding="gptq"``.

Each dense weight (a Conv with one group, a MatMul, a Gemm; for the static recipes grouped Convs too) is
rounded to the recipe's int8 grid (symmetric, the same per-output-channel scales, ``absmax / 127``) so as to
minimise the layer's output error on its real inputs, ``tr((W - Q) H (W - Q)^T)`` with ``H = E[x x^T]`` over
the input vectors ``x`` (a convolution's input patches), rather than each weight's own rounding error: the
input columns are rounded one at a time, those of the inputs with the most energy (``diag(H)``) first, and the
rounding error of each is compensated on the columns not yet rounded through the inverse of ``H`` (its upper
Cholesky factor). An input channel that carries large activations gets its weights rounded most carefully; the
others absorb the difference.

Only the integer values change: the scales, the zero points and the artifact (DequantizeLinear on the weights,
float activations) are those of the data-free recipe; each output channel's row is GPTQ's only where that
lowers its output error on the data (:func:`second_order`). Depthwise convolutions (each output channel sees
one input channel's taps) keep :func:`~edgekit.quantize.qdq.round_preserving_sums` (:func:`takes_gptq`).

PP-OCRv4 rec, 128 rendered text lines (``benchmarks/compression.py --calib 128``): cosine to fp32 on 30
held-out lines 0.9977 (bias correction only) -> 0.99975, every decoded sequence equal (on 100 lines 98, as
with fp16 weights: the flips are fp32's near-ties); its 240x240 and 480x480 1x1 convolutions lose 10-60x less
output error on the data.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import attr

#: Weights with more input columns than this (a convolution's C * kh * kw) keep the data-free rounding: their H
#: (float64, columns squared) would take more than 128 MB each.
MAX_COLUMNS = 4096

#: Columns rounded one by one before the rest of the row takes their errors at once (GPTQ's lazy batch).
BLOCK = 128

#: Diagonal loading of H, as a fraction of its mean diagonal (GPTQ's "percdamp"): keeps H invertible where the
#: calibration data spans fewer directions than the layer has inputs.
DAMPING = 0.01


def takes_gptq(node: ir.Node, grouped: bool = False) -> bool:
    """Whether ``node``'s weight is rounded here with calibration data (weights of named nodes: Conv with one
    group, or with ``grouped`` several groups of more than one input channel each, and no dilation; a 2-D
    MatMul or Gemm weight; at most :data:`MAX_COLUMNS` input columns per group).

    Depthwise convolutions (one input channel per group) keep the data-free rounding (its kernel sums): their
    GPTQ rounding measured no gain on PP-OCRv4 rec (static int16x8 cosine 0.99894 with, 0.99897 without) and
    a loss on the zoo MobileNetV3-small (static int8 0.99462 with, 0.99580 without;
    ``benchmarks/weight_rounding.py``)."""
    weight = node.inputs[1].const_value if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if not node.name or weight is None:
        return False
    if node.op_type == "Conv":
        groups = attr(node, "group", 1)
        plain = all(d == 1 for d in attr(node, "dilations", None) or [1])
        if groups > 1 and (not grouped or weight.shape[1] == 1):
            return False
        return plain and int(np.prod(weight.shape[1:])) <= MAX_COLUMNS
    if node.op_type in ("MatMul", "Gemm") and len(weight.shape) != 2:
        return False
    if node.op_type == "MatMul":
        return weight.shape[0] <= MAX_COLUMNS
    if node.op_type == "Gemm":
        return weight.shape[1 if attr(node, "transB", 0) else 0] <= MAX_COLUMNS
    return False


def on_grid(node: ir.Node) -> bool:
    """Whether ``node``'s weight is (within float32 rounding) on its symmetric per-output-channel int8 grid,
    ``absmax / 127``: a model dequantized from int8 (the ONNX zoo's MobileNetV2), where nearest rounding is
    exact and the rows have nothing to gain."""
    weight = node.inputs[1].const_value.numpy().astype(np.float64)
    rows = as_rows(node, weight)
    scales = np.abs(rows).max(axis=1, keepdims=True) / 127.0
    steps = rows / np.where(scales > 0, scales, 1.0)
    return bool(np.all(np.abs(steps - np.round(steps)) < 1e-3))


def _patches(x: np.ndarray, node: ir.Node, kernel: tuple[int, ...]) -> np.ndarray:
    """A convolution's input vectors: [positions, C * prod(kernel)] in the weight's [O, C, *kernel] order."""
    from numpy.lib.stride_tricks import sliding_window_view

    spatial = len(kernel)
    pads = list(attr(node, "pads", None) or [0] * (2 * spatial))
    strides = list(attr(node, "strides", None) or [1] * spatial)
    if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET", "VALID", b"VALID"):
        raise ValueError("auto_pad SAME is resolved by the model's preparation")
    x = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + spatial]) for i in range(spatial)])
    axes = tuple(range(2, 2 + spatial))
    windows = sliding_window_view(x, kernel, axis=axes)
    windows = windows[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)]
    # [N, C, *out, *kernel] -> [N, *out, C, *kernel]
    order = (0, *range(2, 2 + spatial), 1, *range(2 + spatial, 2 + 2 * spatial))
    return windows.transpose(order).reshape(-1, x.shape[1] * int(np.prod(kernel)))


def _input_vectors(node: ir.Node, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    if node.op_type == "Conv":
        return _patches(x, node, tuple(weight.shape[2:]))
    return x.reshape(-1, x.shape[-1])


def _pointwise(node: ir.Node, weight: np.ndarray) -> bool:
    """A 1x1 Conv with one group, stride 1 and no padding: its input vectors are the input's pixels."""
    return (
        node.op_type == "Conv"
        and attr(node, "group", 1) == 1
        and all(k == 1 for k in weight.shape[2:])
        and all(v == 1 for v in attr(node, "strides", None) or [1])
        and not any(attr(node, "pads", None) or [0])
    )


def _sample_moments(node: ir.Node, x: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, int]:
    """``sum x x^T`` of one sample's input vectors (:func:`_moments`) and their count; a 1x1 Conv's without
    gathering its pixels into rows (a product over the channel planes as they are)."""
    if _pointwise(node, weight):
        planes = x.reshape(x.shape[0], x.shape[1], -1)  # [N, C, positions]
        return sum(p @ p.T for p in planes), planes.shape[0] * planes.shape[2]
    vectors = _input_vectors(node, x, weight)
    return _moments(node, vectors), len(vectors)


def _moments(node: ir.Node, vectors: np.ndarray) -> np.ndarray:
    """``sum x x^T`` of the input vectors: [I, I], or [G, I/G, I/G] per group of a grouped Conv (each output
    channel of group ``g`` reads only that group's input channels)."""
    groups = attr(node, "group", 1) if node.op_type == "Conv" else 1
    if groups == 1:
        return vectors.T @ vectors
    per_group = vectors.reshape(len(vectors), groups, -1)
    return np.einsum("pgi,pgj->gij", per_group, per_group, optimize=True)


def input_hessians(
    model: ir.Model, nodes: list[ir.Node], calibration: Iterable, samples: int
) -> dict[str, np.ndarray]:
    """``E[x x^T]`` (float64) of each node's input vectors on ``model`` (up to ``samples`` calibration samples,
    each with ``.inputs``), by node name: [I, I], or [G, I/G, I/G] for a grouped Conv. The weight is the node's
    constant input 1. An empty data set is a :class:`~edgekit.core.errors.DataError`."""
    from edgekit.core.errors import DataError
    from edgekit.core.runtime import HostRunner

    graph_inputs = {v.name for v in model.graph.inputs}
    wanted = list(dict.fromkeys(n.inputs[0].name for n in nodes))
    runner = HostRunner(ir.to_proto(model), extra_outputs=[n for n in wanted if n not in graph_inputs])
    sums: dict[str, np.ndarray] = {}
    rows: dict[str, int] = {}
    for sample in islice(iter(calibration), samples):
        feeds = sample.inputs
        outputs = runner.run(feeds)
        for node in nodes:
            name = node.inputs[0].name
            x = np.asarray(feeds[name] if name in graph_inputs else outputs[name], np.float64)
            moments, count = _sample_moments(node, x, node.inputs[1].const_value.numpy())
            sums[node.name] = sums.get(node.name, 0.0) + moments
            rows[node.name] = rows.get(node.name, 0) + count
    if nodes and not rows:
        raise DataError("the calibration data set is empty")
    return {name: total / rows[name] for name, total in sums.items()}


def gptq_round(
    weight: np.ndarray, hessian: np.ndarray, scales: np.ndarray, qmin: int, qmax: int
) -> np.ndarray:
    """Integers for ``weight`` ([O, I], one row per output channel, ``scales`` [O], or [O, I]: one per weight)
    that minimise ``tr((W - s Q) H (W - s Q)^T)`` column by column (module docstring); ``hessian`` is [I, I].

    The columns are rounded in the order of their inputs' energy, ``diag(H)``, largest first (GPTQ's
    "act-order"): the inputs that carry the most signal are rounded while every other column can still take
    their errors."""
    order = np.argsort(-np.diag(hessian), kind="stable")
    w = weight.astype(np.float64)[:, order]
    h = hessian.astype(np.float64)[np.ix_(order, order)]
    dead = np.diag(h) == 0  # inputs that are always 0: their weights do not matter
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h[np.diag_indices_from(h)] += DAMPING * float(np.mean(np.diag(h)))
    upper = inverse_cholesky_upper(h)
    s = scales.astype(np.float64)
    if s.ndim == 2:
        s = s[:, order]
    q = np.zeros_like(w)
    # GPTQ's lazy batches: the columns of a block compensate each other one by one, the columns after it take
    # the block's errors in one product (the same arithmetic; 2880 columns: 8.5 s -> well under 1 s).
    for start in range(0, w.shape[1], BLOCK):
        end = min(start + BLOCK, w.shape[1])
        errors = np.zeros((w.shape[0], end - start))
        for i in range(start, end):
            column = s[:, i] if s.ndim == 2 else s
            q[:, i] = np.clip(np.round(w[:, i] / column), qmin, qmax)
            errors[:, i - start] = (w[:, i] - q[:, i] * column) / upper[i, i]
            w[:, i + 1 : end] -= np.outer(errors[:, i - start], upper[i, i + 1 : end])
        w[:, end:] -= errors @ upper[start:end, end:]
    return q[:, np.argsort(order)]


def inverse_cholesky_upper(h: np.ndarray) -> np.ndarray:
    """The upper-triangular ``U`` with ``U^T U = H^-1`` (GPTQ's column updates read its rows) for a symmetric
    positive definite ``h``, from one Cholesky factor of ``h`` with its order reversed: ``J H J = L L^T`` gives
    ``H^-1 = (J L^-1 J)^T (J L^-1 J)`` (``J`` the reversal), and ``J L^-1 J`` is upper triangular. The same matrix
    as ``cholesky(inv(H)).T`` in a third of the work (one factorisation, a triangular inverse by blocks in matrix
    products): Inception-v3's 94 convolutions spent half of ``w8 --calib``'s time in the general inverse."""
    lower = np.linalg.cholesky(np.ascontiguousarray(h[::-1, ::-1]))
    return np.ascontiguousarray(_lower_inverse(lower)[::-1, ::-1])


def _lower_inverse(lower: np.ndarray) -> np.ndarray:
    """The inverse of a lower-triangular matrix by halves: ``[[A, 0], [B, C]]^-1 = [[A^-1, 0], [-C^-1 B A^-1,
    C^-1]]``."""
    n = lower.shape[0]
    if n <= 64:
        return np.tril(np.linalg.inv(lower))
    k = n // 2
    a, c = _lower_inverse(lower[:k, :k]), _lower_inverse(lower[k:, k:])
    out = np.zeros_like(lower)
    out[:k, :k], out[k:, k:] = a, c
    out[k:, :k] = -(c @ lower[k:, :k]) @ a
    return out


def output_error(weight: np.ndarray, dequantized: np.ndarray, hessian: np.ndarray) -> float:
    """``tr((W - W_q) H (W - W_q)^T)``: the mean squared output error per input vector ([O, I] weights)."""
    d = weight.astype(np.float64) - dequantized.astype(np.float64)
    # (a three-operand einsum without a path is a plain loop: 4.8 s on a 384 x 1728 weight, the product 0.14 s)
    return float(np.sum((d @ hessian.astype(np.float64)) * d))


def output_sqnr_db(
    node: ir.Node, weight: np.ndarray, q: np.ndarray, scales: np.ndarray, hessian: np.ndarray
) -> float:
    """The layer's output signal-to-noise ratio (dB) on the calibration data with ``weight`` as ``q`` x
    ``scales`` (per output channel, or one scale): ``tr(W H W^T) / tr((W - W_q) H (W - W_q)^T)``."""
    rows = as_rows(node, weight).astype(np.float64)
    s = np.broadcast_to(np.asarray(scales, np.float64).reshape(-1), (rows.shape[0],))
    dequantized = as_rows(node, q).astype(np.float64) * s[:, None]
    h = hessian if hessian.ndim == 3 else hessian[None]
    per_group = rows.shape[0] // len(h)
    signal = noise = 0.0
    for g, hg in enumerate(h):
        part = slice(g * per_group, (g + 1) * per_group)
        signal += output_error(rows[part], np.zeros_like(rows[part]), hg)
        noise += output_error(rows[part], dequantized[part], hg)
    return sqnr_db(signal, noise)


def sqnr_db(signal: float, noise: float) -> float:
    """``10 log10(signal / noise)``; infinite without noise."""
    if noise <= 0.0:
        return float("inf")
    return 10.0 * float(np.log10(max(signal, 1e-300) / noise))


def as_rows(node: ir.Node, weight: np.ndarray) -> np.ndarray:
    """The weight as [O, I] (one row per output channel) in the order of :func:`input_hessians`' vectors."""
    if node.op_type == "Conv":
        return weight.reshape(weight.shape[0], -1)
    if node.op_type == "Gemm" and attr(node, "transB", 0):
        return weight
    return weight.T


def from_rows(node: ir.Node, rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of :func:`as_rows`."""
    if node.op_type == "Conv":
        return rows.reshape(shape)
    if node.op_type == "Gemm" and attr(node, "transB", 0):
        return rows
    return rows.T


def second_order(
    node: ir.Node, weight: np.ndarray, q: np.ndarray, scales: np.ndarray, hessian: np.ndarray
) -> np.ndarray:
    """``q`` (``weight``'s integers at ``scales``: [O] per output channel, or one scale) with each output
    channel's row replaced by GPTQ's (:func:`gptq_round`) where that lowers the channel's output error on the
    calibration data (the error is a sum over output channels: each row is chosen apart). ``hessian``: from
    :func:`input_hessians`; a grouped Conv's rows are rounded per group."""
    rows = as_rows(node, weight).astype(np.float64)
    first = as_rows(node, q).astype(np.float64)
    s = np.broadcast_to(np.asarray(scales, np.float64).reshape(-1), (rows.shape[0],))
    h = hessian if hessian.ndim == 3 else hessian[None]
    per_group = rows.shape[0] // len(h)
    chosen = first.copy()
    for g, hg in enumerate(h):
        part = slice(g * per_group, (g + 1) * per_group)
        second = gptq_round(rows[part], hg, s[part], -127, 127)
        d1 = rows[part] - first[part] * s[part, None]
        d2 = rows[part] - second * s[part, None]
        better = ((d2 @ hg) * d2).sum(axis=1) < ((d1 @ hg) * d1).sum(axis=1)
        chosen[part][better] = second[better]
    return from_rows(node, chosen, weight.shape).astype(q.dtype)
