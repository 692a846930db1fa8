"""Issue 12 probe round 13e: PaddlePaddle exports not probed before: ERNIE 3.0 (PaddleNLP 2.8.1's own model code),
PaddleSeg's PP-HumanSegV2-Lite (MobileSeg) and PP-MattingV2, and the PP-OCRv6 models of PaddleX 3.7 (a newer
PaddleOCR generation than round 11p's v5). Seeded, BatchNorm statistics from real photos in train mode,
``paddle.jit.save`` + paddle2onnx 2.0.1 with the dims the Paddle tools export dynamic written as ``dim_value -1``.
Needs a COPY of round 11p's Paddle venv with PaddleNLP installed without its dependencies (they would replace
paddle), plus the few modules it imports:

    cp -a /work/venv-paddle11b /work/venv-probe13e-paddle
    P=/work/venv-probe13e-paddle/bin/python
    $P -m pip install --no-deps paddlenlp==2.8.1 safetensors huggingface_hub==0.23.5 jinja2 markupsafe jieba \\
        sentencepiece regex datasets==2.19.2 multiprocess==0.70.16 dill==0.3.8 pyarrow pyarrow_hotfix xxhash \\
        aiohttp aiohappyeyeballs aiosignal frozenlist multidict yarl propcache attrs seqeval fastapi==0.110.3 \\
        starlette==0.37.2
    $P benchmarks/zoo/probe_paddle4.py --out benchmarks/.zoo/probe13e
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe13e/zoo.json --no-shared --workers 1

- **ERNIE 3.0** nano (312 x 4 layers, 12 heads), micro (384 x 4) and mini (384 x 6) as PaddleNLP 2.8.1's
  ``ErnieModel`` writes them (``nn.TransformerEncoder``, post-LayerNorm, GELU, the pad mask computed from the ids
  in the graph, cumsum position ids, task-type embeddings), exported as PaddleNLP's ``export_model.py`` does: two
  int64 inputs ``input_ids`` and ``token_type_ids`` of shape [-1, -1]: sequence classification (the pooler's
  tanh, 2 / 15 classes), token classification (7 tags) and the semantic-indexing sentence embedding (pooled
  output, Linear to 64, L2 normalize), and **UIE nano** (ERNIE 3.0 nano + start/end Sigmoid per token) with the
  four int64 inputs PaddleNLP's Taskflow exports (input_ids, token_type_ids, position_ids, attention_mask);
  vocabularies of 4000 (the real 40000 changes only the table's size);
- **PP-HumanSegV2-Lite** (PaddleSeg MobileSeg: MobileNetV3-Large x0.5 features at strides 8/16/32, SPPM with
  adaptive pools 1/2/4, UAFM spatial attention, bilinear Resize, 2 classes) at 128 x 128, batch -1 (paddle2onnx
  refuses adaptive pooling of a dynamic H/W: PaddleSeg exports these at a fixed size);
- **PP-MattingV2** style (STDC CatBottlenecks, double pyramid pooling, multi-level feature fusion, a Sigmoid
  alpha) at 128 x 128, batch -1;
- **GhostNet x0.5** as PaddleClas writes it (Linear-layer SE with ``clip(0, 1)``, the ghost module's channel
  Slice), batch/H/W -1;
- **RT-DETR** (PaddleX 3.7's modeling, PaddleDetection's ``exclude_post_process`` outputs): paddle2onnx 2.0.1
  writes a graph onnxruntime cannot run (a Transpose of rank 4 on a rank-5 tensor: a Slice's decreased axis not
  squeezed), so it is not in the manifest;
- **PP-OCRv6 tiny rec** and **small det** (PaddleX 3.7's modeling, PP-LCNetV4-style backbones).
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

SEED = 1313
SEQ = 32
VOCAB = 4000
ERNIE = {  # PaddleNLP 2.8.1's ernie-3.0-{nano,micro,mini}-zh (configuration.py), vocab reduced
    "nano": {
        "hidden_size": 312,
        "intermediate_size": 1248,
        "num_attention_heads": 12,
        "num_hidden_layers": 4,
    },
    "micro": {
        "hidden_size": 384,
        "intermediate_size": 1536,
        "num_attention_heads": 12,
        "num_hidden_layers": 4,
    },
    "mini": {
        "hidden_size": 384,
        "intermediate_size": 1536,
        "num_attention_heads": 12,
        "num_hidden_layers": 6,
    },
}
TOKENS = {"type": "tokens", "vocab_size": VOCAB, "roles": {"input_ids": "ids", "token_type_ids": "type_ids"}}
UIE_TOKENS = TOKENS | {"roles": TOKENS["roles"] | {"position_ids": "positions", "attention_mask": "mask"}}
UIE_INPUTS = ("input_ids", "token_type_ids", "position_ids", "attention_mask")
HUMAN = {**pe.PPOCR, "color": "RGB"}  # PaddleSeg's Normalize: (x / 255 - 0.5) / 0.5
MATTING = {**pe.IMAGENET}  # PP-MattingV2: ImageNet mean/std
REC_DATA = {**pe.PPOCR, "text": True}
DET_DATA = {**pe.IMAGENET, "color": "BGR", "text": True}


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    kind: str
    build: object  # () -> paddle.nn.Layer
    hw: tuple[int, int] = (0, 0)  # images; (0, 0): token inputs
    dynamic: tuple[bool, bool] = (True, True)
    data: dict = field(default_factory=lambda: TOKENS)
    note: str = ""
    opsets: tuple[int, ...] = (11, 14)
    tol: float = 1e-4
    tokens: tuple[str, ...] = ("input_ids", "token_type_ids")  # token models' int64 inputs, in order
    seq: int = SEQ  # token models' sequence length in the manifest


def _nn():
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    if not hasattr(nn, "Conv2d"):  # PaddleX 3.7's modeling uses Paddle 3.2's torch-style alias

        def conv2d(*args, bias=True, **kwargs):
            return nn.Conv2D(*args, bias_attr=None if bias else False, **kwargs)

        nn.Conv2d = conv2d
    return paddle, F, nn


def _paddlenlp():
    import aistudio_sdk.hub as hub

    # paddlenlp 2.8.1 imports a name aistudio-sdk 0.3 dropped (it only downloads)
    if not hasattr(hub, "download"):
        hub.download = None
    from paddlenlp.transformers.ernie import configuration, modeling

    modeling.ErnieConfig = configuration.ErnieConfig
    return modeling


# --------------------------------------------------------------------------------------------- ERNIE 3.0
def ernie(size: str, head: str, classes: int = 2, vocab: int = VOCAB):
    def build():
        paddle, F, nn = _nn()
        m = _paddlenlp()
        cfg = m.ErnieConfig(
            **ERNIE[size], vocab_size=vocab, max_position_embeddings=2048, type_vocab_size=4,
            task_type_vocab_size=16, use_task_id=True, hidden_act="gelu", num_labels=classes,
        )  # fmt: skip
        if head == "cls":
            return m.ErnieForSequenceClassification(cfg)
        if head == "tok":
            return m.ErnieForTokenClassification(cfg)
        if head == "uie":
            return m.UIE(cfg)

        class SemanticIndex(nn.Layer):  # PaddleNLP's SemanticIndexBaseStatic.get_pooled_embedding
            def __init__(self):
                super().__init__()
                self.ptm = m.ErnieModel(cfg)
                self.emb_reduce_linear = nn.Linear(cfg.hidden_size, 64)

            def forward(self, input_ids, token_type_ids):
                _, cls = self.ptm(input_ids, token_type_ids)
                return F.normalize(self.emb_reduce_linear(cls), p=2, axis=-1)

        return SemanticIndex()

    return build


def _randomize_layernorm(model, seed: int) -> None:
    """Non-trivial LayerNorm scale/shift (fresh ones are 1 and 0; trained ERNIE's are not)."""
    import paddle

    rng = np.random.default_rng(seed)
    for m in model.sublayers():
        if isinstance(m, paddle.nn.LayerNorm):
            m.weight.set_value((1 + 0.2 * rng.standard_normal(m.weight.shape)).astype(np.float32))
            m.bias.set_value((0.1 * rng.standard_normal(m.bias.shape)).astype(np.float32))


# --------------------------------------------------------------------------------------------- PaddleSeg
def _seg_blocks():
    paddle, F, nn = _nn()

    class ConvBN(nn.Layer):  # PaddleSeg layers.ConvBNReLU / ConvBN
        def __init__(self, cin, cout, k=3, stride=1, act=True, groups=1):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = nn.ReLU() if act else nn.Identity()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    def resize_to(x, ref):
        return F.interpolate(x, paddle.shape(ref)[2:], mode="bilinear", align_corners=False)

    class SPPM(nn.Layer):  # PP-LiteSeg's simple pyramid pooling module
        def __init__(self, cin, mid, cout, bins=(1, 2, 4)):
            super().__init__()
            self.stages = nn.LayerList(
                [nn.Sequential(nn.AdaptiveAvgPool2D(b), ConvBN(cin, mid, 1)) for b in bins]
            )
            self.out = ConvBN(mid, cout, 3)

        def forward(self, x):
            y = None
            for s in self.stages:
                z = resize_to(s(x), x)
                y = z if y is None else y + z
            return self.out(y)

    class UAFM(nn.Layer):  # UAFM_SpAtten
        def __init__(self, c_low, c_high, cout):
            super().__init__()
            self.low = ConvBN(c_low, c_high, 3)
            self.att = nn.Sequential(ConvBN(4, 2, 3), ConvBN(2, 1, 3, act=False))
            self.out = ConvBN(c_high, cout, 3)

        def forward(self, low, high):
            x = self.low(low)
            y = resize_to(high, x)
            stats = [paddle.mean(x, 1, keepdim=True), paddle.max(x, 1, keepdim=True),
                     paddle.mean(y, 1, keepdim=True), paddle.max(y, 1, keepdim=True)]  # fmt: skip
            a = F.sigmoid(self.att(paddle.concat(stats, 1)))
            return self.out(x * a + y * (1 - a))

    return ConvBN, resize_to, SPPM, UAFM


def humanseg_v2_lite():
    """PaddleSeg's MobileSeg (configs/human_pp_humansegv2_lite.yml): MobileNetV3-Large features, SPPM, UAFMs."""
    paddle, F, nn = _nn()
    from paddle.vision.models import mobilenet_v3_large

    ConvBN, resize_to, SPPM, UAFM = _seg_blocks()

    class MobileSeg(nn.Layer):
        def __init__(self, classes=2):
            super().__init__()
            net = mobilenet_v3_large(scale=0.5, with_pool=False, num_classes=-1)
            self.stem, self.blocks = net.conv, net.blocks
            y, shapes = self.stem(paddle.zeros([1, 3, 64, 64])), []  # each block's channels and stride
            for b in self.blocks:
                y = b(y)
                shapes.append((y.shape[1], 64 // y.shape[2]))
            self.taps = [max(i for i, (_, s) in enumerate(shapes) if s == t) for t in (8, 16, 32)]
            c8, c16, c32 = (shapes[i][0] for i in self.taps)
            self.sppm = SPPM(c32, 64, 64)
            self.f16 = UAFM(c16, 64, 48)
            self.f8 = UAFM(c8, 48, 32)
            self.head = nn.Sequential(ConvBN(32, 32, 3), nn.Conv2D(32, classes, 1))

        def forward(self, x):
            y, feats = self.stem(x), []
            for i, b in enumerate(self.blocks):
                y = b(y)
                if i in self.taps:
                    feats.append(y)
            f8, f16, f32 = feats
            out = self.f8(f8, self.f16(f16, self.sppm(f32)))
            return resize_to(self.head(out), x)

    return MobileSeg()


def ppmatting_v2():
    """PaddleSeg's PP-MattingV2 (contrib/Matting ppmattingv2.py) reduced: STDC backbone, DPPM (pyramid pooling of
    the deepest feature at two levels), MLFF (resize + concat of three levels, spatial attention), a Sigmoid
    alpha at the input's size."""
    paddle, F, nn = _nn()
    ConvBN, resize_to, _, _ = _seg_blocks()

    class CatBottleneck(nn.Layer):  # STDC
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.stride = stride
            self.c0 = ConvBN(cin, cout // 2, 1)
            if stride == 2:
                self.avd = ConvBN(cout // 2, cout // 2, 3, 2, act=False, groups=cout // 2)
                self.skip = nn.AvgPool2D(3, 2, 1)
            self.c1 = ConvBN(cout // 2, cout // 4, 3)
            self.c2 = ConvBN(cout // 4, cout // 8, 3)
            self.c3 = ConvBN(cout // 8, cout // 8, 3)

        def forward(self, x):
            o0 = self.c0(x)
            o1 = self.c1(self.avd(o0) if self.stride == 2 else o0)
            o2 = self.c2(o1)
            o3 = self.c3(o2)
            return paddle.concat([self.skip(o0) if self.stride == 2 else o0, o1, o2, o3], 1)

    class DPPM(nn.Layer):  # double pyramid pooling: pooled branches, then a second pyramid on their fusion
        def __init__(self, cin, mid, cout, bins=(1, 2, 4), bins2=(1, 2)):
            super().__init__()
            self.p1 = nn.LayerList(
                [nn.Sequential(nn.AdaptiveAvgPool2D(b), ConvBN(cin, mid, 1)) for b in bins]
            )
            self.fuse = ConvBN(cin + mid * len(bins), mid, 3)
            self.p2 = nn.LayerList(
                [nn.Sequential(nn.AdaptiveAvgPool2D(b), ConvBN(mid, mid, 1)) for b in bins2]
            )
            self.out = ConvBN(mid * (1 + len(bins2)), cout, 3)

        def forward(self, x):
            y = self.fuse(paddle.concat([x] + [resize_to(p(x), x) for p in self.p1], 1))
            return self.out(paddle.concat([y] + [resize_to(p(y), y) for p in self.p2], 1))

    class MLFF(nn.Layer):  # multi-level feature fusion
        def __init__(self, cins, cout):
            super().__init__()
            self.lat = nn.LayerList([ConvBN(c, cout, 3) for c in cins])
            self.att = nn.Sequential(ConvBN(2, 1, 3, act=False), nn.Sigmoid())
            self.out = ConvBN(cout * len(cins), cout, 3)

        def forward(self, feats):
            ref = feats[0]
            # by index: Paddle's dy2static rejects zip(strict=...)
            ys = [self.lat[0](ref)] + [resize_to(self.lat[i](feats[i]), ref) for i in range(1, len(feats))]
            y = paddle.concat(ys, 1)
            a = self.att(paddle.concat([paddle.mean(y, 1, keepdim=True), paddle.max(y, 1, keepdim=True)], 1))
            return self.out(y * a)

    class PPMattingV2(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(ConvBN(3, 16, 3, 2), ConvBN(16, 32, 3, 2))
            self.s3 = nn.Sequential(CatBottleneck(32, 64, 2), CatBottleneck(64, 64, 1))
            self.s4 = nn.Sequential(CatBottleneck(64, 128, 2), CatBottleneck(128, 128, 1))
            self.s5 = nn.Sequential(CatBottleneck(128, 256, 2), CatBottleneck(256, 256, 1))
            self.dppm = DPPM(256, 32, 64)
            self.mlff16 = MLFF([128, 64], 48)
            self.mlff8 = MLFF([64, 48], 32)
            self.mlff4 = MLFF([32, 32], 16)
            self.alpha = nn.Sequential(ConvBN(16, 16, 3), nn.Conv2D(16, 1, 1))

        def forward(self, x):
            f4 = self.stem(x)
            f8 = self.s3(f4)
            f16 = self.s4(f8)
            f32 = self.s5(f16)
            y = self.mlff16([f16, self.dppm(f32)])
            y = self.mlff8([f8, y])
            y = self.mlff4([f4, y])
            return F.sigmoid(resize_to(self.alpha(y), x))

    return PPMattingV2()


# --------------------------------------------------------------------------------------------- PP-OCRv6
def ocrv6(module: str, cls: str, config: str, **kw):
    def build():
        import importlib

        _, _, nn = _nn()
        m = importlib.import_module(f"paddlex.inference.models.{module}")
        net = getattr(m, cls)(getattr(m, config)(**kw))

        class Wrap(nn.Layer):  # the PaddleX model's forward without its numpy I/O
            def __init__(self):
                super().__init__()
                self.model, self.head = net.model, net.head

            def forward(self, x):
                return self.head(self.model(x))

        return Wrap()

    return build


def ghostnet(scale: float = 0.5, classes: int = 32):
    """PaddleClas's GhostNet (ppcls/arch/backbone/model_zoo/ghostnet.py): ghost modules (primary conv + cheap
    depthwise conv, Concat, the first ``oup`` channels), SE with Linear layers on the squeezed pool and
    ``paddle.clip(x, 0, 1)`` as the gate, depthwise stride-2 shortcut branches, 1x1 960 head, Linear 1280, dropout."""
    paddle, F, nn = _nn()
    import math

    def div(v, d=4):
        new = max(d, int(v + d / 2) // d * d)
        return new + d if new < 0.9 * v else new

    class ConvBN(nn.Layer):
        def __init__(self, cin, cout, k, stride=1, groups=1, act="relu"):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm(cout, act=act)  # PaddleClas's fluid-style BatchNorm with a fused act

        def forward(self, x):
            return self.bn(self.conv(x))

    class SE(nn.Layer):
        def __init__(self, c, r=4):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.squeeze = nn.Linear(c, c // r)
            self.excitation = nn.Linear(c // r, c)

        def forward(self, x):
            y = paddle.squeeze(self.pool(x), axis=[2, 3])
            y = self.excitation(F.relu(self.squeeze(y)))
            y = paddle.clip(y, 0, 1)
            return x * paddle.unsqueeze(y, axis=[2, 3])

    class Ghost(nn.Layer):
        def __init__(self, cin, cout, relu=True, ratio=2):
            super().__init__()
            init = int(math.ceil(cout / ratio))
            self.cout = cout
            self.primary = ConvBN(cin, init, 1, act="relu" if relu else None)
            self.cheap = ConvBN(init, init * (ratio - 1), 3, groups=init, act="relu" if relu else None)

        def forward(self, x):
            y = self.primary(x)
            return paddle.concat([y, self.cheap(y)], axis=1)[:, : self.cout]

    class Bottleneck(nn.Layer):
        def __init__(self, cin, mid, cout, k, stride, se):
            super().__init__()
            self.stride, self.se = stride, se
            self.g1 = Ghost(cin, mid)
            if stride == 2:
                self.dw = ConvBN(mid, mid, k, stride, groups=mid, act=None)
            if se:
                self.se_block = SE(mid)
            self.g2 = Ghost(mid, cout, relu=False)
            self.short = stride != 1 or cin != cout
            if self.short:
                self.sc_dw = ConvBN(cin, cin, k, stride, groups=cin, act=None)
                self.sc_pw = ConvBN(cin, cout, 1, act=None)

        def forward(self, x):
            y = self.g1(x)
            y = self.dw(y) if self.stride == 2 else y
            y = self.se_block(y) if self.se else y
            y = self.g2(y)
            return y + (self.sc_pw(self.sc_dw(x)) if self.short else x)

    cfgs = [  # k, exp, c, se, s
        [3, 16, 16, 0, 1], [3, 48, 24, 0, 2], [3, 72, 24, 0, 1], [5, 72, 40, 1, 2], [5, 120, 40, 1, 1],
        [3, 240, 80, 0, 2], [3, 200, 80, 0, 1], [3, 184, 80, 0, 1], [3, 184, 80, 0, 1], [3, 480, 112, 1, 1],
        [3, 672, 112, 1, 1], [5, 672, 160, 1, 2], [5, 960, 160, 0, 1], [5, 960, 160, 1, 1], [5, 960, 160, 0, 1],
        [5, 960, 160, 1, 1],
    ]  # fmt: skip

    class GhostNet(nn.Layer):
        def __init__(self):
            super().__init__()
            c = div(16 * scale)
            self.stem = ConvBN(3, c, 3, 2)
            blocks = []
            for k, exp, out, se, st in cfgs:
                blocks.append(Bottleneck(c, div(exp * scale), div(out * scale), k, st, se))
                c = div(out * scale)
            self.blocks = nn.Sequential(*blocks)
            self.last = ConvBN(c, div(960 * scale), 1)
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.fc0 = nn.Linear(div(960 * scale), 1280)
            self.dropout = nn.Dropout(0.2)
            self.fc1 = nn.Linear(1280, classes)

        def forward(self, x):
            y = self.pool(self.last(self.blocks(self.stem(x))))
            y = F.relu(self.fc0(paddle.flatten(y, 1)))
            return self.fc1(self.dropout(y))

    return GhostNet()


def rtdetr():
    """PaddleX 3.7's RT-DETR (the PaddleDetection architecture, HGNetV2 backbone, hybrid encoder with AIFI
    attention, deformable decoder: GridSample) without the post-process, as PaddleDetection exports it with
    ``exclude_post_process=True``: the last decoder layer's Sigmoid scores and boxes. Reduced: HGNetV2 B0-sized,
    hidden 64, 2 decoder layers, 50 queries, 8 classes."""
    _, F, nn = _nn()
    from paddlex.inference.models.object_detection.modeling import rt_detr as m

    backbone = {
        "model_type": "hgnet_v2", "num_channels": 3, "embedding_size": 16, "hidden_sizes": [32, 64, 128, 256],
        "hidden_act": "relu", "num_labels": 0, "stem_channels": [3, 16, 16], "stem_strides": [2, 1, 1, 2, 1],
        "stage_in_channels": [16, 32, 64, 128], "stage_mid_channels": [16, 16, 32, 64],
        "stage_out_channels": [32, 64, 128, 256], "stage_num_blocks": [1, 1, 1, 1],
        "stage_downsample": [False, True, True, True], "stage_downsample_strides": [2, 2, 2, 2],
        "stage_light_block": [False, False, True, True], "stage_kernel_size": [3, 3, 5, 5],
        "stage_numb_of_layers": [3, 3, 3, 3], "use_learnable_affine_block": False,
        "out_features": ["stage2", "stage3", "stage4"],
    }  # fmt: skip
    cfg = m.RTDETRConfig(
        backbone_config=backbone, encoder_hidden_dim=64, encoder_in_channels=[64, 128, 256], encoder_ffn_dim=128,
        encoder_attention_heads=4, d_model=64, num_queries=50, decoder_in_channels=[64, 64, 64],
        decoder_ffn_dim=128, decoder_layers=2, decoder_attention_heads=4, num_denoising=0, num_labels=8,
    )  # fmt: skip

    class Head(nn.Layer):
        def __init__(self):
            super().__init__()
            self.model = m.RTDETRModel(cfg)

        def forward(self, x):
            out = self.model(x)
            return F.sigmoid(out["intermediate_logits"][:, -1]), out["intermediate_reference_points"][:, -1]

    return Head()


# --------------------------------------------------------------------------------------------- the models
SEG = "segmenter"
MODELS = [
    Model("ernie3_nano_cls", "ERNIE 3.0 nano (PaddleNLP 2.8.1), sequence classification", "classifier",
          ernie("nano", "cls"), note="312 x 4 layers, 12 heads, pad mask from the ids, pooler tanh, 2 classes"),
    Model("ernie3_nano_cls_full", "ERNIE 3.0 nano (PaddleNLP 2.8.1), the real sizes", "classifier",
          ernie("nano", "cls", vocab=40000), data=TOKENS | {"vocab_size": 40000}, seq=128,
          note="the real vocabulary (40000) and PaddleNLP's max_seq_length 128", opsets=(11,)),
    Model("ernie3_micro_cls15", "ERNIE 3.0 micro (PaddleNLP 2.8.1), sequence classification", "classifier",
          ernie("micro", "cls", 15), note="384 x 4 layers, 12 heads, 15 classes (TNEWS)", opsets=(11,)),
    Model("ernie3_mini_tok", "ERNIE 3.0 mini (PaddleNLP 2.8.1), token classification", "sequence",
          ernie("mini", "tok", 7), note="384 x 6 layers, 12 heads, 7 tags per token (MSRA NER)", opsets=(14,)),
    Model("ernie3_micro_emb", "ERNIE 3.0 micro (PaddleNLP 2.8.1), semantic-indexing embedding", "encoder",
          ernie("micro", "emb"), note="pooled output, Linear 64, L2 normalize", opsets=(14,)),
    Model("uie_nano", "UIE nano (PaddleNLP 2.8.1, ERNIE 3.0 nano), information extraction", "encoder",
          ernie("nano", "uie"), data=UIE_TOKENS, tokens=UIE_INPUTS, note="4 int64 inputs as the Taskflow export "
          "writes them (input_ids, token_type_ids, position_ids, attention_mask: the 2-D mask path), start/end "
          "Linear + Sigmoid per token", opsets=(11,)),
    Model("humanseg_v2_lite", "PP-HumanSegV2-Lite (PaddleSeg MobileSeg)", SEG, humanseg_v2_lite, (128, 128),
          (False, False), data=HUMAN, note="MobileNetV3-Large x0.5 (hardswish, SE), SPPM 1/2/4, UAFM spatial attention, bilinear", opsets=(11,)),
    Model("ppmatting_v2", "PP-MattingV2 style (PaddleSeg Matting)", SEG, ppmatting_v2, (128, 128), (False, False),
          data=MATTING,
          note="STDC, double pyramid pooling (adaptive pools 1/2/4 then 1/2), MLFF with spatial attention, "
          "Sigmoid alpha", opsets=(11,)),
    Model("ppocrv6_tiny_rec", "PP-OCRv6 tiny rec (PaddleX 3.7 modeling)", "sequence",
          ocrv6("text_recognition.modeling.pp_ocrv6_tiny_rec", "PPOCRV6TinyRec", "PPOCRV6TinyRecConfig"),
          (48, 160), (False, True), data=REC_DATA, note="PaddleX 3.7's PP-OCRv6 tiny rec", opsets=(11,)),
    Model("ppocrv6_small_det", "PP-OCRv6 small det (PaddleX 3.7 modeling)", SEG,
          ocrv6("text_detection.modeling.pp_ocrv6_small_det", "PPOCRV6SmallDet", "PPOCRV6SmallDetConfig"),
          (128, 128), data=DET_DATA, note="PaddleX 3.7's PP-OCRv6 small det", opsets=(11,)),
    Model("ghostnet_x0_5", "GhostNet x0.5 (PaddleClas)", "classifier", ghostnet, (96, 96), data=pe.IMAGENET,
          note="ghost modules (Concat then the first oup channels: Slice), SE on Linear layers with clip(0, 1), "
          "depthwise stride-2 shortcuts, fused BatchNorm act", opsets=(11, 16)),
    Model("rtdetr_hgnetv2", "RT-DETR (PaddleX 3.7 modeling), exclude_post_process", "detector", rtdetr,
          (128, 128), (False, False), data=pe.IMAGENET, note="HGNetV2, hybrid encoder (AIFI attention, CCFM), "
          "TopK query selection, deformable cross-attention (GridSample), Sigmoid scores + boxes", opsets=(16,)),
]  # fmt: skip


def _import_ocrv6_configs() -> None:
    """The PP-OCRv6 modules name their config classes in ``_config_*`` modules: expose them beside the model."""
    import importlib

    for mod, cfg_mod in (
        (
            "text_recognition.modeling.pp_ocrv6_tiny_rec",
            "text_recognition.modeling._config_pp_ocrv6_tiny_rec",
        ),
        ("text_detection.modeling.pp_ocrv6_small_det", "text_detection.modeling._config_pp_ocrv6_small_det"),
    ):
        m = importlib.import_module(f"paddlex.inference.models.{mod}")
        c = importlib.import_module(f"paddlex.inference.models.{cfg_mod}")
        for k in dir(c):
            if k.endswith("Config") and not hasattr(m, k):
                setattr(m, k, getattr(c, k))


def arrays(m: Model, count: int, seed: int, photos) -> dict:
    if m.hw == (0, 0):
        entry = {"name": m.name, "data": m.data, "inputs": _inputs(m)}
        return pe.zoo_data.make_arrays(entry, count, seed, photos)
    entry = {"name": m.name, "data": m.data, "inputs": [{"name": "x", "shape": [1, 3, *m.hw]}]}
    return {"x": pe.zoo_data.make_arrays(entry, count, seed, photos)["x"]}


def _inputs(m: Model) -> list[dict]:
    if m.hw == (0, 0):
        return [{"name": n, "shape": [1, m.seq], "dtype": "int64"} for n in m.tokens]
    return [{"name": "x", "shape": [1, 3, *m.hw], "dtype": "float32"}]


def export(m: Model, opset: int, out: Path, photos) -> dict:
    import onnx
    import onnxruntime as ort
    import paddle
    import paddle2onnx

    name = f"{m.name}_op{opset}"
    paddle.seed(SEED)
    np.random.seed(SEED)
    model = m.build()
    pe._randomize_affine(model, SEED + 1)
    _randomize_layernorm(model, SEED + 2)
    n_bn = 0
    if m.hw != (0, 0):
        n_bn = pe.set_bn_statistics(model, arrays(m, 32, 1000, photos)["x"])
    model.eval()
    ins = _inputs(m)
    if m.hw == (0, 0):
        specs = [paddle.static.InputSpec([None, None], "int64", i["name"]) for i in ins]
    else:
        shape = [None, 3, None if m.dynamic[0] else m.hw[0], None if m.dynamic[1] else m.hw[1]]
        specs = [paddle.static.InputSpec(shape, "float32", "x")]
    path = out / f"{name}.onnx"
    pe.paddle_to_onnx(model, path, opset, specs=specs, upgrade=True)
    minus_one_dims(path)
    proto = onnx.load(str(path))
    real = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    if real != opset:  # paddle2onnx raised it to what an op needs
        name = f"{m.name}_op{real}"
        path = path.rename(out / f"{name}.onnx")
        opset = real
    onnx.checker.check_model(proto)
    x = arrays(m, 2, 7, photos)
    with paddle.no_grad():
        want = model(*[paddle.to_tensor(v) for v in x.values()])
    want = [np.asarray(t) for t in (want if isinstance(want, list | tuple) else [want])]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {i.name: x[i.name] for i in sess.get_inputs()})
    err = max(float(np.abs(g - w).max() / (np.ptp(w) or 1.0)) for g, w in zip(got, want, strict=False))
    assert err < m.tol, f"{name}: onnxruntime vs Paddle {err:.2e} of the range"
    dyn = (
        "batch/sequence"
        if m.hw == (0, 0)
        else "batch" + "".join(f"/{d}" for d, on in zip("HW", m.dynamic, strict=True) if on)
    )
    return {
        "name": name,
        "file": path.name,
        "family": m.family,
        "kind": m.kind,
        "opset": opset,
        "inputs": ins,
        "outputs": [o.name for o in proto.graph.output],
        "data": m.data,
        "extra_args": [
            a for i in ins for a in ("--input-shape", f"{i['name']}={','.join(map(str, i['shape']))}")
        ],
        "size": "reduced",
        "ci": False,
        "params": int(sum(int(np.prod(p.shape)) for p in model.parameters())),
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"paddle2onnx {paddle2onnx.__version__} opset {opset}, {dyn} -1; {m.note}; {n_bn} BatchNorm from "
        f"photos; Paddle vs onnxruntime {err:.1e}",
        "seed": SEED,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=pe.FULL_DIR / "probe13e")
    parser.add_argument("--only")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    photos = pe.zoo_data.bn_photos(None, pe.default_shared())
    try:
        _import_ocrv6_configs()
    except Exception as exc:  # noqa: BLE001 - a probe: the OCR models fail to export and say so
        print(f"PP-OCRv6 configs: {exc}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    entries = pe.export_each(MODELS, lambda m, op: export(m, op, args.out, photos), args.out, only, 28)
    pe.zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
