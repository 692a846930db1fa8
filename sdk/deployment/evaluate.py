"""The device half of a deploy: push each packaged bundle to the agent, run the evaluation set on the device,
compare with fp32 on the host, and write the accuracy-drop report (JSON, Markdown, HTML)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.deployment.package import file_sha256, image_preprocess
from edgekit.deployment.request import DeployRequest, DeviceRun, Hooks, Packaged

#: What the report compares the devices with, unless the model brings its own reference.
HOST_REFERENCE = "the model on the host (edgekit.runtime.HostRunner: OpenVINO CPU, f32, QDQ run exactly)"
#: Worst host-side layers copied from the quantizer's report into each target's entry.
WORST_LAYERS = 10


def _data_warnings(entries: Sequence[dict], packaged: Sequence[Packaged], reference: Any) -> list[str]:
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
    request: DeployRequest,
    device_run: DeviceRun,
    packaged: Sequence[Packaged],
    hooks: Hooks | None = None,
    model: Any = None,
) -> dict[str, Any]:
    """Run every packaged bundle on the agent at ``device_run.url``; returns the report (JSON-ready) and writes
    it when ``device_run.report`` is set. ``model``: the source model as loaded (loaded here when None)."""
    from edgekit import __version__
    from edgekit.data import input_specs, open_dataset
    from edgekit.device_agents.client import connect
    from edgekit.device_eval import agreement_with_reference, host_reference, run_on_device
    from edgekit.qoperator import onnxruntime_reference
    from edgekit.report import FORMAT_VERSION, write_reports

    hooks = hooks or Hooks()
    assert request.eval_data is not None
    timings: dict[str, float] = {}
    start = time.perf_counter()
    if model is None:
        from edgekit.model import load_model

        model = load_model(request.model, request.input_shapes, messages=[])
    dataset = open_dataset(
        request.eval_data, input_specs(model), image_preprocess(request), limit=device_run.max_samples
    )
    # A QOperator model's own answers are onnxruntime's integer kernels on the file as given; its QDQ form,
    # run exactly on the host, is reported beside them.
    original = onnxruntime_reference(request.model)
    reference = host_reference(model, dataset, device_run.max_samples, hooks.track, runner=original)
    references: dict[str, Any] = {"reference": HOST_REFERENCE}
    if original is not None:
        references = {
            "reference": original.description,
            "qdq_on_host": {"model": HOST_REFERENCE, **agreement_with_reference(model, reference)},
        }
        hooks.say(
            f"reference: {original.description}; its QDQ form on the host agrees on "
            f"{references['qdq_on_host']['top1_agreement']:.1f} % of the top-1 answers"
        )
    timings["host_fp32_s"] = time.perf_counter() - start

    source_size = Path(request.model).stat().st_size
    entries = []
    hooks.say(f"connecting to the agent at {device_run.url}")
    with connect(device_run.url, token=device_run.token) as client:
        hello = client.hello()
        for item in packaged:
            with hooks.upload(f"uploading {item.target}") as progress:
                entry = run_on_device(client, item.path, reference, hooks.track, upload_progress=progress)
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
        hooks.say(f"warning: {warning}")
    failed = []
    if device_run.fail_on_drop is not None:
        for e in entries:
            acc = e["evaluation"].get("accuracy")
            if acc is not None and acc["top1_drop_pp"] > device_run.fail_on_drop:
                failed.append(e["target"])
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
        "device": {"url": device_run.url, "hello": _hello_summary(hello)},
        "warnings": warnings,
        "fail_on_drop": device_run.fail_on_drop,
        "failed": failed,
        "targets": entries,
        "timings": timings,
    }
    if device_run.report is not None:
        html_path = Path(device_run.report)
        html_path.parent.mkdir(parents=True, exist_ok=True)
        write_reports(report, html_path.with_suffix(".json"), html_path.with_suffix(".md"), html_path)
        hooks.say(f"wrote {html_path.with_suffix('.json')}, {html_path.with_suffix('.md')}, {html_path}")
    return report


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
