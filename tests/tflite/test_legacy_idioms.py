"""The ONNX Model Zoo's legacy idioms (edgekit.core.legacy), converted to fp32 TFLite and run in LiteRT against
onnxruntime on the original file (or the computation the file means where onnxruntime refuses it).

Each graph is written as the old converters wrote them: IR version 3, initializers also listed as graph inputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core.errors import ModelError
from edgekit.core.model import load_proto
from onnx import TensorProto, numpy_helper
from onnx import helper as oh
from tflite_helpers import assert_close_to_range, convert_proto, run_onnx, run_tflite

RNG = np.random.default_rng(9)
C = 4


def legacy_model(nodes, inits: dict[str, np.ndarray], opset: int, x_shape=(1, C, 5, 6)) -> onnx.ModelProto:
    """An IR-3 model with input ``x`` and output ``y``, its initializers also graph inputs."""
    tensors = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in inits.items()]
    inputs = [oh.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inputs += [oh.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in tensors]
    graph = oh.make_graph(
        nodes, "legacy", inputs, [oh.make_tensor_value_info("y", TensorProto.FLOAT, None)], tensors
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)], ir_version=3)


def conv_inits() -> dict[str, np.ndarray]:
    return {"w": RNG.normal(0, 0.5, (3, C, 3, 3)), "b": RNG.normal(0, 0.1, 3)}


def bn_params(*shape: int) -> dict[str, np.ndarray]:
    return {
        "scale": RNG.uniform(0.5, 1.5, shape), "bias": RNG.normal(0, 0.2, shape),
        "mean": RNG.normal(0, 0.5, shape), "var": RNG.uniform(0.5, 2.0, shape),
    }  # fmt: skip


def feeds(seed: int, shape=(1, C, 5, 6)) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).uniform(0, 255, shape).astype(np.float32)}


def test_image_scaler_is_mul_and_add():
    """WinMLTools' Tiny YOLOv2 starts with ImageScaler (removed at opset 10: the version converter aborts on it)."""
    nodes = [
        oh.make_node("ImageScaler", ["x"], ["s"], scale=1 / 255, bias=[0.1, -0.2, 0.3, 0.0]),
        oh.make_node("Conv", ["s", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    model = legacy_model(nodes, conv_inits(), 8)
    result = convert_proto(load_proto(model))
    for seed in (0, 1):
        f = feeds(seed)
        (expected,) = run_onnx(model, f)  # onnxruntime still runs ImageScaler-1
        assert_close_to_range(run_tflite(result, f)[0], expected)


def test_batchnorm_spatial0_with_channel_parameters_is_per_channel():
    """MXNet's converter wrote spatial=0 on per-channel [C] parameters (the zoo's ArcFace): onnxruntime refuses
    the file and onnx's version converter refuses spatial=0. MXNet's BatchNorm is per channel: the reference is
    the same file with spatial=1 (onnx/models#156)."""
    params = bn_params(C)
    node = oh.make_node("BatchNormalization", ["x", *params], ["y"], spatial=0, epsilon=2e-5, momentum=0.9)
    model = legacy_model([node], params, 8)
    meant = legacy_model(
        [oh.make_node("BatchNormalization", ["x", *params], ["y"], spatial=1, epsilon=2e-5, momentum=0.9)],
        params,
        8,
    )
    result = convert_proto(load_proto(model))
    f = feeds(0)
    (expected,) = run_onnx(meant, f)
    assert_close_to_range(run_tflite(result, f)[0], expected)


def test_batchnorm_spatial0_per_activation_is_an_affine_map():
    """spatial=0 with [C, H, W] parameters (statistics per activation): onnxruntime runs it as such."""
    params = bn_params(C, 5, 6)
    node = oh.make_node("BatchNormalization", ["x", *params], ["y"], spatial=0, epsilon=1e-3)
    model = legacy_model([node], params, 7)
    result = convert_proto(load_proto(model))
    f = feeds(1)
    (expected,) = run_onnx(model, f)
    assert_close_to_range(run_tflite(result, f)[0], expected)


@pytest.mark.parametrize("opset", [3, 6])
def test_opset_below_7_broadcast_with_axis(opset):
    """Caffe2's opset 1-6 files: Add/Mul with broadcast=1 and axis=1 (a [C] bias on [N, C, H, W]). onnx's version
    converter alone unsqueezes B to [C, 1, 1, 1] and broadcasts to [C, C, H, W]. Reference: the legacy rule in
    numpy (B aligned with A's axes from ``axis``)."""
    b, m = RNG.normal(0, 1, C), RNG.normal(0, 1, (C, 5))
    nodes = [
        oh.make_node("Add", ["x", "b"], ["t"], broadcast=1, axis=1),
        oh.make_node("Mul", ["t", "m"], ["u"], broadcast=1, axis=1),
        oh.make_node("Relu", ["u"], ["y"], **({"consumed_inputs": [0]} if opset < 6 else {})),
    ]
    model = legacy_model(nodes, {"b": b, "m": m}, opset)
    result = convert_proto(load_proto(model))
    f = feeds(2)
    expected = np.maximum((f["x"] + b[None, :, None, None]) * m[None, :, :, None], 0)
    assert_close_to_range(run_tflite(result, f)[0], expected.astype(np.float32))


def test_spatial0_with_computed_statistics_is_a_typed_refusal():
    """Per-activation statistics that are not constants have no affine form: one ModelError line."""
    params = bn_params(C, 5, 6)
    del params["mean"]
    nodes = [
        oh.make_node("Relu", ["x"], ["r"]),
        oh.make_node("ReduceMean", ["r"], ["mean"], axes=[0], keepdims=0),
        oh.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], spatial=0),
    ]
    with pytest.raises(ModelError, match="spatial=0"):
        load_proto(legacy_model(nodes, params, 8))
