"""Issue 12 probe round 14g: generative, codec and feature-matching models as their packages build them
(``--out benchmarks/.zoo/probe14g``, not committed; needs ``diffusers``, ``kornia`` (+ ``kornia_rs``) and
``onnxscript`` pip-installed ``--no-deps`` in the probe's venv only).

Seeded weights, small configs, BatchNorm statistics from the photos, ``torch.onnx.export`` at opset 17 (13 where
said):
- diffusers 0.42: AutoencoderTiny (TAESD) encoder and decoder, AutoencoderKL with a tiny config (GroupNorm,
  mid-block attention, SiLU, nearest upsampling) encoder (the latent mean) and decoder, UNet2DModel (AttnDown /
  AttnUp blocks, sin/cos timestep embedding, int64 timestep) and a tiny UNet2DConditionModel (cross-attention on
  ``encoder_hidden_states``, float timestep as diffusers' old ONNX script exports it);
- image restoration: Real-ESRGAN's SRVGGNetCompact (PReLU, PixelShuffle, the nearest-upsampled input added),
  basicsr's RRDBNet x4 (no pixel_unshuffle: round 8i ran x2), NAFNet (LayerNorm2d written out, SimpleGate,
  simplified channel attention, PixelShuffle up);
- audio codecs in transformers 5: EncodecModel and DacModel (weight-normed Conv1d, LSTM (Encodec), Snake (DAC),
  residual vector quantisation: argmin over distances, embedding gather) as encoder (waveform -> int64 codes) and
  decoder (codes -> waveform), 1600 samples at 8 kHz;
- kornia 0.9 feature models: DISK's U-Net, SOLD2's backbone + heads, KeyNet (handcrafted derivative filters +
  learned), HardNet / SOSNet / TFeat patch descriptors (32x32), XFeat's backbone, LightGlue's matcher with fixed
  keypoint counts (the LightGlue-ONNX layout: input projection, Fourier positional encoding, self / cross
  attention, the log-assignment matrix), and SuperPoint written from its paper (VGG encoder, 65-way Softmax,
  the dustbin dropped, pixel shuffle to the heatmap, max-pool NMS, L2-normalised descriptors).

Models whose inputs are not photos or audio (latents, timesteps, text states, codes, keypoints) store their
samples beside them (``"arrays"``): latents and codes come from the matching encoder run on photos / audio.

    python benchmarks/zoo/probe_generative.py --out benchmarks/.zoo/probe14g [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe14g/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402
from exported_as_users_do import _hf_transformers  # noqa: E402

_hf_transformers()  # the real package into sys.modules (this folder's transformers.py shadows it)

Spec = zoo_export.Spec
zoo_data = zoo_export.zoo_data
SEED = 14700
SAMPLES = 48  # rows written for "arrays" models (calibration + evaluation)

RGB01 = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None}
RGB11 = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
GRAY01 = {"type": "image", "color": "GRAY", "scale": 1 / 255, "mean": None, "std": None}
WAVE = {"type": "waveform", "sample_rate": 8000, "signal": "music", "normalize": False}
AUDIO = 1600

warnings.filterwarnings("ignore")


# --------------------------------------------------------------------------------------------- diffusers


def taesd():
    from diffusers import AutoencoderTiny

    return AutoencoderTiny(
        encoder_block_out_channels=(32, 32, 32, 32), decoder_block_out_channels=(32, 32, 32, 32)
    )


class Encode(nn.Module):
    def __init__(self, m, which="tiny"):
        super().__init__()
        self.m, self.which = m, which

    def forward(self, x):
        if self.which == "tiny":
            return self.m.encoder(x)
        return self.m.encode(x).latent_dist.mean


class Decode(nn.Module):
    def __init__(self, m, which="tiny"):
        super().__init__()
        self.m, self.which = m, which

    def forward(self, z):
        if self.which == "tiny":
            return self.m.decoder(z)
        return self.m.decode(z).sample


def vae_kl():
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=(16, 32), down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2, layers_per_block=1, latent_channels=4, norm_num_groups=8,
    )  # fmt: skip


def unet2d():
    from diffusers import UNet2DModel

    return UNet2DModel(
        sample_size=32, block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8, attention_head_dim=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    )  # fmt: skip


def unet2d_cond():
    from diffusers import UNet2DConditionModel

    return UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, block_out_channels=(16, 32), layers_per_block=1,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, norm_num_groups=8, attention_head_dim=4,
    )  # fmt: skip


class UNetWrap(nn.Module):
    def __init__(self, m, cond=False):
        super().__init__()
        self.m, self.cond = m, cond

    def forward(self, sample, timestep, encoder_hidden_states=None):
        if self.cond:
            return self.m(sample, timestep, encoder_hidden_states).sample
        return self.m(sample, timestep).sample


# ---------------------------------------------------------------------------------------- restoration


class SRVGGNetCompact(nn.Module):
    """Real-ESRGAN ``realesrgan/archs/srvgg_arch.py`` (realesr-general-x4v3 layout), 32 features, 8 convs."""

    def __init__(self, num_feat=32, num_conv=8, upscale=4):
        super().__init__()
        self.upscale = upscale
        body = [nn.Conv2d(3, num_feat, 3, 1, 1), nn.PReLU(num_parameters=num_feat)]
        for _ in range(num_conv):
            body += [nn.Conv2d(num_feat, num_feat, 3, 1, 1), nn.PReLU(num_parameters=num_feat)]
        body += [nn.Conv2d(num_feat, 3 * upscale * upscale, 3, 1, 1)]
        self.body = nn.Sequential(*body)
        self.upsampler = nn.PixelShuffle(upscale)

    def forward(self, x):
        out = self.upsampler(self.body(x))
        return out + F.interpolate(x, scale_factor=self.upscale, mode="nearest")


class RRDBNetX4(nn.Module):
    """basicsr ``RRDBNet`` at scale 4 (RealESRGAN_x4plus's layout: no pixel_unshuffle), 16 features, 1 block."""

    def __init__(self, f=16, g=8, blocks=1):
        super().__init__()
        from probe_images import RRDB

        self.conv_first = nn.Conv2d(3, f, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(f, g) for _ in range(blocks)])
        self.conv_body = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_up1 = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_up2 = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_hr = nn.Conv2d(f, f, 3, 1, 1)
        self.conv_last = nn.Conv2d(f, 3, 3, 1, 1)

    def forward(self, x):
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        feat = F.leaky_relu(self.conv_up1(F.interpolate(feat, scale_factor=2, mode="nearest")), 0.2)
        feat = F.leaky_relu(self.conv_up2(F.interpolate(feat, scale_factor=2, mode="nearest")), 0.2)
        return self.conv_last(F.leaky_relu(self.conv_hr(feat), 0.2))


class LayerNorm2d(nn.Module):
    """NAFNet's LayerNorm2d (mean / var over channels, written out as the exporter sees it)."""

    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c)), eps

    def forward(self, x):
        mu = x.mean(1, keepdim=True)
        var = (x - mu).pow(2).mean(1, keepdim=True)
        y = (x - mu) / (var + self.eps).sqrt()
        return self.weight.view(1, -1, 1, 1) * y + self.bias.view(1, -1, 1, 1)


class NAFBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        dw = 2 * c
        self.conv1, self.conv2 = nn.Conv2d(c, dw, 1), nn.Conv2d(dw, dw, 3, 1, 1, groups=dw)
        self.conv3 = nn.Conv2d(dw // 2, c, 1)
        self.sca = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(dw // 2, dw // 2, 1))
        self.conv4, self.conv5 = nn.Conv2d(c, 2 * c, 1), nn.Conv2d(c, c, 1)
        self.norm1, self.norm2 = LayerNorm2d(c), LayerNorm2d(c)
        self.beta = nn.Parameter(torch.randn(1, c, 1, 1) * 0.3)
        self.gamma = nn.Parameter(torch.randn(1, c, 1, 1) * 0.3)
        with torch.no_grad():
            for n in (self.norm1, self.norm2):
                n.weight.uniform_(0.5, 1.5)
                n.bias.uniform_(-0.2, 0.2)

    @staticmethod
    def gate(x):
        a, b = x.chunk(2, dim=1)
        return a * b

    def forward(self, inp):
        x = self.gate(self.conv2(self.conv1(self.norm1(inp))))
        x = self.conv3(x * self.sca(x))
        y = inp + x * self.beta
        x = self.conv5(self.gate(self.conv4(self.norm2(y))))
        return y + x * self.gamma


class NAFNet(nn.Module):
    """NAFNet (megvii-research, image restoration): width 8, encoders 1/1, middle 1, decoders 1/1."""

    def __init__(self, w=8, enc=(1, 1), mid=1, dec=(1, 1)):
        super().__init__()
        self.intro, self.ending = nn.Conv2d(3, w, 3, 1, 1), nn.Conv2d(w, 3, 3, 1, 1)
        self.encoders, self.downs, self.ups, self.decoders = (nn.ModuleList() for _ in range(4))
        c = w
        for n in enc:
            self.encoders.append(nn.Sequential(*[NAFBlock(c) for _ in range(n)]))
            self.downs.append(nn.Conv2d(c, 2 * c, 2, 2))
            c *= 2
        self.middle = nn.Sequential(*[NAFBlock(c) for _ in range(mid)])
        for n in dec:
            self.ups.append(nn.Sequential(nn.Conv2d(c, 2 * c, 1, bias=False), nn.PixelShuffle(2)))
            c //= 2
            self.decoders.append(nn.Sequential(*[NAFBlock(c) for _ in range(n)]))

    def forward(self, inp):
        x = self.intro(inp)
        skips = []
        for e, d in zip(self.encoders, self.downs, strict=True):
            x = e(x)
            skips.append(x)
            x = d(x)
        x = self.middle(x)
        for dec, up, s in zip(self.decoders, self.ups, skips[::-1], strict=True):
            x = dec(up(x) + s)
        return self.ending(x) + inp


# ----------------------------------------------------------------------------------------------- codecs


def encodec():
    from transformers import EncodecConfig, EncodecModel

    cfg = EncodecConfig(
        hidden_size=32, num_filters=8, num_residual_layers=1, upsampling_ratios=[4, 4, 2], codebook_size=64,
        codebook_dim=32, num_lstm_layers=2, target_bandwidths=[10.0], sampling_rate=8000,
    )  # fmt: skip
    m = EncodecModel(cfg)
    _spread_codebooks(m)
    return m


def dac():
    from transformers import DacConfig, DacModel

    cfg = DacConfig(
        encoder_hidden_size=8, downsampling_ratios=[2, 4, 4], decoder_hidden_size=64, n_codebooks=4,
        codebook_size=64, codebook_dim=8, hidden_size=64, sampling_rate=8000,
    )  # fmt: skip
    m = DacModel(cfg)
    _spread_codebooks(m)
    return m


def _spread_codebooks(m):
    """Seeded codebooks are N(0, 1) or zeros: scale them to the encoder output's spread so the argmin chooses."""
    torch.manual_seed(SEED)
    for name, buf in list(m.named_buffers()) + list(m.named_parameters()):
        if name.endswith("embed") or name.endswith("codebook.weight"):
            with torch.no_grad():
                buf.copy_(torch.randn_like(buf) * 0.5)


class CodecEncode(nn.Module):
    def __init__(self, m, which):
        super().__init__()
        self.m, self.which = m, which

    def forward(self, audio):
        x = audio.unsqueeze(1)
        if self.which == "encodec":
            return self.m.encode(x, bandwidth=10.0).audio_codes[0]  # [1, n_q, frames]
        return self.m.encode(x).audio_codes  # [1, n_q, frames]


class CodecDecode(nn.Module):
    def __init__(self, m, which):
        super().__init__()
        self.m, self.which = m, which

    def forward(self, codes):
        if self.which == "encodec":
            return self.m.decode(codes.unsqueeze(0), [None]).audio_values[:, 0]
        return self.m.decode(audio_codes=codes).audio_values


class CodecLatent(nn.Module):
    """The encoder without the quantiser: the continuous embeddings a user quantises outside the graph."""

    def __init__(self, m, which):
        super().__init__()
        self.m, self.which = m, which

    def forward(self, audio):
        x = audio.unsqueeze(1)
        return self.m.encoder(x)


# -------------------------------------------------------------------------------------------- features


class SuperPoint(nn.Module):
    """SuperPoint (DeTone et al. 2018; magicleap's SuperPointNet layout) at half width: VGG encoder, detector head
    (65-way Softmax, dustbin dropped, pixel shuffle to [H, W], 4-pixel max-pool NMS) and descriptor head
    (L2-normalised, coarse)."""

    def __init__(self, c=(32, 32, 64, 64, 128), desc=128):
        super().__init__()
        c1, c2, c3, c4, c5 = c
        conv = lambda a, b, k=3: nn.Conv2d(a, b, k, 1, k // 2)  # noqa: E731
        self.enc = nn.ModuleList([conv(1, c1), conv(c1, c1), conv(c1, c2), conv(c2, c2), conv(c2, c3),
                                  conv(c3, c3), conv(c3, c4), conv(c4, c4)])  # fmt: skip
        self.convPa, self.convPb = conv(c4, c5), conv(c5, 65, 1)
        self.convDa, self.convDb = conv(c4, c5), conv(c5, desc, 1)

    def forward(self, x):
        for i, layer in enumerate(self.enc):
            x = torch.relu(layer(x))
            if i in (1, 3, 5):
                x = F.max_pool2d(x, 2, 2)
        semi = self.convPb(torch.relu(self.convPa(x)))
        prob = torch.softmax(semi, 1)[:, :-1]
        scores = F.pixel_shuffle(prob, 8)  # [1, 1, H, W]
        nms = scores * (scores == F.max_pool2d(scores, 9, 1, 4)).float()
        d = self.convDb(torch.relu(self.convDa(x)))
        return nms, F.normalize(d, p=2, dim=1)


class Unpack(nn.Module):
    """A module whose output is a dict / dataclass / tuple: pick the tensors."""

    def __init__(self, m, fn):
        super().__init__()
        self.m, self.fn = m, fn

    def forward(self, x):
        return self.fn(self.m, x)


def kornia_disk():
    from kornia.feature.disk._unets import Unet

    # DISK's U-Net (kornia's default: 4 down / 3 up, 128 descriptor + 1 heatmap channels) at reduced widths
    return Unpack(Unet(in_features=3, size=3, down=[8, 16, 32, 32], up=[32, 16, 33]), lambda m, x: m(x))


def kornia_sold2():
    from kornia.feature.sold2.backbones import SOLD2Net

    cfg = {"backbone_cfg": {"input_channel": 1, "depth": 2, "num_stacks": 1, "num_blocks": 1, "num_classes": 5},
           "use_descriptor": True, "grid_size": 8, "keep_border_valid": True, "detection_thresh": 0.0153846,
           "descriptor_decoder_type": "superpoint_descriptor", "descriptor_decoder_cfg": {}}  # fmt: skip
    m = SOLD2Net(cfg)
    return Unpack(m, lambda m, x: (lambda o: (o["junctions"], o["heatmap"], o["descriptors"]))(m(x)))


def kornia_keynet():
    from kornia.feature import KeyNet

    return KeyNet(pretrained=False)


def kornia_patch(cls):
    def make(full):
        import kornia.feature as KF

        return getattr(KF, cls)(pretrained=False)

    return make


def kornia_xfeat():
    from kornia.feature import XFeatModel

    return Unpack(XFeatModel(), lambda m, x: tuple(m(x)))


class LightGlueCore(nn.Module):
    """kornia's LightGlue modules run as LightGlue-ONNX exports them: fixed keypoint counts, no adaptive depth /
    width (no early exit, no pruning), keypoints already normalised to [-1, 1]; output the log-assignment."""

    def __init__(self, dim=64, layers=3, heads=4):
        super().__init__()
        from kornia.feature import LightGlue

        self.lg = LightGlue(features=None, input_dim=dim, descriptor_dim=dim, n_layers=layers, num_heads=heads,
                            flash=False, depth_confidence=-1, width_confidence=-1)  # fmt: skip

    def forward(self, kpts0, kpts1, desc0, desc1):
        lg = self.lg
        desc0, desc1 = lg.input_proj(desc0), lg.input_proj(desc1)
        enc0, enc1 = lg.posenc(kpts0), lg.posenc(kpts1)
        for layer in lg.transformers:
            desc0, desc1 = layer(desc0, desc1, enc0, enc1)
        return lg.log_assignment[-1](desc0, desc1)[0]


# ------------------------------------------------------------------------------------------------- specs


def _img(h: int, w: int, c: int = 3, name: str = "input"):
    return lambda full: [(name, [1, c, h, w])]


def _wave(full):
    return [("audio", [1, AUDIO])]


def specs() -> list[Spec]:
    K = "segmenter"
    return [
        Spec("taesd_encoder_op17", "TAESD (diffusers AutoencoderTiny) encoder", K, 17,
             lambda f: Encode(taesd()), _img(64, 64), ["latents"], data=dict(RGB01),
             note="conv / ReLU blocks with residual, stride-2 convs, no norm"),
        Spec("vae_kl_encoder_op17", "AutoencoderKL (diffusers) encoder", K, 17,
             lambda f: Encode(vae_kl(), "kl"), _img(64, 64), ["latent_mean"], data=dict(RGB11),
             note="GroupNorm(8) + SiLU resnets, mid-block attention, latent mean (Split of the moments)"),
        Spec("vae_kl_encoder_op14", "AutoencoderKL (diffusers) encoder", K, 14,
             lambda f: Encode(vae_kl(), "kl"), _img(64, 64), ["latent_mean"], data=dict(RGB11),
             note="opset 14 (13 does not export: scaled_dot_product_attention needs 14): GroupNorm as Reshape / InstanceNormalization"),
        Spec("srvgg_compact_op17", "Real-ESRGAN SRVGGNetCompact x4", K, 17, lambda f: SRVGGNetCompact(),
             _img(32, 32), ["output"], data=dict(RGB01), note="PReLU per channel, PixelShuffle x4, nearest x4 residual"),
        Spec("rrdbnet_x4_op13", "Real-ESRGAN RRDBNet x4 (basicsr)", K, 13, lambda f: RRDBNetX4(),
             _img(24, 24), ["output"], data=dict(RGB01), note="dense concat, LeakyReLU, nearest x2 twice"),
        Spec("nafnet_op17", "NAFNet", K, 17, lambda f: NAFNet(), _img(64, 64), ["output"], data=dict(RGB01),
             note="LayerNorm2d over channels, SimpleGate (chunk * chunk), SCA (avg pool + 1x1), PixelShuffle up"),
        Spec("encodec_encoder_op17", "EnCodec (transformers) encoder + RVQ", "sequence", 17,
             lambda f: CodecEncode(encodec(), "encodec"), _wave, ["audio_codes"], data=dict(WAVE),
             note="weight-normed Conv1d, ELU, 2-layer LSTM, RVQ 4 x 64: argmin of distances, int64 codes"),
        Spec("encodec_latent_op17", "EnCodec (transformers) encoder", K, 17,
             lambda f: CodecLatent(encodec(), "encodec"), _wave, ["embeddings"], data=dict(WAVE),
             note="the encoder without the quantiser"),
        Spec("dac_encoder_op17", "DAC (transformers) encoder + RVQ", "sequence", 17,
             lambda f: CodecEncode(dac(), "dac"), _wave, ["audio_codes"], data=dict(WAVE),
             note="Snake (x + sin^2(a x) / a), weight-normed Conv1d, factorised RVQ (L2-normalised, 1x1 in/out)"),
        Spec("dac_latent_op17", "DAC (transformers) encoder", K, 17,
             lambda f: CodecLatent(dac(), "dac"), _wave, ["embeddings"], data=dict(WAVE),
             note="the encoder without the quantiser"),
        Spec("superpoint_op17", "SuperPoint (paper layout)", K, 17, lambda f: SuperPoint(), _img(96, 128, 1),
             ["scores", "descriptors"], data=dict(GRAY01),
             note="VGG encoder, Softmax 65, pixel shuffle, max-pool NMS (Equal/Cast/Mul), L2 normalise"),
        Spec("disk_unet_op17", "DISK U-Net (kornia)", K, 17, lambda f: kornia_disk(), _img(64, 64),
             ["features"], data=dict(RGB01), note="kornia's DISK U-Net: InstanceNorm + PReLU, avg-pool down, bilinear up"),
        Spec("sold2_op17", "SOLD2 backbone + heads (kornia)", K, 17, lambda f: kornia_sold2(), _img(64, 64, 1),
             ["junctions", "heatmap", "descriptors"], data=dict(GRAY01),
             note="stacked hourglass, pixel-shuffle junction / heatmap decoders, Softmax, descriptor"),
        Spec("keynet_op17", "KeyNet (kornia)", K, 17, lambda f: kornia_keynet(), _img(64, 64, 1), ["response"],
             data=dict(GRAY01), note="handcrafted derivatives (Sobel, Hessian), 3-level pyramid, bilinear up"),
        Spec("hardnet_op17", "HardNet (kornia)", "encoder", 17, kornia_patch("HardNet"), _img(32, 32, 1),
             ["descriptor"], data=dict(GRAY01), note="input normalisation per patch (std), BN, L2 normalise"),
        Spec("tfeat_op17", "TFeat (kornia)", "encoder", 17, kornia_patch("TFeat"), _img(32, 32, 1),
             ["descriptor"], data=dict(GRAY01), note="InstanceNorm input, Tanh, MaxPool"),
        Spec("xfeat_op17", "XFeat backbone (kornia)", K, 17, lambda f: kornia_xfeat(), _img(64, 64, 1),
             ["feats", "keypoints", "heatmap"], data=dict(GRAY01),
             note="InstanceNorm input, avg-pool 4 stem, BN blocks, bilinear fuse, pixel-unshuffle keypoint head"),
    ]  # fmt: skip


# --------------------------------------------------------------------------------------- arrays models


@dataclass
class ArraySpec:
    """A model whose inputs are stored beside it: ``samples()`` gives ``SAMPLES`` rows per input."""

    name: str
    family: str
    kind: str
    opset: int
    build: Callable[[], nn.Module]
    samples: Callable[[list[np.ndarray]], dict[str, np.ndarray]]
    outputs: list[str]
    note: str = ""
    export_kwargs: dict[str, Any] = field(default_factory=dict)
    #: how many of the samples' inputs ``torch.onnx.export`` is given (the rest are inputs the exporter makes)
    traced: int | None = None


def _photos01(photos, n, h, w):
    return zoo_data.image_array(dict(RGB01), [1, 3, h, w], n, 77, photos)


def _latents(make_vae, which, data):
    def samples(photos):
        torch.manual_seed(SEED)
        vae = make_vae().eval()
        x = zoo_data.image_array(dict(data), [1, 3, 64, 64], SAMPLES, 77, photos)
        with torch.no_grad():
            z = Encode(vae, which)(torch.from_numpy(x)).numpy()
        return {"latents": z[:, None].astype(np.float32)}

    return samples


def _unet_samples(photos):
    rng = np.random.default_rng(SEED)
    x0 = zoo_data.image_array(dict(RGB11), [1, 3, 32, 32], SAMPLES, 78, photos)
    t = rng.integers(0, 1000, size=(SAMPLES, 1))
    abar = np.cos((t / 1000 + 0.008) / 1.008 * math.pi / 2) ** 2
    noise = rng.standard_normal(x0.shape)
    xt = np.sqrt(abar)[:, :, None, None] * x0 + np.sqrt(1 - abar)[:, :, None, None] * noise
    return {"sample": xt[:, None].astype(np.float32), "timestep": t.astype(np.int64)}


def _unet_cond_samples(photos):
    rng = np.random.default_rng(SEED + 1)
    torch.manual_seed(SEED)
    vae = vae_kl().eval()
    img = zoo_data.image_array(dict(RGB11), [1, 3, 64, 64], SAMPLES, 79, photos)
    with torch.no_grad():
        z0 = vae.encode(torch.from_numpy(img)).latent_dist.mean.numpy()
    # a 16x16 latent crop; text states: token embeddings with a LayerNorm's spread
    z0 = z0[:, :, 8:24, 8:24]
    t = rng.integers(0, 1000, size=(SAMPLES, 1)).astype(np.float32)
    abar = np.cos((t / 1000 + 0.008) / 1.008 * math.pi / 2) ** 2
    zt = np.sqrt(abar)[:, :, None, None] * z0 + np.sqrt(1 - abar)[:, :, None, None] * rng.standard_normal(
        z0.shape
    )
    text = rng.standard_normal((SAMPLES, 1, 8, 32)) * 0.8
    return {
        "sample": zt[:, None].astype(np.float32),
        "timestep": t,
        "encoder_hidden_states": text.astype(np.float32),
    }


def _codes(make, which):
    def samples(photos):
        torch.manual_seed(SEED)
        enc = CodecEncode(make(), which).eval()
        wave = zoo_data.waveform_array(dict(WAVE), [1, AUDIO], SAMPLES, 91)
        with torch.no_grad():
            codes = np.concatenate([enc(torch.from_numpy(wave[i : i + 1])).numpy() for i in range(SAMPLES)])
        return {"audio_codes": codes[:, None].astype(np.int64)}

    return samples


def _sosnet_samples(photos):
    """32x32 gray patches, and the DOUBLE scalar input torch's exporter makes of ``forward``'s ``eps=1e-10``."""
    patches = zoo_data.image_array(dict(GRAY01), [1, 1, 32, 32], SAMPLES, 80, photos)
    return {"input": patches[:, None], "onnx::Cast_1": np.full((SAMPLES,), 1e-10, np.float64)}


def _lightglue_samples(photos):
    rng = np.random.default_rng(SEED + 2)
    n = 64
    k0 = rng.uniform(-1, 1, (SAMPLES, 1, n, 2))
    k1 = np.clip(k0 + rng.normal(0, 0.05, k0.shape), -1, 1)
    d0 = rng.standard_normal((SAMPLES, 1, n, 64))
    d0 /= np.linalg.norm(d0, axis=-1, keepdims=True)
    d1 = d0 + rng.normal(0, 0.05, d0.shape)
    d1 /= np.linalg.norm(d1, axis=-1, keepdims=True)
    return {k: v.astype(np.float32) for k, v in dict(kpts0=k0, kpts1=k1, desc0=d0, desc1=d1).items()}


def array_specs() -> list[ArraySpec]:
    K = "segmenter"
    return [
        ArraySpec("taesd_decoder_op17", "TAESD (diffusers AutoencoderTiny) decoder", K, 17,
                  lambda: Decode(taesd()), _latents(taesd, "tiny", RGB01), ["image"],
                  note="Tanh(z / 3) * 3 clamp, nearest x2 upsampling, conv / ReLU residual blocks"),
        ArraySpec("vae_kl_decoder_op17", "AutoencoderKL (diffusers) decoder", K, 17,
                  lambda: Decode(vae_kl(), "kl"), _latents(vae_kl, "kl", RGB11), ["image"],
                  note="post-quant conv, mid-block attention, GroupNorm + SiLU, nearest x2 upsampling"),
        ArraySpec("vae_kl_decoder_op14", "AutoencoderKL (diffusers) decoder", K, 14,
                  lambda: Decode(vae_kl(), "kl"), _latents(vae_kl, "kl", RGB11), ["image"], note="opset 14"),
        ArraySpec("unet2d_op17", "UNet2DModel (diffusers, DDPM)", K, 17, lambda: UNetWrap(unet2d()),
                  _unet_samples, ["noise_pred"],
                  note="int64 timestep: sin/cos embedding (Exp, Sin, Cos, Concat), time MLP, attention blocks"),
        ArraySpec("unet2d_cond_op17", "UNet2DConditionModel (diffusers, SD-style)", K, 17,
                  lambda: UNetWrap(unet2d_cond(), cond=True), _unet_cond_samples, ["noise_pred"],
                  note="float timestep, Transformer2DModel: LayerNorm, self / cross attention, GEGLU"),
        ArraySpec("unet2d_cond_op14", "UNet2DConditionModel (diffusers, SD-style)", K, 14,
                  lambda: UNetWrap(unet2d_cond(), cond=True), _unet_cond_samples, ["noise_pred"],
                  note="opset 14: LayerNorm written out"),
        ArraySpec("encodec_decoder_op17", "EnCodec (transformers) decoder", K, 17,
                  lambda: CodecDecode(encodec(), "encodec"), _codes(encodec, "encodec"), ["audio"],
                  note="codebook Gather x 4 + sum, LSTM, ConvTranspose1d"),
        ArraySpec("dac_decoder_op17", "DAC (transformers) decoder", K, 17,
                  lambda: CodecDecode(dac(), "dac"), _codes(dac, "dac"), ["audio"],
                  note="codebook Gather, 1x1 out projections, Snake, ConvTranspose1d, Tanh"),
        ArraySpec("sosnet_op17", "SOSNet (kornia)", "encoder", 17, lambda: kornia_patch("SOSNet")(False),
                  _sosnet_samples, ["descriptor"], traced=1,
                  note="exported with the patch alone, as users do: torch makes forward's eps=1e-10 a DOUBLE "
                  "scalar input (onnx::Cast_1); InstanceNorm input, BN (affine=False), L2 normalise"),
        ArraySpec("lightglue_dyn18", "LightGlue matcher (kornia)", K, 18, lambda: LightGlueCore(),
                  _lightglue_samples, ["log_assignment"], export_kwargs={"dynamo": True, "external_data": False},
                  note="64 + 64 keypoints: rotary Fourier encoding, self / cross attention, double Softmax + "
                  "sigmoid, the padded [65, 65] assignment (ScatterND); torch's legacy exporter fails (IndexError "
                  "in its transpose symbolic): dynamo at opset 18"),
    ]  # fmt: skip


def export_arrays(spec: ArraySpec, out_dir: Path, photos, seed: int) -> dict[str, Any]:
    samples = spec.samples(photos)
    np.savez(out_dir / f"{spec.name}.samples.npz", **samples)
    torch.manual_seed(seed)
    model = spec.build()
    names = list(samples)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if bns:  # BatchNorm statistics from the first 32 rows
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None
        model.train()
        with torch.no_grad():
            for i in range(0, 32, 8):
                model(*[torch.from_numpy(samples[n][i : i + 8, 0]) for n in names[: spec.traced]])
    model.eval()
    example = tuple(torch.from_numpy(samples[n][0]) for n in names[: spec.traced])
    path = out_dir / f"{spec.name}.onnx"
    kwargs: dict[str, Any] = {"dynamo": False, "do_constant_folding": True}
    kwargs.update(spec.export_kwargs)
    if kwargs["dynamo"]:
        kwargs.pop("do_constant_folding")
    with torch.no_grad():
        torch.onnx.export(model, example, str(path), input_names=names, output_names=spec.outputs,
                          opset_version=spec.opset, **kwargs)  # fmt: skip
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    return {
        "name": spec.name, "file": path.name, "family": spec.family, "kind": spec.kind, "opset": spec.opset,
        "inputs": [{"name": n, "shape": list(samples[n].shape[1:]), "dtype": str(samples[n].dtype)} for n in names],
        "outputs": spec.outputs, "data": {"type": "arrays", "file": f"{spec.name}.samples.npz"},
        "params": int(sum(p.numel() for p in model.parameters())), "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": spec.note, "seed": seed, "size": "reduced",
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--out", type=Path, default=zoo_export.FULL_DIR / "probe14g")
    parser.add_argument("--only")
    parser.add_argument("--photos", type=Path)
    args, _ = parser.parse_known_args(argv)
    wanted = set(args.only.split(",")) if args.only else None
    image_specs = [s for s in specs() if wanted is None or s.name in wanted]
    rest = ["--out", str(args.out)] + (["--photos", str(args.photos)] if args.photos else [])
    if image_specs:
        zoo_export.build_main(
            rest + ["--only", ",".join(s.name for s in image_specs)], __doc__, specs(), SEED
        )
    arrays = [s for s in array_specs() if wanted is None or s.name in wanted]
    if arrays:
        args.out.mkdir(parents=True, exist_ok=True)
        torch.set_num_threads(2)
        photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
        entries = []
        for i, spec in enumerate(arrays):
            try:
                entries.append(export_arrays(spec, args.out, photos, SEED + 100 + i))
            except Exception as exc:  # an exporter failure is the package's, not an edgekit case
                print(f"{spec.name}: torch.onnx.export failed: {type(exc).__name__}: {exc}"[:300])
                continue
            print(
                f"{spec.name:28s} opset {spec.opset}  {entries[-1]['params']:>9,d} params  {entries[-1]['ops']}"
            )
        zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
