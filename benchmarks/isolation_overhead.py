"""What running verification in a child process (``edgekit.core.isolated``) costs, on SqueezeNet.

    python benchmarks/isolation_overhead.py [--shared ../shared] [--rounds 5]

TFLite verification (arm-cpu, fp32 SqueezeNet 1.1, the 3 default samples): the source model on the host
(OpenVINO f32) and the .tflite on LiteRT, once in this process (what verification did before) and once
through ``edgekit.targets.tflite.package.verify``, which runs both in one child process forked from a helper
process that has the runtimes imported. The first call starts that helper (an interpreter importing numpy,
onnx, OpenVINO and LiteRT) and is timed apart; then interleaved rounds, medians. The difference is the
isolation's cost per verification (a fork, the model bytes through a file, a compile in a fresh process).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    from edgekit.core.litert_run import run_tflite_samples
    from edgekit.core.model import load_model
    from edgekit.core.runtime import HostRunner
    from edgekit.targets.base import default_verify_samples
    from edgekit.targets.tflite.converter import ConvertOptions, convert
    from edgekit.targets.tflite.package import verify

    model = load_model(args.shared / "models" / "squeezenet1.1-fp32.onnx")
    result = convert(model, ConvertOptions(target="arm-cpu"))
    samples = default_verify_samples(model)

    def in_process() -> None:
        host = HostRunner(model)
        for sample in samples:
            host.run(dict(sample))
        run_tflite_samples(result.data, result.inputs, result.outputs, samples)

    def isolated() -> None:
        verify(model, result, samples, 1e-4, "arm-cpu")

    times: dict[str, list[float]] = {"in-process": [], "child process": []}
    in_process()  # warm-up: the first OpenVINO compile in a process is slower
    start = time.perf_counter()
    isolated()
    first = time.perf_counter() - start
    for _ in range(args.rounds):
        for name, fn in (("in-process", in_process), ("child process", isolated)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, median in medians.items():
        print(f"{name:14s} median {median:.2f} s over {args.rounds} rounds ({len(samples)} samples)")
    print(f"overhead       {medians['child process'] - medians['in-process']:+.2f} s per verification")
    print(f"first call     {first:.2f} s (starts the helper process: once per edgekit process)")


if __name__ == "__main__":
    main()
