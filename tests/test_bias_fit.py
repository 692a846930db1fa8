"""A bias too large for int32 at input scale x weight scale is never clipped: the weight scale of its channel is
raised just enough, the QDQ model stays close to fp32, and the report names the layer.

The model is what makes detectors overflow: a tiny input range (a small scale) and channels whose weights are
(almost) zero (dead channels, denormal weights) with an ordinary bias.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from edgekit.core.model import load_proto
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.quantize.qdq import fit_bias_scales, quantize_bias, warnings_once
from onnx import helper, numpy_helper
from ort_reference import run_node_by_node

SHAPE = (1, 4, 6, 6)


def huge_bias_model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((6, 4, 3, 3)) * 0.3).astype(np.float32)
    w[0] = 1e-12  # a dead channel: weight scale ~1e-14
    w[3] = 2e-38  # denormal weights, as PaddlePaddle exports contain
    b = rng.standard_normal(6).astype(np.float32)
    b[0], b[3] = 2.5, -4.0
    gw = (rng.standard_normal((6 * 4 * 4, 5)) * 0.05).astype(np.float32)
    gw[:, 2] = 1e-13
    gb = np.array([0.1, -0.2, 7.0, 0.3, 0.0], np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
            helper.make_node("Flatten", ["c"], ["f"], name="flatten"),
            helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], name="fc"),
        ],
        "huge_bias",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(a, n) for n, a in (("w", w), ("b", b), ("gw", gw), ("gb", gb))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def tiny_inputs(n: int, seed: int) -> np.ndarray:
    """Inputs of range ~1e-4: an input scale of ~1e-6."""
    return (np.random.default_rng(seed).uniform(-1e-4, 1e-4, (n, *SHAPE))).astype(np.float32)


class Sample:
    def __init__(self, x: np.ndarray) -> None:
        self.inputs, self.label = {"x": x}, None


def test_fit_raises_only_the_channels_that_overflow():
    bias = np.array([1.0, 5.0, -3.0])
    scales = np.array([0.01, 1e-12, 1e-13], np.float32)
    fitted, raised = fit_bias_scales(bias, 1e-3, scales)
    assert raised.tolist() == [False, True, True]
    assert fitted[0] == scales[0] and np.all(fitted[1:] > scales[1:])
    q, _ = quantize_bias(bias, 1e-3, fitted)  # fits: no error, no clipping
    levels = bias / (1e-3 * fitted.astype(np.float64))
    assert np.all(np.abs(levels) < 2**31 - 1) and np.all(np.abs(levels[1:]) > 0.9 * 2**31)
    np.testing.assert_allclose(q * (1e-3 * fitted.astype(np.float64)), bias, rtol=1e-6)
    with pytest.raises(AssertionError):
        quantize_bias(bias, 1e-3, scales)  # unfitted scales are a bug, never clipped


def test_a_search_says_each_layers_bias_note_once():
    """Inside ``warnings_once`` (the accuracy search: one quantization per candidate) a layer's note is given
    once; outside it every quantization gives it."""
    source, calib = huge_bias_model(), [Sample(x) for x in tiny_inputs(4, 0)]
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append
    logging.getLogger("edgekit").addHandler(handler)

    def notes() -> int:
        quantize(load_proto(source), calib, QuantizeOptions(samples=4))
        return sum("raised" in r.getMessage() for r in records)

    try:
        with warnings_once():
            assert [notes(), notes(), notes()] == [2, 2, 2]  # conv and fc, said by the first only
        assert notes() == 4
    finally:
        logging.getLogger("edgekit").removeHandler(handler)


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_huge_bias_is_not_clipped_and_the_qdq_model_matches_fp32(activations):
    source = huge_bias_model()
    calib = [Sample(x) for x in tiny_inputs(16, 0)]
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # the CLI may have routed the library's warnings away from the root logger
    logging.getLogger("edgekit").addHandler(handler)
    try:
        q = quantize(load_proto(source), calib, QuantizeOptions(samples=16, activations=activations))
    finally:
        logging.getLogger("edgekit").removeHandler(handler)
    raised = {r.node: r for r in q.raised_weight_scales}
    assert set(raised) == {"conv", "fc"}
    assert raised["conv"].channels == [0, 3] and raised["fc"].channels == [2]
    assert any("'conv'" in r.getMessage() and "raised" in r.getMessage() for r in records)
    proto = q.proto()
    # Every bias the QDQ model computes with equals the float bias to within its own quantization step.
    init = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    producers = {o: n for n in proto.graph.node for o in n.output}
    for name, bias_name in (("conv", "b"), ("fc", "gb")):
        node = next(n for n in proto.graph.node if n.name == name)
        dq = producers[node.input[2]]
        qb, scale = init[dq.input[0]].astype(np.float64), init[dq.input[1]].astype(np.float64)
        assert np.abs(qb).max() < 2**31 - 1
        np.testing.assert_allclose(
            qb * scale,
            numpy_helper.to_array(next(t for t in source.graph.initializer if t.name == bias_name)),
            atol=scale.max(),
        )
    for x in tiny_inputs(4, 9):
        (expected,) = run_node_by_node(source, {"x": x})
        (actual,) = run_node_by_node(proto, {"x": x})
        cosine = float(
            np.dot(actual.ravel(), expected.ravel()) / np.linalg.norm(actual) / np.linalg.norm(expected)
        )
        assert cosine > 0.9999, cosine
        assert np.abs(actual - expected).max() <= 0.02 * np.ptp(expected)


def test_the_report_and_the_console_name_the_layer(tmp_path):
    model, calib = tmp_path / "m.onnx", tmp_path / "calib.npy"
    onnx.save(huge_bias_model(), model)
    np.save(calib, tiny_inputs(8, 1).reshape(8, *SHAPE[1:]))
    report = tmp_path / "r.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgekit.cli.main",
            "quantize",
            model,
            "--calib",
            calib,
            "-o",
            tmp_path / "q.onnx",
        ]
        + ["--report", report],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert run.returncode == 0, run.stderr
    assert "were clipped" not in run.stderr + run.stdout
    assert "'conv'" in run.stderr and "'fc'" in run.stderr
    entries = json.loads(report.read_text())["quantization"]["raised_weight_scales"]
    assert {(e["node"], e["op_type"], tuple(e["channels"])) for e in entries} == {
        ("conv", "Conv", (0, 3)),
        ("fc", "Gemm", (2,)),
    }


def test_denormal_weights_under_a_tiny_input_scale_keep_a_normal_bias_scale():
    """PP-OCRv4 rec in int16x8: a channel of denormal weights under an int16 input scale of ~3e-13 made the
    bias scale (input x weight, float32) round to 0, and the bias could not be quantized at all."""
    weight_scales = np.array([1e-37, 0.02], np.float32)  # a dead channel of denormal weights, a live one
    bias = np.array([np.float32(1e-41), -0.25], np.float64)  # its bias denormal too
    input_scale = 1e-8 / 32767.0
    scales, raised = fit_bias_scales(bias, input_scale, weight_scales)
    assert raised.tolist() == [True, True]  # the live one overflows int32 at this tiny input scale too
    q, bias_scales = quantize_bias(bias, input_scale, scales)
    assert np.all(bias_scales >= np.finfo(np.float32).tiny)
    np.testing.assert_allclose(q.astype(np.float64) * bias_scales, bias, rtol=1e-6, atol=1e-30)
    untouched, raised_normal = fit_bias_scales(bias, 0.05, np.array([0.01, 0.02], np.float32))
    assert not raised_normal.any() and untouched.tolist() == np.float32([0.01, 0.02]).tolist()


def test_the_search_on_its_process_pool_says_each_layers_note_once(tmp_path):
    """The accuracy search quantizes every candidate in spawned pool workers: the notes are the lead process's,
    each layer's once (the workers used to say them again for every candidate)."""
    model, calib = tmp_path / "m.onnx", tmp_path / "calib.npy"
    onnx.save(huge_bias_model(), model)
    np.save(calib, tiny_inputs(8, 1).reshape(8, *SHAPE[1:]))
    run = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "quantize", model, "--calib", calib, "-o", tmp_path / "q.onnx",
         "--min-cosine", "0.9999999", "--accuracy-data", calib, "--executor", "process"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert run.returncode in (0, 2), run.stderr
    out = run.stdout + run.stderr
    assert "Traceback" not in out
    notes = [line for line in out.splitlines() if "raised to fit it" in line]
    assert sorted(n.split("'")[1] for n in notes) == ["conv", "fc"], out
