"""Export the small models tests/targets commits (torch, a dev-only extra): ``python tests/targets/make_models.py``."""

from __future__ import annotations

from pathlib import Path


def bert_like(path: Path) -> Path:
    """A 2-layer BERT-style encoder (int64 ids, HF-style finfo.min mask, LayerNorm, GELU, mean pooling)."""
    import torch

    torch.manual_seed(0)
    vocab, hidden, heads, seq = 500, 32, 4, 12

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = torch.nn.Embedding(vocab, hidden), torch.nn.Embedding(seq, hidden)
            self.typ, self.ln = torch.nn.Embedding(2, hidden), torch.nn.LayerNorm(hidden)
            self.layers = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(hidden, heads, 64, 0.0, "gelu", batch_first=True)
                for _ in range(2)
            )
            self.qkv = torch.nn.ModuleList(torch.nn.Linear(hidden, 3 * hidden) for _ in range(2))

        def forward(self, ids, mask, types):
            x = self.ln(self.tok(ids) + self.pos(torch.arange(ids.shape[1])[None]) + self.typ(types))
            extended = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
            b, t, _ = x.shape
            for qkv, layer in zip(self.qkv, self.layers, strict=True):
                q, k, v = (z.view(b, t, heads, -1).transpose(1, 2) for z in qkv(x).chunk(3, -1))
                a = torch.softmax(q @ k.transpose(-1, -2) / 8**0.5 + extended, -1) @ v
                x = layer.norm1(x + a.transpose(1, 2).reshape(b, t, -1))
                x = layer.norm2(x + layer.linear2(torch.nn.functional.gelu(layer.linear1(x))))
            m = mask[..., None].float()
            return x, (x * m).sum(1) / m.sum(1)

    ids = torch.randint(0, vocab, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.long)
    torch.onnx.export(
        Encoder().eval(), (ids, mask, torch.zeros_like(ids)), str(path), opset_version=17, dynamo=False,
        input_names=["input_ids", "attention_mask", "token_type_ids"], output_names=["tokens", "embedding"],
    )  # fmt: skip
    return path


if __name__ == "__main__":
    out = Path(__file__).parent / "data" / "bert_like.onnx"
    print(bert_like(out), out.stat().st_size, "bytes")
