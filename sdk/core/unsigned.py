"""int8 activations re-expressed as uint8 for OpenVINO: the same values on the other 8-bit grid.

OpenVINO's CPU plugin runs QDQ models whose activations are int8 wrongly (SqueezeNet: 51 % top-1 where the
model's exact semantics give 68 %, with or without VNNI; tf2onnx's int8 MobileNetV2 at cosine 0.95), and right
with uint8 activations. ``edgekit quantize`` writes uint8 activations for intel-vpu, but a model brought already
quantized (tf2onnx's conversions of int8 TFLite files, onnxruntime with ``QInt8`` activations) has int8 ones.

An int8 QuantizeLinear with zero point ``z`` and the DequantizeLinears reading it compute exactly what the
uint8 pair with zero point ``z + 128`` computes: ``clamp(round(x / s) + z, -128, 127) + 128 ==
clamp(round(x / s) + z + 128, 0, 255)`` and ``(q - z) * s == ((q + 128) - (z + 128)) * s``. Between them only
ops that move values without computing on them may stand (Reshape, Transpose, Squeeze, MaxPool, ...: they
commute with the shift). A quantized tensor read by anything else, or leaving the graph, keeps its int8 grid.
Weights (constant inputs) stay int8, as OpenVINO expects them.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

#: Ops that move or select 8-bit values without computing on them (their first input is the data; the others,
#: if any, shapes / axes / indices). They commute with adding 128 to every value.
MOVES = frozenset(
    {
        "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Gather", "MaxPool",
        "DepthToSpace", "SpaceToDepth", "Expand", "Tile",
    }
)  # fmt: skip


def _int8_constant(name: str, inits: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    tensor = inits.get(name)
    if tensor is None or tensor.data_type != onnx.TensorProto.INT8:
        return None
    return numpy_helper.to_array(tensor)


def unsigned_activations(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every int8 activation QuantizeLinear -> DequantizeLinear chain on uint8 (a copy; ``proto``
    itself when there is none). See the module docstring."""
    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    for node in graph.node:  # Constant zero points count as initializers here
        if node.op_type == "Constant" and len(node.output) == 1:
            for attr in node.attribute:
                if attr.name == "value":
                    inits.setdefault(node.output[0], attr.t)
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}

    def region(name: str) -> Iterator[onnx.NodeProto | None]:
        """The readers downstream of ``name`` through moves; None where the values leak (a graph output, a
        reader that computes on them, a move that also reads them as a shape or an index)."""
        if name in outputs:
            yield None
        for reader in readers.get(name, []):
            data = reader.domain in ("", "ai.onnx") and reader.input[0] == name
            if data and reader.op_type == "DequantizeLinear":
                yield reader
            elif data and reader.op_type in MOVES and name not in reader.input[1:]:
                yield reader
                yield from region(reader.output[0])
            else:
                yield None

    changes: list[tuple[onnx.NodeProto, list[onnx.NodeProto], list[str]]] = []
    for node in graph.node:
        if node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx") or len(node.input) < 3:
            continue
        if node.input[0] in inits or _int8_constant(node.input[2], inits) is None:
            continue
        reached = list(region(node.output[0]))
        if None in reached:
            continue
        dequantizes = [r for r in reached if r.op_type == "DequantizeLinear"]
        if not dequantizes or any(
            len(d.input) < 3 or _int8_constant(d.input[2], inits) is None for d in dequantizes
        ):
            continue
        moved = [r.output[0] for r in reached if r.op_type != "DequantizeLinear"]
        changes.append((node, dequantizes, moved))
    if not changes:
        return proto

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = {id(n): i for i, n in enumerate(graph.node)}
    shifted: dict[str, str] = {}  # int8 zero point name -> its uint8 twin

    def twin(name: str) -> str:
        if name not in shifted:
            value = _int8_constant(name, inits)
            assert value is not None
            new = f"{name}__uint8"
            while new in inits:
                new += "_"
            out.graph.initializer.append(
                numpy_helper.from_array((value.astype(np.int16) + 128).astype(np.uint8), new)
            )
            shifted[name] = new
        return shifted[name]

    retyped: set[str] = set()
    for quantize, dequantizes, moved in changes:
        for original in (quantize, *dequantizes):
            copy = out.graph.node[nodes[id(original)]]
            copy.input[2] = twin(original.input[2])
        retyped.update([quantize.output[0], *moved])
    for info in out.graph.value_info:
        if info.name in retyped and info.type.tensor_type.elem_type == onnx.TensorProto.INT8:
            info.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    return out
