"""``edgekit deploy MODEL --target T [--target T2 ...] -o DIR``: package a model for each target.

Parses the options, calls the deploy pipeline (:mod:`edgekit.deployment`, the library behind
``edgekit.deploy``) and prints what it reports: progress, one line per bundle, the device summary table.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer
from edgekit.cli.common import (
    RichTrack,
    build_preprocess,
    console,
    err_console,
    parse_input_shapes,
    parse_layer_precision,
)
from edgekit.cli.quantize_cmd import (
    INTEGER_HEAD_HELP,
    AccuracyData,
    AllowCpuFallback,
    Color,
    Executor,
    Layout,
    MaxDrop,
    Mean,
    MinAgreement,
    MinCosine,
    RankingSamples,
    ResizeMode,
    ResizeShorter,
    Scale,
    Size,
    Std,
    WeightRounding,
    Workers,
)
from edgekit.core.errors import DataError
from edgekit.quantize.recipes import RECIPES

PRECISION_HELP = (
    f"auto (int8 with --calib, else the target's float default) or a recipe: {', '.join(RECIPES)}."
)


def register(app: typer.Typer) -> None:
    app.command("deploy")(deploy)


def deploy(
    model: Path = typer.Argument(..., help="ONNX model: float, QDQ (edgekit or onnxruntime) or QOperator."),
    target: list[str] = typer.Option(
        None, "--target", "-t", help="Target to package for (repeatable): {targets}."
    ),
    output: Path = typer.Option(
        None,
        "--output",
        "-o",
        help="Output folder; each target writes DIR/<target> (default with --report: the report's folder).",
    ),
    calib: Path = typer.Option(None, "--calib", help="Calibration data (.npz, .npy, image or array folder)."),
    eval_data: Path = typer.Option(
        None,
        "--eval",
        help="Evaluation data: run each bundle on the device and compare with fp32 on the host.",
    ),
    device: list[str] = typer.Option(
        None,
        "--device",
        help="Agent URL: local (default with --eval), serial:///dev/ttyUSB0?baud=N, tcp://host:port. Repeat it "
        "to shard the evaluation over several devices.",
    ),
    devices: Path = typer.Option(
        None, "--devices", help="A fleet.toml naming the devices (name, url, token_env, targets, tags)."
    ),
    token: str = typer.Option(None, "--token", help="Shared token of the TCP agents given by --device."),
    report: Path = typer.Option(
        None, "--report", help="Write the report here (.html; report.json and report.md go beside it)."
    ),
    fail_on_drop: float = typer.Option(
        None, "--fail-on-drop", help="Exit 1 when any target's top-1 drops by more than this many pp."
    ),
    max_samples: int = typer.Option(None, "--max-samples", help="Evaluate at most this many samples."),
    precision: str = typer.Option("auto", "--precision", help=PRECISION_HELP),
    layer_precision: list[str] = typer.Option(
        None,
        "--layer-precision",
        help="NAME=RECIPE: this node takes another recipe when quantizing (repeatable).",
    ),
    input_shape: list[str] = typer.Option(None, "--input-shape", help="NAME=D0,D1,... (repeatable)."),
    device_hint: str = typer.Option(
        None, "--device-hint", help="Device the bundle is for (intel-vpu: NPU|CPU)."
    ),
    archive: bool = typer.Option(False, "--archive", help="Write each bundle as one .tar.gz."),
    calib_samples: int = typer.Option(
        100, "--calib-samples", help="Calibration samples used when quantizing."
    ),
    method: str = typer.Option("minmax", "--method", help="Calibration method when quantizing."),
    weight_rounding: WeightRounding = "nearest",
    integer_head: bool = typer.Option(False, "--integer-head", help=INTEGER_HEAD_HELP),
    preprocess: str = typer.Option(
        None, "--preprocess", help="Image preprocessing as JSON (or a .json file) for image-folder data."
    ),
    size: Size = None,
    resize_mode: ResizeMode = "resize",
    resize_shorter: ResizeShorter = None,
    color: Color = "RGB",
    scale: Scale = 1.0,
    mean: Mean = None,
    std: Std = None,
    layout: Layout = "NCHW",
    keep_io_layout: bool = typer.Option(
        False,
        "--keep-io-layout",
        help="TFLite targets: keep the ONNX (NCHW) layout at the inputs and outputs.",
    ),
    io_dtype: str = typer.Option(
        None, "--io-dtype", help="nnapi: int8 (default) or uint8 inputs and outputs."
    ),
    nnapi_feature_level: int = typer.Option(
        None,
        "--nnapi-feature-level",
        help="nnapi: the NNAPI feature level the compatibility report is for (1-8).",
    ),
    strict_integer: bool = typer.Option(
        False,
        "--strict-integer",
        help="nnapi: refuse a model with ops that stay float (by default they run on the CPU).",
    ),
    sweep: bool = typer.Option(
        False,
        "--sweep",
        help="Package every recipe each target runs, run each on the device (--eval) and add the size / "
        "latency / accuracy trade-off to the report.",
    ),
    pick: str = typer.Option(
        None,
        "--pick",
        help='Sweep, then keep per target the fastest recipe within a budget: "max-drop=0.5" (top-1 pp), '
        '"min-agreement=99" (%), "min-cosine=0.999".',
    ),
    max_drop: MaxDrop = None,
    min_agreement: MinAgreement = None,
    min_cosine: MinCosine = None,
    accuracy_data: AccuracyData = None,
    executor: Executor = "process",
    workers: Workers = None,
    ranking_samples: RankingSamples = 50,
    allow_cpu_fallback: AllowCpuFallback = False,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Package a model for one or more targets (quantizing first where a target needs int8); with --eval, run
    each bundle on a device and write the accuracy-drop report."""
    from edgekit.core.data import ImagePreprocess

    pre = _read_preprocess(preprocess)
    flags = build_preprocess(size, resize_mode, resize_shorter, color, scale, mean, std, layout)
    if pre is None and flags != ImagePreprocess():
        pre = flags.to_json()
    from edgekit.cli.quantize_cmd import search_options
    from edgekit.deployment import DeployRequest, DeviceRun, Hooks, output_folder, run

    accuracy = search_options(
        max_drop, min_agreement, min_cosine, executor, workers, ranking_samples, allow_cpu_fallback
    )
    if accuracy is None and accuracy_data is not None:
        raise DataError(
            "--accuracy-data goes with an accuracy budget: --max-drop, --min-agreement or --min-cosine"
        )
    if accuracy is not None and calib is None:
        raise DataError(
            f"{accuracy.budget.flag} needs --calib DATA (the budget picks what to keep from int8)"
        )
    if accuracy is not None and (sweep or pick is not None):
        raise DataError(
            f"{accuracy.budget.flag} restores layers of the int8 bundle; it does not go with --sweep/--pick"
        )
    if accuracy_data is not None and not Path(accuracy_data).exists():
        raise DataError(f"accuracy data not found: {accuracy_data}")
    request = DeployRequest(
        model=model,
        targets=tuple(dict.fromkeys(target or ())),
        out_dir=output_folder(output, report),
        calib=calib,
        precision=precision,
        input_shapes=parse_input_shapes(input_shape),
        device_hint=device_hint,
        archive=archive,
        calib_samples=calib_samples,
        method=method,
        weight_rounding=weight_rounding,
        integer_head=integer_head,
        preprocess=pre,
        eval_data=eval_data,
        layer_precision=parse_layer_precision(layer_precision),
        accuracy=accuracy,
        accuracy_data=Path(accuracy_data) if accuracy_data is not None else None,
        target_settings={
            k: v
            for k, v in (
                ("keep_io_layout", keep_io_layout or None),
                ("io_dtype", io_dtype),
                ("feature_level", nnapi_feature_level),
                ("strict_integer", strict_integer or None),
            )
            if v is not None
        },  # fmt: skip
    )
    device_run = DeviceRun.from_options(request, device, token, report, fail_on_drop, max_samples, devices)
    track = RichTrack(enabled=not quiet)
    several = len(request.targets) > 1

    def failure(name: str, message: str) -> None:
        if several:  # one target: its error is the command's one error line
            err_console.print(f"[red]✗[/] {name}: {message}", soft_wrap=True)

    hooks = Hooks(
        say=lambda line: console.print(line, soft_wrap=True),
        warn=lambda line: err_console.print(line, soft_wrap=True, markup=False),
        track=track,
        upload=_upload_progress(track.live),
        bundle=lambda item: console.print(_summary_line(item.target, item.path, item.verification)),
        failure=failure,
    )
    if sweep or pick is not None:
        from edgekit.deployment.sweep import run_sweep
        from edgekit.tradeoff import parse_budget

        budget = parse_budget(pick) if pick is not None else None
        result = run_sweep(request, device_run, hooks, budget)
    else:
        result = run(request, device_run, hooks)
    if result.report is not None:
        _print_summary(result.report)
    if result.gate_failed:
        err_console.print(
            f"[bold red]gate:[/] top-1 drop above {device_run.fail_on_drop} pp on {', '.join(result.gate_failed)}",
            soft_wrap=True,
        )
        raise typer.Exit(1)
    # The bundles that were written stay (each is whole and verified); the last line says what is where.
    result.raise_for_failures()


def _upload_progress(enabled: bool):
    """A rich progress bar for bytes uploaded to the agent (a context manager yielding the callback)."""

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


def _print_summary(report: Mapping[str, Any]) -> None:
    """A compact table for the terminal (report.md and report.html have every column)."""
    from edgekit.report import selection_sentences, summary_rows
    from rich.table import Table

    table = Table(
        title=f"{'onnxruntime' if 'qdq_on_host' in report else 'fp32 (host)'} vs device, {report['samples']} samples",
        caption="top-1 % fp32→device, drop in pp, agreement %, SQNR dB, on-device p50 ms, size vs fp32",
    )
    for h in ("target", "top-1", "drop", "agree", "SQNR", "p50", "size", "gate"):
        table.add_column(h, justify="left" if h == "target" else "right", no_wrap=True)
    for row in summary_rows(dict(report)):
        top1 = f"{row[2]}→{row[3]}" if row[2] != "-" else "-"
        name = f"{row[0]} {row[1]}" if report.get("tradeoff") else row[0]  # a sweep: one row per recipe
        table.add_row(name, top1, row[4], row[6], row[8], row[9], f"{row[12]}x", row[13])
    console.print(table)
    for t in report[
        "targets"
    ]:  # outputs whose rows a detector's selection sets: what the rows' matching found
        for sentence in selection_sentences(t):
            console.print(sentence, markup=False)


def _read_preprocess(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    text = value
    if not value.lstrip().startswith("{"):
        path = Path(value)
        if not path.is_file():
            raise DataError(f"--preprocess expects JSON or a .json file; {value!r} is neither")
        text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"--preprocess is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise DataError("--preprocess must be a JSON object")
    return data


def _summary_line(name: str, path: Path, verification: Mapping[str, Any]) -> str:
    precision = verification.get("precision", "")
    err = verification.get("max_rel_error")
    samples = verification.get("samples")
    outputs = verification.get("outputs") or {}
    cosines = [o["cosine"] for o in outputs.values() if "cosine" in o]
    cosine = f"cosine {min(cosines):.5f}, " if cosines and precision != "fp32" else ""
    figures = (
        f"{cosine}max error {err:.2g} of the output scale on {samples} sample(s)" if err is not None else ""
    )
    line = f"[green]✓[/] {name} → {path} ({', '.join(x for x in (precision, figures) if x)})"
    for key in ("npu", "nnapi"):
        extra = verification.get(key)
        if isinstance(extra, Mapping) and extra.get("note"):
            line += f"\n  {name}: {extra['note']}"
    return line
