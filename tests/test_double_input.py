"""A float64 graph input: what torch's exporter writes for a Python float argument of ``forward``.

kornia's SOSNet (``forward(self, input, eps: float = 1e-10)``), exported with one tensor argument, gets a DOUBLE
scalar input ``onnx::Cast_1`` that a Cast to float32 reads before the L2 normalisation's Add (round 14g). arm-cpu
crashed ("internal error: KeyError: dtype('float64')", exit 3: the TFLite writer has no float64 type) and
intel-vpu refused it ("tensor type DOUBLE is not supported by the bundle format"). float64 computation is
narrowed to float32 at load (``edgekit.core.model.float64_to_float32``, round 14v): such an input becomes a
float32 input, and float64 arithmetic on it float32 arithmetic, checked against onnxruntime running the model
as written (float64).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.deployment import deploy
from onnx import TensorProto, helper, numpy_helper


def _model(path, double_arithmetic: bool = False):
    """SOSNet's tail: a projection, ``+ Cast(eps)``, L2 normalisation."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((6, 8)).astype(np.float32), "w")
    cast_in = "eps2" if double_arithmetic else "eps"
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["c"]),
        *([helper.make_node("Mul", ["eps", "eps"], ["eps2"])] if double_arithmetic else []),
        helper.make_node("Cast", [cast_in], ["epsf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["c", "epsf"], ["ce"]),
        helper.make_node("ReduceL2", ["ce"], ["n"], axes=[1], keepdims=1),
        helper.make_node("Div", ["ce", "n"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "double_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6]),
         helper.make_tensor_value_info("eps", TensorProto.DOUBLE, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _run_tflite(tflite, x: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """The .tflite's output in LiteRT; its ``eps`` input must be float32 (given the float64 value rounded)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(tflite), num_threads=1)
    interpreter.allocate_tensors()
    inputs = {d["name"]: d for d in interpreter.get_input_details()}
    assert inputs["eps"]["dtype"] == np.float32
    interpreter.set_tensor(inputs["x"]["index"], x)
    interpreter.set_tensor(inputs["eps"]["index"], eps.astype(np.float32).reshape(inputs["eps"]["shape"]))
    interpreter.invoke()
    (out,) = interpreter.get_output_details()
    return interpreter.get_tensor(out["index"])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return _model(tmp_path_factory.mktemp("double") / "double_input.onnx")


def test_a_double_input_read_as_float32_deploys_to_arm_cpu_and_matches_onnxruntime(model, tmp_path):
    result = deploy(model, "arm-cpu", output=tmp_path / "out")
    assert result.ok, result
    assert result.bundles[0].verification["passed"]
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    x = np.random.default_rng(1).standard_normal((1, 6)).astype(np.float32)
    eps = np.array(0.25, np.float64)  # large enough to move the output
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "eps": eps}
    )[0]
    np.testing.assert_allclose(_run_tflite(tflite, x, eps), expected, rtol=1e-5, atol=1e-6)


def test_a_double_input_deploys_to_intel_vpu(model, tmp_path):
    result = deploy(model, "intel-vpu", output=tmp_path / "out")
    assert result.ok, result
    assert result.bundles[0].verification["passed"]


def test_float64_arithmetic_on_the_input_is_narrowed_and_matches_the_float64_model(tmp_path):
    path = _model(tmp_path / "double_mul.onnx", double_arithmetic=True)
    result = deploy(path, "arm-cpu", output=tmp_path / "out")
    assert result.ok, result
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    x = np.random.default_rng(2).standard_normal((1, 6)).astype(np.float32)
    eps = np.array(0.7, np.float64)  # eps * eps computed in float64 by onnxruntime, in float32 by the .tflite
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "eps": eps}
    )[0]
    np.testing.assert_allclose(_run_tflite(tflite, x, eps), expected, rtol=1e-5, atol=1e-6)
