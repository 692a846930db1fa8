"""Issue 12 probe round 17q: models quantized or converted by tools not probed before (``--out
benchmarks/.zoo/probe17q``, not committed; needs ``torchao``, ``brevitas`` (+ ``dependencies==2.0.1``, ``unfoldNd``,
``onnxoptimizer``), ``onnxconverter-common`` (all ``--no-deps``) and ``onnxscript`` in the probe's venv; ``nncf`` for
its variants).

Round 6 (``probe_prequantized.py``) probed onnxruntime ``quantize_static`` (QDQ), NNCF's ONNX ``quantize`` and
``quantize_dynamic`` on zoo files. Here the other paths users take, on seeded small models (the zoo's reduced
ResNet-18 / MobileNetV3-Small / YOLO-style builders with BatchNorm statistics from the photos, and a transformers
``BertModel`` with int64 ids and mask):

- torch PT2E (``torchao.quantization.pt2e``: torch 2.14 has no ``torch.ao`` PT2E any more): the X86 Inductor
  quantizer (uint8 activations, int8 per-channel weights) and the XNNPACK one (int8 symmetric), written by
  ``torch.onnx.export(..., dynamo=True)`` at opset 18;
- brevitas 0.13 ``export_onnx_qcdq`` (QuantizeLinear - Clip - DequantizeLinear: narrow-range int8 and int4
  weights) and ``export_qonnx`` (the ``qonnx.custom_op.general`` domain) of a brevitas CNN;
- NNCF's torch backend (``nncf.quantize`` on the module, exported by the TorchScript exporter at opset 17: as is,
  ``org.openvinotoolkit::FakeQuantize``; after ``nncf.strip``, QDQ pairs) and NNCF ``compress_weights`` on the BERT
  ONNX (INT8_ASYM; INT4_SYM with and without ``all_layers``, whose embedding becomes an invalid MatMulNBits);
- onnxruntime beside round 6: ``MatMulNBits`` (``matmul_nbits_quantizer``, 4-bit, com.microsoft),
  ``quantize_static`` QDQ with ActivationSymmetric + WeightSymmetric=False, with int16 activations
  (``UseQDQContribOps``: com.microsoft QuantizeLinear), ``float16.convert_float_to_float16(keep_io_types=True)``
  and onnxconverter-common's ``auto_mixed_precision``.

    python benchmarks/zoo/probe_prequantized2.py [--only a,b]      # -> benchmarks/.zoo/probe17q/ + zoo.json
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe17q/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export  # noqa: E402
import zoo_data  # noqa: E402
from exported_as_users_do import _hf_transformers  # noqa: E402

hf_transformers = _hf_transformers()

OUT = Path(__file__).resolve().parents[1] / ".zoo" / "probe17q"
SEED = 17170
VOCAB, SEQ = 1000, 16
TOKENS = {
    "type": "tokens",
    "vocab_size": VOCAB,
    "roles": {"input_ids": "ids", "attention_mask": "mask"},
}


@dataclass(frozen=True)
class Base:
    """A seeded float model: how to build it and its manifest fields."""

    name: str
    family: str
    kind: str
    inputs: list[tuple[str, list[int], str]]
    outputs: list[str]
    data: dict[str, Any]


def _spec(name: str) -> export.Spec:
    return next(s for s in export.specs() if s.name == name)


BASES = {
    "resnet": Base(
        "resnet",
        "ResNet-18 (reduced)",
        "classifier",
        [("input", [1, 3, 96, 96], "float32")],
        ["logits"],
        dict(zoo_data.IMAGENET_DATA),
    ),  # fmt: skip
    "mbv3": Base(
        "mbv3",
        "MobileNetV3-Small (HardSwish, SE)",
        "classifier",
        [("input", [1, 3, 96, 96], "float32")],
        ["logits"],
        dict(zoo_data.IMAGENET_DATA),
    ),  # fmt: skip
    "yolo": Base(
        "yolo",
        "YOLO-style detector with decode",
        "detector",
        [("input", [1, 3, 128, 128], "float32")],
        _spec("yolo_style").outputs,
        dict(_spec("yolo_style").data),
    ),  # fmt: skip
    "bert": Base(
        "bert",
        "BERT (transformers BertModel, 2 layers)",
        "encoder",
        [("input_ids", [1, SEQ], "int64"), ("attention_mask", [1, SEQ], "int64")],
        ["last_hidden_state"],
        TOKENS,
    ),  # fmt: skip
}
SPEC_OF = {"resnet": "resnet18", "mbv3": "mobilenet_v3_small", "yolo": "yolo_style"}


class BertWrap(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        cfg = hf_transformers.BertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=128, max_position_embeddings=64)  # fmt: skip
        cfg._attn_implementation = "eager"
        self.m = hf_transformers.BertModel(cfg, add_pooling_layer=False)
        g = torch.Generator().manual_seed(SEED)
        with torch.no_grad():
            for p in self.m.parameters():
                if p.ndim >= 2:
                    p.copy_(torch.randn(p.shape, generator=g) * 0.08)

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _entry(base: Base, photos) -> dict[str, Any]:
    return {"name": base.name, "data": base.data,
            "inputs": [{"name": n, "shape": s, "dtype": d} for n, s, d in base.inputs]}  # fmt: skip


def arrays(base: Base, count: int, seed: int, photos) -> dict[str, np.ndarray]:
    return zoo_data.make_arrays(_entry(base, photos), count, seed, photos)


def feeds(base: Base, count: int, photos) -> list[dict[str, np.ndarray]]:
    a = arrays(base, count, 7, photos)
    return [{k: v[i : i + 1] for k, v in a.items()} for i in range(count)]


def torch_model(base: Base, photos) -> nn.Module:
    torch.manual_seed(SEED)
    if base.name == "bert":
        return BertWrap().eval()
    spec = _spec(SPEC_OF[base.name])
    model = spec.build(False).eval()
    export.set_bn_statistics(model, spec, False, photos, 8)
    return model


def example(base: Base, photos) -> tuple[torch.Tensor, ...]:
    a = arrays(base, 1, 7, photos)
    return tuple(torch.from_numpy(a[n]) for n, _, _ in base.inputs)


def float_onnx(base: Base, photos, out: Path) -> Path:
    """The float file the ONNX tools start from (TorchScript exporter, opset 17), cached."""
    path = out / f"_float_{base.name}.onnx"
    if not path.exists():
        torch.onnx.export(torch_model(base, photos), example(base, photos), str(path), dynamo=False,
                          opset_version=17, input_names=[n for n, _, _ in base.inputs],
                          output_names=base.outputs)  # fmt: skip
    return path


# --------------------------------------------------------------------------------------------- the tools


def pt2e(quantizer: str) -> Callable:
    def make(base: Base, photos, dst: Path) -> str:
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        if quantizer == "x86":
            from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xq

            q = xq.X86InductorQuantizer().set_global(xq.get_default_x86_inductor_quantization_config())
        else:
            from torchao.testing.pt2e import _xnnpack_quantizer as xn

            q = xn.XNNPACKQuantizer().set_global(xn.get_symmetric_quantization_config(is_per_channel=True))
        model = torch_model(base, photos)
        ex = example(base, photos)
        gm = torch.export.export(model, ex).module()
        prepared = prepare_pt2e(gm, q)
        for f in feeds(base, 16, photos):
            prepared(*[torch.from_numpy(f[n]) for n, _, _ in base.inputs])
        converted = convert_pt2e(prepared)
        torch.onnx.export(converted, ex, str(dst), dynamo=True, opset_version=18, external_data=False,
                          input_names=[n for n, _, _ in base.inputs], output_names=base.outputs)  # fmt: skip
        return f"PT2E {quantizer} quantizer, dynamo export at opset 18"

    return make


class BrevitasNet(nn.Module):
    """A ResNet-ish brevitas CNN (QuantConv2d + BatchNorm + QuantReLU, a residual, QuantLinear head)."""

    def __init__(self, bits: int) -> None:
        super().__init__()
        import brevitas.nn as qnn
        from brevitas.quant import Int8ActPerTensorFloat, Int8WeightPerTensorFloat

        kw = {
            "weight_bit_width": bits,
            "weight_quant": Int8WeightPerTensorFloat,
            "return_quant_tensor": False,
        }
        self.inp = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)

        def block(cin, cout, s):
            return nn.ModuleList([qnn.QuantConv2d(cin, cout, 3, s, 1, bias=False, **kw), nn.BatchNorm2d(cout),
                                  qnn.QuantReLU(return_quant_tensor=True)])  # fmt: skip

        self.b1, self.b2, self.b3, self.b4 = (
            block(3, 16, 2),
            block(16, 32, 2),
            block(32, 32, 1),
            block(32, 64, 2),
        )
        self.qadd = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.q = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
        self.fc = qnn.QuantLinear(64, 32, bias=True, **kw)

    @staticmethod
    def _run(b, x):
        return b[2](b[1](b[0](x)))

    def forward(self, x):
        x = self.inp(x)
        x = self._run(self.b2, self._run(self.b1, x))
        x = self.qadd(self._run(self.b3, x).value + x.value)  # the residual in float, requantized
        x = self._run(self.b4, x)
        x = self.q(self.pool(x).flatten(1))
        return self.fc(x)


def brevitas(form: str, bits: int) -> Callable:
    def make(base: Base, photos, dst: Path) -> str:
        torch.manual_seed(SEED)
        model = BrevitasNet(bits)
        bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
        for bn in bns:
            bn.momentum = None
        model.train()
        with torch.no_grad():
            for b in range(8):
                a = arrays(base, 16, 1000 + b, photos)
                model(torch.from_numpy(a["input"]))
        model.eval()
        ex = example(base, photos)
        if form == "qcdq":
            from brevitas.export import export_onnx_qcdq

            export_onnx_qcdq(model, ex, export_path=str(dst), opset_version=17, input_names=["input"],
                             output_names=["logits"], dynamo=False)  # fmt: skip
        else:
            from brevitas.export import export_qonnx

            export_qonnx(model, ex, export_path=str(dst), input_names=["input"], output_names=["logits"],
                         dynamo=False)  # fmt: skip
        return f"brevitas {form}, int{bits} weights"

    return make


def nncf_torch(strip: bool) -> Callable:
    def make(base: Base, photos, dst: Path) -> str:
        import nncf

        model = torch_model(base, photos)
        data = [tuple(torch.from_numpy(f[n]) for n, _, _ in base.inputs) for f in feeds(base, 16, photos)]
        q = nncf.quantize(model, nncf.Dataset(data, lambda t: t), subset_size=len(data))
        if (
            strip
        ):  # torch's own fake-quantize ops: the exporter writes QuantizeLinear / DequantizeLinear pairs
            q = nncf.strip(q, strip_format=nncf.StripFormat.NATIVE, example_input=example(base, photos))
        torch.onnx.export(q, example(base, photos), str(dst), dynamo=False, opset_version=17,
                          input_names=[n for n, _, _ in base.inputs], output_names=base.outputs)  # fmt: skip
        how = "nncf.strip (torch fake-quantize: QDQ pairs)" if strip else "FakeQuantize (org.openvinotoolkit)"
        return f"nncf.quantize (torch), {how}, TorchScript export at opset 17"

    return make


def nncf_weights(mode: str, all_layers: bool = False) -> Callable:
    def make(base: Base, photos, dst: Path) -> str:
        import nncf

        model = onnx.load(float_onnx(base, photos, dst.parent))
        kw: dict[str, Any] = {"mode": getattr(nncf.CompressWeightsMode, mode)}
        if mode.startswith("INT4"):
            kw.update(ratio=1.0, group_size=16, all_layers=all_layers)
        onnx.save(nncf.compress_weights(model, **kw), dst)
        return f"nncf.compress_weights {mode} (ONNX){', all_layers' if all_layers else ''}"

    return make


def ort_static(extra: dict[str, Any], activation: str = "QUInt8", per_channel: bool = True) -> Callable:
    def make(base: Base, photos, dst: Path) -> str:
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
        from onnxruntime.quantization.shape_inference import quant_pre_process

        pre = dst.parent / f"_pre_{base.name}.onnx"
        if not pre.exists():
            quant_pre_process(str(float_onnx(base, photos, dst.parent)), str(pre), skip_symbolic_shape=True)
        it = iter(feeds(base, 16, photos))

        class Reader(CalibrationDataReader):
            def get_next(self):
                return next(it, None)

        quantize_static(str(pre), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=getattr(QuantType, activation), weight_type=QuantType.QInt8,
                        extra_options=extra)  # fmt: skip
        return f"onnxruntime quantize_static QDQ {activation} {extra}"

    return make


def ort_nbits(base: Base, photos, dst: Path) -> str:
    from onnxruntime.quantization import matmul_nbits_quantizer as mnb

    model = onnx.load(float_onnx(base, photos, dst.parent))
    q = mnb.MatMulNBitsQuantizer(model, block_size=32, is_symmetric=True)
    q.process()
    q.model.save_model_to_file(str(dst), use_external_data_format=False)
    return "onnxruntime MatMulNBitsQuantizer 4-bit, block 32"


def ort_fp16(base: Base, photos, dst: Path) -> str:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(float_onnx(base, photos, dst.parent))
    onnx.save(convert_float_to_float16(model, keep_io_types=True), dst)
    return "onnxruntime float16, keep_io_types"


def amp(base: Base, photos, dst: Path) -> str:
    from onnxconverter_common import auto_mixed_precision

    model = onnx.load(float_onnx(base, photos, dst.parent))
    feed = feeds(base, 1, photos)[0]
    m = auto_mixed_precision.auto_convert_mixed_precision(
        model, feed, rtol=0.01, atol=0.001, keep_io_types=True
    )
    onnx.save(m, dst)
    return "onnxconverter-common auto_mixed_precision, keep_io_types"


#: (name, base, tool)
VARIANTS: list[tuple[str, str, Callable]] = [
    ("pt2e_x86_mbv3", "mbv3", pt2e("x86")),
    ("pt2e_x86_yolo", "yolo", pt2e("x86")),
    ("pt2e_xnnpack_resnet", "resnet", pt2e("xnnpack")),
    ("brevitas_qcdq_w8", "resnet", brevitas("qcdq", 8)),
    ("brevitas_qcdq_w4", "resnet", brevitas("qcdq", 4)),
    ("brevitas_qonnx_w8", "resnet", brevitas("qonnx", 8)),
    ("nncf_torch_fq_resnet", "resnet", nncf_torch(strip=False)),
    ("nncf_torch_resnet", "resnet", nncf_torch(strip=True)),
    ("nncf_torch_mbv3", "mbv3", nncf_torch(strip=True)),
    ("nncf_cw_int8_bert", "bert", nncf_weights("INT8_ASYM")),
    ("nncf_cw_int4_bert", "bert", nncf_weights("INT4_SYM")),
    ("nncf_cw_int4_all_bert", "bert", nncf_weights("INT4_SYM", all_layers=True)),
    ("ort_matmulnbits_bert", "bert", ort_nbits),
    (
        "ort_asym_w_resnet",
        "resnet",
        ort_static({"ActivationSymmetric": True, "WeightSymmetric": False}, activation="QInt8"),
    ),  # fmt: skip
    ("ort_int16_resnet", "resnet", ort_static({"UseQDQContribOps": True}, activation="QInt16")),
    (
        "ort_int16_sym_resnet",
        "resnet",
        ort_static({"UseQDQContribOps": True, "ActivationSymmetric": True}, activation="QInt16"),
    ),  # fmt: skip
    ("ort_int16_bert", "bert", ort_static({"UseQDQContribOps": True}, activation="QInt16")),
    ("ort_fp16_keepio_resnet", "resnet", ort_fp16),
    ("ort_fp16_keepio_bert", "bert", ort_fp16),
    ("amp_fp16_yolo", "yolo", amp),
]


def build_one(name: str, base: Base, tool: Callable, out: Path, photos) -> dict[str, Any]:
    dst = out / f"{name}.onnx"
    note = tool(base, photos, dst)
    proto = onnx.load(str(dst))
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)
    return {"name": name, "file": dst.name, "family": base.family, "kind": base.kind, "opset": opset,
            "inputs": [{"name": n, "shape": s, "dtype": d} for n, s, d in base.inputs],
            "outputs": [o.name for o in proto.graph.output], "data": base.data, "size": "reduced",
            "params": 0, "ops": sorted({f"{n.domain + '.' if n.domain else ''}{n.op_type}" for n in proto.graph.node}),
            "note": note, "seed": SEED}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="comma-separated variant names")
    parser.add_argument("--photos", type=Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, export.default_shared())
    torch.set_num_threads(2)
    wanted = set(args.only.split(",")) if args.only else None
    entries = []
    for name, base_name, tool in VARIANTS:
        if wanted and name not in wanted:
            continue
        try:
            e = build_one(name, BASES[base_name], tool, args.out, photos)
        except Exception as exc:  # noqa: BLE001 - a tool that cannot take the model is a finding, said
            msg = (str(exc).strip().splitlines() or [""])[0][:300]
            print(f"{name}: NOT BUILT {type(exc).__name__}: {msg}", flush=True)
            continue
        entries.append(e)
        print(f"{name:26s} opset {e['opset']} {e['ops']}", flush=True)
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
