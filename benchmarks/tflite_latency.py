"""Median latency of our fp32 and int8 SqueezeNet .tflite in LiteRT and of the fp32 ONNX in OpenVINO.

    python benchmarks/tflite_latency.py [--shared ../shared] [--runs 300] [--calib 32]

All in one run, 2 threads each, after a warm-up, timed in interleaved rounds so that drift of the
machine affects them equally: LiteRT interpreter (default XNNPACK delegate) on the fp32 and int8
files our converter writes (int8 from ``edgekit.quantize_model``, int8 activations), and OpenVINO's
CPU plugin (f32 inference precision, latency hint) on the fp32 ONNX as the peer. Prints medians and
the int8/fp32 ratio (target <= 0.6).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tflite_convert as tc

THREADS = 2


def litert_runner(data: bytes, result, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=data, num_threads=THREADS)
    interp.allocate_tensors()
    details = {d["name"]: d["index"] for d in interp.get_input_details()}
    for info in result.inputs:
        interp.set_tensor(details[info.name], info.to_tflite(feeds[info.name]))
    return interp.invoke


def openvino_runner(path: Path, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
    import openvino as ov

    config = {
        "INFERENCE_NUM_THREADS": str(THREADS),
        "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY",
        "NUM_STREAMS": "1",
    }
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    request = compiled.create_infer_request()
    return lambda: request.infer(feeds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=tc.default_shared())
    parser.add_argument("--runs", type=int, default=300, help="timed runs per model (rounds of 25)")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--calib", type=int, default=32, help="calibration images for the int8 model")
    args = parser.parse_args(argv)
    if not (args.shared / "models").is_dir():
        print(f"shared models not found under {args.shared} (pass --shared)", file=sys.stderr)
        return 2
    from edgekit.core.model import load_model
    from edgekit.targets.tflite.converter import convert

    with tempfile.TemporaryDirectory(prefix="edgekit-tflat-") as tmp:
        case = tc.cases(args.shared, 1, Path(tmp))[0]
        qdq = tc.quantized(case, args.calib, Path(tmp))
        model = load_model(case.model)
        feeds = dict(next(iter(tc.dataset(case, model, 1))).inputs)
        fp32, int8 = convert(model), convert(load_model(qdq))
        runners = {
            "LiteRT fp32 (ours)": litert_runner(fp32.data, fp32, feeds),
            "LiteRT int8 (ours)": litert_runner(int8.data, int8, feeds),
            "OpenVINO fp32 ONNX": openvino_runner(case.model, feeds),
        }
        for run in runners.values():
            for _ in range(args.warmup):
                run()
        times: dict[str, list[float]] = {name: [] for name in runners}
        for _ in range(max(1, args.runs // 25)):
            for name, run in runners.items():
                for _ in range(25):
                    t0 = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - t0)
    medians = {name: statistics.median(ts) * 1000 for name, ts in times.items()}
    print(
        f"SqueezeNet 1.1, {THREADS} threads, median of {len(next(iter(times.values())))} runs after {args.warmup} warm-up"
    )
    print("| runtime / model | median ms |")
    print("|---|---|")
    for name, ms in medians.items():
        print(f"| {name} | {ms:.2f} |")
    ratio = medians["LiteRT int8 (ours)"] / medians["LiteRT fp32 (ours)"]
    print(
        f"int8 / fp32 (LiteRT): {ratio:.2f}x (target <= 0.6: {ratio <= 0.6}); ours fp32 / OpenVINO fp32: "
        f"{medians['LiteRT fp32 (ours)'] / medians['OpenVINO fp32 ONNX']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
