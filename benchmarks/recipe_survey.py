"""Issues 13/14 robustness survey: every recipe x target and the accuracy search on every zoo model.

    nice -n 5 python benchmarks/recipe_survey.py --workers 1 --json survey.json
    python benchmarks/recipe_survey.py --only mobilenet_v2,bert_tiny_op13 --cases "arm-cpu w4,nnapi w8"
    python benchmarks/recipe_survey.py --search-only ultraface_slim,yunet --sweep-models mnist8,kws_gru
    python benchmarks/recipe_survey.py --manifest benchmarks/.zoo/probe12r/zoo.json --no-shared --no-search
    # (--manifest: a probe round's zoo.json, read by benchmarks/zoo.py's reader, as zoo.py --manifest takes it)

Per model (the reduced zoo of tests/zoo/models, plus the real models of ../shared unless --no-shared), each
case is one real ``edgekit deploy`` subprocess:

- ``T fp32`` (the size baseline), ``T fp16``, ``T w8``, ``T w4``, ``T int16x8`` for T = arm-cpu and intel-vpu,
  ``nnapi fp16`` and ``nnapi fp32|w8|w4|int16x8`` (those four: a typed refusal naming the recipes nnapi runs);
  int16x8, w8 and w4 get the calibration data (int16x8 needs it; w8/w4 round by it: GPTQ);
- ``T search``: ``--min-cosine 0.99`` with the calibration data and ``--accuracy-data`` (the evaluation
  samples), T = arm-cpu, intel-vpu, nnapi (nnapi: a refusal naming the best reached and the layers is legal);
- ``sweep``: ``--sweep --eval`` to all three targets with ``--calib`` (``--sweep-models``, 3 small ones).

Each outcome is ``pass`` / ``typed`` (exit 2, the one ``error:`` line) / ``verify`` (a typed refusal of the
artifact's verification: a wrong refusal unless the yardstick is right) / ``crash`` (a signal, a traceback,
internal text, an exit not in {0, 2}) / ``timeout`` (``--timeout``, the search's time box) / ``half`` (a failed run that left files in its output
folder, or a passing one whose manifest names a missing file). Passing deploys record the bundle size against
the same target's fp32 bundle and the verification figures of the manifest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo_cases  # noqa: E402
import zoo_data  # noqa: E402
from shared_data import default_shared  # noqa: E402
from zoo import shared_models, zoo_models  # noqa: E402

TARGETS = ("arm-cpu", "intel-vpu", "nnapi")
RECIPE_CASES = (
    "arm-cpu fp32",
    "arm-cpu fp16",
    "arm-cpu w8",
    "arm-cpu w4",
    "arm-cpu int16x8",
    "intel-vpu fp32",
    "intel-vpu fp16",
    "intel-vpu w8",
    "intel-vpu w4",
    "intel-vpu int16x8",
    "nnapi fp16",
    "nnapi fp32",
    "nnapi w8",
    "nnapi w4",
    "nnapi int16x8",
)
SEARCH_CASES = ("arm-cpu search", "intel-vpu search", "nnapi search")
CASES = (*RECIPE_CASES, *SEARCH_CASES, "sweep")
#: Recipes that take the calibration data (int16x8 needs it; w8 and w4 round their weights by it).
CALIBRATED = ("int8", "int16x8", "w8", "w4")
#: A typed refusal a target must give (issue 13's table: nnapi runs fp16 and int8 only).
MUST_REFUSE = {"nnapi fp32", "nnapi w8", "nnapi w4", "nnapi int16x8"}
MIN_COSINE = "0.99"
#: The models that stand for the hidden set of issue 12 (face detectors, anchor-free detector, YOLOv8n, Paddle
#: classifiers, a BERT-style encoder, SqueezeNet): the accuracy search runs on these by default.
SEARCH_DEFAULT = (
    "ultraface_slim",
    "retinaface_mnet025",
    "yunet",
    "nanodet_plus",
    "yolov8n_op12",
    "paddle_mobilenet_v3_small",
    "ppocr_mobile_v2_cls",
    "bert_tiny_op13",
    "squeezenet1.1",
)
SWEEP_DEFAULT = ("kws_gru", "ppocr_mobile_v2_cls", "yunet")


@dataclass
class Result:
    model: str
    case: str
    outcome: str  # pass | typed | verify | crash | half | timeout
    returncode: int | None
    seconds: float
    message: str | None = None  # the error: line, or what went wrong, or the last line printed on a pass
    size: int | None = None
    size_vs_fp32: float | None = None
    figures: dict[str, Any] = field(default_factory=dict)


def command(model: zoo_cases.Model, case: str, out: Path, search_workers: int) -> list[str]:
    deploy = [*zoo_cases.edgekit_command(), "deploy", str(model.path), "-o", str(out), "-q"]
    deploy += model.extra_args
    calib = ["--calib", str(model.calib)]
    if case == "sweep":
        return [*deploy, *(a for t in TARGETS for a in ("--target", t)), *calib, "--eval", str(model.eval),
                "--sweep", "--report", str(out / "report.html")]  # fmt: skip
    target, what = case.split(" ")
    deploy += ["--target", target]
    if what == "search":
        return [*deploy, *calib, "--accuracy-data", str(model.eval), "--min-cosine", MIN_COSINE,
                "--workers", str(search_workers)]  # fmt: skip
    return [*deploy, "--precision", what, *(calib if what in CALIBRATED else [])]


def _files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def bundle_figures(folder: Path) -> tuple[int | None, dict[str, Any], str | None]:
    """(size of the model files, verification figures, problem) of one bundle folder."""
    path = folder / "manifest.json"
    if not path.exists():
        return None, {}, f"no manifest.json in {folder.name}"
    manifest = json.loads(path.read_text())
    missing = [f["path"] for f in manifest.get("model_files", []) if not (folder / f["path"]).exists()]
    if missing:
        return None, {}, f"manifest names missing file(s) {missing}"
    size = sum(f.get("size", 0) for f in manifest.get("model_files", []))
    ver = manifest.get("verification", {})
    outs = ver.get("outputs", {}).values()
    figures = {
        "precision": ver.get("precision"),
        "yardstick": ver.get("yardstick"),
        "max_rel_error": ver.get("max_rel_error"),
        "cosine": min((o["cosine"] for o in outs if "cosine" in o), default=None),
        "sqnr_db": min((o["sqnr_db"] for o in outs if "sqnr_db" in o), default=None),
        "top1": min((o["top1_agreement"] for o in outs if o.get("top1_agreement") is not None), default=None),
        "float_ops": len(ver.get("float_ops", [])),
        "notes": ver.get("converter_notes", [])[:3],
    }
    return size, {k: v for k, v in figures.items() if v not in (None, [])}, None


def run_case(model: zoo_cases.Model, case: str, work: Path, timeout: float, search_workers: int) -> Result:
    root = work / model.name / case.replace(" ", "-")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    out = root / "out"
    env = dict(os.environ, PYTHONUNBUFFERED="1", NO_COLOR="1", COLUMNS="200")
    start, timed_out = time.perf_counter(), False
    # A session of its own: on a timeout the whole group goes (the search's pool workers too, which a kill of
    # the CLI alone leaves running).
    proc = subprocess.Popen(command(model, case, out, search_workers), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        timed_out, code = True, None
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
    seconds = round(time.perf_counter() - start, 1)
    (root / "cli.log").write_text(output)
    outcome, message = zoo_cases.classify(code, output, timed_out)
    result = Result(model.name, case, outcome, code, seconds, message)
    if timed_out:
        result.outcome = "timeout"
    if outcome == "typed" and "verification failed" in (message or ""):
        result.outcome = "verify"
    if outcome != "pass":
        left = _files(out)
        if left and not timed_out and outcome != "crash":
            result.outcome = "half"
            result.message = f"{message} (left {len(left)} file(s): {left[0].relative_to(out)})"
        return result
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    done = [line for line in lines if line.startswith(("✓", "warning:"))] or lines
    result.message = "; ".join(done)[:300] if done else None
    if case in RECIPE_CASES or case in SEARCH_CASES:
        size, figures, problem = bundle_figures(out / case.split(" ")[0])
        if problem:
            result.outcome, result.message = "half", problem
        result.size, result.figures = size, figures
    return result


def add_size_ratios(results: list[Result]) -> None:
    fp32 = {(r.model, r.case.split(" ")[0]): r.size for r in results if r.case.endswith(" fp32") and r.size}
    for r in results:
        target = r.case.split(" ")[0]
        base = fp32.get((r.model, target)) or fp32.get((r.model, "arm-cpu"))
        if r.size and base:
            r.size_vs_fp32 = round(r.size / base, 3)


# ------------------------------------------------------------------------------------------------- table

MARK = {
    "pass": "pass",
    "typed": "typed",
    "verify": "**verify refusal**",
    "crash": "**CRASH**",
    "half": "**HALF**",
    "timeout": "timeout",
}


def cell(r: Result) -> str:
    if r.outcome != "pass":
        return MARK[r.outcome]
    bits = []
    if r.size_vs_fp32 is not None and not r.case.endswith("fp32"):
        bits.append(f"{r.size_vs_fp32:.2f}x")
    f = r.figures
    if "cosine" in f:
        bits.append(f"cos {f['cosine']:.4f}")
    return "pass" + (f" ({', '.join(bits)})" if bits else "")


def markdown(results: list[Result], cases: list[str]) -> str:
    models = list(dict.fromkeys(r.model for r in results))
    by = {(r.model, r.case): r for r in results}
    shown = [c for c in cases if any((m, c) in by for m in models)]
    counts = {o: sum(r.outcome == o for r in results) for o in MARK}
    wrong = [r for r in results if r.case in MUST_REFUSE and r.outcome != "typed"]
    lines = [
        ", ".join(f"{n} {o}" for o, n in counts.items()) + f" ({len(results)} runs)"
        + (f"; {len(wrong)} nnapi recipe(s) not refused" if wrong else ""),
        "",
        "| model | " + " | ".join(shown) + " |",
        "|---|" + "---|" * len(shown),
    ]  # fmt: skip
    for m in models:
        lines.append(f"| {m} | " + " | ".join(cell(by[m, c]) if (m, c) in by else "" for c in shown) + " |")
    bad = [r for r in results if r.outcome not in ("pass", "typed") or r in wrong]
    typed = [r for r in results if r.outcome == "typed" and r.case not in MUST_REFUSE]
    for title, rows in (("Failures", bad), ("Typed refusals (other than nnapi's recipe refusals)", typed)):
        if rows:
            lines += ["", f"{title}:", "", "| model | case | outcome | message |", "|---|---|---|---|"]
            lines += [
                f"| {r.model} | {r.case} | {r.outcome} | {(r.message or '').replace('|', '/')} |"
                for r in rows
            ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="comma-separated model names (default: every zoo model and ../shared)")
    parser.add_argument(
        "--manifest", type=Path, default=zoo_data.MANIFEST, help="a zoo.json (default: the reduced zoo)"
    )
    parser.add_argument("--no-shared", action="store_true", help="skip the models of ../shared")
    parser.add_argument(
        "--cases", help=f"comma-separated cases (default: the recipe cases); of {list(CASES)}"
    )
    parser.add_argument("--search-only", default=",".join(SEARCH_DEFAULT),
                        help="models the search cases run on ('all' or comma-separated)")  # fmt: skip
    parser.add_argument("--no-search", action="store_true", help="skip the accuracy search")
    parser.add_argument(
        "--sweep-models", default=",".join(SWEEP_DEFAULT), help="models --sweep runs on ('' none)"
    )
    parser.add_argument("--calib", type=int, default=8, help="calibration samples per model")
    parser.add_argument("--eval", type=int, default=8, help="evaluation / accuracy samples per model")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--search-workers", type=int, default=1, help="the search's own pool (--workers N)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--work", type=Path, help="keep bundles and logs here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)
    cases = args.cases.split(",") if args.cases else list(RECIPE_CASES)
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; the cases are {list(CASES)}", file=sys.stderr)
        return 2
    only = set(args.only.split(",")) if args.only else None
    search = (
        set() if args.no_search else (None if args.search_only == "all" else set(args.search_only.split(",")))
    )
    sweep = {m for m in args.sweep_models.split(",") if m}
    shared = default_shared()
    photos = shared / "data" / "imagenet-sample-200"
    with tempfile.TemporaryDirectory(prefix="edgekit-recipes-") as tmp:
        work = args.work or Path(tmp)
        data = work / "data"
        models = zoo_models(
            args.manifest, data, photos if photos.is_dir() else None, args.calib, args.eval, only
        )
        if not args.no_shared and (shared / "models").is_dir():
            models += shared_models(shared, data, args.calib, args.eval, only)
        jobs = [(m, c) for m in models for c in cases]
        if not args.cases:
            jobs += [(m, c) for m in models for c in SEARCH_CASES if search is None or m.name in search]
            jobs += [(m, "sweep") for m in models if m.name in sweep]
        print(f"{len(models)} models, {len(jobs)} runs, {args.workers} workers", file=sys.stderr)
        started = time.perf_counter()

        def one(job: tuple[zoo_cases.Model, str]) -> Result:
            r = run_case(*job, work, args.timeout, args.search_workers)
            print(f"  {r.model:26s} {r.case:17s} {r.outcome:6s} {r.seconds:6.1f}s {r.message or ''}"[:220],
                  file=sys.stderr)  # fmt: skip
            return r

        with ThreadPoolExecutor(max_workers=args.workers) as pool:
            results = list(pool.map(one, jobs))
        elapsed = time.perf_counter() - started
    add_size_ratios(results)
    print(markdown(results, [*cases, *([] if args.cases else [*SEARCH_CASES, "sweep"])]))
    print(f"\n{len(results)} runs in {elapsed:.0f} s")
    if args.json:
        payload = {"cases": cases, "seconds": round(elapsed, 1), "results": [asdict(r) for r in results]}
        args.json.write_text(json.dumps(payload, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
