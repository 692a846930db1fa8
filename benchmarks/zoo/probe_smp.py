"""Issue 12 probe round 14s: segmentation_models_pytorch (smp 0.6.0) as segmentation users build and export it
(``--out benchmarks/.zoo/probe14s``, not committed; needs ``segmentation-models-pytorch`` installed ``--no-deps``
in the probe's venv: it uses the timm, huggingface_hub and safetensors already there).

Every architecture of smp 0.6.0 (Unet, UnetPlusPlus, FPN, PSPNet, DeepLabV3, DeepLabV3Plus, Linknet, MAnet, PAN,
UPerNet, Segformer, DPT) over the encoders people pick for it (smp's own resnet18, mobilenet_v2, efficientnet-b0,
timm-efficientnet-b0, mit_b0, mobileone_s0, dpn68, xception, and timm's through ``tu-``: mobilenetv3_large_100,
convnext_atto, regnety_002, vit_tiny), ``encoder_weights=None`` (seeded), BatchNorm statistics from the photos
(train mode, ``momentum=None``), 256x256 (one 256x384), 21 classes unless a row says otherwise; smp's options:
``decoder_attention_type="scse"``, ``in_channels`` 1 (gray) and 4 (RGB + a near-infrared-like channel, stored as
``"arrays"`` data), ``classes=1, activation="sigmoid"``, ``activation="softmax2d"`` / ``"softmax"`` /
``"argmax2d"`` (an int64 class map out of the graph), ``aux_params`` (a second, classification output).

Exported as smp's ONNX example does: ``torch.onnx.export(model, sample, f, opset_version=17, input_names=["input"],
output_names=["output"], dynamic_axes={"input": {0: "batch_size"}, "output": {0: "batch_size"}})`` (the legacy
exporter, ``dynamo=False``), one at opset 13; the manifest fixes the batch with ``--input-shape``.

    python benchmarks/zoo/probe_smp.py --out benchmarks/.zoo/probe14s [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe14s/zoo.json --no-shared --workers 1 --json r.json
    python benchmarks/zoo/probe_smp.py --agreement DIR  # per-pixel argmax agreement of zoo.py --work DIR's bundles
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402

zoo_data = zoo_export.zoo_data
SEED = 14140
SAMPLES = 48  # stored samples per "arrays" model: zoo.py's default --calib 32 + --eval 16
GRAY_DATA = {"type": "image", "color": "GRAY", "scale": 1 / 255, "mean": [0.5], "std": [0.25]}


@dataclass(frozen=True)
class Probe:
    name: str
    arch: str
    encoder: str
    opset: int = 17
    size: tuple[int, int] = (256, 256)
    kwargs: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[str, ...] = ("output",)
    data: dict[str, Any] = field(default_factory=lambda: dict(zoo_data.IMAGENET_DATA))
    #: "rgbn": a 4-channel input made here and stored as "arrays"
    arrays: str = ""
    note: str = ""

    @property
    def channels(self) -> int:
        return int(self.kwargs.get("in_channels", 3))

    @property
    def shape(self) -> list[int]:
        return [1, self.channels, *self.size]


def probes() -> list[Probe]:
    c21 = {"classes": 21}
    return [
        Probe("unet_resnet18", "Unet", "resnet18", kwargs=c21),
        Probe("unet_resnet18_op13", "Unet", "resnet18", opset=13, kwargs=c21),
        Probe("unet_scse_mnv2_256x384", "Unet", "mobilenet_v2", size=(256, 384),
              kwargs={**c21, "decoder_attention_type": "scse"}),
        Probe("unet_resnet18_aux", "Unet", "resnet18", outputs=("output", "label"),
              kwargs={**c21, "aux_params": {"classes": 10, "dropout": 0.2}}),
        Probe("unet_mnv2_argmax", "Unet", "mobilenet_v2", kwargs={**c21, "activation": "argmax2d"},
              note="activation argmax2d: int64 class map [1, H, W] out of the graph"),
        Probe("unet_dpn68", "Unet", "dpn68", kwargs=c21),
        Probe("unet_xception", "Unet", "xception", kwargs=c21),
        Probe("unetpp_effb0", "UnetPlusPlus", "efficientnet-b0", kwargs=c21),
        Probe("fpn_timm_effb0_sigmoid", "FPN", "timm-efficientnet-b0", kwargs={"classes": 1, "activation": "sigmoid"}),
        Probe("fpn_mobileone_s0_softmax", "FPN", "mobileone_s0", kwargs={**c21, "activation": "softmax"}),
        Probe("pspnet_resnet18", "PSPNet", "resnet18", size=(192, 192), kwargs=c21,
              note="192x192: the 1/8 feature map (24) a multiple of the pyramid bins 1, 2, 3, 6"),
        Probe("deeplabv3_resnet18_op13", "DeepLabV3", "resnet18", opset=13, kwargs=c21),
        Probe("deeplabv3plus_mnv3", "DeepLabV3Plus", "tu-mobilenetv3_large_100", kwargs=c21),
        Probe("linknet_resnet18_gray", "Linknet", "resnet18", data=dict(GRAY_DATA),
              kwargs={"in_channels": 1, "classes": 1, "activation": "sigmoid"}),
        Probe("manet_regnety_002", "MAnet", "tu-regnety_002", kwargs=c21),
        Probe("pan_resnet18_rgbn", "PAN", "resnet18", kwargs={**c21, "in_channels": 4},
              data={"type": "arrays", "file": "pan_resnet18_rgbn.samples.npz"}, arrays="rgbn",
              note="in_channels 4: RGB + a near-infrared-like channel"),
        Probe("upernet_convnext_atto", "UPerNet", "tu-convnext_atto", size=(192, 192), kwargs=c21,
              note="192x192: the 1/32 feature map (6) a multiple of the pyramid bins 1, 2, 3, 6"),
        Probe("segformer_mit_b0_softmax2d", "Segformer", "mit_b0", kwargs={**c21, "activation": "softmax2d"}),
        Probe("segformer_mit_b0", "Segformer", "mit_b0", kwargs=c21),
        Probe("dpt_vit_tiny", "DPT", "tu-vit_tiny_patch16_224", size=(224, 224),
              kwargs={**c21, "decoder_readout": "cat"}),
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------------ data


def rgbn_arrays(shape: list[int], count: int, seed: int, photos) -> np.ndarray:
    """``count`` 4-channel images: ImageNet-normalised RGB and a near-infrared-like fourth channel (the red
    channel's brightness minus half the blue's, the vegetation-bright band of an RGB-NIR camera), normalised
    to mean 0.5 / std 0.25."""
    _, _, h, w = shape
    crops = zoo_data.photo_crops(photos, count, h, w, seed).astype(np.float32) / 255
    mean, std = np.asarray(zoo_data.IMAGENET_MEAN, np.float32), np.asarray(zoo_data.IMAGENET_STD, np.float32)
    rgb = (crops - mean) / std
    nir = (np.clip(0.3 + 0.9 * crops[..., 1] - 0.5 * crops[..., 2], 0, 1)[..., None] - 0.5) / 0.25
    return np.ascontiguousarray(np.concatenate([rgb, nir], -1).transpose(0, 3, 1, 2).astype(np.float32))


def arrays(probe: Probe, count: int, seed: int, photos) -> np.ndarray:
    if probe.arrays == "rgbn":
        return rgbn_arrays(probe.shape, count, seed, photos)
    entry = {"name": probe.name, "data": probe.data, "inputs": [{"name": "input", "shape": probe.shape}]}
    return zoo_data.make_arrays(entry, count, seed, photos)["input"]


# ---------------------------------------------------------------------------------------------- export


def model_of(probe: Probe) -> nn.Module:
    import segmentation_models_pytorch as smp

    return getattr(smp, probe.arch)(encoder_name=probe.encoder, encoder_weights=None, **probe.kwargs)


def build(probe: Probe, out_dir: Path, photos, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = model_of(probe).eval()
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    if bns:
        model.train()
        with torch.no_grad():
            for b in range(4):
                model(torch.from_numpy(arrays(probe, 8, 1000 + b, photos)))
        model.eval()
    if probe.arrays:
        np.savez(out_dir / probe.data["file"], input=arrays(probe, SAMPLES, 1, photos))
    path = out_dir / f"{probe.name}.onnx"
    dynamic = {"input": {0: "batch_size"}, **{name: {0: "batch_size"} for name in probe.outputs}}
    torch.onnx.export(
        model,
        torch.from_numpy(arrays(probe, 1, 7, photos)),
        str(path),
        export_params=True,
        opset_version=probe.opset,
        input_names=["input"],
        output_names=list(probe.outputs),
        dynamic_axes=dynamic,
        dynamo=False,
    )
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    return {
        "name": probe.name,
        "file": path.name,
        "family": f"smp {probe.arch} ({probe.encoder})",
        "kind": "segmenter",
        "opset": probe.opset,
        "inputs": [{"name": "input", "shape": probe.shape, "dtype": "float32"}],
        "outputs": list(probe.outputs),
        "data": probe.data,
        "extra_args": ["--input-shape", f"input={','.join(map(str, probe.shape))}"],
        "params": int(sum(p.numel() for p in model.parameters())),
        "batchnorm_layers_set": len(bns),
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": probe.note or f"smp {probe.arch}(encoder_name={probe.encoder!r}, {probe.kwargs})",
        "seed": seed,
        "size": "reduced",
        "ci": False,
    }


# ------------------------------------------------------------------------------------------- agreement


def agreement(work: Path, manifest: Path) -> int:
    """Per-pixel argmax agreement over the classes (axis 1) of each model's int8 artifacts against fp32 ONNX on
    the evaluation photos: what a segmentation user reads off an int8 model. ``work``: ``zoo.py --work``'s folder
    (its bundles and data)."""
    import onnxruntime as ort

    entries = {e["name"]: e for e in json.loads(manifest.read_text())["models"]}
    for name, entry in entries.items():
        data_path = next(iter(sorted(work.glob(f"**/{name}.eval.npz"))), None)
        if data_path is None:
            continue
        x = np.load(data_path)["input"]
        ref = ort.InferenceSession(str(manifest.parent / entry["file"]), providers=["CPUExecutionProvider"])
        fp32 = np.concatenate([ref.run(None, {"input": x[i : i + 1]})[0] for i in range(len(x))])
        if fp32.ndim != 4 or fp32.shape[1] < 2:
            print(f"{name:30s} output {list(fp32.shape)}: no class axis (sigmoid mask / class map)")
            continue
        row = []
        for tfl in sorted((work / name).glob("**/*.tflite")):
            from ai_edge_litert.interpreter import Interpreter

            interp = Interpreter(model_path=str(tfl))
            interp.allocate_tensors()
            inp, out = interp.get_input_details()[0], interp.get_output_details()[0]
            nhwc = list(inp["shape"]) != [1, *x.shape[1:]]
            got = []
            for i in range(len(x)):
                sample = x[i : i + 1].transpose(0, 2, 3, 1) if nhwc else x[i : i + 1]
                interp.set_tensor(inp["index"], np.ascontiguousarray(sample))
                interp.invoke()
                got.append(interp.get_tensor(out["index"]))
            got = np.concatenate(got)
            if got.shape != fp32.shape and got.ndim == 4:
                got = got.transpose(0, 3, 1, 2)
            if got.shape != fp32.shape:
                continue
            agree = float(np.mean(got.argmax(1) == fp32.argmax(1)))
            row.append(f"{tfl.parent.parent.name}: {100 * agree:.2f} %")
        print(f"{name:30s} " + "; ".join(row))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=zoo_export.ROOT / "benchmarks" / ".zoo" / "probe14s")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    parser.add_argument("--agreement", type=Path, help="zoo.py --work folder: per-pixel argmax agreement")
    args = parser.parse_args(argv)
    if args.agreement:
        return agreement(args.agreement, args.out / "zoo.json")
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
    torch.set_num_threads(2)
    everything = probes()
    index = {probe.name: i for i, probe in enumerate(everything)}
    order = [index[name] for name in args.only.split(",")] if args.only else range(len(everything))
    failed = 0
    for i in order:  # each model's seed is its place in probes()
        probe = everything[i]
        try:
            entry = build(probe, args.out, photos, SEED + i)
        except Exception as exc:  # noqa: BLE001 - an export smp / torch cannot do is a finding, not a stop
            failed += 1
            print(f"{probe.name:30s} EXPORT FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        zoo_data.merge_manifest(args.out, [entry])
        size = (args.out / entry["file"]).stat().st_size
        print(
            f"{probe.name:30s} opset {probe.opset}  {entry['params']:>10,d} params  {size / 1e6:7.2f} MB  {entry['ops']}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
