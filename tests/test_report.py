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
from edgekit.core.metrics import Comparison, TensorError, sqnr_db
from edgekit.device_agents.bundle import TensorSpec
from edgekit.device_eval import from_device, to_device
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


def test_change_labels_say_drop_or_gain():
    from edgekit.report import change_label

    assert change_label(0.0) == "no change" and change_label(-0.0) == "no change"
    assert change_label(0.5) == "drop 0.50 pp"
    assert change_label(-0.5) == "gain 0.50 pp"


def _figures(monkeypatch) -> list:
    """Render the report's plots, keeping the matplotlib figures instead of their PNGs."""
    import edgekit.report as report_module

    figures = []

    def keep(fig):
        fig.canvas.draw()
        figures.append(fig)
        return "data:image/png;base64,"

    monkeypatch.setattr(report_module, "_png", keep)
    return figures


def test_plots_show_the_change_zoomed_and_nothing_overlaps(tmp_path, monkeypatch):
    import edgekit.report as report_module

    report = make_report(tmp_path)
    accs = [t["evaluation"]["accuracy"] for t in report["targets"]]
    accs[0].update(reference_top1=90.0, candidate_top1=90.0, top1_drop_pp=0.0)
    accs[1].update(reference_top1=90.0, candidate_top1=90.5, top1_drop_pp=-0.5)
    long_name = "backbone/stage4/block12/conv_pointwise_expand/Conv_output_0_quantized"
    report["targets"][0]["host_worst_layers"][0]["tensor"] = long_name
    figures = _figures(monkeypatch)
    report_module._plots(report)
    accuracy, layers = figures[0], figures[1]
    texts = [t.get_text() for ax in accuracy.axes for t in ax.texts]
    assert texts == ["no change", "gain 0.50 pp"]
    assert not any(t.startswith("-") for t in texts)
    bars_ax = accuracy.axes[0]
    assert bars_ax.get_ylim()[0] > 50  # zoomed: a 0.5 pp change is visible
    renderer = accuracy.canvas.get_renderer()
    legend = bars_ax.get_legend().get_window_extent(renderer)
    assert legend.y0 >= bars_ax.get_window_extent(renderer).y1 - 1  # above the bars, never over one
    # the worst-layer plots are stacked, labels cut in the middle, and no two axes overlap
    labels = [t.get_text() for ax in layers.axes for t in ax.get_yticklabels()]
    assert all(len(label) <= 44 for label in labels) and any("…" in label for label in labels)
    boxes = [ax.get_tightbbox(layers.canvas.get_renderer()) for ax in layers.axes]
    for a, b in zip(boxes, boxes[1:], strict=False):
        assert a.y0 >= b.y1 - 1 or b.y0 >= a.y1 - 1


def test_html_has_transfer_and_file_sizes(tmp_path):
    report = make_report(tmp_path)
    report["targets"][1].update(
        transfer={"upload_s": 0.25, "upload_bytes": 9000, "infer_wall_s": 1.5, "compute_s": 0.9,
                  "overhead_per_sample_ms": 2.0},
        files=[{"name": "model.xml", "role": "model", "size_bytes": 15000},
               {"name": "model.bin", "role": "weights", "size_bytes": 2000}],
    )  # fmt: skip
    page, md = render_html(report), render_markdown(report)
    for text in (page, md):
        assert "Upload 0.25 s; evaluation wall time 1.50 s of which on-device compute 0.90 s" in text
        assert "model.xml (model) 15.0 KB, model.bin (weights) 2.0 KB" in text


def test_confusions_use_class_names_and_skip_single_counts(tmp_path):
    from edgekit.report import _confusion_html

    names = {str(i): f"class{i}" for i in range(30)}
    once = {"evaluation": {"confusion": [[i, i + 1, 1] for i in range(25)]}}
    assert _confusion_html(once, names) == ""  # nothing repeats: no table
    twice = {"evaluation": {"confusion": [[i, i + 1, 1] for i in range(25)] + [[3, 7, 4]]}}
    page = _confusion_html(twice, names)
    assert "class3 (3)" in page and "class7 (7)" in page and page.count("<tr>") == 2


def test_data_names_classes_from_folders_and_labels_csv(tmp_path):
    from edgekit.core.data import InputSpec, open_dataset

    spec = [InputSpec("x", (1, 3, 8, 8), "float32")]
    for folder, label in (("cat", 0), ("dog", 1)):
        (tmp_path / "f" / folder).mkdir(parents=True)
        Image.new("RGB", (8, 8), (label * 200, 10, 10)).save(tmp_path / "f" / folder / "a.png")
    assert open_dataset(tmp_path / "f", spec).describe()["class_names"] == {"0": "cat", "1": "dog"}
    (tmp_path / "c").mkdir()
    for name in ("a.png", "b.png"):
        Image.new("RGB", (8, 8)).save(tmp_path / "c" / name)
    (tmp_path / "c" / "labels.csv").write_text(
        "file,label,name\na.png,281,tabby cat\nb.png,207,golden retriever\n"
    )
    described = open_dataset(tmp_path / "c", spec).describe()
    assert described["class_names"] == {"207": "golden retriever", "281": "tabby cat"}
