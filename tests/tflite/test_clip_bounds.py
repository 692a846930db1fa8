"""A Clip whose bound is computed at run time: torchaudio's ``AmplitudeToDB(top_db=80)`` clamps the decibels at
``x.max() - 80`` and torch exports it as ``Clip(x, ReduceMax(x) - 80)`` (openWakeWord 0.4.0's real
melspectrogram front end). Every TFLite case of that model was refused ("Clip bounds must be a constant"); the
bound is now the tensor MAXIMUM (MINIMUM for the upper one) reads."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from tflite_helpers import assert_close_to_range, convert_proto, edgekit_qdq, make_model, run_onnx, run_tflite


def _top_db(upper: bool) -> object:
    """x [1, 40, 32] (dB) -> Clip(x, max(x) - 80[, max(x) - 10])."""
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
        helper.make_node("Sub", ["peak", "range"], ["floor"]),
        helper.make_node("Sub", ["peak", "near"], ["ceiling"]),
        helper.make_node("Clip", ["x", "floor", "ceiling" if upper else ""], ["y"]),
    ]
    inits = {"range": np.array(80.0, np.float32), "near": np.array(10.0, np.float32)}
    return make_model(nodes, {"x": (1, 40, 32)}, ["y"], inits, opset=13)


@pytest.mark.parametrize("upper", [False, True], ids=["top_db", "both-bounds"])
def test_clip_with_run_time_bounds_matches_onnxruntime(upper: bool) -> None:
    model = _top_db(upper)
    rng = np.random.default_rng(4)
    feeds = [{"x": rng.uniform(-150, 20, (1, 40, 32)).astype(np.float32)} for _ in range(4)]
    result = convert_proto(model)
    for sample in feeds[:2]:
        (got,) = run_tflite(result, sample)
        (want,) = run_onnx(model, sample)
        assert (want == want.min()).mean() > 0.1  # the floor clamps a good part of the values
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    qdq = edgekit_qdq(model, feeds, float_output_heads=True)
    int8 = convert_proto(qdq)
    (got,) = run_tflite(int8, feeds[0])
    assert_close_to_range(got, run_onnx(qdq, feeds[0])[0], rel=0.02)
