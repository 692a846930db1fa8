"""The device half of a deploy: push each packaged bundle to the devices (edgekit.fleet: sharded when there are
several), run the evaluation set there in bounded memory (edgekit.device_eval), compare with fp32 on the host,
and write the accuracy-drop report (JSON, Markdown, HTML)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgekit.deployment.package import file_sha256, image_preprocess, request_data
from edgekit.deployment.request import DeployRequest, DeviceRun, Hooks, Packaged, _no_upload

#: What the report compares the devices with, unless the model brings its own reference.
HOST_REFERENCE = "the model on the host (edgekit.core.runtime.HostRunner: OpenVINO CPU, f32, QDQ run exactly)"
#: Worst host-side layers copied from the quantizer's report into each target's entry.
WORST_LAYERS = 10


def _data_warnings(entries: Sequence[dict], packaged: Sequence[Packaged], reference: Any) -> list[str]:
    """Preprocessing checks: fp32's own top-1 (the same reference for every target) and the inputs' ranges in the
    evaluation data against the calibration data's, where this run quantized."""
    from edgekit.core.sanity import data_warnings

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
    """Run every packaged bundle on the devices of ``device_run`` (sharded when there are several); returns the
    report (JSON-ready) and writes it when ``device_run.report`` is set. ``model``: the source model as loaded
    (loaded here when None). Memory stays bounded whatever the evaluation set's size (edgekit.device_eval)."""
    from edgekit import __version__
    from edgekit.core.data import input_specs, open_dataset
    from edgekit.core.qoperator import onnxruntime_reference
    from edgekit.device_eval import host_reference
    from edgekit.fleet import FleetOptions, evaluate_bundle
    from edgekit.report import FORMAT_VERSION, write_reports

    hooks = hooks or Hooks()
    assert request.eval_data is not None
    timings: dict[str, float] = {}
    start = time.perf_counter()
    if model is None:
        from edgekit.core.model import load_model

        model = load_model(request.model, request.input_shapes, messages=[], data=request_data(request))
    dataset = open_dataset(
        request.eval_data, input_specs(model), image_preprocess(request), limit=device_run.max_samples
    )
    # A QOperator model's own answers are onnxruntime's integer kernels on the file as given; its QDQ form,
    # run exactly on the host, is reported beside them.
    original = onnxruntime_reference(request.model)
    reference = host_reference(model, dataset, device_run.max_samples, hooks.track, runner=original,
                               agreement_model=model if original is not None else None)  # fmt: skip
    with reference:
        references: dict[str, Any] = {"reference": HOST_REFERENCE}
        if original is not None:
            references = {
                "reference": original.description,
                "qdq_on_host": {"model": HOST_REFERENCE, **(reference.agreement or {})},
            }
            hooks.say(
                f"reference: {original.description}; its QDQ form on the host agrees on "
                f"{references['qdq_on_host']['top1_agreement']:.1f} % of the top-1 answers"
            )
        timings["host_fp32_s"] = time.perf_counter() - start

        source_size = Path(request.model).stat().st_size
        entries = []
        devices = device_run.devices
        hooks.say(
            "evaluating on "
            + ", ".join(d.name if d.name == d.url else f"{d.name} ({d.url})" for d in devices)
        )
        upload = hooks.upload if len(devices) == 1 else _no_upload
        for item in packaged:
            with upload(f"uploading {item.target}") as progress:
                entry = evaluate_bundle(item.path, devices, reference, dataset, FleetOptions(), hooks.track,
                                        upload_progress=progress, say=hooks.say)  # fmt: skip
            entry["target"] = item.target
            entry["precision"] = item.precision
            entry["size_ratio"] = entry["size_bytes"] / source_size
            if item.quantize_report:
                entry["host_worst_layers"] = list(item.quantize_report.get("worst_layers", []))[:WORST_LAYERS]
                if item.quantize_report.get("accuracy_aware"):
                    section = dict(item.quantize_report["accuracy_aware"])
                    p50 = (entry.get("latency_ms") or {}).get("p50")
                    if p50 is not None:  # the restored bundle on the device (the int8 one is not built)
                        section["cost"] = {**section.get("cost", {}), "device_p50_ms": {"restored": p50}}
                    entry["accuracy_aware"] = section
            entries.append(entry)
            for stage, seconds in (item.timings or {}).items():
                timings[f"{stage.removesuffix('_s')}_{item.target}_s"] = seconds
            timings[f"upload_{item.target}_s"] = entry["transfer"]["upload_s"]
            timings[f"evaluate_{item.target}_s"] = entry["transfer"]["infer_wall_s"]
        hellos: dict[str, dict] = {}
        for e in entries:
            hellos.update(e.pop("hello", {}))

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
        "samples": reference.count,
        "labelled": reference.labelled,
        **references,
        "device": {"url": devices[0].url, "hello": hellos.get(devices[0].name, {})},
        "devices": [{**d.to_json(), "hello": hellos.get(d.name, {})} for d in devices],
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
