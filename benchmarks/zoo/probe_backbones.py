"""Issue 12 probe round 7t: vision backbones, face / landmark models and export styles
(``--out benchmarks/.zoo/probe7t``, not committed except the entries marked ``"ci": false``).

- timm 1.0.31 backbones (seeded, ``num_classes=32``, small inputs): LCNet, PP-HGNetV2-B0, RepViT, EfficientViT
  (MIT b0 and MSRA m0), TinyViT-5M, MobileNetV4 conv-small and hybrid-medium (MQA attention), EdgeNeXt,
  ReXNet, EfficientNetV2-rw-t, ResNet-18d, FBNet-C, HardCoReNAS-A, MobileViTv2-0.5;
- faces / landmarks written in torch as the public models are: MTCNN P-Net (fully convolutional, PReLU,
  MaxPool ceil_mode), R-Net and O-Net (Flatten + Linear + PReLU heads), CenterFace (MobileNetV2 backbone,
  ConvTranspose FPN, heatmap / scale / offset / landmark heads), PFLD (inverted residuals, multi-scale
  AvgPool + Flatten + Concat head), a 68-point landmark regressor (conv stack, Flatten + Gemm);
- export styles on a small MobileNetV2 (``--styles``, written from the ONNX graph after export): uint8 NHWC input
  with the preprocessing in the graph, NHWC float input (tf2onnx-style Transpose first), no value_info,
  an extra intermediate feature-map output, an output also used inside the graph, two inputs (image + a
  scale factor tensor, as Paddle detectors take).

    python benchmarks/zoo/probe_backbones.py --out benchmarks/.zoo/probe7t [--only a,b]
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe7t/zoo.json --no-shared --workers 1 --json r.json
    python benchmarks/zoo/probe_backbones.py --styles benchmarks/.zoo/probe7t_styles       # build the styles
    python benchmarks/zoo/probe_backbones.py --run-styles benchmarks/.zoo/probe7t_styles   # their six cases
    python benchmarks/zoo/probe_backbones.py --slim benchmarks/.zoo/probe7t centerface,tinyvit_5m  # onnxslim
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402

Spec = zoo_export.Spec
SEED = 7700

#: MTCNN (facenet-pytorch / kpzhang93): BGR/RGB (pixel - 127.5) / 128
MTCNN_DATA = {"type": "image", "color": "RGB", "scale": 1.0, "mean": [127.5] * 3, "std": [128.0] * 3}
#: CenterFace: BGR, no normalisation (the public ONNX takes raw pixels)
CENTERFACE_DATA = {"type": "image", "color": "BGR", "scale": 1.0, "mean": None, "std": None}
#: PFLD: RGB / 255
PFLD_DATA = {"type": "image", "color": "RGB", "scale": 1 / 255, "mean": None, "std": None}


# --------------------------------------------------------------------------------------------------- timm


def timm_model(name: str, **kwargs) -> callable:
    def make(full: bool) -> nn.Module:
        import timm

        return timm.create_model(name, pretrained=False, num_classes=32, **kwargs)

    return make


TIMM = [
    # name, timm model, input size, opset, kwargs
    ("lcnet_050", "lcnet_050", 96, 13, {}),
    ("lcnet_100_op11", "lcnet_100", 96, 11, {}),
    ("hgnetv2_b0", "hgnetv2_b0", 96, 17, {}),
    ("repvit_m0_9", "repvit_m0_9", 96, 17, {}),
    ("efficientvit_b0", "efficientvit_b0", 128, 17, {}),
    ("efficientvit_m0", "efficientvit_m0", 128, 17, {"img_size": 128}),
    ("tinyvit_5m", "tiny_vit_5m_224", 128, 17, {}),
    ("mnv4_conv_small", "mobilenetv4_conv_small", 96, 13, {}),
    ("mnv4_hybrid_medium", "mobilenetv4_hybrid_medium", 128, 17, {}),
    ("edgenext_xx_small", "edgenext_xx_small", 128, 17, {}),
    ("rexnet_100", "rexnet_100", 96, 13, {}),
    ("efficientnetv2_rw_t", "efficientnetv2_rw_t", 96, 13, {}),
    ("resnet18d_op11", "resnet18d", 96, 11, {}),
    ("fbnetc_100", "fbnetc_100", 96, 13, {}),
    ("hardcorenas_a", "hardcorenas_a", 96, 13, {}),
    ("mobilevitv2_050", "mobilevitv2_050", 128, 17, {}),
]


#: efficientvit_b0 reduced to a committed model's size (334k parameters, 1.3 MB)
EFFICIENTVIT_SMALL = {"widths": (8, 16, 24, 48, 80), "depths": (1, 1, 1, 2, 2), "head_widths": (96, 128)}
#: The committed ones (tests/zoo/models, ``"ci": false``): the guarded-divisor fix on a real architecture, and a
#: face detector with landmarks and ConvTranspose.
COMMITTED = ("efficientvit_b0_small", "centerface")


# --------------------------------------------------------------------------------------------------- MTCNN


class PNet(nn.Module):
    """MTCNN P-Net: fully convolutional; outputs the box regression [1, 4, h, w] and face probability
    [1, 2, h, w] (Softmax over the channel axis)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 10, 3), nn.PReLU(10), nn.MaxPool2d(2, 2, ceil_mode=True),
            nn.Conv2d(10, 16, 3), nn.PReLU(16), nn.Conv2d(16, 32, 3), nn.PReLU(32),
        )  # fmt: skip
        self.conv4_1 = nn.Conv2d(32, 2, 1)
        self.conv4_2 = nn.Conv2d(32, 4, 1)

    def forward(self, x):
        x = self.body(x)
        return self.conv4_2(x), torch.softmax(self.conv4_1(x), dim=1)


class RNet(nn.Module):
    """MTCNN R-Net (24x24): conv/PReLU/MaxPool(ceil), permute to NHWC before Flatten (as facenet-pytorch),
    Linear 576->128 + PReLU, heads 2 (Softmax) and 4."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 28, 3), nn.PReLU(28), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(28, 48, 3), nn.PReLU(48), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(48, 64, 2), nn.PReLU(64),
        )  # fmt: skip
        self.dense4 = nn.Linear(576, 128)
        self.prelu4 = nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x):
        x = self.body(x).permute(0, 3, 2, 1).contiguous()
        x = self.prelu4(self.dense4(x.view(x.shape[0], -1)))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), dim=1)


class ONet(nn.Module):
    """MTCNN O-Net (48x48): heads box 4, landmarks 10, Softmax 2."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 32, 3), nn.PReLU(32), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(32, 64, 3), nn.PReLU(64), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(64, 64, 3), nn.PReLU(64), nn.MaxPool2d(2, 2, ceil_mode=True),
            nn.Conv2d(64, 128, 2), nn.PReLU(128),
        )  # fmt: skip
        self.dense5 = nn.Linear(1152, 256)
        self.prelu5 = nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.body(x).permute(0, 3, 2, 1).contiguous()
        x = self.prelu5(self.dense5(x.view(x.shape[0], -1)))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), dim=1)


# ----------------------------------------------------------------------------------------------- CenterFace


def _cbr(cin: int, cout: int, k: int = 3, s: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class CenterFace(nn.Module):
    """CenterFace: MobileNetV2 x0.35 backbone (torchvision), strides 4/8/16/32 merged top-down by
    ConvTranspose (x2) + Add, 4 heads at stride 4: heatmap (Sigmoid), scale (2), offset (2), landmarks (10)."""

    def __init__(self, upsample: bool = False) -> None:
        super().__init__()
        import torchvision

        feats = torchvision.models.mobilenet_v2(width_mult=0.35).features
        self.s4, self.s8, self.s16, self.s32 = feats[:4], feats[4:7], feats[7:14], feats[14:18]
        with torch.no_grad():
            f = [torch.zeros(1, 3, 64, 64)]
            for stage in (self.s4, self.s8, self.s16, self.s32):
                f.append(stage(f[-1]))
        c4, c8, c16, c32 = (t.shape[1] for t in f[1:])
        w = 24
        self.lat = nn.ModuleList([_cbr(c, w, 1) for c in (c4, c8, c16, c32)])
        self.up = nn.ModuleList(
            [
                nn.Sequential(nn.Upsample(scale_factor=2.0, mode="nearest"), _cbr(w, w, 1))
                if upsample
                else nn.Sequential(
                    nn.ConvTranspose2d(w, w, 2, 2, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)
                )
                for _ in range(3)
            ]
        )
        self.head = _cbr(w, w)
        self.hm, self.scale = nn.Conv2d(w, 1, 1), nn.Conv2d(w, 2, 1)
        self.off, self.lm = nn.Conv2d(w, 2, 1), nn.Conv2d(w, 10, 1)

    def forward(self, x):
        f4 = self.s4(x)
        f8 = self.s8(f4)
        f16 = self.s16(f8)
        f32 = self.s32(f16)
        p = self.lat[3](f32)
        for i, f in ((2, f16), (1, f8), (0, f4)):
            p = self.up[i](p) + self.lat[i](f)
        p = self.head(p)
        return torch.sigmoid(self.hm(p)), self.scale(p), self.off(p), self.lm(p)


# ------------------------------------------------------------------------------------------------------ PFLD


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.conv = nn.Sequential(
            _cbr(cin, hid, 1), _cbr(hid, hid, 3, stride, groups=hid),
            nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )  # fmt: skip

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class PFLD(nn.Module):
    """PFLD (x0.25 widths, 112x112): stem, inverted residuals to 14x14 / 7x7, multi-scale head: AvgPool(s1),
    AvgPool(s2), conv s3 (7x7 valid) each flattened, Concat, Linear -> 196 (98 landmarks)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(_cbr(3, 16, 3, 2), _cbr(16, 16, 3, 1, groups=16))
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 2, 2), InvertedResidual(16, 16, 1, 2),
            InvertedResidual(16, 32, 2, 2), InvertedResidual(32, 32, 1, 4),
            InvertedResidual(32, 16, 1, 2),
        )  # fmt: skip
        self.conv7 = _cbr(16, 32, 3, 2)
        self.conv8 = nn.Conv2d(32, 128, 7, 1, 0)
        self.relu = nn.ReLU(inplace=True)
        self.avg1 = nn.AvgPool2d(14)
        self.avg2 = nn.AvgPool2d(7)
        self.fc = nn.Linear(16 + 32 + 128, 196)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        x1 = self.avg1(x).view(x.size(0), -1)
        x = self.conv7(x)
        x2 = self.avg2(x).view(x.size(0), -1)
        x3 = self.relu(self.conv8(x)).view(x.size(0), -1)
        return self.fc(torch.cat([x1, x2, x3], 1))


class Landmark68(nn.Module):
    """A 68-point landmark regressor (as the many "simple CNN" face-alignment exports): 4 conv-BN-ReLU +
    MaxPool stages on 64x64 gray, Flatten, Gemm 1024 -> 256 -> ReLU -> Gemm 136."""

    def __init__(self) -> None:
        super().__init__()
        layers, c = [], 1
        for w in (16, 32, 48, 64):
            layers += [_cbr(c, w), nn.MaxPool2d(2)]
            c = w
        self.body = nn.Sequential(*layers)
        self.fc = nn.Sequential(nn.Flatten(), nn.Linear(64 * 4 * 4, 256), nn.ReLU(), nn.Linear(256, 136))

    def forward(self, x):
        return self.fc(self.body(x))


def image(size: int, name: str = "input", channels: int = 3, width: int | None = None):
    return lambda full: [(name, [1, channels, size, width or size])]


def specs() -> list[Spec]:
    out = [
        Spec(
            name,
            f"timm {model}",
            "classifier",
            opset,
            timm_model(model, **kw),
            image(size),
            ["logits"],
            note=f"timm {model}, num_classes 32, {size}x{size}",
        )
        for name, model, size, opset, kw in TIMM
    ]
    out += [
        Spec("mtcnn_pnet", "MTCNN P-Net", "detector", 11, lambda f: PNet(), image(48, width=64),
             ["reg", "prob"], data=dict(MTCNN_DATA)),
        Spec("mtcnn_rnet", "MTCNN R-Net", "classifier", 11, lambda f: RNet(), image(24), ["reg", "prob"],
             data=dict(MTCNN_DATA)),
        Spec("mtcnn_onet", "MTCNN O-Net", "classifier", 13, lambda f: ONet(), image(48),
             ["reg", "landmarks", "prob"], data=dict(MTCNN_DATA)),
        Spec("centerface", "CenterFace", "detector", 11, lambda f: CenterFace(), image(128),
             ["heatmap", "scale", "offset", "landmarks"], data=dict(CENTERFACE_DATA),
             note="MobileNetV2 x0.35, ConvTranspose x2 + Add FPN, heatmap (Sigmoid) / scale / offset / 5 "
             "landmarks at stride 4, BGR raw pixels"),
        Spec("centerface_upsample_dyn", "CenterFace (Upsample, dynamic H/W)", "detector", 11,
             lambda f: CenterFace(upsample=True), image(128, width=160),
             ["heatmap", "scale", "offset", "landmarks"], data=dict(CENTERFACE_DATA),
             dynamic_axes={"input": {2: "h", 3: "w"}}),
        Spec("mtcnn_pnet_dyn", "MTCNN P-Net (dynamic H/W)", "detector", 11, lambda f: PNet(), image(48, width=64),
             ["reg", "prob"], data=dict(MTCNN_DATA), dynamic_axes={"input": {2: "h", 3: "w"}}),
        Spec("pfld", "PFLD", "detector", 13, lambda f: PFLD(), image(112), ["landmarks"], data=dict(PFLD_DATA)),
        Spec("landmark68", "68-point landmarks", "detector", 17, lambda f: Landmark68(), image(64, channels=1),
             ["landmarks"], data={"type": "image", "color": "GRAY", "scale": 1 / 255, "mean": None, "std": None}),
    ]  # fmt: skip
    out.append(
        Spec(
            "efficientvit_b0_small",
            "EfficientViT-b0 (MIT, timm), reduced",
            "classifier",
            17,
            timm_model("efficientvit_b0", **EFFICIENTVIT_SMALL),
            image(96),
            ["logits"],
            note="timm efficientvit_b0 at widths 8-80, depths 1/1/1/2/2, head 96/128: ReLU linear attention "
            "(Pad v with ones, MatMul, out[..., :-1] / (out[..., -1:] + eps)), multi-scale aggregation "
            "(grouped 5x5 conv), HardSwish, LayerNormalization head",
        )
    )
    out.append(
        Spec(
            "efficientnetv2_narrow",
            "EfficientNetV2-rw-t (timm), channels x0.08, depth x1.6",
            "classifier",
            13,
            _efficientnetv2_narrow,
            image(96),
            ["logits"],
            note="deep and narrow: on standard-normal noise its logits span 150-320 and float32 runs part by up to "
            "4e-4 of that; at std 0.5 they span 0.5 (tests/targets/data/efficientnetv2_narrow.onnx: the seeded "
            "verification samples' retry, yardstick.SEEDED_STDS)",
        )
    )
    return out


def _efficientnetv2_narrow(full: bool) -> nn.Module:
    from timm.models.efficientnet import _gen_efficientnetv2_s

    return _gen_efficientnetv2_s(
        "efficientnetv2_rw_t", channel_multiplier=0.08, depth_multiplier=1.6, rw=False, pretrained=False,
        num_classes=32,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------- export styles

MEAN = torch.tensor(zoo_export.zoo_data.IMAGENET_MEAN).view(1, 3, 1, 1)
STD = torch.tensor(zoo_export.zoo_data.IMAGENET_STD).view(1, 3, 1, 1)


def _mnv2() -> nn.Module:
    import torchvision

    return torchvision.models.mobilenet_v2(width_mult=0.35, num_classes=32)


class Uint8Nhwc(nn.Module):
    """uint8 NHWC pixels in; Cast, Transpose, Div 255, Sub mean, Div std in the graph."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mnv2()

    def forward(self, x):
        x = x.float().permute(0, 3, 1, 2) / 255.0
        return self.net((x - MEAN) / STD)


class NhwcFloat(nn.Module):
    """Normalised NHWC float in (tf2onnx-style: a Transpose first)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mnv2()

    def forward(self, x):
        return self.net(x.permute(0, 3, 1, 2))


class ExtraFeature(nn.Module):
    """Logits plus an intermediate feature map (stride 16) as a second output."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mnv2()

    def forward(self, x):
        f = self.net.features[:11](x)
        y = self.net.features[11:](f).mean((2, 3))
        return self.net.classifier(y), f


class OutputReused(nn.Module):
    """Logits is an output and also feeds the Softmax of the second output."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mnv2()

    def forward(self, x):
        logits = self.net(x)
        return logits, torch.softmax(logits * 2.0, dim=1)


class TwoInputs(nn.Module):
    """Image + scale_factor [1, 2] (Paddle detectors): boxes from a conv head, divided by the scale factors."""

    def __init__(self) -> None:
        super().__init__()
        self.features = _mnv2().features[:14]
        self.box = nn.Conv2d(32, 4, 1)
        self.cls = nn.Conv2d(32, 8, 1)

    def forward(self, image, scale_factor):
        f = self.features(image)
        boxes = torch.relu(self.box(f)).flatten(2).transpose(1, 2) * 16.0  # [1, N, 4]
        sf = torch.cat([scale_factor[:, 1:2], scale_factor[:, 0:1]], 1).repeat(1, 2).unsqueeze(1)
        scores = torch.sigmoid(self.cls(f)).flatten(2)
        return boxes / sf, scores


STYLES = {
    # name: (module, input names and shapes, dtypes, outputs, kind, post-processing)
    "style_uint8_nhwc": (Uint8Nhwc, [("image", [1, 96, 96, 3])], ["uint8"], ["logits"], "classifier", None),
    "style_nhwc_float": (NhwcFloat, [("input", [1, 96, 96, 3])], ["float32"], ["logits"], "classifier", None),
    "style_no_value_info": (_mnv2, [("input", [1, 3, 96, 96])], ["float32"], ["logits"], "classifier", "strip"),
    "style_extra_feature": (ExtraFeature, [("input", [1, 3, 96, 96])], ["float32"], ["logits", "features"],
                            "classifier", None),
    "style_output_reused": (OutputReused, [("input", [1, 3, 96, 96])], ["float32"], ["logits", "probs"],
                            "classifier", None),
    "style_two_inputs": (TwoInputs, [("image", [1, 3, 96, 96]), ("scale_factor", [1, 2])], ["float32"] * 2,
                         ["boxes", "scores"], "detector", None),
}  # fmt: skip


def _style_arrays(name: str, count: int, seed: int, photos) -> dict:
    import numpy as np

    zd = zoo_export.zoo_data
    _, inputs, dtypes, *_ = STYLES[name]
    out = {}
    for (n, shape), dt in zip(inputs, dtypes, strict=True):
        if n == "scale_factor":
            out[n] = np.random.default_rng(seed).uniform(0.3, 1.5, (count, 2)).astype(np.float32)
        elif dt == "uint8":
            out[n] = zd.photo_crops(photos, count, shape[1], shape[2], seed)
        else:
            nhwc = shape[-1] == 3
            h, w = (shape[1], shape[2]) if nhwc else (shape[2], shape[3])
            x = zd.image_array(zd.IMAGENET_DATA, [1, 3, h, w], count, seed, photos)
            out[n] = np.ascontiguousarray(x.transpose(0, 2, 3, 1)) if nhwc else x
    return out


def build_styles(out_dir: Path, photos) -> list[Path]:
    import onnx

    paths = []
    for i, (name, (make, inputs, _dtypes, outputs, _kind, post)) in enumerate(STYLES.items()):
        torch.manual_seed(SEED + 100 + i)
        model = make().eval()
        bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
        for bn in bns:
            bn.reset_running_stats()
            bn.momentum = None
        model.train()
        with torch.no_grad():
            for b in range(4):
                arrays = _style_arrays(name, 16, 1000 + b, photos)
                model(*[torch.from_numpy(arrays[n]) for n, _ in inputs])
        model.eval()
        example = _style_arrays(name, 1, 7, photos)
        path = out_dir / f"{name}.onnx"
        torch.onnx.export(
            model, tuple(torch.from_numpy(example[n]) for n, _ in inputs), str(path), dynamo=False,
            input_names=[n for n, _ in inputs], output_names=outputs, opset_version=13,
        )  # fmt: skip
        if post == "strip":
            proto = onnx.load(str(path))
            del proto.graph.value_info[:]
            onnx.save(proto, str(path))
        onnx.checker.check_model(str(path))
        paths.append(path)
        print(f"{name:24s} {path.stat().st_size / 1e6:.2f} MB")
    return paths


def run_styles(out_dir: Path, names: list[str], workers: int = 1) -> int:
    """The six cases on the export-style models (their own data: uint8 / NHWC / a scale-factor input)."""
    import numpy as np
    import zoo  # benchmarks/zoo.py
    import zoo_cases

    photos = zoo_export.zoo_data.cached_photos()
    models = []
    data = out_dir / "data"
    data.mkdir(parents=True, exist_ok=True)
    for name in names:
        _, inputs, dtypes, _, kind, _ = STYLES[name]
        c, e = data / f"{name}.calib.npz", data / f"{name}.eval.npz"
        np.savez(c, **_style_arrays(name, 32, 1, photos))
        np.savez(e, **_style_arrays(name, 16, 2, photos))
        specs = [{"name": n, "shape": s, "dtype": d} for (n, s), d in zip(inputs, dtypes, strict=True)]
        models.append(zoo_cases.Model(name, out_dir / f"{name}.onnx", kind, specs, c, e))
    results, elapsed = zoo.run_and_print(models, list(zoo_cases.CASES), out_dir / "work", workers, 400.0)
    (out_dir / "styles.json").write_text(
        __import__("json").dumps({"results": zoo_cases.result_json(results)}, indent=1, default=float)
    )
    return 0


def slim(out_dir: Path, names: list[str]) -> None:
    """``NAME_slim``: the manifest model ``NAME`` simplified by onnxslim (as many users ship), same entry."""
    import onnx
    import onnxslim

    zd = zoo_export.zoo_data
    entries = {e["name"]: e for e in zd.entries(out_dir / "zoo.json")}
    new = []
    for name in names:
        entry = dict(entries[name])
        proto = onnxslim.slim(onnx.load(str(out_dir / entry["file"])))
        entry.update(name=f"{name}_slim", file=f"{name}_slim.onnx", note=f"onnxslim {onnxslim.__version__}")
        entry["ops"] = sorted({n.op_type for n in proto.graph.node})
        onnx.save(proto, str(out_dir / entry["file"]))
        new.append(entry)
        print(name, "->", entry["file"], entry["ops"])
    zd.merge_manifest(out_dir, new)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--slim":
        slim(Path(argv[1]), argv[2].split(","))
        return 0
    if argv and argv[0] in ("--styles", "--run-styles"):
        out = Path(argv[1]) if len(argv) > 1 else zoo_export.FULL_DIR / "probe7t"
        out.mkdir(parents=True, exist_ok=True)
        if argv[0] == "--styles":
            build_styles(out, zoo_export.zoo_data.bn_photos(None, zoo_export.default_shared()))
            return 0
        names = argv[2].split(",") if len(argv) > 2 else list(STYLES)
        return run_styles(out, names)
    return zoo_export.build_main(argv, __doc__, specs(), SEED, finish=_finish)


def _finish(spec: Spec, entry: dict, full: bool) -> None:
    if spec.name in COMMITTED:
        entry["ci"] = False
    if spec.dynamic_axes:
        entry["extra_args"] = zoo_export.input_shape_args(spec, full)


if __name__ == "__main__":
    raise SystemExit(main())
