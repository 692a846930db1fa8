"""Static int8 / int16x8 convolution kernels are rounded so that each kernel's taps keep their sum (its response to
smooth input) within half a step (``qdq.round_kernels``), as PP-OCRv4 rec's stem needs: a depthwise 3x3 whose
kernels are near zero-sum lost most of its response to flat regions with nearest rounding (the recogniser's decoded
agreement with fp32, weights alone: 44 % -> 84 % on rendered text lines).

Checked against onnxruntime running the QDQ model and the fp32 model on smooth inputs.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.core.model import load_proto
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from onnx import helper, numpy_helper

C = 8


def near_zero_sum_kernels() -> np.ndarray:
    """Edge-detector-like 3x3 kernels: taps up to ~0.45, each kernel's sum about 1 % of its largest tap."""
    rng = np.random.default_rng(5)
    w = rng.uniform(-0.45, 0.45, (C, 1, 3, 3))
    w -= w.mean(axis=(2, 3), keepdims=True)  # zero-sum
    absmax = np.abs(w).max(axis=(1, 2, 3))
    w[:, 0, 1, 1] += 0.011 * absmax  # a small smooth-input response
    return w.astype(np.float32)


def depthwise_model(w: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=C, pads=[1, 1, 1, 1])],
        "dw",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, C, 12, 12])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, C, 12, 12])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def smooth_inputs(n: int, seed: int) -> list[np.ndarray]:
    """Flat patches (a level per channel) with a little texture: what a stem sees on a text line's background."""
    rng = np.random.default_rng(seed)
    return [
        (rng.uniform(2.0, 4.0, (1, C, 1, 1)) + rng.normal(0, 0.05, (1, C, 12, 12))).astype(np.float32)
        for _ in range(n)
    ]


def _weight_initializer(proto: onnx.ModelProto) -> onnx.TensorProto:
    return next(
        t for t in proto.graph.initializer if t.data_type == onnx.TensorProto.INT8 and len(t.dims) == 4
    )


def with_weight(proto: onnx.ModelProto, q: np.ndarray) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    tensor = _weight_initializer(out)
    tensor.CopyFrom(numpy_helper.from_array(q, tensor.name))
    return out


def dequantized_weight(proto: onnx.ModelProto) -> tuple[np.ndarray, np.ndarray]:
    init = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    name = _weight_initializer(proto).name
    dq = next(n for n in proto.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == name)
    q, scale = init[name].astype(np.float64), init[dq.input[1]].astype(np.float64)
    return q, scale.reshape(-1, 1, 1, 1)


@pytest.mark.parametrize("precision", ["int8", "int16x8"])
def test_kernel_sums_survive_and_flat_regions_keep_their_response(precision):
    w = near_zero_sum_kernels()
    source = depthwise_model(w)
    calib = [SimpleNamespace(inputs={"x": x}, label=None) for x in smooth_inputs(8, 0)]
    proto = quantize(load_proto(source), calib, QuantizeOptions(samples=8, precision=precision)).proto()
    q, scale = dequantized_weight(proto)
    sums, exact = (q * scale).sum(axis=(1, 2, 3)), w.astype(np.float64).sum(axis=(1, 2, 3))
    nearest = np.round(w / scale) * scale
    # The kernels are such that nearest rounding drifts (the test would pass without the rule otherwise) ...
    assert np.max(np.abs(nearest.sum(axis=(1, 2, 3)) - exact) / scale.reshape(-1)) > 0.5
    # ... and the quantizer's kernels keep each sum within half a step, each tap within one step.
    assert np.all(np.abs(sums - exact) <= 0.5 * scale.reshape(-1) + 1e-12)
    assert np.all(np.abs(q * scale - w) <= scale + 1e-12)
    # The QDQ model in onnxruntime against the same QDQ model with nearest-rounded kernels (same scales): on flat
    # regions its response is closer to fp32's.
    fp32 = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    qdq = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    rounded = ort.InferenceSession(
        with_weight(proto, np.round(w / scale).astype(np.int8)).SerializeToString(),
        providers=["CPUExecutionProvider"],
    )
    errors = {"qdq": [], "nearest": []}
    for x in smooth_inputs(4, 1):
        ref = fp32.run(None, {"x": x})[0][..., 2:-2, 2:-2]  # the interior: flat input, no padding
        errors["qdq"].append(np.abs(qdq.run(None, {"x": x})[0][..., 2:-2, 2:-2] - ref).mean())
        errors["nearest"].append(np.abs(rounded.run(None, {"x": x})[0][..., 2:-2, 2:-2] - ref).mean())
    assert np.mean(errors["qdq"]) < 0.7 * np.mean(errors["nearest"]), errors
