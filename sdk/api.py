"""The public Python API. The CLI is a thin layer over these functions."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir
from edgekit.core.data import Dataset, ImagePreprocess, input_specs, open_dataset
from edgekit.core.errors import DataError, QuantizationError
from edgekit.core.model import atomic_write_bytes, check_writable, load_model, save_model
from edgekit.core.sanity import calibration_ranges, data_warnings
from edgekit.quantize.calibrate import Statistics, Track, no_progress
from edgekit.quantize.evaluation import evaluate, evaluate_outputs
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import Quantized, quantize
from edgekit.quantize.recipes import get_recipe, resolve_layer_names
from edgekit.quantize.weight_only import WeightOnly, float16_scale_file, quantize_weight_only

#: How many layers the report lists as the worst.
WORST_LAYERS = 10

log = logging.getLogger("edgekit")


@dataclass
class QuantizeResult:
    """What :func:`quantize_model` returns: the QDQ model, the report (JSON-ready) and the pipeline's details."""

    model: onnx.ModelProto
    report: dict
    quantized: Quantized | WeightOnly | None = field(repr=False)  # None for the fp16 recipe (no calibration)
    output_path: Path | None = None


def file_sha256(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def as_dataset(
    data: str | os.PathLike[str] | Dataset | Iterable,
    model: ir.Model,
    preprocess: ImagePreprocess | None,
    limit: int | None = None,
) -> Dataset | Iterable:
    """A path becomes a streamed :class:`Dataset` checked against the model's inputs; iterables pass through."""
    if isinstance(data, str | os.PathLike):
        return open_dataset(data, input_specs(model), preprocess, limit=limit)
    return data


def quantize_model(
    model: str | os.PathLike[str],
    calib: str | os.PathLike[str] | Dataset | Iterable | None = None,
    *,
    options: QuantizeOptions = QuantizeOptions(),
    eval_data: str | os.PathLike[str] | Dataset | Iterable | None = None,
    output: str | os.PathLike[str] | None = None,
    report_path: str | os.PathLike[str] | None = None,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    preprocess: ImagePreprocess | None = None,
    eval_limit: int | None = None,
    track: Track = no_progress,
    messages: list[str] | None = None,
    statistics: Statistics | None = None,
    loaded: ir.Model | None = None,
    budget: Any = None,
    accuracy_data: str | os.PathLike[str] | Dataset | Iterable | None = None,
    search: Any = None,
    target: str | None = None,
    say: Any = None,
) -> QuantizeResult:
    """Quantize an fp32 ONNX model to standard QDQ ONNX (int8 weights per channel, int8/uint8 activations).

    ``calib`` and ``eval_data`` are data paths (``.npz``, ``.npy``, an image folder) or iterables of samples
    with ``.inputs`` and ``.label``. With ``output`` the QDQ model is written atomically; with ``report_path``
    the JSON report. ``statistics`` (``result.quantized.stats`` of an earlier call on the same model and data
    with the same method, samples and bias correction) skip calibration. ``loaded``: ``model`` as
    :func:`edgekit.core.model.load_model` already loaded it (with ``input_shapes``): not loaded again. Errors are
    :class:`edgekit.EdgekitError` subclasses with one-line messages.

    The weight-only recipes (``options.precision`` ``w8`` / ``w4``) need no ``calib``: their result's
    ``quantized`` is a :class:`edgekit.quantize.weight_only.WeightOnly`.
    """
    for path in (output, report_path):
        if path is not None:
            check_writable(path)
    if budget is not None and not get_recipe(options.precision).calibrated:
        # The search restores layers of a calibrated model: any other recipe would write its file unsearched.
        raise DataError(
            f"{budget.flag} restores layers of a model quantized with calibration data; --precision "
            f"{options.precision} is not (give int8 or int16x8)"
        )
    timings: dict[str, float] = {}
    start = time.perf_counter()
    data = next((d for d in (calib, eval_data, accuracy_data) if isinstance(d, (str, os.PathLike))), None)
    fp32 = loaded if loaded is not None else load_model(model, input_shapes, messages=messages, data=data)
    # The nodes named as the loaded model names them (a name the preparation fused away: the node it became).
    options = replace(options, layer_precision=resolve_layer_names(fp32, options.layer_precision))
    timings["load_s"] = time.perf_counter() - start
    if options.precision == "fp16":  # no calibration: every weight and activation becomes float16
        eval_set = (
            as_dataset(eval_data, fp32, preprocess, limit=eval_limit) if eval_data is not None else None
        )
        return _fp16_model(model, fp32, options, eval_set, output, report_path, timings, track, eval_limit)
    if get_recipe(options.precision).weight_only:
        calib_set = as_dataset(calib, fp32, preprocess, limit=options.samples) if calib is not None else None
        return _weight_only_model(
            model,
            fp32,
            options,
            calib_set,
            eval_data,
            output,
            report_path,
            preprocess,
            eval_limit,
            track,
            timings,
        )
    if calib is None:
        raise DataError(f"--precision {options.precision} needs calibration data (--calib)")

    calib_set = as_dataset(calib, fp32, preprocess, limit=options.samples)
    eval_set = as_dataset(eval_data, fp32, preprocess, limit=eval_limit) if eval_data is not None else None
    accuracy_report = None
    options_given_exclude = options.exclude
    if budget is not None:
        start = time.perf_counter()
        options, statistics, accuracy_report = _meet_budget(
            fp32, calib_set, options, budget, accuracy_data, eval_data, preprocess, search, target, track, say
        )
        timings["accuracy_search_s"] = time.perf_counter() - start

    start = time.perf_counter()
    quantized = quantize(fp32, calib_set, options, track, statistics)
    from edgekit.core.qdq_forms import portable_qdq

    proto = portable_qdq(quantized.proto())  # the same values; OpenVINO compiles the file as written
    timings["quantize_s"] = time.perf_counter() - start
    int16_activations = quantized.plan.int16 & set(quantized.plan.activations)

    report: dict = {
        **_report_head(model),
        "quantization": {
            **options.to_json(),
            "quantized_activations": len(quantized.plan.activations),
            "quantized_weights": len(quantized.plan.weights),
            "fused_activations": len(quantized.plan.fused),
            "float_ops": [
                {"node": f.node, "op_type": f.op_type, "reason": f.reason} for f in quantized.plan.float_ops
            ],
            "raised_weight_scales": [r.to_json() for r in quantized.raised_weight_scales],
            "int16_activations": len(int16_activations),
            "float_biases": list(quantized.float_biases),
        },
        "runs_on": _runs_on(options.precision, options.activations, bool(int16_activations)),
        "calibration": {
            **(calib_set.describe() if isinstance(calib_set, Dataset) else {"kind": "iterable"}),
            "samples_used": quantized.stats.samples,
            "input_ranges": calibration_ranges(
                quantized.stats.minmax, quantized.stats.means, [v.name for v in fp32.graph.inputs]
            ),
        },
    }
    if accuracy_report is not None:
        report["accuracy_aware"] = accuracy_report
        restored = set(options.exclude) - set(options_given_exclude)  # layers and their fused activations
        for entry in report["quantization"]["float_ops"]:
            if entry["node"] in restored:
                entry["reason"] = (
                    f"restored to float by the accuracy search ({accuracy_report['budget']['flag']})"
                )
    if eval_set is not None:
        start = time.perf_counter()
        comparison, layers = evaluate(fp32, quantized, eval_set, track, eval_limit)
        timings["evaluate_s"] = time.perf_counter() - start
        report["evaluation"] = {
            **comparison,
            "data": eval_set.describe() if isinstance(eval_set, Dataset) else {"kind": "iterable"},
        }
        report["layers"] = layers
        report["worst_layers"] = layers[:WORST_LAYERS]
        accuracy = comparison.get("accuracy") or {}
        report["warnings"] = data_warnings(
            accuracy.get("reference_top1"),
            accuracy.get("labelled_samples", 0),
            comparison["input_ranges"],
            report["calibration"]["input_ranges"],
        )
        for warning in report["warnings"]:
            log.warning(warning)

    return QuantizeResult(proto, report, quantized, _finish(report, proto, output, report_path, timings))


def _meet_budget(
    fp32: ir.Model,
    calib_set: Any,
    options: QuantizeOptions,
    budget: Any,
    accuracy_data: Any,
    eval_data: Any,
    preprocess: ImagePreprocess | None,
    search_options: Any,
    target: str | None,
    track: Track,
    say: Any,
) -> tuple[QuantizeOptions, Statistics, dict]:
    """The accuracy-aware search (:mod:`edgekit.quantize.accuracy`) on ``accuracy_data`` (default: the
    evaluation data): the options with the restored layers, the search's statistics and its report."""
    from dataclasses import replace

    from edgekit.quantize.accuracy import SearchOptions, search
    from edgekit.quantize.qdq import warnings_once
    from edgekit.targets.base import get_target

    if accuracy_data is None and eval_data is None:
        raise DataError(
            f"{budget.flag} needs --accuracy-data DATA or --eval DATA (the samples it is measured on)"
        )
    used, flag = (accuracy_data, "--accuracy-data") if accuracy_data is not None else (eval_data, "--eval")
    accuracy_set = as_dataset(used, fp32, preprocess)
    search_options = (
        replace(search_options, budget=budget) if search_options is not None else SearchOptions(budget)
    )
    with warnings_once():  # every candidate quantizes the same layers: each layer's note once
        result = search(
            fp32,
            calib_set,
            accuracy_set,
            get_target(target) if target is not None else None,
            options,
            search_options,
            track=track,
            say=say or (lambda line: None),
        )
    described = accuracy_set.describe() if isinstance(accuracy_set, Dataset) else {"kind": "iterable"}
    report = {**result.to_json(), "data": {"flag": flag, **described}}
    # With a target, the file has that target's scheme (its activation type, ...): what the search measured.
    final = result.options
    return final, result.statistics, report


def _weight_only_model(
    model: str | os.PathLike[str],
    fp32: ir.Model,
    options: QuantizeOptions,
    calib_set,
    eval_data,
    output,
    report_path,
    preprocess: ImagePreprocess | None,
    eval_limit: int | None,
    track: Track,
    timings: dict[str, float],
) -> QuantizeResult:
    """:func:`quantize_model` for the weight-only recipes (calibration data, optional, corrects biases)."""
    eval_set = as_dataset(eval_data, fp32, preprocess, limit=eval_limit) if eval_data is not None else None
    start = time.perf_counter()
    result = quantize_weight_only(fp32, options, calib_set)
    proto = result.proto()
    timings["quantize_s"] = time.perf_counter() - start
    report: dict = {
        **_report_head(model),
        "quantization": {
            **options.to_json(),
            "activations": "float",
            "weights": result.describe(options.precision),
            **result.to_json(),
        },
        "runs_on": _runs_on(options.precision),
    }
    if eval_set is not None:
        start = time.perf_counter()
        comparison = evaluate_outputs(fp32, proto, eval_set, track, eval_limit)
        timings["evaluate_s"] = time.perf_counter() - start
        report["evaluation"] = {
            **comparison,
            "data": eval_set.describe() if isinstance(eval_set, Dataset) else {"kind": "iterable"},
        }
    # the file stores the scales that are float16 values as float16 (the same numbers)
    written = _finish(report, float16_scale_file(proto), output, report_path, timings)
    return QuantizeResult(proto, report, result, written)


def _runs_on(precision: str, activations: str = "uint8", int16: bool = False) -> dict:
    """The report's ``runs_on``: the runtimes that compute the written file's values as given, and a note on
    one that does not (:data:`edgekit.quantize.recipes.FILE_RUNTIMES`)."""
    from edgekit.quantize.recipes import file_runtimes

    runtimes = file_runtimes(precision, activations, int16)
    return {"runtimes": list(runtimes.runs_on), "note": runtimes.note}


def _report_head(model: str | os.PathLike[str]) -> dict:
    """The report's first entries: edgekit's version and the source model (path, sha256, size)."""
    size = Path(model).stat().st_size
    return {
        "edgekit_version": _version(),
        "model": {"path": str(model), "sha256": file_sha256(model), "size_bytes": size},
    }


def _finish(
    report: dict,
    proto: onnx.ModelProto,
    output: str | os.PathLike[str] | None,
    report_path: str | os.PathLike[str] | None,
    timings: dict[str, float],
) -> Path | None:
    """Write the model (when ``output`` is given) and the report; the report gets the output's size and the
    timings. Returns the written model's path."""
    output_path = save_model(proto, output) if output is not None else None
    size = output_path.stat().st_size if output_path is not None else len(proto.SerializeToString())
    source_size = report["model"]["size_bytes"]
    report["output"] = {
        "path": None if output_path is None else str(output_path),
        "size_bytes": size,
        "size_ratio": size / source_size,
    }
    report["timings"] = timings
    if report_path is not None:
        atomic_write_bytes(report_path, (json.dumps(report, indent=2) + "\n").encode())
    return output_path


def _version() -> str:
    from edgekit import __version__

    return __version__


def _fp16_model(
    path: str | os.PathLike[str],
    fp32: ir.Model,
    options: QuantizeOptions,
    eval_set: Iterable | None,
    output: str | os.PathLike[str] | None,
    report_path: str | os.PathLike[str] | None,
    timings: dict[str, float],
    track: Track,
    eval_limit: int | None,
) -> QuantizeResult:
    """The ``fp16`` recipe (:mod:`edgekit.quantize.fp16`), verified against fp32 on the host (OpenVINO, f32
    compute on the float16 weights) on seeded samples, and with ``eval_set`` over it."""
    from edgekit.core.runtime import HostRunner
    from edgekit.quantize.fp16 import to_fp16
    from edgekit.targets.base import default_verify_samples
    from edgekit.targets.yardstick import (
        compare_outputs,
        judge_outputs,
        matched_infinities,
        output_kinds,
        yardstick,
    )

    start = time.perf_counter()
    reference = ir.to_proto(fp32)
    samples = default_verify_samples(fp32)
    kinds = output_kinds(fp32)
    half = to_fp16(ir.from_proto(reference))  # the caller's model stays float32
    proto = ir.to_proto(half.model)
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise QuantizationError(
            f"internal: the fp16 model is not valid ONNX: {str(exc).splitlines()[0]}"
        ) from None
    timings["quantize_s"] = time.perf_counter() - start
    ref_runner, half_runner = HostRunner(reference), HostRunner(proto, isolate=True)
    names = [v.name for v in fp32.graph.outputs]
    ref = [{n: r[n] for n in names} for r in map(ref_runner.run, samples)]
    got = [{n: r[n] for n in names} for r in map(half_runner.run, samples)]
    ref, got, infinite = matched_infinities(ref, got)  # -inf logits by design (Grounding DINO's masked ones)
    figures = compare_outputs(ref, got, kinds)
    for name, count in infinite.items():
        figures["outputs"][name]["infinite_in_reference"] = count
    failures = judge_outputs(figures, yardstick("fp16"), ref, got)
    report: dict = {
        **_report_head(path),
        "quantization": {**options.to_json(), **half.to_json()},
        "runs_on": _runs_on("fp16"),
        "verification": {
            "reference": "the fp32 model on the host (OpenVINO CPU, f32)",
            "runtime": "OpenVINO CPU, f32 compute on the fp16 model",
            "passed": not failures,
            "failures": failures,
            **figures,
        },
    }
    for failure in failures:
        log.warning("fp16 model: %s", failure)
    if eval_set is not None:
        start = time.perf_counter()
        comparison = evaluate_outputs(fp32, proto, eval_set, track, eval_limit)
        timings["evaluate_s"] = time.perf_counter() - start
        data = eval_set.describe() if isinstance(eval_set, Dataset) else {"kind": "iterable"}
        report["evaluation"] = {**comparison, "data": data}
    return QuantizeResult(proto, report, None, _finish(report, proto, output, report_path, timings))
