"""Issue 12 probe round 11p: the models PaddleOCR 3.x / PaddleX 3.x ship today, built from the model code in the
``paddlex`` 3.7 wheel (``paddlex/inference/models/*/modeling``: the Paddle layers PaddleX runs the official weights
in), seeded, BatchNorm statistics from real images (photos; rendered text for the OCR models) in train mode,
PaddleOCR's export re-parameterization of the PP-LCNetV3 rep layers (one conv per branch set, as
``tools/export_model.py`` does), then ``paddle.jit.save`` + paddle2onnx 2.x with the dims PaddleOCR / PaddleX export
dynamic written as ``dim_value -1``. Needs a Paddle venv with paddlepaddle 3.0.0, paddle2onnx 2.0.1 and paddlex 3.7.2
(PaddleOCR 3.0's pairing; paddle2onnx 2.1.0 on Paddle 3.3.1 aborts on every nearest ``scale_factor`` upsampling, "the
0th elementwise MUST be ir::FloatAttribute", and writes PP-HGNetV2's stem Pad value from uninitialised memory: a
different network on each export); paddle2onnx raises the opset to what an op needs (14: HardSwish), as its CLI does:

    python -m venv /work/venv-paddle11b
    /work/venv-paddle11b/bin/pip install paddlepaddle==3.0.0 paddle2onnx==2.0.1 paddlex==3.7.2 onnxruntime scikit-learn
    /work/venv-paddle11b/bin/python benchmarks/zoo/probe_paddle3.py --out benchmarks/.zoo/probe11p
    /work/venv-paddle11b/bin/python benchmarks/zoo/probe_paddle3.py --full --out benchmarks/.zoo/probe11p_full \
        --only ppocrv5_mobile_det_op11,ppocrv5_mobile_rec_op11
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe11p/zoo.json --no-shared --workers 1 --calib 8 --eval 8

- **PP-OCRv5 mobile det**: PP-LCNetV3 x0.75 (learnable affine blocks, rep layers, SE), 1x1 laterals to
  12/18/42/360, RSE-FPN-style neck (nearest x2 by ``scale_factor``, x2/x4/x8 upsampling, Concat), DB head (two
  ConvTranspose, Sigmoid); input [-1, 3, -1, -1];
- **PP-OCRv5 mobile rec**: PP-LCNetV3 x0.75 with PaddleOCR's rec strides ((2, 1), (1, 2)), AvgPool (3, 2), SVTR
  neck (conv block, 2 attention blocks, LayerNorm, concat shortcut), CTC Linear + Softmax; input [-1, 3, 48, -1];
  the reduced model has 97 characters (the real one 18385);
- **PP-OCRv5 server det** and **server rec** (PP-HGNetV2-B4 with the rec strides, the same SVTR neck and CTC head): PP-HGNetV2-B4 backbone, LKPAN-style neck with intraclass blocks, PFHeadLocal (upsample,
  local refinement, ``0.5 * (a + b)``);
- **PP-LCNet_x1_0_doc_ori** (4 classes, 224) and **PP-LCNet_x0_25_textline_ori** (2 classes, 80 x 160): PP-LCNet
  with the 1280-wide 1x1 head and Softmax;
- **PP-HGNetV2-B0**: HGNetV2 stem, HG blocks with learnable affine blocks, light (depthwise) blocks, Softmax;
- **UVDoc**: bilinear Resize to a fixed size, ResNet with reflect-padded 5x5 convs and PReLU, dilated bridge,
  bilinear Resize back to the input's size (from ``Shape``) and ``grid_sample`` of the input (GridSample-16).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import paddle_export as pe  # noqa: E402
from probe_paddle_backbones import minus_one_dims  # noqa: E402

SEED = 1111
DET_DATA = {**pe.IMAGENET, "color": "BGR", "text": True}  # PaddleOCR det: BGR, /255, ImageNet mean/std
REC_DATA = {**pe.PPOCR, "text": True}  # rec: BGR, /255, (x - 0.5) / 0.5
DOC_DATA = {**pe.IMAGENET, "text": True}  # orientation classifiers: ImageNet normalisation, documents / lines

#: PaddleOCR's NET_CONFIG_rec of PP-LCNetV3 (rec_lcnetv3.py): H halves on the stem, blocks4 and twice in blocks6,
#: W on the stem and blocks5 (48 x 320 -> 3 x 80, AvgPool (3, 2) -> 1 x 40)
LCNETV3_REC_BLOCKS = [
    [[3, 16, 32, 1, False]],
    [[3, 32, 64, 1, False], [3, 64, 64, 1, False]],
    [[3, 64, 128, (2, 1), False], [3, 128, 128, 1, False]],
    [[3, 128, 256, (1, 2), False]] + [[5, 256, 256, 1, False]] * 4,
    [
        [5, 256, 512, (2, 1), True],
        [5, 512, 512, 1, True],
        [5, 512, 512, (2, 1), False],
        [5, 512, 512, 1, False],
    ],
]
#: PaddleClas PPHGNetV2_B0 (stem 3-16-16, stages in/mid/out/blocks/downsample/light/kernel/layers, use_lab)
HGNETV2_B0 = {
    "embedding_size": 16,
    "hidden_sizes": [64, 256, 512, 1024],
    "stem_channels": [3, 16, 16],
    "stage_in_channels": [16, 64, 256, 512],
    "stage_mid_channels": [16, 32, 64, 128],
    "stage_out_channels": [64, 256, 512, 1024],
    "stage_num_blocks": [1, 1, 2, 1],
    "stage_downsample": [False, True, True, True],
    "stage_light_block": [False, False, True, True],
    "stage_kernel_size": [3, 3, 5, 5],
    "stage_numb_of_layers": [3, 3, 3, 3],
    "use_learnable_affine_block": True,
}


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    kind: str
    build: object  # (full: bool) -> paddle.nn.Layer
    hw: tuple[int, int]  # reduced
    full_hw: tuple[int, int]
    dynamic: tuple[bool, bool] = (True, True)  # H, W exported as -1
    data: dict = field(default_factory=lambda: DOC_DATA)
    note: str = ""
    opsets: tuple[int, ...] = (11, 17)
    #: Paddle vs onnxruntime, of the output range: GridSample moves float32 noise of the grid (1e-5 of a coordinate
    #: of W / 2 pixels) onto the image's edges (rendered text: up to the range per pixel), so UVDoc gets 1e-3
    tol: float = 1e-4


def _mods():
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    if not hasattr(nn, "Conv2d"):  # Paddle 3.0: PaddleX 3.7's PP-LCNet uses Paddle 3.2's torch-style alias

        def conv2d(*args, bias=True, **kwargs):
            return nn.Conv2D(*args, bias_attr=None if bias else False, **kwargs)

        nn.Conv2d = conv2d
    return paddle, F, nn


# --------------------------------------------------------------------------------------------- wrappers
def ocrv5_det(full: bool):
    """PaddleX's PPOCRV5MobileDet (model + head) without its numpy I/O."""
    _, _, nn = _mods()
    from paddlex.inference.models.text_detection.modeling import pp_ocrv5_mobile_det as m

    class Det(nn.Layer):
        def __init__(self):
            super().__init__()
            net = m.PPOCRV5MobileDet(m.PPOCRV5MobileDetConfig())
            self.model, self.head = net.model, net.head

        def forward(self, x):
            return self.head(self.model(x))

    return Det()


def ocrv5_server_det(full: bool):
    _, _, nn = _mods()
    from paddlex.inference.models.text_detection.modeling import pp_ocrv5_server_det as m

    class Det(nn.Layer):
        def __init__(self):
            super().__init__()
            net = m.PPOCRV5ServerDet(m.PPOCRV5ServerDetConfig())
            self.model, self.head = net.model, net.head

        def forward(self, x):
            return self.head(self.model(x))

    return Det()


def ocrv5_rec(full: bool):
    _, _, nn = _mods()
    from paddlex.inference.models.text_recognition.modeling import pp_ocrv5_mobile_rec as m

    backbone = {
        "model_type": "pp_lcnet_v3",
        "scale": 0.75,
        "divisor": 16,
        "block_configs": LCNETV3_REC_BLOCKS,
    }
    cfg = m.PPOCRV5MobileRecConfig(backbone_config=backbone, head_out_channels=18385 if full else 97)

    class Rec(nn.Layer):
        def __init__(self):
            super().__init__()
            net = m.PPOCRV5MobileRec(cfg)
            self.model, self.head = net.model, net.head

        def forward(self, x):
            return self.head(self.model(x))

    return Rec()


def ocrv5_server_rec(full: bool):
    _, _, nn = _mods()
    from paddlex.inference.models.text_recognition.modeling import pp_ocrv5_server_rec as m

    cfg = m.PPOCRV5ServerRecConfig(head_out_channels=18385 if full else 97)

    class Rec(nn.Layer):
        def __init__(self):
            super().__init__()
            net = m.PPOCRV5ServerRec(cfg)
            self.model, self.head = net.model, net.head

        def forward(self, x):
            return self.head(self.model(x))

    return Rec()


def lcnet_cls(scale: float, classes: int):
    def build(full: bool):
        _, _, nn = _mods()
        from paddlex.inference.models.image_classification.modeling import pplcnet as m

        class Cls(nn.Layer):  # PPLCNet.forward without the numpy I/O
            def __init__(self):
                super().__init__()
                self.net = m.PPLCNet(m.PPLCNetConfig(scale=scale, num_labels=classes))

            def forward(self, x):
                n = self.net
                y = n.act_fn(n.last_convolution(n.avg_pool(n.encoder(x))))
                y = n.head(n.flatten(y * (1 - n.hidden_dropout_prob)))
                return nn.functional.softmax(y, -1)

        return Cls()

    return build


def hgnetv2_b0(full: bool):
    _, _, nn = _mods()
    from paddlex.inference.models.image_classification.modeling import hgnetv2 as m

    class Cls(nn.Layer):
        def __init__(self):
            super().__init__()
            self.net = m.HGNetV2ForImageClassification(
                m.HGNetV2Config(**HGNETV2_B0, num_labels=1000 if full else 32)
            )

        def forward(self, x):
            n = self.net
            y, _ = n.encoder(n.embedder(x))
            for layer in n.classifier:
                y = layer(y)
            return n.out_act(n.fc(y))

    return Cls()


def _uvdoc_narrow(w: int) -> dict:
    """UVDoc's backbone at widths w / 2w / 4w instead of 32 / 64 / 128, fewer residual blocks, the same bridge
    dilations (a committed test model's size)."""
    c = 4 * w
    return {
        "model_type": "uvdoc_backbone",
        "resnet_head": [[3, w], [w, w]],
        "resnet_configs": [
            [[w, w, 1, False], [w, w, 3, False]],
            [[w, 2 * w, 1, True], [2 * w, 2 * w, 3, False]],
            [[2 * w, c, 1, True], [c, c, 3, False]],
        ],
        "stage_configs": [
            [[c, 1]],
            [[c, 2]],
            [[c, 5]],
            [[c, 8], [c, 3], [c, 2]],
            [[c, 12], [c, 7], [c, 4]],
            [[c, 18], [c, 12], [c, 6]],
        ],
        "kernel_size": 5,
    }


def uvdoc(width: int | None = None):
    def build(full: bool):
        paddle, F, nn = _mods()
        from paddlex.inference.models.image_unwarping.modeling import uvdoc as m

        kw = {"upsample_size": [712, 488] if full else [96, 64]}
        if width:
            kw |= {"backbone_config": _uvdoc_narrow(width), "bridge_connector": [4 * width, 4 * width],
                   "out_point_positions2D": [[4 * width, width], [width, 2]]}  # fmt: skip

        class UV(nn.Layer):  # UVDocNet.forward without the numpy I/O
            def __init__(self):
                super().__init__()
                self.net = m.UVDocNet(m.UVDocConfig(**kw))

            def forward(self, x):
                n = self.net
                h, w = x.shape[2:]
                y = F.interpolate(x, size=n.upsample_size, mode=n.upsample_mode, align_corners=True)
                out = n.head(paddle.concat(n.backbone(y), axis=1))
                bm = F.interpolate(out, size=(h, w), mode=n.upsample_mode, align_corners=True)
                return F.grid_sample(x, bm.transpose([0, 2, 3, 1]), align_corners=True)

        return UV()

    return build


# --------------------------------------------------------------------------------------------- rep (export form)
def rep_lcnetv3(model) -> int:
    """PaddleOCR's export form of every PP-LCNetV3 LearnableRepLayer: the identity BatchNorm, the 1x1 branch and the
    k x k branches (each Conv + BatchNorm) folded into one k x k Conv with bias (``rec_lcnetv3.py``'s ``rep``)."""
    paddle, _, nn = _mods()
    from paddlex.inference.models.image_classification.modeling.pplcnetv3 import PPLCNetV3LearnableRepLayer

    def fuse_bn(kernel, bn):
        std = np.sqrt(bn._variance.numpy() + bn._epsilon)
        t = bn.weight.numpy() / std
        return kernel * t[:, None, None, None], bn.bias.numpy() - bn._mean.numpy() * t

    count = 0
    for layer in [s for s in model.sublayers() if isinstance(s, PPLCNetV3LearnableRepLayer)]:
        conv0 = layer.conv_symmetric[0].convolution
        cout, cin_g, kh, kw = conv0.weight.shape
        kernel = np.zeros((cout, cin_g, kh, kw), np.float32)
        bias = np.zeros(cout, np.float32)
        for c in layer.conv_symmetric:
            k, b = fuse_bn(c.convolution.weight.numpy(), c.normalization)
            kernel, bias = kernel + k, bias + b
        if layer.conv_small_symmetric is not None:
            k, b = fuse_bn(
                layer.conv_small_symmetric.convolution.weight.numpy(),
                layer.conv_small_symmetric.normalization,
            )
            kernel[:, :, kh // 2 : kh // 2 + 1, kw // 2 : kw // 2 + 1] += k
            bias += b
        if layer.identity is not None:
            ident = np.zeros((cout, cin_g, kh, kw), np.float32)
            for i in range(cout):
                ident[i, i % cin_g, kh // 2, kw // 2] = 1.0
            k, b = fuse_bn(ident, layer.identity)
            kernel, bias = kernel + k, bias + b
        fused = nn.Conv2D(
            cin_g * conv0._groups, cout, (kh, kw), conv0._stride, conv0._padding, groups=conv0._groups
        )
        fused.weight.set_value(kernel.astype(np.float32))
        fused.bias.set_value(bias.astype(np.float32))
        layer.reparam = fused
        for branch in ("identity", "conv_small_symmetric", "conv_symmetric"):  # the export drops the branches
            layer._sub_layers.pop(branch, None)
            setattr(layer, branch, None)
        layer.__class__ = _repped_class(PPLCNetV3LearnableRepLayer)
        count += 1
    return count


def _repped_class(base):
    class Repped(base):  # the export form's forward: one conv, the affine block, the activation
        def forward(self, x):
            y = self.lab(self.reparam(x))
            return self.act(y) if self.stride != 2 else y

    return Repped


# --------------------------------------------------------------------------------------------- the models
SEG, CLS = "segmenter", "classifier"
MODELS = [
    Model("ppocrv5_mobile_det", "PP-OCRv5 mobile det (PaddleX 3.7 modeling)", SEG, ocrv5_det, (128, 128), (640, 640),
          data=DET_DATA, note="PP-LCNetV3 x0.75 repped (Conv+bias, affine Mul/Add, hardswish), SE, 1x1 laterals, "
          "nearest x2 scale_factor top-down, x2/x4/x8 upsampling Concat, DB head: 2 ConvTranspose, Sigmoid"),
    Model("ppocrv5_mobile_rec", "PP-OCRv5 mobile rec (PaddleX 3.7 modeling)", "sequence", ocrv5_rec, (48, 160),
          (48, 320), (False, True), data=REC_DATA, note="PP-LCNetV3 x0.75 rec strides, repped, AvgPool (3,2), SVTR "
          "neck (attention, LayerNorm, Swish MLP), CTC Linear + Softmax"),
    Model("ppocrv5_server_det", "PP-OCRv5 server det (PaddleX 3.7 modeling)", SEG, ocrv5_server_det, (128, 128),
          (640, 640), data=DET_DATA, note="PP-HGNetV2-B4, LKPAN intraclass blocks (1x7/7x1 convs), PFHeadLocal"),
    Model("ppocrv5_server_rec", "PP-OCRv5 server rec (PaddleX 3.7 modeling)", "sequence", ocrv5_server_rec,
          (48, 160), (48, 320), (False, True), data=REC_DATA, note="PP-HGNetV2-B4 with (2,1)/(1,2) downsampling "
          "strides, AvgPool (3,2), SVTR neck, CTC Linear + Softmax", tol=1e-3),  # seeded B4: Paddle vs ort 1.8e-4
    Model("pp_lcnet_x1_0_doc_ori", "PP-LCNet_x1_0_doc_ori (PaddleX 3.7 modeling)", CLS, lcnet_cls(1.0, 4),
          (96, 96), (224, 224), (False, False), note="PP-LCNet x1.0, SE, 1280 1x1 head, 4 orientations, Softmax"),
    Model("pp_lcnet_x0_25_textline_ori", "PP-LCNet_x0_25_textline_ori (PaddleX 3.7 modeling)", CLS,
          lcnet_cls(0.25, 2), (80, 160), (80, 160), (False, False), note="PP-LCNet x0.25, 2 directions, Softmax"),
    Model("pp_hgnetv2_b0", "PP-HGNetV2-B0 (PaddleX 3.7 modeling)", CLS, hgnetv2_b0, (96, 96), (224, 224),
          (False, False), data=pe.IMAGENET, note="HG stem (pad, MaxPool, concat), HG blocks with learnable "
          "affine, light depthwise blocks, aggregation squeeze/excitation convs, Softmax"),
    Model("uvdoc", "UVDoc (PaddleX 3.7 modeling)", SEG, uvdoc(), (96, 64), (712, 488), data=DOC_DATA,
          note="bilinear align_corners Resize to a fixed size, reflect-pad 5x5 ResNet, PReLU, dilated bridge, Resize "
          "back to the input's Shape, GridSample", opsets=(16, 17), tol=1e-3),
    Model("uvdoc_narrow", "UVDoc, widths 4/8/16 (PaddleX 3.7 modeling)", SEG, uvdoc(4), (96, 64), (712, 488),
          data=DOC_DATA, note="UVDoc at an eighth of the widths (tests/models/uvdoc_narrow.onnx)", opsets=(16,),
          tol=1e-3),
]  # fmt: skip
BY_NAME = {m.name: m for m in MODELS}


def arrays(m: Model, hw, count: int, seed: int, photos) -> np.ndarray:
    entry = {"name": m.name, "data": m.data, "inputs": [{"name": "x", "shape": [1, 3, *hw]}]}
    return pe.zoo_data.make_arrays(entry, count, seed, photos)["x"]


def export(m: Model, opset: int, out: Path, photos, full: bool) -> dict:
    import onnx
    import onnxruntime as ort
    import paddle
    import paddle2onnx

    hw = m.full_hw if full else m.hw
    name = f"{m.name}{'_full' if full else ''}_op{opset}"
    paddle.seed(SEED)
    np.random.seed(SEED)
    model = m.build(full)
    pe._randomize_affine(model, SEED + 1)
    n_bn = pe.set_bn_statistics(model, arrays(m, hw, 8 if full else 32, 1000, photos))
    n_rep = rep_lcnetv3(model)
    model.eval()
    shape = [None, 3, None if m.dynamic[0] else hw[0], None if m.dynamic[1] else hw[1]]
    path = out / f"{name}.onnx"
    pe.paddle_to_onnx(model, path, opset, shape, upgrade=True)
    minus_one_dims(path)
    proto = onnx.load(str(path))
    real = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    if real != opset:  # paddle2onnx raised it to what an op needs (its default, as PaddleX's CLI runs it)
        name = f"{m.name}{'_full' if full else ''}_op{real}"
        path = path.rename(out / f"{name}.onnx")
        opset = real
    onnx.checker.check_model(proto)
    x = arrays(m, hw, 2, 7, photos)
    with paddle.no_grad():
        want = model(paddle.to_tensor(x)).numpy()
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    err = float(np.abs(got - want).max() / (np.ptp(want) or 1.0))
    assert err < m.tol, f"{name}: onnxruntime vs Paddle {err:.2e} of the range"
    dyn = "batch" + "".join(f"/{d}" for d, on in zip("HW", m.dynamic, strict=True) if on)
    return {
        "name": name,
        "file": path.name,
        "family": m.family,
        "kind": m.kind,
        "opset": opset,
        "inputs": [{"name": "x", "shape": [1, 3, *hw], "dtype": "float32"}],
        "outputs": [o.name for o in proto.graph.output],
        "data": m.data,
        "extra_args": ["--input-shape", f"x=1,3,{hw[0]},{hw[1]}"],
        "size": "full" if full else "reduced",
        "ci": False,
        "params": int(sum(int(np.prod(p.shape)) for p in model.parameters())),
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"paddle2onnx {paddle2onnx.__version__} opset {opset}, {dyn} -1; {m.note}; {n_bn} BatchNorm from "
        f"real images, {n_rep} rep layers folded; Paddle vs onnxruntime {err:.1e}",
        "seed": SEED,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=pe.FULL_DIR / "probe11p")
    parser.add_argument("--only")
    parser.add_argument(
        "--full", action="store_true", help="the real input sizes (and the rec's 18385 classes)"
    )
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    photos = pe.zoo_data.bn_photos(None, pe.default_shared())
    entries = pe.export_each(
        MODELS, lambda m, op: export(m, op, args.out, photos, args.full), args.out, only, 36
    )
    pe.zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
