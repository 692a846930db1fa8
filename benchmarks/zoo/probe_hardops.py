"""Issue 12 probe round 16g: ops the zoo had not met (``--out benchmarks/.zoo/probe16g``, not committed; the
dynamo exports need ``onnxscript`` in the probe's venv).

Small seeded models written in torch after the public architectures and their export code (BatchNorm statistics
from the photos; a model whose inputs are an upstream model's outputs gets them from that seeded upstream model on
real photos / synthetic speech, stored beside it as ``"arrays"``), ``torch.onnx.export`` at opset 17 unless the
op needs more:

- weights computed at run time: NanoTrack-style Siamese tracker split as its ONNX exports are (backbone on the
  127-px template crop, backbone on the 255-px search crop, BAN head with two feature inputs: depthwise
  cross-correlation ``F.conv2d(search, template, groups=C)``), a SiamRPN++-style 3-level RPN head (six feature
  inputs, softmax-weighted levels), a GFPGAN-lite StyleGAN2 decoder (modulated / demodulated convolution grouped
  over the batch, ToRGB skips), timm's CondConv EfficientNet (``efficientnet_cc_b0_4e``: expert weights mixed per
  sample), involution (``nn.Unfold`` + kernels generated from the features);
- FFT: LaMa's Fast Fourier Convolution residual blocks (``torch.fft.rfftn`` / ``irfftn``, ``norm="ortho"``; ONNX
  ``DFT``, dynamo at 18 and 20), an audio front end (``torch.stft``, magnitude, a mel matrix, log; ONNX ``STFT``,
  opset 17) feeding a small CNN;
- sampling: a DCNv2 block (torchvision ``ops.deform_conv2d`` with a modulation mask; ONNX ``DeformConv`` at opset
  19 through a ``register_custom_op_symbolic`` as users write it: neither exporter has one), a box classifier
  on ``ops.roi_align`` (ONNX ``RoiAlign`` opset 16, boxes an input);
- VQ: a VQGAN / CodeFormer-style autoencoder (distances to a codebook, ArgMin, embedding Gather), and its decoder
  from int64 codes;
- recurrence: Robust Video Matting (MobileNetV3 encoder, LR-ASPP, ConvGRU decoder with states ``r1..r4`` in and
  out, a ``downsample_ratio`` input, DeepGuidedFilter refiner).

    python benchmarks/zoo/probe_hardops.py [--only a,b]          # -> benchmarks/.zoo/probe16g/ + zoo.json
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe16g/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import math
import sys
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
import zoo_data  # noqa: E402
from probe_vision_hf import IMG, SAMPLES, Probe, photo_pixels  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe16g"
SEED = 16700
#: NanoTrack / SiamRPN++ feed raw BGR pixels 0..255
RAW_BGR = {"type": "image", "color": "BGR", "scale": 1.0, "mean": [0.0] * 3, "std": [1.0] * 3}
UNIT_RGB = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": [0.0] * 3, "std": [1.0] * 3}
HALF = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": [0.5] * 3, "std": [0.5] * 3}
WAVE = {"type": "waveform", "sample_rate": 16000}
DYNAMO = {"dynamo": True, "external_data": False}


def cbr(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1, act: bool = True) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    return nn.Sequential(*layers, nn.ReLU(inplace=True)) if act else nn.Sequential(*layers)


def bn_statistics(model: nn.Module, batches: list[tuple[torch.Tensor, ...]]) -> None:
    """BatchNorm running statistics as ``export.set_bn_statistics`` sets them, from given input batches."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    with torch.no_grad():
        for b in batches:
            model(*b)
    model.eval()


def photos_at(size: int | tuple[int, int], count: int, seed: int, data=IMG) -> torch.Tensor:
    h, w = (size, size) if isinstance(size, int) else size
    return torch.from_numpy(photo_pixels(data, [1, 3, h, w], count, seed, _photos()))


@cache
def _photos():
    return zoo_data.bn_photos(None, export.default_shared())


# ------------------------------------------------------------------------------------------------ Siamese trackers


def xcorr_depthwise(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """pysot's / NanoTrack's depthwise cross-correlation: the template features are the search's kernels."""
    batch, channel = kernel.size(0), kernel.size(1)
    x = x.view(1, batch * channel, x.size(2), x.size(3))
    kernel = kernel.view(batch * channel, 1, kernel.size(2), kernel.size(3))
    out = F.conv2d(x, kernel, groups=batch * channel)
    return out.view(batch, channel, out.size(2), out.size(3))


class DepthwiseXCorr(nn.Module):
    def __init__(self, cin: int, hidden: int, cout: int, k: int = 3) -> None:
        super().__init__()
        self.conv_kernel = cbr(cin, hidden, k)
        self.conv_search = cbr(cin, hidden, k)
        self.head = nn.Sequential(cbr(hidden, hidden, 1), nn.Conv2d(hidden, cout, 1))

    def forward(self, kernel, search):
        return self.head(xcorr_depthwise(self.conv_search(search), self.conv_kernel(kernel)))


class NanoBackbone(nn.Module):
    """NanoTrack's backbone: MobileNetV3-small features to stride 16 and a 1x1 neck to 48 channels."""

    def __init__(self) -> None:
        super().__init__()
        import torchvision

        self.features = torchvision.models.mobilenet_v3_small(width_mult=0.75).features[:9]
        cout = [m for m in self.features.modules() if isinstance(m, nn.Conv2d)][-1].out_channels
        self.neck = cbr(cout, 48, 1, act=False)

    def forward(self, x):
        return self.neck(self.features(x))


class BanHead(nn.Module):
    """NanoTrack's BAN head: classification and box regression by depthwise cross-correlation."""

    def __init__(self) -> None:
        super().__init__()
        self.cls = DepthwiseXCorr(48, 48, 2)
        self.loc = DepthwiseXCorr(48, 48, 4)

    def forward(self, z_f, x_f):
        return self.cls(z_f, x_f), torch.exp(self.loc(z_f, x_f).clamp(max=4.0))


class RpnHead(nn.Module):
    """SiamRPN++'s MultiRPN: a DepthwiseRPN per level, levels mixed by softmax weights (5 anchors)."""

    def __init__(self, c: int = 64, levels: int = 3, anchors: int = 5) -> None:
        super().__init__()
        self.cls = nn.ModuleList(DepthwiseXCorr(c, c, 2 * anchors) for _ in range(levels))
        self.loc = nn.ModuleList(DepthwiseXCorr(c, c, 4 * anchors) for _ in range(levels))
        self.cls_weight = nn.Parameter(torch.linspace(0.5, 1.5, levels))
        self.loc_weight = nn.Parameter(torch.linspace(1.5, 0.5, levels))

    def forward(self, z2, z3, z4, x2, x3, x4):
        zs, xs = (z2, z3, z4), (x2, x3, x4)
        cw, lw = F.softmax(self.cls_weight, 0), F.softmax(self.loc_weight, 0)
        cls = sum(cw[i] * self.cls[i](zs[i], xs[i]) for i in range(3))
        loc = sum(lw[i] * self.loc[i](zs[i], xs[i]) for i in range(3))
        return cls, loc


class RpnBackbone(nn.Module):
    """SiamRPN++'s MobileNetV2 backbone (stride 8 kept by dilation) + AdjustAllLayer (1x1 + BN per level, the
    template's centre 7x7 crop)."""

    def __init__(self, template: bool) -> None:
        super().__init__()
        import torchvision

        f = torchvision.models.mobilenet_v2(width_mult=0.5).features
        self.l1, self.l2, self.l3, self.l4 = f[:4], f[4:7], f[7:11], f[11:14]
        for m in [*self.l3.modules(), *self.l4.modules()]:  # stride 8 throughout, dilated as pysot's
            if isinstance(m, nn.Conv2d) and m.stride == (2, 2):
                m.stride = (1, 1)
        chans = [self._out(s) for s in (self.l2, self.l3, self.l4)]
        self.adjust = nn.ModuleList(cbr(c, 64, 1, act=False) for c in chans)
        self.template = template

    @staticmethod
    def _out(seq: nn.Module) -> int:
        return [m for m in seq.modules() if isinstance(m, nn.Conv2d)][-1].out_channels

    def forward(self, x):
        x1 = self.l1(x)
        x2 = self.l2(x1)
        x3 = self.l3(x2)
        x4 = self.l4(x3)
        outs = []
        for a, f in zip(self.adjust, (x2, x3, x4), strict=True):
            y = a(f)
            if self.template and y.size(3) < 20:
                l = (y.size(3) - 7) // 2  # noqa: E741
                y = y[:, :, l : l + 7, l : l + 7]
            outs.append(y)
        return tuple(outs)


def tracker_crops(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Template (127) and search (255) crops of the same photos: the template the centre of the search region
    as the tracker crops them (context 0.5: the search region twice the template's)."""
    search = photos_at(255, count, seed, RAW_BGR)
    template = F.interpolate(
        search[:, :, 64:191, 64:191], size=(127, 127), mode="bilinear", align_corners=False
    )
    return template, search


@cache
def nano_backbone() -> nn.Module:
    torch.manual_seed(SEED + 1)
    m = NanoBackbone()
    t, s = tracker_crops(32, 1)
    bn_statistics(m, [(s[i : i + 16],) for i in range(0, 32, 16)])
    return m


@cache
def rpn_backbones() -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(SEED + 2)
    x = RpnBackbone(template=False)
    t, s = tracker_crops(32, 2)
    bn_statistics(x, [(s[i : i + 16],) for i in range(0, 32, 16)])
    z = RpnBackbone(template=True)
    z.load_state_dict(x.state_dict())
    return z.eval(), x.eval()


def nano_features(count: int, seed: int) -> dict[str, np.ndarray]:
    bb = nano_backbone()
    t, s = tracker_crops(count, seed)
    with torch.no_grad():
        return {"z_f": bb(t).numpy(), "x_f": bb(s).numpy()}


def rpn_features(count: int, seed: int) -> dict[str, np.ndarray]:
    zb, xb = rpn_backbones()
    t, s = tracker_crops(count, seed)
    with torch.no_grad():
        zs, xs = zb(t), xb(s)
    names = ["z2", "z3", "z4", "x2", "x3", "x4"]
    return {n: a.numpy() for n, a in zip(names, (*zs, *xs), strict=True)}


# ------------------------------------------------------------------------------------------------ modulated convs


class ModulatedConv2d(nn.Module):
    """GFPGANv1Clean's ModulatedConv2d: weight * style, demodulation, one conv grouped over the batch."""

    def __init__(
        self, cin: int, cout: int, k: int, style_dim: int, demodulate: bool = True, up: bool = False
    ):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, cout, cin, k, k) / math.sqrt(cin * k * k))
        self.modulation = nn.Linear(style_dim, cin)
        nn.init.constant_(self.modulation.bias, 1.0)
        self.demodulate, self.up, self.k, self.cout = demodulate, up, k, cout

    def forward(self, x, style):
        b, c, h, w = x.shape
        s = self.modulation(style).view(b, 1, c, 1, 1)
        weight = self.weight * s
        if self.demodulate:
            demod = torch.rsqrt(weight.pow(2).sum([2, 3, 4]) + 1e-8)
            weight = weight * demod.view(b, self.cout, 1, 1, 1)
        weight = weight.view(b * self.cout, c, self.k, self.k)
        if self.up:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
            h, w = h * 2, w * 2
        x = x.view(1, b * c, h, w)
        out = F.conv2d(x, weight, padding=self.k // 2, groups=b)
        return out.view(b, self.cout, *out.shape[2:])


class StyleConv(nn.Module):
    def __init__(self, cin, cout, style_dim, up=False):
        super().__init__()
        self.conv = ModulatedConv2d(cin, cout, 3, style_dim, up=up)
        self.bias = nn.Parameter(0.1 * torch.randn(1, cout, 1, 1))

    def forward(self, x, style):  # GFPGAN's noise injection left out: RandomNormalLike has no reference
        return F.leaky_relu(self.conv(x, style) + self.bias, 0.2) * math.sqrt(2)


class ToRGB(nn.Module):
    def __init__(self, cin, style_dim):
        super().__init__()
        self.conv = ModulatedConv2d(cin, 3, 1, style_dim, demodulate=False)
        self.bias = nn.Parameter(torch.zeros(1, 3, 1, 1))

    def forward(self, x, style, skip=None):
        out = self.conv(x, style) + self.bias
        if skip is not None:
            out = out + F.interpolate(skip, scale_factor=2, mode="bilinear", align_corners=False)
        return out


class GfpganLite(nn.Module):
    """GFPGAN's shape at 64 px: a U-Net-ish encoder to 8x8, the style code from its last features, a StyleGAN2
    decoder (two StyleConvs per resolution, ToRGB skips) from the 8x8 features back to 64 px."""

    def __init__(self, c: int = 32, style_dim: int = 64) -> None:
        super().__init__()
        self.enc = nn.Sequential(cbr(3, c, 3, 2), cbr(c, c, 3, 2), cbr(c, c, 3, 2))
        self.to_style = nn.Linear(c * 8 * 8, style_dim)
        self.conv1 = StyleConv(c, c, style_dim)
        self.rgb1 = ToRGB(c, style_dim)
        self.ups = nn.ModuleList(StyleConv(c, c, style_dim, up=True) for _ in range(3))
        self.convs = nn.ModuleList(StyleConv(c, c, style_dim) for _ in range(3))
        self.rgbs = nn.ModuleList(ToRGB(c, style_dim) for _ in range(3))

    def forward(self, x):
        f = self.enc(x)
        style = self.to_style(f.flatten(1))
        out = self.conv1(f, style)
        skip = self.rgb1(out, style)
        for up, conv, rgb in zip(self.ups, self.convs, self.rgbs, strict=True):
            out = conv(up(out, style), style)
            skip = rgb(out, style, skip)
        return torch.tanh(skip)


def condconv() -> nn.Module:
    import timm

    return timm.create_model("efficientnet_cc_b0_4e", pretrained=False, num_classes=100)


# ------------------------------------------------------------------------------------------------ involution


class Involution(nn.Module):
    """Involution (Li et al. 2021, the official mmcls one): a KxK kernel per pixel and group generated from the
    pixel's features, applied to ``nn.Unfold`` patches."""

    def __init__(self, c: int, k: int = 3, group_channels: int = 8, reduction: int = 4) -> None:
        super().__init__()
        self.k, self.groups = k, c // group_channels
        self.conv1 = cbr(c, c // reduction, 1)
        self.conv2 = nn.Conv2d(c // reduction, k * k * self.groups, 1)
        self.unfold = nn.Unfold(k, 1, (k - 1) // 2, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        weight = self.conv2(self.conv1(x)).view(b, self.groups, self.k * self.k, h, w).unsqueeze(2)
        out = self.unfold(x).view(b, self.groups, c // self.groups, self.k * self.k, h, w)
        return (weight * out).sum(dim=3).view(b, c, h, w)


class RedNetLite(nn.Module):
    def __init__(self, c: int = 32, classes: int = 100) -> None:
        super().__init__()
        self.stem = nn.Sequential(cbr(3, c, 3, 2), cbr(c, c, 3, 2))
        self.blocks = nn.ModuleList(
            nn.Sequential(Involution(c, 7 if i else 3), nn.BatchNorm2d(c), nn.ReLU(), cbr(c, c, 1, act=False))
            for i in range(2)
        )
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        for b in self.blocks:
            x = F.relu(x + b(x))
        return self.head(x.mean((2, 3)))


# ------------------------------------------------------------------------------------------------ FFT


class FourierUnit(nn.Module):
    """LaMa's FourierUnit (``ffc.py``): rfftn over H, W (ortho), real / imag as channels, 1x1 conv + BN + ReLU,
    irfftn back to H x W."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv_layer = nn.Conv2d(cin * 2, cout * 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout * 2)

    def forward(self, x):
        b, c, h, w = x.shape
        ffted = torch.fft.rfftn(x, dim=(-2, -1), norm="ortho")
        ffted = torch.stack((ffted.real, ffted.imag), dim=-1)
        ffted = ffted.permute(0, 1, 4, 2, 3).contiguous().view(b, -1, h, w // 2 + 1)
        ffted = F.relu(self.bn(self.conv_layer(ffted)))
        ffted = ffted.view(b, -1, 2, h, w // 2 + 1).permute(0, 1, 3, 4, 2).contiguous()
        ffted = torch.complex(ffted[..., 0], ffted[..., 1])
        return torch.fft.irfftn(ffted, s=(h, w), dim=(-2, -1), norm="ortho")


class SpectralTransform(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = cbr(cin, cout // 2, 1)
        self.fu = FourierUnit(cout // 2, cout // 2)
        self.conv2 = nn.Conv2d(cout // 2, cout, 1, bias=False)

    def forward(self, x):
        x = self.conv1(x)
        return self.conv2(x + self.fu(x))


class FFC(nn.Module):
    """LaMa's FFC_BN_ACT with ratio_gin = ratio_gout = 0.75: local / global channel split, l2l / l2g / g2l convs
    and the spectral transform g2g."""

    def __init__(self, c: int, ratio: float = 0.75) -> None:
        super().__init__()
        g = int(c * ratio)
        lo = c - g
        self.lo, self.g = lo, g
        self.l2l = nn.Conv2d(lo, lo, 3, 1, 1, bias=False, padding_mode="reflect")
        self.l2g = nn.Conv2d(lo, g, 3, 1, 1, bias=False, padding_mode="reflect")
        self.g2l = nn.Conv2d(g, lo, 3, 1, 1, bias=False, padding_mode="reflect")
        self.g2g = SpectralTransform(g, g)
        self.bn_l, self.bn_g = nn.BatchNorm2d(lo), nn.BatchNorm2d(g)

    def forward(self, x_l, x_g):
        out_l = self.l2l(x_l) + self.g2l(x_g)
        out_g = self.l2g(x_l) + self.g2g(x_g)
        return F.relu(self.bn_l(out_l)), F.relu(self.bn_g(out_g))


class LamaLite(nn.Module):
    """LaMa's generator at 64 px: image + mask in, strided convs, two FFC residual blocks, transposed convs,
    Sigmoid out (the inpainted image)."""

    def __init__(self, c: int = 32) -> None:
        super().__init__()
        self.down = nn.Sequential(cbr(4, c // 2, 3), cbr(c // 2, c, 3, 2), cbr(c, c, 3, 2))
        self.blocks = nn.ModuleList(nn.ModuleList([FFC(c), FFC(c)]) for _ in range(2))
        self.up = nn.Sequential(
            nn.ConvTranspose2d(c, c // 2, 3, 2, 1, output_padding=1), nn.BatchNorm2d(c // 2), nn.ReLU(),
            nn.ConvTranspose2d(c // 2, c // 2, 3, 2, 1, output_padding=1), nn.BatchNorm2d(c // 2), nn.ReLU(),
            nn.Conv2d(c // 2, 3, 3, 1, 1),
        )  # fmt: skip
        self.split = c - int(c * 0.75)

    def forward(self, x):
        mask = (x[:, :1] > 1.5).to(x.dtype)  # a mask drawn into the image: the brightest pixels of channel 0
        f = self.down(torch.cat([x * (1 - mask), mask], 1))
        x_l, x_g = f[:, : self.split], f[:, self.split :]
        for a, b in self.blocks:
            y_l, y_g = b(*a(x_l, x_g))
            x_l, x_g = x_l + y_l, x_g + y_g
        return torch.sigmoid(self.up(torch.cat([x_l, x_g], 1)))


def mel_matrix(sr: int = 16000, n_fft: int = 400, n_mels: int = 40) -> np.ndarray:
    """HTK mel filterbank [n_fft // 2 + 1, n_mels] (torchaudio's ``melscale_fbanks``, norm None)."""

    def hz2mel(f):
        return 2595.0 * np.log10(1.0 + f / 700.0)

    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    pts = 700.0 * (10 ** (np.linspace(hz2mel(0.0), hz2mel(sr / 2), n_mels + 2) / 2595.0) - 1.0)
    down = (freqs[:, None] - pts[None, :-2]) / (pts[1:-1] - pts[:-2])[None]
    up = (pts[None, 2:] - freqs[:, None]) / (pts[2:] - pts[1:-1])[None]
    return np.maximum(0.0, np.minimum(down, up)).astype(np.float32)


class StftKws(nn.Module):
    """A keyword spotter with its front end in the graph: ``torch.stft`` (n_fft 400, hop 160, Hann, centred),
    magnitude, mel matrix, log; then a small CNN."""

    def __init__(self, classes: int = 12) -> None:
        super().__init__()
        self.register_buffer("window", torch.hann_window(400))
        self.register_buffer("mel", torch.from_numpy(mel_matrix()))
        self.cnn = nn.Sequential(cbr(1, 16, 3, 2), cbr(16, 32, 3, 2), cbr(32, 32, 3, 2))
        self.head = nn.Linear(32, classes)

    def forward(self, wav):
        spec = torch.stft(wav, 400, 160, 400, self.window, center=False, return_complex=True)
        mag = spec.abs()  # [1, 201, frames]
        logmel = torch.log(torch.matmul(mag.transpose(1, 2), self.mel) + 1e-6)
        return self.head(self.cnn(logmel.unsqueeze(1)).mean((2, 3)))


class StftKwsReal(StftKws):
    """The legacy exporter's form: ``return_complex=False`` (real / imag as a last axis of 2)."""

    def forward(self, wav):
        spec = torch.stft(wav, 400, 160, 400, self.window, center=False, return_complex=False)
        mag = torch.sqrt(spec.pow(2).sum(-1) + 1e-9)
        logmel = torch.log(torch.matmul(mag.transpose(1, 2), self.mel) + 1e-6)
        return self.head(self.cnn(logmel.unsqueeze(1)).mean((2, 3)))


# ------------------------------------------------------------------------------------------------ sampling


def _deform_symbolic(g, input, weight, offset, mask, bias, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
                     n_weight_grps, n_offset_grps, use_mask):  # fmt: skip
    from torch.onnx import symbolic_helper as sh

    sh_i = [sh._get_const(v, "i", n) for v, n in ((stride_h, "s"), (stride_w, "s"), (pad_h, "p"), (pad_w, "p"),
                                                 (dil_h, "d"), (dil_w, "d"), (n_weight_grps, "g"),
                                                 (n_offset_grps, "o"))]  # fmt: skip
    args = [input, weight, offset, bias]
    if sh._get_const(use_mask, "b", "use_mask"):
        args.append(mask)
    return g.op("DeformConv", *args, strides_i=sh_i[:2], pads_i=[sh_i[2], sh_i[3], sh_i[2], sh_i[3]],
                dilations_i=sh_i[4:6], group_i=sh_i[6], offset_group_i=sh_i[7])  # fmt: skip


def register_deform_conv() -> None:
    torch.onnx.register_custom_op_symbolic("torchvision::deform_conv2d", _deform_symbolic, 19)


class DCNv2(nn.Module):
    """mmcv's ModulatedDeformConv2dPack: a 3x3 conv gives 2 * 9 offsets and 9 mask logits per pixel."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv_offset = nn.Conv2d(cin, 27, 3, 1, 1)
        with torch.no_grad():  # mmcv initialises it to 0; a trained one moves a pixel or two
            self.conv_offset.weight.normal_(0, 0.02)
            self.conv_offset.bias.zero_()
        self.weight = nn.Parameter(torch.randn(cout, cin, 3, 3) / math.sqrt(cin * 9))
        self.bias = nn.Parameter(torch.zeros(cout))

    def forward(self, x):
        import torchvision

        o = self.conv_offset(x)
        offset, mask = o[:, :18], torch.sigmoid(o[:, 18:])
        return torchvision.ops.deform_conv2d(x, offset, self.weight, self.bias, padding=1, mask=mask)


class DcnNet(nn.Module):
    def __init__(self, c: int = 32, classes: int = 100) -> None:
        super().__init__()
        self.stem = nn.Sequential(cbr(3, c, 3, 2), cbr(c, c, 3, 2))
        self.dcn = DCNv2(c, c)
        self.bn = nn.BatchNorm2d(c)
        self.tail = cbr(c, 2 * c, 3, 2)
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.bn(self.dcn(x)))
        return self.head(self.tail(x).mean((2, 3)))


class RoiHead(nn.Module):
    """A two-stage detector's box head on given boxes: backbone to stride 8, ``roi_align`` 7x7 (sampling ratio 2,
    aligned), two fc layers, class scores and box deltas per box."""

    def __init__(self, c: int = 32, classes: int = 11) -> None:
        super().__init__()
        self.backbone = nn.Sequential(cbr(3, c, 3, 2), cbr(c, c, 3, 2), cbr(c, c, 3, 2))
        self.fc = nn.Sequential(
            nn.Flatten(), nn.Linear(c * 49, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU()
        )
        self.cls, self.box = nn.Linear(128, classes), nn.Linear(128, 4 * classes)

    def forward(self, image, rois):
        import torchvision

        f = torchvision.ops.roi_align(self.backbone(image), rois, (7, 7), 1 / 8, 2, True)
        h = self.fc(f)
        return F.softmax(self.cls(h), -1), self.box(h)


ROIS = 8


def roi_arrays(count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 96, (count, ROIS, 2))
    wh = rng.uniform(12, 64, (count, ROIS, 2))
    boxes = np.concatenate([np.zeros((count, ROIS, 1)), xy, np.minimum(xy + wh, 127)], -1).astype(np.float32)
    return {"image": photos_at(128, count, seed).numpy(), "rois": boxes}


# ------------------------------------------------------------------------------------------------ VQ


class VQGanLite(nn.Module):
    """VQGAN / CodeFormer's quantizer between a conv encoder and decoder: squared distances of each 8x8 feature
    to a 256-entry codebook, ArgMin, the codebook row gathered (``nn.Embedding``)."""

    def __init__(self, c: int = 32, dim: int = 32, codes: int = 256) -> None:
        super().__init__()
        self.encoder = nn.Sequential(cbr(3, c, 3, 2), cbr(c, c, 3, 2), cbr(c, c, 3, 2), nn.Conv2d(c, dim, 1))
        self.embedding = nn.Embedding(codes, dim)
        self.decoder = nn.Sequential(
            cbr(dim, c, 3), nn.Upsample(scale_factor=2), cbr(c, c, 3), nn.Upsample(scale_factor=2), cbr(c, c, 3),
            nn.Upsample(scale_factor=2), nn.Conv2d(c, 3, 3, 1, 1),
        )  # fmt: skip
        self.dim = dim

    def codes(self, x):
        z = self.encoder(x).permute(0, 2, 3, 1)
        zf = z.reshape(-1, self.dim)
        e = self.embedding.weight
        d = zf.pow(2).sum(1, keepdim=True) + e.pow(2).sum(1) - 2 * zf @ e.t()
        return torch.argmin(d, dim=1).view(z.shape[0], -1), z.shape

    def decode(self, idx):
        b, n = idx.shape
        s = int(math.isqrt(n))
        q = self.embedding(idx).view(b, s, s, self.dim).permute(0, 3, 1, 2)
        return self.decoder(q)

    def forward(self, x):
        idx, _ = self.codes(x)
        return self.decode(idx), idx


class VQDecode(nn.Module):
    def __init__(self, vq: VQGanLite) -> None:
        super().__init__()
        self.vq = vq

    def forward(self, codes):
        return self.vq.decode(codes)


@cache
def vq_model() -> VQGanLite:
    torch.manual_seed(SEED + 3)
    m = VQGanLite()
    x = photos_at(64, 32, 3, HALF)
    bn_statistics(m.encoder, [(x[i : i + 16],) for i in range(0, 32, 16)])
    with torch.no_grad():  # the codebook: encoder features of photos (k-means-like init), so ArgMin spreads
        z = m.encoder(x).permute(0, 2, 3, 1).reshape(-1, m.dim)
        m.embedding.weight.copy_(
            z[torch.randperm(z.shape[0], generator=torch.Generator().manual_seed(3))[:256]]
        )
        q = m.embedding(m.codes(x)[0]).view(32, 8, 8, m.dim).permute(0, 3, 1, 2)
    bn_statistics(m.decoder, [(q[i : i + 16],) for i in range(0, 32, 16)])
    return m.eval()


def vq_codes(count: int, seed: int) -> dict[str, np.ndarray]:
    with torch.no_grad():
        return {"codes": vq_model().codes(photos_at(64, count, seed, HALF))[0].numpy()}


# ------------------------------------------------------------------------------------------------ RVM


class ConvGRU(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.ih = nn.Sequential(nn.Conv2d(c * 2, c * 2, 3, padding=1), nn.Sigmoid())
        self.hh = nn.Sequential(nn.Conv2d(c * 2, c, 3, padding=1), nn.Tanh())

    def forward(self, x, h):
        r, z = self.ih(torch.cat([x, h], dim=1)).split(x.size(1), dim=1)
        c = self.hh(torch.cat([x, r * h], dim=1))
        h = (1 - z) * h + z * c
        return h, h


class Bottleneck(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.c = c
        self.gru = ConvGRU(c // 2)

    def forward(self, x, r):
        a, b = x.split(self.c // 2, dim=-3)
        b, r = self.gru(b, r)
        return torch.cat([a, b], dim=-3), r


class Upsampling(nn.Module):
    def __init__(self, cin: int, skip: int, src: int, cout: int) -> None:
        super().__init__()
        self.cout = cout
        self.conv = cbr(cin + skip + src, cout, 3)
        self.gru = ConvGRU(cout // 2)

    def forward(self, x, f, s, r):
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        x = x[:, :, : s.size(2), : s.size(3)]
        x = self.conv(torch.cat([x, f, s], dim=1))
        a, b = x.split(self.cout // 2, dim=1)
        b, r = self.gru(b, r)
        return torch.cat([a, b], dim=1), r


class ResizeByFactor(torch.autograd.Function):
    """RVM's ``CustomOnnxResizeByFactorOp`` (its onnx branch): bilinear Resize whose scales are
    ``[1, 1, ratio, ratio]`` from the ``downsample_ratio`` input."""

    @staticmethod
    def forward(ctx, x, factor):
        return F.interpolate(x, scale_factor=float(factor[0]), mode="bilinear", align_corners=False,
                             recompute_scale_factor=False)  # fmt: skip

    @staticmethod
    def symbolic(g, x, factor):
        scales = g.op("Concat", g.op("Constant", value_t=torch.tensor([1.0, 1.0])), factor, factor, axis_i=0)
        empty = g.op("Constant", value_t=torch.tensor([], dtype=torch.float32))
        return g.op("Resize", x, empty, scales, coordinate_transformation_mode_s="pytorch_half_pixel",
                    cubic_coeff_a_f=-0.75, mode_s="linear", nearest_mode_s="floor")  # fmt: skip


class RvmLite(nn.Module):
    """Robust Video Matting (its ``onnx`` export branch): MobileNetV3-Large encoder, LR-ASPP, recurrent decoder
    (ConvGRU on half the channels at 1/16, 1/8, 1/4, 1/2), projection to fgr + pha, DeepGuidedFilter refiner back
    to the input size; ``downsample_ratio`` a [1] tensor input (the Resize scales), states r1..r4 in and out."""

    def __init__(self) -> None:
        super().__init__()
        import torchvision

        f = torchvision.models.mobilenet_v3_large(width_mult=0.5).features
        for m in f[13].modules():  # RVM's encoder: the last stage dilated, stride 16 out
            if isinstance(m, nn.Conv2d) and m.stride == (2, 2):
                m.stride, m.dilation, m.padding = (1, 1), (2, 2), (m.padding[0] * 2, m.padding[1] * 2)
        self.f1, self.f2, self.f3, self.f4 = f[:2], f[2:4], f[4:7], f[7:17]

        def out(s):
            return [m for m in s.modules() if isinstance(m, nn.Conv2d)][-1].out_channels

        c1, c2, c3, c4 = (out(s) for s in (self.f1, self.f2, self.f3, self.f4))
        self.aspp1 = cbr(c4, 64, 1)
        self.aspp2 = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c4, 64, 1, bias=False), nn.Sigmoid())
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.decode4 = Bottleneck(64)
        self.decode3 = Upsampling(64, c3, 3, 40)
        self.decode2 = Upsampling(40, c2, 3, 32)
        self.decode1 = Upsampling(32, c1, 3, 16)
        self.decode0 = nn.Sequential(cbr(16 + 3, 16, 3), cbr(16, 16, 3))
        self.project = nn.Conv2d(16, 4, 1)
        self.box = nn.Conv2d(4, 4, 3, padding=1, bias=False, groups=4)  # refiner's box filter (fixed weights)
        with torch.no_grad():
            self.box.weight.fill_(1 / 9)
        self.refine = nn.Sequential(
            nn.Conv2d(4 * 2 + 16, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(True),
            nn.Conv2d(16, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(True), nn.Conv2d(16, 4, 1),
        )  # fmt: skip
        self.box.weight.requires_grad_(False)

    def forward(self, src, r1, r2, r3, r4, downsample_ratio):
        src_sm = ResizeByFactor.apply(src, downsample_ratio)
        x = (src_sm - self.mean) / self.std
        f1 = self.f1(x)
        f2 = self.f2(f1)
        f3 = self.f3(f2)
        f4 = self.f4(f3)
        f4 = self.aspp1(f4) * self.aspp2(f4)
        s1 = F.avg_pool2d(src_sm, 2, 2, count_include_pad=False, ceil_mode=True)
        s2 = F.avg_pool2d(s1, 2, 2, count_include_pad=False, ceil_mode=True)
        s3 = F.avg_pool2d(s2, 2, 2, count_include_pad=False, ceil_mode=True)
        x4, r4 = self.decode4(f4, r4)
        x3, r3 = self.decode3(x4, f3, s3, r3)
        x2, r2 = self.decode2(x3, f2, s2, r2)
        x1, r1 = self.decode1(x2, f1, s1, r1)
        x0 = F.interpolate(x1, scale_factor=2, mode="bilinear", align_corners=False)
        hid = self.decode0(torch.cat([x0[:, :, : src_sm.size(2), : src_sm.size(3)], src_sm], 1))
        fgr_res, pha = self.project(hid).split([3, 1], dim=-3)
        fgr = fgr_res + src_sm
        # DeepGuidedFilterRefiner
        base_x = torch.cat([src_sm, src_sm.mean(1, keepdim=True)], 1)
        base_y = torch.cat([fgr, pha], 1)
        mean_x, mean_y = self.box(base_x), self.box(base_y)
        cov_xy = self.box(base_x * base_y) - mean_x * mean_y
        var_x = self.box(base_x * base_x) - mean_x * mean_x
        A = self.refine(torch.cat([cov_xy, var_x, hid], 1))
        b = mean_y - A * mean_x
        h, w = src.shape[2:]
        A = F.interpolate(A, (h, w), mode="bilinear", align_corners=False)
        b = F.interpolate(b, (h, w), mode="bilinear", align_corners=False)
        fine_x = torch.cat([src, src.mean(1, keepdim=True)], 1)
        out = A * fine_x + b
        fgr, pha = out.split([3, 1], dim=1)
        return fgr.clamp(0.0, 1.0), pha.clamp(0.0, 1.0), r1, r2, r3, r4


RVM_HW = 128
RVM_RATIO = 0.5


def rvm_states(count: int) -> list[torch.Tensor]:
    s = int(RVM_HW * RVM_RATIO)
    return [torch.zeros(count, c, s // d, s // d) for c, d in ((8, 2), (16, 4), (20, 8), (32, 16))]


@cache
def rvm_model() -> RvmLite:
    torch.manual_seed(SEED + 4)
    m = RvmLite()
    x = photos_at(RVM_HW, 32, 4, UNIT_RGB)
    ratio = torch.tensor([RVM_RATIO])
    bn_statistics(m, [(x[i : i + 16], *rvm_states(16), ratio) for i in range(0, 32, 16)])
    return m.eval()


def rvm_arrays(count: int, seed: int) -> dict[str, np.ndarray]:
    """Frame t: a photo; the states the seeded model left after frames t-2 and t-1 (the photo shifted by 6 and 3
    pixels, from zero states)."""
    m = rvm_model()
    big = photos_at(RVM_HW + 8, count, seed, UNIT_RGB)
    frames = [big[:, :, 6 - k : 6 - k + RVM_HW, 6 - k : 6 - k + RVM_HW] for k in (0, 3, 6)]
    ratio = torch.tensor([RVM_RATIO])
    rows: dict[str, list[np.ndarray]] = {k: [] for k in ("r1", "r2", "r3", "r4")}
    with torch.no_grad():
        for i in range(count):
            st = [s[:1] for s in rvm_states(1)]
            for fr in frames[:2]:
                st = list(m(fr[i : i + 1], *st, ratio)[2:])
            for k, s in zip(rows, st, strict=True):
                rows[k].append(s.numpy())
    return {"src": frames[2].numpy(), **{k: np.concatenate(v) for k, v in rows.items()},
            "downsample_ratio": np.full((count, 1), RVM_RATIO, np.float32)}  # fmt: skip


class RvmFixedRatio(nn.Module):
    """RVM exported with ``downsample_ratio`` a constant (what the static-shape targets need)."""

    def __init__(self) -> None:
        super().__init__()
        self.m = rvm_model()

    def forward(self, src, r1, r2, r3, r4):
        return self.m(src, r1, r2, r3, r4, torch.tensor([RVM_RATIO]))


def rvm_fixed_arrays(count: int, seed: int) -> dict[str, np.ndarray]:
    rows = rvm_arrays(count, seed)
    rows.pop("downsample_ratio")
    return rows


# ------------------------------------------------------------------------------------------------ the probes


def arrays_entry(name: str) -> dict[str, Any]:
    return {"type": "arrays", "file": f"{name}.samples.npz"}


def probes() -> list[Probe]:
    img = IMG
    nano = [("z_f", [1, 48, 8, 8], "float32"), ("x_f", [1, 48, 16, 16], "float32")]
    rpn = [(f"z{i}", [1, 64, 7, 7], "float32") for i in (2, 3, 4)] + [
        (f"x{i}", [1, 64, 31, 31], "float32") for i in (2, 3, 4)
    ]
    rvm_in = [("src", [1, 3, RVM_HW, RVM_HW], "float32")] + [
        (f"r{i}", list(s.shape[:1]) + list(s.shape[1:]), "float32") for i, s in enumerate(rvm_states(1), 1)
    ] + [("downsample_ratio", [1], "float32")]  # fmt: skip
    return [
        Probe("w_nanotrack_backbone_t", "NanoTrack backbone, template crop 127 (MobileNetV3-small, BGR 0..255)",
              "encoder", 17, nano_backbone, [("input", [1, 3, 127, 127], "float32")], ["z_f"], RAW_BGR),
        Probe("w_nanotrack_backbone_x", "NanoTrack backbone, search crop 255", "encoder", 17, nano_backbone,
              [("input", [1, 3, 255, 255], "float32")], ["x_f"], RAW_BGR),
        Probe("w_nanotrack_head", "NanoTrack BAN head: depthwise xcorr (Conv weight = template features)", "detector",
              17, BanHead, nano, ["cls", "loc"], arrays_entry("w_nanotrack_head"), arrays=nano_features),
        Probe("w_siamrpnpp_head", "SiamRPN++ MultiRPN head: 3 levels of depthwise xcorr, softmax level weights",
              "detector", 17, RpnHead, rpn, ["cls", "loc"], arrays_entry("w_siamrpnpp_head"), arrays=rpn_features),
        Probe("w_gfpgan_modconv", "GFPGAN-lite StyleGAN2 decoder: modulated / demodulated grouped conv", "segmenter",
              17, GfpganLite, [("input", [1, 3, 64, 64], "float32")], ["output"], HALF),
        Probe("w_condconv_b0_4e", "timm efficientnet_cc_b0_4e (CondConv: 4 experts mixed per sample), 128 px",
              "classifier", 17, condconv, [("input", [1, 3, 128, 128], "float32")], ["logits"], img),
        Probe("w_involution", "involution (RedNet-style): nn.Unfold patches x generated kernels", "classifier", 17,
              RedNetLite, [("input", [1, 3, 64, 64], "float32")], ["logits"], img),
        Probe("f_lama_ffc_dyn18", "LaMa FFC generator (rfftn / irfftn ortho: DFT), dynamo", "segmenter", 18,
              LamaLite, [("input", [1, 3, 64, 64], "float32")], ["output"], img, export_kwargs=DYNAMO),
        Probe("f_lama_ffc_dyn20", "LaMa FFC generator, dynamo at opset 20 (DFT-20)", "segmenter", 20, LamaLite,
              [("input", [1, 3, 64, 64], "float32")], ["output"], img, export_kwargs=DYNAMO),
        Probe("f_stft_kws_op17", "torch.stft + magnitude + mel matrix + log -> CNN (STFT-17)", "classifier", 17,
              StftKwsReal, [("wav", [1, 16000], "float32")], ["logits"], WAVE),
        Probe("f_stft_kws_dyn18", "torch.stft complex + abs -> CNN, dynamo", "classifier", 18, StftKws,
              [("wav", [1, 16000], "float32")], ["logits"], WAVE, export_kwargs=DYNAMO),
        Probe("s_dcnv2_op19", "DCNv2 block: torchvision deform_conv2d with mask (DeformConv-19)", "classifier", 19,
              DcnNet, [("input", [1, 3, 64, 64], "float32")], ["logits"], img),
        Probe("s_roi_align_op16", "box head on roi_align (RoiAlign-16, aligned), boxes an input", "detector", 16,
              RoiHead, [("image", [1, 3, 128, 128], "float32"), ("rois", [ROIS, 5], "float32")], ["scores", "deltas"],
              arrays_entry("s_roi_align_op16"), arrays=roi_arrays),
        Probe("v_vqgan", "VQGAN/CodeFormer-style autoencoder: codebook distances, ArgMin, Gather", "segmenter", 17,
              vq_model, [("input", [1, 3, 64, 64], "float32")], ["output", "codes"], HALF),
        Probe("v_vq_decode_codes", "VQ decoder from int64 codes (codebook Gather)", "segmenter", 17,
              lambda: VQDecode(vq_model()), [("codes", [1, 64], "int64")], ["output"], arrays_entry("v_vq_decode_codes"),
              arrays=vq_codes),
        Probe("r_rvm", "Robust Video Matting: ConvGRU states r1..r4, downsample_ratio input, DeepGuidedFilter",
              "segmenter", 17, rvm_model, rvm_in, ["fgr", "pha", "r1o", "r2o", "r3o", "r4o"], arrays_entry("r_rvm"),
              arrays=rvm_arrays),
        Probe("r_rvm_ratio_const", "Robust Video Matting, downsample_ratio 0.5 a constant", "segmenter", 17,
              RvmFixedRatio, rvm_in[:-1], ["fgr", "pha", "r1o", "r2o", "r3o", "r4o"],
              arrays_entry("r_rvm_ratio_const"), arrays=rvm_fixed_arrays),
    ]  # fmt: skip


PRETRAINED = {"w_nanotrack_backbone_t", "w_nanotrack_backbone_x", "v_vqgan", "v_vq_decode_codes", "r_rvm",
              "r_rvm_ratio_const"}  # fmt: skip


def build(p: Probe, out_dir: Path, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = p.build().eval()
    inputs = [{"name": n, "shape": s, "dtype": d} for n, s, d in p.inputs]
    names = [i["name"] for i in inputs]
    if p.arrays is not None:
        stored = p.arrays(SAMPLES, seed)
        np.savez(out_dir / p.data["file"], **stored)
        example = tuple(
            # a stored row is the input's shape (the first sample: [0]) or that shape without a leading 1 ([:1])
            torch.from_numpy(stored[n][0] if stored[n].ndim == len(s) + 1 else stored[n][:1])
            for n, s, _ in p.inputs
        )
        if p.name not in PRETRAINED:
            rows = [tuple(torch.from_numpy(stored[n][i : i + 16]) for n in names) for i in (0, 16)]
            if p.name == "s_roi_align_op16":  # boxes of one image: statistics from image by image
                rows = [tuple(torch.from_numpy(stored[n][i]) for n in names) for i in range(16)]
                rows = [(r[0][None], r[1]) for r in rows]
            bn_statistics(model, rows)
    else:
        x = zoo_data.make_arrays({"name": p.name, "data": p.data, "inputs": inputs}, 33, 7, _photos())
        example = tuple(torch.from_numpy(x[n][:1]) for n in names)
        if p.name not in PRETRAINED:
            bn_statistics(
                model, [tuple(torch.from_numpy(x[n][1 + i : 17 + i]) for n in names) for i in (0, 16)]
            )
    if "deform" in p.family or "DCN" in p.family:
        register_deform_conv()
    path = out_dir / f"{p.name}.onnx"
    kw: dict[str, Any] = {"dynamo": False, "do_constant_folding": True} | p.export_kwargs
    if kw["dynamo"]:
        kw.pop("do_constant_folding")
    with torch.no_grad():
        torch.onnx.export(model, example, str(path), input_names=names, output_names=p.outputs,
                          opset_version=p.opset, **kw)  # fmt: skip
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    return {"name": p.name, "file": path.name, "family": p.family, "kind": p.kind, "opset": p.opset, "inputs": inputs,
            "outputs": [o.name for o in proto.graph.output], "data": p.data, "size": "reduced",
            "params": int(sum(q.numel() for q in model.parameters())),
            "ops": sorted({n.op_type for n in proto.graph.node}), "note": p.note, "seed": seed}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    export.export_probes(probes(), lambda i, p: build(p, args.out, SEED + 10 * i), args.out, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
