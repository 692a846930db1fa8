"""The arm-cpu and nnapi targets: bundles verified in LiteRT against the host, typed failures."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from edgekit.core.errors import EdgekitError, TargetError
from edgekit.device_agents.bundle import read_bundle
from edgekit.targets.base import PackageOptions, get_target
from edgekit.targets.nnapi_target import NnapiOptions
from onnx import helper
from test_layout import plain_cnn
from tflite_helpers import edgekit_qdq, random_feeds


@pytest.fixture(scope="module")
def float_model() -> onnx.ModelProto:
    return plain_cnn()


@pytest.fixture(scope="module")
def qdq_model(float_model) -> onnx.ModelProto:
    return edgekit_qdq(float_model, [random_feeds(float_model, s) for s in range(4)])


def _load(proto: onnx.ModelProto) -> ir.Model:
    from edgekit.core.model import load_proto

    return load_proto(proto, prepare=False)


def _samples(model: onnx.ModelProto) -> tuple[dict[str, np.ndarray], ...]:
    return tuple(random_feeds(model, s) for s in (20, 21))


def test_arm_cpu_fp32_bundle(float_model, tmp_path) -> None:
    target = get_target("arm-cpu")
    assert target.check(_load(float_model)) == []
    path = target.package(
        _load(float_model), tmp_path / "arm", PackageOptions(verify_samples=_samples(float_model))
    )
    with read_bundle(path) as bundle:
        m = bundle.manifest
        assert (m.target, m.runtime) == ("arm-cpu", "tflite")
        assert m.primary_model().path == "model.tflite"
        assert [r.package for r in m.requirements] == ["tflite-runtime"]  # dated by its op versions
        assert (
            m.inputs[0].shape == (1, 16, 16, 3)
            and m.inputs[0].layout == "NHWC"
            and m.inputs[0].dtype == "float32"
        )
        v = m.verification
        assert v["precision"] == "fp32" and v["passed"] and v["samples"] == 2
        assert v["max_rel_error"] <= 1e-4
        assert "TRANSPOSE" not in v["op_counts"]


def test_arm_cpu_int8_bundle_has_float_io(qdq_model, tmp_path) -> None:
    target = get_target("arm-cpu")
    path = target.package(
        _load(qdq_model), tmp_path / "arm8", PackageOptions(verify_samples=_samples(qdq_model))
    )
    with read_bundle(path) as bundle:
        m = bundle.manifest
        assert m.inputs[0].dtype == "float32" and m.outputs[0].dtype == "float32"
        v = m.verification
        assert v["precision"] == "int8" and v["float_ops"] == []
        assert v["op_counts"]["QUANTIZE"] == 1 and v["op_counts"]["DEQUANTIZE"] == 1
        assert v["outputs"]["y"]["top1_agreement"] == 1.0


@pytest.mark.parametrize("io_dtype", ["int8", "uint8"])
def test_nnapi_bundle_is_fully_integer_with_report(qdq_model, io_dtype, tmp_path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    target = get_target("nnapi")
    options = PackageOptions(
        verify_samples=_samples(qdq_model), target_options=NnapiOptions(io_dtype=io_dtype)
    )
    path = target.package(_load(qdq_model), tmp_path / "nn", options)
    with read_bundle(path) as bundle:
        m = bundle.manifest
        for spec in (*m.inputs, *m.outputs):
            assert spec.dtype == io_dtype and spec.scale is not None and spec.zero_point is not None
        assert [f.role for f in m.model_files if f.path == "nnapi_compatibility.json"] == ["report"]
        report = json.loads(bundle.path("nnapi_compatibility.json").read_text())
        assert report["feature_level"] == 4 and len(report["ops"]) == report["op_count"] > 0
        assert m.verification["nnapi"]["note"] == report["summary"]
        interpreter = Interpreter(model_path=str(bundle.primary_path))
        for detail in interpreter.get_tensor_details():
            assert detail["dtype"] != np.float32, detail["name"]


def test_nnapi_refuses_float_models(float_model, tmp_path) -> None:
    target = get_target("nnapi")
    problems = target.check(_load(float_model))
    assert any("integer models only" in p.message for p in problems)
    with pytest.raises(TargetError, match="integer models only"):
        target.package(_load(float_model), tmp_path / "nn", PackageOptions())
    assert not (tmp_path / "nn").exists()


def test_check_lists_unsupported_ops() -> None:
    model = onnx.helper.make_model(
        helper.make_graph(
            [helper.make_node("Det", ["x"], ["y"], name="det0")],
            "g",
            [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 3])],
            [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [])],
        ),
        opset_imports=[helper.make_opsetid("", 19)],
    )
    problems = get_target("arm-cpu").check(ir.from_proto(model))
    assert [(p.severity, p.op_type, p.node) for p in problems] == [("error", "Det", "det0")]


def test_failed_packaging_leaves_nothing(float_model, tmp_path) -> None:
    bad_samples = ({"not_an_input": np.zeros((1, 3, 16, 16), np.float32)},)
    with pytest.raises(EdgekitError, match="input"):
        get_target("arm-cpu").package(
            _load(float_model), tmp_path / "arm", PackageOptions(verify_samples=bad_samples)
        )
    assert list(tmp_path.iterdir()) == []


def test_deploy_cli(float_model, tmp_path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(float_model, src)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "edgekit.cli.main",
        "deploy",
        str(src),
        "--target",
        "arm-cpu",
        "-o",
        str(out),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "arm-cpu" / "model.tflite").is_file()

    bad = tmp_path / "bad.onnx"
    onnx.save(
        onnx.helper.make_model(
            helper.make_graph(
                [helper.make_node("Det", ["x"], ["y"], name="det0")],
                "g",
                [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 3])],
                [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [])],
            ),
            opset_imports=[helper.make_opsetid("", 19)],
        ),
        bad,
    )
    out2 = tmp_path / "out2"
    cmd = [
        sys.executable,
        "-m",
        "edgekit.cli.main",
        "deploy",
        str(bad),
        "--target",
        "arm-cpu",
        "-o",
        str(out2),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stderr.strip().startswith("error:")
    assert "Det" in done.stderr
    assert not (out2 / "arm-cpu").exists()


def test_check_accepts_ops_that_fold_to_constants() -> None:
    """Shape sub-graphs (and ops the converter only meets with constant inputs) are not problems."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["ones"], value=onnx.numpy_helper.from_array(np.ones(1, np.float32))
        ),
        helper.make_node("Add", ["x", "ones"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
    )
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))
    assert get_target("arm-cpu").check(model) == []


def test_device_agent_runs_the_nnapi_bundle(qdq_model, tmp_path) -> None:
    """The agent's TFLite runner loads our bundle by the manifest's names and gets the same answers."""
    from edgekit.device_agents.runtimes import open_runner

    samples = _samples(qdq_model)
    path = get_target("nnapi").package(
        _load(qdq_model), tmp_path / "nn", PackageOptions(verify_samples=samples)
    )
    with read_bundle(path) as bundle:
        runner = open_runner(bundle, threads=1)
        spec_in, spec_out = bundle.manifest.inputs[0], bundle.manifest.outputs[0]
        assert [t.name for t in runner.inputs] == [spec_in.name]
        x = samples[0]["x"].transpose(0, 2, 3, 1)  # NHWC, as the manifest says
        q = np.clip(np.rint(x / spec_in.scale) + spec_in.zero_point, -128, 127).astype(np.int8)
        (out,), _ = runner.run([q])
        runner.close()
    got = (out.astype(np.float32) - spec_out.zero_point) * spec_out.scale
    from tflite_helpers import run_onnx

    expected = run_onnx(qdq_model, samples[0])[0]
    assert (
        int(np.argmax(got)) == int(np.argmax(expected))
        or expected.reshape(-1)[np.argmax(got)] == expected.max()
    )
    # One output step is the int8 grid's resolution: onnxruntime's float32 requantization and LiteRT's may
    # round a near-tie differently (which one depends on the CPU's kernels), so allow one step.
    tol = max(0.05 * np.ptp(expected), spec_out.scale) + 1e-6
    assert np.abs(got.reshape(expected.shape) - expected).max() <= tol
