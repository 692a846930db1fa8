"""Second-order rounding of ``w8``'s weights from calibration activations (GPTQ: Frantar et al., 2022).

With calibration data, each dense weight (a Conv with one group, a MatMul, a Gemm) is rounded to the
recipe's int8 grid (symmetric, the same per-output-channel scales, ``absmax / 127``) so as to minimise the
layer's output error on its real inputs, ``tr((W - Q) H (W - Q)^T)`` with ``H = E[x x^T]`` over the input
vectors ``x`` (a convolution's input patches), rather than each weight's own rounding error: the input
columns are rounded one at a time and the rounding error of each is compensated on the columns not yet rounded
through the inverse of ``H`` (its upper Cholesky factor). An input channel that carries large activations
gets its weights rounded most carefully; the others absorb the difference.

Only the integer values change: the scales, the zero points and the artifact (DequantizeLinear on the weights,
float activations) are those of the data-free recipe. Depthwise convolutions (each output channel sees one
input channel's taps) keep :func:`~edgekit.quantize.qdq.round_preserving_sums`: measured on PP-OCRv4 rec,
their second-order rounding changed nothing.

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

#: Diagonal loading of H, as a fraction of its mean diagonal (GPTQ's "percdamp"): keeps H invertible where the
#: calibration data spans fewer directions than the layer has inputs.
DAMPING = 0.01


def takes_gptq(node: ir.Node) -> bool:
    """Whether ``node``'s weight is rounded here with calibration data (dense weights of named nodes: Conv with
    one group and no dilation, MatMul, Gemm; at most :data:`MAX_COLUMNS` input columns)."""
    weight = node.inputs[1].const_value if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if not node.name or weight is None:
        return False
    if node.op_type == "Conv":
        dense = attr(node, "group", 1) == 1 and all(d == 1 for d in attr(node, "dilations", None) or [1])
        return dense and int(np.prod(weight.shape[1:])) <= MAX_COLUMNS
    if node.op_type == "MatMul":
        return weight.shape[0] <= MAX_COLUMNS
    if node.op_type == "Gemm":
        return weight.shape[1 if attr(node, "transB", 0) else 0] <= MAX_COLUMNS
    return False


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


def input_hessians(
    model: ir.Model, nodes: list[ir.Node], calibration: Iterable, samples: int
) -> dict[str, np.ndarray]:
    """``E[x x^T]`` (float64) of each node's input vectors on the fp32 ``model`` (up to ``samples`` calibration
    samples, each with ``.inputs``), by node name. The weight is the node's constant input 1."""
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
            vectors = _input_vectors(node, x, node.inputs[1].const_value.numpy())
            sums[node.name] = sums.get(node.name, 0.0) + vectors.T @ vectors
            rows[node.name] = rows.get(node.name, 0) + len(vectors)
    return {name: total / rows[name] for name, total in sums.items()}


def gptq_round(
    weight: np.ndarray, hessian: np.ndarray, scales: np.ndarray, qmin: int, qmax: int
) -> np.ndarray:
    """Integers for ``weight`` ([O, I], one row per output channel, ``scales`` [O]) that minimise
    ``tr((W - s Q) H (W - s Q)^T)`` column by column (module docstring); ``hessian`` is [I, I]."""
    w = weight.astype(np.float64).copy()
    h = hessian.astype(np.float64).copy()
    dead = np.diag(h) == 0  # inputs that are always 0: their weights do not matter
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h[np.diag_indices_from(h)] += DAMPING * float(np.mean(np.diag(h)))
    upper = np.linalg.cholesky(np.linalg.inv(h)).T
    s = scales.astype(np.float64)
    q = np.zeros_like(w)
    for i in range(w.shape[1]):
        q[:, i] = np.clip(np.round(w[:, i] / s), qmin, qmax)
        error = (w[:, i] - q[:, i] * s) / upper[i, i]
        w[:, i + 1 :] -= np.outer(error, upper[i, i + 1 :])
    return q


def output_error(weight: np.ndarray, dequantized: np.ndarray, hessian: np.ndarray) -> float:
    """``tr((W - W_q) H (W - W_q)^T)``: the mean squared output error per input vector ([O, I] weights)."""
    d = weight.astype(np.float64) - dequantized.astype(np.float64)
    return float(np.einsum("oi,ij,oj->", d, hessian, d))


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
