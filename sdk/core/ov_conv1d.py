"""Quantized grouped 1-D convolutions as 2-D ones, for OpenVINO (an ONNX rewrite, no runtime imported here).

OpenVINO 2026.4's CPU plugin computes some int8 grouped 1-D convolutions wrong: a QDQ Conv over [1, 64, L] with
``group=4`` and a 16-tap kernel (the positional convolution of Wav2Vec2 / HuBERT / WavLM, ``num_conv_pos_embeddings``
16 and 16 groups in the real models) gave cosine 0.01 to the same QDQ Conv run by onnxruntime, per channel or per
tensor; group 1, 2 and 64, kernel 3 or 15, and the same convolution written over [1, 64, L, 1] are exact
(``tests/targets/test_ov_conv1d.py``). The 2-D form holds the same values: the input gets a trailing axis of 1,
the weight a trailing tap axis of 1, the output loses it again.
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.qdq_forms import _attr, graph_index
from onnx import helper, numpy_helper


def grouped_conv1d_as_2d(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a quantized ``proto`` where each grouped 1-D Conv whose weight is a DequantizeLinear of an
    initializer runs as a 2-D Conv over ``[N, C, L, 1]`` (Unsqueeze, Conv, Squeeze): the same values.

    The weight's quantized initializer gets its trailing axis of 1 under a new name (a shared one stays as it is
    for its other readers); the DequantizeLinear's per-channel axis 0 is unchanged. ``proto`` itself when it has no
    activation QuantizeLinear or no such Conv.
    """
    if not any(n.op_type == "QuantizeLinear" for n in proto.graph.node):
        return proto
    inits, producers, _ = graph_index(proto)
    found: list[int] = []
    for i, n in enumerate(proto.graph.node):
        if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or _attr(n, "group", 1) <= 1:
            continue
        dq = producers.get(n.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in inits:
            continue
        if len(inits[dq.input[0]].dims) != 3 or _attr(dq, "block_size", 0):
            continue
        found.append(i)
    if not found:
        return proto
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = list(out.graph.node)
    for i in reversed(found):
        conv = nodes[i]
        dq_w = producers[conv.input[1]]
        base = f"{conv.output[0]}/as_2d"
        weight = numpy_helper.to_array(inits[dq_w.input[0]])
        out.graph.initializer.append(numpy_helper.from_array(weight[..., None], f"{base}_weight_quantized"))
        dq_2d = helper.make_node(
            "DequantizeLinear",
            [f"{base}_weight_quantized", *dq_w.input[1:]],
            [f"{base}_weight"],
            name=f"{base}_weight_dq",
            axis=_attr(dq_w, "axis", 1),
        )
        axes_init = numpy_helper.from_array(np.array([-1], np.int64), f"{base}_axes")
        if opset >= 13:
            out.graph.initializer.append(axes_init)
            unsqueeze = helper.make_node(
                "Unsqueeze", [conv.input[0], axes_init.name], [f"{base}_input"], name=f"{base}_in"
            )
        else:
            unsqueeze = helper.make_node(
                "Unsqueeze", [conv.input[0]], [f"{base}_input"], name=f"{base}_in", axes=[3]
            )
        attrs = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
        if "kernel_shape" in attrs:
            attrs["kernel_shape"] = [*attrs["kernel_shape"], 1]
        for key in ("strides", "dilations"):
            if key in attrs:
                attrs[key] = [*attrs[key], 1]
        if "pads" in attrs:
            begin, end = attrs["pads"]
            attrs["pads"] = [begin, 0, end, 0]
        conv_2d = helper.make_node(
            "Conv",
            [f"{base}_input", f"{base}_weight", *conv.input[2:]],
            [f"{base}_output"],
            name=f"{base}_conv",
            **attrs,
        )
        if opset >= 13:
            squeeze = helper.make_node(
                "Squeeze", [f"{base}_output", axes_init.name], [conv.output[0]], name=base
            )
        else:
            squeeze = helper.make_node("Squeeze", [f"{base}_output"], [conv.output[0]], name=base, axes=[3])
        nodes[i : i + 1] = [dq_2d, unsqueeze, conv_2d, squeeze]
    read = {name for n in nodes for name in n.input} | {o.name for o in out.graph.output}
    nodes = [n for n in nodes if n.op_type != "DequantizeLinear" or n.output[0] in read]
    read = {name for n in nodes for name in n.input}
    replaced = {producers[proto.graph.node[i].input[1]].input[0] for i in found}
    kept = [t for t in out.graph.initializer if t.name in read or t.name not in replaced]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
