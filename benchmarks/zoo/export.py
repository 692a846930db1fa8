"""Build the zoo of real architectures as ONNX files (seeded weights, BatchNorm statistics from real photos).

    python benchmarks/zoo/export.py            # reduced sizes -> tests/zoo/models/ (committed) + zoo.json
    python benchmarks/zoo/export.py --full     # full sizes    -> benchmarks/.zoo/ (git-ignored) + zoo.json
    python benchmarks/zoo/export.py --only resnet18,unet

No weights can be downloaded here: every model gets seeded random weights, then its BatchNorm running
statistics are set by running real photos through it in train mode (``momentum=None``: the cumulative average
over the batches), so activation ranges are those of a trained network's normalised layers. The photos are
``../shared/data/imagenet-sample-200`` when present, else scikit-learn's two bundled sample images (random
crops). Exported with ``torch.onnx.export(..., dynamo=False)`` at opset 13 or 17 (both appear).

Needs torch, torchvision and timm (not the project's runtime deps: only this script uses them).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo_data  # noqa: E402
from shared_data import default_shared  # noqa: E402

REDUCED_DIR = ROOT / "tests" / "zoo" / "models"
FULL_DIR = ROOT / "benchmarks" / ".zoo"


@dataclass
class Spec:
    """One zoo model: how to build it at reduced and full size and what its manifest entry says."""

    name: str
    family: str
    kind: str  # classifier | detector | segmenter | encoder | sequence
    opset: int
    build: Callable[[bool], nn.Module]  # full -> module
    inputs: Callable[[bool], list[tuple[str, list[int]]]]
    outputs: list[str]
    data: dict[str, Any] = field(default_factory=lambda: dict(zoo_data.IMAGENET_DATA))
    note: str = ""
    #: torch.onnx.export's dynamic_axes (e.g. a dynamic batch and H/W as insightface exports SCRFD); the manifest
    #: keeps the static example shape and the entry fixes the dims with --input-shape
    dynamic_axes: dict[str, dict[int, str]] | None = None
    #: more torch.onnx.export arguments, over the defaults (e.g. ``dynamo=True``, ``dynamic_shapes``, ``optimize``:
    #: the exporter path users take beside the legacy one)
    export_kwargs: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------- builders


def mobilenet_v2(full: bool) -> nn.Module:
    from torchvision.models import mobilenet_v2 as build

    if full:
        return build(num_classes=1000)
    model = build(width_mult=0.35, num_classes=32)
    # The reduced head: the last 1x1 conv to 1280 channels becomes 256 wide, 32 classes: a small file.
    last = model.features[-1]
    model.features[-1] = type(last)(last[0].in_channels, 256, kernel_size=1, activation_layer=nn.ReLU6)
    model.classifier[1] = nn.Linear(256, 32)
    return model


def mobilenet_v3(arch: str) -> Callable[[bool], nn.Module]:
    def make(full: bool) -> nn.Module:
        from torchvision.models import mobilenet_v3_large, mobilenet_v3_small

        build = mobilenet_v3_small if arch == "small" else mobilenet_v3_large
        if full:
            return build(num_classes=1000)
        model = build(width_mult=0.5 if arch == "small" else 0.25, num_classes=32)
        # The reduced head: last_channel 1024/1280 -> 128 and 32 classes keep the file small.
        last = model.classifier[0].in_features
        model.classifier[0] = nn.Linear(last, 128)
        model.classifier[3] = nn.Linear(128, 32)
        return model

    return make


def efficientnet_b0(full: bool) -> nn.Module:
    from torchvision.models.efficientnet import EfficientNet, _efficientnet_conf

    width, depth = (1.0, 1.0) if full else (0.35, 0.5)
    settings, last = _efficientnet_conf("efficientnet_b0", width_mult=width, depth_mult=depth)
    return EfficientNet(settings, 0.2, num_classes=1000 if full else 32, last_channel=last)


def resnet18(full: bool) -> nn.Module:
    from torchvision.models import resnet18 as build
    from torchvision.models.resnet import BasicBlock, ResNet

    if full:
        return build(num_classes=1000)

    class SlimResNet18(ResNet):
        """ResNet-18's layout (BasicBlock x [2, 2, 2, 2], stem conv 7x7/2 + maxpool) at 3/16 width."""

        def __init__(self) -> None:
            super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=32)
            w = 12
            self.inplanes = w
            self.conv1 = nn.Conv2d(3, w, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(w)
            self.layer1 = self._make_layer(BasicBlock, w, 2)
            self.layer2 = self._make_layer(BasicBlock, 2 * w, 2, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 4 * w, 2, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 8 * w, 2, stride=2)
            self.fc = nn.Linear(8 * w, 32)

    return SlimResNet18()


def shufflenet_v2(full: bool) -> nn.Module:
    from torchvision.models.shufflenetv2 import ShuffleNetV2

    if full:
        return ShuffleNetV2([4, 8, 4], [24, 116, 232, 464, 1024], num_classes=1000)
    return ShuffleNetV2([4, 8, 4], [24, 48, 96, 192, 256], num_classes=32)


def deeplabv3_mobilenet_v3(full: bool) -> nn.Module:
    from torchvision.models import mobilenet_v3_large
    from torchvision.models._utils import IntermediateLayerGetter
    from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large
    from torchvision.models.segmentation.deeplabv3 import ASPP, DeepLabV3

    if full:
        return Unwrap(deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21))
    features = mobilenet_v3_large(width_mult=0.25, dilated=True).features
    backbone = IntermediateLayerGetter(features, return_layers={str(len(features) - 1): "out"})
    channels = features[-1].out_channels
    head = nn.Sequential(
        ASPP(channels, [6, 12, 18], out_channels=24),
        nn.Conv2d(24, 24, 3, padding=1, bias=False),
        nn.BatchNorm2d(24),
        nn.ReLU(),
        nn.Conv2d(24, 21, 1),
    )
    return Unwrap(DeepLabV3(backbone, head, None))


class Unwrap(nn.Module):
    """torchvision's segmentation models return ``{"out": tensor}``: export the tensor."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)["out"]


def conv_bn(cin: int, cout: int, k: int = 3, s: int = 1, act: type[nn.Module] = nn.SiLU, groups: int = 1):
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), act()
    )


class CSPBlock(nn.Module):
    """YOLOv5/v8's C3/C2f idea: split, a bottleneck on one half, concat, fuse."""

    def __init__(self, c: int):
        super().__init__()
        self.a = conv_bn(c, c // 2, 1)
        self.b = nn.Sequential(conv_bn(c // 2, c // 2, 3), conv_bn(c // 2, c // 2, 3))
        self.fuse = conv_bn(c, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.a(x)
        return self.fuse(torch.cat([a, a + self.b(a)], 1))


class YoloStyle(nn.Module):
    """An anchor-free YOLO-style detector (SiLU CSP backbone, an FPN merge with nearest upsampling, decoupled
    heads at strides 8/16/32) with its box decoding in the graph: Split, Sigmoid, Exp, grids and strides as
    constants, Div to normalised coordinates, Slice and Concat. Output [1, N, 4 + 1 + classes]."""

    def __init__(self, full: bool, size: int):
        super().__init__()
        w = 32 if full else 10
        self.classes = 80 if full else 8
        self.size = size
        self.stem = conv_bn(3, w, 3, 2)
        self.s1 = nn.Sequential(conv_bn(w, 2 * w, 3, 2), CSPBlock(2 * w))
        self.s2 = nn.Sequential(conv_bn(2 * w, 4 * w, 3, 2), CSPBlock(4 * w))  # stride 8
        self.s3 = nn.Sequential(conv_bn(4 * w, 8 * w, 3, 2), CSPBlock(8 * w))  # stride 16
        self.s4 = nn.Sequential(conv_bn(8 * w, 8 * w, 3, 2), CSPBlock(8 * w))  # stride 32
        self.lat4 = conv_bn(8 * w, 4 * w, 1)
        self.merge3 = conv_bn(12 * w, 4 * w, 3)
        self.lat3 = conv_bn(4 * w, 2 * w, 1)
        self.merge2 = conv_bn(6 * w, 4 * w, 3)
        self.heads = nn.ModuleList([nn.Conv2d(c, 5 + self.classes, 1) for c in (4 * w, 4 * w, 8 * w)])
        grids, strides = [], []
        for stride in (8, 16, 32):
            n = size // stride
            ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            grids.append(torch.stack([xs, ys], -1).reshape(1, -1, 2).float())
            strides.append(torch.full((1, n * n, 1), float(stride)))
        self.register_buffer("grid", torch.cat(grids, 1))
        self.register_buffer("stride", torch.cat(strides, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c2 = self.s2(self.s1(self.stem(x)))
        c3 = self.s3(c2)
        c4 = self.s4(c3)
        p3 = self.merge3(torch.cat([c3, F.interpolate(self.lat4(c4), scale_factor=2.0, mode="nearest")], 1))
        p2 = self.merge2(torch.cat([c2, F.interpolate(self.lat3(p3), scale_factor=2.0, mode="nearest")], 1))
        outs = []
        for head, feat in zip(self.heads, (p2, p3, c4), strict=True):
            y = head(feat)
            outs.append(y.flatten(2).transpose(1, 2))
        y = torch.cat(outs, 1)  # [1, N, 5 + C]
        xy, wh, rest = torch.split(y, [2, 2, 1 + self.classes], dim=2)
        xy = (xy + self.grid) * self.stride
        wh = torch.exp(wh.clamp(max=6.0)) * self.stride
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], 2) / float(self.size)
        scores = torch.sigmoid(rest)
        obj = scores[..., :1]
        cls = scores[..., 1:] * obj
        return torch.cat([boxes, obj, cls], 2)


class SSDStyle(nn.Module):
    """An SSD-Lite-style detector: a MobileNetV2-like ReLU6 depthwise backbone, extra layers, per-scale box
    and class heads, prior boxes as a constant, and the SSD decode in the graph (variances applied with Div,
    Exp of the size offsets, Slice, Concat, Softmax over classes). Outputs boxes [1, N, 4] and scores
    [1, N, classes]."""

    def __init__(self, full: bool, size: int):
        super().__init__()
        from torchvision.models.mobilenetv2 import InvertedResidual

        w = 16 if full else 8
        self.classes = 91 if full else 11
        self.size = size
        self.stem = conv_bn(3, 2 * w, 3, 2, nn.ReLU6)
        self.f1 = nn.Sequential(  # stride 8
            InvertedResidual(2 * w, 2 * w, 2, 6),
            InvertedResidual(2 * w, 3 * w, 2, 6),
            InvertedResidual(3 * w, 3 * w, 1, 6),
        )
        self.f2 = nn.Sequential(
            InvertedResidual(3 * w, 6 * w, 2, 6), InvertedResidual(6 * w, 6 * w, 1, 6)
        )  # 16
        self.f3 = nn.Sequential(
            conv_bn(6 * w, 4 * w, 1, 1, nn.ReLU6), conv_bn(4 * w, 8 * w, 3, 2, nn.ReLU6)
        )  # 32
        self.anchors_per_cell = 3
        chans = (3 * w, 6 * w, 8 * w)
        a = self.anchors_per_cell
        self.loc = nn.ModuleList(
            [nn.Sequential(conv_bn(c, c, 3, 1, nn.ReLU6, groups=c), nn.Conv2d(c, a * 4, 1)) for c in chans]
        )
        self.conf = nn.ModuleList(
            [
                nn.Sequential(conv_bn(c, c, 3, 1, nn.ReLU6, groups=c), nn.Conv2d(c, a * self.classes, 1))
                for c in chans
            ]
        )
        priors = []
        for stride, scale in zip((8, 16, 32), (0.1, 0.3, 0.6), strict=True):
            n = size // stride
            for i in range(n):
                for j in range(n):
                    cx, cy = (j + 0.5) / n, (i + 0.5) / n
                    for ratio in (1.0, 2.0, 0.5):
                        priors.append([cx, cy, scale * math.sqrt(ratio), scale / math.sqrt(ratio)])
        self.register_buffer("priors", torch.tensor(priors, dtype=torch.float32)[None])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f1 = self.f1(self.stem(x))
        f2 = self.f2(f1)
        f3 = self.f3(f2)
        locs, confs = [], []
        for feat, loc, conf in zip((f1, f2, f3), self.loc, self.conf, strict=True):
            locs.append(loc(feat).permute(0, 2, 3, 1).reshape(feat.shape[0], -1, 4))
            confs.append(conf(feat).permute(0, 2, 3, 1).reshape(feat.shape[0], -1, self.classes))
        loc = torch.cat(locs, 1)
        conf = torch.cat(confs, 1)
        centre = loc[..., :2] / 10.0 * self.priors[..., 2:] + self.priors[..., :2]
        size = torch.exp(loc[..., 2:] / 5.0) * self.priors[..., 2:]
        boxes = torch.cat([centre - size / 2, centre + size / 2], 2)
        return boxes, torch.softmax(conf, dim=2)


class KeywordSpotter(nn.Module):
    """A recurrent keyword spotter on log-mel features [1, frames, bins]: a per-frame projection, a GRU or
    LSTM (batch_first), the last step's state through a linear classifier (12 keywords)."""

    def __init__(self, cell: str, full: bool, bins: int):
        super().__init__()
        hidden = 128 if full else 48
        self.proj = nn.Linear(bins, hidden)
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn(hidden, hidden, num_layers=2 if full else 1, batch_first=True)
        self.fc = nn.Linear(hidden, 12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(torch.relu(self.proj(x)))
        return self.fc(y[:, -1])


class UNet(nn.Module):
    """A UNet: conv-BN-ReLU encoder with max pooling, ConvTranspose upsampling, skip concatenation, and a
    1x1 conv to per-pixel class logits."""

    def __init__(self, full: bool):
        super().__init__()
        w = 32 if full else 8
        levels = 4 if full else 3
        chans = [w * 2**i for i in range(levels + 1)]
        self.down = nn.ModuleList()
        cin = 3
        for c in chans[:-1]:
            self.down.append(nn.Sequential(conv_bn(cin, c, 3, 1, nn.ReLU), conv_bn(c, c, 3, 1, nn.ReLU)))
            cin = c
        self.bottom = nn.Sequential(
            conv_bn(cin, chans[-1], 3, 1, nn.ReLU), conv_bn(chans[-1], chans[-1], 3, 1, nn.ReLU)
        )
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for c_hi, c_lo in zip(reversed(chans[1:]), reversed(chans[:-1]), strict=True):
            self.up.append(nn.ConvTranspose2d(c_hi, c_lo, 2, stride=2))
            self.merge.append(
                nn.Sequential(conv_bn(2 * c_lo, c_lo, 3, 1, nn.ReLU), conv_bn(c_lo, c_lo, 3, 1, nn.ReLU))
            )
        self.out = nn.Conv2d(chans[0], 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips), strict=True):
            x = merge(torch.cat([up(x), skip], 1))
        return self.out(x)


def image(size_reduced: int, size_full: int, name: str = "input") -> Callable[[bool], list]:
    def inputs(full: bool) -> list[tuple[str, list[int]]]:
        size = size_full if full else size_reduced
        return [(name, [1, 3, size, size])]

    return inputs


KWS_DATA = {"type": "logmel", "sample_rate": 16000, "hop_ms": 20, "window_ms": 30}


def specs() -> list[Spec]:
    return [
        Spec("mobilenet_v2", "MobileNetV2", "classifier", 13, mobilenet_v2, image(96, 224), ["logits"]),
        Spec(
            "mobilenet_v3_small",
            "MobileNetV3-Small",
            "classifier",
            17,
            mobilenet_v3("small"),
            image(96, 224),
            ["logits"],
            note="HardSwish/HardSigmoid as ONNX ops (opset 17)",
        ),
        Spec(
            "mobilenet_v3_large",
            "MobileNetV3-Large",
            "classifier",
            13,
            mobilenet_v3("large"),
            image(96, 224),
            ["logits"],
            note="opset 13: HardSwish exported as HardSigmoid + Mul",
        ),
        Spec(
            "efficientnet_b0",
            "EfficientNet-B0",
            "classifier",
            17,
            efficientnet_b0,
            image(96, 224),
            ["logits"],
            note="SiLU (Sigmoid + Mul), squeeze-excitation",
        ),
        Spec("resnet18", "ResNet-18", "classifier", 13, resnet18, image(96, 224), ["logits"]),
        Spec(
            "shufflenet_v2",
            "ShuffleNetV2",
            "classifier",
            13,
            shufflenet_v2,
            image(96, 224),
            ["logits"],
            note="channel shuffle (Reshape/Transpose), Split",
        ),
        Spec(
            "deeplabv3_mobilenet_v3",
            "DeepLabV3-MobileNetV3",
            "segmenter",
            17,
            deeplabv3_mobilenet_v3,
            image(128, 520),
            ["out"],
            note="dilated depthwise convs, ASPP pooling branch, bilinear Resize",
        ),
        Spec(
            "yolo_style",
            "YOLO-style detector",
            "detector",
            13,
            lambda full: YoloStyle(full, 640 if full else 128),
            image(128, 640, "images"),
            ["detections"],
            note="anchor-free decode in the graph: Split, Sigmoid, Exp, Div, Slice, Concat, grids as constants",
        ),
        Spec(
            "ssd_style",
            "SSD-style detector",
            "detector",
            17,
            lambda full: SSDStyle(full, 320 if full else 128),
            image(128, 320, "images"),
            ["boxes", "scores"],
            note="SSD decode in the graph: priors as a constant, Div, Exp, Slice, Concat, Softmax",
        ),
        Spec(
            "kws_gru",
            "GRU keyword spotter",
            "sequence",
            13,
            lambda full: KeywordSpotter("gru", full, 40),
            lambda full: [("mfcc", [1, 98 if full else 49, 40])],
            ["logits"],
            data=dict(KWS_DATA),
        ),
        Spec(
            "kws_lstm",
            "LSTM keyword spotter",
            "sequence",
            17,
            lambda full: KeywordSpotter("lstm", full, 40),
            lambda full: [("mfcc", [1, 98 if full else 49, 40])],
            ["logits"],
            data=dict(KWS_DATA),
        ),
        Spec("unet", "UNet (ConvTranspose)", "segmenter", 17, UNet, image(64, 256), ["mask_logits"]),
    ]


# --------------------------------------------------------------------------------------------- pipeline


def set_bn_statistics(
    model: nn.Module, spec: Spec, full: bool, photos: list[np.ndarray], batches: int
) -> int:
    """Run real photos through ``model`` in train mode with ``momentum=None`` on every BatchNorm (the running
    statistics become the cumulative average over the batches). Returns how many BatchNorm layers were set."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return 0
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    entry = {
        "name": spec.name,
        "data": spec.data,
        "inputs": [{"name": n, "shape": s} for n, s in spec.inputs(full)],
    }
    batch = 8 if full else 16
    with torch.no_grad():
        for b in range(batches):
            arrays = zoo_data.make_arrays(entry, batch, 1000 + b, photos)
            model(*[torch.from_numpy(arrays[n]) for n, _ in spec.inputs(full)])
    model.eval()
    return len(bns)


def export(spec: Spec, full: bool, out_dir: Path, photos: list[np.ndarray], seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = spec.build(full).eval()
    batches = 4 if full else 8
    n_bn = set_bn_statistics(model, spec, full, photos, batches)
    inputs = spec.inputs(full)
    example = tuple(
        torch.from_numpy(
            zoo_data.make_arrays(
                {
                    "name": spec.name,
                    "data": spec.data,
                    "inputs": [{"name": n, "shape": s} for n, s in inputs],
                },
                1,
                7,
                photos,
            )[n]
        )
        for n, _ in inputs
    )
    path = out_dir / f"{spec.name}.onnx"
    kwargs: dict[str, Any] = {"dynamo": False, "do_constant_folding": True, "dynamic_axes": spec.dynamic_axes}
    kwargs.update(spec.export_kwargs)
    torch.onnx.export(
        model,
        example,
        str(path),
        input_names=[n for n, _ in inputs],
        output_names=spec.outputs,
        opset_version=spec.opset,
        **kwargs,
    )
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    ops = sorted({n.op_type for n in proto.graph.node})
    params = sum(p.numel() for p in model.parameters())
    return {
        "name": spec.name,
        "file": path.name,
        "family": spec.family,
        "kind": spec.kind,
        "opset": spec.opset,
        "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in inputs],
        "outputs": spec.outputs,
        "data": spec.data,
        "params": int(params),
        "batchnorm_layers_set": n_bn,
        "ops": ops,
        "note": spec.note,
        "seed": seed,
    }


def export_probes(probes, build: Callable[[int, Any], dict], out: Path, only: str | None) -> None:
    """A probe script's loop: ``build(i, probe)`` of every probe named in ``only`` (comma-separated; all when
    None), saying what each wrote; one that fails to export is said and skipped (an export failure is a finding of
    the probe, not of edgekit); the entries merged into ``out``'s manifest."""
    wanted = set(only.split(",")) if only else None
    entries = []
    for i, p in enumerate(probes):
        if wanted and p.name not in wanted:
            continue
        try:
            e = build(i, p)
        except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
            msg = str(exc).strip().splitlines()
            print(f"{p.name}: EXPORT FAILED {type(exc).__name__}: {msg[0][:300] if msg else ''}", flush=True)
            continue
        entries.append(e)
        size = (out / e["file"]).stat().st_size
        print(
            f"{p.name:24s} opset {p.opset} {e['params']:>9,d} params {size / 1e6:6.2f} MB {e['ops']}",
            flush=True,
        )
    zoo_data.merge_manifest(out, entries)


def input_shape_args(spec: Spec, full: bool) -> list[str]:
    """``--input-shape NAME=D,D,...`` for each of ``spec``'s inputs: the static shape a dynamic export runs at in
    the zoo's cases (its manifest entry's ``extra_args``)."""
    return [a for n, s in spec.inputs(full) for a in ("--input-shape", f"{n}={','.join(map(str, s))}")]


def build_main(
    argv: list[str] | None,
    description: str,
    specs: list[Spec],
    seed: int,
    skip: Callable[[Spec, bool], bool] | None = None,
    finish: Callable[[Spec, dict[str, Any], bool], None] | None = None,
) -> int:
    """The command line of a builder script: export ``specs`` (``--only`` some; ``skip(spec, full)`` leaves one
    out) with seeds ``seed + index``, ``finish(spec, entry, full)`` adds to an entry, and merge the entries into
    the folder's manifest."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--full", action="store_true", help="full sizes into benchmarks/.zoo/")
    parser.add_argument(
        "--out", type=Path, help="output folder (default: tests/zoo/models or benchmarks/.zoo)"
    )
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    args = parser.parse_args(argv)
    out_dir = args.out or (FULL_DIR if args.full else REDUCED_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, default_shared())
    torch.set_num_threads(2)
    wanted = set(args.only.split(",")) if args.only else None
    entries = []
    for i, spec in enumerate(specs):
        if (wanted and spec.name not in wanted) or (skip is not None and skip(spec, args.full)):
            continue
        entry = export(spec, args.full, out_dir, photos, seed=seed + i)
        entry["size"] = "full" if args.full else "reduced"
        if finish is not None:
            finish(spec, entry, args.full)
        entries.append(entry)
        size = (out_dir / entry["file"]).stat().st_size
        print(
            f"{spec.name:28s} opset {spec.opset}  {entry['params']:>9,d} params  {size / 1e6:6.2f} MB  {entry['ops']}"
        )
    zoo_data.merge_manifest(out_dir, entries)
    return 0


def main(argv: list[str] | None = None) -> int:
    return build_main(argv, __doc__, specs(), seed=1234)


if __name__ == "__main__":
    raise SystemExit(main())
