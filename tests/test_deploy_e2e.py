"""`edgekit deploy` end to end against the local agent (a real subprocess on a pty): every target, the report,
the --fail-on-drop gate, data without labels, and bad device options."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from edgekit.device_agents.bundle import read_bundle
from edgekit.device_eval import from_device, to_device
from onnx import TensorProto, helper, numpy_helper

TARGETS = ("arm-cpu", "intel-vpu", "nnapi")


def edgekit(*args, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def deployed(digits, tmp_path_factory):
    out = tmp_path_factory.mktemp("deploy")
    targets = [a for t in TARGETS for a in ("--target", t)]
    run = edgekit("deploy", digits.model, *targets, "--calib", digits.calib, "--eval", digits.val,
                  "--device", "local", "--report", out / "report.html", "--fail-on-drop", "1.0", "-o", out, "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    return out, json.loads((out / "report.json").read_text()), run


def test_report_has_every_target_side_by_side(deployed, digits):
    out, report, run = deployed
    assert [t["target"] for t in report["targets"]] == list(TARGETS)
    assert report["samples"] == 360 and report["labelled"] and report["failed"] == []
    assert report["device"]["url"] == "local" and report["device"]["hello"]
    for t in report["targets"]:
        acc = t["evaluation"]["accuracy"]
        assert acc["reference_top1"] == pytest.approx(100 * digits.accuracy, abs=0.3)
        assert acc["top1_drop_pp"] <= 1.0 and t["evaluation"]["top1_agreement"] >= 98
        assert t["latency_ms"]["samples"] == 360 and 0 < t["latency_ms"]["p50"] <= t["latency_ms"]["p99"]
        assert len(t["latency_samples_ms"]) == 360
        assert (
            t["transfer"]["upload_bytes"] > 0 and t["transfer"]["infer_wall_s"] >= t["transfer"]["compute_s"]
        )
        assert t["host_worst_layers"] and all("sqnr_db" in r for r in t["host_worst_layers"])
        assert t["evaluation"]["outputs"]["probs"]["sqnr_db"] > 20
        assert sum(c for _, _, c in t["evaluation"]["confusion"]) == 360
    assert (out / "report.md").read_text().count("| nnapi |") == 1
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "<table" in html
    assert "top-1" in run.stdout


def _run_tflite(path: Path, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_path=str(path))
    interp.allocate_tensors()
    (inp,), (out,) = interp.get_input_details(), interp.get_output_details()
    interp.set_tensor(inp["index"], x)
    interp.invoke()
    return interp.get_tensor(out["index"])


@pytest.mark.parametrize("target", ["arm-cpu", "nnapi"])
def test_the_agent_adds_no_error(deployed, digits, target):
    """The device-side top-1 equals what the host gets running the same bundle directly in LiteRT."""
    out, report, _ = deployed
    entry = next(t for t in report["targets"] if t["target"] == target)
    val = np.load(digits.val)
    with read_bundle(out / target) as bundle:
        m = bundle.manifest
        correct = 0
        for x, label in zip(val["input"], val["labels"], strict=True):
            y = _run_tflite(bundle.primary_path, to_device(x.reshape(1, 1, 8, 8), m.inputs[0]))
            correct += int(np.argmax(from_device(y, m.outputs[0], (1, 10)))) == int(label)
    assert entry["evaluation"]["accuracy"]["candidate_top1"] == pytest.approx(
        100 * correct / len(val["labels"])
    )


def sensitive_model(path: Path) -> tuple[Path, Path]:
    """A classifier whose classes differ by much less than its int8 resolution: quantization must cost accuracy."""
    rng = np.random.default_rng(0)
    w = (1.0 + 0.002 * rng.normal(size=(10, 16))).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
        "sensitive",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(w, "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), path)
    x = rng.uniform(0, 1, (120, 1, 16)).astype(np.float32)
    labels = np.argmax(x[:, 0] @ w.T, axis=1)  # fp32 is right on every sample
    data = path.with_suffix(".npz")
    np.savez(data, x=x, labels=labels)
    return path, data


def test_fail_on_drop_gates_ci(tmp_path):
    model, data = sensitive_model(tmp_path / "sensitive.onnx")
    run = edgekit("deploy", model, "--target", "arm-cpu", "--calib", data, "--eval", data, "--fail-on-drop", "1.0",
                  "--report", tmp_path / "r" / "report.html", "-o", tmp_path / "out", "-q")  # fmt: skip
    assert run.returncode == 1, run.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    drop = report["targets"][0]["evaluation"]["accuracy"]["top1_drop_pp"]
    assert drop > 1.0 and report["failed"] == ["arm-cpu"]
    assert "gate" in run.stderr and "arm-cpu" in run.stderr


def test_without_labels_the_report_uses_agreement_and_errors(digits, tmp_path):
    val = np.load(digits.val)
    unlabelled = tmp_path / "u.npz"
    np.savez(unlabelled, input=val["input"][:40])
    run = edgekit("deploy", digits.model, "--target", "intel-vpu", "--calib", digits.calib, "--eval", unlabelled,
                  "--max-samples", "25", "--report", tmp_path / "report.html", "-o", tmp_path / "out", "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    t = report["targets"][0]
    assert report["samples"] == 25 and not report["labelled"]
    assert "accuracy" not in t["evaluation"] and t["evaluation"]["top1_agreement"] >= 90
    assert t["evaluation"]["outputs"]["probs"]["cosine"] > 0.99


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--device", "local"], "--device needs --eval DATA"),
        (["--eval", "VAL", "--device", "tcp://127.0.0.1:9"], "127.0.0.1:9"),
        (["--eval", "VAL", "--report", "OUT/report.txt"], "--report expects an .html path"),
        (["--eval", "missing.npz"], "evaluation data not found"),
    ],
)
def test_bad_device_options_are_one_line(digits, tmp_path, extra, message):
    extra = [e.replace("VAL", str(digits.val)).replace("OUT", str(tmp_path)) for e in extra]
    run = edgekit("deploy", digits.model, "--target", "arm-cpu", "--calib", digits.calib, *extra,
                  "-o", tmp_path / "out", "-q", timeout=120)  # fmt: skip
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("INFO:")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in run.stderr, run.stderr
    assert not (tmp_path / "out").exists()  # checked before anything was packaged


def test_target_settings_reach_the_targets(digits, tmp_path):
    run = edgekit("deploy", digits.model, "-t", "nnapi", "-t", "arm-cpu", "--calib", digits.calib, "--io-dtype",
                  "uint8", "--nnapi-feature-level", "3", "--keep-io-layout", "-o", tmp_path, "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "NNAPI feature level 3" in run.stdout
    nnapi = read_bundle(tmp_path / "nnapi").manifest
    arm = read_bundle(tmp_path / "arm-cpu").manifest
    assert nnapi.inputs[0].dtype == "uint8" and nnapi.inputs[0].shape == (1, 1, 8, 8)  # NCHW kept
    assert arm.inputs[0].dtype == "float32" and arm.inputs[0].layout == "NCHW"
    # one calibration pass served both schemes (they differ only in weight granularity and dtypes)
    assert run.stdout.count("quantizing for") == 2
    assert arm.provenance["quantization"]["float_output_heads"] is True  # the default: a float Softmax head
    assert "SOFTMAX" in arm.verification["float_ops"][0]


def test_integer_head_quantizes_the_softmax_of_float_output_targets(digits, tmp_path):
    run = edgekit("deploy", digits.model, "-t", "arm-cpu", "--calib", digits.calib, "--integer-head", "-o",
                  tmp_path, "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    arm = read_bundle(tmp_path / "arm-cpu").manifest
    assert arm.provenance["quantization"]["float_output_heads"] is False
    assert arm.verification["float_ops"] == []  # everything between the edge QUANTIZE/DEQUANTIZE is integer


def test_the_issue_example_puts_the_bundles_beside_the_report(digits, tmp_path):
    """`edgekit deploy model.onnx --target arm-cpu --calib c/ --eval v/ --report out/report.html`: no -o."""
    calib, val = tmp_path / "c", tmp_path / "v"
    for folder, source in ((calib, digits.calib), (val, digits.val)):  # folders of one .npz per sample
        folder.mkdir()
        data = np.load(source)
        for i in range(60):
            labels = {"label": data["labels"][i]} if "labels" in data else {}
            np.savez(folder / f"{i:03d}.npz", input=data["input"][i : i + 1], **labels)
    run = edgekit("deploy", digits.model, "--target", "arm-cpu", "--calib", calib, "--eval", val,
                  "--report", tmp_path / "out" / "report.html")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["arm-cpu", "report.html", "report.json",
                                                                      "report.md"]  # fmt: skip
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["samples"] == 60 and report["labelled"]
    assert report["targets"][0]["bundle"] == str(tmp_path / "out" / "arm-cpu")
    assert read_bundle(tmp_path / "out" / "arm-cpu").manifest.verification["passed"]
