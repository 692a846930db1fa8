"""HardSwish and HardSigmoid in every form exporters write them run as integer kernels in the int8 TFLite.

- the HardSwish op (opset 14+) -> the HardSwish table (CAST, ADD, GATHER: ``edgekit.core.lut``);
- torch below opset 14: ``x * HardSigmoid(x)`` (alpha 1/6) -> the same;
- PaddlePaddle: ``x * relu6(x + 3) / 6`` (Add, Clip, Mul, Div by a constant) -> the same;
- a HardSigmoid gate (squeeze-excitation) -> int8 MUL + ADD (TFLite has no HARD_SIGMOID);
- any Div by a constant -> int8 MUL by its reciprocal.

Each int8 TFLite model has no float op and matches the QDQ model it came from (LiteRT against onnxruntime),
and the rewritten fp32 graph matches the original.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core.model import load_proto
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import helper
from test_ops_int8 import assert_within_one_step, output_steps
from tflite_helpers import (
    convert_proto,
    edgekit_qdq,
    make_model,
    op_types,
    random_feeds,
    run_onnx,
    run_tflite_isolated,
)

R = np.random.default_rng(7)
X = {"x": (1, 3, 8, 8)}
CONV = {
    "w": (R.standard_normal((8, 3, 3, 3)) * 0.6).astype(np.float32),
    "b": R.standard_normal(8).astype(np.float32),
}


def conv(out: str = "a") -> onnx.NodeProto:
    return helper.make_node("Conv", ["x", "w", "b"], [out], pads=[1, 1, 1, 1], name="conv")


def scalar(value: float) -> np.ndarray:
    return np.array([value], np.float32)


def paddle_hardswish(divide: bool):
    nodes = [
        conv(),
        helper.make_node("Add", ["a", "three"], ["a3"], name="add3"),
        helper.make_node("Clip", ["a3", "zero", "six"], ["r6"], name="relu6"),
        helper.make_node("Mul", ["a", "r6"], ["m"], name="mul"),
        helper.make_node("Div" if divide else "Mul", ["m", "six" if divide else "sixth"], ["h"], name="div"),
        helper.make_node("Conv", ["h", "w2"], ["y"], name="conv2"),
    ]
    inits = {
        **CONV,
        "three": scalar(3.0),
        "zero": np.array(0.0, np.float32),
        "six": np.array(6.0, np.float32),
        "sixth": scalar(1 / 6),
        "w2": (R.standard_normal((4, 8, 1, 1)) * 0.4).astype(np.float32),
    }
    return nodes, inits, 12


def torch13_hardswish():
    nodes = [
        conv(),
        helper.make_node("HardSigmoid", ["a"], ["hs"], alpha=1 / 6, name="hsig"),
        helper.make_node("Mul", ["a", "hs"], ["y"], name="mul"),
    ]
    return nodes, dict(CONV), 13


def hardswish_op():
    return [conv(), helper.make_node("HardSwish", ["a"], ["y"], name="hswish")], dict(CONV), 14


def se_gate():
    """Squeeze-excitation: features * HardSigmoid(conv(pool(features))), as in MobileNetV3 and PP-LCNet."""
    nodes = [
        conv(),
        helper.make_node("GlobalAveragePool", ["a"], ["p"], name="pool"),
        helper.make_node("Conv", ["p", "w2", "b2"], ["g"], name="conv_gate"),
        helper.make_node("HardSigmoid", ["g"], ["hs"], alpha=1 / 6, beta=0.5, name="hsig"),
        helper.make_node("Mul", ["a", "hs"], ["y"], name="scale"),
    ]
    inits = {
        **CONV,
        "w2": (R.standard_normal((8, 8, 1, 1)) * 1.5).astype(np.float32),
        "b2": R.standard_normal(8).astype(np.float32),
    }
    return nodes, inits, 13


def hard_sigmoid_default():
    """HardSigmoid with ONNX's default alpha 0.2 (not a HardSwish) feeding a convolution."""
    nodes = [
        conv(),
        helper.make_node("HardSigmoid", ["a"], ["hs"], name="hsig"),
        helper.make_node("Conv", ["hs", "w2"], ["y"], name="conv2"),
    ]
    return nodes, {**CONV, "w2": (R.standard_normal((4, 8, 1, 1)) * 0.4).astype(np.float32)}, 17


def div_by_constant():
    nodes = [conv(), helper.make_node("Div", ["a", "d"], ["y"], name="div")]
    return nodes, {**CONV, "d": (R.uniform(0.5, 4.0, (1, 8, 1, 1))).astype(np.float32)}, 17


def paddle_affine():
    """PP-LCNetV3's learnable affine blocks: conv * scale + bias (scalars), HardSwish, then * scale + bias again."""
    nodes = [
        conv("c"),
        helper.make_node("Mul", ["s1", "c"], ["m"], name="lab_scale"),
        helper.make_node("Add", ["m", "b1"], ["a"], name="lab_bias"),
        helper.make_node("HardSwish", ["a"], ["h"], name="hswish"),
        helper.make_node("Mul", ["h", "s2"], ["h2"], name="lab2_scale"),
        helper.make_node("Add", ["h2", "b2"], ["y"], name="lab2_bias"),
    ]
    inits = {**CONV, "s1": scalar(0.94), "b1": scalar(0.5), "s2": scalar(1.3), "b2": scalar(-0.2)}
    return nodes, inits, 14


#: The int8 HardSwish: a table lookup (CAST to int32, ADD 128, GATHER), exact where HARD_SWISH is not.
TABLE = {"CAST": 1, "ADD": 1, "GATHER": 1, "HARD_SWISH": 0}
MODELS = {
    "paddle_div": (lambda: paddle_hardswish(True), TABLE),
    "paddle_mul": (lambda: paddle_hardswish(False), TABLE),
    "torch_opset13": (torch13_hardswish, TABLE),
    "hardswish_op": (hardswish_op, TABLE),
    "se_gate": (se_gate, {"MUL": 2, "ADD": 1}),
    "hard_sigmoid_default": (hard_sigmoid_default, {"MUL": 1, "ADD": 1}),
    "div_by_constant": (div_by_constant, {"MUL": 1}),
    "paddle_affine": (paddle_affine, {**TABLE, "MUL": 1, "ADD": 2, "CONV_2D": 1}),
}


def build(name: str) -> onnx.ModelProto:
    nodes, inits, opset = MODELS[name][0]()
    return make_model(nodes, X, ["y"], inits, opset)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_rewritten_fp32_graph_matches_original(name: str) -> None:
    model = build(name)
    prepared = onnx.shape_inference.infer_shapes(onnx.ModelProto.FromString(_serialized(load_proto(model))))
    ops = {n.op_type for n in prepared.graph.node}
    assert "Div" not in ops and "Clip" not in ops
    if name == "paddle_affine":  # the affine after the conv folds into it; the one after HardSwish stays
        assert [n.op_type for n in prepared.graph.node] == ["Conv", "HardSwish", "Mul", "Add"]
    for seed in range(3):
        feeds = random_feeds(model, seed, -4, 4)
        (expected,) = run_onnx(model, feeds)
        (actual,) = run_onnx(prepared, feeds)
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def _serialized(model) -> bytes:
    from edgekit.core.model import to_proto

    return to_proto(model).SerializeToString()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_int8_tflite_is_integer_and_matches_qdq(name: str) -> None:
    model = build(name)
    calib = [random_feeds(model, seed, -4, 4) for seed in range(8)]
    qdq = edgekit_qdq(model, calib)
    result = convert_proto(qdq, ConvertOptions(io_dtype="int8", target="test"))
    assert result.float_ops == [], f"ops left in float: {result.float_ops}"
    counts = op_types(result)
    for code in ("DIV", "RELU_0_TO_1", "DEQUANTIZE", "LOGISTIC"):
        assert code not in counts, counts
    for code, count in MODELS[name][1].items():
        assert counts.get(code, 0) == count, counts
    steps = output_steps(qdq)
    for seed in (100, 101):
        feeds = random_feeds(model, seed, -4, 4)
        expected = run_onnx(qdq, feeds)
        actual = run_tflite_isolated(result, feeds)
        for a, e, step in zip(actual, expected, steps, strict=True):
            assert_within_one_step(a, e, step)


def _torch_mobilenetv3_block(opset: int) -> onnx.ModelProto:
    """A MobileNetV3 block (conv-BN-Hardswish, squeeze-excitation gated by Hardsigmoid, depthwise conv-Hardswish)
    exported by torch: at opset 13 it writes each Hardswish as HardSigmoid + Mul, at 17 as HardSwish."""
    import io

    torch = pytest.importorskip("torch")
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn, self.act = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Hardswish()
            self.fc1, self.fc2, self.gate = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1), nn.Hardsigmoid()
            self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)

        def forward(self, x):
            y = self.act(self.bn(self.conv(x)))
            s = self.gate(self.fc2(torch.relu(self.fc1(y.mean((2, 3), keepdim=True)))))
            return self.act(self.dw(y * s))

    torch.manual_seed(0)
    block = Block()
    with torch.no_grad():  # realistic BatchNorm statistics: run data through in train mode
        block.train()(torch.randn(16, 3, 8, 8) * 2)
    buffer = io.BytesIO()
    torch.onnx.export(block.eval(), torch.randn(1, 3, 8, 8), buffer, opset_version=opset, dynamo=False)
    return onnx.load_from_string(buffer.getvalue())


@pytest.mark.parametrize("opset", [13, 17])
def test_torch_mobilenetv3_block_is_integer(opset: int) -> None:
    model = _torch_mobilenetv3_block(opset)
    written = {n.op_type for n in model.graph.node}
    assert ("HardSwish" in written) == (opset >= 14)
    calib = [random_feeds(model, seed, -3, 3) for seed in range(8)]
    qdq = edgekit_qdq(model, calib)
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert result.float_ops == [], result.float_ops
    counts = op_types(result)
    assert counts.get("GATHER") == 2 and "HARD_SWISH" not in counts and "RELU_0_TO_1" not in counts, counts
    steps = output_steps(qdq)
    feeds = random_feeds(model, 100, -3, 3)
    for a, e, step in zip(run_tflite_isolated(result, feeds), run_onnx(qdq, feeds), steps, strict=True):
        assert_within_one_step(a, e, step)


def _qdq_hardswish(x_q: tuple[float, int], y_q: tuple[float, int]) -> onnx.ModelProto:
    inits = {
        "xs": np.array(x_q[0], np.float32),
        "xz": np.array(x_q[1], np.int8),
        "ys": np.array(y_q[0], np.float32),
        "yz": np.array(y_q[1], np.int8),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("HardSwish", ["xd"], ["h"]),
        helper.make_node("QuantizeLinear", ["h", "ys", "yz"], ["hq"]),
        helper.make_node("DequantizeLinear", ["hq", "ys", "yz"], ["y"]),
    ]
    return make_model(nodes, {"x": (1, 256)}, ["y"], inits, 19)


#: Scales of MobileNetV3-Large's HardSwishes in the zoo (a conv output's, the HardSwish output's), and others.
HARDSWISH_SCALES = [
    ((0.058326688, -9), (0.032519046, -116)),
    ((0.0173, 12), (0.0121, -105)),
    ((0.11, -30), (0.06, -120)),
]


def test_int8_hardswish_table_equals_the_qdq_model_at_every_level(monkeypatch) -> None:
    """The table gives the QDQ model's value for each of the 256 input levels; TFLite's HARD_SWISH kernel (16-bit
    fixed point) rounds some of them one step off, which MobileNetV3-Large amplified to a cosine of 0.992."""
    from edgekit.targets.tflite import quantized

    kernel_off = 0
    for x_q, y_q in HARDSWISH_SCALES:
        qdq = _qdq_hardswish(x_q, y_q)
        levels = np.arange(-128, 128, dtype=np.int32)
        feeds = {"x": ((levels - x_q[1]).astype(np.float32) * np.float32(x_q[0]))[None]}
        (expected,) = run_onnx(qdq, feeds)
        result = convert_proto(qdq, ConvertOptions(target="test"))
        assert op_types(result).get("GATHER") == 1 and "HARD_SWISH" not in op_types(result)
        (actual,) = run_tflite_isolated(result, feeds)
        np.testing.assert_array_equal(actual, expected)
        with monkeypatch.context() as patch:
            patch.setattr(quantized, "_TABULATED", {})  # HARD_SWISH, the kernel
            kernel = convert_proto(qdq, ConvertOptions(target="test"))
        assert op_types(kernel).get("HARD_SWISH") == 1
        (by_kernel,) = run_tflite_isolated(kernel, feeds)
        steps = np.abs(by_kernel - expected) / y_q[0]
        assert steps.max() <= 1.001  # the kernel is one step off at most
        kernel_off += int(np.sum(steps > 0.5))
    assert kernel_off > 0, "HARD_SWISH now rounds like the QDQ model: the table may go"
