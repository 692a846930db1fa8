"""A learned-probe attention (``nn.MultiheadAttention(probe, x, x)``: SigLIP's pooling head, Mask2Former's queries)
deploys to intel-vpu fp16 and its FP16 IR stays right on every inference: OpenVINO 2026.4's CPU plugin ran the
folded ``MatMul(constant query, K^T)`` right on the first inference and 0.46-0.85 of the range off on later ones
(round 14v); edgekit hands it ``(K @ Q^T)^T`` (``edgekit.core.ov_matmul``).

``data/probe_attention.onnx``: torch 2.14's ``nn.MultiheadAttention(64, 4, batch_first=True)`` with a learned
[1, 1, 64] probe expanded to the batch, x [1, 64, 64], exported at opset 17 (seed 0)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
from edgekit.core.ov_matmul import constant_first_matmuls_swapped
from edgekit.deployment import deploy
from onnx import TensorProto, helper, numpy_helper

MODEL = Path(__file__).parent / "data" / "probe_attention.onnx"


def test_probe_attention_fp16_ir_is_right_on_every_inference(tmp_path):
    result = deploy(MODEL, "intel-vpu", output=tmp_path / "out")
    assert result.ok, result
    (xml,) = (tmp_path / "out" / "intel-vpu").rglob("model.xml")
    ir = ov.Core().read_model(str(xml))
    assert any(
        op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.f16 for op in ir.get_ops()
    )
    compiled = ov.Core().compile_model(ir, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = (
        compiled.create_infer_request()
    )  # one request, many inferences: the fault showed from the second
    source = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    for x in np.random.default_rng(3).standard_normal((4, 1, 64, 64)).astype(np.float32):
        expected = source.run(None, {"x": x})[0]
        got = request.infer({0: x})[compiled.outputs[0]]
        span = float(expected.max() - expected.min())
        assert float(np.abs(got - expected).max()) <= 1e-3 * span
        cosine = float(np.dot(got.ravel(), expected.ravel()) / np.linalg.norm(got) / np.linalg.norm(expected))
        assert cosine >= 0.99999


def _matmul_model(a: np.ndarray, b_shape: list[int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"]), helper.make_node("MatMul", ["b", "a_again"], ["z"])],
        "constant_first",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in ("y", "z")],
        [
            numpy_helper.from_array(a, "a"),
            numpy_helper.from_array(np.ones((b_shape[-1], 2), np.float32), "a_again"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_first_matmul_swapped_holds_the_same_values():
    rng = np.random.default_rng(0)
    for a_shape, b_shape in [((4, 1, 16), [4, 16, 8]), ((3, 16), [2, 5, 16, 8]), ((2, 1, 3, 16), [3, 16, 8])]:
        model = _matmul_model(rng.standard_normal(a_shape).astype(np.float32), b_shape)
        swapped = constant_first_matmuls_swapped(model)
        ops = [n.op_type for n in swapped.graph.node]
        assert ops == [
            "Transpose",
            "MatMul",
            "Transpose",
            "MatMul",
        ]  # the constant-second MatMul is left as is
        assert {t.name for t in swapped.graph.initializer} == {"y/constant_second_a_t", "a_again"}
        b = rng.standard_normal(b_shape).astype(np.float32)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"b": b}
        )
        got = ort.InferenceSession(swapped.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"b": b}
        )
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
