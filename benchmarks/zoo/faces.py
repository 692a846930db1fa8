"""The face detectors of the model zoo: UltraFace (version-slim and version-RFB), RetinaFace-MobileNet0.25 and
BlazeFace.

    python benchmarks/zoo/faces.py            # reduced sizes -> tests/zoo/models/ (committed) + zoo.json
    python benchmarks/zoo/faces.py --full     # full sizes    -> benchmarks/.zoo/ (git-ignored) + zoo.json

Built here in torch after the public architectures, with their box-decoding tails as the public ONNX exports
have them; no weights can be downloaded, so weights are seeded and BatchNorm statistics are set from real photos
(``export.set_bn_statistics``).

- **UltraFace** (Ultra-Light-Fast-Generic-Face-Detector-1MB): the ``Mb_Tiny`` backbone (``version-slim``:
  conv-BN-ReLU stem, 12 depthwise-separable blocks, base channel 16) or ``Mb_Tiny_RFB`` (``version-RFB``: the
  third block at stride 8 is a ``BasicRFB``: three dilated branches, Concat, 1x1 ConvLinear, ``* scale +
  shortcut``, ReLU), SSD heads at strides 8/16/32/64 (SeperableConv2d: depthwise conv with bias, ReLU, 1x1
  conv; the last scale a plain 3x3 conv after the ``extras`` block), min boxes [[10,16,24],[32,48],[64,96],
  [128,192,256]], and the test-phase tail of the exported ONNX: ``scores`` = Softmax over 2 classes [1, N, 2],
  ``boxes`` [1, N, 4] decoded from the priors (centre = loc[..., :2] * 0.1 * prior_wh + prior_xy, size =
  exp(loc[..., 2:] * 0.2) * prior_wh, then centre form to corners: Slice/Mul/Add/Exp/Concat/Div/Sub). Input
  ``input`` [1, 3, 240, 320] RGB, (pixel - 127) / 128. The public ONNX is an opset-9..11 export: version-RFB
  is exported here at opset 11 (attribute-free Slice at 10+, Softmax with the old 2-D coercion semantics).
- **RetinaFace-MobileNet0.25** (Pytorch_Retinaface's ``mobilenet0.25`` config): MobileNetV1 x0.25 with
  LeakyReLU(0.1), stages at strides 8/16/32 (64/128/256 channels), FPN (1x1 lateral conv-BN-LeakyReLU,
  nearest upsampling to the finer size, Add, 3x3 merge), SSH context modules (3x3 | 5x5 as two 3x3 | 7x7 as
  three 3x3, Concat, ReLU), 2 anchors per cell, ClassHead / BboxHead / LandmarkHead (1x1 conv, Permute,
  Reshape, Concat), Softmax on the classes. Input ``input0`` [1, 3, 640, 640] BGR minus (104, 117, 123).
  ``retinaface_mnet025`` exports the three raw heads as the public convert_to_onnx.py does (``loc``, ``conf``,
  ``landms``); ``retinaface_mnet025_decoded`` has the prior-box decode in the graph (boxes in corners,
  5 landmarks), as many public re-exports do (built with ``--full`` only).

- **BlazeFace** (MediaPipe's front-camera model, after hollance/BlazeFace-PyTorch): BlazeBlocks (depthwise 3x3
  with bias + 1x1; at stride 2 the depthwise input padded right/bottom by F.pad and the residual max-pooled;
  a widening block zero-pads the residual's channels by F.pad: an ONNX Pad on axis 1), classifier/regressor
  heads at 16x16 (2 anchors) and 8x8 (6 anchors) flattened to [1, 896, *], and the anchor decode in the graph
  (Gather per coordinate, ``/ 128 * anchor_wh + anchor_xy`` with [896]-long anchor columns, corners and 6
  keypoints; Sigmoid of the clamped scores). Input ``input`` [1, 3, 128, 128] RGB in [-1, 1]. No BatchNorm (the
  public model has none). ``"ci": false``.

Reduced sizes for CI: UltraFace 160x120 (same widths), RetinaFace 128x128 with FPN/SSH 32 wide (64 in full).
"""

from __future__ import annotations

import math
import sys
from itertools import product
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import export as zoo_export  # noqa: E402  (also puts tests/zoo and benchmarks on sys.path)

zoo_data = zoo_export.zoo_data
SEED = 4242

ULTRAFACE_DATA = {"type": "image", "color": "RGB", "scale": 1.0, "mean": [127.0] * 3, "std": [128.0] * 3}
RETINAFACE_DATA = {"type": "image", "color": "BGR", "scale": 1.0, "mean": [104.0, 117.0, 123.0], "std": None}
#: BlazeFace (MediaPipe): RGB in [-1, 1].
BLAZEFACE_DATA = {"type": "image", "color": "RGB", "scale": 1 / 127.5, "mean": [1.0] * 3, "std": [1.0] * 3}


# ------------------------------------------------------------------------------------------------ UltraFace


def _conv_bn(inp: int, oup: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, oup, 3, stride, 1, bias=False), nn.BatchNorm2d(oup), nn.ReLU(inplace=True)
    )


def _conv_dw(inp: int, oup: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False),
        nn.BatchNorm2d(inp),
        nn.ReLU(inplace=True),
        nn.Conv2d(inp, oup, 1, 1, 0, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU(inplace=True),
    )


class _BasicConv(nn.Module):
    def __init__(self, cin, cout, kernel_size, stride=1, padding=0, dilation=1, relu=True):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size, stride, padding, dilation, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.01, affine=True)
        self.relu = nn.ReLU(inplace=True) if relu else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv(x))
        return self.relu(x) if self.relu is not None else x


class BasicRFB(nn.Module):
    """UltraFace's receptive field block (vision/nn/mb_tiny_RFB.py, ``map_reduce=8``, ``vision=1``)."""

    def __init__(self, cin: int, cout: int, stride: int = 1, scale: float = 1.0, map_reduce: int = 8):
        super().__init__()
        self.scale = scale
        inter = cin // map_reduce
        vision = 1
        self.branch0 = nn.Sequential(
            _BasicConv(cin, inter, 1, relu=False),
            _BasicConv(inter, 2 * inter, 3, stride, 1),
            _BasicConv(2 * inter, 2 * inter, 3, 1, vision + 1, vision + 1, relu=False),
        )
        self.branch1 = nn.Sequential(
            _BasicConv(cin, inter, 1, relu=False),
            _BasicConv(inter, 2 * inter, 3, stride, 1),
            _BasicConv(2 * inter, 2 * inter, 3, 1, vision + 2, vision + 2, relu=False),
        )
        self.branch2 = nn.Sequential(
            _BasicConv(cin, inter, 1, relu=False),
            _BasicConv(inter, (inter // 2) * 3, 3, 1, 1),
            _BasicConv((inter // 2) * 3, 2 * inter, 3, stride, 1),
            _BasicConv(2 * inter, 2 * inter, 3, 1, vision + 4, vision + 4, relu=False),
        )
        self.conv_linear = _BasicConv(6 * inter, cout, 1, relu=False)
        self.shortcut = _BasicConv(cin, cout, 1, stride, relu=False)
        self.relu = nn.ReLU(inplace=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.cat((self.branch0(x), self.branch1(x), self.branch2(x)), 1)
        out = self.conv_linear(out)
        return self.relu(out * self.scale + self.shortcut(x))


def _separable(cin: int, cout: int, kernel_size: int = 1, stride: int = 1, padding: int = 0) -> nn.Sequential:
    """UltraFace's SeperableConv2d: a depthwise conv with bias, ReLU, a 1x1 conv."""
    return nn.Sequential(
        nn.Conv2d(cin, cin, kernel_size, stride, padding, groups=cin),
        nn.ReLU(),
        nn.Conv2d(cin, cout, 1),
    )


def ultraface_priors(width: int, height: int) -> torch.Tensor:
    """UltraFace's generate_priors: [N, 4] centre-form priors, normalised, clamped to [0, 1]."""
    strides = (8, 16, 32, 64)
    min_boxes = ([10, 16, 24], [32, 48], [64, 96], [128, 192, 256])
    priors = []
    for stride, boxes in zip(strides, min_boxes, strict=True):
        fw, fh = math.ceil(width / stride), math.ceil(height / stride)
        scale_w, scale_h = width / stride, height / stride
        for j, i in product(range(fh), range(fw)):
            cx, cy = (i + 0.5) / scale_w, (j + 0.5) / scale_h
            for box in boxes:
                priors.append([cx, cy, box / width, box / height])
    return torch.tensor(priors, dtype=torch.float32).clamp(0.0, 1.0)


class UltraFace(nn.Module):
    """vision/ssd/mb_tiny_fd.py (``rfb=False``) or mb_tiny_RFB_fd.py (``rfb=True``) in the test phase."""

    def __init__(self, rfb: bool, width: int, height: int, num_classes: int = 2):
        super().__init__()
        b = 16  # base_channel
        layers = [
            _conv_bn(3, b, 2),
            _conv_dw(b, 2 * b, 1),
            _conv_dw(2 * b, 2 * b, 2),
            _conv_dw(2 * b, 2 * b, 1),
            _conv_dw(2 * b, 4 * b, 2),
            _conv_dw(4 * b, 4 * b, 1),
            _conv_dw(4 * b, 4 * b, 1),
            # Mb_Tiny_RFB has its receptive field block where Mb_Tiny has a fourth plain block at stride 8
            BasicRFB(4 * b, 4 * b, stride=1, scale=1.0) if rfb else _conv_dw(4 * b, 4 * b, 1),
            _conv_dw(4 * b, 8 * b, 2),
            _conv_dw(8 * b, 8 * b, 1),
            _conv_dw(8 * b, 8 * b, 1),
            _conv_dw(8 * b, 16 * b, 2),
            _conv_dw(16 * b, 16 * b, 1),
        ]
        self.base_net = nn.ModuleList(layers)
        self.source_layer_indexes = (8, 11, 13)
        self.num_classes = num_classes
        self.extras = nn.Sequential(
            nn.Conv2d(16 * b, 4 * b, 1), nn.ReLU(), _separable(4 * b, 16 * b, 3, 2, 1), nn.ReLU()
        )
        self.regression_headers = nn.ModuleList(
            [
                _separable(4 * b, 3 * 4, 3, padding=1),
                _separable(8 * b, 2 * 4, 3, padding=1),
                _separable(16 * b, 2 * 4, 3, padding=1),
                nn.Conv2d(16 * b, 3 * 4, 3, padding=1),
            ]
        )
        self.classification_headers = nn.ModuleList(
            [
                _separable(4 * b, 3 * num_classes, 3, padding=1),
                _separable(8 * b, 2 * num_classes, 3, padding=1),
                _separable(16 * b, 2 * num_classes, 3, padding=1),
                nn.Conv2d(16 * b, 3 * num_classes, 3, padding=1),
            ]
        )
        self.register_buffer("priors", ultraface_priors(width, height))
        self.center_variance, self.size_variance = 0.1, 0.2

    def _header(self, i: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        confidence = self.classification_headers[i](x).permute(0, 2, 3, 1).contiguous()
        confidence = confidence.view(confidence.size(0), -1, self.num_classes)
        location = self.regression_headers[i](x).permute(0, 2, 3, 1).contiguous()
        return confidence, location.view(location.size(0), -1, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        confidences, locations = [], []
        start = 0
        for header, end in enumerate(self.source_layer_indexes):
            for layer in self.base_net[start:end]:
                x = layer(x)
            start = end
            conf, loc = self._header(header, x)
            confidences.append(conf)
            locations.append(loc)
        for layer in self.base_net[start:]:
            x = layer(x)
        x = self.extras(x)
        conf, loc = self._header(3, x)
        confidences.append(conf)
        locations.append(loc)
        confidences = F.softmax(torch.cat(confidences, 1), dim=2)
        locations = torch.cat(locations, 1)
        # box_utils.convert_locations_to_boxes + center_form_to_corner_form, as exported
        priors = self.priors.unsqueeze(0)
        boxes = torch.cat(
            [
                locations[..., :2] * self.center_variance * priors[..., 2:] + priors[..., :2],
                torch.exp(locations[..., 2:] * self.size_variance) * priors[..., 2:],
            ],
            dim=locations.dim() - 1,
        )
        boxes = torch.cat([boxes[..., :2] - boxes[..., 2:] / 2, boxes[..., :2] + boxes[..., 2:] / 2], 2)
        return confidences, boxes


# ------------------------------------------------------------------------------------------------ RetinaFace


def _rf_conv_bn(inp, oup, stride=1, leaky=0.0):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 3, stride, 1, bias=False), nn.BatchNorm2d(oup), nn.LeakyReLU(leaky, inplace=True)
    )


def _rf_conv_bn_no_relu(inp, oup, stride):
    return nn.Sequential(nn.Conv2d(inp, oup, 3, stride, 1, bias=False), nn.BatchNorm2d(oup))


def _rf_conv_bn1x1(inp, oup, stride, leaky=0.0):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 1, stride, 0, bias=False), nn.BatchNorm2d(oup), nn.LeakyReLU(leaky, inplace=True)
    )


def _rf_conv_dw(inp, oup, stride, leaky=0.1):
    return nn.Sequential(
        nn.Conv2d(inp, inp, 3, stride, 1, groups=inp, bias=False),
        nn.BatchNorm2d(inp),
        nn.LeakyReLU(leaky, inplace=True),
        nn.Conv2d(inp, oup, 1, 1, 0, bias=False),
        nn.BatchNorm2d(oup),
        nn.LeakyReLU(leaky, inplace=True),
    )


class MobileNetV1x025(nn.Module):
    """Pytorch_Retinaface's MobileNetV1 (0.25 width): the three stages RetinaFace takes features from."""

    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(
            _rf_conv_bn(3, 8, 2, leaky=0.1),
            _rf_conv_dw(8, 16, 1),
            _rf_conv_dw(16, 32, 2),
            _rf_conv_dw(32, 32, 1),
            _rf_conv_dw(32, 64, 2),
            _rf_conv_dw(64, 64, 1),
        )
        self.stage2 = nn.Sequential(_rf_conv_dw(64, 128, 2), *[_rf_conv_dw(128, 128, 1) for _ in range(5)])
        self.stage3 = nn.Sequential(_rf_conv_dw(128, 256, 2), _rf_conv_dw(256, 256, 1))


class SSH(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        leaky = 0.1 if cout <= 64 else 0.0
        self.conv3x3 = _rf_conv_bn_no_relu(cin, cout // 2, 1)
        self.conv5x5_1 = _rf_conv_bn(cin, cout // 4, 1, leaky)
        self.conv5x5_2 = _rf_conv_bn_no_relu(cout // 4, cout // 4, 1)
        self.conv7x7_2 = _rf_conv_bn(cout // 4, cout // 4, 1, leaky)
        self.conv7x7_3 = _rf_conv_bn_no_relu(cout // 4, cout // 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c3 = self.conv3x3(x)
        c5_1 = self.conv5x5_1(x)
        c5 = self.conv5x5_2(c5_1)
        c7 = self.conv7x7_3(self.conv7x7_2(c5_1))
        return F.relu(torch.cat([c3, c5, c7], dim=1))


class FPN(nn.Module):
    def __init__(self, cins: list[int], cout: int):
        super().__init__()
        leaky = 0.1 if cout <= 64 else 0.0
        self.output1 = _rf_conv_bn1x1(cins[0], cout, 1, leaky)
        self.output2 = _rf_conv_bn1x1(cins[1], cout, 1, leaky)
        self.output3 = _rf_conv_bn1x1(cins[2], cout, 1, leaky)
        self.merge1 = _rf_conv_bn(cout, cout, leaky=leaky)
        self.merge2 = _rf_conv_bn(cout, cout, leaky=leaky)

    def forward(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        o1, o2, o3 = self.output1(inputs[0]), self.output2(inputs[1]), self.output3(inputs[2])
        up3 = F.interpolate(o3, size=[o2.size(2), o2.size(3)], mode="nearest")
        o2 = self.merge2(o2 + up3)
        up2 = F.interpolate(o2, size=[o1.size(2), o1.size(3)], mode="nearest")
        o1 = self.merge1(o1 + up2)
        return [o1, o2, o3]


class _Head(nn.Module):
    def __init__(self, cin: int, anchors: int, width: int):
        super().__init__()
        self.width = width
        self.conv1x1 = nn.Conv2d(cin, anchors * width, 1, 1, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1x1(x).permute(0, 2, 3, 1).contiguous()
        return out.view(out.shape[0], -1, self.width)


def _trained_like(model: nn.Module) -> None:
    """Seeded weights with two traits of trained MobileNets (like ``transformers.py``'s ``_trained_like``).

    PyTorch's fresh depthwise 3x3 filters have zero mean: on photos (smooth signals) each is an edge filter that
    BatchNorm then scales up, white rounding noise included, so 14 unskipped blocks amplify one int8 step into
    chaos (the QDQ model at cosine 0.48 to fp32 after the backbone; onnxruntime and the exact host runner running
    the same QDQ file at 0.87 on the box regressions). Trained depthwise filters have a smoothing component:
    here ``(1 + sqrt(3) U(-1, 1)) / 9`` (its mean equal to its random part's spread). Trained BatchNorm shifts keep
    most units active: here ``beta = 0.5``. The QDQ model is then at cosine 0.995 to fp32 on the boxes (reduced
    size, 32 calibration photos) and the int8 TFLite at 0.9996 to its QDQ model.
    """
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d) and m.groups > 1 and m.groups == m.in_channels:
                k = m.weight[0].numel()
                m.weight.copy_((1.0 + math.sqrt(3.0) * torch.empty_like(m.weight).uniform_(-1.0, 1.0)) / k)
            elif isinstance(m, nn.BatchNorm2d):
                m.bias.fill_(0.5)


def retinaface_priors(size: int) -> torch.Tensor:
    """Pytorch_Retinaface's PriorBox for cfg_mnet: [N, 4] centre-form priors, normalised."""
    min_sizes, steps = ([16, 32], [64, 128], [256, 512]), (8, 16, 32)
    anchors = []
    for sizes, step in zip(min_sizes, steps, strict=True):
        n = math.ceil(size / step)
        for i, j in product(range(n), range(n)):
            for s in sizes:
                anchors.append([(j + 0.5) * step / size, (i + 0.5) * step / size, s / size, s / size])
    return torch.tensor(anchors, dtype=torch.float32)


class RetinaFace(nn.Module):
    """Pytorch_Retinaface's RetinaFace with cfg_mnet (in_channel 32, out_channel 64, 2 anchors), test phase."""

    def __init__(self, size: int, decode: bool, out_channel: int = 64):
        super().__init__()
        c = out_channel
        self.body = MobileNetV1x025()
        self.fpn = FPN([64, 128, 256], c)
        self.ssh1, self.ssh2, self.ssh3 = SSH(c, c), SSH(c, c), SSH(c, c)
        self.ClassHead = nn.ModuleList(_Head(c, 2, 2) for _ in range(3))
        self.BboxHead = nn.ModuleList(_Head(c, 2, 4) for _ in range(3))
        self.LandmarkHead = nn.ModuleList(_Head(c, 2, 10) for _ in range(3))
        self.decode = decode
        _trained_like(self)
        if decode:
            self.register_buffer("priors", retinaface_priors(size))
        self.variance = (0.1, 0.2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s1 = self.body.stage1(x)
        s2 = self.body.stage2(s1)
        s3 = self.body.stage3(s2)
        fpn = self.fpn([s1, s2, s3])
        features = [self.ssh1(fpn[0]), self.ssh2(fpn[1]), self.ssh3(fpn[2])]
        loc = torch.cat([self.BboxHead[i](f) for i, f in enumerate(features)], dim=1)
        conf = F.softmax(torch.cat([self.ClassHead[i](f) for i, f in enumerate(features)], dim=1), dim=-1)
        landms = torch.cat([self.LandmarkHead[i](f) for i, f in enumerate(features)], dim=1)
        if not self.decode:
            return loc, conf, landms
        # utils/box_utils.py decode / decode_landm (batched), boxes to corners
        p = self.priors.unsqueeze(0)
        v0, v1 = self.variance
        centre = p[..., :2] + loc[..., :2] * v0 * p[..., 2:]
        size = p[..., 2:] * torch.exp(loc[..., 2:] * v1)
        corner = centre - size / 2
        boxes = torch.cat([corner, corner + size], dim=2)
        points = [p[..., :2] + landms[..., 2 * k : 2 * k + 2] * v0 * p[..., 2:] for k in range(5)]
        return boxes, conf, torch.cat(points, dim=2)


# ------------------------------------------------------------------------------------------------ specs


#: Built only with --full (the CI zoo keeps three face models: its six cases cost CPU time on every run).
FULL_ONLY = frozenset({"retinaface_mnet025_decoded"})
#: Run by benchmarks/zoo.py only ("ci": false in the manifest).
NOT_IN_CI = frozenset({"blazeface"})


# ------------------------------------------------------------------------------------------------ BlazeFace


class BlazeBlock(nn.Module):
    """MediaPipe's BlazeBlock as hollance/BlazeFace-PyTorch writes it: depthwise k x k (with bias) + 1x1, the
    residual max-pooled at stride 2 (the depthwise input padded right/bottom by F.pad) and zero-padded on the
    channel axis by F.pad when the block widens (an ONNX Pad on axis 1), ReLU after the sum."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1):
        super().__init__()
        self.stride, self.k, self.channel_pad = stride, k, cout - cin
        self.max_pool = nn.MaxPool2d(stride, stride) if stride == 2 else None
        pad = 0 if stride == 2 else (k - 1) // 2
        self.convs = nn.Sequential(nn.Conv2d(cin, cin, k, stride, pad, groups=cin), nn.Conv2d(cin, cout, 1))
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.max_pool is not None:
            h = F.pad(x, (0, self.k - 1, 0, self.k - 1) if self.k == 3 else (1, 2, 1, 2), "constant", 0)
            x = self.max_pool(x)
        else:
            h = x
        if self.channel_pad > 0:
            x = F.pad(x, (0, 0, 0, 0, 0, self.channel_pad), "constant", 0)
        return self.act(self.convs(h) + x)


def blazeface_anchors() -> torch.Tensor:
    """MediaPipe's front-camera SSD anchors: 2 per cell at 16x16, 6 per cell at 8x8 (fixed size 1): [896, 4]."""
    rows = [
        [(x + 0.5) / fm, (y + 0.5) / fm, 1.0, 1.0]
        for fm, n in ((16, 2), (8, 6))
        for y, x in product(range(fm), range(fm))
        for _ in range(n)
    ]
    return torch.tensor(rows, dtype=torch.float32)


class BlazeFace(nn.Module):
    """BlazeFace front model (MediaPipe blazeface.tflite, 128x128) after hollance/BlazeFace-PyTorch, with its
    anchor decode in the graph: per-coordinate Gather of the [1, 896, 16] regressors, ``/ 128 * anchor_wh +
    anchor_xy`` against [896]-long anchor columns, corners (ymin, xmin, ymax, xmax) and 6 keypoints, and the
    clamped Sigmoid scores. Outputs ``boxes`` [1, 896, 16] and ``scores`` [1, 896, 1]."""

    def __init__(self, k: int = 3):
        super().__init__()

        def block(a: int, b: int, stride: int = 1) -> BlazeBlock:
            return BlazeBlock(a, b, k, stride)

        widths = (24, 28, 32, 36, 42, 48, 56, 64, 72, 80, 88)
        strides = {32: 2, 48: 2}
        self.backbone1 = nn.Sequential(
            nn.Conv2d(3, 24, 5, 2, 0),
            nn.ReLU(inplace=True),
            block(24, 24),
            *[block(a, b, strides.get(b, 1)) for a, b in zip(widths, widths[1:], strict=False)],
        )
        self.backbone2 = nn.Sequential(block(88, 96, 2), *[block(96, 96) for _ in range(4)])
        self.classifier_8, self.classifier_16 = nn.Conv2d(88, 2, 1), nn.Conv2d(96, 6, 1)
        self.regressor_8, self.regressor_16 = nn.Conv2d(88, 32, 1), nn.Conv2d(96, 96, 1)
        self.register_buffer("anchors", blazeface_anchors())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = x.shape[0]
        x = self.backbone1(F.pad(x, (1, 2, 1, 2), "constant", 0))
        h = self.backbone2(x)

        def flat(t: torch.Tensor, width: int) -> torch.Tensor:
            return t.permute(0, 2, 3, 1).reshape(b, -1, width)

        c = torch.cat([flat(self.classifier_8(x), 1), flat(self.classifier_16(h), 1)], 1)
        r = torch.cat([flat(self.regressor_8(x), 16), flat(self.regressor_16(h), 16)], 1)
        a = self.anchors
        xc = r[..., 0] / 128.0 * a[:, 2] + a[:, 0]
        yc = r[..., 1] / 128.0 * a[:, 3] + a[:, 1]
        w, hh = r[..., 2] / 128.0 * a[:, 2], r[..., 3] / 128.0 * a[:, 3]
        boxes = torch.stack([yc - hh / 2, xc - w / 2, yc + hh / 2, xc + w / 2], -1)
        keypoints = r[..., 4:].reshape(b, -1, 6, 2) / 128.0 * a[:, None, 2:4] + a[:, None, 0:2]
        scores = torch.sigmoid(c.clamp(-100.0, 100.0))
        return torch.cat([boxes, keypoints.reshape(b, -1, 12)], -1), scores


def specs() -> list[zoo_export.Spec]:
    Spec = zoo_export.Spec

    def hw(reduced: tuple[int, int], full: tuple[int, int], name: str):
        def inputs(is_full: bool):
            h, w = full if is_full else reduced
            return [(name, [1, 3, h, w])]

        return inputs

    def ultraface(rfb: bool):
        def build(full: bool) -> nn.Module:
            w, h = (320, 240) if full else (160, 120)
            return UltraFace(rfb, w, h)

        return build

    def retinaface(decode: bool):
        # reduced: FPN/SSH 32 wide instead of 64 (the file stays under 1.5 MB; LeakyReLU(0.1) as at 64)
        return lambda full: RetinaFace(640 if full else 128, decode, 64 if full else 32)

    return [
        Spec(
            "ultraface_rfb",
            "UltraFace version-RFB",
            "detector",
            11,
            ultraface(True),
            hw((120, 160), (240, 320), "input"),
            ["scores", "boxes"],
            data=dict(ULTRAFACE_DATA),
            note="Mb_Tiny_RFB (dilated branches, Concat, *scale + shortcut), SSD heads at 4 scales, Softmax, "
            "prior decode (Slice/Mul/Add/Exp/Concat/Div/Sub); opset 11 like the public opset 9-11 export",
        ),
        Spec(
            "ultraface_slim",
            "UltraFace version-slim",
            "detector",
            13,
            ultraface(False),
            hw((120, 160), (240, 320), "input"),
            ["scores", "boxes"],
            data=dict(ULTRAFACE_DATA),
            note="Mb_Tiny depthwise backbone, SeperableConv2d SSD heads at 4 scales (conv with bias + ReLU), "
            "Softmax, prior decode (Slice/Mul/Add/Exp/Concat/Div/Sub)",
        ),
        Spec(
            "retinaface_mnet025",
            "RetinaFace-MobileNet0.25",
            "detector",
            13,
            retinaface(False),
            hw((128, 128), (640, 640), "input0"),
            ["loc", "conf", "landms"],
            data=dict(RETINAFACE_DATA),
            note="MobileNetV1x0.25 LeakyReLU(0.1), FPN (nearest Resize, Add), SSH (Concat, ReLU), class/box/"
            "landmark heads (Transpose, Reshape, Concat), Softmax; raw heads as convert_to_onnx.py exports",
        ),
        Spec(
            "retinaface_mnet025_decoded",
            "RetinaFace-MobileNet0.25 (decoded)",
            "detector",
            17,
            retinaface(True),
            hw((128, 128), (640, 640), "input0"),
            ["boxes", "conf", "landmarks"],
            data=dict(RETINAFACE_DATA),
            note="the same with the prior-box decode in the graph (Slice, Mul, Add, Exp, Sub, Concat) for boxes "
            "and 5 landmarks",
        ),
        Spec(
            "blazeface",
            "BlazeFace (MediaPipe front)",
            "detector",
            13,
            lambda full: BlazeFace(),
            hw((128, 128), (128, 128), "input"),
            ["boxes", "scores"],
            data=dict(BLAZEFACE_DATA),
            note="BlazeBlocks (depthwise + 1x1, MaxPool residual, channel Pad by F.pad), SSD heads at 16x16/8x8, "
            "anchor decode in the graph (Gather per coordinate, Mul/Add with [896] anchor columns, Sub/Unsqueeze/"
            "Concat corners, 6 keypoints), clamped Sigmoid scores; not in CI (the suite's time budget: its six cases "
            "take 27 s of CPU); its int8 decode pattern is tests/targets/test_openvino_target.py::"
            "test_int8_ir_of_an_anchor_decode_tail",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    return zoo_export.build_main(
        argv,
        __doc__,
        specs(),
        SEED,
        skip=lambda spec, full: spec.name in FULL_ONLY and not full,
        finish=lambda spec, entry, full: entry.update(ci=False) if spec.name in NOT_IN_CI else None,
    )


if __name__ == "__main__":
    raise SystemExit(main())
