"""Figures of the transformer zoo models on the TFLite targets: fp32 error, int8 vs its QDQ model, int8 vs fp32.

    python benchmarks/zoo/transformer_figures.py [--models DIR] [--samples 8]

For each model of ``zoo_transformers.json``: the fp32 TFLite against onnxruntime (max error / output range), the
int8 TFLite (arm-cpu, float I/O) and the nnapi one (int8 I/O) against the QDQ model of ``edgekit quantize`` run
exactly (``HostRunner``), and each against fp32 (cosine).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from transformers import bert_inputs  # noqa: E402


def samples_for(entry: dict, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Token ids with padding masks for encoders; standard-normal images for classifiers."""
    out = []
    if entry["kind"] == "encoder":
        ids_spec = next(i for i in entry["inputs"] if i["name"] == "input_ids")
        batch = bert_inputs(count, ids_spec["shape"][1], ids_spec["high"], seed=seed)
        for i in range(count):
            out.append({k: v[i : i + 1].numpy() for k, v in batch.items()})
        return out
    rng = np.random.default_rng(seed)
    for _ in range(count):
        out.append({i["name"]: rng.standard_normal(i["shape"]).astype(i["dtype"]) for i in entry["inputs"]})
    return out


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def figures(path: Path, entry: dict, count: int) -> dict:
    import onnxruntime as ort
    from edgekit.api import quantize_model
    from edgekit.model import load_model
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.runtime import HostRunner
    from edgekit.targets.tflite.converter import ConvertOptions, convert
    from edgekit.targets.tflite.package import run_tflite

    calib = samples_for(entry, 32, seed=1)
    evals = samples_for(entry, count, seed=2)
    fp32 = load_model(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = [session.run(None, s)[0] for s in evals]
    span = max(float(np.ptp(np.stack(ref))), 1e-12)
    row: dict = {"model": path.name}
    result = convert(fp32)
    got = [run_tflite(result.data, result, s)["output"] for s in evals]
    row["fp32_max_err_of_range"] = max(float(np.abs(g - r).max()) for g, r in zip(got, ref)) / span

    class S:
        def __init__(self, inputs):
            self.inputs, self.label = inputs, None

    qdq = quantize_model(path, [S(s) for s in calib], options=QuantizeOptions()).quantized.model
    exact = HostRunner(qdq)
    qref = [exact.run(s)["output"] for s in evals]
    for name, options in (
        ("arm_cpu_int8", ConvertOptions()),
        ("nnapi", ConvertOptions(io_dtype="int8", target="nnapi", per_tensor_weights=frozenset())),
    ):
        try:
            r8 = convert(qdq, options)
            got8 = [run_tflite(r8.data, r8, s)["output"] for s in evals]
        except Exception as exc:  # noqa: BLE001 - a figure script: report and go on
            row[name] = f"error: {type(exc).__name__}: {exc}"
            continue
        row[name] = {
            "vs_qdq_cosine_min": min(cosine(g, q) for g, q in zip(got8, qref)),
            "vs_qdq_max_err_of_range": max(float(np.abs(g - q).max()) for g, q in zip(got8, qref)) / span,
            "vs_fp32_cosine_min": min(cosine(g, r) for g, r in zip(got8, ref)),
            "float_ops": len(r8.float_ops),
        }
    row["qdq_vs_fp32_cosine_min"] = min(cosine(q, r) for q, r in zip(qref, ref))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / "tests" / "zoo" / "models")
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    entries = json.loads((args.models / "zoo_transformers.json").read_text())
    for entry in entries:
        print(json.dumps(figures(args.models / entry["file"], entry, args.samples)), flush=True)


if __name__ == "__main__":
    main()
