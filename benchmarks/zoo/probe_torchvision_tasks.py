"""Issue 12 probe round 12v: torchvision's task models exported whole, as torchvision's docs and
``test/test_onnx.py`` export them (``--out benchmarks/.zoo/probe12v``, not committed).

- detection, the whole model in eval mode taking a list of images, with its post-processing (resize and
  normalisation in the graph, anchors, box decoding, NonMaxSuppression, TopK, RoiAlign, paste of masks /
  keypoints): SSDlite320-MobileNetV3-Large, SSD300-VGG16 (reduced input), RetinaNet-ResNet50-FPN (v2),
  FCOS-ResNet50-FPN, FasterRCNN-MobileNetV3-Large-320-FPN, MaskRCNN-ResNet50-FPN, KeypointRCNN-ResNet50-FPN
  (``weights=None, weights_backbone=None``, small ``min_size``/``max_size``), opset 11 / 17;
- each detector's "head only" form as users export it for an edge device: backbone + FPN + head outputs
  (``*_head``), the anchors, decoding and NMS left to the application;
- video classifiers (Conv3d, MaxPool3d, AdaptiveAvgPool3d): R3D-18, MC3-18, R(2+1)D-18, S3D, Swin3D-T on an
  8-frame 64x64 clip (S3D's fixed 2x7x7 AvgPool3d made adaptive); MViTv2-S is left out: its builder fixes
  16x224x224 (64 GFLOP);
- optical flow: RAFT-small, 128x128 frame pairs, 3 flow updates unrolled (GridSample, correlation pyramid);
- segmentation: LR-ASPP-MobileNetV3-Large, FCN-ResNet50, DeepLabV3-ResNet50 (the ``out`` map).

Every model gets seeded weights and BatchNorm statistics from the photos (the zoo's way: train-mode BatchNorm,
``momentum=None``, on real crops; a detector's other modules stay in eval mode). Video clips (a photo panned
across the frames) and RAFT's frame pairs (a crop and the same crop shifted) are stored beside the model as
``"arrays"`` data.

    python benchmarks/zoo/probe_torchvision_tasks.py --out benchmarks/.zoo/probe12v [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe12v/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402

zoo_data = zoo_export.zoo_data
SEED = 12200
#: torchvision's detectors normalise inside the graph: they take RGB in [0, 1]
UNIT_DATA = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None}
#: the video models' Kinetics normalisation
KINETICS_MEAN, KINETICS_STD = (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)
SAMPLES = 48  # stored samples per "arrays" model: zoo.py's default --calib 32 + --eval 16


@dataclass(frozen=True)
class Probe:
    name: str
    family: str
    kind: str
    opset: int
    build: Callable[[], nn.Module]
    inputs: list[tuple[str, list[int]]]
    outputs: list[str]
    data: dict[str, Any] = field(default_factory=lambda: dict(zoo_data.IMAGENET_DATA))
    #: "clip" or "flow": inputs made here and stored as "arrays"
    arrays: str = ""
    dynamic_axes: dict[str, dict[int, str]] | None = None
    note: str = ""


def _bns(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


class Whole(nn.Module):
    """A torchvision detector as its ONNX export runs it: eval mode, a list of images in, the first image's
    ``keys`` out. ``train()`` puts only the BatchNorm layers in train mode (the statistics from the photos)."""

    def __init__(self, det: nn.Module, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.det, self.keys = det, keys

    def train(self, mode: bool = True) -> Whole:
        super().train(mode)
        self.det.eval()
        for bn in _bns(self.det):
            bn.train(mode)
        return self

    def forward(self, images):
        out = self.det(list(images))[0]
        return tuple(out[k] for k in self.keys)


class Head(nn.Module):
    """A detector's edge form: backbone (+ FPN) and head outputs, the decoding left to the application.
    One-stage detectors: the head's dict; two-stage ones: the RPN head's objectness and deltas per level."""

    def __init__(self, det: nn.Module, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.det, self.keys = det, keys

    def forward(self, x):
        feats = self.det.backbone(x)
        feats = list(feats.values()) if isinstance(feats, dict) else [feats]
        if hasattr(self.det, "rpn"):
            objectness, deltas = self.det.rpn.head(feats)
            return (*objectness, *deltas)
        out = self.det.head(feats)
        return tuple(out[k] for k in self.keys)


class Out(nn.Module):
    """A segmentation model's ``out`` map."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class Flow(nn.Module):
    """RAFT with ``updates`` flow updates unrolled; the last (full-resolution) flow."""

    def __init__(self, model: nn.Module, updates: int) -> None:
        super().__init__()
        self.model, self.updates = model, updates

    def forward(self, image1, image2):
        return self.model(image1, image2, num_flow_updates=self.updates)[-1]


def det(builder: str, whole: bool, keys: tuple[str, ...], **kwargs) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import torchvision.models.detection as tvd

        model = getattr(tvd, builder)(weights=None, weights_backbone=None, **kwargs)
        return Whole(model, keys) if whole else Head(model, keys)

    return make


def video(builder: str, **kwargs) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import torchvision.models.video as tvv

        model = getattr(tvv, builder)(weights=None, num_classes=32, **kwargs)
        if builder == "s3d":
            model.avgpool = nn.AdaptiveAvgPool3d(1)
        return model

    return make


def seg(builder: str, **kwargs) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        import torchvision.models.segmentation as tvs

        return Out(tvs.__dict__[builder](weights=None, weights_backbone=None, num_classes=21, **kwargs))

    return make


def raft_small() -> nn.Module:
    from torchvision.models.optical_flow import raft_small as build

    return Flow(build(weights=None), updates=3)


BOXES = ("boxes", "scores", "labels")
S = 256  # whole detectors' input side
DET_KW = {"min_size": S, "max_size": S}
IMG = [("images", [1, 3, S, S])]
DYN = {"images": {2: "height", 3: "width"}}


def probes() -> list[Probe]:
    p: list[Probe] = []
    for name, builder, kw, opset, keys, hkeys in (
        ("ssdlite320", "ssdlite320_mobilenet_v3_large", {"num_classes": 21}, 17, BOXES, ("bbox_regression", "cls_logits")),
        ("ssd300_vgg16", "ssd300_vgg16", {"num_classes": 21, "size": (160, 160)}, 17, BOXES, ("bbox_regression", "cls_logits")),
        ("retinanet_v2", "retinanet_resnet50_fpn_v2", {"num_classes": 21, **DET_KW}, 17, BOXES, ("bbox_regression", "cls_logits")),
        ("fcos", "fcos_resnet50_fpn", {"num_classes": 21, **DET_KW}, 17, BOXES, ("bbox_regression", "cls_logits", "bbox_ctrness")),
        ("fasterrcnn_mnv3_320", "fasterrcnn_mobilenet_v3_large_320_fpn", {"num_classes": 21, **DET_KW}, 11, BOXES, ()),
        ("maskrcnn", "maskrcnn_resnet50_fpn", {"num_classes": 21, **DET_KW}, 11, (*BOXES, "masks"), ()),
        ("keypointrcnn", "keypointrcnn_resnet50_fpn", {"num_classes": 2, "num_keypoints": 17, **DET_KW}, 11,
         (*BOXES, "keypoints", "keypoints_scores"), ()),
    ):  # fmt: skip
        side = 160 if name == "ssd300_vgg16" else 320 if name == "ssdlite320" else S
        size = [1, 3, side, side]
        p.append(Probe(name, f"torchvision {builder} (whole)", "detector", opset, det(builder, True, keys, **kw),
                       [("images", size)], list(keys), dict(UNIT_DATA), dynamic_axes=DYN,
                       note="whole model: transform, anchors, decode, NMS in the graph"))  # fmt: skip
        outs = list(hkeys)  # two-stage: objectness_i, deltas_i per FPN level, named at export
        p.append(Probe(f"{name}_head", f"torchvision {builder} (head only)", "detector", 13 if opset == 11 else opset,
                       det(builder, False, hkeys, **kw), [("input", size)], outs,
                       note="backbone + FPN + head outputs"))  # fmt: skip
    clip = [("clip", [1, 3, 8, 64, 64])]
    vdata = {"type": "arrays", "file": ""}
    for name, kw in (
        ("r3d_18", {}), ("mc3_18", {}), ("r2plus1d_18", {}), ("s3d", {}),
        ("swin3d_t", {}),
    ):  # fmt: skip
        p.append(Probe(name, f"torchvision {name}", "classifier", 17, video(name, **kw), clip, ["logits"],
                       dict(vdata, file=f"{name}.samples.npz"), arrays="clip"))  # fmt: skip
    p.append(Probe("raft_small", "torchvision raft_small", "segmenter", 16, raft_small,
                   [("image1", [1, 3, 128, 128]), ("image2", [1, 3, 128, 128])], ["flow"],
                   {"type": "arrays", "file": "raft_small.samples.npz"}, arrays="flow",
                   note="3 flow updates unrolled"))  # fmt: skip
    for name, kw, side in (
        ("lraspp_mnv3", {}, 192), ("fcn_resnet50", {"aux_loss": False}, 128),
        ("deeplabv3_resnet50", {"aux_loss": False}, 128),
    ):  # fmt: skip
        builder = {"lraspp_mnv3": "lraspp_mobilenet_v3_large"}.get(name, name)
        p.append(Probe(name, f"torchvision {builder}", "segmenter", 17, seg(builder, **kw),
                       [("input", [1, 3, side, side])], ["out"]))  # fmt: skip
    return p


# ------------------------------------------------------------------------------------------------ data


def clip_arrays(shape: list[int], count: int, seed: int, photos) -> np.ndarray:
    """``count`` clips [N, 3, T, H, W]: a photo crop panned 2 px a frame, Kinetics-normalised."""
    _, _, frames, h, w = shape
    big = zoo_data.photo_crops(photos, count, h + 2 * frames, w + 2 * frames, seed).astype(np.float32) / 255
    rng = np.random.default_rng(seed)
    out = np.empty((count, 3, frames, h, w), np.float32)
    for i in range(count):
        dy, dx = rng.choice([-2, -1, 1, 2], 2)
        y0, x0 = frames - dy * frames // 2, frames - dx * frames // 2
        for t in range(frames):
            y, x = np.clip(y0 + dy * t, 0, 2 * frames), np.clip(x0 + dx * t, 0, 2 * frames)
            out[i, :, t] = big[i, y : y + h, x : x + w].transpose(2, 0, 1)
    mean, std = np.asarray(KINETICS_MEAN, np.float32), np.asarray(KINETICS_STD, np.float32)
    return (out - mean[:, None, None, None]) / std[:, None, None, None]


def flow_arrays(shape: list[int], count: int, seed: int, photos) -> tuple[np.ndarray, np.ndarray]:
    """Frame pairs: a crop and the same scene shifted by up to 6 px, scaled to [-1, 1] as RAFT's transforms."""
    _, _, h, w = shape
    big = zoo_data.photo_crops(photos, count, h + 12, w + 12, seed).astype(np.float32) / 127.5 - 1
    rng = np.random.default_rng(seed)
    a, b = np.empty((2, count, 3, h, w), np.float32)
    for i in range(count):
        dy, dx = rng.integers(-6, 7, 2)
        a[i] = big[i, 6 : 6 + h, 6 : 6 + w].transpose(2, 0, 1)
        b[i] = big[i, 6 + dy : 6 + dy + h, 6 + dx : 6 + dx + w].transpose(2, 0, 1)
    return a, b


def arrays(probe: Probe, count: int, seed: int, photos) -> dict[str, np.ndarray]:
    if probe.arrays == "clip":
        return {probe.inputs[0][0]: clip_arrays(probe.inputs[0][1], count, seed, photos)}
    if probe.arrays == "flow":
        a, b = flow_arrays(probe.inputs[0][1], count, seed, photos)
        return {probe.inputs[0][0]: a, probe.inputs[1][0]: b}
    entry = {
        "name": probe.name,
        "data": probe.data,
        "inputs": [{"name": n, "shape": s} for n, s in probe.inputs],
    }
    return zoo_data.make_arrays(entry, count, seed, photos)


# ---------------------------------------------------------------------------------------------- export


def build(probe: Probe, out_dir: Path, photos, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = probe.build().eval()
    bns = _bns(model)
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    if bns:
        model.train()
        with torch.no_grad():
            for b in range(4):
                batch = arrays(probe, 8, 1000 + b, photos)
                model(*[torch.from_numpy(batch[n]) for n, _ in probe.inputs])
        model.eval()
    if probe.arrays:
        np.savez(out_dir / probe.data["file"], **arrays(probe, SAMPLES, 1, photos))
    example = arrays(probe, 1, 7, photos)
    outputs = probe.outputs
    if not outputs:  # an RPN head: objectness and deltas per FPN level
        with torch.no_grad():
            levels = len(model(*[torch.from_numpy(example[n]) for n, _ in probe.inputs])) // 2
        outputs = [f"objectness_{i}" for i in range(levels)] + [f"deltas_{i}" for i in range(levels)]
    path = out_dir / f"{probe.name}.onnx"
    torch.onnx.export(
        model,
        tuple(torch.from_numpy(example[n]) for n, _ in probe.inputs),
        str(path),
        input_names=[n for n, _ in probe.inputs],
        output_names=outputs,
        opset_version=probe.opset,
        dynamo=False,
        do_constant_folding=True,
        dynamic_axes=probe.dynamic_axes,
    )
    import onnx

    onnx.checker.check_model(onnx.load(str(path)))
    return entry_of(probe, out_dir, seed, outputs, int(sum(p.numel() for p in model.parameters())), len(bns))


def entry_of(
    probe: Probe,
    out_dir: Path,
    seed: int,
    outputs: list[str] | None = None,
    params: int | None = None,
    bns: int | None = None,
) -> dict[str, Any]:
    """The manifest entry of ``probe``'s exported file (``--reuse``: read from the file alone)."""
    import onnx

    path = out_dir / f"{probe.name}.onnx"
    proto = onnx.load(str(path), load_external_data=False)
    if outputs is None:
        outputs = [o.name for o in proto.graph.output]
    if params is None:
        params = int(sum(np.prod(t.dims) for t in proto.graph.initializer if t.data_type == 1))
    entry = {
        "name": probe.name,
        "file": path.name,
        "family": probe.family,
        "kind": probe.kind,
        "opset": probe.opset,
        "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in probe.inputs],
        "outputs": outputs,
        "data": probe.data,
        "params": params,
        "batchnorm_layers_set": bns,
        "ops": sorted({n.op_type for n in proto.graph.node}),  # top level
        "note": probe.note,
        "seed": seed,
        "size": "reduced",
    }
    if probe.dynamic_axes:
        entry["extra_args"] = [
            a for n, s in probe.inputs for a in ("--input-shape", f"{n}={','.join(map(str, s))}")
        ]
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=zoo_export.ROOT / "benchmarks" / ".zoo" / "probe12v")
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument(
        "--reuse", action="store_true", help="keep a model's .onnx already in --out (entry only)"
    )
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
    torch.set_num_threads(2)
    everything = probes()
    index = {probe.name: i for i, probe in enumerate(everything)}
    order = [index[name] for name in args.only.split(",")] if args.only else range(len(everything))
    for i in order:  # --only's order; each model's seed is its place in probes()
        probe = everything[i]
        try:
            entry = (
                entry_of(probe, args.out, SEED + i)
                if args.reuse and (args.out / f"{probe.name}.onnx").exists()
                else build(probe, args.out, photos, SEED + i)
            )
        except Exception as exc:  # an export torch cannot do is a finding of the probe, not a stop
            print(f"{probe.name:24s} EXPORT FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        zoo_data.merge_manifest(args.out, [entry])  # each model as it is built: a long build can be stopped
        size = (args.out / entry["file"]).stat().st_size
        print(
            f"{probe.name:24s} opset {probe.opset}  {entry['params']:>10,d} params  {size / 1e6:7.2f} MB  {entry['ops']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
