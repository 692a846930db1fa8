"""A float16 ONNX model (onnxconverter-common's convert_float_to_float16: float16 weights, Constants, Casts and,
without keep_io_types, float16 inputs/outputs) loads as the float32 model it came from: the arm-cpu TFLite got
float16 tensors into CONV_2D (LiteRT: ``conv.cc input_type == kTfLiteFloat32``) and int8 found "nothing to
quantize". References: onnxruntime on the float16 file (within float16's precision) and on the widened model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core.model import load_proto, to_proto
from onnx import TensorProto, helper, numpy_helper
from tflite_helpers import convert_proto, edgekit_qdq, random_feeds, run_onnx, run_tflite_isolated

R = np.random.default_rng(5)


def _float16_model(float16_io: bool) -> onnx.ModelProto:
    io = TensorProto.FLOAT16 if float16_io else TensorProto.FLOAT
    h = lambda a: numpy_helper.from_array(np.asarray(a, np.float16))  # noqa: E731
    nodes = [
        *([] if float16_io else [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16)]),
        helper.make_node("Conv", ["x" if float16_io else "x16", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Constant", [], ["k"], value=h([0.5])),
        helper.make_node("Mul", ["c", "k"], ["m"]),
        helper.make_node("Relu", ["m"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y" if float16_io else "y16"]),
        *([] if float16_io else [helper.make_node("Cast", ["y16"], ["y"], to=TensorProto.FLOAT)]),
    ]
    graph = helper.make_graph(
        nodes,
        "f16",
        [helper.make_tensor_value_info("x", io, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", io, [1, 8])],
        [
            numpy_helper.from_array((R.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float16), "w"),
            numpy_helper.from_array((R.standard_normal(8) * 0.1).astype(np.float16), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _types(proto: onnx.ModelProto) -> set[int]:
    values = [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]
    return {v.type.tensor_type.elem_type for v in values} | {t.data_type for t in proto.graph.initializer}


@pytest.mark.parametrize("float16_io", [True, False], ids=["float16-io", "float32-io"])
def test_a_float16_model_converts_and_quantizes_as_its_float32_model(float16_io: bool) -> None:
    source = _float16_model(float16_io)
    notes: list[str] = []
    widened = to_proto(load_proto(source, messages=notes))
    assert TensorProto.FLOAT16 not in _types(widened)
    assert any("float16 model" in n for n in notes), notes
    feeds = random_feeds(widened, 0)
    (expected,) = run_onnx(widened, feeds)
    source_feeds = {"x": feeds["x"].astype(np.float16 if float16_io else np.float32)}
    (from_source,) = run_onnx(source, source_feeds)
    # the widened model is the float16 one up to float16's rounding
    np.testing.assert_allclose(from_source.astype(np.float32), expected, rtol=2e-2, atol=2e-3)
    (actual,) = run_tflite_isolated(convert_proto(widened), feeds)
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    qdq = edgekit_qdq(widened, [random_feeds(widened, s) for s in range(4)])
    assert any(n.op_type == "QuantizeLinear" for n in qdq.graph.node)


def _float16_if_model() -> onnx.ModelProto:
    """A float16 model whose If (condition an initializer: folded, its branch taken) holds float16 Constants and a
    Cast to float16 in the branch: the widening walks sub-graphs too (it did not: the branch stayed float16, and
    the taken branch added a float16 constant to a float32 tensor)."""
    h = lambda a: numpy_helper.from_array(np.asarray(a, np.float16))  # noqa: E731

    def branch(name: str, op: str, value: float) -> onnx.GraphProto:
        return helper.make_graph(
            [
                helper.make_node("Constant", [], [f"{name}_k"], value=h([value])),
                helper.make_node(op, ["m", f"{name}_k"], [f"{name}_a"]),
                helper.make_node("Cast", [f"{name}_a"], [f"{name}_y"], to=TensorProto.FLOAT16),
            ],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT16, [1, 8])],
        )

    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node(
                "If",
                ["cond"],
                ["y"],
                then_branch=branch("then", "Add", 0.75),
                else_branch=branch("else", "Sub", 3.0),
            ),
        ],
        "f16_if",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 8])],
        [
            numpy_helper.from_array((R.standard_normal((4, 8)) * 0.5).astype(np.float16), "w"),
            numpy_helper.from_array(np.array(True), "cond"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_a_float16_models_if_branches_widen_too() -> None:
    source = _float16_if_model()
    widened = to_proto(load_proto(source))
    assert TensorProto.FLOAT16 not in _types(widened)
    feeds = random_feeds(widened, 1)
    (from_source,) = run_onnx(source, {"x": feeds["x"].astype(np.float16)})
    (actual,) = run_tflite_isolated(convert_proto(widened), feeds)
    np.testing.assert_allclose(actual, from_source.astype(np.float32), rtol=2e-2, atol=2e-3)
