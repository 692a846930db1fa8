"""A tensor that is zero on every calibration sample (a residual branch whose last layer has all-zero weights:
timm's zero-initialised MobileViT / ByobNet blocks, a pruned or dead layer) gets a usable scale. Its range is
empty, and a scale made from it (1e-8 / 255) puts the producing convolution's requantization multiplier
(input scale x weight scale / output scale) near 1e9: XNNPACK refuses such a multiplier ([2^-32, 256)) and LiteRT
then aborts with a double free while applying its delegate. An empty range gets scale 1.0, as onnxruntime's
quantizer gives it (``compute_scale_zp``: ``scale = 1.0`` where ``rmax == rmin``) and as edgekit's all-zero
weights already get: zero is still exact (the zero point), and every multiplier stays small."""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.quantize.calibrate import params_for_range
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import helper, numpy_helper
from tflite_helpers import convert_proto, edgekit_qdq, make_model, random_feeds, run_onnx, run_tflite_isolated

R = np.random.default_rng(3)


def _zero_branch_model() -> onnx.ModelProto:
    """x -> Conv a; a -> Conv with all-zero weights and bias (the zero-initialised last layer) -> b; y = a + b."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], name="a", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="r"),
        helper.make_node("Conv", ["r", "w0", "b0"], ["z"], name="zero_conv"),
        helper.make_node("Add", ["a", "z"], ["y"], name="y"),
    ]
    inits = {
        "w1": (R.standard_normal((8, 3, 3, 3)) * 0.5).astype(np.float32),
        "b1": (R.standard_normal(8) * 0.1).astype(np.float32),
        "w0": np.zeros((8, 8, 1, 1), np.float32),
        "b0": np.zeros(8, np.float32),
    }
    return make_model(nodes, {"x": (1, 3, 8, 8)}, ["y"], inits)


def test_an_empty_range_gets_scale_one_with_zero_exact() -> None:
    for dtype, zero_point in (("int8", -128), ("uint8", 0), ("int16", 0)):
        p = params_for_range(0.0, 0.0, dtype)
        assert (p.scale, p.zero_point) == (1.0, zero_point)
    # a range that is not empty keeps its own scale, however small
    assert params_for_range(0.0, 1e-3, "int8").scale == np.float32(1e-3 / 255)


def test_a_branch_that_is_always_zero_runs_in_litert_with_xnnpack() -> None:
    model = _zero_branch_model()
    calib = [random_feeds(model, seed, -3.0, 3.0) for seed in range(8)]
    qdq = edgekit_qdq(model, calib)
    scales = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    (q,) = [n for n in qdq.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "z"]
    assert float(scales[q.input[1]]) == 1.0
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert result.float_ops == [], result.float_ops
    for seed in (100, 101):
        feeds = random_feeds(model, seed, -3.0, 3.0)
        (actual,), (expected,) = run_tflite_isolated(result, feeds), run_onnx(qdq, feeds)
        np.testing.assert_allclose(actual, expected, atol=np.ptp(expected) / 127)
