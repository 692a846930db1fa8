"""The accuracy-aware search's section of a report (issue 14): per target, the layers restored and to what, the
metric after each (a plot of the metric against the layers restored), and the cost in size and latency.

Reads the ``accuracy_aware`` JSON that :meth:`edgekit.quantize.accuracy.SearchResult.to_json` writes (plus the
``cost`` entries the caller measured), like the rest of :mod:`edgekit.report`: renderers only read JSON.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Mapping
from typing import Any

from edgekit.quantize.budget import Budget


def _budget(section: Mapping[str, Any]) -> Budget:
    b = section["budget"]
    return Budget(b["kind"], b["value"])


def headline(section: Mapping[str, Any]) -> str:
    budget = _budget(section)
    data = section.get("data") or {}
    where = f" on {section['accuracy_samples']} samples ({data['flag']})" if data.get("flag") else ""
    return (
        f"{budget.describe()} {'met' if section['met'] else 'not met'}{where}: "
        f"{budget.format(section['final']['metric'])} (int8{' + ' + ', '.join(section.get('base_fixes') or []) if section.get('base_fixes') else ''}: "
        f"{budget.format(section['base']['metric'])}); "
        f"{len(section['restored'])} of {section['quantizable_layers']} quantizable layers restored; "
        f"{section['evaluations']} candidate evaluations in {section['wall_s']:.1f} s ({section['executor']})."
    )


def outcome_line(section: Mapping[str, Any]) -> str:
    """One line: what the accuracy search of a target reached, and the layers it restored (by restore)."""
    budget = _budget(section)
    restored = section["restored"]
    kinds = Counter(r["restore"] for r in restored)
    how = f" ({', '.join(f'{n} {k}' for k, n in kinds.most_common())})" if kinds else ""
    names = ", ".join(r["node"] for r in restored[:6]) + (", ..." if len(restored) > 6 else "")
    return (
        f"{section['target']}: {budget.describe()} met on {section['accuracy_samples']} samples: "
        f"{budget.format(section['final']['metric'])} (int8: {budget.format(section['base']['metric'])}); "
        f"{len(restored)} of {section['quantizable_layers']} layers restored{how}{': ' + names if names else ''}; "
        f"{section['evaluations']} evaluations in {section['wall_s']:.1f} s"
        + (
            "; over half the layers restored: consider --precision fp16 (float compute, half the size)"
            if 2 * len(restored) > section["quantizable_layers"]
            else ""
        )
    )


def step_rows(section: Mapping[str, Any]) -> list[list[str]]:
    budget = _budget(section)
    at = curve_metrics(section)
    rows = [["0", "-", "-", "int8", budget.format(at[0])]]
    for i, r in enumerate(section["restored"], 1):
        rows.append([str(i), r["node"], r["op_type"], r["what"], budget.format(at[i]) if i in at else "-"])
    return rows


def curve_metrics(section: Mapping[str, Any]) -> dict[int, float]:
    """Layers restored -> the metric on the accuracy set (every count, or the points measured)."""
    return {c["restored"]: c["metric"] for c in section["curve"]}


STEP_HEADER = ["restored", "layer", "op", "to", "metric after"]


def cost_sentence(section: Mapping[str, Any]) -> str:
    cost = section.get("cost") or {}
    size = section.get("size_bytes") or {}
    parts = []
    if size.get("int8"):
        parts.append(f"QDQ size {size['int8'] / 1e6:.2f} -> {size['restored'] / 1e6:.2f} MB")
    for where in ("host", "device"):
        lat = cost.get(f"{where}_p50_ms") or {}
        if "int8" in lat and "restored" in lat:
            parts.append(f"{where} p50 {lat['int8']:.2f} -> {lat['restored']:.2f} ms")
        elif "restored" in lat:
            parts.append(f"{where} p50 {lat['restored']:.2f} ms restored")
    return "Cost: " + ("; ".join(parts) if parts else "not measured") + "."


def markdown(section: Mapping[str, Any]) -> str:
    header = "| " + " | ".join(STEP_HEADER) + " |\n|" + "---|" * len(STEP_HEADER)
    body = "\n".join("| " + " | ".join(r) + " |" for r in step_rows(section))
    return "\n".join(
        ["### Accuracy-aware restores", "", headline(section), "", header, body, "", cost_sentence(section)]
    )


def plot(sections: Mapping[str, Mapping[str, Any]]) -> Any:
    """One matplotlib figure: per target, the metric against the number of layers restored, the budget dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    budget = None
    for target, section in sections.items():
        budget = _budget(section)
        at = curve_metrics(section)
        ax.plot(list(at), list(at.values()), marker="o", label=target)
    if budget is not None:
        ax.axhline(budget.value, linestyle="--", color="grey", label=budget.describe())
        ax.set_ylabel(budget.format(0).rsplit(" ", 2)[0] if budget.kind != "min_cosine" else "cosine")
    ax.set_xlabel("layers restored")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def html_section(section: Mapping[str, Any]) -> str:
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in step_rows(section)
    )
    head = "".join(f"<th>{h}</th>" for h in STEP_HEADER)
    return (
        f"<h3>Accuracy-aware restores</h3><p class='accuracy-aware'>{html.escape(headline(section))}</p>"
        f"<table class='restores'><tr>{head}</tr>{rows}</table><p>{html.escape(cost_sentence(section))}</p>"
    )
