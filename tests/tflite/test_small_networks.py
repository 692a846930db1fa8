"""Small whole networks in the shape exporters produce: a MobileNet-style CNN and a transformer block.

Each through ``load_model`` (as the targets get it), fp32 against onnxruntime and int8 against its
QDQ model.
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.model import load_proto
from edgekit.targets.tflite.converter import convert
from onnx import helper
from tflite_helpers import (
    assert_close_to_range,
    edgekit_qdq,
    make_model,
    op_types,
    random_feeds,
    run_onnx,
    run_tflite,
)

R = np.random.default_rng(11)


def _w(*shape: int, scale: float = 0.3) -> np.ndarray:
    return (R.standard_normal(shape) * scale).astype(np.float32)


def mobilenet_block() -> onnx.ModelProto:
    """Conv-BN-ReLU6, depthwise-BN-ReLU6, pointwise + residual Add, GAP, PyTorch-style flatten, Gemm."""
    bn = {f"{p}_{k}": v for p, c in (("bn1", 8), ("bn2", 8), ("bn3", 8)) for k, v in (
        ("s", np.abs(_w(c)) + 0.5), ("b", _w(c)), ("m", _w(c)), ("v", np.abs(_w(c)) + 0.2))}  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["n1"]),
        helper.make_node("Clip", ["n1", "zero", "six"], ["r1"]),
        helper.make_node("Conv", ["r1", "wd"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["n2"]),
        helper.make_node("Clip", ["n2", "zero", "six"], ["r2"]),
        helper.make_node("Conv", ["r2", "wp"], ["c3"]),
        helper.make_node("BatchNormalization", ["c3", "bn3_s", "bn3_b", "bn3_m", "bn3_v"], ["n3"]),
        helper.make_node("Add", ["n3", "r1"], ["res"]),
        helper.make_node("GlobalAveragePool", ["res"], ["gap"]),
        helper.make_node("Shape", ["gap"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero_i"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["gap", "target"], ["flat"]),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["y"], transB=1),
    ]
    inits = {
        "w1": _w(8, 3, 3, 3), "wd": _w(8, 1, 3, 3), "wp": _w(8, 8, 1, 1), "wf": _w(5, 8), "bf": _w(5),
        "zero": np.array(0, np.float32), "six": np.array(6, np.float32), "zero_i": np.array(0, np.int64),
        "axes0": np.array([0], np.int64), "minus1": np.array([-1], np.int64), **bn,
    }  # fmt: skip
    return make_model(nodes, {"x": (1, 3, 16, 16)}, ["y"], inits, opset=17)


def transformer_block() -> onnx.ModelProto:
    """LayerNorm, Q/K/V projections, 2 heads (Reshape/Transpose), Softmax attention, erf-GELU MLP."""
    s, d, h = 6, 8, 2
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g1", "b1"], ["ln1"], axis=-1),
        *[helper.make_node("MatMul", ["ln1", f"w{k}"], [f"{k}0"]) for k in "qkv"],
        *[helper.make_node("Reshape", [f"{k}0", "heads"], [f"{k}1"]) for k in "qkv"],
        helper.make_node("Transpose", ["q1"], ["q2"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k1"], ["k2"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v1"], ["v2"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q2", "k2"], ["scores"]),
        helper.make_node("Mul", ["scores", "inv_sqrt_d"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v2"], ["ctx"]),
        helper.make_node("Transpose", ["ctx"], ["ctx2"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ctx2", "merged"], ["ctx3"]),
        helper.make_node("MatMul", ["ctx3", "wo"], ["o"]),
        helper.make_node("Add", ["x", "o"], ["res1"]),
        helper.make_node("LayerNormalization", ["res1", "g2", "b2"], ["ln2"], axis=-1),
        helper.make_node("MatMul", ["ln2", "w1"], ["f1"]),
        helper.make_node("Div", ["f1", "sqrt2"], ["f2"]),
        helper.make_node("Erf", ["f2"], ["f3"]),
        helper.make_node("Add", ["f3", "one"], ["f4"]),
        helper.make_node("Mul", ["f1", "f4"], ["f5"]),
        helper.make_node("Mul", ["f5", "half"], ["f6"]),
        helper.make_node("MatMul", ["f6", "w2"], ["f7"]),
        helper.make_node("Add", ["res1", "f7"], ["y"]),
    ]
    inits = {
        "g1": np.abs(_w(d)) + 0.5, "b1": _w(d), "g2": np.abs(_w(d)) + 0.5, "b2": _w(d),
        "wq": _w(d, d), "wk": _w(d, d), "wv": _w(d, d), "wo": _w(d, d), "w1": _w(d, 16), "w2": _w(16, d),
        "heads": np.array([1, s, h, d // h], np.int64), "merged": np.array([1, s, d], np.int64),
        "inv_sqrt_d": np.array(1 / np.sqrt(d // h), np.float32), "sqrt2": np.array(np.sqrt(2), np.float32),
        "one": np.array(1, np.float32), "half": np.array(0.5, np.float32),
    }  # fmt: skip
    return make_model(nodes, {"x": (1, s, d)}, ["y"], inits, opset=17)


def _compare_fp32(model: onnx.ModelProto):
    result = convert(load_proto(model))
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])
    return result


def _compare_int8(model: onnx.ModelProto, max_rel: float):
    qdq = edgekit_qdq(model, [random_feeds(model, s) for s in range(8)])
    result = convert(load_proto(qdq, prepare=False))
    for seed in (20, 21):
        feeds = random_feeds(model, seed)
        assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(qdq, feeds)[0], rel=max_rel)
    return result


def test_mobilenet_block() -> None:
    model = mobilenet_block()
    ops = op_types(_compare_fp32(model))
    assert "TRANSPOSE" not in ops and "SHAPE" not in ops and "GATHER" not in ops
    assert ops.get("DEPTHWISE_CONV_2D") == 1 and "RELU6" not in ops  # ReLU6 fused
    int8 = _compare_int8(model, max_rel=0.05)
    assert int8.float_ops == [] and "TRANSPOSE" not in op_types(int8)


def test_transformer_block() -> None:
    model = transformer_block()
    ops = op_types(_compare_fp32(model))
    assert ops.get("GELU") == 1 and ops.get("FULLY_CONNECTED") == 6
    int8 = _compare_int8(model, max_rel=0.05)
    assert op_types(int8).get("GELU") == 1  # fused across the QDQ model's Q/DQ pairs, integer kernel
    assert not any(op.startswith(("GELU", "FULLY_CONNECTED")) for op in int8.float_ops)
    # the attention core (Q K^T, its scaling, Softmax, times V) stays float by design (quantize.patterns
    # .attention_cores): one int8 step of the scores is a factor on a probability
    attention = [op.split(" ")[0] for op in int8.float_ops if op.startswith(("BATCH_MATMUL", "SOFTMAX"))]
    assert attention == ["BATCH_MATMUL", "SOFTMAX", "BATCH_MATMUL"]
