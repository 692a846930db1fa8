"""Lowering passes: cheaper kernels and fewer reshapes with the same numbers (targets/tflite/lowering.py)."""

from __future__ import annotations

import numpy as np
import pytest
from edgekit.targets.tflite.converter import ConvertOptions
from edgekit.targets.tflite.nnapi import check_nnapi
from onnx import helper, numpy_helper
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

R = np.random.default_rng(11)


def _w(*shape: int) -> np.ndarray:
    return (R.standard_normal(shape) * 0.3).astype(np.float32)


def classifier_head(pool: str, softmax_opset: int = 11) -> object:
    """Conv -> Relu -> (GlobalAveragePool | ReduceMean over H, W) -> Softmax(axis=1): SqueezeNet's head.

    Below opset 13 Softmax(axis=1) of a [1, C, 1, 1] tensor means a softmax over C (the input is
    flattened to 2-D), which the converter writes as RESHAPE -> SOFTMAX -> RESHAPE first.
    """
    pooled = (
        helper.make_node("GlobalAveragePool", ["r"], ["p"])
        if pool == "gap"
        else helper.make_node("ReduceMean", ["r"], ["p"], axes=[2, 3], keepdims=1)
    )
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        pooled,
        helper.make_node("Softmax", ["p"], ["y"], axis=1),
    ]
    return make_model(
        nodes, {"x": (1, 3, 13, 13)}, ["y"], {"w": _w(10, 3, 3, 3), "b": _w(10)}, opset=softmax_opset
    )


@pytest.mark.parametrize("pool", ["gap", "reduce_mean"])
def test_float_spatial_mean_becomes_one_average_pool_and_softmax_needs_no_reshape(pool) -> None:
    model = classifier_head(pool)
    result = convert_proto(model)
    ops = op_types(result)
    assert ops == {"CONV_2D": 1, "AVERAGE_POOL_2D": 1, "SOFTMAX": 1}, ops
    assert result.outputs[0].shape == (1, 1, 1, 10)
    for seed in (0, 1, 2):
        feeds = random_feeds(model, seed)
        assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])


def test_mean_without_keepdims_or_over_other_axes_stays_mean() -> None:
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["a"], axes=[2, 3], keepdims=0),
        helper.make_node("ReduceMean", ["x"], ["b"], axes=[1, 2], keepdims=1),
    ]
    model = make_model(nodes, {"x": (1, 4, 5, 6)}, ["a", "b"], opset=13)
    result = convert_proto(model)
    assert "AVERAGE_POOL_2D" not in op_types(result), op_types(result)
    feeds = random_feeds(model)
    for actual, expected in zip(run_tflite(result, feeds), run_onnx(model, feeds), strict=True):
        assert_close_to_range(actual, expected)


def test_integer_mean_stays_mean_and_float_head_mean_becomes_average_pool() -> None:
    model = classifier_head("gap")
    feeds = [random_feeds(model, s) for s in range(6)]
    int_head = convert_proto(edgekit_qdq(model, feeds))
    assert op_types(int_head).get("MEAN") == 1 and "AVERAGE_POOL_2D" not in op_types(int_head)
    assert int_head.float_ops == []

    qdq = edgekit_qdq(model, feeds, float_output_heads=True)  # the default: the pooling stays float
    float_head = convert_proto(qdq)
    ops = op_types(float_head)
    assert ops.get("AVERAGE_POOL_2D") == 1 and "MEAN" not in ops and "RESHAPE" not in ops, ops
    for f in feeds[:3]:
        assert_close_to_range(run_tflite(float_head, f)[0], run_onnx(qdq, f)[0], rel=1e-5)


def test_int8_softmax_reads_the_rank4_tensor_with_the_same_answers() -> None:
    model = classifier_head("gap")
    feeds = [random_feeds(model, s) for s in range(6)]
    qdq = edgekit_qdq(model, feeds)
    result = convert_proto(qdq)
    ops = op_types(result)
    assert "RESHAPE" not in ops and ops.get("SOFTMAX") == 1, ops
    dq = next(n for n in qdq.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y")
    step = float(numpy_helper.to_array(next(i for i in qdq.graph.initializer if i.name == dq.input[1])))
    for f in feeds:
        diff = np.abs(run_tflite(result, f)[0] - run_onnx(qdq, f)[0])
        assert float(diff.max()) <= step * 1.01, (diff.max(), step)


def test_nnapi_takes_the_rank4_softmax() -> None:
    model = classifier_head("gap")
    feeds = [random_feeds(model, s) for s in range(6)]
    result = convert_proto(edgekit_qdq(model, feeds), ConvertOptions(io_dtype="int8", target="nnapi"))
    report = check_nnapi(result.data, feature_level=4)
    softmax = [op for op in report.ops if op.op == "SOFTMAX"]
    assert len(softmax) == 1 and softmax[0].supported, softmax
    assert report.partitions == 1


def test_softmax_over_a_merged_axis_keeps_its_reshapes() -> None:
    """[1, 2, 6] -> Reshape [1, 12] -> Softmax -> Reshape [1, 2, 6]: the softmax spans both rows."""
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Reshape", ["a", "s1"], ["flat"]),
        helper.make_node("Softmax", ["flat"], ["sm"], axis=-1),
        helper.make_node("Reshape", ["sm", "s2"], ["y"]),
    ]
    inits = {"bias": _w(2, 6), "s1": np.array([1, 12], np.int64), "s2": np.array([1, 2, 6], np.int64)}
    model = make_model(nodes, {"x": (1, 2, 6)}, ["y"], inits, opset=13)
    result = convert_proto(model)
    assert op_types(result).get("RESHAPE") == 2, op_types(result)
    feeds = random_feeds(model)
    assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])


def test_softmax_whose_output_is_a_graph_output_keeps_its_shape() -> None:
    """[1, 2, 1, 6] -> Reshape [2, 6] -> Softmax (an output): the output keeps the shape ONNX gives it."""
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Reshape", ["a", "s"], ["flat"]),
        helper.make_node("Softmax", ["flat"], ["y"], axis=-1),
    ]
    inits = {"bias": _w(1, 2, 1, 6), "s": np.array([2, 6], np.int64)}
    model = make_model(nodes, {"x": (1, 2, 1, 6)}, ["y"], inits, opset=13)
    result = convert_proto(model)
    assert result.outputs[0].shape == (2, 6)
    feeds = random_feeds(model)
    assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])


def test_identity_reshape_at_a_graph_output_goes_and_the_output_keeps_its_name() -> None:
    nodes = [
        helper.make_node("Add", ["x", "bias"], ["a"]),
        helper.make_node("Reshape", ["a", "s"], ["y"]),
    ]
    model = make_model(
        nodes, {"x": (2, 5)}, ["y"], {"bias": _w(5), "s": np.array([2, 5], np.int64)}, opset=13
    )
    result = convert_proto(model)
    assert op_types(result) == {"ADD": 1}, op_types(result)
    assert [o.name for o in result.outputs] == ["y"]
    feeds = random_feeds(model)
    assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])


def test_identity_reshape_of_a_graph_input_to_an_output_stays_a_separate_tensor() -> None:
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"]), helper.make_node("Relu", ["x"], ["z"])]
    model = make_model(nodes, {"x": (2, 5)}, ["y", "z"], {"s": np.array([2, 5], np.int64)}, opset=13)
    result = convert_proto(model)
    assert [o.name for o in result.outputs] == ["y", "z"]
    assert result.inputs[0].name == "x"
    feeds = random_feeds(model)
    for actual, expected in zip(run_tflite(result, feeds), run_onnx(model, feeds), strict=True):
        assert_close_to_range(actual, expected)
