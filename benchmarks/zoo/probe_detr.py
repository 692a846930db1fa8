"""Issue 12 probe round 15r: transformer detectors and pose / keypoint models of Hugging Face transformers not
probed before (``--out benchmarks/.zoo/probe15r``, not committed; the dynamo exports need ``onnxscript`` in the
probe's venv).

Small seeded configs (no download; LayerNorm affine parameters given spread; BatchNorm statistics from the
photos; ResNet / HGNetV2 / ViT backbones built from their config classes, 16-128 channels), 128-160 px inputs,
10-20 queries, 1-2 encoder / decoder layers, ``torch.onnx.export(dynamo=False)`` at opset 17 as users do (and
``dynamo=True`` at 18 where the legacy exporter fails or users would use it). Outputs as users export them:
``logits`` + ``pred_boxes`` (no post-processing), plus a top-k over the queries scripted into the graph (no NMS)
for two of them:

- D-FINE (HGNetV2, fine-grained distribution refinement), RT-DETRv2 (ResNet, discrete and bilinear
  deformable sampling), Deformable DETR (single-stage, box refine + two-stage), Conditional DETR, DAB-DETR,
  Table Transformer, YOLOS, Grounding DINO / MM-Grounding-DINO (image + text ids + attention mask + token types,
  a Swin backbone), OmDet-Turbo, LW-DETR / RF-DETR if they build;
- ViTPose (ViT backbone, simple and classic decoder), SuperPoint (keypoint + descriptor heads, no NMS output:
  the raw scores map and descriptors), SuperGlue / LightGlue matchers with fixed keypoints.

    python benchmarks/zoo/probe_detr.py [--only a,b]          # -> benchmarks/.zoo/probe15r/ + zoo.json
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe15r/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
import zoo_data  # noqa: E402
from probe_vision_hf import IMG, Probe, Wrap, build, eager, photo_pixels, pix, spread, t  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe15r"
SEED = 15300
VOCAB = 1100  # BERT ids of [CLS] 101, [SEP] 102 and "." 1012 exist (Grounding DINO's special tokens)
SEQ = 12
DET = ["logits", "pred_boxes"]
DYNAMO = {"dynamo": True, "external_data": False}


def jitter(model: nn.Module, seed: int, scale: float = 0.05) -> None:
    """Constant parameters (the zero sampling offsets, attention weights and last box layers these detectors
    initialise, which a trained model does not have) given noise: a seeded detector whose boxes and scores do not
    depend on its input ranks near-tied queries, which tells nothing about the conversion."""
    g = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.numel() > 1 and float(p.std()) == 0.0 and "norm" not in n.lower():
                p.add_(scale * torch.randn(p.shape, generator=g))


def detector(cls_name: str, config) -> nn.Module:
    m = getattr(t, cls_name)(eager(config()))
    spread(m, SEED)
    jitter(m, SEED)
    return m


def hf(cls_name: str, config, names: list[str], outs: list[str], **extra):
    def build_() -> nn.Module:
        return Wrap(detector(cls_name, config), names, outs, **extra)

    return build_


# ------------------------------------------------------------------------------------------------ backbones


def resnet(stages: int = 4, **kw):
    feats = [f"stage{i}" for i in range(1, stages + 1)]
    return t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128][:stages], depths=[1] * stages,
                          layer_type="basic", out_features=kw.pop("out_features", feats), **kw)  # fmt: skip


def rtdetr_resnet():
    return t.RTDetrResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                layer_type="basic", out_features=["stage2", "stage3", "stage4"])  # fmt: skip


def hgnetv2():
    return t.HGNetV2Config(embedding_size=16, depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 96, 128],
                           stem_channels=[3, 8, 16], stage_in_channels=[16, 32, 64, 96],
                           stage_mid_channels=[8, 16, 24, 32], stage_out_channels=[32, 64, 96, 128],
                           stage_num_blocks=[1, 1, 1, 1], stage_numb_of_layers=[2, 2, 2, 2],
                           out_features=["stage2", "stage3", "stage4"])  # fmt: skip


def swin():
    return t.SwinConfig(image_size=128, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 2, 2, 4],
                        window_size=4, out_features=["stage2", "stage3", "stage4"])  # fmt: skip


# ------------------------------------------------------------------------------------------------ configs

SMALL = dict(encoder_layers=1, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=20, num_labels=8)  # fmt: skip


def dfine_cfg():
    return t.DFineConfig(backbone_config=hgnetv2(), encoder_hidden_dim=32, encoder_in_channels=[64, 96, 128],
                         encoder_ffn_dim=64, encoder_attention_heads=4, d_model=32, decoder_in_channels=[32, 32, 32],
                         decoder_ffn_dim=64, decoder_layers=2, decoder_attention_heads=4, num_queries=20, num_labels=8,
                         num_denoising=0, hidden_expansion=0.5, depth_mult=0.34, lqe_hidden_dim=16)  # fmt: skip


def rtdetr_v2_cfg(method: str = "default"):
    return lambda: t.RTDetrV2Config(backbone_config=rtdetr_resnet(), encoder_hidden_dim=32,
                                    encoder_in_channels=[32, 64, 128], encoder_ffn_dim=64, encoder_attention_heads=4,
                                    d_model=32, decoder_in_channels=[32, 32, 32], decoder_ffn_dim=64, decoder_layers=2,
                                    decoder_attention_heads=4, num_queries=20, num_labels=8, num_denoising=0,
                                    hidden_expansion=0.5, decoder_method=method)  # fmt: skip


def deformable_cfg(**kw):
    return lambda: t.DeformableDetrConfig(backbone_config=resnet(out_features=["stage2", "stage3", "stage4"]),
                                          d_model=32, num_feature_levels=4, encoder_n_points=2, decoder_n_points=2,
                                          two_stage_num_proposals=20, **SMALL, **kw)  # fmt: skip


def conditional_cfg():
    return t.ConditionalDetrConfig(backbone_config=resnet(out_features=["stage4"]), d_model=32, **SMALL)


def dab_cfg():
    s = {k: v for k, v in SMALL.items()}
    return t.DabDetrConfig(backbone_config=resnet(out_features=["stage4"]), hidden_size=32, **s)


def table_cfg():
    return t.TableTransformerConfig(backbone_config=resnet(out_features=["stage4"]), d_model=32, **SMALL)


def yolos_cfg():
    return t.YolosConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                         image_size=[128, 160], patch_size=16, num_detection_tokens=10, num_labels=8)  # fmt: skip


def grounding_cfg(cls: str = "GroundingDinoConfig"):
    def cfg():
        text = t.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=64)  # fmt: skip
        return getattr(t, cls)(backbone_config=swin(), text_config=text, d_model=32, encoder_layers=1,
                               decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                               encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=20, num_feature_levels=4,
                               encoder_n_points=2, decoder_n_points=2, max_text_len=SEQ,
                               disable_custom_kernels=True)  # fmt: skip

    return cfg


def vitpose_cfg(simple: bool = True):
    def cfg():
        bb = t.VitPoseBackboneConfig(image_size=[128, 96], patch_size=[16, 16], hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, mlp_ratio=2, out_indices=[2])  # fmt: skip
        return t.VitPoseConfig(backbone_config=bb, use_simple_decoder=simple)

    return cfg


def superpoint_cfg():
    return t.SuperPointConfig(
        encoder_hidden_sizes=[16, 16, 32, 32], decoder_hidden_size=64, descriptor_decoder_dim=64
    )


# ------------------------------------------------------------------------------------------------ wrappers


class TopK(nn.Module):
    """The detector's post-processing as transformers' ``post_process_object_detection`` does it for the
    focal-loss detectors, scripted without NMS: sigmoid scores, top-k over queries x classes, class = index %
    num_classes, the query's box (cx, cy, w, h -> x0, y0, x1, y1) gathered."""

    def __init__(self, det: nn.Module, k: int = 10) -> None:
        super().__init__()
        self.det, self.k = det, k

    def forward(self, pixel_values):
        r = self.det(pixel_values=pixel_values)
        logits, boxes = r.logits, r.pred_boxes
        n = logits.shape[-1]
        scores, idx = torch.sigmoid(logits).flatten(1).topk(self.k, dim=1)
        labels = idx % n
        q = torch.div(idx, n, rounding_mode="floor")
        cx, cy, w, h = boxes.unbind(-1)
        xyxy = torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], -1)
        picked = torch.gather(xyxy, 1, q.unsqueeze(-1).expand(-1, -1, 4))
        return scores, labels, picked


def topk(cls_name: str, config):
    def build_() -> nn.Module:
        return TopK(detector(cls_name, config))

    return build_


class Keypoints(nn.Module):
    """SuperPoint's dense heads without its NMS / top-k: the keypoint score map and the normalised descriptors."""

    def __init__(self, sp: nn.Module) -> None:
        super().__init__()
        self.sp = sp

    def forward(self, pixel_values):
        enc = self.sp.encoder(pixel_values, output_hidden_states=False, return_dict=True)[0]
        scores = self.sp.keypoint_decoder._get_pixel_scores(enc)
        desc = self.sp.descriptor_decoder.conv_descriptor_b(
            self.sp.descriptor_decoder.relu(self.sp.descriptor_decoder.conv_descriptor_a(enc))
        )
        return scores, nn.functional.normalize(desc, p=2, dim=1)


def superpoint():
    m = t.SuperPointForKeypointDetection(superpoint_cfg())
    return Keypoints(m)


# ------------------------------------------------------------------------------------------------ stored inputs


def text_arrays(count: int, seed: int, size: tuple[int, int], photos, data=IMG) -> dict[str, np.ndarray]:
    """Photo crops + ``[CLS] a . b . [SEP]`` token ids (phrases split by '.' ids, as Grounding DINO's processor
    writes class prompts), mask 1 on tokens, token types 0."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((count, SEQ), np.int64)
    mask = np.zeros((count, SEQ), np.int64)
    for i in range(count):
        n = int(rng.integers(6, SEQ + 1))
        body = rng.integers(200, 1000, n - 2)
        body[rng.integers(1, n - 2, 2)] = 1012  # '.' separators
        ids[i, :n] = [101, *body, 102]
        mask[i, :n] = 1
    return {"pixel_values": photo_pixels(data, [1, 3, *size], count, seed, photos), "input_ids": ids,
            "token_type_ids": np.zeros_like(ids), "attention_mask": mask}  # fmt: skip


def phrase_masks(input_ids: torch.Tensor, special_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``generate_masks_with_special_tokens_and_transfer_map`` without ``isin`` / ``cummax`` /
    ``cummin`` (neither exporter has them): the same masks and positions, by comparisons over a [N, N] triangle
    (the patch an optimum-style exporter applies)."""
    _, n = input_ids.shape
    special = (input_ids.unsqueeze(-1) == special_tokens.view(1, 1, -1)).any(-1)
    idx = torch.arange(n).unsqueeze(0).expand_as(input_ids)
    upto = torch.ones(n, n, dtype=torch.bool).tril()  # [i, j]: j <= i
    prev = torch.where(special, idx, torch.full_like(idx, -1))
    prev = torch.where(upto.unsqueeze(0), prev.unsqueeze(1), torch.full_like(prev, -1).unsqueeze(1)).amax(-1)
    prev = torch.cat([torch.full_like(prev[:, :1], -1), prev[:, :-1]], 1)
    nxt = torch.where(special, idx, torch.full_like(idx, n))
    nxt = torch.where(upto.T.unsqueeze(0), nxt.unsqueeze(1), torch.full_like(nxt, n).unsqueeze(1)).amin(-1)
    valid = (nxt != 0) & (nxt != n - 1) & (nxt != n)
    att = (nxt.unsqueeze(2) == nxt.unsqueeze(1)) & valid.unsqueeze(1)
    att = torch.eye(n, dtype=torch.bool).unsqueeze(0) | att
    pos = torch.where(valid, idx - prev - 1, torch.zeros_like(idx)).clamp(min=0)
    return att, pos


def patched(build_: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """Grounding DINO's phrase masks replaced by ``phrase_masks`` in transformers' modules (for the export)."""

    def b() -> nn.Module:
        for mod in ("grounding_dino", "mm_grounding_dino"):
            m = importlib.import_module(f"transformers.models.{mod}.modeling_{mod}")
            m.generate_masks_with_special_tokens_and_transfer_map = phrase_masks
        return build_()

    return b


def grounding_arrays(count, seed, photos):
    return text_arrays(count, seed, (128, 128), photos)


GD_IN = [("pixel_values", [1, 3, 128, 128], "float32"), ("input_ids", [1, SEQ], "int64"),
         ("token_type_ids", [1, SEQ], "int64"), ("attention_mask", [1, SEQ], "int64")]  # fmt: skip
GD_NAMES = [n for n, _, _ in GD_IN]


def probes() -> list[Probe]:
    px = ["pixel_values"]
    return [
        Probe("d_dfine", "D-FINE (HGNetV2, FDR distributions)", "detector", 17,
              hf("DFineForObjectDetection", dfine_cfg, px, DET), pix(160), DET),
        Probe("d_dfine_topk", "D-FINE + top-10 over queries x classes (no NMS)", "detector", 17,
              topk("DFineForObjectDetection", dfine_cfg), pix(160), ["scores", "labels", "boxes"]),
        Probe("d_rtdetr_v2", "RT-DETRv2 (ResNet, bilinear deformable sampling)", "detector", 17,
              hf("RTDetrV2ForObjectDetection", rtdetr_v2_cfg(), px, DET), pix(160), DET),
        Probe("d_rtdetr_v2_discrete", "RT-DETRv2 (discrete sampling)", "detector", 17,
              hf("RTDetrV2ForObjectDetection", rtdetr_v2_cfg("discrete"), px, DET), pix(160), DET),
        Probe("d_deformable", "Deformable DETR (single-stage)", "detector", 17,
              hf("DeformableDetrForObjectDetection", deformable_cfg(), px, DET), pix(128), DET),
        Probe("d_deformable_2stage", "Deformable DETR (two-stage, box refine)", "detector", 17,
              hf("DeformableDetrForObjectDetection", deformable_cfg(two_stage=True, with_box_refine=True), px, DET),
              pix(128), DET),
        Probe("d_conditional", "Conditional DETR", "detector", 17,
              hf("ConditionalDetrForObjectDetection", conditional_cfg, px, DET), pix(128), DET),
        Probe("d_dab", "DAB-DETR", "detector", 17, hf("DabDetrForObjectDetection", dab_cfg, px, DET), pix(128), DET),
        Probe("d_table", "Table Transformer", "detector", 17,
              hf("TableTransformerForObjectDetection", table_cfg, px, DET), pix(128), DET),
        Probe("d_yolos", "YOLOS (128x160, 10 detection tokens)", "detector", 17,
              hf("YolosForObjectDetection", yolos_cfg, px, DET), pix((128, 160)), DET),
        Probe("d_yolos_dyn", "YOLOS, dynamo=True", "detector", 18,
              hf("YolosForObjectDetection", yolos_cfg, px, DET), pix((128, 160)), DET, export_kwargs=DYNAMO),
        Probe("d_grounding_dino", "Grounding DINO (Swin + BERT, image + text)", "detector", 17,
              patched(hf("GroundingDinoForObjectDetection", grounding_cfg(), GD_NAMES, DET)), GD_IN, DET,
              {"type": "arrays", "file": "d_grounding_dino.samples.npz"}, arrays=grounding_arrays),
        Probe("d_mm_grounding_dino", "MM-Grounding-DINO", "detector", 17,
              patched(hf("MMGroundingDinoForObjectDetection", grounding_cfg("MMGroundingDinoConfig"), GD_NAMES, DET)), GD_IN,
              DET, {"type": "arrays", "file": "d_mm_grounding_dino.samples.npz"}, arrays=grounding_arrays),
        Probe("p_vitpose", "ViTPose (ViT backbone, simple decoder)", "segmenter", 17,
              hf("VitPoseForPoseEstimation", vitpose_cfg(), px, ["heatmaps"]), pix((128, 96)), ["heatmaps"]),
        Probe("p_vitpose_classic", "ViTPose (classic decoder: deconvolutions)", "segmenter", 17,
              hf("VitPoseForPoseEstimation", vitpose_cfg(False), px, ["heatmaps"]), pix((128, 96)), ["heatmaps"]),
        Probe("p_superpoint", "SuperPoint (transformers): score map + descriptors", "segmenter", 17, superpoint,
              pix(128), ["scores", "descriptors"], {"type": "image", "color": "GRAY", "scale": 1 / 255,
                                                     "mean": [0.0], "std": [1.0]}),
    ]  # fmt: skip


def set_bn_statistics(model: nn.Module, *args, **kw) -> int:
    """``export.set_bn_statistics``, then each BatchNorm's variance floored at 1e-2 of its layer's median: a
    seeded network has dead channels (variance 0 on the photos) that the statistics alone scale up 300-470x
    (1 / sqrt(eps)) per layer, which makes the float32 model itself 0.4-0.7 of its output range off float64
    (D-FINE's encoder); a trained network's BatchNorm weight is small on such channels."""
    n = _SET_BN(model, *args, **kw)
    with torch.no_grad():
        for bn in model.modules():
            if isinstance(bn, nn.modules.batchnorm._BatchNorm) and bn.running_var is not None:
                floor = 1e-2 * float(bn.running_var.median()) + 1e-4
                bn.running_var.clamp_(min=floor)
    return n


_SET_BN = export.set_bn_statistics
export.set_bn_statistics = set_bn_statistics  # probe_vision_hf.build calls it through the module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(None, export.default_shared())
    torch.set_num_threads(2)
    export.export_probes(probes(), lambda i, p: build(p, args.out, photos, SEED + i), args.out, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
