"""The accuracy-drop report: one JSON document (schema in docs/report.md), rendered as Markdown and as one
self-contained HTML page with embedded matplotlib plots.

``report.json`` is the source of truth; ``render_markdown`` and ``render_html`` only read it, so
``edgekit report report.json --html out.html`` re-renders exactly what ``edgekit deploy`` wrote.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from edgekit.errors import EdgekitError
from edgekit.model import atomic_write_bytes

FORMAT_VERSION = "1.0"


class ReportError(EdgekitError):
    """A report file that cannot be read or is not an edgekit report."""


def latency_summary(seconds: Sequence[float]) -> dict[str, Any]:
    """p50/p90/p99/mean/min/max in milliseconds of per-sample on-device compute times."""
    if not seconds:
        return {"samples": 0}
    ms = np.asarray(seconds, np.float64) * 1e3
    return {
        "samples": int(ms.size),
        "p50": float(np.percentile(ms, 50)),
        "p90": float(np.percentile(ms, 90)),
        "p99": float(np.percentile(ms, 99)),
        "mean": float(ms.mean()),
        "min": float(ms.min()),
        "max": float(ms.max()),
    }


def load_report(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise ReportError(f"report not found: {p}")
    try:
        data = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{p} is not a JSON report: {exc}") from None
    if not isinstance(data, dict) or "targets" not in data or "format_version" not in data:
        raise ReportError(f"{p} is not an edgekit deploy report (no format_version/targets)")
    major = str(data["format_version"]).split(".")[0]
    if major != FORMAT_VERSION.split(".")[0]:
        raise ReportError(
            f"{p}: report format {data['format_version']} is not supported (this edgekit reads 1.x)"
        )
    return data


def write_reports(report: dict, json_path: Path | None, md_path: Path | None, html_path: Path | None) -> None:
    """Write whichever renderings are asked for, each atomically."""
    if json_path is not None:
        atomic_write_bytes(json_path, (json.dumps(report, indent=2, allow_nan=False) + "\n").encode())
    if md_path is not None:
        atomic_write_bytes(md_path, render_markdown(report).encode())
    if html_path is not None:
        atomic_write_bytes(html_path, render_html(report).encode())


# ------------------------------------------------------------------------------------------ formatting


def _f(value: Any, digits: int = 2, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "-"
    return f"{value:.{digits}f}{unit}"


def _primary(target: dict) -> dict:
    ev = target.get("evaluation") or {}
    outputs = ev.get("outputs") or {}
    name = ev.get("primary_output") or next(iter(outputs), None)
    return outputs.get(name, {}) if name else {}


def summary_rows(report: dict) -> list[list[str]]:
    """One row per target: the numbers people compare."""
    rows = []
    for t in report["targets"]:
        ev = t.get("evaluation") or {}
        acc = ev.get("accuracy") or {}
        out = _primary(t)
        lat = t.get("latency_ms") or {}
        rows.append([
            t["target"],
            t.get("precision", "-"),
            _f(acc.get("reference_top1")),
            _f(acc.get("candidate_top1")),
            _f(acc.get("top1_drop_pp")),
            _f(acc.get("top5_drop_pp")),
            _f(ev.get("top1_agreement")),
            _f(out.get("cosine"), 5),
            _f(out.get("sqnr_db"), 1),
            _f(lat.get("p50"), 3),
            _f(lat.get("p90"), 3),
            _f(lat.get("p99"), 3),
            _f(t.get("size_ratio"), 3),
            "FAIL" if t["target"] in report.get("failed", []) else "ok",
        ])  # fmt: skip
    return rows


SUMMARY_HEADER = [
    "target", "precision", "fp32 top-1 %", "device top-1 %", "top-1 drop pp", "top-5 drop pp", "agreement %",
    "cosine", "SQNR dB", "p50 ms", "p90 ms", "p99 ms", "size x fp32", "gate",
]  # fmt: skip


def output_rows(target: dict) -> list[list[str]]:
    rows = []
    for name, m in ((target.get("evaluation") or {}).get("outputs") or {}).items():
        rows.append([
            name, _f(m.get("cosine"), 5), _f(m.get("sqnr_db"), 1), _f(m.get("mae"), 5), _f(m.get("rmse"), 5),
            _f(m.get("relative_l2"), 5), _f(m.get("max_abs_error"), 5),
        ])  # fmt: skip
    return rows


OUTPUT_HEADER = ["output", "cosine", "SQNR dB", "MAE", "RMSE", "relative L2", "max abs error"]


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(report: dict) -> str:
    model = report.get("model", {})
    parts = [
        "# edgekit accuracy-drop report",
        "",
        f"Model `{model.get('path')}` (sha256 `{str(model.get('sha256', ''))[:16]}…`, "
        f"{_f((model.get('size_bytes') or 0) / 1e6)} MB), {report.get('samples', 0)} evaluation samples"
        f"{' with labels' if report.get('labelled') else ' (no labels: agreement and error metrics only)'}, "
        f"device `{(report.get('device') or {}).get('url')}`.",
        "",
        "fp32 runs on the host (OpenVINO CPU, f32); each target's bundle runs on the device through the agent.",
        "",
        _md_table(SUMMARY_HEADER, summary_rows(report)),
    ]
    if report.get("fail_on_drop") is not None:
        failed = report.get("failed") or []
        parts += ["", f"Gate: top-1 drop must be at most {report['fail_on_drop']} pp: "
                  + (f"**failed** for {', '.join(failed)}." if failed else "passed.")]  # fmt: skip
    for t in report["targets"]:
        parts += ["", f"## {t['target']}", ""]
        parts += [f"Bundle `{t.get('bundle')}`, {_f((t.get('size_bytes') or 0) / 1e6, 3)} MB on disk."]
        tr = t.get("transfer") or {}
        if tr:
            parts += [
                f"Upload {_f(tr.get('upload_s'), 2)} s; evaluation wall time {_f(tr.get('infer_wall_s'), 2)} s "
                f"of which on-device compute {_f(tr.get('compute_s'), 2)} s (transfer and protocol overhead "
                f"{_f(tr.get('overhead_per_sample_ms'), 3)} ms per sample, kept apart from latency)."
            ]
        parts += ["", _md_table(OUTPUT_HEADER, output_rows(t))]
        layers = t.get("host_worst_layers") or []
        if layers:
            parts += ["", "Worst layers on the host (quantizer, SQNR vs fp32):", ""]
            parts += [_md_table(["tensor", "SQNR dB", "cosine"],
                                [[r["tensor"], _f(r.get("sqnr_db"), 1), _f(r.get("cosine"), 4)] for r in layers])]  # fmt: skip
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------------------------------------- HTML


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=96, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _plots(report: dict) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = report["targets"]
    names = [t["target"] for t in targets]
    plots: list[tuple[str, str]] = []

    # 1. accuracy and drop (or agreement without labels)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(names)), 3.2))
    x = np.arange(len(names))
    accs = [(t.get("evaluation") or {}).get("accuracy") for t in targets]
    if all(accs):
        ref = [a["reference_top1"] for a in accs]
        dev = [a["candidate_top1"] for a in accs]
        ax.bar(x - 0.2, ref, 0.4, label="fp32 (host)", color="#8da0cb")
        bars = ax.bar(x + 0.2, dev, 0.4, label="device", color="#fc8d62")
        for b, a in zip(bars, accs, strict=True):
            ax.annotate(f"-{a['top1_drop_pp']:.2f} pp", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=8)  # fmt: skip
        ax.set_ylabel("top-1 %")
        ax.set_title("top-1 accuracy per target")
        ax.legend(loc="lower right", fontsize=8)
    else:
        agree = [(t.get("evaluation") or {}).get("top1_agreement") or 0.0 for t in targets]
        ax.bar(x, agree, 0.5, color="#66c2a5")
        ax.set_ylabel("top-1 agreement with fp32 %")
        ax.set_title("agreement with fp32 per target")
    ax.set_xticks(x, names)
    plots.append(("accuracy", _png(fig)))

    # 2. per-layer SQNR (host-side quantizer), worst layers per quantized target
    with_layers = [t for t in targets if t.get("host_worst_layers")]
    if with_layers:
        fig, axes = plt.subplots(1, len(with_layers), figsize=(4.8 * len(with_layers), 3.4), squeeze=False)
        for ax, t in zip(axes[0], with_layers, strict=True):
            rows = [r for r in t["host_worst_layers"] if r.get("sqnr_db") is not None][::-1]
            ax.barh([r["tensor"][-28:] for r in rows], [r["sqnr_db"] for r in rows], color="#e78ac3")
            ax.set_xlabel("SQNR dB (higher is better)")
            ax.set_title(f"{t['target']}: worst layers", fontsize=9)
            ax.tick_params(axis="y", labelsize=7)
        plots.append(("layers", _png(fig)))

    # 3. on-device latency distribution
    lat = [(t["target"], t.get("latency_samples_ms") or []) for t in targets]
    lat = [(n, v) for n, v in lat if v]
    if lat:
        fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(lat)), 3.2))
        ax.boxplot([v for _, v in lat], showfliers=True)
        ax.set_xticks(range(1, len(lat) + 1), [n for n, _ in lat])
        ax.set_ylabel("on-device compute per sample, ms")
        ax.set_title("latency distribution")
        plots.append(("latency", _png(fig)))
    return plots


def _html_table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _confusion_html(target: dict) -> str:
    triples = (target.get("evaluation") or {}).get("confusion") or []
    if not triples:
        return ""
    classes = sorted({t for t, _, _ in triples} | {p for _, p, _ in triples})
    if len(classes) <= 20:
        idx = {c: i for i, c in enumerate(classes)}
        m = np.zeros((len(classes), len(classes)), int)
        for t, p, c in triples:
            m[idx[t], idx[p]] += c
        rows = [[str(c)] + [str(v) if v else "" for v in m[i]] for i, c in enumerate(classes)]
        return "<h4>confusion matrix (rows: label, columns: device prediction)</h4>" + _html_table(
            ["label"] + [str(c) for c in classes], rows, "confusion"
        )
    wrong = sorted(((c, t, p) for t, p, c in triples if t != p), reverse=True)[:10]
    rows = [[str(t), str(p), str(c)] for c, t, p in wrong]
    return "<h4>most frequent confusions</h4>" + _html_table(
        ["label", "predicted", "count"], rows, "confusion"
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
img{max-width:100%;margin:.5em 0}.fail{color:#b00;font-weight:bold}.ok{color:#070}
table.confusion td{min-width:1.6em;text-align:center}
"""


def _machine(device: dict) -> str:
    machine = (device.get("hello") or {}).get("machine")
    return f" ({html.escape(str(machine))})" if machine else ""


def render_html(report: dict) -> str:
    model = report.get("model", {})
    device = report.get("device") or {}
    failed = report.get("failed") or []
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>edgekit report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>edgekit accuracy-drop report</h1>",
        f"<p>Model <code>{html.escape(str(model.get('path')))}</code>, {report.get('samples', 0)} evaluation "
        f"samples{' with labels' if report.get('labelled') else ' without labels'}; device "
        f"<code>{html.escape(str(device.get('url')))}</code>{_machine(device)}. fp32 runs on the host "
        "(OpenVINO CPU, f32); each target's bundle runs on the device through the agent.</p>",
        "<h2>Summary</h2>",
        _html_table(SUMMARY_HEADER, summary_rows(report), "summary"),
    ]
    if report.get("fail_on_drop") is not None:
        cls, text = ("fail", f"failed for {', '.join(failed)}") if failed else ("ok", "passed")
        parts.append(f"<p class='{cls}'>Gate: top-1 drop at most {report['fail_on_drop']} pp: {text}.</p>")
    parts.append("<h2>Plots</h2>")
    for name, uri in _plots(report):
        parts.append(f"<img alt='{name}' id='plot-{name}' src='{uri}'>")
    for t in report["targets"]:
        parts.append(f"<h2>{html.escape(t['target'])}</h2>")
        parts.append(f"<p>Bundle <code>{html.escape(str(t.get('bundle')))}</code>, "
                     f"{_f((t.get('size_bytes') or 0) / 1e6, 3)} MB.</p>")  # fmt: skip
        parts.append(_html_table(OUTPUT_HEADER, output_rows(t), "outputs"))
        parts.append(_confusion_html(t))
    parts.append("</body></html>")
    return "\n".join(parts)
