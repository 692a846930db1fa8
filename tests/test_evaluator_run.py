"""edgekit.core.evaluator_run: the reference evaluator's run with each value dropped after its last reader (round
21s), against the evaluator's own run, and the peak memory of a chain of large activations."""

from __future__ import annotations

import tracemalloc

import numpy as np
from edgekit.core.evaluator_run import release_plan, run_releasing
from edgekit.core.exact import ExactRunner
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator


def _graph_model(nodes, inputs, outputs, initializers=(), opset=19):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _branchy():
    """A value read by three nodes, one computed and never read, an output read again later, a Split, an
    initializer read twice."""
    w = numpy_helper.from_array(np.array([1.5, -2.0, 0.25], np.float32), "w")
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["a"]),
        helper.make_node("Relu", ["a"], ["dead"]),
        helper.make_node("Add", ["a", "w"], ["b"]),
        helper.make_node("Sigmoid", ["a"], ["y1"]),
        helper.make_node("Split", ["b"], ["s0", "s1"], axis=0, num_outputs=2),
        helper.make_node("Mul", ["s0", "s1"], ["c"]),
        helper.make_node("Concat", ["c", "s1", "a"], ["y2"], axis=0),
        helper.make_node("Tanh", ["y1"], ["y3"]),
    ]
    return _graph_model(nodes, ["x"], ["y1", "y2", "y3"], [w])


def test_same_values_as_the_evaluators_run_and_what_is_dropped_when():
    model = _branchy()
    evaluator = ReferenceEvaluator(model)
    plan = release_plan(evaluator, ["y1", "y2", "y3"])
    # per node: after Mul nothing, Relu drops its own output, Add nothing, ..., Concat drops a (its last reader),
    # s1 and c; outputs, the input and the initializer are never dropped
    assert [sorted(p) for p in plan] == [[], ["dead"], [], [], ["b"], ["s0"], ["a", "c", "s1"], []]
    x = np.random.default_rng(0).standard_normal([4, 3]).astype(np.float32)
    want = evaluator.run(None, {"x": x})
    got = run_releasing(evaluator, plan, ["y1", "y2", "y3"], {"x": x})
    for w_, g in zip(want, got, strict=True):
        np.testing.assert_array_equal(g, w_)
    # ExactRunner through it: the float64 semantics as before
    exact = ExactRunner(model).run({"x": x})
    for name, w_ in zip(["y1", "y2", "y3"], want, strict=True):
        np.testing.assert_allclose(exact[name], w_, rtol=1e-6, atol=1e-7)


def test_a_chain_of_large_values_holds_only_the_live_ones():
    """Forty 2 MB float64 activations in a chain: the evaluator's own run keeps them all (80 MB), the releasing
    run a few at a time."""
    nodes = [helper.make_node("Sigmoid" if i % 2 else "Neg", [f"t{i}"], [f"t{i + 1}"]) for i in range(40)]
    nodes[0].input[0] = "x"
    nodes[-1].output[0] = "y"
    model = _graph_model(nodes, ["x"], ["y"])
    x = np.random.default_rng(1).standard_normal([500, 500]).astype(np.float32)
    runner = ExactRunner(model)
    tracemalloc.start()
    try:
        y = runner.run({"x": x})["y"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    want = ReferenceEvaluator(model).run(None, {"x": x.astype(np.float64)})[0]
    np.testing.assert_allclose(y, want.astype(np.float32), rtol=1e-6)
    assert peak < 10 * x.size * 8, f"peak {peak / 2**20:.0f} MB for 2 MB activations"


def test_a_control_flow_graph_keeps_every_value():
    """An If's branches read outer values by name: nothing is dropped, the evaluator's own run."""
    then = helper.make_graph(
        [helper.make_node("Add", ["a", "a"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", 1, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["e"])], "else", [], [helper.make_tensor_value_info("e", 1, None)]
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("ReduceSum", ["a"], ["s"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array(0.0, np.float32))),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
    ]
    model = _graph_model(nodes, ["x"], ["y"])
    evaluator = ReferenceEvaluator(model)
    assert release_plan(evaluator, ["y"]) is None
    x = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(run_releasing(evaluator, None, ["y"], {"x": x})[0], [2.0, 0.0, 6.0])
