"""Quantized files as other tools write them (probe round 17q): NNCF's torch export (OpenVINO ``FakeQuantize``
nodes), onnxruntime's ``com.microsoft`` QuantizeLinear / DequantizeLinear with 16-bit activations
(``UseQDQContribOps``), and an invalid ``MatMulNBits`` (NNCF ``compress_weights(INT4, all_layers=True)`` on an
embedding table). Each either loads with the file's own numbers or is refused with one typed line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.core.errors import ModelError
from edgekit.core.model import load_proto, to_proto
from edgekit.targets.base import PackageOptions, get_target
from onnx import TensorProto, helper, numpy_helper

SHAPE = (1, 3, 12, 12)
RNG = np.random.default_rng(17)
W = RNG.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32)
B = RNG.normal(0, 0.1, 6).astype(np.float32)
FEEDS = [{"x": RNG.normal(0, 1, SHAPE).astype(np.float32)} for _ in range(3)]


def _init(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def _model(nodes, inits, opsets, out_shape=(1, 6, 12, 12)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def nncf_fake_quantize() -> onnx.ModelProto:
    """Conv(FakeQuantize(x), FakeQuantize(W)) -> Relu -> FakeQuantize, as NNCF's torch export writes it:
    activations on 256 levels over a range aligned to hold 0 on a level, weights per output channel on 255."""
    s_in, s_out = 0.021, 0.017
    hi = np.abs(W).reshape(6, -1).max(1).reshape(6, 1, 1, 1).astype(np.float32)
    inits = [
        _init("w", W), _init("b", B),
        _init("il", np.float32([-128 * s_in])), _init("ih", np.float32([127 * s_in])),
        _init("wl", -hi), _init("wh", hi),
        _init("ol", np.float32([0.0])), _init("oh", np.float32([255 * s_out])),
    ]  # fmt: skip
    fq = "org.openvinotoolkit"
    nodes = [
        helper.make_node(
            "FakeQuantize", ["x", "il", "ih", "il", "ih"], ["xq"], "fq_x", domain=fq, levels=256
        ),
        helper.make_node(
            "FakeQuantize", ["w", "wl", "wh", "wl", "wh"], ["wq"], "fq_w", domain=fq, levels=255
        ),
        helper.make_node("Conv", ["xq", "wq", "b"], ["c"], "conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], "relu"),
        helper.make_node("FakeQuantize", ["r", "ol", "oh", "ol", "oh"], ["y"], "fq_y", domain=fq, levels=256),
    ]
    return _model(nodes, inits, [("", 17), (fq, 1)])


def _openvino(proto: onnx.ModelProto, feeds) -> list[np.ndarray]:
    import openvino as ov

    compiled = ov.Core().compile_model(ov.Core().read_model(proto.SerializeToString(), b""), "CPU")
    return [compiled(f)[0] for f in feeds]


def test_nncf_fake_quantize_reads_as_qdq_with_openvinos_values(tmp_path) -> None:
    proto = nncf_fake_quantize()
    reference = _openvino(proto, FEEDS)  # OpenVINO runs FakeQuantize natively: the file's own numbers
    loaded = to_proto(load_proto(proto))
    ops = [n.op_type for n in loaded.graph.node]
    assert "FakeQuantize" not in ops and ops.count("QuantizeLinear") == 2, ops
    session = ort.InferenceSession(loaded.SerializeToString(), providers=["CPUExecutionProvider"])
    step = 0.017
    for feed, ref in zip(FEEDS, reference, strict=True):
        got = session.run(None, feed)[0]
        # on the output's levels: the same level, or one apart where a value lies at a half step
        levels = np.abs(np.rint(got / step) - np.rint(ref / step))
        assert levels.max() <= 1 and (levels > 0).mean() < 0.01
    path = get_target("arm-cpu").package(
        load_proto(proto), tmp_path / "arm", PackageOptions(verify_samples=tuple(FEEDS))
    )
    assert path.exists()


def _cli_error(proto: onnx.ModelProto, tmp_path, *args: str) -> str:
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "deploy", str(path), "-o", str(tmp_path / "o"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(errors) == 1, proc.stderr[-2000:]
    return errors[0]


def ms_int16(zero_point: int) -> onnx.ModelProto:
    """Conv between com.microsoft int16 Q/DQ pairs at opset 21, as onnxruntime's quantize_static writes QInt16
    activations with UseQDQContribOps."""
    ms = "com.microsoft"
    w_scale = np.abs(W).reshape(6, -1).max(1) / 127
    inits = [
        _init("wq", np.rint(W / w_scale.reshape(6, 1, 1, 1)).astype(np.int8)),
        _init("ws", w_scale.astype(np.float32)), _init("wz", np.zeros(6, np.int8)),
        _init("b", B), _init("s", np.float32(1e-4)), _init("z", np.int16(zero_point)),
        _init("so", np.float32(2e-4)),
    ]  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], "q_x", domain=ms),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], "dq_x", domain=ms),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], "dq_w", domain=ms, axis=0),
        helper.make_node("Conv", ["xd", "wd", "b"], ["c"], "conv", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "so", "z"], ["cq"], "q_c", domain=ms),
        helper.make_node("DequantizeLinear", ["cq", "so", "z"], ["y"], "dq_c", domain=ms),
    ]
    return _model(nodes, inits, [("", 21), (ms, 1)])


def test_ms_int16_qdq_is_the_standard_op_and_deploys_symmetric(tmp_path) -> None:
    proto = ms_int16(0)
    loaded = to_proto(load_proto(proto))
    assert {n.domain for n in loaded.graph.node} == {""}
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = session.run(None, FEEDS[0])[0]
    got = ort.InferenceSession(loaded.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, FEEDS[0]
    )
    np.testing.assert_array_equal(got[0], ref)
    path = get_target("arm-cpu").package(
        load_proto(proto), tmp_path / "arm", PackageOptions(verify_samples=tuple(FEEDS))
    )
    assert path.exists()


def test_asymmetric_int16_activations_are_one_typed_line_on_arm_cpu(tmp_path) -> None:
    line = _cli_error(ms_int16(-3596), tmp_path, "-t", "arm-cpu")
    assert "zero point -3596" in line and "symmetric int16" in line
    assert not (tmp_path / "o").exists()


def test_matmulnbits_whose_scales_do_not_fit_its_shape_is_one_typed_line(tmp_path) -> None:
    k, n, block = 32, 8, 16
    packed = RNG.integers(0, 255, (n, k // block, block // 2), dtype=np.uint8)
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"], "flat"),
        helper.make_node("Slice", ["f", "st", "en", "ax"], ["a"], "slice"),
        helper.make_node(
            "MatMulNBits",
            ["a", "wq", "ws"],
            ["y"],
            "mm",
            domain="com.microsoft",
            K=k,
            N=n,
            bits=4,
            block_size=block,
        ),  # fmt: skip
    ]
    inits = [
        _init("st", np.int64([0])), _init("en", np.int64([k])), _init("ax", np.int64([1])),
        _init("wq", packed), _init("ws", np.ones((4, k), np.float32)),  # transposed: 128 values, not 16
    ]  # fmt: skip
    proto = _model(nodes, inits, [("", 17), ("com.microsoft", 1)], out_shape=(1, n))
    with pytest.raises(ModelError, match="weight scale holds 128 values"):
        load_proto(proto)
    assert "MatMulNBits node 'mm'" in _cli_error(proto, tmp_path, "-t", "intel-vpu")


def qonnx_and_its_qcdq() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Conv(Quant(x: int8), Quant(W: narrow int4, per channel)) -> Relu -> Quant(uint8), as brevitas'
    ``export_qonnx`` writes it, and the same as brevitas' ``export_onnx_qcdq`` (Q -> Clip -> DQ) writes it."""
    qonnx = "qonnx.custom_op.general"
    w_scale = (np.abs(W).reshape(6, -1).max(1) / 7).astype(np.float32)
    shared = [_init("w", W), _init("b", B)]
    inits = [*shared, _init("sx", np.float32(0.02)), _init("z0", np.float32(0)), _init("b8", np.float32(8)),
             _init("sw", w_scale.reshape(6, 1, 1, 1)), _init("b4", np.float32(4)), _init("sy", np.float32(0.03))]  # fmt: skip
    nodes = [
        helper.make_node("Quant", ["x", "sx", "z0", "b8"], ["xq"], "qx", domain=qonnx, signed=1, narrow=0,
                         rounding_mode="ROUND"),
        helper.make_node("Quant", ["w", "sw", "z0", "b4"], ["wq"], "qw", domain=qonnx, signed=1, narrow=1,
                         rounding_mode="ROUND"),
        helper.make_node("Conv", ["xq", "wq", "b"], ["c"], "conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], "relu"),
        helper.make_node("Quant", ["r", "sy", "z0", "b8"], ["y"], "qy", domain=qonnx, signed=0, narrow=0,
                         rounding_mode="ROUND"),
    ]  # fmt: skip
    qonnx_model = _model(nodes, inits, [("", 17), (qonnx, 1)])
    wq = np.clip(np.rint(W / w_scale.reshape(6, 1, 1, 1)), -7, 7).astype(np.int8)
    inits = [_init("wq8", wq), _init("sw", w_scale), _init("zw", np.zeros(6, np.int8)), _init("b", B),
             _init("sx", np.float32(0.02)), _init("zx", np.int8(0)), _init("sy", np.float32(0.03)),
             _init("zy", np.uint8(0))]  # fmt: skip
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq8"]),
        helper.make_node("DequantizeLinear", ["xq8", "sx", "zx"], ["xq"]),
        helper.make_node("DequantizeLinear", ["wq8", "sw", "zw"], ["wq"], axis=0),
        helper.make_node("Conv", ["xq", "wq", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
        helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]),
    ]
    return qonnx_model, _model(nodes, inits, [("", 17)])


def test_qonnx_quant_reads_as_the_qcdq_model_brevitas_writes(tmp_path) -> None:
    qonnx_model, qcdq = qonnx_and_its_qcdq()
    loaded = to_proto(load_proto(qonnx_model))
    assert not any(n.domain for n in loaded.graph.node)
    ours = ort.InferenceSession(loaded.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(qcdq.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in FEEDS:
        np.testing.assert_array_equal(ours.run(None, feed)[0], theirs.run(None, feed)[0])
    path = get_target("arm-cpu").package(
        load_proto(qonnx_model), tmp_path / "arm", PackageOptions(verify_samples=tuple(FEEDS))
    )
    assert path.exists()
