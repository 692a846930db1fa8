"""Issue 12 round 5 probe: the export paths users take besides ``torch.onnx.export(..., dynamo=False)`` at 13/17.

    python benchmarks/zoo/probe_exporters.py --out benchmarks/.zoo/probe5        # the probe (not committed)
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe5/zoo.json --no-shared --workers 1
    python benchmarks/zoo/probe_exporters.py --only export_styles_dyn21,vit_attention_dyn23   # tests/zoo/models

Seeded weights, BatchNorm statistics from real photos (``export.set_bn_statistics``), small inputs.

- ``*_dyn18`` / ``*_dyn19`` / ``*_dyn20``: torch's dynamo exporter (``dynamo=True``) at opset 18-20: ReduceMean
  with axes as an input, Split with ``num_outputs``, native LayerNormalization, value_info everywhere,
  Constant nodes, Shape arithmetic; ``_dynhw``: ``dynamic_shapes`` for batch and H/W (the manifest fixes them
  with ``--input-shape``); ``_noopt``: ``optimize=False`` (the exporter's graph before onnxscript's optimizer).
- ``*_op9`` / ``*_op10`` / ``*_op11``: the legacy exporter at old opsets: Upsample (9), Resize-10/11, Slice and
  Pad with attributes, Clip with min/max attributes, Unsqueeze/Squeeze/ReduceMean with axes attributes,
  Split with a ``split`` attribute.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
import probe_detectors  # noqa: E402
from detectors import YOLO_DATA  # noqa: E402

SEED = 505
Spec = zoo_export.Spec


def regnet_x_400mf(full: bool) -> nn.Module:
    from torchvision.models import regnet_x_400mf as build

    return build(num_classes=1000 if full else 32)


def convnext_reduced(full: bool) -> nn.Module:
    from torchvision.models import convnext_tiny
    from torchvision.models.convnext import CNBlockConfig, ConvNeXt

    if full:
        return convnext_tiny(num_classes=1000)
    setting = [
        CNBlockConfig(24, 48, 1),
        CNBlockConfig(48, 96, 1),
        CNBlockConfig(96, 192, 2),
        CNBlockConfig(192, None, 1),
    ]
    return ConvNeXt(setting, num_classes=32)


class SSDLiteHead(nn.Module):
    """torchvision's ssdlite320_mobilenet_v3_large, backbone + head, without the anchors' decode and NMS."""

    def __init__(self, reduced: bool = True):
        super().__init__()
        from torchvision.models.detection import ssdlite320_mobilenet_v3_large

        kw = {"width_mult": 0.5} if reduced else {}
        self.model = ssdlite320_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=11 if reduced else 91, **kw
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats = list(self.model.backbone(x).values())
        out = self.model.head(feats)
        return out["bbox_regression"], out["cls_logits"].softmax(-1)


def _basic_block() -> set:
    from torchvision.models.resnet import BasicBlock

    return {BasicBlock}


class ExportStyles(nn.Module):
    """The ops whose ONNX form changed across opsets, in one small segmenter-like net: F.pad (constant and
    reflect: Pad with ``axes`` at 18, Pad-2 attributes at 9/10), GroupNorm (GroupNormalization-18's inputs or
    InstanceNormalization), a global max pool (ReduceMax with ``axes`` as an input at 18, an attribute before),
    torch.chunk (Split ``num_outputs`` / ``split``), Hardtanh (Clip with min/max attributes below 11), a
    bilinear downsample with ``antialias`` (Resize-18) or without, Dropout, upsampling (Upsample-9 /
    Resize-10/11), a channel LayerNorm."""

    def __init__(self, c: int = 16, antialias: bool = True):
        super().__init__()
        self.antialias = antialias
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, 2, 0), nn.BatchNorm2d(c), nn.ReLU())
        self.gn = nn.GroupNorm(4, c)
        self.conv = nn.Conv2d(c, 2 * c, 3, 1, 0)
        self.a = nn.Conv2d(c, c, 1)
        self.b = nn.Conv2d(c, c, 1)
        self.ln = nn.LayerNorm(c)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Conv2d(c, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        import torch.nn.functional as F

        y = self.stem(F.pad(x, (1, 1, 1, 1)))  # constant Pad
        y = self.gn(y)
        y = self.conv(F.pad(y, (1, 1, 1, 1), mode="reflect"))  # reflect Pad
        a, b = torch.chunk(y, 2, dim=1)
        y = F.hardtanh(self.a(a), -1.0, 3.0) + torch.sigmoid(self.b(b))
        gate = torch.amax(y, dim=(2, 3), keepdim=True)  # global max pool
        y = self.drop(y * torch.sigmoid(gate))
        y = self.ln(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        small = F.interpolate(
            y, scale_factor=0.5, mode="bilinear", align_corners=False, antialias=self.antialias
        )
        up = F.interpolate(small, scale_factor=2.0, mode="nearest")
        return self.head(y + up), gate.flatten(1)


def timm_model(name: str, **kw):
    def make(full: bool) -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=1000 if full else 32, **kw)

    return make


def dynamo(opset: int = 18, dynhw: str | None = None, optimize: bool = True) -> dict:
    kw: dict = {"dynamo": True, "optimize": optimize}
    if dynhw is not None:
        batch, h, w = (
            torch.export.Dim("batch", max=16),
            torch.export.Dim("h", min=32),
            torch.export.Dim("w", min=32),
        )
        kw["dynamic_shapes"] = {dynhw: {0: batch, 2: h, 3: w}}
    return kw


def _img(size: int, name: str = "input"):
    return lambda full: [(name, [1, 3, size, size])]


def _how(opset: int, kw: dict) -> str:
    if not kw.get("dynamo"):
        functions = ", modules as local functions" if kw.get("export_modules_as_functions") else ""
        folding = ", do_constant_folding=False" if kw.get("do_constant_folding") is False else ""
        return f"legacy exporter (dynamo=False), opset {opset}{functions}{folding}"
    extra = ", dynamic batch/H/W (dynamic_shapes)" if "dynamic_shapes" in kw else ""
    return f"dynamo exporter, opset {opset}, optimize={kw['optimize']}{extra}"


def _spec(name, family, kind, opset, build, size, outputs, data=None, inp="input", **export_kwargs) -> Spec:
    return Spec(
        name,
        family,
        kind,
        opset,
        build,
        _img(size, inp),
        outputs,
        dict(data or zoo_export.zoo_data.IMAGENET_DATA),
        note=_how(opset, export_kwargs),
        export_kwargs=export_kwargs or {"dynamo": False},
    )


def specs() -> list[Spec]:
    e = zoo_export
    yolo = dict(YOLO_DATA)
    seg, det, cls = "segmenter", "detector", "classifier"
    # fmt: off
    return [
        # ---- dynamo exporter
        _spec("mobilenet_v3_small_dyn18", "MobileNetV3-Small", cls, 18, e.mobilenet_v3("small"), 128, ["logits"], **dynamo(18)),
        _spec("efficientnet_b0_dyn18", "EfficientNet-B0", cls, 18, e.efficientnet_b0, 128, ["logits"], **dynamo(18)),
        _spec("resnet18_dyn20_dynhw", "ResNet-18", cls, 20, e.resnet18, 128, ["logits"], **dynamo(20, "x")),
        _spec("shufflenet_v2_dyn19", "ShuffleNetV2", cls, 19, e.shufflenet_v2, 128, ["logits"], **dynamo(19)),
        _spec("regnet_x_400mf_dyn18", "RegNetX-400MF", cls, 18, regnet_x_400mf, 128, ["logits"], **dynamo(18)),
        _spec("convnext_dyn18", "ConvNeXt (reduced)", cls, 18, convnext_reduced, 128, ["logits"], **dynamo(18)),
        _spec("deeplabv3_dyn18", "DeepLabV3-MobileNetV3", seg, 18, e.deeplabv3_mobilenet_v3, 128, ["out"], **dynamo(18)),
        _spec("ssdlite_dyn18", "SSDLite320-MobileNetV3", det, 18, lambda f: SSDLiteHead(), 192, ["boxes", "scores"], **dynamo(18)),
        _spec("yolo_style_dyn18", "YOLO-style detector", det, 18, lambda f: e.YoloStyle(False, 128), 128, ["detections"], yolo, inp="images", **dynamo(18)),
        _spec("yolox_nano_dyn18_noopt", "YOLOX-nano style", det, 18, lambda f: probe_detectors.YOLOX(), 160, ["output"], yolo, inp="images", **dynamo(18, optimize=False)),
        _spec("mobilevit_xxs_dyn18", "MobileViT-XXS (timm)", cls, 18, timm_model("mobilevit_xxs"), 128, ["logits"], **dynamo(18)),
        _spec("ghostnet_dyn18", "GhostNet-0.5 (timm)", cls, 18, timm_model("ghostnet_050"), 128, ["logits"], **dynamo(18)),
        _spec("levit_dyn18", "LeViT-128S (timm)", cls, 18, timm_model("levit_128s"), 224, ["logits"], **dynamo(18)),
        _spec("efficientformer_dyn18", "EfficientFormer-L1 (timm)", cls, 18, timm_model("efficientformer_l1"), 224, ["logits"], **dynamo(18)),
        _spec("unet_dyn18_dynhw", "UNet (ConvTranspose)", seg, 18, e.UNet, 64, ["mask_logits"], **dynamo(18, "x")),
        _spec("convnext_dyn18_noopt", "ConvNeXt (reduced)", cls, 18, convnext_reduced, 128, ["logits"], **dynamo(18, optimize=False)),
        _spec("mobilevit_xxs_dyn18_noopt", "MobileViT-XXS (timm)", cls, 18, timm_model("mobilevit_xxs"), 128, ["logits"], **dynamo(18, optimize=False)),
        _spec("deeplabv3_dyn18_dynhw", "DeepLabV3-MobileNetV3", seg, 18, e.deeplabv3_mobilenet_v3, 128, ["out"], **dynamo(18, "x")),
        _spec("deeplabv3_dyn18_noopt", "DeepLabV3-MobileNetV3", seg, 18, e.deeplabv3_mobilenet_v3, 128, ["out"], **dynamo(18, optimize=False)),
        _spec("styles_dyn18", "export styles", seg, 18, lambda f: ExportStyles(), 64, ["mask", "gate"], **dynamo(18)),
        _spec("styles_dyn18_noopt", "export styles", seg, 18, lambda f: ExportStyles(), 64, ["mask", "gate"], **dynamo(18, optimize=False)),
        _spec("styles_op9", "export styles", seg, 9, lambda f: ExportStyles(antialias=False), 64, ["mask", "gate"]),
        _spec("styles_op11", "export styles", seg, 11, lambda f: ExportStyles(antialias=False), 64, ["mask", "gate"]),
        _spec("styles_dyn21", "export styles", seg, 21, lambda f: ExportStyles(), 64, ["mask", "gate"], **dynamo(21)),
        _spec("styles_dyn23", "export styles", seg, 23, lambda f: ExportStyles(), 64, ["mask", "gate"], **dynamo(23)),
        _spec("mobilevit_xxs_dyn23", "MobileViT-XXS (timm)", cls, 23, timm_model("mobilevit_xxs"), 128, ["logits"], **dynamo(23)),
        _spec("vit_tiny_dyn18", "ViT (timm, reduced)", cls, 18, timm_model("vit_tiny_patch16_224", img_size=64, depth=2), 64, ["logits"], **dynamo(18)),
        _spec("vit_tiny_dyn23", "ViT (timm, reduced)", cls, 23, timm_model("vit_tiny_patch16_224", img_size=64, depth=2), 64, ["logits"], **dynamo(23)),
        # committed to tests/zoo/models ("ci": false; one file: external_data=False)
        _spec("export_styles_dyn21", "export styles", seg, 21, lambda f: ExportStyles(), 64, ["mask", "gate"], **dynamo(21), external_data=False),
        _spec("vit_attention_dyn23", "ViT (timm, reduced)", cls, 23, timm_model("vit_tiny_patch16_224", img_size=64, depth=2, embed_dim=64, num_heads=2), 64, ["logits"], **dynamo(23), external_data=False),
        # ---- legacy exporter with local functions (export_modules_as_functions), and at old opsets
        _spec("resnet18_op17_functions", "ResNet-18", cls, 17, e.resnet18, 96, ["logits"], dynamo=False, export_modules_as_functions=_basic_block()),
        _spec("resnet18_op9", "ResNet-18", cls, 9, e.resnet18, 96, ["logits"]),
        _spec("shufflenet_v2_op9", "ShuffleNetV2", cls, 9, e.shufflenet_v2, 96, ["logits"]),
        _spec("yolo_style_op9", "YOLO-style detector", det, 9, lambda f: e.YoloStyle(False, 128), 128, ["detections"], yolo, inp="images"),
        _spec("mobilenet_v3_large_op10", "MobileNetV3-Large", cls, 10, e.mobilenet_v3("large"), 96, ["logits"]),
        _spec("ssd_style_op10", "SSD-style detector", det, 10, lambda f: e.SSDStyle(False, 128), 128, ["boxes", "scores"], inp="images"),
        _spec("deeplabv3_op11", "DeepLabV3-MobileNetV3", seg, 11, e.deeplabv3_mobilenet_v3, 128, ["out"]),
        _spec("unet_op10", "UNet (ConvTranspose)", seg, 10, e.UNet, 64, ["mask_logits"]),
        _spec("mobilenet_v3_large_op9_nofold", "MobileNetV3-Large", cls, 9, e.mobilenet_v3("large"), 96, ["logits"], dynamo=False, do_constant_folding=False),
        _spec("efficientnet_b0_op11", "EfficientNet-B0", cls, 11, e.efficientnet_b0, 96, ["logits"]),
    ]
    # fmt: on


def _finish(spec: Spec, entry: dict, full: bool) -> None:
    entry["ci"] = False
    if "dynamic_shapes" in spec.export_kwargs:
        entry["extra_args"] = zoo_export.input_shape_args(spec, full)


def main(argv: list[str] | None = None) -> int:
    return zoo_export.build_main(argv, __doc__, specs(), SEED, finish=_finish)


if __name__ == "__main__":
    raise SystemExit(main())
