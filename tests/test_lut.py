"""Element-wise tables (edgekit.core.lut): ``Q(op(DQ(q)))`` for every level equals onnxruntime running the
three QDQ nodes, and the host runner's exact QDQ semantics use them where OpenVINO's own formula rounds otherwise."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core import lut, qdq_forms, runtime
from edgekit.core.runtime import HostRunner
from onnx import TensorProto, helper, numpy_helper
from ort_reference import run_node_by_node as exact

OPS = [
    ("HardSwish", {}),
    ("HardSigmoid", {"alpha": 1 / 6}),
    ("HardSigmoid", {}),
    ("LeakyRelu", {"alpha": 0.1}),
    ("LeakyRelu", {}),
    ("Sigmoid", {}),
    ("Tanh", {}),
    ("Identity", {}),
]


def qdq_op(
    op: str, attrs: dict, x_q: tuple[float, int], y_q: tuple[float, int], dtype=np.int8
) -> onnx.ModelProto:
    """x -> Q -> DQ -> op -> Q -> DQ -> y on a [1, 256] float input (one value per input level)."""
    inits = [
        numpy_helper.from_array(np.array(x_q[0], np.float32), "x_scale"),
        numpy_helper.from_array(np.array(x_q[1], dtype), "x_zp"),
        numpy_helper.from_array(np.array(y_q[0], np.float32), "y_scale"),
        numpy_helper.from_array(np.array(y_q[1], dtype), "y_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"]),
        helper.make_node(op, ["xd"], ["f"], **attrs),
        helper.make_node("QuantizeLinear", ["f", "y_scale", "y_zp"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def every_level(x_q: tuple[float, int], dtype=np.int8) -> np.ndarray:
    info = np.iinfo(dtype)
    levels = np.arange(info.min, info.max + 1, dtype=np.int32)
    return ((levels - x_q[1]).astype(np.float32) * np.float32(x_q[0]))[None]


def random_params(rng: np.random.Generator, dtype=np.int8) -> tuple[tuple[float, int], tuple[float, int]]:
    info = np.iinfo(dtype)
    x_q = (float(rng.uniform(0.004, 0.12)), int(rng.integers(info.min + 60, info.max - 60)))
    y_q = (float(rng.uniform(0.002, 0.06)), int(rng.integers(info.min, info.min + 100)))
    return x_q, y_q


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize(("op", "attrs"), OPS)
def test_table_equals_onnxruntime_at_every_level(op: str, attrs: dict, dtype) -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        x_q, y_q = random_params(rng, dtype)
        (expected,) = exact(qdq_op(op, attrs, x_q, y_q, dtype), {"x": every_level(x_q, dtype)})
        values = lut.table(op, attrs, *x_q, dtype, *y_q, dtype)
        got = (values.astype(np.float32) - np.float32(y_q[1])) * np.float32(y_q[0])
        np.testing.assert_array_equal(got, expected[0], err_msg=f"{op} {attrs} x {x_q} y {y_q}")


def test_host_runner_runs_hard_sigmoid_exactly(monkeypatch) -> None:
    """OpenVINO runs HardSigmoid as its own formula, which rounds some levels one step off onnxruntime's (at the
    quantizer's fixed [0, 1] output grid); the host runner's table gives onnxruntime's answer at every level."""
    rng = np.random.default_rng(5)
    off_without_table = 0
    for _ in range(12):
        x_q, y_q = random_params(rng)[0], (1 / 255, -128)
        model = qdq_op("HardSigmoid", {"alpha": 1 / 6}, x_q, y_q)
        feeds = {"x": every_level(x_q)}
        (expected,) = exact(model, feeds)
        np.testing.assert_array_equal(HostRunner(model).run(feeds)["y"], expected)
        with monkeypatch.context() as patch:
            patch.setattr(runtime, "tabulate_elementwise", lambda proto, keep=(): proto)
            off_without_table += int(np.sum(HostRunner(model).run(feeds)["y"] != expected))
    assert off_without_table > 0, "OpenVINO's HardSigmoid now rounds like onnxruntime: the table may go"


def test_host_runner_tables_only_per_tensor_qdq_between_two_quantizers() -> None:
    """A HardSwish whose float output is also a graph output keeps its node (the table gives only the quantized
    value); the QDQ one is a Gather."""
    model = qdq_op("HardSwish", {}, (0.05, 3), (0.03, -100))
    tabled = qdq_forms.tabulate_elementwise(model)
    assert [n.op_type for n in tabled.graph.node].count("Gather") == 1
    assert "HardSwish" not in [n.op_type for n in tabled.graph.node]
    assert qdq_forms.tabulate_elementwise(model, keep=["f"]) is model  # a caller asks for the float output
    model.graph.output.append(helper.make_tensor_value_info("f", TensorProto.FLOAT, [1, 256]))
    assert qdq_forms.tabulate_elementwise(model) is model
    feeds = {"x": every_level((0.05, 3))}
    y, f = exact(model, feeds)
    got = HostRunner(model).run(feeds)  # OpenVINO's own HardSwish here: within one step of onnxruntime's
    np.testing.assert_allclose(got["f"], f, rtol=1e-6, atol=1e-6)
    assert np.abs(got["y"] - y).max() <= 0.03 * 1.001
