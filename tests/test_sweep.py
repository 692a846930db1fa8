"""`edgekit deploy --sweep / --pick` end to end: a real sweep of the digits model on a local TCP agent (every recipe
the targets' tables allow, each run on the device), the report's trade-off section and plots, --pick's choice
checked on the measured table, and a budget nothing meets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from edgekit.device_agents.bundle import read_bundle
from edgekit.targets.base import get_target
from edgekit.tradeoff import PickError, figures, parse_budget, pick

sys.path.insert(0, str(Path(__file__).resolve().parent / "agent"))
from agent_procs import start_tcp_agent, stop  # noqa: E402

TARGETS = ("arm-cpu", "nnapi")


def edgekit(*args, timeout: float = 500) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    process = start_tcp_agent(tmp_path_factory.mktemp("agent"))
    yield process
    stop(process.proc)


@pytest.fixture(scope="module")
def swept(digits, agent, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    targets = [a for t in TARGETS for a in ("--target", t)]
    # feature level 1 has no relaxed float computation: nnapi's fp16 fails to package, a skip of the sweep
    run = edgekit("deploy", digits.model, *targets, "--calib", digits.calib, "--eval", digits.val, "--max-samples",
                  "48", "--device", agent.url(), "--sweep", "--pick", "min-agreement=0", "--report",
                  out / "report.html", "--nnapi-feature-level", "1", "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    return out, json.loads((out / "report.json").read_text()), run


def test_sweep_packages_and_runs_every_recipe_the_tables_allow(swept) -> None:
    out, report, run = swept
    section = report["tradeoff"]
    allowed = [(t, r) for t in TARGETS for r, why in get_target(t).precisions.items() if why is None]
    expected = [pair for pair in allowed if pair != ("nnapi", "fp16")]
    assert [(r["target"], r["precision"]) for r in section["rows"]] == expected
    assert [(e["target"], e["precision"]) for e in report["targets"]] == expected
    skipped = {(s["target"], s["precision"]): s["reason"] for s in section["skipped"]}
    assert skipped[("nnapi", "fp32")] == get_target("nnapi").precisions["fp32"]
    assert skipped[("nnapi", "fp16")].startswith(
        "failed to package: nnapi --precision fp16 needs feature level >= 2"
    )
    assert len(skipped) + len(expected) == len(TARGETS) * 6
    assert not (out / "sweep" / "nnapi-fp16").exists()
    for row in section["rows"]:
        with read_bundle(out / "sweep" / f"{row['target']}-{row['precision']}") as bundle:
            assert bundle.manifest.verification["precision"] == row["precision"]
            assert bundle.manifest.target == row["target"]
        assert row["p50_ms"] > 0 and row["size_bytes"] > 0 and 0.9 < row["cosine"] <= 1.0 + 1e-9
        assert row["top1"] is not None and row["top1_agreement"] is not None
    sizes = {(r["target"], r["precision"]): r["size_bytes"] for r in section["rows"]}
    assert sizes[("arm-cpu", "fp16")] < sizes[("arm-cpu", "fp32")]  # the float16 conv2 kernel
    assert sizes[("arm-cpu", "int8")] < sizes[("arm-cpu", "fp16")]
    for target in TARGETS:  # every target has a front, made of rows it measured
        assert set(section["pareto"][target]) <= {r for t, r in expected if t == target}
        assert section["pareto"][target]


def test_pick_keeps_the_fastest_recipe_within_the_budget(swept) -> None:
    out, report, run = swept
    rows = report["tradeoff"]["rows"]
    chosen = report["tradeoff"]["pick"]["chosen"]
    for target in TARGETS:
        mine = [r for r in rows if r["target"] == target]
        fastest = min(mine, key=lambda r: r["p50_ms"])  # every recipe agrees on at least 0 %
        assert chosen[target]["precision"] == fastest["precision"]
        with read_bundle(out / target) as bundle:  # the picked recipe is the target's bundle
            assert bundle.manifest.verification["precision"] == fastest["precision"]
        assert f"picked: {chosen[target]['why']}" in run.stdout.replace("\n", " ")
    assert "Picked: " in (out / "report.md").read_text()


@pytest.mark.parametrize("name", ["min-agreement", "min-cosine", "max-drop"])
def test_pick_on_the_measured_table(swept, name) -> None:
    """For every budget a measured row sets, the choice is within it and no recipe within it is faster."""
    _, report, _ = swept
    rows = report["tradeoff"]["rows"]
    key = {"min-agreement": "top1_agreement", "min-cosine": "cosine", "max-drop": "top1_drop_pp"}[name]
    for row in rows:
        budget = parse_budget(f"{name}={row[key]!r}")
        for target in TARGETS:
            mine = [r for r in rows if r["target"] == target]
            if not any(budget.met_by(r) for r in mine):
                with pytest.raises(PickError, match=f"no recipe on {target} is within the budget"):
                    pick(mine, budget)
                continue
            choice = pick(mine, budget)[target]
            got = next(r for r in mine if r["precision"] == choice["precision"])
            assert budget.met_by(got)
            assert all(r["p50_ms"] >= got["p50_ms"] for r in mine if budget.met_by(r))


def test_report_has_one_tradeoff_plot_per_target(swept) -> None:
    out, report, _ = swept
    html = (out / "report.html").read_text()
    assert all(f"id='plot-tradeoff-{t}'" in html for t in TARGETS) and "Trade-off: recipes per target" in html
    drawn = dict(figures(report["tradeoff"]))
    for target in TARGETS:
        (ax,) = drawn[f"tradeoff-{target}"].axes
        recipes = [r["precision"] for r in report["tradeoff"]["rows"] if r["target"] == target]
        picked = report["tradeoff"]["pick"]["chosen"][target]["precision"]
        texts = sorted(t.get_text() for t in ax.texts)
        assert texts == sorted(r + (" (picked)" if r == picked else "") for r in recipes)
        assert ax.get_ylabel() == "top-1 %" and ax.get_ylim()[1] <= 100.5


def test_a_budget_nothing_meets_is_one_line_and_exit_2(digits, agent, tmp_path) -> None:
    run = edgekit("deploy", digits.model, "--target", "arm-cpu", "--eval", digits.val, "--max-samples", "16",
                  "--device", agent.url(), "--pick", "min-cosine=1", "--report", tmp_path / "report.html", "-q")  # fmt: skip
    assert run.returncode == 2
    line = run.stderr.strip().splitlines()
    assert len(line) == 1 and line[0].startswith(
        "error: --pick min-cosine=1: no recipe on arm-cpu is within the budget; the best reached is "
    )
    report = json.loads((tmp_path / "report.json").read_text())  # the measured table is kept
    assert report["tradeoff"]["pick"]["error"] == line[0].removeprefix("error: ")
    # no --calib: no int8 / int16x8 (the float and weight-only recipes need no calibration data)
    assert {r["precision"] for r in report["tradeoff"]["rows"]} == {"fp32", "fp16", "w8", "w4"}
    assert not (tmp_path / "arm-cpu").exists()
    bad = edgekit("deploy", digits.model, "--target", "arm-cpu", "--eval", digits.val, "--pick", "fastest",
                  "-o", tmp_path / "b")  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith(
        "error: --pick must be one of"
    )
    no_eval = edgekit("deploy", digits.model, "--target", "arm-cpu", "--sweep", "-o", tmp_path / "c")
    assert no_eval.returncode == 2 and "--sweep needs --eval DATA" in no_eval.stderr
