"""Pooling on an unbatched input, as torch's exporter writes it, given the batch axis ONNX requires.

torch's ``max_pool2d`` / ``avg_pool2d`` take an unbatched ``(C, H, W)`` tensor as well as ``(N, C, H, W)``;
its TorchScript exporter writes either as one ``MaxPool`` / ``AveragePool`` / ``LpPool`` node with a 2-D
``kernel_shape``. ONNX's pooling ops take ``(N, C, D1, ...)``: an input of rank ``len(kernel_shape) + 1`` is
not a valid model, and onnx's shape inference, onnxruntime and OpenVINO all refuse it ("Attribute dilations has
incorrect size"). transformers' SuperPoint writes its keypoint NMS that way (``simple_nms`` max-pools the
``[batch, H, W]`` score map). Pooling works on each channel alone, so the unbatched node is the batched one on
``Unsqueeze(x, 0)``, then ``Squeeze(y, 0)``: the values torch computes. :func:`rewrite` runs at load, in place,
on the proto (before strict shape inference), and says so in a note.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: The pooling ops whose spatial rank is ``len(kernel_shape)``.
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
_DEFAULT = ("", "ai.onnx")


def _ranks(proto: onnx.ModelProto) -> dict[str, int]:
    """The rank of every value onnx's (non-strict) shape inference can tell; the graph may be invalid."""
    try:
        g = onnx.shape_inference.infer_shapes(proto, data_prop=True).graph
    except Exception:  # inference that stops at the first bad node: nothing known
        return {}
    return {
        v.name: len(v.type.tensor_type.shape.dim)
        for v in [*g.input, *g.value_info, *g.output]
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")
    }


def _unbatched(proto: onnx.ModelProto, ranks: dict[str, int]) -> list[int]:
    out = []
    for i, node in enumerate(proto.graph.node):
        if node.op_type not in POOLS or node.domain not in _DEFAULT or not node.input:
            continue
        kernel = next((list(a.ints) for a in node.attribute if a.name == "kernel_shape"), None)
        if kernel and ranks.get(node.input[0]) == len(kernel) + 1:
            out.append(i)
    return out


def rewrite(proto: onnx.ModelProto) -> list[str]:
    """Every pooling node on an unbatched input run on ``Unsqueeze(x, 0)`` and its outputs squeezed back, in
    place. Inference runs again after each round: a value after a refused node has no shape until that node is
    fixed. Returns the note (empty when the model has none)."""
    if not any(n.op_type in POOLS for n in proto.graph.node):
        return []  # no shape inference run for models without pooling
    opset = next((o.version for o in proto.opset_import if o.domain in _DEFAULT), 0)
    fixed: list[str] = []
    while found := set(_unbatched(proto, _ranks(proto))):
        axes_name = f"edgekit_unbatched_axes_{len(fixed)}"
        if opset >= 13:
            proto.graph.initializer.append(numpy_helper.from_array(np.array([0], np.int64), axes_name))
        extra, axes = ([axes_name], {}) if opset >= 13 else ([], {"axes": [0]})
        nodes: list[onnx.NodeProto] = []
        for i, old in enumerate(proto.graph.node):
            node = onnx.NodeProto()
            node.CopyFrom(old)
            if i not in found:
                nodes.append(node)
                continue
            batched = f"{node.input[0]}__batched_{len(fixed)}"
            nodes.append(helper.make_node("Unsqueeze", [node.input[0], *extra], [batched], **axes))
            node.input[0] = batched
            squeezes = []
            for k, y in enumerate(node.output):
                if y:
                    node.output[k] = f"{y}__batched"
                    squeezes.append(helper.make_node("Squeeze", [node.output[k], *extra], [y], **axes))
            nodes += [node, *squeezes]
            fixed.append(node.name or node.op_type)
        del proto.graph.node[:]
        proto.graph.node.extend(nodes)
    if not fixed:
        return []
    shown = ", ".join(fixed[:3]) + (f" and {len(fixed) - 3} more" if len(fixed) > 3 else "")
    return [
        f"{len(fixed)} pooling node(s) on an unbatched (C, H, W) input ({shown}; torch's exporter writes "
        "max_pool2d on a 3-D tensor so, which ONNX does not allow) run with a batch axis of 1: the same values"
    ]
