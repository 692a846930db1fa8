"""int8 activations re-expressed as uint8 for OpenVINO (edgekit.core.unsigned): the same values, checked on
onnxruntime, and an intel-vpu INT8 IR whose convolutions then run u8 x i8 (the path OpenVINO runs right)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest
from cnn_models import qdq_with_onnxruntime, tiny_cnn, unet_merge
from edgekit.core.model import load_proto
from edgekit.core.unsigned import unsigned_activations
from edgekit.device_agents.bundle import read_bundle
from edgekit.targets.base import PackageOptions, get_target
from onnx import TensorProto, helper, numpy_helper
from ort_reference import node_by_node


def chains(zero_point: int, scale: float) -> onnx.ModelProto:
    """x -> Q(int8) -> Reshape -> MaxPool -> DQ -> Conv (int8 weights) -> Q(int8) -> DQ -> y, and a third int8
    Q whose values leave the graph (output ``q``): that one must stay int8."""
    rng = np.random.default_rng(zero_point + 200)
    w = rng.integers(-127, 128, (4, 2, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.array(scale, np.float32), "s"),
        numpy_helper.from_array(np.array(zero_point, np.int8), "z"),  # shared by activations and the weight
        numpy_helper.from_array(np.array([1, 2, 8, 8], np.int64), "shape"),
        numpy_helper.from_array(w, "wq"),
        numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.05, np.float32), "s2"),
        numpy_helper.from_array(np.array(-7, np.int8), "z2"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("Reshape", ["xq", "shape"], ["xr"]),
        helper.make_node("MaxPool", ["xr"], ["xp"], kernel_shape=[2, 2], strides=[1, 1]),
        helper.make_node("DequantizeLinear", ["xp", "s", "z"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
        helper.make_node("Conv", ["xd", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "s2", "z2"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "s2", "z2"], ["y"]),
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
    ]
    graph = helper.make_graph(
        nodes,
        "chains",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 7, 7]),
            helper.make_tensor_value_info("q", TensorProto.INT8, [1, 128]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


@pytest.mark.parametrize(("zero_point", "scale"), [(0, 0.02), (-128, 0.01), (127, 0.03), (-5, 0.015)])
def test_the_same_values_on_the_uint8_grid(zero_point: int, scale: float) -> None:
    model = chains(zero_point, scale)
    shifted = unsigned_activations(model)
    onnx.checker.check_model(shifted, full_check=True)
    inits = {t.name: t for t in shifted.graph.initializer}
    by_output = {n.output[0]: n for n in shifted.graph.node}
    for name in ("xq", "xd", "cq", "y"):  # the two activation chains: uint8, zero point + 128
        zp = numpy_helper.to_array(inits[by_output[name].input[2]])
        assert zp.dtype == np.uint8
    assert int(numpy_helper.to_array(inits[by_output["xq"].input[2]])) == zero_point + 128
    for name in ("q", "w"):  # a value leaving the graph, and the weight: int8 as given
        assert inits[by_output[name].input[2]].data_type == TensorProto.INT8
    x = np.random.default_rng(1).normal(0, 2.5, (16, 1, 128)).astype(np.float32)
    before, after = node_by_node(model), node_by_node(shifted)
    for sample in x:  # clipping at both ends included (the inputs reach far beyond +-128 steps)
        expected, got = before.run(None, {"x": sample}), after.run(None, {"x": sample})
        for e, g in zip(expected, got, strict=True):
            assert e.dtype == g.dtype and np.array_equal(e, g)


def test_a_model_without_int8_activations_is_returned_as_is() -> None:
    model = tiny_cnn()
    assert unsigned_activations(model) is model


def _runtime_precisions(xml: Path) -> set[str]:
    core = ov.Core()
    compiled = core.compile_model(core.read_model(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return {
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in compiled.get_runtime_model().get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) == "Convolution"
    }


def test_an_int8_activation_model_deploys_to_intel_vpu_on_uint8(tmp_path: Path) -> None:
    """onnxruntime's QDQ with int8 activations (as tf2onnx's conversions of int8 TFLite files have them): the
    intel-vpu IR's convolutions run u8 (they ran i8, the path that took SqueezeNet from 68 % to 51 % top-1 on
    VNNI machines), no warning is left, and the IR gives onnxruntime's answers on the file as given."""
    float_model = tiny_cnn(softmax=False)
    qdq = qdq_with_onnxruntime(float_model, tmp_path, activations="int8")
    target = get_target("intel-vpu")
    copy = onnx.ModelProto()
    copy.CopyFrom(qdq)
    assert (
        target.check(load_proto(copy)) == []
    )  # the int8-activations warning is gone: nothing is left on int8
    copy.CopyFrom(qdq)
    bundle = target.package(load_proto(copy), tmp_path / "b", PackageOptions(precision="int8"))
    assert _runtime_precisions(bundle / "model.xml") == {"u8"}
    assert read_bundle(bundle).manifest.verification["passed"]
    session = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(bundle / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    last = next(
        n
        for n in qdq.graph.node
        if n.op_type == "DequantizeLinear" and n.output[0] == qdq.graph.output[0].name
    )
    step = float(inits[last.input[1]])
    for x in np.random.default_rng(3).standard_normal((6, 1, 3, 16, 16)).astype(np.float32):
        ref = session.run(None, {"x": x})[0]
        got = compiled({"x": x})[compiled.output(0)]
        assert np.abs(got - ref).max() <= 1.001 * step


def test_a_unet_merge_with_int8_activations_runs_right_on_intel_vpu(tmp_path: Path) -> None:
    """A Concat of asymmetric int8 activations: OpenVINO runs the file as given 63 output steps off onnxruntime on
    VNNI machines without AMX (tests/test_portable_qdq.py; the zoo U-Net at cosine 0.62). The intel-vpu IR of the
    same file runs it on uint8 and gives onnxruntime's values within a step, on any CPU."""
    from edgekit import QuantizeOptions, quantize_model

    source, qdq_path = tmp_path / "merge.onnx", tmp_path / "merge.int8.onnx"
    onnx.save(unet_merge(), source)
    x = np.random.default_rng(0).normal(0, 1, (8, 4, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    quantize_model(source, tmp_path / "x.npy", options=QuantizeOptions(activations="int8"), output=qdq_path)
    qdq = onnx.load(qdq_path)
    bundle = get_target("intel-vpu").package(
        load_proto(onnx.load(qdq_path)), tmp_path / "b", PackageOptions()
    )
    assert _runtime_precisions(bundle / "model.xml") == {"u8"}
    core = ov.Core()
    compiled = core.compile_model(
        core.read_model(bundle / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )
    session = node_by_node(qdq)
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    (last,) = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y"]
    step = float(inits[last.input[1]])
    for sample in x:
        ref = session.run(None, {"x": sample[None]})[0]
        got = compiled({"x": sample[None]})[compiled.output(0)]
        assert np.abs(got - ref).max() <= 1.001 * step
