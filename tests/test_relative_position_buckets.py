"""Relative position buckets computed in the graph (MPNet's ``relative_position_bucket``, T5's; probe round 13s:
every deploy and quantize of a random-config MPNetModel / T5EncoderModel printed two numpy RuntimeWarnings,
"divide by zero encountered in log" and "invalid value encountered in cast", above the CLI's own lines).

The bucket of a distance ``n`` is ``where(n < exact, n, exact + int(log(n / exact) / log(max / exact) * k))``:
the log branch is computed for every ``n`` and ``n = 0`` gives ``log(0) = -inf`` (IEEE, as ONNX's Log defines
it) and a Cast of -inf to int64, both discarded by the Where. With static shapes the whole sub-graph is constant
and edgekit folds it with the onnx reference evaluator (numpy), whose warnings reached the user. Folding now
computes such a node as ONNX defines it, quietly (``np.errstate``); the folded buckets are the model's.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
from edgekit.core.model import load_model
from edgekit.deployment import deploy
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

TOKENS, EXACT, BUCKETS = 8, 2, 6


def bucket_model(path) -> None:
    """y = x + table[bucket(|j - i|)] for a [1, T, T] score tensor, the buckets computed from Range as MPNet's
    export writes them (Log, Div, Mul, Cast to int64, Min, Less, Where, Gather)."""
    c = {
        "zero": np.array(0, np.int64),
        "tokens": np.array(TOKENS, np.int64),
        "one": np.array(1, np.int64),
        "ax0": np.array([0], np.int64),
        "ax1": np.array([1], np.int64),
        "exact_i": np.array(EXACT, np.int64),
        "exact_f": np.array(EXACT, np.float32),
        "log_ratio": np.array(np.log(TOKENS / EXACT), np.float32),
        "span": np.array(BUCKETS - EXACT, np.float32),
        "last": np.array(BUCKETS - 1, np.int64),
        "table": np.linspace(-1.0, 1.5, BUCKETS).astype(np.float32),
    }
    nodes = [
        oh.make_node("Range", ["zero", "tokens", "one"], ["pos"]),
        oh.make_node("Unsqueeze", ["pos", "ax0"], ["row"]),
        oh.make_node("Unsqueeze", ["pos", "ax1"], ["col"]),
        oh.make_node("Sub", ["row", "col"], ["rel"]),
        oh.make_node("Abs", ["rel"], ["n"]),
        oh.make_node("Less", ["n", "exact_i"], ["small"]),
        oh.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        oh.make_node("Div", ["nf", "exact_f"], ["ratio"]),
        oh.make_node("Log", ["ratio"], ["log"]),  # log(0) = -inf at n = 0
        oh.make_node("Div", ["log", "log_ratio"], ["scaled"]),
        oh.make_node("Mul", ["scaled", "span"], ["steps"]),
        oh.make_node("Cast", ["steps"], ["steps_i"], to=TensorProto.INT64),  # -inf to int64: discarded below
        oh.make_node("Add", ["steps_i", "exact_i"], ["large"]),
        oh.make_node("Min", ["large", "last"], ["large_c"]),
        oh.make_node("Where", ["small", "n", "large_c"], ["bucket"]),
        oh.make_node("Gather", ["table", "bucket"], ["bias"]),
        oh.make_node("Unsqueeze", ["bias", "ax0"], ["bias3"]),
        oh.make_node("Add", ["x", "bias3"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "g",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, TOKENS])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, TOKENS])],
        [numpy_helper.from_array(a, k) for k, a in c.items()],
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)]), path)


def _runtime_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_folding_the_buckets_is_quiet_and_exact(tmp_path) -> None:
    bucket_model(tmp_path / "m.onnx")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load_model(tmp_path / "m.onnx")
    # before: ['divide by zero encountered in log', 'invalid value encountered in cast']
    assert _runtime_warnings(caught) == []
    assert [n.op_type for n in model.graph] == ["Add"]  # the whole bucket sub-graph folded to the bias
    (bias,) = [v for v in model.graph.node(0).inputs if v.const_value is not None]
    x = np.zeros((1, TOKENS, TOKENS), np.float32)
    (expected,) = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x})
    np.testing.assert_array_equal(np.broadcast_to(bias.const_value.numpy(), expected.shape), expected)


def test_deploying_the_buckets_is_quiet(tmp_path) -> None:
    bucket_model(tmp_path / "m.onnx")
    x = np.random.default_rng(0).normal(0, 1, (4, 1, TOKENS, TOKENS)).astype(np.float32)
    np.savez(tmp_path / "data.npz", x=x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = deploy(
            tmp_path / "m.onnx",
            "arm-cpu",
            output=tmp_path / "out",
            precision="fp32",
            calib=tmp_path / "data.npz",
        )
    assert _runtime_warnings(caught) == []
    assert result.ok, result
    (bundle,) = result.bundles
    assert bundle.verification["passed"]  # the .tflite against the source model, on the data
