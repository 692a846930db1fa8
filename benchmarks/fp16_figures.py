"""Issue 13's fp16 figures: fp16 TFLite (FLOAT16 weights + DEQUANTIZE) against fp32 on real models and photos.

For SqueezeNet 1.1, MobileNetV2 (real weights: the fp32 model behind ../shared's QOperator file,
``shared_data.float_from_quantized``) and PP-OCRv4 det (640x640), on the 200 shared ImageNet photos:

- size of the fp16 .tflite over the fp32 .tflite (target <= 0.51x);
- per output, the largest error of the fp16 .tflite against the fp32 ONNX model on the host (OpenVINO CPU,
  f32), relative to the output's range (target <= 1e-3), and its cosine;
- top-1 agreement with fp32 for the classifiers (target 100 %).

    python benchmarks/fp16_figures.py [--samples 200]

PP-OCRv4 det misses the error figure for reasons float16 weights cannot avoid (docs/benchmarks.md;
``benchmarks/fp16_sensitivity.py`` takes the error apart per weight).

``fp16_figures(samples)`` returns the rows (``benchmarks/compression.py`` can call it).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_data import default_shared, float_from_quantized  # noqa: E402

IMAGENET = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "scale": 1 / 255}


def _cases(shared: Path, folder: Path) -> list[tuple[str, Path, dict, dict | None]]:
    """(name, onnx, preprocessing, input shapes)."""
    return [
        (
            "SqueezeNet 1.1",
            shared / "models/squeezenet1.1-fp32.onnx",
            {"size": (224, 224), "color": "BGR", "mean": (104.0, 117.0, 123.0)},
            None,
        ),
        (
            "MobileNetV2 (real weights)",
            float_from_quantized(
                shared / "models/mobilenetv2-12-int8.onnx", folder / "mobilenetv2-fp32.onnx"
            ),
            {"size": (224, 224), "resize_mode": "shorter-side-crop", "resize_shorter": 256, **IMAGENET},
            None,
        ),
        (
            "PP-OCRv4 det (640x640)",
            shared / "models/ch_PP-OCRv4_det_infer.onnx",
            {"size": (640, 640), "color": "BGR", **IMAGENET},
            {"x": (1, 3, 640, 640)},
        ),
    ]


def aeq_fp16(fp32_tflite: bytes) -> bytes:
    """The peer: ai-edge-quantizer's float16 weights (its ``float_casting`` algorithm, float compute, explicit
    DEQUANTIZE) on our fp32 .tflite, every op it takes (FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D,
    TRANSPOSE_CONV, EMBEDDING_LOOKUP)."""
    from ai_edge_quantizer import quantizer

    q = quantizer.Quantizer(bytearray(fp32_tflite))
    q.load_quantization_recipe(
        [
            {
                "regex": ".*",
                "operation": "*",
                "algorithm_key": "float_casting",
                "op_config": {
                    "weight_tensor_config": {"num_bits": 16, "dtype": "FLOAT"},
                    "compute_precision": "FLOAT",
                    "explicit_dequantize": True,
                },
            }
        ]
    )
    return bytes(q.quantize(enable_progress_report=False).quantized_model)


def fp16_figures(samples: int = 200, shared: Path | None = None, with_peer: bool = False) -> list[dict]:
    """One row per model: sizes, ratio, worst error over the range, cosine, top-1 agreement (and, ``with_peer``,
    ai-edge-quantizer's float16 weights on the same fp32 .tflite)."""
    from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
    from edgekit.core.litert_run import run_tflite_samples
    from edgekit.core.model import load_model
    from edgekit.core.runtime import HostRunner
    from edgekit.targets.tflite.converter import ConvertOptions, convert
    from edgekit.targets.yardstick import compare_outputs, output_kinds

    shared = shared or default_shared()
    photos = shared / "data/imagenet-sample-200"
    rows = []
    with tempfile.TemporaryDirectory(prefix="edgekit-fp16-") as tmp:
        for name, path, preprocessing, shapes in _cases(shared, Path(tmp)):
            model = load_model(path, shapes)
            fp32 = convert(model, ConvertOptions())
            fp16 = convert(model, ConvertOptions(fp16_weights=True))
            data = open_dataset(photos, input_specs(model), ImagePreprocess(**preprocessing), limit=samples)
            feeds = [dict(s.inputs) for s in data]
            names = [v.name for v in model.graph.outputs]
            host = HostRunner(model)
            reference = [{n: r[n] for n in names} for r in map(host.run, feeds)]
            half = run_tflite_samples(fp16.data, fp16.inputs, fp16.outputs, feeds)
            full = run_tflite_samples(fp32.data, fp32.inputs, fp32.outputs, feeds)
            figures = compare_outputs(reference, half, output_kinds(model))
            figures32 = compare_outputs(reference, full, output_kinds(model))
            peer = aeq_fp16(fp32.data) if with_peer else None
            figures_peer = (
                compare_outputs(
                    reference, run_tflite_samples(peer, fp32.inputs, fp32.outputs, feeds), output_kinds(model)
                )
                if peer is not None
                else None
            )
            for output, entry in figures["outputs"].items():
                rows.append(
                    {
                        "model": name,
                        "output": output,
                        "samples": len(feeds),
                        "fp32_bytes": len(fp32.data),
                        "fp16_bytes": len(fp16.data),
                        "ratio": len(fp16.data) / len(fp32.data),
                        "max_rel_error": entry["max_rel_error"],
                        "fp32_tflite_max_rel_error": figures32["outputs"][output]["max_rel_error"],
                        "cosine": entry["cosine"],
                        "top1_agreement": entry.get("top1_agreement"),
                        "dequantize_ops": fp16.op_counts.get("DEQUANTIZE", 0),
                        "mean_abs_error": entry["mean_abs_error"],
                        # DBNet's post-processing binarises the probability map at 0.3
                        "map_agreement": _map_agreement(reference, half, output) if "det" in name else None,
                        "peer_bytes": None if peer is None else len(peer),
                        "peer_max_rel_error": None
                        if peer is None
                        else figures_peer["outputs"][output]["max_rel_error"],
                        "peer_cosine": None if peer is None else figures_peer["outputs"][output]["cosine"],
                        "peer_top1_agreement": None
                        if peer is None
                        else figures_peer["outputs"][output].get("top1_agreement"),
                    }
                )
    return rows


def _map_agreement(reference: list[dict], actual: list[dict], output: str, threshold: float = 0.3) -> float:
    """The fraction of pixels on the same side of ``threshold`` in both probability maps."""
    same = [
        np.mean((r[output] > threshold) == (a[output] > threshold))
        for r, a in zip(reference, actual, strict=True)
    ]
    return float(np.mean(same))


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{100 * fraction:.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument(
        "--peer",
        action="store_true",
        help="also ai-edge-quantizer's float16 weights (installed apart: a peer)",
    )
    args = parser.parse_args()
    rows = fp16_figures(args.samples, with_peer=args.peer)
    print("| model | output | photos | fp32 .tflite | fp16 .tflite | ratio | max error / range (fp16) | "
          "(fp32 .tflite) | mean error | cosine | top-1 agreement | map > 0.3 agreement |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        agreement = _percent(r["top1_agreement"])
        print(
            f"| {r['model']} | {r['output']} | {r['samples']} | {r['fp32_bytes']:,} | {r['fp16_bytes']:,} | "
            f"{r['ratio']:.4f}x | {r['max_rel_error']:.2e} | {r['fp32_tflite_max_rel_error']:.2e} | "
            f"{r['mean_abs_error']:.2e} | {r['cosine']:.7f} | {agreement} | "
            + ("-" if r["map_agreement"] is None else f"{100 * r['map_agreement']:.4f} %")
            + " |"
        )
    if args.peer:
        print(
            "\n| model | output | peer AEQ float16 .tflite | ratio | max error / range | cosine | top-1 agreement |"
        )
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            agreement = _percent(r["peer_top1_agreement"])
            print(
                f"| {r['model']} | {r['output']} | {r['peer_bytes']:,} | {r['peer_bytes'] / r['fp32_bytes']:.4f}x | "
                f"{r['peer_max_rel_error']:.2e} | {r['peer_cosine']:.7f} | {agreement} |"
            )
    ok = all(r["ratio"] <= 0.51 and r["max_rel_error"] <= 1e-3 for r in rows) and all(
        r["top1_agreement"] in (None, 1.0) for r in rows
    )
    print("targets (<= 0.51x, <= 1e-3 of the range, 100 % top-1 agreement):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
