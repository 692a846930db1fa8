"""The int8 LeakyRelu is a table lookup (CAST, ADD, GATHER: ``edgekit.core.lut``) that gives the QDQ model's value
at every input level; TFLite's LEAKY_RELU kernels put some levels one step off (XNNPACK multiplies with 8 fraction
bits, the builtin kernel rounds negative values down), which RetinaFace-MobileNet0.25's 14 unskipped blocks
amplified to a cosine of 0.77 between its int8 TFLite and its QDQ model."""

from __future__ import annotations

import numpy as np
import pytest
from edgekit.targets.tflite import quantized
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import helper
from tflite_helpers import convert_proto, make_model, op_types, run_onnx, run_tflite_isolated

#: RetinaFace's first LeakyRelu (int8): its input and output scales and zero points, and two others.
PARAMS = [
    ((0.050819315, -11), (0.029872099, -108), 0.1),
    ((0.02, 5), (0.015, -90), 0.1),
    ((0.1, 40), (0.07, -100), 0.2),
]


def qdq_leaky_relu(x_q: tuple[float, int], y_q: tuple[float, int], alpha: float):
    inits = {
        "xs": np.array(x_q[0], np.float32),
        "xz": np.array(x_q[1], np.int8),
        "ys": np.array(y_q[0], np.float32),
        "yz": np.array(y_q[1], np.int8),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("LeakyRelu", ["xd"], ["f"], alpha=alpha, name="leaky"),
        helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    return make_model(nodes, {"x": (1, 256)}, ["y"], inits, 19)


def every_level(x_q: tuple[float, int]) -> dict[str, np.ndarray]:
    levels = np.arange(-128, 128, dtype=np.int32)
    return {"x": ((levels - x_q[1]).astype(np.float32) * np.float32(x_q[0]))[None]}


@pytest.mark.parametrize(("x_q", "y_q", "alpha"), PARAMS)
def test_int8_leaky_relu_equals_the_qdq_model_at_every_level(x_q, y_q, alpha) -> None:
    model = qdq_leaky_relu(x_q, y_q, alpha)
    result = convert_proto(model, ConvertOptions(target="test"))
    counts = op_types(result)
    assert counts.get("GATHER") == 1 and "LEAKY_RELU" not in counts, counts
    feeds = every_level(x_q)
    (expected,) = run_onnx(model, feeds)
    (actual,) = run_tflite_isolated(result, feeds)
    np.testing.assert_array_equal(actual, expected)


def test_the_leaky_relu_kernel_is_what_the_table_replaces(monkeypatch) -> None:
    """Without the table the converter writes LEAKY_RELU, whose answer is some levels off at RetinaFace's scales."""
    monkeypatch.setattr(
        quantized, "_TABULATED", {k: v for k, v in quantized._TABULATED.items() if k != "LEAKY_RELU"}
    )
    x_q, y_q, alpha = PARAMS[0]
    model = qdq_leaky_relu(x_q, y_q, alpha)
    result = convert_proto(model, ConvertOptions(target="test"))
    assert op_types(result).get("LEAKY_RELU") == 1
    feeds = every_level(x_q)
    (expected,) = run_onnx(model, feeds)
    (actual,) = run_tflite_isolated(result, feeds)
    off = np.abs(actual - expected) > y_q[0] / 2
    assert int(off.sum()) > 0, (
        "LiteRT's LEAKY_RELU now rounds like onnxruntime: the table may go"
    )  # 28 of 256 here
