"""Typed errors, shape sub-graph folding, opset upgrades, and the quantized-model rules."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core.errors import TargetError, UnsupportedOpError
from edgekit.targets.tflite import registry
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import TensorProto, helper, numpy_helper
from tflite_helpers import (
    assert_close_to_range,
    convert_proto,
    edgekit_qdq,
    make_model,
    op_types,
    random_feeds,
    run_onnx,
    run_tflite,
)


def test_unsupported_op_names_op_node_target_and_supported_ops() -> None:
    model = make_model([helper.make_node("Det", ["x"], ["y"], name="the_det")], {"x": (3, 3)}, ["y"])
    with pytest.raises(UnsupportedOpError) as info:
        convert_proto(model, ConvertOptions(target="arm-cpu"))
    err = info.value
    assert (err.op_type, err.node, err.target) == ("Det", "the_det", "arm-cpu")
    assert "Conv" in err.supported and "Softmax" in err.supported
    assert "'Det'" in str(err) and "\n" not in str(err)


def test_op_of_another_domain_is_unsupported() -> None:
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft", name="ms_gelu")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    with pytest.raises(UnsupportedOpError, match="com.microsoft::Gelu"):
        convert_proto(model)


@pytest.mark.parametrize(
    ("node", "inits", "message"),
    [
        (
            helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="mp"),
            {},
            "Indices output",
        ),
        (
            helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest", antialias=1, name="rs"),
            {"s": np.array([1, 1, 0.5, 0.5], np.float32)},
            "antialias",
        ),
    ],
    ids=["maxpool_indices", "resize_nearest_antialias"],
)
def test_unsupported_attribute_is_a_one_line_target_error(node, inits, message) -> None:
    model = make_model([node], {"x": (1, 4, 4, 4)}, ["y"], inits)
    with pytest.raises(TargetError, match=message) as info:
        convert_proto(model)
    assert "\n" not in str(info.value) and node.name in str(info.value)


def test_dynamic_shape_is_reported() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(TargetError, match="no static shape"):
        convert_proto(model)


def test_registry_rejects_duplicate_converters() -> None:
    with pytest.raises(ValueError, match="duplicate converter for Relu"):
        registry.converter("Relu", since=1)(lambda ctx, node: None)
    assert "Relu" in registry.supported_ops()


def test_shape_subgraph_folds_to_a_constant_reshape() -> None:
    """PyTorch's flatten export: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    inits = {
        "zero": np.array(0, np.int64),
        "axes": np.array([0], np.int64),
        "minus1": np.array([-1], np.int64),
    }
    graph = helper.make_graph(
        nodes,
        "flatten",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    result = convert_proto(model)  # onnx's own inference leaves the Reshape output shape unknown here
    assert op_types(result) == {"RELU": 1, "RESHAPE": 1}
    feeds = random_feeds(model)
    assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])


def test_opset7_softmax_upgraded_by_load_model_keeps_its_semantics() -> None:
    """Before opset 13 Softmax flattens to 2-D from axis 1: over C*H*W, not over C (SqueezeNet's case)."""
    from edgekit.core.model import load_proto

    graph = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["y"], name="softmax")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 2, 2])],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    original.ir_version = 3
    model = load_proto(original)
    assert model.opset_imports[""] >= 19
    from edgekit.targets.tflite.converter import convert

    result = convert(model)
    feeds = random_feeds(original)
    expected = run_onnx(original, feeds)[0]
    assert abs(float(expected.sum()) - 1.0) < 1e-5  # one distribution over all 20 values
    assert_close_to_range(run_tflite(result, feeds)[0], expected)


# -- quantized models ---------------------------------------------------------------------------------
def _qdq_chain(
    op: onnx.NodeProto, in_scale: float, out_scale: float, out_zp: int, shape=(1, 2, 4, 4)
) -> onnx.ModelProto:
    """x -> Q(in) -> DQ -> op -> Q(out) -> DQ -> y, int8 activations."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"]),
        op,
        helper.make_node("QuantizeLinear", ["t", "s_out", "z_out"], ["tq"]),
        helper.make_node("DequantizeLinear", ["tq", "s_out", "z_out"], ["y"]),
    ]
    inits = {
        "s_in": np.array(in_scale, np.float32),
        "z_in": np.array(3, np.int8),
        "s_out": np.array(out_scale, np.float32),
        "z_out": np.array(out_zp, np.int8),
    }
    return make_model(nodes, {"x": shape}, ["y"], inits)


@pytest.mark.parametrize(
    ("op", "in_scale", "out_scale", "out_zp", "note"),
    [
        (
            helper.make_node("MaxPool", ["xd"], ["t"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
            0.02,
            0.03,
            -5,
            "before MAX_POOL_2D",
        ),
        (helper.make_node("Softmax", ["xd"], ["t"], axis=-1, name="sm"), 0.05, 0.005, -128, "after SOFTMAX"),
    ],
    ids=["maxpool_rescale", "softmax_fixed_output"],
)
def test_constraints_the_qdq_model_misses_get_a_reported_requantize(
    op, in_scale, out_scale, out_zp, note
) -> None:
    model = _qdq_chain(op, in_scale, out_scale, out_zp)
    result = convert_proto(model, ConvertOptions(io_dtype="int8"))
    assert result.float_ops == []
    assert any(note in n for n in result.notes), result.notes
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        expected, actual = run_onnx(model, feeds)[0], run_tflite(result, feeds)[0]
        assert np.mean(np.abs(actual - expected) > out_scale * 1.001) <= 0.01


def test_matching_scales_need_no_requantize() -> None:
    op = helper.make_node("MaxPool", ["xd"], ["t"], kernel_shape=[2, 2], strides=[2, 2])
    model = _qdq_chain(op, 0.02, 0.02, 3)
    result = convert_proto(model, ConvertOptions(io_dtype="int8"))
    assert result.notes == [] and op_types(result) == {"MAX_POOL_2D": 1}


def test_weights_keep_their_exact_integer_values_and_scales() -> None:
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(3)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": (1, 3, 6, 6)}, ["y"], {"w": w})
    qdq = edgekit_qdq(model, [random_feeds(model, s) for s in range(4)])
    weights = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    qw = next(v for v in weights.values() if v.dtype == np.int8 and v.shape == (4, 3, 3, 3))
    scale = next(v for k, v in weights.items() if v.dtype == np.float32 and v.shape == (4,))
    result = convert_proto(qdq)
    interpreter = Interpreter(model_content=result.data)
    conv_weights = [
        d
        for d in interpreter.get_tensor_details()
        if d["dtype"] == np.int8 and len(d["shape"]) == 4 and d["shape"][0] == 4
    ]
    assert len(conv_weights) == 1
    detail = conv_weights[0]
    np.testing.assert_array_equal(interpreter.get_tensor(detail["index"]), qw.transpose(0, 2, 3, 1))  # OHWI
    np.testing.assert_array_equal(detail["quantization_parameters"]["scales"], scale)
    assert detail["quantization_parameters"]["quantized_dimension"] == 0


def test_uint8_activations_become_int8_kernels() -> None:
    from edgekit.core.data import Sample
    from edgekit.core.model import load_proto
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize

    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["y"]),
    ]
    inits = {"w": (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), "b": np.zeros(4, np.float32)}
    model = make_model(nodes, {"x": (1, 3, 8, 8)}, ["y"], inits)
    samples = [Sample(random_feeds(model, s), None, str(s)) for s in range(4)]
    qdq = quantize(
        load_proto(model), samples, QuantizeOptions(activations="uint8", samples=4, float_output_heads=False)
    ).proto()
    assert any(i.data_type == TensorProto.UINT8 for i in qdq.graph.initializer)
    result = convert_proto(qdq, ConvertOptions(io_dtype="uint8"))
    assert result.float_ops == [] and result.inputs[0].dtype == "uint8"
    step = max(
        float(numpy_helper.to_array(i))
        for i in qdq.graph.initializer
        if i.name.endswith("scale") and i.dims == []
    )
    for seed in (10, 11):
        feeds = random_feeds(model, seed)
        expected, actual = run_onnx(qdq, feeds)[0], run_tflite(result, feeds)[0]
        assert np.mean(np.abs(actual - expected) > step * 2.001) <= 0.01


def test_fully_integer_fails_listing_the_float_ops() -> None:
    from edgekit.core.data import Sample
    from edgekit.core.model import load_proto
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Erf", ["c"], ["y"], name="the_erf"),
    ]
    model = make_model(nodes, {"x": (1, 2, 4, 4)}, ["y"], {"w": np.ones((2, 2, 1, 1), np.float32) * 0.1})
    samples = [Sample(random_feeds(model, s), None, str(s)) for s in range(2)]
    options = QuantizeOptions(activations="int8", samples=2, float_output_heads=False)
    qdq = quantize(load_proto(model), samples, options).proto()
    convert_proto(qdq, ConvertOptions(io_dtype="float32"))  # hybrid is fine for arm-cpu
    with pytest.raises(TargetError, match="cannot make the model fully integer for nnapi: .*the_erf") as info:
        convert_proto(qdq, ConvertOptions(io_dtype="int8", target="nnapi"))
    assert "\n" not in str(info.value)


def test_per_tensor_weights_option_requantizes_fully_connected() -> None:
    """NNAPI has no per-channel FULLY_CONNECTED: the weights are requantized per tensor, reported."""
    from ai_edge_litert.interpreter import Interpreter

    rng = np.random.default_rng(4)
    w = (rng.standard_normal((16, 10)) * np.linspace(0.1, 2.0, 10)).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], {"x": (1, 16)}, ["y"], {"w": w}
    )
    qdq = edgekit_qdq(model, [random_feeds(model, s) for s in range(4)])
    plain = convert_proto(qdq, ConvertOptions(io_dtype="int8"))
    per_tensor = convert_proto(
        qdq, ConvertOptions(io_dtype="int8", per_tensor_weights=frozenset({"FULLY_CONNECTED"}))
    )
    assert plain.notes == [] and any("requantized per-tensor" in n for n in per_tensor.notes)
    for result, scales in ((plain, 10), (per_tensor, 1)):
        details = Interpreter(model_content=result.data).get_tensor_details()
        weights = [d for d in details if d["dtype"] == np.int8 and tuple(d["shape"]) == (10, 16)]
        assert len(weights[0]["quantization_parameters"]["scales"]) == scales
    feeds = random_feeds(model, 9)
    expected = run_onnx(qdq, feeds)[0]
    assert_close_to_range(run_tflite(per_tensor, feeds)[0], expected, rel=0.05)


@pytest.mark.parametrize("case_id", ["gelu_erf_pattern_pytorch", "gelu_erf_pattern_half_first"])
def test_erf_gelu_pattern_becomes_one_gelu_op(case_id) -> None:
    from op_cases import CASES

    case = next(c for c in CASES if c.id == case_id)
    result = convert_proto(make_model(case.nodes, case.inputs, case.outputs, case.inits, case.opset))
    assert op_types(result) == {"GELU": 1}  # numerics: test_ops_fp32 runs the same cases


def test_lone_erf_is_expanded() -> None:
    model = make_model([helper.make_node("Erf", ["x"], ["y"])], {"x": (3, 4)}, ["y"])
    ops = op_types(convert_proto(model))
    assert "GELU" not in ops and ops["EXP"] == 1


def _conv_dw_fc():
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["d"], group=4),
        helper.make_node("Flatten", ["d"], ["f"]),
        helper.make_node("Gemm", ["f", "wf"], ["y"], transB=1),
    ]
    inits = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
        "w2": rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
        "wf": rng.standard_normal((5, 16)).astype(np.float32),
    }
    return make_model(nodes, {"x": (1, 3, 4, 4)}, ["y"], inits)


def test_per_tensor_weights_are_kept_exactly(tmp_path) -> None:
    """onnxruntime's default (per_channel=False): one weight scale, one bias scale."""
    from tflite_helpers import ort_qdq

    model = _conv_dw_fc()
    qdq = ort_qdq(model, [random_feeds(model, s) for s in range(8)], tmp_path, per_channel=False)
    result = convert_proto(qdq, ConvertOptions(io_dtype="int8"))
    assert result.float_ops == [] and result.notes == []
    for seed in (30, 31):
        feeds = random_feeds(model, seed)
        np.testing.assert_allclose(run_tflite(result, feeds)[0], run_onnx(qdq, feeds)[0], atol=1e-6)


def test_asymmetric_uint8_weights_are_requantized_and_reported(tmp_path) -> None:
    from tflite_helpers import ort_qdq

    model = _conv_dw_fc()
    qdq = ort_qdq(
        model, [random_feeds(model, s) for s in range(8)], tmp_path, per_channel=False, dtype="uint8"
    )
    result = convert_proto(qdq)
    assert result.float_ops == []
    assert any("asymmetric" in n and "requantized" in n for n in result.notes), result.notes
    feeds = random_feeds(model, 30)
    assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(qdq, feeds)[0], rel=0.05)


def test_output_computed_from_constants_only_is_written_by_an_op() -> None:
    """Shape of a static input folds to a constant; the model still outputs it (through an op)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], start=1), helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, {"x": (2, 3, 4)}, ["y", "s"])
    result = convert_proto(model)
    assert [o.name for o in result.outputs] == ["y", "s"]
    feeds = random_feeds(model)
    for actual, expected in zip(run_tflite(result, feeds), run_onnx(model, feeds), strict=True):
        np.testing.assert_array_equal(actual, expected)


def test_empty_output_is_a_target_error() -> None:
    model = make_model([helper.make_node("Shape", ["x"], ["y"], start=2, end=1)], {"x": (2, 3)}, ["y"])
    with pytest.raises(TargetError, match="output 'y' is an empty constant"):
        convert_proto(model)


def _n(op: str, inputs: list[str], output: str = "y", **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=f"the_{op.lower()}", **attrs)


@pytest.mark.parametrize(
    ("nodes", "inputs", "inits", "message"),
    [
        (
            [_n("Range", ["x", "limit", "delta"])],
            {"x": ()},
            {"limit": np.float32(9), "delta": np.float32(2)},
            "Range node 'the_range': start, limit and delta are computed at run time, so the output length "
            "depends on the data",
        ),
        (
            [_n("Einsum", ["x"], equation="ii->i")],
            {"x": (3, 3)},
            {},
            "Einsum node 'the_einsum': equation 'ii->i': a label repeated in one operand",
        ),
        (
            [_n("Einsum", ["x", "z"], equation="bij,bjk->bik")],
            {"x": (1, 2, 3), "z": (2, 3, 4)},
            {},
            "label 'b' has sizes 1 and 2 \\(broadcasting is not supported\\)",
        ),
        (
            [_n("Cast", ["z"], "k", to=7), helper.make_node("TopK", ["x", "k"], ["y", "idx"], name="the_topk")],
            {"x": (2, 5), "z": (1,)},
            {},
            "TopK node 'the_topk': TopK k must be a constant",
        ),
        (
            [_n("Cast", ["z"], "i", to=7), _n("ScatterND", ["x", "i", "u"])],
            {"x": (4, 3), "z": (2, 1), "u": (2, 3)},
            {},
            "ScatterND node 'the_scatternd': ScatterND indices must be a constant",
        ),
    ],
    ids=["range_runtime", "einsum_diagonal", "einsum_broadcast", "topk_runtime_k", "scatter_nd_runtime_indices"],
)  # fmt: skip
def test_limits_of_the_lowered_ops_are_one_line_target_errors(nodes, inputs, inits, message) -> None:
    model = make_model(nodes, inputs, ["y"], inits, opset=18)
    with pytest.raises(TargetError, match=message) as info:
        convert_proto(model)
    assert "\n" not in str(info.value)
