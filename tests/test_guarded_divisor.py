"""A division by a computed divisor kept off zero by a constant, ``x / (y + eps)``: EfficientViT's (MIT) ReLU linear
attention normaliser ``out[..., :-1] / (out[..., -1:] + eps)``, where ``out = relu(q) @ (relu(k)^T @ [v, 1])``.
A token whose ReLU query is all zero has ``y = 0``. Quantized, ``y + eps`` rounds eps away and the QDQ model
divides 0 by 0 (NaN, which LiteRT and the exact semantics quantize differently): timm's efficientvit_b0 failed
the arm-cpu and nnapi int8 verification at cosine 0.41. The guard and the division stay float
(``quantize.patterns.guarded_divisors``), and so do the linear attention's two activation MatMuls
(``linear_attention_cores``: int8 steps of the numerator and denominator sums, multiplied by the division, left
timm's efficientvit_b0 reduced at cosine 0.53 from fp32, 0.96 with them float)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.api import quantize_model
from edgekit.core.model import load_model
from edgekit.deployment import deploy
from edgekit.quantize.patterns import (
    DIVISOR_REASON,
    LINEAR_ATTENTION_REASON,
    guarded_divisors,
    linear_attention_cores,
)
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

TOKENS, DIM = 16, 8


def linear_attention_model(path) -> None:
    rng = np.random.default_rng(0)

    def const(name, array, dtype=np.float32):
        return numpy_helper.from_array(np.asarray(array, dtype), name)

    inits = [
        const("wq", rng.normal(0, 0.4, (DIM, DIM))),
        const("wk", rng.normal(0, 0.4, (DIM, DIM))),
        const("wv", rng.normal(0, 0.4, (DIM, DIM))),
        const("wo", rng.normal(0, 0.4, (DIM, DIM))),
        const("bias_q", np.full(DIM, -0.3)),
        const("ones", np.ones((1, TOKENS, 1))),
        const("eps", 1e-5),
        const("s0", [0], np.int64),
        const("s_last", [-1], np.int64),
        const("s_end", [DIM + 1], np.int64),
        const("axis", [2], np.int64),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "wq"], ["q0"]),
        oh.make_node("Add", ["q0", "bias_q"], ["q1"]),
        oh.make_node("Relu", ["q1"], ["q"]),
        oh.make_node("MatMul", ["x", "wk"], ["k0"]),
        oh.make_node("Relu", ["k0"], ["k"]),
        oh.make_node("MatMul", ["x", "wv"], ["v0"]),
        oh.make_node("Concat", ["v0", "ones"], ["v"], axis=2),  # F.pad(v, (0, 1), value=1)
        oh.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        oh.make_node("MatMul", ["kt", "v"], ["kv"]),
        oh.make_node("MatMul", ["q", "kv"], ["out"]),
        oh.make_node("Slice", ["out", "s0", "s_last", "axis"], ["num"]),
        oh.make_node("Slice", ["out", "s_last", "s_end", "axis"], ["den"]),
        oh.make_node("Add", ["den", "eps"], ["den_eps"]),
        oh.make_node("Div", ["num", "den_eps"], ["att"]),
        oh.make_node("MatMul", ["att", "wo"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "linear_attention",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, DIM])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, DIM])],
        inits,
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]), path)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lin_att")
    linear_attention_model(folder / "model.onnx")
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (16, 1, TOKENS, DIM)).astype(np.float32)
    # a third of the tokens have an all-zero ReLU query (q = relu(x wq - 0.3) with x = 0): y is 0 there
    x[:, :, ::3] = 0.0
    np.savez(folder / "calib.npz", x=x)
    return folder


def test_the_guard_and_the_division_stay_float(model, tmp_path) -> None:
    ir_model = load_model(model / "model.onnx")
    div = next(n for n in ir_model.graph if n.op_type == "Div")
    guard = div.inputs[1].producer()
    assert guard.op_type == "Add"
    assert guarded_divisors(ir_model) == {guard.name: DIVISOR_REASON, div.name: DIVISOR_REASON}
    # and the linear attention around it: both activation MatMuls and the two Slices of q (k^T [v, 1])
    core = linear_attention_cores(ir_model)
    assert sorted(n.op_type for n in ir_model.graph if n.name in core) == [
        "MatMul",
        "MatMul",
        "Slice",
        "Slice",
    ]
    assert set(core.values()) == {LINEAR_ATTENTION_REASON}
    result = quantize_model(model / "model.onnx", model / "calib.npz", output=tmp_path / "q.onnx")
    kept = {(k["op_type"], k["reason"]) for k in result.report["quantization"]["float_ops"]}
    assert ("Add", DIVISOR_REASON) in kept and ("Div", DIVISOR_REASON) in kept
    assert ("MatMul", LINEAR_ATTENTION_REASON) in kept
    # the QDQ model computes what the float model computes on the zero-query tokens (it gave NaN there)
    x = np.load(model / "calib.npz")["x"]
    fp32 = ort.InferenceSession(str(model / "model.onnx"))
    quant = ort.InferenceSession(str(tmp_path / "q.onnx"))
    a = np.concatenate([fp32.run(None, {"x": s})[0] for s in x])
    b = np.concatenate([quant.run(None, {"x": s})[0] for s in x])
    assert np.isfinite(b).all()
    cosine = float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))
    assert cosine > 0.99, cosine  # 0.976 with the two MatMuls in int8 (their ratio multiplies their steps)


@pytest.mark.parametrize("target", ["arm-cpu", "nnapi"])
def test_a_guarded_division_deploys_int8(model, target, tmp_path) -> None:
    # before: "verification failed: the .tflite differs from the source model ... cosine 0.41" on efficientvit_b0
    result = deploy(model / "model.onnx", target, output=tmp_path / "out", calib=model / "calib.npz")
    assert result.ok, result
    (bundle,) = result.bundles
    assert bundle.precision == "int8" and bundle.verification["passed"]


def scale_norm_model(path) -> None:
    """RTMPose's ScaleNorm (mmpose, Apache-2.0) as torch exports it: ``x / clamp(norm(x) * d^-0.5, eps) * g``, then
    a Linear. The guard is a Clip whose only reader is the float Div, behind a Mul that fuses activations."""
    rng = np.random.default_rng(2)
    inits = [
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
        numpy_helper.from_array(np.array(DIM**-0.5, np.float32), "scale"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        numpy_helper.from_array(np.array([1.3], np.float32), "g"),
        numpy_helper.from_array(rng.normal(0, 0.4, (DIM, DIM)).astype(np.float32), "w"),
    ]
    nodes = [
        oh.make_node("ReduceL2", ["x", "last"], ["norm"], keepdims=1),
        oh.make_node("Mul", ["norm", "scale"], ["scaled"]),
        oh.make_node("Clip", ["scaled", "eps", ""], ["clamped"]),
        oh.make_node("Div", ["x", "clamped"], ["normed"]),
        oh.make_node("Mul", ["normed", "g"], ["gained"]),
        oh.make_node("MatMul", ["gained", "w"], ["y"]),
    ]
    graph = oh.make_graph(
        nodes,
        "scale_norm",
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, DIM])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, DIM])],
        inits,
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 18)]), path)


def test_a_clip_guard_after_a_mul_quantizes_and_deploys(model, tmp_path) -> None:
    """The Mul before the guard took the Clip over as its output's scale (a constant Clip after an op that fuses
    activations), but the Clip is float: "internal error: AssertionError: scale group ... has no observed member"
    on RTMPose's SimCC head. The Mul's output is now an activation of its own, observed."""
    scale_norm_model(tmp_path / "scale_norm.onnx")
    result = quantize_model(tmp_path / "scale_norm.onnx", model / "calib.npz", output=tmp_path / "q.onnx")
    kept = {(k["op_type"], k["reason"]) for k in result.report["quantization"]["float_ops"]}
    assert ("Clip", DIVISOR_REASON) in kept and ("Div", DIVISOR_REASON) in kept
    x = np.load(model / "calib.npz")["x"]
    fp32 = ort.InferenceSession(str(tmp_path / "scale_norm.onnx"))
    quant = ort.InferenceSession(str(tmp_path / "q.onnx"))
    a = np.concatenate([fp32.run(None, {"x": s})[0] for s in x])
    b = np.concatenate([quant.run(None, {"x": s})[0] for s in x])
    cosine = float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))
    assert cosine > 0.99, cosine
    deployed = deploy(
        tmp_path / "scale_norm.onnx", "arm-cpu", output=tmp_path / "out", calib=model / "calib.npz"
    )
    assert deployed.ok, deployed
    assert deployed.bundles[0].verification["passed"]
