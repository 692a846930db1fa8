"""Issue 12 probe round 8p: PaddlePaddle exports beyond classifiers (PaddleSeg, PaddleDetection, PaddleOCR,
PaddleClas), written with paddle.nn after the repos' model code (seeded, BatchNorm statistics from real photos),
paddle.jit.save + paddle2onnx at opsets 11 and 16, batch (and H/W where the repos export them dynamic) written as
``dim_value -1`` as older paddle2onnx writes them; the manifest entries fix them with ``--input-shape``. Needs the
Paddle venv (paddlepaddle 3.3.1, paddle2onnx 2.1.0):

    /work/venv-paddle8/bin/python benchmarks/zoo/probe_paddle2.py --out benchmarks/.zoo/probe8p
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe8p/zoo.json --no-shared --workers 1
    python benchmarks/zoo/probe_paddle2.py --run benchmarks/.zoo/probe8p   # the 3-input PP-YOLOE (own data)

- PaddleSeg: **PP-LiteSeg** (STDC backbone: CatBottleneck with the AvgPool skip, SPPM with adaptive pools 1/2/4,
  UAFM spatial attention from channel mean/max, bilinear Resize to the lateral's size), **PP-HumanSeg-lite**
  (shuffle blocks, bilinear decoder) as logits and with PaddleSeg's ``--output_op argmax`` (int32, keepdim) and an
  int64 argmax, **BiSeNetV2** (detail branch, stem with MaxPool, gather-and-expansion, context embedding, bilateral
  guided aggregation);
- PaddleDetection: **PP-YOLOE-s style** (CSPResNet with RepVGG blocks and ESE, CSP-PAN with SPP, ET-head: ESE
  stems, DFL Softmax + 1x1 projection conv, anchor points from Range/meshgrid of the feature shapes, decode clipped
  to ``im_shape`` and divided by ``scale_factor``: three inputs, as PaddleDetection exports with ``exclude_nms``),
  **PicoDet with multiclass_nms3** (only to check the typed refusal), **PP-TinyPose** (Lite-HRNet style:
  channel shuffle, cross-resolution weighting with adaptive pools, nearest upsampling fuse, 17 heatmaps);
- PaddleOCR: **PP-OCRv3 det** (MobileNetV3 backbone, RSE-FPN neck, DB head with two ConvTranspose and Sigmoid),
  **PP-OCRv3 rec** (MobileNetV1Enhance with (2, 1) strides, SVTR global mixing: LayerNorm, qkv Linear,
  reshape with 0, MatMul/Softmax attention, Swish MLP; CTC Linear + Softmax);
- PaddleClas: **ResNet50_vd** (depths 1 and widths 1/4: deep stem, AvgPool shortcut), **ESNet** (ES blocks:
  channel split/shuffle, SE, ghost-style), ``paddle.vision.models`` **ShuffleNetV2-swish**, **SqueezeNet1.1**,
  **DenseNet** (reduced growth), **GoogLeNet** (three outputs with its aux heads).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import paddle_export as pe  # noqa: E402
from probe_paddle_backbones import minus_one_dims  # noqa: E402

SEED = 8808
OCR_TEXT = {**pe.PPOCR, "text": True}


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    kind: str
    build: object  # () -> paddle.nn.Layer
    hw: tuple[int, int]
    dynamic_hw: bool = True
    data: dict = field(default_factory=lambda: pe.IMAGENET)
    note: str = ""
    opsets: tuple[int, ...] = (11, 16)


def _nn():
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    return paddle, F, nn


# --------------------------------------------------------------------------------------------- common blocks
def _blocks():
    paddle, F, nn = _nn()

    class ConvBN(nn.Layer):
        def __init__(self, cin, cout, k=3, stride=1, groups=1, act="relu", padding=None):
            super().__init__()
            pad = (k - 1) // 2 if padding is None else padding
            self.conv = nn.Conv2D(cin, cout, k, stride, pad, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            acts = {"relu": nn.ReLU, "swish": nn.Swish, "hardswish": nn.Hardswish, None: nn.Identity}
            self.act = acts[act]()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class SE(nn.Layer):
        def __init__(self, c, r=4, gate="hardsigmoid"):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.c1 = nn.Conv2D(c, max(c // r, 4), 1)
            self.c2 = nn.Conv2D(max(c // r, 4), c, 1)
            self.gate = nn.Hardsigmoid() if gate == "hardsigmoid" else nn.Sigmoid()

        def forward(self, x):
            return x * self.gate(self.c2(F.relu(self.c1(self.pool(x)))))

    def shuffle(x, groups=2):
        # PaddleClas / PaddleDetection channel_shuffle: reshape with the static channel count
        b, c, h, w = paddle.shape(x)[0], x.shape[1], paddle.shape(x)[2], paddle.shape(x)[3]
        x = paddle.reshape(x, [b, groups, c // groups, h, w])
        x = paddle.transpose(x, [0, 2, 1, 3, 4])
        return paddle.reshape(x, [b, c, h, w])

    def resize_to(x, ref, mode="bilinear"):
        kw = {"align_corners": False} if mode == "bilinear" else {}
        return F.interpolate(x, paddle.shape(ref)[2:], mode=mode, **kw)

    return ConvBN, SE, shuffle, resize_to


# --------------------------------------------------------------------------------------------- PaddleSeg
def pp_liteseg():
    paddle, F, nn = _nn()
    ConvBN, _, _, resize_to = _blocks()

    class CatBottleneck(nn.Layer):  # STDC
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.stride = stride
            self.c0 = ConvBN(cin, cout // 2, 1)
            if stride == 2:
                self.avd = ConvBN(cout // 2, cout // 2, 3, 2, groups=cout // 2, act=None)
                self.skip = nn.AvgPool2D(3, 2, 1)
            self.c1 = ConvBN(cout // 2, cout // 4, 3)
            self.c2 = ConvBN(cout // 4, cout // 8, 3)
            self.c3 = ConvBN(cout // 8, cout // 8, 3)

        def forward(self, x):
            o0 = self.c0(x)
            o1 = self.c1(self.avd(o0) if self.stride == 2 else o0)
            o2 = self.c2(o1)
            o3 = self.c3(o2)
            return paddle.concat([self.skip(o0) if self.stride == 2 else o0, o1, o2, o3], 1)

    class SPPM(nn.Layer):
        def __init__(self, cin, mid, cout, bins=(1, 2, 4)):
            super().__init__()
            self.stages = nn.LayerList(
                [nn.Sequential(nn.AdaptiveAvgPool2D(b), ConvBN(cin, mid, 1)) for b in bins]
            )
            self.out = ConvBN(mid, cout, 3)

        def forward(self, x):
            y = None
            for s in self.stages:
                z = resize_to(s(x), x)
                y = z if y is None else y + z
            return self.out(y)

    class UAFM(nn.Layer):  # UAFM_SpAtten
        def __init__(self, c_low, c_high, cout):
            super().__init__()
            self.low = ConvBN(c_low, c_high, 3)
            self.att = nn.Sequential(ConvBN(4, 2, 3), ConvBN(2, 1, 3, act=None))
            self.out = ConvBN(c_high, cout, 3)

        def forward(self, low, high):
            x = self.low(low)
            y = resize_to(high, x)
            stats = [paddle.mean(x, 1, keepdim=True), paddle.max(x, 1, keepdim=True),
                     paddle.mean(y, 1, keepdim=True), paddle.max(y, 1, keepdim=True)]  # fmt: skip
            a = F.sigmoid(self.att(paddle.concat(stats, 1)))
            return self.out(x * a + y * (1 - a))

    class PPLiteSeg(nn.Layer):
        def __init__(self, classes=8):
            super().__init__()
            self.stem = nn.Sequential(ConvBN(3, 16, 3, 2), ConvBN(16, 32, 3, 2))
            self.s3 = nn.Sequential(CatBottleneck(32, 64, 2), CatBottleneck(64, 64, 1))
            self.s4 = nn.Sequential(CatBottleneck(64, 128, 2), CatBottleneck(128, 128, 1))
            self.s5 = nn.Sequential(CatBottleneck(128, 256, 2), CatBottleneck(256, 256, 1))
            self.sppm = SPPM(256, 64, 64)
            self.f4 = UAFM(128, 64, 48)
            self.f3 = UAFM(64, 48, 32)
            self.head = nn.Sequential(ConvBN(32, 32, 3), nn.Conv2D(32, classes, 1))

        def forward(self, x):
            f3 = self.s3(self.stem(x))
            f4 = self.s4(f3)
            f5 = self.s5(f4)
            y = self.f3(f3, self.f4(f4, self.sppm(f5)))
            return resize_to(self.head(y), x)

    return PPLiteSeg()


def humanseg_lite(output_op=None):
    paddle, F, nn = _nn()
    ConvBN, _, shuffle, resize_to = _blocks()

    class Shuffle(nn.Layer):
        def __init__(self, c, stride):
            super().__init__()
            self.stride = stride
            half = c // 2
            cin = c if stride == 2 else half
            self.branch = nn.Sequential(ConvBN(cin, half, 1), ConvBN(half, half, 3, stride, groups=half, act=None),
                                        ConvBN(half, half, 1))  # fmt: skip
            if stride == 2:
                self.short = nn.Sequential(ConvBN(c, c, 3, 2, groups=c, act=None), ConvBN(c, half, 1))

        def forward(self, x):
            if self.stride == 2:
                y = paddle.concat([self.short(x), self.branch(x)], 1)
            else:
                a, b = paddle.split(x, 2, axis=1)
                y = paddle.concat([a, self.branch(b)], 1)
            return shuffle(y)

    class HumanSegLite(nn.Layer):
        def __init__(self, classes=2):
            super().__init__()
            self.stem = nn.Sequential(ConvBN(3, 24, 3, 2), ConvBN(24, 24, 3, 1, groups=24), ConvBN(24, 48, 1))
            self.d1 = nn.Sequential(Shuffle(48, 2), Shuffle(48, 1))
            self.d2 = nn.Sequential(Shuffle(48, 2), Shuffle(48, 1), Shuffle(48, 1))
            self.d3 = nn.Sequential(Shuffle(48, 2), Shuffle(48, 1))
            self.up2 = ConvBN(48 + 48, 48, 1)
            self.up1 = ConvBN(48 + 48, 32, 1)
            self.out = nn.Sequential(ConvBN(32, 32, 3, groups=32), nn.Conv2D(32, classes, 1))

        def forward(self, x):
            s = self.stem(x)
            a = self.d1(s)
            b = self.d2(a)
            c = self.d3(b)
            y = self.up2(paddle.concat([resize_to(c, b), b], 1))
            y = self.up1(paddle.concat([resize_to(y, s), s], 1))
            logit = resize_to(self.out(y), x)
            if output_op == "argmax":  # PaddleSeg export.py --output_op argmax
                return paddle.argmax(logit, axis=1, keepdim=True, dtype="int32")
            if output_op == "argmax64":
                return paddle.argmax(logit, axis=1)
            if output_op == "softmax":
                return F.softmax(logit, axis=1)
            return logit

    return HumanSegLite()


def bisenetv2():
    paddle, F, nn = _nn()
    ConvBN, _, _, resize_to = _blocks()

    class Stem(nn.Layer):
        def __init__(self, c):
            super().__init__()
            self.conv = ConvBN(3, c, 3, 2)
            self.left = nn.Sequential(ConvBN(c, c // 2, 1), ConvBN(c // 2, c, 3, 2))
            self.right = nn.MaxPool2D(3, 2, 1)
            self.fuse = ConvBN(2 * c, c, 3)

        def forward(self, x):
            x = self.conv(x)
            return self.fuse(paddle.concat([self.left(x), self.right(x)], 1))

    class GE(nn.Layer):  # gather-and-expansion
        def __init__(self, cin, cout, stride, e=6):
            super().__init__()
            mid = cin * e
            layers = [ConvBN(cin, cin, 3), ConvBN(cin, mid, 3, stride, groups=cin, act=None)]
            if stride == 2:
                layers.append(ConvBN(mid, mid, 3, 1, groups=mid, act=None))
            layers.append(ConvBN(mid, cout, 1, act=None))
            self.body = nn.Sequential(*layers)
            self.short = (nn.Sequential(ConvBN(cin, cin, 3, 2, groups=cin, act=None), ConvBN(cin, cout, 1, act=None))
                          if stride == 2 else nn.Identity())  # fmt: skip

        def forward(self, x):
            return F.relu(self.body(x) + self.short(x))

    class CE(nn.Layer):  # context embedding
        def __init__(self, c):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.bn = nn.BatchNorm2D(c)
            self.gap = ConvBN(c, c, 1)
            self.last = ConvBN(c, c, 3)

        def forward(self, x):
            return self.last(self.gap(self.bn(self.pool(x))) + x)

    class BGA(nn.Layer):
        def __init__(self, c):
            super().__init__()
            self.d_keep = nn.Sequential(ConvBN(c, c, 3, groups=c, act=None), nn.Conv2D(c, c, 1))
            self.d_down = nn.Sequential(ConvBN(c, c, 3, 2, act=None), nn.AvgPool2D(3, 2, 1))
            self.s_up = ConvBN(c, c, 3, act=None)
            self.s_keep = nn.Sequential(ConvBN(c, c, 3, groups=c, act=None), nn.Conv2D(c, c, 1))
            self.out = ConvBN(c, c, 3)

        def forward(self, d, s):
            left = self.d_keep(d) * F.sigmoid(resize_to(self.s_up(s), d))
            right = self.d_down(d) * F.sigmoid(self.s_keep(s))
            return self.out(left + resize_to(right, d))

    class BiSeNetV2(nn.Layer):
        def __init__(self, classes=8):
            super().__init__()
            c1, c2, c3 = 16, 16, 32
            self.detail = nn.Sequential(ConvBN(3, c1, 3, 2), ConvBN(c1, c1, 3), ConvBN(c1, c2, 3, 2),
                                        ConvBN(c2, c2, 3), ConvBN(c2, c3, 3, 2), ConvBN(c3, c3, 3))  # fmt: skip
            self.semantic = nn.Sequential(Stem(8), GE(8, 16, 2), GE(16, 16, 1), GE(16, 32, 2), GE(32, 32, 1),
                                          GE(32, 32, 2), GE(32, 32, 1), CE(32))  # fmt: skip
            self.bga = BGA(c3)
            self.head = nn.Sequential(ConvBN(c3, 32, 3), nn.Conv2D(32, classes, 1))

        def forward(self, x):
            return resize_to(self.head(self.bga(self.detail(x), self.semantic(x))), x)

    return BiSeNetV2()


# --------------------------------------------------------------------------------------------- PaddleDetection
YOLOE_CLASSES, YOLOE_REG = 8, 16
YOLOE_STRIDES = (8, 16, 32)


def ppyoloe():
    paddle, F, nn = _nn()
    ConvBN, _, _, resize_to = _blocks()

    class RepVgg(nn.Layer):  # training form: 3x3 + 1x1 branches (an export without convert_to_deploy)
        def __init__(self, c):
            super().__init__()
            self.c3 = ConvBN(c, c, 3, act=None)
            self.c1 = ConvBN(c, c, 1, act=None)

        def forward(self, x):
            return F.swish(self.c3(x) + self.c1(x))

    class ESE(nn.Layer):  # EffectiveSELayer (hardsigmoid)
        def __init__(self, c):
            super().__init__()
            self.fc = nn.Conv2D(c, c, 1)

        def forward(self, x):
            return x * F.hardsigmoid(self.fc(x.mean((2, 3), keepdim=True)))

    class CSPResStage(nn.Layer):
        def __init__(self, cin, cout, n, stride=2):
            super().__init__()
            mid = (cin + cout) // 2
            self.down = ConvBN(cin, mid, 3, stride, act="swish")
            self.c1 = ConvBN(mid, mid // 2, 1, act="swish")
            self.c2 = ConvBN(mid, mid // 2, 1, act="swish")
            self.blocks = nn.LayerList([nn.Sequential(ConvBN(mid // 2, mid // 2, 3, act="swish"), RepVgg(mid // 2))
                                        for _ in range(n)])  # fmt: skip
            self.attn = ESE(mid)
            self.c3 = ConvBN(mid, cout, 1, act="swish")

        def forward(self, x):
            x = self.down(x)
            y1, y2 = self.c1(x), self.c2(x)
            for b in self.blocks:
                y2 = y2 + b(y2)  # BasicBlock with shortcut
            return self.c3(self.attn(paddle.concat([y1, y2], 1)))

    class CSPStage(nn.Layer):  # CustomCSPPAN stage (with SPP at the top)
        def __init__(self, cin, cout, spp=False):
            super().__init__()
            mid = cout // 2
            self.c1 = ConvBN(cin, mid, 1, act="swish")
            self.c2 = ConvBN(cin, mid, 1, act="swish")
            self.block = nn.Sequential(ConvBN(mid, mid, 3, act="swish"), RepVgg(mid))
            self.spp = ConvBN(4 * mid, mid, 1, act="swish") if spp else None
            self.c3 = ConvBN(2 * mid, cout, 1, act="swish")

        def forward(self, x):
            y1, y2 = self.c1(x), self.block(self.c2(x))
            if self.spp is not None:
                pools = [F.max_pool2d(y2, k, 1, k // 2) for k in (5, 9, 13)]
                y2 = self.spp(paddle.concat([y2, *pools], 1))
            return self.c3(paddle.concat([y1, y2], 1))

    class ESEStem(nn.Layer):  # ET-head's ESEAttn
        def __init__(self, c):
            super().__init__()
            self.fc = nn.Conv2D(c, c, 1)
            self.conv = ConvBN(c, c, 1, act="swish")

        def forward(self, feat, avg):
            return self.conv(feat * F.sigmoid(self.fc(avg)))

    class PPYOLOE(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(ConvBN(3, 16, 3, 2, act="swish"), ConvBN(16, 16, 3, act="swish"),
                                      ConvBN(16, 32, 3, act="swish"))  # fmt: skip
            self.stages = nn.LayerList(
                [CSPResStage(a, b, 1) for a, b in ((32, 32), (32, 64), (64, 128), (128, 256))]
            )
            # neck: top-down then bottom-up on C3 (64), C4 (128), C5 (256) -> 48, 96, 192
            self.top = CSPStage(256, 192, spp=True)
            self.lat4 = ConvBN(192, 96, 1, act="swish")
            self.td4 = CSPStage(96 + 128, 96)
            self.lat3 = ConvBN(96, 48, 1, act="swish")
            self.td3 = CSPStage(48 + 64, 48)
            self.down3 = ConvBN(48, 48, 3, 2, act="swish")
            self.bu4 = CSPStage(48 + 96, 96)
            self.down4 = ConvBN(96, 96, 3, 2, act="swish")
            self.bu5 = CSPStage(96 + 192, 192)
            chans = (48, 96, 192)
            self.stem_cls = nn.LayerList([ESEStem(c) for c in chans])
            self.stem_reg = nn.LayerList([ESEStem(c) for c in chans])
            self.pred_cls = nn.LayerList([nn.Conv2D(c, YOLOE_CLASSES, 3, padding=1) for c in chans])
            self.pred_reg = nn.LayerList([nn.Conv2D(c, 4 * (YOLOE_REG + 1), 3, padding=1) for c in chans])
            self.proj = nn.Conv2D(YOLOE_REG + 1, 1, 1, bias_attr=False)
            self.proj.weight.set_value(
                np.linspace(0, YOLOE_REG, YOLOE_REG + 1, dtype="float32").reshape(1, -1, 1, 1)
            )
            self.proj.weight.stop_gradient = True

        def forward(self, image, im_shape, scale_factor):
            x = self.stem(image)
            feats = []
            for i, s in enumerate(self.stages):
                x = s(x)
                if i >= 1:
                    feats.append(x)
            c3, c4, c5 = feats
            p5 = self.top(c5)
            up = resize_to(self.lat4(p5), c4, "nearest")
            p4 = self.td4(paddle.concat([up, c4], 1))
            up = resize_to(self.lat3(p4), c3, "nearest")
            p3 = self.td3(paddle.concat([up, c3], 1))
            n4 = self.bu4(paddle.concat([self.down3(p3), p4], 1))
            n5 = self.bu5(paddle.concat([self.down4(n4), p5], 1))
            scores, dists, points, strides = [], [], [], []
            for i, (feat, stride) in enumerate(zip((p3, n4, n5), YOLOE_STRIDES)):  # noqa: B905
                shape = paddle.shape(feat)
                b, h, w = shape[0], shape[2], shape[3]
                avg = F.adaptive_avg_pool2d(feat, (1, 1))
                cls = self.pred_cls[i](self.stem_cls[i](feat, avg) + feat)
                reg = self.pred_reg[i](self.stem_reg[i](feat, avg))
                reg = reg.reshape([-1, 4, YOLOE_REG + 1, h * w]).transpose([0, 2, 3, 1])
                reg = self.proj(F.softmax(reg, axis=1))  # [b, 1, l, 4]
                scores.append(F.sigmoid(cls).reshape([b, YOLOE_CLASSES, h * w]))
                dists.append(reg.reshape([b, h * w, 4]))
                sx = (paddle.arange(end=w) + 0.5) * stride
                sy = (paddle.arange(end=h) + 0.5) * stride
                gy, gx = paddle.meshgrid(sy, sx)
                points.append(paddle.stack([gx, gy], -1).reshape([-1, 2]).astype("float32"))
                strides.append(paddle.full([h * w, 1], stride, "float32"))
            dist = paddle.concat(dists, 1) * paddle.concat(strides, 0)
            pts = paddle.concat(points, 0)
            lt, rb = paddle.split(dist, 2, -1)
            boxes = paddle.concat([pts - lt, pts + rb], -1)
            hw = paddle.flip(im_shape, [1])  # [w, h]
            boxes = paddle.minimum(
                paddle.maximum(boxes, paddle.zeros([1])), paddle.tile(hw, [1, 2]).unsqueeze(1)
            )
            sy_, sx_ = paddle.split(scale_factor, 2, -1)
            scale = paddle.concat([sx_, sy_, sx_, sy_], -1).reshape([-1, 1, 4])
            return boxes / scale, paddle.concat(scores, -1)

    return PPYOLOE()


def picodet_nms():
    """probe_picodet's decoded PicoDet + PaddleDetection's multiclass_nms3 (keep_top_k 100)."""
    paddle, _, _ = _nn()
    import probe_picodet

    class WithNMS(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.det = probe_picodet.build(True)

        def forward(self, x):
            boxes, scores = self.det(x)
            out, num, _ = paddle._C_ops.multiclass_nms3(boxes, scores, None, 0.025, 1000, 100, 0.6, True, 1.0, -1,
                                                       True)  # fmt: skip
            return out, num

    return WithNMS()


def tinypose():
    paddle, F, nn = _nn()
    ConvBN, _, shuffle, resize_to = _blocks()

    class CrossResolutionWeighting(nn.Layer):
        def __init__(self, chans, r=4):
            super().__init__()
            self.chans = chans
            total = sum(chans)
            self.c1 = ConvBN(total, total // r, 1)
            self.c2 = nn.Conv2D(total // r, total, 1)

        def forward(self, xs):
            # adaptive pools to the smallest branch's size; paddle2onnx 2.1 aborts on them ("ksize's type is not
            # constant"), so the equal fixed pools (each branch halves the resolution)
            n = len(xs)
            out = [F.avg_pool2d(s, 2 ** (n - 1 - i), 2 ** (n - 1 - i)) for i, s in enumerate(xs[:-1])] + [
                xs[-1]
            ]
            out = F.sigmoid(self.c2(self.c1(paddle.concat(out, 1))))
            out = paddle.split(out, self.chans, axis=1)
            return [s * resize_to(a, s, "nearest") for s, a in zip(xs, out)]  # noqa: B905

    class ConditionalChannelWeighting(nn.Layer):
        def __init__(self, chans):
            super().__init__()
            half = [c // 2 for c in chans]
            self.crw = CrossResolutionWeighting(half)
            self.dw = nn.LayerList([ConvBN(c, c, 3, groups=c, act=None) for c in half])
            self.sw = nn.LayerList([nn.Sequential(nn.AdaptiveAvgPool2D(1), nn.Conv2D(c, c // 2, 1), nn.ReLU(),
                                                  nn.Conv2D(c // 2, c, 1), nn.Sigmoid()) for c in half])  # fmt: skip

        def forward(self, xs):
            pairs = [paddle.split(x, 2, axis=1) for x in xs]
            a = [p[0] for p in pairs]
            b = self.crw([p[1] for p in pairs])
            b = [dw(t) for dw, t in zip(self.dw, b)]  # noqa: B905
            b = [t * sw(t) for sw, t in zip(self.sw, b)]  # noqa: B905
            return [shuffle(paddle.concat([x, y], 1)) for x, y in zip(a, b)]  # noqa: B905

    class LiteHRNet(nn.Layer):
        def __init__(self, joints=17):
            super().__init__()
            self.stem = nn.Sequential(
                ConvBN(3, 16, 3, 2), ConvBN(16, 16, 3, 2, groups=16, act=None), ConvBN(16, 16, 1)
            )
            self.branch2 = ConvBN(16, 32, 3, 2)
            self.stage = nn.LayerList([ConditionalChannelWeighting([16, 32]) for _ in range(2)])
            self.fuse_up = nn.Sequential(ConvBN(32, 16, 1, act=None))
            self.fuse_down = ConvBN(16, 32, 3, 2, act=None)
            self.head = nn.Sequential(ConvBN(16, 16, 3), nn.Conv2D(16, joints, 1))

        def forward(self, x):
            s = self.stem(x)
            xs = [s, self.branch2(s)]
            for layer in self.stage:
                xs = layer(xs)
            hi = F.relu(xs[0] + resize_to(self.fuse_up(xs[1]), xs[0], "nearest"))
            _ = F.relu(xs[1] + self.fuse_down(xs[0]))
            return self.head(hi)

    return LiteHRNet()


# --------------------------------------------------------------------------------------------- PaddleOCR
def ppocrv3_det():
    paddle, F, nn = _nn()
    ConvBN, SE, _, resize_to = _blocks()

    class Block(nn.Layer):  # MobileNetV3 residual unit
        def __init__(self, cin, mid, cout, k, stride, se, act):
            super().__init__()
            self.expand = ConvBN(cin, mid, 1, act=act)
            self.dw = ConvBN(mid, mid, k, stride, groups=mid, act=act)
            self.se = SE(mid) if se else nn.Identity()
            self.proj = ConvBN(mid, cout, 1, act=None)
            self.res = stride == 1 and cin == cout

        def forward(self, x):
            y = self.proj(self.se(self.dw(self.expand(x))))
            return x + y if self.res else y

    class RSELayer(nn.Layer):
        def __init__(self, cin, cout, k):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, padding=k // 2, bias_attr=False)
            self.se = SE(cout, 4)

        def forward(self, x):
            x = self.conv(x)
            return x + self.se(x)

    class DBHead(nn.Layer):
        def __init__(self, c):
            super().__init__()
            self.conv = ConvBN(c, c // 4, 3)
            self.up1 = nn.Conv2DTranspose(c // 4, c // 4, 2, 2)
            self.bn = nn.BatchNorm2D(c // 4)
            self.up2 = nn.Conv2DTranspose(c // 4, 1, 2, 2)

        def forward(self, x):
            return F.sigmoid(self.up2(F.relu(self.bn(self.up1(self.conv(x))))))

    class PPOCRv3Det(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = ConvBN(3, 8, 3, 2, act="hardswish")
            cfg = [  # cin, mid, cout, k, stride, se, act -> stages at strides 4, 8, 16, 32
                [(8, 16, 8, 3, 1, False, "relu"), (8, 32, 16, 3, 2, False, "relu")],
                [(16, 48, 24, 5, 2, True, "relu"), (24, 64, 24, 5, 1, True, "relu")],
                [(24, 96, 40, 3, 2, False, "hardswish"), (40, 120, 48, 3, 1, True, "hardswish")],
                [(48, 144, 64, 5, 2, True, "hardswish"), (64, 192, 64, 5, 1, True, "hardswish")],
            ]
            self.stages = nn.LayerList([nn.Sequential(*[Block(*c) for c in stage]) for stage in cfg])
            chans, out = (16, 24, 48, 64), 32
            self.ins = nn.LayerList([RSELayer(c, out, 1) for c in chans])
            self.inp = nn.LayerList([RSELayer(out, out // 4, 3) for _ in chans])
            self.head = DBHead(out)

        def forward(self, x):
            x = self.stem(x)
            feats = []
            for s in self.stages:
                x = s(x)
                feats.append(x)
            c2, c3, c4, c5 = [f(c) for f, c in zip(self.ins, feats)]  # noqa: B905
            out4 = c4 + resize_to(c5, c4, "nearest")
            out3 = c3 + resize_to(out4, c3, "nearest")
            out2 = c2 + resize_to(out3, c2, "nearest")
            p5, p4, p3, p2 = [f(c) for f, c in zip(self.inp[::-1], (c5, out4, out3, out2))]  # noqa: B905
            p5, p4, p3 = (resize_to(p, p2, "nearest") for p in (p5, p4, p3))
            return self.head(paddle.concat([p5, p4, p3, p2], 1))

    return PPOCRv3Det()


def ppocrv3_rec(classes=64):
    paddle, F, nn = _nn()
    ConvBN, SE, _, _ = _blocks()

    class DSConv(nn.Layer):  # MobileNetV1Enhance DepthwiseSeparable
        def __init__(self, cin, cout, stride, k=3, se=False):
            super().__init__()
            self.dw = ConvBN(cin, cin, k, stride, groups=cin, act="hardswish", padding=k // 2)
            self.se = SE(cin) if se else nn.Identity()
            self.pw = ConvBN(cin, cout, 1, act="hardswish")

        def forward(self, x):
            return self.pw(self.se(self.dw(x)))

    class Attention(nn.Layer):
        def __init__(self, dim, heads):
            super().__init__()
            self.heads, self.hd = heads, dim // heads
            self.qkv = nn.Linear(dim, dim * 3)
            self.proj = nn.Linear(dim, dim)

        def forward(self, x):
            qkv = self.qkv(x).reshape((0, -1, 3, self.heads, self.hd)).transpose((2, 0, 3, 1, 4))
            q, k, v = qkv[0] * self.hd**-0.5, qkv[1], qkv[2]
            attn = F.softmax(q.matmul(k.transpose((0, 1, 3, 2))), axis=-1)
            return self.proj(attn.matmul(v).transpose((0, 2, 1, 3)).reshape((0, -1, self.heads * self.hd)))

    class Block(nn.Layer):
        def __init__(self, dim, heads):
            super().__init__()
            self.n1 = nn.LayerNorm(dim, epsilon=1e-5)
            self.attn = Attention(dim, heads)
            self.n2 = nn.LayerNorm(dim, epsilon=1e-5)
            self.mlp = nn.Sequential(nn.Linear(dim, dim * 2), nn.Swish(), nn.Linear(dim * 2, dim))

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    class SVTRLCNet(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = ConvBN(3, 16, 3, 2, act="hardswish")
            cfg = [(16, 32, 1), (32, 64, 1), (64, 64, 1), (64, 64, (2, 1)), (64, 128, 1), (128, 128, (2, 1)),
                   (128, 128, 1), (128, 128, (2, 1))]  # fmt: skip
            self.blocks = nn.Sequential(*[DSConv(a, b, s, 5 if i >= 6 else 3, se=i >= 6) for i, (a, b, s) in
                                          enumerate(cfg)])  # fmt: skip
            self.pool = nn.MaxPool2D(2, 2)
            dim = 48
            self.c1 = ConvBN(128, 16, 3, act="swish")
            self.c2 = ConvBN(16, dim, 1, act="swish")
            self.svtr = nn.LayerList([Block(dim, 4) for _ in range(2)])
            self.norm = nn.LayerNorm(dim, epsilon=1e-6)
            self.c3 = ConvBN(dim, 128, 1, act="swish")
            self.c4 = ConvBN(256, 16, 3, act="swish")
            self.c1x1 = ConvBN(16, dim, 1, act="swish")
            self.fc = nn.Linear(dim, classes)

        def forward(self, x):
            x = self.pool(self.blocks(self.stem(x)))  # [b, 128, 1, W/4]
            z = self.c2(self.c1(x))
            shape = paddle.shape(z)
            h, w = shape[2], shape[3]
            t = z.flatten(2).transpose([0, 2, 1])
            for blk in self.svtr:
                t = blk(t)
            t = self.norm(t)
            z = t.reshape([-1, h, w, z.shape[1]]).transpose([0, 3, 1, 2])
            z = self.c1x1(self.c4(paddle.concat([x, self.c3(z)], 1)))
            seq = z.squeeze(2).transpose([0, 2, 1])  # Im2Seq
            return F.softmax(self.fc(seq), axis=2)

    return SVTRLCNet()


# --------------------------------------------------------------------------------------------- PaddleClas
def resnet50_vd(classes=32):
    paddle, F, nn = _nn()
    ConvBN, _, _, _ = _blocks()

    class Bottleneck(nn.Layer):
        def __init__(self, cin, mid, stride, first):
            super().__init__()
            self.c0 = ConvBN(cin, mid, 1)
            self.c1 = ConvBN(mid, mid, 3, stride)
            self.c2 = ConvBN(mid, mid * 4, 1, act=None)
            if first:
                pool = [nn.AvgPool2D(2, 2, ceil_mode=True)] if stride == 2 else []
                self.short = nn.Sequential(*pool, ConvBN(cin, mid * 4, 1, act=None))
            else:
                self.short = nn.Identity()

        def forward(self, x):
            return F.relu(self.c2(self.c1(self.c0(x))) + self.short(x))

    class ResNet50vd(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(
                ConvBN(3, 8, 3, 2), ConvBN(8, 8, 3), ConvBN(8, 16, 3), nn.MaxPool2D(3, 2, 1)
            )
            blocks, cin = [], 16
            for i, mid in enumerate((16, 32, 64, 128)):
                for j in range((1, 2, 2, 1)[i]):
                    blocks.append(Bottleneck(cin, mid, 2 if j == 0 and i > 0 else 1, j == 0))
                    cin = mid * 4
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(paddle.flatten(self.pool(self.blocks(self.stem(x))), 1))

    return ResNet50vd()


def esnet(classes=32):
    paddle, F, nn = _nn()
    ConvBN, SE, shuffle, _ = _blocks()

    class ESBlock1(nn.Layer):
        def __init__(self, c, mid):
            super().__init__()
            self.pw1 = ConvBN(c // 2, mid // 2, 1, act="hardswish")
            self.dw = ConvBN(mid // 2, mid // 2, 3, groups=mid // 2, act=None)
            self.se = SE(mid)
            self.pw2 = ConvBN(mid, c // 2, 1, act="hardswish")

        def forward(self, x):
            a, b = paddle.split(x, [x.shape[1] // 2, x.shape[1] // 2], axis=1)
            y = self.pw1(b)
            y = self.pw2(self.se(paddle.concat([y, self.dw(y)], 1)))  # ghost-style: features + cheap dw
            return shuffle(paddle.concat([a, y], 1))

    class ESBlock2(nn.Layer):
        def __init__(self, cin, mid, cout):
            super().__init__()
            self.b1 = nn.Sequential(
                ConvBN(cin, cin, 3, 2, groups=cin, act=None), ConvBN(cin, cout // 2, 1, act="hardswish")
            )
            self.b2 = nn.Sequential(ConvBN(cin, mid // 2, 1, act="hardswish"),
                                    ConvBN(mid // 2, mid // 2, 3, 2, groups=mid // 2, act=None), SE(mid // 2),
                                    ConvBN(mid // 2, cout // 2, 1, act="hardswish"))  # fmt: skip
            self.dw = ConvBN(cout, cout, 3, groups=cout, act="hardswish")
            self.pw = ConvBN(cout, cout, 1, act="hardswish")

        def forward(self, x):
            return self.pw(self.dw(paddle.concat([self.b1(x), self.b2(x)], 1)))

    class ESNet(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(ConvBN(3, 24, 3, 2, act="hardswish"), nn.MaxPool2D(3, 2, 1))
            blocks, cin = [], 24
            for cout, n in ((48, 2), (96, 3), (192, 2)):
                blocks.append(ESBlock2(cin, cout, cout))
                blocks += [ESBlock1(cout, cout) for _ in range(n)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.last = ConvBN(cin, 256, 1, act="hardswish")
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.fc = nn.Linear(256, classes)

        def forward(self, x):
            return self.fc(paddle.flatten(self.pool(self.last(self.blocks(self.stem(x)))), 1))

    return ESNet()


def vision(name):
    def build():
        from paddle.vision import models

        if name == "shufflenet_v2_swish":
            return models.ShuffleNetV2(scale=0.25, act="swish", num_classes=32)
        if name == "squeezenet1_1":
            return models.squeezenet1_1(num_classes=32)
        if name == "densenet":
            m = models.DenseNet(layers=121, num_classes=32)
            return m
        if name == "googlenet":
            return models.googlenet(num_classes=32)
        raise KeyError(name)

    return build


SEG = "segmenter"
MODELS = [
    Model("pp_liteseg", "PP-LiteSeg (PaddleSeg), STDC x0.25", SEG, pp_liteseg, (128, 128), False,
          note="STDC CatBottleneck, SPPM adaptive pools 1/2/4, UAFM mean/max spatial attention, bilinear Resize; "
               "H/W fixed as PaddleSeg exports it (adaptive pools)"),
    Model("humanseg_lite", "PP-HumanSeg-lite (PaddleSeg)", SEG, lambda: humanseg_lite(), (64, 64),
          data=pe.PPOCR | {"color": "RGB"}, note="shuffle blocks, bilinear decoder, logits"),
    Model("humanseg_lite_argmax", "PP-HumanSeg-lite (PaddleSeg), --output_op argmax", SEG,
          lambda: humanseg_lite("argmax"), (64, 64), data=pe.PPOCR | {"color": "RGB"},
          note="ArgMax int32 keepdim in the graph (PaddleSeg export --output_op argmax)"),
    Model("humanseg_lite_argmax64", "PP-HumanSeg-lite (PaddleSeg), int64 argmax", SEG,
          lambda: humanseg_lite("argmax64"), (64, 64), data=pe.PPOCR | {"color": "RGB"},
          note="paddle.argmax (int64, no keepdim) in the graph", opsets=(11,)),
    Model("bisenetv2", "BiSeNetV2 (PaddleSeg), reduced", SEG, bisenetv2, (64, 64),
          note="detail/semantic branches, stem MaxPool, GE layers, CE (GAP+BN), BGA with bilinear Resize"),
    Model("ppyoloe_s", "PP-YOLOE-s style (PaddleDetection), exclude_nms", "detector", ppyoloe, (96, 96),
          note="CSPResNet RepVGG/ESE, CSP-PAN SPP, ET-head ESE stems, DFL Softmax + 1x1 proj conv, anchors from "
               "Range/meshgrid, clip to im_shape, / scale_factor; inputs image, im_shape, scale_factor"),
    Model("picodet_nms", "PicoDet-S style + multiclass_nms3 (PaddleDetection)", "detector", picodet_nms,
          (160, 160), False, note="NMS in the graph: should be a typed refusal", opsets=(11, 16)),
    Model("tinypose", "PP-TinyPose style (Lite-HRNet)", "segmenter", tinypose, (64, 48), False,
          note="channel shuffle, cross-resolution weighting (adaptive pools to the smallest branch), nearest x2"),
    Model("ppocrv3_det", "PP-OCRv3 det style (PaddleOCR)", SEG, ppocrv3_det, (64, 64), data=OCR_TEXT,
          note="MobileNetV3 x0.5-ish, RSE-FPN (SE residual), nearest x2/x4/x8 by scale_factor, DB head: 2 ConvTranspose, Sigmoid"),
    Model("ppocrv3_rec", "PP-OCRv3 rec style SVTR-LCNet (PaddleOCR)", "sequence", ppocrv3_rec, (48, 160),
          data=OCR_TEXT, note="MobileNetV1Enhance (2,1) strides, SVTR mixing (LayerNorm, attention, Swish MLP), CTC Softmax"),
    Model("resnet50_vd", "ResNet50_vd (PaddleClas), reduced", "classifier", resnet50_vd, (64, 64),
          note="deep stem, AvgPool(ceil) + 1x1 shortcut"),
    Model("esnet", "ESNet (PaddleDetection/PaddleClas), reduced", "classifier", esnet, (64, 64),
          note="channel split + shuffle, ghost-style concat, SE hardsigmoid, hardswish"),
    Model("shufflenet_v2_swish", "ShuffleNetV2-swish x0.25 (paddle.vision)", "classifier",
          vision("shufflenet_v2_swish"), (64, 64), False,
          note="paddle.vision ShuffleNetV2(act='swish'); H/W fixed (its channel_shuffle reshapes with x.shape)"),
    Model("squeezenet1_1", "SqueezeNet1.1 (paddle.vision)", "classifier", vision("squeezenet1_1"), (64, 64),
          note="fire modules, ceil_mode MaxPool"),
    Model("densenet121", "DenseNet-121 (paddle.vision)", "classifier", vision("densenet"), (64, 64), False,
          note="dense Concat, AvgPool transitions"),
    Model("googlenet", "GoogLeNet (paddle.vision)", "classifier", vision("googlenet"), (224, 224), False,
          note="inception Concat, three outputs (aux heads)", opsets=(11,)),
]  # fmt: skip
BY_NAME = {m.name: m for m in MODELS}


def _inputs(m: Model) -> list[tuple[str, list]]:
    h, w = m.hw
    if m.name == "ppyoloe_s":
        return [("image", [1, 3, h, w]), ("im_shape", [1, 2]), ("scale_factor", [1, 2])]
    return [("x", [1, 3, h, w])]


def arrays(m: Model, count: int, seed: int, photos) -> dict:
    """The inputs of ``count`` samples: photo crops; PP-YOLOE's im_shape is the crop's H, W and its scale_factor
    the resize from a random original size (PaddleDetection's preprocessing)."""
    entry = {"name": m.name, "data": m.data, "inputs": [{"name": "x", "shape": [1, 3, *m.hw]}]}
    x = pe.zoo_data.make_arrays(entry, count, seed, photos)["x"]
    if m.name != "ppyoloe_s":
        return {"x": x}
    rng = np.random.default_rng(seed)
    orig = rng.uniform(200, 900, (count, 2))
    return {
        "image": x,
        "im_shape": np.tile(np.float32(m.hw), (count, 1)).astype(np.float32),
        "scale_factor": (np.float32(m.hw) / orig).astype(np.float32),
    }


def export(m: Model, opset: int, out: Path, photos) -> dict:
    import onnx
    import onnxruntime as ort
    import paddle
    import paddle2onnx

    name = f"{m.name}_op{opset}"
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
        bn._momentum = 0.9  # Paddle's default, which paddle2onnx writes as the BatchNormalization's momentum
    model.eval()
    specs = []
    for n, shape in _inputs(m):
        dyn = [None, *shape[1:]]
        if len(shape) == 4 and m.dynamic_hw:
            dyn = [None, shape[1], None, None]
        specs.append(paddle.static.InputSpec(dyn, "float32", n))
    path = out / f"{name}.onnx"
    pe.paddle_to_onnx(model, path, opset, specs=specs)
    minus_one_dims(path)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    x = arrays(m, 1 if m.name == "picodet_nms" else 2, 7, photos)
    with paddle.no_grad():
        want = model(*[paddle.to_tensor(v) for v in x.values()])
    want = [np.asarray(t) for t in (want if isinstance(want, list | tuple) else [want])]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: x[i.name] for i in sess.get_inputs()}
    got = sess.run(None, feed)
    err = 0.0
    if m.name != "picodet_nms":
        for g, w in zip(got, want, strict=True):
            if g.dtype.kind in "iu":
                err = max(err, float(np.mean(g != w)))
            else:
                err = max(err, float(np.abs(g - w).max() / (np.ptp(w) or 1.0)))
        assert err < 1e-4 or m.name.startswith("humanseg_lite_argmax"), f"{name}: ort vs Paddle {err:.2e}"
    ins = [{"name": n, "shape": s, "dtype": "float32"} for n, s in _inputs(m) if n in feed]
    return {
        "name": name,
        "file": path.name,
        "family": m.family,
        "kind": m.kind,
        "opset": opset,
        "inputs": ins,
        "outputs": [o.name for o in proto.graph.output],
        "data": m.data,
        "extra_args": _shape_args(ins),
        "size": "reduced",
        "ci": False,
        "params": int(sum(int(np.prod(p.shape)) for p in model.parameters())),
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"paddle2onnx {paddle2onnx.__version__} opset {opset}, batch{'/H/W' if m.dynamic_hw else ''} -1; "
        f"{m.note}; {len(bns)} BatchNorm from photos; Paddle vs onnxruntime {err:.1e}",
        "seed": SEED,
    }


def _shape_args(ins: list[dict]) -> list[str]:
    args = []
    for i in ins:
        args += ["--input-shape", f"{i['name']}={','.join(map(str, i['shape']))}"]
    return args


def run_multi(out: Path, names: list[str], workers: int = 1) -> int:
    """The six cases on the multi-input models (their own data: im_shape, scale_factor)."""
    sys.path.insert(0, str(pe.ROOT / "benchmarks"))
    sys.path.insert(0, str(pe.ROOT / "tests" / "zoo"))
    import json

    import zoo  # benchmarks/zoo.py
    import zoo_cases

    photos = pe.zoo_data.cached_photos()
    entries = {e["name"]: e for e in pe.zoo_data.entries(out / "zoo.json")}
    models, data = [], out / "data_multi"
    data.mkdir(parents=True, exist_ok=True)
    for name in names:
        e = entries[name]
        m = BY_NAME[name.rsplit("_op", 1)[0]]
        c, v = data / f"{name}.calib.npz", data / f"{name}.eval.npz"
        np.savez(c, **arrays(m, 32, 1, photos))
        np.savez(v, **arrays(m, 16, 2, photos))
        models.append(zoo_cases.Model(name, out / e["file"], e["kind"], e["inputs"], c, v, e["extra_args"]))
    results, _ = zoo.run_and_print(models, list(zoo_cases.CASES), out / "work_multi", workers, 400.0)
    (out / "multi.json").write_text(
        json.dumps({"results": zoo_cases.result_json(results)}, indent=1, default=float)
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=pe.FULL_DIR / "probe8p")
    parser.add_argument("--only")
    parser.add_argument("--run", type=Path, help="run the multi-input models' six cases (edgekit's venv)")
    args = parser.parse_args(argv)
    if args.run:
        names = args.only.split(",") if args.only else ["ppyoloe_s_op11", "ppyoloe_s_op16"]
        return run_multi(args.run, names)
    only = set(args.only.split(",")) if args.only else None
    photos = pe.zoo_data.bn_photos(None, pe.default_shared())
    entries = pe.export_each(MODELS, lambda m, op: export(m, op, args.out, photos), args.out, only, 28)
    pe.zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
