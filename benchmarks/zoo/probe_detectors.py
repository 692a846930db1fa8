"""Issue 12 round 4 probe: anchor-free and face detectors exported the way their repos do, decode tails included.

    python benchmarks/zoo/probe_detectors.py --out benchmarks/.zoo/probe4      # the probe (not committed)
    python benchmarks/zoo/probe_detectors.py --only centernet_style            # tests/zoo/models ("ci": false)
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe4/zoo.json --no-shared --workers 1

Seeded weights, BatchNorm statistics from real photos (``export.set_bn_statistics``), small inputs:

- ``yolox_nano_op11`` / ``yolox_nano_op13``: YOLOX-nano style (depthwise CSP, SiLU, decoupled head per level:
  reg / obj / cls), ``decode_in_inference``: Sigmoid obj and cls, Concat of the three levels, Permute, then
  ``(xy + grid) * stride`` and ``exp(wh) * stride``; output [1, N, 5 + C].
- ``fcos_style``: FCOS (GroupNorm-free head, ReLU, centerness branch), ``exp(scale * reg) * stride`` distances,
  ``sqrt(sigmoid(cls) * sigmoid(ctr))`` scores, boxes from the location grid; FPN upsampling as ``Resize`` with
  ``sizes`` (F.interpolate(size=...)).
- ``centernet_style``: CenterNet (ResNet-ish, deconv up), heatmap Sigmoid, 3x3 MaxPool peak mask (MaxPool +
  Equal + Cast + Mul), TopK over the flattened heatmap, Gather of wh / offset at the peaks.
- ``rtmdet_style``: RTMDet-tiny style (5x5 depthwise CSPNeXt blocks, SiLU), one [1, N, 4 + C] output: boxes from
  distances (Split with a ``split`` input at opset 13) concatenated with post-Sigmoid scores.
- ``retinaface_decoded_op11``: RetinaFace-MobileNet0.25 with landmarks and its prior-box decode in the graph.
- ``scrfd_500m_decoded``: SCRFD-500M without keypoints, distance2bbox decode from the anchor centres in the graph.
- ``styles_dynamic``: a small detector with the export styles detector users produce: dynamic batch and H/W,
  Slice with steps, Gather on the last axis, Split with a ``split`` input, Resize with ``sizes``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
import faces as zoo_faces  # noqa: E402
import yunet_scrfd  # noqa: E402
from detectors import YOLO_DATA, _spread_class_bias  # noqa: E402

SEED = 404
Spec = zoo_export.Spec


def cba(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, act=nn.SiLU) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), act()
    )


def dw(cin: int, cout: int, k: int = 3, s: int = 1, act=nn.SiLU) -> nn.Sequential:
    return nn.Sequential(cba(cin, cin, k, s, cin, act), cba(cin, cout, 1, 1, 1, act))


class CSP(nn.Module):
    def __init__(self, c: int, k: int = 3):
        super().__init__()
        self.a, self.b = cba(c, c // 2, 1), cba(c, c // 2, 1)
        self.m = nn.Sequential(cba(c // 2, c // 2, 1), dw(c // 2, c // 2, k))
        self.out = cba(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.a(x)
        return self.out(torch.cat([self.m(a) + a, self.b(x)], 1))


class Backbone(nn.Module):
    """Stride 8/16/32 features, depthwise CSP stages (k: the depthwise kernel)."""

    def __init__(self, widths=(16, 32, 64, 96), k: int = 3):
        super().__init__()
        w0, w1, w2, w3 = widths
        self.stem = nn.Sequential(cba(3, w0, 3, 2), dw(w0, w0))
        self.s1 = nn.Sequential(dw(w0, w1, 3, 2), CSP(w1, k))
        self.s2 = nn.Sequential(dw(w1, w1, 3, 2), CSP(w1, k))
        self.s3 = nn.Sequential(dw(w1, w2, 3, 2), CSP(w2, k))
        self.s4 = nn.Sequential(dw(w2, w3, 3, 2), CSP(w3, k))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.s1(self.stem(x))
        c3 = self.s2(x)
        c4 = self.s3(c3)
        return [c3, c4, self.s4(c4)]


class PAFPN(nn.Module):
    def __init__(self, cins, c: int, sizes: bool = False):
        super().__init__()
        self.lat = nn.ModuleList(cba(ci, c, 1) for ci in cins)
        self.td = nn.ModuleList(CSP(c) for _ in range(2))
        self.down = nn.ModuleList(dw(c, c, 3, 2) for _ in range(2))
        self.bu = nn.ModuleList(CSP(c) for _ in range(2))
        self.sizes = sizes

    def up(self, x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        if self.sizes:
            return F.interpolate(x, size=like.shape[2:], mode="nearest")
        return F.interpolate(x, scale_factor=2.0, mode="nearest")

    def forward(self, feats):
        p3, p4, p5 = (lat(f) for lat, f in zip(self.lat, feats, strict=True))
        p4 = self.td[0](p4 + self.up(p5, p4))
        p3 = self.td[1](p3 + self.up(p4, p3))
        n4 = self.bu[0](p4 + self.down[0](p3))
        n5 = self.bu[1](p5 + self.down[1](n4))
        return [p3, n4, n5]


def grid(size: int, strides=(8, 16, 32), offset: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    points, st = [], []
    for s in strides:
        n = size // s
        ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        points.append(torch.stack([xs.flatten(), ys.flatten()], -1).float() + offset)
        st.append(torch.full((n * n, 1), float(s)))
    return torch.cat(points)[None], torch.cat(st)[None]


class YOLOX(nn.Module):
    def __init__(self, size: int = 160, classes: int = 8, c: int = 32):
        super().__init__()
        self.backbone = Backbone((16, 32, 64, 96))
        self.neck = PAFPN([32, 64, 96], c)
        self.stems = nn.ModuleList(cba(c, c, 1) for _ in range(3))
        self.cls_convs = nn.ModuleList(nn.Sequential(dw(c, c), dw(c, c)) for _ in range(3))
        self.reg_convs = nn.ModuleList(nn.Sequential(dw(c, c), dw(c, c)) for _ in range(3))
        self.cls_preds = nn.ModuleList(nn.Conv2d(c, classes, 1) for _ in range(3))
        self.reg_preds = nn.ModuleList(nn.Conv2d(c, 4, 1) for _ in range(3))
        self.obj_preds = nn.ModuleList(nn.Conv2d(c, 1, 1) for _ in range(3))
        gen = torch.Generator().manual_seed(SEED)
        for conv in list(self.cls_preds) + list(self.obj_preds):
            _spread_class_bias(conv, conv.out_channels, gen)
        with torch.no_grad():  # a trained head's offsets and log sizes stay within a few units
            for conv in self.reg_preds:
                conv.weight.mul_(0.2)
        g, s = grid(size)
        self.register_buffer("grids", g)
        self.register_buffer("strides", s)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = []
        for i, f in enumerate(self.neck(self.backbone(x))):
            f = self.stems[i](f)
            cf, rf = self.cls_convs[i](f), self.reg_convs[i](f)
            out = torch.cat(
                [self.reg_preds[i](rf), self.obj_preds[i](rf).sigmoid(), self.cls_preds[i](cf).sigmoid()], 1
            )
            outs.append(out.flatten(start_dim=2))
        o = torch.cat(outs, dim=2).permute(0, 2, 1)
        return torch.cat(
            [(o[..., 0:2] + self.grids) * self.strides, torch.exp(o[..., 2:4]) * self.strides, o[..., 4:]], -1
        )


class YOLOXDynamic(YOLOX):
    """YOLOX's own ``decode_outputs``: the grids and strides built in forward from each level's runtime H/W
    (meshgrid of aranges: Shape, Range, Expand in the graph), exported with a dynamic batch and H/W."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs, grids, strides = [], [], []
        for i, f in enumerate(self.neck(self.backbone(x))):
            h, w = f.shape[2:]
            f = self.stems[i](f)
            cf, rf = self.cls_convs[i](f), self.reg_convs[i](f)
            out = torch.cat(
                [self.reg_preds[i](rf), self.obj_preds[i](rf).sigmoid(), self.cls_preds[i](cf).sigmoid()], 1
            )
            outs.append(out.flatten(start_dim=2))
            yv, xv = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack((xv, yv), 2).view(1, -1, 2)
            grids.append(grid)
            strides.append(torch.full((*grid.shape[:2], 1), x.shape[-1] // w))
        o = torch.cat(outs, dim=2).permute(0, 2, 1)
        g = torch.cat(grids, dim=1).type(o.dtype)
        s = torch.cat(strides, dim=1).type(o.dtype)
        return torch.cat([(o[..., 0:2] + g) * s, torch.exp(o[..., 2:4]) * s, o[..., 4:]], -1)


class FCOS(nn.Module):
    def __init__(self, size: int = 160, classes: int = 8, c: int = 32):
        super().__init__()
        self.backbone = Backbone((16, 32, 64, 96))
        self.neck = PAFPN([32, 64, 96], c, sizes=True)
        self.cls_tower = nn.Sequential(cba(c, c, act=nn.ReLU), cba(c, c, act=nn.ReLU))
        self.box_tower = nn.Sequential(cba(c, c, act=nn.ReLU), cba(c, c, act=nn.ReLU))
        self.cls = nn.Conv2d(c, classes, 3, 1, 1)
        self.box = nn.Conv2d(c, 4, 3, 1, 1)
        self.ctr = nn.Conv2d(c, 1, 3, 1, 1)
        self.scales = nn.Parameter(torch.tensor([1.0, 0.9, 1.1]))
        gen = torch.Generator().manual_seed(SEED + 1)
        _spread_class_bias(self.cls, classes, gen)
        with torch.no_grad():
            self.box.weight.mul_(0.3)
        g, s = grid(size, offset=0.5)
        self.register_buffer("points", g * s)
        self.register_buffer("strides", s)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores, dists = [], []
        for i, f in enumerate(self.neck(self.backbone(x))):
            t, b = self.cls_tower(f), self.box_tower(f)
            s = torch.sqrt(self.cls(t).sigmoid() * self.ctr(b).sigmoid())
            scores.append(s.flatten(2))
            dists.append(torch.exp(self.box(b) * self.scales[i]).flatten(2))
        s = torch.cat(scores, 2).permute(0, 2, 1)
        d = torch.cat(dists, 2).permute(0, 2, 1) * self.strides
        boxes = torch.cat([self.points - d[..., :2], self.points + d[..., 2:]], -1)
        return boxes, s


class CenterNet(nn.Module):
    def __init__(self, classes: int = 8, c: int = 32, k: int = 20):
        super().__init__()
        self.backbone = Backbone((16, 32, 64, 96))
        self.up = nn.Sequential(
            nn.ConvTranspose2d(96, c, 4, 2, 1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
            nn.ConvTranspose2d(c, c, 4, 2, 1, bias=False),
            nn.BatchNorm2d(c),
            nn.ReLU(),
        )
        self.hm = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.ReLU(), nn.Conv2d(c, classes, 1))
        self.wh = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.ReLU(), nn.Conv2d(c, 2, 1))
        self.reg = nn.Sequential(nn.Conv2d(c, c, 3, 1, 1), nn.ReLU(), nn.Conv2d(c, 2, 1))
        gen = torch.Generator().manual_seed(SEED + 2)
        _spread_class_bias(self.hm[-1], classes, gen)
        self.k = k

    def forward(self, x: torch.Tensor):
        f = self.up(self.backbone(x)[-1])
        heat = self.hm(f).sigmoid()
        hmax = F.max_pool2d(heat, 3, 1, 1)
        keep = (hmax == heat).float()
        heat = heat * keep
        b, c, h, w = heat.shape
        scores, inds = torch.topk(heat.view(b, -1), self.k)
        classes = (inds // (h * w)).float()
        pix = inds % (h * w)
        ys, xs = (pix // w).float(), (pix % w).float()
        wh = self.wh(f).view(b, 2, -1)
        off = self.reg(f).view(b, 2, -1)
        idx = pix.unsqueeze(1).expand(b, 2, self.k)
        wh, off = wh.gather(2, idx), off.gather(2, idx)
        cx, cy = xs + off[:, 0], ys + off[:, 1]
        boxes = torch.stack([cx - wh[:, 0] / 2, cy - wh[:, 1] / 2, cx + wh[:, 0] / 2, cy + wh[:, 1] / 2], -1)
        return boxes, scores, classes


class RTMDet(nn.Module):
    def __init__(self, size: int = 160, classes: int = 8, c: int = 32):
        super().__init__()
        self.backbone = Backbone((16, 32, 64, 96), k=5)
        self.neck = PAFPN([32, 64, 96], c)
        self.cls_convs = nn.ModuleList(nn.Sequential(cba(c, c), cba(c, c)) for _ in range(3))
        self.reg_convs = nn.ModuleList(nn.Sequential(cba(c, c), cba(c, c)) for _ in range(3))
        self.cls = nn.ModuleList(nn.Conv2d(c, classes, 1) for _ in range(3))
        self.reg = nn.ModuleList(nn.Conv2d(c, 4, 1) for _ in range(3))
        gen = torch.Generator().manual_seed(SEED + 3)
        for conv in self.cls:
            _spread_class_bias(conv, classes, gen)
        g, s = grid(size)
        self.register_buffer("points", g * s)
        self.register_buffer("strides", s)
        self.size = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cls, reg = [], []
        for i, f in enumerate(self.neck(self.backbone(x))):
            cls.append(self.cls[i](self.cls_convs[i](f)).flatten(2))
            reg.append(F.relu(self.reg[i](self.reg_convs[i](f))).flatten(2))
        scores = torch.cat(cls, 2).permute(0, 2, 1).sigmoid()
        d = torch.cat(reg, 2).permute(0, 2, 1) * self.strides
        lt, rb = torch.split(d, [2, 2], dim=-1)
        boxes = torch.cat([self.points - lt, self.points + rb], -1).clamp(0, self.size)
        return torch.cat([boxes, scores], -1)


class SCRFDDecoded(yunet_scrfd.SCRFD):
    """SCRFD-500M without keypoints, distance2bbox from the anchor centres (2 anchors a place) in the graph."""

    def __init__(self, size: int = 128):
        super().__init__("500m", False)
        self.kps_conv = None
        self.kps = True  # the 500m backbone's feature selection
        centres, strides = [], []
        for s in (8, 16, 32):
            n = size // s
            ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            c = (torch.stack([xs.flatten(), ys.flatten()], -1).float() * s).repeat_interleave(2, 0)
            centres.append(c)
            strides.append(torch.full((c.shape[0], 1), float(s)))
        self.register_buffer("centres", torch.cat(centres)[None])
        self.register_buffer("anchor_strides", torch.cat(strides)[None])

    def forward(self, x: torch.Tensor):
        outs = super().forward(x)
        scores = torch.cat(outs[:3], 1)
        d = torch.cat(outs[3:6], 1) * self.anchor_strides
        x1 = self.centres[..., 0] - d[..., 0]
        y1 = self.centres[..., 1] - d[..., 1]
        x2 = self.centres[..., 0] + d[..., 2]
        y2 = self.centres[..., 1] + d[..., 3]
        return scores, torch.stack([x1, y1, x2, y2], -1)


class Styles(nn.Module):
    """Export styles: Slice with steps, Gather on the last axis, Split with sizes, Resize with sizes; run dynamic."""

    def __init__(self, classes: int = 4, c: int = 24):
        super().__init__()
        self.backbone = Backbone((16, 24, 32, 48))
        self.lat = cba(48, c, 1)
        self.lat2 = cba(32, c, 1)
        self.head = nn.Sequential(dw(c, c), nn.Conv2d(c, 4 + 1 + classes, 1))
        gen = torch.Generator().manual_seed(SEED + 4)
        _spread_class_bias(self.head[-1], 4 + 1 + classes, gen)
        with torch.no_grad():  # box channels: small offsets and log sizes, not class logits
            self.head[-1].weight[:4].mul_(0.2)
            self.head[-1].bias[:4].zero_()

    def forward(self, x: torch.Tensor):
        _, c4, c5 = self.backbone(x)
        f = self.lat2(c4) + F.interpolate(self.lat(c5), size=c4.shape[2:], mode="nearest")
        p = self.head(f).flatten(2).permute(0, 2, 1)  # [B, N, 5 + C]
        box, obj, cls = torch.split(p, [4, 1, p.shape[-1] - 5], dim=-1)
        xy = box[..., 0::2]  # Slice with steps
        wh = box[..., 1::2]
        obj = obj.sigmoid()
        best = cls[..., 2].sigmoid()  # Gather on the last axis
        return torch.cat([xy, wh.exp()], -1), obj * cls.sigmoid(), best


def specs() -> list[Spec]:
    def img(size: int, name: str = "images"):
        return lambda full: [(name, [1, 3, size, size])]

    yolo = dict(YOLO_DATA)
    return [
        Spec(
            "yolox_nano_op11",
            "YOLOX-nano style",
            "detector",
            11,
            lambda f: YOLOX(),
            img(160),
            ["output"],
            yolo,
        ),
        Spec(
            "yolox_nano_op13",
            "YOLOX-nano style",
            "detector",
            13,
            lambda f: YOLOX(),
            img(160),
            ["output"],
            yolo,
        ),
        Spec("fcos_style", "FCOS style", "detector", 13, lambda f: FCOS(), img(160), ["boxes", "scores"]),
        Spec(
            "centernet_style",
            "CenterNet style",
            "detector",
            11,
            lambda f: CenterNet(),
            img(128),
            ["boxes", "scores", "classes"],
        ),
        Spec("rtmdet_style", "RTMDet style", "detector", 13, lambda f: RTMDet(), img(160), ["dets"], yolo),
        Spec(
            "retinaface_decoded_op11",
            "RetinaFace-MobileNet0.25 (decoded)",
            "detector",
            11,
            lambda f: zoo_faces.RetinaFace(128, True, 32),
            img(128, "input0"),
            ["boxes", "conf", "landmarks"],
            data=dict(zoo_faces.RETINAFACE_DATA),
        ),
        Spec(
            "scrfd_500m_decoded",
            "SCRFD-500M (decoded)",
            "detector",
            11,
            lambda f: SCRFDDecoded(),
            img(128, "input.1"),
            ["scores", "boxes"],
            data=dict(yunet_scrfd.SCRFD_DATA),
        ),
        Spec(
            "styles_dynamic",
            "export styles (dynamic)",
            "detector",
            13,
            lambda f: Styles(),
            img(128),
            ["boxes", "scores", "best"],
            yolo,
            dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}},
        ),
        Spec(
            "yolox_nano_dynamic",
            "YOLOX-nano style (runtime grids)",
            "detector",
            13,
            lambda f: YOLOXDynamic(),
            img(160),
            ["output"],
            yolo,
            dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}},
        ),
    ]


def _finish(spec: Spec, entry: dict, full: bool) -> None:
    entry["ci"] = False
    if spec.dynamic_axes:
        entry["extra_args"] = zoo_export.input_shape_args(spec, full)


def main(argv: list[str] | None = None) -> int:
    return zoo_export.build_main(argv, __doc__, specs(), SEED, finish=_finish)


if __name__ == "__main__":
    raise SystemExit(main())
