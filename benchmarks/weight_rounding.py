"""Static int8 / int16x8 weight rounding: nearest against GPTQ (``QuantizeOptions.weight_rounding``).

    python benchmarks/weight_rounding.py [--shared ../shared] [--cases rec,mobilenetv2,zoo] [--json out.json]

Same data and same run for both roundings, judged in onnxruntime with graph optimizations off (the QDQ
model's semantics in float32, whatever the CPU's int8 kernels):
- PP-OCRv4 rec (``x=1,3,48,320``): calibration on ``compression.text_lines(48, seed=1)``, judged on
  ``text_lines(48, seed=2)``: decoded (CTC argmax) sequence agreement with fp32 and cosine; int8 and int16x8.
- MobileNetV2 with real weights (fp32 from the dequantized ``mobilenetv2-12-int8.onnx``): calibration on the
  first 100 shared photos, held-out top-1 and agreement with fp32 on the other 100 (``accuracy_aware``'s split).
- Zoo models (``tests/zoo/models``: mobilenet_v3_small, bert_tiny_op17, resnet18): 32 samples to calibrate,
  32 others to judge: cosine and SQNR of every output against fp32.
The four variants (nearest / gptq, without / with bias correction) are quantized from one calibration's
statistics; the quantization wall time (calibration + rewrite) of each rounding is measured apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


@dataclass
class Sample:
    inputs: dict
    label: int | None = None


def ort_outputs(proto, samples: list[Sample]) -> list[list[np.ndarray]]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return [session.run(None, {n: s.inputs[n] for n in names}) for s in samples]


def cosine_sqnr(ref: list[list[np.ndarray]], got: list[list[np.ndarray]]) -> tuple[float, float]:
    """The worst output's cosine and SQNR (dB) over all samples."""
    cosines, sqnrs = [], []
    for k in range(len(ref[0])):
        r = np.concatenate([o[k].ravel() for o in ref]).astype(np.float64)
        g = np.concatenate([o[k].ravel() for o in got]).astype(np.float64)
        cosines.append(float(r @ g / (np.linalg.norm(r) * np.linalg.norm(g) + 1e-30)))
        sqnrs.append(float(10 * np.log10((r @ r) / max(float((r - g) @ (r - g)), 1e-30))))
    return min(cosines), min(sqnrs)


def quantized(model_path: Path, shapes, calib: list[Sample], precision: str) -> tuple[dict, dict]:
    """The QDQ models of each variant (nearest / gptq, without / with bias correction), all from the statistics
    of one calibration (ranges, channel means, input moments), and the wall time of a quantization with each
    rounding on its own (calibration included)."""
    from edgekit.core.model import load_model
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize

    model = load_model(model_path, shapes)
    base = QuantizeOptions(precision=precision, samples=len(calib))
    seconds = {}
    start = time.perf_counter()
    quantize(model, calib, base)
    seconds["nearest"] = time.perf_counter() - start
    start = time.perf_counter()
    stats = quantize(model, calib, replace(base, weight_rounding="gptq", bias_correction=True)).stats
    seconds["gptq"] = time.perf_counter() - start
    variants = {}
    for rounding in ("nearest", "gptq"):
        for corrected in (False, True):
            options = replace(base, weight_rounding=rounding, bias_correction=corrected)
            proto = quantize(model, (), options, statistics=stats).proto()
            variants[rounding + ("+bias-correction" if corrected else "")] = proto
    return variants, seconds


def compare(name: str, model_path: Path, shapes, calib, held, precisions, judge) -> dict[str, Any]:
    from edgekit.core.model import load_model

    fp32 = load_model(model_path, shapes)
    import onnx_ir as ir

    ref = ort_outputs(ir.to_proto(fp32), held)
    rows: dict[str, Any] = {}
    for precision in precisions:
        variants, seconds = quantized(model_path, shapes, calib, precision)
        for variant, proto in variants.items():
            got = ort_outputs(proto, held)
            cos, sqnr = cosine_sqnr(ref, got)
            row = {"cosine": cos, "sqnr_db": sqnr, **judge(ref, got, held)}
            rows[f"{precision}/{variant}"] = row
            extra = " ".join(f"{k} {v:.1f}" for k, v in row.items() if k not in ("cosine", "sqnr_db"))
            print(f"{name} {precision} {variant}: cosine {cos:.5f} SQNR {sqnr:.1f} dB {extra}", flush=True)
        rows[f"{precision}/quantize_s"] = seconds
        print(f"{name} {precision} quantize wall time: nearest {seconds['nearest']:.1f} s, gptq "
              f"{seconds['gptq']:.1f} s", flush=True)  # fmt: skip
    return rows


def decoded(ref, got, held) -> dict[str, float]:
    from compression import ctc_decode

    same = [ctc_decode(r[0]) == ctc_decode(g[0]) for r, g in zip(ref, got, strict=True)]
    return {"agreement": 100.0 * float(np.mean(same))}


def classified(ref, got, held) -> dict[str, float]:
    agree = [int(np.argmax(r[0])) == int(np.argmax(g[0])) for r, g in zip(ref, got, strict=True)]
    top1 = [int(np.argmax(g[0])) == s.label for g, s in zip(got, held, strict=True)]
    fp32 = [int(np.argmax(r[0])) == s.label for r, s in zip(ref, held, strict=True)]
    return {"top1": 100.0 * float(np.mean(top1)), "fp32_top1": 100.0 * float(np.mean(fp32)),
            "agreement": 100.0 * float(np.mean(agree))}  # fmt: skip


def none(ref, got, held) -> dict[str, float]:
    return {}


def main() -> None:
    from shared_data import default_shared, float_from_quantized, imagenet_photos

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--cases", default="rec,mobilenetv2,zoo")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    cases = args.cases.split(",")
    results: dict[str, Any] = {}
    if "rec" in cases:
        from compression import text_lines

        calib = [Sample(x) for x in text_lines(48, seed=1)]
        held = [Sample(x) for x in text_lines(48, seed=2)]
        path = args.shared / "models/ch_PP-OCRv4_rec_infer.onnx"
        results["rec"] = compare(
            "rec", path, {"x": (1, 3, 48, 320)}, calib, held, ("int8", "int16x8"), decoded
        )
    if "mobilenetv2" in cases:
        out = Path(tempfile.mkdtemp(prefix="edgekit-rounding-"))
        fp32 = float_from_quantized(
            args.shared / "models/mobilenetv2-12-int8.onnx", out / "mobilenetv2-fp32.onnx"
        )
        samples = [Sample({"input": x}, label) for x, label in imagenet_photos(args.shared)]
        calib, held = samples[: len(samples) // 2], samples[len(samples) // 2 :]
        results["mobilenetv2"] = compare("mobilenetv2", fp32, None, calib, held, ("int8",), classified)
    if "zoo" in cases:
        sys.path.insert(0, str(ROOT / "tests" / "zoo"))
        import zoo_data

        for name in ("mobilenet_v3_small", "bert_tiny_op17", "resnet18"):
            entry = next(e for e in zoo_data.entries() if e["name"] == name)

            def split(seed: int, entry=entry) -> list[Sample]:
                arrays = zoo_data.make_arrays(entry, 32, seed)
                return [Sample({k: v[i : i + 1] for k, v in arrays.items()}) for i in range(32)]

            path = ROOT / "tests/zoo/models" / entry["file"]
            results[name] = compare(name, path, None, split(1), split(2), ("int8",), none)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
