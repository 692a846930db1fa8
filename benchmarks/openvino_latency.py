"""Median CPU latency of the fp32 ONNX model, our FP16 IR and our INT8 IR in OpenVINO, in one run.

    python benchmarks/openvino_latency.py [--shared ../shared] [--model squeezenet1.1] [--runs 300]

OpenVINO CPU plugin, 2 threads, latency hint, f32 inference precision for all three (so the int8
speed-up is not mixed with a bf16 one). The three models are timed in interleaved rounds after a
warm-up so that drift of the machine affects them equally. Prints the medians and the int8/fp32 and
fp16/fp32 ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import openvino as ov
import openvino_figures as figures

CONFIG = {
    "INFERENCE_NUM_THREADS": "2",
    "INFERENCE_PRECISION_HINT": "f32",
    "PERFORMANCE_HINT": "LATENCY",
    "NUM_STREAMS": "1",
}


def timed(compiled, feeds: dict[str, np.ndarray], runs: int) -> list[float]:
    request = compiled.create_infer_request()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        request.infer(feeds)
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=figures.default_shared())
    parser.add_argument("--model", default="squeezenet1.1", choices=["squeezenet1.1", "mnist-8"])
    parser.add_argument("--runs", type=int, default=300, help="timed runs per model (in rounds of 50)")
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)
    if not (args.shared / "models").is_dir():
        print(f"shared models not found under {args.shared} (pass --shared)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="edgekit-ovlat-") as tmp:
        case = next(c for c in figures.cases(args.shared, 200, Path(tmp)) if c.name == args.model)
        built = figures.build(case, Path(tmp))
        core = ov.Core()
        paths = {
            "fp32 ONNX": case.model,
            "fp16 IR": built.fp16 / "model.xml",
            "int8 IR": built.int8 / "model.xml",
        }
        compiled = {
            name: core.compile_model(core.read_model(str(p)), "CPU", CONFIG) for name, p in paths.items()
        }
        sample = next(iter(figures.dataset(case, _model(case), 1)))
        feeds = dict(sample.inputs)
        for c in compiled.values():
            timed(c, feeds, args.warmup)
        samples: dict[str, list[float]] = {name: [] for name in compiled}
        rounds = max(1, args.runs // 50)
        for _ in range(rounds):
            for name, c in compiled.items():
                samples[name] += timed(c, feeds, 50)
    med = {name: statistics.median(v) * 1e3 for name, v in samples.items()}
    print(f"{case.name}: OpenVINO {ov.get_version()} CPU, 2 threads, f32 precision, {rounds * 50} runs each")
    print("| model | median ms | p90 ms |")
    print("|---|---|---|")
    for name, v in samples.items():
        print(f"| {name} | {med[name]:.3f} | {np.percentile(v, 90) * 1e3:.3f} |")
    print(
        f"int8/fp32 = {med['int8 IR'] / med['fp32 ONNX']:.2f}x, fp16/fp32 = {med['fp16 IR'] / med['fp32 ONNX']:.2f}x"
    )
    return 0


def _model(case: figures.Case):
    from edgekit.core.model import load_model

    return load_model(case.model)


if __name__ == "__main__":
    sys.exit(main())
