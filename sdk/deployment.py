"""The deploy pipeline: package a model for each target (quantizing first where a target needs it), then, with
evaluation data, run every bundle on a device through the agent, compare with fp32 on the host and write the
accuracy-drop report. ``edgekit.deploy`` is its entry point; ``edgekit deploy`` (the CLI) parses options,
calls :func:`run` and prints.

The request goes down once and the results come back up once: the model is loaded and prepared once, the
calibration data opened once, each quantization scheme computed once. Nothing here prints: progress and notes go
through the :class:`Hooks` the caller gives (the CLI's consoles and progress bars, or nothing).

Each target's bundle goes to ``DIR/<target>`` (``DIR/<target>.tar.gz`` with ``archive``). Everything the user can
get wrong is checked before the slow work starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.errors import DataError, EdgekitError, OutputError, TargetError

#: ``precision`` values: ``auto`` (int8 with calibration data, else the target's float default) and every recipe.
AUTO = "auto"
VERIFY_SAMPLES = 3
#: Evaluation samples the quantizer uses for its per-layer SQNR (the device run uses all of ``max_samples``).
LAYER_SAMPLES = 25
#: What the report compares the devices with, unless the model brings its own reference.
HOST_REFERENCE = "the model on the host (edgekit.runtime.HostRunner: OpenVINO CPU, f32, QDQ run exactly)"
#: Worst host-side layers copied from the quantizer's report into each target's entry.
WORST_LAYERS = 10


def precisions() -> tuple[str, ...]:
    """Every ``precision`` a deploy takes: ``auto`` and the recipes (``edgekit.quantize.recipes.RECIPES``)."""
    from edgekit.quantize.recipes import RECIPES

    return (AUTO, *RECIPES)


def _no_upload(description: str) -> contextlib.AbstractContextManager[Callable[[int, int], None] | None]:
    return contextlib.nullcontext(None)


def _quiet(line: str) -> None:
    return None


def _untracked(items: Any, description: str, total: int) -> Any:
    return items


@dataclass(frozen=True)
class Hooks:
    """How a deploy tells its caller what it is doing (the defaults say nothing).

    ``say``: one line of progress (plain text). ``warn``: a note about the model or the data (default ``say``).
    ``track(items, description, total)``: wraps each long loop (progress bars). ``upload(description)``: a
    context manager yielding a ``(done_bytes, total_bytes)`` callback or None. ``bundle``: called with each
    :class:`Packaged` as soon as it is written; ``failure``: with ``(target, message)`` for each target that
    failed to package.
    """

    say: Callable[[str], None] = _quiet
    warn: Callable[[str], None] | None = None
    track: Callable[..., Any] = _untracked
    upload: Callable[[str], contextlib.AbstractContextManager[Any]] = _no_upload
    bundle: Callable[[Packaged], None] = lambda packaged: None
    failure: Callable[[str, str], None] = lambda target, message: None

    def note(self, line: str) -> None:
        (self.warn or self.say)(line)


@dataclass(frozen=True)
class DeployRequest:
    """What a deploy was asked to do (validated by :func:`package_targets` before anything is written)."""

    model: Path
    targets: tuple[str, ...]
    out_dir: Path
    calib: Path | None = None
    #: ``auto`` or a recipe name (``edgekit.quantize.recipes.RECIPES``).
    precision: str = AUTO
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    device_hint: str | None = None
    archive: bool = False
    calib_samples: int = 100
    method: str = "minmax"
    #: Quantize the output head (Softmax and the pooling before it) too, on targets with float outputs.
    integer_head: bool = False
    preprocess: Mapping[str, Any] | None = None
    eval_data: Path | None = None
    #: Target-specific settings, passed to the targets whose options have them: keep_io_layout (arm-cpu,
    #: nnapi), io_dtype, feature_level and strict_integer (nnapi).
    target_settings: Mapping[str, Any] = field(default_factory=dict)
    #: Per-layer recipes ``((node name, recipe), ...)`` for the quantizer (``QuantizeOptions.layer_precision``).
    layer_precision: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Packaged:
    """One bundle a deploy wrote."""

    target: str
    path: Path
    #: The recipe the bundle was made with (``fp32``, ``int8``, ...).
    precision: str
    verification: Mapping[str, Any]
    #: The quantizer's report when this run quantized the model for the target (per-layer SQNR on the host).
    quantize_report: Mapping[str, Any] | None = None
    #: Wall time of this target's stages: quantize_s (0 when shared with an earlier target), package_s.
    timings: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceRun:
    """The device half of a deploy: where to run, what to write, when to fail."""

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
        """The device run the options ask for (None without evaluation data); one-line errors for bad ones."""
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
            check_report_path(report)
        return cls(device or "local", token, report, fail_on_drop, max_samples)


def check_report_path(report: Path) -> None:
    """An OutputError unless ``report`` is an ``.html`` path that can be written."""
    from edgekit.model import check_writable

    if report.suffix.lower() != ".html":
        raise OutputError(
            f"--report expects an .html path (report.json and report.md go beside it): {report}"
        )
    folder = report.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent  # the report's folder is made when it is written
    check_writable(folder / report.name)


@dataclass(frozen=True)
class Evaluation:
    """One target's run on the device against the host reference (its entry of the report is ``entry``)."""

    target: str
    precision: str
    #: Top-1 % of the reference and of the device (None without labels), and the drop in percentage points.
    reference_top1: float | None
    top1: float | None
    top1_drop_pp: float | None
    #: % of samples where the device's top-1 answer equals the reference's.
    top1_agreement: float | None
    latency_p50_ms: float | None
    entry: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_entry(cls, entry: Mapping[str, Any]) -> Evaluation:
        evaluation = entry.get("evaluation", {})
        acc = evaluation.get("accuracy") or {}
        return cls(
            target=entry["target"],
            precision=entry.get("precision", ""),
            reference_top1=acc.get("reference_top1"),
            top1=acc.get("candidate_top1"),
            top1_drop_pp=acc.get("top1_drop_pp"),
            top1_agreement=evaluation.get("top1_agreement"),
            latency_p50_ms=(entry.get("latency_ms") or {}).get("p50"),
            entry=entry,
        )


@dataclass(frozen=True)
class DeployResult:
    """What :func:`edgekit.deploy` returns.

    ``bundles``: the bundles written, in target order. ``failures``: ``(target, message)`` for each target that
    could not be packaged (the others still were). ``evaluations``: per target, with evaluation data.
    ``report``: the report (JSON-ready), ``report_path``: the HTML report written (``.json`` and ``.md`` beside
    it). ``gate_failed``: targets whose top-1 dropped by more than ``fail_on_drop``.
    """

    bundles: tuple[Packaged, ...]
    failures: tuple[tuple[str, str], ...] = ()
    evaluations: tuple[Evaluation, ...] = ()
    report: Mapping[str, Any] | None = field(default=None, repr=False)
    report_path: Path | None = None
    gate_failed: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures and not self.gate_failed

    def bundle(self, target: str) -> Packaged:
        """The bundle written for ``target`` (a KeyError naming the ones there are when none was)."""
        for item in self.bundles:
            if item.target == target:
                return item
        raise KeyError(f"no bundle for {target!r}; bundles: {', '.join(b.target for b in self.bundles)}")

    def raise_for_failures(self) -> None:
        """A TargetError (one line) when a target failed to package: what was written, what failed."""
        if not self.failures:
            return
        if len(self.failures) == 1 and not self.bundles:
            raise TargetError(self.failures[0][1])
        written = [f"{item.target} written to {item.path}" for item in self.bundles]
        failed = [f"{name} failed: {message}" for name, message in self.failures]
        raise TargetError("; ".join(written + failed))


# ---------------------------------------------------------------------------------------------------
# the public entry point


def deploy(
    model: str | os.PathLike[str],
    targets: str | Sequence[str],
    *,
    output: str | os.PathLike[str] | None = None,
    calib: str | os.PathLike[str] | None = None,
    eval: str | os.PathLike[str] | None = None,
    devices: str | Sequence[str] | None = None,
    token: str | None = None,
    report: str | os.PathLike[str] | None = None,
    precision: str = AUTO,
    layer_precision: Mapping[str, str] | Sequence[tuple[str, str]] = (),
    fail_on_drop: float | None = None,
    max_samples: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    device_hint: str | None = None,
    archive: bool = False,
    calib_samples: int = 100,
    method: str = "minmax",
    integer_head: bool = False,
    preprocess: Any = None,
    target_settings: Mapping[str, Any] | None = None,
    hooks: Hooks | None = None,
) -> DeployResult:
    """Package ``model`` for each of ``targets`` and, with ``eval`` data, run every bundle on a device.

    ``output``: the folder the bundles go to (``output/<target>``); without it, beside ``report``
    (``report``'s folder). ``calib``: calibration data (a float model is quantized per target scheme).
    ``eval``: evaluation data; ``devices``: the agent URL (default ``local``). ``report``: the HTML report
    path (``.json`` and ``.md`` beside it). ``precision``: ``auto`` or a recipe (fp32, fp16, int8, int16x8,
    w8, w4); ``layer_precision``: ``{node: recipe}`` for the quantizer. ``preprocess``: an
    :class:`edgekit.ImagePreprocess` or its JSON form, for image-folder data. ``hooks``: progress callbacks
    (:class:`Hooks`; default silent).

    Bad input raises an :class:`edgekit.EdgekitError` (one line) before anything is written. A target that
    fails to package is listed in ``result.failures`` and the others still run (``result.raise_for_failures()``
    turns that into an error).
    """
    from edgekit.data import ImagePreprocess

    if isinstance(preprocess, ImagePreprocess):
        preprocess = preprocess.to_json()
    if isinstance(targets, str):
        targets = (targets,)
    urls = (devices,) if isinstance(devices, str) else tuple(devices or ())
    if len(urls) > 1:
        raise DataError(f"one device per deploy for now, got {len(urls)}: {', '.join(urls)}")
    pairs = tuple(layer_precision.items()) if isinstance(layer_precision, Mapping) else tuple(layer_precision)
    report_path = Path(report) if report is not None else None
    request = DeployRequest(
        model=Path(model),
        targets=tuple(dict.fromkeys(targets)),
        out_dir=output_folder(None if output is None else Path(output), report_path),
        calib=Path(calib) if calib is not None else None,
        precision=precision,
        input_shapes={k: tuple(int(d) for d in v) for k, v in (input_shapes or {}).items()},
        device_hint=device_hint,
        archive=archive,
        calib_samples=calib_samples,
        method=method,
        integer_head=integer_head,
        preprocess=preprocess,
        eval_data=Path(eval) if eval is not None else None,
        target_settings=dict(target_settings or {}),
        layer_precision=tuple((str(k), str(v)) for k, v in pairs),
    )
    device_run = DeviceRun.from_options(
        request, urls[0] if urls else None, token, report_path, fail_on_drop, max_samples
    )
    return run(request, device_run, hooks or Hooks())


def output_folder(output: Path | None, report: Path | None) -> Path:
    """Where the bundles go: ``output``, else the report's folder; an OutputError when neither is given."""
    if output is not None:
        return output
    if report is not None:
        return report.parent
    raise OutputError(
        "pass an output folder (-o DIR) or --report PATH (the bundles then go beside the report)"
    )


def run(request: DeployRequest, device_run: DeviceRun | None, hooks: Hooks | None = None) -> DeployResult:
    """Package every target of ``request``, then run the bundles on ``device_run``'s device (when given)."""
    hooks = hooks or Hooks()
    if device_run is not None and device_run.url != "local":
        _probe(device_run)  # an unreachable or refusing device fails now, before the slow work
    prepared = _prepare(request, hooks)
    bundles, failures = _package(request, prepared, hooks)
    if device_run is None or not bundles:
        return DeployResult(tuple(bundles), tuple(failures))
    report = evaluate_on_device(request, device_run, bundles, hooks, model=prepared.model)
    return DeployResult(
        tuple(bundles),
        tuple(failures),
        tuple(Evaluation.from_entry(e) for e in report["targets"]),
        report,
        device_run.report,
        tuple(report["failed"]),
    )


def _probe(device_run: DeviceRun) -> None:
    from edgekit.device_agents.client import connect

    with connect(device_run.url, token=device_run.token) as client:
        client.hello()


# ---------------------------------------------------------------------------------------------------
# packaging


@dataclass(frozen=True)
class _Prepared:
    """What every target's packaging shares: the model (loaded once), the plan, the calibration data."""

    model: Any
    quantized: bool
    plan: tuple[tuple[Any, str], ...]
    dataset: Any
    verify: tuple
    preprocessing: Mapping[str, Any]
    provenance: Mapping[str, Any]


def choose_precision(request: DeployRequest, target: Any, quantized: bool) -> str:
    """The recipe ``target`` gets, or a TargetError saying what to pass instead."""
    from edgekit.quantize.recipes import get_recipe

    name = target.name
    if request.precision == AUTO:
        if quantized:
            return "int8"
        if request.calib is None and not target.supports_float:
            raise TargetError(
                f"target {name!r} runs integer models only; it needs --calib DATA "
                "(or a QDQ model from `edgekit quantize`)"
            )
        return "int8" if request.calib is not None else "fp32"
    recipe = get_recipe(request.precision)
    if quantized:
        if recipe.name != "int8":
            raise TargetError(
                f"{request.model} is already quantized (QDQ); --precision {recipe.name} needs a float model"
            )
        return "int8"
    if recipe.name == "fp32" and not target.supports_float:
        raise TargetError(
            f"target {name!r} runs integer models only; drop --precision fp32 and pass --calib DATA"
        )
    target.check_precision(recipe.name)
    if recipe.calibrated and request.calib is None:
        raise TargetError(
            f"--precision {recipe.name} needs --calib DATA (or a QDQ model from `edgekit quantize`)"
        )
    return recipe.name


def validate(request: DeployRequest) -> list[Any]:
    """The request's targets; a one-line error for anything wrong in the request itself."""
    from edgekit.targets.base import get_target

    if request.precision not in precisions():
        raise EdgekitError(f"--precision must be one of {', '.join(precisions())}, got {request.precision!r}")
    if not request.targets:
        raise TargetError("pass at least one --target")
    targets = [get_target(name) for name in request.targets]
    for target in targets:
        reason = target.retired_device_hints.get((request.device_hint or "").upper())
        if reason is not None:
            raise TargetError(f"--device-hint {request.device_hint}: {reason}")
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
    if request.calib is not None or request.layer_precision:
        _base_quantize_options(request)  # raises on bad values (method, samples, recipe names)
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


def _prepare(request: DeployRequest, hooks: Hooks) -> _Prepared:
    from edgekit.model import is_quantized, load_model
    from edgekit.qoperator import quantization_source
    from edgekit.quantize.recipes import check_layer_names

    targets = validate(request)
    notes: list[str] = []
    model = load_model(request.model, request.input_shapes, messages=notes)
    for note in notes:
        hooks.note(f"note: {note}")
    quantized = is_quantized(model)
    plan = tuple((t, choose_precision(request, t, quantized)) for t in targets)
    if request.layer_precision:
        if quantized or not any(_needs_quantization(p) for _, p in plan):
            raise DataError(
                "--layer-precision applies when the deploy quantizes a float model "
                "(--calib DATA with --precision auto, int8 or int16x8)"
            )
        check_layer_names((n.name for n in model.graph.all_nodes()), request.layer_precision)
    dataset = _open_calibration(request, model) if request.calib is not None else None
    verify = _verify_samples(dataset) if dataset is not None else ()
    preprocessing = dict(request.preprocess or {})
    if not preprocessing and dataset is not None:
        preprocessing = dict(dataset.describe().get("preprocessing") or {})
    provenance = {
        "source_sha256": file_sha256(request.model),
        "source_model": request.model.name,
        "quantization": {"source": quantization_source(model)} if quantized else None,
        "calibration_samples": None,
    }
    return _Prepared(model, quantized, plan, dataset, verify, preprocessing, provenance)


def package_targets(
    request: DeployRequest, hooks: Hooks | None = None
) -> tuple[list[Packaged], list[tuple[str, str]]]:
    """Package ``request.model`` for every target; returns the bundles and the (target, error) failures.

    Errors in the request itself (bad options, unreadable model or data) raise before anything is
    written; a target that fails to package is reported and the others still run.
    """
    hooks = hooks or Hooks()
    return _package(request, _prepare(request, hooks), hooks)


def _package(
    request: DeployRequest, prepared: _Prepared, hooks: Hooks
) -> tuple[list[Packaged], list[tuple[str, str]]]:
    created = not request.out_dir.exists()
    try:
        request.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {request.out_dir}: {exc.strerror or exc}") from None

    quantized_models: dict[Any, tuple[Any, dict[str, Any], dict[str, Any], Any]] = {}
    statistics: dict[tuple, Any] = {}  # calibration statistics shared by schemes that differ only in dtypes
    results: list[Packaged] = []
    failures: list[tuple[str, str]] = []
    for target, precision in prepared.plan:
        try:
            source, provenance, quant_report = prepared.model, dict(prepared.provenance), None
            started = time.perf_counter()
            if _needs_quantization(precision) and not prepared.quantized:
                dataset = prepared.dataset
                assert dataset is not None  # choose_precision demands calibration data for these recipes
                scheme = quantize_options(request, target, precision)
                if scheme not in quantized_models:
                    hooks.say(f"quantizing for {target.name} ({scheme.activations} activations) on "
                              f"{len(dataset)} calibration sample(s)")  # fmt: skip
                    stats_key = (scheme.method, scheme.samples, scheme.bias_correction, scheme.exclude)
                    quantized_models[scheme] = _quantize(
                        request, prepared.model, dataset, scheme, hooks.track, statistics.get(stats_key)
                    )
                    statistics[stats_key] = quantized_models[scheme][3]
                source, extra, quant_report, _ = quantized_models[scheme]
                provenance.update(extra)
            for problem in target.check(source):
                if problem.severity != "error":
                    hooks.say(f"{target.name}: {problem}")
            options = package_options(request, target, precision, prepared, provenance)
            quantized_at = time.perf_counter()
            path = target.package(source, request.out_dir / target.name, options)
            timings = {"quantize_s": quantized_at - started, "package_s": time.perf_counter() - quantized_at}
        except EdgekitError as exc:
            failures.append((target.name, str(exc)))
            hooks.failure(target.name, str(exc))
            continue
        packaged = Packaged(target.name, path, precision, manifest_verification(path), quant_report, timings)
        results.append(packaged)
        hooks.bundle(packaged)
    if created and not results:
        with contextlib.suppress(OSError):
            request.out_dir.rmdir()  # leave no empty output folder behind when nothing was packaged
    return results, failures


def _needs_quantization(precision: str) -> bool:
    from edgekit.quantize.recipes import get_recipe

    return get_recipe(precision).calibrated


def package_options(
    request: DeployRequest, target: Any, precision: str, prepared: _Prepared, provenance: Mapping[str, Any]
) -> Any:
    """The :class:`edgekit.targets.base.PackageOptions` of ``target`` for this request."""
    from edgekit.targets.base import PackageOptions

    hint = (
        request.device_hint
        if request.device_hint and request.device_hint.upper() in target.device_hints
        else None
    )
    target_options = None
    if target.options_type is not None and request.target_settings:
        names = {f.name for f in dataclasses.fields(target.options_type)}
        given = {k: v for k, v in request.target_settings.items() if k in names}
        target_options = target.options_type(**given) if given else None
    return PackageOptions(
        verify_samples=prepared.verify,
        preprocessing=prepared.preprocessing,
        provenance=provenance,
        archive=request.archive,
        device_hint=hint,
        target_options=target_options,
        # auto: the target reads it off the model (QDQ: int8, else its float default)
        precision=None if request.precision == AUTO else precision,
    )


def _open_calibration(request: DeployRequest, model: Any) -> Any:
    from edgekit.data import input_specs, open_dataset

    assert request.calib is not None
    return open_dataset(request.calib, input_specs(model), _preprocess(request), limit=request.calib_samples)


def _verify_samples(dataset: Any) -> tuple[dict[str, Any], ...]:
    samples = []
    for sample in dataset:
        samples.append(dict(sample.inputs))
        if len(samples) == VERIFY_SAMPLES:
            break
    return tuple(samples)


def _base_quantize_options(request: DeployRequest) -> Any:
    from edgekit.quantize.options import QuantizeOptions

    return QuantizeOptions(
        method=request.method,
        samples=request.calib_samples,
        float_output_heads=not request.integer_head,
        layer_precision=request.layer_precision,
    )


def quantize_options(request: DeployRequest, target: Any, precision: str = "int8") -> Any:
    """The quantizer's options for ``target``'s scheme and the recipe ``precision``."""
    return dataclasses.replace(target.quantize_options(_base_quantize_options(request)), precision=precision)


def _quantize(
    request: DeployRequest, model: Any, dataset: Any, options: Any, track: Any, statistics: Any = None
) -> tuple[Any, dict, dict, Any]:
    """The model quantized with ``options`` (the target's scheme), what provenance records about it, and the
    quantizer's report (with the per-layer SQNR on up to LAYER_SAMPLES evaluation samples)."""
    from edgekit.api import quantize_model
    from edgekit.model import load_proto

    result = quantize_model(
        request.model,
        dataset,
        options=options,
        input_shapes=request.input_shapes,
        eval_data=request.eval_data,
        eval_limit=LAYER_SAMPLES,
        preprocess=_preprocess(request),
        track=track,
        statistics=statistics,
        loaded=model,  # loaded once per deploy
    )
    used = result.report.get("calibration", {}).get("samples_used")
    extra = {"quantization": options.to_json(), "calibration_samples": used}
    return load_proto(result.model, prepare=False), extra, result.report, result.quantized.stats


def manifest_verification(path: Path) -> dict[str, Any]:
    """The verification figures the bundle at ``path`` records."""
    from edgekit.device_agents.bundle import read_bundle

    with read_bundle(path) as bundle:
        return dict(bundle.manifest.verification)


def file_sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------
# the device run and the report


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
        request.eval_data, input_specs(model), _preprocess(request), limit=device_run.max_samples
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


__all__ = [
    "DeployRequest",
    "DeployResult",
    "DeviceRun",
    "Evaluation",
    "Hooks",
    "Packaged",
    "deploy",
    "evaluate_on_device",
    "package_targets",
    "run",
]
