"""The built-in example end to end: train the digits CNN (if not built yet), then deploy it to all three targets.

    python examples/digits/run.py [--out DIR] [--target T ...] [--max-samples N]

Calls the library behind `edgekit deploy` (`edgekit.deploy`) on the model and data that `train.py` writes: it
quantizes the model per target, packages arm-cpu (int8 TFLite), intel-vpu (OpenVINO IR, u8 activations) and nnapi
(integer TFLite), pushes each bundle to the embedded local agent (a subprocess on a pseudo-terminal: the real
serial code path), runs the held-out split on it, and writes the accuracy-drop report (`DIR/deploy/report.html`,
`.json`, `.md`). The same from the shell:

    edgekit deploy DIR/digits.onnx -t arm-cpu -t intel-vpu -t nnapi --calib DIR/calib.npz --eval DIR/val.npz \\
        --report DIR/deploy/report.html --fail-on-drop 1.0

Everything is offline: the data ship with scikit-learn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import edgekit
from edgekit.deployment import Hooks

HERE = Path(__file__).resolve().parent
TARGETS = ("arm-cpu", "intel-vpu", "nnapi")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "build")
    parser.add_argument(
        "--target", action="append", help=f"target (repeatable; default {', '.join(TARGETS)})"
    )
    parser.add_argument("--max-samples", type=int, help="evaluate at most N samples (default: all 360)")
    args = parser.parse_args(argv)
    out: Path = args.out
    if not (out / "digits.onnx").exists():
        sys.path.insert(0, str(HERE))
        import train

        train.main(out)
    try:
        result = edgekit.deploy(
            out / "digits.onnx",
            args.target or TARGETS,
            calib=out / "calib.npz",
            eval=out / "val.npz",
            devices="local",
            report=out / "deploy" / "report.html",  # the bundles go beside it
            fail_on_drop=1.0,
            max_samples=args.max_samples,
            hooks=Hooks(say=print, bundle=lambda b: print(f"✓ {b.target} → {b.path} ({b.precision})")),
        )
    except edgekit.EdgekitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for failed, message in result.failures:
        print(f"✗ {failed}: {message}", file=sys.stderr)
    for e in result.evaluations:
        print(f"{e.target}: top-1 {e.reference_top1:.2f} % on the host (fp32), {e.top1:.2f} % on the device "
              f"({e.top1_drop_pp:+.2f} pp drop), p50 {e.latency_p50_ms:.3f} ms")  # fmt: skip
    print(f"report: {result.report_path}")
    return 2 if result.failures else 1 if result.gate_failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
