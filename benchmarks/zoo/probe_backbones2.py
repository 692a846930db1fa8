"""Issue 12 probe round 8b: more backbones (``--out benchmarks/.zoo/probe8b``, not committed).

torchvision classics and timm families the earlier rounds did not probe, seeded, ``num_classes=32``, small inputs
(64-128 px) and reduced widths / depths where the constructors allow, exported by ``torch.onnx.export(dynamo=False)``
at opset 13 or 17, BatchNorm statistics from the photos (``export.build_main``):

- torchvision: Inception-v3 (``transform_input``: the per-channel affine in the graph), GoogLeNet, DenseNet
  (reduced), MNASNet-0.5, SqueezeNet-1.0 (ceil-mode MaxPool), VGG-11-BN (reduced widths), ResNeXt (grouped conv,
  reduced depth), Wide-ResNet (reduced), RegNetY-400MF (SE), Swin-T (reduced: ``torch.roll`` shifted windows,
  attention masks, relative position bias), MaxViT (reduced: block / grid partition, relative position bias),
  ViT-B/16 (reduced: ``nn.MultiheadAttention``), LR-ASPP-MobileNetV3 and FCN-ResNet50 (segmentation);
- timm 1.0.31: HRNet-w18-small, DLA-34, Res2Net (reduced), SK-ResNet-18 (selective kernel), ResNeSt-14d (radix
  softmax), NF-ResNet-26 (scaled weight standardization), Xception-41, CSPDarkNet-53, ESE-VoVNet-19b-dw,
  PoolFormer-S12 (GroupNorm 1, AvgPool - x), MLP-Mixer, ResMLP (Affine), gMLP (spatial gating), XCiT-nano
  (cross-covariance attention, L2 normalize), BEiT (relative position bias Gather), CaiT (class attention, talking
  heads), PiT, VOLO (Fold / Unfold outlook attention), Sequencer2D (bidirectional LSTM over rows and columns),
  FastViT-T8, GhostNetV2, MobileOne-S0, ConvMixer, CoaT-Lite, TNT.

    python benchmarks/zoo/probe_backbones2.py --out benchmarks/.zoo/probe8b [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe8b/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402

Spec = zoo_export.Spec
SEED = 8800


def live_head(build):
    """``build`` with its zero-initialised Linear layers (timm's MLP-Mixer / ResMLP / gMLP / Sequencer heads,
    torchvision's ViT head) drawn from N(0, 0.02) as the other layers are: a zero head makes a constant output,
    and every figure then trivially 1.0."""

    def make(full: bool) -> nn.Module:
        model = build(full)
        for m in model.modules():
            if isinstance(m, nn.Linear) and not m.weight.detach().any():
                nn.init.trunc_normal_(m.weight, std=0.02)
        return model

    return make


def image(size: int, name: str = "input"):
    return lambda full: [(name, [1, 3, size, size])]


# ------------------------------------------------------------------------------------------------ torchvision


def tv(name: str, **kwargs):
    def make(full: bool) -> nn.Module:
        import torchvision

        return torchvision.models.get_model(name, weights=None, num_classes=32, **kwargs)

    return make


def densenet_small(full: bool) -> nn.Module:
    from torchvision.models import DenseNet

    return DenseNet(
        growth_rate=12, block_config=(2, 3, 4, 3), num_init_features=24, bn_size=2, num_classes=32
    )


def vgg11_bn_small(full: bool) -> nn.Module:
    from torchvision.models.vgg import VGG, make_layers

    model = VGG(make_layers([16, "M", 32, "M", 64, 64, "M", 96, 96, "M", 96, 96, "M"], batch_norm=True), 32)
    # the reduced classifier: 96 x 7 x 7 -> 256 -> 256 -> 32 (Dropout, ReLU), AdaptiveAvgPool 7x7 kept
    model.classifier = nn.Sequential(
        nn.Linear(96 * 49, 256), nn.ReLU(True), nn.Dropout(), nn.Linear(256, 256), nn.ReLU(True), nn.Dropout(),
        nn.Linear(256, 32),
    )  # fmt: skip
    return model


def resnext_small(width_per_group: int, groups: int):
    def make(full: bool) -> nn.Module:
        from torchvision.models.resnet import Bottleneck, ResNet

        return ResNet(
            Bottleneck, [1, 1, 1, 1], num_classes=32, groups=groups, width_per_group=width_per_group
        )

    return make


def swin_small(full: bool) -> nn.Module:
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(
        patch_size=[4, 4], embed_dim=32, depths=[2, 2, 2, 2], num_heads=[2, 2, 4, 4], window_size=[7, 7],
        stochastic_depth_prob=0.0, num_classes=32,
    )  # fmt: skip


def maxvit_small(full: bool) -> nn.Module:
    from torchvision.models.maxvit import MaxVit

    return MaxVit(
        input_size=(128, 128), stem_channels=16, partition_size=4, block_channels=[16, 32, 48, 64],
        block_layers=[1, 1, 1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=32,
    )  # fmt: skip


def vit_small(full: bool) -> nn.Module:
    from torchvision.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        image_size=64, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=32
    )


class SegOut(nn.Module):
    """A torchvision segmentation model returns a dict: its ``out`` entry."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def lraspp(full: bool) -> nn.Module:
    from torchvision.models.segmentation import lraspp_mobilenet_v3_large

    return SegOut(lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=8))


def fcn_resnet50(full: bool) -> nn.Module:
    from torchvision.models.segmentation import fcn_resnet50 as build

    return SegOut(build(weights=None, weights_backbone=None, num_classes=8, aux_loss=False))


# ------------------------------------------------------------------------------------------------------ timm


def timm_model(name: str, **kwargs):
    def make(full: bool) -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=32, **kwargs)

    return make


def volo_small(full: bool) -> nn.Module:
    """timm VOLO (outlook attention: Unfold, attention over the 3x3 windows, Fold) at 1/1/1/1 layers, dims 64-128
    (``volo_d1``'s registration fixes ``layers``)."""
    from timm.models.volo import VOLO

    return VOLO(
        layers=(1, 1, 1, 1), img_size=64, embed_dims=(64, 128, 128, 128), num_heads=(2, 4, 4, 4), num_classes=32,
        stem_hidden_dim=32,
    )  # fmt: skip


def convmixer_small(full: bool) -> nn.Module:
    from timm.models.convmixer import ConvMixer

    return ConvMixer(dim=96, depth=4, kernel_size=7, patch_size=7, num_classes=32, act_layer=nn.GELU)


def mlp_mixer(kind: str):
    """timm MLP-Mixer / ResMLP (Affine) / gMLP (spatial gating) at 4 blocks, dim 128, 64x64 (the variants'
    registrations fix ``num_blocks``, so the class is built directly with their block layers)."""

    def make(full: bool) -> nn.Module:
        from timm.layers import GatedMlp
        from timm.models.mlp_mixer import Affine, MlpMixer, ResBlock, SpatialGatingBlock

        kw = {
            "mixer": {},
            "resmlp": {"block_layer": ResBlock, "norm_layer": Affine, "mlp_ratio": 4},
            "gmlp": {"block_layer": SpatialGatingBlock, "mlp_layer": GatedMlp, "mlp_ratio": 6},
        }[kind]
        return MlpMixer(num_classes=32, img_size=64, patch_size=16, num_blocks=4, embed_dim=128, **kw)

    return make


TV = [
    # name, builder, input size, opset, note
    ("inception_v3", tv("inception_v3", aux_logits=False, transform_input=True, init_weights=False), 96, 13,
     "torchvision inception_v3, transform_input (per-channel affine in the graph), 96x96"),
    ("googlenet", tv("googlenet", aux_logits=False, transform_input=True, init_weights=False), 96, 13,
     "torchvision googlenet, transform_input, ceil-mode MaxPool, 96x96"),
    ("densenet_small", densenet_small, 96, 13, "torchvision DenseNet growth 12, blocks 2/3/4/3, 96x96"),
    ("mnasnet0_5", tv("mnasnet0_5"), 96, 13, "torchvision mnasnet0_5, 96x96"),
    ("squeezenet1_0", tv("squeezenet1_0"), 96, 13, "torchvision squeezenet1_0 (ceil-mode MaxPool), 96x96"),
    ("vgg11_bn_small", vgg11_bn_small, 224, 13, "torchvision VGG-11-BN widths 16-96, 224x224 (AdaptiveAvgPool 7x7)"),
    ("resnext_small", resnext_small(4, 32), 64, 17, "torchvision ResNeXt-50 32x4d at depth 1/1/1/1, 64x64"),
    ("wide_resnet_small", resnext_small(128, 1), 64, 13, "torchvision Wide-ResNet-50-2 at depth 1/1/1/1"),
    ("regnet_y_400mf", tv("regnet_y_400mf"), 64, 13, "torchvision regnet_y_400mf (SE), 64x64"),
    ("swin_small", swin_small, 112, 17, "torchvision SwinTransformer dim 32, depths 2/2/2/2, window 7, 112x112"),
    ("maxvit_small", maxvit_small, 128, 17, "torchvision MaxVit widths 16-64, partition 4, 128x128"),
    ("vit_tv_small", vit_small, 64, 17, "torchvision VisionTransformer 2 layers, dim 64 (nn.MultiheadAttention)"),
    ("mixer_s16", mlp_mixer("mixer"), 64, 17, "timm MLP-Mixer 4 blocks, dim 128, patch 16, 64x64"),
    ("resmlp_12", mlp_mixer("resmlp"), 64, 17, "timm ResMLP (Affine) 4 blocks, dim 128, patch 16, 64x64"),
    ("gmlp_s16", mlp_mixer("gmlp"), 64, 17, "timm gMLP (spatial gating unit) 4 blocks, dim 128, patch 16, 64x64"),
    ("lraspp_mnv3", lraspp, 128, 13, "torchvision lraspp_mobilenet_v3_large, 8 classes, 128x128"),
    ("fcn_resnet50", fcn_resnet50, 64, 13, "torchvision fcn_resnet50, 8 classes, 64x64"),
]  # fmt: skip

TIMM = [
    # name, timm model, input size, opset, kwargs
    ("hrnet_w18_small", "hrnet_w18_small", 64, 13, {}),
    ("dla34", "dla34", 64, 13, {}),
    ("res2net50_14w_8s", "res2net50_14w_8s", 64, 13, {"layers": [1, 1, 1, 1]}),
    ("skresnet18", "skresnet18", 64, 13, {}),
    ("resnest14d", "resnest14d", 64, 13, {}),
    ("nf_resnet26", "nf_resnet26", 64, 13, {}),
    ("xception41", "xception41", 64, 13, {}),
    ("cspdarknet53", "cspdarknet53", 64, 13, {}),
    ("ese_vovnet19b_dw", "ese_vovnet19b_dw", 64, 13, {}),
    ("poolformer_s12", "poolformer_s12", 64, 17, {}),
    ("xcit_nano_12_p16", "xcit_nano_12_p16_224", 64, 17, {"img_size": 64, "depth": 4}),
    (
        "beit_small",
        "beit_base_patch16_224",
        64,
        17,
        {"img_size": 64, "depth": 2, "embed_dim": 64, "num_heads": 2},
    ),
    ("cait_xxs24", "cait_xxs24_224", 64, 17, {"img_size": 64, "depth": 4}),
    ("pit_ti", "pit_ti_224", 64, 17, {"img_size": 64}),
    ("sequencer2d_s", "sequencer2d_s", 64, 17, {"img_size": 64, "layers": [1, 1, 1, 1]}),
    ("fastvit_t8", "fastvit_t8", 64, 17, {}),
    ("ghostnetv2_100", "ghostnetv2_100", 64, 13, {}),
    ("mobileone_s0", "mobileone_s0", 64, 13, {}),
    ("coat_lite_tiny", "coat_lite_tiny", 64, 17, {"img_size": 64}),
    ("tnt_s", "tnt_s_patch16_224", 64, 17, {"img_size": 64, "depth": 2}),
    ("crossvit_tiny", "crossvit_tiny_240", 240, 17, {}),
]


def specs() -> list[Spec]:
    out = [
        Spec(
            name,
            note.split(",")[0],
            "classifier",
            opset,
            live_head(build),
            image(size),
            ["logits"],
            note=note,
        )
        for name, build, size, opset, note in TV
    ]
    for seg in ("lraspp_mnv3", "fcn_resnet50"):
        i = next(i for i, s in enumerate(out) if s.name == seg)
        s = out[i]
        out[i] = Spec(s.name, s.family, "segmenter", s.opset, s.build, s.inputs, ["out"], note=s.note)
    out += [
        Spec(name, f"timm {model}", "classifier", opset, live_head(timm_model(model, **kw)), image(size), ["logits"],
             note=f"timm {model} {kw}, num_classes 32, {size}x{size}")
        for name, model, size, opset, kw in TIMM
    ]  # fmt: skip
    out.append(
        Spec("volo_small", "timm VOLO", "classifier", 18, volo_small, image(64), ["logits"],
             note="timm VOLO layers 1/1/1/1, dims 64-128, 64x64: outlook attention (Unfold / Fold: Col2Im at opset 18)")
    )  # fmt: skip
    out.append(
        Spec("volo_small_dynamo", "timm VOLO (dynamo exporter)", "classifier", 18, volo_small, image(64), ["logits"],
             note="volo_small by torch's dynamo exporter at opset 18 (the legacy one cannot write its Fold: "
             "col2im needs a static output size)", export_kwargs={"dynamo": True})
    )  # fmt: skip
    out.append(
        Spec("convmixer_small", "timm ConvMixer", "classifier", 17, convmixer_small, image(64), ["logits"],
             note="timm ConvMixer dim 96, depth 4, kernel 7, patch 7, GELU")
    )  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    return zoo_export.build_main(argv, __doc__, specs(), SEED)


if __name__ == "__main__":
    raise SystemExit(main())
