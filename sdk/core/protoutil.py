"""Small helpers over ``onnx`` protos (the file as read, before the IR), shared by the loaders, the runners and
the targets' verification: sub-graphs, what a node reads from its scope, extra outputs."""

from __future__ import annotations

from collections.abc import Sequence

import onnx


def subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The sub-graphs ``node`` holds (an If's branches, a Loop's or Scan's body), in attribute order."""
    out: list[onnx.GraphProto] = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def node_reads(node: onnx.NodeProto) -> list[str]:
    """The values ``node`` reads from the graph it is in: its inputs, then the outer values its sub-graphs read
    (an If's branches capture them by name); names a sub-graph defines itself are not reads."""
    names = [i for i in node.input if i]
    for sub in subgraphs(node):
        inner = {o for n in sub.node for o in n.output} | {i.name for i in sub.input}
        inner |= {t.name for t in sub.initializer}
        names += [i for n in sub.node for i in node_reads(n) if i not in inner]
    return names


def with_outputs(proto: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``proto`` that also outputs the tensors ``names``."""
    if not names:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    existing = {o.name for o in out.graph.output}
    types = {v.name: v for v in out.graph.value_info}
    for name in names:
        if name in existing:
            continue
        if name in types:
            out.graph.output.append(types[name])
        else:
            out.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
        existing.add(name)
    return out


#: Ops OpenVINO runs as integer multiply-accumulate kernels when their inputs are quantized.
