"""The built-in example end to end: train the digits CNN (if not built yet), then quantize it with edgekit.

    python examples/digits/run.py [--out DIR]

Runs the real command line (`edgekit quantize`) on the model and data that `train.py` writes, so what you see is
what a user sees. Everything is offline: the data ship with scikit-learn.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "build")
    args = parser.parse_args(argv)
    out: Path = args.out
    if not (out / "digits.onnx").exists():
        sys.path.insert(0, str(HERE))
        import train

        train.main(out)
    command = [
        sys.executable, "-m", "edgekit.cli.main", "quantize", str(out / "digits.onnx"),
        "--calib", str(out / "calib.npz"),
        "--eval", str(out / "val.npz"),
        "-o", str(out / "digits.int8.onnx"),
        "--report", str(out / "quantize_report.json"),
    ]  # fmt: skip
    print("$ edgekit " + " ".join(command[3:]), flush=True)
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
