"""``w8`` with calibration data keeps as float16 a weight that int8 rounds too coarsely for the layer's output on the
data (``quantize/weight_only.py``, ``W8_MIN_OUTPUT_SQNR_DB``), and the targets store it as float16: the ONNX file
against numpy and onnxruntime, the arm-cpu .tflite against LiteRT."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.api import quantize_model
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.weight_only import W8_MIN_OUTPUT_SQNR_DB
from onnx import helper, numpy_helper

K, M, N = 64, 32, 16


def _weights() -> tuple[np.ndarray, np.ndarray]:
    """``w1`` [K, M]: each output column has one weight 60x the others, on an input that is quiet on the data, so
    its int8 scale (absmax / 127) leaves the other weights, on the loud inputs, two or three levels; ``w2``
    [M, N]: uniform weights, which int8 keeps at about 48 dB."""
    rng = np.random.default_rng(3)
    w1 = rng.normal(0.0, 0.05, (K, M))
    w1[K - 1] = 3.0 * np.where(rng.random(M) < 0.5, -1.0, 1.0)
    w2 = rng.uniform(-1.0, 1.0, (M, N))
    return w1.astype(np.float32), w2.astype(np.float32)


def _model(path) -> None:
    w1, w2 = _weights()
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
            helper.make_node("MatMul", ["h", "w2"], ["y"], name="mm2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, K])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, N])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _inputs(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    loud = np.ones(K, np.float32)
    loud[K - 1] = 0.01  # the input under each column's large weight is quiet
    return [(rng.normal(0.0, 1.0, (1, K)) * loud).astype(np.float32) for _ in range(count)]


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    path = tmp_path_factory.mktemp("w8f16") / "mlp.onnx"
    _model(path)
    calib = [SimpleNamespace(inputs={"x": x}, label=None) for x in _inputs(32, seed=1)]
    result = quantize_model(path, calib, options=QuantizeOptions(precision="w8", samples=32))
    return path, result


def test_a_weight_int8_rounds_below_the_bar_is_float16_and_runs_as_its_values(quantized):
    _, result = quantized
    model = result.model
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    w1, w2 = _weights()
    # the preparation may make the MatMuls Gemms (and transpose their weights): find each by its weight's values
    casts = [n for n in model.graph.node if n.op_type == "Cast" and n.input[0] in inits]
    dqs = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(casts) == 1 and len(dqs) == 1, [n.op_type for n in model.graph.node]
    half = inits[casts[0].input[0]]
    assert half.dtype == np.float16
    np.testing.assert_array_equal(
        half.reshape(-1), (w1 if half.shape == w1.shape else w1.T).astype(np.float16).ravel()
    )
    q, scales = inits[dqs[0].input[0]], inits[dqs[0].input[1]]
    assert q.dtype == np.int8
    w2q = q.astype(np.float32) * (scales.reshape(1, N) if q.shape == w2.shape else scales.reshape(N, 1))
    w2q = w2q if q.shape == w2.shape else w2q.T
    # the report says which weight and why: int8's output SQNR on the data below the bar
    rows = {r["weight"]: r for r in result.report["quantization"]["weight_rows"]}
    assert rows["w1"]["bits"] == 16 and rows["w1"]["bytes"] == 2 * w1.size
    assert rows["w2"]["bits"] == 8
    sqnr = float(rows["w1"]["scheme"].split("int8 left ")[1].split(" dB")[0])
    assert sqnr < W8_MIN_OUTPUT_SQNR_DB
    assert "1 float16" in result.report["quantization"]["weights"]
    # onnxruntime runs the file as the recipe's values: float16 w1, int8 w2
    for x in _inputs(4, seed=2):
        expected = (x.astype(np.float64) @ w1.astype(np.float16).astype(np.float64)) @ w2q.astype(np.float64)
        np.testing.assert_allclose(_ort(model, x), expected, rtol=1e-5, atol=1e-5)


def test_float16_weight_is_closer_to_fp32_than_int8_on_held_out_data(quantized, tmp_path):
    path, result = quantized
    fp32 = onnx.load(path)
    int8_only = quantize_model(path, options=QuantizeOptions(precision="w8")).model  # data-free: all int8
    held_out = _inputs(8, seed=4)

    def error(model: onnx.ModelProto) -> float:
        return sum(float(np.sum((_ort(model, x) - _ort(fp32, x)).astype(np.float64) ** 2)) for x in held_out)

    assert error(result.model) < 0.1 * error(int8_only)


def test_arm_cpu_stores_the_float16_weight_as_float16(quantized, tmp_path):
    """The weight-only .tflite keeps the float16 weight as a FLOAT16 buffer read through DEQUANTIZE (not float32),
    and LiteRT computes what onnxruntime computes from the ONNX file (up to the hybrid kernel of the int8 weight)."""
    import onnx_ir as ir
    from ai_edge_litert.interpreter import Interpreter
    from edgekit.targets.base import PackageOptions, get_target

    _, result = quantized
    bundle = get_target("arm-cpu").package(ir.from_proto(result.model), tmp_path / "out", PackageOptions())
    interpreter = Interpreter(model_path=str(bundle / "model.tflite"))
    halves = [d for d in interpreter.get_tensor_details() if d["dtype"] == np.float16]
    assert [tuple(d["shape"]) for d in halves] in ([(M, K)], [(K, M)]), halves
    interpreter.allocate_tensors()
    for x in _inputs(3, seed=5):
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).astype(np.float64)
        ref = _ort(result.model, x).astype(np.float64)
        # the int8 w2 runs on a hybrid kernel, which quantizes its input row to int8 on the fly: close, not exact
        assert got.ravel() @ ref.ravel() / np.linalg.norm(got) / np.linalg.norm(ref) >= 0.9999
        assert np.abs(got - ref).max() <= 1e-2 * (ref.max() - ref.min())


def test_intel_vpu_stores_the_float16_weight_as_float16(quantized, tmp_path):
    """The w8 IR keeps the float16 weight as a float16 constant (OpenVINO's convert_model folds it into float32),
    and OpenVINO runs the IR as onnxruntime runs the ONNX file."""
    import onnx_ir as ir
    import openvino as ov
    from edgekit.targets.base import PackageOptions, get_target

    _, result = quantized
    bundle = get_target("intel-vpu").package(ir.from_proto(result.model), tmp_path / "out", PackageOptions())
    model = ov.Core().read_model(str(bundle / "model.xml"))
    halves = [
        tuple(op.get_output_shape(0))
        for op in model.get_ordered_ops()
        if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.f16
    ]
    assert halves in ([(M, K)], [(K, M)]), halves
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    for x in _inputs(3, seed=6):
        got = compiled(x)[0].astype(np.float64)
        ref = _ort(result.model, x).astype(np.float64)
        assert got.ravel() @ ref.ravel() / np.linalg.norm(got) / np.linalg.norm(ref) >= 0.9999
        assert np.abs(got - ref).max() <= 1e-2 * (ref.max() - ref.min())
