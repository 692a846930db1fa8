"""The accuracy-drop report: metrics, rendering (Markdown, self-contained HTML with plots) and `edgekit report`."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from edgekit.device_agents.bundle import TensorSpec
from edgekit.device_eval import from_device, to_device
from edgekit.metrics import Comparison, TensorError, sqnr_db
from edgekit.report import FORMAT_VERSION, latency_summary, load_report, render_html, render_markdown
from PIL import Image


def test_tensor_error_metrics_match_numpy():
    rng = np.random.default_rng(0)
    refs = [rng.normal(0, 1, 50) for _ in range(4)]
    cands = [r + rng.normal(0, 0.1, 50) for r in refs]
    err = TensorError()
    for r, c in zip(refs, cands, strict=True):
        err.update(r, c)
    m = err.to_json()
    r, c = np.concatenate(refs), np.concatenate(cands)
    assert m["sqnr_db"] == pytest.approx(10 * np.log10((r**2).sum() / ((r - c) ** 2).sum()))
    assert m["mae"] == pytest.approx(np.abs(r - c).mean())
    assert m["rmse"] == pytest.approx(np.sqrt(((r - c) ** 2).mean()))
    assert m["relative_l2"] == pytest.approx(np.linalg.norm(r - c) / np.linalg.norm(r))
    assert m["max_abs_error"] == pytest.approx(np.abs(r - c).max())
    cos = np.mean([a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(refs, cands, strict=True)])
    assert m["cosine"] == pytest.approx(cos)
    assert sqnr_db(1.0, 0.0) == float("inf")


def test_comparison_accuracy_agreement_and_confusion():
    comp = Comparison()
    # 3 samples, 4 classes: fp32 right on all; device wrong on the last (predicts 0 for label 3)
    cases = [([0.1, 0.7, 0.1, 0.1], [0.2, 0.6, 0.1, 0.1], 1), ([0.9, 0.05, 0.03, 0.02], [0.8, 0.1, 0.05, 0.05], 0),
             ([0.3, 0.1, 0.1, 0.5], [0.5, 0.1, 0.1, 0.3], 3)]  # fmt: skip
    for ref, cand, label in cases:
        comp.update({"p": np.array([ref])}, {"p": np.array([cand])}, label)
    out = comp.to_json()
    assert out["accuracy"]["reference_top1"] == 100.0
    assert out["accuracy"]["candidate_top1"] == pytest.approx(200 / 3)
    assert out["accuracy"]["top1_drop_pp"] == pytest.approx(100 / 3)
    assert out["top1_agreement"] == pytest.approx(200 / 3)
    assert [3, 0, 1] in out["confusion"] and [1, 1, 1] in out["confusion"]


def test_latency_summary_percentiles():
    times = list(np.linspace(0.001, 0.100, 100))
    s = latency_summary(times)
    assert s["samples"] == 100
    assert s["p50"] == pytest.approx(np.percentile(np.array(times) * 1e3, 50))
    assert s["p99"] == pytest.approx(np.percentile(np.array(times) * 1e3, 99))


@pytest.mark.parametrize(
    "dtype, layout", [("float32", "NCHW"), ("float32", "NHWC"), ("int8", "NHWC"), ("uint8", None)]
)
def test_device_tensor_conversion_round_trips(dtype, layout):
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, (1, 3, 4, 5)).astype(np.float32)
    shape = (1, 4, 5, 3) if layout == "NHWC" else (1, 3, 4, 5)
    scale, zp = (4 / 255, -1 if dtype == "int8" else 127) if dtype != "float32" else (None, None)
    spec = TensorSpec("x", shape, dtype, layout, scale, zp)
    dev = to_device(x[0:1], spec)
    assert dev.shape == shape and dev.dtype == np.dtype(dtype)
    if layout == "NHWC":
        np.testing.assert_array_equal(np.argsort(dev.shape), np.argsort(shape))
    back = from_device(dev, spec, x.shape)
    tol = scale / 2 + 1e-6 if scale else 0
    assert np.abs(back - x).max() <= tol


def make_report(tmp_path, labelled=True) -> dict:
    rng = np.random.default_rng(2)
    targets = []
    for name, noise in (("arm-cpu", 0.02), ("intel-vpu", 0.05)):
        comp = Comparison()
        for _ in range(30):
            ref = rng.dirichlet(np.ones(10))[None]
            comp.update({"prob": ref}, {"prob": ref + rng.normal(0, noise, ref.shape)},
                        int(np.argmax(ref)) if labelled else None)  # fmt: skip
        times = list(rng.uniform(0.002, 0.004, 30))
        targets.append({
            "target": name, "bundle": str(tmp_path / name), "precision": "int8", "size_bytes": 1000,
            "size_ratio": 0.27, "evaluation": comp.to_json(), "latency_ms": latency_summary(times),
            "latency_samples_ms": [t * 1e3 for t in times],
            "host_worst_layers": [{"tensor": f"layer{i}", "sqnr_db": 20.0 + i, "cosine": 0.99} for i in range(5)],
        })  # fmt: skip
    return {"format_version": FORMAT_VERSION, "model": {"path": "m.onnx", "sha256": "ab" * 32, "size_bytes": 4000},
            "samples": 30, "labelled": labelled, "device": {"url": "local"}, "targets": targets,
            "fail_on_drop": 1.0,
            "failed": [t["target"] for t in targets
                       if t["evaluation"].get("accuracy", {}).get("top1_drop_pp", 0) > 1.0]}  # fmt: skip


@pytest.mark.parametrize("labelled", [True, False])
def test_html_is_self_contained_with_tables_and_plots(tmp_path, labelled):
    report = make_report(tmp_path, labelled)
    page = render_html(report)
    assert "<table" in page and "arm-cpu" in page and "intel-vpu" in page
    assert "http://" not in page and "https://" not in page  # nothing loaded from elsewhere
    images = re.findall(r"src='data:image/png;base64,([^']+)'", page)
    assert len(images) == 3  # accuracy, per-layer SQNR, latency
    for data in images:
        img = Image.open(io.BytesIO(base64.b64decode(data)))
        assert img.size[0] > 200 and img.size[1] > 100
    md = render_markdown(report)
    assert md.count("| arm-cpu |") == 1 and "top-1 drop pp" in md
    if not labelled:
        assert "no labels" in md


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_report_command_rerenders(tmp_path):
    src = tmp_path / "report.json"
    src.write_text(json.dumps(make_report(tmp_path)))
    out = tmp_path / "again.html"
    run = run_cli("report", src, "--html", out, "--md", tmp_path / "again.md")
    assert run.returncode == 0, run.stderr
    assert out.read_text() == render_html(load_report(src))
    assert "arm-cpu: top-1 drop" in run.stdout


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "report not found"),
        ("{not json", "not a JSON report"),
        ('{"a": 1}', "not an edgekit deploy report"),
        ('{"format_version": "9.0", "targets": []}', "not supported"),
    ],
)
def test_report_command_bad_input(tmp_path, content, message):
    src = tmp_path / "r.json"
    if content is not None:
        src.write_text(content)
    run = run_cli("report", src, "--html", tmp_path / "o.html")
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "o.html").exists()
