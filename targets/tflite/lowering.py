"""Kernel choices and reshape clean-up: same numbers, fewer or cheaper ops on LiteRT's CPU path (XNNPACK).

- ``float_spatial_mean_to_average_pool``: a float MEAN over H and W of an NHWC tensor becomes one
  AVERAGE_POOL_2D with a H x W window. XNNPACK runs that as a global average pooling, measurably cheaper
  than its generic reduction (docs/benchmarks.md). Integer MEAN stays: there XNNPACK's reduction is the
  faster kernel.
- ``softmax_on_last_axis``: SOFTMAX / LOG_SOFTMAX work along the last axis whatever the rank, so a RESHAPE
  that only merges or splits the leading dimensions in front of one is redundant.
- ``drop_identity_reshapes``: a RESHAPE whose output has its input's shape and quantization goes.
"""

from __future__ import annotations

import math

import numpy as np
from edgekit.targets.tflite.graph import Graph, Tensor
from edgekit.targets.tflite.schema import fb

_LAST_AXIS_OPS = {"SOFTMAX", "LOG_SOFTMAX"}


def float_spatial_mean_to_average_pool(graph: Graph) -> Graph:
    """MEAN(x, axes=[1, 2], keep_dims) of a float rank-4 tensor -> AVERAGE_POOL_2D (VALID, H x W window)."""
    for op in graph.ops:
        if op.code != "MEAN" or len(op.inputs) != 2:
            continue
        x, axes = op.inputs
        if (
            x is None
            or axes is None
            or not axes.is_const
            or x.quant is not None
            or x.dtype != np.float32
            or x.rank != 4
            or sorted(int(a) % 4 for a in np.ravel(axes.data)) != [1, 2]
            or not getattr(op.options, "keepDims", False)
        ):
            continue
        opts = fb.Pool2DOptionsT()
        opts.padding = fb.Padding.VALID
        opts.strideH = opts.strideW = 1
        opts.filterHeight, opts.filterWidth = x.shape[1], x.shape[2]
        opts.fusedActivationFunction = fb.ActivationFunctionType.NONE
        op.code, op.inputs, op.options = "AVERAGE_POOL_2D", [x], opts
    graph.remove_dead()
    return graph


def softmax_on_last_axis(graph: Graph) -> Graph:
    """RESHAPE(a) -> SOFTMAX: the softmax reads ``a`` when the reshape keeps the last axis and its rows.

    The softmax output changes shape with it, so only RESHAPEs may read it (they restore whatever shape
    follows; ``drop_identity_reshapes`` then removes one that has become a no-op). Only ranks 2 and 4 are
    produced, the ones every NNAPI feature level takes for SOFTMAX.
    """
    producers = graph.producers()
    consumers = graph.consumers()
    for op in graph.ops:
        if op.code not in _LAST_AXIS_OPS:
            continue
        b = op.inputs[0]
        reshape = producers.get(id(b))
        if reshape is None or reshape.code != "RESHAPE" or graph.is_graph_output(b):
            continue
        a = reshape.inputs[0]
        if (
            a.rank not in (2, 4)
            or a.shape[-1] != b.shape[-1]
            or math.prod(a.shape[:-1]) != math.prod(b.shape[:-1])
            or len(consumers.get(id(b), [])) != 1
            or not _same_quant(a, b)
        ):
            continue
        out = op.outputs[0]
        readers = consumers.get(id(out), [])
        if not readers or graph.is_graph_output(out) or any(r.code != "RESHAPE" for r in readers):
            continue
        op.inputs[0] = a
        out.shape = a.shape
        consumers = graph.consumers()
    graph.remove_dead()
    return drop_identity_reshapes(graph)


def drop_identity_reshapes(graph: Graph) -> Graph:
    """RESHAPE with output shape == input shape (and the same quantization): readers take the input.

    When the reshape's output is a graph output, the input takes its place there (``finalize`` names it);
    a graph input is never turned into an output this way.
    """
    for op in list(graph.ops):
        if op.code != "RESHAPE":
            continue
        x, y = op.inputs[0], op.outputs[0]
        if x.shape != y.shape or not _same_quant(x, y) or x.is_const:
            continue
        if graph.is_graph_output(y) and (any(x is t for t in graph.inputs) or graph.is_graph_output(x)):
            continue
        graph.replace_uses(y, x)
        graph.ops.remove(op)
    return graph


def _same_quant(a: Tensor, b: Tensor) -> bool:
    if a.quant is None or b.quant is None:
        return a.quant is None and b.quant is None
    return a.quant.same_as(b.quant)
