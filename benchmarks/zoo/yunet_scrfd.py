"""Two more face-detector families of the model zoo: YuNet (OpenCV's face_detection_yunet) and SCRFD (insightface).

    python benchmarks/zoo/yunet_scrfd.py            # reduced sizes -> tests/zoo/models/ (committed) + zoo.json
    python benchmarks/zoo/yunet_scrfd.py --full     # full sizes    -> benchmarks/.zoo/ (git-ignored) + zoo.json

Written here in torch after the published architectures (libfacedetection.train's YuNet-n config and
insightface's SCRFD configs); no weights can be downloaded, so weights are seeded and BatchNorm statistics are set
from real photos (``export.set_bn_statistics``), with ``faces._trained_like``'s two traits of trained depthwise
networks. Exported with ``torch.onnx.export(..., dynamo=False)`` as the public ONNX files are.

- **YuNet** (``yunet_n``, the model behind OpenCV's face_detection_yunet_2023mar.onnx): every layer is a
  ``ConvDPUnit`` (1x1 conv with bias, depthwise 3x3 conv with bias, [BN, ReLU]); backbone ``Conv_head`` (3x3/2
  conv-BN-ReLU then a ConvDPUnit 16) and five ``Conv4layerBlock``s (two ConvDPUnits) of 64 channels, max pooling
  after blocks 0, 2, 3, 4, features at strides 8/16/32; ``TFPN`` neck (a ConvDPUnit per level, top-down: nearest
  x2 upsample + Add); head: one shared ConvDPUnit per level, then cls (1), obj (1), bbox (4) and kps (10)
  ConvDPUnits without BN/ReLU. Export as the 2023mar file: twelve outputs ``cls_8/16/32``, ``obj_8/16/32``
  (Transpose, Reshape to [1, H*W, C], Sigmoid), ``bbox_8/16/32``, ``kps_8/16/32`` (Transpose, Reshape); the box
  decoding is OpenCV's C++. Input ``input`` [1, 3, H, W], BGR pixels 0..255 (no normalisation), fixed size.
- **SCRFD-2.5G** (``scrfd_2.5g.py``): ``ResNetV1e`` with BasicBlocks (deep stem 3x3/2 12, 12, 24 + max pool; stages
  of 3/5/3/2 blocks, 24/48/48/80 channels, AvgPool + 1x1 conv shortcuts when downsampling), ``PAFPN`` from stride
  8 (1x1 laterals, nearest upsampling to the finer size + Add, 3x3 convs, bottom-up 3x3/2 convs + Add, 3x3 convs;
  no norm, no activation), ``SCRFDHead`` shared over the strides: two 3x3 conv + **GroupNorm(16)** + ReLU, 3x3
  cls (2 anchors) and reg (2 x 4) convs, a learnt ``Scale`` per stride on the boxes. Exported at opset 11 with a
  dynamic batch and dynamic H/W as insightface's scrfd2onnx.py does (GroupNorm becomes Reshape ->
  InstanceNormalization -> Reshape -> Mul -> Add): ``score_8/16/32`` (Transpose, Reshape [B, -1, 1], Sigmoid),
  ``bbox_8/16/32`` ([B, -1, 4]). Input ``input.1`` RGB, (pixel - 127.5) / 128.
- **SCRFD-500M-bnkps** (``scrfd_500m_bnkps.py``, insightface's det_500m.onnx): insightface's ``MobileNetV1``
  (3x3/2 conv 16, then depthwise-separable blocks of 16/40/72/152/288 channels in stages of 2/3/2/6), the same
  PAFPN 16 wide, ``SCRFDHead`` per stride with depthwise-separable convs and **BatchNorm**, and keypoints:
  outputs ``score_*``, ``bbox_*``, ``kps_*`` ([B, -1, 10]), dynamic batch and H/W.

Reduced sizes for CI: YuNet 160x128 (its full widths: 75k parameters), SCRFD 128x128 with the head 32 wide.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402  (also puts tests/zoo and benchmarks on sys.path)
import faces as zoo_faces  # noqa: E402

zoo_data = zoo_export.zoo_data
SEED = 5151

YUNET_DATA = {"type": "image", "color": "BGR", "scale": 1.0, "mean": [0.0] * 3, "std": None}
SCRFD_DATA = {"type": "image", "color": "RGB", "scale": 1.0, "mean": [127.5] * 3, "std": [128.0] * 3}


# ------------------------------------------------------------------------------------------------ YuNet


class ConvDPUnit(nn.Module):
    """libfacedetection.train's ConvDPUnit: 1x1 conv, depthwise 3x3 conv (both with bias) [, BN, ReLU]."""

    def __init__(self, cin: int, cout: int, bn_relu: bool = True):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 1)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, groups=cout)
        self.bn = nn.BatchNorm2d(cout) if bn_relu else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv2(self.conv1(x))
        return F.relu(self.bn(x)) if self.bn is not None else x


class YuNet(nn.Module):
    """YuNet-n: YuNetBackbone, TFPN, YuNet_Head (shared_stacked_convs 1), ONNX-export forward."""

    def __init__(self):
        super().__init__()
        self.head_conv = nn.Conv2d(3, 16, 3, 2, 1)
        self.head_bn = nn.BatchNorm2d(16)
        self.head_dp = ConvDPUnit(16, 16)
        chans = [(16, 64), (64, 64), (64, 64), (64, 64), (64, 64)]
        self.blocks = nn.ModuleList(nn.Sequential(ConvDPUnit(a, a), ConvDPUnit(a, b)) for a, b in chans)
        self.lateral = nn.ModuleList(ConvDPUnit(64, 64) for _ in range(3))
        self.shared = nn.ModuleList(ConvDPUnit(64, 64) for _ in range(3))
        self.heads = nn.ModuleDict(
            {
                name: nn.ModuleList(ConvDPUnit(64, width, False) for _ in range(3))
                for name, width in (("cls", 1), ("obj", 1), ("bbox", 4), ("kps", 10))
            }
        )
        zoo_faces._trained_like(self)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.head_dp(F.relu(self.head_bn(self.head_conv(x))))
        x = F.max_pool2d(x, 2)
        feats = []
        for i, block in enumerate(self.blocks, start=1):
            x = block(x)
            if i >= 3:
                feats.append(x)
            if i in (2, 3, 4):
                x = F.max_pool2d(x, 2)
        for i in (2, 1):  # TFPN top-down
            feats[i] = self.lateral[i](feats[i])
            feats[i - 1] = feats[i - 1] + F.interpolate(feats[i], scale_factor=2.0, mode="nearest")
        feats[0] = self.lateral[0](feats[0])
        feats = [conv(f) for conv, f in zip(self.shared, feats, strict=True)]
        outs: dict[str, list[torch.Tensor]] = {}
        for name, convs in self.heads.items():
            for conv, f in zip(convs, feats, strict=True):
                p = conv(f)
                p = p.permute(0, 2, 3, 1).reshape(p.shape[0], -1, p.shape[1])
                outs.setdefault(name, []).append(p.sigmoid() if name in ("cls", "obj") else p)
        return tuple(outs["cls"] + outs["obj"] + outs["bbox"] + outs["kps"])


# ------------------------------------------------------------------------------------------------ SCRFD


def _conv_bn_relu(cin: int, cout: int, stride: int = 1, relu: bool = True) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if relu else nn.Sequential(*layers)


class BasicBlock(nn.Module):
    """mmdet's ResNet BasicBlock with ResNetV1e's ``avg_down`` shortcut (AvgPool, 1x1 conv, BN)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = _conv_bn_relu(cin, cout, stride)
        self.conv2 = _conv_bn_relu(cout, cout, relu=False)
        self.down = None
        if stride != 1 or cin != cout:
            pool = (
                nn.AvgPool2d(stride, stride, ceil_mode=True, count_include_pad=False) if stride > 1 else None
            )
            conv = [nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout)]
            self.down = nn.Sequential(*([pool] if pool else []), *conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.down(x) if self.down is not None else x
        return F.relu(self.conv2(self.conv1(x)) + identity)


class ResNetV1e(nn.Module):
    """ResNetV1e depth 0 with SCRFD-2.5G's block_cfg: deep stem, BasicBlock stages (3, 5, 3, 2)."""

    def __init__(self, planes=(24, 48, 48, 80), blocks=(3, 5, 3, 2), base: int = 24):
        super().__init__()
        self.stem = nn.Sequential(
            _conv_bn_relu(3, base // 2, 2),
            _conv_bn_relu(base // 2, base // 2),
            _conv_bn_relu(base // 2, base),
        )
        stages, cin = [], base
        for i, (p, n) in enumerate(zip(planes, blocks, strict=True)):
            stride = 1 if i == 0 else 2
            stages.append(
                nn.Sequential(
                    *[BasicBlock(cin if j == 0 else p, p, stride if j == 0 else 1) for j in range(n)]
                )
            )
            cin = p
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = F.max_pool2d(self.stem(x), 3, 2, 1)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs


def _dw_block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
        nn.BatchNorm2d(cin),
        nn.ReLU(inplace=True),
        nn.Conv2d(cin, cout, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class MobileNetV1(nn.Module):
    """insightface's SCRFD MobileNetV1 (block_cfg stage_blocks (2, 3, 2, 6), stage_planes 16..288)."""

    def __init__(self, planes=(16, 16, 40, 72, 152, 288), blocks=(2, 3, 2, 6)):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn_relu(3, planes[0], 2), _dw_block(planes[0], planes[1], 1))
        stages, cin = [], planes[1]
        for p, n in zip(planes[2:], blocks, strict=True):
            stages.append(
                nn.Sequential(*[_dw_block(cin if j == 0 else p, p, 2 if j == 0 else 1) for j in range(n)])
            )
            cin = p
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs


class PAFPN(nn.Module):
    """mmdet's PAFPN (start_level 1, num_outs 3, no norm, no activation)."""

    def __init__(self, cins: list[int], cout: int):
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(c, cout, 1) for c in cins)
        self.fpn = nn.ModuleList(nn.Conv2d(cout, cout, 3, 1, 1) for _ in cins)
        self.down = nn.ModuleList(nn.Conv2d(cout, cout, 3, 2, 1) for _ in cins[1:])
        self.pafpn = nn.ModuleList(nn.Conv2d(cout, cout, 3, 1, 1) for _ in cins[1:])

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        lat = [conv(f) for conv, f in zip(self.lateral, feats, strict=True)]
        for i in range(len(lat) - 1, 0, -1):
            lat[i - 1] = lat[i - 1] + F.interpolate(lat[i], size=lat[i - 1].shape[2:], mode="nearest")
        inter = [conv(f) for conv, f in zip(self.fpn, lat, strict=True)]
        for i, conv in enumerate(self.down):
            inter[i + 1] = inter[i + 1] + conv(inter[i])
        return [inter[0]] + [conv(f) for conv, f in zip(self.pafpn, inter[1:], strict=True)]


def _head_conv(cin: int, cout: int, norm: str) -> nn.Sequential:
    if norm == "gn":  # ConvModule(3x3, norm_cfg=GN(num_groups=16)): conv without bias, GroupNorm, ReLU
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.GroupNorm(16, cout), nn.ReLU())
    # DepthwiseSeparableConvModule with BN after both convs (the _bnkps configs' dw_conv)
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, 1, 1, groups=cin, bias=False),
        nn.BatchNorm2d(cin),
        nn.ReLU(),
        nn.Conv2d(cin, cout, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
    )


class SCRFD(nn.Module):
    """SCRFD: backbone, PAFPN, SCRFDHead (cls_reg_share, 2 anchors, Scale per stride), ONNX-export forward."""

    def __init__(self, variant: str, full: bool):
        super().__init__()
        w = 1 if full else 2  # reduced: half the widths (the file stays under 1.5 MB)
        feat, stacked = 64 // w, 2
        if variant == "2.5g":
            self.backbone: nn.Module = ResNetV1e(tuple(p // w for p in (24, 48, 48, 80)), base=24 // w)
            cins, neck, norm, share, self.kps = [48 // w, 48 // w, 80 // w], 24, "gn", True, False
        else:
            self.backbone = MobileNetV1(tuple(p // w for p in (16, 16, 40, 72, 152, 288)))
            cins, neck, norm, share, self.kps = [72 // w, 152 // w, 288 // w], 16, "bn", False, True
        self.neck = PAFPN(cins, neck)
        levels = 1 if share else 3

        def tower() -> nn.Sequential:
            return nn.Sequential(*[_head_conv(neck if i == 0 else feat, feat, norm) for i in range(stacked)])

        self.towers = nn.ModuleList(tower() for _ in range(levels))
        self.cls = nn.ModuleList(nn.Conv2d(feat, 2, 3, 1, 1) for _ in range(levels))
        self.reg = nn.ModuleList(nn.Conv2d(feat, 8, 3, 1, 1) for _ in range(levels))
        self.kps_conv = (
            nn.ModuleList(nn.Conv2d(feat, 20, 3, 1, 1) for _ in range(levels)) if self.kps else None
        )
        self.scales = nn.Parameter(torch.tensor([1.0, 1.05, 0.95]))
        zoo_faces._trained_like(self)
        with torch.no_grad():
            for m in self.modules():
                # trained GroupNorm affines: near-unit scales, positive shifts (like _trained_like's BatchNorms)
                if isinstance(m, nn.GroupNorm):
                    m.weight.uniform_(0.8, 1.2)
                    m.bias.fill_(0.5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        feats = self.neck(self.backbone(x)[-3:] if self.kps else self.backbone(x)[1:])
        scores, boxes, points = [], [], []
        for i, f in enumerate(feats):
            j = 0 if len(self.towers) == 1 else i
            t = self.towers[j](f)
            b = t.shape[0]
            cls = self.cls[j](t).permute(0, 2, 3, 1).reshape(b, -1, 1).sigmoid()
            reg = (self.reg[j](t) * self.scales[i]).permute(0, 2, 3, 1).reshape(b, -1, 4)
            scores.append(cls)
            boxes.append(reg)
            if self.kps_conv is not None:
                points.append(self.kps_conv[j](t).permute(0, 2, 3, 1).reshape(b, -1, 10))
        return tuple(scores + boxes + points)


# ------------------------------------------------------------------------------------------------ specs


def _levels(*names: str) -> list[str]:
    return [f"{n}_{s}" for n in names for s in (8, 16, 32)]


def specs() -> list[zoo_export.Spec]:
    Spec = zoo_export.Spec

    def hw(reduced: tuple[int, int], full: tuple[int, int], name: str):
        return lambda is_full: [(name, [1, 3, *(full if is_full else reduced)])]

    scrfd_dynamic = {"input.1": {0: "batch", 2: "height", 3: "width"}}
    return [
        Spec(
            "yunet",
            "YuNet (OpenCV face_detection_yunet)",
            "detector",
            13,
            lambda full: YuNet(),
            hw((128, 160), (640, 640), "input"),
            _levels("cls", "obj", "bbox", "kps"),
            data=dict(YUNET_DATA),
            note="YuNet-n: ConvDPUnit (1x1 + depthwise 3x3 with bias, BN, ReLU) backbone with MaxPool, TFPN (nearest "
            "x2 Resize, Add), cls/obj/bbox/kps heads per stride (Transpose, Reshape, Sigmoid): the 2023mar outputs",
        ),
        Spec(
            "yunet_dynamic",
            "YuNet (OpenCV face_detection_yunet), dynamic input",
            "detector",
            11,
            lambda full: YuNet(),
            hw((128, 160), (640, 640), "input"),
            _levels("cls", "obj", "bbox", "kps"),
            data=dict(YUNET_DATA),
            note="the same YuNet-n at opset 11 with a dynamic batch and H/W (fixed with --input-shape): the x2 "
            "nearest Resize from runtime shapes",
            dynamic_axes={"input": {0: "batch", 2: "height", 3: "width"}},
        ),
        Spec(
            "scrfd_2_5g",
            "SCRFD-2.5G (GroupNorm head)",
            "detector",
            11,
            lambda full: SCRFD("2.5g", full),
            hw((128, 128), (640, 640), "input.1"),
            _levels("score", "bbox"),
            data=dict(SCRFD_DATA),
            note="ResNetV1e BasicBlocks (deep stem, AvgPool shortcuts), PAFPN, shared head with GroupNorm(16) as "
            "Reshape/InstanceNormalization/Reshape/Mul/Add, Scale per stride; dynamic batch and H/W (opset 11)",
            dynamic_axes=scrfd_dynamic,
        ),
        Spec(
            "scrfd_500m_bnkps",
            "SCRFD-500M-bnkps",
            "detector",
            11,
            lambda full: SCRFD("500m", full),
            hw((128, 128), (640, 640), "input.1"),
            _levels("score", "bbox", "kps"),
            data=dict(SCRFD_DATA),
            note="MobileNetV1 backbone, PAFPN, per-stride depthwise-separable BN heads with keypoints; dynamic batch "
            "and H/W (opset 11)",
            dynamic_axes=scrfd_dynamic,
        ),
    ]


#: In benchmarks/zoo.py only ("ci": false): their families run in CI as ``yunet`` and ``scrfd_2_5g`` (the suite's
#: time budget); the dynamic YuNet differs by its Shape-driven Resize, SCRFD-500M by per-stride BN heads and kps.
NOT_CI = frozenset({"yunet_dynamic", "scrfd_500m_bnkps"})


def _finish(spec: zoo_export.Spec, entry: dict, full: bool) -> None:
    if spec.dynamic_axes:  # the static shape the zoo runs at
        entry["extra_args"] = zoo_export.input_shape_args(spec, full)
    if spec.name in NOT_CI:
        entry["ci"] = False


def main(argv: list[str] | None = None) -> int:
    return zoo_export.build_main(argv, __doc__, specs(), SEED, finish=_finish)


if __name__ == "__main__":
    raise SystemExit(main())
