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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from edgekit.core.errors import EdgekitError
from edgekit.core.model import atomic_write_bytes

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


def label(report: Mapping[str, Any], target: Mapping[str, Any]) -> str:
    """A target entry's name in headings and plots: with a sweep (several recipes per target) its recipe too."""
    return (
        f"{target['target']} {target.get('precision', '')}".strip()
        if report.get("tradeoff")
        else target["target"]
    )


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


def selection_rows(target: dict) -> list[list[str]]:
    """The outputs whose row count the data sets (a detector's kept boxes), matched row to row with fp32's."""
    rows = []
    for name, m in ((target.get("evaluation") or {}).get("selections") or {}).items():
        rows.append([
            name, str(m["reference_rows"]), str(m["candidate_rows"]), str(m["matched_rows"]), _f(m.get("recall")),
            _f(m.get("precision")), f"{m['same_count_samples']} / {m['samples']}", _f(m.get("max_matched_error"), 4),
        ])  # fmt: skip
    return rows


SELECTION_HEADER = [
    "output (rows set by the data)", "fp32 rows", "device rows", "matched", "fp32 rows kept %", "device rows right %",
    "samples with as many rows", "largest matched difference / column scale",
]  # fmt: skip
SELECTION_NOTE = (
    "A device row matches an fp32 row of the same sample when every value is within {tolerance:.0%} of its "
    "column's scale (the largest magnitude in fp32's rows), closest pairs first, each row once. Outputs one "
    "selection sizes (names joined by +) are also matched as one row: a box with its score and class."
)


def selection_sentences(target: dict) -> list[str]:
    """One sentence per selection for the terminal: what the rows' matching found, read together where one
    selection sizes several outputs (names joined by " + ")."""
    selections = (target.get("evaluation") or {}).get("selections") or {}
    joint = {n: m for n, m in selections.items() if " + " in n} or selections
    return [
        f"{target['target']}: {name}: {m['matched_rows']} of fp32's {m['reference_rows']} rows matched "
        f"({_f(m['recall'], 1, ' %')}); {_f(m['precision'], 1, ' %')} of the device's {m['candidate_rows']} rows "
        "are fp32's"
        for name, m in joint.items()
    ]


def _selection_note(target: dict) -> str:
    selections = (target.get("evaluation") or {}).get("selections") or {}
    tolerance = next(iter(selections.values()), {}).get("tolerance", 0)
    return SELECTION_NOTE.format(tolerance=tolerance)


def device_rows(target: dict) -> list[list[str]]:
    """Which device ran what: one row per device of a sharded evaluation (none for a single device)."""
    devices = target.get("devices") or []
    if len(devices) < 2 and not target.get("failover"):
        return []
    rows = []
    for d in devices:
        lat = d.get("latency_ms") or {}
        status = d.get("status", "ok")
        if d.get("reason"):
            status += f": {d['reason']}"
        rows.append([d["name"], str(d.get("samples", 0)), str(d.get("shards", 0)), _f(lat.get("p50"), 3),
                     _f(lat.get("p90"), 3), status])  # fmt: skip
    return rows


DEVICE_HEADER = ["device", "samples", "shards", "p50 ms", "p90 ms", "status"]


def failover_sentences(target: dict) -> list[str]:
    """One sentence per device that dropped during the run, saying where its unfinished samples went."""
    out = []
    for e in target.get("failover") or []:
        text = f"Device `{e['device']}` dropped after {e.get('after_samples', 0)} samples ({e.get('reason')})"
        moved = e.get("moved")
        if moved:
            text += f"; its unfinished samples {moved[0]}-{moved[1]} were moved to the other devices"
        out.append(text + ".")
    return out


def devices_phrase(report: Mapping[str, Any]) -> str:
    """``device `url``` or ``devices `a` (url), `b` (url)`` (the Markdown header)."""
    devices = report.get("devices") or []
    if len(devices) < 2:
        return f"device `{(report.get('device') or {}).get('url')}`"
    return "devices " + ", ".join(
        f"`{d['name']}`" + (f" ({d['url']})" if d["url"] != d["name"] else "") for d in devices
    )


def change_label(drop_pp: float) -> str:
    """The device's top-1 change against fp32 in words: "drop 0.50 pp", "gain 0.50 pp", "no change"."""
    if abs(drop_pp) < 0.005:
        return "no change"
    return f"{'drop' if drop_pp > 0 else 'gain'} {abs(drop_pp):.2f} pp"


def transfer_sentence(target: dict) -> str | None:
    """Upload and evaluation wall time, with on-device compute kept apart (the same words in every rendering)."""
    tr = target.get("transfer") or {}
    if not tr:
        return None
    working = [d for d in target.get("devices") or [] if d.get("samples")]
    if len(working) > 1:
        return (
            f"Upload {_f(tr.get('upload_s'), 2)} s (the slowest device); evaluation wall time "
            f"{_f(tr.get('infer_wall_s'), 2)} s over {len(working)} devices, on-device compute "
            f"{_f(tr.get('compute_s'), 2)} s summed over them (transfer and protocol overhead "
            f"{_f(tr.get('overhead_per_sample_ms'), 3)} ms per sample, kept apart from latency)."
        )
    return (
        f"Upload {_f(tr.get('upload_s'), 2)} s; evaluation wall time {_f(tr.get('infer_wall_s'), 2)} s "
        f"of which on-device compute {_f(tr.get('compute_s'), 2)} s (transfer and protocol overhead "
        f"{_f(tr.get('overhead_per_sample_ms'), 3)} ms per sample, kept apart from latency)."
    )


def size_sentence(target: dict) -> str:
    """The bundle's size, split by file role, so a graph file that outweighs tiny weights is visible."""
    text = f"Bundle `{target.get('bundle')}`, {_f((target.get('size_bytes') or 0) / 1e6, 3)} MB on disk"
    files = target.get("files") or []
    if len(files) > 1:
        parts = [f"{f['name']} ({f.get('role', 'model')}) {_kb(f.get('size_bytes'))}" for f in files]
        text += ": " + ", ".join(parts)
    return text + "."


def _kb(size: int | None) -> str:
    size = size or 0
    return f"{size / 1e6:.3f} MB" if size >= 1e6 else f"{size / 1e3:.1f} KB"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def reference_sentence(report: Mapping[str, Any]) -> str:
    """What the devices are compared with: fp32 on the host, or the reference the model brings (a QOperator
    model: onnxruntime on the file as given, with its QDQ form on the host beside it)."""
    qdq = report.get("qdq_on_host")
    if not qdq:
        return "fp32 runs on the host (OpenVINO CPU, f32)"
    text = f'The reference (the "fp32" columns) is {report.get("reference")}'
    if qdq.get("top1") is not None:
        text += f"; its QDQ form run exactly on the host scores {_f(qdq['top1'])} % top-1"
    return text + f" and agrees with it on {_f(qdq.get('top1_agreement', 0.0))} % of the top-1 answers"


def render_markdown(report: dict) -> str:
    model = report.get("model", {})
    parts = [
        "# edgekit accuracy-drop report",
        "",
        f"Model `{model.get('path')}` (sha256 `{str(model.get('sha256', ''))[:16]}…`, "
        f"{_f((model.get('size_bytes') or 0) / 1e6)} MB), {report.get('samples', 0)} evaluation samples"
        f"{' with labels' if report.get('labelled') else ' (no labels: agreement and error metrics only)'}, "
        f"{devices_phrase(report)}.",
        "",
        f"{reference_sentence(report)}; each target's bundle runs on the device through the agent.",
        "",
        _md_table(SUMMARY_HEADER, summary_rows(report)),
    ]
    for warning in report.get("warnings") or []:
        parts += ["", f"**Warning:** {warning}"]
    if report.get("fail_on_drop") is not None:
        failed = report.get("failed") or []
        parts += ["", f"Gate: top-1 drop must be at most {report['fail_on_drop']} pp: "
                  + (f"**failed** for {', '.join(failed)}." if failed else "passed.")]  # fmt: skip
    if report.get("tradeoff"):
        from edgekit import tradeoff

        parts += ["", tradeoff.markdown(report["tradeoff"])]
    for t in report["targets"]:
        parts += ["", f"## {label(report, t)}", ""]
        parts += [size_sentence(t)]
        transfer = transfer_sentence(t)
        if transfer:
            parts += [transfer]
        devices = device_rows(t)
        if devices:
            parts += [
                "",
                "Devices (the evaluation was sharded; latency is each device's on-device compute):",
                "",
            ]
            parts += [_md_table(DEVICE_HEADER, devices)]
        for sentence in failover_sentences(t):
            parts += ["", sentence]
        outputs, selections = output_rows(t), selection_rows(t)
        if outputs or not selections:
            parts += ["", _md_table(OUTPUT_HEADER, outputs)]
        if selections:
            parts += ["", _selection_note(t), "", _md_table(SELECTION_HEADER, selections)]
        if t.get("accuracy_aware"):
            from edgekit import accuracy_report

            parts += ["", accuracy_report.markdown(t["accuracy_aware"])]
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
    names = [label(report, t) for t in targets]
    plots: list[tuple[str, str]] = []

    # 1. accuracy, and the change against fp32 on its own zoomed axis (or agreement without labels)
    x = np.arange(len(names))
    accs = [(t.get("evaluation") or {}).get("accuracy") for t in targets]
    if all(accs):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(max(8.0, 3.2 * len(names)), 3.4))
        ref = [a["reference_top1"] for a in accs]
        dev = [a["candidate_top1"] for a in accs]
        ax.bar(x - 0.2, ref, 0.4, label="fp32 (host)", color="#8da0cb")
        ax.bar(x + 0.2, dev, 0.4, label="device", color="#fc8d62")
        low, high = min(ref + dev), max(ref + dev)
        ax.set_ylim(max(0.0, low - max(5.0, 0.2 * (high - low))), min(100.0, high + 2.0) + 0.5)
        ax.set_ylabel("top-1 %")
        ax.set_title("top-1 accuracy per target", pad=24)
        ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
        ax.set_xticks(x, names)
        change = [-a["top1_drop_pp"] for a in accs]
        colors = ["#1b9e77" if c >= 0 else "#d95f02" for c in change]
        bars = ax2.bar(x, change, 0.5, color=colors)
        ax2.axhline(0.0, color="#444", linewidth=0.8)
        span = max(0.5, max(abs(c) for c in change))
        ax2.set_ylim(-1.3 * span, 1.3 * span)
        for b, a in zip(bars, accs, strict=True):
            top = b.get_height() >= 0
            ax2.annotate(change_label(a["top1_drop_pp"]), (b.get_x() + b.get_width() / 2, b.get_height()),
                         ha="center", va="bottom" if top else "top", fontsize=8)  # fmt: skip
        ax2.set_ylabel("device - fp32, pp")
        ax2.set_title("top-1 change against fp32", pad=24)
        ax2.set_xticks(x, names)
    else:
        fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(names)), 3.2))
        agree = [(t.get("evaluation") or {}).get("top1_agreement") or 0.0 for t in targets]
        ax.bar(x, agree, 0.5, color="#66c2a5")
        ax.set_ylim(max(0.0, min(agree) - 5.0), 100.5)
        ax.set_ylabel("top-1 agreement with fp32 %")
        ax.set_title("agreement with fp32 per target")
        ax.set_xticks(x, names)
    fig.tight_layout()
    plots.append(("accuracy", _png(fig)))

    # 2. per-layer SQNR (host-side quantizer), worst layers per quantized target, one row per target
    with_layers = [t for t in targets if t.get("host_worst_layers")]
    if with_layers:
        rows_per = [
            [r for r in t["host_worst_layers"] if r.get("sqnr_db") is not None][::-1] for t in with_layers
        ]
        heights = [max(1.6, 0.28 * len(r) + 0.8) for r in rows_per]
        fig, axes = plt.subplots(len(with_layers), 1, figsize=(8.0, sum(heights)), squeeze=False,
                                 gridspec_kw={"height_ratios": heights})  # fmt: skip
        for ax, t, rows in zip(axes[:, 0], with_layers, rows_per, strict=True):
            ax.barh([_short(r["tensor"]) for r in rows], [r["sqnr_db"] for r in rows], color="#e78ac3")
            ax.set_xlabel("SQNR dB (higher is better)")
            ax.set_title(f"{label(report, t)}: worst layers", fontsize=9)
            ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        plots.append(("layers", _png(fig)))

    # 3. on-device latency distribution
    lat = []
    for t in targets:
        devices = [d for d in t.get("devices") or [] if d.get("latency_samples_ms")]
        if len(devices) > 1:  # a sharded evaluation: one box per device
            lat += [(f"{label(report, t)}\n{d['name']}", d["latency_samples_ms"]) for d in devices]
        elif t.get("latency_samples_ms"):
            lat.append((label(report, t), t["latency_samples_ms"]))
    if lat:
        fig, ax = plt.subplots(figsize=(max(4.5, 1.6 * len(lat)), 3.2))
        ax.boxplot([v for _, v in lat], showfliers=True)
        ax.set_xticks(range(1, len(lat) + 1), [n for n, _ in lat])
        ax.set_ylabel("on-device compute per sample, ms")
        ax.set_title("latency distribution")
        plots.append(("latency", _png(fig)))

    # 4. with a sweep: accuracy against latency per target, size as marker area, the Pareto front marked
    if report.get("tradeoff"):
        from edgekit import tradeoff

        plots += [(name, _png(fig)) for name, fig in tradeoff.figures(report["tradeoff"])]
    searched = {t["target"]: t["accuracy_aware"] for t in report["targets"] if t.get("accuracy_aware")}
    if searched:
        from edgekit import accuracy_report

        plots.append(("accuracy-aware", _png(accuracy_report.plot(searched))))
    return plots


def _short(name: str, width: int = 44) -> str:
    """A layer name cut in the middle, so long names keep both ends and never run into the next plot."""
    if len(name) <= width:
        return name
    half = (width - 1) // 2
    return name[:half] + "…" + name[-(width - 1 - half) :]


def _html_table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _confusion_html(target: dict, class_names: dict[str, str]) -> str:
    """A confusion matrix for up to 20 classes; beyond, the confusions that repeat (none: no table)."""
    triples = (target.get("evaluation") or {}).get("confusion") or []
    if not triples:
        return ""

    def name(c: int) -> str:
        return f"{class_names[str(c)]} ({c})" if str(c) in class_names else str(c)

    classes = sorted({t for t, _, _ in triples} | {p for _, p, _ in triples})
    if len(classes) <= 20:
        idx = {c: i for i, c in enumerate(classes)}
        m = np.zeros((len(classes), len(classes)), int)
        for t, p, c in triples:
            m[idx[t], idx[p]] += c
        rows = [[name(c)] + [str(v) if v else "" for v in m[i]] for i, c in enumerate(classes)]
        return "<h4>confusion matrix (rows: label, columns: device prediction)</h4>" + _html_table(
            ["label"] + [name(c) for c in classes], rows, "confusion"
        )
    wrong = sorted(((c, t, p) for t, p, c in triples if t != p and c > 1), reverse=True)[:10]
    if not wrong:
        return ""
    rows = [[name(t), name(p), str(c)] for c, t, p in wrong]
    return "<h4>most frequent confusions</h4>" + _html_table(
        ["label", "predicted", "count"], rows, "confusion"
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#222;max-width:1200px}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}th,td{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f0f0f0}td:first-child,th:first-child{text-align:left}
img{max-width:100%;margin:.5em 0}.fail{color:#b00;font-weight:bold}.ok{color:#070}.warning{color:#a60}
table.confusion td{min-width:1.6em;text-align:center}
"""


def _code(markdown: str) -> str:
    """Escape a sentence and turn its `backticks` into <code>."""
    pieces = html.escape(markdown).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def _machine(device: dict) -> str:
    machine = (device.get("hello") or {}).get("machine")
    return f" ({html.escape(str(machine))})" if machine else ""


def _devices_html(report: dict, device: dict) -> str:
    if len(report.get("devices") or []) > 1:
        return _code(devices_phrase(report))
    return f"device <code>{html.escape(str(device.get('url')))}</code>{_machine(device)}"


def render_html(report: dict) -> str:
    model = report.get("model", {})
    device = report.get("device") or {}
    failed = report.get("failed") or []
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>edgekit report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>edgekit accuracy-drop report</h1>",
        f"<p>Model <code>{html.escape(str(model.get('path')))}</code>, {report.get('samples', 0)} evaluation "
        f"samples{' with labels' if report.get('labelled') else ' without labels'}; "
        f"{_devices_html(report, device)}. "
        f"{html.escape(reference_sentence(report))}; each target's bundle runs on the device through the agent.</p>",
        "<h2>Summary</h2>",
        _html_table(SUMMARY_HEADER, summary_rows(report), "summary"),
        *(f"<p class='warning'>Warning: {html.escape(w)}</p>" for w in report.get("warnings") or []),
    ]
    if report.get("fail_on_drop") is not None:
        cls, text = ("fail", f"failed for {', '.join(failed)}") if failed else ("ok", "passed")
        parts.append(f"<p class='{cls}'>Gate: top-1 drop at most {report['fail_on_drop']} pp: {text}.</p>")
    if report.get("tradeoff"):
        from edgekit import tradeoff

        parts += ["<h2>Trade-off: recipes per target</h2>", tradeoff.html_table(report["tradeoff"])]
    parts.append("<h2>Plots</h2>")
    for name, uri in _plots(report):
        parts.append(f"<img alt='{name}' id='plot-{name}' src='{uri}'>")
    for t in report["targets"]:
        parts.append(f"<h2>{html.escape(label(report, t))}</h2>")
        parts.append(f"<p class='size'>{_code(size_sentence(t))}</p>")
        transfer = transfer_sentence(t)
        if transfer:
            parts.append(f"<p class='transfer'>{html.escape(transfer)}</p>")
        devices = device_rows(t)
        if devices:
            parts.append(_html_table(DEVICE_HEADER, devices, "devices"))
        parts += [f"<p class='warning failover'>{_code(x)}</p>" for x in failover_sentences(t)]
        outputs, selections = output_rows(t), selection_rows(t)
        if outputs or not selections:
            parts.append(_html_table(OUTPUT_HEADER, outputs, "outputs"))
        if selections:
            parts.append(f"<p class='selections'>{html.escape(_selection_note(t))}</p>")
            parts.append(_html_table(SELECTION_HEADER, selections, "selections"))
        parts.append(_confusion_html(t, (report.get("data") or {}).get("class_names") or {}))
        if t.get("accuracy_aware"):
            from edgekit import accuracy_report

            parts.append(accuracy_report.html_section(t["accuracy_aware"]))
    parts.append("</body></html>")
    return "\n".join(parts)
