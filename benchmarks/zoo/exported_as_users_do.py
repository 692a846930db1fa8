"""Zoo members that exercise how users export and ship models, beside the architectures themselves.

    python benchmarks/zoo/exported_as_users_do.py            # reduced -> tests/zoo/models/ + zoo.json
    python benchmarks/zoo/exported_as_users_do.py --full     # full    -> benchmarks/.zoo/

- ``roberta_tiny_dynamic``: Hugging Face's RobertaModel from a small random config (no download), exported with
  dynamic batch and sequence axes as the transformers docs show: position ids from the cumsum of
  ``input_ids != pad``, the token-type lookup as GatherElements over the position table, no token_type_ids input.
  The entry fixes the dims with --input-shape.
- ``bert_ort_fused``: Hugging Face's BertModel (3 inputs, eager attention) exported with optimum's dynamic axes and
  names, then fused by onnxruntime's transformers optimizer as optimum's O2 does (the ``model_O2.onnx`` that
  sentence-transformers repositories ship): com.microsoft EmbedLayerNormalization, Attention (1-D mask_index),
  SkipLayerNormalization and BiasGelu at opset 14. The entry fixes the dims with --input-shape.
- ``mobilenet_v2_fp16``: torchvision's MobileNetV2 made float16 the way onnxconverter-common's
  ``convert_float_to_float16`` (keep_io_types=False) writes it: float16 weights, Constants and inputs/outputs.

Seeded weights; MobileNetV2's BatchNorm statistics from real photos (export.set_bn_statistics); LayerNorm affine
parameters given spread (fresh ones are 1 and 0).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # noqa: E402 - export.py beside this script
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "zoo"))  # noqa: E402

SEED = 4321
ROBERTA_SEQ = 16


def _hf_transformers():
    """Hugging Face's ``transformers`` (this folder's transformers.py shadows it while the script runs)."""
    here = str(Path(__file__).resolve().parent)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(here)]
    cached = sys.modules.pop("transformers", None)
    try:
        import transformers

        return transformers
    finally:
        sys.path[:] = saved
        if cached is not None and "transformers" not in sys.modules:
            sys.modules["transformers"] = cached


def export_roberta(path: Path, full: bool) -> dict[str, Any]:
    t = _hf_transformers()
    torch.manual_seed(SEED)
    kw = (
        dict(
            vocab_size=50265,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
        )
        if full
        else dict(
            vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
        )
    )
    config = t.RobertaConfig(**kw, max_position_embeddings=514 if full else 66, type_vocab_size=1)
    model = t.RobertaModel(config, add_pooling_layer=False).eval()
    gen = torch.Generator().manual_seed(SEED + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=gen))

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    seq = 128 if full else ROBERTA_SEQ
    ids = torch.randint(3, config.vocab_size, (1, seq), generator=gen)
    mask = torch.ones(1, seq, dtype=torch.long)
    mask[0, -4:], ids[0, -4:] = 0, config.pad_token_id
    names = ["input_ids", "attention_mask"]
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names} | {
        "last_hidden_state": {0: "batch", 1: "sequence"}
    }
    with torch.no_grad():
        torch.onnx.export(
            Encoder().eval(), (ids, mask), str(path), input_names=names, output_names=["last_hidden_state"],
            opset_version=14, dynamo=False, dynamic_axes=dynamic,
        )  # fmt: skip
    return {
        "name": path.stem,
        "file": path.name,
        "family": "RoBERTa (Hugging Face)",
        "kind": "encoder",
        "opset": 14,
        "inputs": [{"name": n, "shape": [1, seq], "dtype": "int64"} for n in names],
        "outputs": ["last_hidden_state"],
        "data": {
            "type": "tokens",
            "vocab_size": config.vocab_size,
            "roles": {"input_ids": "ids", "attention_mask": "mask"},
        },
        "extra_args": [a for n in names for a in ("--input-shape", f"{n}=1,{seq}")],
        "params": sum(p.numel() for p in model.parameters()),
        "note": "dynamic batch/sequence axes; cumsum position ids, GatherElements token types, Where mask",
        "seed": SEED,
    }


def export_bert_ort_fused(path: Path, full: bool) -> dict[str, Any]:
    t = _hf_transformers()
    from onnxruntime.transformers import optimizer

    torch.manual_seed(SEED)
    hidden, heads = (384, 12) if full else (64, 4)
    config = t.BertConfig(
        vocab_size=30522 if full else 1000, hidden_size=hidden, num_attention_heads=heads,
        num_hidden_layers=6 if full else 2, intermediate_size=4 * hidden if full else 128,
        max_position_embeddings=512 if full else 64, attn_implementation="eager",
    )  # fmt: skip
    model = t.BertModel(config, add_pooling_layer=False).eval()
    gen = torch.Generator().manual_seed(SEED + 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn(p.shape, generator=gen))

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids, attention_mask, token_type_ids).last_hidden_state

    seq = 128 if full else ROBERTA_SEQ
    ids = torch.randint(1000 if full else 103, config.vocab_size, (1, seq), generator=gen)
    mask = torch.ones(1, seq, dtype=torch.long)
    mask[0, -4:], ids[0, -4:] = 0, 0
    names = ["input_ids", "attention_mask", "token_type_ids"]
    dynamic = {n: {0: "batch_size", 1: "sequence_length"} for n in names}
    dynamic["last_hidden_state"] = {0: "batch_size", 1: "sequence_length"}
    with torch.no_grad():
        torch.onnx.export(
            Encoder().eval(), (ids, mask, torch.zeros_like(ids)), str(path), input_names=names,
            output_names=["last_hidden_state"], opset_version=14, dynamo=False, dynamic_axes=dynamic,
        )  # fmt: skip
    fused = optimizer.optimize_model(
        str(path), model_type="bert", num_heads=heads, hidden_size=hidden, opt_level=1
    )
    fused.save_model_to_file(str(path))
    return {
        "name": path.stem,
        "file": path.name,
        "family": "BERT, onnxruntime-fused (optimum O2)",
        "kind": "encoder",
        "opset": 14,
        "inputs": [{"name": n, "shape": [1, seq], "dtype": "int64"} for n in names],
        "outputs": ["last_hidden_state"],
        "data": {
            "type": "tokens",
            "vocab_size": config.vocab_size,
            "roles": {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "type_ids"},
        },
        "extra_args": [a for n in names for a in ("--input-shape", f"{n}=1,{seq}")],
        "params": sum(p.numel() for p in model.parameters()),
        "note": "com.microsoft EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu; dynamic axes",
        "seed": SEED,
    }


def to_float16(path: Path) -> None:
    """``path`` rewritten as onnxconverter-common's convert_float_to_float16(keep_io_types=False) would."""
    import onnx
    from onnx import numpy_helper

    f16, f32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    proto = onnx.load(str(path))

    def narrow(t: onnx.TensorProto) -> None:
        if t.data_type == f32:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))

    for t in proto.graph.initializer:
        narrow(t)
    for node in proto.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                narrow(a.t)
    for v in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        if v.type.tensor_type.elem_type == f32:
            v.type.tensor_type.elem_type = f16
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, str(path))


def main(argv: list[str] | None = None) -> int:
    import export
    import zoo_data

    specs = [
        export.Spec(
            "mobilenet_v2_fp16",
            "MobileNetV2 (float16 ONNX)",
            "classifier",
            13,
            export.mobilenet_v2,
            export.image(96, 224),
            ["logits"],
            note="float16 weights, Constants and I/O (onnxconverter-common, keep_io_types=False)",
        )
    ]

    def finish(spec: export.Spec, entry: dict[str, Any], full: bool) -> None:
        folder = export.FULL_DIR if full else export.REDUCED_DIR
        to_float16(folder / entry["file"])
        # the manifest's dtype is the data's: float32, which edgekit feeds a float16 model (run as float32)
        entry["ci"] = False

    code = export.build_main(argv, __doc__, specs, seed=SEED, finish=finish)
    args = argv if argv is not None else sys.argv[1:]
    full = "--full" in args
    only = set(args[args.index("--only") + 1].split(",")) if "--only" in args else None
    folder = export.FULL_DIR if full else export.REDUCED_DIR
    for name, build in (("roberta_tiny_dynamic", export_roberta), ("bert_ort_fused", export_bert_ort_fused)):
        if only is not None and name not in only:
            continue
        entry = build(folder / f"{name}.onnx", full)
        entry.update(size="full" if full else "reduced", ci=False)
        zoo_data.merge_manifest(folder, [entry])
        print(f"{name}  {(folder / entry['file']).stat().st_size / 1e6:.2f} MB")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
