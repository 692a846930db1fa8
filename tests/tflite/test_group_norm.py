"""GroupNormalization (opsets 18 and 21) converts to float TFLite that matches the onnx reference evaluator.

The op is an ONNX function whose output shape inference does not give, so these models declare their output;
the reference is onnx's own evaluator (opset 18: scale and bias per group; opset 21: per channel). The
InstanceNormalization form PyTorch exports GroupNorm as (SCRFD's heads) is in op_cases.py.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from tflite_helpers import assert_close_to_range, convert_proto, op_types, run_tflite

R = np.random.default_rng(7)


def group_norm_model(shape: tuple[int, ...], groups: int, opset: int, affine: int) -> onnx.ModelProto:
    node = helper.make_node(
        "GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-3, name="gn"
    )
    inits = [
        numpy_helper.from_array(R.standard_normal(affine).astype(np.float32), "s"),
        numpy_helper.from_array(R.standard_normal(affine).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        [node],
        "gn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9 if opset < 21 else 10
    if opset >= 21:  # onnx's checker refuses opset 18's GroupNormalization as deprecated; files have it
        onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize(
    ("shape", "groups", "opset", "affine"),
    [
        ((1, 4, 5, 6), 2, 18, 2),  # opset 18: per-group scale and bias
        ((2, 6, 3, 4), 3, 21, 6),  # opset 21: per-channel
        ((1, 8, 7), 4, 21, 8),  # rank 3
    ],
)
def test_group_norm_matches_reference(shape, groups, opset, affine) -> None:
    model = group_norm_model(shape, groups, opset, affine)
    result = convert_proto(model)
    assert "MEAN" in op_types(result)
    x = (R.standard_normal(shape) * 3 + 1).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (actual,) = run_tflite(result, {"x": x})
    assert_close_to_range(actual, expected, rel=1e-5)


@pytest.mark.parametrize("case_id", ["group_norm_written_out", "group_norm_reduce_mean"])
def test_int8_group_norm_as_exported_matches_its_qdq_model(case_id: str) -> None:
    """SCRFD's GroupNorm (Reshape, InstanceNormalization, Reshape, Mul, Add; or the normalisation written out as
    ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div) in an int8 model: the normalisation stays float between
    DEQUANTIZE and QUANTIZE (no integer kernel: like LayerNormalization), the per-channel affine is integer, and
    the .tflite gives its QDQ model's exact semantics within one output step."""
    from edgekit.core.exact import ExactRunner
    from edgekit.targets.tflite.converter import ConvertOptions
    from op_cases import CASES
    from tflite_helpers import edgekit_qdq, make_model, random_feeds

    case = next(c for c in CASES if c.id == case_id)
    model = make_model(case.nodes, case.inputs, case.outputs, case.inits, case.opset)
    qdq = edgekit_qdq(model, [random_feeds(model, seed) for seed in range(8)])
    result = convert_proto(qdq, ConvertOptions(target="test"))
    # float ops are named "CODE (onnx node)": only the normalisation's own (the one node it converts as)
    norm = {"instancenormalization_node_in", "reducemean_node_mean"}
    assert result.float_ops and all(op.split(" (")[1].rstrip(")") in norm for op in result.float_ops)
    assert {"MUL", "ADD"} <= set(op_types(result))
    producers = {o: node for node in qdq.graph.node for o in node.output}
    scale_name = producers[qdq.graph.output[0].name].input[1]
    step = float(next(numpy_helper.to_array(i) for i in qdq.graph.initializer if i.name == scale_name))
    for seed in (10, 11):
        feeds = random_feeds(model, seed)
        expected = ExactRunner(qdq).run(feeds)["y"]
        (actual,) = run_tflite(result, feeds)
        off = np.abs(actual.astype(np.float64) - expected) > step * 1.001
        assert off.mean() <= 0.01, f"{off.mean():.2%} of the values differ by more than one step ({step:.3g})"


def test_group_norm_inside_the_graph_has_a_shape() -> None:
    """torch's dynamo exporter at opset 21+ writes nn.GroupNorm as GroupNormalization-21 between other ops, and
    onnx's shape inference gives its output no shape: every value after it was shapeless and the conversion
    refused ("value 'group_norm' has no static shape"). The output takes the input's shape, and inference goes
    on from there."""
    node = helper.make_node
    graph = helper.make_graph(
        [
            node("GroupNormalization", ["x", "s", "b"], ["g"], num_groups=2, epsilon=1e-5),
            node("Relu", ["g"], ["r"]),
            node("GroupNormalization", ["r", "s", "b"], ["g2"], num_groups=4, epsilon=1e-5),
            node("Conv", ["g2", "w"], ["y"]),
        ],
        "gn_inside",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],  # dynamic
        [
            numpy_helper.from_array(R.standard_normal(4).astype(np.float32), "s"),
            numpy_helper.from_array(R.standard_normal(4).astype(np.float32), "b"),
            numpy_helper.from_array(R.standard_normal((3, 4, 1, 1)).astype(np.float32), "w"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    from edgekit.core.model import load_proto

    loaded = load_proto(model)  # what every command starts with
    assert [tuple(n.outputs[0].shape) for n in loaded.graph] == [(1, 4, 5, 6)] * 3 + [(1, 3, 5, 6)]
    result = convert_proto(model)
    x = (R.standard_normal((1, 4, 5, 6)) * 3 + 1).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    (actual,) = run_tflite(result, {"x": x})
    assert_close_to_range(actual, expected, rel=1e-5)
