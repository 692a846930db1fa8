"""An LSTM whose ``Y`` nothing reads, behind a batch that folds to a constant only during preparation.

Silero VAD v6 as OpenVINO's exporter writes it (``silero_vad_openvino_16k.onnx``) reads only the LSTM's h / c.
onnx_ir's RemoveUnusedNodesPass makes the unread ``Y`` absent (its name ""), where shape inference no longer
reaches it, and its shape from the file's first inference (``[1, 1, unk, 128]``) stayed: every case was refused
as "tensor 'v' (output of LSTM ...) has no static shape". The model here has that pattern (the batch computed by
Shape / ConstantOfShape / ReduceSum / Concat / Reshape); it deploys and runs against onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from edgekit.cli.common import run_app
from edgekit.cli.main import app
from onnx import TensorProto, helper, numpy_helper
from tflite_files import run_tflite_file

HIDDEN = 4


def _lstm_unread_y() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = {
        "W": rng.standard_normal((1, 4 * HIDDEN, 8)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((1, 4 * HIDDEN, HIDDEN)).astype(np.float32) * 0.5,
        "zero": np.array([0], np.int64), "one": np.array([1], np.int64), "eight": np.array([8], np.int64),
    }  # fmt: skip
    one = numpy_helper.from_array(np.array([1], np.int64))
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Slice", ["s", "zero", "one"], ["b"]),
        helper.make_node("ConstantOfShape", ["b"], ["ones"], value=one),
        helper.make_node("ReduceSum", ["ones"], ["batch"], keepdims=1),
        helper.make_node("Concat", ["one", "batch", "eight"], ["seq_shape"], axis=0),
        helper.make_node("Reshape", ["x", "seq_shape"], ["steps"]),  # [1, batch, 8]: one step
        helper.make_node(
            "LSTM", ["steps", "W", "R", "", "", "h", "c"], ["Y", "hn", "cn"], hidden_size=HIDDEN
        ),
    ]

    def info(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    graph = helper.make_graph(
        nodes, "vad_like", [info("x", ["batch", 8]), info("h", [1, "batch", HIDDEN]), info("c", [1, "batch", HIDDEN])],
        [info("hn", [1, "batch", HIDDEN]), info("cn", [1, "batch", HIDDEN])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    )
    assert any(v.name == "Y" and v.type.tensor_type.shape.dim[2].dim_param for v in model.graph.value_info)
    return model


def test_unread_lstm_output_with_a_stale_shape_deploys(tmp_path, capsys):

    path = tmp_path / "vad_like.onnx"
    onnx.save(_lstm_unread_y(), path)
    args = ["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out"), "--input-shape", "x=1,8",
            "--input-shape", f"h=1,1,{HIDDEN}", "--input-shape", f"c=1,1,{HIDDEN}"]  # fmt: skip
    try:
        run_app(app, args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    assert code == 0, capsys.readouterr().err
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((1, 8)).astype(np.float32),
             "h": np.tanh(rng.standard_normal((1, 1, HIDDEN))).astype(np.float32),
             "c": rng.standard_normal((1, 1, HIDDEN)).astype(np.float32)}  # fmt: skip
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    got = run_tflite_file(tflite, feeds)
    np.testing.assert_allclose(got["hn"], expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["cn"], expected[1], rtol=1e-5, atol=1e-6)
