"""Two graph shapes of Hugging Face's Longformer (probe round 8h; a random-config LongformerModel exported with
torch.onnx.export at opset 14 failed three of six cases):

- ``attention_mask.clamp(0, 1)`` on the int64 mask: an integer ``Clip(0, 1)``. The TFLite converter wrote it as
  RELU_0_TO_1, whose kernel takes float32 / int8 / uint8 only, and LiteRT refused the arm-cpu fp32 model ("Only
  float32, uint8, int8 supported currently, got INT32"). An integer Clip is MAXIMUM / MINIMUM.
- the scores outside each sliding window filled with ``-inf`` (ConstantOfShape(-inf), Where, ScatterND) before
  the Softmax: calibration saw an infinite range and the int8 cases crashed ("cannot convert float NaN to
  integer"). Values computed from a non-finite constant stay float up to the Softmax
  (``quantize.patterns.non_finite_paths``).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.api import quantize_model
from edgekit.core.model import load_model
from edgekit.deployment import deploy
from edgekit.quantize.patterns import NON_FINITE_REASON, non_finite_paths
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

TOKENS, DIM = 8, 16


def _save(nodes, inputs, outputs, inits, path) -> None:
    graph = oh.make_graph(nodes, "g", inputs, outputs, inits)
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)]), path)


def integer_clip_model(path) -> None:
    """y = x * float(clip(mask, 0, 1)) with an int64 mask (Longformer's attention_mask.clamp(0, 1))."""
    inits = [
        numpy_helper.from_array(np.array(0, np.int64), "lo"),
        numpy_helper.from_array(np.array(1, np.int64), "hi"),
    ]
    nodes = [
        oh.make_node("Clip", ["mask", "lo", "hi"], ["m"]),
        oh.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
        oh.make_node("Unsqueeze", ["mf", "axes"], ["mu"]),
        oh.make_node("Mul", ["x", "mu"], ["y"]),
    ]
    inits.append(numpy_helper.from_array(np.array([2], np.int64), "axes"))
    _save(
        nodes,
        [
            oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, DIM]),
            oh.make_tensor_value_info("mask", TensorProto.INT64, [1, TOKENS]),
        ],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, DIM])],
        inits,
        path,
    )


def test_an_integer_clip_runs_in_litert(tmp_path) -> None:
    integer_clip_model(tmp_path / "m.onnx")
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (4, 1, TOKENS, DIM)).astype(np.float32)
    mask = rng.integers(-1, 3, (4, 1, TOKENS)).astype(np.int64)  # values outside [0, 1] too
    np.savez(tmp_path / "data.npz", x=x, mask=mask)
    # before: "LiteRT failed while running the converted model: Only float32, uint8, int8 supported currently,
    # got INT32 ... RELU_0_TO_1"
    result = deploy(
        tmp_path / "m.onnx", "arm-cpu", output=tmp_path / "out", precision="fp32", calib=tmp_path / "data.npz"
    )
    assert result.ok, result
    (bundle,) = result.bundles
    assert bundle.precision == "fp32" and bundle.verification["passed"]  # against onnxruntime, on the data
    from ai_edge_litert.interpreter import Interpreter

    tflite = next((tmp_path / "out" / "arm-cpu").glob("*.tflite"))
    ops = {d["op_name"] for d in Interpreter(model_path=str(tflite))._get_ops_details()}
    assert "RELU_0_TO_1" not in ops and {"MAXIMUM", "MINIMUM"} <= ops


def banded_softmax_model(path) -> None:
    """Scores from a learned projection, filled with -inf outside a band of width 2 (ConstantOfShape(-inf) of
    the scores' shape, Where on a constant band), Softmax, times the input: Longformer's out-of-window fill."""
    rng = np.random.default_rng(0)
    band = np.abs(np.arange(TOKENS)[:, None] - np.arange(TOKENS)[None, :]) > 2
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (DIM, TOKENS)).astype(np.float32), "w"),
        numpy_helper.from_array(band[None], "outside"),
        numpy_helper.from_array(rng.normal(0, 0.5, (DIM, DIM)).astype(np.float32), "wo"),
    ]
    nodes = [
        oh.make_node("MatMul", ["x", "w"], ["scores"]),
        oh.make_node("Shape", ["scores"], ["shape"]),
        oh.make_node(
            "ConstantOfShape",
            ["shape"],
            ["ninf"],
            value=numpy_helper.from_array(np.array([-np.inf], np.float32)),
        ),
        oh.make_node("Where", ["outside", "ninf", "scores"], ["masked"]),
        oh.make_node("Softmax", ["masked"], ["p"], axis=-1),
        oh.make_node("MatMul", ["p", "x"], ["h"]),
        oh.make_node("MatMul", ["h", "wo"], ["y"]),
    ]
    _save(
        nodes,
        [oh.make_tensor_value_info("x", TensorProto.FLOAT, [1, TOKENS, DIM])],
        [oh.make_tensor_value_info("y", TensorProto.FLOAT, [1, TOKENS, DIM])],
        inits,
        path,
    )


@pytest.fixture(scope="module")
def banded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("banded")
    banded_softmax_model(folder / "model.onnx")
    x = np.random.default_rng(1).normal(0, 1, (16, 1, TOKENS, DIM)).astype(np.float32)
    np.savez(folder / "calib.npz", x=x)
    return folder


def test_a_minus_inf_fill_stays_float_up_to_the_softmax(banded, tmp_path) -> None:
    ir_model = load_model(banded / "model.onnx")
    kept = non_finite_paths(ir_model)
    assert set(kept.values()) == {NON_FINITE_REASON}
    assert {n.op_type for n in ir_model.graph if n.name in kept} >= {"Where", "Softmax"}
    assert not {n.op_type for n in ir_model.graph if n.name in kept} & {"MatMul"}
    # before: ValueError: cannot convert float NaN to integer (the -inf range's zero point)
    quantize_model(banded / "model.onnx", banded / "calib.npz", output=tmp_path / "q.onnx")
    x = np.load(banded / "calib.npz")["x"]
    fp32 = ort.InferenceSession(str(banded / "model.onnx"))
    quant = ort.InferenceSession(str(tmp_path / "q.onnx"))
    a = np.concatenate([fp32.run(None, {"x": s})[0] for s in x])
    b = np.concatenate([quant.run(None, {"x": s})[0] for s in x])
    assert np.isfinite(b).all()
    cosine = float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))
    assert cosine > 0.99, cosine


def test_a_minus_inf_fill_deploys_int8(banded, tmp_path) -> None:
    result = deploy(banded / "model.onnx", "arm-cpu", output=tmp_path / "out", calib=banded / "calib.npz")
    assert result.ok, result
    (bundle,) = result.bundles
    assert bundle.precision == "int8" and bundle.verification["passed"]
