"""The recipe trade-off (deploy --sweep / --pick): the sweep's plan from the targets' tables, the Pareto front,
the --pick budgets and choice, and the report's trade-off section and plots (read back from matplotlib)."""

from __future__ import annotations

import pytest
from edgekit.core.errors import DataError
from edgekit.targets.base import get_target
from edgekit.tradeoff import (
    PickError,
    pareto_front,
    parse_budget,
    pick,
    sweep_plan,
    tradeoff_section,
)


def entry(target, precision, size, p50, top1=None, drop=None, agreement=None, cosine=None) -> dict:
    evaluation = {"top1_agreement": agreement, "primary_output": "y", "outputs": {"y": {"cosine": cosine}}}
    if top1 is not None:
        evaluation["accuracy"] = {"candidate_top1": top1, "reference_top1": top1 + drop, "top1_drop_pp": drop}
    return {"target": target, "precision": precision, "size_bytes": size, "latency_ms": {"p50": p50},
            "evaluation": evaluation}  # fmt: skip


#: A hand-made sweep of one target: fp16 is dominated by fp32 (slower and less accurate).
ROWS = [
    entry("arm-cpu", "fp32", 4_000_000, 10.0, 80.0, 0.0, 100.0, 1.0),
    entry("arm-cpu", "fp16", 2_000_000, 11.0, 79.5, 0.5, 99.0, 0.9999),
    entry("arm-cpu", "int8", 1_000_000, 4.0, 79.0, 1.0, 97.0, 0.999),
    entry("intel-vpu", "fp16", 2_000_000, 6.0, 80.0, 0.0, 100.0, 1.0),
    entry("intel-vpu", "int8", 1_000_000, 3.0, 77.0, 3.0, 94.0, 0.99),
]


def test_plan_follows_each_targets_table_and_says_what_it_skips() -> None:
    targets = [get_target(n) for n in ("arm-cpu", "nnapi", "intel-vpu")]
    plan, skipped = sweep_plan(targets, calibrated=False, quantized=False)
    pairs = [(t.name, r) for t, r in plan]
    for t in targets:  # every recipe the table runs and that needs no calibration, nothing else
        want = [r for r, why in t.precisions.items() if why is None and r not in ("int8", "int16x8")]
        assert [r for n, r in pairs if n == t.name] == want
    reasons = {(s["target"], s["precision"]): s["reason"] for s in skipped}
    assert reasons[("arm-cpu", "int8")] == "needs calibration data (--calib)"
    assert reasons[("nnapi", "fp32")] == get_target("nnapi").precisions["fp32"]
    assert len(pairs) + len(skipped) == 3 * 6
    plan, skipped = sweep_plan(targets, calibrated=True, quantized=False)
    assert ("nnapi", "int8") in [(t.name, r) for t, r in plan]
    plan, skipped = sweep_plan(targets, calibrated=False, quantized=True)
    assert {r for _, r in plan} == {"int8"}


def test_pareto_front_on_a_hand_made_set() -> None:
    points = [(10.0, 80.0), (11.0, 79.5), (4.0, 79.0), (4.0, 78.0), (2.0, 50.0), (10.0, 80.0)]
    # (11, 79.5) is beaten by (10, 80); (4, 78) by (4, 79); the two equal points both stay
    assert pareto_front(points) == [4, 2, 0, 5]
    section = tradeoff_section(ROWS, [])
    assert section["accuracy_metric"] == "top1"
    assert section["pareto"] == {"arm-cpu": ["int8", "fp32"], "intel-vpu": ["int8", "fp16"]}
    assert [r["pareto"] for r in section["rows"]] == [True, False, True, True, True]


@pytest.mark.parametrize(
    ("text", "chosen"),
    [
        ("max-drop=0.5", {"arm-cpu": "fp32", "intel-vpu": "fp16"}),
        ("max-drop=1", {"arm-cpu": "int8", "intel-vpu": "fp16"}),
        ("min-agreement=94", {"arm-cpu": "int8", "intel-vpu": "int8"}),
        ("min-cosine=0.9999", {"arm-cpu": "fp32", "intel-vpu": "fp16"}),
    ],
)
def test_pick_takes_the_fastest_within_the_budget(text, chosen) -> None:
    rows = tradeoff_section(ROWS, [])["rows"]
    got = pick(rows, parse_budget(text))
    assert {t: c["precision"] for t, c in got.items()} == chosen
    for target, choice in got.items():
        assert choice["why"].startswith(f"{target}: {choice['precision']} is the fastest recipe within ")
    if text == "max-drop=0.5":
        assert "faster but outside it: int8 (top-1 drop 1.00 pp)" in got["arm-cpu"]["why"]


def test_pick_names_the_best_reached_when_nothing_meets_the_budget() -> None:
    rows = tradeoff_section(ROWS, [])["rows"]
    with pytest.raises(PickError, match=r"no recipe on intel-vpu .* best reached is int8 \(cosine 0.99000\)"):
        pick(
            [r for r in rows if r["target"] == "intel-vpu" and r["precision"] == "int8"],
            parse_budget("min-cosine=0.999"),
        )
    with pytest.raises(
        PickError, match=r"no recipe on arm-cpu .* best reached is fp16 \(agreement 99.00 %\)"
    ):
        pick(
            [r for r in rows if r["target"] == "arm-cpu" and r["precision"] != "fp32"],
            parse_budget("min-agreement=99.5"),
        )
    without_labels = tradeoff_section([entry("arm-cpu", "fp32", 1, 1.0, agreement=100.0, cosine=1.0)], [])
    with pytest.raises(DataError, match="needs labelled evaluation data"):
        pick(without_labels["rows"], parse_budget("max-drop=1"))


@pytest.mark.parametrize(
    "text", ["max-drop", "drop=1", "max-drop=x", "max-drop=-1", "min-cosine=2", "min-agreement=101", "=3"]
)
def test_bad_budgets_are_one_line_data_errors(text) -> None:
    with pytest.raises(DataError, match="--pick"):
        parse_budget(text)


def test_report_renders_the_tradeoff_table_and_one_plot_per_target(monkeypatch) -> None:
    import edgekit.report as report_module

    section = tradeoff_section(ROWS, [{"target": "nnapi", "precision": "fp32", "reason": "integer only"}])
    section["pick"] = {
        "budget": "max-drop=0.5",
        "chosen": pick(section["rows"], parse_budget("max-drop=0.5")),
    }
    report = {"format_version": "1.0", "model": {}, "targets": ROWS, "tradeoff": section, "samples": 10}
    md = report_module.render_markdown(report)
    assert "## Trade-off: recipes per target" in md and "Skipped on nnapi: fp32 (integer only)." in md
    assert "| arm-cpu | fp32 | 4.000 | 10.000 | 80.00 | 0.00 | 100.00 | 1.00000 | ★ picked |" in md
    assert "## arm-cpu fp16" in md  # each bundle's own section names its recipe
    figures = []

    def keep(fig):
        fig.canvas.draw()
        figures.append(fig)
        return "data:image/png;base64,"

    monkeypatch.setattr(report_module, "_png", keep)
    html = report_module.render_html(report)
    assert "id='plot-tradeoff-arm-cpu'" in html and "id='plot-tradeoff-intel-vpu'" in html
    arm = figures[-2]
    (ax,) = arm.axes
    assert ax.get_title() == "arm-cpu: accuracy against latency" and ax.get_ylabel() == "top-1 %"
    assert sorted(t.get_text() for t in ax.texts) == ["fp16", "fp32 (picked)", "int8"]
    front = ax.lines[0]  # the Pareto front, joined by latency
    assert list(front.get_xdata()) == [4.0, 10.0] and list(front.get_ydata()) == [79.0, 80.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["recipe (area: size)", "Pareto front"]
    areas = list(ax.collections[0].get_sizes())
    assert areas[0] > areas[1] > areas[2]  # fp32 4 MB > fp16 2 MB > int8 1 MB
