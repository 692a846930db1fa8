"""A Loop whose trip count is a constant, unrolled into the graph.

torch's TorchScript exporter writes ``nn.EmbeddingBag`` (and ``F.embedding_bag``) as an ONNX Loop over the bags at
opset 11 and later: each iteration slices the ids of one bag (``offsets[i]:offsets[i + 1]``), gathers their rows
and reduces them (sum, mean or max), and the Loop stacks the results. The trip count is the number of bags, a
shape, so once the input shapes are fixed it folds to a constant, and with fixed-size bags (a 2-D id input) the
offsets are a constant ``Range`` too. TFLite has no loop of ONNX's kind (its WHILE is not what the converters
here write) and a Loop's output shapes are not static, so such a Loop is unrolled as the tracer would have done:
one copy of the body per iteration, the iteration number a constant, loop-carried values threaded from one copy
to the next, and each scan output ``Concat`` of the copies' values, each with a leading axis of 1.

Paddle's ``while`` (a ``for i in range(paddle.to_tensor(n))`` loop: PaddleOCR's SLANet table head decodes so)
reaches ONNX through paddle2onnx as a Loop without a trip count whose body computes its own condition,
``Less(i + 1, n)``, from a carried counter. Such a condition reads no data: only carried values that step by
constants (and the iteration number), so the number of iterations is found by running that part of the body
alone (:func:`_counted_trips`, the onnx reference evaluator) until the condition turns false.

A Loop is unrolled only when its trip count is a constant of at most :data:`MAX_TRIPS` iterations (or its exit is
such a counter), and the copies stay under :data:`MAX_NODES` nodes, its condition input is absent or a constant
true, the body's condition output is constant true, the condition passed through or a counter's (no early exit that
depends on the data), and the body holds no nested control flow. Any other Loop is left to
:class:`~edgekit.core.shape_checks.DeclineControlFlowPass`, which refuses it in one line.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import NameScope, add_initializer, const_array, replace_value

#: The most iterations unrolled (an EmbeddingBag's bags: the batch), and the most nodes the copies may add.
MAX_TRIPS = 256
MAX_NODES = 20000


class UnrollConstantLoopPass(ir.passes.InPlacePass):
    """Each top-level Loop with a constant trip count and no data-dependent exit becomes its body's copies."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = False
        for node in [n for n in graph if n.op_type == "Loop" and n.domain in ("", "ai.onnx")]:
            body = node.attributes["body"].as_graph()
            trips, counted = _trip_count(node), False
            if trips is None or not _exit_free(body):
                counted_trips = _counted_trips(node, body, model.opset_imports.get("", 19))
                if counted_trips is None:
                    continue
                trips, counted = min(trips or counted_trips, counted_trips), True
            if not _unrollable(node, body, trips, counted):
                continue
            _unroll(graph, node, body, trips)
            modified = True
        return ir.passes.PassResult(model, modified)


def _trip_count(node: ir.Node) -> int | None:
    """The constant trip count of a Loop whose condition input is absent or a constant true, or None."""
    count = const_array(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
    if count is None or count.size != 1 or not _starts(node):
        return None
    trips = int(count.reshape(-1)[0])
    return trips if 1 <= trips <= MAX_TRIPS else None


def _starts(node: ir.Node) -> bool:
    """The Loop's condition input is absent or a constant true (it runs its body at least once)."""
    cond = node.inputs[1] if len(node.inputs) > 1 else None
    return cond is None or _true(cond)


def _exit_free(body: ir.Graph) -> bool:
    """The body's condition output is a constant true or the condition passed through: the trip count decides."""
    if len(body.inputs) < 2 or len(body.outputs) < 1:
        return False
    cond_in, cond_out = body.inputs[1], body.outputs[0]
    while cond_out is not cond_in and (p := cond_out.producer()) is not None and p.op_type == "Identity":
        cond_out = p.inputs[0]
    return cond_out is cond_in or _true(cond_out)


def _counted_trips(node: ir.Node, body: ir.Graph, opset: int) -> int | None:
    """The iterations of a Loop whose exit is a counter's: the body's condition output computed only from the
    iteration number, constants and carried values whose own updates read nothing else (``i = i + 1`` started at
    a constant), never from the data. That part of the body runs alone, iteration after iteration, until the
    condition turns false; None when the exit reads anything else or it is not reached within MAX_TRIPS."""
    if not _starts(node) or len(body.inputs) < 2 or len(body.outputs) < 1:
        return None
    if len(body.inputs) - 2 != len(node.inputs) - 2:
        return None
    carried_in = {id(v): k for k, v in enumerate(body.inputs[2:])}
    special = {id(body.inputs[0]): "iter", id(body.inputs[1]): "cond"}
    body_nodes = set(map(id, body))
    nodes: dict[int, ir.Node] = {}
    carried: set[int] = set()
    outer: dict[str, np.ndarray] = {}
    todo = [body.outputs[0]]
    while todo:
        value = todo.pop()
        if id(value) in special:
            continue
        if id(value) in carried_in:
            k = carried_in[id(value)]
            if k not in carried:
                carried.add(k)
                todo.append(body.outputs[1 + k])
            continue
        producer = value.producer()
        if producer is None or id(producer) not in body_nodes:  # an outer value or initializer: a constant
            array = const_array(value)
            if array is None or not value.name:
                return None
            outer[value.name] = array
            continue
        if id(producer) in nodes:
            continue
        if producer.domain not in ("", "ai.onnx") or any(
            a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in producer.attributes.values()
        ):
            return None
        nodes[id(producer)] = producer
        if len(nodes) > _COUNTER_NODES:
            return None
        todo.extend(v for v in producer.inputs if v is not None)
    starts = {}
    for k in carried:
        start = const_array(node.inputs[2 + k])
        if start is None:
            return None
        starts[k] = start
    return _run_counter(body, [n for n in body if id(n) in nodes], sorted(carried), starts, outer, opset)


#: The most body nodes a counter's exit may take (paddle2onnx's ``Less(Cast(i * 1 + 1), n)``: about ten).
_COUNTER_NODES = 64


def _run_counter(body, nodes, carried, starts, outer, opset) -> int | None:
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    value_names = [body.inputs[0].name, body.inputs[1].name, *(body.inputs[2 + k].name for k in carried)]
    out_names = [body.outputs[0].name, *(body.outputs[1 + k].name for k in carried)]
    produced = {v.name for n in nodes for v in n.outputs}
    if not all(value_names) or not all(out_names) or len(set(value_names)) != len(value_names):
        return None
    # an output that passes an input through, or a name of no node here: no graph of its own to run
    if any(o not in produced for o in out_names):
        return None
    graph = helper.make_graph(
        [ir.serde.serialize_node(n) for n in nodes],
        "counter",
        [helper.make_value_info(v, onnx.TypeProto()) for v in value_names],
        [helper.make_value_info(o, onnx.TypeProto()) for o in out_names],
        [numpy_helper.from_array(a, name) for name, a in outer.items()],
    )
    try:
        evaluator = ReferenceEvaluator(
            helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        )
        state = [starts[k] for k in carried]
        for i in range(MAX_TRIPS):
            feeds = dict(zip(value_names, [np.array(i, np.int64), np.array(True), *state], strict=True))
            cond, *state = evaluator.run(None, feeds)
            if np.asarray(cond).size != 1:
                return None
            if not bool(np.asarray(cond).reshape(-1)[0]):
                return i + 1
    except Exception:  # an op the evaluator cannot run: the Loop stays, declined in one line  # noqa: BLE001
        return None
    return None


def _true(value: ir.Value) -> bool:
    """A constant true, seen through Identity / Cast (torch writes the body's condition ``Cast(true, to=BOOL)``)."""
    while True:
        array = const_array(value)
        if array is not None:
            return array.size == 1 and bool(array.reshape(-1)[0])
        producer = value.producer()
        if producer is None or producer.op_type not in ("Identity", "Cast") or producer.inputs[0] is None:
            return False
        value = producer.inputs[0]


def _unrollable(node: ir.Node, body: ir.Graph, trips: int, counted: bool = False) -> bool:
    """The body's exit does not depend on the data (``counted``: a counter's, its iterations found), it holds no
    nested graph, and its copies stay small."""
    if len(body.inputs) < 2 or len(body.outputs) < 1 or len(body.inputs) - 2 != len(node.inputs) - 2:
        return False
    if not counted and not _exit_free(body):
        return False
    if any(
        a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        for n in body
        for a in n.attributes.values()
    ):
        return False
    return trips * len(body) <= MAX_NODES


def _unroll(graph: ir.Graph, node: ir.Node, body: ir.Graph, trips: int) -> None:
    names = NameScope(graph)
    carried = list(node.inputs[2:])
    n_carried = len(carried)
    scans: list[list[ir.Value]] = [[] for _ in body.outputs[1 + n_carried :]]
    true = add_initializer(graph, names, f"{node.name or 'Loop'}_true", np.array(True))
    for i in range(trips):
        copy = body.clone(allow_outer_scope_values=True)
        it = add_initializer(graph, names, f"{node.name or 'Loop'}_iter{i}", np.array(i, np.int64))
        given = [it, true, *carried]
        outputs = list(copy.outputs)
        inputs = list(copy.inputs)
        mapping = {id(v): g for v, g in zip(inputs, given, strict=True)}
        outputs = [mapping.get(id(v), v) for v in outputs]
        copy.outputs.clear()
        for value, new in zip(inputs, given, strict=True):
            ir.convenience.replace_all_uses_with(value, new)
        copy.inputs.clear()
        _move_nodes(graph, node, copy, names, f"_it{i}")
        carried = outputs[1 : 1 + n_carried]
        for scan, value in zip(scans, outputs[1 + n_carried :], strict=True):
            scan.append(value)
    results = list(carried)
    if scans:
        axis = add_initializer(graph, names, f"{node.name or 'Loop'}_axis0", np.array([0], np.int64))
    for k, values in enumerate(scans):
        stacked = []
        for i, value in enumerate(values):
            unsq = ir.node("Unsqueeze", [value, axis], name=names.fresh(f"{node.name or 'Loop'}_scan{k}_{i}"))
            unsq.outputs[0].name = names.fresh(f"{value.name or 'scan'}_unsqueezed")
            graph.insert_before(node, unsq)
            stacked.append(unsq.outputs[0])
        concat = ir.node(
            "Concat", stacked, attributes={"axis": 0}, name=names.fresh(f"{node.name or 'Loop'}_scan{k}")
        )
        concat.outputs[0].name = names.fresh(f"{node.name or 'Loop'}_scan{k}_out")
        graph.insert_before(node, concat)
        results.append(concat.outputs[0])
    for out, new in zip(node.outputs, results, strict=True):
        # a graph input or initializer passed through (a carried value no iteration changes): an Identity keeps the
        # Loop's output a value of its own (it may be a graph output, whose name it keeps)
        replace_value(out, _own_value(graph, node, new, names) if new.producer() is None else new)
    graph.remove(node, safe=True)


def _own_value(graph: ir.Graph, node: ir.Node, value: ir.Value, names: NameScope) -> ir.Value:
    ident = ir.node("Identity", [value], name=names.fresh(f"{node.name or 'Loop'}_out"))
    ident.outputs[0].name = names.fresh(f"{value.name or 'loop'}_out")
    graph.insert_before(node, ident)
    return ident.outputs[0]


def _move_nodes(graph: ir.Graph, node: ir.Node, copy: ir.Graph, names: NameScope, suffix: str) -> None:
    """Move ``copy``'s initializers and nodes into ``graph`` before ``node``, every value under a fresh name."""
    for name, init in list(copy.initializers.items()):
        copy.initializers.pop(name)
        init.name = names.fresh(f"{name}{suffix}")
        graph.register_initializer(init)
    nodes = list(copy)
    copy.remove(nodes)
    graph.insert_before(node, nodes)
    for inner in nodes:
        inner.name = names.fresh(f"{inner.name or inner.op_type}{suffix}")
        for value in inner.outputs:
            if value.name:
                value.name = names.fresh(f"{value.name}{suffix}")
            # the body's shapes are per iteration, possibly symbolic: inferred again out here
            value.shape = None
