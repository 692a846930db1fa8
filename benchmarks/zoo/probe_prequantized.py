"""Issue 12 probe round 6: models users bring already quantized (``--out benchmarks/.zoo/probe6``, not committed).

Zoo models (``tests/zoo/models``) quantized by other tools, each deployed to arm-cpu, nnapi and intel-vpu (the QDQ
model as given: its scales kept) and through ``edgekit quantize`` (a typed "already quantized" line is right):

- onnxruntime ``quantize_static`` (QDQ) after ``quant_pre_process``: uint8 / int8 activations, per-channel or
  per-tensor weights, ``reduce_range``, ``ActivationSymmetric`` + ``WeightSymmetric``,
  ``QDQKeepRemovableActivations``, and ``op_types_to_quantize`` = Conv/MatMul/Gemm only (the rest float);
- NNCF's ONNX backend (``nncf.quantize`` on the ModelProto, its own Q/DQ placement), when nncf is installed;
- onnxruntime ``quantize_dynamic`` (DynamicQuantizeLinear, MatMulInteger, ConvInteger).

    python benchmarks/zoo/probe_prequantized.py --only yolov8n_op12,bert_tiny_op13 [--variants ort_u8,nncf]

Prints one line per model x variant x case (pass with the verification's cosine / typed + its line / crash) and
writes ``results.json`` under ``--out``. Calibration: 16 samples of ``tests/zoo/zoo_data.make_arrays``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
import zoo_cases  # noqa: E402
import zoo_data  # noqa: E402

STATIC = {
    "ort_u8": {"activation": "QUInt8"},
    "ort_s8": {"activation": "QInt8"},
    "ort_u8_per_tensor": {"activation": "QUInt8", "per_channel": False},
    "ort_u8_reduce_range": {"activation": "QUInt8", "reduce_range": True},
    "ort_s8_symmetric": {
        "activation": "QInt8",
        "extra": {"ActivationSymmetric": True, "WeightSymmetric": True},
    },
    "ort_u8_keep_removable": {"activation": "QUInt8", "extra": {"QDQKeepRemovableActivations": True}},
    "ort_u8_conv_matmul_only": {"activation": "QUInt8", "ops": ["Conv", "MatMul", "Gemm"]},
}
VARIANTS = [*STATIC, "nncf", "ort_dynamic"]
CASES = {
    "arm-cpu": ["deploy", "--target", "arm-cpu"],
    "nnapi": ["deploy", "--target", "nnapi"],
    "intel-vpu": ["deploy", "--target", "intel-vpu"],
}


def _feeds(entry: dict, count: int = 16) -> list[dict[str, np.ndarray]]:
    arrays = zoo_data.make_arrays(entry, count, seed=7)
    return [{k: v[i : i + 1] for k, v in arrays.items()} for i in range(count)]


def build(entry: dict, variant: str, src: Path, out: Path) -> Path:
    """The quantized file of one variant (cached)."""
    dst = out / f"{entry['name']}.{variant}.onnx"
    if dst.exists():
        return dst
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = out / f"{entry['name']}.pre.onnx"
    if not pre.exists():
        quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    if variant == "ort_dynamic":
        quantize_dynamic(str(pre), str(dst), weight_type=QuantType.QInt8)
        return dst
    feeds = _feeds(entry)
    if variant == "nncf":
        import nncf

        model = onnx.load(pre)
        quantized = nncf.quantize(model, nncf.Dataset(feeds), subset_size=len(feeds))
        onnx.save(quantized, dst)
        return dst
    spec = STATIC[variant]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    quantize_static(
        str(pre),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=spec.get("per_channel", True),
        reduce_range=spec.get("reduce_range", False),
        activation_type=getattr(QuantType, spec["activation"]),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=spec.get("ops"),
        extra_options=spec.get("extra", {}),
    )
    return dst


def run_case(model: Path, case: str, out: Path, extra: list[str], timeout: float) -> dict:
    folder = out / "runs" / f"{model.stem}.{case}"
    if case == "quantize":
        folder.mkdir(parents=True, exist_ok=True)
        calib = model.with_suffix(".calib.npz")
        cmd = [*zoo_cases.edgekit_command(), "quantize", str(model), "--calib", str(calib), "-o",
               str(folder / "model.qdq.onnx"), *extra]  # fmt: skip
    else:
        cmd = [*zoo_cases.edgekit_command(), *CASES[case], str(model), "-o", str(folder), *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        outcome, message = zoo_cases.classify(proc.returncode, proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired:
        outcome, message = zoo_cases.classify(None, "", timed_out=True)
    figures = {}
    if outcome == "pass" and case != "quantize":
        manifest = next(folder.glob("*/manifest.json"), None)
        if manifest is not None:
            ver = json.loads(manifest.read_text()).get("verification", {})
            figures = {k: {m: v.get(m) for m in ("cosine", "sqnr_db", "max_rel_error")}
                       for k, v in ver.get("outputs", {}).items()}  # fmt: skip
    return {"outcome": outcome, "message": message, "figures": figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mobilenet_v3_small,yolov8n_op12,bert_tiny_op13,retinaface_mnet025")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--cases", default="arm-cpu,nnapi,intel-vpu,quantize")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".zoo" / "probe6")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    entries = {e["name"]: e for e in zoo_data.entries()}
    results = []
    for name in args.only.split(","):
        entry = entries[name]
        src = zoo_data.MANIFEST.parent / entry["file"]
        np.savez(args.out / f"{name}.calib.npz", **zoo_data.make_arrays(entry, 16, seed=7))
        for variant in args.variants.split(","):
            try:
                path = build(entry, variant, src, args.out)
            except Exception as exc:  # noqa: BLE001 - a quantizer that cannot take the model is reported
                print(
                    f"{name:24s} {variant:24s} (not built: {type(exc).__name__}: {str(exc)[:120]})",
                    flush=True,
                )
                continue
            calib = path.with_suffix(".calib.npz")
            if not calib.exists():
                calib.symlink_to(args.out / f"{name}.calib.npz")
            for case in args.cases.split(","):
                r = run_case(path, case, args.out, list(entry.get("extra_args", [])), args.timeout)
                cos = ",".join(
                    f"{f['cosine']:.5f}" for f in r["figures"].values() if f.get("cosine") is not None
                )
                line = r["message"] or (f"cosine {cos}" if cos else "")
                print(f"{name:24s} {variant:24s} {case:10s} {r['outcome']:6s} {line}", flush=True)
                results.append({"model": name, "variant": variant, "case": case, **r})
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
