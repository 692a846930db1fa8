"""int16x8 (TFLite's 16x8 mode) against int8 on MobileNetV2 with real weights (issue 13).

    python benchmarks/int16x8.py [--shared ../shared] [--calib 100] [--json out.json]

The fp32 MobileNetV2 is the one behind the shared QOperator file (``shared_data.float_from_quantized``). Both
recipes are calibrated (minmax) on the first ``--calib`` of the 200 shared photos (RGB, shorter side 256,
centre crop 224, /255, ImageNet mean/std, as ``benchmarks/qoperator.py``) and run on all 200:

- ``QDQ``: the QDQ model ``edgekit.quantize`` writes (int8: int8 activations; int16x8: int16, opset 21), run
  exactly by onnxruntime (graph optimizations off: the Q/DQ nodes computed as written);
- ``arm-cpu``: the .tflite the arm-cpu target writes from it (int8 kernels / 16x8 kernels), run in LiteRT;
- ``intel-vpu`` refuses int16x8 (its ``precisions`` entry says why), printed beside.

Prints top-1 against the labels and top-1 agreement with fp32, on all 200 photos and on the held-out ones (not
used for calibration).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
from shared_data import default_shared, float_from_quantized, imagenet_photos

MODEL = "models/mobilenetv2-12-int8.onnx"


def photos(shared: Path) -> list[tuple[np.ndarray, int | None]]:
    return imagenet_photos(shared)


def onnx_top1(proto, images: list[np.ndarray]) -> list[int]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return [int(np.argmax(session.run(None, {name: x})[0])) for x in images]


def tflite_top1(proto, images: list[np.ndarray]) -> tuple[list[int], dict]:
    from edgekit.core.litert_run import run_tflite_samples
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    result = convert(proto, ConvertOptions(target="arm-cpu"))
    outputs = run_tflite_samples(result.data, result.inputs, result.outputs, [{"input": x} for x in images])
    name = result.outputs[0].name
    return [int(np.argmax(o[name])) for o in outputs], {
        "size_bytes": len(result.data),
        "op_counts": result.op_counts,
        "float_ops": result.float_ops,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--calib", type=int, default=100, help="photos used for calibration (the first N)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()

    import onnx_ir as ir
    from edgekit.core.data import Sample
    from edgekit.core.model import load_model
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize
    from edgekit.targets.base import get_target

    data = photos(args.shared)
    images, labels = [x for x, _ in data], [y for _, y in data]
    with tempfile.TemporaryDirectory() as tmp:
        fp32_path = float_from_quantized(args.shared / MODEL, Path(tmp) / "mobilenetv2-fp32.onnx")
        fp32 = load_model(fp32_path)
    fp32_top1 = onnx_top1(ir.to_proto(fp32), images)
    calib = [Sample({"input": x}, y, str(i)) for i, (x, y) in enumerate(data[: args.calib])]
    held = range(args.calib, len(data))

    def pct(pred: list[int], ref: list[int | None], rows=range(len(data))) -> float:
        return 100.0 * float(np.mean([pred[i] == ref[i] for i in rows]))

    figures: dict = {"photos": len(data), "calibration": args.calib, "fp32_top1": pct(fp32_top1, labels)}
    print(f"MobileNetV2 (real weights) on {len(data)} photos, calibrated on the first {args.calib}")
    print(f"fp32: top-1 {figures['fp32_top1']:.1f} %")
    header = f"{'recipe':<9} {'artifact':<25} {'top-1 %':>8} {'agree fp32 %':>13} {'held-out agree %':>17}"
    print(header)
    rows = []
    for precision in ("int8", "int16x8"):
        options = QuantizeOptions(samples=args.calib, activations="int8", precision=precision)
        qdq = quantize(fp32, calib, options).proto()
        for artifact, run in (("QDQ (onnxruntime)", onnx_top1), ("arm-cpu .tflite (LiteRT)", tflite_top1)):
            got = run(qdq, images)
            extra = {}
            if isinstance(got, tuple):
                got, extra = got
            row = {
                "recipe": precision,
                "artifact": artifact,
                "top1": pct(got, labels),
                "agreement": pct(got, fp32_top1),
                "held_out_agreement": pct(got, fp32_top1, held),
                **extra,
            }
            rows.append(row)
            print(
                f"{precision:<9} {artifact:<25} {row['top1']:>8.1f} {row['agreement']:>13.1f} "
                f"{row['held_out_agreement']:>17.1f}"
            )
    refusal = get_target("intel-vpu").precisions["int16x8"]
    print(f"intel-vpu int16x8: refused: {refusal}")
    figures.update(rows=rows, intel_vpu_int16x8=refusal)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
