"""int8 activations as uint8, the same values: the form OpenVINO's CPU int8 kernels compute right.

A QDQ model whose activations are int8 (a TFLite int8 model converted by tf2onnx, onnxruntime's
``activation_type=QInt8``) runs on OpenVINO's CPU plugin far from its own semantics: tf2onnx's MobileNetV2 from a
full-integer TFLite model gave cosine 0.92 and top-1 1/3 against the QDQ model's exact semantics, where LiteRT and
onnxruntime agree with it (0.996). OpenVINO's int8 path expects uint8 activations. The rewrite is exact:
``QuantizeLinear`` with zero point ``z + 128`` in uint8 gives ``q + 128`` for every ``x`` (the clamp ``[-128, 127]``
becomes ``[0, 255]``), and ``DequantizeLinear`` of ``q + 128`` with zero point ``z + 128`` gives ``(q - z) * s``.
Ops that only move or select integer values (Reshape, Transpose, MaxPool, Concat, ...) carry ``q + 128`` as they
carried ``q``. Weights (int8 initializers read by DequantizeLinear) stay int8.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

#: Ops that carry their integer input's values to their output unchanged (moved, selected or max-ed): they commute
#: with the +128 shift.
_CARRY = frozenset(
    {"Reshape", "Squeeze", "Unsqueeze", "Transpose", "Flatten", "Identity", "MaxPool", "Concat", "Split",
     "Slice", "Gather", "DepthToSpace", "SpaceToDepth"}
)  # fmt: skip


def _int8_zero_point(node: onnx.NodeProto, inits: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    if len(node.input) < 3 or node.input[2] not in inits:
        return None
    zp = inits[node.input[2]]
    return numpy_helper.to_array(zp) if zp.data_type == onnx.TensorProto.INT8 else None


def unsigned_activations(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` with its int8 activations in uint8 (zero points + 128), or ``proto`` itself when it
    has none, or when an int8 activation reaches anything but a DequantizeLinear or an op of ``_CARRY`` (a graph
    output, a Pad, a Cast: the shift would change what they compute)."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    quantizers = [
        n for n in graph.node
        if n.op_type == "QuantizeLinear" and n.domain in ("", "ai.onnx") and _int8_zero_point(n, inits) is not None
    ]  # fmt: skip
    if not quantizers:
        return proto
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for name in n.input:
            consumers.setdefault(name, []).append(n)
    outputs = {o.name for o in graph.output}
    shifted: set[str] = set()  # int8 activation tensors
    dequantizers: list[onnx.NodeProto] = []
    todo = [q.output[0] for q in quantizers]
    while todo:
        name = todo.pop()
        if name in shifted:
            continue
        shifted.add(name)
        if name in outputs:
            return proto
        for user in consumers.get(name, []):
            if user.op_type == "DequantizeLinear" and user.input[0] == name:
                if _int8_zero_point(user, inits) is None:
                    return proto
                dequantizers.append(user)
            elif user.op_type in _CARRY and user.domain in ("", "ai.onnx") and user.input[0] == name:
                todo += [o for o in user.output if o]
            else:
                return proto
    for n in graph.node:  # a Concat joins shifted values only with shifted values
        if (
            n.op_type == "Concat"
            and any(i in shifted for i in n.input)
            and not all(i in shifted for i in n.input)
        ):
            return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = {id(n): i for i, n in enumerate(graph.node)}
    made: dict[str, str] = {}
    for node in [*quantizers, *dequantizers]:
        copy = out.graph.node[nodes[id(node)]]
        zp = node.input[2]
        if zp not in made:
            made[zp] = f"{zp}/uint8"
            value = numpy_helper.to_array(inits[zp]).astype(np.int16) + 128
            out.graph.initializer.append(numpy_helper.from_array(value.astype(np.uint8), made[zp]))
        copy.input[2] = made[zp]
    # the int8 activations' recorded types are uint8 now
    for info in out.graph.value_info:
        if info.name in shifted and info.type.tensor_type.elem_type == onnx.TensorProto.INT8:
            info.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    return out
