"""Fusion passes: activations into the preceding op, NHWC flattening into FULLY_CONNECTED weights, and the
reshape FULLY_CONNECTED does itself."""

from __future__ import annotations

import numpy as np
from edgekit.targets.tflite.context import inverse_perm
from edgekit.targets.tflite.graph import Graph
from edgekit.targets.tflite.layout import transpose_perm
from edgekit.targets.tflite.schema import activation_code

_ACTIVATIONS = {"RELU": "RELU", "RELU6": "RELU6", "RELU_N1_TO_1": "RELU_N1_TO_1"}
_FUSABLE = {
    "CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "ADD", "SUB", "MUL", "DIV",
    "AVERAGE_POOL_2D", "MAX_POOL_2D",  # not CONCATENATION: concatenation.cc ignores or refuses one
}  # fmt: skip


def fuse_activations(graph: Graph) -> Graph:
    """X -> RELU/RELU6/RELU_N1_TO_1 becomes X with ``fused_activation_function`` when X feeds only it."""
    producers = graph.producers()
    consumers = graph.consumers()
    for op in list(graph.ops):
        if op.code not in _ACTIVATIONS:
            continue
        x = op.inputs[0]
        prod = producers.get(id(x))
        if (
            prod is None
            or prod.code not in _FUSABLE
            or prod.options is None
            or not hasattr(prod.options, "fusedActivationFunction")
            or prod.options.fusedActivationFunction != activation_code("NONE")
            or len(consumers.get(id(x), [])) != 1
            or graph.is_graph_output(x)
            or x.quant is not None
        ):
            continue
        prod.options.fusedActivationFunction = activation_code(_ACTIVATIONS[op.code])
        prod.outputs = [op.outputs[0]]
        graph.ops.remove(op)
        producers = graph.producers()
        consumers = graph.consumers()
    return graph


def flatten_into_fully_connected(graph: Graph) -> Graph:
    """TRANSPOSE(NHWC->NCHW) -> RESHAPE [N, K] -> FULLY_CONNECTED: permute the weights instead.

    A Flatten/Reshape after the last convolution of an NCHW model flattens in C,H,W order; flattening
    the NHWC tensor directly and permuting the weight columns to H,W,C order gives the same result
    with no transpose.
    """
    producers = graph.producers()
    consumers = graph.consumers()
    for op in list(graph.ops):
        if op.code != "RESHAPE" or op.outputs[0].rank != 2:
            continue
        prod = producers.get(id(op.inputs[0]))
        perm = transpose_perm(prod) if prod is not None else None
        if perm is None or perm[0] != 0:
            continue
        x = prod.inputs[0]
        flat = op.outputs[0]
        if x.shape[0] != flat.shape[0] or graph.is_graph_output(flat):
            continue
        users = consumers.get(id(flat), [])
        if not users or any(
            u.code != "FULLY_CONNECTED"
            or u.inputs[0] is not flat
            or not u.inputs[1].is_const
            or u.options.keepNumDims
            or (u.inputs[1].quant is not None and u.inputs[1].quant.block_size)  # blocks along the columns
            for u in users
        ):
            continue
        inv = inverse_perm(perm)
        order = (0, *(inv[j] for j in range(1, x.rank)))
        t_shape = prod.outputs[0].shape
        for user in users:
            w = user.inputs[1]
            new_w = graph.const(w.name, _permute_columns(w.data, t_shape, order), w.dtype)
            new_w.quant = w.quant  # per-output-channel (axis 0) parameters are unchanged
            if w.qdata is not None and w.qparams is not None and w.qparams.axis == 0:
                new_w.qdata, new_w.qparams = _permute_columns(w.qdata, t_shape, order), w.qparams
            user.inputs[1] = new_w
        op.inputs[0] = x
        producers = graph.producers()
        consumers = graph.consumers()
    graph.remove_dead()
    return graph


def drop_reshape_before_fully_connected(graph: Graph) -> Graph:
    """RESHAPE [N, K] -> FULLY_CONNECTED (K input features): the reshape goes.

    FULLY_CONNECTED without ``keep_num_dims`` flattens its input to [size / K, K] itself (in the tensor's own
    order, which is what a row-major RESHAPE does), so the op, its output tensor and its shape constant are
    redundant. The reshape must not change the quantization (a RESHAPE never does) and its output must feed
    nothing else.
    """
    consumers = graph.consumers()
    for op in list(graph.ops):
        if op.code != "RESHAPE" or op.outputs[0].rank != 2:
            continue
        x, flat = op.inputs[0], op.outputs[0]
        users = consumers.get(id(flat), [])
        if (
            not users
            or graph.is_graph_output(flat)
            or x.rank < 2
            or (x.quant is None) != (flat.quant is None)
            or (x.quant is not None and not x.quant.same_as(flat.quant))
            or any(
                u.code != "FULLY_CONNECTED"
                or u.inputs[0] is not flat
                or u.options.keepNumDims
                or len(u.inputs[1].shape) != 2
                or u.inputs[1].shape[1] != flat.shape[1]
                for u in users
            )
        ):
            continue
        for user in users:
            user.inputs[0] = x
        consumers = graph.consumers()
    graph.remove_dead()
    return graph


def _permute_columns(w: np.ndarray, t_shape: tuple[int, ...], order: tuple[int, ...]) -> np.ndarray:
    out_features = w.shape[0]
    return np.ascontiguousarray(
        w.reshape(out_features, *t_shape[1:]).transpose(order).reshape(out_features, -1)
    )
