"""The device half of ``edgekit deploy``: push each packaged bundle to the agent, run the evaluation set on the
device, compare with fp32 on the host, and write the accuracy-drop report (JSON, Markdown, HTML)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.api import file_sha256
from edgekit.device_eval import agreement_with_reference, host_reference, run_on_device
from edgekit.qoperator import onnxruntime_reference
from edgekit.report import FORMAT_VERSION, render_markdown, summary_rows, write_reports

#: What the report compares the devices with, unless the model brings its own reference.
HOST_REFERENCE = "the model on the host (edgekit.runtime.HostRunner: OpenVINO CPU, f32, QDQ run exactly)"
#: Worst host-side layers copied from the quantizer's report into each target's entry.
WORST_LAYERS = 10


@dataclass
class Outcome:
    report: dict
    failed: list[str]


def _upload_progress(enabled: bool):
    """A rich progress bar for bytes uploaded to the agent (a context manager yielding the callback)."""
    import contextlib

    from edgekit.cli.common import err_console

    @contextlib.contextmanager
    def bar(description: str):
        if not enabled:
            yield None
            return
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      console=err_console, transient=True) as progress:  # fmt: skip
            task = progress.add_task(description, total=None)

            def update(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            yield update

    return bar


def _data_warnings(entries: Sequence[dict], packaged: Sequence[Any], reference: Any) -> list[str]:
    """Preprocessing checks: fp32's own top-1 (the same reference for every target) and the inputs' ranges in the
    evaluation data against the calibration data's, where this run quantized."""
    from edgekit.sanity import data_warnings

    accuracy = next((e["evaluation"]["accuracy"] for e in entries if e["evaluation"].get("accuracy")), {})
    calib = next(
        (
            item.quantize_report["calibration"]["input_ranges"]
            for item in packaged
            if item.quantize_report and "input_ranges" in item.quantize_report.get("calibration", {})
        ),
        None,
    )
    return data_warnings(
        accuracy.get("reference_top1"), accuracy.get("labelled_samples", 0), reference.ranges.to_json(), calib
    )


def evaluate_on_device(
    request: Any, run: Any, packaged: Sequence[Any], track: Callable, say: Callable[[str], None]
) -> Outcome:
    """Run every packaged bundle on the agent at ``run.url``; writes the report when ``run.report`` is set."""
    from edgekit.data import ImagePreprocess, input_specs, open_dataset
    from edgekit.device_agents.client import connect
    from edgekit.model import load_model

    timings: dict[str, float] = {}
    start = time.perf_counter()
    fp32 = load_model(request.model, request.input_shapes, messages=[])  # notes already announced
    preprocess = ImagePreprocess.from_json(dict(request.preprocess)) if request.preprocess else None
    dataset = open_dataset(request.eval_data, input_specs(fp32), preprocess, limit=run.max_samples)
    # A QOperator model's own answers are onnxruntime's integer kernels on the file as given; its QDQ form,
    # run exactly on the host, is reported beside them.
    original = onnxruntime_reference(request.model)
    reference = host_reference(fp32, dataset, run.max_samples, track, runner=original)
    references: dict[str, Any] = {"reference": HOST_REFERENCE}
    if original is not None:
        references = {
            "reference": original.description,
            "qdq_on_host": {"model": HOST_REFERENCE, **agreement_with_reference(fp32, reference)},
        }
        say(
            f"reference: {original.description}; its QDQ form on the host agrees on "
            f"{references['qdq_on_host']['top1_agreement']:.1f} % of the top-1 answers"
        )
    timings["host_fp32_s"] = time.perf_counter() - start

    source_size = Path(request.model).stat().st_size
    entries = []
    bar = _upload_progress(getattr(track, "live", False))
    say(f"connecting to the agent at {run.url}")
    with connect(run.url, token=run.token) as client:
        hello = client.hello()
        for item in packaged:
            with bar(f"uploading {item.target}") as progress:
                entry = run_on_device(client, item.path, reference, track, upload_progress=progress)
            entry["target"] = item.target
            entry["precision"] = item.precision
            entry["size_ratio"] = entry["size_bytes"] / source_size
            if item.quantize_report:
                entry["host_worst_layers"] = list(item.quantize_report.get("worst_layers", []))[:WORST_LAYERS]
            entries.append(entry)
            for stage, seconds in (item.timings or {}).items():
                timings[f"{stage.removesuffix('_s')}_{item.target}_s"] = seconds
            timings[f"upload_{item.target}_s"] = entry["transfer"]["upload_s"]
            timings[f"evaluate_{item.target}_s"] = entry["transfer"]["infer_wall_s"]

    warnings = _data_warnings(entries, packaged, reference)
    for warning in warnings:
        say(f"warning: {warning}")
    failed = []
    if run.fail_on_drop is not None:
        for e in entries:
            acc = e["evaluation"].get("accuracy")
            if acc is not None and acc["top1_drop_pp"] > run.fail_on_drop:
                failed.append(e["target"])
    from edgekit import __version__

    report = {
        "format_version": FORMAT_VERSION,
        "edgekit_version": __version__,
        "model": {
            "path": str(request.model),
            "sha256": file_sha256(request.model),
            "size_bytes": source_size,
        },
        "data": dataset.describe(),
        "samples": len(reference.samples),
        "labelled": reference.labelled,
        **references,
        "device": {"url": run.url, "hello": _hello_summary(hello)},
        "warnings": warnings,
        "fail_on_drop": run.fail_on_drop,
        "failed": failed,
        "targets": entries,
        "timings": timings,
    }
    if run.report is not None:
        html_path = Path(run.report)
        html_path.parent.mkdir(parents=True, exist_ok=True)
        write_reports(report, html_path.with_suffix(".json"), html_path.with_suffix(".md"), html_path)
        say(f"wrote {html_path.with_suffix('.json')}, {html_path.with_suffix('.md')}, {html_path}")
    _print_summary(report, say)
    return Outcome(report, failed)


def _hello_summary(hello: dict) -> dict:
    keep = (
        "machine",
        "os",
        "python",
        "runtimes",
        "free_disk",
        "free_memory",
        "protocol_version",
        "agent_version",
    )
    return {k: hello[k] for k in keep if k in hello}


def _print_summary(report: dict, say: Callable[[str], None]) -> None:
    """A compact table for the terminal (report.md and report.html have every column)."""
    from edgekit.cli.common import console
    from rich.table import Table

    table = Table(
        title=f"{'onnxruntime' if 'qdq_on_host' in report else 'fp32 (host)'} vs device, {report['samples']} samples",
        caption="top-1 % fp32→device, drop in pp, agreement %, SQNR dB, on-device p50 ms, size vs fp32",
    )
    for h in ("target", "top-1", "drop", "agree", "SQNR", "p50", "size", "gate"):
        table.add_column(h, justify="left" if h == "target" else "right", no_wrap=True)
    for row in summary_rows(report):
        top1 = f"{row[2]}→{row[3]}" if row[2] != "-" else "-"
        table.add_row(row[0], top1, row[4], row[6], row[8], row[9], f"{row[12]}x", row[13])
    console.print(table)


__all__ = ["Outcome", "evaluate_on_device", "render_markdown"]
