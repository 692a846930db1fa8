"""The examples run as a user would run them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def run(*args, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)  # fmt: skip


def test_python_api_example(tmp_path):
    proc = run(ROOT / "examples" / "python_api.py", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    host = [line for line in proc.stdout.splitlines() if line.startswith("host:")]
    device = [line for line in proc.stdout.splitlines() if line.startswith("device:")]
    assert host and device and "on 360 samples" in device[0]
    assert (tmp_path / "digits.int8.onnx").exists() and (tmp_path / "arm-cpu" / "manifest.json").exists()


def test_digits_example_calls_the_library(digits, tmp_path):
    for source, name in ((digits.model, "digits.onnx"), (digits.calib, "calib.npz"), (digits.val, "val.npz")):
        (tmp_path / name).write_bytes(Path(source).read_bytes())
    proc = run(ROOT / "examples" / "digits" / "run.py", "--out", tmp_path, "--target", "arm-cpu",
               "--max-samples", "40")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "deploy" / "report.json").read_text())
    (entry,) = report["targets"]
    acc = entry["evaluation"]["accuracy"]
    assert report["samples"] == 40 and entry["bundle"] == str(tmp_path / "deploy" / "arm-cpu")
    line = f"arm-cpu: top-1 {acc['reference_top1']:.2f} % on the host (fp32), {acc['candidate_top1']:.2f} % on the device"
    assert line in proc.stdout and f"✓ arm-cpu → {tmp_path / 'deploy' / 'arm-cpu'} (int8)" in proc.stdout


def test_imagenet_example_explains_itself():
    proc = run(ROOT / "examples" / "imagenet" / "run.py", "--help", timeout=60)
    assert proc.returncode == 0 and "IMAGES" in proc.stdout.upper()
    assert "examples/imagenet/build" in proc.stdout


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout (git check-ignore needs one)")
def test_example_output_folders_are_ignored_by_git():
    """Every example writes under its own build/ folder, which git ignores (the clone stays clean)."""
    outputs = ["examples/imagenet/build/report.html", "examples/digits/build/deploy/report.html",
               "examples/digits/build/api/digits.int8.onnx"]  # fmt: skip
    proc = subprocess.run(
        ["git", "check-ignore", *outputs], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.stdout.split() == outputs


@pytest.mark.skipif(os.environ.get("EDGEKIT_SHARED") != "1" or not SHARED.exists(),
                    reason="needs ../shared; opt in with EDGEKIT_SHARED=1")  # fmt: skip
def test_imagenet_example_on_squeezenet(tmp_path):
    proc = run(ROOT / "examples" / "imagenet" / "run.py", SHARED / "models" / "squeezenet1.1-fp32.onnx",
               SHARED / "data" / "imagenet-sample-200", "--out", tmp_path, "--max-samples", "40", timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "report.html").exists()
