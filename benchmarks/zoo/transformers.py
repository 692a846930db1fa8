"""The transformer members of the model zoo: a small BERT-style sentence encoder and a DeiT/ViT-tiny.

    python benchmarks/zoo/transformers.py            # the small CI models -> tests/zoo/models/
    python benchmarks/zoo/transformers.py --full     # full-size versions -> benchmarks/.zoo/

No pretrained weights: every model is built from a fixed seed. The BERT-style encoder is written here in torch
the way Hugging Face's BertModel computes (token + position + type embeddings, the extended attention mask
``(1 - mask) * min``, also in its ``Where``/``Expand`` form, LayerNorm, exact Erf-GELU, batched MatMul
attention, masked mean pooling). At opset 13 torch writes LayerNorm out as ReduceMean/Sub/Pow/Sqrt/Div; at
opset 17 it exports the LayerNormalization op.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "zoo"))
import zoo_data  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMALL_DIR = ROOT / "tests" / "zoo" / "models"
FULL_DIR = ROOT / "benchmarks" / ".zoo"
SEED = 12


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores + mask_bias, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return self.out(ctx.view(x.shape[0], x.shape[1], -1))


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, eps: float):
        super().__init__()
        self.attention = _Attention(hidden, heads)
        self.norm1 = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.ffn_out = nn.Linear(ffn, hidden)
        self.norm2 = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor, mask_bias: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, mask_bias))
        h = self.ffn_in(x)
        h = h * 0.5 * (1.0 + torch.erf(h / math.sqrt(2.0)))  # exact GELU, as HF's gelu writes it
        return self.norm2(x + self.ffn_out(h))


class BertEncoder(nn.Module):
    """A BERT-style sentence encoder: ids + mask -> masked mean of the last hidden states [B, hidden]."""

    def __init__(self, vocab=1000, hidden=64, layers=2, heads=4, ffn=128, max_len=64, eps=1e-12):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_len, hidden)
        self.token_type = nn.Embedding(2, hidden)
        self.norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(_Layer(hidden, heads, ffn, eps) for _ in range(layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        positions = torch.arange(seq, dtype=torch.long).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))
        x = self.norm(x)
        # HF's get_extended_attention_mask: [B, 1, 1, S], (1 - mask) * dtype_min
        ext = attention_mask[:, None, None, :].to(torch.float32)
        ext = (1.0 - ext) * torch.finfo(torch.float32).min
        for i, layer in enumerate(self.layers):
            if i % 2 == 1:
                # the Where / Expand form (sdpa-style masks): where(mask == 0, min, 0) expanded to [B,1,S,S]
                keep = attention_mask[:, None, None, :].expand(-1, 1, seq, -1)
                bias = torch.where(keep == 0, torch.finfo(torch.float32).min, 0.0)
            else:
                bias = ext
            x = layer(x, bias)
        weights = attention_mask.unsqueeze(-1).to(torch.float32)
        return (x * weights).sum(dim=1) / torch.clamp(weights.sum(dim=1), min=1e-9)


def _randomize_norms(model: nn.Module) -> None:
    """Non-trivial LayerNorm affine parameters (fresh ones are 1 and 0, which would hide errors)."""
    gen = torch.Generator().manual_seed(SEED + 1)
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            with torch.no_grad():
                m.weight.copy_(1.0 + 0.2 * torch.randn(m.weight.shape, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=gen))


def _trained_like(model: nn.Module) -> None:
    """timm initialises ViTs for training (weights std 0.02, zero biases, a ~0 class token), which leaves the
    class token's row nearly constant: LayerNorm then amplifies rounding noise. Trained ViTs are not like that:
    give the class token, the position embedding and the biases real spread, and the weights 1/sqrt(fan_in)."""
    gen = torch.Generator().manual_seed(SEED + 2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                continue
            if name in ("cls_token", "pos_embed"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            elif name.endswith("weight"):
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


def bert_inputs(batch: int, seq: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Token ids and a padding mask (the last few positions padded on every row but the first)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.long)
    for row in range(1, batch):
        mask[row, seq - 1 - (row % (seq // 2)) :] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def export_bert(path: Path, opset: int, full: bool = False) -> dict:
    torch.manual_seed(SEED)
    kw = dict(vocab=30522, hidden=384, layers=6, heads=12, ffn=1536, max_len=512) if full else {}
    seq = 128 if full else 16
    model = BertEncoder(**kw).eval()
    _randomize_norms(model)
    vocab = model.word.num_embeddings
    example = bert_inputs(1, seq, vocab)
    _export(
        model, (example["input_ids"], example["attention_mask"]), path, opset, ["input_ids", "attention_mask"]
    )
    return _entry(
        model,
        path,
        opset,
        full,
        family="BERT-style encoder",
        kind="encoder",
        inputs=[("input_ids", [1, seq], "int64"), ("attention_mask", [1, seq], "int64")],
        data={"type": "tokens", "vocab_size": vocab, "roles": {"input_ids": "ids", "attention_mask": "mask"}},
        note="int64 ids + mask, HF extended mask (Cast/Unsqueeze/Sub/Mul and Where/Expand), "
        + ("LayerNorm written out" if opset < 17 else "LayerNormalization")
        + ", Erf-GELU, batched MatMul attention, masked mean pooling",
    )


def export_vit(path: Path, opset: int, full: bool = False) -> dict:
    import timm

    torch.manual_seed(SEED)
    size = 224 if full else 64
    kw = {} if full else dict(img_size=size, embed_dim=96, depth=2, num_heads=3, num_classes=100)
    model = timm.create_model("deit_tiny_patch16_224", pretrained=False, **kw).eval()
    _randomize_norms(model)
    _trained_like(model)
    example = torch.randn(1, 3, size, size)
    _export(model, (example,), path, opset, ["input"])
    return _entry(
        model,
        path,
        opset,
        full,
        family="DeiT/ViT-tiny (timm)",
        kind="classifier",
        inputs=[("input", [1, 3, size, size], "float32")],
        data={
            "type": "image",
            "color": "RGB",
            "scale": 1 / 255,
            "mean": [0.485, 0.456, 0.406],
            "std": [0.229, 0.224, 0.225],
        },
        note="patch Conv, class token Concat, LayerNormalization, qkv Split, scaled-dot-product attention, "
        "Erf-GELU, class-token Gather",
    )


def _entry(model: nn.Module, path: Path, opset: int, full: bool, *, inputs, **fields) -> dict:
    """A manifest entry (tests/zoo/models/zoo.json's format, see benchmarks/zoo/README.md)."""
    import onnx

    ops = sorted({n.op_type for n in onnx.load(str(path)).graph.node})
    return {
        "name": path.stem,
        "file": path.name,
        "family": fields["family"],
        "kind": fields["kind"],
        "opset": opset,
        "inputs": [{"name": n, "shape": shape, "dtype": dtype} for n, shape, dtype in inputs],
        "outputs": ["output"],
        "data": fields["data"],
        "size": "full" if full else "reduced",
        "params": sum(p.numel() for p in model.parameters()),
        "ops": ops,
        "note": fields["note"],
        "seed": SEED,
    }


def _export(model: nn.Module, args: tuple, path: Path, opset: int, names: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(
            model,
            args,
            str(path),
            opset_version=opset,
            input_names=names,
            output_names=["output"],
            dynamo=False,
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="full-size models into benchmarks/.zoo/")
    args = parser.parse_args(argv)
    out = FULL_DIR if args.full else SMALL_DIR
    entries = [
        export_bert(out / "bert_tiny_op13.onnx", 13, args.full),
        export_bert(out / "bert_tiny_op17.onnx", 17, args.full),
        export_vit(out / "vit_tiny_op17.onnx", 17, args.full),
    ]
    for e in entries:
        size = (out / e["file"]).stat().st_size
        print(f"{out / e['file']}: {size / 1e6:.2f} MB")
    write_manifest(out, entries)


def write_manifest(folder: Path, entries: list[dict]) -> None:
    """Our entries into ``zoo.json`` (replacing only ours, kept sorted by name) when the zoo's manifest is there,
    and always into ``zoo_transformers.json`` (the same format, our entries only)."""
    (folder / "zoo_transformers.json").write_text(
        json.dumps({"format": 1, "models": entries}, indent=1) + "\n"
    )
    if (folder / "zoo.json").exists():
        zoo_data.merge_manifest(folder, entries)


if __name__ == "__main__":
    main()
