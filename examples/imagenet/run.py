"""An image-folder example: a real ImageNet classifier from a path you give, calibrated and evaluated on a folder
of photos, deployed to all three targets on the local agent.

    python examples/imagenet/run.py MODEL.onnx IMAGES/ [--out DIR] [--max-samples N]

For example, with the team's shared material (SqueezeNet 1.1 expects BGR, 0..255, mean 104,117,123 subtracted):

    python examples/imagenet/run.py ../shared/models/squeezenet1.1-fp32.onnx ../shared/data/imagenet-sample-200

IMAGES/ holds JPEG/PNG files and a labels.csv (file,label) or one sub-folder per class. The first 100 images
calibrate; all of them (or --max-samples) are evaluated on the device. The preprocessing options below are
SqueezeNet's (``PREPROCESS``); change them for another model (see `edgekit deploy --help`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import edgekit
from edgekit.deployment import Hooks

TARGETS = ("arm-cpu", "intel-vpu", "nnapi")
#: SqueezeNet 1.1's preprocessing (`edgekit deploy --size 224,224 --color BGR --mean 104,117,123`).
PREPROCESS = edgekit.ImagePreprocess(size=(224, 224), color="BGR", mean=(104.0, 117.0, 123.0))


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
    try:
        result = edgekit.deploy(
            args.model,
            TARGETS,
            calib=args.images,
            calib_samples=100,
            eval=args.images,
            devices="local",
            report=args.out / "report.html",  # the bundles go beside it
            max_samples=args.max_samples,
            preprocess=PREPROCESS,
            hooks=Hooks(say=print, bundle=lambda b: print(f"✓ {b.target} → {b.path} ({b.precision})")),
        )
    except edgekit.EdgekitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for failed, message in result.failures:
        print(f"✗ {failed}: {message}", file=sys.stderr)
    for e in result.evaluations:
        if e.top1 is None:  # no labels: how often the device gives fp32's answer
            print(f"{e.target}: top-1 agreement with fp32 on the host {e.top1_agreement:.2f} %")
        else:
            print(f"{e.target}: top-1 {e.reference_top1:.2f} % fp32 on the host, {e.top1:.2f} % on the device "
                  f"({e.top1_drop_pp:+.2f} pp)")  # fmt: skip
    print(f"report: {result.report_path}")
    return 2 if result.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
