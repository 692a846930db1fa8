"""Convolutions whose weight is computed at run time, written out as patches and a MatMul.

A Siamese tracker's depthwise cross-correlation (``F.conv2d(search, template_features, groups=C)``: the head of
NanoTrack / SiamRPN++ / SiamBAN exports, whose template features are a graph input), StyleGAN2's modulated
convolution (GFPGAN, CodeFormer: weight * style, demodulated, per sample) and CondConv (timm's
``efficientnet_cc_*``: experts mixed by a routing MatMul) give Conv a weight that is an activation. TFLite's
CONV_2D and DEPTHWISE_CONV_2D need a constant filter (and its quantization), so the Conv becomes what it
computes: the input's patches by a constant one-hot depthwise Conv (channel ``c * kh * kw + i * kw + j`` is
input channel ``c`` shifted by ``(i, j)``, with the Conv's pads, strides and dilations), reshaped per group to
``[N, g, C/g * kh * kw, Ho * Wo]``, and a MatMul by the weight reshaped to ``[g, M/g, C/g * kh * kw]``: the
same sums over the same products, an activation x activation MatMul every target runs and the quantizer
quantizes as such. A 1x1 kernel at stride 1 without pads needs no patches. 2-D convolutions with static shapes
only; anything else keeps its Conv (and a target's typed refusal of a computed weight).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import NameScope, add_initializer, attr, replace_value, static_shape

#: Patch tensors larger than this (elements) keep the Conv: the one-hot expansion would not fit an edge device.
_MAX_PATCH_ELEMENTS = 1 << 24


def _one_hot(channels: int, kh: int, kw: int) -> np.ndarray:
    kernel = np.zeros((channels * kh * kw, 1, kh, kw), np.float32)
    for c in range(channels):
        for i in range(kh):
            for j in range(kw):
                kernel[c * kh * kw + i * kw + j, 0, i, j] = 1.0
    return kernel


def _reads_the_data(value: ir.Value) -> bool:
    """Whether ``value`` is computed from a graph input (not from constants alone: a QDQ model's weight is a
    DequantizeLinear of integer constants, a float16 model's a Cast of one; those stay the Conv's weights)."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in seen or v.const_value is not None:
            continue
        seen.add(id(v))
        node = v.producer()
        if node is None:
            if v.is_graph_input():
                return True
            continue
        stack.extend(i for i in node.inputs if i is not None)
    return False


class ComputedConvWeightPass(ir.passes.InPlacePass):
    """A 2-D Conv whose weight is not a constant becomes one-hot patches + MatMul (module docstring)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for conv in list(graph):
            if conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(conv.inputs) < 2:
                continue
            x, w = conv.inputs[0], conv.inputs[1]
            if w is None or x is None or not _reads_the_data(w):
                continue  # a constant weight, or one computed from constants only (a QDQ model's DequantizeLinear)
            x_shape, w_shape = static_shape(x.shape, 4), static_shape(w.shape, 4)
            y_shape = static_shape(conv.outputs[0].shape, 4)
            if (
                x_shape is None
                or w_shape is None
                or y_shape is None
                or attr(conv, "auto_pad", "NOTSET") != "NOTSET"
            ):
                continue
            n, c, _, _ = x_shape
            m, cg, kh, kw = w_shape
            group = int(attr(conv, "group", 1))
            if group * cg != c or m % group:
                continue
            ho, wo = y_shape[2:]
            if n * c * kh * kw * ho * wo > _MAX_PATCH_ELEMENTS:
                continue
            self._rewrite(graph, names, conv, x_shape, w_shape, y_shape, group)
            modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _rewrite(graph, names, conv, x_shape, w_shape, y_shape, group) -> None:
        x, w = conv.inputs[0], conv.inputs[1]
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        n, c, _, _ = x_shape
        m, cg, kh, kw = w_shape
        ho, wo = y_shape[2:]
        strides = list(attr(conv, "strides", [1, 1]))
        dilations = list(attr(conv, "dilations", [1, 1]))
        pads = list(attr(conv, "pads", [0, 0, 0, 0]))
        base = conv.name or "conv"
        nodes: list[ir.Node] = []

        def shape_const(hint: str, dims) -> ir.Value:
            return add_initializer(graph, names, f"{base}/{hint}", np.array(dims, np.int64))

        if (kh, kw) == (1, 1) and strides == [1, 1] and not any(pads):
            patches = x
        else:
            one_hot = add_initializer(graph, names, f"{base}/one_hot", _one_hot(c, kh, kw))
            node = ir.node(
                "Conv", [x, one_hot], name=names.fresh(f"{base}/patches"),
                attributes={"group": c, "kernel_shape": [kh, kw], "strides": strides, "dilations": dilations,
                            "pads": pads},
            )  # fmt: skip
            patches = node.outputs[0]
            patches.shape, patches.dtype = ir.Shape([n, c * kh * kw, ho, wo]), x.dtype
            nodes.append(node)
        k = cg * kh * kw
        reshape_p = ir.node("Reshape", [patches, shape_const("patch_shape", [n, group, k, ho * wo])],
                            name=names.fresh(f"{base}/patch_groups"))  # fmt: skip
        reshape_w = ir.node("Reshape", [w, shape_const("weight_shape", [group, m // group, k])],
                            name=names.fresh(f"{base}/weight_groups"))  # fmt: skip
        matmul = ir.node(
            "MatMul", [reshape_w.outputs[0], reshape_p.outputs[0]], name=names.fresh(f"{base}/matmul")
        )
        out = ir.node("Reshape", [matmul.outputs[0], shape_const("out_shape", [n, m, ho, wo])],
                      name=names.fresh(f"{base}/out"))  # fmt: skip
        reshape_p.outputs[0].shape = ir.Shape([n, group, k, ho * wo])
        reshape_w.outputs[0].shape = ir.Shape([group, m // group, k])
        matmul.outputs[0].shape = ir.Shape([n, group, m // group, ho * wo])
        out.outputs[0].shape = ir.Shape([n, m, ho, wo])
        nodes += [reshape_p, reshape_w, matmul, out]
        result = out.outputs[0]
        if bias is not None:
            b = ir.node(
                "Reshape", [bias, shape_const("bias_shape", [1, m, 1, 1])], name=names.fresh(f"{base}/bias")
            )
            add = ir.node("Add", [result, b.outputs[0]], name=names.fresh(f"{base}/add_bias"))
            b.outputs[0].shape, add.outputs[0].shape = ir.Shape([1, m, 1, 1]), ir.Shape([n, m, ho, wo])
            nodes += [b, add]
            result = add.outputs[0]
        for v in (o for nd in nodes for o in nd.outputs):
            v.dtype = x.dtype
        graph.insert_after(conv, nodes)
        replace_value(conv.outputs[0], result)
        graph.remove(conv, safe=True)
