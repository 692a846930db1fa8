"""fp16 weights (the ``fp16`` recipe), as TFLite's float16 post-training quantization writes them.

Every float32 constant an op reads (convolution and dense weights, biases, other constants) is stored as
a FLOAT16 buffer and read through a DEQUANTIZE op (version 3: float16 -> float32) whose float32 output
the op consumes. Compute stays float32: LiteRT's DEQUANTIZE of a constant runs once, when the
interpreter prepares (its output is persistent), and XNNPACK unpacks static fp16 weights when it takes
the graph. The file is about half the size of the fp32 one.

Constants of fewer than :data:`FP16_MIN_ELEMENTS` values stay float32: biases, scalars (clip bounds, the
HardSwish/HardSigmoid coefficients) and the smallest kernels cost almost nothing to keep and are the ones
whose rounding moves the outputs most (MobileNetV2 with real weights on the 200 shared photos: the largest
error falls from 2.8e-3 to 7.3e-4 of the logits' range for 0.2 % of the file; benchmarks/fp16_figures.py).
TFLite's converter rounds every float constant. A constant whose values do not fit float16 (magnitude
above 65504, e.g. the -1e38 of an attention mask) stays float32 too; one with quantization parameters (an
integer kernel's) is not a float weight and is left alone, as are graph outputs that are constants.
"""

from __future__ import annotations

import numpy as np
from edgekit.targets.tflite.graph import Graph, Op, Tensor

FP16_MAX = float(np.finfo(np.float16).max)
#: Float constants smaller than this stay float32 (module docstring).
FP16_MIN_ELEMENTS = 1024


def fp16_weights(graph: Graph) -> Graph:
    """Float32 constant inputs become FLOAT16 constant -> DEQUANTIZE -> float32 (which: module docstring)."""
    return _half_weights(graph, exact_only=False)


def exact_fp16_weights(graph: Graph) -> Graph:
    """A weight-only model's float16 weights (float32 constants whose values are all float16 values:
    ``edgekit.quantize.weight_only.stores_float16``) stored as FLOAT16 -> DEQUANTIZE, as :func:`fp16_weights`
    stores them: the same values, half the bytes. Not for fp32 bundles: a float32 model's weights may all be
    float16 values (the shared SqueezeNet 1.1's are), and its fp32 file stays the float32 model."""
    return _half_weights(graph, exact_only=True)


def _half_weights(graph: Graph, exact_only: bool) -> Graph:
    from edgekit.quantize.weight_only import stores_float16

    converted: dict[int, Tensor] = {}
    kept = 0
    outputs = {id(t) for t in graph.outputs}
    # a hybrid kernel (int8 weights, float activations: FULLY_CONNECTED, CONV_2D, ...) takes a static float32 bias
    # only: XNNPACK refuses one read through DEQUANTIZE and LiteRT's prepare then fails (BERT-base's w8 bundle,
    # whose seeded FFN biases are zeros: float16 values)
    hybrid = {
        id(t)
        for op in graph.ops
        if any(w is not None and w.is_const and w.dtype == np.int8 for w in op.inputs)
        for t in op.inputs
        if t is not None
    }
    ops: list[Op] = []
    for op in graph.ops:
        for t in op.inputs:
            if (
                t is None
                or not t.is_const
                or t.dtype != np.float32
                or t.quant is not None
                or id(t) in outputs
                or id(t) in converted
                or t.data.size < FP16_MIN_ELEMENTS
                or (exact_only and (id(t) in hybrid or not stores_float16(t.data)))
            ):
                continue
            if t.data.size and float(np.max(np.abs(t.data))) > FP16_MAX:
                kept += 1
                continue
            # the weight's own name: the float16 constant and the DEQUANTIZE's output are one weight, and the
            # file stores the name once (writer: shared strings)
            half = Tensor(t.name, t.shape, np.float16, data=t.data.astype(np.float16))
            t.data = None  # the float32 tensor is now the DEQUANTIZE's output, read by every consumer
            ops.append(Op("DEQUANTIZE", [half], [t], None, "fp16 weights"))
            converted[id(t)] = half
        ops.append(op)
    graph.ops = ops
    if kept:
        graph.notes.append(f"fp16: {kept} constant(s) beyond float16's range (|x| > 65504) stay float32")
    return graph


def fp16_constants(graph: Graph) -> int:
    """How many FLOAT16 constants ``graph`` stores (for reports and tests)."""
    return sum(
        1 for op in graph.ops for t in op.inputs if t is not None and t.is_const and t.dtype == np.float16
    )
