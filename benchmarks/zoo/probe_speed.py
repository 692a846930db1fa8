"""Issue 12 probe round 18s: the real-size models whose cases take longest, collected in one folder to time them.

    python benchmarks/zoo/probe_speed.py                          # every model -> benchmarks/.zoo/probe18s
    python benchmarks/zoo/probe_speed.py --only yolov8n,yolov8n_nms
    python benchmarks/case_times.py --manifest benchmarks/.zoo/probe18s/zoo.json --json r.json   # wall / CPU / RSS

Round 9f's full-size builders (``probe_fullsize``: ResNet-50 at 224, the BERT-base encoder at sequence 128, copies of
../shared's PP-OCRv4 det at 960 x 960 and rec at 48 x 320), ultralytics YOLOv8n at 640 as users export it, once plain
and once with ``nms=True`` (``probe_ultralytics``: seeded, BatchNorm statistics from photos, spread class biases),
and PP-PicoDet-LCNet with PaddleDetection's ``multiclass_nms3`` over 80 classes (``probe_paddle5``'s
``picodet_lcnet_nms``, built in round 16p's Paddle venv when it exists: ``--paddle-python``). Needs torch,
torchvision, transformers and ultralytics (dev only).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
import probe_fullsize  # noqa: E402
import probe_ultralytics  # noqa: E402
from export import zoo_data  # noqa: E402

OUT = zoo_export.FULL_DIR / "probe18s"
FULLSIZE = ("resnet50", "bert_base", "ppocrv4_det_960", "ppocrv4_rec_320")
YOLO = ("yolov8n", "yolov8n_nms")
PADDLE = ("picodet_lcnet_nms",)
PADDLE_PYTHON = Path("/work/venv-paddle16/bin/python")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="comma-separated names: " + ", ".join(FULLSIZE + YOLO + PADDLE))
    parser.add_argument("--paddle-python", type=Path, default=PADDLE_PYTHON, help="a Python with paddle")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.only.split(",")) if args.only else set(FULLSIZE + YOLO + PADDLE)
    full = [n for n in FULLSIZE if n in wanted]
    if full:
        probe_fullsize.main(["--out", str(args.out), "--only", ",".join(full)])
    photos = zoo_data.bn_photos(None, zoo_export.default_shared())
    entries = []
    for name in (n for n in YOLO if n in wanted):
        probe_ultralytics.PROBES.setdefault(name, {"yaml": "yolov8n.yaml", "kind": "detector"})
        entries.append(dict(probe_ultralytics.export_probe(name, args.out, photos, imgsz=640), size="full"))
    if entries:
        zoo_data.merge_manifest(args.out, entries)
    paddle = [n for n in PADDLE if n in wanted]
    if paddle and args.paddle_python.exists():
        subprocess.run(
            [
                str(args.paddle_python),
                str(HERE / "probe_paddle5.py"),
                "--out",
                str(args.out),
                "--only",
                *paddle,
            ],
            check=True,
        )
    elif paddle:
        print(f"{', '.join(paddle)}: no Paddle Python at {args.paddle_python}: not built")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
