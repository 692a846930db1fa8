"""Model files and I/O forms as users hand them over (round 13f, ``benchmarks/zoo/probe_file_forms.py``):
external data, bfloat16, odd inputs / outputs and graph hygiene, each against onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from cli_in_process import cli_text
from edgekit.core.errors import ModelError
from edgekit.core.model import load_model, to_proto
from onnx import TensorProto, helper, numpy_helper
from ort_reference import run_node_by_node as ort_run


def small_cnn(dtype: int = TensorProto.FLOAT, seed: int = 0) -> onnx.ModelProto:
    """Conv / Relu / GlobalAveragePool / Flatten / Gemm on [1, 3, 8, 8], weights in ``dtype``."""
    rng = np.random.default_rng(seed)

    def init(name: str, array: np.ndarray) -> onnx.TensorProto:
        t = numpy_helper.from_array(array.astype(np.float32), name)
        if dtype == TensorProto.BFLOAT16:
            t = helper.make_tensor(name, dtype, array.shape, array.astype(np.float32).ravel())
        return t

    inits = [
        init("w", rng.normal(0, 0.3, (8, 3, 3, 3))),
        init("b", rng.normal(0, 0.1, (8,))),
        init("fc_w", rng.normal(0, 0.3, (4, 8))),
        init("fc_b", rng.normal(0, 0.1, (4,))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", dtype, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", dtype, [1, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def image(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (1, 3, 8, 8)).astype(np.float32)


# ------------------------------------------------------------------------------------------- external data


def test_a_missing_external_data_file_is_named_in_one_typed_line(tmp_path, capsys):
    path = tmp_path / "model.onnx"
    onnx.save(small_cnn(), str(path), save_as_external_data=True, size_threshold=0, location="w.bin")
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ModelError, match=r"external weights file 'w.bin' is missing beside it \(4 tensor"):
        load_model(path)
    code, text = cli_text(capsys, "deploy", str(path), "--target", "arm-cpu", "-o", str(tmp_path / "out"))
    assert code == 2 and "internal error" not in text
    assert [line for line in text.splitlines() if line.startswith("error:")] == [
        f"error: model {path}: its external weights file 'w.bin' is missing beside it (4 tensor(s), e.g. 'w'): "
        "copy the data file(s) with the .onnx"
    ]
    assert not (tmp_path / "out").exists()


def test_external_data_in_a_sub_folder_loads_from_another_working_directory(tmp_path, monkeypatch):
    source = small_cnn()
    folder = tmp_path / "model"
    (folder / "weights").mkdir(parents=True)
    onnx.save(small_cnn(), str(folder / "m.onnx"), save_as_external_data=True, size_threshold=0,
              location="weights/w.bin")  # fmt: skip
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model = load_model("../model/m.onnx")
    (expected,) = ort_run(source, {"x": image()})
    (got,) = ort_run(to_proto(model), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------- bfloat16


def test_a_bfloat16_model_loads_as_the_float32_model_of_its_weights(tmp_path):
    """torch's export after ``model.to(torch.bfloat16)``: a bfloat16 Conv / Gemm, which ONNX defines only from
    opset 22 (onnxruntime cannot run the file). Its bfloat16 weights widen exactly to float32: the reference is
    the float32 model of the same (bfloat16-rounded) weights."""
    half = small_cnn(TensorProto.BFLOAT16)
    path = tmp_path / "bf16.onnx"
    onnx.save(half, str(path))
    messages: list[str] = []
    model = load_model(path, messages=messages)
    assert messages[0] == (
        "bfloat16 model: computed in float32 (its bfloat16 weights widened exactly); input(s) x are float32"
    )
    reference = small_cnn()
    for t, h in zip(reference.graph.initializer, half.graph.initializer, strict=True):
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(h).astype(np.float32), t.name))
    (expected,) = ort_run(reference, {"x": image()})
    (got,) = ort_run(to_proto(model), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------- inputs / outputs


def test_an_input_with_no_shape_takes_the_input_shape_given(tmp_path):
    source = small_cnn()
    source.graph.input[0].type.tensor_type.ClearField("shape")
    path = tmp_path / "m.onnx"
    onnx.save(source, str(path))
    with pytest.raises(ModelError, match=r"input 'x' has no shape; pass --input-shape x=D0,D1,\.\.\."):
        load_model(path)
    model = load_model(path, input_shapes={"x": (1, 3, 8, 8)})
    assert list(model.graph.inputs[0].shape) == [1, 3, 8, 8]
    (expected,) = ort_run(small_cnn(), {"x": image()})
    (got,) = ort_run(to_proto(model), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def run_tflite(path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The .tflite at ``path`` in LiteRT through its signature (inputs and outputs by name)."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner()
    return runner(**feeds)


@pytest.mark.parametrize("target", ["arm-cpu fp32", "arm-cpu int8", "nnapi"])
def test_a_graph_output_that_is_a_graph_input_keeps_the_inputs_name(tmp_path, capsys, target):
    """An output that is the graph input itself (onnxruntime returns the fed tensor): the TFLite input kept its
    name (the converter renamed it 'x_internal', and verification found no such input), the QDQ model too (the
    quantizer renamed it 'x_float', and calibration found none)."""
    source = small_cnn()
    source.graph.output.append(source.graph.input[0])
    path, data = tmp_path / "m.onnx", tmp_path / "calib.npz"
    onnx.save(source, str(path))
    np.savez(data, x=np.random.default_rng(3).normal(0, 1, (8, 1, 3, 8, 8)).astype(np.float32))
    name, *precision = target.split()
    args = ["--precision", precision[0]] if precision else []
    if target != "arm-cpu fp32":
        args += ["--calib", str(data)]
    code, text = cli_text(capsys, "deploy", str(path), "--target", name, "-o", str(tmp_path / "out"), *args)
    assert code == 0, text
    x = image()
    feeds = {"x": x.transpose(0, 2, 3, 1)}  # the bundle's image input is NHWC
    got = run_tflite(tmp_path / "out" / name / "model.tflite", feeds)
    assert sorted(got) == ["x", "y"]
    np.testing.assert_array_equal(got["x"], feeds["x"])
    (expected,) = ort_run(small_cnn(), {"x": x})
    y = got["y"].astype(np.float32)
    if target == "nnapi":  # int8 output: its scale and zero point from the bundle's manifest
        spec = json.loads((tmp_path / "out" / name / "manifest.json").read_text())["outputs"][0]
        y = (y - spec["zero_point"]) * spec["scale"]
    assert np.abs(y - expected).max() <= (1e-4 if target == "arm-cpu fp32" else 0.05) * np.ptp(expected)


# ---------------------------------------------------------------------------------------------- graph hygiene


def test_nodes_written_out_of_order_are_sorted_before_shape_inference(tmp_path):
    """Some editing tools write nodes unsorted (onnxruntime sorts them itself); onnx's shape inference read them
    in order and refused the Gemm ('Input 0 expected to have type but instead is null')."""
    source = small_cnn()
    nodes = list(source.graph.node)
    del source.graph.node[:]
    source.graph.node.extend(reversed(nodes))
    path = tmp_path / "m.onnx"
    onnx.save(source, str(path))
    model = load_model(path, prepare=False)
    assert [n.op_type for n in model.graph] == ["Conv", "Relu", "GlobalAveragePool", "Flatten", "Gemm"]
    (expected,) = ort_run(source, {"x": image()})
    (got,) = ort_run(to_proto(load_model(path)), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def with_batchnorm(training_mode: int, opset: int = 17) -> onnx.ModelProto:
    """small_cnn with a BatchNormalization after the Conv (``training_mode`` set, only Y read) at ``opset``."""
    model = small_cnn()
    g = model.graph
    rng = np.random.default_rng(5)
    for name, value in (("s", 1 + 0.2 * rng.normal(size=8)), ("bb", 0.1 * rng.normal(size=8)),
                        ("m", 0.3 * rng.normal(size=8)), ("v", 0.5 + rng.random(8))):  # fmt: skip
        g.initializer.append(numpy_helper.from_array(value.astype(np.float32), name))
    nodes = list(g.node)
    nodes[1].input[0] = "n"
    outputs = ["n", "running_mean", "running_var"] if training_mode else ["n"]  # unread, as torch writes them
    bn = helper.make_node(
        "BatchNormalization", ["c", "s", "bb", "m", "v"], outputs, training_mode=training_mode
    )
    del g.node[:]
    g.node.extend([nodes[0], bn, *nodes[1:]])
    model.opset_import[0].version = opset
    return model


@pytest.mark.parametrize("opset", [17, 18])
def test_a_training_mode_batchnorm_of_opset_14_on_normalises_with_the_batch_statistics(tmp_path, opset):
    """torch's ``training=TrainingMode.PRESERVE`` export of a model left in train mode: BatchNormalization
    ``training_mode=1`` normalises with its input's statistics (onnxruntime does so); edgekit folded the running
    statistics into the Conv instead."""
    source = with_batchnorm(1, opset)
    path = tmp_path / "m.onnx"
    onnx.save(source, str(path))
    (expected,) = ort_run(source, {"x": image()})
    (eval_mode,) = ort_run(with_batchnorm(0, opset), {"x": image()})
    assert np.abs(expected - eval_mode).max() > 0.1 * np.ptp(expected)  # the two modes differ on this model
    (got,) = ort_run(to_proto(load_model(path)), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_training_mode_dropout_is_refused_in_one_line(tmp_path, capsys):
    source = small_cnn()
    g = source.graph
    g.initializer.extend([numpy_helper.from_array(np.array(0.2, np.float32), "ratio"),
                          numpy_helper.from_array(np.array(True), "training")])  # fmt: skip
    g.node[-1].output[0] = "pre"
    g.node.append(helper.make_node("Dropout", ["pre", "ratio", "training"], ["y"], name="drop"))
    path = tmp_path / "m.onnx"
    onnx.save(source, str(path))
    code, text = cli_text(capsys, "deploy", str(path), "--target", "arm-cpu", "-o", str(tmp_path / "out"))
    assert code == 2
    assert [line for line in text.splitlines() if line.startswith("error:")] == [
        "error: Dropout 'drop' runs in training mode (its training_mode input is true: a random output on every "
        "run); export the model after model.eval()"
    ]
    g.initializer[-1].CopyFrom(numpy_helper.from_array(np.array(False), "training"))
    onnx.save(source, str(path))  # inference mode: the Dropout is its input
    (expected,) = ort_run(source, {"x": image()})
    (got,) = ort_run(to_proto(load_model(path)), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
