"""int8 accuracy of CTC text recognisers (PP-OCR rec): decoded agreement with fp32 (dev tool, round 15q).

    python benchmarks/rec_int8.py NAME=model.onnx [NAME=model.onnx ...] [--calib 32] [--eval 48]
        [--ort] [--groups] [--save DIR] [--option KEY=VALUE ...]

Text lines are rendered as ``benchmarks/zoo/probe_ocr.py`` renders them (Pillow, the machine's fonts, PaddleOCR's
preprocessing, 1 x 3 x 48 x 320): ``--calib`` lines calibrate (seed 7000), ``--eval`` other lines (seed 8000) are
held out. For each model: ``edgekit quantize`` (``quantize_model``, default options unless ``--option``) and, with
``--ort``, onnxruntime's ``quantize_static`` (QDQ, per-channel, QInt8 weights, QUInt8 activations, MinMax) on the
same lines. Each QDQ model runs in onnxruntime with graph optimizations off (DequantizeLinear -> float op ->
QuantizeLinear: its exact semantics up to float32 rounding, no fused integer kernels) against the fp32 model:
lines whose CTC greedy decoding (argmax per step, repeats merged, blank 0 dropped) equals fp32's, the cosine and
SQNR of the score tensor, and the share of time steps whose argmax agrees. ``--groups``: the same figures with the
activation points of one producer kind switched on at a time (``benchmarks/qdq_noise.py``'s bypass).
``--layer-method OP=METHOD`` sets a range method for every node of an op type (round 15q measured
``HardSwish=mse``; its default rule was reverted at the merge, see docs/benchmarks.md "Probe round 15q").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "zoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))

SHAPE = [1, 3, 48, 320]


def lines(count: int, seed: int) -> np.ndarray:
    import probe_ocr
    import zoo_data

    return probe_ocr.text_lines(probe_ocr.PADDLE_LINE, SHAPE, count, seed, zoo_data.cached_photos())


def run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    from qdq_noise import _session

    session = _session(proto)
    name = session.get_inputs()[0].name
    return np.concatenate([session.run(None, {name: x[i : i + 1]})[0] for i in range(len(x))])


def figures(ref: np.ndarray, out: np.ndarray) -> str:
    from probe_ocr import ctc_greedy

    a, b = ref.astype(np.float64).ravel(), out.astype(np.float64).ravel()
    cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
    sqnr = 10 * np.log10(np.sum(a**2) / max(np.sum((a - b) ** 2), 1e-300))
    dec_ref, dec = ctc_greedy(ref), ctc_greedy(out)
    same = sum(x == y for x, y in zip(dec_ref, dec, strict=True))
    steps = float(np.mean(ref.argmax(-1) == out.argmax(-1)))
    return f"decoded {same:2d}/{len(dec)}  steps {steps:.3f}  cos {cosine:.4f}  SQNR {sqnr:5.1f} dB"


def edgekit_qdq(model: Path, calib: Path, options: dict) -> onnx.ModelProto:
    from edgekit.api import quantize_model
    from edgekit.quantize.options import QuantizeOptions

    result = quantize_model(
        model, calib, options=QuantizeOptions(**options), input_shapes={"x": tuple(SHAPE)}
    )
    return result.quantized.proto()


def ort_qdq(model: Path, x: np.ndarray, folder: Path) -> onnx.ModelProto:
    import onnx_ir as ir
    from edgekit.core.model import load_model
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    fixed = folder / "static.onnx"
    onnx.save(ir.to_proto(load_model(model, {"x": tuple(SHAPE)})), fixed)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": x[i : i + 1]} for i in range(len(x))])

        def get_next(self):
            return next(self.it, None)

    out = folder / "ort.qdq.onnx"
    quantize_static(str(fixed), str(out), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)  # fmt: skip
    return onnx.load(out)


def _value(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="+", help="NAME=PATH")
    parser.add_argument("--calib", type=int, default=32)
    parser.add_argument("--eval", type=int, default=48)
    parser.add_argument("--ort", action="store_true", help="onnxruntime quantize_static beside")
    parser.add_argument("--groups", action="store_true", help="one activation kind at a time")
    parser.add_argument("--save", type=Path, help="write each QDQ model there")
    parser.add_argument("--option", action="append", default=[], help="QuantizeOptions KEY=VALUE")
    parser.add_argument(
        "--layer-method",
        action="append",
        default=[],
        help="OP=METHOD: every node of that op type (layer_method)",
    )
    args = parser.parse_args()

    import onnx_ir as ir
    from edgekit.core.model import load_model
    from qdq_noise import activation_points, bypassed

    options = {k: _value(v) for k, v in (o.split("=", 1) for o in args.option)}
    calib, held_out = lines(args.calib, 7000), lines(args.eval, 8000)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        np.savez(folder / "calib.npz", x=calib)
        for spec in args.models:
            name, path = spec.split("=", 1)
            fp32 = ir.to_proto(load_model(Path(path), {"x": tuple(SHAPE)}))
            ref = run(fp32, held_out)
            by_op = dict(o.split("=", 1) for o in args.layer_method)
            loaded = load_model(Path(path), {"x": tuple(SHAPE)})
            layer_method = tuple((n.name, by_op[n.op_type]) for n in loaded.graph if n.op_type in by_op)
            qdq = edgekit_qdq(Path(path), folder / "calib.npz", {**options, "layer_method": layer_method})
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                onnx.save(qdq, args.save / f"{name}.qdq.onnx")
            print(f"{name:28s} edgekit   {figures(ref, run(qdq, held_out))}", flush=True)
            if args.ort:
                print(f"{name:28s} ort       {figures(ref, run(ort_qdq(Path(path), calib, folder), held_out))}",
                      flush=True)  # fmt: skip
            if args.groups:
                points = activation_points(qdq)
                print(
                    f"{'':28s} weights   {figures(ref, run(bypassed(qdq, points, lambda t, k: False), held_out))}"
                )
                for kind in sorted({k for _, k in points.values()}):
                    n = sum(1 for _, k in points.values() if k == kind)
                    got = run(bypassed(qdq, points, lambda t, k, kind=kind: k == kind), held_out)
                    print(f"{'':28s} {kind[:9]:9s} {figures(ref, got)}  ({n} points)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
