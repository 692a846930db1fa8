"""Dynamically quantized models (onnxruntime ``quantize_dynamic``) load as float models on their int8 weights
(``edgekit.core.dynamic_quant``) and deploy.

References: onnxruntime running the float original with each weight replaced by its dequantized values, computed
here from the quantized file's own initializers (the rewrite must give exactly that model), and onnxruntime
running the quantized file as given (the rewrite drops only the activations' run-time rounding).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from edgekit.core import dynamic_quant
from edgekit.core.model import load_proto
from onnx import TensorProto, helper, numpy_helper

ZOO = Path(__file__).resolve().parent / "zoo" / "models"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _run(model: onnx.ModelProto | str, feeds: dict) -> list[np.ndarray]:
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feeds)


def _conv_dense() -> onnx.ModelProto:
    """Conv (bias) -> Relu -> Flatten -> MatMul -> Add: the ops quantize_dynamic writes ConvInteger and
    MatMulInteger for."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32), "conv_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 6).astype(np.float32), "conv_b"),
        numpy_helper.from_array(rng.normal(0, 0.2, (6 * 6 * 6, 10)).astype(np.float32), "fc_w"),
        numpy_helper.from_array(rng.normal(0, 0.1, 10).astype(np.float32), "fc_b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "fc_w"], ["m"]),
        helper.make_node("Add", ["m", "fc_b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _quantize_dynamic(source: onnx.ModelProto | Path, tmp_path: Path, **kwargs) -> tuple[Path, Path]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = source if isinstance(source, Path) else tmp_path / "float.onnx"
    if not isinstance(source, Path):
        onnx.save(source, src)
    dst = tmp_path / "dynamic.onnx"
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, **kwargs)
    return src, dst


def _dequantized_weights(float_model: onnx.ModelProto, quantized: onnx.ModelProto) -> onnx.ModelProto:
    """``float_model`` with every weight the quantized file stores as ``<w>_quantized`` replaced by
    ``(q - zero_point) * scale`` (per tensor, or per output channel of a Conv weight)."""
    q = {t.name: numpy_helper.to_array(t) for t in quantized.graph.initializer}
    out = onnx.ModelProto()
    out.CopyFrom(float_model)
    replaced = 0
    for i, t in enumerate(out.graph.initializer):
        if f"{t.name}_quantized" not in q:
            continue
        values = q[f"{t.name}_quantized"].astype(np.float64)
        scale, zero = q[f"{t.name}_scale"].astype(np.float64), q[f"{t.name}_zero_point"].astype(np.float64)
        shape = [-1] + [1] * (values.ndim - 1) if scale.ndim == 1 and values.ndim == 4 else [-1]
        if scale.ndim == 1:
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        weight = ((values - zero) * scale).astype(np.float32)
        out.graph.initializer[i].CopyFrom(numpy_helper.from_array(weight, t.name))
        replaced += 1
    assert replaced, "no weight of the float model was quantized"
    return out


@pytest.mark.parametrize("per_channel", [False, True])
def test_the_rewrite_is_the_float_model_on_the_dequantized_weights(per_channel, tmp_path) -> None:
    src, dst = _quantize_dynamic(_conv_dense(), tmp_path, per_channel=per_channel)
    quantized = onnx.load(dst)
    assert {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"} <= {
        n.op_type for n in quantized.graph.node
    }
    rewritten = onnx.load(dst)
    notes = dynamic_quant.dequantize(rewritten)
    assert notes and "2 integer op(s)" in notes[0]
    left = {n.op_type for n in rewritten.graph.node} & dynamic_quant.DYNAMIC_OPS
    assert not left
    reference = _dequantized_weights(onnx.load(src), quantized)
    rng = np.random.default_rng(0)
    for _ in range(4):
        feeds = {"x": rng.normal(0, 1, (1, 3, 6, 6)).astype(np.float32)}
        (got,), (want,), (given,) = _run(rewritten, feeds), _run(reference, feeds), _run(str(dst), feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        # the file itself also rounds its activations at run time: close, not equal
        assert _cosine(given, got) > 0.999 and np.abs(given - got).max() > 0


def test_the_old_onnx_quantize_bias_is_not_rounded_to_the_run_time_grid() -> None:
    """onnx.quantize 0.1 (ddddocr's common_old.onnx) rounds a Conv bias to the run-time grid: Floor(b / (x_scale *
    w_scale)), Cast to int32, added to the ConvInteger accumulator. The rewrite keeps the bias as given."""
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (4, 2, 1, 1)).astype(np.int8)
    bias = rng.normal(0, 1, 4).astype(np.float32)
    w_scale = np.float32(0.01)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
        helper.make_node("Mul", ["xs", "w_scale"], ["bs"]),
        helper.make_node("Div", ["bias", "bs"], ["bq_f"]),
        helper.make_node("Floor", ["bq_f"], ["bq_r"]),
        helper.make_node("Cast", ["bq_r"], ["bq"], to=TensorProto.INT32),
        helper.make_node("ConvInteger", ["xq", "w", "xz"], ["acc"]),
        helper.make_node("Reshape", ["bq", "shape"], ["bq4"]),
        helper.make_node("Add", ["acc", "bq4"], ["acc_b"]),
        helper.make_node("Cast", ["acc_b"], ["acc_f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xs", "w_scale"], ["scales"]),
        helper.make_node("Mul", ["acc_f", "scales"], ["y"]),
        helper.make_node(
            "Cast", ["y"], ["y_int"], to=TensorProto.INT64
        ),  # the model's own float-to-int: kept
    ]
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(bias, "bias"),
        numpy_helper.from_array(np.array(w_scale), "w_scale"),
        numpy_helper.from_array(np.array([1, 4, 1, 1], np.int64), "shape"),
    ]
    graph = helper.make_graph(
        nodes,
        "old",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 3, 3]),
            helper.make_tensor_value_info("y_int", TensorProto.INT64, [1, 4, 3, 3]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    dynamic_quant.dequantize(model)
    x = rng.normal(0, 3, (1, 2, 3, 3)).astype(np.float32)
    y, y_int = _run(model, {"x": x})
    want = np.einsum("oi,nihw->nohw", w[:, :, 0, 0].astype(np.float64) * w_scale, x) + bias.reshape(
        1, 4, 1, 1
    )
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert y_int.dtype == np.int64 and np.array_equal(y_int, y.astype(np.int64))


@pytest.mark.parametrize("name", ["kws_lstm", "bert_tiny_op13"])
def test_lstm_and_encoder_load_and_deploy_to_arm_cpu(name, tmp_path) -> None:
    """DynamicQuantizeLSTM (a keyword spotter) and MatMulInteger with quantized embedding Gathers (a BERT
    encoder) load as float models and deploy to arm-cpu fp32, within the activations' rounding of onnxruntime
    running the quantized file."""
    from edgekit.device_agents.bundle import read_bundle
    from edgekit.targets.base import PackageOptions, get_target

    _, dst = _quantize_dynamic(ZOO / f"{name}.onnx", tmp_path)
    ops = {n.op_type for n in onnx.load(dst).graph.node}
    assert ops & {"DynamicQuantizeLSTM", "MatMulInteger"}
    messages: list[str] = []
    model = load_proto(onnx.load(dst), messages=messages)
    assert any("dynamically quantized" in m for m in messages)
    session = ort.InferenceSession(str(dst), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(5)
    feeds = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if "int64" in i.type:
            feeds[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(1, 90, shape)
        else:
            feeds[i.name] = rng.normal(0, 1, shape).astype(np.float32)
    path = get_target("arm-cpu").package(
        model, tmp_path / "arm-cpu", PackageOptions(precision="fp32", verify_samples=(feeds,))
    )
    with read_bundle(path) as bundle:
        assert bundle.manifest.verification["passed"]  # the .tflite against the loaded model
    loaded = _run(ir.to_proto(model), feeds)
    for value, got in zip(session.run(None, feeds), loaded, strict=True):
        assert _cosine(value, got) > 0.9999


def _matmul_nbits(model: onnx.ModelProto, bits: int, symmetric: bool, block: int = 32) -> onnx.ModelProto:
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    config = nbits.DefaultWeightOnlyQuantConfig(block_size=block, is_symmetric=symmetric, bits=bits)
    quantizer = nbits.MatMulNBitsQuantizer(model, algo_config=config)
    quantizer.process()
    return quantizer.model.model


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_matmul_nbits_is_a_matmul_on_its_dequantized_weight(bits, symmetric) -> None:
    """onnxruntime's blockwise weights (MatMulNBits, packed 4-bit nibbles, zero points packed or absent), with K
    not a multiple of the block: the rewrite gives onnxruntime's own results (it dequantizes, then multiplies
    in float)."""
    rng = np.random.default_rng(bits + symmetric)
    k, n = 100, 24
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, n])],
        [
            numpy_helper.from_array(rng.normal(0.2, 1, (k, n)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.normal(0, 1, n).astype(np.float32), "b"),
        ],
    )
    quantized = _matmul_nbits(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), bits, symmetric
    )
    assert [n.op_type for n in quantized.graph.node][0] == "MatMulNBits"
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(quantized)
    assert "MatMulNBits" in dynamic_quant.dequantize(rewritten)[0]
    assert {n.op_type for n in rewritten.graph.node} == {"MatMul", "Add"}
    x = rng.normal(0, 1, (3, k)).astype(np.float32)
    (want,), (got,) = _run(quantized, {"x": x}), _run(rewritten, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_a_4_bit_encoder_deploys_to_arm_cpu(tmp_path) -> None:
    from edgekit.device_agents.bundle import read_bundle
    from edgekit.targets.base import PackageOptions, get_target

    quantized = _matmul_nbits(onnx.load(ZOO / "bert_tiny_op13.onnx"), 4, False)
    assert "MatMulNBits" in {n.op_type for n in quantized.graph.node}
    model = load_proto(quantized, messages=[])
    session = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"])
    shapes = {i.name: [d if isinstance(d, int) else 1 for d in i.shape] for i in session.get_inputs()}
    feeds = {k: np.ones(v, np.int64) for k, v in shapes.items()}
    path = get_target("arm-cpu").package(
        model, tmp_path / "arm-cpu", PackageOptions(precision="fp32", verify_samples=(feeds,))
    )
    with read_bundle(path) as bundle:
        assert bundle.manifest.verification["passed"]
    for want, got in zip(session.run(None, feeds), _run(ir.to_proto(model), feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("quant_type", [0, 1])  # FP4, NF4
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_bnb4_is_a_matmul_on_its_dequantized_weight(quant_type, dtype) -> None:
    """onnxruntime's NF4 / FP4 weights (MatMulBnb4, the ``model_bnb4.onnx`` of Hugging Face repositories: the
    transposed weight flattened, blocks of 64 across its rows, a float32 or float16 absmax per block), with N * K
    odd (the last byte half used) and not a multiple of the block: the rewrite gives onnxruntime's own results
    (the identity matrix as x: its weight itself, float16 included; float32: any x, bit for bit)."""
    from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

    rng = np.random.default_rng(quant_type)
    k, n = 37, 9
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "dense",
        [helper.make_tensor_value_info("x", elem, ["rows", k])],
        [helper.make_tensor_value_info("y", elem, ["rows", n])],
        [numpy_helper.from_array(rng.normal(0.1, 1, (k, n)).astype(dtype), "w")],
    )
    quantizer = MatMulBnb4Quantizer(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), quant_type, 64
    )
    quantizer.process()
    quantized = quantizer.model.model
    assert [n.op_type for n in quantized.graph.node] == ["MatMulBnb4"]
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(quantized)
    assert "MatMulBnb4" in dynamic_quant.dequantize(rewritten)[0]
    assert [n.op_type for n in rewritten.graph.node] == ["MatMul"]
    xs = [np.eye(k, dtype=dtype)] + ([rng.normal(0, 1, (3, k)).astype(dtype)] if dtype == np.float32 else [])
    for x in xs:
        (want,), (got,) = _run(quantized, {"x": x}), _run(rewritten, {"x": x})
        np.testing.assert_array_equal(got, want)


def _embedding_model(rng, vocab: int, dim: int, opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"]), helper.make_node("Relu", ["e"], ["y"])],
        "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, dim])],
        [numpy_helper.from_array(rng.normal(0.1, 1, (vocab, dim)).astype(np.float32), "table")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("symmetric", [True, False])
def test_gather_block_quantized_is_a_gather_of_its_dequantized_table(symmetric) -> None:
    """onnxruntime's 4-bit embedding tables (GatherBlockQuantized: MatMulNBitsQuantizer with Gather among its op
    types writes int4 / uint4 blocks of 32 along the embedding axis, with zero points when asymmetric, at opset
    21): the rewrite gives onnxruntime's own results bit for bit."""
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    rng = np.random.default_rng(int(symmetric))
    config = nbits.DefaultWeightOnlyQuantConfig(
        block_size=32, is_symmetric=symmetric, op_types_to_quantize=("Gather",), quant_axes=(("Gather", 1),)
    )
    quantizer = nbits.MatMulNBitsQuantizer(_embedding_model(rng, 50, 96), algo_config=config)
    quantizer.process()
    quantized = quantizer.model.model
    assert [n.op_type for n in quantized.graph.node][0] == "GatherBlockQuantized"
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(quantized)
    assert "GatherBlockQuantized" in dynamic_quant.dequantize(rewritten)[0]
    assert [n.op_type for n in rewritten.graph.node] == ["Gather", "Relu"]
    ids = rng.integers(0, 50, (2, 5)).astype(np.int64)
    np.testing.assert_array_equal(_run(rewritten, {"ids": ids})[0], _run(quantized, {"ids": ids})[0])


@pytest.mark.parametrize("zero_points", [True, False])
def test_gather_block_quantized_reads_uint8_packed_tables(zero_points) -> None:
    """The uint8 form (two 4-bit values a byte, the first in the low nibble; zero points packed the same way
    along the blocks, default 8; float16 scales): the rewrite equals onnxruntime's kernel."""
    rng = np.random.default_rng(7)
    vocab, dim, block = 20, 48, 16  # 3 blocks a row: the zero points' last byte half used
    data = rng.integers(0, 256, (vocab, dim // 2)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, (vocab, dim // block)).astype(np.float16)
    inits = [numpy_helper.from_array(data, "q"), numpy_helper.from_array(scales, "s")]
    inputs = ["q", "ids", "s"]
    if zero_points:
        inits.append(numpy_helper.from_array(rng.integers(0, 256, (vocab, 2)).astype(np.uint8), "z"))
        inputs.append("z")
    node = helper.make_node(
        "GatherBlockQuantized", inputs, ["y"], domain="com.microsoft", bits=4, block_size=block,
        gather_axis=0, quantize_axis=1,
    )  # fmt: skip
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, dim])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    dynamic_quant.dequantize(rewritten)
    assert [n.op_type for n in rewritten.graph.node] == ["Gather"]
    ids = np.array([0, 19, 7], np.int64)
    np.testing.assert_array_equal(_run(rewritten, {"ids": ids})[0], _run(model, {"ids": ids})[0])
