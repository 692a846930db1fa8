"""Issue 12 probe round 20k: decoders with a KV cache and seq2seq decoders, as optimum exports them for edge
(``--out benchmarks/.zoo/probe20k``, not committed).

optimum-onnx 0.1.0 pins transformers < 4.58, so the graphs are written here the way its model patchers write
them, with transformers 5.24's own modeling code (small seeded configs, no download; norm affine parameters given
spread), ``torch.onnx.export(dynamo=False)`` at opset 17:

- decoder-only, optimum's ``decoder_with_past`` (``input_ids`` [B, 1], ``attention_mask`` [B, past + 1],
  ``position_ids`` [B, 1], ``past_key_values.N.key / value`` [B, kv_heads, past, head_dim] in; ``logits`` [B, 1, V]
  and ``present.N.key / value`` (the past concatenated with the new keys) out, optimum's dynamic axes, fixed by
  ``--input-shape``): GPT-2, Llama / SmolLM (RoPE, RMSNorm, SwiGLU, tied embeddings), Qwen2 (GQA), Phi-3 (fused
  qkv / gate-up), Gemma (GeGLU, scaled embeddings, tied); the no-past prefill form at 8 tokens (GPT-2, Llama);
  the merged form (an ``If`` on ``use_cache_branch`` choosing between the two graphs, as optimum's
  ``merge_decoders`` writes it); variants: SmolLM's 49152-token vocabulary (tied), Llama with left-padded prompts
  (batched generation: mask zeros in the past), Llama / Qwen2 (and the Whisper / T5 steps) by ``dynamo=True`` at
  18; onnxruntime-genai 0.18's model builder on the same seeded Llama / Qwen2 (com.microsoft GroupQueryAttention;
  Qwen2 also at ``-p int4``: MatMulNBits; Phi-3's small config does not build there);
- seq2seq decoders: Whisper (tiny config) with cross-attention over ``encoder_hidden_states`` without past and
  with past (self and cross keys / values in, self ``present`` out), T5 (relative position bias), BART and Marian
  with past.

Data (``arrays``, stored beside each model): token ids in range; the past is real: the same seeded model run on a
7-token prefix (the prefill), its cache stored as the step's ``past_key_values.*``, the 8th token the step's
``input_ids``; the encoder states are the seeded encoder's on log-mel features of synthetic speech (Whisper) or
token ids (T5 / BART / Marian).

    python benchmarks/zoo/probe_kvcache.py [--only a,b]          # -> benchmarks/.zoo/probe20k/ + zoo.json
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe20k/zoo.json --no-shared --workers 1 --json r.json
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
from probe_vision_hf import SAMPLES, Probe, build, eager, t  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe20k"
SEED = 20200
VOCAB = 4096
PAST = 7  # tokens the decoder has seen when the step runs
PREFILL = 8
ENC_LEN = 24  # encoder positions (T5 / BART / Marian source tokens)
LAYERS = 2


def _seeded(make):
    """The same weights every time (the step model and its data builder each build one)."""

    def build_() -> nn.Module:
        torch.manual_seed(SEED)
        m = make()
        spread(m, SEED)
        return m.eval()

    return build_


BIG_VOCAB = 49152  # SmolLM's


def dec_cfgs() -> dict:
    base = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
                num_attention_heads=4, max_position_embeddings=128)  # fmt: skip
    return {
        "gpt2": lambda: t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=LAYERS, n_head=4, n_positions=128),
        "llama": lambda: t.LlamaConfig(**base, num_key_value_heads=4, tie_word_embeddings=True),
        "qwen2": lambda: t.Qwen2Config(**base, num_key_value_heads=2, tie_word_embeddings=False),
        "phi3": lambda: t.Phi3Config(**base, num_key_value_heads=4, pad_token_id=0),
        "gemma": lambda: t.GemmaConfig(**base, num_key_value_heads=1, head_dim=16),
        "smollm": lambda: t.LlamaConfig(
            **dict(base, vocab_size=BIG_VOCAB), num_key_value_heads=2, tie_word_embeddings=True
        ),  # fmt: skip
    }


CAUSAL = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
          "phi3": "Phi3ForCausalLM", "gemma": "GemmaForCausalLM", "smollm": "LlamaForCausalLM"}  # fmt: skip


def causal_lm(arch: str):
    return _seeded(lambda: getattr(t, CAUSAL[arch])(eager(dec_cfgs()[arch]())))


def kv_heads(arch: str) -> int:
    c = dec_cfgs()[arch]()
    return getattr(c, "num_key_value_heads", None) or c.num_attention_heads


def past_names(layers: int = LAYERS) -> list[str]:
    return [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]


def present_names(layers: int = LAYERS) -> list[str]:
    return [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]


def _dyn_cache(kv) -> object:
    c = t.DynamicCache()
    for i in range(len(kv) // 2):
        c.update(kv[2 * i], kv[2 * i + 1], i)
    return c


def _present(cache) -> list[torch.Tensor]:
    out = []
    for layer in cache.layers:
        out += [layer.keys, layer.values]
    return out


class DecoderWithPast(nn.Module):
    """optimum's decoder_with_past_model.onnx (text-generation-with-past)."""

    def __init__(self, arch: str) -> None:
        super().__init__()
        self.m = causal_lm(arch)()

    def forward(self, input_ids, attention_mask, position_ids, *kv):
        r = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                   past_key_values=_dyn_cache(kv), use_cache=True)  # fmt: skip
        return (r.logits, *_present(r.past_key_values))


class DecoderPrefill(nn.Module):
    """optimum's decoder_model.onnx: the prompt without past -> logits and the first present."""

    def __init__(self, arch: str) -> None:
        super().__init__()
        self.m = causal_lm(arch)()

    def forward(self, input_ids, attention_mask, position_ids):
        r = self.m(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True
        )
        return (r.logits, *_present(r.past_key_values))


def text_ids(count: int, seed: int, length: int, vocab: int = VOCAB) -> np.ndarray:
    """Token ids in range (the tokens data kind's bodies, no padding: a prompt)."""
    data = {"type": "tokens", "vocab_size": vocab, "roles": {"input_ids": "ids"}}
    specs = [{"name": "input_ids", "shape": [1, length + 4], "dtype": "int64"}]
    ids = zoo_data.token_arrays(data, specs, count, seed)["input_ids"]
    rng = np.random.default_rng(seed)
    body = np.where(ids > 0, ids, rng.integers(5, vocab, ids.shape))  # no padding inside a prompt
    return body[:, :length].astype(np.int64)


def prefill_arrays(arch: str):
    def make(count: int, seed: int, photos) -> dict[str, np.ndarray]:
        ids = text_ids(count, seed, PREFILL)
        pos = np.broadcast_to(np.arange(PREFILL, dtype=np.int64), ids.shape).copy()
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": pos}

    return make


def past_arrays(arch: str, padded: bool = False):
    """The real past: the seeded model run on a PAST-token prompt; the step feeds the next token. ``padded``: as
    batched generation feeds a short prompt, every other sample left-padded by 1-4 tokens (mask 0 there; position
    ids ``cumsum(mask) - 1`` as ``generate`` computes them)."""

    def make(count: int, seed: int, photos) -> dict[str, np.ndarray]:
        m = causal_lm(arch)()
        ids = torch.from_numpy(text_ids(count, seed, PAST + 1, m.config.vocab_size))
        rng = np.random.default_rng(seed + 3)
        rows: dict[str, list[np.ndarray]] = {n: [] for n in ["input_ids", "attention_mask", "position_ids", *past_names()]}  # fmt: skip
        with torch.no_grad():
            for i in range(count):
                mask = torch.ones((1, PAST + 1), dtype=torch.int64)
                if padded and i % 2:
                    mask[:, : int(rng.integers(1, 5))] = 0
                pos = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
                r = m(input_ids=ids[i : i + 1, :PAST], attention_mask=mask[:, :PAST], position_ids=pos[:, :PAST],
                      use_cache=True)  # fmt: skip
                rows["input_ids"].append(ids[i : i + 1, PAST:].numpy())
                rows["attention_mask"].append(mask.numpy())
                rows["position_ids"].append(pos[:, PAST:].numpy())
                for n, v in zip(past_names(), _present(r.past_key_values), strict=True):
                    rows[n].append(v.numpy())
        return {k: np.concatenate(v) for k, v in rows.items()}

    return make


def arrays(name: str) -> dict:
    return {"type": "arrays", "file": f"{name}.samples.npz"}


def dec_inputs(arch: str) -> list[tuple[str, list[int], str]]:
    kv = [(n, [1, kv_heads(arch), PAST, 16], "float32") for n in past_names()]
    return [("input_ids", [1, 1], "int64"), ("attention_mask", [1, PAST + 1], "int64"),
            ("position_ids", [1, 1], "int64"), *kv]  # fmt: skip


PAST_DYN = {
    "input_ids": {0: "batch_size", 1: "sequence_length"},
    "attention_mask": {0: "batch_size", 1: "past_sequence_length + 1"},
    "position_ids": {0: "batch_size", 1: "sequence_length"},
    **{n: {0: "batch_size", 2: "past_sequence_length"} for n in past_names()},
}


def past_probe(arch: str, family: str, opset: int = 17, name: str = "", padded: bool = False, **kw) -> Probe:
    name = name or f"k_{arch}_past"
    return Probe(name, f"{family}, decoder_with_past (one step over a {PAST}-token past)", "sequence", opset,
                 lambda: DecoderWithPast(arch), dec_inputs(arch), ["logits", *present_names()], arrays(name),
                 arrays=past_arrays(arch, padded), dynamic_axes=None if kw else PAST_DYN, **kw)  # fmt: skip


def prefill_probe(arch: str, family: str) -> Probe:
    name = f"k_{arch}_prefill"
    ids = [(n, [1, PREFILL], "int64") for n in ("input_ids", "attention_mask", "position_ids")]
    return Probe(name, f"{family}, decoder without past (prefill of {PREFILL} tokens)", "sequence", 17,
                 lambda: DecoderPrefill(arch), ids, ["logits", *present_names()], arrays(name),
                 arrays=prefill_arrays(arch),
                 dynamic_axes={n: {0: "batch_size", 1: "sequence_length"} for n, _, _ in ids})  # fmt: skip


# ------------------------------------------------------------------------------------------------ seq2seq


def s2s_cfgs() -> dict:
    common = dict(vocab_size=VOCAB, d_model=64, encoder_layers=LAYERS, decoder_layers=LAYERS,
                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
                  max_position_embeddings=128)  # fmt: skip
    return {
        "whisper": lambda: t.WhisperConfig(
            **common,
            num_mel_bins=80,
            max_source_positions=50,
            max_target_positions=64,
            pad_token_id=VOCAB - 1,
            bos_token_id=VOCAB - 2,
            eos_token_id=VOCAB - 2,
            decoder_start_token_id=VOCAB - 3,
        ),  # fmt: skip
        "bart": lambda: t.BartConfig(**common),
        "marian": lambda: t.MarianConfig(**common, pad_token_id=VOCAB - 1, decoder_start_token_id=VOCAB - 1),
        "t5": lambda: t.T5Config(
            vocab_size=VOCAB,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=LAYERS,
            num_decoder_layers=LAYERS,
            num_heads=4,
            relative_attention_num_buckets=16,
            relative_attention_max_distance=32,
            feed_forward_proj="gated-gelu",
            tie_word_embeddings=False,
            decoder_start_token_id=0,
        ),  # fmt: skip
    }


S2S = {"whisper": "WhisperForConditionalGeneration", "bart": "BartForConditionalGeneration",
       "marian": "MarianMTModel", "t5": "T5ForConditionalGeneration"}  # fmt: skip


def s2s(arch: str):
    return _seeded(lambda: getattr(t, S2S[arch])(eager(s2s_cfgs()[arch]())))


def enc_len(arch: str) -> int:
    return 50 if arch == "whisper" else ENC_LEN


def encoder_states(arch: str, m, count: int, seed: int) -> torch.Tensor:
    """The seeded encoder's states: on log-mel features of synthetic speech (Whisper) or on token ids."""
    enc = m.get_encoder()
    with torch.no_grad():
        if arch == "whisper":
            data = {"type": "logmel", "sample_rate": 16000, "hop_ms": 10, "window_ms": 25}
            x = zoo_data.logmel_array(data, [1, 80, 100], count, seed)
            return torch.cat([enc(input_features=torch.from_numpy(x[i : i + 1])).last_hidden_state for i in range(count)])  # fmt: skip
        ids = torch.from_numpy(text_ids(count, seed + 1, ENC_LEN))
        return torch.cat([enc(input_ids=ids[i : i + 1]).last_hidden_state for i in range(count)])


def s2s_past_names(layers: int = LAYERS) -> list[str]:
    return [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("decoder.key", "decoder.value", "encoder.key", "encoder.value")]  # fmt: skip


def s2s_present_names(layers: int = LAYERS) -> list[str]:
    return [f"present.{i}.decoder.{k}" for i in range(layers) for k in ("key", "value")]


class Seq2SeqDecoder(nn.Module):
    """optimum's decoder_model.onnx: decoder ids + encoder states -> logits (no cache)."""

    def __init__(self, arch: str) -> None:
        super().__init__()
        self.m = s2s(arch)()

    def forward(self, input_ids, encoder_hidden_states):
        return self.m(
            decoder_input_ids=input_ids, encoder_outputs=(encoder_hidden_states,), use_cache=True
        ).logits


class Seq2SeqDecoderPast(nn.Module):
    """optimum's decoder_with_past_model.onnx: one token, self and cross keys / values of every layer in; logits
    and the self-attention's present out (the cross keys / values are the past's)."""

    def __init__(self, arch: str) -> None:
        super().__init__()
        self.m = s2s(arch)()

    def forward(self, input_ids, *kv):
        self_c, cross_c = t.DynamicCache(), t.DynamicCache()
        for i in range(LAYERS):
            self_c.update(kv[4 * i], kv[4 * i + 1], i)
            cross_c.update(kv[4 * i + 2], kv[4 * i + 3], i)
        cache = t.EncoderDecoderCache(self_c, cross_c)
        for i in range(LAYERS):
            cache.is_updated[i] = True
        d = self.m.config.d_model
        states = kv[2].new_zeros(kv[2].shape[0], kv[2].shape[2], d)  # unread: the cross cache is updated
        r = self.m(
            decoder_input_ids=input_ids, encoder_outputs=(states,), past_key_values=cache, use_cache=True
        )
        return (r.logits, *_present(r.past_key_values.self_attention_cache))


def s2s_arrays(arch: str):
    def make(count: int, seed: int, photos) -> dict[str, np.ndarray]:
        m = s2s(arch)()
        ids = text_ids(count, seed, PREFILL)
        ids[:, 0] = m.config.decoder_start_token_id
        return {"input_ids": ids, "encoder_hidden_states": encoder_states(arch, m, count, seed).numpy()}

    return make


def s2s_past_arrays(arch: str):
    def make(count: int, seed: int, photos) -> dict[str, np.ndarray]:
        m = s2s(arch)()
        states = encoder_states(arch, m, count, seed)
        ids = torch.from_numpy(text_ids(count, seed, PAST + 1))
        ids[:, 0] = m.config.decoder_start_token_id
        rows: dict[str, list[np.ndarray]] = {n: [] for n in ["input_ids", *s2s_past_names()]}
        with torch.no_grad():
            for i in range(count):
                r = m(
                    decoder_input_ids=ids[i : i + 1, :PAST],
                    encoder_outputs=(states[i : i + 1],),
                    use_cache=True,
                )
                c = r.past_key_values
                rows["input_ids"].append(ids[i : i + 1, PAST:].numpy())
                for layer in range(LAYERS):
                    sl, cl = c.self_attention_cache.layers[layer], c.cross_attention_cache.layers[layer]
                    for k, v in zip(("decoder.key", "decoder.value", "encoder.key", "encoder.value"),
                                    (sl.keys, sl.values, cl.keys, cl.values), strict=True):  # fmt: skip
                        rows[f"past_key_values.{layer}.{k}"].append(v.numpy())
        return {k: np.concatenate(v) for k, v in rows.items()}

    return make


def s2s_probe(arch: str, family: str) -> Probe:
    name = f"k_{arch}_decoder"
    return Probe(name, f"{family} decoder without past (ids + encoder states)", "sequence", 17,
                 lambda: Seq2SeqDecoder(arch),
                 [("input_ids", [1, PREFILL], "int64"), ("encoder_hidden_states", [1, enc_len(arch), 64], "float32")],
                 ["logits"], arrays(name), arrays=s2s_arrays(arch),
                 dynamic_axes={"input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
                               "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length"}})  # fmt: skip


def s2s_past_probe(arch: str, family: str, **kw) -> Probe:
    name = f"k_{arch}_decoder_past" + ("_dynamo" if kw else "")
    kv = [(n, [1, 4, PAST if "decoder." in n else enc_len(arch), 16], "float32") for n in s2s_past_names()]
    dyn = {n: {0: "batch_size", 2: "past_decoder_sequence_length" if "decoder." in n else "encoder_sequence_length"}
           for n in s2s_past_names()}  # fmt: skip
    return Probe(name, f"{family} decoder with past (self + cross keys / values)", "sequence", 18 if kw else 17,
                 lambda: Seq2SeqDecoderPast(arch), [("input_ids", [1, 1], "int64"), *kv],
                 ["logits", *s2s_present_names()], arrays(name), arrays=s2s_past_arrays(arch),
                 dynamic_axes=None if kw else {"input_ids": {0: "batch_size"}, **dyn}, **kw)  # fmt: skip


# ------------------------------------------------------------------------------------------------ merged


def merge_decoders(out: Path, name: str, no_past: Path, with_past: Path) -> dict:
    """optimum's ``merge_decoders``: one graph with the step's inputs plus ``use_cache_branch`` (bool [1]); an
    ``If`` whose then branch is the with-past graph and else branch the no-past graph (which reads no past)."""
    import onnx
    from onnx import helper

    a, b = onnx.load(str(no_past)), onnx.load(str(with_past))

    def branch(m, tag: str, outs):
        g = m.graph
        ren = {i.name: f"{tag}/{i.name}" for i in g.initializer}
        for n in g.node:
            for o in n.output:
                ren.setdefault(o, f"{tag}/{o}")
        nodes = []
        for n in g.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = f"{tag}/{n.name}"
            c.input[:] = [ren.get(i, i) for i in n.input]
            c.output[:] = [ren.get(o, o) for o in n.output]
            nodes.append(c)
        inits = []
        for i in g.initializer:
            c = onnx.TensorProto()
            c.CopyFrom(i)
            c.name = ren[i.name]
            inits.append(c)
        bo = [helper.make_tensor_value_info(ren[o], onnx.TensorProto.FLOAT, [None] * rank[o]) for o in outs]
        return helper.make_graph(nodes, f"{tag}_branch", [], bo, inits)

    outs = [o.name for o in b.graph.output]
    rank = {o.name: len(o.type.tensor_type.shape.dim) for o in b.graph.output}
    then_g, else_g = branch(b, "with_past", outs), branch(a, "no_past", outs)
    flag = helper.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1])
    node = helper.make_node(
        "If", ["use_cache_branch"], outs, name="optimum::if", then_branch=then_g, else_branch=else_g
    )
    graph = helper.make_graph([node], "merged", [*b.graph.input, flag],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, [None] * rank[o]) for o in outs])  # fmt: skip
    merged = helper.make_model(graph, opset_imports=b.opset_import, ir_version=b.ir_version)
    onnx.checker.check_model(merged)
    path = out / f"{name}.onnx"
    onnx.save(merged, str(path))
    return {"ops": sorted({"If", *(n.op_type for n in b.graph.node)})}


def probes() -> list[Probe]:
    return [
        past_probe("gpt2", "GPT-2"),
        prefill_probe("gpt2", "GPT-2"),
        past_probe("llama", "Llama / SmolLM (RoPE, RMSNorm, SwiGLU, tied embeddings)"),
        prefill_probe("llama", "Llama / SmolLM"),
        past_probe("qwen2", "Qwen2 (GQA: 4 query heads over 2 KV heads)"),
        past_probe("phi3", "Phi-3 (fused qkv and gate-up projections)"),
        past_probe("gemma", "Gemma (multi-query: 1 KV head, GeGLU, scaled embeddings, tied)"),
        s2s_probe("whisper", "Whisper (tiny config)"),
        s2s_past_probe("whisper", "Whisper (tiny config)"),
        s2s_past_probe("t5", "T5 (relative position bias, gated-GELU)"),
        s2s_past_probe("bart", "BART"),
        s2s_past_probe("marian", "Marian (sinusoidal positions)"),
        past_probe(
            "llama",
            "Llama, batched generation (left-padded prompts: mask zeros in the past)",
            name="k_llama_past_padded",
            padded=True,
        ),
        past_probe("smollm", "SmolLM-135M's vocabulary (49152, tied) and GQA 4/2"),
        past_probe(
            "llama",
            "Llama, dynamo=True",
            opset=18,
            name="k_llama_past_dynamo",
            export_kwargs={"dynamo": True, "external_data": False},
        ),
        past_probe(
            "qwen2",
            "Qwen2, dynamo=True",
            opset=18,
            name="k_qwen2_past_dynamo",
            export_kwargs={"dynamo": True, "external_data": False},
        ),
        s2s_past_probe(
            "whisper", "Whisper, dynamo=True", export_kwargs={"dynamo": True, "external_data": False}
        ),
        s2s_past_probe("t5", "T5, dynamo=True", export_kwargs={"dynamo": True, "external_data": False}),
    ]


def build_merged(out: Path) -> dict | None:
    """``k_llama_merged``: the Llama prefill and step graphs merged (needs both built first)."""
    no_past, with_past = out / "k_llama_prefill.onnx", out / "k_llama_past.onnx"
    if not (no_past.exists() and with_past.exists()):
        return None
    import json

    manifest = json.loads((out / "zoo.json").read_text())
    step = next(e for e in manifest["models"] if e["name"] == "k_llama_past")
    info = merge_decoders(out, "k_llama_merged", no_past, with_past)
    src = out / step["data"]["file"]
    stored = dict(np.load(src))
    stored["use_cache_branch"] = np.ones((len(stored["input_ids"]), 1), bool)
    np.savez(out / "k_llama_merged.samples.npz", **stored)
    e = dict(step, name="k_llama_merged", file="k_llama_merged.onnx", data=arrays("k_llama_merged"),
             family="Llama / SmolLM, optimum's merged decoder (If on use_cache_branch)", ops=info["ops"],
             inputs=[*step["inputs"], {"name": "use_cache_branch", "shape": [1], "dtype": "bool"}])  # fmt: skip
    e["extra_args"] = [*step.get("extra_args", [])]
    return e


#: name -> (architecture, the builder's precision)
GENAI = {
    "k_llama_genai": ("llama", "fp32"),
    "k_qwen2_genai": ("qwen2", "fp32"),
    "k_qwen2_genai_int4": ("qwen2", "int4"),
}


def build_genai(out: Path, name: str) -> dict:
    """onnxruntime-genai 0.18's model builder (``python -m onnxruntime_genai.models.builder -p fp32 -e cpu``, in
    the probe's venv: ``pip install --no-deps onnxruntime-genai``) on the seeded model saved with a word-level
    tokenizer: com.microsoft GroupQueryAttention (packed QKV, rotary from cos / sin caches, ``seqlens_k`` from
    the mask), SkipSimplifiedLayerNormalization; inputs ``input_ids``, ``attention_mask``, ``past_key_values.*``
    (no position ids); the external weights are folded into the one file."""
    import shutil
    import subprocess
    import tempfile

    import onnx
    from tokenizers import Tokenizer, models, pre_tokenizers

    arch, precision = GENAI[name]
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir, onnx_dir = Path(tmp) / "hf", Path(tmp) / "onnx"
        m = causal_lm(arch)()
        m.save_pretrained(hf_dir)
        vocab = {f"t{i}": i for i in range(m.config.vocab_size)}
        tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
        tk.pre_tokenizer = pre_tokenizers.Whitespace()
        t.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", bos_token="t1", eos_token="t2").save_pretrained(hf_dir)  # fmt: skip
        cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", arch, "-i", str(hf_dir), "-o",
               str(onnx_dir), "-p", precision, "-e", "cpu", "-c", str(Path(tmp) / "cache")]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True)
        proto = onnx.load(str(onnx_dir / "model.onnx"))
        onnx.save(proto, str(out / f"{name}.onnx"))
        shutil.copy(onnx_dir / "genai_config.json", out / f"{name}.genai_config.json")
    stored = past_arrays(arch)(SAMPLES, SEED + 50, None)
    stored.pop("position_ids")
    np.savez(out / f"{name}.samples.npz", **stored)
    inputs = [{"name": i.name, "shape": list(stored[i.name].shape[1:]) if i.name.startswith("past") else [1, stored[i.name].shape[1]],
               "dtype": "int64" if i.type.tensor_type.elem_type == 7 else "float32"} for i in proto.graph.input]  # fmt: skip
    for i in inputs:
        if i["name"].startswith("past"):
            i["shape"] = [1, *i["shape"]]
    return {"name": name, "file": f"{name}.onnx", "family": f"{arch}, onnxruntime-genai model builder ({precision}, GroupQueryAttention)",
            "kind": "sequence", "opset": next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
            "inputs": inputs, "outputs": [o.name for o in proto.graph.output], "data": arrays(name), "size": "reduced",
            "params": int(sum(q.numel() for q in m.parameters())), "ops": sorted({n.op_type for n in proto.graph.node}),
            "note": "", "seed": SEED,
            "extra_args": [a for i in inputs for a in ("--input-shape", f"{i['name']}={','.join(map(str, i['shape']))}")]}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", help="comma-separated model names (k_llama_merged: from the two Llama graphs)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    assert SAMPLES >= 48
    export.export_probes(probes(), lambda i, p: build(p, args.out, None, SEED + i), args.out, args.only)
    for name in GENAI:
        if not args.only or name in args.only.split(","):
            try:
                e = build_genai(args.out, name)
            except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
                print(f"{name}: EXPORT FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            zoo_data.merge_manifest(args.out, [e])
            print(f"{name}: {e['ops']}", flush=True)
    if not args.only or "k_llama_merged" in args.only.split(","):
        e = build_merged(args.out)
        if e is not None:
            zoo_data.merge_manifest(args.out, [e])
            print(f"k_llama_merged: {e['ops']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
