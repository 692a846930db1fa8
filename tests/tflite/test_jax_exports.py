"""Layers as jax2tf / tf2onnx write a flax model (Magika, Google's file-type detector, ``magika`` 1.0.3 on PyPI):
the tanh GELU and the LayerNorm are written out op by op, the LayerNorm's variance as ``mean(x*x) - mean(x)^2``.

Quantized op by op, Magika's int8 model was at cosine 0.015 to its float model (top-1 0 of 8 files): its first
LayerNorm's variance cancels in int8 (cosine 0.97, a row's variance rounded to 0 and divided by sqrt(eps)), and its
second GELU's ``x^3`` (up to 3.4e5) gets a step of 1300 that rounds every useful tanh input to 0. Both stay float
inside (``quantize.patterns``: ``moments_layer_norm_at``, ``tanh_gelus``), quantized at their input and output:
cosine 0.998 on the same files.
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.targets.tflite.converter import convert
from onnx import TensorProto, helper, numpy_helper
from tflite_helpers import edgekit_qdq, run_onnx, run_tflite


def _flax_block() -> onnx.ModelProto:
    """Dense -> jax.nn.gelu (tanh) -> flax LayerNorm -> Dense on [1, 16 tokens, 24], as jax2tf writes them."""
    rng = np.random.default_rng(12)
    n = helper.make_node
    nodes = [
        n("MatMul", ["x", "w1"], ["m"]),
        n("Add", ["m", "b1"], ["h"]),
        # h * (0.5 * (1 + tanh(sqrt(2/pi) * (h + h * (h * (0.044715 * h))))))
        n("Mul", ["c3", "h"], ["g0"]),
        n("Mul", ["h", "g0"], ["g1"]),
        n("Mul", ["h", "g1"], ["g2"]),
        n("Add", ["h", "g2"], ["g3"]),
        n("Mul", ["k", "g3"], ["g4"]),
        n("Tanh", ["g4"], ["g5"]),
        n("Add", ["one", "g5"], ["g6"]),
        n("Mul", ["half", "g6"], ["g7"]),
        n("Mul", ["h", "g7"], ["a"]),
        # var = max(0, sum(a*a) / n - (sum(a) / n)^2), the statistics reshaped back to a column
        n("ReduceSum", ["a", "axes"], ["s1"], keepdims=0),
        n("Mul", ["s1", "inv_n"], ["mean"]),
        n("Mul", ["a", "a"], ["sq"]),
        n("ReduceSum", ["sq", "axes"], ["s2"], keepdims=0),
        n("Mul", ["s2", "inv_n"], ["meansq"]),
        n("Mul", ["mean", "mean"], ["mean2"]),
        n("Sub", ["meansq", "mean2"], ["var0"]),
        n("Max", ["zero", "var0"], ["var"]),
        n("Reshape", ["var", "col"], ["var_c"]),
        n("Add", ["var_c", "eps"], ["ve"]),
        n("Sqrt", ["ve"], ["sd"]),
        n("Reciprocal", ["sd"], ["r"]),
        n("Mul", ["r", "gamma"], ["scale"]),
        n("Reshape", ["mean", "col"], ["mean_c"]),
        n("Sub", ["a", "mean_c"], ["centered"]),
        n("Mul", ["centered", "scale"], ["normed"]),
        n("Add", ["normed", "beta"], ["ln"]),
        n("MatMul", ["ln", "w2"], ["y"]),
    ]
    inits = {
        "w1": (3.0 * rng.standard_normal((24, 32))).astype(np.float32),
        "b1": (2 + rng.standard_normal(32)).astype(np.float32),
        "c3": np.float32(0.044715),
        "k": np.float32(np.sqrt(2 / np.pi)),
        "one": np.float32(1),
        "half": np.float32(0.5),
        "axes": np.array([2], np.int64),
        "inv_n": np.float32(1 / 32),
        "zero": np.float32(0),
        "col": np.array([1, 16, 1], np.int64),
        "eps": np.float32(1e-6),
        "gamma": (1 + 0.2 * rng.standard_normal(32)).astype(np.float32),
        "beta": (0.1 * rng.standard_normal(32)).astype(np.float32),
        "w2": (0.3 * rng.standard_normal((32, 8))).astype(np.float32),
    }
    graph = helper.make_graph(
        nodes,
        "flax_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_flax_layer_norm_and_tanh_gelu_are_found() -> None:
    from edgekit.core.model import load_proto
    from edgekit.quantize import patterns
    from edgekit.quantize.plan import make_plan

    model = load_proto(_flax_block())
    norms, gelus = patterns.layer_norms(model), patterns.tanh_gelus(model)
    assert sorted(n.op_type for n in model.graph if n.name in gelus) == sorted(
        ["Mul"] * 6 + ["Add", "Tanh", "Add"]
    )
    kinds = sorted(n.op_type for n in model.graph if n.name in norms)
    assert kinds.count("ReduceSum") == 2 and {"Sqrt", "Reciprocal", "Max", "Sub", "Reshape"} <= set(kinds)
    reasons = {f.node: f.reason for f in make_plan(model).float_ops}
    assert all(reasons.get(n) == patterns.LAYER_NORM_REASON for n in norms)
    assert all(reasons.get(n) == patterns.GELU_REASON for n in gelus)


def test_flax_block_int8_stays_close_to_float() -> None:
    """Tokens of small norm (a row whose variance is small against its mean) and a GELU input of +-30: quantized
    op by op the QDQ model was at cosine 0.965-0.982 to float; with both patterns float inside, >= 0.999, and the
    int8 TFLite computes the QDQ model."""
    model = _flax_block()
    rng = np.random.default_rng(3)
    feeds = [
        {"x": (rng.standard_normal((1, 16, 24)) * rng.uniform(0.02, 1, (1, 16, 1))).astype(np.float32)}
        for _ in range(8)
    ]
    qdq = edgekit_qdq(model, feeds, float_output_heads=True)
    result = convert(qdq)
    for sample in feeds[:3]:
        want, got_qdq = run_onnx(model, sample)[0], run_onnx(qdq, sample)[0]
        assert _cosine(got_qdq, want) >= 0.998
        assert _cosine(run_tflite(result, sample)[0], got_qdq) >= 0.999
