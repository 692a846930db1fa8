"""Small helpers over ``onnx_ir`` shared by the passes, the quantizer and the converters."""

from __future__ import annotations

import itertools

import numpy as np
import onnx_ir as ir


def const_array(value: ir.Value | None) -> np.ndarray | None:
    """The constant behind ``value`` (an initializer) as a numpy array, or None."""
    if value is None or value.const_value is None:
        return None
    return value.const_value.numpy()


class NameScope:
    """Hands out value and node names that are unique in one graph."""

    def __init__(self, graph: ir.Graph):
        self.used: set[str] = set()
        for node in graph.all_nodes() if hasattr(graph, "all_nodes") else graph:
            if node.name:
                self.used.add(node.name)
            for v in itertools.chain(node.inputs, node.outputs):
                if v is not None and v.name:
                    self.used.add(v.name)
        for v in itertools.chain(graph.inputs, graph.outputs, graph.initializers.values()):
            if v.name:
                self.used.add(v.name)

    def fresh(self, base: str) -> str:
        name = base
        for i in itertools.count(1):
            if name not in self.used:
                break
            name = f"{base}_{i}"
        self.used.add(name)
        return name


def static_shape(shape: ir.Shape | None, rank: int | None = None) -> tuple[int, ...] | None:
    """``shape`` as integers when every dimension is a known positive size (and there are ``rank`` of them,
    when given), else None."""
    if shape is None or (rank is not None and len(shape) != rank):
        return None
    if not all(isinstance(d, int) and d > 0 for d in shape):
        return None
    return tuple(int(d) for d in shape)


def grid_sample_linear(opset: int) -> str:
    """GridSample's name for bilinear interpolation at ``opset`` ("linear" from opset 20, "bilinear" before)."""
    return "linear" if opset >= 20 else "bilinear"


def add_initializer(graph: ir.Graph, names: NameScope, base: str, array: np.ndarray) -> ir.Value:
    name = names.fresh(base)
    value = ir.Value(name=name, const_value=ir.tensor(np.asarray(array, order="C"), name=name))
    value.shape = ir.Shape(array.shape)
    value.dtype = value.const_value.dtype
    graph.register_initializer(value)
    return value


def only_consumer(value: ir.Value) -> ir.Node | None:
    """The single node that reads ``value`` (once), or None when there are several or it is a graph output."""
    if value.is_graph_output():
        return None
    uses = list(value.uses())
    if len(uses) != 1:
        return None
    return uses[0].node


def replace_value(old: ir.Value, new: ir.Value) -> None:
    """Make every reader of ``old`` read ``new``, keeping graph output names stable."""
    if old.is_graph_output():
        name = old.name
        old.name = None
        new.name = name
    ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)


def attr(node: ir.Node, name: str, default=None):
    a = node.attributes.get(name)
    return default if a is None else a.value


class IrWriter:
    """Writes the nodes that stand for one node (named under its name), each output typed and shaped as given,
    then puts them in its place (``done``)."""

    def __init__(self, graph: ir.Graph, names: NameScope, node: ir.Node, dtype) -> None:
        self.graph, self.names, self.base, self.dtype = graph, names, node.name or node.op_type, dtype
        self.nodes: list[ir.Node] = []

    def const(self, hint: str, array: np.ndarray) -> ir.Value:
        return add_initializer(self.graph, self.names, f"{self.base}/{hint}", array)

    def op(self, op_type: str, inputs: list[ir.Value], shape, out_dtype=None, **attributes) -> ir.Value:
        node = ir.node(
            op_type, inputs, attributes=attributes, name=self.names.fresh(f"{self.base}/{op_type}")
        )
        node.outputs[0].shape = ir.Shape(list(shape))
        node.outputs[0].dtype = self.dtype if out_dtype is None else out_dtype
        self.nodes.append(node)
        return node.outputs[0]

    def reshape(self, x: ir.Value, shape) -> ir.Value:
        return self.op("Reshape", [x, self.const("shape", np.array(shape, np.int64))], shape)

    def done(self, node: ir.Node, result: ir.Value) -> None:
        self.graph.insert_after(node, self.nodes)
        replace_value(node.outputs[0], result)
        self.graph.remove(node, safe=True)
