"""Issue 12 probe round 13m: mobile and efficient timm backbones (``--out benchmarks/.zoo/probe13m``, not committed).

timm 1.0.31 families the earlier rounds did not probe (or screened at fp32 only), seeded, ``num_classes=32``, 64-128 px,
reduced where the constructors allow, BatchNorm statistics from the photos (``export.build_main``), zero-initialised
Linear heads drawn from N(0, 0.02) (``probe_backbones2.live_head``), ``torch.onnx.export(dynamo=False)`` at opset 13
or 17 and the dynamo exporter at opset 18 for three:

- MobileNetV4 conv small / medium and hybrid medium (mobile multi-query attention), GhostNet v1 / v2 / v3, RepViT,
  MobileOne and FastViT (train-time branches, and after ``timm.utils.reparameterize_model``: ``*_rep``; the
  statistics are set on the train-time model, then the branches are folded), EfficientViT (MIT b0: ReLU linear
  attention; MSRA m0: cascaded group attention), TinyViT, EdgeNeXt (transposed channel attention, Fourier positional
  encoding), MNASNet / MixNet (MixConv: channel splits with different kernel sizes), LCNet, HGNetV2, RegNetY
  (SE), NF-RegNet / NF-ECA-ResNet (ScaledStdConv), ResNeSt, SK-ResNet, ECA-ResNet (Conv1d across channels),
  Xception-p, Inception-v4, DLA, VoVNet (eSE), PVTv2 (spatial-reduction attention), EVA-02 (RoPE, SwiGLU), CoAtNet.

    python benchmarks/zoo/probe_backbones3.py --out benchmarks/.zoo/probe13m [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe13m/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402
from probe_backbones2 import image, live_head  # noqa: E402

Spec = zoo_export.Spec
SEED = 13130
_PHOTOS: list = []


def timm_model(name: str, **kwargs):
    def make(full: bool) -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=32, **kwargs)

    return make


def eager_attention(name: str, **kwargs):
    """timm ``name`` with ``F.scaled_dot_product_attention`` replaced by its explicit softmax(q k^T) v
    (``timm.layers.set_fused_attn(False)`` while it is built): EVA's fused call passes ``is_causal`` as a tensor,
    which the legacy exporter refuses (``TypeError: scaled_dot_product_attention(): argument 'is_causal' must be
    bool, not Tensor``)."""

    def make(full: bool) -> nn.Module:
        from timm.layers import set_fused_attn

        set_fused_attn(False)
        try:
            return timm_model(name, **kwargs)(full)
        finally:
            set_fused_attn(True)

    return make


def reparameterized(name: str, size: int, **kwargs):
    """timm ``name`` as deployed: BatchNorm statistics set on the train-time branches from the photos (as
    ``build_main`` does for every model), then ``timm.utils.reparameterize_model`` folds the branches into one
    convolution each (what MobileOne / FastViT / RepViT users export)."""

    def make(full: bool) -> nn.Module:
        import zoo_data
        from shared_data import default_shared
        from timm.utils import reparameterize_model

        if not _PHOTOS:
            _PHOTOS.extend(zoo_data.bn_photos(None, default_shared()))
        model = live_head(timm_model(name, **kwargs))(full)
        spec = Spec(name, name, "classifier", 13, lambda f: model, image(size), ["logits"])
        zoo_export.set_bn_statistics(model, spec, full, _PHOTOS, 8)
        return reparameterize_model(model.eval())

    return make


TIMM = [
    # name, timm model, input size, opset, kwargs
    ("mnv4_conv_small", "mobilenetv4_conv_small", 64, 13, {}),
    ("mnv4_conv_medium", "mobilenetv4_conv_medium", 64, 17, {}),
    ("mnv4_hybrid_medium", "mobilenetv4_hybrid_medium", 128, 17, {}),
    ("ghostnet_050", "ghostnet_050", 64, 13, {}),
    ("ghostnetv2_100", "ghostnetv2_100", 64, 17, {}),
    ("ghostnetv3_050", "ghostnetv3_050", 64, 13, {}),
    ("repvit_m0_9", "repvit_m0_9", 64, 13, {}),
    ("mobileone_s0", "mobileone_s0", 64, 17, {}),
    ("fastvit_t8", "fastvit_t8", 64, 17, {}),
    ("fastvit_sa12", "fastvit_sa12", 64, 17, {}),
    ("efficientvit_b0", "efficientvit_b0", 96, 17, {}),
    ("efficientvit_m0", "efficientvit_m0", 64, 17, {"img_size": 64}),
    ("tiny_vit_5m", "tiny_vit_5m_224", 64, 17, {}),
    ("edgenext_xx_small", "edgenext_xx_small", 64, 17, {}),
    ("mnasnet_small", "mnasnet_small", 64, 13, {}),
    ("mixnet_s", "mixnet_s", 64, 13, {}),
    ("lcnet_050", "lcnet_050", 64, 13, {}),
    ("hgnetv2_b0", "hgnetv2_b0", 64, 13, {}),
    ("regnety_002", "regnety_002", 64, 13, {}),
    ("nf_regnet_b0", "nf_regnet_b0", 64, 13, {}),
    ("nf_ecaresnet26", "nf_ecaresnet26", 64, 17, {}),
    ("resnest26d", "resnest26d", 64, 17, {}),
    ("skresnet18", "skresnet18", 64, 17, {}),
    ("ecaresnet26t", "ecaresnet26t", 64, 13, {}),
    ("xception41p", "xception41p", 64, 13, {}),
    ("inception_v4", "inception_v4", 96, 13, {}),
    ("dla46_c", "dla46_c", 64, 13, {}),
    ("ese_vovnet19b_slim_dw", "ese_vovnet19b_slim_dw", 64, 13, {}),
    ("pvt_v2_b0", "pvt_v2_b0", 64, 17, {}),
    ("eva02_tiny", "eva02_tiny_patch14_224", 56, 17, {"img_size": 56, "depth": 4}),
    ("coatnet_nano_cc", "coatnet_nano_cc_224", 64, 17, {"img_size": 64}),
]

REPARAM = [
    ("mobileone_s0_rep", "mobileone_s0", 64, 13, {}),
    ("fastvit_t8_rep", "fastvit_t8", 64, 17, {}),
    ("fastvit_sa12_rep", "fastvit_sa12", 64, 17, {}),
    ("repvit_m0_9_rep", "repvit_m0_9", 64, 13, {}),
    ("ghostnetv3_050_rep", "ghostnetv3_050", 64, 13, {}),
]

DYNAMO = [
    ("mnv4_hybrid_medium_dyn18", "mobilenetv4_hybrid_medium", 128, {}),
    ("eva02_tiny_dyn18", "eva02_tiny_patch14_224", 56, {"img_size": 56, "depth": 4}),
    ("efficientvit_m0_dyn18", "efficientvit_m0", 64, {"img_size": 64}),
]


def specs() -> list[Spec]:
    out = [
        Spec(name, f"timm {model}", "classifier", opset, live_head(timm_model(model, **kw)), image(size), ["logits"],
             note=f"timm {model} {kw}, num_classes 32, {size}x{size}")
        for name, model, size, opset, kw in TIMM
    ]  # fmt: skip
    out += [
        Spec(name, f"timm {model} (reparameterized)", "classifier", opset, reparameterized(model, size, **kw),
             image(size), ["logits"],
             note=f"timm {model} {kw} after timm.utils.reparameterize_model, num_classes 32, {size}x{size}")
        for name, model, size, opset, kw in REPARAM
    ]  # fmt: skip
    out += [
        Spec(name, f"timm {model} (dynamo exporter)", "classifier", 18, live_head(timm_model(model, **kw)),
             image(size), ["logits"], note=f"timm {model} {kw} by torch's dynamo exporter at opset 18, {size}x{size}",
             export_kwargs={"dynamo": True})
        for name, model, size, kw in DYNAMO
    ]  # fmt: skip
    out.append(
        Spec("eva02_tiny_eager", "timm eva02_tiny_patch14_224 (eager attention)", "classifier", 17,
             live_head(eager_attention("eva02_tiny_patch14_224", img_size=56, depth=4)), image(56), ["logits"],
             note="timm eva02_tiny_patch14_224 img_size 56, depth 4, set_fused_attn(False): RoPE, SwiGLU, 56x56")
    )  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    """``export.build_main`` one model at a time (each merges its entry into the manifest), so that a model timm
    or torch cannot build or export is reported on one line and the others are still written."""
    argv = list(sys.argv[1:] if argv is None else argv)
    wanted = None
    if "--only" in argv:
        i = argv.index("--only")
        wanted = set(argv[i + 1].split(","))
        del argv[i : i + 2]
    all_specs = specs()
    failed = 0
    for spec in all_specs:
        if wanted and spec.name not in wanted:
            continue
        try:
            zoo_export.build_main([*argv, "--only", spec.name], __doc__, all_specs, SEED)
        except Exception as exc:  # noqa: BLE001 - a probe: report and go on
            failed += 1
            print(f"{spec.name:28s} not built: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
