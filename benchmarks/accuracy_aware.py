"""Accuracy-aware quantization (issue 14): edgekit's search against NNCF's ``quantize_with_accuracy_control``.

    python benchmarks/accuracy_aware.py [--shared ../shared] [--out DIR] [--json out.json] [--skip-nncf]
        [--workers N] [--cases mobilenetv2,...]

MobileNetV2 with real weights (the fp32 model behind ``models/mobilenetv2-12-int8.onnx``,
``shared_data.float_from_quantized``); the 200 shared photos with the model's preprocessing (as
``benchmarks/qoperator.py``): calibration and the accuracy budget on the first 100, the figures reported on
the other 100. Per target (arm-cpu, intel-vpu): ``--max-drop 0.5``, the layers restored (of the quantizable
layers), the search's wall time, and on the held-out photos the top-1 of fp32 and of the real artifacts, plain
int8 and restored (the .tflite in LiteRT, the QDQ model through OpenVINO's int8 kernels as its IR runs), with
host latency (p50 of 30 runs) and size. NNCF (ONNX backend, the same model, data and budget, 0.005 absolute):
wall time, held-out drop in onnxruntime, layers reverted (weighted ops left without a weight quantizer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from shared_data import default_shared, float_from_quantized

PHOTOS = "data/imagenet-sample-200"
WEIGHTED = ("Conv", "Gemm", "MatMul", "ConvTranspose")


@dataclass
class Sample:
    inputs: dict
    label: int | None


def photos(shared: Path) -> list[Sample]:
    from edgekit.data import ImagePreprocess, InputSpec, open_dataset

    pre = ImagePreprocess(
        resize_mode="shorter-side-crop",
        resize_shorter=256,
        scale=0.00392157,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
    )
    data = open_dataset(shared / PHOTOS, [InputSpec("input", (1, 3, 224, 224), np.float32)], pre)
    return [Sample({"input": np.array(s.inputs["input"])}, s.label) for s in data]


def top1(outputs: list[np.ndarray], samples: list[Sample]) -> float:
    return 100.0 * float(
        np.mean([int(np.argmax(o)) == s.label for o, s in zip(outputs, samples, strict=True)])
    )


def p50(run, x: np.ndarray, repeats: int = 30) -> float:
    run(x)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run(x)
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def artifact_runner(target: str, proto) -> tuple[Any, int]:
    """A function running one NCHW input through the target's real artifact, and the artifact's size."""
    if target == "arm-cpu":
        from ai_edge_litert.interpreter import Interpreter
        from edgekit.targets.tflite.converter import ConvertOptions, convert

        result = convert(proto, ConvertOptions(keep_io_layout=True, target="arm-cpu"))
        interpreter = Interpreter(model_content=result.data, num_threads=2)
        interpreter.allocate_tensors()
        (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()

        def run(x):
            interpreter.set_tensor(inp["index"], x)
            interpreter.invoke()
            return interpreter.get_tensor(out["index"]).copy()

        return run, len(result.data)
    from edgekit.runtime import HostRunner

    runner = HostRunner(proto, exact_qdq=False, threads=2)  # OpenVINO's int8 kernels: what the IR runs
    name = runner.output_names[0]
    return (lambda x: runner.run({"input": x})[name]), proto.ByteSize()


def edgekit_case(
    fp32_path: Path, calib: list[Sample], held: list[Sample], target: str, workers: int | None
) -> dict:
    from edgekit.model import load_model
    from edgekit.quantize.accuracy import SearchOptions, search
    from edgekit.quantize.budget import Budget
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize
    from edgekit.targets.base import get_target

    model = load_model(fp32_path)
    tgt = get_target(target)
    start = time.perf_counter()
    result = search(model, calib, calib, tgt, QuantizeOptions(), SearchOptions(Budget("max_drop", 0.5), workers=workers),
                    say=lambda line: print("  " + line, flush=True))  # fmt: skip
    wall = time.perf_counter() - start
    plain = quantize(model, (), tgt.quantize_options(QuantizeOptions()), statistics=result.statistics).proto()
    restored = quantize(model, (), result.options, statistics=result.statistics).proto()
    import onnx
    from edgekit.runtime import HostRunner

    fp32 = HostRunner(onnx.load(str(fp32_path)))
    ref = [fp32.run(s.inputs)[fp32.output_names[0]] for s in held]
    row = {"target": target, "wall_s": wall, "search": result.to_json(), "fp32_top1": top1(ref, held)}
    x = held[0].inputs["input"]
    for name, proto in (("int8", plain), ("restored", restored)):
        run, size = artifact_runner(target, proto)
        outs = [run(s.inputs["input"]) for s in held]
        row[name] = {"top1": top1(outs, held), "drop_pp": row["fp32_top1"] - top1(outs, held),
                     "agreement": 100.0 * float(np.mean([np.argmax(a) == np.argmax(b) for a, b in zip(outs, ref, strict=True)])),
                     "p50_ms": p50(run, x), "size_bytes": size}  # fmt: skip
    return row


def nncf_case(fp32_path: Path, calib: list[Sample], held: list[Sample]) -> dict:
    import nncf
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(fp32_path))

    def outputs(m, samples):
        session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return [session.run(None, {name: s.inputs["input"]})[0] for s in samples]

    def validate(m, items) -> float:
        items = list(items)
        return top1(outputs(m, items), items) / 100.0

    start = time.perf_counter()
    quantized = nncf.quantize_with_accuracy_control(
        model,
        nncf.Dataset(calib, lambda s: {"input": s.inputs["input"]}),
        nncf.Dataset(calib),
        validate,
        max_drop=0.005,
        drop_type=nncf.DropType.ABSOLUTE,
        subset_size=len(calib),
    )
    wall = time.perf_counter() - start
    produced = {o: n for n in quantized.graph.node for o in n.output}
    weighted = [n for n in quantized.graph.node if n.op_type in WEIGHTED]
    reverted = [n.name for n in weighted if len(n.input) > 1 and getattr(produced.get(n.input[1]), "op_type", "")
                != "DequantizeLinear"]  # fmt: skip
    ref, outs = outputs(model, held), outputs(quantized, held)
    return {"wall_s": wall, "reverted": reverted, "weighted_ops": len(weighted), "fp32_top1": top1(ref, held),
            "top1": top1(outs, held), "drop_pp": top1(ref, held) - top1(outs, held)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip-nncf", action="store_true")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--targets", default="arm-cpu,intel-vpu")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="edgekit-accuracy-"))
    out.mkdir(parents=True, exist_ok=True)
    fp32 = float_from_quantized(
        args.shared / "models/mobilenetv2-12-int8.onnx", out / "mobilenetv2-fp32.onnx"
    )
    samples = photos(args.shared)
    calib, held = samples[: len(samples) // 2], samples[len(samples) // 2 :]
    results: dict[str, Any] = {
        "model": "mobilenetv2 (real weights)",
        "calibration": len(calib),
        "held_out": len(held),
    }
    for target in args.targets.split(","):
        print(f"edgekit {target} ...", flush=True)
        row = edgekit_case(fp32, calib, held, target, args.workers)
        results[target] = row
        s = row["search"]
        print(f"{target}: {len(s['restored'])}/{s['quantizable_layers']} layers restored in {row['wall_s']:.1f} s "
              f"({s['evaluations']} evaluations); held-out top-1 fp32 {row['fp32_top1']:.1f}, int8 "
              f"{row['int8']['top1']:.1f} ({row['int8']['p50_ms']:.2f} ms), restored {row['restored']['top1']:.1f} "
              f"({row['restored']['p50_ms']:.2f} ms); restored: {[r['node'] for r in s['restored']]}", flush=True)  # fmt: skip
    if not args.skip_nncf:
        print("nncf quantize_with_accuracy_control ...", flush=True)
        results["nncf"] = row = nncf_case(fp32, calib, held)
        print(f"nncf: {len(row['reverted'])}/{row['weighted_ops']} reverted in {row['wall_s']:.1f} s; held-out "
              f"top-1 {row['top1']:.1f} (fp32 {row['fp32_top1']:.1f}); reverted: {row['reverted']}", flush=True)  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return None


if __name__ == "__main__":
    sys.exit(main())
