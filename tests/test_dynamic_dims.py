"""Dynamic dimensions: Paddle-style ``dim_value: -1``, and a dynamic batch fixed to 1 (said once)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_in_process import cli
from edgekit.device_agents.bundle import read_bundle
from onnx import TensorProto, helper, numpy_helper

SHAPE = (1, 3, 8, 12)


def _cnn(batch, height, width) -> onnx.ModelProto:
    """Conv-Relu-Conv-GlobalAveragePool; the dims of the input, the intermediates and the output as given."""
    rng = np.random.default_rng(0)

    def info(name, channels, h=height, w=width):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, channels, h, w])

    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((5, 4, 1, 1)).astype(np.float32) * 0.3, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
        helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="pool"),
    ]
    graph = helper.make_graph(
        nodes, "paddle_like", [info("x", 3)], [info("y", 5, 1, 1)], [w1, w2],
        value_info=[info("c1", 4), info("r1", 4), info("c2", 5)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("dyn")
    paths = {"paddle": folder / "paddle.onnx", "batch": folder / "batch.onnx", "calib": folder / "calib.npy"}
    onnx.save(_cnn(-1, -1, -1), paths["paddle"])
    onnx.save(_cnn("N", 8, 12), paths["batch"])
    calib = np.random.default_rng(1).standard_normal((6, *SHAPE)).astype(np.float32)
    np.save(paths["calib"], calib)
    return paths


def test_paddle_minus_one_dims_need_input_shape_and_say_so(files, tmp_path, capsys):
    """Without data that shows the sizes (an fp32 deploy takes none), a dynamic dim past the batch is asked for."""
    code, _, err = cli(capsys, "deploy", str(files["paddle"]), "-t", "arm-cpu", "-o", str(tmp_path / "out"))
    assert code == 2
    assert err.strip().splitlines() == [
        "error: input 'x' has dynamic dimensions ['?', 3, '?', '?']; pass --input-shape x=N,3,N,N"
    ]
    assert not (tmp_path / "out").exists()


def test_dynamic_dims_take_the_calibration_data_sizes_and_say_so(files, tmp_path, capsys):
    """An exported model's dynamic axes (here H and W, Paddle's -1) take the sizes of the .npy/.npz samples."""
    out = tmp_path / "q.onnx"
    code, _, err = cli(
        capsys, "quantize", str(files["paddle"]), "--calib", str(files["calib"]), "-o", str(out)
    )
    assert code == 0, err
    note = "note: input 'x': dynamic dimensions fixed to [1, 3, 8, 12] from calib.npy; pass --input-shape to choose"
    assert note in err.splitlines(), err
    quantized = onnx.load(out)
    assert [d.dim_value for d in quantized.graph.input[0].type.tensor_type.shape.dim] == list(SHAPE)
    x = np.load(files["calib"])[0]
    ref = ort.InferenceSession(str(files["paddle"]), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, atol=0.1 * float(np.abs(ref).max()))
    # A deploy reads them the same way (and its bundle verifies); samples stored without the batch dim too.
    folder = tmp_path / "nobatch"
    folder.mkdir()
    np.savez(folder / "calib.npz", x=np.load(files["calib"])[:, 0])
    code, _, err = cli(capsys, "deploy", str(files["paddle"]), "-t", "arm-cpu", "--calib",
                       str(folder / "calib.npz"), "-o", str(tmp_path / "out"))  # fmt: skip
    assert code == 0, err
    assert "dynamic dimensions fixed to [1, 3, 8, 12] from calib.npz" in err
    assert read_bundle(tmp_path / "out" / "arm-cpu").manifest.verification["passed"]


def test_data_of_another_shape_leaves_the_question(files, tmp_path, capsys):
    """Samples whose rank does not fit the input do not guess: the dims are still asked for."""
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 8, 12), np.float32))
    code, _, err = cli(
        capsys, "quantize", str(files["paddle"]), "--calib", str(bad), "-o", str(tmp_path / "q.onnx")
    )
    assert code == 2
    assert "pass --input-shape x=N,3,N,N" in err and "fixed to" not in err


def test_paddle_minus_one_dims_quantize_with_input_shape(files, tmp_path, capsys):
    out = tmp_path / "q.onnx"
    code, _, err = cli(
        capsys, "quantize", str(files["paddle"]), "--calib", str(files["calib"]), "-o", str(out),
        "--input-shape", "x=" + ",".join(map(str, SHAPE)),
    )  # fmt: skip
    assert code == 0, err
    quantized = onnx.load(out)
    dims = [d.dim_value for d in quantized.graph.input[0].type.tensor_type.shape.dim]
    assert dims == list(SHAPE)
    # The QDQ file runs, and stays close to the float model (onnxruntime for both).
    x = np.load(files["calib"])[0]
    ref = ort.InferenceSession(str(files["paddle"]), providers=["CPUExecutionProvider"]).run(None, {"x": x})[
        0
    ]
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == ref.shape == (1, 5, 1, 1)
    np.testing.assert_allclose(got, ref, atol=0.1 * float(np.abs(ref).max()))


def test_paddle_minus_one_dims_deploy_with_input_shape(files, tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = cli(
        capsys, "deploy", str(files["paddle"]), "-t", "arm-cpu", "-t", "intel-vpu", "--calib",
        str(files["calib"]), "-o", str(out), "--input-shape", "x=" + ",".join(map(str, SHAPE)),
    )  # fmt: skip
    assert code == 0, err
    for target in ("arm-cpu", "intel-vpu"):
        manifest = read_bundle(out / target).manifest
        assert manifest.verification["passed"]
        assert sorted(manifest.inputs[0].shape) == sorted(SHAPE)  # NHWC for arm-cpu
    assert "batch fixed" not in err  # the shape was given


def test_dynamic_batch_is_fixed_to_one_and_said_once(files, tmp_path, capsys):
    code, out, err = cli(
        capsys, "deploy", str(files["batch"]), "-t", "arm-cpu", "-t", "intel-vpu", "--calib",
        str(files["calib"]), "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert code == 0, err
    note = "note: input 'x': batch fixed to 1; pass --input-shape to choose"
    assert err.count("batch fixed to 1") == 1 and note in err.splitlines()
    assert "batch fixed" not in out
    assert read_bundle(tmp_path / "out" / "arm-cpu").manifest.inputs[0].shape[0] == 1


def test_inspect_shows_minus_one_as_dynamic_and_checks_with_input_shape(files):
    from edgekit.inspect import inspect_model

    report = inspect_model(files["paddle"], {"x": SHAPE}, targets=["arm-cpu"])
    assert report.inputs[0].shape == ("?", 3, "?", "?")
    assert report.targets[0].not_checked is None


def _paddle_flatten_op11() -> onnx.ModelProto:
    """Conv, GlobalAveragePool, then Paddle's flatten (Shape/Slice/Concat/Reshape) at opset 11, every dynamic dim
    written ``-1`` in the value_info too, as older paddle2onnx releases do."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3, "w")
    consts = [
        numpy_helper.from_array(np.array([0], np.int64), "start"),
        numpy_helper.from_array(np.array([1], np.int64), "end"),
        numpy_helper.from_array(np.array([-1], np.int64), "rest"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c"], ["p"]),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Slice", ["s", "start", "end"], ["batch"]),
        helper.make_node("Concat", ["batch", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["p", "target"], ["y"]),
    ]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes, "paddle_flatten", [info("x", TensorProto.FLOAT, [-1, 3, -1, -1])],
        [info("y", TensorProto.FLOAT, [-1, 6])], [w, *consts],
        value_info=[
            info("c", TensorProto.FLOAT, [-1, 6, -1, -1]), info("p", TensorProto.FLOAT, [-1, 6, 1, 1]),
            info("s", TensorProto.INT64, [-1]), info("batch", TensorProto.INT64, [-1]),
            info("target", TensorProto.INT64, [-1]),
        ],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6)


def test_minus_one_in_value_info_of_an_opset_11_model_deploys(tmp_path):
    """onnx's version converter (opset 11 -> 19) aborted the process on the Shape output's ``-1`` dim."""
    import subprocess
    import sys

    model = _paddle_flatten_op11()
    path = tmp_path / "paddle11.onnx"
    onnx.save(model, path)
    result = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "deploy", str(path), "-t", "arm-cpu", "--precision", "fp32",
         "-o", str(tmp_path / "out"), "--input-shape", "x=1,3,8,12"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    manifest = read_bundle(tmp_path / "out" / "arm-cpu").manifest
    assert manifest.verification["passed"]
    # the .tflite against onnxruntime on the model with its -1 dims left unknown
    from ai_edge_litert.interpreter import Interpreter

    for v in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        for d in v.type.tensor_type.shape.dim:
            d.ClearField("dim_value")
    x = np.random.default_rng(4).standard_normal((1, 3, 8, 12)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    interpreter = Interpreter(model_path=str(tmp_path / "out" / "arm-cpu" / "model.tflite"))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    interpreter.set_tensor(inp["index"], x.transpose(0, 2, 3, 1) if inp["shape"][-1] == 3 else x)
    interpreter.invoke()
    np.testing.assert_allclose(interpreter.get_tensor(out["index"]), expected, rtol=1e-5, atol=1e-5)
