"""The packaging half of a deploy: validate the request, load and prepare the model once, choose each target's
recipe, quantize once per target scheme, package and verify each bundle."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edgekit.core.errors import DataError, EdgekitError, OutputError, TargetError
from edgekit.deployment.request import (
    AUTO,
    LAYER_SAMPLES,
    VERIFY_SAMPLES,
    DeployRequest,
    Hooks,
    Packaged,
    precisions,
)


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
                f"{request.model} is already quantized (QDQ or QOperator int8 nodes); --precision {recipe.name} needs a float model"
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
        from edgekit.core.data import ImagePreprocess

        ImagePreprocess.from_json(dict(request.preprocess))  # raises DataError naming the bad key
    out = request.out_dir
    if out.exists() and not out.is_dir():
        raise OutputError(f"output path {out} exists and is not a folder")
    return targets


def image_preprocess(request: DeployRequest) -> Any:
    from edgekit.core.data import ImagePreprocess

    return ImagePreprocess.from_json(dict(request.preprocess)) if request.preprocess else None


def request_data(request: DeployRequest) -> Path | None:
    """The data a deploy's dynamic input dims are read from when ``--input-shape`` does not give them."""
    return request.calib or request.eval_data or request.accuracy_data


def prepare(
    request: DeployRequest,
    hooks: Hooks,
    choose: Callable[[list[Any], bool], tuple[tuple[Any, str], ...]] | None = None,
) -> _Prepared:
    """Load the model once, plan each target's recipe (``choose(targets, quantized)`` instead of
    :func:`choose_precision`: a sweep plans several per target), open the calibration data."""
    from edgekit.core.model import is_quantized, load_model
    from edgekit.core.qoperator import quantization_source
    from edgekit.quantize.recipes import resolve_layer_names

    targets = validate(request)
    notes: list[str] = []
    model = load_model(request.model, request.input_shapes, messages=notes, data=request_data(request))
    for note in notes:
        hooks.note(f"note: {note}")
    quantized = is_quantized(model)
    if choose is not None:
        plan = choose(targets, quantized)
    else:
        plan = tuple((t, choose_precision(request, t, quantized)) for t in targets)
    if request.layer_precision:
        if quantized or not any(_quantized_here(request, p) for _, p in plan):
            raise DataError(
                "--layer-precision applies when the deploy quantizes a float model "
                "(--calib DATA with --precision auto, int8 or int16x8; or --precision w8 or w4)"
            )
        resolve_layer_names(model, request.layer_precision)  # raises naming the unknown ones
    if request.accuracy is not None:
        # The budget is met by the search while quantizing; a deploy that does not quantize would ignore it.
        flag = request.accuracy.budget.flag
        if quantized:
            raise DataError(
                f"{flag} chooses what to restore while quantizing a float model; "
                f"{request.model.name} is already quantized"
            )
        unsearched = [p for _, p in plan if not _needs_quantization(p)]
        if unsearched:
            raise DataError(
                f"{flag} restores layers of the int8 model the deploy quantizes; --precision {unsearched[0]} "
                "is not quantized with --calib (give --precision auto, int8 or int16x8)"
            )
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
    return package_all(request, prepare(request, hooks), hooks)


def package_all(
    request: DeployRequest,
    prepared: _Prepared,
    hooks: Hooks,
    folder: Callable[[Any, str], Path] | None = None,
    explicit: bool = False,
) -> tuple[list[Packaged], list[tuple[str, str]]]:
    """Package every (target, recipe) of the plan into ``folder(target, recipe)`` (default ``DIR/<target>``);
    ``explicit``: every target is told its recipe (a sweep), even with ``precision`` auto."""
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
            why = target.early_refusal(prepared.model)  # before any quantization is spent on it
            if why is not None:
                raise TargetError(why)
            if _quantized_here(request, precision) and not prepared.quantized:
                dataset = prepared.dataset
                # choose_precision demands calibration data for the calibrated recipes
                assert dataset is not None or not _needs_quantization(precision)
                scheme = quantize_options(request, target, precision)
                # With a budget each target gets its own restores: its model is not shared.
                key = (scheme, target.name) if request.accuracy is not None else scheme
                if key not in quantized_models:
                    on = f"{len(dataset)} calibration sample(s)" if dataset is not None else "no data"
                    hooks.say(f"quantizing for {target.name} ({_scheme_summary(scheme)}) on {on}")
                    stats_key = (
                        scheme.method,
                        scheme.samples,
                        scheme.bias_correction,
                        scheme.exclude,
                        scheme.weight_rounding,
                    )
                    quantized_models[key] = _quantize(
                        request,
                        prepared.model,
                        dataset,
                        scheme,
                        hooks.track,
                        statistics.get(stats_key) if request.accuracy is None else None,
                        target=target.name if request.accuracy is not None else None,
                        say=hooks.say,
                    )
                    if quantized_models[key][3] is not None:  # (weight-only recipes collect none)
                        statistics[stats_key] = quantized_models[key][3]
                    searched = quantized_models[key][2].get("accuracy_aware")
                    if searched is not None:
                        from edgekit.accuracy_report import outcome_line

                        hooks.say(outcome_line(searched))
                source, extra, quant_report, _ = quantized_models[key]
                provenance.update(extra)
            for problem in target.check(source):
                if problem.severity != "error":
                    hooks.say(f"{target.name}: {problem}")
            options = package_options(request, target, precision, prepared, provenance, explicit)
            quantized_at = time.perf_counter()
            dest = folder(target, precision) if folder is not None else request.out_dir / target.name
            path = target.package(source, dest, options)
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


def _quantized_here(request: DeployRequest, precision: str) -> bool:
    """The deploy quantizes the float model itself (as ``edgekit quantize`` does) before the target packages it:
    the calibrated recipes, and the weight-only ones given data (its biases corrected, as ``quantize --calib``
    does) or per-layer recipes. Otherwise the target compresses a float model's weights itself, data-free."""
    from edgekit.quantize.recipes import get_recipe

    recipe = get_recipe(precision)
    return recipe.calibrated or (
        recipe.weight_only and (request.calib is not None or bool(request.layer_precision))
    )


def package_options(
    request: DeployRequest,
    target: Any,
    precision: str,
    prepared: _Prepared,
    provenance: Mapping[str, Any],
    explicit: bool = False,
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
        precision=None if request.precision == AUTO and not explicit else precision,
    )


def _open_calibration(request: DeployRequest, model: Any) -> Any:
    from edgekit.core.data import input_specs, open_dataset

    assert request.calib is not None
    return open_dataset(
        request.calib, input_specs(model), image_preprocess(request), limit=request.calib_samples
    )


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
        weight_rounding=request.weight_rounding,
        samples=request.calib_samples,
        float_output_heads=not request.integer_head,
        layer_precision=request.layer_precision,
    )


def _scheme_summary(scheme: Any) -> str:
    """What a quantizer scheme makes of the model, in words: its recipe's summary; static int8 names the
    target's 8-bit activation type."""
    from edgekit.quantize.recipes import get_recipe

    recipe = get_recipe(scheme.precision)
    if recipe.activations == "8bit":
        return f"{recipe.name}: int8 weights, {scheme.activations} activations"
    return f"{recipe.name}: {recipe.summary}"


def quantize_options(request: DeployRequest, target: Any, precision: str = "int8") -> Any:
    """The quantizer's options for ``target``'s scheme and the recipe ``precision`` (a weight-only recipe has no
    activation type: every target gets the same options, so one quantization serves them all)."""
    from edgekit.quantize.recipes import get_recipe

    base = _base_quantize_options(request)
    if get_recipe(precision).weight_only:
        return dataclasses.replace(base, precision=precision)
    return dataclasses.replace(target.quantize_options(base), precision=precision)


def _quantize(
    request: DeployRequest,
    model: Any,
    dataset: Any,
    options: Any,
    track: Any,
    statistics: Any = None,
    target: str | None = None,
    say: Any = None,
) -> tuple[Any, dict, dict, Any]:
    """The model quantized with ``options`` (the target's scheme), what provenance records about it, and the
    quantizer's report (with the per-layer SQNR on up to LAYER_SAMPLES evaluation samples)."""
    from edgekit.api import quantize_model
    from edgekit.core.model import load_proto

    result = quantize_model(
        request.model,
        dataset,
        options=options,
        input_shapes=request.input_shapes,
        eval_data=request.eval_data,
        eval_limit=LAYER_SAMPLES,
        preprocess=image_preprocess(request),
        track=track,
        statistics=statistics,
        loaded=model,  # loaded once per deploy
        budget=request.accuracy.budget if target is not None else None,
        accuracy_data=request.accuracy_data,
        search=request.accuracy,
        target=target,
        say=say,
    )
    used = result.report.get("calibration", {}).get("samples_used")
    quantization = result.report["quantization"] if target is not None else options.to_json()
    extra = {"quantization": quantization, "calibration_samples": used}
    # (the weight-only recipes keep no statistics to share)
    return (
        load_proto(result.model, prepare=False),
        extra,
        result.report,
        getattr(result.quantized, "stats", None),
    )


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
