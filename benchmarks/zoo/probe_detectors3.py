"""Issue 12 probe round 16d: YOLO-family and EfficientDet detectors not probed before.

    pip install --no-deps effdet==0.4.1 omegaconf onnxslim && pip install pycocotools   # the probe's venv only
    python benchmarks/zoo/probe_detectors3.py                   # every model -> benchmarks/.zoo/probe16d
    python benchmarks/zoo/probe_detectors3.py --only yolov6n,yolov7_tiny_grid
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe16d/zoo.json --no-shared --workers 1 --json r.json

Seeded weights, BatchNorm statistics from the photos (train mode), 160-256 px:

- ultralytics 8.4 yamls not probed in round 7u (built and written by ``model.export(format="onnx")`` through
  ``probe_ultralytics.export_probe``): yolov6n, yolov9t (ELAN / ADown / RepNCSPELAN4), yolo12n (area attention
  A2C2f), yolov3-tinyu, yolov8n-ghost, yolov8n-p2 / -p6, yolo26n-sem / -depth (the 26 semantic-segmentation and
  depth heads); yolov9t also ``dynamic=True, simplify=True`` (onnxslim) at opset 12. yoloe / world need CLIP /
  MobileCLIP weights (downloads): not built. ``half=True`` needs CUDA: not built.
- effdet 0.4.1 (the ``EffDetRaw`` of ``probe_detectors2.py``): tf_efficientdet_d0 raw heads at opset 17 (TF "same"
  padding, MaxPool2dSame), efficientdet_d0 with effdet's anchor decode in the graph (``Anchors.from_config`` +
  ``decode_box_outputs`` over every anchor, sigmoid scores) at opset 13, and DetBenchPredict without its NMS
  (``_post_process``'s top-100 over anchors x classes, then the decode of the chosen anchors) at opset 17.
- hand-written after the public repos' export code: YOLOv7-tiny (``cfg/deploy/yolov7-tiny.yaml``: ELAN-tiny,
  SPPCSPC-tiny, LeakyReLU 0.1, the ``Detect`` head as ``export.py --grid`` writes it: sigmoid, split, the grid and
  anchor_grid decode, one [1, N, 85] output) at opset 12, and a YOLO-NAS-S style net (QARepVGG blocks fused as
  super-gradients' ``prep_model_for_conversion`` does, CSP stages, SPP, ConvTranspose up-stages, DFL head with
  Softmax over 17 bins, the projection conv and distance2bbox: boxes [1, N, 4] and scores [1, N, C]) at opset 14.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("YOLO_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
import probe_ultralytics as pu  # noqa: E402
from detectors import YOLO_DATA, _spread_class_bias  # noqa: E402
from export import Spec, zoo_data  # noqa: E402

OUT = zoo_export.FULL_DIR / "probe16d"
SEED = 1616
IMAGENET = dict(zoo_data.IMAGENET_DATA)

ULTRALYTICS: dict[str, dict[str, Any]] = {
    "yolov6n": {"yaml": "yolov6n.yaml", "kind": "detector"},
    "yolov9t": {"yaml": "yolov9t.yaml", "kind": "detector"},
    "yolo12n": {"yaml": "yolo12n.yaml", "kind": "detector"},
    "yolov3_tinyu": {"yaml": "yolov3-tinyu.yaml", "kind": "detector", "file": "yolov3_tiny_probe.yaml"},
    "yolov8n_ghost": {"yaml": "yolov8n-ghost.yaml", "kind": "detector"},
    "yolov8n_p2": {"yaml": "yolov8n-p2.yaml", "kind": "detector"},
    "yolov8n_p6": {"yaml": "yolov8n-p6.yaml", "kind": "detector", "imgsz": 192},
    "yolo26n_sem": {"yaml": "yolo26n-sem.yaml", "kind": "segmenter"},
    "yolo26n_depth": {"yaml": "yolo26n-depth.yaml", "kind": "segmenter"},
    "yolov9t_dynamic_slim": {
        "yaml": "yolov9t.yaml",
        "kind": "detector",
        "export": {"opset": 12, "dynamic": True, "simplify": True},
    },
}

_original_build = pu.build


def _build(probe: dict[str, Any], folder: Path, scale, classes):
    """probe_ultralytics.build, and yamls without ``scales`` (yolov3-tiny) built as they are."""
    from ultralytics.nn.tasks import yaml_model_load

    if "scales" in yaml_model_load(probe["yaml"]):
        return _original_build(probe, folder, scale, classes)
    import yaml
    from ultralytics import YOLO

    cfg = yaml_model_load(probe["yaml"])
    cfg.pop("yaml_file", None)
    path = folder / probe.get("file", probe["yaml"])
    path.write_text(yaml.safe_dump(cfg))
    yolo = YOLO(str(path))
    gen = torch.Generator().manual_seed(pu.SEED)
    head = yolo.model.model[-1]
    for seq in getattr(head, "cv3", None) or []:
        if isinstance(seq[-1], nn.Conv2d):
            _spread_class_bias(seq[-1], head.nc, gen)
    return yolo


# ------------------------------------------------------------------------------------------------ effdet


class EffDetDecoded(nn.Module):
    """effdet's anchor decode over every anchor: boxes [1, N, 4] (xyxy, pixels) and sigmoid scores [1, N, C]."""

    def __init__(self, name: str, size: int, classes: int, topk: int | None = None):
        super().__init__()
        from effdet.anchors import Anchors
        from probe_detectors2 import EffDetRaw

        self.raw = EffDetRaw(name, size, classes)
        config = self.raw.net.config
        self.register_buffer("anchors", Anchors.from_config(config).boxes.float(), persistent=False)
        self.levels, self.classes, self.topk = config.num_levels, config.num_classes, topk

    @torch.no_grad()
    def prepare(self, x: torch.Tensor) -> None:
        """A trained box net's regression: its seeded predictions scaled to at most 4 in magnitude over 32 photos
        (seeded, some photos drive them to 70, whose Exp overflows float32 in the decode: boxes e^70 wide)."""
        conv = self.raw.net.box_net.predict.conv_pw
        top = max(float(torch.cat([b.flatten() for b in self.raw.net(x[i : i + 4])[1]]).abs().max())
                  for i in range(0, len(x), 4))  # fmt: skip
        conv.weight.mul_(4.0 / top)
        conv.bias.mul_(4.0 / top)

    def forward(self, x: torch.Tensor):
        from effdet.anchors import decode_box_outputs
        from effdet.bench import _post_process

        cls, box = self.raw.net(x)
        if self.topk:  # DetBenchPredict up to its NMS: top-k over anchors x classes, decode of those anchors
            scores, boxes, indices, classes = _post_process(cls, box, self.levels, self.classes, self.topk)
            decoded = decode_box_outputs(boxes[0], self.anchors[indices[0]], output_xyxy=True)
            return decoded[None], scores.sigmoid(), classes
        b = x.shape[0]
        cls_all = torch.cat([c.permute(0, 2, 3, 1).reshape(b, -1, self.classes) for c in cls], 1)
        box_all = torch.cat([r.permute(0, 2, 3, 1).reshape(b, -1, 4) for r in box], 1)
        return decode_box_outputs(box_all[0], self.anchors, output_xyxy=True)[None], cls_all.sigmoid()


# ------------------------------------------------------------------------------------------------ YOLOv7-tiny


def conv(c1: int, c2: int, k: int = 1, s: int = 1, act: nn.Module | None = None) -> nn.Sequential:
    """yolov7's Conv: conv (no bias) + BN + act (LeakyReLU 0.1 in the tiny model)."""
    return nn.Sequential(
        nn.Conv2d(c1, c2, k, s, k // 2, bias=False),
        nn.BatchNorm2d(c2),
        act if act is not None else nn.LeakyReLU(0.1),
    )


class ElanTiny(nn.Module):
    """yolov7-tiny's repeated block: two 1x1 branches, two chained 3x3, concat of the four, 1x1."""

    def __init__(self, c1: int, c: int, c2: int):
        super().__init__()
        self.cv1, self.cv2 = conv(c1, c), conv(c1, c)
        self.cv3, self.cv4 = conv(c, c, 3), conv(c, c, 3)
        self.out = conv(4 * c, c2)

    def forward(self, x):
        a, b = self.cv1(x), self.cv2(x)
        c = self.cv3(b)
        d = self.cv4(c)
        return self.out(torch.cat([d, c, b, a], 1))


class SppCspTiny(nn.Module):
    """yolov7-tiny's SPPCSPC: 1x1 branches, MaxPool 5 / 9 / 13 concat, 1x1, concat with the shortcut, 1x1."""

    def __init__(self, c1: int, c: int):
        super().__init__()
        self.cv1, self.cv2 = conv(c1, c), conv(c1, c)
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))
        self.cv3, self.cv4 = conv(4 * c, c), conv(2 * c, c)

    def forward(self, x):
        a = self.cv1(x)
        y = self.cv3(torch.cat([a, *(p(a) for p in self.pools)], 1))
        return self.cv4(torch.cat([y, self.cv2(x)], 1))


class Yolov7Detect(nn.Module):
    """yolov7's ``Detect`` as ``export.py --grid`` writes it (``concat = True``, in-ONNX-export branch)."""

    anchors = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119), (116, 90, 156, 198, 373, 326))

    def __init__(self, nc: int, chs: tuple[int, ...], strides: tuple[int, ...], size: int):
        super().__init__()
        self.nc, self.no, self.na, self.nl = nc, nc + 5, 3, len(chs)
        self.stride = strides
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in chs)
        a = torch.tensor(self.anchors, dtype=torch.float32).view(self.nl, 1, self.na, 1, 1, 2)
        self.register_buffer("anchor_grid", a)
        for i, s in enumerate(strides):
            ny = nx = size // s
            yv, xv = torch.meshgrid(torch.arange(ny), torch.arange(nx), indexing="ij")
            self.register_buffer(f"grid{i}", torch.stack((xv, yv), 2).view(1, 1, ny, nx, 2).float())
        gen = torch.Generator().manual_seed(SEED)
        with (
            torch.no_grad()
        ):  # yolov7's _initialize_biases: objectness and class priors of a trained detector
            for conv_, s in zip(self.m, strides, strict=True):
                b = conv_.bias.view(self.na, -1)
                b[:, 4] += math.log(8 / (640 / s) ** 2) + 0.5 * torch.randn(self.na, generator=gen)
                b[:, 5:] += math.log(0.6 / (nc - 0.99)) + 1.0 * torch.randn(self.na, nc, generator=gen)

    def forward(self, xs):
        z = []
        for i in range(self.nl):
            x = self.m[i](xs[i])
            bs, _, ny, nx = x.shape
            y = x.view(bs, self.na, self.no, ny, nx).permute(0, 1, 3, 4, 2).contiguous().sigmoid()
            xy, wh, conf = y.split((2, 2, self.nc + 1), 4)
            xy = xy * (2.0 * self.stride[i]) + (self.stride[i] * (getattr(self, f"grid{i}") - 0.5))
            wh = wh**2 * (4 * self.anchor_grid[i].data)
            z.append(torch.cat((xy, wh, conf), 4).view(bs, -1, self.no))
        return torch.cat(z, 1)


class Yolov7Tiny(nn.Module):
    """``cfg/deploy/yolov7-tiny.yaml``: backbone of ELAN-tiny blocks and MaxPool downsampling, SPPCSPC-tiny,
    PANet neck (nearest x2 upsampling, stride-2 convs), Detect at strides 8 / 16 / 32."""

    def __init__(self, size: int, nc: int = 80):
        super().__init__()
        self.stem = nn.Sequential(conv(3, 32, 3, 2), conv(32, 64, 3, 2))
        self.b1 = ElanTiny(64, 32, 64)
        self.b2 = nn.Sequential(nn.MaxPool2d(2, 2), ElanTiny(64, 64, 128))  # P3
        self.b3 = nn.Sequential(nn.MaxPool2d(2, 2), ElanTiny(128, 128, 256))  # P4
        self.b4 = nn.Sequential(nn.MaxPool2d(2, 2), ElanTiny(256, 256, 512))  # P5
        self.spp = SppCspTiny(512, 256)
        self.up1, self.lat1, self.n1 = conv(256, 128), conv(256, 128), ElanTiny(256, 64, 128)
        self.up2, self.lat2, self.n2 = conv(128, 64), conv(128, 64), ElanTiny(128, 32, 64)
        self.down1, self.n3 = conv(64, 128, 3, 2), ElanTiny(256, 64, 128)
        self.down2, self.n4 = conv(128, 256, 3, 2), ElanTiny(512, 128, 256)
        self.o3, self.o4, self.o5 = conv(64, 128, 3), conv(128, 256, 3), conv(256, 512, 3)
        self.detect = Yolov7Detect(nc, (128, 256, 512), (8, 16, 32), size)
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")

    def forward(self, x):
        p3 = self.b2(self.b1(self.stem(x)))
        p4 = self.b3(p3)
        p5 = self.spp(self.b4(p4))
        h4 = self.n1(torch.cat([self.lat1(p4), self.upsample(self.up1(p5))], 1))
        h3 = self.n2(torch.cat([self.lat2(p3), self.upsample(self.up2(h4))], 1))
        g4 = self.n3(torch.cat([self.down1(h3), h4], 1))
        g5 = self.n4(torch.cat([self.down2(g4), p5], 1))
        return self.detect([self.o3(h3), self.o4(g4), self.o5(g5)])


# ------------------------------------------------------------------------------------------------ YOLO-NAS-S


class QARepVGG(nn.Module):
    """super-gradients' QARepVGGBlock: 3x3 conv + BN, 1x1 conv (no BN), identity scaled by alpha, a post BN,
    ReLU; ``fuse()`` folds it into one 3x3 conv with bias, as ``prep_model_for_conversion`` does before export."""

    def __init__(self, c1: int, c2: int, s: int = 1):
        super().__init__()
        self.c1, self.c2, self.s = c1, c2, s
        self.k3 = nn.Conv2d(c1, c2, 3, s, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c2)
        self.k1 = nn.Conv2d(c1, c2, 1, s, 0, bias=False)
        self.identity = c1 == c2 and s == 1
        self.alpha = nn.Parameter(torch.tensor(1.0)) if self.identity else None
        self.post = nn.BatchNorm2d(c2)
        self.act = nn.ReLU()
        self.fused: nn.Conv2d | None = None

    def forward(self, x):
        if self.fused is not None:
            return self.act(self.fused(x))
        y = self.bn3(self.k3(x)) + self.k1(x)
        if self.identity:
            y = y + self.alpha * x
        return self.act(self.post(y))

    @torch.no_grad()
    def fuse(self) -> None:
        std = (self.bn3.running_var + self.bn3.eps).sqrt()
        w = self.k3.weight * (self.bn3.weight / std).view(-1, 1, 1, 1)
        b = self.bn3.bias - self.bn3.running_mean * self.bn3.weight / std
        w = w + nn.functional.pad(self.k1.weight, [1, 1, 1, 1])
        if self.identity:
            eye = torch.zeros_like(w)
            for i in range(self.c2):
                eye[i, i, 1, 1] = self.alpha
            w = w + eye
        pstd = (self.post.running_var + self.post.eps).sqrt()
        scale = self.post.weight / pstd
        self.fused = nn.Conv2d(self.c1, self.c2, 3, self.s, 1, bias=True)
        self.fused.weight.copy_(w * scale.view(-1, 1, 1, 1))
        self.fused.bias.copy_((b - self.post.running_mean) * scale + self.post.bias)


def cbr(c1: int, c2: int, k: int = 1, s: int = 1) -> nn.Sequential:
    return conv(c1, c2, k, s, nn.ReLU())


class NasCSP(nn.Module):
    """YoloNASCSPLayer: two 1x1 branches, ``n`` bottlenecks of two QARepVGG blocks (residual), concat, 1x1."""

    def __init__(self, c1: int, c2: int, n: int, c: int | None = None):
        super().__init__()
        c = c or c2 // 2
        self.cv1, self.cv2 = cbr(c1, c), cbr(c1, c)
        self.blocks = nn.ModuleList(nn.Sequential(QARepVGG(c, c), QARepVGG(c, c)) for _ in range(n))
        self.cv3 = cbr(2 * c, c2)

    def forward(self, x):
        y = self.cv1(x)
        for b in self.blocks:
            y = y + b(y)
        return self.cv3(torch.cat([y, self.cv2(x)], 1))


class NasSPP(nn.Module):
    def __init__(self, c1: int, c2: int):
        super().__init__()
        self.cv1 = cbr(c1, c1 // 2)
        self.pools = nn.ModuleList(nn.MaxPool2d(k, 1, k // 2) for k in (5, 9, 13))
        self.cv2 = cbr(c1 * 2, c2)

    def forward(self, x):
        y = self.cv1(x)
        return self.cv2(torch.cat([y, *(p(y) for p in self.pools)], 1))


class NasUp(nn.Module):
    """YoloNASUpStage: 1x1 reduce, ConvTranspose 2x2 stride 2, concat with the lateral and the stride-2
    downsampled higher-resolution map, 1x1, CSP. Returns (the reduced map for the down path, the output)."""

    def __init__(self, c_in: int, c_lat: int, c_hi: int, c: int, n: int):
        super().__init__()
        self.reduce = cbr(c_in, c)
        self.up = nn.ConvTranspose2d(c, c, 2, 2)
        self.hi = cbr(c_hi, c, 3, 2)
        self.lat = cbr(c_lat, c)
        self.mix = cbr(3 * c, c)
        self.csp = NasCSP(c, c, n)

    def forward(self, x, lat, hi):
        r = self.reduce(x)
        return r, self.csp(self.mix(torch.cat([self.up(r), self.lat(lat), self.hi(hi)], 1)))


class NasDown(nn.Module):
    def __init__(self, c_in: int, c_skip: int, c: int, n: int):
        super().__init__()
        self.down = cbr(c_in, c_in, 3, 2)
        self.csp = NasCSP(c_in + c_skip, c, n)

    def forward(self, x, skip):
        return self.csp(torch.cat([self.down(x), skip], 1))


class NasDFLHead(nn.Module):
    """YoloNASDFLHead per level (stem, cls / reg 3x3 branches, 1x1 predictions) and the NDFLHeads decode: Softmax
    over reg_max + 1 bins, the fixed 1x1 projection conv, distance2bbox from the anchor points x stride."""

    def __init__(self, chs: tuple[int, ...], strides: tuple[int, ...], size: int, nc: int, reg_max: int = 16):
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, reg_max, strides
        self.stems = nn.ModuleList(cbr(c, c) for c in chs)
        self.cls = nn.ModuleList(nn.Sequential(cbr(c, c, 3), nn.Conv2d(c, nc, 1)) for c in chs)
        self.reg = nn.ModuleList(nn.Sequential(cbr(c, c, 3), nn.Conv2d(c, 4 * (reg_max + 1), 1)) for c in chs)
        proj = nn.Conv2d(reg_max + 1, 1, 1, bias=False).requires_grad_(False)
        proj.weight.copy_(torch.arange(reg_max + 1, dtype=torch.float32).view(1, -1, 1, 1))
        self.proj = proj
        points, stride_t = [], []
        for s in strides:
            n = size // s
            yv, xv = torch.meshgrid(torch.arange(n) + 0.5, torch.arange(n) + 0.5, indexing="ij")
            points.append(torch.stack((xv, yv), -1).view(-1, 2) * s)
            stride_t.append(torch.full((n * n, 1), float(s)))
        self.register_buffer("anchor_points", torch.cat(points)[None])
        self.register_buffer("stride_tensor", torch.cat(stride_t)[None])
        gen = torch.Generator().manual_seed(SEED)
        with torch.no_grad():  # a trained detector: class logits mostly background, spread
            for seq in self.cls:
                seq[-1].bias.copy_(-4.6 + 1.2 * torch.randn(nc, generator=gen))
                seq[-1].weight.mul_(3.0)
            for seq in self.reg:
                seq[-1].weight.mul_(4.0)

    def forward(self, feats):
        scores, dists = [], []
        for i, f in enumerate(feats):
            f = self.stems[i](f)
            b, _, h, w = f.shape
            scores.append(self.cls[i](f).flatten(2))
            r = self.reg[i](f).view(b, 4, self.reg_max + 1, h * w).permute(0, 2, 3, 1)  # [b, 17, hw, 4]
            r = self.proj(r.softmax(1))  # [b, 1, hw, 4]
            dists.append(r.view(b, h * w, 4))
        score = torch.cat(scores, 2).permute(0, 2, 1).sigmoid()
        lt, rb = torch.cat(dists, 1).split(2, -1)
        pts = self.anchor_points / self.stride_tensor
        boxes = torch.cat([pts - lt, pts + rb], -1) * self.stride_tensor
        return boxes, score


class YoloNasS(nn.Module):
    """A YOLO-NAS-S style detector (super-gradients ``yolo_nas_s``' arch params, widths as published: stem 48,
    stages 96 / 192 / 384 / 768, neck 192 / 96 / 192 / 384; depths halved)."""

    def __init__(self, size: int, nc: int = 80):
        super().__init__()
        self.stem = QARepVGG(3, 48, 2)
        self.s1 = nn.Sequential(QARepVGG(48, 96, 2), NasCSP(96, 96, 1))
        self.s2 = nn.Sequential(QARepVGG(96, 192, 2), NasCSP(192, 192, 2))
        self.s3 = nn.Sequential(QARepVGG(192, 384, 2), NasCSP(384, 384, 2))
        self.s4 = nn.Sequential(QARepVGG(384, 768, 2), NasCSP(768, 768, 1), NasSPP(768, 768))
        self.up1 = NasUp(768, 384, 192, 192, 1)
        self.up2 = NasUp(192, 192, 96, 96, 1)
        self.down1 = NasDown(96, 96, 192, 1)
        self.down2 = NasDown(192, 192, 384, 1)
        self.head = NasDFLHead((96, 192, 384), (8, 16, 32), size, nc)

    def forward(self, x):
        c1 = self.s1(self.stem(x))
        c2 = self.s2(c1)
        c3 = self.s3(c2)
        c4 = self.s4(c3)
        r1, p4 = self.up1(c4, c3, c2)
        r2, p3 = self.up2(p4, c2, c1)
        n4 = self.down1(p3, r2)
        n5 = self.down2(n4, r1)
        return self.head([p3, n4, n5])

    def prepare(self) -> None:
        for m in self.modules():
            if isinstance(m, QARepVGG):
                m.fuse()


def image(name: str, h: int):
    return lambda full: [(name, [1, 3, h, h])]


def torch_specs() -> list[Spec]:
    out = [
        Spec("tf_efficientdet_d0_raw_op17", "EfficientDet-d0 (tf_efficientdet_d0, effdet 0.4.1, bench_task='')",
             "detector", 17, lambda full: _effdet_raw("tf_efficientdet_d0"), image("input", 256),
             [f"class_{i}" for i in range(5)] + [f"box_{i}" for i in range(5)], data=dict(IMAGENET),
             note="TF 'same' padding (Conv2dSame, MaxPool2dSame), BiFPN fast fusion, raw class / box nets"),
        Spec("efficientdet_d0_decoded", "EfficientDet-d0, effdet's anchor decode in the graph", "detector", 13,
             lambda full: EffDetDecoded("efficientdet_d0", 256, 20), image("input", 256), ["boxes", "scores"],
             data=dict(IMAGENET), note="Anchors.from_config + decode_box_outputs over all anchors, sigmoid"),
        Spec("efficientdet_d0_topk", "EfficientDet-d0, DetBenchPredict without NMS", "detector", 17,
             lambda full: EffDetDecoded("efficientdet_d0", 256, 20, topk=100), image("input", 256),
             ["boxes", "scores", "classes"], data=dict(IMAGENET),
             note="_post_process top-100 over anchors x classes, decode_box_outputs of those anchors"),
        Spec("yolov7_tiny_grid", "YOLOv7-tiny (export.py --grid)", "detector", 12, lambda full: Yolov7Tiny(256),
             image("images", 256), ["output"], data=dict(YOLO_DATA),
             note="ELAN-tiny, SPPCSPC-tiny, LeakyReLU 0.1, Detect grid / anchor_grid decode, [1, N, 85]"),
        Spec("yolo_nas_s_style", "YOLO-NAS-S style (QARepVGG fused, DFL head)", "detector", 14,
             lambda full: YoloNasS(256), image("input", 256), ["boxes", "scores"], data=dict(RGB01),
             note="QARepVGG fused, CSP, SPP, ConvTranspose up-stages, DFL Softmax + projection, distance2bbox"),
    ]  # fmt: skip
    return out


RGB01 = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None}


def _effdet_raw(arch: str) -> nn.Module:
    from probe_detectors2 import EffDetRaw

    return EffDetRaw(arch, 256, 20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
    torch.set_num_threads(1)
    wanted = set(args.only.split(",")) if args.only else None
    pu.PROBES.update(ULTRALYTICS)
    pu.build = _build
    entries = []
    for name in ULTRALYTICS:
        if wanted and name not in wanted:
            continue
        try:
            entries.append(pu.export_probe(name, args.out, photos))
        except Exception as exc:  # a probe: one family that does not build/export must not stop the others
            print(f"{name}: could not build/export: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        e = entries[-1]
        print(f"{name}: {(args.out / e['file']).stat().st_size / 1e6:.2f} MB opset {e['opset']} {e['ops']}")
    original = zoo_export.set_bn_statistics

    def then_fuse(
        model, spec, full, photos_, batches
    ):  # YOLO-NAS: BatchNorm statistics first, then the fusion
        n = original(model, spec, full, photos_, batches)
        if isinstance(model, YoloNasS):
            model.prepare()
        if isinstance(model, EffDetDecoded):
            shapes = [{"name": n, "shape": s} for n, s in spec.inputs(full)]
            arrays = zoo_data.make_arrays(
                {"name": spec.name, "data": spec.data, "inputs": shapes}, 32, 3, photos_
            )
            model.prepare(torch.from_numpy(arrays[shapes[0]["name"]]))
        return n

    zoo_export.set_bn_statistics = then_fuse
    try:
        for i, spec in enumerate(torch_specs()):
            if wanted and spec.name not in wanted:
                continue
            try:
                entry = zoo_export.export(spec, True, args.out, photos, seed=SEED + i)
            except Exception as exc:
                print(f"{spec.name}: could not build/export: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            entry["size"] = "full"
            entries.append(entry)
            size = (args.out / entry["file"]).stat().st_size
            print(
                f"{spec.name}: {size / 1e6:.2f} MB opset {spec.opset} {entry['params']:,d} params {entry['ops']}"
            )
    finally:
        zoo_export.set_bn_statistics = original
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
