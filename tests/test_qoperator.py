"""QOperator models (onnxruntime's QLinearConv, QLinearMatMul, com.microsoft QLinear*/QGemm) load as QDQ with their
own scales, agree with onnxruntime running the QOperator original, and deploy to every target.

The QOperator models are made here by onnxruntime's own quantizer (``quantize_static(quant_format=QOperator)``)
from small float models, per tensor and per channel, with uint8 and int8 activations.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from edgekit.core.errors import UnsupportedOpError
from edgekit.core.model import load_proto
from edgekit.core.runtime import HostRunner
from onnx import TensorProto, helper, numpy_helper

SHAPE = (1, 3, 16, 16)


def _float_init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv/Relu twice, a residual Add, GlobalAveragePool, Flatten, Gemm (onnxruntime: QLinearConv,
    com.microsoft QLinearAdd, QLinearGlobalAveragePool, Flatten on uint8, QGemm)."""
    rng = np.random.default_rng(seed)
    inits = [
        _float_init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _float_init("b1", rng.normal(0, 0.1, 8)),
        _float_init("w2", rng.normal(0, 0.2, (8, 8, 3, 3))),
        _float_init("b2", rng.normal(0, 0.1, 8)),
        _float_init("wg", rng.normal(0, 0.3, (10, 8))),
        _float_init("bg", rng.normal(0, 0.1, 10)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Add", ["r1", "r2"], ["sum"], name="add"),
        helper.make_node("GlobalAveragePool", ["sum"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wg", "bg"], ["y"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def op_zoo(seed: int = 0) -> onnx.ModelProto:
    """MaxPool and Reshape run on integer data, com.microsoft QLinearSigmoid / QLinearLeakyRelu / QLinearMul /
    QLinearConcat (inputs of different scales) / QLinearAveragePool / QLinearSoftmax, and QLinearMatMul."""
    rng = np.random.default_rng(seed)
    inits = [
        _float_init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))),
        _float_init("b1", rng.normal(0, 0.1, 8)),
        _float_init("w2", rng.normal(0, 0.2, (8, 8, 3, 3))),
        _float_init("b2", rng.normal(0, 0.1, 8)),
        _float_init("w3", rng.normal(0, 0.2, (8, 8, 1, 1))),
        _float_init("b3", rng.normal(0, 0.1, 8)),
        _float_init("wm", rng.normal(0, 0.2, (64, 10))),
        numpy_helper.from_array(np.array([1, 64], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s2"]),
        helper.make_node("Conv", ["p1", "w3", "b3"], ["c3"]),
        helper.make_node("LeakyRelu", ["c3"], ["l3"], alpha=0.1),
        helper.make_node("Mul", ["s2", "l3"], ["m"]),
        helper.make_node("Concat", ["m", "l3"], ["cat"], axis=1),
        helper.make_node("AveragePool", ["cat"], ["ap"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Reshape", ["ap", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "wm"], ["mm"]),
        helper.make_node("Softmax", ["mm"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "op_zoo",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def feeds(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(count)]


def quantize_qoperator(
    model: onnx.ModelProto,
    folder: Path,
    *,
    per_channel: bool,
    activations: str = "uint8",
    weights: str = "int8",
) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter(feeds(8, seed=1))

        def get_next(self):
            return next(self.samples, None)

    src, dst = folder / "float.onnx", folder / "qoperator.onnx"
    onnx.save(model, src)
    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QOperator,
        per_channel=per_channel,
        activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
        weight_type=QuantType.QInt8 if weights == "int8" else QuantType.QUInt8,
    )
    return onnx.load(dst)


CASES = {  # model, per channel, activations, weights
    "cnn-per-tensor-u8": (small_cnn, False, "uint8", "int8"),
    "cnn-per-channel-u8": (small_cnn, True, "uint8", "int8"),
    "cnn-per-channel-s8": (small_cnn, True, "int8", "int8"),
    "cnn-per-tensor-u8-u8weights": (small_cnn, False, "uint8", "uint8"),
    "zoo-per-channel-u8": (op_zoo, True, "uint8", "int8"),
}


#: The cases also deployed to every target (the others differ from these only in what loading checks).
DEPLOYED = ("cnn-per-tensor-u8", "cnn-per-channel-s8", "zoo-per-channel-u8")
_BUILT: dict[str, onnx.ModelProto] = {}


def _case(name: str, tmp_path_factory) -> onnx.ModelProto:
    if name not in _BUILT:
        build, per_channel, activations, weights = CASES[name]
        _BUILT[name] = quantize_qoperator(
            build(),
            tmp_path_factory.mktemp(name),
            per_channel=per_channel,
            activations=activations,
            weights=weights,
        )
    return _BUILT[name]


@pytest.fixture(scope="module", params=sorted(CASES))
def qoperator(request, tmp_path_factory) -> onnx.ModelProto:
    return _case(request.param, tmp_path_factory)


def _output_step(model: onnx.ModelProto) -> float:
    """The quantization step of the model's output (the scale of the DequantizeLinear producing it)."""
    inits = {t.name: t for t in model.graph.initializer}
    (dq,) = [n for n in model.graph.node if n.output[0] == model.graph.output[0].name]
    assert dq.op_type == "DequantizeLinear"
    return float(numpy_helper.to_array(inits[dq.input[1]]))


def _params(model: onnx.ModelProto, op_type: str) -> set[tuple[float, int, str]]:
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    found = set()
    for n in model.graph.node:
        if n.op_type == op_type:
            zp = inits[n.input[2]]
            found.add((float(inits[n.input[1]]), int(zp), str(zp.dtype)))
    return found


def test_qoperator_model_is_made_of_qoperator_ops(qoperator) -> None:
    ops = {(n.domain, n.op_type) for n in qoperator.graph.node}
    assert ("", "QLinearConv") in ops
    assert ops & {("com.microsoft", "QLinearAdd"), ("com.microsoft", "QLinearConcat")}


def test_loads_as_qdq_keeping_every_scale(qoperator) -> None:
    model = load_proto(qoperator)
    qdq = ir.to_proto(model)
    ops = {(n.domain, n.op_type) for n in qdq.graph.node}
    assert not any(d == "com.microsoft" or o.startswith("QLinear") or o == "QGemm" for d, o in ops)
    assert "com.microsoft" not in {o.domain for o in qdq.opset_import}
    onnx.checker.check_model(qdq, full_check=True)
    # Every activation scale and zero point of the QOperator model (the outputs of its quantized ops and
    # of its QuantizeLinear) is a QuantizeLinear of the QDQ model, and no other.
    inits = {t.name: numpy_helper.to_array(t) for t in qoperator.graph.initializer}
    expected = set()
    for n in qoperator.graph.node:
        if n.op_type == "QuantizeLinear":
            s, z = n.input[1], n.input[2]
        elif n.op_type in ("QLinearConv", "QLinearMatMul"):
            s, z = n.input[6], n.input[7]
        elif n.op_type == "QGemm":
            s, z = n.input[7], n.input[8]
        elif n.op_type == "QLinearConcat":
            s, z = n.input[0], n.input[1]
        elif n.op_type.startswith("QLinear"):
            s, z = n.input[-2], n.input[-1]
        else:
            continue
        expected.add((float(inits[s]), int(inits[z]), str(inits[z].dtype)))
    assert _params(qdq, "QuantizeLinear") == expected
    # Weights: the same integers, scales and axis (symmetric int8 as given).
    weights = {n.input[3]: n.input[4] for n in qoperator.graph.node if n.op_type == "QLinearConv"}
    dq = {n.input[0]: n for n in qdq.graph.node if n.op_type == "DequantizeLinear"}
    qinits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    for w, scale in weights.items():
        node = dq[w]
        np.testing.assert_array_equal(qinits[w], inits[w])
        np.testing.assert_array_equal(qinits[node.input[1]], inits[scale])


def test_qdq_agrees_with_onnxruntime_on_the_qoperator_model(qoperator) -> None:
    """Within one quantization step of the output (a float op can round a tie differently from onnxruntime's
    integer kernel), both run exactly by the host runner and by onnxruntime without graph rewrites."""
    step = _output_step(qoperator)
    model = load_proto(qoperator)
    original = ort.InferenceSession(qoperator.SerializeToString(), providers=["CPUExecutionProvider"])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    plain = ort.InferenceSession(
        ir.to_proto(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    host = HostRunner(model)
    for sample in feeds(6, seed=7):
        (expected,) = original.run(None, sample)
        (got,) = plain.run(None, sample)
        assert np.abs(got - expected).max() <= step * 1.001
        assert np.abs(host.run(sample)["y"] - expected).max() <= step * 1.001


@pytest.mark.parametrize("target", ["arm-cpu", "nnapi", "intel-vpu"])
@pytest.mark.parametrize("case", DEPLOYED)
def test_deploys_to_every_target(case, target, tmp_path, tmp_path_factory) -> None:
    from edgekit.device_agents.bundle import read_bundle
    from edgekit.targets.base import PackageOptions, get_target

    qoperator = _case(case, tmp_path_factory)
    model = load_proto(qoperator)
    path = get_target(target).package(
        model, tmp_path / target, PackageOptions(verify_samples=tuple(feeds(3, 11)))
    )
    with read_bundle(path) as bundle:
        manifest = bundle.manifest
        assert manifest.verification["passed"] and manifest.verification["precision"] == "int8"
        if target == "nnapi":
            # The model's own input scale; a uint8 zero point becomes int8 by -128 (the same real values).
            (scale, zero_point, dtype) = sorted(
                p for p in _params(qoperator, "QuantizeLinear") if abs(p[0] - manifest.inputs[0].scale) < 1e-9
            )[0]
            assert manifest.inputs[0].zero_point == zero_point - (128 if dtype == "uint8" else 0)


def test_tflite_int8_matches_onnxruntime_integer_kernels(tmp_path) -> None:
    """The int8 .tflite (integer kernels, like onnxruntime's) gives the QOperator model's top-1 and stays within
    a few output steps of it."""
    from edgekit.targets.tflite.converter import ConvertOptions, convert
    from edgekit.targets.tflite.package import run_tflite

    qop = quantize_qoperator(small_cnn(seed=3), tmp_path, per_channel=True)
    result = convert(load_proto(qop), ConvertOptions(target="arm-cpu"))
    assert result.float_ops == []
    original = ort.InferenceSession(qop.SerializeToString(), providers=["CPUExecutionProvider"])
    step = _output_step(qop)
    for sample in feeds(8, seed=13):
        (expected,) = original.run(None, sample)
        got = run_tflite(result.data, result, sample)["y"]
        assert np.abs(got - expected).max() <= 2 * step * 1.001


def integer_data_model(seed: int = 0) -> onnx.ModelProto:
    """Written by hand as onnxruntime would: Pad (its constant the zero point), MaxPool, Transpose and Split run
    on uint8 data; com.microsoft QLinearConcat of inputs with another scale, QLinearGlobalAveragePool, Flatten;
    QGemm with a uint8 output and QGemm with alpha and a float output (no output scale)."""
    rng = np.random.default_rng(seed)

    def c(name: str, array) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(array), name)

    inits = [
        c("xs", np.float32(0.02)),
        c("xz", np.uint8(120)),
        c("pads", np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)),
        c("split", np.array([4, 4], np.int64)),
        c("ys", np.float32(0.03)),
        c("yz", np.uint8(100)),
        c("rs", np.float32(0.01)),
        c("rz", np.uint8(90)),
        c("wq", rng.integers(-127, 128, (4, 8)).astype(np.int8)),
        c("ws", rng.uniform(0.002, 0.01, 4).astype(np.float32)),
        c("wz", np.zeros(4, np.int8)),
        c("bq", rng.integers(-2000, 2000, 4).astype(np.int32)),
        c("gs", np.float32(0.05)),
        c("gz", np.uint8(128)),
    ]
    ms = "com.microsoft"
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("Pad", ["xq", "pads", "xz"], ["pq"], mode="constant"),
        helper.make_node("MaxPool", ["pq"], ["mq"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Transpose", ["mq"], ["tq"], perm=[0, 1, 3, 2]),
        helper.make_node("Split", ["tq", "split"], ["s1", "s2"], axis=1),
        helper.make_node(
            "QLinearConcat", ["ys", "yz", "s2", "xs", "xz", "s1", "xs", "xz"], ["cq"], axis=1, domain=ms
        ),
        helper.make_node("QLinearGlobalAveragePool", ["cq", "ys", "yz", "rs", "rz"], ["gap"], domain=ms),
        helper.make_node("Flatten", ["gap"], ["rq"]),
        helper.make_node(
            "QGemm", ["rq", "rs", "rz", "wq", "ws", "wz", "bq", "gs", "gz"], ["gq"], transB=1, domain=ms
        ),
        helper.make_node(
            "QGemm", ["rq", "rs", "rz", "wq", "ws", "wz", "bq"], ["z"], transB=1, alpha=0.5, domain=ms
        ),
        helper.make_node("DequantizeLinear", ["gq", "gs", "gz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "integer_data",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ms, 1)])


def test_ops_on_integer_data_and_qgemm_match_onnxruntime(tmp_path) -> None:
    from edgekit.targets.base import PackageOptions, get_target

    source = integer_data_model()
    model = load_proto(source)
    ops = [n.op_type for n in model.graph if n.op_type not in ("QuantizeLinear", "DequantizeLinear")]
    assert ops == [
        "Pad",
        "MaxPool",
        "Transpose",
        "Split",
        "Concat",
        "GlobalAveragePool",
        "Flatten",
        "Gemm",
        "Gemm",
    ]
    original = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    host = HostRunner(model)
    rng = np.random.default_rng(3)
    samples = [{"x": rng.normal(0, 1.5, (1, 8, 6, 6)).astype(np.float32)} for _ in range(4)]
    for sample in samples:
        y, z = original.run(None, sample)
        got = host.run(sample)
        assert np.abs(got["y"] - y).max() <= 0.05 * 1.001  # one step of the output
        np.testing.assert_allclose(got["z"], z, rtol=1e-5, atol=1e-6)
    for target in ("arm-cpu", "nnapi", "intel-vpu"):  # the float-output QGemm: a float island (nnapi: CPU)
        get_target(target).package(
            model, tmp_path / target, PackageOptions(verify_samples=tuple(samples[:2]))
        )


def test_qlinear_where_and_softmax_of_both_opsets_match_onnxruntime() -> None:
    """QLinearSoftmax over axis 1 of a 4-D tensor means different things for opset 12 (everything from axis 1
    on) and opset 13 (axis 1 alone); QLinearWhere requantizes both branches."""
    ms = "com.microsoft"

    def c(name: str, array) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(array), name)

    inits = [
        c("xs", np.float32(0.02)),
        c("xz", np.uint8(120)),
        c("ys", np.float32(0.03)),
        c("yz", np.uint8(100)),
        c("ss", np.float32(1 / 256)),
        c("sz", np.uint8(0)),
        c("zero", np.float32(0.0)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QuantizeLinear", ["w", "ys", "yz"], ["wq"]),
        helper.make_node("Greater", ["x", "zero"], ["cond"]),
        helper.make_node(
            "QLinearWhere", ["cond", "xq", "xs", "xz", "wq", "ys", "yz", "ys", "yz"], ["wh"], domain=ms
        ),
        helper.make_node(
            "QLinearSoftmax", ["wh", "ys", "yz", "ss", "sz"], ["s12"], axis=1, opset=12, domain=ms
        ),
        helper.make_node(
            "QLinearSoftmax", ["wh", "ys", "yz", "ss", "sz"], ["s13"], axis=1, opset=13, domain=ms
        ),
        helper.make_node("DequantizeLinear", ["s12", "ss", "sz"], ["y12"]),
        helper.make_node("DequantizeLinear", ["s13", "ss", "sz"], ["y13"]),
    ]
    shape = [1, 4, 3, 5]
    graph = helper.make_graph(
        nodes,
        "where_softmax",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "w")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("y12", "y13")],
        inits,
    )
    source = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12), helper.make_opsetid(ms, 1)])
    model = load_proto(source)
    original = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    host = HostRunner(model)
    rng = np.random.default_rng(4)
    for _ in range(3):
        sample = {n: rng.normal(0, 1.5, shape).astype(np.float32) for n in ("x", "w")}
        y12, y13 = original.run(None, sample)
        got = host.run(sample)
        assert np.abs(got["y12"] - y12).max() <= 1.001 / 256 and np.abs(got["y13"] - y13).max() <= 1.001 / 256
        assert np.abs(y12 - y13).max() > 0.05  # the two opsets' softmaxes do differ


def test_uint8_weights_with_zero_point_128_become_symmetric_int8_exactly() -> None:
    rng = np.random.default_rng(6)
    weights = rng.integers(1, 256, (4, 3, 3, 3)).astype(np.uint8)  # zero point 128: -127..127 centred

    def c(name: str, array) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(array), name)

    inits = [
        c("xs", np.float32(0.02)),
        c("xz", np.uint8(120)),
        c("w", weights),
        c("ws", np.float32(0.004)),
        c("wz", np.uint8(128)),
        c("ys", np.float32(0.05)),
        c("yz", np.uint8(110)),
        c("b", rng.integers(-500, 500, 4).astype(np.int32)),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node(
            "QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"], pads=[1] * 4
        ),
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_u8w",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    source = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model = load_proto(source)
    conv = next(n for n in model.graph if n.op_type == "Conv")
    dq = conv.inputs[1].producer()
    np.testing.assert_array_equal(dq.inputs[0].const_value.numpy(), weights.astype(np.int16) - 128)
    assert dq.inputs[0].dtype == ir.DataType.INT8 and not dq.inputs[2].const_value.numpy().any()
    original = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    host = HostRunner(model)
    for sample in [{"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)} for _ in range(3)]:
        assert np.abs(host.run(sample)["y"] - original.run(None, sample)[0]).max() <= 0.05 * 1.001


def average_pool_model(count_include_pad: int) -> onnx.ModelProto:
    """com.microsoft QLinearAveragePool with padding, its output scale narrower than its input's."""

    def c(name: str, array) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(array), name)

    pool = helper.make_node(
        "QLinearAveragePool",
        ["xq", "xs", "xz", "ys", "yz"],
        ["yq"],
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
        strides=[2, 2],
        count_include_pad=count_include_pad,
        domain="com.microsoft",
    )
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        pool,
        helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "average_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        [
            c("xs", np.float32(0.02)),
            c("xz", np.uint8(100)),
            c("ys", np.float32(0.015)),
            c("yz", np.uint8(90)),
        ],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    )


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_tflite_average_pool_requantizes_after_averaging(count_include_pad) -> None:
    """TFLite's AVERAGE_POOL_2D needs one scale in and out: the average is taken at the input's scale and then
    requantized (requantizing the input to the narrower output scale first clipped it: 4 steps off)."""
    from edgekit.targets.tflite.converter import ConvertOptions, convert
    from edgekit.targets.tflite.package import run_tflite

    source = average_pool_model(count_include_pad)
    result = convert(load_proto(source), ConvertOptions(target="arm-cpu"))
    assert result.float_ops == [] and result.op_counts["AVERAGE_POOL_2D"] == 1
    assert any(n.startswith("requantize inserted after AVERAGE_POOL_2D") for n in result.notes)
    original = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(8)
    for _ in range(4):
        sample = {"x": rng.normal(0.5, 1, (1, 2, 7, 7)).astype(np.float32)}
        (expected,) = original.run(None, sample)
        assert np.abs(run_tflite(result.data, result, sample)["y"] - expected).max() <= 0.015 * 1.001


def test_average_pool_counting_its_padding_deploys_with_onnxruntimes_answers(tmp_path) -> None:
    """The host runner pads the integer tensor with the zero point (OpenVINO pads a dequantized one with 0), so the
    .tflite that matches onnxruntime passes verification."""
    from edgekit.targets.base import PackageOptions, get_target

    source = average_pool_model(1)
    model = load_proto(source)
    original = ort.InferenceSession(source.SerializeToString(), providers=["CPUExecutionProvider"])
    samples = [
        {"x": np.random.default_rng(s).normal(0.5, 1, (1, 2, 7, 7)).astype(np.float32)} for s in (8, 9)
    ]
    for sample in samples:
        (expected,) = original.run(None, sample)
        assert np.abs(HostRunner(model).run(sample)["y"] - expected).max() <= 0.015 * 1.001
    get_target("arm-cpu").package(model, tmp_path / "arm-cpu", PackageOptions(verify_samples=tuple(samples)))


def test_deploy_eval_compares_with_onnxruntime_on_the_qoperator_file(tmp_path) -> None:
    """``deploy --eval``: the reference is onnxruntime on the QOperator file as given; the QDQ form on the host is
    reported beside it; the int8 .tflite reproduces onnxruntime's answers."""
    import json

    qop = quantize_qoperator(small_cnn(seed=5), tmp_path, per_channel=True)
    model = tmp_path / "qop.onnx"
    onnx.save(qop, model)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    x = np.stack([f["x"] for f in feeds(24, seed=21)])
    labels = np.array([int(session.run(None, {"x": s})[0].argmax()) for s in x])
    data = tmp_path / "eval.npz"
    np.savez(data, x=x, labels=labels)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "deploy", str(model), "-t", "arm-cpu", "-o", str(out),
         "--eval", str(data), "--report", str(out / "report.html")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["reference"].startswith("onnxruntime")
    assert report["qdq_on_host"]["samples"] == 24 and report["qdq_on_host"]["reference_top1"] == 100.0
    (entry,) = report["targets"]
    assert entry["evaluation"]["accuracy"]["reference_top1"] == 100.0
    assert entry["evaluation"]["top1_agreement"] == 100.0
    assert "onnxruntime" in (out / "report.md").read_text()
    provenance = json.loads((out / "arm-cpu" / "manifest.json").read_text())["provenance"]
    assert provenance["quantization"]["source"].startswith("onnxruntime QOperator model")


def _with_node(model: onnx.ModelProto, node: onnx.NodeProto) -> onnx.ModelProto:
    """``model`` with ``node`` reading the first QLinearConv's output (its output unused)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.node.append(node)
    return out


def test_unsupported_qoperator_op_is_a_typed_one_line_error(tmp_path) -> None:
    qop = quantize_qoperator(small_cnn(), tmp_path, per_channel=False)
    conv = next(n for n in qop.graph.node if n.op_type == "QLinearConv")
    bad = _with_node(
        qop,
        helper.make_node(
            "QLinearMaxUnpool", [conv.output[0], conv.input[6], conv.input[7]], ["u"], domain="com.microsoft"
        ),
    )
    with pytest.raises(UnsupportedOpError) as info:
        load_proto(bad)
    message = str(info.value)
    assert "com.microsoft::QLinearMaxUnpool" in message and "QLinearConv" in message and "\n" not in message
    path = tmp_path / "bad.onnx"
    onnx.save(bad, path)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgekit.cli.main",
            "deploy",
            str(path),
            "-t",
            "arm-cpu",
            "-o",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "QLinearMaxUnpool" in errors[0]
    assert not (tmp_path / "o").exists()


def test_integer_data_op_without_a_rule_is_refused(tmp_path) -> None:
    """An op reading a quantized tensor whose meaning on integers is not the float op's (here Add of two
    integer tensors, which adds the zero points too) is refused by name."""
    qop = quantize_qoperator(small_cnn(), tmp_path, per_channel=False)
    conv = next(n for n in qop.graph.node if n.op_type == "QLinearConv")
    bad = _with_node(qop, helper.make_node("Add", [conv.output[0], conv.output[0]], ["n"]))
    with pytest.raises(UnsupportedOpError, match="Add on the quantized tensor"):
        load_proto(bad)


SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.mark.shared
@pytest.mark.skipif(
    os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
)
@pytest.mark.parametrize("target", ["arm-cpu", "nnapi", "intel-vpu"])
def test_shared_mobilenetv2_int8_deploys_with_onnxruntimes_answers(target, tmp_path) -> None:
    """The ONNX model zoo's QOperator MobileNetV2 deploys to each target; on 20 shared photos the bundle gives
    the top-1 of onnxruntime running the original file (the TFLite integer kernels all 20; OpenVINO's, which
    requantize in float, at least 18: one input value moved by one step already changes this model's
    onnxruntime top-1 on 2 % of the photos)."""
    from edgekit.core.data import ImagePreprocess, InputSpec, open_dataset
    from edgekit.core.model import load_model
    from edgekit.targets.base import PackageOptions, get_target

    path = SHARED / "models" / "mobilenetv2-12-int8.onnx"
    pre = ImagePreprocess(
        resize_mode="shorter-side-crop",
        resize_shorter=256,
        scale=1 / 255,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
    )
    data = open_dataset(
        SHARED / "data" / "imagenet-sample-200",
        [InputSpec("input", (1, 3, 224, 224), np.float32)],
        pre,
        limit=20,
    )
    samples = [dict(s.inputs) for s in data]
    model = load_model(path)
    bundle = get_target(target).package(
        model, tmp_path / target, PackageOptions(verify_samples=tuple(samples[:3]))
    )
    original = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = [int(original.run(None, s)[0].argmax()) for s in samples]
    got = [int(np.argmax(y)) for y in _run_bundle(target, bundle, samples)]
    agree = sum(a == b for a, b in zip(expected, got, strict=True))
    assert agree >= (20 if target != "intel-vpu" else 18), (target, agree)


def _run_bundle(target: str, bundle: Path, samples: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    if target == "intel-vpu":
        import openvino as ov

        core = ov.Core()
        compiled = core.compile_model(
            core.read_model(str(next(bundle.glob("*.xml")))), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
        )
        return [compiled(s)[compiled.outputs[0]] for s in samples]
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(bundle / "model.tflite"))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    results = []
    for s in samples:
        x = s["input"].transpose(0, 2, 3, 1)
        if inp["dtype"] != np.float32:
            scale, zero = inp["quantization"]
            x = np.clip(np.rint(x / scale) + zero, -128, 127).astype(inp["dtype"])
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"])
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        results.append(y)
    return results


def test_recipes_for_float_models_name_the_qoperator_form(tmp_path, tmp_path_factory) -> None:
    """A QOperator file asked for fp32 or requantized: one error line that says it is already quantized, naming
    the QOperator form (it said "(QDQ)" and "it has QuantizeLinear/DequantizeLinear nodes" of a QLinearConv file)."""
    import subprocess
    import sys

    path = tmp_path / "qop.onnx"
    onnx.save(_case("cnn-per-tensor-u8", tmp_path_factory), path)
    np.savez(tmp_path / "calib.npz", x=np.stack([f["x"] for f in feeds(4, 3)]))
    for args in (["deploy", str(path), "-t", "arm-cpu", "--precision", "fp32", "-o", str(tmp_path / "o")],
                 ["quantize", str(path), "--calib", str(tmp_path / "calib.npz"), "-o", str(tmp_path / "q.onnx")]):  # fmt: skip
        run = subprocess.run(
            [sys.executable, "-m", "edgekit.cli.main", *args], capture_output=True, text=True
        )
        assert run.returncode == 2, run.stderr
        (line,) = [x for x in run.stderr.splitlines() if x.startswith("error:")]
        assert "already quantized" in line and "QOperator" in line, line
        assert "Traceback" not in run.stderr
