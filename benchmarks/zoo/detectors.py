"""The anchor-free detectors of the model zoo: Ultralytics' YOLOv8n and a NanoDet-Plus, decode in the graph.

    python benchmarks/zoo/detectors.py            # reduced sizes -> tests/zoo/models/ (committed) + zoo.json
    python benchmarks/zoo/detectors.py --only yolov8n_op17   # the simplified opset-17 export too (not in CI)
    python benchmarks/zoo/detectors.py --full     # full sizes    -> benchmarks/.zoo/ (git-ignored) + zoo.json

No weights can be downloaded: every model gets seeded weights, its BatchNorm running statistics are set from
real photos (``export.set_bn_statistics``), and the class biases get the spread of a trained detector's (a fresh
head's prior bias puts every score near 1e-5, which would hide what int8 does to scores).

- ``yolov8n_op12`` / ``yolov8n_op17``: ``ultralytics`` builds ``yolov8n.yaml`` (offline: ``YOLO_OFFLINE=1``) and
  its own exporter writes the graph ``model.export(format="onnx")`` writes: output ``[1, 84, N]`` with the DFL
  decode (Reshape, Softmax over 16 bins, a 1x1 Conv with arange weights), the anchors and strides as
  constants, dist2bbox (Sub/Add/Concat/Div/Mul) and Sigmoid class scores, boxes in pixels (0..imgsz) and
  scores (0..1) concatenated in one tensor. Opset 12 is written as ``simplify=False`` (Identity, Shape/Gather
  left in), opset 17 simplified with onnxslim when it is installed (the public yolov8n.onnx's form). Reduced:
  128x128, width 1/16 of YOLOv8-L (yolov8n's is 1/4: a 12 MB file), 20 classes (output [1, 24, N]); full: 640,
  yolov8n as released (80 classes, [1, 84, 8400]).
- ``nanodet_plus``: NanoDet-Plus (ShuffleNetV2 backbone with LeakyReLU, GhostPAN neck with an extra level,
  NanoDetPlusHead with depthwise 5x5 convs) and its post-processing in the graph: Sigmoid class scores, the
  GFL distribution over reg_max + 1 = 8 bins per side -> Softmax -> integral (MatMul with linspace(0, 7)) ->
  times the stride -> distance2bbox from the centre priors (x * stride, y * stride), clipped to the image.
  Outputs ``scores [1, N, C]`` and ``boxes [1, N, 4]`` (pixels). Reduced: 128x128, x0.5 backbone, 32-channel
  neck/head; full: nanodet-plus-m_416 (x1.0, 96 channels, 416x416).

Needs torch, torchvision and ultralytics (dev only).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("YOLO_OFFLINE", "1")  # ultralytics must not look anything up

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
from export import Spec, set_bn_statistics, zoo_data  # noqa: E402

SMALL_DIR = zoo_export.REDUCED_DIR
FULL_DIR = zoo_export.FULL_DIR
SEED = 8

#: The reduced YOLOv8n's classes (80 make the class branch 80 channels wide at every level: a 2.5 MB file).
YOLO_REDUCED_CLASSES = 20
#: YOLOv8 preprocessing: RGB, 0..1, no mean/std.
YOLO_DATA = {
    "type": "image",
    "color": "RGB",
    "scale": 1 / 255,
    "mean": [0.0, 0.0, 0.0],
    "std": [1.0, 1.0, 1.0],
}
#: NanoDet's: BGR, pixel values, mean/std in pixel units.
NANODET_DATA = {
    "type": "image",
    "color": "BGR",
    "scale": 1.0,
    "mean": [103.53, 116.28, 123.675],
    "std": [57.375, 57.12, 58.395],
}


def _spread_class_bias(conv: nn.Conv2d, classes: int, gen: torch.Generator) -> None:
    """A trained detector's class logits: mostly negative (most places are background), a spread of a few
    units, some positive. Weights ~ 1/sqrt(fan_in) times 1.5, biases -3 +- 1.5 on the class channels."""
    with torch.no_grad():
        fan_in = conv.weight[0].numel()
        conv.weight[:classes].copy_(
            1.5 * torch.randn(conv.weight[:classes].shape, generator=gen) / math.sqrt(fan_in)
        )
        conv.bias[:classes].copy_(-3.0 + 1.5 * torch.randn(classes, generator=gen))


# --------------------------------------------------------------------------------------------------- YOLOv8n


def yolov8n(full: bool, folder: Path):
    """Ultralytics' ``YOLO("yolov8n.yaml")`` (reduced: width 1/16 instead of 1/4), built from a copy of the
    yaml in ``folder`` (so that its exporter writes there), its class biases spread."""
    import yaml
    from ultralytics import YOLO
    from ultralytics.nn.tasks import yaml_model_load

    cfg = yaml_model_load("yolov8n.yaml")
    cfg.pop("yaml_file", None)
    if not full:
        cfg["scales"] = {"n": [0.33, 0.0625, 1024]}
        cfg["nc"] = YOLO_REDUCED_CLASSES
    path = folder / "yolov8n.yaml"
    path.write_text(yaml.safe_dump(cfg))
    yolo = YOLO(str(path))
    gen = torch.Generator().manual_seed(SEED)
    for seq in yolo.model.model[-1].cv3:  # the class branch's last 1x1 conv
        _spread_class_bias(seq[-1], cfg["nc"], gen)
    return yolo


def export_yolov8n(full: bool, out: Path, opset: int, simplify: bool, photos) -> dict[str, Any]:
    size = 640 if full else 128
    name = f"yolov8n_op{opset}"
    if simplify:
        try:
            import onnxslim  # noqa: F401
        except ImportError:
            print("onnxslim is not installed: exporting with simplify=False")
            simplify = False
    inputs = [("images", [1, 3, size, size])]
    spec = Spec(name, "YOLOv8n", "detector", opset, lambda f: None, lambda f: inputs, ["output0"])
    spec.data = dict(YOLO_DATA)
    path = out / f"{name}.onnx"
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            torch.manual_seed(SEED)
            yolo = yolov8n(full, Path(tmp))
            net = yolo.model
            n_bn = set_bn_statistics(net, spec, full, photos, 4 if full else 8)
            written = yolo.export(format="onnx", imgsz=size, opset=opset, simplify=simplify, dynamic=False)
        finally:
            os.chdir(cwd)
        shutil.move(str(Path(tmp, written)), path)
    note = (
        "ultralytics' own ONNX export (Detect head in export mode): DFL Softmax over 16 bins + 1x1 Conv "
        "(arange), anchors/strides constants, dist2bbox Sub/Add/Concat/Div/Mul, Sigmoid scores; boxes "
        f"(0..{size}) and scores (0..1) in one [1, 4 + classes, N] tensor; "
        + ("onnxslim-simplified" if simplify else "simplify=False (Identity, Shape/Gather kept)")
    )
    return _entry(net, path, opset, full, "YOLOv8n (ultralytics)", inputs, ["output0"], YOLO_DATA, note, n_bn)


# --------------------------------------------------------------------------------------------- NanoDet-Plus


def _act() -> nn.Module:
    return nn.LeakyReLU(0.1)


def conv_bn_act(
    cin: int, cout: int, k: int = 1, s: int = 1, groups: int = 1, act: bool = True
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(_act())
    return nn.Sequential(*layers)


class DepthwiseConvModule(nn.Sequential):
    """NanoDet's depthwise k x k conv + BN + act, then pointwise 1x1 + BN + act."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1):
        super().__init__(conv_bn_act(cin, cin, k, stride, groups=cin), conv_bn_act(cin, cout, 1))


class GhostModule(nn.Module):
    def __init__(self, cin: int, cout: int, relu: bool = True):
        super().__init__()
        self.cout = cout
        init = math.ceil(cout / 2)
        self.primary = conv_bn_act(cin, init, 1, act=relu)
        self.cheap = conv_bn_act(init, init, 3, groups=init, act=relu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.primary(x)
        return torch.cat([x1, self.cheap(x1)], 1)[:, : self.cout]


class GhostBottleneck(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, k: int):
        super().__init__()
        self.ghost1 = GhostModule(cin, mid, relu=True)
        self.ghost2 = GhostModule(mid, cout, relu=False)
        self.shortcut = (
            nn.Identity()
            if cin == cout
            else nn.Sequential(
                conv_bn_act(cin, cin, k, groups=cin, act=False), conv_bn_act(cin, cout, 1, act=False)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ghost2(self.ghost1(x)) + self.shortcut(x)


class GhostPAN(nn.Module):
    """NanoDet-Plus' neck: 1x1 reduce, top-down (nearest x2 + Concat + GhostBlocks), bottom-up (depthwise
    stride-2 + Concat + GhostBlocks), and one extra level (in_conv(top input) + out_conv(top output))."""

    def __init__(self, chans: list[int], out: int, k: int = 5):
        super().__init__()
        self.reduce = nn.ModuleList(conv_bn_act(c, out, 1) for c in chans)
        n = len(chans)
        self.top_down = nn.ModuleList(GhostBottleneck(2 * out, out, out, k) for _ in range(n - 1))
        self.downsample = nn.ModuleList(DepthwiseConvModule(out, out, k, 2) for _ in range(n - 1))
        self.bottom_up = nn.ModuleList(GhostBottleneck(2 * out, out, out, k) for _ in range(n - 1))
        self.extra_in = DepthwiseConvModule(out, out, k, 2)
        self.extra_out = DepthwiseConvModule(out, out, k, 2)

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        feats = [r(f) for r, f in zip(self.reduce, feats, strict=True)]
        inner = [feats[-1]]
        for idx in range(len(feats) - 1, 0, -1):
            up = F.interpolate(inner[0], scale_factor=2.0, mode="nearest")
            inner.insert(0, self.top_down[len(feats) - 1 - idx](torch.cat([up, feats[idx - 1]], 1)))
        outs = [inner[0]]
        for idx in range(len(feats) - 1):
            down = self.downsample[idx](outs[-1])
            outs.append(self.bottom_up[idx](torch.cat([down, inner[idx + 1]], 1)))
        outs.append(self.extra_in(feats[-1]) + self.extra_out(outs[-1]))
        return outs


class NanoDetPlus(nn.Module):
    """NanoDet-Plus with its post-processing in the graph (see the module docstring)."""

    def __init__(self, full: bool):
        super().__init__()
        from torchvision.models.shufflenetv2 import ShuffleNetV2

        self.size = 416 if full else 128
        self.classes = 80
        self.reg_max = 7
        self.strides = (8, 16, 32, 64)
        stage_out = [24, 116, 232, 464, 1024] if full else [24, 48, 96, 192, 1024]
        feat = 96 if full else 32
        net = ShuffleNetV2([4, 8, 4], stage_out)
        for m in list(net.modules()):  # NanoDet's backbone uses LeakyReLU
            for child_name, child in list(m.named_children()):
                if isinstance(child, nn.ReLU):
                    setattr(m, child_name, _act())
        self.stem = nn.Sequential(net.conv1, net.maxpool)
        self.stages = nn.ModuleList([net.stage2, net.stage3, net.stage4])
        self.neck = GhostPAN(stage_out[1:4], feat, 5)
        self.cls_convs = nn.ModuleList(
            nn.Sequential(DepthwiseConvModule(feat, feat, 5), DepthwiseConvModule(feat, feat, 5))
            for _ in self.strides
        )
        bins = 4 * (self.reg_max + 1)
        self.gfl_cls = nn.ModuleList(nn.Conv2d(feat, self.classes + bins, 1) for _ in self.strides)
        gen = torch.Generator().manual_seed(SEED + 1)
        for conv in self.gfl_cls:
            _spread_class_bias(conv, self.classes, gen)
        self.register_buffer("project", torch.linspace(0, self.reg_max, self.reg_max + 1))
        priors, strides = [], []
        for s in self.strides:
            n = math.ceil(self.size / s)
            ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
            priors.append(torch.stack([xs.flatten(), ys.flatten()], -1).float() * s)
            strides.append(torch.full((n * n, 1), float(s)))
        self.register_buffer("priors", torch.cat(priors)[None])  # [1, N, 2] (x, y) * stride
        self.register_buffer("prior_strides", torch.cat(strides)[None])  # [1, N, 1]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        outs = []
        for feat, convs, head in zip(self.neck(feats), self.cls_convs, self.gfl_cls, strict=True):
            outs.append(head(convs(feat)).flatten(start_dim=2))
        preds = torch.cat(outs, dim=2).permute(0, 2, 1)  # [1, N, C + 4 * (reg_max + 1)]
        cls, reg = preds.split([self.classes, 4 * (self.reg_max + 1)], dim=-1)
        scores = cls.sigmoid()
        # Integral: Softmax over the bins of each side, then the expectation (F.linear with linspace).
        dist = F.softmax(reg.reshape(*reg.shape[:-1], 4, self.reg_max + 1), dim=-1)
        dist = F.linear(dist, self.project.type_as(dist)).reshape(*reg.shape[:-1], 4) * self.prior_strides
        # distance2bbox with the image as max_shape
        x1 = (self.priors[..., 0] - dist[..., 0]).clamp(min=0, max=self.size)
        y1 = (self.priors[..., 1] - dist[..., 1]).clamp(min=0, max=self.size)
        x2 = (self.priors[..., 0] + dist[..., 2]).clamp(min=0, max=self.size)
        y2 = (self.priors[..., 1] + dist[..., 3]).clamp(min=0, max=self.size)
        return scores, torch.stack([x1, y1, x2, y2], -1)


def export_nanodet(full: bool, out: Path, photos) -> dict[str, Any]:
    torch.manual_seed(SEED)
    model = NanoDetPlus(full).eval()
    size = model.size
    name = "nanodet_plus"
    inputs = [("data", [1, 3, size, size])]
    spec = Spec(name, "NanoDet-Plus", "detector", 17, lambda f: model, lambda f: inputs, ["scores", "boxes"])
    spec.data = dict(NANODET_DATA)
    n_bn = set_bn_statistics(model, spec, full, photos, 4 if full else 8)
    path = out / f"{name}.onnx"
    example = torch.from_numpy(
        zoo_data.make_arrays(
            {"name": name, "data": spec.data, "inputs": [{"name": "data", "shape": inputs[0][1]}]},
            1,
            7,
            photos,
        )["data"]
    )
    with torch.no_grad():
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=["data"],
            output_names=["scores", "boxes"],
            opset_version=17,
            dynamo=False,
            do_constant_folding=True,
        )
    note = (
        "NanoDet-Plus: ShuffleNetV2 (LeakyReLU), GhostPAN (+ extra level), depthwise 5x5 head; decode in the "
        "graph: Sigmoid scores, Softmax over 8 bins per side, integral MatMul (linspace), * stride, "
        "distance2bbox from centre priors, Clip to the image; scores [1, N, 80] and boxes [1, N, 4] (pixels)"
    )
    return _entry(
        model, path, 17, full, "NanoDet-Plus", inputs, ["scores", "boxes"], NANODET_DATA, note, n_bn
    )


# ------------------------------------------------------------------------------------------------- manifest


def _entry(model, path, opset, full, family, inputs, outputs, data, note, n_bn) -> dict[str, Any]:
    import onnx

    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    return {
        "name": path.stem,
        "file": path.name,
        "family": family,
        "kind": "detector",
        "opset": opset,
        "inputs": [{"name": n, "shape": s, "dtype": "float32"} for n, s in inputs],
        "outputs": outputs,
        "data": dict(data),
        "size": "full" if full else "reduced",
        "params": int(sum(p.numel() for p in model.parameters())),
        "batchnorm_layers_set": n_bn,
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": note,
        "seed": SEED,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="full sizes into benchmarks/.zoo/")
    parser.add_argument(
        "--out", type=Path, help="output folder (default: tests/zoo/models or benchmarks/.zoo)"
    )
    parser.add_argument("--only", help="comma-separated names (yolov8n_op12, yolov8n_op17, nanodet_plus)")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    args = parser.parse_args(argv)
    out = args.out or (FULL_DIR if args.full else SMALL_DIR)
    out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
    torch.set_num_threads(2)
    builders = {
        "yolov8n_op12": lambda: export_yolov8n(args.full, out, 12, False, photos),
        "yolov8n_op17": lambda: export_yolov8n(args.full, out, 17, True, photos),
        "nanodet_plus": lambda: export_nanodet(args.full, out, photos),
    }
    # CI runs the reduced zoo: one YOLOv8n (the unsimplified opset-12 graph) keeps its cost within budget.
    default = list(builders) if args.full else ["yolov8n_op12", "nanodet_plus"]
    wanted = args.only.split(",") if args.only else default
    entries = [builders[n]() for n in wanted]
    for e in entries:
        print(
            f"{out / e['file']}: {(out / e['file']).stat().st_size / 1e6:.2f} MB, {e['params']:,d} params, {e['ops']}"
        )
    zoo_data.merge_manifest(out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
