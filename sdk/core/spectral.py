"""ONNX's DFT and STFT written out as products with constant matrices.

``torch.fft.rfftn`` / ``irfftn`` (LaMa's Fast Fourier Convolution) export as DFT (opset 17: ``axis`` attribute,
20: ``axis`` input), ``torch.stft`` (an audio front end in the graph) as STFT. No TFLite builtin computes an
inverse or a complex DFT (RFFT2D is forward, 2-D and complex64 out), and OpenVINO's CPU plugin refuses the
permutes its DFT conversion adds. With static shapes each is a linear map by constants:

- DFT: the signal axis and the real / imaginary axis moved last and flattened, one MatMul by a
  ``[N_in * C_in, K * C_out]`` matrix of cosines and sines (forward ``e^{-2 pi i k n / N}``, inverse
  ``e^{+2 pi i k n / N} / N``; ``onesided`` forward keeps ``k <= N / 2``, ``onesided`` inverse reads a half
  spectrum and gives the real signal, as onnxruntime's irfft does; ``dft_length`` pads or truncates the input);
- STFT of a real signal: one strided Conv1d whose ``2 K`` kernels are the window times the cosines and (minus)
  the sines, reshaped and transposed to ``[batch, frames, K, 2]``.

Both rewrites are every target's: the quantizer sees a MatMul / Conv with a constant weight.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import IrWriter, NameScope, attr, const_array, static_shape

#: A DFT matrix larger than this (elements) keeps the DFT op (and a target's typed refusal of it).
_MAX_MATRIX_ELEMENTS = 1 << 22


def dft_matrix(n_in: int, c_in: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """[n_in * c_in, K * c_out]: row ``n * c_in + c`` (input sample n, real c=0 / imaginary c=1), column
    ``k * c_out + o`` (output bin k, real o=0 / imaginary o=1)."""
    if inverse and onesided:  # half spectrum in (k <= N / 2), the real signal out
        k_out, c_out = length, 1
        m = np.zeros((n_in, c_in, k_out, c_out), np.float64)
        for h in range(min(n_in, length // 2 + 1)):
            weight = 1.0 if h == 0 or 2 * h == length else 2.0
            theta = 2 * np.pi * h * np.arange(length) / length
            m[h, 0, :, 0] = weight * np.cos(theta) / length
            if c_in == 2:
                m[h, 1, :, 0] = -weight * np.sin(theta) / length
        return m.reshape(n_in * c_in, k_out * c_out).astype(np.float32)
    k_out = length // 2 + 1 if onesided else length
    n = np.arange(min(n_in, length))[:, None]
    k = np.arange(k_out)[None, :]
    theta = 2 * np.pi * n * k / length
    cos, sin = np.cos(theta), np.sin(theta)
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    m = np.zeros((n_in, c_in, k_out, 2), np.float64)
    rows = n.shape[0]
    # (xr + i xi)(cos + i sign sin) = xr cos - sign xi sin + i (sign xr sin + xi cos)
    m[:rows, 0, :, 0], m[:rows, 0, :, 1] = cos * scale, sign * sin * scale
    if c_in == 2:
        m[:rows, 1, :, 0], m[:rows, 1, :, 1] = -sign * sin * scale, cos * scale
    return m.reshape(n_in * c_in, k_out * 2).astype(np.float32)


def _int_input(node: ir.Node, index: int) -> int | None:
    if len(node.inputs) <= index or node.inputs[index] is None:
        return None
    array = const_array(node.inputs[index])
    return None if array is None else int(np.asarray(array).reshape(-1)[0])


class DftAsMatMulPass(ir.passes.InPlacePass):
    """A DFT with static shapes and constant axis / length becomes Transpose + MatMul by a constant matrix."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        opset = model.opset_imports.get("", 1)
        for node in list(graph):
            if node.op_type != "DFT" or node.domain not in ("", "ai.onnx"):
                continue
            shape = static_shape(node.inputs[0].shape)
            out_shape = static_shape(node.outputs[0].shape)
            if shape is None or out_shape is None or len(shape) < 3 or shape[-1] not in (1, 2):
                continue
            axis = _int_input(node, 2) if opset >= 20 else int(attr(node, "axis", 1))
            if axis is None and opset >= 20:
                axis = -2 if len(node.inputs) <= 2 or node.inputs[2] is None else None
            if axis is None:
                continue
            rank = len(shape)
            axis = axis + rank if axis < 0 else axis
            if not 0 <= axis < rank - 1:
                continue
            length = _int_input(node, 1)
            if length is None and len(node.inputs) > 1 and node.inputs[1] is not None:
                continue
            inverse, onesided = bool(attr(node, "inverse", 0)), bool(attr(node, "onesided", 0))
            n_in, c_in = shape[axis], shape[-1]
            if length is None:
                length = 2 * (n_in - 1) if inverse and onesided else n_in
            matrix = dft_matrix(n_in, c_in, length, inverse, onesided)
            if matrix.size > _MAX_MATRIX_ELEMENTS or matrix.shape[1] != out_shape[axis] * out_shape[-1]:
                continue
            w = IrWriter(graph, names, node, node.inputs[0].dtype)
            perm = [d for d in range(rank - 1) if d != axis] + [axis, rank - 1]
            moved = [shape[d] for d in perm]
            x = w.op("Transpose", [node.inputs[0]], moved, perm=perm)
            x = w.reshape(x, [*moved[:-2], n_in * c_in])
            y = w.op("MatMul", [x, w.const("dft", matrix)], [*moved[:-2], matrix.shape[1]])
            y = w.reshape(y, [*moved[:-2], out_shape[axis], out_shape[-1]])
            inv = [perm.index(d) for d in range(rank)]
            w.done(node, w.op("Transpose", [y], out_shape, perm=inv))
            modified = True
        return ir.passes.PassResult(model, modified)


class StftAsConvPass(ir.passes.InPlacePass):
    """An STFT of a real signal with constant frame step, window and length becomes a strided Conv."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for node in list(graph):
            if node.op_type != "STFT" or node.domain not in ("", "ai.onnx"):
                continue
            shape, out_shape = static_shape(node.inputs[0].shape), static_shape(node.outputs[0].shape)
            step = _int_input(node, 1)
            if (
                shape is None
                or out_shape is None
                or step is None
                or not (len(shape) == 2 or (len(shape) == 3 and shape[2] == 1))
            ):
                continue
            window = (
                const_array(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
            )
            if window is None and len(node.inputs) > 2 and node.inputs[2] is not None:
                continue
            length = _int_input(node, 3)
            if length is None:
                if window is None:
                    continue
                length = int(window.shape[0])
            window = np.ones(length) if window is None else np.asarray(window, np.float64)
            onesided = bool(attr(node, "onesided", 1))
            bins = length // 2 + 1 if onesided else length
            batch, samples = shape[0], shape[1]
            frames = 1 + (samples - length) // step
            if out_shape != (batch, frames, bins, 2):
                continue
            theta = 2 * np.pi * np.arange(bins)[:, None] * np.arange(length)[None, :] / length
            kernel = np.stack([np.cos(theta) * window, -np.sin(theta) * window], 1)  # [bins, 2, length]
            kernel = kernel.reshape(bins * 2, 1, length).astype(np.float32)
            w = IrWriter(graph, names, node, node.inputs[0].dtype)
            x = w.reshape(node.inputs[0], [batch, 1, samples])
            y = w.op("Conv", [x, w.const("stft_kernel", kernel)], [batch, bins * 2, frames], kernel_shape=[length],
                     strides=[step])  # fmt: skip
            y = w.reshape(y, [batch, bins, 2, frames])
            w.done(node, w.op("Transpose", [y], out_shape, perm=[0, 3, 1, 2]))
            modified = True
        return ir.passes.PassResult(model, modified)
