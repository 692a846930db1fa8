"""A model whose image input is uint8 (tf2onnx exports, some detectors): Cast, Transpose, Div, Sub, then the
convolutions. The integer input is data, not an attention mask: its path is quantized like a float input's, the
Cast's output on its integer grid (scale 1: exact in 8 bits), and every target takes the model."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.api import quantize_model
from edgekit.deployment import deploy
from edgekit.device_agents.bundle import read_bundle
from edgekit.device_agents.runtimes import open_runner
from edgekit.device_eval import from_device, to_device
from onnx import TensorProto, numpy_helper
from onnx import helper as oh


def uint8_image_model(path) -> None:
    rng = np.random.default_rng(0)

    def const(name, array):
        return numpy_helper.from_array(np.asarray(array, np.float32), name)

    inits = [
        const("w1", rng.normal(0, 0.2, (16, 3, 3, 3))),
        const("b1", rng.normal(0, 0.1, 16)),
        const("w2", rng.normal(0, 0.1, (16, 16, 3, 3))),
        const("b2", rng.normal(0, 0.1, 16)),
        const("w3", rng.normal(0, 0.1, (8, 16, 3, 3))),
        const("b3", np.zeros(8)),
        const("k255", 255.0),
        const("half", 0.5),
    ]
    nodes = [
        oh.make_node("Cast", ["image"], ["f"], to=TensorProto.FLOAT),
        oh.make_node("Transpose", ["f"], ["t"], perm=[0, 3, 1, 2]),
        oh.make_node("Div", ["t", "k255"], ["d"]),
        oh.make_node("Sub", ["d", "half"], ["s"]),
        oh.make_node("Conv", ["s", "w1", "b1"], ["y1"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["y1"], ["r1"]),
        oh.make_node("Conv", ["r1", "w2", "b2"], ["y2"], pads=[1, 1, 1, 1]),
        oh.make_node("Relu", ["y2"], ["r2"]),
        oh.make_node("Conv", ["r2", "w3", "b3"], ["out"], pads=[1, 1, 1, 1]),
    ]
    graph = oh.make_graph(
        nodes,
        "uint8_image",
        [oh.make_tensor_value_info("image", TensorProto.UINT8, [1, 24, 24, 3])],
        [oh.make_tensor_value_info("out", TensorProto.FLOAT, [1, 8, 24, 24])],
        inits,
    )
    onnx.save(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 13)]), path)


@pytest.fixture(scope="module")
def uint8_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("u8")
    uint8_image_model(folder / "model.onnx")
    rng = np.random.default_rng(1)
    # pixel levels below 255 only: an observed range [0, 254] put level 127 on a half step (127 x 255/254)
    np.savez(folder / "calib.npz", image=rng.integers(0, 255, (12, 1, 24, 24, 3)).astype(np.uint8))
    return folder


def test_a_uint8_image_path_is_quantized_on_its_integer_grid(uint8_model, tmp_path) -> None:
    result = quantize_model(uint8_model / "model.onnx", uint8_model / "calib.npz", output=tmp_path / "q.onnx")
    qdq = onnx.load(tmp_path / "q.onnx")
    inits = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
    # before: every node from the Cast to the first Conv was kept float as "attention-mask arithmetic"
    assert [n.op_type for n in qdq.graph.node if n.op_type == "Conv"] == ["Conv"] * 3
    convs_read = [n.input[0] for n in qdq.graph.node if n.op_type == "Conv"]
    assert all(name.endswith("_dequantized") for name in convs_read), convs_read
    assert float(inits["f_scale"]) == 1.0 and int(inits["f_zero_point"]) == 0
    kept = [(k["op_type"], k["reason"]) for k in result.report["quantization"]["float_ops"]]
    assert [op for op, _ in kept] == ["Cast"] and "mask" not in kept[0][1]
    # the QDQ model is the float model within int8 noise (onnxruntime both)
    images = np.load(uint8_model / "calib.npz")["image"]
    fp32 = ort.InferenceSession(str(uint8_model / "model.onnx"))
    quant = ort.InferenceSession(str(tmp_path / "q.onnx"))
    a = np.concatenate([fp32.run(None, {"image": x})[0] for x in images])
    b = np.concatenate([quant.run(None, {"image": x})[0] for x in images])
    cosine = float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))
    assert cosine > 0.999, cosine


@pytest.mark.parametrize("target", ["arm-cpu", "nnapi", "intel-vpu"])
def test_a_uint8_image_model_deploys_int8_to_every_target(uint8_model, target, tmp_path) -> None:
    result = deploy(
        uint8_model / "model.onnx", target, output=tmp_path / "out", calib=uint8_model / "calib.npz"
    )
    (bundle_result,) = result.bundles
    assert bundle_result.precision == "int8" and bundle_result.verification["passed"]
    image = np.load(uint8_model / "calib.npz")["image"][0]
    with read_bundle(bundle_result.path) as bundle:
        # the bundle's input is the model's own (OpenVINO gave its uint8 Parameter the name of the folded
        # FakeQuantize's tensor, 'f_quantized', and the host and agent runners asked for that)
        assert [spec.name for spec in bundle.manifest.inputs] == ["image"]
        (spec_in,), (spec_out,) = bundle.manifest.inputs, bundle.manifest.outputs
        runner = open_runner(bundle)
        (raw,), _ = runner.run([to_device(image, spec_in)])
        got = from_device(raw, spec_out, (1, 8, 24, 24))
    expected = ort.InferenceSession(str(uint8_model / "model.onnx")).run(None, {"image": image})[0]
    cosine = float((got * expected).sum() / np.linalg.norm(got) / np.linalg.norm(expected))
    assert cosine > 0.995, cosine


def test_a_uint8_image_model_is_evaluated_on_the_device(uint8_model, tmp_path) -> None:
    # the device evaluation quantized every uint8 input as an int8 tensor (TypeError on its missing scale)
    result = deploy(
        uint8_model / "model.onnx",
        ["arm-cpu", "intel-vpu"],
        output=tmp_path / "out",
        calib=uint8_model / "calib.npz",
        eval=uint8_model / "calib.npz",
        devices="local",
    )
    assert result.ok and len(result.evaluations) == 2
    for target in result.report["targets"]:
        assert target["evaluation"]["samples"] == 12
        assert target["evaluation"]["outputs"]["out"]["cosine"] > 0.995, target["target"]
