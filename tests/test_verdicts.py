"""inspect, deploy and quantize give the same verdict on a model, and the reason names the op."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

W = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32), "w")
X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])


def _custom_op_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MyOp", ["c"], ["m"], domain="com.acme", name="mine"),
             helper.make_node("Relu", ["m"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes, "g", [X], [Y], [W], value_info=[helper.make_tensor_value_info("m", 1, [1, 4, 8, 8])]
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 1)]
    )


def _loop_model() -> onnx.ModelProto:
    """A Loop whose exit depends on the values (at most 3 steps while the mean stays below 2): a constant trip count
    alone is unrolled (``edgekit.core.loops``), this one stays control flow."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "one"], ["v_out"]), helper.make_node("ReduceMean", ["v_out"], ["mean"], keepdims=0),
         helper.make_node("Less", ["mean", "two"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [1, 4, 8, 8])],
        [one, two],
    )  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Loop", ["trip", "cond", "c"], ["y"], body=body, name="steps")]  # fmt: skip
    inits = [
        W,
        numpy_helper.from_array(np.array(3, np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [X], [Y], inits), opset_imports=[helper.make_opsetid("", 17)]
    )
    onnx.checker.check_model(model)
    return model


def _edgekit(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *map(str, args)], capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    onnx.save(_custom_op_model(), tmp_path / "custom.onnx")
    onnx.save(_loop_model(), tmp_path / "loop.onnx")
    np.savez(
        tmp_path / "calib.npz", x=np.random.default_rng(1).normal(size=(4, 1, 3, 8, 8)).astype(np.float32)
    )
    return {
        "custom": tmp_path / "custom.onnx",
        "loop": tmp_path / "loop.onnx",
        "calib": tmp_path / "calib.npz",
    }


def test_a_custom_op_is_one_row_refused_everywhere_with_its_domain(files, tmp_path) -> None:
    report = json.loads(_edgekit("inspect", files["custom"], "--json").stdout)
    for target in report["targets"]:
        ops = {op["op_type"]: op for op in target["ops"]}
        assert "MyOp" not in ops, ops  # no second, unqualified row
        assert ops["com.acme.MyOp"]["supported"] is False and target["ok"] is False
    for target in ("arm-cpu", "intel-vpu"):
        run = _edgekit("deploy", files["custom"], "-t", target, "-o", tmp_path / target)
        assert run.returncode == 2 and "MyOp" in run.stderr and "Traceback" not in run.stderr
    run = _edgekit(
        "deploy", files["custom"], "-t", "intel-vpu", "--calib", files["calib"], "-o", tmp_path / "q"
    )
    lines = run.stderr.strip().splitlines()
    assert run.returncode == 2 and lines[-1].startswith("error: ") and "com.acme.MyOp" in lines[-1], (
        run.stderr
    )


def test_control_flow_gets_one_verdict_naming_the_op(files, tmp_path) -> None:
    reason = "Loop node 'steps': control flow (If/Loop/Scan) is not supported by any target"
    report = json.loads(_edgekit("inspect", files["loop"], "--json").stdout)
    assert all(reason in t["not_checked"] and not t["ok"] for t in report["targets"]), report["targets"]
    for args in (("deploy", files["loop"], "-t", "intel-vpu", "-o", tmp_path / "a"),
                 ("deploy", files["loop"], "-t", "arm-cpu", "--calib", files["calib"], "-o", tmp_path / "b"),
                 ("quantize", files["loop"], "--calib", files["calib"], "-o", tmp_path / "q.onnx")):  # fmt: skip
        run = _edgekit(*args)
        assert run.returncode == 2 and run.stderr.strip().splitlines()[-1].startswith(f"error: {reason}"), (
            run.stderr
        )
