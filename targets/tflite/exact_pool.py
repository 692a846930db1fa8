"""An int8 AveragePool whose windows average different counts (pads excluded: ``count_include_pad=0``) computed
on the integer levels and rounded half to even, as QuantizeLinear rounds.

The converter lowers such a pool as an explicit zero pad, a float VALID AVERAGE_POOL_2D and a MUL by ``area /
count`` per position (``ops_conv._pool``); between int8 tensors that is DEQUANTIZE -> AVERAGE_POOL_2D -> MUL ->
QUANTIZE. At one scale in and out the exact result is the mean of the window's levels: an edge window of 6 or 4
levels lands on a .5 tie whenever the sum is 3 mod 6 (2 mod 4), which QuantizeLinear rounds to even; the float
mean (``sum * (1 / 9)``), the MUL and QUANTIZE (half away from zero) land it either side. STDC's 3x3 / 2 pools with
pads 1 (PP-LiteSeg): 156 of 36,864 values one step off, int8 .tflite vs QDQ cosine 0.9886.

Here the DEQUANTIZE becomes the levels ``q - zp`` (CAST, SUB: ``exact_matmul.levels``), the pool a float
DEPTHWISE_CONV_2D of ones (the window's sum of levels: an integer, exact), the MUL a DIV by the count map (IEEE
division: a quotient that is a .5 tie is exact, any other is at least ``1 / 2 count`` from one) and the QUANTIZE
ROUND (half to even), MUL by the scale and QUANTIZE of the integer (``exact_matmul.quantize_levels``).
"""

from __future__ import annotations

import numpy as np
from edgekit.targets.tflite import exact_matmul
from edgekit.targets.tflite.graph import Graph, Op, Tensor
from edgekit.targets.tflite.schema import fb


def _chain(graph: Graph, q: Op, producers, consumers) -> tuple[Op, Op, Op, np.ndarray] | None:
    """(DEQUANTIZE, AVERAGE_POOL_2D, MUL, window counts [H, W]) of the pool QUANTIZE ``q`` writes, else None."""
    f, y = q.inputs[0], q.outputs[0]
    if f.dtype != np.float32 or y.dtype != np.int8 or y.quant is None or not y.quant.per_tensor:
        return None
    mul = producers.get(id(f))
    if mul is None or mul.code != "MUL" or getattr(mul.options, "fusedActivationFunction", 0):
        return None
    consts = [t for t in mul.inputs if t.is_const]
    variable = [t for t in mul.inputs if not t.is_const]
    if len(consts) != 1 or len(variable) != 1:
        return None
    pool = producers.get(id(variable[0]))
    if pool is None or pool.code != "AVERAGE_POOL_2D" or pool.options is None:
        return None
    opts = pool.options
    if opts.fusedActivationFunction or opts.padding != fb.Padding.VALID:
        return None
    dq = producers.get(id(pool.inputs[0]))
    if dq is None or dq.code != "DEQUANTIZE":
        return None
    x = dq.inputs[0]
    if x.dtype != np.int8 or not y.quant.same_as(x.quant) or x.rank != 4:
        return None
    for t in (dq.outputs[0], pool.outputs[0], f):  # read only along the chain
        if graph.is_graph_output(t) or len(consumers.get(id(t), [])) != 1:
            return None
    factor = np.asarray(consts[0].data, np.float32)
    out = pool.outputs[0].shape
    if (
        factor.ndim != 4
        or factor.shape[0] != 1
        or factor.shape[3] != 1
        or factor.shape[1:3] != tuple(out[1:3])
    ):
        return None
    area = opts.filterHeight * opts.filterWidth
    counts = np.rint(area / factor[0, :, :, 0].astype(np.float64))
    if (
        (counts < 1).any()
        or (counts > area).any()
        or not np.array_equal((area / counts).astype(np.float32), factor[0, :, :, 0])
    ):
        return None
    return dq, pool, mul, counts


def exact_average_pool(graph: Graph) -> Graph:
    """Each int8 pool of the module docstring's form (one scale in and out) becomes levels -> float
    DEPTHWISE_CONV_2D of ones -> DIV by the window counts -> ROUND -> int8; the ops it adds are integer arithmetic
    (``graph.integer_arithmetic``), not layers left float."""
    producers, consumers = graph.producers(), graph.consumers()
    rewritten = []
    for q in [op for op in graph.ops if op.code == "QUANTIZE"]:
        chain = _chain(graph, q, producers, consumers)
        if chain is None:
            continue
        dq, pool, mul, counts = chain
        x, y = dq.inputs[0], q.outputs[0]
        opts = pool.options
        channels = x.shape[3]
        levels_ops, lv = exact_matmul.levels(graph, x, pool.origin)
        ones = Tensor(
            graph.unique_name(f"{y.name}/window_ones"),
            (1, opts.filterHeight, opts.filterWidth, channels),
            np.dtype(np.float32),
            data=np.ones((1, opts.filterHeight, opts.filterWidth, channels), np.float32),
        )
        zeros = Tensor(graph.unique_name(f"{y.name}/window_bias"), (channels,), np.dtype(np.float32),
                       data=np.zeros(channels, np.float32))  # fmt: skip
        conv = fb.DepthwiseConv2DOptionsT()
        conv.padding = fb.Padding.VALID
        conv.strideH, conv.strideW = opts.strideH, opts.strideW
        conv.depthMultiplier = conv.dilationHFactor = conv.dilationWFactor = 1
        sums = graph.tensor(f"{y.name}/window_sums", pool.outputs[0].shape, np.float32)
        means = graph.tensor(f"{y.name}/window_means", pool.outputs[0].shape, np.float32)
        count_map = graph.const("window_counts", counts.astype(np.float32)[None, :, :, None])
        new = [
            *levels_ops,
            Op("DEPTHWISE_CONV_2D", [lv, ones, zeros], [sums], conv, pool.origin),
            Op("DIV", [sums, count_map], [means], fb.DivOptionsT(), pool.origin),
            *exact_matmul.quantize_levels(graph, means, y, q.origin),
        ]
        for old in (dq, pool, mul):
            graph.ops.remove(old)
        graph.replace_op(q, new, integer=True)
        rewritten.append(pool.origin)
    if rewritten:
        graph.notes.append(
            f"{len(rewritten)} int8 AveragePool(s) with excluded pads ({exact_matmul.listed(rewritten)}) as window "
            "sums of the int8 levels divided by their counts, "
            "rounded half to even (ROUND), as QuantizeLinear"
        )
    return graph
