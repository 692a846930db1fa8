"""``edgekit deploy MODEL --target T [--target T2 ...] -o DIR``: package a model for each target.

Each target's bundle goes to ``DIR/<target>`` (``DIR/<target>.tar.gz`` with ``--archive``). A float
model with ``--calib`` is quantized first with the activation dtype each target wants (intel-vpu:
uint8, the TFLite targets: int8), once per dtype; a QDQ model is packaged as it is. Everything the
user can get wrong is checked before the slow work starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from edgekit.cli.common import RichTrack, build_preprocess, console, err_console, parse_input_shapes
from edgekit.cli.quantize_cmd import (
    INTEGER_HEAD_HELP,
    Color,
    Layout,
    Mean,
    ResizeMode,
    ResizeShorter,
    Scale,
    Size,
    Std,
)
from edgekit.errors import DataError, EdgekitError, OutputError, TargetError

PRECISIONS = ("auto", "fp32", "int8")
VERIFY_SAMPLES = 3
#: Evaluation samples the quantizer uses for its per-layer SQNR (the device run uses all of --max-samples).
LAYER_SAMPLES = 25


def register(app: typer.Typer) -> None:
    app.command("deploy")(deploy)


@dataclass(frozen=True)
class DeployRequest:
    """What ``edgekit deploy`` was asked to do, validated."""

    model: Path
    targets: tuple[str, ...]
    out_dir: Path
    calib: Path | None = None
    precision: str = "auto"
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    device_hint: str | None = None
    archive: bool = False
    calib_samples: int = 100
    method: str = "minmax"
    #: Quantize the output head (Softmax and the pooling before it) too, on targets with float outputs.
    integer_head: bool = False
    preprocess: Mapping[str, Any] | None = None
    eval_data: Path | None = None
    #: Target-specific settings given on the command line, passed to the targets whose options have them:
    #: keep_io_layout (arm-cpu, nnapi), io_dtype, feature_level and strict_integer (nnapi).
    target_settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Packaged:
    target: str
    path: Path
    precision: str
    verification: Mapping[str, Any]
    #: The quantizer's report when this run quantized the model for the target (per-layer SQNR on the host).
    quantize_report: Mapping[str, Any] | None = None
    #: Wall time of this target's stages: quantize_s (0 when shared with an earlier target), package_s.
    timings: Mapping[str, float] = field(default_factory=dict)


def deploy(
    model: Path = typer.Argument(..., help="ONNX model: float, QDQ (edgekit or onnxruntime) or QOperator."),
    target: list[str] = typer.Option(
        None, "--target", "-t", help="Target to package for (repeatable): {targets}."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Output folder; each target writes DIR/<target>."
    ),
    calib: Path = typer.Option(None, "--calib", help="Calibration data (.npz, .npy, image or array folder)."),
    eval_data: Path = typer.Option(
        None,
        "--eval",
        help="Evaluation data: run each bundle on the device and compare with fp32 on the host.",
    ),
    device: str = typer.Option(
        None,
        "--device",
        help="Agent URL: local (default with --eval), serial:///dev/ttyUSB0?baud=N, tcp://host:port.",
    ),
    token: str = typer.Option(None, "--token", help="Shared token of a TCP agent on another host."),
    report: Path = typer.Option(
        None, "--report", help="Write the report here (.html; report.json and report.md go beside it)."
    ),
    fail_on_drop: float = typer.Option(
        None, "--fail-on-drop", help="Exit 1 when any target's top-1 drops by more than this many pp."
    ),
    max_samples: int = typer.Option(None, "--max-samples", help="Evaluate at most this many samples."),
    precision: str = typer.Option("auto", "--precision", help="auto | fp32 | int8."),
    input_shape: list[str] = typer.Option(None, "--input-shape", help="NAME=D0,D1,... (repeatable)."),
    device_hint: str = typer.Option(
        None, "--device-hint", help="Device the bundle is for (intel-vpu: NPU|MYRIAD|CPU)."
    ),
    archive: bool = typer.Option(False, "--archive", help="Write each bundle as one .tar.gz."),
    calib_samples: int = typer.Option(
        100, "--calib-samples", help="Calibration samples used when quantizing."
    ),
    method: str = typer.Option("minmax", "--method", help="Calibration method when quantizing."),
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
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Package a model for one or more targets (quantizing first where a target needs int8); with --eval, run
    each bundle on a device and write the accuracy-drop report."""
    from edgekit.data import ImagePreprocess

    pre = _read_preprocess(preprocess)
    flags = build_preprocess(size, resize_mode, resize_shorter, color, scale, mean, std, layout)
    if pre is None and flags != ImagePreprocess():
        pre = flags.to_json()
    request = DeployRequest(
        model=model,
        targets=tuple(dict.fromkeys(target or ())),
        out_dir=output,
        calib=calib,
        precision=precision,
        input_shapes=parse_input_shapes(input_shape),
        device_hint=device_hint,
        archive=archive,
        calib_samples=calib_samples,
        method=method,
        integer_head=integer_head,
        preprocess=pre,
        eval_data=eval_data,
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
    run = DeviceRun.from_options(request, device, token, report, fail_on_drop, max_samples)
    if run is not None and run.url != "local":
        _probe(run)  # an unreachable or refusing device fails now, before the slow work
    track = RichTrack(enabled=not quiet)
    results, failures = package_targets(
        request,
        say=lambda line: console.print(line, soft_wrap=True),
        track=track,
        warn=lambda line: err_console.print(line, soft_wrap=True, markup=False),
    )
    if len(request.targets) == 1 and failures:
        raise TargetError(failures[0][1])
    for name, message in failures:
        err_console.print(f"[red]✗[/] {name}: {message}", soft_wrap=True)
    if run is not None and results:
        from edgekit.deploy_run import evaluate_on_device

        outcome = evaluate_on_device(request, run, results, track, say=lambda line: console.print(line))
        if outcome.failed:
            err_console.print(
                f"[bold red]gate:[/] top-1 drop above {run.fail_on_drop} pp on {', '.join(outcome.failed)}",
                soft_wrap=True,
            )
            raise typer.Exit(1)
    if failures:
        # The bundles that were written stay (each is whole and verified); the last line says what is where.
        written = [f"{item.target} written to {item.path}" for item in results]
        failed = [f"{name} failed: {message}" for name, message in failures]
        raise TargetError("; ".join(written + failed))


def _probe(run: DeviceRun) -> None:
    from edgekit.device_agents.client import connect

    with connect(run.url, token=run.token) as client:
        client.hello()


@dataclass(frozen=True)
class DeviceRun:
    """The device half of ``edgekit deploy``: where to run, what to write, when to fail."""

    url: str
    token: str | None
    report: Path | None
    fail_on_drop: float | None
    max_samples: int | None

    @classmethod
    def from_options(
        cls,
        request: DeployRequest,
        device: str | None,
        token: str | None,
        report: Path | None,
        fail_on_drop: float | None,
        max_samples: int | None,
    ) -> DeviceRun | None:
        if request.eval_data is None:
            for flag, value in (("--device", device), ("--report", report), ("--fail-on-drop", fail_on_drop),
                                ("--max-samples", max_samples)):  # fmt: skip
                if value is not None:
                    raise DataError(f"{flag} needs --eval DATA (the samples to run on the device)")
            return None
        if not request.eval_data.exists():
            raise DataError(f"evaluation data not found: {request.eval_data}")
        if max_samples is not None and max_samples < 1:
            raise DataError(f"--max-samples must be at least 1, got {max_samples}")
        if fail_on_drop is not None and fail_on_drop < 0:
            raise DataError(
                f"--fail-on-drop must be a non-negative number of percentage points, got {fail_on_drop}"
            )
        if report is not None:
            from edgekit.model import check_writable

            if report.suffix.lower() != ".html":
                raise OutputError(
                    f"--report expects an .html path (report.json and report.md go beside it): {report}"
                )
            folder = report.parent
            while not folder.exists() and folder != folder.parent:
                folder = folder.parent  # the report's folder is made when it is written
            check_writable(folder / report.name)
        return cls(device or "local", token, report, fail_on_drop, max_samples)


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


def _choose_precision(request: DeployRequest, target: Any, quantized: bool) -> str:
    """``fp32`` or ``int8`` for one target, or a TargetError saying what to pass instead."""
    name = target.name
    if request.precision == "fp32":
        if quantized:
            raise TargetError(
                f"{request.model} is already quantized (QDQ); --precision fp32 needs a float model"
            )
        if not target.supports_float:
            raise TargetError(
                f"target {name!r} runs integer models only; drop --precision fp32 and pass --calib DATA"
            )
        return "fp32"
    if quantized:
        return "int8"
    if request.precision == "int8" or not target.supports_float:
        if request.calib is None:
            why = (
                "--precision int8"
                if request.precision == "int8"
                else f"target {name!r} runs integer models only; it"
            )
            raise TargetError(f"{why} needs --calib DATA (or a QDQ model from `edgekit quantize`)")
        return "int8"
    return "int8" if request.calib is not None else "fp32"


def _validate(request: DeployRequest) -> list[Any]:
    from edgekit.targets.base import get_target

    if request.precision not in PRECISIONS:
        raise EdgekitError(f"--precision must be one of {', '.join(PRECISIONS)}, got {request.precision!r}")
    if not request.targets:
        raise TargetError("pass at least one --target")
    targets = [get_target(name) for name in request.targets]
    if request.device_hint is not None and not any(
        request.device_hint.upper() in t.device_hints for t in targets
    ):
        accepted = sorted({h for t in targets for h in t.device_hints})
        raise TargetError(
            f"--device-hint {request.device_hint!r} is not accepted by {', '.join(request.targets)}; "
            f"accepted: {', '.join(accepted) or 'none'}"
        )
    if request.calib_samples < 1:
        raise DataError(f"--calib-samples must be at least 1, got {request.calib_samples}")
    if request.calib is not None and not request.calib.exists():
        raise DataError(f"calibration data not found: {request.calib}")
    if request.calib is not None:
        from edgekit import QuantizeOptions

        QuantizeOptions(method=request.method, samples=request.calib_samples)  # raises on bad values
    if request.preprocess is not None:
        from edgekit.data import ImagePreprocess

        ImagePreprocess.from_json(dict(request.preprocess))  # raises DataError naming the bad key
    out = request.out_dir
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder")
    return targets


def _preprocess(request: DeployRequest) -> Any:
    from edgekit.data import ImagePreprocess

    return ImagePreprocess.from_json(dict(request.preprocess)) if request.preprocess else None


def package_targets(
    request: DeployRequest, say: Any = print, track: Any = None, warn: Any = None
) -> tuple[list[Packaged], list[tuple[str, str]]]:
    """Package ``request.model`` for every target; returns the bundles and the (target, error) failures.

    ``say`` prints progress; ``warn`` (default ``say``) prints the notes about the model (a batch fixed to 1),
    once.

    Errors in the request itself (bad options, unreadable model or data) raise before anything is
    written; a target that fails to package is reported and the others still run.
    """
    from edgekit.model import is_quantized, load_model
    from edgekit.qoperator import quantization_source
    from edgekit.quantize.calibrate import no_progress

    track = track or no_progress
    targets = _validate(request)
    notes: list[str] = []
    model = load_model(request.model, request.input_shapes, messages=notes)
    for note in notes:
        (warn or say)(f"note: {note}")
    quantized = is_quantized(model)
    plan = [(t, _choose_precision(request, t, quantized)) for t in targets]
    needs_quantization = any(p == "int8" for _, p in plan) and not quantized
    dataset = _open_calibration(request, model) if request.calib is not None else None
    verify = _verify_samples(dataset) if dataset is not None else ()
    preprocessing = dict(request.preprocess or {})
    if not preprocessing and dataset is not None:
        preprocessing = dict(dataset.describe().get("preprocessing") or {})
    base_provenance = {
        "source_sha256": _sha256(request.model),
        "source_model": request.model.name,
        "quantization": {"source": quantization_source(model)} if quantized else None,
        "calibration_samples": None,
    }
    created = not request.out_dir.exists()
    try:
        request.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {request.out_dir}: {exc.strerror or exc}") from None

    quantized_models: dict[Any, tuple[Any, dict[str, Any], dict[str, Any], Any]] = {}
    statistics: dict[tuple, Any] = {}  # calibration statistics shared by schemes that differ only in dtypes
    results: list[Packaged] = []
    failures: list[tuple[str, str]] = []
    for target, precision in plan:
        try:
            source, provenance, quant_report = model, dict(base_provenance), None
            started = time.perf_counter()
            if precision == "int8" and needs_quantization:
                assert dataset is not None  # _choose_precision demands --calib for int8
                scheme = _quantize_options(request, target)
                if scheme not in quantized_models:
                    say(f"quantizing for {target.name} ({scheme.activations} activations) on {len(dataset)} "
                        "calibration sample(s)")  # fmt: skip
                    stats_key = (scheme.method, scheme.samples, scheme.bias_correction, scheme.exclude)
                    quantized_models[scheme] = _quantize(
                        request, dataset, scheme, track, statistics.get(stats_key)
                    )
                    statistics[stats_key] = quantized_models[scheme][3]
                source, extra, quant_report, _ = quantized_models[scheme]
                provenance.update(extra)
            for problem in target.check(source):
                if problem.severity != "error":
                    say(f"{target.name}: {problem}")
            options = _package_options(request, target, verify, preprocessing, provenance)
            quantized_at = time.perf_counter()
            path = target.package(source, request.out_dir / target.name, options)
            timings = {"quantize_s": quantized_at - started, "package_s": time.perf_counter() - quantized_at}
        except EdgekitError as exc:
            failures.append((target.name, str(exc)))
            continue
        verification = _manifest_verification(path)
        results.append(Packaged(target.name, path, precision, verification, quant_report, timings))
        say(_summary_line(target.name, path, verification))
    if created and not results:
        with contextlib.suppress(OSError):
            request.out_dir.rmdir()  # leave no empty output folder behind when nothing was packaged
    return results, failures


def _package_options(
    request: DeployRequest, target: Any, verify: tuple, preprocessing: dict, provenance: dict
) -> Any:
    from edgekit.targets.base import PackageOptions

    hint = (
        request.device_hint
        if request.device_hint and request.device_hint.upper() in target.device_hints
        else None
    )
    target_options = None
    if target.options_type is not None and request.target_settings:
        import dataclasses

        names = {f.name for f in dataclasses.fields(target.options_type)}
        given = {k: v for k, v in request.target_settings.items() if k in names}
        target_options = target.options_type(**given) if given else None
    return PackageOptions(
        verify_samples=verify,
        preprocessing=preprocessing,
        provenance=provenance,
        archive=request.archive,
        device_hint=hint,
        target_options=target_options,
    )


def _open_calibration(request: DeployRequest, model: Any) -> Any:
    from edgekit.data import ImagePreprocess, input_specs, open_dataset

    assert request.calib is not None
    preprocess = ImagePreprocess.from_json(dict(request.preprocess)) if request.preprocess else None
    return open_dataset(request.calib, input_specs(model), preprocess, limit=request.calib_samples)


def _verify_samples(dataset: Any) -> tuple[dict[str, Any], ...]:
    samples = []
    for sample in dataset:
        samples.append(dict(sample.inputs))
        if len(samples) == VERIFY_SAMPLES:
            break
    return tuple(samples)


def _quantize_options(request: DeployRequest, target: Any) -> Any:
    from edgekit import QuantizeOptions

    base = QuantizeOptions(
        method=request.method, samples=request.calib_samples, float_output_heads=not request.integer_head
    )
    return target.quantize_options(base)


def _quantize(
    request: DeployRequest, dataset: Any, options: Any, track: Any, statistics: Any = None
) -> tuple[Any, dict, dict, Any]:
    """The model quantized with ``options`` (the target's scheme), what provenance records about it, and the
    quantizer's report (with the per-layer SQNR on up to LAYER_SAMPLES evaluation samples)."""
    from edgekit import quantize_model
    from edgekit.model import load_proto

    eval_data = request.eval_data if request.eval_data is not None else None
    result = quantize_model(
        request.model,
        dataset,
        options=options,
        input_shapes=request.input_shapes,
        eval_data=eval_data,
        eval_limit=LAYER_SAMPLES,
        preprocess=_preprocess(request),
        track=track,
        statistics=statistics,
        messages=[],  # its notes (a batch fixed to 1) were announced when the command loaded the model
    )
    used = result.report.get("calibration", {}).get("samples_used")
    extra = {"quantization": options.to_json(), "calibration_samples": used}
    return load_proto(result.model, prepare=False), extra, result.report, result.quantized.stats


def _manifest_verification(path: Path) -> dict[str, Any]:
    from edgekit.device_agents.bundle import read_bundle

    with read_bundle(path) as bundle:
        return dict(bundle.manifest.verification)


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


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


__all__ = ["DeployRequest", "Packaged", "deploy", "package_targets", "register"]
