"""Every file ``edgekit quantize`` writes, as given, on onnxruntime and on raw OpenVINO (issue 12 item 9, issue 13).

For each zoo model (tests/zoo/models/zoo.json) and recipe: ``edgekit quantize`` with the zoo's calibration data, then,
each in its own child process (a native crash cannot hide the others' results): onnxruntime's default session,
``openvino.Core().compile_model(file, "CPU", f32 hint)`` on the file itself (none of edgekit's rewrites), and the
recipe's exact numerics (``edgekit.core.exact.ExactRunner``, float64; the onnx reference evaluator where it cannot).
Prints one row per model x recipe: each runtime's status (ok / error / crash with the signal) and the worst cosine
over outputs and samples against the exact numerics.

    python benchmarks/qdq_runtimes.py [--recipes int8,int8a,int16x8,w8,w4,fp16] [--models NAME,...] [--json out.jsonl]

docs/benchmarks.md ("The standalone file on OpenVINO as given", "The other recipes' files ...") has the figures.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "zoo" / "models"

#: Recipe name -> the `edgekit quantize` flags that write it (int8: the default file; int8a: int8 activations).
FLAGS = {
    "int8": [],
    "int8a": ["--activations", "int8"],
    "int16x8": ["--precision", "int16x8"],
    "w8": ["--precision", "w8"],
    "w4": ["--precision", "w4"],
    "fp16": ["--precision", "fp16"],
}

#: One runtime on one file, in a child: the outputs of the evaluation samples into an .npz.
CHILD = r"""
import sys, numpy as np, onnx
mode, path, data_path, out = sys.argv[1:5]
data = dict(np.load(data_path))
model = onnx.load(path)
weights = {t.name for t in model.graph.initializer}
inputs = {i.name: i for i in model.graph.input if i.name not in weights}
if mode == "onnxruntime":
    import onnxruntime as ort
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    run = lambda feeds: session.run(None, feeds)
elif mode == "openvino":
    import openvino as ov
    core = ov.Core()
    compiled = core.compile_model(core.read_model(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    run = lambda feeds: list(compiled(feeds).values())
else:
    from edgekit.core.errors import ModelError
    from edgekit.core.exact import ExactRunner
    try:
        exact = ExactRunner(model)
        run = lambda feeds: list(exact.run(feeds).values())
    except ModelError:
        from onnx.reference import ReferenceEvaluator
        reference = ReferenceEvaluator(model)
        run = lambda feeds: reference.run(None, feeds)
results = {}
for k in range(min(2, len(data[next(iter(inputs))]))):
    feeds = {}
    for name, info in inputs.items():
        rank = len(info.type.tensor_type.shape.dim)
        value = data[name][k : k + 1] if data[name].ndim == rank else data[name][k]
        if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16:
            value = value.astype(np.float16)
        feeds[name] = value
    for i, value in enumerate(run(feeds)):
        results[f"{k}_{i}"] = np.asarray(value, np.float64)
np.savez(out, **results)
"""


def child(mode: str, path: Path, data: Path, work: Path) -> tuple[str, dict[str, np.ndarray] | None]:
    out = work / f"{path.stem}.{mode}.npz"
    try:
        run = subprocess.run(
            [sys.executable, "-c", CHILD, mode, str(path), str(data), str(out)],
            capture_output=True,
            text=True,
            timeout=900,
        )
    except subprocess.TimeoutExpired:
        return "timeout", None
    if run.returncode < 0:
        return f"crash (signal {-run.returncode})", None
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        return "error: " + (lines[-1] if lines else "")[:160], None
    return "ok", dict(np.load(out))


def worst_cosine(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float | str:
    worst = 1.0
    for key, x in a.items():
        x, y = x.ravel(), b[key].ravel()
        if x.shape != y.shape:
            return f"shape {x.shape} vs {y.shape}"
        nx, ny = np.linalg.norm(x), np.linalg.norm(y)
        worst = min(worst, 1.0 if nx == ny == 0 else float(x @ y / (nx * ny + 1e-30)))
    return round(worst, 6)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="int8", help=f"comma-separated, of {', '.join(FLAGS)}")
    parser.add_argument("--models", help="comma-separated zoo names (default: every model of the manifest)")
    parser.add_argument("--calib", type=int, default=8, help="calibration samples")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON lines here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from zoo import zoo_data

    manifest = json.loads((MODELS / "zoo.json").read_text())
    entries = manifest["models"] if isinstance(manifest, dict) else manifest
    only = set(args.models.split(",")) if args.models else None
    recipes = args.recipes.split(",")
    unknown = [r for r in recipes if r not in FLAGS]
    if unknown:
        parser.error(f"unknown recipe(s) {unknown}: choose from {', '.join(FLAGS)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgekit-qdq-runtimes-") as tmp:
        work = Path(tmp)
        for entry in entries:
            if only is not None and entry["name"] not in only:
                continue
            calib, evaluation = zoo_data.write_data(entry, work / "data", calib=args.calib, evaluation=2)
            for recipe in recipes:
                path = work / f"{entry['name']}.{recipe}.onnx"
                row: dict = {"model": entry["name"], "recipe": recipe}
                start = time.perf_counter()
                quantize = subprocess.run(
                    [sys.executable, "-m", "edgekit.cli.main", "quantize", str(MODELS / entry["file"]),
                     "--calib", str(calib), "-o", str(path), *FLAGS[recipe]],
                    capture_output=True, text=True, timeout=1800,
                )  # fmt: skip
                row["quantize_s"] = round(time.perf_counter() - start, 1)
                if quantize.returncode != 0:
                    lines = [line for line in quantize.stderr.splitlines() if line.strip()]
                    row["quantize"] = f"exit {quantize.returncode}: " + (lines[-1] if lines else "")[:160]
                else:
                    outputs = {}
                    for mode in ("onnxruntime", "openvino", "exact"):
                        row[mode], outputs[mode] = child(mode, path, evaluation, work)
                    for mode in ("onnxruntime", "openvino"):
                        if outputs[mode] is not None and outputs["exact"] is not None:
                            row[f"{mode}_vs_exact"] = worst_cosine(outputs["exact"], outputs[mode])
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text("".join(json.dumps(r) + "\n" for r in rows))
    crashed = [
        r for r in rows if any(str(r.get(m, "")).startswith("crash") for m in ("onnxruntime", "openvino"))
    ]
    print(
        f"{len(rows)} files; {len(crashed)} crashed a runtime; {sum('quantize' in r for r in rows)} not written"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
