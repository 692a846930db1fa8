"""Probe models for issue 12 (round 2, transformer / sequence families the zoo does not cover), not committed.

    python benchmarks/zoo/probe_sequences.py [NAMES] [MANIFEST]   # -> benchmarks/.zoo/probe/ + zoo.json there
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe/zoo.json --no-shared --workers 1 --json out.json

Small random configs of Hugging Face models (no download, seeded; LayerNorm affine parameters given spread):
MPNet, DeBERTa-v3, XLM-RoBERTa, BERT with 3 inputs (optimum's dynamic axes), a sentence-transformers graph
(mean pooling + L2 normalize), BERT dynamo=True at opset 18, CLIP text (EOS ArgMax pooling; also dynamo),
RoFormer, ModernBERT (also dynamo), T5 encoder (relative attention bias, RMSNorm; also dynamic), BERT as
float16 ONNX, Swin, DINOv2 (interpolated positions), SegFormer, Wav2Vec2 / HuBERT (raw waveform), a Conformer
(CTC-style, written here), a CRNN with a 2-layer BiLSTM, BERT fused by onnxruntime's optimizer, BERT dynamically
quantized (onnxruntime quantize_dynamic) and BERT at opset 11. NAMES: comma-separated builder function names.
"""

import json
import math
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "zoo"))  # noqa: E402
from exported_as_users_do import _hf_transformers  # noqa: E402

t = _hf_transformers()
OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe"
SEQ = 16
SEED = 77


def TOK(roles: dict, vocab: int = 1000) -> dict:
    return {"type": "tokens", "vocab_size": vocab, "roles": roles}


IDS_MASK = {"input_ids": "ids", "attention_mask": "mask"}
IDS3 = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "type_ids"}
IMG = {
    "type": "image",
    "color": "RGB",
    "scale": 1 / 255,
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
}


def spread(model):
    g = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if ("norm" in n.lower() or "ln" in n.lower()) and p.dim() == 1:
                p.copy_((1.0 if n.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=g))


def tokens(n_inputs, vocab=1000, seq=SEQ):
    g = torch.Generator().manual_seed(SEED + 2)
    ids = torch.randint(103, vocab, (1, seq), generator=g)
    ids[0, 0] = 101
    ids[0, -5] = 102
    ids[0, -4:] = 0
    mask = torch.ones(1, seq, dtype=torch.long)
    mask[0, -4:] = 0
    return (ids, mask, torch.zeros_like(ids))[:n_inputs]


class Wrap(nn.Module):
    def __init__(self, m, names, out="last_hidden_state", post=None):
        super().__init__()
        self.m, self.names, self.out, self.post = m, names, out, post

    def forward(self, *xs):
        r = self.m(**dict(zip(self.names, xs, strict=True)))
        y = getattr(r, self.out) if not isinstance(r, torch.Tensor) else r
        return self.post(y, *xs) if self.post else y


def export(
    name, model, args, names, outs, opset, data, family, kind="encoder", dynamic=False, dynamo=False, note=""
):
    path = OUT / f"{name}.onnx"
    model.eval()
    dyn = None
    if dynamic:
        dyn = {n: {0: "batch_size", 1: "sequence_length"} for n in names} | {
            o: {0: "batch_size"} for o in outs
        }
    kw = dict(input_names=names, output_names=outs, opset_version=opset, dynamic_axes=dyn)
    with torch.no_grad():
        if dynamo:
            torch.onnx.export(
                model,
                tuple(args),
                str(path),
                dynamo=True,
                input_names=names,
                output_names=outs,
                opset_version=opset,
                external_data=False,
            )
        else:
            torch.onnx.export(model, tuple(args), str(path), dynamo=False, **kw)
    inputs = [
        {"name": n, "shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")}
        for n, a in zip(names, args, strict=True)
    ]
    e = {
        "name": name,
        "file": path.name,
        "family": family,
        "kind": kind,
        "opset": opset,
        "inputs": inputs,
        "outputs": outs,
        "data": data,
        "size": "reduced",
        "note": note,
        "seed": SEED,
    }
    if dynamic:
        e["extra_args"] = [
            x
            for n, a in zip(names, args, strict=True)
            for x in ("--input-shape", f"{n}=" + ",".join(map(str, a.shape)))
        ]
    return e


SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)


def hf_text(
    name,
    cls,
    cfgcls,
    n_in,
    opset,
    family,
    cfg_extra=None,
    dynamic=False,
    dynamo=False,
    out="last_hidden_state",
    post=None,
    outname=None,
    note="",
    vocab=1000,
):
    torch.manual_seed(SEED)
    cfg = cfgcls(vocab_size=vocab, **SMALL, **(cfg_extra or {}))
    m = cls(cfg)
    spread(m)
    names = ["input_ids", "attention_mask", "token_type_ids"][:n_in]
    roles = {k: v for k, v in IDS3.items() if k in names}
    return export(
        name,
        Wrap(m, names, out, post),
        tokens(n_in, vocab),
        names,
        [outname or out],
        opset,
        TOK(roles, vocab),
        family,
        dynamic=dynamic,
        dynamo=dynamo,
        note=note,
    )


def mean_norm(h, ids, mask, *rest):
    m = mask.unsqueeze(-1).to(h.dtype)
    s = (h * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
    return torch.nn.functional.normalize(s, p=2, dim=1)


B = {}


def mpnet():
    return hf_text(
        "p_mpnet",
        t.MPNetModel,
        t.MPNetConfig,
        2,
        14,
        "MPNet",
        dict(max_position_embeddings=66, relative_attention_num_buckets=32),
    )


def deberta():
    return hf_text(
        "p_deberta_v3",
        t.DebertaV2Model,
        t.DebertaV2Config,
        2,
        14,
        "DeBERTa-v3",
        dict(
            max_position_embeddings=64,
            relative_attention=True,
            position_buckets=32,
            pos_att_type=["p2c", "c2p"],
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            position_biased_input=False,
            max_relative_positions=-1,
            type_vocab_size=0,
        ),
    )


def xlmr():
    return hf_text(
        "p_xlmr_op17",
        t.XLMRobertaModel,
        t.XLMRobertaConfig,
        2,
        17,
        "XLM-RoBERTa",
        dict(max_position_embeddings=66, type_vocab_size=1, pad_token_id=1),
    )


def bert3_optimum():
    return hf_text(
        "p_bert3_optimum",
        t.BertModel,
        t.BertConfig,
        3,
        14,
        "BERT 3 inputs (optimum-style)",
        dict(max_position_embeddings=64),
        dynamic=True,
    )


def st_bert():
    return hf_text(
        "p_st_bert_norm",
        t.BertModel,
        t.BertConfig,
        3,
        17,
        "sentence-transformers (Pooling+Normalize)",
        dict(max_position_embeddings=64),
        post=mean_norm,
        outname="sentence_embedding",
        dynamic=True,
    )


def bert_dynamo():
    return hf_text(
        "p_bert_dynamo18",
        t.BertModel,
        t.BertConfig,
        2,
        18,
        "BERT dynamo=True",
        dict(max_position_embeddings=64),
        dynamo=True,
    )


def clip():
    return hf_text(
        "p_clip_text",
        t.CLIPTextModel,
        t.CLIPTextConfig,
        1,
        17,
        "CLIP text encoder",
        dict(max_position_embeddings=SEQ, eos_token_id=102, hidden_act="quick_gelu"),
        out="pooler_output",
    )


def roformer():
    return hf_text(
        "p_roformer",
        t.RoFormerModel,
        t.RoFormerConfig,
        3,
        14,
        "RoFormer",
        dict(max_position_embeddings=64, embedding_size=64),
    )


def modernbert():
    return hf_text(
        "p_modernbert",
        t.ModernBertModel,
        t.ModernBertConfig,
        2,
        17,
        "ModernBERT",
        dict(max_position_embeddings=64, global_attn_every_n_layers=2, local_attention=8, pad_token_id=0),
    )


def t5(name: str = "p_t5_encoder", d_kv: int = 16, note: str = "T5 encoder"):
    torch.manual_seed(SEED)
    cfg = t.T5Config(
        vocab_size=1000,
        d_model=64,
        d_kv=d_kv,
        d_ff=128,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
        feed_forward_proj="gated-gelu",
    )
    m = t.T5EncoderModel(cfg)
    spread(m)
    return export(
        name,
        Wrap(m, ["input_ids", "attention_mask"]),
        tokens(2),
        ["input_ids", "attention_mask"],
        ["last_hidden_state"],
        14,
        TOK(IDS_MASK),
        note,
    )


def fp16_bert():
    from exported_as_users_do import to_float16

    e = hf_text(
        "p_bert_fp16", t.BertModel, t.BertConfig, 2, 14, "BERT float16 ONNX", dict(max_position_embeddings=64)
    )
    to_float16(OUT / e["file"])
    return e


def img(name, model, hw, opset, family, kind, outs, out_attr, note=""):
    torch.manual_seed(SEED)
    spread(model)
    x = torch.from_numpy(
        __import__("zoo_data").image_array(IMG, [1, 3, *hw], 1, 5, __import__("zoo_data").cached_photos())
    )
    return export(
        name, Wrap(model, ["pixel_values"], out_attr), [x], ["pixel_values"], outs, opset, IMG, family, kind
    )


def swin():
    torch.manual_seed(SEED)
    cfg = t.SwinConfig(
        image_size=64,
        patch_size=4,
        embed_dim=24,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
        num_labels=10,
    )
    return img(
        "p_swin", t.SwinForImageClassification(cfg), (64, 64), 17, "Swin", "classifier", ["logits"], "logits"
    )


def dinov2():
    torch.manual_seed(SEED)
    cfg = t.Dinov2Config(
        image_size=56, patch_size=14, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2
    )
    m = t.Dinov2Model(cfg)
    return img(
        "p_dinov2",
        m,
        (84, 84),
        17,
        "DINOv2 (interpolated pos)",
        "encoder",
        ["pooler_output"],
        "pooler_output",
    )


def segformer():
    torch.manual_seed(SEED)
    cfg = t.SegformerConfig(
        num_channels=3,
        num_encoder_blocks=4,
        depths=[1, 1, 1, 1],
        sr_ratios=[8, 4, 2, 1],
        hidden_sizes=[16, 32, 64, 96],
        num_attention_heads=[1, 2, 4, 4],
        decoder_hidden_size=64,
        num_labels=8,
    )
    return img(
        "p_segformer",
        t.SegformerForSemanticSegmentation(cfg),
        (128, 128),
        17,
        "SegFormer-b0",
        "segmenter",
        ["logits"],
        "logits",
    )


def wav2vec2():
    torch.manual_seed(SEED)
    cfg = t.Wav2Vec2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32, 32, 32, 32, 32),
        feat_extract_norm="group",
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        do_stable_layer_norm=False,
    )
    m = t.Wav2Vec2Model(cfg)
    spread(m)
    import zoo_data

    data = {"type": "waveform", "sample_rate": 16000}
    x = torch.from_numpy(zoo_data.waveform_array(data, [1, 8000], 1, 3))
    return export(
        "p_wav2vec2",
        Wrap(m, ["input_values"]),
        [x],
        ["input_values"],
        ["last_hidden_state"],
        14,
        data,
        "Wav2Vec2",
        "encoder",
    )


def hubert():
    torch.manual_seed(SEED)
    cfg = t.HubertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32,) * 7,
        feat_extract_norm="layer",
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        do_stable_layer_norm=True,
    )
    m = t.HubertModel(cfg)
    spread(m)
    import zoo_data

    data = {"type": "waveform", "sample_rate": 16000}
    x = torch.from_numpy(zoo_data.waveform_array(data, [1, 8000], 1, 3))
    return export(
        "p_hubert_op17",
        Wrap(m, ["input_values"]),
        [x],
        ["input_values"],
        ["last_hidden_state"],
        17,
        data,
        "HuBERT (layer-norm feature encoder)",
        "encoder",
    )


class ConformerBlock(nn.Module):
    def __init__(s, d=64, heads=4, k=15):
        super().__init__()
        s.ff1 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        s.ln_att = nn.LayerNorm(d)
        s.qkv = nn.Linear(d, 3 * d)
        s.o = nn.Linear(d, d)
        s.h = heads
        s.ln_conv = nn.LayerNorm(d)
        s.pw1 = nn.Conv1d(d, 2 * d, 1)
        s.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        s.bn = nn.BatchNorm1d(d)
        s.pw2 = nn.Conv1d(d, d, 1)
        s.ff2 = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))
        s.ln = nn.LayerNorm(d)

    def forward(s, x):
        x = x + 0.5 * s.ff1(x)
        b, n, d = x.shape
        q, k, v = s.qkv(s.ln_att(x)).view(b, n, 3, s.h, d // s.h).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // s.h), -1)
        x = x + s.o((a @ v).transpose(1, 2).reshape(b, n, d))
        h = s.ln_conv(x).transpose(1, 2)
        h = nn.functional.glu(s.pw1(h), dim=1)
        h = s.pw2(nn.functional.silu(s.bn(s.dw(h))))
        x = x + h.transpose(1, 2)
        return s.ln(x + 0.5 * s.ff2(x))


class Conformer(nn.Module):
    def __init__(s):
        super().__init__()
        s.sub = nn.Sequential(nn.Conv2d(1, 16, 3, 2), nn.ReLU(), nn.Conv2d(16, 16, 3, 2), nn.ReLU())
        s.proj = nn.Linear(16 * 9, 64)
        s.blocks = nn.Sequential(ConformerBlock(), ConformerBlock())
        s.head = nn.Linear(64, 12)

    def forward(s, x):
        h = s.sub(x.unsqueeze(1))
        b, c, t_, f = h.shape
        h = s.proj(h.permute(0, 2, 1, 3).reshape(b, t_, c * f))
        return s.head(s.blocks(h))


def conformer():
    import zoo_data

    torch.manual_seed(SEED)
    m = Conformer()
    spread(m)
    data = {"type": "logmel", "sample_rate": 16000, "hop_ms": 20, "window_ms": 30}
    x = torch.from_numpy(zoo_data.logmel_array(data, [1, 49, 40], 8, 3))
    m.train()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm1d):
            mod.momentum = None
    with torch.no_grad():
        m(x)
    return export(
        "p_conformer", m, [x[:1]], ["features"], ["logits"], 17, data, "Conformer (CTC-style)", "sequence"
    )


def _conv_bn_relu(i: int, o: int) -> list:
    return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU()]


class CRNN(nn.Module):
    def __init__(s):
        super().__init__()
        s.cnn = nn.Sequential(
            *_conv_bn_relu(1, 16),
            nn.MaxPool2d(2),
            *_conv_bn_relu(16, 32),
            nn.MaxPool2d(2),
            *_conv_bn_relu(32, 48),
            nn.MaxPool2d((2, 1)),
            *_conv_bn_relu(48, 48),
            nn.MaxPool2d((4, 1)),
        )
        s.rnn = nn.LSTM(48, 48, num_layers=2, bidirectional=True, batch_first=True)
        s.fc = nn.Linear(96, 37)

    def forward(s, x):
        h = s.cnn(x).squeeze(2).permute(0, 2, 1)
        return s.fc(s.rnn(h)[0]).softmax(-1)


def crnn():
    import zoo_data

    torch.manual_seed(SEED)
    m = CRNN()
    data = {"type": "image", "color": "GRAY", "scale": 1 / 255, "mean": [0.5], "std": [0.5]}
    x = torch.from_numpy(zoo_data.image_array(data, [1, 1, 32, 128], 16, 3, zoo_data.cached_photos()))
    m.train()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.momentum = None
    with torch.no_grad():
        m(x)
    return export(
        "p_crnn_bilstm", m, [x[:1]], ["x"], ["probs"], 14, data, "CRNN (BiLSTM text recogniser)", "sequence"
    )


ALL = [
    mpnet,
    deberta,
    xlmr,
    bert3_optimum,
    st_bert,
    bert_dynamo,
    clip,
    roformer,
    modernbert,
    t5,
    fp16_bert,
    swin,
    dinov2,
    segformer,
    wav2vec2,
    hubert,
    conformer,
    crnn,
]


def bert_ort_opt():
    e = hf_text(
        "p_bert_ort_fused",
        t.BertModel,
        t.BertConfig,
        3,
        14,
        "BERT + onnxruntime transformers optimizer (optimum O2)",
        dict(max_position_embeddings=64, attn_implementation="eager"),
        dynamic=True,
    )
    from onnxruntime.transformers import optimizer

    m = optimizer.optimize_model(
        str(OUT / e["file"]), model_type="bert", num_heads=4, hidden_size=64, opt_level=1
    )
    m.save_model_to_file(str(OUT / e["file"]))
    e["note"] = "com.microsoft fused ops"
    return e


def bert_dynq():
    e = hf_text(
        "p_bert_dynq",
        t.BertModel,
        t.BertConfig,
        2,
        14,
        "BERT quantize_dynamic (model_quantized.onnx)",
        dict(max_position_embeddings=64),
    )
    from onnxruntime.quantization import QuantType, quantize_dynamic

    p = OUT / e["file"]
    quantize_dynamic(str(p), str(p), weight_type=QuantType.QInt8)
    return e


def bert_op11():
    return hf_text(
        "p_bert_op11",
        t.BertModel,
        t.BertConfig,
        3,
        11,
        "BERT opset 11",
        dict(max_position_embeddings=64, attn_implementation="eager"),
    )


def clip_dynamo():
    return hf_text(
        "p_clip_dynamo18",
        t.CLIPTextModel,
        t.CLIPTextConfig,
        1,
        18,
        "CLIP text dynamo=True",
        dict(max_position_embeddings=SEQ, eos_token_id=102),
        out="pooler_output",
        dynamo=True,
    )


def t5_dyn():
    torch.manual_seed(SEED)
    cfg = t.T5Config(
        vocab_size=1000,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_heads=4,
        relative_attention_num_buckets=32,
    )
    m = t.T5EncoderModel(cfg)
    spread(m)
    return export(
        "p_t5_dynamic",
        Wrap(m, ["input_ids", "attention_mask"]),
        tokens(2),
        ["input_ids", "attention_mask"],
        ["last_hidden_state"],
        17,
        TOK(IDS_MASK),
        "T5 encoder dynamic",
        dynamic=True,
    )


def mpnet_dyn128():
    global SEQ
    old, SEQ = SEQ, 128
    try:
        return hf_text(
            "p_mpnet_st128",
            t.MPNetModel,
            t.MPNetConfig,
            2,
            14,
            "MPNet sentence-transformers 128 tokens",
            dict(max_position_embeddings=130, relative_attention_num_buckets=32),
            post=mean_norm,
            outname="sentence_embedding",
            dynamic=True,
        )
    finally:
        SEQ = old


def modernbert_dynamo():
    return hf_text(
        "p_modernbert_dynamo18",
        t.ModernBertModel,
        t.ModernBertConfig,
        2,
        18,
        "ModernBERT dynamo",
        dict(max_position_embeddings=64, global_attn_every_n_layers=2, local_attention=8, pad_token_id=0),
        dynamo=True,
    )


def bert_ort_sdpa():
    e = hf_text(
        "p_bert_ort_fused_sdpa",
        t.BertModel,
        t.BertConfig,
        3,
        14,
        "BERT (sdpa) + onnxruntime optimizer",
        dict(max_position_embeddings=64),
        dynamic=True,
    )
    from onnxruntime.transformers import optimizer

    m = optimizer.optimize_model(
        str(OUT / e["file"]), model_type="bert", num_heads=4, hidden_size=64, opt_level=1
    )
    m.save_model_to_file(str(OUT / e["file"]))
    return e


def t5b():
    return t5("p_t5b", 8, "T5 encoder dkv8")


ALL += [
    t5b,
    bert_ort_sdpa,
    bert_ort_opt,
    bert_dynq,
    bert_op11,
    clip_dynamo,
    t5_dyn,
    mpnet_dyn128,
    modernbert_dynamo,
]
if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    only = sys.argv[1].split(",") if len(sys.argv) > 1 else None
    man = Path(sys.argv[2]) if len(sys.argv) > 2 else OUT / "zoo.json"
    models = json.loads(man.read_text())["models"] if man.exists() else []
    for f in ALL:
        if only and f.__name__ not in only:
            continue
        try:
            e = f()
            models = [m for m in models if m["name"] != e["name"]] + [e]
            print("OK", e["name"], (OUT / e["file"]).stat().st_size / 1e6, "MB", flush=True)
        except Exception as ex:
            print("FAIL", f.__name__, type(ex).__name__, str(ex)[:300], flush=True)
    models.sort(key=lambda m: m["name"])
    man.write_text(json.dumps({"format": 1, "models": models}, indent=1))
