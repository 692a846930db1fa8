"""LeakyRelu on int8 is its 256-entry table (CAST, ADD, GATHER: ``edgekit.core.lut``), not TFLite's LEAKY_RELU.

XNNPACK's int8 LEAKY_RELU multiplies with 8 fractional bits (0.1875 for a multiplier of 0.18865), so it rounds
some negative levels one step off the QDQ model's ``Q(LeakyRelu(DQ(x)))``; through NanoDet-Plus' 71 LeakyReLUs
that put the int8 TFLite's scores at a cosine of 0.93 to its QDQ model (0.996 with the table). The table gives
onnxruntime's answer for every input level.
"""

from __future__ import annotations

import numpy as np
import pytest
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import helper
from test_ops_int8 import output_steps
from tflite_helpers import (
    convert_proto,
    edgekit_qdq,
    make_model,
    op_types,
    random_feeds,
    run_onnx,
    run_tflite_isolated,
)

R = np.random.default_rng(11)


def conv_leaky_relu(alpha: float):
    """conv -> LeakyRelu as the model output (its int8 levels are what the test compares)."""
    inits = {
        "w": (R.standard_normal((16, 3, 3, 3)) * 0.7).astype(np.float32),
        "b": (R.standard_normal(16) * 0.5).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["a"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("LeakyRelu", ["a"], ["y"], alpha=alpha, name="leaky"),
    ]
    return make_model(nodes, {"x": (1, 3, 16, 16)}, ["y"], inits, 17)


@pytest.mark.parametrize("alpha", [0.1, 0.01, 0.2])
def test_int8_leaky_relu_is_a_table_and_equals_the_qdq_model(alpha: float) -> None:
    model = conv_leaky_relu(alpha)
    calib = [random_feeds(model, seed, -3, 3) for seed in range(8)]
    qdq = edgekit_qdq(model, calib)
    result = convert_proto(qdq, ConvertOptions(io_dtype="float32", target="test"))
    assert result.float_ops == [], f"ops left in float: {result.float_ops}"
    counts = op_types(result)
    assert counts.get("LEAKY_RELU", 0) == 0 and counts.get("GATHER") == 1, counts
    (step,) = output_steps(qdq)
    for seed in (100, 101, 102):
        feeds = random_feeds(model, seed, -3, 3)
        (expected,) = run_onnx(qdq, feeds)
        (actual,) = run_tflite_isolated(result, feeds)
        # Every level as onnxruntime computes it (the conv before it is exact in int8 here: within float
        # rounding of a half step at most, which a handful of values may show).
        off = np.abs(actual - expected) > step * 0.5
        assert off.mean() <= 0.002, f"{off.mean():.2%} of the outputs differ from the QDQ model's"
