"""Layout: NHWC kernels without internal transposes; NHWC image I/O by default, NCHW with keep_io_layout."""

from __future__ import annotations

import numpy as np
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import helper
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

R = np.random.default_rng(7)


def _w(*shape: int) -> np.ndarray:
    return (R.standard_normal(shape) * 0.3).astype(np.float32)


def plain_cnn(image_output: bool = False):
    """Conv, depthwise, asymmetric pads, branches + Concat, Add, pools, GAP, Flatten, Gemm, Softmax."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "wd", "bd"], ["d1"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["d1", "lo", "hi"], ["r2"]),
        helper.make_node("Conv", ["r2", "wa", "ba"], ["a1"]),
        helper.make_node("Conv", ["r2", "wb", "bb"], ["b1o"], pads=[0, 0, 2, 2], kernel_shape=[3, 3]),
        helper.make_node("Concat", ["a1", "b1o"], ["cat"], axis=1),
        helper.make_node("Add", ["cat", "bias"], ["added"]),
        helper.make_node("Relu", ["added"], ["r3"]),
        helper.make_node("AveragePool", ["r3"], ["ap"], kernel_shape=[3, 3], auto_pad="SAME_UPPER"),
    ]
    if image_output:
        nodes.append(helper.make_node("Conv", ["ap", "wo", "bo"], ["y"]))
    else:
        nodes += [
            helper.make_node("GlobalAveragePool", ["ap"], ["gap"]),
            helper.make_node("Flatten", ["gap"], ["flat"]),
            helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1),
            helper.make_node("Softmax", ["logits"], ["y"]),
        ]
    inits = {
        "w1": _w(8, 3, 3, 3), "b1": _w(8), "wd": _w(8, 1, 3, 3), "bd": _w(8),
        "lo": np.array(0, np.float32), "hi": np.array(6, np.float32),
        "wa": _w(6, 8, 1, 1), "ba": _w(6), "wb": _w(6, 8, 3, 3), "bb": _w(6), "bias": _w(12, 1, 1),
        "wo": _w(4, 12, 1, 1), "bo": _w(4), "wf": _w(10, 12), "bf": _w(10),
    }  # fmt: skip
    return make_model(nodes, {"x": (1, 3, 16, 16)}, ["y"], inits, opset=13)


def mnist_like():
    """Conv -> Relu -> MaxPool -> Reshape [1, C*H*W] -> MatMul -> Add: the NCHW flatten before a dense layer."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[2, 2, 2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p1", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "wf"], ["mm"]),
        helper.make_node("Add", ["mm", "bf"], ["y"]),
    ]
    inits = {
        "w1": _w(4, 1, 5, 5),
        "b1": _w(4),
        "shape": np.array([1, 64], np.int64),
        "wf": _w(64, 10),
        "bf": _w(10),
    }
    return make_model(nodes, {"x": (1, 1, 8, 8)}, ["y"], inits, opset=13)


def _check(model, result) -> None:
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])


def test_plain_cnn_has_no_transpose() -> None:
    model = plain_cnn()
    result = convert_proto(model)
    ops = op_types(result)
    assert "TRANSPOSE" not in ops, ops
    assert ops["CONV_2D"] == 3 and ops["DEPTHWISE_CONV_2D"] == 1
    assert "RELU" not in ops and "RELU6" not in ops  # fused into the convolutions / add
    assert result.inputs[0].shape == (1, 16, 16, 3) and result.inputs[0].layout == "NHWC"
    _check(model, result)


def test_int8_plain_cnn_has_no_transpose_and_is_integer() -> None:
    model = plain_cnn()
    qdq = edgekit_qdq(model, [random_feeds(model, s) for s in range(4)])
    result = convert_proto(qdq)
    ops = op_types(result)
    assert "TRANSPOSE" not in ops, ops
    assert result.float_ops == []
    assert ops.get("QUANTIZE") == 1 and ops.get("DEQUANTIZE") == 1  # only at the edges


def test_nchw_flatten_before_dense_layer_needs_no_transpose_or_reshape() -> None:
    model = mnist_like()
    for source in (model, edgekit_qdq(model, [random_feeds(model, s) for s in range(4)])):
        result = convert_proto(source)
        assert "TRANSPOSE" not in op_types(result), op_types(result)
        assert "RESHAPE" not in op_types(result), op_types(result)  # FULLY_CONNECTED flattens by itself
        for seed in (0, 1):
            feeds = random_feeds(model, seed)
            expected, actual = run_onnx(source, feeds)[0], run_tflite(result, feeds)[0]
            assert_close_to_range(actual, expected, rel=1e-5 if source is model else 0.02)


def test_image_output_is_nhwc_by_default() -> None:
    model = plain_cnn(image_output=True)
    result = convert_proto(model)
    assert "TRANSPOSE" not in op_types(result)
    assert result.outputs[0].shape == (1, 8, 8, 4) and result.outputs[0].layout == "NHWC"
    _check(model, result)


def test_keep_io_layout_has_one_transpose_at_each_edge() -> None:
    model = plain_cnn(image_output=True)
    result = convert_proto(model, ConvertOptions(keep_io_layout=True))
    assert op_types(result).get("TRANSPOSE") == 2
    assert result.inputs[0].shape == (1, 3, 16, 16) and result.inputs[0].layout == "NCHW"
    assert result.outputs[0].shape == (1, 4, 8, 8) and result.outputs[0].onnx_to_tflite_perm is None
    _check(model, result)


def test_rank4_tensors_that_are_not_images_keep_the_onnx_layout() -> None:
    """An attention-mask-like rank-4 input feeding a MatMul: NHWC would only add transposes."""
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "mask"], ["y"])],
        {"x": (1, 2, 3, 4), "mask": (1, 2, 3, 5)},
        ["y"],
        {"w": _w(4, 5)},
    )
    result = convert_proto(model)
    assert "TRANSPOSE" not in op_types(result)
    assert [i.shape for i in result.inputs] == [(1, 2, 3, 4), (1, 2, 3, 5)]
    assert all(i.onnx_to_tflite_perm is None for i in (*result.inputs, *result.outputs))
    _check(model, result)


def test_activations_lowered_to_elementwise_builtins_need_no_transpose() -> None:
    """Mish, Selu, Celu, Softsign, Round and Mod between convolutions: their builtins are element-wise, so the
    NCHW<->NHWC transposes around the convolutions cancel through them."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Mish", ["c1"], ["m"]),
        helper.make_node("Selu", ["m"], ["s"]),
        helper.make_node("Celu", ["s"], ["ce"], alpha=0.5),
        helper.make_node("Softsign", ["ce"], ["ss"]),
        helper.make_node("Round", ["ss"], ["r"]),
        helper.make_node("Mod", ["c1", "d"], ["md"], fmod=1),
        helper.make_node("Add", ["r", "md"], ["a"]),
        helper.make_node("Conv", ["a", "w2", "b2"], ["y"]),
    ]
    inits = {"w1": _w(8, 3, 3, 3), "b1": _w(8), "w2": _w(4, 8, 1, 1), "b2": _w(4), "d": np.float32(0.3)}
    model = make_model(nodes, {"x": (1, 3, 8, 8)}, ["y"], inits, opset=18)
    result = convert_proto(model)
    assert "TRANSPOSE" not in op_types(result), op_types(result)
    _check(model, result)


def _tf2onnx_style_nhwc_net():
    """A TensorFlow model as tf2onnx writes it: NHWC input, Transpose to NCHW, Conv / PRelu / Conv, Transpose back
    to an NHWC output (MediaPipe's selfie and pose masks, [1, H, W, C])."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["xt", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("PRelu", ["c1", "slope"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c2"], ["y"], perm=[0, 2, 3, 1]),
    ]
    inits = {
        "w1": _w(8, 3, 3, 3),
        "b1": _w(8),
        "slope": np.abs(_w(8, 1, 1)),
        "w2": _w(4, 8, 3, 3),
        "b2": _w(4),
    }
    return make_model(nodes, {"x": (1, 12, 10, 3)}, ["y"], inits)


def test_an_nhwc_model_keeps_its_nhwc_io_in_int8_with_no_transpose() -> None:
    """tf2onnx's MediaPipe BlazeFace ([1, 128, 128, 3] in): the int8 bundles (arm-cpu, nnapi) took [1, 128, 3, 128]
    and ran a TRANSPOSE after the input's QUANTIZE, which sat between the input and its edge transpose; the fp32
    bundle took [1, 128, 128, 3] with none. Now the quantization runs in the ONNX layout, as the DEQUANTIZE of the
    output does."""
    model = _tf2onnx_style_nhwc_net()
    qdq = edgekit_qdq(model, [random_feeds(model, s) for s in range(4)], float_output_heads=False)
    for source in (model, qdq):
        result = convert_proto(source)
        ops = op_types(result)
        assert "TRANSPOSE" not in ops, ops
        assert result.inputs[0].shape == (1, 12, 10, 3) and result.inputs[0].onnx_to_tflite_perm is None
        assert result.outputs[0].shape == (1, 12, 10, 4) and result.outputs[0].onnx_to_tflite_perm is None
        for seed in (0, 1):
            feeds = random_feeds(model, seed)
            expected, actual = run_onnx(source, feeds)[0], run_tflite(result, feeds)[0]
            # int8: LiteRT's kernels against onnxruntime's float run of the QDQ model, a step either way
            assert_close_to_range(actual, expected, rel=1e-5 if source is model else 0.02)
