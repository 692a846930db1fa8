"""Issue 12 probe round 13d: detectors and face models as their own PyPI packages build and export them.

Earlier rounds wrote YOLOX / NanoDet / RetinaFace / SCRFD style heads in torch (``probe_detectors.py``,
``faces.py``) or took ultralytics (``probe_ultralytics.py``); here each network comes from its package's own code
(``--out benchmarks/.zoo/probe13d``, not committed), seeded weights with BatchNorm statistics from the photos
unless the wheel ships trained ones:

- ``effdet`` 0.4.1 (Ross Wightman's EfficientDet): ``create_model(..., bench_task='')`` EfficientDet-d0 and
  tf_efficientdet_lite0 at 256 (BiFPN fast normalised fusion, TF "same" padding in the lite variant), the raw
  class / box nets (five levels each) as users export them; and ``DetBenchPredict`` (anchors decode, top-k,
  batched NMS) whole;
- ``yolov5`` 7.0.14 (the pip package of ultralytics' YOLOv5): ``yolov5n.yaml`` through its ``export_onnx`` (Conv+BN
  fused, ``Detect.export = True``) at opsets 12 and 17 at 256, and the raw Detect outputs (Detect in training mode:
  three 5-D [1, 3, H, W, 85] tensors);
- ``facenet-pytorch`` 2.6.0: MTCNN's trained P-Net (weights in the wheel) at 120x160 and 240x320 and with dynamic
  H/W, and InceptionResnetV1 (seeded: the VGGFace2 weights are a download) 160x160 -> 512-d embedding;
- ``yolox`` 0.3.0 (sdist; its pure-python model code): yolox_nano and yolox_tiny from its exps at 256,
  ``decode_in_inference`` on and off, SiLU replaced as its ``tools/export_onnx.py`` does, opset 11;
- ``retinaface-pytorch`` 0.0.8: RetinaFace-ResNet50 as its ``converters/to_onnx.py`` exports it (decode, score
  threshold, NMS: a data-dependent box count) and its NMS-free form (decoded boxes, scores, landmarks), 256;
- ``batch-face`` 1.5.4: its RetinaFace-MobileNet0.25 (phase "test", Softmax in the graph) at 320x320 and its
  landmark models PFLD (112) and MobileNet_GDConv (MobileNetV2 + global depthwise conv, 224).

    /work/venv-x/bin/pip install --no-deps effdet==0.4.1 yolov5==7.0.14 facenet-pytorch==2.6.0 \\
        retinaface-pytorch==0.0.8 batch-face==1.5.4 && pip install omegaconf pycocotools pandas seaborn
    pip download --no-deps --no-build-isolation yolox==0.3.0   # sdist; extract, pass --yolox-src DIR
    python benchmarks/zoo/probe_detectors2.py --yolox-src /tmp/yolox-0.3.0
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe13d/zoo.json --no-shared --workers 1 --json r.json
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import export as zoo_export  # noqa: E402
from detectors import YOLO_DATA, _spread_class_bias  # noqa: E402
from export import Spec, zoo_data  # noqa: E402

OUT = zoo_export.FULL_DIR / "probe13d"
SEED = 1313

IMAGENET = dict(zoo_data.IMAGENET_DATA)
#: MTCNN / InceptionResnetV1 (facenet_pytorch's fixed_image_standardization): (pixel - 127.5) / 128, RGB
FACENET = {"type": "image", "color": "RGB", "scale": 1.0, "mean": [127.5] * 3, "std": [128.0] * 3}
#: YOLOX 0.3.0 (legacy=False): raw BGR pixels 0..255, no normalisation
YOLOX_DATA = {"type": "image", "color": "BGR", "scale": 1.0, "mean": None, "std": None}
#: batch-face's RetinaFace: BGR minus (104, 117, 123), no scaling
BATCH_FACE = {"type": "image", "color": "BGR", "scale": 1.0, "mean": [104.0, 117.0, 123.0], "std": None}
RGB01 = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None}


def image(name: str, h: int, w: int | None = None) -> Callable[[bool], list]:
    return lambda full: [(name, [1, 3, h, w or h])]


# ------------------------------------------------------------------------------------------------ effdet


class EffDetRaw(nn.Module):
    """``create_model(name, bench_task='')``: the network's (class_out, box_out) lists, five levels each."""

    def __init__(self, name: str, size: int, classes: int):
        super().__init__()
        from effdet import create_model

        self.net = create_model(name, bench_task="", num_classes=classes, pretrained=False,
                                pretrained_backbone=False, image_size=(size, size))  # fmt: skip
        gen = torch.Generator().manual_seed(SEED)
        with torch.no_grad():  # a trained detector's class logits: mostly background
            conv = self.net.class_net.predict.conv_pw
            conv.weight.copy_(
                1.5 * torch.randn(conv.weight.shape, generator=gen) / math.sqrt(conv.weight[0].numel())
            )
            conv.bias.copy_(-4.0 + 1.5 * torch.randn(conv.bias.shape, generator=gen))

    def forward(self, x: torch.Tensor):
        cls, box = self.net(x)
        return (*cls, *box)


class EffDetPredict(nn.Module):
    """``DetBenchPredict``: anchors decode, top-k 5000, per-class batched NMS, [1, 100, 6] detections."""

    def __init__(self, name: str, size: int, classes: int):
        super().__init__()
        from effdet import DetBenchPredict

        self.bench = DetBenchPredict(EffDetRaw(name, size, classes).net)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bench(x)


def effdet_specs() -> list[Spec]:
    specs = []
    for arch, size in (("efficientdet_d0", 256), ("tf_efficientdet_lite0", 256)):
        outs = [f"class_{i}" for i in range(5)] + [f"box_{i}" for i in range(5)]
        specs.append(Spec(f"{arch}_raw", f"EfficientDet ({arch}, effdet 0.4.1, bench_task='')", "detector", 13,
                          lambda full, a=arch, s=size: EffDetRaw(a, s, 20), image("input", size), outs,
                          data=dict(IMAGENET), note=f"effdet create_model('{arch}', bench_task=''), 20 classes"))  # fmt: skip
    specs.append(Spec("efficientdet_d0_predict", "EfficientDet-d0 DetBenchPredict (effdet 0.4.1)", "detector", 13,
                      lambda full: EffDetPredict("efficientdet_d0", 256, 20), image("input", 256), ["detections"],
                      data=dict(IMAGENET), note="DetBenchPredict: decode, top-k, batched NMS"))  # fmt: skip
    return specs


# ------------------------------------------------------------------------------------------------ yolov5


def yolov5n(full: bool) -> nn.Module:
    import yolov5.models
    from yolov5.models.yolo import Detect, DetectionModel

    model = DetectionModel(str(Path(yolov5.models.__file__).parent / "yolov5n.yaml"), ch=3, nc=80)
    gen = torch.Generator().manual_seed(SEED)
    det = model.model[-1]
    with torch.no_grad():  # objectness and class logits of a trained detector: mostly background
        for conv in det.m:
            bias = conv.bias.view(det.na, -1)
            bias[:, 4].copy_(-5.0 + 1.5 * torch.randn(det.na, generator=gen))
            bias[:, 5:].copy_(-3.0 + 1.5 * torch.randn(det.na, det.nc, generator=gen))
    assert isinstance(det, Detect)
    return model


class Yolov5Export(nn.Module):
    """What ``yolov5/export.py`` hands ``torch.onnx.export``: Conv+BN fused, ``Detect.export = True`` (one
    [1, N, 85] decoded output), or with ``raw`` the Detect in training mode (three 5-D raw tensors)."""

    def __init__(self, raw: bool):
        super().__init__()
        self.model = yolov5n(True)
        self.raw = raw

    def prepare(self) -> None:
        det = self.model.model[-1]
        self.model.fuse()
        self.model.eval()
        det.inplace, det.dynamic, det.export = False, False, True

    def forward(self, x: torch.Tensor):
        if self.raw:  # torch.onnx.export puts the module in eval mode: the Detect's raw path by its flag
            self.model.model[-1].training = True
        out = self.model(x)
        return tuple(out) if self.raw else out[0]


# ------------------------------------------------------------------------------------------------ facenet


def pnet(full: bool) -> nn.Module:
    from facenet_pytorch.models.mtcnn import PNet

    return PNet(pretrained=True)  # the wheel's data/pnet.pt


def inception_resnet_v1(full: bool) -> nn.Module:
    from facenet_pytorch import InceptionResnetV1

    return InceptionResnetV1(pretrained=None, classify=False)


# ------------------------------------------------------------------------------------------------ yolox


YOLOX_SRC: list[Path] = []


def yolox(exp_name: str, decode: bool) -> Callable[[bool], nn.Module]:
    def make(full: bool) -> nn.Module:
        src = YOLOX_SRC[0]
        sys.path.insert(0, str(src))
        from yolox.exp import get_exp
        from yolox.models.network_blocks import SiLU
        from yolox.utils import replace_module

        exp = get_exp(str(src / "exps" / "default" / f"{exp_name}.py"), None)
        exp.num_classes = 80
        model = exp.get_model()
        gen = torch.Generator().manual_seed(SEED)
        for conv in model.head.cls_preds:
            _spread_class_bias(conv, 80, gen)
        model = replace_module(model, nn.SiLU, SiLU)
        model.head.decode_in_inference = decode
        return YoloxInference(model)

    return make


class YoloxInference(nn.Module):
    """YOLOX's forward in train mode wants targets (it computes the loss): the BatchNorm statistics are set
    with YOLOX and its head taking their inference path while the layers under them are in train mode."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.model.training = self.model.head.training = False
        return self.model(x)


# ------------------------------------------------------------------------------------------------ RetinaFace


PRIORS = {"min_sizes": [[16, 32], [64, 128], [256, 512]], "steps": [8, 16, 32]}


class RetinaFaceExport(nn.Module):
    """retinaface-pytorch's ``converters/to_onnx.py`` ``M``: RetinaFace-ResNet50, Softmax, prior decode of boxes
    and landmarks scaled to pixels, then (``nms``) the score threshold and NMS as it writes them, else the
    NMS-free tensors (boxes [N, 4], scores [N], landmarks [N, 10])."""

    def __init__(self, size: int, nms: bool):
        super().__init__()
        from retinaface.network import RetinaFace
        from retinaface.prior_box import priorbox

        self.model = RetinaFace(name="Resnet50", pretrained=False,
                                return_layers={"layer2": 1, "layer3": 2, "layer4": 3}, in_channels=256,
                                out_channels=256)  # fmt: skip
        self.nms = nms
        self.register_buffer("scale_landmarks", torch.tensor([float(size)] * 10))
        self.register_buffer("scale_bboxes", torch.tensor([float(size)] * 4))
        self.register_buffer("priors", priorbox(min_sizes=PRIORS["min_sizes"], steps=PRIORS["steps"],
                                                clip=False, image_size=(size, size)))  # fmt: skip
        gen = torch.Generator().manual_seed(SEED)
        with torch.no_grad():
            for head in self.model.ClassHead:  # faces are rare: background logit up
                head.conv1x1.bias.view(-1, 2)[:, 0].add_(3.0 + torch.randn(2, generator=gen))

    def forward(self, x: torch.Tensor):
        from retinaface.box_utils import decode, decode_landm
        from torch.nn import functional as F
        from torchvision.ops import nms

        loc, conf, land = self.model(x)
        conf = F.softmax(conf, dim=-1)
        boxes = decode(loc[0], self.priors, [0.1, 0.2]) * self.scale_bboxes
        scores = conf[0][:, 1]
        landmarks = decode_landm(land[0], self.priors, [0.1, 0.2]) * self.scale_landmarks
        if not self.nms:
            return boxes, scores, landmarks
        valid = torch.where(scores > 0.7)[0]
        boxes, landmarks, scores = boxes[valid], landmarks[valid], scores[valid]
        keep = nms(boxes, scores, 0.4)
        return boxes[keep, :], scores[keep], landmarks[keep]


def _batch_face(module: str):
    """One module of batch_face loaded from its file: the package's __init__ imports its head-pose estimator,
    which needs ``sixdrepnet`` (not used here)."""
    import importlib.util

    root = Path(importlib.util.find_spec("batch_face").submodule_search_locations[0])
    spec = importlib.util.spec_from_file_location(f"_bf_{module.replace('/', '_')}", root / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def batch_face_retinaface(full: bool) -> nn.Module:
    RetinaFace = _batch_face("face_detection/alignment").RetinaFace

    cfg = {"name": "mobilenet0.25", "return_layers": {"stage1": 1, "stage2": 2, "stage3": 3}, "in_channel": 32,
           "out_channel": 64, "pretrain": False}  # fmt: skip
    return RetinaFace(cfg=cfg, phase="test")


def pfld(full: bool) -> nn.Module:
    return _batch_face("fast_alignment/pfld_compressed").PFLDInference()


def gdconv(full: bool) -> nn.Module:
    return _batch_face("fast_alignment/basenet").MobileNet_GDConv(136)


# ------------------------------------------------------------------------------------------------ the probe


def specs() -> list[Spec]:
    out = effdet_specs()
    for opset in (12, 17):
        out.append(Spec(f"yolov5n_op{opset}", "YOLOv5n (yolov5 7.0.14 export_onnx)", "detector", opset,
                        lambda full: Yolov5Export(False), image("images", 256), ["output0"], data=dict(YOLO_DATA),
                        note=f"yolov5n.yaml, fused, Detect.export=True, opset {opset}"))  # fmt: skip
    out.append(Spec("yolov5n_raw", "YOLOv5n raw Detect outputs (yolov5 7.0.14)", "detector", 12,
                    lambda full: Yolov5Export(True), image("images", 256), ["p3", "p4", "p5"], data=dict(YOLO_DATA),
                    note="Detect in training mode: 5-D [1, 3, H, W, 85] raw tensors"))  # fmt: skip
    for h, w in ((120, 160), (240, 320)):
        out.append(Spec(f"mtcnn_pnet_{h}x{w}", "MTCNN P-Net, trained (facenet-pytorch 2.6.0)", "detector", 11, pnet,
                        image("input", h, w), ["reg", "prob"], data=dict(FACENET),
                        note=f"the wheel's pnet.pt, {h}x{w} (one pyramid scale)"))  # fmt: skip
    out.append(Spec("mtcnn_pnet_dynamic", "MTCNN P-Net, trained, dynamic H/W", "detector", 11, pnet,
                    image("input", 180, 240), ["reg", "prob"], data=dict(FACENET),
                    dynamic_axes={"input": {2: "h", 3: "w"}, "reg": {2: "oh", 3: "ow"}, "prob": {2: "oh", 3: "ow"}},
                    note="dynamic H/W, run at 180x240 via --input-shape"))  # fmt: skip
    out.append(Spec("inception_resnet_v1", "InceptionResnetV1 face embedder (facenet-pytorch, seeded)", "encoder", 13,
                    inception_resnet_v1, image("input", 160), ["embedding"], data=dict(FACENET),
                    note="classify=False: 512-d L2-normalised embedding"))  # fmt: skip
    for exp_name in ("yolox_nano", "yolox_tiny"):
        for decode in (True, False):
            name = f"{exp_name}_{'decoded' if decode else 'raw'}"
            out.append(Spec(name, f"YOLOX ({exp_name}, yolox 0.3.0)", "detector", 11, yolox(exp_name, decode),
                            image("images", 256), ["output"], data=dict(YOLOX_DATA),
                            note=f"exps/default/{exp_name}.py, decode_in_inference={decode}, export_onnx.py's "
                            "SiLU replacement"))  # fmt: skip
    out.append(Spec("retinaface_r50_nms", "RetinaFace-ResNet50 (retinaface-pytorch to_onnx.py)", "detector", 12,
                    lambda full: RetinaFaceExport(256, True), image("input", 256), ["boxes", "scores", "landmarks"],
                    data=dict(IMAGENET), note="decode + threshold + NMS: a data-dependent box count"))  # fmt: skip
    out.append(Spec("retinaface_r50_decoded", "RetinaFace-ResNet50, NMS-free (retinaface-pytorch)", "detector", 12,
                    lambda full: RetinaFaceExport(256, False), image("input", 256), ["boxes", "scores", "landmarks"],
                    data=dict(IMAGENET), note="decode, no threshold / NMS"))  # fmt: skip
    out.append(Spec("batchface_retinaface_mnet", "RetinaFace-MobileNet0.25 (batch-face 1.5.4)", "detector", 11,
                    batch_face_retinaface, image("input", 320), ["loc", "conf", "landms"], data=dict(BATCH_FACE),
                    note="phase='test' (Softmax in the graph)"))  # fmt: skip
    out.append(Spec("batchface_pfld", "PFLD face landmarks (batch-face 1.5.4)", "encoder", 11, pfld,
                    image("input", 112), ["landmarks"], data=dict(RGB01), note="68 points, 112x112"))  # fmt: skip
    out.append(Spec("batchface_gdconv", "MobileNet_GDConv face landmarks (batch-face 1.5.4)", "encoder", 11, gdconv,
                    image("input", 224), ["landmarks"], data=dict(IMAGENET),
                    note="MobileNetV2 + 7x7 global depthwise conv, 68 points"))  # fmt: skip
    return out


@contextlib.contextmanager
def _yolov5_prepared():
    """Yolov5Export builds in train mode for the BatchNorm statistics; fuse and switch to export after them."""
    original = zoo_export.set_bn_statistics

    def patched(model, spec, full, photos, batches):
        n = original(model, spec, full, photos, batches)
        if isinstance(model, Yolov5Export):
            model.prepare()
        return n

    zoo_export.set_bn_statistics = patched
    try:
        yield
    finally:
        zoo_export.set_bn_statistics = original


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", help="comma-separated model names")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    parser.add_argument("--yolox-src", type=Path, default=Path("/tmp/probe13d_wheels/src/yolox-0.3.0"),
                        help="the extracted yolox 0.3.0 sdist")  # fmt: skip
    args = parser.parse_args(argv)
    YOLOX_SRC.append(args.yolox_src)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, zoo_export.default_shared())
    torch.set_num_threads(2)
    wanted = set(args.only.split(",")) if args.only else None
    entries = []
    with _yolov5_prepared():
        for i, spec in enumerate(specs()):
            if wanted and spec.name not in wanted:
                continue
            try:  # a probe: one model that does not build / export must not stop the others
                entry = zoo_export.export(spec, True, args.out, photos, seed=SEED + i)
            except Exception as exc:
                print(f"{spec.name}: could not build/export: {type(exc).__name__}: {str(exc)[:300]}")
                continue
            entry["size"] = "full"
            if spec.dynamic_axes:
                entry["extra_args"] = zoo_export.input_shape_args(spec, True)
            entries.append(entry)
            size = (args.out / entry["file"]).stat().st_size
            print(f"{spec.name:28s} opset {spec.opset}  {entry['params']:>11,d} params  {size / 1e6:6.2f} MB  "
                  f"{entry['ops']}")  # fmt: skip
    zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
