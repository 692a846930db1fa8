"""A Loop whose trip count folds to a constant is unrolled (``edgekit.core.loops``).

torch writes ``nn.EmbeddingBag`` as an ONNX Loop over the bags (Wide & Deep's wide part, DLRM's multi-hot
features): declined as control flow before, in every case. With fixed-size bags (a 2-D id input) the trip count is
the batch and every slice bound a constant once the shapes are fixed: the unrolled graph is static and deploys.
Bags read with an ``offsets`` input have sizes that depend on its values: still refused, in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.cli.common import run_app
from edgekit.cli.main import app
from onnx import TensorProto, helper, numpy_helper
from tflite_files import run_tflite_file

#: Written by :func:`_embedding_bags` (``python tests/test_loop_unroll.py``; torch is not in CI), committed: 7 KB
BAGS = Path(__file__).parent / "data" / "embedding_bag_loops.onnx"


def _embedding_bags(path: Path) -> None:
    """ids [2, 4] (two bags of four ids) -> EmbeddingBag sum, mean and max (each its own Loop), concatenated with
    a Linear of the dense features x [2, 3]; torch 2.x, TorchScript exporter, opset 13."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Bags(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bags = nn.ModuleList([nn.EmbeddingBag(40, 6, mode=m) for m in ("sum", "mean", "max")])
            self.dense = nn.Linear(3, 6)

        def forward(self, ids, x):
            return torch.cat([b(ids) for b in self.bags] + [self.dense(x)], 1)

    ids, x = torch.randint(0, 40, (2, 4)), torch.randn(2, 3)
    torch.onnx.export(
        Bags().eval(), (ids, x), str(path), dynamo=False, opset_version=13, input_names=["ids", "x"],
        output_names=["y"], dynamic_axes={"ids": {0: "batch"}, "x": {0: "batch"}, "y": {0: "batch"}},
    )  # fmt: skip


def _deploy(args: list[str], capsys) -> tuple[int, str]:
    try:
        run_app(app, args)
        return 0, capsys.readouterr().err
    except SystemExit as exc:
        return int(exc.code or 0), capsys.readouterr().err


def test_embedding_bags_deploy_unrolled(tmp_path, capsys):
    """Three EmbeddingBag Loops (sum / mean / max) at batch 3: the .tflite gives onnxruntime's rows."""
    assert sum(n.op_type == "Loop" for n in onnx.load(str(BAGS)).graph.node) == 3
    out = tmp_path / "out"
    code, err = _deploy(
        ["deploy", str(BAGS), "-t", "arm-cpu", "--precision", "fp32", "-o", str(out),
         "--input-shape", "ids=3,4", "--input-shape", "x=3,3"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    (tflite,) = (out / "arm-cpu").glob("*.tflite")
    session = ort.InferenceSession(str(BAGS), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for _ in range(4):
        feeds = {
            "ids": rng.integers(0, 40, (3, 4)).astype(np.int64),
            "x": rng.standard_normal((3, 3), np.float32),
        }
        (expected,) = session.run(None, feeds)
        tfl_feeds = {**feeds, "ids": feeds["ids"].astype(np.int32)}  # TFLite's ids are int32
        got = run_tflite_file(tflite, tfl_feeds)["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _carried_loop(trips_from_input: bool) -> onnx.ModelProto:
    """x [2, 3] -> Loop over the rows of x (trip count Shape(x)[0], or the value of the input ``n``): a carried
    running sum ``acc = acc * 0.5 + x[i]`` and a scan output ``acc * i``; outputs the final acc and the scan."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
            helper.make_node("Mul", ["acc_in", "half"], ["decayed"]),
            helper.make_node("Add", ["decayed", "row"], ["acc_out"]),
            helper.make_node("Cast", ["i"], ["fi"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["acc_out", "fi"], ["scan"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [3])],
    )  # fmt: skip
    trips = (
        [helper.make_node("Cast", ["n"], ["trips"], to=TensorProto.INT64)]
        if trips_from_input
        else [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["trips"]),
        ]
    )
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if trips_from_input:
        inputs.append(helper.make_tensor_value_info("n", TensorProto.FLOAT, []))
    graph = helper.make_graph(
        [*trips, helper.make_node("Loop", ["trips", "", "acc0"], ["acc", "steps"], name="loop", body=body)],
        "carried",
        inputs,
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("steps", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half"),
         numpy_helper.from_array(np.array([1.0, -2.0, 0.25], np.float32), "acc0")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def test_a_loop_with_carried_values_and_a_scan_output_unrolls(tmp_path, capsys):
    path = tmp_path / "carried.onnx"
    onnx.save(_carried_loop(False), path)
    code, err = _deploy(["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out")], capsys)
    assert code == 0, err
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = run_tflite_file(tflite, {"x": x})
    np.testing.assert_allclose(got["acc"], expected[0], rtol=1e-6)
    np.testing.assert_allclose(got["steps"], expected[1], rtol=1e-6)


@pytest.mark.parametrize("case", ["trips", "offsets"])
def test_a_data_dependent_loop_is_refused_in_one_line(tmp_path, capsys, case):
    """A trip count read from an input's value stays a Loop (declined); EmbeddingBag bags given by an ``offsets``
    input unroll, but each bag's size is then the offsets' values: refused as a shape computed at run time."""
    if case == "trips":
        path = tmp_path / "trips.onnx"
        onnx.save(_carried_loop(True), path)
        args, expected = ["--input-shape", "x=2,3"], "error: Loop node 'loop': control flow (If/Loop/Scan)"
    else:
        path = Path(__file__).parent / "data" / "embedding_bag_offsets.onnx"
        args, expected = [], "has no static shape"
    code, err = _deploy(["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out"), *args], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error:") and expected in lines[-1], err
    if case == "offsets":
        assert "computed at run time" in lines[-1], err


def _while_loop(exit_on: str) -> onnx.ModelProto:
    """paddle2onnx's form of Paddle's ``for i in range(paddle.to_tensor(5))`` decoding loop (PaddleOCR's SLANet
    head): a Loop without a trip count, its condition input ``Less(i0, n)`` and its body's condition
    ``Less(Cast(i * 1 + 1), n)`` from a carried float counter; the body carries a hidden state ``h = tanh(h W + x)``
    and writes ``h`` into row i of a carried buffer [5, 3] (ScatterElements at the counter). ``exit_on="data"``:
    the body also stops once ``h``'s first value exceeds 0.5 (an early exit on the data, PaddleX's end token)."""
    steps = 5
    nodes = [
        helper.make_node("Mul", ["i_in", "one"], ["i_scaled"]),
        helper.make_node("Add", ["i_scaled", "one"], ["i_next"]),
        helper.make_node("Cast", ["i_next"], ["i_next64"], to=TensorProto.INT64),
        helper.make_node("Less", ["i_next64", "n"], ["more"]),
        helper.make_node("MatMul", ["h_in", "w"], ["hw"]),
        helper.make_node("Add", ["hw", "x"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_out"]),
        helper.make_node("Cast", ["i_in"], ["row"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["row", "one_one"], ["row11"]),
        helper.make_node("Expand", ["row11", "one_three"], ["rows"]),
        helper.make_node("ScatterElements", ["buf_in", "rows", "h_out"], ["buf_out"], axis=0),
    ]
    if exit_on == "data":
        nodes += [
            helper.make_node("ReduceMax", ["h_out"], ["top"], keepdims=0),
            helper.make_node("Less", ["top", "half"], ["calm"]),
            helper.make_node("And", ["more", "calm"], ["cond_out"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["more"], ["cond_out"]))
    body = helper.make_graph(
        nodes,
        "body",
        [helper.make_tensor_value_info("it", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("i_in", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("h_in", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("buf_in", TensorProto.FLOAT, [steps, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("i_next", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("buf_out", TensorProto.FLOAT, [steps, 3])],
    )  # fmt: skip
    rng = np.random.default_rng(3)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["i0"], ["i0_64"], to=TensorProto.INT64),
         helper.make_node("Less", ["i0_64", "n"], ["start"]),
         helper.make_node("Loop", ["", "start", "i0", "h0", "buf0"], ["i_end", "h", "buf"], name="while", body=body)],
        "while",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("buf", TensorProto.FLOAT, [steps, 3])],
        [numpy_helper.from_array(np.array(0.0, np.float32), "i0"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(steps, np.int64), "n"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half"),
         numpy_helper.from_array(np.array([1, 1], np.int64), "one_one"),
         numpy_helper.from_array(np.array([1, 3], np.int64), "one_three"),
         numpy_helper.from_array((0.8 * rng.standard_normal((3, 3))).astype(np.float32), "w"),
         numpy_helper.from_array(np.zeros((1, 3), np.float32), "h0"),
         numpy_helper.from_array(np.zeros((steps, 3), np.float32), "buf0")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def test_a_while_loop_over_a_counter_unrolls(tmp_path, capsys):
    """paddle2onnx's counting while loop (no trip count, the exit a counter's): unrolled to its 5 iterations; the
    .tflite gives onnxruntime's final state and buffer (declined as control flow before)."""
    path = tmp_path / "while.onnx"
    onnx.save(_while_loop("counter"), path)
    code, err = _deploy(["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out")], capsys)
    assert code == 0, err
    (tflite,) = (tmp_path / "out" / "arm-cpu").glob("*.tflite")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(4)
    for _ in range(3):
        x = rng.standard_normal((1, 3)).astype(np.float32)
        h, buf = session.run(None, {"x": x})
        got = run_tflite_file(tflite, {"x": x})
        assert np.abs(buf).min() > 0  # every row written: five iterations ran
        np.testing.assert_allclose(got["h"], h, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got["buf"], buf, rtol=1e-5, atol=1e-6)


def test_a_while_loop_with_an_exit_on_the_data_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "while_data.onnx"
    onnx.save(_while_loop("data"), path)
    code, err = _deploy(["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out")], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: Loop node 'while': control flow (If/Loop/Scan)"), err


def _decoding_step() -> onnx.ModelProto:
    """SLANet's decoding step as paddle2onnx writes it: the previous token's one-hot (OneHot of an ArgMax, depth the
    one-element tensor ``[5]``) joined to the features: x [1, 6] -> h = x W1 [1, 5]; y = Concat(h, OneHot(ArgMax h))
    W2 [1, 4]."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("ArgMax", ["h"], ["token"], axis=1, keepdims=0),
         helper.make_node("OneHot", ["token", "depth", "values"], ["onehot"], axis=-1),
         helper.make_node("Concat", ["h", "onehot"], ["joined"], axis=1),
         helper.make_node("MatMul", ["joined", "w2"], ["y"])],
        "decode",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [numpy_helper.from_array(rng.standard_normal((6, 5)).astype(np.float32), "w1"),
         numpy_helper.from_array(np.array([5], np.int32), "depth"),
         numpy_helper.from_array(np.array([0, 1], np.float32), "values"),
         numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "w2")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def test_a_onehot_with_a_one_element_depth_runs_in_the_exact_semantics(tmp_path, capsys):
    """The onnx reference evaluator refuses OneHot's depth as a one-element tensor (ONNX allows it), and it runs a
    QDQ model's exact semantics, which the int8 verification reads (SLANet's int8 deploy failed on it). The QDQ model
    ``edgekit quantize`` writes now runs there and gives onnxruntime's values on it."""
    from edgekit.core.exact import ExactRunner

    path, calib, qdq = tmp_path / "decode.onnx", tmp_path / "calib.npz", tmp_path / "decode_qdq.onnx"
    onnx.save(_decoding_step(), path)
    rng = np.random.default_rng(6)
    np.savez(calib, x=rng.standard_normal((16, 1, 6)).astype(np.float32))
    code, err = _deploy(["quantize", str(path), "--calib", str(calib), "-o", str(qdq)], capsys)
    assert code == 0, err
    runner = ExactRunner(onnx.load(str(qdq)))
    session = ort.InferenceSession(str(qdq), providers=["CPUExecutionProvider"])
    for _ in range(4):
        x = rng.standard_normal((1, 6)).astype(np.float32)
        (expected,) = session.run(None, {"x": x})
        np.testing.assert_allclose(runner.run({"x": x})["y"], expected, rtol=1e-4, atol=1e-4)


def _embedding_bag_offsets(path: Path) -> None:
    """DLRM's multi-hot feature: flat ids [6] and offsets [1] (one bag), EmbeddingBag sum; opset 13."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bag = nn.EmbeddingBag(30, 4, mode="sum")

        def forward(self, ids, offsets):
            return self.bag(ids, offsets)

    args = (torch.randint(0, 30, (6,)), torch.zeros(1, dtype=torch.int64))
    torch.onnx.export(
        Bag().eval(), args, str(path), dynamo=False, opset_version=13, input_names=["ids", "offsets"],
        output_names=["y"],
    )  # fmt: skip


if __name__ == "__main__":
    _embedding_bags(BAGS)
    _embedding_bag_offsets(BAGS.parent / "embedding_bag_offsets.onnx")
