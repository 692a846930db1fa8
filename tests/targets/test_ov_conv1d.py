"""The intel-vpu INT8 IR of a grouped 1-D convolution (Wav2Vec2 / HuBERT / WavLM's positional convolution) computes
its QDQ model: OpenVINO 2026.4's CPU plugin ran a QDQ Conv over [1, 64, L] with ``group=4`` and 16 taps at cosine
0.01 to onnxruntime; edgekit hands it the same convolution over [1, 64, L, 1] (``edgekit.core.ov_conv1d``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest
from edgekit.core.model import load_proto
from edgekit.core.ov_conv1d import grouped_conv1d_as_2d
from edgekit.targets.base import PackageOptions, get_target
from onnx import TensorProto, helper, numpy_helper


def positional_conv(group: int = 4, taps: int = 16, channels: int = 64, length: int = 50) -> onnx.ModelProto:
    """QDQ (uint8 activations, per-channel int8 weights) DQ -> Conv1d(group, even kernel, pads taps/2) -> Q/DQ,
    then the Slice of the extra step and a GELU-free Mul, as the positional convolution is exported."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.1, (channels, channels // group, taps)).astype(np.float32)
    scale = (np.abs(w).reshape(channels, -1).max(1) / 127).astype(np.float32)
    q = np.clip(np.round(w / scale[:, None, None]), -127, 127).astype(np.int8)
    inits = [
        numpy_helper.from_array(q, "w_q"),
        numpy_helper.from_array(scale, "w_scale"),
        numpy_helper.from_array(np.float32(0.02), "s"),
        numpy_helper.from_array(np.uint8(128), "z"),
        numpy_helper.from_array(np.zeros(channels, np.int32), "b_q"),
        numpy_helper.from_array((scale * 0.02).astype(np.float32), "b_scale"),
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([length], np.int64), "ends"),
        numpy_helper.from_array(np.array([2], np.int64), "axes"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale"], ["b"], axis=0),
        helper.make_node(
            "Conv", ["x_dq", "w", "b"], ["c"], group=group, kernel_shape=[taps], pads=[taps // 2] * 2
        ),
        helper.make_node("QuantizeLinear", ["c", "s", "z"], ["c_q"]),
        helper.make_node("DequantizeLinear", ["c_q", "s", "z"], ["c_dq"]),
        helper.make_node("Slice", ["c_dq", "starts", "ends", "axes"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "positional_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, length])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, length])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def exact(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The QDQ model's semantics: onnxruntime without graph optimisations (dequantize, float Conv, quantize)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options).run(None, {"x": x})[0]


def samples(count: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.normal(0, 0.7, (1, 64, 50)).astype(np.float32) for _ in range(count)]


def test_the_rewrite_holds_the_same_values() -> None:
    model = positional_conv()
    rewritten = grouped_conv1d_as_2d(model)
    assert [n.op_type for n in rewritten.graph.node].count("Unsqueeze") == 1
    assert "w_q" not in {t.name for t in rewritten.graph.initializer}  # the 3-D weight went with its reader
    for x in samples():
        np.testing.assert_array_equal(exact(rewritten, x), exact(model, x))
    plain = positional_conv(group=1)
    assert grouped_conv1d_as_2d(plain) is plain  # group 1: OpenVINO runs it right, left alone


@pytest.mark.parametrize("group", [4, 16])
def test_int8_ir_of_a_grouped_conv1d_computes_its_qdq_model(tmp_path: Path, group: int) -> None:
    model = positional_conv(group=group)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    bundle = get_target("intel-vpu").package(load_proto(copy), tmp_path / "b", PackageOptions())
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(str(bundle / "model.xml")), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    for x in samples():
        want = exact(model, x)
        got = compiled({"x": x})[0]
        cosine = float(np.dot(want.ravel(), got.ravel()) / np.linalg.norm(want) / np.linalg.norm(got))
        assert cosine > 0.9999, cosine  # 0.01 before (group 4), OpenVINO's grouped 1-D int8 kernel
        assert np.abs(want - got).max() <= 0.02 + 1e-6  # within one output step (0.02): kernel rounding
