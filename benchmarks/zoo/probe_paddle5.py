"""Issue 12 probe round 16p: PaddlePaddle exports not probed before: PP-Structure (SLANet table structure, the
PicoDet-based PP-DocLayout-S, the table / orientation PP-LCNet classifiers), PaddleDetection's default exports (with
``multiclass_nms3`` and with ``exclude_nms``) and PP-ShiTuV2 / PP-Human / PP-Vehicle recognition and attribute models.
Built from the ``paddlex`` 3.7.2 wheel's own modeling code where it carries the model (SLANet's PP-LCNet + CSP-PAN +
attention GRU cell, PP-LCNet, PP-HGNetV2), else from the zoo's earlier Paddle builders (round 4's PicoDet, round 8p's
PP-YOLOE, round 7t's PP-LCNetV2), seeded, BatchNorm statistics from real photos / rendered pages in train mode,
``paddle.jit.save`` + paddle2onnx 2.0.1 with the dims the Paddle tools export dynamic written as ``dim_value -1`` and
the opset raised to what an op needs (as PaddleX's CLI runs it). Needs round 11p's Paddle venv:

    python -m venv /work/venv-paddle16
    /work/venv-paddle16/bin/pip install paddlepaddle==3.0.0 paddle2onnx==2.0.1 paddlex==3.7.2 onnxruntime scikit-learn
    /work/venv-paddle16/bin/python benchmarks/zoo/probe_paddle5.py --out benchmarks/.zoo/probe16p
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe16p/zoo.json --no-shared --workers 1 --calib 8 --eval 8

Every model's inputs are stored beside it (``"arrays"`` data, 48 samples): photo crops, or pages rendered with Pillow
(text lines, titles, ruled and unruled tables, pasted figures) for the document models, and PaddleDetection's
``im_shape`` / ``scale_factor`` (the resize from a random original size) for the detectors.

- **SLANet** (PaddleX 3.7 ``slanet.py``: PP-LCNet x1.0, CSP-PAN 96, the attention GRU cell, 50 structure tokens,
  hidden 256) with the head as PaddleOCR's ``SLAHead`` exports it: ``range(paddle.to_tensor(max_text_length) + 1)``
  (a while loop: ONNX ``Loop``) writing each step into ``structure_preds[:, i, :]`` and ``loc_preds`` (8 Sigmoid
  coordinates), ``slanet_loop``; the same head over a Python range (unrolled), ``slanet_unrolled``; and PaddleX's
  own head with its early exit on the end token (``slanet_paddlex``); 16 steps instead of 500, 160 x 160 (488);
- **PP-DocLayout-S** style (PicoDet-S GFL head, 23 layout classes, rendered pages, 160 x 160) and **PP-PicoDet-LCNet**
  style (80 classes, photos) exported with PaddleDetection's default ``multiclass_nms3`` (score 0.025, top 1000,
  keep 100, IoU 0.6; inputs image and scale_factor) and with ``exclude_nms`` (boxes / scale_factor and scores);
- **PP-YOLOE+-s** style (round 8p's CSPResNet / CSP-PAN / ET-head, DFL) with ``multiclass_nms3`` (keep 300, IoU 0.7;
  inputs image, im_shape, scale_factor) and with ``exclude_nms``;
- **PP-LCNet_x1_0_table_cls** (wired / wireless tables) and **PP-LCNet_x1_0_doc_ori** (4 page orientations, pages
  rotated) from PaddleX's ``pplcnet.py``;
- **PP-ShiTuV2 rec**: PP-LCNetV2 (last stage stride 1, as ``PPLCNetV2_base_ShiTu``), flatten, BNNeck (BatchNorm1D)
  512-wide embedding; **PP-Human attribute** (PP-HGNetV2-B0, 26 attributes, Sigmoid, 128 x 96 crops) and
  **PP-Vehicle attribute** (PP-LCNet x1.0, 19 attributes, Sigmoid, 96 x 128).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import paddle_export as pe  # noqa: E402
from probe_paddle_backbones import minus_one_dims  # noqa: E402

SEED = 1616
SAMPLES = 48
BGR_IMAGENET = {**pe.IMAGENET, "color": "BGR"}
SLA_STEPS = 16  # max_text_length (PaddleOCR: 500)
SLA_TOKENS = 50
LAYOUT_CLASSES = 23
COCO_CLASSES = 80


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    kind: str
    build: Callable
    hw: tuple[int, int]
    pages: str | None = None  # None: photos; "table" / "layout" / "rotated": rendered pages
    norm: dict = field(default_factory=lambda: pe.IMAGENET)
    extra: tuple[str, ...] = ()  # "scale_factor", "im_shape"
    nms: bool = False
    opsets: tuple[int, ...] = (11,)
    note: str = ""


# --------------------------------------------------------------------------------------------- data
def _words(rng, n):
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return ["".join(rng.choice(list(letters), rng.integers(2, 9))) for _ in range(n)]


def render_page(rng, h: int, w: int, kind: str, photos) -> np.ndarray:
    """A uint8 [H, W, 3] page at 3x the size, drawn with Pillow, resized to H x W."""
    from PIL import Image, ImageDraw, ImageFont

    s = 3
    H, W = h * s, w * s
    paper = tuple(int(v) for v in rng.integers(225, 256, 3))
    img = Image.new("RGB", (W, H), paper)
    draw = ImageDraw.Draw(img)

    def font(px):
        return ImageFont.load_default(size=max(8, int(px)))

    ink = tuple(int(v) for v in rng.integers(0, 60, 3))
    if kind == "table" or (kind == "layout" and rng.random() < 0.5):
        ruled = kind != "table" or rng.random() < 0.6
        rows, cols = int(rng.integers(3, 8)), int(rng.integers(2, 6))
        x0, y0 = int(W * rng.uniform(0.02, 0.1)), int(H * rng.uniform(0.02, 0.15 if kind == "table" else 0.5))
        x1, y1 = int(W * rng.uniform(0.85, 0.98)), int(min(H - 2, y0 + H * rng.uniform(0.35, 0.8)))
        xs = np.sort(rng.uniform(x0, x1, cols - 1)).astype(int).tolist()
        ys = np.linspace(y0, y1, rows + 1).astype(int).tolist()
        xs = [x0, *xs, x1]
        if ruled:
            for x in xs:
                draw.line([(x, y0), (x, y1)], fill=ink, width=2)
            for y in ys:
                draw.line([(x0, y), (x1, y)], fill=ink, width=2)
        else:
            draw.line([(x0, y0), (x1, y0)], fill=ink, width=2)
            draw.line([(x0, y1), (x1, y1)], fill=ink, width=2)
        f = font((ys[1] - ys[0]) * 0.45)
        for r in range(rows):
            for c in range(cols):
                if rng.random() < 0.85:
                    text = " ".join(_words(rng, int(rng.integers(1, 3))))
                    draw.text((xs[c] + 4, ys[r] + 3), text, fill=ink, font=f)
        if kind == "table":
            return np.asarray(img.resize((w, h), Image.BILINEAR))
        top = 0
    else:
        top = 0
    y = int(H * rng.uniform(0.02, 0.06))
    limit = H if kind != "layout" or top else H
    if kind in ("layout", "rotated"):
        draw.text((int(W * 0.1), y), " ".join(_words(rng, 3)).upper(), fill=ink, font=font(H / 14))
        y += int(H / 10)
    while y < limit * 0.95:
        if kind == "layout" and rng.random() < 0.15 and photos:
            ph = photos[int(rng.integers(len(photos)))]
            fh, fw = int(H * rng.uniform(0.15, 0.3)), int(W * rng.uniform(0.3, 0.6))
            fig = Image.fromarray(ph).resize((fw, fh))
            img.paste(fig, (int(W * 0.1), y))
            y += fh + int(H * 0.03)
            continue
        size = H / rng.uniform(22, 34)
        line = " ".join(_words(rng, int(rng.integers(3, 9))))
        draw.text((int(W * rng.uniform(0.04, 0.12)), y), line, fill=ink, font=font(size))
        y += int(size * rng.uniform(1.3, 2.0))
    return np.asarray(img.resize((w, h), Image.BILINEAR))


def images(m: Model, count: int, seed: int, photos) -> tuple[np.ndarray, np.ndarray]:
    """``count`` normalised NCHW images of the model's size and their orientation labels (rotated pages)."""
    h, w = m.hw
    rng = np.random.default_rng(seed)
    labels = np.zeros(count, np.int64)
    if m.pages is None:
        crops = pe.zoo_data.photo_crops(photos, count, h, w, seed)
    else:
        crops = np.empty((count, h, w, 3), np.uint8)
        for i in range(count):
            page = render_page(rng, h, w, "layout" if m.pages == "rotated" else m.pages, photos)
            if m.pages == "rotated":
                labels[i] = int(rng.integers(4))
                page = np.rot90(page, labels[i])
                if page.shape[:2] != (h, w):  # square inputs only rotate in place
                    page = np.asarray(page)[:h, :w]
            crops[i] = page
    x = crops.astype(np.float32)
    if m.norm.get("color", "RGB") == "BGR":
        x = x[..., ::-1]
    x = (x * m.norm["scale"] - np.float32(m.norm["mean"])) / np.float32(m.norm["std"])
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2), dtype=np.float32), labels


def arrays(m: Model, count: int, seed: int, photos) -> dict[str, np.ndarray]:
    """The model's inputs for ``count`` samples (PaddleDetection's im_shape / scale_factor: the resize of a random
    original size to the input's)."""
    x, _ = images(m, count, seed, photos)
    out = {"image" if m.extra else "x": x}
    rng = np.random.default_rng(seed + 1)
    orig = rng.uniform(200, 900, (count, 2))
    if "im_shape" in m.extra:
        out["im_shape"] = np.tile(np.float32(m.hw), (count, 1)).astype(np.float32)
    if "scale_factor" in m.extra:
        out["scale_factor"] = (np.float32(m.hw) / orig).astype(np.float32)
    return out


# --------------------------------------------------------------------------------------------- builders
def _mods():
    import importlib
    import re

    import probe_paddle3

    paddle, F, nn = probe_paddle3._mods()
    fused = paddle.incubate.nn.functional
    for _ in range(20):  # Paddle 3.2's fused ops: PaddleX's doc_vlm package (imported on the way to SLANet's
        try:  # attention cell) names them at import, none is called here
            importlib.import_module("paddlex.inference.models.table_structure_recognition.modeling.slanet")
            break
        except ImportError as exc:
            missing = re.search(r"cannot import name '(\w+)' from 'paddle.incubate.nn.functional'", str(exc))
            if not missing:
                raise
            setattr(fused, missing.group(1), None)
            for mod in [k for k in sys.modules if k.startswith("paddlex.inference.models.")]:
                del sys.modules[mod]
    return paddle, F, nn


def slanet(form: str):
    """PaddleX's SLANet backbone + CSP-PAN; the head as PaddleOCR exports it (``loop``: a while loop over a tensor
    range, ``unrolled``: a Python range) or PaddleX's own head with the early exit (``paddlex``)."""

    def build():
        paddle, F, nn = _mods()
        from paddlex.inference.models.table_structure_recognition.modeling import slanet as m
        from paddlex.inference.models.table_structure_recognition.modeling.slanext import (
            SLANeXtAttentionGRUCell,
        )

        cfg = m.SLANetConfig(max_text_length=SLA_STEPS, out_channels=SLA_TOKENS)

        class Head(nn.Layer):  # PaddleOCR ppocr/modeling/heads/table_att_head.py SLAHead, inference branch
            def __init__(self):
                super().__init__()
                c, hid = cfg.post_conv_out_channels, cfg.hidden_size
                self.hidden_size = hid
                self.cell = SLANeXtAttentionGRUCell(c, hid, SLA_TOKENS)
                self.structure_generator = nn.Sequential(nn.Linear(hid, hid), nn.Linear(hid, SLA_TOKENS))
                self.loc_generator = nn.Sequential(nn.Linear(hid, hid), nn.Linear(hid, 8), nn.Sigmoid())

            def forward(self, fea):
                b = fea.shape[0]
                hidden = paddle.zeros([b, self.hidden_size])
                structure_preds = paddle.zeros([b, SLA_STEPS + 1, SLA_TOKENS])
                loc_preds = paddle.zeros([b, SLA_STEPS + 1, 8])
                pre_chars = paddle.zeros([b], dtype="int32")
                steps = paddle.to_tensor(SLA_STEPS) if form == "loop" else SLA_STEPS
                for i in range(steps + 1):
                    emb = F.one_hot(pre_chars, SLA_TOKENS)
                    hidden, _ = self.cell(hidden, fea, emb)
                    structure_step = self.structure_generator(hidden)
                    loc_step = self.loc_generator(hidden)
                    pre_chars = structure_step.argmax(axis=1, dtype="int32")
                    structure_preds[:, i, :] = structure_step
                    loc_preds[:, i, :] = loc_step
                return F.softmax(structure_preds), loc_preds

        class Net(nn.Layer):
            def __init__(self):
                super().__init__()
                self.backbone = m.SLANetBackbone(cfg)
                self.head = m.SLANetSLAHead(cfg) if form == "paddlex" else Head()

            def forward(self, x):
                return self.head(self.backbone(x))

        return Net()

    return build


def picodet(classes: int, nms: bool):
    """Round 4's PicoDet-S (LCNet-like backbone, CSP-PAN, GFL head, DFL decode) as PaddleDetection's export writes
    it: boxes / scale_factor, then ``multiclass_nms3`` (``nms``) or the boxes and scores (``exclude_nms``)."""

    def build():
        paddle, _, nn = _mods()
        import probe_picodet

        probe_picodet.CLASSES = classes

        class Export(nn.Layer):
            def __init__(self):
                super().__init__()
                self.det = probe_picodet.build(True)

            def forward(self, image, scale_factor):
                boxes, scores = self.det(image)
                sy, sx = paddle.split(scale_factor, 2, axis=-1)
                boxes = boxes / paddle.concat([sx, sy, sx, sy], -1).reshape([-1, 1, 4])
                if not nms:
                    return boxes, scores
                out, _, num = paddle._C_ops.multiclass_nms3(boxes, scores, None, 0.025, 1000, 100, 0.6, True, 1.0,
                                                           -1, True)  # fmt: skip
                return out, num

        return Export()

    return build


def ppyoloe(nms: bool):
    def build():
        paddle, _, nn = _mods()
        import probe_paddle2

        class Export(nn.Layer):
            def __init__(self):
                super().__init__()
                self.det = probe_paddle2.ppyoloe()

            def forward(self, image, im_shape, scale_factor):
                boxes, scores = self.det(image, im_shape, scale_factor)
                if not nms:
                    return boxes, scores
                out, _, num = paddle._C_ops.multiclass_nms3(boxes, scores, None, 0.01, 1000, 300, 0.7, True, 1.0,
                                                           -1, True)  # fmt: skip
                return out, num

        return Export()

    return build


def lcnet(scale: float, classes: int, sigmoid: bool = False):
    def build():
        _, F, nn = _mods()
        from paddlex.inference.models.image_classification.modeling import pplcnet as m

        class Cls(nn.Layer):
            def __init__(self):
                super().__init__()
                self.net = m.PPLCNet(m.PPLCNetConfig(scale=scale, num_labels=classes))

            def forward(self, x):
                n = self.net
                y = n.act_fn(n.last_convolution(n.avg_pool(n.encoder(x))))
                y = n.head(n.flatten(y * (1 - n.hidden_dropout_prob)))
                return F.sigmoid(y) if sigmoid else F.softmax(y, -1)

        return Cls()

    return build


def hgnetv2_attr(classes: int):
    def build():
        _, F, nn = _mods()
        import probe_paddle3
        from paddlex.inference.models.image_classification.modeling import hgnetv2 as m

        class Attr(nn.Layer):
            def __init__(self):
                super().__init__()
                self.net = m.HGNetV2ForImageClassification(
                    m.HGNetV2Config(**probe_paddle3.HGNETV2_B0, num_labels=classes)
                )

            def forward(self, x):
                n = self.net
                y, _ = n.encoder(n.embedder(x))
                for layer in n.classifier:
                    y = layer(y)
                return F.sigmoid(n.fc(y))

        return Attr()

    return build


def shitu_rec():
    """PP-ShiTuV2's recognition model: PP-LCNetV2 (last stage stride 1), GAP, flatten, BNNeck (BatchNorm1D)."""
    _, _, nn = _mods()
    import probe_paddle_backbones

    PPLCNetV2 = probe_paddle_backbones._layers()[0]

    class ShiTu(PPLCNetV2):
        CONFIG = [*PPLCNetV2.CONFIG[:3], (512, 5, False, True, True, 2)]

        def __init__(self):
            super().__init__(scale=1.0, classes=2)
            last = self.blocks[len(self.blocks) - 2]  # the last stage's first block: stride 1 (ShiTu)
            last.dw.conv._stride = [1, 1]
            self.neck = nn.BatchNorm1D(512)

        def forward(self, x):
            return self.neck(self.flatten(self.pool(self.blocks(self.stem(x)))))

    return ShiTu()


# --------------------------------------------------------------------------------------------- the models
DET, CLS = "detector", "classifier"
IMG_SF = ("scale_factor",)
IMG_IM_SF = ("im_shape", "scale_factor")
MODELS = [
    Model("slanet_loop", "SLANet (PaddleX 3.7 modeling, PaddleOCR SLAHead export)", "sequence", slanet("loop"),
          (160, 160), "table", BGR_IMAGENET, note="PP-LCNet x1.0, CSP-PAN, attention GRU cell decoding 17 steps in "
          "a while loop over a tensor range (ONNX Loop), each step written into structure / loc buffers by index"),
    Model("slanet_unrolled", "SLANet, decoding unrolled (Python range)", "sequence", slanet("unrolled"), (160, 160),
          "table", BGR_IMAGENET, note="the same network, the 17 decoding steps unrolled by the tracer"),
    Model("slanet_paddlex", "SLANet (PaddleX 3.7 SLANetSLAHead, early exit)", "sequence", slanet("paddlex"),
          (160, 160), "table", BGR_IMAGENET, note="PaddleX's head: stops when every sample emitted the end token"),
    Model("pp_doclayout_s_nms", "PP-DocLayout-S style (PicoDet, 23 classes) + multiclass_nms3", DET,
          picodet(LAYOUT_CLASSES, True), (160, 160), "layout", extra=IMG_SF, nms=True,
          note="PaddleDetection's default export: NMS in the graph, [N, 6] rows and per-image counts"),
    Model("pp_doclayout_s", "PP-DocLayout-S style (PicoDet, 23 classes), exclude_nms", DET,
          picodet(LAYOUT_CLASSES, False), (160, 160), "layout", extra=IMG_SF,
          note="DFL decode, boxes / scale_factor, scores [B, C, N]"),
    Model("picodet_lcnet_nms", "PP-PicoDet-LCNet style (80 classes) + multiclass_nms3", DET,
          picodet(COCO_CLASSES, True), (160, 160), extra=IMG_SF, nms=True, note="photos, NMS in the graph"),
    Model("picodet_lcnet", "PP-PicoDet-LCNet style (80 classes), exclude_nms", DET, picodet(COCO_CLASSES, False),
          (160, 160), extra=IMG_SF, note="photos, DFL decode, boxes / scale_factor"),
    Model("ppyoloe_plus_s_nms", "PP-YOLOE+-s style + multiclass_nms3", DET, ppyoloe(True), (96, 96),
          extra=IMG_IM_SF, nms=True, note="CSPResNet, CSP-PAN SPP, ET-head, DFL, clip to im_shape, NMS keep 300"),
    Model("ppyoloe_plus_s", "PP-YOLOE+-s style, exclude_nms", DET, ppyoloe(False), (96, 96), extra=IMG_IM_SF,
          note="inputs image, im_shape, scale_factor; boxes and scores"),
    Model("pp_lcnet_table_cls", "PP-LCNet_x1_0_table_cls (PaddleX 3.7 modeling)", CLS, lcnet(1.0, 2), (96, 96),
          "table", note="wired / wireless tables, Softmax"),
    Model("pp_lcnet_doc_ori", "PP-LCNet_x1_0_doc_ori (PaddleX 3.7 modeling)", CLS, lcnet(1.0, 4), (96, 96),
          "rotated", note="pages rotated by 0 / 90 / 180 / 270, Softmax"),
    Model("pp_shituv2_rec", "PP-ShiTuV2 rec (PP-LCNetV2 + BNNeck)", "encoder", shitu_rec, (96, 96),
          note="PP-LCNetV2 x1.0, last stage stride 1, GAP, flatten, BatchNorm1D 512 embedding"),
    Model("pphuman_attr", "PP-Human attribute (PP-HGNetV2-B0, 26 Sigmoid)", CLS, hgnetv2_attr(26), (128, 96),
          note="multi-label: 26 Sigmoid attributes of a pedestrian crop"),
    Model("ppvehicle_attr", "PP-Vehicle attribute (PP-LCNet x1.0, 19 Sigmoid)", CLS, lcnet(1.0, 19, True),
          (96, 128), note="multi-label: 10 colours + 9 types, Sigmoid"),
]  # fmt: skip
BY_NAME = {m.name: m for m in MODELS}


# --------------------------------------------------------------------------------------------- export
def _outputs(model, feed: dict) -> list[np.ndarray]:
    import paddle

    with paddle.no_grad():
        out = model(*[paddle.to_tensor(v) for v in feed.values()])
    return [np.asarray(t) for t in (out if isinstance(out, list | tuple) else [out])]


def export(m: Model, opset: int, out: Path, photos) -> dict:
    import onnx
    import onnxruntime as ort
    import paddle
    import paddle2onnx

    paddle.seed(SEED)
    np.random.seed(SEED)
    model = m.build()
    pe._randomize_affine(model, SEED + 1)
    calib = arrays(m, 32, 1000, photos)
    bns = [b for b in model.sublayers() if isinstance(b, paddle.nn.layer.norm._BatchNormBase)]
    for bn in bns:
        bn._momentum = 0.0
    model.train()
    with paddle.no_grad():
        model(*[paddle.to_tensor(v) for v in calib.values()])
    for bn in bns:
        bn._momentum = 0.9
    model.eval()
    samples = arrays(m, SAMPLES, 7, photos)
    specs = []
    for n, v in samples.items():
        specs.append(paddle.static.InputSpec([None, *v.shape[1:]], "float32", n))
    name = f"{m.name}_op{opset}"
    path = out / f"{name}.onnx"
    pe.paddle_to_onnx(model, path, opset, specs=specs, upgrade=True)
    minus_one_dims(path)
    proto = onnx.load(str(path))
    real = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    if real != opset:
        name = f"{m.name}_op{real}"
        path = path.rename(out / f"{name}.onnx")
    onnx.checker.check_model(proto)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    err, rows = 0.0, ""
    for i in range(2):
        feed = {k: v[i : i + 1] for k, v in samples.items()}
        want = _outputs(model, feed)
        got = sess.run(None, feed)
        if m.nms:  # the kept rows: the same count, the same boxes
            rows += f"{len(want[0])}/{len(got[0])} "
            if len(want[0]) == len(got[0]) and len(got[0]):  # as sets: near-equal scores may swap rows
                d = np.abs(got[0][:, None, :] - want[0][None, :, :]).max(-1).min(1)
                err = max(err, float(d.max() / (np.ptp(want[0]) or 1.0)))
            continue
        for g, w in zip(got, want, strict=True):
            err = max(err, float(np.abs(g - w).max() / (np.ptp(w) or 1.0)))
    assert err < 1e-3, f"{name}: onnxruntime vs Paddle {err:.2e}"
    np.savez(out / f"{name}.samples.npz", **samples)
    ins = [{"name": k, "shape": [1, *v.shape[1:]], "dtype": "float32"} for k, v in samples.items()]
    args = []
    for i in ins:
        args += ["--input-shape", f"{i['name']}={','.join(map(str, i['shape']))}"]
    ops = sorted({n.op_type for n in proto.graph.node})
    return {
        "name": name,
        "file": path.name,
        "family": m.family,
        "kind": m.kind,
        "opset": real,
        "inputs": ins,
        "outputs": [o.name for o in proto.graph.output],
        "data": {"type": "arrays", "file": f"{name}.samples.npz"},
        "extra_args": args,
        "size": "reduced",
        "ci": False,
        "params": int(sum(int(np.prod(p.shape)) for p in model.parameters())),
        "ops": ops,
        "note": f"paddle2onnx {paddle2onnx.__version__} opset {real}, batch -1; {m.note}; {len(bns)} BatchNorm "
        f"from {'rendered pages' if m.pages else 'photos'}; Paddle vs onnxruntime {err:.1e}"
        + (f" (kept rows Paddle/ort: {rows.strip()})" if m.nms else ""),
        "seed": SEED,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=pe.ROOT / "benchmarks" / ".zoo" / "probe16p")
    parser.add_argument("--only", help="comma-separated names (or NAME_opN)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(",")) if args.only else None
    photos = pe.zoo_data.bn_photos(None, pe.default_shared())
    entries = pe.export_each(MODELS, lambda m, op: export(m, op, args.out, photos), args.out, only, 28)
    pe.zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
