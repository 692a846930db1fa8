"""Weight-only models (``w8``, ``w4``): integer weights, float activations, on LiteRT's hybrid kernels.

A weight-only ONNX model reads each weight through a DequantizeLinear; the translation keeps such a weight as
a float constant that remembers its int8 form (``Tensor.qdata``/``qparams``). This pass gives the kernels the
int8 form:

- FULLY_CONNECTED (weights per output channel, axis 0), CONV_2D (axis 0, not grouped) and DEPTHWISE_CONV_2D
  (axis 3) take the int8 weights directly: LiteRT's hybrid kernels (float input and output, int8 weights
  with per-channel scales in the tensor's quantization) quantize the input per row on the fly
  (``asymmetric_quantize_inputs`` where the options have it) and accumulate in int32
  (tensorflow/lite/kernels/fully_connected.cc, conv.cc, depthwise_conv.cc: ``EvalHybrid*``).
- A GATHER of rows of a 2-D table (an embedding) becomes EMBEDDING_LOOKUP on the int8 table with one scale
  per row or one for the table, which dequantizes the rows it looks up (embedding_lookup.cc ``EvalHybrid``); its indices are
  flattened to 1-D and the result reshaped back.
- Any other reader of int8 weights gets them through a DEQUANTIZE op (computed once: the input is constant).
- ``w4``'s blockwise int4 weights (MatMul/Gemm, always a FULLY_CONNECTED here) become an INT4 tensor (two
  values per byte) with ``BlockwiseQuantization``: a float16 scales tensor of shape [N, K / block], blocks
  along K. The recipe's scales are float16 values already (:mod:`edgekit.quantize.weight_only`), so nothing
  is rounded here.

Measured on the host with ai-edge-litert 2.3.0: each kernel above runs, with XNNPACK (LiteRT's default CPU
path) and without. Blockwise INT4 needs float16 scales (float32 ones are misread) and ``quantizedDimension``
0: with 1, XNNPACK fails to prepare the FULLY_CONNECTED.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
from edgekit.core.errors import TargetError
from edgekit.targets.tflite.graph import Graph, Op, Tensor
from edgekit.targets.tflite.schema import fb

#: Hybrid kernels: op -> (weight input index, per-channel axis of its weights in TFLite's layout).
HYBRID_KERNELS = {"FULLY_CONNECTED": (1, 0), "CONV_2D": (1, 0), "DEPTHWISE_CONV_2D": (1, 3)}


INT4 = np.dtype(ml_dtypes.int4)


def _int8_weight(t: Tensor) -> Tensor:
    """The int8 form of weight ``t``, under ``t``'s name (one weight; the file stores the name once)."""
    return Tensor(t.name, t.shape, np.int8, data=t.qdata, quant=t.qparams)


def _is_blockwise(t: Tensor | None) -> bool:
    return (
        t is not None
        and t.is_const
        and t.qdata is not None
        and t.qparams is not None
        and bool(t.qparams.block_size)
        and t.qdata.dtype == INT4
    )


def _int4_fully_connected(graph: Graph, op: Op) -> None:
    """The blockwise int4 weights of a FULLY_CONNECTED ([N, K], blocks along K) as LiteRT's INT4 tensor."""
    w = op.inputs[1]
    quant = w.qparams
    if op.code != "FULLY_CONNECTED" or op.inputs[1] is not w or w.rank != 2 or quant.axis != 1:
        raise TargetError(
            f"{op.code} ({op.origin}): blockwise int4 weights run on FULLY_CONNECTED only (weights [N, K], "
            "blocks along K) in LiteRT"
        )
    scale = quant.scale.astype(np.float16)
    if not np.array_equal(scale.astype(np.float32), quant.scale):  # the recipe makes float16 scales
        graph.notes.append(f"int4 weights {w.name!r}: scales rounded to float16 (LiteRT reads them so)")
    op.inputs[1] = Tensor(graph.unique_name(w.name + "/int4"), w.shape, INT4, data=w.qdata, quant=quant)


def _has_int8(t: Tensor | None) -> bool:
    return (
        t is not None
        and t.is_const
        and t.dtype == np.float32
        and t.qdata is not None
        and t.qparams is not None
        and t.qdata.dtype == np.int8
        and t.qdata.shape == t.shape
        and not t.qparams.zero_point.any()
    )


def _hybrid_fits(op: Op, w: Tensor) -> bool:
    index, axis = HYBRID_KERNELS[op.code]
    if op.inputs[index] is not w or not (w.qparams.per_tensor or w.qparams.axis == axis):
        return False
    if op.code == "CONV_2D":  # "Group convolution currently not supported for hybrid kernel" (conv.cc)
        x = op.inputs[0]
        return x is not None and x.rank == 4 and x.shape[3] == w.shape[3]
    return True


def hybrid_weights(mode: str) -> Callable[[Graph], Graph]:
    """The pass (module docstring): ``hybrid`` or ``dequantize`` (every int8 weight through DEQUANTIZE, float
    kernels: the weight-only model's numerics, for models whose activations the hybrid kernels' on-the-fly int8
    quantization hurts); a no-op for ``""`` (not a weight-only model)."""

    def run(graph: Graph) -> Graph:
        if mode:
            _hybrid_weights(graph, use_hybrid=mode == "hybrid")
        return graph

    return run


def _hybrid_weights(graph: Graph, use_hybrid: bool) -> None:
    dequantized: dict[int, Tensor] = {}
    hybrid = embedding = dequantize = int4 = 0
    for op in list(graph.ops):
        if any(_is_blockwise(t) for t in op.inputs):
            _int4_fully_connected(graph, op)
            op.options.asymmetricQuantizeInputs = True
            int4 += 1
            continue
        if (
            use_hybrid
            and op.code in HYBRID_KERNELS
            and _has_int8(op.inputs[1])
            and _hybrid_fits(op, op.inputs[1])
        ):
            op.inputs[1] = _int8_weight(op.inputs[1])
            if hasattr(op.options, "asymmetricQuantizeInputs"):
                op.options.asymmetricQuantizeInputs = True
            hybrid += 1
            continue
        if use_hybrid and op.code == "GATHER" and _embedding(graph, op):
            embedding += 1
            continue
        for i, t in enumerate(op.inputs):
            if not _has_int8(t):
                continue
            if id(t) not in dequantized:
                out = Tensor(graph.unique_name(t.name + "/dequantized"), t.shape, np.float32)
                graph.ops.insert(
                    graph.ops.index(op), Op("DEQUANTIZE", [_int8_weight(t)], [out], None, op.origin)
                )
                dequantized[id(t)] = out
                dequantize += 1
            op.inputs[i] = dequantized[id(t)]
    graph.notes.append(
        f"weight-only: {int4} int4 blockwise FULLY_CONNECTED, {hybrid} int8 hybrid kernel(s), {embedding} int8 "
        f"embedding lookup(s), {dequantize} int8 weight(s) read through DEQUANTIZE"
    )


def _embedding(graph: Graph, op: Op) -> bool:
    """GATHER(table, ids) on axis 0 of an int8 2-D table (one scale per row, or one) -> EMBEDDING_LOOKUP."""
    table, ids = op.inputs[0], op.inputs[1]
    axis = op.options.axis if op.options is not None else 0
    if (
        not _has_int8(table)
        or table.rank != 2
        or axis != 0
        or ids is None
        or ids.is_const
        or ids.dtype != np.int32
        or not (table.qparams.per_tensor or table.qparams.axis == 0)
    ):
        return False
    out = op.outputs[0]
    index = graph.ops.index(op)
    count = int(np.prod(ids.shape))
    flat_ids = Tensor(graph.unique_name(ids.name + "/flat"), (count,), np.int32)
    rows = Tensor(graph.unique_name(out.name + "/rows"), (count, table.shape[1]), np.float32)
    new_ops = []
    if ids.shape != (count,):
        new_ops.append(_reshape(graph, ids, flat_ids, op.origin))
    else:
        flat_ids = ids
    new_ops.append(Op("EMBEDDING_LOOKUP", [flat_ids, _int8_weight(table)], [rows], None, op.origin))
    new_ops.append(_reshape(graph, rows, out, op.origin))
    graph.ops[index : index + 1] = new_ops
    return True


def _reshape(graph: Graph, x: Tensor, out: Tensor, origin: str) -> Op:
    opts = fb.ReshapeOptionsT()
    opts.newShape = list(out.shape)
    return Op("RESHAPE", [x, graph.const("shape", out.shape, np.int32)], [out], opts, origin)
