"""Issue 12 probe round 15m: document, OCR-transformer and multimodal models of Hugging Face transformers, and
the text encoders not probed before (``--out benchmarks/.zoo/probe15m``, not committed).

Small seeded configs (no download; LayerNorm affine parameters given spread; BatchNorm statistics from the
photos where the inputs are photos), ``torch.onnx.export(dynamo=False)`` at opset 17 as users do:

- TrOCR (``VisionEncoderDecoderModel``: ViT encoder + ``TrOCRForCausalLM``) as optimum splits it: the image
  encoder, the decoder step without past (``input_ids`` + ``encoder_hidden_states``) and with past key values
  (one new token, self-attention and cross-attention keys / values of every layer in, the self-attention's
  ``present`` out);
- Donut (``DonutSwinModel``), Pix2Struct's vision encoder (flattened patches with row / column ids), LayoutLMv3
  (``input_ids`` + ``bbox`` + ``pixel_values`` + ``attention_mask``), LiLT and Bros (ids + boxes), MarkupLM
  (ids + xpath tags / subscripts);
- BLIP vision, BLIP-2's vision encoder + Q-Former (query tokens' features), InstructBLIP vision, GIT (image + ids
  -> next-token logits), Idefics3's vision transformer, ALIGN (EfficientNet vision, BERT text), AltCLIP (XLM-R
  text + CLIP vision, logits), CLAP (HTSAT audio on a mel spectrogram, RoBERTa text), X-CLIP (8-frame video +
  text, logits);
- Funnel (pooling of the sequence), ConvBERT (span-based dynamic convolution), NomicBERT (rotary, SwiGLU).

Inputs mixing dtypes or made by an upstream model are stored beside the model as ``"arrays"`` data.

    python benchmarks/zoo/probe_multimodal.py [--only a,b]          # -> benchmarks/.zoo/probe15m/ + zoo.json
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe15m/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
import zoo_data  # noqa: E402
from probe_transformers2 import spread  # noqa: E402
from probe_vision_hf import (  # noqa: E402
    CLIP_DATA,
    HALF_DATA,
    SAMPLES,
    Probe,
    Wrap,
    build,
    eager,
    photo_pixels,
    pix,
    t,
)

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe15m"
SEED = 15500
VOCAB = 1000
SEQ = 16
ROLES = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "type_ids"}
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
VIT = dict(SMALL, image_size=64, patch_size=8)


def tok_data(names: list[str]) -> dict:
    return {"type": "tokens", "vocab_size": VOCAB, "roles": {n: ROLES[n] for n in names}}


def toks(names: list[str], seq: int = SEQ) -> list[tuple[str, list[int], str]]:
    return [(n, [1, seq], "int64") for n in names]


def hf(cls_name: str, config, names: list[str], outs: list[str], part: str = "", **extra):
    def build_() -> nn.Module:
        m = getattr(t, cls_name)(eager(config()))
        if part:
            m = getattr(m, part)
        spread(m, SEED)
        return Wrap(m, names, outs, **extra)

    return build_


def text_ids(count: int, seed: int, seq: int = SEQ) -> dict[str, np.ndarray]:
    data = tok_data(["input_ids", "attention_mask"])
    specs = [{"name": n, "shape": [1, seq], "dtype": "int64"} for n in ("input_ids", "attention_mask")]
    return zoo_data.token_arrays(data, specs, count, seed)


def boxes(count: int, seed: int, seq: int = SEQ, coords: int = 4, scale: int = 1000) -> np.ndarray:
    """Word boxes on a 0..scale page, left-to-right, top-to-bottom lines (x0, y0, x1, y1 per token; Bros' 8
    coordinates are the four corners, normalised to [0, 1])."""
    rng = np.random.default_rng(seed)
    x0 = rng.uniform(0, 0.8, (count, 1, seq))
    y0 = np.sort(rng.uniform(0, 0.9, (count, 1, seq)), axis=-1)
    w, h = rng.uniform(0.02, 0.2, (count, 1, seq)), rng.uniform(0.01, 0.05, (count, 1, seq))
    x1, y1 = np.minimum(x0 + w, 1.0), np.minimum(y0 + h, 1.0)
    if coords == 8:
        b = np.stack([x0, y0, x1, y0, x1, y1, x0, y1], -1).astype(np.float32)
    else:
        b = np.round(np.stack([x0, y0, x1, y1], -1) * scale).astype(np.int64)
    return b


# ------------------------------------------------------------------------------------------------ configs

TROCR_DEC = dict(vocab_size=VOCAB, d_model=64, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=128,
                 max_position_embeddings=64, cross_attention_hidden_size=64, use_learned_position_embeddings=True,
                 layernorm_embedding=True, scale_embedding=False)  # fmt: skip
TOKENS_BEFORE = 7  # tokens the decoder has seen when the "with past" step runs


def trocr_cfg():
    enc = t.ViTConfig(**VIT)
    dec = t.TrOCRConfig(**TROCR_DEC)
    return t.VisionEncoderDecoderConfig.from_encoder_decoder_configs(enc, dec)


_TROCR: list[nn.Module] = []


def trocr() -> nn.Module:
    if not _TROCR:
        torch.manual_seed(SEED)
        m = t.VisionEncoderDecoderModel(config=eager(trocr_cfg()))
        m.config.decoder._attn_implementation = "eager"
        m.decoder.config._attn_implementation = "eager"
        spread(m, SEED)
        _TROCR.append(m.eval())
    return _TROCR[0]


class TrocrEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = trocr().encoder

    def forward(self, pixel_values):
        return self.m(pixel_values=pixel_values).last_hidden_state


class TrocrDecoder(nn.Module):
    """optimum's decoder_model.onnx: all ids so far + the encoder states -> logits."""

    def __init__(self) -> None:
        super().__init__()
        self.m = trocr().decoder

    def forward(self, input_ids, encoder_hidden_states):
        return self.m(
            input_ids=input_ids, encoder_hidden_states=encoder_hidden_states, use_cache=False
        ).logits


def _cache(kv: list[torch.Tensor], layers: int):
    self_c, cross_c = t.DynamicCache(), t.DynamicCache()
    for i in range(layers):
        self_c.update(kv[4 * i], kv[4 * i + 1], i)
        cross_c.update(kv[4 * i + 2], kv[4 * i + 3], i)
    return t.EncoderDecoderCache(self_c, cross_c)


class TrocrDecoderPast(nn.Module):
    """optimum's decoder_with_past_model.onnx: one new token, the encoder states (unused: cross keys / values come
    from the past) and per layer past self key / value and cross key / value -> logits and the present self key /
    value of every layer."""

    def __init__(self) -> None:
        super().__init__()
        self.m = trocr().decoder
        self.layers = self.m.config.decoder_layers

    def forward(self, input_ids, *kv):
        cache = _cache(list(kv), self.layers)
        for i in range(self.layers):
            cache.is_updated[i] = True  # the cross keys / values come from the past, not from the states
        # a placeholder for the encoder states: with the cross cache updated only its presence counts (unread)
        states = kv[2].new_zeros(kv[2].shape[0], kv[2].shape[2], self.m.config.d_model)
        r = self.m(input_ids=input_ids, encoder_hidden_states=states, past_key_values=cache, use_cache=True)
        present = r.past_key_values.self_attention_cache
        out = [r.logits]
        for i in range(self.layers):
            out += [present.layers[i].keys, present.layers[i].values]
        return tuple(out)


def trocr_states(count: int, seed: int, photos) -> np.ndarray:
    x = torch.from_numpy(photo_pixels(HALF_DATA, [1, 3, 64, 64], count, seed, photos))
    enc = TrocrEncoder().eval()
    with torch.no_grad():
        return np.concatenate([enc(x[i : i + 1]).numpy() for i in range(count)])


def trocr_decoder_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    ids = text_ids(count, seed, 8)["input_ids"]
    return {"input_ids": ids, "encoder_hidden_states": trocr_states(count, seed, photos)}


def trocr_past_names() -> list[str]:
    return [f"past_key_values.{i}.{k}" for i in range(2) for k in ("decoder.key", "decoder.value", "encoder.key", "encoder.value")]  # fmt: skip


def trocr_past_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    """The past of TOKENS_BEFORE real decoding steps: the decoder run on the first ids with the photo's encoder
    states; the new token is the next id."""
    states = torch.from_numpy(trocr_states(count, seed, photos))
    ids = torch.from_numpy(text_ids(count, seed, TOKENS_BEFORE + 1)["input_ids"])
    dec = trocr().decoder
    rows: dict[str, list[np.ndarray]] = {n: [] for n in ["input_ids", *trocr_past_names()]}
    with torch.no_grad():
        for i in range(count):
            r = dec(
                input_ids=ids[i : i + 1, :TOKENS_BEFORE],
                encoder_hidden_states=states[i : i + 1],
                use_cache=True,
            )
            c = r.past_key_values
            rows["input_ids"].append(ids[i : i + 1, TOKENS_BEFORE:].numpy())
            for layer in range(2):
                sl, cl = c.self_attention_cache.layers[layer], c.cross_attention_cache.layers[layer]
                for k, v in zip(("decoder.key", "decoder.value", "encoder.key", "encoder.value"),
                                (sl.keys, sl.values, cl.keys, cl.values), strict=True):  # fmt: skip
                    rows[f"past_key_values.{layer}.{k}"].append(v.numpy())
    return {k: np.concatenate(v) for k, v in rows.items()}


def donut_cfg():
    return t.DonutSwinConfig(image_size=128, patch_size=4, embed_dim=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 2, 4],
                             window_size=4)  # fmt: skip


P2S_PATCHES = 64


def pix2struct_cfg():
    return t.Pix2StructVisionConfig(hidden_size=64, patch_embed_hidden_size=192, d_ff=128, d_kv=16,
                                    num_hidden_layers=2, num_attention_heads=4, seq_len=P2S_PATCHES, patch_size=8)  # fmt: skip


def pix2struct_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    """Pix2StructImageProcessor's flattened patches of a 64x64 crop at patch 8: row id, column id (1-based), then
    the 3*8*8 patch values (per-image standardised)."""
    img = photo_pixels(HALF_DATA, [1, 3, 64, 64], count, seed, photos)
    p = img.reshape(count, 3, 8, 8, 8, 8).transpose(0, 2, 4, 3, 5, 1).reshape(count, 64, 192)
    rows, cols = np.meshgrid(np.arange(1, 9), np.arange(1, 9), indexing="ij")
    rc = np.stack([rows.ravel(), cols.ravel()], -1).astype(np.float32)
    fp = np.concatenate([np.broadcast_to(rc, (count, 64, 2)), p], -1).astype(np.float32)
    return {"flattened_patches": fp, "attention_mask": np.ones((count, 64), np.int64)}


def layoutlmv3_cfg():
    return t.LayoutLMv3Config(vocab_size=VOCAB, **SMALL, input_size=64, patch_size=8, max_2d_position_embeddings=1024,
                              coordinate_size=12, shape_size=8, max_position_embeddings=64)  # fmt: skip


def layoutlmv3_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    return text_ids(count, seed) | {"bbox": boxes(count, seed)[:, 0],
                                    "pixel_values": photo_pixels(HALF_DATA, [1, 3, 64, 64], count, seed, photos)}  # fmt: skip


def lilt_cfg():
    return t.LiltConfig(vocab_size=VOCAB, **(SMALL | {"hidden_size": 96, "intermediate_size": 192}), channel_shrink_ratio=4, max_2d_position_embeddings=1024,
                        max_position_embeddings=64)  # fmt: skip


def ids_boxes(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    a = text_ids(count, seed)
    return {
        "input_ids": a["input_ids"],
        "bbox": boxes(count, seed)[:, 0],
        "attention_mask": a["attention_mask"],
    }


def bros_cfg():
    return t.BrosConfig(vocab_size=VOCAB, **SMALL, dim_bbox=8, max_position_embeddings=64)


def bros_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    a = text_ids(count, seed)
    return {"input_ids": a["input_ids"], "bbox": boxes(count, seed, coords=8)[:, 0], "attention_mask": a["attention_mask"]}  # fmt: skip


def markuplm_cfg():
    return t.MarkupLMConfig(vocab_size=VOCAB, **SMALL, max_position_embeddings=64, max_depth=8, xpath_unit_hidden_size=16,
                            max_xpath_tag_unit_embeddings=32, max_xpath_subs_unit_embeddings=64)  # fmt: skip


def markuplm_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    """xpath tag / subscript ids per token and depth, padded with the pad ids (tag 31, subscript 0) past each
    token's depth, as MarkupLMFeatureExtractor pads them."""
    rng = np.random.default_rng(seed)
    a = text_ids(count, seed)
    depth = rng.integers(2, 8, (count, SEQ, 1))
    lvl = np.arange(8)[None, None]
    tags = np.where(lvl < depth, rng.integers(0, 31, (count, SEQ, 8)), 31).astype(np.int64)
    subs = np.where(lvl < depth, rng.integers(0, 5, (count, SEQ, 8)), 0).astype(np.int64)
    return {"input_ids": a["input_ids"], "xpath_tags_seq": tags, "xpath_subs_seq": subs,
            "attention_mask": a["attention_mask"]}  # fmt: skip


def blip_v_cfg():
    return t.BlipVisionConfig(**VIT)


def blip_cfg():
    return t.BlipConfig(text_config=dict(vocab_size=VOCAB, **SMALL, encoder_hidden_size=64, max_position_embeddings=64),
                        vision_config=dict(VIT), projection_dim=32)  # fmt: skip


def ids_pixels(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    return text_ids(count, seed) | {
        "pixel_values": photo_pixels(CLIP_DATA, [1, 3, 64, 64], count, seed, photos)
    }


def blip2_cfg():
    return t.Blip2Config(vision_config=dict(VIT, qkv_bias=True),
                         qformer_config=dict(vocab_size=VOCAB, **SMALL, encoder_hidden_size=64, cross_attention_frequency=1),
                         text_config=t.OPTConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, ffn_dim=64,
                                                 num_attention_heads=2, word_embed_proj_dim=32),
                         num_query_tokens=8)  # fmt: skip


class Blip2Qformer(nn.Module):
    """BLIP-2's image side as retrieval / captioning splits it: vision encoder -> Q-Former -> projected queries."""

    def __init__(self) -> None:
        super().__init__()
        m = t.Blip2Model(eager(blip2_cfg()))
        spread(m, SEED)
        self.vision, self.qformer, self.query_tokens, self.proj = (
            m.vision_model,
            m.qformer,
            m.query_tokens,
            m.language_projection,
        )

    def forward(self, pixel_values):
        img = self.vision(pixel_values=pixel_values).last_hidden_state
        q = self.query_tokens.expand(img.shape[0], -1, -1)
        mask = torch.ones(img.shape[:-1], dtype=torch.long)
        out = self.qformer(
            query_embeds=q, encoder_hidden_states=img, encoder_attention_mask=mask
        ).last_hidden_state
        return out, self.proj(out)


def instructblip_v_cfg():
    return t.InstructBlipVisionConfig(**VIT)


def git_cfg():
    return t.GitConfig(vision_config=dict(VIT), vocab_size=VOCAB, **SMALL, max_position_embeddings=64,
                       num_image_with_embedding=None)  # fmt: skip


def git_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    a = text_ids(count, seed, 8)
    return {
        "input_ids": a["input_ids"],
        "pixel_values": photo_pixels(CLIP_DATA, [1, 3, 64, 64], count, seed, photos),
    }


def idefics3_cfg():
    return t.Idefics3VisionConfig(**VIT)


def align_cfg():
    return t.AlignConfig(text_config=dict(vocab_size=VOCAB, **SMALL, max_position_embeddings=64),
                         vision_config=dict(image_size=64, width_coefficient=0.25, depth_coefficient=0.3,
                                            hidden_dim=128),
                         projection_dim=32)  # fmt: skip


def altclip_cfg():
    return t.AltCLIPConfig(text_config=dict(vocab_size=VOCAB, **SMALL, max_position_embeddings=66, project_dim=32,
                                            pad_token_id=1),
                           vision_config=dict(**VIT), projection_dim=32)  # fmt: skip


def clap_cfg():
    return t.ClapConfig(
        text_config=dict(vocab_size=VOCAB, **SMALL, max_position_embeddings=66, projection_dim=32),
        audio_config=dict(spec_size=128, patch_size=4, patch_stride=[4, 4], num_mel_bins=32, window_size=4,
                          hidden_size=128, patch_embeds_hidden_size=16, depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 2, 4],
                          enable_fusion=False, projection_dim=32),
        projection_dim=32)  # fmt: skip


CLAP_FRAMES = 500  # interpolated (bicubic, in the graph) to spec_size * freq_ratio = 512, as 1001 -> 1024


def clap_audio_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    """ClapFeatureExtractor's log-mel (dB) of the zoo's synthetic speech: [1, 1, frames, 32 bins]."""
    entry = {"name": "x", "data": {"type": "logmel", "sample_rate": 16000, "hop_ms": 10, "window_ms": 25},
             "inputs": [{"name": "m", "shape": [1, CLAP_FRAMES, 32]}]}  # fmt: skip
    m = zoo_data.make_arrays(entry, count, seed, photos)["m"]
    return {"input_features": (m[:, None] * 10.0 - 40.0).astype(np.float32)}


def xclip_cfg():
    return t.XCLIPConfig(text_config=dict(vocab_size=VOCAB, **SMALL, max_position_embeddings=SEQ),
                         vision_config=dict(**VIT, num_frames=4, mit_hidden_size=32, mit_intermediate_size=64,
                                            mit_num_hidden_layers=1, mit_num_attention_heads=2),
                         projection_dim=32, prompt_layers=1, prompt_attention_heads=2, prompt_num_attention_heads=2)  # fmt: skip


def xclip_arrays(count: int, seed: int, photos) -> dict[str, np.ndarray]:
    """4 frames: shifted crops of one photo (a short pan), + token ids / mask."""
    frames = [photo_pixels(CLIP_DATA, [1, 3, 64, 64], count, seed + k, photos) for k in range(4)]
    return {"input_ids": text_ids(count, seed)["input_ids"], "pixel_values": np.stack(frames, 1),
            "attention_mask": text_ids(count, seed)["attention_mask"]}  # fmt: skip


def funnel_cfg():
    return t.FunnelConfig(vocab_size=VOCAB, block_sizes=[1, 1, 1], d_model=64, n_head=4, d_head=16, d_inner=128,
                          num_decoder_layers=1)  # fmt: skip


def convbert_cfg():
    return t.ConvBertConfig(vocab_size=VOCAB, **SMALL, embedding_size=64, head_ratio=2, conv_kernel_size=5,
                            max_position_embeddings=64)  # fmt: skip


def xlmr_cfg():
    return t.XLMRobertaConfig(
        vocab_size=VOCAB, **SMALL, max_position_embeddings=514, pad_token_id=1, num_labels=1
    )


def bigbird_cfg():
    return t.BigBirdConfig(vocab_size=VOCAB, **SMALL, max_position_embeddings=256, attention_type="block_sparse",
                           block_size=8, num_random_blocks=2)  # fmt: skip


def nomic_cfg():
    return t.NomicBertConfig(vocab_size=VOCAB, **SMALL, max_position_embeddings=64)


# ------------------------------------------------------------------------------------------------ the probes


def arrays(name: str) -> dict:
    return {"type": "arrays", "file": f"{name}.samples.npz"}


def probes() -> list[Probe]:
    lhs = ["last_hidden_state"]
    pooled = ["last_hidden_state", "pooler_output"]
    ids2 = ["input_ids", "attention_mask"]
    ids3 = ["input_ids", "attention_mask", "token_type_ids"]
    kv_in = [(n, [1, 4, TOKENS_BEFORE if "decoder." in n else 65, 16], "float32") for n in trocr_past_names()]
    present = [f"present.{i}.decoder.{k}" for i in range(2) for k in ("key", "value")]
    return [
        Probe("m_trocr_encoder", "TrOCR image encoder (ViT)", "encoder", 17, TrocrEncoder, pix(64), lhs,
              dict(HALF_DATA)),
        Probe("m_trocr_decoder", "TrOCR decoder step without past (ids + encoder states)", "sequence", 17,
              TrocrDecoder, [("input_ids", [1, 8], "int64"), ("encoder_hidden_states", [1, 65, 64], "float32")],
              ["logits"], arrays("m_trocr_decoder"), arrays=trocr_decoder_arrays),
        Probe("m_trocr_decoder_past", "TrOCR decoder step with past key values (optimum's decoder_with_past)",
              "sequence", 17, TrocrDecoderPast, [("input_ids", [1, 1], "int64"), *kv_in], ["logits", *present],
              arrays("m_trocr_decoder_past"), arrays=trocr_past_arrays),
        Probe("m_donut_swin", "Donut encoder (DonutSwin)", "encoder", 17,
              hf("DonutSwinModel", donut_cfg, ["pixel_values"], pooled), pix(128), pooled, dict(HALF_DATA)),
        Probe("m_pix2struct_vision", "Pix2Struct vision encoder (flattened patches, row / column ids)", "encoder", 17,
              hf("Pix2StructVisionModel", pix2struct_cfg, ["flattened_patches", "attention_mask"], lhs),
              [("flattened_patches", [1, P2S_PATCHES, 194], "float32"), ("attention_mask", [1, P2S_PATCHES], "int64")],
              lhs, arrays("m_pix2struct_vision"), arrays=pix2struct_arrays),
        Probe("m_layoutlmv3", "LayoutLMv3 (ids + bbox + pixels + mask)", "encoder", 17,
              hf("LayoutLMv3Model", layoutlmv3_cfg, ["input_ids", "bbox", "pixel_values", "attention_mask"], lhs),
              [("input_ids", [1, SEQ], "int64"), ("bbox", [1, SEQ, 4], "int64"),
               ("pixel_values", [1, 3, 64, 64], "float32"), ("attention_mask", [1, SEQ], "int64")], lhs,
              arrays("m_layoutlmv3"), arrays=layoutlmv3_arrays),
        Probe("m_layoutlmv3_tokcls", "LayoutLMv3 token classification (FUNSD-style, 7 labels)", "sequence", 17,
              hf("LayoutLMv3ForTokenClassification", lambda: t.LayoutLMv3Config(**layoutlmv3_cfg().to_dict() | {"num_labels": 7}),
                 ["input_ids", "bbox", "pixel_values", "attention_mask"], ["logits"]),
              [("input_ids", [1, SEQ], "int64"), ("bbox", [1, SEQ, 4], "int64"),
               ("pixel_values", [1, 3, 64, 64], "float32"), ("attention_mask", [1, SEQ], "int64")], ["logits"],
              arrays("m_layoutlmv3_tokcls"), arrays=layoutlmv3_arrays),
        Probe("m_lilt", "LiLT (text + layout streams, BiACM)", "encoder", 17,
              hf("LiltModel", lilt_cfg, ["input_ids", "bbox", "attention_mask"], pooled),
              [("input_ids", [1, SEQ], "int64"), ("bbox", [1, SEQ, 4], "int64"), ("attention_mask", [1, SEQ], "int64")],
              pooled, arrays("m_lilt"), arrays=ids_boxes),
        Probe("m_bros", "Bros (ids + 8-coordinate boxes)", "encoder", 17,
              hf("BrosModel", bros_cfg, ["input_ids", "bbox", "attention_mask"], lhs),
              [("input_ids", [1, SEQ], "int64"), ("bbox", [1, SEQ, 8], "float32"), ("attention_mask", [1, SEQ], "int64")],
              lhs, arrays("m_bros"), arrays=bros_arrays),
        Probe("m_markuplm", "MarkupLM (ids + xpath tags / subscripts)", "encoder", 17,
              hf("MarkupLMModel", markuplm_cfg, ["input_ids", "xpath_tags_seq", "xpath_subs_seq", "attention_mask"], pooled),
              [("input_ids", [1, SEQ], "int64"), ("xpath_tags_seq", [1, SEQ, 8], "int64"),
               ("xpath_subs_seq", [1, SEQ, 8], "int64"), ("attention_mask", [1, SEQ], "int64")], pooled,
              arrays("m_markuplm"), arrays=markuplm_arrays),
        Probe("m_blip_vision", "BLIP vision encoder", "encoder", 17,
              hf("BlipVisionModel", blip_v_cfg, ["pixel_values"], pooled), pix(64), pooled, dict(CLIP_DATA)),
        Probe("m_blip2_qformer", "BLIP-2 vision encoder + Q-Former (8 queries) + language projection", "encoder", 17,
              Blip2Qformer, pix(64), ["query_output", "language_inputs"], dict(CLIP_DATA)),
        Probe("m_instructblip_vision", "InstructBLIP vision encoder", "encoder", 17,
              hf("InstructBlipVisionModel", instructblip_v_cfg, ["pixel_values"], pooled), pix(64), pooled,
              dict(CLIP_DATA)),
        Probe("m_git", "GIT (image tokens + ids -> next-token logits)", "sequence", 17,
              hf("GitForCausalLM", git_cfg, ["input_ids", "pixel_values"], ["logits"]),
              [("input_ids", [1, 8], "int64"), ("pixel_values", [1, 3, 64, 64], "float32")], ["logits"],
              arrays("m_git"), arrays=git_arrays),
        Probe("m_idefics3_vision", "Idefics3 / SmolVLM vision transformer", "encoder", 17,
              hf("Idefics3VisionTransformer", idefics3_cfg, ["pixel_values"], lhs), pix(64), lhs, dict(HALF_DATA)),
        Probe("m_align_vision", "ALIGN vision (EfficientNet)", "encoder", 17,
              hf("AlignVisionModel", lambda: align_cfg().vision_config, ["pixel_values"], pooled), pix(64), pooled),
        Probe("m_align_text", "ALIGN text (BERT)", "encoder", 17,
              hf("AlignTextModel", lambda: align_cfg().text_config, ids3, pooled), toks(ids3), pooled, tok_data(ids3)),
        Probe("m_altclip", "AltCLIP (XLM-R text + CLIP vision, logits)", "encoder", 17,
              hf("AltCLIPModel", altclip_cfg, ["input_ids", "pixel_values", "attention_mask"],
                 ["logits_per_image", "text_embeds", "image_embeds"]),
              [("input_ids", [1, SEQ], "int64"), ("pixel_values", [1, 3, 64, 64], "float32"),
               ("attention_mask", [1, SEQ], "int64")], ["logits_per_image", "text_embeds", "image_embeds"],
              arrays("m_altclip"), arrays=lambda c, s, p: text_ids(c, s) | {"pixel_values": photo_pixels(CLIP_DATA, [1, 3, 64, 64], c, s, p)}),
        Probe("m_clap_audio", "CLAP audio (HTSAT on a log-mel spectrogram)", "encoder", 17,
              hf("ClapAudioModelWithProjection", lambda: clap_cfg().audio_config, ["input_features"], ["audio_embeds"]),
              [("input_features", [1, 1, CLAP_FRAMES, 32], "float32")], ["audio_embeds"], arrays("m_clap_audio"),
              arrays=clap_audio_arrays),
        Probe("m_clap_text", "CLAP text (RoBERTa + projection)", "encoder", 17,
              hf("ClapTextModelWithProjection", lambda: clap_cfg().text_config, ids2, ["text_embeds"]), toks(ids2),
              ["text_embeds"], tok_data(ids2)),
        Probe("m_xclip", "X-CLIP (4-frame video + text, cross-frame / prompt layers)", "encoder", 17,
              hf("XCLIPModel", xclip_cfg, ["input_ids", "pixel_values", "attention_mask"], ["logits_per_video"]),
              [("input_ids", [1, SEQ], "int64"), ("pixel_values", [1, 4, 3, 64, 64], "float32"),
               ("attention_mask", [1, SEQ], "int64")], ["logits_per_video"], arrays("m_xclip"), arrays=xclip_arrays),
        Probe("m_funnel", "Funnel transformer (sequence pooling, relative attention)", "encoder", 17,
              hf("FunnelModel", funnel_cfg, ids3, lhs), toks(ids3), lhs, tok_data(ids3)),
        Probe("m_funnel_base", "Funnel transformer base (encoder only, pooled)", "encoder", 17,
              hf("FunnelBaseModel", funnel_cfg, ids3, lhs), toks(ids3), lhs, tok_data(ids3)),
        Probe("m_convbert", "ConvBERT (span-based dynamic convolution)", "encoder", 17,
              hf("ConvBertModel", convbert_cfg, ids3, lhs), toks(ids3), lhs, tok_data(ids3)),
        Probe("m_nomic_bert", "NomicBERT (rotary, SwiGLU)", "encoder", 17,
              hf("NomicBertModel", nomic_cfg, ids3, lhs), toks(ids3), lhs, tok_data(ids3)),
        # export variants as optimum / users write them (dynamic axes fixed by --input-shape; dynamo at 18)
        Probe("m_trocr_decoder_dyn", "TrOCR decoder step without past, optimum's dynamic axes", "sequence", 17,
              TrocrDecoder, [("input_ids", [1, 8], "int64"), ("encoder_hidden_states", [1, 65, 64], "float32")],
              ["logits"], arrays("m_trocr_decoder_dyn"), arrays=trocr_decoder_arrays,
              dynamic_axes={"input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
                            "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"}}),
        Probe("m_trocr_decoder_past_dyn", "TrOCR decoder with past, optimum's dynamic axes (past_sequence_length)",
              "sequence", 17, TrocrDecoderPast, [("input_ids", [1, 1], "int64"), *kv_in], ["logits", *present],
              arrays("m_trocr_decoder_past_dyn"), arrays=trocr_past_arrays,
              dynamic_axes={"input_ids": {0: "batch_size"},
                            **{n: {0: "batch_size", 2: "past_sequence_length" if "decoder." in n else "encoder_sequence_length"}
                               for n in trocr_past_names()}}),
        Probe("m_trocr_decoder_past_dynamo", "TrOCR decoder with past, dynamo=True", "sequence", 18,
              TrocrDecoderPast, [("input_ids", [1, 1], "int64"), *kv_in], ["logits", *present],
              arrays("m_trocr_decoder_past_dynamo"), arrays=trocr_past_arrays,
              export_kwargs={"dynamo": True, "external_data": False}),
        Probe("m_layoutlmv3_dyn", "LayoutLMv3, optimum's dynamic batch / sequence", "encoder", 17,
              hf("LayoutLMv3Model", layoutlmv3_cfg, ["input_ids", "bbox", "pixel_values", "attention_mask"], lhs),
              [("input_ids", [1, SEQ], "int64"), ("bbox", [1, SEQ, 4], "int64"),
               ("pixel_values", [1, 3, 64, 64], "float32"), ("attention_mask", [1, SEQ], "int64")], lhs,
              arrays("m_layoutlmv3_dyn"), arrays=layoutlmv3_arrays,
              dynamic_axes={"input_ids": {0: "batch_size", 1: "sequence_length"},
                            "bbox": {0: "batch_size", 1: "sequence_length"}, "pixel_values": {0: "batch_size"},
                            "attention_mask": {0: "batch_size", 1: "sequence_length"}}),
        Probe("m_layoutlmv3_dynamo", "LayoutLMv3, dynamo=True", "encoder", 18,
              hf("LayoutLMv3Model", layoutlmv3_cfg, ["input_ids", "bbox", "pixel_values", "attention_mask"], lhs),
              [("input_ids", [1, SEQ], "int64"), ("bbox", [1, SEQ, 4], "int64"),
               ("pixel_values", [1, 3, 64, 64], "float32"), ("attention_mask", [1, SEQ], "int64")], lhs,
              arrays("m_layoutlmv3_dynamo"), arrays=layoutlmv3_arrays,
              export_kwargs={"dynamo": True, "external_data": False}),
        Probe("m_blip_itm", "BLIP image-text matching (text encoder cross-attends to the image)", "classifier", 17,
              hf("BlipForImageTextRetrieval", blip_cfg, ["input_ids", "pixel_values", "attention_mask"], ["itm_score"]),
              [("input_ids", [1, SEQ], "int64"), ("pixel_values", [1, 3, 64, 64], "float32"),
               ("attention_mask", [1, SEQ], "int64")], ["itm_score"], arrays("m_blip_itm"), arrays=ids_pixels),
        Probe("m_funnel_dyn", "Funnel, optimum's dynamic batch / sequence", "encoder", 17,
              hf("FunnelModel", funnel_cfg, ids3, lhs), toks(ids3), lhs, tok_data(ids3),
              dynamic_axes={n: {0: "batch_size", 1: "sequence_length"} for n in ids3}),
        Probe("m_convbert_dyn", "ConvBERT, optimum's dynamic batch / sequence", "encoder", 17,
              hf("ConvBertModel", convbert_cfg, ids3, lhs), toks(ids3), lhs, tok_data(ids3),
              dynamic_axes={n: {0: "batch_size", 1: "sequence_length"} for n in ids3}),
        Probe("m_nomic_bert_dynamo", "NomicBERT, dynamo=True", "encoder", 18,
              hf("NomicBertModel", nomic_cfg, ids3, lhs), toks(ids3), lhs, tok_data(ids3),
              export_kwargs={"dynamo": True, "external_data": False}),
        Probe("m_git_dynamo", "GIT, dynamo=True", "sequence", 18,
              hf("GitForCausalLM", git_cfg, ["input_ids", "pixel_values"], ["logits"]),
              [("input_ids", [1, 8], "int64"), ("pixel_values", [1, 3, 64, 64], "float32")], ["logits"],
              arrays("m_git_dynamo"), arrays=git_arrays, export_kwargs={"dynamo": True, "external_data": False}),
        Probe("m_idefics3_vision_dynamo", "Idefics3 / SmolVLM vision transformer, dynamo=True", "encoder", 18,
              hf("Idefics3VisionTransformer", idefics3_cfg, ["pixel_values"], lhs), pix(64), lhs, dict(HALF_DATA),
              export_kwargs={"dynamo": True, "external_data": False}),
        Probe("m_xlmr_reranker_long", "XLM-R reranker (one logit), 256 tokens of 514 positions", "encoder", 17,
              hf("XLMRobertaForSequenceClassification", xlmr_cfg, ids2, ["logits"]), toks(ids2, 256), ["logits"],
              tok_data(ids2)),
        Probe("m_bigbird_sparse", "BigBird block-sparse attention (128 tokens, blocks of 8, 2 random)", "encoder", 17,
              hf("BigBirdModel", bigbird_cfg, ids2, lhs), toks(ids2, 128), lhs, tok_data(ids2)),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", help="comma-separated model names")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(None, export.default_shared())
    torch.set_num_threads(2)
    assert SAMPLES >= 48
    export.export_probes(probes(), lambda i, p: build(p, args.out, photos, SEED + i), args.out, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
