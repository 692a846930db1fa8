"""``edgekit deploy --sweep`` and ``--pick``: every recipe each target runs, measured on the device.

A sweep packages each (target, recipe) pair :func:`edgekit.tradeoff.sweep_plan` allows into
``DIR/sweep/<target>-<recipe>``, runs every bundle on the device the way ``--eval`` does (one host reference for
all), and adds the trade-off section to the report. With a ``--pick`` budget, each target's fastest recipe within
it becomes that target's bundle (``DIR/<target>``), and the report and one line per target say why; when a target
has no recipe within the budget the report is still written and the deploy fails with one line naming the best
recipe reached. The packaging and the device run are the deploy pipeline's (:mod:`edgekit.deployment`); what is
decided from the measured table is :mod:`edgekit.tradeoff`'s.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from edgekit.core.errors import DataError

#: The folder under the output folder that holds every recipe's bundle.
SWEEP_FOLDER = "sweep"


def sweep_folder(out_dir: Path, target: str, precision: str) -> Path:
    return out_dir / SWEEP_FOLDER / f"{target}-{precision}"


def run_sweep(request: Any, device_run: Any, hooks: Any, budget: Any = None) -> Any:
    """Sweep ``request``'s targets on ``device_run``'s device; a :class:`edgekit.deployment.DeployResult` whose
    bundles are the picked ones (with ``budget``) or every recipe's."""
    from edgekit import deployment
    from edgekit.deployment.package import package_all, prepare
    from edgekit.report import write_reports
    from edgekit.tradeoff import pick, sweep_plan, tradeoff_section

    if request.precision != deployment.AUTO:
        raise DataError(f"--sweep packages every recipe a target runs; drop --precision {request.precision}")
    if device_run is None:
        raise DataError("--sweep needs --eval DATA: each recipe runs on the device")
    from edgekit.fleet import check_answers

    check_answers(device_run.devices, hooks.note)  # unreachable or refusing devices fail now, not later
    skipped: list[dict[str, str]] = []

    def plan(targets: list[Any], quantized: bool) -> tuple[tuple[Any, str], ...]:
        pairs, skips = sweep_plan(targets, request.calib is not None, quantized)
        skipped.extend(skips)
        return tuple(pairs)

    prepared = prepare(request, hooks, choose=plan)
    grouped: dict[tuple[str, str], list[str]] = {}
    for s in skipped:
        grouped.setdefault((s["target"], s["reason"]), []).append(s["precision"])
    for (target, reason), recipes in grouped.items():
        hooks.say(f"sweep: {target}: skipping {', '.join(recipes)} ({reason})")
    bundles, failures = package_all(
        request,
        prepared,
        hooks,
        folder=lambda target, precision: sweep_folder(request.out_dir, target.name, precision),
        explicit=True,
    )
    packaged = {(b.target, b.precision) for b in bundles}
    missing = [(t.name, p) for t, p in prepared.plan if (t.name, p) not in packaged]
    for (name, precision), (_, message) in zip(missing, failures, strict=True):
        skipped.append({"target": name, "precision": precision, "reason": f"failed to package: {message}"})
    if not bundles:
        return deployment.DeployResult((), tuple(failures))
    report = deployment.evaluate_on_device(
        request, dataclasses.replace(device_run, report=None), bundles, hooks, model=prepared.model
    )
    section = tradeoff_section(report["targets"], skipped)
    report["tradeoff"] = section
    chosen, error = {}, None
    if budget is not None:
        from edgekit.tradeoff import PickError

        try:
            chosen = pick(section["rows"], budget)
        except PickError as exc:
            error = exc
        section["pick"] = {
            "budget": str(budget),
            "chosen": chosen,
            "error": None if error is None else str(error),
        }
    if device_run.report is not None:
        html = Path(device_run.report)
        html.parent.mkdir(parents=True, exist_ok=True)
        write_reports(report, html.with_suffix(".json"), html.with_suffix(".md"), html)
        hooks.say(f"wrote {html.with_suffix('.json')}, {html.with_suffix('.md')}, {html}")
    if error is not None:
        raise error
    result_bundles = tuple(bundles)
    if chosen:
        result_bundles = tuple(
            _keep(request, next(b for b in bundles if (b.target, b.precision) == (target, c["precision"])))
            for target, c in chosen.items()
        )
        for c in chosen.values():
            hooks.say(f"picked: {c['why']}")
    # A recipe that failed to package is a skip of the sweep (reported with its reason); a target none of whose
    # recipes packaged is the deploy's failure.
    swept = {b.target for b in bundles}
    return deployment.DeployResult(
        result_bundles,
        tuple((name, message) for name, message in failures if name not in swept),
        tuple(deployment.Evaluation.from_entry(e) for e in report["targets"]),
        report,
        device_run.report,
        tuple(report["failed"]),
    )


def _keep(request: Any, item: Any) -> Any:
    """The picked recipe's bundle written again as the target's own bundle (``DIR/<target>``), atomically."""
    from edgekit.deployment.package import manifest_verification
    from edgekit.device_agents.bundle import read_bundle, write_bundle

    with read_bundle(item.path) as loaded:
        manifest = loaded.manifest
        files = {f.path: loaded.path(f) for f in manifest.model_files}
        roles = {f.path: f.role for f in manifest.model_files}
        path = write_bundle(
            request.out_dir / item.target, manifest, files, archive=request.archive, roles=roles
        )
    return dataclasses.replace(item, path=path, verification=manifest_verification(path))
