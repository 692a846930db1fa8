"""A rank-0 graph input: Silero VAD v6's sample rate ``sr`` (int64 ``[]``, ``silero_vad_16k_op15.onnx``).

``np.ascontiguousarray`` gives a 0-d array one dimension, so the host runner and the OpenVINO verification fed
OpenVINO ``[1]`` for ``[]``: "OpenVINO failed while running the source model on the host: The input tensor size
is not equal to the model input type: got [1] expecting []" (arm-cpu, exit 2) and an internal error on intel-vpu
(exit 3). The model here reads a scalar beside a tensor input; both targets deploy it and agree with onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.deployment import deploy
from onnx import TensorProto, helper, numpy_helper


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("scalar") / "scalar_input.onnx"
    w = numpy_helper.from_array(np.linspace(-1, 1, 8 * 8, dtype=np.float32).reshape(8, 8), "w")
    k = numpy_helper.from_array(np.array(1e-4, np.float32), "k")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["srf", "k"], ["offset"]),
        helper.make_node("Add", ["xw", "offset"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "scalar_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w, k],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_a_scalar_input_deploys_to_intel_vpu(model, tmp_path):
    result = deploy(model, "intel-vpu", output=tmp_path / "out")
    assert result.ok, result
    assert result.bundles[0].verification["passed"]


def test_a_scalar_input_deploys_to_arm_cpu_and_the_tflite_reads_it(model, tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    result = deploy(model, "arm-cpu", output=tmp_path / "out")
    assert result.ok, result
    assert result.bundles[0].verification["passed"]
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    feeds = {"x": np.linspace(0, 1, 8, dtype=np.float32)[None], "sr": np.array(16000, np.int64)}
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    interpreter = Interpreter(model_path=str(tflite), num_threads=1)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], feeds[d["name"]].astype(d["dtype"]).reshape(d["shape"]))
    interpreter.invoke()
    (out,) = interpreter.get_output_details()
    np.testing.assert_allclose(interpreter.get_tensor(out["index"]), expected, rtol=1e-5, atol=1e-6)
