"""Issue 12 round 13s probe: the sentence / text encoders and rerankers behind today's most used embedding models.

    pip install --no-deps sentence-transformers    # the probe's venv only (st_* models), not a dependency of edgekit
    pip install onnxscript                         # the probe's venv only: torch's dynamo exporter (*_dynamo18)
    python benchmarks/zoo/probe_text_encoders.py [--only a,b]   # -> benchmarks/.zoo/probe13s/ + zoo.json
    python benchmarks/zoo/probe_text_encoders.py --fused        # f_*: the built files through onnxruntime's optimizer
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe13s/zoo.json --no-shared --workers 1 --json r.json

Small random configs from transformers' config classes (no download; seeded; LayerNorm affine parameters spread;
hidden 64, 2-3 layers, 16 tokens, 32 for ModernBERT's sliding window), exported as users do: ``torch.onnx.export
(dynamo=False)`` at opset 14 / 17 with optimum's dynamic ``batch_size`` / ``sequence_length`` axes and int64 ids and
masks, ``dynamo=True`` at 18 for three, and sentence-transformers' own modules (``SentenceTransformer(modules=
[Transformer, Pooling, Normalize])`` on a tiny saved model folder, exported with the pooling and the L2
normalisation inside the graph: the ``sentence_embedding`` output). MPNet (all-mpnet-base-v2: relative position
buckets in the graph), DeBERTa-v3 (disentangled attention, ``position_buckets``, ``share_att_key``) as encoder,
NLI cross-encoder and extractive QA, XLM-RoBERTa (E5 / BGE-M3: CumSum position ids from the padding index) as
encoder and bge-reranker (one logit), ModernBERT (RoPE, GeGLU, alternating sliding-window / global attention;
eager and sdpa), BERT NER (token classification) and QA (start / end logits), a T5 encoder (relative attention
bias buckets with Log) and a CLIP text tower with its projection.
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
from probe_transformers2 import ROLES, Wrap, entry, spread  # noqa: E402

t = _hf_transformers()
OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe13s"
SEED = 131
VOCAB = 1000
IDS2 = ["input_ids", "attention_mask"]
IDS3 = ["input_ids", "attention_mask", "token_type_ids"]
SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
MPNET = dict(SMALL, max_position_embeddings=66, relative_attention_num_buckets=32)
DEBERTA = dict(
    SMALL,
    max_position_embeddings=64,
    relative_attention=True,
    position_buckets=16,
    pos_att_type=["p2c", "c2p"],
    norm_rel_ebd="layer_norm",
    share_att_key=True,
    position_biased_input=False,
    max_relative_positions=-1,
    type_vocab_size=0,
)
XLMR = dict(SMALL, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1)
BERT = dict(SMALL, max_position_embeddings=64)
MODERNBERT = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    max_position_embeddings=64,
    global_attn_every_n_layers=3,
    local_attention=8,
    pad_token_id=0,
)
T5 = dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, relative_attention_num_buckets=32,
          feed_forward_proj="gated-gelu")  # fmt: skip
#: DeBERTa-v3-base's own relative-position settings (256 buckets, 512 positions) at 128 tokens
DEBERTA_BASE = dict(DEBERTA, max_position_embeddings=512, position_buckets=256)
QWEN3 = dict(SMALL, num_key_value_heads=2, head_dim=16, max_position_embeddings=64, use_cache=False)
CLIP = dict(SMALL, max_position_embeddings=32, eos_token_id=102, projection_dim=32, hidden_act="quick_gelu")


def tok_data(names: list[str]) -> dict[str, Any]:
    return {"type": "tokens", "vocab_size": VOCAB, "roles": {n: ROLES[n] for n in names}}


def hf(cls_name: str, cfg_name: str, names: list[str], outs: list[str], attn: str = "eager", **cfg):
    """A builder: ``transformers.<cls_name>(<cfg_name>(**cfg))`` with ``attn`` attention, wrapped."""

    def build(full: bool) -> nn.Module:
        config = getattr(t, cfg_name)(vocab_size=VOCAB, **cfg)
        config._attn_implementation = attn
        m = getattr(t, cls_name)(config)
        spread(m, SEED)
        return Wrap(m, names, outs)

    return build


class Sentence(nn.Module):
    """A ``SentenceTransformer`` called on a features dict, its ``sentence_embedding`` returned (as users wrap it
    for ``torch.onnx.export``: the pooling and the normalisation in the graph)."""

    def __init__(self, st: nn.Module, names: list[str]):
        super().__init__()
        self.st, self.names = st, names

    def forward(self, *xs):
        return self.st(dict(zip(self.names, xs, strict=True)))["sentence_embedding"]


def sentence_transformer(arch: str, cfg_name: str, pooling: str, attn: str = "eager", dense: int = 0, **cfg):
    """A builder: the tiny model saved as a folder (with a WordPiece vocabulary for its tokenizer), loaded by
    sentence-transformers' ``Transformer`` module, then ``Pooling(pooling)``, a ``Dense(dense)`` with Tanh when
    ``dense`` (LaBSE) and ``Normalize()``."""

    def build(full: bool) -> nn.Module:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.base.modules.dense import Dense
        from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

        config = getattr(t, cfg_name)(vocab_size=VOCAB, **cfg)
        with tempfile.TemporaryDirectory() as d:
            getattr(t, arch)(config).save_pretrained(d)
            vocab = Path(d, "vocab.txt")
            vocab.write_text(
                "\n".join(["[PAD]", "<pad>", "</s>", "[UNK]"] + [f"w{i}" for i in range(VOCAB - 4)])
            )
            t.BertTokenizer(str(vocab)).save_pretrained(d)
            tr = Transformer(d, model_kwargs={"attn_implementation": attn})
        head = [Dense(config.hidden_size, dense)] if dense else []
        modules = [tr, Pooling(config.hidden_size, pooling), *head, Normalize()]
        st = SentenceTransformer(modules=modules, device="cpu")
        spread(st, SEED)
        return Sentence(st, IDS2)

    return build


def text(name, family, builder, names, opset, outs=("last_hidden_state",), kind="encoder", dynamo=False, seq=16,
         note=""):  # fmt: skip
    dyn = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    for o in outs:
        dyn[o] = (
            {0: "batch_size"}
            if kind == "classifier" or o == "sentence_embedding"
            else {0: "batch_size", 1: "sequence_length"}
        )
    kw: dict[str, Any] = {"dynamo": True, "external_data": False} if dynamo else {}
    return Spec(name, family, kind, opset, builder, lambda full: [(n, [1, seq]) for n in names], list(outs),
                data=tok_data(names), note=note, dynamic_axes=dyn, export_kwargs=kw)  # fmt: skip


def specs() -> list[Spec]:
    qa = ("start_logits", "end_logits")
    return [
        text("t_mpnet_op14", "MPNet", hf("MPNetModel", "MPNetConfig", IDS2, ["last_hidden_state"], **MPNET),
             IDS2, 14),
        text("t_mpnet_op17", "MPNet", hf("MPNetModel", "MPNetConfig", IDS2, ["last_hidden_state"], **MPNET),
             IDS2, 17),
        text("t_mpnet_dynamo18", "MPNet, dynamo=True",
             hf("MPNetModel", "MPNetConfig", IDS2, ["last_hidden_state"], **MPNET), IDS2, 18, dynamo=True),
        text("st_mpnet_mean_norm_op14", "MPNet sentence-transformers (all-mpnet-base-v2: mean Pooling, Normalize)",
             sentence_transformer("MPNetModel", "MPNetConfig", "mean", **MPNET), IDS2, 14,
             outs=("sentence_embedding",)),
        text("t_deberta_v3_op14", "DeBERTa-v3", hf("DebertaV2Model", "DebertaV2Config", IDS2,
             ["last_hidden_state"], **DEBERTA), IDS2, 14),
        text("t_deberta_v3_op17", "DeBERTa-v3", hf("DebertaV2Model", "DebertaV2Config", IDS2,
             ["last_hidden_state"], **DEBERTA), IDS2, 17),
        text("t_deberta_v3_dynamo18", "DeBERTa-v3, dynamo=True", hf("DebertaV2Model", "DebertaV2Config", IDS2,
             ["last_hidden_state"], **DEBERTA), IDS2, 18, dynamo=True),
        text("t_deberta_v3_nli_op17", "DeBERTa-v3 cross-encoder (sequence classification, 3 labels)",
             hf("DebertaV2ForSequenceClassification", "DebertaV2Config", IDS2, ["logits"], num_labels=3,
                **DEBERTA), IDS2, 17, outs=("logits",), kind="classifier"),
        text("t_deberta_v3_qa_op17", "DeBERTa-v3 extractive QA (start / end logits)",
             hf("DebertaV2ForQuestionAnswering", "DebertaV2Config", IDS2, list(qa), **DEBERTA), IDS2, 17,
             outs=qa, kind="sequence"),
        text("t_xlmr_op14", "XLM-RoBERTa (E5 / BGE-M3)", hf("XLMRobertaModel", "XLMRobertaConfig", IDS2,
             ["last_hidden_state"], **XLMR), IDS2, 14),
        text("t_xlmr_dynamo18", "XLM-RoBERTa, dynamo=True", hf("XLMRobertaModel", "XLMRobertaConfig", IDS2,
             ["last_hidden_state"], **XLMR), IDS2, 18, dynamo=True),
        text("t_xlmr_reranker_op17", "XLM-RoBERTa reranker (bge-reranker: one logit)",
             hf("XLMRobertaForSequenceClassification", "XLMRobertaConfig", IDS2, ["logits"], num_labels=1,
                **XLMR), IDS2, 17, outs=("logits",)),
        text("st_xlmr_cls_norm_op17", "XLM-RoBERTa sentence-transformers (BGE-M3: CLS Pooling, Normalize)",
             sentence_transformer("XLMRobertaModel", "XLMRobertaConfig", "cls", **XLMR), IDS2, 17,
             outs=("sentence_embedding",)),
        text("t_modernbert_eager_op17", "ModernBERT (eager attention)", hf("ModernBertModel", "ModernBertConfig",
             IDS2, ["last_hidden_state"], **MODERNBERT), IDS2, 17, seq=32),
        text("t_modernbert_sdpa_op17", "ModernBERT (sdpa attention)", hf("ModernBertModel", "ModernBertConfig",
             IDS2, ["last_hidden_state"], attn="sdpa", **MODERNBERT), IDS2, 17, seq=32),
        text("t_modernbert_eager_op14", "ModernBERT (eager attention)", hf("ModernBertModel", "ModernBertConfig",
             IDS2, ["last_hidden_state"], **MODERNBERT), IDS2, 14, seq=32),
        text("st_modernbert_mean_norm_op17", "ModernBERT sentence-transformers (mean Pooling, Normalize)",
             sentence_transformer("ModernBertModel", "ModernBertConfig", "mean", **MODERNBERT), IDS2, 17,
             outs=("sentence_embedding",), seq=32),
        text("t_bert_ner_op14", "BERT token classification (NER, 9 labels)", hf("BertForTokenClassification",
             "BertConfig", IDS3, ["logits"], num_labels=9, **BERT), IDS3, 14, outs=("logits",), kind="sequence"),
        text("t_bert_qa_op17", "BERT extractive QA (start / end logits)", hf("BertForQuestionAnswering",
             "BertConfig", IDS3, list(qa), **BERT), IDS3, 17, outs=qa, kind="sequence"),
        text("t_t5_encoder_op17", "T5 encoder (relative attention bias buckets, RMSNorm, gated GELU)",
             hf("T5EncoderModel", "T5Config", IDS2, ["last_hidden_state"], **T5), IDS2, 17),
        text("t_clip_text_op17", "CLIP text tower with projection (EOS pooling, causal mask)",
             hf("CLIPTextModelWithProjection", "CLIPTextConfig", IDS2, ["text_embeds"], **CLIP), IDS2, 17,
             outs=("text_embeds",), note="eos_token_id 102: the tokens data's [SEP] ends every sample"),
        # second pass: the pooling modes and heads sentence-transformers models ship, real position settings
        text("st_bert_max_norm_op14", "BERT sentence-transformers (max Pooling: masked_fill -inf, ReduceMax)",
             sentence_transformer("BertModel", "BertConfig", "max", **BERT), IDS2, 14,
             outs=("sentence_embedding",)),
        text("st_labse_cls_dense_norm_op14", "BERT sentence-transformers (LaBSE: CLS Pooling, Dense Tanh, "
             "Normalize)", sentence_transformer("BertModel", "BertConfig", "cls", dense=48, **BERT), IDS2, 14,
             outs=("sentence_embedding",)),
        text("st_bert_weightedmean_op17", "BERT sentence-transformers (weightedmean Pooling, Normalize)",
             sentence_transformer("BertModel", "BertConfig", "weightedmean", **BERT), IDS2, 17,
             outs=("sentence_embedding",)),
        text("st_qwen3_lasttoken_op17", "Qwen3 decoder sentence-transformers (Qwen3-Embedding: lasttoken "
             "Pooling, Normalize)", sentence_transformer("Qwen3Model", "Qwen3Config", "lasttoken", **QWEN3), IDS2,
             17, outs=("sentence_embedding",)),
        text("t_deberta_v3_base_pos_op17", "DeBERTa-v3 (base's 256 buckets / 512 positions, 128 tokens)",
             hf("DebertaV2Model", "DebertaV2Config", IDS2, ["last_hidden_state"], **DEBERTA_BASE), IDS2, 17,
             seq=128),
        text("t_mpnet_128_op14", "MPNet at 128 tokens", hf("MPNetModel", "MPNetConfig", IDS2,
             ["last_hidden_state"], **dict(MPNET, max_position_embeddings=514)), IDS2, 14, seq=128),
        text("t_modernbert_dynamo18", "ModernBERT (sdpa), dynamo=True", hf("ModernBertModel", "ModernBertConfig",
             IDS2, ["last_hidden_state"], attn="sdpa", **MODERNBERT), IDS2, 18, seq=32, dynamo=True),
        text("t_xlmr_ner_dynamo18", "XLM-RoBERTa token classification (NER), dynamo=True",
             hf("XLMRobertaForTokenClassification", "XLMRobertaConfig", IDS2, ["logits"], num_labels=9, **XLMR),
             IDS2, 18, outs=("logits",), kind="sequence", dynamo=True),
        # older exports: optimum's default opsets of earlier releases (11 / 12), DeBERTa-v2-xlarge's convolution,
        # DeBERTa v1 (deberta-base rerankers)
        text("t_deberta_v3_op12", "DeBERTa-v3 (opset 12: Softmax-11 semantics)", hf("DebertaV2Model",
             "DebertaV2Config", IDS2, ["last_hidden_state"], **DEBERTA), IDS2, 12),
        text("t_xlmr_op11", "XLM-RoBERTa (opset 11)", hf("XLMRobertaModel", "XLMRobertaConfig", IDS2,
             ["last_hidden_state"], **XLMR), IDS2, 11),
        text("t_mpnet_op11", "MPNet (opset 11)", hf("MPNetModel", "MPNetConfig", IDS2, ["last_hidden_state"],
             **MPNET), IDS2, 11),
        text("t_deberta_v2_conv_op14", "DeBERTa-v2 (xlarge's ConvLayer: conv_kernel_size 3, position_biased_input)",
             hf("DebertaV2Model", "DebertaV2Config", IDS3, ["last_hidden_state"],
                **dict(DEBERTA, conv_kernel_size=3, conv_act="gelu", position_biased_input=True,
                       type_vocab_size=2, share_att_key=False)), IDS3, 14),
        text("t_deberta_v1_op14", "DeBERTa v1 (c2p|p2c, XSoftmax)", hf("DebertaModel", "DebertaConfig", IDS2,
             ["last_hidden_state"], **dict(SMALL, max_position_embeddings=64, relative_attention=True,
                                           pos_att_type=["c2p", "p2c"], max_relative_positions=-1,
                                           position_biased_input=False, type_vocab_size=0)), IDS2, 14),
    ]  # fmt: skip


def build(spec: Spec, out_dir: Path, photos, seed: int) -> dict[str, Any]:
    """Seeded weights, int64 token inputs, the spec's exporter path (``dynamo=True`` keeps the dynamic axes too)."""
    torch.manual_seed(seed)
    model = spec.build(False).eval()
    inputs = [{"name": n, "shape": s, "dtype": "int64"} for n, s in spec.inputs(False)]
    arrays = zoo_data.make_arrays({"name": spec.name, "data": spec.data, "inputs": inputs}, 1, 7, photos)
    example = tuple(torch.from_numpy(arrays[i["name"]]) for i in inputs)
    path = out_dir / f"{spec.name}.onnx"
    kwargs: dict[str, Any] = {"dynamo": False, "do_constant_folding": True, "dynamic_axes": spec.dynamic_axes}
    kwargs.update(spec.export_kwargs)
    if kwargs.get("dynamo"):
        # the dynamo exporter cannot turn these dynamic_axes into dynamic_shapes itself: users pass them
        kwargs.pop("do_constant_folding")
        kwargs.pop("dynamic_axes")
        dim = torch.export.Dim.AUTO
        kwargs["dynamic_shapes"] = (tuple({0: dim, 1: dim} for _ in inputs),)  # forward(*xs)
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
    return entry(spec, path, inputs, sum(p.numel() for p in model.parameters()), 0, seed)


#: onnxruntime's transformers optimizer as optimum's ``--optimize O2`` runs it (``optimize_model``, opt_level 2;
#: O3: with the GELU approximation): the exported file, the optimizer's model type, the level
FUSED = {
    "f_xlmr_ortO2": ("t_xlmr_op14", "bert", "O2"),
    "f_xlmr_reranker_ortO3": ("t_xlmr_reranker_op17", "bert", "O3"),
    "f_mpnet_st_ortO2": ("st_mpnet_mean_norm_op14", "bert", "O2"),
    "f_deberta_v3_ortO2": ("t_deberta_v3_op17", "bert", "O2"),
    "f_t5_encoder_ortO2": ("t_t5_encoder_op17", "t5", "O2"),
    "f_clip_text_ortO2": ("t_clip_text_op17", "clip", "O2"),
    "f_modernbert_ortO3": ("t_modernbert_eager_op17", "bert", "O3"),
    "f_bert_qa_ortO2": ("t_bert_qa_op17", "bert", "O2"),
}


def build_fused(
    name: str, source: dict[str, Any], model_type: str, level: str, out_dir: Path
) -> dict[str, Any]:
    """``source``'s exported file through onnxruntime's transformers optimizer (com.microsoft Attention,
    SkipLayerNormalization, BiasGelu / FastGelu / QuickGelu, EmbedLayerNormalization where it matches)."""
    import onnx
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions(model_type)
    options.enable_gelu_approximation = level == "O3"
    m = optimize_model(str(out_dir / source["file"]), model_type=model_type, num_heads=4, hidden_size=64,
                       opt_level=2, optimization_options=options)  # fmt: skip
    path = out_dir / f"{name}.onnx"
    m.save_model_to_file(str(path))
    proto = onnx.load(str(path))
    e = dict(source, name=name, file=path.name, family=f"{source['family']}, onnxruntime-fused ({level})")
    e["ops"] = sorted({(f"{n.domain}." if n.domain else "") + n.op_type for n in proto.graph.node})
    e["note"] = (
        f"optimize_model(model_type={model_type!r}, opt_level=2{', gelu approximation' if level == 'O3' else ''})"
    )
    return e


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", help="comma-separated model names")
    p.add_argument("--fused", action="store_true", help="the onnxruntime-fused files (f_*) of built models")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(None, export.default_shared())
    torch.set_num_threads(2)
    wanted = set(args.only.split(",")) if args.only else None
    entries = []
    if args.fused:
        built = {e["name"]: e for e in zoo_data.load_manifest(args.out / "zoo.json")["models"]}
        for name, (src, model_type, level) in FUSED.items():
            if not wanted or name in wanted:
                entries.append(build_fused(name, built[src], model_type, level, args.out))
                print(f"{name:30s} {[o for o in entries[-1]['ops'] if o.startswith('com.')]}")
        zoo_data.merge_manifest(args.out, entries)
        return 0
    for i, spec in enumerate(specs()):
        if wanted and spec.name not in wanted:
            continue
        try:
            entries.append(build(spec, args.out, photos, SEED + i))
        except Exception as exc:  # an export failure is a finding of the probe, not of edgekit
            print(f"{spec.name}: EXPORT FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            continue
        print(f"{spec.name:30s} opset {spec.opset} {entries[-1]['params']:>9,d} params {entries[-1]['ops']}")
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
