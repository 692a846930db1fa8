"""Issue 12 probe round 14v: vision foundation models of Hugging Face transformers not probed before
(``--out benchmarks/.zoo/probe14v``, not committed).

Small seeded configs (no download; LayerNorm affine parameters given spread; BatchNorm statistics from the
photos), ``torch.onnx.export(dynamo=False)`` at opset 17 as users do, several also with optimum's dynamic axes
(``pixel_values``: batch_size, height, width; ``input_ids``: batch_size, sequence_length; the cases fix them with
``--input-shape``):

- DINOv2 (``Dinov2Model``; position embeddings of a larger ``image_size`` interpolated bicubically to the input, as
  a 518-px checkpoint run at 224), DINOv2 with registers, DINOv3 ViT (RoPE), Depth Anything (DINOv2 backbone, DPT
  head), ZoeDepth (BEiT backbone, metric bins), Depth Pro is left out (two ViTs + fusion: cost);
- SAM: the vision encoder alone (windowed + global attention, relative positions), and the prompt encoder + mask
  decoder as SAM's ONNX exports split them (image embeddings, point coordinates and labels in; IoU scores and
  low-res masks out); SAM2: the Hiera-det image encoder with its FPN neck;
- OWL-ViT / OWLv2 (image + text ids, no NMS: logits, boxes, objectness for v2), SigLIP vision tower, SigLIP2 vision
  tower (NaFlex patches: ``pixel_values`` [1, N, 3*p*p], ``pixel_attention_mask``, ``spatial_shapes``), Hiera,
  ViTMAE encoder (mask ratio 0, fixed noise), Data2Vec-Vision, PVTv2 (HF), MaskFormer (Swin), Mask2Former
  (Swin, multi-scale deformable attention: GridSample), UperNet (ConvNeXt), EoMT.

Inputs mixing dtypes (OWL: pixels + ids + mask, SAM's decoder, SigLIP2) are stored beside the model as
``"arrays"`` data (photo crops in the image inputs).

    python benchmarks/zoo/probe_vision_hf.py [--only a,b]          # -> benchmarks/.zoo/probe14v/ + zoo.json
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe14v/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
import zoo_data  # noqa: E402
from exported_as_users_do import _hf_transformers  # noqa: E402
from probe_transformers2 import spread  # noqa: E402

t = _hf_transformers()
OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe14v"
SEED = 14400
SAMPLES = 48  # stored rows of an "arrays" model: zoo.py's default --calib 32 + --eval 16
VOCAB = 1000
SEQ = 16
IMG = dict(zoo_data.IMAGENET_DATA)
#: CLIP / OWL / SigLIP normalisation
CLIP_DATA = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": [0.4815, 0.4578, 0.4082],
             "std": [0.2686, 0.2613, 0.2758]}  # fmt: skip
HALF_DATA = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": [0.5] * 3, "std": [0.5] * 3}
PIX_DYN = {"pixel_values": {0: "batch_size", 2: "height", 3: "width"}}


@dataclass(frozen=True)
class Probe:
    name: str
    family: str
    kind: str
    opset: int
    build: Callable[[], nn.Module]
    inputs: list[tuple[str, list[int], str]]  # name, shape, dtype
    outputs: list[str]
    data: dict[str, Any] = field(default_factory=lambda: dict(IMG))
    #: "" (the data kind makes the inputs) or a function (count, seed, photos) -> arrays stored beside the model
    arrays: Callable[[int, int, Any], dict[str, np.ndarray]] | None = None
    dynamic_axes: dict[str, dict[int, str]] | None = None
    note: str = ""
    #: torch.onnx.export arguments over the defaults (``dynamo=True``)
    export_kwargs: dict[str, Any] = field(default_factory=dict)


class Wrap(nn.Module):
    """Calls the model with keyword inputs (and fixed keyword ``extra``) and returns the named outputs."""

    def __init__(self, m: nn.Module, names: list[str], outs: list[str], **extra: Any) -> None:
        super().__init__()
        self.m, self.names, self.outs, self.extra = m, names, outs, extra

    def forward(self, *xs):
        r = self.m(**dict(zip(self.names, xs, strict=True)), **self.extra)
        got = tuple(r[o] if not isinstance(o, int) else r[o] for o in self.outs)
        return got if len(got) > 1 else got[0]


def eager(config):
    for c in [
        config,
        *(getattr(config, k, None) for k in ("vision_config", "text_config", "backbone_config")),
    ]:
        if c is not None and hasattr(c, "_attn_implementation"):
            c._attn_implementation = "eager"
    return config


def hf(cls_name: str, config, names: list[str], outs: list[str], part: str = "", **extra):
    def build() -> nn.Module:
        m = getattr(t, cls_name)(eager(config()))
        if part:
            m = getattr(m, part)
        spread(m, SEED)
        return Wrap(m, names, outs, **extra)

    return build


def pix(size: int | tuple[int, int], name: str = "pixel_values") -> list[tuple[str, list[int], str]]:
    h, w = (size, size) if isinstance(size, int) else size
    return [(name, [1, 3, h, w], "float32")]


# ------------------------------------------------------------------------------------------------ configs

DINO = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, mlp_ratio=2, image_size=96, patch_size=8,
            layerscale_value=0.5)  # fmt: skip


def dinov2_cfg(**kw):
    return lambda: t.Dinov2Config(**DINO, **kw)


def dinov2_reg_cfg():
    return t.Dinov2WithRegistersConfig(**DINO, num_register_tokens=4)


def dinov3_cfg():
    return t.DINOv3ViTConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
                             image_size=64, patch_size=8, num_register_tokens=4, layerscale_value=0.5)  # fmt: skip


def depth_anything_cfg():
    bb = t.Dinov2Config(
        **DINO, out_features=["stage1", "stage2", "stage3", "stage4"], reshape_hidden_states=False
    )
    return t.DepthAnythingConfig(backbone_config=bb, patch_size=8, reassemble_hidden_size=64,
                                 neck_hidden_sizes=[16, 32, 48, 64], fusion_hidden_size=32, head_hidden_size=16)  # fmt: skip


def zoedepth_cfg():
    bb = t.BeitConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
                      image_size=64, patch_size=8, use_relative_position_bias=True, add_fpn=False,
                      out_features=["stage1", "stage2", "stage3", "stage4"], reshape_hidden_states=False)  # fmt: skip
    return t.ZoeDepthConfig(backbone_config=bb, neck_hidden_sizes=[16, 32, 48, 64], fusion_hidden_size=32,
                            reassemble_hidden_size=64, num_relative_features=16, bottleneck_features=32,
                            bin_centers_type="softplus", bin_configurations=[{"n_bins": 16, "min_depth": 1e-3,
                                                                              "max_depth": 10.0}],
                            num_attractors=[4, 2, 1, 1], bin_embedding_dim=32, patch_transformer_hidden_size=32,
                            patch_transformer_intermediate_size=64, patch_transformer_num_attention_heads=2)  # fmt: skip


SAM_V = dict(hidden_size=64, output_channels=32, num_pos_feats=16, num_hidden_layers=4, num_attention_heads=4, image_size=128,
             patch_size=16, window_size=4, global_attn_indexes=[1, 3], mlp_dim=128)  # fmt: skip


def sam_cfg():
    return t.SamConfig(
        vision_config=t.SamVisionConfig(**SAM_V),
        prompt_encoder_config=t.SamPromptEncoderConfig(hidden_size=32, image_size=128, patch_size=16,
                                                       mask_input_channels=8),
        mask_decoder_config=t.SamMaskDecoderConfig(hidden_size=32, mlp_dim=64, num_attention_heads=4,
                                                   iou_head_hidden_dim=32),
    )  # fmt: skip


def sam2_cfg():
    return t.Sam2Config(
        vision_config=t.Sam2VisionConfig(
            backbone_config=t.Sam2HieraDetConfig(hidden_size=16, num_attention_heads=1, image_size=[128, 128],
                                                  blocks_per_stage=[1, 1, 2, 1], embed_dim_per_stage=[16, 32, 64, 128],
                                                  num_attention_heads_per_stage=[1, 2, 4, 8],
                                                  window_size_per_stage=[8, 4, 4, 2],
                                                  global_attention_blocks=[3],
                                                  window_positional_embedding_background_size=[4, 4]),
            backbone_channel_list=[128, 64, 32, 16], backbone_feature_sizes=[[32, 32], [16, 16], [8, 8]],
            fpn_hidden_size=32),
        prompt_encoder_config=t.Sam2PromptEncoderConfig(hidden_size=32, image_size=128, patch_size=16,
                                                        mask_input_channels=8),
        mask_decoder_config=t.Sam2MaskDecoderConfig(hidden_size=32, mlp_dim=64, num_attention_heads=4,
                                                    iou_head_hidden_dim=32),
    )  # fmt: skip


OWL_T = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=SEQ)  # fmt: skip
OWL_V = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, image_size=64,
             patch_size=8)  # fmt: skip


def owlvit_cfg():
    return t.OwlViTConfig(text_config=OWL_T, vision_config=OWL_V, projection_dim=32)


def owlv2_cfg():
    return t.Owlv2Config(text_config=OWL_T, vision_config=OWL_V, projection_dim=32)


def siglip_cfg():
    return t.SiglipVisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                image_size=64, patch_size=8)  # fmt: skip


def siglip2_cfg():
    return t.Siglip2VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 patch_size=8, num_patches=64)  # fmt: skip


def hiera_cfg():
    return t.HieraConfig(embed_dim=16, image_size=[64, 64], patch_size=[7, 7], patch_stride=[4, 4],
                         patch_padding=[3, 3], depths=[1, 1, 2, 1], num_heads=[1, 2, 4, 8], num_labels=10,
                         masked_unit_size=[8, 8], query_stride=[2, 2])  # fmt: skip


def vitmae_cfg():
    return t.ViTMAEConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                          image_size=64, patch_size=8, mask_ratio=0.0)  # fmt: skip


def data2vec_cfg():
    return t.Data2VecVisionConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                  image_size=64, patch_size=8, use_relative_position_bias=True,
                                  use_mean_pooling=True, layer_scale_init_value=0.1, num_labels=10)  # fmt: skip


def pvt_cfg():
    return t.PvtV2Config(image_size=64, hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1],
                         num_attention_heads=[1, 2, 2, 4], num_labels=10)  # fmt: skip


def swin_bb():
    return t.SwinConfig(image_size=64, patch_size=4, embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 2, 2, 4],
                        window_size=4, out_features=["stage1", "stage2", "stage3", "stage4"])  # fmt: skip


def maskformer_cfg():
    return t.MaskFormerConfig(backbone_config=swin_bb(), fpn_feature_size=32, mask_feature_size=32,
                              decoder_config=t.DetrConfig(d_model=32, encoder_layers=0, decoder_layers=2,
                                                          decoder_attention_heads=4, decoder_ffn_dim=64,
                                                          num_queries=10),
                              num_queries=10, num_labels=8)  # fmt: skip


def mask2former_cfg():
    return t.Mask2FormerConfig(backbone_config=swin_bb(), feature_size=32, mask_feature_size=32, hidden_dim=32,
                               encoder_feedforward_dim=64, encoder_layers=2, decoder_layers=3, num_attention_heads=4,
                               dim_feedforward=64, num_queries=10, num_labels=8, common_stride=4)  # fmt: skip


def upernet_cfg():
    bb = t.ConvNextConfig(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1],
                          out_features=["stage1", "stage2", "stage3", "stage4"])  # fmt: skip
    return t.UperNetConfig(backbone_config=bb, hidden_size=32, auxiliary_in_channels=48, auxiliary_channels=16,
                           num_labels=8)  # fmt: skip


def eomt_cfg():
    return t.EomtConfig(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
                        image_size=64, patch_size=8, num_queries=10, num_blocks=2, num_labels=8,
                        num_register_tokens=4)  # fmt: skip


# ------------------------------------------------------------------------------------------------ stored inputs


def photo_pixels(data: dict, shape: list[int], count: int, seed: int, photos) -> np.ndarray:
    return zoo_data.make_arrays({"name": "x", "data": data, "inputs": [{"name": "p", "shape": shape}]}, count, seed,
                                photos)["p"]  # fmt: skip


def text_ids(count: int, seed: int) -> dict[str, np.ndarray]:
    data = {"type": "tokens", "vocab_size": VOCAB, "roles": {"input_ids": "ids", "attention_mask": "mask"}}
    specs = [{"name": n, "shape": [1, SEQ], "dtype": "int64"} for n in ("input_ids", "attention_mask")]
    return zoo_data.token_arrays(data, specs, count, seed)


def owl_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    return {
        "pixel_values": photo_pixels(CLIP_DATA, [1, 3, 64, 64], count, seed, photos),
        **text_ids(count, seed),
    }


def sam_embedding_rows(count: int, seed: int, photos, encoder: nn.Module) -> np.ndarray:
    x = torch.from_numpy(photo_pixels(IMG, [1, 3, 128, 128], count, seed, photos))
    with torch.no_grad():
        return np.concatenate([encoder(x[i : i + 1]).numpy() for i in range(count)])


def sam_prompt_arrays(count: int, seed: int, encoder: nn.Module, photos) -> dict[str, np.ndarray]:
    """Image embeddings of photos by the seeded encoder, 2 points per prompt (a positive and a negative click)
    in the 128-px input frame, labels 1 / 0 (int64, as transformers' processor gives them)."""
    rng = np.random.default_rng(seed)
    emb = sam_embedding_rows(count, seed, photos, encoder)
    pts = rng.uniform(8, 120, (count, 1, 2, 2)).astype(np.float32)
    labels = np.tile(np.array([[[1, 0]]], np.int64), (count, 1, 1))
    return {"image_embeddings": emb, "input_points": pts, "input_labels": labels}


def siglip2_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    """NaFlex inputs as Siglip2ImageProcessor makes them for a 64x64 crop at patch 8: 64 patches of 3*8*8."""
    img = photo_pixels(HALF_DATA, [1, 3, 64, 64], count, seed, photos)  # [N, 3, 64, 64]
    p = img.reshape(count, 3, 8, 8, 8, 8).transpose(0, 2, 4, 3, 5, 1).reshape(count, 64, 192)
    return {"pixel_values": np.ascontiguousarray(p, np.float32), "pixel_attention_mask": np.ones((count, 64), np.int64),
            "spatial_shapes": np.tile(np.array([[8, 8]], np.int64), (count, 1))}  # fmt: skip


# ------------------------------------------------------------------------------------------------ the probes


class SamPrompt(nn.Module):
    """SAM's prompt encoder + mask decoder as SAM's ONNX exports split it: image embeddings + points + labels (or
    a box) in, IoU scores and the low-resolution masks out (one mask: multimask_output=False). SAM2's decoder
    also takes the encoder's two high-resolution feature maps (``embeddings`` 3: SAM2's split)."""

    def __init__(self, sam: nn.Module, embeddings: int = 1, box: bool = False) -> None:
        super().__init__()
        self.sam, self.embeddings, self.box = sam, embeddings, box

    def forward(self, *xs):
        emb = xs[0] if self.embeddings == 1 else list(xs[: self.embeddings])
        rest = xs[self.embeddings :]
        prompt = {"input_boxes": rest[0]} if self.box else {"input_points": rest[0], "input_labels": rest[1]}
        r = self.sam(image_embeddings=emb, multimask_output=False, **prompt)
        return r.iou_scores, r.pred_masks


_SAM: dict[str, nn.Module] = {}


def sam_model(kind: str) -> nn.Module:
    if kind not in _SAM:
        torch.manual_seed(SEED)
        m = (t.SamModel if kind == "sam" else t.Sam2Model)(eager((sam_cfg if kind == "sam" else sam2_cfg)()))
        spread(m, SEED)
        _SAM[kind] = m.eval()
    return _SAM[kind]


class SamEncoder(nn.Module):
    def __init__(self, sam: nn.Module) -> None:
        super().__init__()
        self.sam = sam

    def forward(self, pixel_values):
        e = self.sam.get_image_embeddings(pixel_values)
        return tuple(e) if isinstance(e, list) else e


def sam_prompt(count, seed, photos):
    return sam_prompt_arrays(count, seed, SamEncoder(sam_model("sam")), photos)


def sam_box(count, seed, photos):
    a = sam_prompt(count, seed, photos)
    lo = np.sort(np.random.default_rng(seed + 1).uniform(4, 124, (count, 1, 2, 2)), axis=2)
    return {
        "image_embeddings": a["image_embeddings"],
        "input_boxes": lo.reshape(count, 1, 4).astype(np.float32),
    }


def sam2_prompt(count, seed, photos):
    """SAM2's decoder inputs: the seeded encoder's three maps of photos, two clicks as for SAM."""
    enc = SamEncoder(sam_model("sam2"))
    x = torch.from_numpy(photo_pixels(IMG, [1, 3, 128, 128], count, seed, photos))
    with torch.no_grad():
        rows = [enc(x[i : i + 1]) for i in range(count)]
    maps = {n: np.concatenate([r[k].numpy() for r in rows]) for k, n in enumerate(SAM2_MAPS)}
    rng = np.random.default_rng(seed)
    pts = rng.uniform(8, 120, (count, 1, 2, 2)).astype(np.float32)
    labels = np.tile(np.array([[[1, 0]]], np.int64), (count, 1, 1))
    return maps | {"input_points": pts, "input_labels": labels}


SAM2_MAPS = ["high_res_feats_0", "high_res_feats_1", "image_embed"]


def probes() -> list[Probe]:
    lhs = ["last_hidden_state"]
    pooled = ["last_hidden_state", "pooler_output"]
    return [
        Probe("v_dinov2", "DINOv2 (pos. embeddings interpolated 12x12 -> 8x8)", "encoder", 17,
              hf("Dinov2Model", dinov2_cfg(), ["pixel_values"], pooled), pix(64), pooled),
        Probe("v_dinov2_dyn", "DINOv2, optimum's dynamic axes", "encoder", 17,
              hf("Dinov2Model", dinov2_cfg(), ["pixel_values"], pooled), pix(64), pooled, dynamic_axes=PIX_DYN),
        Probe("v_dinov2_swiglu", "DINOv2 giant-style (SwiGLU FFN)", "encoder", 17,
              hf("Dinov2Model", dinov2_cfg(use_swiglu_ffn=True), ["pixel_values"], pooled), pix(64), pooled),
        Probe("v_dinov2_reg", "DINOv2 with registers, dynamo=True (antialiased bicubic Resize-18)", "encoder", 18,
              hf("Dinov2WithRegistersModel", dinov2_reg_cfg, ["pixel_values"], pooled), pix(64), pooled,
              note="dynamo: the legacy exporter refuses the antialiased bicubic interpolation (aten::_upsample_bicubic2d_aa)",
              export_kwargs={"dynamo": True, "external_data": False}),
        Probe("v_dinov3", "DINOv3 ViT (RoPE, registers)", "encoder", 17,
              hf("DINOv3ViTModel", dinov3_cfg, ["pixel_values"], pooled), pix(64), pooled),
        Probe("v_depth_anything", "Depth Anything (DINOv2 + DPT head)", "segmenter", 17,
              hf("DepthAnythingForDepthEstimation", depth_anything_cfg, ["pixel_values"], ["predicted_depth"]),
              pix(64), ["predicted_depth"]),
        Probe("v_depth_anything_dyn", "Depth Anything, dynamic batch/H/W", "segmenter", 17,
              hf("DepthAnythingForDepthEstimation", depth_anything_cfg, ["pixel_values"], ["predicted_depth"]),
              pix(64), ["predicted_depth"], dynamic_axes=PIX_DYN),
        Probe("v_zoedepth", "ZoeDepth (BEiT backbone, metric bins, attractors)", "segmenter", 17,
              hf("ZoeDepthForDepthEstimation", zoedepth_cfg, ["pixel_values"], ["predicted_depth"]),
              pix(64), ["predicted_depth"]),
        Probe("v_sam_vision", "SAM vision encoder (windowed + global attention, rel. positions)", "encoder", 17,
              lambda: SamEncoder(sam_model("sam")), pix(128), ["image_embeddings"]),
        Probe("v_sam_prompt", "SAM prompt encoder + mask decoder (points, labels)", "segmenter", 17,
              lambda: SamPrompt(sam_model("sam")),
              [("image_embeddings", [1, 32, 8, 8], "float32"), ("input_points", [1, 1, 2, 2], "float32"),
               ("input_labels", [1, 1, 2], "int64")], ["iou_scores", "pred_masks"],
              {"type": "arrays", "file": "v_sam_prompt.samples.npz"}, arrays=sam_prompt),
        Probe("v_sam_box", "SAM prompt encoder + mask decoder (a box)", "segmenter", 17,
              lambda: SamPrompt(sam_model("sam"), box=True),
              [("image_embeddings", [1, 32, 8, 8], "float32"), ("input_boxes", [1, 1, 4], "float32")],
              ["iou_scores", "pred_masks"], {"type": "arrays", "file": "v_sam_box.samples.npz"}, arrays=sam_box),
        Probe("v_sam2_vision", "SAM2 image encoder (Hiera-det + FPN neck)", "encoder", 17,
              lambda: SamEncoder(sam_model("sam2")), pix(128), SAM2_MAPS),
        Probe("v_sam2_prompt", "SAM2 prompt encoder + mask decoder (high-res features, points, labels)",
              "segmenter", 17, lambda: SamPrompt(sam_model("sam2"), embeddings=3),
              [("high_res_feats_0", [1, 8, 32, 32], "float32"), ("high_res_feats_1", [1, 16, 16, 16], "float32"),
               ("image_embed", [1, 32, 8, 8], "float32"), ("input_points", [1, 1, 2, 2], "float32"),
               ("input_labels", [1, 1, 2], "int64")], ["iou_scores", "pred_masks"],
              {"type": "arrays", "file": "v_sam2_prompt.samples.npz"}, arrays=sam2_prompt),
        Probe("v_owlvit", "OWL-ViT (image + text ids, no NMS)", "detector", 17,
              hf("OwlViTForObjectDetection", owlvit_cfg, ["pixel_values", "input_ids", "attention_mask"],
                 ["logits", "pred_boxes"]),
              [("pixel_values", [1, 3, 64, 64], "float32"), ("input_ids", [1, SEQ], "int64"),
               ("attention_mask", [1, SEQ], "int64")], ["logits", "pred_boxes"],
              {"type": "arrays", "file": "v_owlvit.samples.npz"}, arrays=owl_arrays),
        Probe("v_owlv2", "OWLv2 (objectness head)", "detector", 17,
              hf("Owlv2ForObjectDetection", owlv2_cfg, ["pixel_values", "input_ids", "attention_mask"],
                 ["logits", "pred_boxes", "objectness_logits"]),
              [("pixel_values", [1, 3, 64, 64], "float32"), ("input_ids", [1, SEQ], "int64"),
               ("attention_mask", [1, SEQ], "int64")], ["logits", "pred_boxes", "objectness_logits"],
              {"type": "arrays", "file": "v_owlv2.samples.npz"}, arrays=owl_arrays),
        Probe("v_siglip_vision", "SigLIP vision tower (attention-pooling head)", "encoder", 17,
              hf("SiglipVisionModel", siglip_cfg, ["pixel_values"], pooled), pix(64), pooled, dict(HALF_DATA)),
        Probe("v_siglip2_vision", "SigLIP2 NaFlex vision tower", "encoder", 17,
              hf("Siglip2VisionModel", siglip2_cfg, ["pixel_values", "pixel_attention_mask", "spatial_shapes"],
                 pooled),
              [("pixel_values", [1, 64, 192], "float32"), ("pixel_attention_mask", [1, 64], "int64"),
               ("spatial_shapes", [1, 2], "int64")], pooled,
              {"type": "arrays", "file": "v_siglip2_vision.samples.npz"}, arrays=siglip2_arrays),
        Probe("v_hiera", "Hiera (mask units, unroll / reroll)", "classifier", 17,
              hf("HieraForImageClassification", hiera_cfg, ["pixel_values"], ["logits"]), pix(64), ["logits"]),
        Probe("v_vitmae", "ViTMAE encoder (mask ratio 0, fixed noise)", "encoder", 17,
              hf("ViTMAEModel", vitmae_cfg, ["pixel_values"], lhs, noise=torch.arange(64.0)[None] / 64),
              pix(64), lhs),
        Probe("v_data2vec_vision", "Data2Vec-Vision (BEiT-style rel. position bias)", "classifier", 17,
              hf("Data2VecVisionForImageClassification", data2vec_cfg, ["pixel_values"], ["logits"]),
              pix(64), ["logits"]),
        Probe("v_pvt_v2", "PVTv2 (HF)", "classifier", 17,
              hf("PvtV2ForImageClassification", pvt_cfg, ["pixel_values"], ["logits"]), pix(64), ["logits"]),
        Probe("v_maskformer", "MaskFormer (Swin backbone)", "segmenter", 17,
              hf("MaskFormerForInstanceSegmentation", maskformer_cfg, ["pixel_values"],
                 ["class_queries_logits", "masks_queries_logits"]),
              pix(64), ["class_queries_logits", "masks_queries_logits"]),
        Probe("v_mask2former", "Mask2Former (Swin backbone, multi-scale deformable attention)", "segmenter", 17,
              hf("Mask2FormerForUniversalSegmentation", mask2former_cfg, ["pixel_values"],
                 ["class_queries_logits", "masks_queries_logits"]),
              pix(64), ["class_queries_logits", "masks_queries_logits"]),
        Probe("v_upernet", "UperNet (ConvNeXt backbone)", "segmenter", 17,
              hf("UperNetForSemanticSegmentation", upernet_cfg, ["pixel_values"], ["logits"]), pix(192), ["logits"],
              note="192 px: the PPM's adaptive pools 1/2/3/6 need a stage-4 map they divide (6x6)"),
        Probe("v_eomt", "EoMT (encoder-only mask transformer)", "segmenter", 17,
              hf("EomtForUniversalSegmentation", eomt_cfg, ["pixel_values"],
                 ["class_queries_logits", "masks_queries_logits"]),
              pix(64), ["class_queries_logits", "masks_queries_logits"]),
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------------ build


def build(p: Probe, out_dir: Path, photos, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = p.build().eval()
    spec = export.Spec(p.name, p.family, p.kind, p.opset, lambda full: model, lambda full: [(n, s) for n, s, _ in p.inputs],
                       p.outputs, data=p.data)  # fmt: skip
    n_bn = export.set_bn_statistics(model, spec, False, photos, 8) if p.arrays is None else 0
    model.eval()
    inputs = [{"name": n, "shape": s, "dtype": d} for n, s, d in p.inputs]
    if p.arrays is not None:
        stored = p.arrays(SAMPLES, seed, photos)
        np.savez(out_dir / p.data["file"], **stored)
        example = tuple(torch.from_numpy(stored[i["name"]][:1]) for i in inputs)
    else:
        arrays = zoo_data.make_arrays({"name": p.name, "data": p.data, "inputs": inputs}, 1, 7, photos)
        example = tuple(torch.from_numpy(arrays[i["name"]]) for i in inputs)
    path = out_dir / f"{p.name}.onnx"
    dyn = None
    if p.dynamic_axes:
        dyn = dict(p.dynamic_axes) | {o: {0: "batch_size"} for o in p.outputs}
    kw: dict[str, Any] = {"dynamo": False, "do_constant_folding": True, "dynamic_axes": dyn} | p.export_kwargs
    if kw["dynamo"]:
        kw.pop("do_constant_folding"), kw.pop("dynamic_axes")
    with torch.no_grad():
        torch.onnx.export(model, example, str(path), input_names=[i["name"] for i in inputs], output_names=p.outputs,
                          opset_version=p.opset, **kw)  # fmt: skip
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    e = {"name": p.name, "file": path.name, "family": p.family, "kind": p.kind, "opset": p.opset, "inputs": inputs,
         "outputs": [o.name for o in proto.graph.output], "data": p.data, "size": "reduced",
         "params": int(sum(q.numel() for q in model.parameters())), "batchnorm_layers_set": n_bn,
         "ops": sorted({n.op_type for n in proto.graph.node}), "note": p.note, "seed": seed}  # fmt: skip
    if any(d.dim_param or d.dim_value <= 0 for i in proto.graph.input for d in i.type.tensor_type.shape.dim):
        e["extra_args"] = [
            a for i in inputs for a in ("--input-shape", f"{i['name']}={','.join(map(str, i['shape']))}")
        ]
    return e


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
