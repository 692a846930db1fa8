"""The recipe trade-off of ``edgekit deploy --sweep`` and the choice ``--pick`` makes (issue 13).

A sweep packages every recipe each target's ``precisions`` table allows (calibrated recipes only with
calibration data) and runs each bundle on the device. This module holds what is decided from the measured
table, and nothing that measures:

- :func:`sweep_plan`: which (target, recipe) pairs a sweep packages, and which it skips and why;
- :func:`tradeoff_section`: the report's ``tradeoff`` section from the device runs (one row per bundle: size,
  on-device p50, top-1 / agreement / cosine against fp32, and each target's Pareto front of accuracy against
  latency);
- :class:`Budget` / :func:`parse_budget` / :func:`pick`: ``--pick "max-drop=0.5"`` (or ``min-agreement=``,
  ``min-cosine=``) chooses, per target, the fastest recipe within the budget, and says why;
- :func:`markdown` / :func:`html_table` / :func:`figures`: how the section renders (``edgekit.report`` calls them).
"""

from __future__ import annotations

import html as _html
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from edgekit.core.errors import DataError, EdgekitError
from edgekit.quantize.budget import KINDS
from edgekit.quantize.budget import Budget as AccuracyBudget


class PickError(EdgekitError):
    """No recipe of a target meets the ``--pick`` budget (the message names the best one reached)."""


# ---------------------------------------------------------------------------------------------------- plan


def sweep_plan(
    targets: Sequence[Any], calibrated: bool, quantized: bool
) -> tuple[list[tuple[Any, str]], list[dict[str, str]]]:
    """The (target, recipe) pairs a sweep packages, in table order, and the skipped ones with the reason.

    ``calibrated``: calibration data was given (the calibrated recipes need it). ``quantized``: the model is
    already quantized (QDQ): only ``int8`` applies, with its own scales.
    """
    from edgekit.quantize.recipes import RECIPES

    plan: list[tuple[Any, str]] = []
    skipped: list[dict[str, str]] = []
    for target in targets:
        for name, recipe in RECIPES.items():
            why = target.precisions.get(name, "not in the target's table")
            if why is None and quantized and name != "int8":
                why = "the model is already quantized: only its own int8 applies"
            elif why is None and recipe.calibrated and not calibrated and not quantized:
                why = "needs calibration data (--calib)"
            if why is None:
                plan.append((target, name))
            else:
                skipped.append({"target": target.name, "precision": name, "reason": why})
    return plan, skipped


# ------------------------------------------------------------------------------------------------- section


def _primary(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    evaluation = entry.get("evaluation") or {}
    outputs = evaluation.get("outputs") or {}
    name = evaluation.get("primary_output") or next(iter(outputs), None)
    return outputs.get(name, {}) if name else {}


def row_of(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One bundle's row of the trade-off table, from its report entry (``device_eval.run_on_device``)."""
    evaluation = entry.get("evaluation") or {}
    accuracy = evaluation.get("accuracy") or {}
    return {
        "target": entry["target"],
        "precision": entry.get("precision", "-"),
        "size_bytes": entry.get("size_bytes"),
        "p50_ms": (entry.get("latency_ms") or {}).get("p50"),
        "top1": accuracy.get("candidate_top1"),
        "reference_top1": accuracy.get("reference_top1"),
        "top1_drop_pp": accuracy.get("top1_drop_pp"),
        "top1_agreement": evaluation.get("top1_agreement"),
        "cosine": _primary(entry).get("cosine"),
    }


#: The accuracy axis of the plots and the Pareto front, best first: the first one every row has.
ACCURACY_METRICS = (
    ("top1", "top-1 %"),
    ("top1_agreement", "top-1 agreement with fp32 %"),
    ("cosine", "cosine"),
)


def accuracy_metric(rows: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(key, label) of the accuracy the trade-off is drawn with: top-1 with labels, else agreement, else cosine."""
    for key, label in ACCURACY_METRICS:
        if rows and all(r.get(key) is not None for r in rows):
            return key, label
    return "cosine", "cosine"


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: lower latency (x) and higher accuracy (y), one of them
    strictly. Sorted by latency."""
    front = []
    for i, (x, y) in enumerate(points):
        dominated = any(
            (x2 <= x and y2 >= y) and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i
        )
        if not dominated:
            front.append(i)
    return sorted(front, key=lambda i: (points[i][0], -points[i][1]))


def tradeoff_section(entries: Iterable[Mapping[str, Any]], skipped: Sequence[Mapping[str, str]]) -> dict:
    """The report's ``tradeoff`` section: rows, the accuracy metric, each target's Pareto front, the skips."""
    rows = [row_of(e) for e in entries]
    key, label = accuracy_metric(rows)
    fronts: dict[str, list[str]] = {}
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == target and r["p50_ms"] is not None and r[key] is not None]
        front = pareto_front([(r["p50_ms"], r[key]) for r in mine])
        fronts[target] = [mine[i]["precision"] for i in front]
    for r in rows:
        r["pareto"] = r["precision"] in fronts.get(r["target"], [])
    return {
        "accuracy_metric": key,
        "accuracy_label": label,
        "rows": rows,
        "pareto": fronts,
        "skipped": list(skipped),
    }


# ------------------------------------------------------------------------------------------------- --pick

#: Where a sweep row holds each budget's figure (the budgets themselves, their checks and which way each goes:
#: :data:`edgekit.quantize.budget.KINDS`), and how the figure reads.
ROW_FIGURES: dict[str, tuple[str, str]] = {
    "max_drop": ("top1_drop_pp", "top-1 drop {:.2f} pp"),
    "min_agreement": ("top1_agreement", "agreement {:.2f} %"),
    "min_cosine": ("cosine", "cosine {:.5f}"),
}


@dataclass(frozen=True)
class Budget:
    """One ``--pick`` budget: ``max-drop=0.5`` (pp of top-1), ``min-agreement=99`` (%), ``min-cosine=0.999``,
    the accuracy-aware search's :class:`edgekit.quantize.budget.Budget` read off a sweep's rows."""

    budget: AccuracyBudget

    @property
    def name(self) -> str:
        return self.budget.kind.replace("_", "-")

    @property
    def key(self) -> str:
        return ROW_FIGURES[self.budget.kind][0]

    def met_by(self, row: Mapping[str, Any]) -> bool:
        value = row.get(self.key)
        return value is not None and self.budget.met(value)

    def score(self, row: Mapping[str, Any]) -> float:
        return self.budget.score(row[self.key])

    def __str__(self) -> str:
        return f"{self.name}={self.budget.value:g}"

    def reads(self, row: Mapping[str, Any]) -> str:
        """The row's figure for this budget in words: ``top-1 drop 0.50 pp``."""
        value = row.get(self.key)
        if value is None:
            return "no figure"
        if self.key == "top1_drop_pp" and value < 0:
            return f"top-1 gain {-value:.2f} pp"
        return ROW_FIGURES[self.budget.kind][1].format(value)


def parse_budget(text: str) -> Budget:
    """``"max-drop=0.5"`` -> Budget; a DataError naming the accepted forms for anything else."""
    name, sep, value = text.strip().partition("=")
    kind = name.strip().replace("-", "_")
    forms = ", ".join(f"{k.replace('_', '-')}=N" for k in KINDS)
    if not sep or kind not in KINDS:
        raise DataError(f"--pick must be one of {forms}, got {text!r}")
    try:
        number = float(value)
    except ValueError:
        raise DataError(f"--pick {name.strip()} needs a number, got {value.strip()!r}") from None
    if number != number:
        raise DataError(f"--pick {name.strip()} needs a number, got {value.strip()!r}")
    try:
        return Budget(AccuracyBudget(kind, number))
    except DataError as exc:  # the budget's own range check
        raise DataError(f"--pick {name.strip()}: {exc}") from None


def _fmt(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _describe(row: Mapping[str, Any], budget: Budget) -> str:
    return f"{row['precision']} ({budget.reads(row)})"


def pick(rows: Sequence[Mapping[str, Any]], budget: Budget) -> dict[str, dict[str, str]]:
    """Per target, the fastest recipe (lowest on-device p50) within ``budget``: ``{target: {"precision": ...,
    "why": one line}}``. A PickError naming the best recipe reached when a target has none within it; a
    DataError when the runs lack the figure the budget reads (``max-drop`` needs labelled data)."""
    chosen: dict[str, dict[str, str]] = {}
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [r for r in rows if r["target"] == target]
        if all(r.get(budget.key) is None for r in mine):
            need = "labelled evaluation data" if budget.key == "top1_drop_pp" else "a classifier output"
            raise DataError(f"--pick {budget}: the runs on {target} have no {budget.key} (needs {need})")
        within = [r for r in mine if budget.met_by(r) and r.get("p50_ms") is not None]
        if not within:
            measured = [r for r in mine if r.get(budget.key) is not None]
            best = max(measured, key=budget.score)
            raise PickError(
                f"--pick {budget}: no recipe on {target} is within the budget; the best reached is "
                f"{_describe(best, budget)}"
            )
        fastest = min(within, key=lambda r: (r["p50_ms"], r.get("size_bytes") or 0))
        slower = [r["precision"] for r in within if r is not fastest]
        faster_out = [r for r in mine if r.get("p50_ms") is not None and r["p50_ms"] < fastest["p50_ms"]]
        why = (
            f"{target}: {fastest['precision']} is the fastest recipe within {budget} "
            f"(p50 {_fmt(fastest['p50_ms'], 3)} ms, {budget.reads(fastest)})"
        )
        if faster_out:
            why += "; faster but outside it: " + ", ".join(_describe(r, budget) for r in faster_out)
        elif slower:
            why += "; also within it, slower: " + ", ".join(slower)
        chosen[target] = {"precision": fastest["precision"], "why": why}
    return chosen


# ------------------------------------------------------------------------------------------------ rendering

HEADER = [
    "target",
    "recipe",
    "size MB",
    "p50 ms",
    "top-1 %",
    "top-1 drop pp",
    "agreement %",
    "cosine",
    "Pareto",
]


def table_rows(section: Mapping[str, Any]) -> list[list[str]]:
    chosen = (section.get("pick") or {}).get("chosen") or {}
    rows = []
    for r in section["rows"]:
        mark = "★" if r["pareto"] else ""
        if chosen.get(r["target"], {}).get("precision") == r["precision"]:
            mark += " picked"
        rows.append([
            r["target"], r["precision"], _fmt((r.get("size_bytes") or 0) / 1e6, 3), _fmt(r.get("p50_ms"), 3),
            _fmt(r.get("top1")), _fmt(r.get("top1_drop_pp")), _fmt(r.get("top1_agreement")),
            _fmt(r.get("cosine"), 5), mark.strip(),
        ])  # fmt: skip
    return rows


def sentences(section: Mapping[str, Any]) -> list[str]:
    """The section's prose: what the front is, what was skipped and why, what --pick chose and why."""
    out = [
        f"Each recipe a target runs, packaged and run on the device; ★ marks each target's Pareto front of "
        f"{section['accuracy_label']} against on-device p50 latency (no other recipe is both faster and more "
        "accurate)."
    ]
    grouped: dict[tuple[str, str], list[str]] = {}
    for s in section.get("skipped") or []:
        grouped.setdefault((s["target"], s["reason"]), []).append(s["precision"])
    for (target, reason), recipes in grouped.items():
        out.append(f"Skipped on {target}: {', '.join(recipes)} ({reason}).")
    chosen = (section.get("pick") or {}).get("chosen") or {}
    for c in chosen.values():
        out.append(f"Picked: {c['why']}.")
    return out


def markdown(section: Mapping[str, Any]) -> str:
    lines = ["## Trade-off: recipes per target", "", *sentences(section), ""]
    lines += ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(section)]
    return "\n".join(lines)


def html_table(section: Mapping[str, Any]) -> str:
    head = "".join(f"<th>{_html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{_html.escape(c)}</td>" for c in r) + "</tr>" for r in table_rows(section)
    )
    prose = "".join(f"<p class='tradeoff'>{_html.escape(s)}</p>" for s in sentences(section))
    return f"{prose}<table class='tradeoff'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figures(section: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """One matplotlib figure per target: accuracy against on-device p50, marker area by bundle size, the Pareto
    front joined and ringed, each point named by its recipe."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, label = section["accuracy_metric"], section["accuracy_label"]
    chosen = (section.get("pick") or {}).get("chosen") or {}
    out = []
    for target, front in section["pareto"].items():
        rows = [
            r
            for r in section["rows"]
            if r["target"] == target and r["p50_ms"] is not None and r[key] is not None
        ]
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        largest = max(r.get("size_bytes") or 1 for r in rows)
        sizes = [40 + 900 * (r.get("size_bytes") or 0) / largest for r in rows]
        xs, ys = [r["p50_ms"] for r in rows], [r[key] for r in rows]
        ax.scatter(
            xs, ys, s=sizes, alpha=0.55, color="#8da0cb", edgecolors="#555", label="recipe (area: size)"
        )
        on_front = [r for r in rows if r["precision"] in front]
        on_front.sort(key=lambda r: r["p50_ms"])
        ax.plot(
            [r["p50_ms"] for r in on_front], [r[key] for r in on_front], "-", color="#d95f02", linewidth=1.2
        )
        ax.scatter([r["p50_ms"] for r in on_front], [r[key] for r in on_front], s=[40 + 900 * (r.get(
            "size_bytes") or 0) / largest for r in on_front], facecolors="none", edgecolors="#d95f02",
            linewidths=2, label="Pareto front")  # fmt: skip
        # labels alternate above and below in latency order, so that close points keep readable names
        for i, r in enumerate(sorted(rows, key=lambda r: (r["p50_ms"], r[key]))):
            picked = chosen.get(target, {}).get("precision") == r["precision"]
            text = r["precision"] + (" (picked)" if picked else "")
            offset = (6, 8) if i % 2 == 0 else (6, -16)
            ax.annotate(text, (r["p50_ms"], r[key]), textcoords="offset points", xytext=offset, fontsize=8)
        ax.set_xlabel("on-device p50 latency, ms (lower is better)")
        ax.set_ylabel(label)
        ax.set_title(f"{target}: accuracy against latency")
        ax.margins(x=0.25)
        low, high = min(ys), max(ys)
        span = max(high - low, 1e-4 if key == "cosine" else 1.0)
        top = high + 0.4 * span
        if key != "cosine":  # a percentage: nothing above 100
            top = min(top, 100.0 + 0.1 * span)
        ax.set_ylim(low - 0.4 * span, top)
        ax.legend(loc="lower right", fontsize=7, markerscale=0.4)
        fig.tight_layout()
        out.append((f"tradeoff-{target}", fig))
    return out
