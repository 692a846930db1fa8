"""HardSwish outputs take the mse range under minmax (``rules.MSE_RANGE_OUTPUTS``), and a scalar affine of a
quantized tensor stays within the image of its input's grid (``QuantPlan.affine``).

PP-LCNetV3 (the real PP-OCRv3 / v5 recognisers) passes its Conv outputs' rare large values through HardSwish
(x above 3) and, in v5, through a learnable affine block ``HardSwish -> Mul(a) -> Add(b)``: minmax spent the
grid on them (one channel up to 162, the median channel below 6.4), and the int8 models decoded 0 / 48 and 2 / 48
text lines as fp32. Built here: the same shape in a small model (two Conv channels fire rarely and large),
quantized with and without the rule, both against onnxruntime running fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
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


def _model(tmp_path, head: bool = False) -> ir.Model:
    """x -> Conv 1x1 (8 -> 16) -> HardSwish -> Mul(0.7) -> Add(0.25) -> Conv 1x1 (16 -> 16) -> y (a learnable
    affine block between two convolutions). ``head``: the Add's output is the model output (no Conv after)."""
    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 0.5, (16, 8, 1, 1)).astype(np.float32)
    b1 = rng.normal(0.5, 0.2, 16).astype(np.float32)
    # two channels fire rarely and large (HardSwish passes 40 x - 100 only where x > 2.4: 1 % of the values, up
    # to ~80 where the others stay within ~5), as PP-LCNetV3's outlier channels
    w1[:2] = 0.0
    w1[0, 0, 0, 0] = w1[1, 1, 0, 0] = 40.0
    b1[:2] = -100.0
    w2 = rng.normal(0, 0.3, (16, 16, 1, 1)).astype(np.float32)
    b2 = rng.normal(0, 0.1, 16).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    inits += [numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((0.7, "a"), (0.25, "b"))]
    last = "y" if head else "lab"
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1"),
        helper.make_node("HardSwish", ["c1"], ["h1"], name="hswish"),
        helper.make_node("Mul", ["a", "h1"], ["m1"], name="lab_mul"),
        helper.make_node("Add", ["m1", "b"], [last], name="lab_add"),
    ]
    if not head:
        nodes.append(helper.make_node("Conv", ["lab", "w2", "b2"], ["y"], name="conv2"))
    graph = helper.make_graph(
        nodes,
        "tails",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
        inits,
    )
    path = tmp_path / ("head.onnx" if head else "model.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return load_model(path)


def _samples(count: int, seed: int) -> list[Sample]:
    rng = np.random.default_rng(seed)
    return [Sample({"x": rng.normal(0, 1.0, (1, 8, 12, 12)).astype(np.float32)}) for _ in range(count)]


def _run(proto: onnx.ModelProto, samples) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # DQ -> float op -> Q
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


def test_plan_names_the_scalar_affines(tmp_path):
    plan = make_plan(_model(tmp_path))
    assert plan.affine == {"m1": ("h1", 0.699999988079071, 0.0), "lab": ("m1", 1.0, 0.25)}


def test_mse_tails_and_affine_images_beat_minmax_against_fp32(tmp_path, monkeypatch):
    model = _model(tmp_path)
    calib, evaluation = _samples(16, 1), _samples(8, 2)
    ref = _run(ir.to_proto(model), evaluation)
    options = QuantizeOptions(activations="int8")

    clipped = quantize(model, calib, options).proto()
    hlo, hhi = _grid(clipped, "h1")
    for tensor, (a, b) in (("m1", (0.7, 0.0)), ("lab", (0.7, 0.25))):
        lo, hi = _grid(clipped, tensor)
        step = (hi - lo) / 255
        # the affine's grid stops at the image of the HardSwish's (its own mse range is not wider)
        assert hi <= a * hhi + b + step, (tensor, hi, a * hhi + b)

    monkeypatch.setattr(rules, "MSE_RANGE_OUTPUTS", frozenset())
    observed = quantize(model, calib, options).proto()
    assert _grid(observed, "h1")[1] > 1.1 * hhi  # minmax: the rare large values set the grid

    with_rule, without = _sqnr(ref, _run(clipped, evaluation)), _sqnr(ref, _run(observed, evaluation))
    assert with_rule >= without + 3.0, (with_rule, without)  # 23.9 against 18.8 dB when written


def test_a_tail_at_the_model_output_keeps_its_whole_range(tmp_path, monkeypatch):
    """A HardSwish chain whose end is the model output is the integer part's boundary: not clipped (an
    output's extremes are what a reader of the scores looks at)."""
    model = _model(tmp_path, head=True)
    calib = _samples(16, 1)
    options = QuantizeOptions(activations="int8")
    ruled = quantize(model, calib, options).proto()
    monkeypatch.setattr(rules, "MSE_RANGE_OUTPUTS", frozenset())
    plain = quantize(model, calib, options).proto()
    for tensor in ("h1", "m1"):
        assert _grid(ruled, tensor) == _grid(plain, tensor)
