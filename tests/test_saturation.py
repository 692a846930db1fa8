"""Ranges cut where every reader saturates (``rules.SATURATING_INPUTS``, ``QuantPlan.saturation``).

A Conv output that only HardSwish reads needs no int8 levels below -3 (HardSwish is 0 there), one that only
HardSigmoid reads none outside [-beta/alpha, (1 - beta)/alpha]. PP-LCNetV3 (PP-OCRv4 det) has Conv outputs
spanning [-211, 184] in front of HardSwish: half the grid went to values HardSwish maps to 0. Built here: the
same shape in a small model, quantized with and without the rule, both against onnxruntime running fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from edgekit.core.model import load_model
from edgekit.quantize import rules
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.quantize.plan import make_plan
from onnx import TensorProto, helper, numpy_helper


@dataclass
class Sample:
    inputs: dict
    label: int | None = None


def _model(tmp_path, extra_reader: bool = False) -> ir.Model:
    """x -> Conv 1x1 (8 -> 16; four channels reach -150: a large negative bias) -> HardSwish -> Conv 1x1 -> y,
    and a HardSigmoid gate on a second Conv's output (spanning +-40) multiplying the result (an SE block's
    shape). ``extra_reader``: the first Conv's output is also added to the output (not only HardSwish reads it)."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.5, (16, 8, 1, 1)).astype(np.float32)
    b1 = np.full(16, 1.0, np.float32)
    b1[:4] = -150.0
    w2 = rng.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32)
    b2 = rng.normal(0, 0.1, 16).astype(np.float32)
    wg = rng.normal(0, 8.0, (16, 8, 1, 1)).astype(np.float32)
    inits = [
        numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (wg, "wg"))
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1"),
        helper.make_node("HardSwish", ["c1"], ["h1"], name="hswish"),
        helper.make_node("Conv", ["h1", "w2", "b2"], ["c2"], name="conv2"),
        helper.make_node("Conv", ["x", "wg"], ["g"], name="gate_conv"),
        helper.make_node("HardSigmoid", ["g"], ["gs"], name="gate", alpha=0.2, beta=0.5),
        helper.make_node("Mul", ["c2", "gs"], ["m" if extra_reader else "y"], name="mul"),
    ]
    if extra_reader:
        nodes.append(helper.make_node("Add", ["m", "c1"], ["y"], name="add"))
    graph = helper.make_graph(
        nodes,
        "saturation",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
        inits,
    )
    path = tmp_path / ("extra.onnx" if extra_reader else "model.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load_model(path)


def _samples(count: int, seed: int) -> list[Sample]:
    rng = np.random.default_rng(seed)
    return [Sample({"x": rng.normal(0, 1.0, (1, 8, 12, 12)).astype(np.float32)}) for _ in range(count)]


def _run(proto: onnx.ModelProto, samples) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )  # QDQ as DQ -> float op -> Q
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, s.inputs)[0] for s in samples])


def _sqnr(ref: np.ndarray, out: np.ndarray) -> float:
    return float(
        10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((ref - out).astype(np.float64) ** 2))
    )


def _grid(proto: onnx.ModelProto, tensor: str) -> tuple[float, float]:
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    q = next(n for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor)
    scale, zero = float(inits[q.input[1]]), int(inits[q.input[2]])
    return (-128 - zero) * scale, (127 - zero) * scale


def test_plan_names_tensors_only_saturating_ops_read(tmp_path):
    plan = make_plan(_model(tmp_path))
    assert plan.saturation == {"c1": (-3.0, np.inf), "g": pytest.approx((-2.5, 2.5))}
    # c1 also read by an Add: every value matters, no bound.
    assert "c1" not in make_plan(_model(tmp_path, extra_reader=True)).saturation


def test_cut_ranges_beat_the_observed_ones_against_fp32(tmp_path, monkeypatch):
    model = _model(tmp_path)
    calib, evaluation = _samples(16, 1), _samples(8, 2)
    ref = _run(ir.to_proto(model), evaluation)
    options = QuantizeOptions(activations="int8")

    cut = quantize(model, calib, options).proto()
    lo, hi = _grid(cut, "c1")
    assert -3.0 - 2 * (hi - lo) / 255 <= lo <= -3.0  # HardSwish's saturation point stays on the grid
    glo, ghi = _grid(cut, "g")
    assert glo <= -2.5 and ghi >= 2.5 and ghi - glo < 5.2  # HardSigmoid's two saturation points

    monkeypatch.setattr(rules, "SATURATING_INPUTS", {})
    observed = quantize(model, calib, options).proto()
    olo, _ = _grid(observed, "c1")
    assert olo < -100.0  # the observed range: the four channels near -150 took half the grid
    assert _grid(observed, "g")[1] > 20.0

    with_cut, without = _sqnr(ref, _run(cut, evaluation)), _sqnr(ref, _run(observed, evaluation))
    assert with_cut >= without + 6.0, (with_cut, without)
