"""``w8`` with calibration data: a layer whose int8 weight (one scale per output channel) leaves its output on the data
under ``W8_MIN_OUTPUT_SQNR_DB`` is split into input-channel groups with their own int8 weights and scales
(``quantize/weight_split.py``), or, when no split reaches the bar, keeps its weight float16; the targets keep the
groups int8 and the float16 weight float16. Against numpy and onnxruntime (the ONNX file), LiteRT (arm-cpu) and
OpenVINO (intel-vpu)."""

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


def _split_model(path) -> np.ndarray:
    """y = x @ w, w [64, 32]: weights up to 3 on the first 32 inputs, up to 0.03 on the last 32."""
    rng = np.random.default_rng(8)
    w = rng.uniform(-1.0, 1.0, (K, M)) * np.where(np.arange(K) < K // 2, 3.0, 0.03)[:, None]
    w = w.astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, K])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, M])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return w


def _split_inputs(count: int, seed: int) -> list[np.ndarray]:
    """The inputs under the large weights are quiet: both halves carry as much of the output."""
    rng = np.random.default_rng(seed)
    gain = np.where(np.arange(K) < K // 2, 0.01, 1.0)
    return [(rng.normal(0.0, 1.0, (1, K)) * gain).astype(np.float32) for _ in range(count)]


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    path = tmp_path_factory.mktemp("w8split") / "mm.onnx"
    w = _split_model(path)
    calib = [SimpleNamespace(inputs={"x": x}, label=None) for x in _split_inputs(32, seed=1)]
    return path, w, quantize_model(path, calib, options=QuantizeOptions(precision="w8", samples=32))


def test_a_layer_int8_rounds_below_the_bar_is_split_into_input_channel_groups(split):
    """One scale per output channel covers the large weights and leaves the small ones, on the loud inputs, about
    one level; two groups of 32 inputs, each with its own int8 weight and scales, reach the bar. onnxruntime runs
    the file as the sum of the groups' int8 products, and it is much closer to fp32 than the one-group weight."""
    path, w, result = split
    model = result.model
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    dqs = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert len(dqs) == 2 and not any(n.op_type == "Cast" for n in model.graph.node)
    parts = [
        inits[n.input[0]].astype(np.float64) * inits[n.input[1]].astype(np.float64)[None, :] for n in dqs
    ]
    assert all(inits[n.input[0]].dtype == np.int8 and inits[n.input[0]].shape == (K // 2, M) for n in dqs)
    row = next(r for r in result.report["quantization"]["weight_rows"] if r["weight"] == "w")
    assert "2 input-channel groups" in row["scheme"] and row["bits"] == 8
    assert row["bytes"] == w.size + 2 * 2 * M  # float16 scales
    # which DequantizeLinear reads which half: the one whose values are the large weights' takes the first
    first, second = sorted(parts, key=lambda p: -np.abs(p).max())
    # each half on its own grid (GPTQ moves a weight by a few of its group's steps, not more)
    np.testing.assert_allclose(first, w[: K // 2], atol=4 * 3.0 / 127)
    np.testing.assert_allclose(second, w[K // 2 :], atol=4 * 0.03 / 127)
    # a grid of 0.03 / 127, not the first half's 3 / 127 (its scale rounded up to a float16 value)
    assert np.abs(second).max() <= 0.03 * (1 + 2.0**-10)
    fp32 = onnx.load(path)
    one_group = quantize_model(path, options=QuantizeOptions(precision="w8")).model  # data-free: one group
    held_out = _split_inputs(8, seed=4)
    for x in held_out[:3]:
        expected = x[:, : K // 2].astype(np.float64) @ first + x[:, K // 2 :].astype(np.float64) @ second
        np.testing.assert_allclose(_ort(model, x), expected, rtol=1e-5, atol=1e-6)

    def error(m: onnx.ModelProto) -> float:
        return sum(float(np.sum((_ort(m, x) - _ort(fp32, x)).astype(np.float64) ** 2)) for x in held_out)

    assert error(model) < 0.01 * error(one_group)


@pytest.mark.parametrize("target", ["arm-cpu", "intel-vpu"])
def test_the_targets_run_the_groups_as_int8_weights(split, target, tmp_path):
    """Both targets keep each group's weight int8 (LiteRT: two int8 [32, 32] weights, hybrid kernels; OpenVINO:
    two i8 constants) and compute what onnxruntime computes from the file."""
    import onnx_ir as ir
    from edgekit.targets.base import PackageOptions, get_target

    _, _, result = split
    bundle = get_target(target).package(ir.from_proto(result.model), tmp_path / "out", PackageOptions())
    if target == "arm-cpu":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=str(bundle / "model.tflite"))
        int8 = [tuple(d["shape"]) for d in interpreter.get_tensor_details() if d["dtype"] == np.int8]
        assert sorted(int8) == [(M, K // 2), (M, K // 2)], int8
        interpreter.allocate_tensors()

        def run(x: np.ndarray) -> np.ndarray:
            interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
            interpreter.invoke()
            return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    else:
        import openvino as ov

        model = ov.Core().read_model(str(bundle / "model.xml"))
        int8 = [
            tuple(op.get_output_shape(0))
            for op in model.get_ordered_ops()
            if op.get_type_name() == "Constant" and op.get_element_type() == ov.Type.i8
        ]
        assert len(int8) == 2 and all(np.prod(s) == K // 2 * M for s in int8), int8
        compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})

        def run(x: np.ndarray) -> np.ndarray:
            return compiled(x)[0]

    for x in _split_inputs(3, seed=5):
        got, ref = run(x).astype(np.float64), _ort(result.model, x).astype(np.float64)
        assert got.ravel() @ ref.ravel() / np.linalg.norm(got) / np.linalg.norm(ref) >= 0.9999
        assert np.abs(got - ref).max() <= 1e-2 * (ref.max() - ref.min())


def test_gptq_with_one_scale_per_weight_equals_one_per_row_when_they_agree():
    """gptq_round's per-weight scales ([O, I], the split's groups) are the per-row rounding when each row's
    scales are equal."""
    from edgekit.quantize import gptq

    rng = np.random.default_rng(2)
    w = rng.normal(0.0, 1.0, (6, 40))
    x = rng.normal(0.0, 1.0, (200, 40)) * rng.uniform(0.1, 3.0, 40)
    h = x.T @ x / len(x)
    scales = np.abs(w).max(1) / 127
    np.testing.assert_array_equal(
        gptq.gptq_round(w, h, scales, -127, 127),
        gptq.gptq_round(w, h, np.repeat(scales[:, None], 40, 1), -127, 127),
    )
