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

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgekit.core.errors import OutputError, TargetError
from edgekit.deployment.evaluate import evaluate_on_device
from edgekit.deployment.package import choose_precision, package_all, package_targets, prepare, validate
from edgekit.deployment.request import AUTO, DeployRequest, DeviceRun, Hooks, Packaged, precisions


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
    weight_rounding: str = "nearest",
    integer_head: bool = False,
    preprocess: Any = None,
    target_settings: Mapping[str, Any] | None = None,
    sweep: bool = False,
    pick: str | None = None,
    hooks: Hooks | None = None,
) -> DeployResult:
    """Package ``model`` for each of ``targets`` and, with ``eval`` data, run every bundle on a device.

    ``output``: the folder the bundles go to (``output/<target>``); without it, beside ``report``
    (``report``'s folder). ``calib``: calibration data (a float model is quantized per target scheme).
    ``eval``: evaluation data; ``devices``: the agent URL (default ``local``), several (the evaluation is
    sharded over them) or a ``fleet.toml`` (:mod:`edgekit.fleet`). ``report``: the HTML report
    path (``.json`` and ``.md`` beside it). ``precision``: ``auto`` or a recipe (fp32, fp16, int8, int16x8,
    w8, w4); ``layer_precision``: ``{node: recipe}`` for the quantizer; ``weight_rounding``: ``nearest`` or
    ``gptq`` for the static recipes' int8 weights (``QuantizeOptions.weight_rounding``). ``preprocess``: an
    :class:`edgekit.ImagePreprocess` or its JSON form, for image-folder data. ``sweep``: package every recipe each
    target runs and run each on the device (the report gains the trade-off section; :mod:`.sweep`); ``pick``: a
    budget (``"max-drop=0.5"``, ``"min-agreement=99"``, ``"min-cosine=0.999"``; implies ``sweep``): each target's
    fastest recipe within it becomes its bundle. ``hooks``: progress callbacks (:class:`Hooks`; default silent).

    Bad input raises an :class:`edgekit.EdgekitError` (one line) before anything is written. A target that
    fails to package is listed in ``result.failures`` and the others still run (``result.raise_for_failures()``
    turns that into an error).
    """
    from edgekit.core.data import ImagePreprocess

    if isinstance(preprocess, ImagePreprocess):
        preprocess = preprocess.to_json()
    if isinstance(targets, str):
        targets = (targets,)
    fleet = devices if isinstance(devices, str | os.PathLike) and str(devices).endswith(".toml") else None
    urls = () if fleet is not None else (devices,) if isinstance(devices, str) else tuple(devices or ())
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
        weight_rounding=weight_rounding,
        integer_head=integer_head,
        preprocess=preprocess,
        eval_data=Path(eval) if eval is not None else None,
        target_settings=dict(target_settings or {}),
        layer_precision=tuple((str(k), str(v)) for k, v in pairs),
    )
    device_run = DeviceRun.from_options(request, urls, token, report_path, fail_on_drop, max_samples, fleet)
    if sweep or pick is not None:
        from edgekit.deployment.sweep import run_sweep
        from edgekit.tradeoff import parse_budget

        return run_sweep(
            request, device_run, hooks or Hooks(), parse_budget(pick) if pick is not None else None
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
    """Package every target of ``request``, then run the bundles on ``device_run``'s devices (when given)."""
    hooks = hooks or Hooks()
    if device_run is not None:
        from edgekit.fleet import check_answers

        check_answers(device_run.devices, hooks.note)  # unreachable or refusing devices fail now, not later
    prepared = prepare(request, hooks)
    bundles, failures = package_all(request, prepared, hooks)
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


__all__ = [
    "AUTO",
    "DeployRequest",
    "DeployResult",
    "DeviceRun",
    "Evaluation",
    "Hooks",
    "Packaged",
    "choose_precision",
    "deploy",
    "evaluate_on_device",
    "package_targets",
    "precisions",
    "run",
    "validate",
]
