"""Figures of the transformer zoo models on the TFLite targets: fp32 error, int8 vs its QDQ model, int8 vs fp32.

    python benchmarks/zoo/transformer_figures.py [--models DIR] [--samples 8]

For each model of ``zoo_transformers.json``: the fp32 TFLite against onnxruntime (max error / output range), the
int8 TFLite (arm-cpu, float I/O) and the nnapi one (int8 I/O) against the QDQ model of ``edgekit quantize`` run
exactly (``HostRunner``), and each against fp32 (cosine); the intel-vpu FP16 and INT8 (uint8 activations) IRs as
the target verifies them (max error / output range).
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
        batch = bert_inputs(count, ids_spec["shape"][1], entry["data"]["vocab_size"], seed=seed)
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


def _error_of_range(got: list[np.ndarray], ref: list[np.ndarray], span: float) -> float:
    return max(float(np.abs(g - r).max()) for g, r in zip(got, ref, strict=True)) / span


def _cosine_min(got: list[np.ndarray], ref: list[np.ndarray]) -> float:
    return min(cosine(g, r) for g, r in zip(got, ref, strict=True))


def _self_sensitivity(exact, evals: list[dict[str, np.ndarray]], noise: float = 1e-3) -> float | None:
    """How far the QDQ model itself moves when its float inputs move by ``noise`` (far below one input step): the
    cosine of QDQ(x) and QDQ(x + noise). Where this is below 0.999, one rounding step anywhere (any integer engine
    rounds differently from the exact float reference somewhere) moves the output that much: the model's rounding
    sensitivity, not a conversion error. None for integer-only inputs."""
    rng = np.random.default_rng(0)
    cosines = []
    for feeds in evals:
        moved = {
            k: (v + noise * rng.standard_normal(v.shape)).astype(v.dtype) if v.dtype.kind == "f" else v
            for k, v in feeds.items()
        }
        if all(moved[k] is feeds[k] for k in feeds):
            return None
        cosines.append(cosine(exact.run(feeds)["output"], exact.run(moved)["output"]))
    return min(cosines)


def figures(path: Path, entry: dict, count: int, tmp: Path) -> dict:
    import onnxruntime as ort
    from edgekit.api import quantize_model
    from edgekit.core.model import load_model
    from edgekit.core.runtime import HostRunner
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.targets.base import PackageOptions, get_target
    from edgekit.targets.nnapi_target import NNAPI_PER_TENSOR
    from edgekit.targets.tflite.converter import ConvertOptions, convert
    from edgekit.targets.tflite.package import run_tflite

    class Sample:
        def __init__(self, inputs: dict[str, np.ndarray]):
            self.inputs, self.label = inputs, None

    calib = [Sample(s) for s in samples_for(entry, 32, seed=1)]
    evals = samples_for(entry, count, seed=2)
    fp32 = load_model(path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = [session.run(None, s)[0] for s in evals]
    span = max(float(np.ptp(np.stack(ref))), 1e-12)
    row: dict = {"model": path.name}

    result = convert(fp32)
    got = [run_tflite(result.data, result, s)["output"] for s in evals]
    row["arm-cpu fp32"] = {"max_err_of_range": _error_of_range(got, ref, span)}

    rows: dict[str, tuple[str, ConvertOptions]] = {
        "arm-cpu int8": ("arm-cpu", ConvertOptions()),
        # as the nnapi target converts: int8 I/O, float islands (LayerNorm, the mask) on the CPU
        "nnapi (int8 I/O)": (
            "nnapi",
            ConvertOptions(
                io_dtype="int8", target="nnapi", per_tensor_weights=NNAPI_PER_TENSOR, strict_integer=False
            ),
        ),
    }
    for name, (target_name, options) in rows.items():
        # each target's own quantization scheme, as `edgekit deploy` quantizes for it
        qoptions = get_target(target_name).quantize_options(QuantizeOptions())
        qdq = quantize_model(path, calib, options=qoptions).quantized.model
        exact = HostRunner(qdq)
        qref = [exact.run(s)["output"] for s in evals]
        try:
            r8 = convert(qdq, options)
            got8 = [run_tflite(r8.data, r8, s)["output"] for s in evals]
        except Exception as exc:  # noqa: BLE001 - a figure script: report and go on
            row[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
            continue
        row[name] = {
            "qdq_vs_fp32_cosine_min": _cosine_min(qref, ref),
            "qdq_self_sensitivity_cosine_min": _self_sensitivity(exact, evals),
            "vs_qdq_cosine_min": _cosine_min(got8, qref),
            "vs_qdq_max_err_of_range": _error_of_range(got8, qref, span),
            "vs_fp32_cosine_min": _cosine_min(got8, ref),
            "float_ops": len(r8.float_ops),
        }

    target = get_target("intel-vpu")
    qdq_u8 = quantize_model(path, calib, options=QuantizeOptions(activations="uint8")).quantized.model
    for name, model in (("intel-vpu fp16", fp32), ("intel-vpu int8", qdq_u8)):
        try:
            bundle = target.package(
                model, tmp / name.replace(" ", "_"), PackageOptions(verify_samples=tuple(evals))
            )
        except Exception as exc:  # noqa: BLE001
            row[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
            continue
        report = json.loads((bundle / "manifest.json").read_text())["verification"]
        row[name] = {
            "max_err_of_range": report["max_rel_error"],
            **({"vs_exact_qdq_err_of_range": report["max_rel_error_vs_exact_qdq"]} if "int8" in name else {}),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=ROOT / "tests" / "zoo" / "models")
    parser.add_argument("--samples", type=int, default=8)
    args = parser.parse_args()
    entries = json.loads((args.models / "zoo_transformers.json").read_text())["models"]
    import tempfile

    with tempfile.TemporaryDirectory(prefix="edgekit-tf-figures-") as tmp:
        for entry in entries:
            row = figures(args.models / entry["file"], entry, args.samples, Path(tmp) / entry["file"])
            print(json.dumps(row, indent=1), flush=True)


if __name__ == "__main__":
    main()
