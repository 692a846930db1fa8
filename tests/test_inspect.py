"""``edgekit inspect``: inventory, parameters, per-target op support, --json, bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cnn_models import qdq_with_onnxruntime, tiny_cnn, with_unsupported_op
from edgekit.cli.common import run_app
from edgekit.cli.main import app
from edgekit.core.errors import TargetError
from edgekit.inspect import inspect_model
from onnx import helper, numpy_helper
from typer.testing import CliRunner

EXPECTED_OPS = {
    "Conv": 2,
    "Relu": 2,
    "MaxPool": 1,
    "GlobalAveragePool": 1,
    "Flatten": 1,
    "Gemm": 1,
    "Softmax": 1,
}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", *args], capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def cnn_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("m") / "cnn.onnx"
    onnx.save(tiny_cnn(), path)
    return path


def test_inventory_and_parameters(cnn_path: Path) -> None:
    result = inspect_model(cnn_path, targets=["intel-vpu"])
    assert [(t.name, t.shape, t.dtype) for t in result.inputs] == [("x", (1, 3, 16, 16), "float32")]
    assert [(t.name, t.shape, t.dtype) for t in result.outputs] == [("y", (1, 10), "float32")]
    assert dict(result.op_counts) == EXPECTED_OPS
    arrays = [numpy_helper.to_array(t) for t in onnx.load(cnn_path).graph.initializer]
    assert result.parameter_count == sum(a.size for a in arrays) == 8 * 27 + 8 + 16 * 72 + 16 + 160 + 10
    assert result.parameter_bytes == 4 * result.parameter_count
    assert result.opset == 19 and not result.quantized


def test_every_op_supported_by_intel_vpu(cnn_path: Path) -> None:
    (report,) = inspect_model(cnn_path, targets=["intel-vpu"]).targets
    assert report.ok and report.not_checked is None
    assert {o.op_type for o in report.ops} == set(EXPECTED_OPS)
    assert all(o.supported for o in report.ops)


def test_unsupported_op_is_crossed_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "det.onnx"
    onnx.save(with_unsupported_op(tiny_cnn()), path)
    (report,) = inspect_model(path, targets=["intel-vpu"]).targets
    assert not report.ok
    det = report.op("Det")
    assert det is not None and not det.supported
    assert det.reasons == ("my_det: OpenVINO's ONNX frontend has no conversion for Det",)
    assert all(o.supported for o in report.ops if o.op_type != "Det")


def test_removed_ops_are_reported_as_such(tmp_path: Path) -> None:
    model = tiny_cnn()
    for node in model.graph.node:  # route the first Relu's output through Identity and Dropout
        if node.name == "pool1":
            node.input[0] = "r1_drop"
    model.graph.node.insert(2, helper.make_node("Identity", ["r1"], ["r1_id"], name="identity"))
    model.graph.node.insert(3, helper.make_node("Dropout", ["r1_id"], ["r1_drop"], name="dropout"))
    path = tmp_path / "drop.onnx"
    onnx.save(model, path)
    result = inspect_model(path, targets=["intel-vpu"])
    assert result.op_counts["Identity"] == 1 and result.op_counts["Dropout"] == 1
    (report,) = result.targets
    for op_type in ("Identity", "Dropout"):
        support = report.op(op_type)
        assert support is not None and support.supported
        assert support.reasons == ("removed or folded before conversion",)


def test_quantized_model(tmp_path: Path) -> None:
    qdq = qdq_with_onnxruntime(tiny_cnn(), tmp_path)
    path = tmp_path / "q.onnx"
    onnx.save(qdq, path)
    result = inspect_model(path, targets=["intel-vpu"])
    assert result.quantized and result.op_counts["QuantizeLinear"] >= 1
    int8_weights = sum(
        numpy_helper.to_array(t).size for t in qdq.graph.initializer if t.data_type == onnx.TensorProto.INT8
    )
    assert int8_weights > 0 and result.parameter_bytes < 4 * result.parameter_count
    assert result.targets[0].ok


def test_dynamic_dims_need_input_shape(tmp_path: Path) -> None:
    model = tiny_cnn()
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].Clear()
    dims[2].dim_param = "H"
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    result = inspect_model(path, targets=["intel-vpu"])
    assert result.inputs[0].shape == (1, 3, "H", 16)
    assert result.targets[0].not_checked and "--input-shape x=" in result.targets[0].not_checked
    fixed = inspect_model(path, {"x": (1, 3, 16, 16)}, targets=["intel-vpu"])
    assert fixed.targets[0].ok and fixed.targets[0].not_checked is None


def test_unknown_target_is_a_typed_error(cnn_path: Path) -> None:
    with pytest.raises(TargetError, match="unknown target 'gpu'; supported targets: .*intel-vpu"):
        inspect_model(cnn_path, targets=["gpu"])


def test_cli_tables(cnn_path: Path) -> None:
    result = CliRunner().invoke(app, ["inspect", str(cnn_path), "--target", "intel-vpu"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "[1, 3, 16, 16]" in out and "intel-vpu" in out and "can package for intel-vpu" in out
    assert "parameters: 1,562" in out
    for op_type, count in EXPECTED_OPS.items():
        assert any(op_type in line and f" {count} " in line and "✓" in line for line in out.splitlines())


def test_cli_json_matches_the_api(cnn_path: Path) -> None:
    result = CliRunner().invoke(app, ["inspect", str(cnn_path), "--json", "-t", "intel-vpu"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data == json.loads(json.dumps(inspect_model(cnn_path, targets=["intel-vpu"]).to_json()))
    assert data["op_counts"] == EXPECTED_OPS and data["node_count"] == 9
    assert data["targets"][0]["target"] == "intel-vpu" and data["targets"][0]["ok"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.onnx"], "model file not found"),
        (["{junk}"], "not an ONNX model"),
        (["{cnn}", "--target", "gpu"], "unknown target 'gpu'"),
        (["{cnn}", "--input-shape", "x=1,a"], "dimensions must be integers"),
        (["{cnn}", "--input-shape", "zz=1,3,16,16"], "unknown input"),
    ],
)
def test_cli_bad_inputs_are_one_line_errors(
    tmp_path: Path, cnn_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(np.arange(100, dtype=np.uint8).tobytes())
    with pytest.raises(SystemExit) as exc:
        run_app(app, ["inspect", *[a.format(junk=junk, cnn=cnn_path) for a in args]])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err


def test_console_script_exit_code(tmp_path: Path) -> None:
    proc = run_cli("inspect", str(tmp_path / "missing.onnx"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: model file not found: {tmp_path / 'missing.onnx'}"


def test_every_registered_target_is_checked(tmp_path: Path) -> None:
    from edgekit.targets.base import target_names

    path = tmp_path / "det.onnx"
    onnx.save(with_unsupported_op(tiny_cnn()), path)
    result = inspect_model(path)
    assert [r.target for r in result.targets] == target_names() and len(target_names()) >= 3
    for report in result.targets:
        det = report.op("Det")
        assert det is not None and not det.supported and det.reasons, report.target
        assert report.op("Conv").supported, report.target
