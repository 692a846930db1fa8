"""Issue 12 round 11t probe: transformers as the Hugging Face Hub ships their ONNX variant files.

    python benchmarks/zoo/probe_hub_variants.py [--only a,b] [--variants fp32,fp16,...]
        # -> benchmarks/.zoo/probe11t/ (git-ignored) + zoo.json
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe11t/zoo.json --no-shared --workers 1 \
        --calib 8 --eval 8 --json r.json

The ``Xenova/*`` and ``onnx-community/*`` repositories ship one ``onnx/`` folder per model, every file made from
one export by transformers.js' ``scripts/quantize.py`` with onnxruntime's and onnxconverter-common's tools. Each
small seeded model (random tiny configs, LayerNorm affine parameters spread, BatchNorm statistics from the photos;
``torch.onnx.export`` at opset 14/17 with optimum's dynamic axes) is written as those files:

- ``fp32``: ``model.onnx``, the export;
- ``fp16``: ``model_fp16.onnx``, onnxconverter-common ``convert_float_to_float16(keep_io_types=True)`` (as
  transformers.js writes it: float16 weights and compute, float32 I/O); ``fp16io``: ``keep_io_types=False``
  (float16 inputs and outputs, as older exports and ``onnx-community`` fp16 files have);
- ``quantized``: ``model_quantized.onnx``, ``quantize_dynamic`` uint8 weights, per-channel, reduce_range (the
  script's defaults); ``int8``: ``model_int8.onnx``, int8 weights (Conv excluded: no int8 ConvInteger kernel);
  ``uint8``: ``model_uint8.onnx``, uint8 weights per tensor;
- ``q4``: ``model_q4.onnx``, ``MatMulNBitsQuantizer`` (block 32, symmetric); ``q4a``: asymmetric (zero points);
  ``q4f16``: the fp16 model through ``MatMulNBitsQuantizer`` (float16 scales);
- ``bnb4``: ``model_bnb4.onnx``, ``MatMulBnb4Quantizer`` NF4 (block 64); ``bnb4fp4``: FP4;
- ``q4emb``: ``MatMulNBitsQuantizer`` with ``Gather`` among its op types (the embedding tables as com.microsoft
  GatherBlockQuantized, int4 blocks of 32), on the export converted to opset 21 first (the quantizer writes
  int4 tensors and sets opset 21 without converting the graph's ops).

Models: a sentence encoder (all-MiniLM style BERT, three int64 inputs, mean pooling in the graph), a DistilBERT
sequence classifier, ViT, DETR (ResNet from a random config), Whisper encoder (log-mel [1, 80, 100]), SegFormer,
CLIP text and vision towers with their projections. Needs ``onnxconverter-common`` (pip, into the probe's venv).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # noqa: E402
import export  # noqa: E402
import probe_transformers2 as p2  # noqa: E402
import zoo_data  # noqa: E402
from export import Spec  # noqa: E402

t = p2.t
OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe11t"
SEED = 1111
VARIANTS = (
    "fp32",
    "fp16",
    "fp16io",
    "quantized",
    "int8",
    "uint8",
    "q4",
    "q4a",
    "q4f16",
    "bnb4",
    "bnb4fp4",
    "q4emb",
)


class MeanPooled(nn.Module):
    """sentence-transformers' mean pooling over the mask, in the graph (``sentence_embedding``)."""

    def __init__(self, m: nn.Module):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.m(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        mask = attention_mask.unsqueeze(-1).to(h.dtype)
        return (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def minilm(full: bool) -> nn.Module:
    cfg = t.BertConfig(vocab_size=p2.VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=128, max_position_embeddings=64)  # fmt: skip
    cfg._attn_implementation = "eager"
    m = t.BertModel(cfg, add_pooling_layer=False)
    p2.spread(m, SEED)
    return MeanPooled(m)


def specs() -> list[Spec]:
    ids3, ids2 = p2.IDS3, p2.IDS2
    dyn = {n: {0: "batch_size", 1: "sequence_length"} for n in ids3}
    return [
        Spec("minilm", "all-MiniLM-style sentence encoder (BERT, mean pooling)", "encoder", 14, minilm,
             p2.tokens(ids3), ["sentence_embedding"], data=p2.tok_data(ids3), dynamic_axes=dyn),
        p2.text("distilbert_cls", "DistilBERT sequence classifier", "DistilBertForSequenceClassification",
                "DistilBertConfig", ids2, 14,
                dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64, num_labels=3),
                outs=("logits",), kind="classifier"),
        p2.vision("vit", "ViT image classifier (HF)", "ViTForImageClassification", "ViTConfig", 64, 14,
                  dict(p2.SMALL, image_size=64, patch_size=8, num_labels=10)),
        p2.vision("detr", "DETR (ResNet from a random config)", "DetrForObjectDetection", "DetrConfig", 64, 14,
                  dict(use_timm_backbone=False, use_pretrained_backbone=False,
                       backbone_config=t.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 48, 64],
                                                      depths=[1, 1, 1, 1], layer_type="basic",
                                                      out_features=["stage4"]),
                       d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_queries=20,
                       num_labels=8),
                  outs=("logits", "pred_boxes"), kind="detector"),
        Spec("whisper_encoder", "Whisper encoder", "encoder", 17,
             p2.hf("WhisperModel", "WhisperConfig", ["input_features"], ["last_hidden_state"], encoder=True,
                   d_model=64, encoder_layers=2, decoder_layers=1, encoder_attention_heads=4,
                   decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80,
                   max_source_positions=50, vocab_size=p2.VOCAB, pad_token_id=0, bos_token_id=1,
                   eos_token_id=2, decoder_start_token_id=1),
             lambda full: [("input_features", [1, 80, 100])], ["last_hidden_state"], data=dict(p2.LOGMEL)),
        p2.vision("segformer", "SegFormer (MiT, all-MLP decoder)", "SegformerForSemanticSegmentation",
                  "SegformerConfig", 64, 14,
                  dict(num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1],
                       hidden_sizes=[16, 32, 48, 64], num_attention_heads=[1, 2, 2, 4], decoder_hidden_size=64,
                       num_labels=6),
                  kind="segmenter"),
        p2.text("clip_text", "CLIP text tower with projection", "CLIPTextModelWithProjection", "CLIPTextConfig",
                ids2, 14, dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                               max_position_embeddings=64, projection_dim=32, eos_token_id=2),
                outs=("text_embeds",)),
        p2.vision("clip_vision", "CLIP vision tower with projection", "CLIPVisionModelWithProjection",
                  "CLIPVisionConfig", 64, 14,
                  dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       image_size=64, patch_size=8, projection_dim=32),
                  outs=("image_embeds",), kind="encoder"),
    ]  # fmt: skip


# ------------------------------------------------------------------------------- the variant files


def _fp16(proto, keep_io_types: bool):
    """onnxconverter-common's float16 model, made loadable as the Hub's files are (transformers.js converts with
    its own patched copy of the converter): 1.16 keeps the export's own ``Cast(to=float)`` nodes (transformers'
    eager attention casts its Softmax to float32 and back) and their value_info, so float32 meets float16 at the
    next MatMul and onnxruntime refuses the file. Those casts inside the graph become float16 (the graph's output
    casts of ``keep_io_types`` stay); a float32 input it left read directly (CLIP's pixel_values by the patch
    Conv) gets its Cast to float16; and the value_info is inferred again."""
    import onnx
    from onnxconverter_common import float16

    converted = float16.convert_float_to_float16(proto, keep_io_types=keep_io_types)
    outputs = {o.name for o in converted.graph.output}
    for node in converted.graph.node:
        if node.op_type == "Cast" and not set(node.output) & outputs:
            for a in node.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.FLOAT:
                    a.i = onnx.TensorProto.FLOAT16
    for i in converted.graph.input:
        readers = [
            n for n in converted.graph.node if i.name in n.input and n.op_type not in ("Cast", "Shape")
        ]
        if i.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and readers:
            cast = onnx.helper.make_node("Cast", [i.name], [i.name + "_fp16"], to=onnx.TensorProto.FLOAT16)
            for n in readers:
                n.input[:] = [i.name + "_fp16" if x == i.name else x for x in n.input]
            converted.graph.node.insert(0, cast)
    del converted.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(converted)


def _dynamic(src: Path, dst: Path, weight: str, per_channel: bool, reduce_range: bool, no_conv: bool) -> None:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    ops = sorted(
        {n.op_type for n in onnx.load(str(src)).graph.node} & {"MatMul", "Conv", "Gather", "Attention"}
    )
    if no_conv:
        ops = [o for o in ops if o != "Conv"]
    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QInt8 if weight == "int8" else QuantType.QUInt8,
        per_channel=per_channel,
        reduce_range=reduce_range,
        op_types_to_quantize=ops,
        extra_options={"EnableSubgraph": True, "MatMulConstBOnly": True},
    )


def _q4(proto, symmetric: bool, gather: bool = False):
    from onnxruntime.quantization import matmul_nbits_quantizer as nbits

    if not gather:
        q = nbits.MatMulNBitsQuantizer(
            proto, block_size=32, is_symmetric=symmetric, op_types_to_quantize=("MatMul",)
        )
    else:
        import onnx.version_converter

        config = nbits.DefaultWeightOnlyQuantConfig(
            block_size=32,
            is_symmetric=symmetric,
            op_types_to_quantize=("MatMul", "Gather"),
            quant_axes=(("MatMul", 0), ("Gather", 1)),
        )
        q = nbits.MatMulNBitsQuantizer(onnx.version_converter.convert_version(proto, 21), algo_config=config)
    q.process()
    return q.model.model


def _bnb4(proto, quant_type: int):
    from onnxruntime.quantization.matmul_bnb4_quantizer import MatMulBnb4Quantizer

    q = MatMulBnb4Quantizer(proto, quant_type=quant_type, block_size=64)
    q.process()
    return q.model.model


def write_variant(variant: str, base: Path, dst: Path) -> None:
    import onnx

    if variant == "fp32":
        onnx.save(onnx.load(str(base)), str(dst))
    elif variant in ("fp16", "fp16io"):
        onnx.save(_fp16(onnx.load(str(base)), variant == "fp16"), str(dst))
    elif variant in ("quantized", "int8", "uint8"):
        weight = "int8" if variant == "int8" else "uint8"
        _dynamic(base, dst, weight, variant == "quantized", variant == "quantized", variant == "int8")
    elif variant in ("q4", "q4a"):
        onnx.save(_q4(onnx.load(str(base)), variant == "q4"), str(dst))
    elif variant == "q4emb":
        onnx.save(_q4(onnx.load(str(base)), True, gather=True), str(dst))
    elif variant == "q4f16":
        onnx.save(_q4(_fp16(onnx.load(str(base)), True), True), str(dst))
    elif variant in ("bnb4", "bnb4fp4"):
        onnx.save(_bnb4(onnx.load(str(base)), 1 if variant == "bnb4" else 0), str(dst))
    else:
        raise ValueError(variant)


def variant_entry(base_entry: dict[str, Any], variant: str, path: Path) -> dict[str, Any]:
    import onnx

    proto = onnx.load(str(path))
    e = dict(base_entry)
    e["name"] = f"{base_entry['name']}_{variant}"
    e["file"] = path.name
    e["family"] = f"{base_entry['family']}, {variant}"
    e["ops"] = sorted({n.op_type for n in proto.graph.node})
    e["outputs"] = [o.name for o in proto.graph.output]
    e["note"] = f"Hub variant file {variant} of {base_entry['file']}"
    return e


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", help="comma-separated base model names")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variants")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(None, export.default_shared())
    torch.set_num_threads(2)
    wanted = set(args.only.split(",")) if args.only else None
    variants = args.variants.split(",")
    entries = []
    for i, spec in enumerate(specs()):
        if wanted and spec.name not in wanted:
            continue
        base_entry = p2.build(spec, args.out, photos, SEED + i)  # writes <name>.onnx
        base = args.out / base_entry["file"]
        for v in variants:
            dst = args.out / f"{spec.name}_{v}.onnx"
            try:
                write_variant(v, base, dst)
            except Exception as exc:  # a tool's failure is a finding of the probe, not of edgekit
                print(f"{spec.name}_{v}: NOT WRITTEN {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            entries.append(variant_entry(base_entry, v, dst))
            print(f"{entries[-1]['name']:28s} {dst.stat().st_size:>9,d} B {entries[-1]['ops']}")
        base.unlink()
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
