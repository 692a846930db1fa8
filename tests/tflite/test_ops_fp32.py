"""Per op: the fp32 TFLite model matches onnxruntime on the ONNX model (<= 1e-5 of the output range)."""

from __future__ import annotations

import pytest
from op_cases import CASES, Case
from tflite_helpers import (
    assert_close_to_range,
    convert_proto,
    make_model,
    random_feeds,
    run_onnx,
    run_tflite,
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_fp32_matches_onnx(case: Case) -> None:
    model = make_model(case.nodes, case.inputs, case.outputs, case.inits, case.opset)
    result = convert_proto(model)
    for seed in (0, 1):
        feeds = random_feeds(model, seed, case.low, case.high)
        expected = run_onnx(model, feeds)
        actual = run_tflite(result, feeds)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_close_to_range(a, e, rel=1e-5)
