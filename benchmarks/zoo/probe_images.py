"""Issue 12 probe round 8i: image-to-image, pose, audio and enhancement models
(``--out benchmarks/.zoo/probe8i``, not committed).

Written in torch as the public models are (seeded weights, BatchNorm statistics from photos, small inputs):
- fast neural style transfer (Johnson et al., pytorch/examples ``TransformerNet``): ReflectionPad2d,
  InstanceNorm2d(affine), residual blocks, nearest Upsample + conv; raw 0..255 pixels in and out; opset 11 and
  the dynamo exporter at opset 18;
- ESPCN super-resolution (pytorch/examples ``super_resolution``: PixelShuffle -> DepthToSpace) on the Y
  channel, opset 11 and dynamo 18, and a small Real-ESRGAN x2 ``RRDBNet`` (pixel_unshuffle -> SpaceToDepth,
  LeakyReLU 0.2, residual dense blocks with concat, nearest upsample x2 twice);
- MiDaS-small style depth (timm EfficientNet-lite0 encoder, FeatureFusionBlock_custom with bilinear
  ``align_corners=True`` upsampling, ReLU output);
- U^2-Net-lite (U2NETP: RSU7..RSU4F, bilinear upsampling to a skip's size, 7 Sigmoid side outputs) and a
  MODNet / BiSeNetV2-style matting head (adaptive avg pool branches + upsample + concat, Sigmoid alpha);
- pose: RTMPose-style SimCC head (GAU with ScaleNorm, Linear to x / y classification vectors; ``sequence``:
  argmax per keypoint), a MoveNet / CenterNet-style multi-person head (heatmaps + offsets, argmax-free) and an
  HRNet-w18-small-style net (parallel branches, cross-resolution fuse: strided convs + nearest upsample + add);
- audio: a Conv-TasNet separator (Conv1d encoder, gLN as GroupNorm(1), PReLU, dilated depthwise Conv1d,
  ConvTranspose1d decoder) and a Silero-VAD-style model (Conv1d STFT-as-conv, magnitude, LSTM with h / c as graph
  inputs returned as outputs); ``--silero WHEEL``: the real Silero VAD v6 graphs of the silero-vad wheel.

    python benchmarks/zoo/probe_images.py --out benchmarks/.zoo/probe8i [--only a,b]
    python benchmarks/zoo/probe_images.py --silero /work/wheels/silero_vad-6.2.3-py3-none-any.whl  # real VAD
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe8i/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402

Spec = zoo_export.Spec
SEED = 8800

#: style transfer: RGB 0..255, no normalisation (pytorch/examples multiplies by 255)
RAW255 = {"type": "image", "color": "RGB", "scale": 1.0, "mean": None, "std": None}
#: ESPCN: the Y channel / 255
GRAY01 = {"type": "image", "color": "GRAY", "scale": 1 / 255, "mean": None, "std": None}
#: Real-ESRGAN, U^2-Net, MODNet: RGB / 255 (U^2-Net and MODNet normalise: kept ImageNet for those)
RGB01 = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None}
WAVE = {"type": "waveform", "sample_rate": 16000}


# ------------------------------------------------------------------------------------------- style transfer


class ConvLayer(nn.Module):
    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride)

    def forward(self, x):
        return self.conv(self.pad(x))


class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.in1 = ConvLayer(c, c, 3, 1), nn.InstanceNorm2d(c, affine=True)
        self.conv2, self.in2 = ConvLayer(c, c, 3, 1), nn.InstanceNorm2d(c, affine=True)

    def forward(self, x):
        y = torch.relu(self.in1(self.conv1(x)))
        return self.in2(self.conv2(y)) + x


class UpsampleConvLayer(nn.Module):
    def __init__(self, cin, cout, k, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.pad = nn.ReflectionPad2d(k // 2)
        self.conv = nn.Conv2d(cin, cout, k, stride)

    def forward(self, x):
        if self.upsample:
            x = F.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv(self.pad(x))


class TransformerNet(nn.Module):
    """pytorch/examples fast_neural_style TransformerNet at a quarter width (8/16/32 instead of 32/64/128)."""

    def __init__(self, w=8):
        super().__init__()
        self.conv1, self.in1 = ConvLayer(3, w, 9, 1), nn.InstanceNorm2d(w, affine=True)
        self.conv2, self.in2 = ConvLayer(w, 2 * w, 3, 2), nn.InstanceNorm2d(2 * w, affine=True)
        self.conv3, self.in3 = ConvLayer(2 * w, 4 * w, 3, 2), nn.InstanceNorm2d(4 * w, affine=True)
        self.res = nn.Sequential(*[ResidualBlock(4 * w) for _ in range(5)])
        self.deconv1 = UpsampleConvLayer(4 * w, 2 * w, 3, 1, upsample=2)
        self.in4 = nn.InstanceNorm2d(2 * w, affine=True)
        self.deconv2 = UpsampleConvLayer(2 * w, w, 3, 1, upsample=2)
        self.in5 = nn.InstanceNorm2d(w, affine=True)
        self.deconv3 = ConvLayer(w, 3, 9, 1)
        with torch.no_grad():  # trained affine InstanceNorms are not all (1, 0): spread them
            for m in self.modules():
                if isinstance(m, nn.InstanceNorm2d):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.3, 0.3)
            self.deconv3.conv.weight.mul_(40.0)  # an output image of pixel values (0..255-like)
            self.deconv3.conv.bias.fill_(120.0)

    def forward(self, x):
        y = torch.relu(self.in1(self.conv1(x)))
        y = torch.relu(self.in2(self.conv2(y)))
        y = torch.relu(self.in3(self.conv3(y)))
        y = self.res(y)
        y = torch.relu(self.in4(self.deconv1(y)))
        y = torch.relu(self.in5(self.deconv2(y)))
        return self.deconv3(y)


# -------------------------------------------------------------------------------------- super-resolution


class ESPCN(nn.Module):
    """pytorch/examples super_resolution Net (the ONNX export tutorial's model): Y channel, upscale 3."""

    def __init__(self, r=3):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 64, 5, 1, 2)
        self.conv2 = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv3 = nn.Conv2d(64, 32, 3, 1, 1)
        self.conv4 = nn.Conv2d(32, r * r, 3, 1, 1)
        self.ps = nn.PixelShuffle(r)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.ps(self.conv4(x))


class ResidualDenseBlock(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(f + i * g, g if i < 4 else f, 3, 1, 1) for i in range(5)])

    def forward(self, x):
        feats = [x]
        for i, conv in enumerate(self.convs):
            y = conv(torch.cat(feats, 1))
            if i < 4:
                feats.append(F.leaky_relu(y, 0.2))
        return y * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, f, g):
        super().__init__()
        self.rdb = nn.Sequential(ResidualDenseBlock(f, g), ResidualDenseBlock(f, g), ResidualDenseBlock(f, g))

    def forward(self, x):
        return self.rdb(x) * 0.2 + x


class RRDBNet(nn.Module):
    """Real-ESRGAN x2 (basicsr RRDBNet, scale 2: pixel_unshuffle then a x4 body), 16 features, 2 blocks."""

    def __init__(self, f=16, g=8, blocks=2):
        super().__init__()
        self.conv_first = nn.Conv2d(3 * 4, f, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(f, g) for _ in range(blocks)])
        self.conv_body = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_hr = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_last = nn.Conv2d(f, 3, 3, 1, 1)

    def forward(self, x):
        feat = self.conv_first(F.pixel_unshuffle(x, 2))
        feat = feat + self.conv_body(self.body(feat))
        lrelu = nn.functional.leaky_relu
        feat = lrelu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode="nearest")), 0.2)
        feat = lrelu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode="nearest")), 0.2)
        return self.conv_last(lrelu(self.conv_hr(feat), 0.2))


# ------------------------------------------------------------------------------------------------- depth


class ResidualConvUnit(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, 1, 1)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1)

    def forward(self, x):
        return self.conv2(torch.relu(self.conv1(torch.relu(x)))) + x


class FeatureFusionBlock(nn.Module):
    """MiDaS FeatureFusionBlock_custom: (skip RCU +) RCU, bilinear x2 align_corners=True, 1x1 out conv."""

    def __init__(self, c, cout):
        super().__init__()
        self.rcu1, self.rcu2 = ResidualConvUnit(c), ResidualConvUnit(c)
        self.out = nn.Conv2d(c, cout, 1)

    def forward(self, x, skip=None):
        if skip is not None:
            x = x + self.rcu1(skip)
        x = self.rcu2(x)
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return self.out(x)


class MidasSmall(nn.Module):
    """MiDaS v2.1 small's layout: EfficientNet-lite encoder (timm tf_efficientnet_lite0 here), 4 scratch
    3x3 convs, fusion blocks with align_corners upsampling, head conv -> bilinear x2 -> conv -> ReLU -> 1x1 ->
    ReLU (inverse depth, non-negative)."""

    def __init__(self, f=32):
        super().__init__()
        import timm

        self.encoder = timm.create_model(
            "tf_efficientnet_lite0", pretrained=False, features_only=True, out_indices=(1, 2, 3, 4)
        )
        chans = self.encoder.feature_info.channels()
        self.layer_rn = nn.ModuleList(
            [nn.Conv2d(c, f * m, 3, 1, 1, bias=False) for c, m in zip(chans, (1, 2, 4, 8), strict=True)]
        )
        self.refine = nn.ModuleList([FeatureFusionBlock(f * m, f * max(m // 2, 1)) for m in (1, 2, 4, 8)])
        self.head = nn.Sequential(
            nn.Conv2d(f, f // 2, 3, 1, 1),
            nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
            nn.Conv2d(f // 2, 32, 3, 1, 1),
            nn.ReLU(),
            nn.Conv2d(32, 1, 1),
            nn.ReLU(),
        )
        with torch.no_grad():
            self.head[-2].bias.fill_(0.5)

    def forward(self, x):
        feats = [rn(f) for rn, f in zip(self.layer_rn, self.encoder(x), strict=True)]
        p = self.refine[3](feats[3])
        p = self.refine[2](p, feats[2])
        p = self.refine[1](p, feats[1])
        p = self.refine[0](p, feats[0])
        return self.head(p).squeeze(1)


# ------------------------------------------------------------------------------------------- U^2-Net / matting


class REBNCONV(nn.Module):
    def __init__(self, cin, cout, d=1):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=d, dilation=d)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def _upsample_like(src, tar):
    return F.interpolate(src, size=tar.shape[2:], mode="bilinear")


class RSU(nn.Module):
    """U^2-Net RSU-L: an encoder of L-1 REBNCONVs with ceil-mode MaxPools, a dilated bottom, a decoder that
    upsamples to each skip's size and concatenates."""

    def __init__(self, height, cin, mid, cout):
        super().__init__()
        self.height = height
        self.inp = REBNCONV(cin, cout)
        self.enc = nn.ModuleList([REBNCONV(cout if i == 0 else mid, mid) for i in range(height - 1)])
        self.bottom = REBNCONV(mid, mid, 2)
        self.dec = nn.ModuleList(
            [REBNCONV(2 * mid, mid if i < height - 2 else cout) for i in range(height - 1)]
        )

    def forward(self, x):
        hxin = self.inp(x)
        skips, h = [], hxin
        for i, enc in enumerate(self.enc):
            h = enc(h)
            skips.append(h)
            if i < self.height - 2:
                h = F.max_pool2d(h, 2, 2, ceil_mode=True)
        d = self.bottom(h)
        for i, dec in enumerate(self.dec):
            skip = skips[-1 - i]
            d = dec(torch.cat([d, skip], 1))
            if i < self.height - 2:
                d = _upsample_like(d, skips[-2 - i])
        return d + hxin


class RSU4F(nn.Module):
    def __init__(self, cin, mid, cout):
        super().__init__()
        self.inp = REBNCONV(cin, cout)
        self.e = nn.ModuleList([REBNCONV(cout, mid, 1), REBNCONV(mid, mid, 2), REBNCONV(mid, mid, 4)])
        self.bottom = REBNCONV(mid, mid, 8)
        self.d = nn.ModuleList(
            [REBNCONV(2 * mid, mid, 4), REBNCONV(2 * mid, mid, 2), REBNCONV(2 * mid, cout, 1)]
        )

    def forward(self, x):
        hxin = self.inp(x)
        h1 = self.e[0](hxin)
        h2 = self.e[1](h1)
        h3 = self.e[2](h2)
        d = self.bottom(h3)
        d = self.d[0](torch.cat([d, h3], 1))
        d = self.d[1](torch.cat([d, h2], 1))
        d = self.d[2](torch.cat([d, h1], 1))
        return d + hxin


class U2NETP(nn.Module):
    """U^2-Net-lite (u2netp): 6 encoder stages, 5 decoder stages, 6 side outputs fused; 7 Sigmoid outputs."""

    def __init__(self, mid=8, out=32):
        super().__init__()
        self.stage1, self.stage2 = RSU(7, 3, mid, out), RSU(6, out, mid, out)
        self.stage3, self.stage4 = RSU(5, out, mid, out), RSU(4, out, mid, out)
        self.stage5, self.stage6 = RSU4F(out, mid, out), RSU4F(out, mid, out)
        self.stage5d, self.stage4d = RSU4F(2 * out, mid, out), RSU(4, 2 * out, mid, out)
        self.stage3d, self.stage2d = RSU(5, 2 * out, mid, out), RSU(6, 2 * out, mid, out)
        self.stage1d = RSU(7, 2 * out, mid, out)
        self.side = nn.ModuleList([nn.Conv2d(out, 1, 3, padding=1) for _ in range(6)])
        self.outconv = nn.Conv2d(6, 1, 1)

    def forward(self, x):
        pool = lambda t: F.max_pool2d(t, 2, 2, ceil_mode=True)  # noqa: E731
        hx1 = self.stage1(x)
        hx2 = self.stage2(pool(hx1))
        hx3 = self.stage3(pool(hx2))
        hx4 = self.stage4(pool(hx3))
        hx5 = self.stage5(pool(hx4))
        hx6 = self.stage6(pool(hx5))
        hx5d = self.stage5d(torch.cat([_upsample_like(hx6, hx5), hx5], 1))
        hx4d = self.stage4d(torch.cat([_upsample_like(hx5d, hx4), hx4], 1))
        hx3d = self.stage3d(torch.cat([_upsample_like(hx4d, hx3), hx3], 1))
        hx2d = self.stage2d(torch.cat([_upsample_like(hx3d, hx2), hx2], 1))
        hx1d = self.stage1d(torch.cat([_upsample_like(hx2d, hx1), hx1], 1))
        sides = [self.side[0](hx1d)]
        for conv, h in zip(self.side[1:], (hx2d, hx3d, hx4d, hx5d, hx6), strict=True):
            sides.append(_upsample_like(conv(h), sides[0]))
        d0 = self.outconv(torch.cat(sides, 1))
        return tuple(torch.sigmoid(d) for d in [d0, *sides])


class MattingNet(nn.Module):
    """MODNet / BiSeNetV2-style: MobileNetV2 encoder; low-resolution branch with a PSP context head
    (AdaptiveAvgPool2d 1/2/4 branches, 1x1 conv, bilinear upsample, concat) and an SE-like global attention;
    detail branch at stride 4; fusion: bilinear upsample, concat, conv, Sigmoid alpha at full size."""

    def __init__(self):
        super().__init__()
        from torchvision.models import mobilenet_v2

        feats = mobilenet_v2(width_mult=0.5).features
        self.low4, self.low16 = feats[:4], feats[4:14]  # stride 4 (16 ch), stride 16 (48 ch)
        c = 48
        self.pools = nn.ModuleList(
            [nn.Sequential(nn.AdaptiveAvgPool2d(s), nn.Conv2d(c, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
             for s in (1, 2, 4)]
        )  # fmt: skip
        self.ctx = zoo_export.conv_bn(c + 48, 32, 3, 1, nn.ReLU)
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(32, 8, 1), nn.ReLU(), nn.Conv2d(8, 32, 1), nn.Sigmoid()
        )
        self.lr_out = nn.Conv2d(32, 1, 3, 1, 1)
        self.detail = zoo_export.conv_bn(16 + 32 + 3, 16, 3, 1, nn.ReLU)
        self.fuse = nn.Sequential(zoo_export.conv_bn(16 + 3, 8, 3, 1, nn.ReLU), nn.Conv2d(8, 1, 1))

    def forward(self, x):
        f4 = self.low4(x)
        f16 = self.low16(f4)
        h, w = f16.shape[2:]
        ctx = [F.interpolate(p(f16), size=(h, w), mode="bilinear", align_corners=False) for p in self.pools]
        lr = self.ctx(torch.cat([f16, *ctx], 1))
        lr = lr * self.se(lr)
        lr_up = F.interpolate(lr, scale_factor=4, mode="bilinear", align_corners=False)
        x4 = F.interpolate(x, scale_factor=0.25, mode="bilinear", align_corners=False)
        d = self.detail(torch.cat([f4, lr_up, x4], 1))
        d = F.interpolate(d, scale_factor=4, mode="bilinear", align_corners=False)
        alpha = torch.sigmoid(self.fuse(torch.cat([d, x], 1)))
        return alpha, torch.sigmoid(self.lr_out(lr))


# ------------------------------------------------------------------------------------------------------- pose


class ScaleNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.scale = dim**-0.5
        self.eps = eps
        self.g = nn.Parameter(torch.ones(1))

    def forward(self, x):
        norm = torch.norm(x, dim=-1, keepdim=True) * self.scale
        return x / norm.clamp(min=self.eps) * self.g


class ScaleOffset(nn.Module):
    def __init__(self, dim, n):
        super().__init__()
        self.gamma = nn.Parameter(torch.randn(n, dim) * 0.02 + 1.0)
        self.beta = nn.Parameter(torch.zeros(n, dim))

    def forward(self, x):
        out = x[..., None, :] * self.gamma + self.beta
        return torch.unbind(out, dim=-2)


class RTMCCBlock(nn.Module):
    """mmpose RTMCCBlock (GAU, self-attention, ReLU^2 kernel, ScaleNorm, residual with a learned scale)."""

    def __init__(self, n_tokens, dim, e=2, s=32):
        super().__init__()
        self.s, self.e = s, int(dim * e)
        self.ln = ScaleNorm(dim)
        self.uv = nn.Linear(dim, 2 * self.e + s, bias=False)
        self.o = nn.Linear(self.e, dim, bias=False)
        self.so = ScaleOffset(s, 2)
        self.res_scale = nn.Parameter(torch.ones(dim))
        self.sqrt_s = math.sqrt(s)

    def forward(self, x):
        y = self.ln(x)
        uv = F.silu(self.uv(y))
        u, v, base = torch.split(uv, [self.e, self.e, self.s], dim=2)
        q, k = self.so(base)
        qk = torch.bmm(q, k.permute(0, 2, 1)) / self.sqrt_s
        kernel = torch.square(F.relu(qk))
        x2 = u * torch.bmm(kernel, v)
        return x * self.res_scale + self.o(x2)


class RTMPoseSimCC(nn.Module):
    """RTMPose-t style: a CSPNeXt-like conv backbone to stride 32, 7x7 conv to K keypoint maps, flatten, Linear
    to hidden tokens, ScaleNorm, GAU, Linear to 2x-split x / y classification vectors."""

    def __init__(self, k=17, size=(128, 96), hidden=64):
        super().__init__()
        w = 16
        cb = zoo_export.conv_bn
        self.backbone = nn.Sequential(
            cb(3, w, 3, 2), cb(w, w, 3, 1), cb(w, 2 * w, 3, 2), cb(2 * w, 2 * w, 5, 1, groups=2 * w),
            cb(2 * w, 4 * w, 3, 2), cb(4 * w, 4 * w, 5, 1, groups=4 * w), cb(4 * w, 8 * w, 3, 2),
            cb(8 * w, 8 * w, 5, 1, groups=8 * w), cb(8 * w, 8 * w, 3, 2),
        )  # fmt: skip
        h, wd = size[0] // 32, size[1] // 32
        self.final = nn.Conv2d(8 * w, k, 7, 1, 3)
        self.mlp = nn.Sequential(ScaleNorm(h * wd), nn.Linear(h * wd, hidden, bias=False))
        self.gau = RTMCCBlock(k, hidden)
        self.cls_x = nn.Linear(hidden, size[1] * 2, bias=False)
        self.cls_y = nn.Linear(hidden, size[0] * 2, bias=False)

    def forward(self, x):
        f = self.final(self.backbone(x))
        f = torch.flatten(f, 2)
        f = self.gau(self.mlp(f))
        return self.cls_x(f), self.cls_y(f)


class MoveNetStyle(nn.Module):
    """MoveNet multipose / CenterNet-style: MobileNetV2 backbone, FPN (bilinear x2 + add) to stride 4, four
    heads: person centre heatmap (Sigmoid), keypoint regression from the centre, keypoint heatmaps (Sigmoid)
    and keypoint offsets; no argmax in the graph."""

    def __init__(self, k=17):
        super().__init__()
        from torchvision.models import mobilenet_v2

        feats = mobilenet_v2(width_mult=0.5).features
        self.s4, self.s8, self.s16, self.s32 = feats[:4], feats[4:7], feats[7:14], feats[14:18]
        self.lat = nn.ModuleList([nn.Conv2d(c, 32, 1) for c in (16, 16, 48, 160)])
        self.smooth = zoo_export.conv_bn(32, 32, 3, 1, nn.ReLU)
        heads = {"centre": 1, "regress": 2 * k, "heatmap": k, "offset": 2 * k}
        self.heads = nn.ModuleList(
            [
                nn.Sequential(zoo_export.conv_bn(32, 32, 3, 1, nn.ReLU, groups=32), nn.Conv2d(32, n, 1))
                for n in heads.values()
            ]
        )
        with torch.no_grad():
            for head, name in zip(self.heads, heads, strict=True):
                if name in ("centre", "heatmap"):
                    head[1].bias.fill_(-2.19)

    def forward(self, x):
        c4 = self.s4(x)
        c8 = self.s8(c4)
        c16 = self.s16(c8)
        c32 = self.s32(c16)
        p = self.lat[3](c32)
        for lat, c in zip((self.lat[2], self.lat[1], self.lat[0]), (c16, c8, c4), strict=True):
            p = F.interpolate(p, scale_factor=2, mode="bilinear", align_corners=False) + lat(c)
        p = self.smooth(p)
        centre, regress, heat, offset = (h(p) for h in self.heads)
        return torch.sigmoid(centre), regress, torch.sigmoid(heat), offset


class BasicBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(zoo_export.conv_bn(c, c, 3, 1, nn.ReLU), nn.Conv2d(c, c, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(c))  # fmt: skip

    def forward(self, x):
        return torch.relu(self.body(x) + x)


class HRModule(nn.Module):
    """HRNet's module: BasicBlocks per branch, then every branch fuses every other: higher resolution ones by
    strided 3x3 conv-BN (ReLU between), lower ones by 1x1 conv-BN + nearest Upsample, summed, ReLU."""

    def __init__(self, chans):
        super().__init__()
        self.branches = nn.ModuleList([nn.Sequential(BasicBlock(c), BasicBlock(c)) for c in chans])
        self.fuse = nn.ModuleList()
        for i, ci in enumerate(chans):
            row = nn.ModuleList()
            for j, cj in enumerate(chans):
                if j > i:
                    row.append(nn.Sequential(nn.Conv2d(cj, ci, 1, bias=False), nn.BatchNorm2d(ci),
                                             nn.Upsample(scale_factor=2 ** (j - i), mode="nearest")))  # fmt: skip
                elif j == i:
                    row.append(nn.Identity())
                else:
                    steps = []
                    for s in range(i - j):
                        last = s == i - j - 1
                        cout = ci if last else cj
                        steps += [nn.Conv2d(cj, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout)]
                        if not last:
                            steps.append(nn.ReLU())
                    row.append(nn.Sequential(*steps))
            self.fuse.append(row)

    def forward(self, xs):
        xs = [b(x) for b, x in zip(self.branches, xs, strict=True)]
        return [torch.relu(sum(f(x) for f, x in zip(row, xs, strict=True))) for row in self.fuse]


class HRNetSmall(nn.Module):
    """HRNet-w18-small style (w 18 -> 12): stem (two stride-2 convs), stage 2 (2 branches), stage 3 (3),
    transitions by strided conv, keypoint heatmaps [1, 17, H/4, W/4] from the highest-resolution branch."""

    def __init__(self, w=12, k=17):
        super().__init__()
        cb = zoo_export.conv_bn
        self.stem = nn.Sequential(cb(3, 32, 3, 2, nn.ReLU), cb(32, 32, 3, 2, nn.ReLU), BasicBlock(32))
        self.t1 = nn.ModuleList([cb(32, w, 3, 1, nn.ReLU), cb(32, 2 * w, 3, 2, nn.ReLU)])
        self.stage2 = HRModule([w, 2 * w])
        self.t2 = cb(2 * w, 4 * w, 3, 2, nn.ReLU)
        self.stage3 = HRModule([w, 2 * w, 4 * w])
        self.head = nn.Conv2d(w, k, 1)

    def forward(self, x):
        x = self.stem(x)
        xs = self.stage2([t(x) for t in self.t1])
        xs = self.stage3([xs[0], xs[1], self.t2(xs[1])])
        return self.head(xs[0])


# ------------------------------------------------------------------------------------------------------ audio


class TCNBlock(nn.Module):
    def __init__(self, b, h, d, skip):
        super().__init__()
        self.conv1 = nn.Conv1d(b, h, 1)
        self.prelu1, self.norm1 = nn.PReLU(), nn.GroupNorm(1, h, eps=1e-8)
        self.dconv = nn.Conv1d(h, h, 3, padding=d, dilation=d, groups=h)
        self.prelu2, self.norm2 = nn.PReLU(), nn.GroupNorm(1, h, eps=1e-8)
        self.res = nn.Conv1d(h, b, 1)
        self.skip = nn.Conv1d(h, skip, 1)

    def forward(self, x):
        y = self.norm1(self.prelu1(self.conv1(x)))
        y = self.norm2(self.prelu2(self.dconv(y)))
        return x + self.res(y), self.skip(y)


class ConvTasNet(nn.Module):
    """Conv-TasNet (Luo & Mesgarani; asteroid's layout, reduced): Conv1d encoder L=16/8, gLN, 1x1 bottleneck,
    2 repeats x 4 dilated depthwise TCN blocks with PReLU and gLN, skip sum, PReLU, 1x1 mask conv, ReLU masks,
    ConvTranspose1d decoder; 2 sources [1, 2, T]."""

    def __init__(self, n=64, b=32, h=64, sources=2):
        super().__init__()
        self.sources, self.n = sources, n
        self.encoder = nn.Conv1d(1, n, 16, 8, bias=False)
        self.norm = nn.GroupNorm(1, n, eps=1e-8)
        self.bottleneck = nn.Conv1d(n, b, 1)
        self.blocks = nn.ModuleList([TCNBlock(b, h, 2**i, b) for _ in range(2) for i in range(4)])
        self.prelu = nn.PReLU()
        self.mask = nn.Conv1d(b, sources * n, 1)
        self.decoder = nn.ConvTranspose1d(n, 1, 16, 8, bias=False)

    def forward(self, wav):
        w = torch.relu(self.encoder(wav.unsqueeze(1)))  # [1, N, frames]
        x = self.bottleneck(self.norm(w))
        skips = 0
        for blk in self.blocks:
            x, s = blk(x)
            skips = skips + s
        m = torch.relu(self.mask(self.prelu(skips))).view(1, self.sources, self.n, -1)
        masked = (m * w.unsqueeze(1)).view(self.sources, self.n, -1)
        return self.decoder(masked).view(1, self.sources, -1)


class SileroVAD(nn.Module):
    """Silero-VAD v4/v5 style: reflect-pad, STFT as a Conv1d with a fixed cos / sin basis (hop 64), magnitude,
    4 Conv1d + ReLU encoder layers, an LSTM step with the state (h, c) as graph inputs and outputs, ReLU, 1x1
    Conv1d, Sigmoid, mean over frames: speech probability [1, 1]."""

    def __init__(self, n_fft=128, hop=64, hidden=64):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        bins = n_fft // 2 + 1
        t = torch.arange(n_fft).float()
        f = torch.arange(bins).float()[:, None]
        window = torch.hann_window(n_fft, periodic=True)
        basis = (
            torch.cat([torch.cos(2 * math.pi * f * t / n_fft), -torch.sin(2 * math.pi * f * t / n_fft)])
            * window
        )
        self.register_buffer("basis", basis[:, None, :])
        self.encoder = nn.Sequential(
            nn.Conv1d(bins, 64, 3, 1, 1), nn.ReLU(), nn.Conv1d(64, 32, 3, 2, 1), nn.ReLU(),
            nn.Conv1d(32, 32, 3, 2, 1), nn.ReLU(), nn.Conv1d(32, hidden, 3, 1, 1), nn.ReLU(),
        )  # fmt: skip
        self.lstm = nn.LSTM(hidden, hidden, batch_first=True)
        self.decoder = nn.Sequential(nn.ReLU(), nn.Conv1d(hidden, 1, 1), nn.Sigmoid())

    def forward(self, x, h, c):
        x = F.pad(x.unsqueeze(1), (self.n_fft // 2, self.n_fft // 2), mode="reflect")
        spec = F.conv1d(x, self.basis, stride=self.hop)
        bins = self.n_fft // 2 + 1
        mag = torch.sqrt(spec[:, :bins] ** 2 + spec[:, bins:] ** 2)
        feat = self.encoder(mag)  # [1, hidden, frames]
        y, (hn, cn) = self.lstm(feat.transpose(1, 2), (h, c))
        prob = self.decoder(y.transpose(1, 2)).mean(2)
        return prob, hn, cn


# ------------------------------------------------------------------------------------------------------ specs


def _img(h: int, w: int, c: int = 3, name: str = "input"):
    return lambda full: [(name, [1, c, h, w])]


DYNAMO18 = {"dynamo": True, "optimize": True}


def specs() -> list[Spec]:
    return [
        Spec("style_transfer_op11", "fast neural style (Johnson)", "segmenter", 11, lambda f: TransformerNet(),
             _img(64, 64), ["output"], data=dict(RAW255),
             note="ReflectionPad2d, InstanceNorm2d(affine), nearest Upsample + conv, residual blocks; 0..255 out"),
        Spec("style_transfer_dyn18", "fast neural style (Johnson)", "segmenter", 18, lambda f: TransformerNet(),
             _img(64, 64), ["output"], data=dict(RAW255), export_kwargs=dict(DYNAMO18), note="dynamo exporter"),
        Spec("espcn_op11", "ESPCN super-resolution", "segmenter", 11, lambda f: ESPCN(), _img(64, 64, 1),
             ["output"], data=dict(GRAY01), note="PixelShuffle -> DepthToSpace (x3)"),
        Spec("espcn_dyn18", "ESPCN super-resolution", "segmenter", 18, lambda f: ESPCN(), _img(64, 64, 1),
             ["output"], data=dict(GRAY01), export_kwargs=dict(DYNAMO18), note="dynamo exporter"),
        Spec("realesrgan_x2_op17", "Real-ESRGAN RRDBNet x2", "segmenter", 17, lambda f: RRDBNet(), _img(32, 32),
             ["output"], data=dict(RGB01), note="pixel_unshuffle -> SpaceToDepth, dense concat, LeakyReLU, nearest x2 x2"),
        Spec("midas_small_op11", "MiDaS v2.1 small style", "segmenter", 11, lambda f: MidasSmall(), _img(96, 96),
             ["depth"], note="EfficientNet-lite0 encoder, bilinear align_corners=True, ReLU output"),
        Spec("u2netp_op11", "U^2-Net-lite (u2netp)", "segmenter", 11, lambda f: U2NETP(), _img(64, 64),
             [f"d{i}" for i in range(7)], note="RSU blocks, ceil MaxPool, bilinear to a skip's size, 7 Sigmoids"),
        Spec("matting_op11", "MODNet / BiSeNetV2 style matting", "segmenter", 11, lambda f: MattingNet(),
             _img(128, 128), ["alpha", "semantic"], note="AdaptiveAvgPool 1/2/4 branches + bilinear + concat, SE"),
        Spec("rtmpose_simcc_op11", "RTMPose SimCC", "sequence", 11, lambda f: RTMPoseSimCC(), _img(128, 96),
             ["simcc_x", "simcc_y"], note="GAU with ScaleNorm (ReduceL2), ReLU^2 attention, Linear x / y heads"),
        Spec("rtmpose_simcc_op17", "RTMPose SimCC", "sequence", 17, lambda f: RTMPoseSimCC(), _img(128, 96),
             ["simcc_x", "simcc_y"], note="opset 17"),
        Spec("movenet_style_op13", "MoveNet / CenterNet multipose style", "detector", 13, lambda f: MoveNetStyle(),
             _img(128, 128), ["centre", "regress", "heatmap", "offset"], note="FPN bilinear + add, 4 heads"),
        Spec("hrnet_small_op11", "HRNet-w18-small style", "segmenter", 11, lambda f: HRNetSmall(), _img(128, 96),
             ["heatmaps"], note="parallel branches, fuse: strided convs + 1x1 + nearest Upsample + add"),
        Spec("convtasnet_op13", "Conv-TasNet", "segmenter", 13, lambda f: ConvTasNet(),
             lambda full: [("mix", [1, 4000])], ["sources"], data=dict(WAVE),
             note="Conv1d encoder, gLN (GroupNorm 1), PReLU, dilated depthwise Conv1d, ConvTranspose1d"),
        Spec("convtasnet_op17", "Conv-TasNet", "segmenter", 17, lambda f: ConvTasNet(),
             lambda full: [("mix", [1, 4000])], ["sources"], data=dict(WAVE), note="opset 17"),
        Spec("silero_vad_op16", "Silero-VAD style", "encoder", 16, lambda f: SileroVAD(),
             lambda full: [("input", [1, 512]), ("h", [1, 1, 64]), ("c", [1, 1, 64])], ["output", "hn", "cn"],
             data={**WAVE, "states": ["h", "c"]}, note="STFT as Conv1d, magnitude, LSTM with h/c inputs and outputs"),
    ]  # fmt: skip


#: The real Silero VAD v6 graphs of the ``silero-vad`` wheel (MIT): name -> (file, inputs, outputs, extra_args)
SILERO = {
    "silero_vad_openvino_16k": ("silero_vad_openvino_16k.onnx", [("input", [1, 576]), ("state", [2, 1, 128])],
                                ["output", "stateN"], []),
    "silero_vad_16k_sequence": ("silero_vad_16k_sequence.onnx",
                                [("input", [1, 576]), ("h", [1, 1, 128]), ("c", [1, 1, 128])],
                                ["speech_probs", "hn", "cn"], ["--input-shape", "input=1,576"]),
    # dynamic batch / samples, three Ifs on shapes (x.shape[-1] and the state's batch: inlined once fixed)
    "silero_vad_half": ("silero_vad_half.onnx", [("input", [1, 576]), ("state", [2, 1, 128])], ["output", "stateN"],
                        ["--input-shape", "input=1,576", "--input-shape", "state=2,1,128"]),
}  # fmt: skip


def real_silero(wheel: Path, out_dir: Path) -> None:
    """Copy the real Silero VAD graphs out of the ``silero-vad`` wheel (``/work/wheels/silero_vad-*.whl``) and
    add their entries: 576 samples (64 of context + a 512-sample chunk at 16 kHz), the LSTM state as inputs."""
    import zipfile

    import onnx

    entries = []
    with zipfile.ZipFile(wheel) as zf:
        for name, (file, inputs, outputs, extra) in SILERO.items():
            (out_dir / file).write_bytes(zf.read(f"silero_vad/data/{file}"))
            proto = onnx.load(str(out_dir / file))
            states = [n for n, _ in inputs if n != "input"]
            entries.append({
                "name": name, "file": file, "family": "Silero VAD v6 (real weights)", "kind": "encoder",
                "opset": proto.opset_import[0].version,
                "inputs": [{"name": n, "shape": sh, "dtype": "float32"} for n, sh in inputs], "outputs": outputs,
                "data": {**WAVE, "states": states}, "extra_args": extra, "size": "full",
                "ops": sorted({n.op_type for n in proto.graph.node}), "note": f"{wheel.name} (MIT)",
            })  # fmt: skip
            print(name, entries[-1]["ops"])
    zoo_export.zoo_data.merge_manifest(out_dir, entries)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--silero":
        real_silero(Path(argv[1]), Path(argv[2]) if len(argv) > 2 else zoo_export.FULL_DIR / "probe8i")
        return 0
    return zoo_export.build_main(argv, __doc__, specs(), SEED)


if __name__ == "__main__":
    raise SystemExit(main())
