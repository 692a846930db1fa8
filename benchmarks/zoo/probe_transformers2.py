"""Issue 12 round 8h probe: Hugging Face transformers the earlier rounds did not cover, exported as users do.

    python benchmarks/zoo/probe_transformers2.py [--only a,b]          # -> benchmarks/.zoo/probe8h/ + zoo.json
    python benchmarks/zoo/probe_transformers2.py --optimum [--only a,b]  # optimum's main_export (its own venv)
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe8h/zoo.json --no-shared --workers 1 --json r.json

Small random configs (no download; seeded; LayerNorm affine parameters given spread; BatchNorm statistics from
the photos), exported with ``torch.onnx.export`` at opset 14/17 with optimum's dynamic batch/sequence axes (int64
``input_ids`` / ``attention_mask`` / ``token_type_ids``), a few with ``dynamo=True`` at opset 18. Text:
DistilBERT, ALBERT, ELECTRA, MobileBERT, SqueezeBERT, BART and Marian encoders, a BART decoder step (no past),
GPT-2 and a Llama-style decoder (RoPE, RMSNorm, SiLU-gated MLP, in-graph causal mask) without KV cache. Vision:
ViT, DeiT, BEiT, ConvNeXtV2, MobileViT, LeViT, PoolFormer, DETR (ResNet backbone from a random config), YOLOS,
DPT, GLPN. Audio: Whisper encoder ([1, 80, frames] log-mel), AST. ``--optimum``: ``optimum.exporters.onnx
.main_export`` on saved tiny model folders (optimum-onnx pins transformers < 4.58: run it from a venv of its
own, e.g. ``/work/venv-probe8h-optimum/bin/python``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # noqa: E402
import export  # noqa: E402
import zoo_data  # noqa: E402
from export import Spec  # noqa: E402
from exported_as_users_do import _hf_transformers  # noqa: E402

t = _hf_transformers()
OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe8h"
SEQ = 16
SEED = 88
VOCAB = 1000
IDS2 = ["input_ids", "attention_mask"]
IDS3 = ["input_ids", "attention_mask", "token_type_ids"]
ROLES = {
    "input_ids": "ids",
    "attention_mask": "mask",
    "token_type_ids": "type_ids",
    "decoder_input_ids": "ids",
    "position_ids": "positions",
}
LOGMEL = {"type": "logmel", "sample_rate": 16000, "hop_ms": 20, "window_ms": 30}
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def tok_data(names: list[str]) -> dict[str, Any]:
    return {"type": "tokens", "vocab_size": VOCAB, "roles": {n: ROLES[n] for n in names}}


def tokens(names: list[str]):
    return lambda full: [(n, [1, SEQ]) for n in names]


def image(size: int, name: str = "pixel_values"):
    return lambda full: [(name, [1, 3, size, size])]


class Wrap(nn.Module):
    """Calls the Hugging Face model with keyword inputs and returns the named outputs (as optimum's exporter)."""

    def __init__(self, m: nn.Module, names: list[str], outs: list[str]):
        super().__init__()
        self.m, self.names, self.outs = m, names, outs

    def forward(self, *xs):
        r = self.m(**dict(zip(self.names, xs, strict=True)))
        got = tuple(r[o] for o in self.outs)
        return got if len(got) > 1 else got[0]


def spread(model: nn.Module, seed: int) -> None:
    """LayerNorm / RMSNorm / NoNorm affine parameters away from 1 / 0, as a trained model's are."""
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            low = n.lower()
            if ("norm" in low or "ln" in low or "layer_norm" in low) and p.dim() == 1:
                p.copy_((1.0 if n.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g))


def hf(cls_name: str, cfg_name: str, names: list[str], outs: list[str], encoder: bool = False, **cfg):
    """A builder: ``transformers.<cls_name>(<cfg_name>(**cfg))`` (its encoder when ``encoder``), wrapped."""

    def build(full: bool) -> nn.Module:
        config = getattr(t, cfg_name)(**cfg)
        if hasattr(config, "_attn_implementation"):
            config._attn_implementation = "eager"
        m = getattr(t, cls_name)(config)
        if encoder:
            m = m.get_encoder()
        spread(m, SEED)
        return Wrap(m, names, outs)

    return build


def text(name, family, cls_name, cfg_name, names, opset, cfg, outs=("last_hidden_state",), kind="encoder",
         dynamo=False, encoder=False, note=""):  # fmt: skip
    dyn = None
    kw: dict[str, Any] = {}
    if dynamo:
        kw = {"dynamo": True, "external_data": False}
    else:
        dyn = {n: {0: "batch_size", 1: "sequence_length"} for n in names} | {
            o: {0: "batch_size", 1: "sequence_length"} for o in outs
        }
    return Spec(
        name,
        family,
        kind,
        opset,
        hf(cls_name, cfg_name, names, list(outs), encoder=encoder, vocab_size=VOCAB, **cfg),
        tokens(names),
        list(outs),
        data=tok_data(names),
        note=note,
        dynamic_axes=dyn,
        export_kwargs=kw,
    )


def vision(name, family, cls_name, cfg_name, size, opset, cfg, outs=("logits",), kind="classifier", dynamo=False,
           note=""):  # fmt: skip
    kw = {"dynamo": True, "external_data": False} if dynamo else {}
    return Spec(
        name,
        family,
        kind,
        opset,
        hf(cls_name, cfg_name, ["pixel_values"], list(outs), **cfg),
        image(size),
        list(outs),
        data=dict(zoo_data.IMAGENET_DATA),
        note=note,
        export_kwargs=kw,
    )


LLAMA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    use_cache=False,
    tie_word_embeddings=False,
)
BART = dict(
    d_model=64,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=128,
    decoder_ffn_dim=128,
    max_position_embeddings=64,
    use_cache=False,
)


def specs() -> list[Spec]:
    s = [
        text("h_distilbert", "DistilBERT", "DistilBertModel", "DistilBertConfig", IDS2, 14,
             dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64)),
        text("h_albert", "ALBERT (shared layers, factorized embeddings)", "AlbertModel", "AlbertConfig", IDS3, 14,
             dict(SMALL, embedding_size=32, max_position_embeddings=64)),
        text("h_electra", "ELECTRA discriminator", "ElectraModel", "ElectraConfig", IDS3, 17,
             dict(SMALL, embedding_size=32, max_position_embeddings=64)),
        text("h_mobilebert", "MobileBERT (NoNorm, bottlenecks)", "MobileBertModel", "MobileBertConfig", IDS3, 14,
             dict(hidden_size=64, embedding_size=32, true_hidden_size=32, intra_bottleneck_size=32,
                  num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, num_feedforward_networks=2,
                  max_position_embeddings=64)),
        text("h_squeezebert", "SqueezeBERT (grouped conv1d)", "SqueezeBertModel", "SqueezeBertConfig", IDS3, 14,
             dict(SMALL, embedding_size=64, max_position_embeddings=64, q_groups=4, k_groups=4, v_groups=4,
                  post_attention_groups=1, intermediate_groups=4, output_groups=4)),
        text("h_bart_encoder", "BART encoder", "BartModel", "BartConfig", IDS2, 14, BART, encoder=True),
        text("h_marian_encoder", "Marian encoder (sinusoidal positions)", "MarianMTModel", "MarianConfig", IDS2,
             14, dict(BART, pad_token_id=0, decoder_start_token_id=0), encoder=True),
        text("h_bart_seq2seq", "BART seq2seq, one decoder pass without past", "BartForConditionalGeneration",
             "BartConfig", ["input_ids", "attention_mask", "decoder_input_ids"], 14, BART, outs=("logits",),
             kind="sequence"),
        text("h_gpt2", "GPT-2 (no KV cache)", "GPT2LMHeadModel", "GPT2Config", IDS2, 14,
             dict(n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False), outs=("logits",),
             kind="sequence"),
        text("h_llama", "Llama-style decoder (RoPE, RMSNorm, SwiGLU, GQA), no KV cache", "LlamaForCausalLM",
             "LlamaConfig", IDS2, 17, LLAMA, outs=("logits",), kind="sequence"),
        text("h_llama_dynamo18", "Llama-style decoder, dynamo=True", "LlamaForCausalLM", "LlamaConfig", IDS2, 18,
             LLAMA, outs=("logits",), kind="sequence", dynamo=True),
        text("h_distilbert_dynamo18", "DistilBERT, dynamo=True", "DistilBertModel", "DistilBertConfig", IDS2, 18,
             dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64), dynamo=True),
        vision("h_vit", "ViT (HF)", "ViTForImageClassification", "ViTConfig", 64, 14,
               dict(SMALL, image_size=64, patch_size=8, num_labels=10)),
        vision("h_deit", "DeiT distilled (HF)", "DeiTForImageClassificationWithTeacher", "DeiTConfig", 64, 14,
               dict(SMALL, image_size=64, patch_size=8, num_labels=10)),
        vision("h_beit", "BEiT (relative position bias)", "BeitForImageClassification", "BeitConfig", 64, 17,
               dict(SMALL, image_size=64, patch_size=8, num_labels=10, use_relative_position_bias=True,
                    use_mean_pooling=True, layer_scale_init_value=0.1)),
        vision("h_convnextv2", "ConvNeXtV2 (GRN)", "ConvNextV2ForImageClassification", "ConvNextV2Config", 64, 14,
               dict(hidden_sizes=[16, 32, 64, 96], depths=[1, 1, 2, 1], num_labels=10)),
        vision("h_mobilevit", "MobileViT (HF)", "MobileViTForImageClassification", "MobileViTConfig", 64, 14,
               dict(image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 16, 24, 32, 48, 64, 128],
                    num_attention_heads=2, num_labels=10)),
        vision("h_levit", "LeViT (HF)", "LevitForImageClassification", "LevitConfig", 64, 14,
               dict(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[2, 2, 2], depths=[1, 1, 1],
                    key_dim=[8, 8, 8], num_labels=10)),
        vision("h_poolformer", "PoolFormer", "PoolFormerForImageClassification", "PoolFormerConfig", 64, 14,
               dict(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], num_labels=10)),
        vision("h_detr", "DETR (ResNet from a random config)", "DetrForObjectDetection", "DetrConfig", 64, 14,
               dict(use_timm_backbone=False, use_pretrained_backbone=False,
                    backbone_config=t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1],
                                                   layer_type="basic", out_features=["stage4"]),
                    d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=20,
                    num_labels=8),
               outs=("logits", "pred_boxes"), kind="detector"),
        vision("h_yolos", "YOLOS", "YolosForObjectDetection", "YolosConfig", 64, 14,
               dict(SMALL, image_size=[64, 64], patch_size=8, num_detection_tokens=10, num_labels=8),
               outs=("logits", "pred_boxes"), kind="detector"),
        vision("h_dpt", "DPT depth (ViT)", "DPTForDepthEstimation", "DPTConfig", 64, 14,
               dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128,
                    image_size=64, patch_size=8, backbone_out_indices=[0, 1, 2, 3],
                    neck_hidden_sizes=[16, 32, 48, 64], fusion_hidden_size=32, head_in_index=-1),
               outs=("predicted_depth",), kind="segmenter"),
        vision("h_glpn", "GLPN depth", "GLPNForDepthEstimation", "GLPNConfig", 64, 14,
               dict(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1], num_attention_heads=[1, 2, 2, 4],
                    decoder_hidden_size=32), outs=("predicted_depth",), kind="segmenter"),
        vision("h_vit_dynamo18", "ViT (HF), dynamo=True", "ViTForImageClassification", "ViTConfig", 64, 18,
               dict(SMALL, image_size=64, patch_size=8, num_labels=10), dynamo=True),
        text("h_qwen2", "Qwen2-style decoder (q/k/v biases), no KV cache", "Qwen2ForCausalLM", "Qwen2Config", IDS2,
             17, LLAMA, outs=("logits",), kind="sequence"),
        text("h_gemma", "Gemma-style decoder (RMSNorm 1 + w, GELU-tanh gate)", "GemmaForCausalLM", "GemmaConfig",
             IDS2, 17, dict(LLAMA, head_dim=16), outs=("logits",), kind="sequence"),
        text("h_phi", "Phi-style decoder (partial rotary, parallel block)", "PhiForCausalLM", "PhiConfig", IDS2, 17,
             dict(LLAMA, partial_rotary_factor=0.5), outs=("logits",), kind="sequence"),
        text("h_mistral", "Mistral-style decoder (sliding window 8)", "MistralForCausalLM", "MistralConfig", IDS2, 17,
             dict(LLAMA, sliding_window=8), outs=("logits",), kind="sequence"),
        text("h_longformer", "Longformer (sliding window 4 + global CLS)", "LongformerModel", "LongformerConfig",
             IDS2, 14, dict(SMALL, attention_window=4, max_position_embeddings=66, pad_token_id=1)),
        text("h_bigbird", "BigBird (block-sparse at 16 tokens: full attention)", "BigBirdModel", "BigBirdConfig",
             IDS3, 14, dict(SMALL, max_position_embeddings=64, attention_type="original_full")),
        vision("h_mobilenet_v2_hf", "MobileNetV2 (HF, TF 'SAME' padding in the graph)",
               "MobileNetV2ForImageClassification", "MobileNetV2Config", 64, 14,
               dict(depth_multiplier=0.35, image_size=64, num_labels=10, tf_padding=True)),
        vision("h_swinv2", "Swin V2 (log-spaced CPB, cosine attention)", "Swinv2ForImageClassification",
               "Swinv2Config", 64, 14, dict(image_size=64, patch_size=4, embed_dim=24, depths=[2, 2],
                                             num_heads=[2, 4], window_size=4, num_labels=10)),
        Spec("h_whisper_encoder", "Whisper encoder", "encoder", 17,
             hf("WhisperModel", "WhisperConfig", ["input_features"], ["last_hidden_state"], encoder=True,
                d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80,
                max_source_positions=50, vocab_size=VOCAB, pad_token_id=0, bos_token_id=1,
                eos_token_id=2, decoder_start_token_id=1),
             lambda full: [("input_features", [1, 80, 100])], ["last_hidden_state"], data=dict(LOGMEL),
             note="input_features [1, 80 mel bins, 100 frames] (the zoo's logmel data reads the last two dims as "
                  "[frames, bins]: 80 x 100 of the same synthetic speech)"),
        Spec("h_ast", "Audio Spectrogram Transformer", "classifier", 14,
             hf("ASTForAudioClassification", "ASTConfig", ["input_values"], ["logits"], **SMALL, max_length=64,
                num_mel_bins=32, patch_size=16, frequency_stride=8, time_stride=8, num_labels=10),
             lambda full: [("input_values", [1, 64, 32])], ["logits"], data=dict(LOGMEL)),
    ]  # fmt: skip
    return s


def build(spec: Spec, out_dir: Path, photos, seed: int) -> dict[str, Any]:
    """export.export for inputs of either dtype (token ids are int64): seeded weights, BatchNorm statistics
    from the photos, the exporter path of the spec."""
    torch.manual_seed(seed)
    model = spec.build(False).eval()
    n_bn = export.set_bn_statistics(model, spec, False, photos, 8)
    dtype = "int64" if spec.data["type"] == "tokens" else "float32"
    inputs = [{"name": n, "shape": s, "dtype": dtype} for n, s in spec.inputs(False)]
    arrays = zoo_data.make_arrays({"name": spec.name, "data": spec.data, "inputs": inputs}, 1, 7, photos)
    example = tuple(torch.from_numpy(arrays[i["name"]]) for i in inputs)
    path = out_dir / f"{spec.name}.onnx"
    kwargs: dict[str, Any] = {"dynamo": False, "do_constant_folding": True, "dynamic_axes": spec.dynamic_axes}
    kwargs.update(spec.export_kwargs)
    if kwargs.get("dynamo"):
        kwargs.pop("dynamic_axes")
        kwargs.pop("do_constant_folding")
    with torch.no_grad():
        torch.onnx.export(
            model,
            example,
            str(path),
            input_names=[i["name"] for i in inputs],
            output_names=spec.outputs,
            opset_version=spec.opset,
            **kwargs,
        )
    return entry(spec, path, inputs, sum(p.numel() for p in model.parameters()), n_bn, seed)


def entry(spec: Spec, path: Path, inputs: list[dict], params: int, n_bn: int, seed: int) -> dict[str, Any]:
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    e = {
        "name": spec.name,
        "file": path.name,
        "family": spec.family,
        "kind": spec.kind,
        "opset": spec.opset,
        "inputs": inputs,
        "outputs": [o.name for o in proto.graph.output],
        "data": spec.data,
        "size": "reduced",
        "params": int(params),
        "batchnorm_layers_set": n_bn,
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": spec.note,
        "seed": seed,
    }
    dynamic = any(
        d.dim_param or d.dim_value <= 0 for i in proto.graph.input for d in i.type.tensor_type.shape.dim
    )
    if dynamic:
        e["extra_args"] = [
            a for i in inputs for a in ("--input-shape", f"{i['name']}={','.join(map(str, i['shape']))}")
        ]
    return e


# ------------------------------------------------------------------------------------ optimum main_export

OPTIMUM = {
    # name: (spec it saves, optimum task, the exported file). Not Whisper: optimum's dummy input has 3000 frames,
    # which a tiny config (max_source_positions 50) refuses.
    "o_distilbert": ("h_distilbert", "feature-extraction", "model.onnx"),
    "o_albert": ("h_albert", "feature-extraction", "model.onnx"),
    "o_mobilebert": ("h_mobilebert", "feature-extraction", "model.onnx"),
    "o_gpt2": ("h_gpt2", "text-generation", "model.onnx"),
    "o_llama": ("h_llama", "text-generation", "model.onnx"),
    "o_vit": ("h_vit", "image-classification", "model.onnx"),
    "o_convnextv2": ("h_convnextv2", "image-classification", "model.onnx"),
}


def build_optimum(name: str, spec: Spec, task: str, file: str, out_dir: Path, photos, seed: int) -> dict:
    """Save the spec's tiny model as a local Hugging Face folder and export it with optimum's main_export, as
    ``optimum-cli export onnx --model DIR --task TASK`` does (its opset, dynamic axes, input set)."""
    import shutil

    import onnx
    from optimum.exporters.onnx import main_export

    torch.manual_seed(seed)
    model = spec.build(False).eval()
    export.set_bn_statistics(model, spec, False, photos, 8)
    hfm = model.m
    with tempfile.TemporaryDirectory() as tmp:
        hfm.save_pretrained(tmp)
        exp = Path(tmp) / "onnx"
        main_export(tmp, output=exp, task=task, no_post_process=True, do_validation=False)
        path = out_dir / f"{name}.onnx"
        shutil.copy(exp / file, path)
    proto = onnx.load(str(path))
    dtype = "int64" if spec.data["type"] == "tokens" else "float32"
    shapes = dict(spec.inputs(False))
    inputs = []
    for i in proto.graph.input:
        n = i.name
        shape = shapes.get(n) or [1, SEQ]
        inputs.append({"name": n, "shape": shape, "dtype": dtype})
    data = dict(spec.data)
    if data["type"] == "tokens":
        data["roles"] = {i["name"]: ROLES.get(i["name"], "ids") for i in inputs}
    o = Spec(name, spec.family + ", optimum main_export", spec.kind, proto.opset_import[0].version,
             spec.build, spec.inputs, spec.outputs, data=data, note=f"optimum main_export task={task}")  # fmt: skip
    return entry(o, path, inputs, sum(p.numel() for p in hfm.parameters()), 0, seed)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", help="comma-separated model names")
    p.add_argument("--optimum", action="store_true", help="optimum main_export models (o_*)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(None, export.default_shared())
    torch.set_num_threads(2)
    wanted = set(args.only.split(",")) if args.only else None
    by_name = {s.name: (i, s) for i, s in enumerate(specs())}
    entries = []
    if args.optimum:
        for name, (src, task, file) in OPTIMUM.items():
            if wanted and name not in wanted:
                continue
            i, spec = by_name[src]
            entries.append(build_optimum(name, spec, task, file, args.out, photos, SEED + i))
            print(name, entries[-1]["opset"], [x["name"] for x in entries[-1]["inputs"]], entries[-1]["ops"])
    else:
        for name, (i, spec) in by_name.items():
            if wanted and name not in wanted:
                continue
            try:
                entries.append(build(spec, args.out, photos, SEED + i))
            except Exception as exc:  # an export failure is a finding of the probe, not of edgekit
                print(f"{name}: EXPORT FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
                continue
            print(f"{name:24s} opset {spec.opset} {entries[-1]['params']:>9,d} params {entries[-1]['ops']}")
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
