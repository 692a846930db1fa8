"""Convolutions whose weight is computed at run time (``edgekit.core.computed_weights``): a Siamese tracker's
depthwise cross-correlation (template features as the kernels, two graph inputs) and a StyleGAN2-style modulated
convolution (constant weight x per-sample style, demodulated, with a bias, pads and stride 2), each deployed
through the CLI and verified against onnxruntime on the source file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli_in_process import deploy_verified
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(16)


def xcorr_model() -> onnx.ModelProto:
    """pysot's ``xcorr_depthwise``: z [1, 8, 4, 4] reshaped to kernels [8, 1, 4, 4], Conv(x [1, 8, 12, 12],
    group 8) -> [1, 8, 9, 9], then a 1x1 Conv (constant weight) and a Relu."""
    head = numpy_helper.from_array(RNG.standard_normal((4, 8, 1, 1)).astype(np.float32), "head")
    nodes = [
        helper.make_node("Reshape", ["z", "kshape"], ["kernel"]),
        helper.make_node("Conv", ["x", "kernel"], ["corr"], group=8),
        helper.make_node("Conv", ["corr", "head"], ["h"]),
        helper.make_node("Relu", ["h"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "xcorr",
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8, 4, 4]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 9, 9])],
        [numpy_helper.from_array(np.array([8, 1, 4, 4], np.int64), "kshape"), head],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def modconv_model() -> onnx.ModelProto:
    """GFPGAN's ModulatedConv2d at batch 1: weight [6, 4, 3, 3] x style [1, 4] per input channel, demodulated
    (rsqrt of the sum of squares per output channel), Conv(x, weight, bias, pads 1, stride 2)."""
    w = numpy_helper.from_array((RNG.standard_normal((1, 6, 4, 3, 3)) / 6).astype(np.float32), "w")
    bias = numpy_helper.from_array(RNG.standard_normal(6).astype(np.float32), "bias")
    consts = [
        w, bias,
        numpy_helper.from_array(np.array([1, 1, 4, 1, 1], np.int64), "sshape"),
        numpy_helper.from_array(np.array([2, 3, 4], np.int64), "axes"),
        numpy_helper.from_array(np.array([1, 6, 1, 1, 1], np.int64), "dshape"),
        numpy_helper.from_array(np.array([6, 4, 3, 3], np.int64), "wshape"),
        numpy_helper.from_array(np.array(1e-8, np.float32), "eps"),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Reshape", ["style", "sshape"], ["s"]),
        helper.make_node("Mul", ["w", "s"], ["ws"]),
        helper.make_node("Mul", ["ws", "ws"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["ss"], keepdims=0),
        helper.make_node("Add", ["ss", "eps"], ["sse"]),
        helper.make_node("Sqrt", ["sse"], ["norm"]),
        helper.make_node("Reshape", ["norm", "dshape"], ["normr"]),
        helper.make_node("Div", ["ws", "normr"], ["wd"]),
        helper.make_node("Reshape", ["wd", "wshape"], ["weight"]),
        helper.make_node("Conv", ["x", "weight", "bias"], ["y"], pads=[1, 1, 1, 1], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes, "modconv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10]),
         helper.make_tensor_value_info("style", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 5, 5])], consts,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


MODELS = {
    "xcorr": (xcorr_model, {"z": (8, 4, 4), "x": (8, 12, 12)}),
    "modconv": (modconv_model, {"x": (4, 10, 10), "style": (4,)}),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize(
    ("target", "precision"), [("arm-cpu", "fp32"), ("arm-cpu", "int8"), ("intel-vpu", "fp16")]
)
def test_computed_conv_weight_deploys(tmp_path: Path, capsys, name: str, target: str, precision: str) -> None:
    """Before: "Conv weights must be a constant (it is computed at run time)" on the TFLite targets (the Siamese
    heads, GFPGAN, CondConv of probe round 16g). Now patches + MatMul: the fp32 .tflite within 1e-4 of
    onnxruntime's range, the int8 .tflite and the FP16 IR pass their verification."""
    build, shapes = MODELS[name]
    model, calib = tmp_path / f"{name}.onnx", tmp_path / "calib.npz"
    onnx.save(build(), model)
    rng = np.random.default_rng(3)
    np.savez(calib, **{k: rng.standard_normal((16, 1, *s)).astype(np.float32) for k, s in shapes.items()})
    deploy_verified(capsys, model, calib, target, precision, tmp_path / "out")


def test_a_weight_computed_from_constants_keeps_its_conv() -> None:
    """A QDQ model's Conv reads DequantizeLinear(int8 constants) and a float16 model's a Cast of a constant: not
    a weight computed at run time. Each stays a Conv (an integer kernel in the int8 IR and .tflite), while the
    cross-correlation's weight, a graph input's features, is written out."""
    import onnx_ir as ir
    from edgekit.core.computed_weights import ComputedConvWeightPass
    from onnx_ir.passes.common import ShapeInferencePass

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
            helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
            helper.make_node("Cast", ["w16"], ["w2"], to=TensorProto.FLOAT),
            helper.make_node("Conv", ["y", "w2"], ["z"]),
        ],
        "qdq_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2, 8, 8])],
        [
            numpy_helper.from_array(rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8), "wq"),
            numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws"),
            numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
            numpy_helper.from_array(rng.normal(size=(2, 4, 1, 1)).astype(np.float16), "w16"),
        ],
    )
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ShapeInferencePass()(model)
    assert not ComputedConvWeightPass()(model).modified
    assert [n.op_type for n in model.graph].count("Conv") == 2
    xcorr = ir.from_proto(xcorr_model())
    ShapeInferencePass()(xcorr)
    assert ComputedConvWeightPass()(xcorr).modified  # the template's features are the weight
