"""Per-case wall time, CPU time and peak memory of zoo runs, as a markdown table (round 18s).

    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe18s/zoo.json --no-shared --workers 1 --json after.json
    python benchmarks/case_times.py after.json                     # model x case: wall s / CPU s / peak MB
    python benchmarks/case_times.py after.json --before before.json  # and the CPU seconds before -> after

Reads the JSON ``benchmarks/zoo.py --json`` writes (each case's ``seconds``, ``cpu_seconds`` and ``peak_mb``: the
CLI and every child it waited for, from ``wait4``). On a shared machine the wall time is the CPU time stretched by
the load; compare CPU seconds between runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

CASES = ("arm-cpu fp32", "arm-cpu int8", "nnapi", "intel-vpu fp16", "intel-vpu int8", "quantize")


def load(paths: list[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, case) -> result, later files replacing earlier ones."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        for r in json.loads(path.read_text())["results"]:
            out[r["model"], r["case"]] = r
    return out


def cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return "not run"
    mark = "" if r["outcome"] == "pass" else f" ({r['outcome']})"
    cpu = "-" if r.get("cpu_seconds") is None else f"{r['cpu_seconds']:.0f}"
    peak = "-" if r.get("peak_mb") is None else f"{r['peak_mb']:,.0f}"
    return f"{r['seconds']:.0f} / {cpu} / {peak}{mark}"


def table(after: dict, before: dict | None = None) -> str:
    models = list(dict.fromkeys(m for m, _ in after))
    cases = [c for c in CASES if any(c == k for _, k in after)]
    lines = ["| model | " + " | ".join(cases) + " |", "|---|" + "---|" * len(cases)]
    for m in models:
        cells = []
        for c in cases:
            text = cell(after.get((m, c)))
            b = (before or {}).get((m, c))
            if b is not None and b.get("cpu_seconds") is not None and (m, c) in after:
                text = f"{b['cpu_seconds']:.0f} -> " + text
            cells.append(text)
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("json", type=Path, nargs="+", help="benchmarks/zoo.py --json files")
    parser.add_argument(
        "--before", type=Path, nargs="+", help="earlier runs: their CPU seconds printed first"
    )
    args = parser.parse_args(argv)
    after = load(args.json)
    before = load(args.before) if args.before else None
    print(("cells: CPU s before -> " if before else "cells: ") + "wall s / CPU s / peak MB")
    print()
    print(table(after, before))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
