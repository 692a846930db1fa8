"""The built-in example end to end: train the digits CNN (if not built yet), then deploy it to all three targets.

    python examples/digits/run.py [--out DIR]

Runs the real command line on the model and data that `train.py` writes, so what you see is what a user sees:
`edgekit deploy` quantizes the model per target, packages arm-cpu (int8 TFLite), intel-vpu (OpenVINO IR, u8
activations) and nnapi (integer TFLite), pushes each bundle to the embedded local agent (a subprocess on a
pseudo-terminal: the real serial code path), runs the held-out split on it, and writes the accuracy-drop report
(`DIR/deploy/report.html`, `.json`, `.md`). Everything is offline: the data ship with scikit-learn.
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
        sys.executable, "-m", "edgekit.cli.main", "deploy", str(out / "digits.onnx"),
        "--target", "arm-cpu", "--target", "intel-vpu", "--target", "nnapi",
        "--calib", str(out / "calib.npz"),
        "--eval", str(out / "val.npz"),
        "--device", "local",
        "--report", str(out / "deploy" / "report.html"),
        "--fail-on-drop", "1.0",
        "-o", str(out / "deploy"),
    ]  # fmt: skip
    print("$ edgekit " + " ".join(command[3:]), flush=True)
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
