"""The zoo benchmark: every zoo model and the real models of ../shared x the six deployment cases.

    python benchmarks/zoo.py                        # reduced zoo (tests/zoo/models) + ../shared models
    python benchmarks/zoo.py --full                 # full-size zoo (benchmarks/.zoo, from export.py --full)
    python benchmarks/zoo.py --only resnet18,unet --cases "arm-cpu fp32,quantize" --json out.json

Cases: arm-cpu fp32, arm-cpu int8, nnapi, intel-vpu fp16, intel-vpu int8 and `edgekit quantize`, each run as
the real `edgekit` CLI in a subprocess (two at a time). Each case passes, fails with a typed one-line error
(exit 2, one `error:` line) or crashes (anything else). For passing cases the figures are: the fp32 TFLite's
max error of the output range (manifest verification and measured on the evaluation samples), the int8
TFLite against its own QDQ model (cosine per output, top-1 agreement), the FP16 IR's cosine to fp32, and every
artifact against fp32 (cosine, SQNR, top-1 agreement). Data: crops of real photos (tests/zoo/zoo_data.py;
the 200 shared ImageNet photos when present), log-mel features of synthetic speech for keyword spotters,
token ids for encoders, the MNIST test set for mnist-8.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo_cases  # noqa: E402
import zoo_data  # noqa: E402
from shared_data import default_shared, mnist_npz  # noqa: E402

FULL_MANIFEST = ROOT / "benchmarks" / ".zoo" / "zoo.json"

#: The real models of ../shared, described like zoo manifest entries (see ../shared/README.md).
SHARED_MODELS: list[dict[str, Any]] = [
    {
        "name": "ppocrv4_det",
        "file": "ch_PP-OCRv4_det_infer.onnx",
        "kind": "segmenter",
        "inputs": [{"name": "x", "shape": [1, 3, 320, 320], "dtype": "float32"}],
        "data": dict(zoo_data.PPOCR_DET_DATA),
        "extra_args": ["--input-shape", "x=1,3,320,320"],
    },
    {
        "name": "ppocrv4_rec",
        "file": "ch_PP-OCRv4_rec_infer.onnx",
        "kind": "sequence",
        "inputs": [{"name": "x", "shape": [1, 3, 48, 320], "dtype": "float32"}],
        "data": dict(zoo_data.PPOCR_REC_DATA),
        "extra_args": ["--input-shape", "x=1,3,48,320"],
    },
    {
        "name": "mobilenetv2_12_int8",
        "file": "mobilenetv2-12-int8.onnx",
        "kind": "classifier",
        "inputs": [{"name": "input", "shape": [1, 3, 224, 224], "dtype": "float32"}],
        "data": dict(zoo_data.IMAGENET_DATA),
        "extra_args": ["--input-shape", "input=1,3,224,224"],
    },
    {
        "name": "squeezenet1.1",
        "file": "squeezenet1.1-fp32.onnx",
        "kind": "classifier",
        "inputs": [{"name": "data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}],
        "data": {"type": "image", "color": "BGR", "scale": 1.0, "mean": [104.0, 117.0, 123.0], "std": None},
    },
    {
        "name": "mnist8",
        "file": "mnist-8.onnx",
        "kind": "classifier",
        "inputs": [{"name": "Input3", "shape": [1, 1, 28, 28], "dtype": "float32"}],
        "data": {"type": "mnist"},
    },
]


def zoo_models(manifest: Path, data_dir: Path, photos: Path | None, calib: int, evaluation: int, only):
    models = []
    for entry in zoo_data.entries(manifest):
        if only and entry["name"] not in only:
            continue
        c, e = zoo_data.write_data(
            entry, data_dir, calib=calib, evaluation=evaluation, photos=photos, source=manifest.parent
        )
        models.append(
            zoo_cases.Model(
                entry["name"],
                manifest.parent / entry["file"],
                entry["kind"],
                entry["inputs"],
                c,
                e,
                list(entry.get("extra_args", [])),
            )
        )
    return models


def shared_models(shared: Path, data_dir: Path, calib: int, evaluation: int, only):
    models = []
    photos = shared / "data" / "imagenet-sample-200"
    for entry in SHARED_MODELS:
        if only and entry["name"] not in only:
            continue
        path = shared / "models" / entry["file"]
        if not path.exists():
            continue
        if entry["data"]["type"] == "mnist":
            both = np.load(mnist_npz(shared, calib + evaluation, data_dir))["Input3"]
            c, e = data_dir / "mnist8.calib.npz", data_dir / "mnist8.eval.npz"
            np.savez(c, Input3=both[:calib])
            np.savez(e, Input3=both[calib:])
        else:
            c, e = zoo_data.write_data(entry, data_dir, calib=calib, evaluation=evaluation, photos=photos)
        models.append(
            zoo_cases.Model(
                entry["name"], path, entry["kind"], entry["inputs"], c, e, list(entry.get("extra_args", []))
            )
        )
    return models


# ------------------------------------------------------------------------------------------------- table

MARK = {"pass": "pass", "typed": "typed", "crash": "**CRASH**", "figures": "pass, *figure missed*"}


def fmt(x: Any, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x == float("inf"):
            return "inf"
        return f"{x:.{digits}g}" if abs(x) < 1e-2 and x != 0 else f"{x:.{digits}f}"
    return str(x)


def figure_cell(case: str, fig: dict[str, Any]) -> str:
    if not fig:
        return ""
    if "error" in fig:
        return f"figures: {fig['error'][:60]}"
    v = fig.get("vs_fp32", {})
    source = fig.get("source_file_vs_reference")  # a dynamically quantized source (zoo_cases._onnx_runner)
    if case == "arm-cpu fp32":
        cell = f"max err {fmt(v.get('max_rel_error'), 2)} (verif {fmt(fig.get('verification_max_rel_error'), 2)})"
        if source:
            cell += f"; the file as onnxruntime runs it vs its dequantized model: {fmt(source['max_rel_error'], 2)}"
        return cell
    if case == "intel-vpu fp16":
        return f"cos {fmt(v.get('cosine'), 6)}"
    parts = [f"cos {fmt(v.get('cosine'))}", f"{fmt(v.get('sqnr_db'), 3)} dB"]
    if v.get("top1") is not None:
        parts.append(f"top1 {v['top1']:.2f}")
    if case == "arm-cpu int8":
        q = fig.get("vs_qdq", {})
        if "error" in q:
            parts.append(f"vs QDQ: {q['error'][:60]}")
        elif q:
            parts.append(
                f"vs QDQ cos {fmt(q.get('cosine'), 6)}"
                + (f" top1 {q['top1']:.2f}" if q.get("top1") is not None else "")
                + (
                    f" (with one-step ties {q['top1_ties']:.2f})"
                    if q.get("top1_ties") is not None and q.get("top1_ties") != q.get("top1")
                    else ""
                )
            )
            beside = [
                f"{label}: vs int8 cos {fmt(fig[f'vs_qdq_{ref}'].get('cosine'), 6)}, vs exact cos "
                f"{fmt(fig[f'qdq_floor_{ref}'].get('cosine'), 6)}"
                for ref, label in (("onnxruntime", "float32 onnxruntime"), ("host", "float32 host runner"))
                if f"vs_qdq_{ref}" in fig and f"qdq_floor_{ref}" in fig
            ]
            beside += [
                f"{label} could not run the QDQ file: {fig[f'vs_qdq_{ref}_error']}"
                for ref, label in (("onnxruntime", "float32 onnxruntime"), ("host", "float32 host runner"))
                if f"vs_qdq_{ref}_error" in fig
            ]
            if beside:
                parts.append("(" + "; ".join(beside) + ")")
    return ", ".join(parts)


def markdown(results: list[zoo_cases.CaseResult], cases: list[str]) -> str:
    models = list(dict.fromkeys(r.model for r in results))
    by = {(r.model, r.case): r for r in results}
    verdicts = {(r.model, r.case): zoo_cases.verdict(r) for r in results}
    counts = {o: sum(r.outcome == o for r in results) for o in ("pass", "typed", "crash")}
    missed = sum(v == "figures" for v in verdicts.values())
    lines = [
        f"**{counts['pass']} pass ({missed} of them miss an issue figure), {counts['typed']} typed errors, "
        f"{counts['crash']} crashes** ({len(results)} cases)",
        "",
        "| model | " + " | ".join(cases) + " |",
        "|---|" + "---|" * len(cases),
    ]
    for m in models:
        lines.append(
            f"| {m} | " + " | ".join(MARK[verdicts[m, c]] if (m, c) in by else "" for c in cases) + " |"
        )
    lines += ["", "Figures (int8 rows: against fp32; `vs QDQ`: int8 TFLite against its own QDQ model):", ""]
    lines += ["| model | case | figures |", "|---|---|---|"]
    for m in models:
        for c in cases:
            r = by.get((m, c))
            if r and r.outcome == "pass":
                missed = "; ".join(zoo_cases.figure_problems(c, r.figures))
                lines.append(
                    f"| {m} | {c} | {figure_cell(c, r.figures)}{' **' + missed + '**' if missed else ''} |"
                )
    failures = [r for r in results if r.outcome != "pass"]
    if failures:
        lines += [
            "",
            "Failures (first line):",
            "",
            "| model | case | outcome | message |",
            "|---|---|---|---|",
        ]
        for r in failures:
            msg = (r.error or "").replace("|", "\\|")
            lines.append(f"| {r.model} | {r.case} | {r.outcome} | {msg} |")
    return "\n".join(lines)


def run_and_print(
    models: list[zoo_cases.Model], cases: list[str], work: Path, workers: int, timeout: float
) -> tuple[list[zoo_cases.CaseResult], float]:
    """Run every model x case (a progress line per case on stderr), print the markdown table and the time;
    (results, seconds)."""
    started = time.perf_counter()
    results = zoo_cases.run_all(
        models,
        cases,
        work,
        workers=workers,
        timeout=timeout,
        progress=lambda r: print(
            f"  {r.model:24s} {r.case:15s} {r.outcome:6s} {r.seconds:6.1f}s "
            f"{'' if r.cpu_seconds is None else f'{r.cpu_seconds:6.1f} cpu-s '}"
            f"{'' if r.peak_mb is None else f'{r.peak_mb:7.0f} MB '}{r.error or ''}"[:200],
            file=sys.stderr,
        ),
    )
    elapsed = time.perf_counter() - started
    print(markdown(results, cases))
    print(f"\n{len(results)} cases in {elapsed:.0f} s")
    return results, elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="the full-size zoo (benchmarks/.zoo)")
    parser.add_argument("--manifest", type=Path, help="a zoo.json (default: reduced or full)")
    parser.add_argument("--no-shared", action="store_true", help="skip the models of ../shared")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--cases", help="comma-separated cases (default: all six)")
    parser.add_argument("--calib", type=int, default=32, help="calibration samples per model")
    parser.add_argument("--eval", type=int, default=16, help="evaluation samples per model")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per case")
    parser.add_argument("--work", type=Path, help="keep bundles and logs here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)
    manifest = args.manifest or (FULL_MANIFEST if args.full else zoo_data.MANIFEST)
    if not manifest.exists():
        print(
            f"no zoo manifest at {manifest}: run python benchmarks/zoo/export.py{' --full' if args.full else ''}",
            file=sys.stderr,
        )
        return 2
    cases = args.cases.split(",") if args.cases else list(zoo_cases.CASES)
    unknown = [c for c in cases if c not in zoo_cases.CASES]
    if unknown:
        print(f"unknown case(s) {unknown}; the cases are {list(zoo_cases.CASES)}", file=sys.stderr)
        return 2
    only = set(args.only.split(",")) if args.only else None
    shared = default_shared()
    photos = shared / "data" / "imagenet-sample-200"
    photos = photos if photos.is_dir() else None
    with tempfile.TemporaryDirectory(prefix="edgekit-zoo-") as tmp:
        work = args.work or Path(tmp)
        data_dir = work / "data"
        models = zoo_models(manifest, data_dir, photos, args.calib, args.eval, only)
        if not args.no_shared and (shared / "models").is_dir():
            models += shared_models(shared, data_dir, args.calib, args.eval, only)
        print(f"{len(models)} models x {len(cases)} cases, {args.workers} workers", file=sys.stderr)
        results, elapsed = run_and_print(models, cases, work, args.workers, args.timeout)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "manifest": str(manifest),
                    "cases": cases,
                    "seconds": round(elapsed, 1),
                    "results": zoo_cases.result_json(results),
                },
                indent=1,
                default=float,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
