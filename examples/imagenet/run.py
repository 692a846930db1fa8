"""An image-folder example: a real ImageNet classifier from a path you give, calibrated and evaluated on a folder
of photos, deployed to all three targets on the local agent.

    python examples/imagenet/run.py MODEL.onnx IMAGES/ [--out DIR] [--max-samples N]

For example, with the team's shared material (SqueezeNet 1.1 expects BGR, 0..255, mean 104,117,123 subtracted):

    python examples/imagenet/run.py ../shared/models/squeezenet1.1-fp32.onnx ../shared/data/imagenet-sample-200

IMAGES/ holds JPEG/PNG files and a labels.csv (file,label) or one sub-folder per class. The first 100 images
calibrate; all of them (or --max-samples) are evaluated on the device. The preprocessing options below are
SqueezeNet's; change them for another model (see `edgekit deploy --help`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("images", type=Path)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "build",
        help="output folder (default: examples/imagenet/build, git-ignored)",
    )  # fmt: skip
    parser.add_argument("--max-samples", type=int)
    args = parser.parse_args(argv)
    command = [
        sys.executable, "-m", "edgekit.cli.main", "deploy", str(args.model),
        "--target", "arm-cpu", "--target", "intel-vpu", "--target", "nnapi",
        "--calib", str(args.images), "--calib-samples", "100",
        "--eval", str(args.images),
        "--size", "224,224", "--color", "BGR", "--mean", "104,117,123",
        "--device", "local",
        "--report", str(args.out / "report.html"),
        "-o", str(args.out),
    ]  # fmt: skip
    if args.max_samples:
        command += ["--max-samples", str(args.max_samples)]
    print("$ edgekit " + " ".join(command[3:]), flush=True)
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
