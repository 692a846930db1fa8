"""Issue 12 probe round 7t, PaddlePaddle part: PP-LCNetV2, PP-HGNet-tiny and MobileNetV1 written with
paddle.nn after PaddleClas (seeded, BatchNorm statistics from real photos), paddle.jit.save + paddle2onnx at
opsets 11 and 16, dynamic batch and H/W written as ``dim_value -1`` as older paddle2onnx (and PP-OCR's real
models) write them. Needs the Paddle venv:

    /work/venv-paddle/bin/python benchmarks/zoo/probe_paddle_backbones.py --out benchmarks/.zoo/probe7t
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe7t/zoo.json --no-shared --only ppl...

- **PP-LCNetV2** (ppcls/arch/backbone/legendary_models/pp_lcnet_v2.py, x0.5, inference form: the
  re-parameterised depthwise branches are one depthwise conv): ReLU stem, stages of depthwise-separable blocks
  (3x3 / 5x5 depthwise, SE with Hardsigmoid, split pointwise, residual Add), 1280 1x1 head, ReLU, Linear;
- **PP-HGNet-tiny** (pp_hgnet.py, channels x0.5): 3-conv stem + MaxPool, HG blocks (5 stacked 3x3 conv-BN-ReLU,
  Concat of the input and every output, 1x1 aggregation, ESE: AvgPool, 1x1 conv, Sigmoid, Mul; identity Add in
  the repeated blocks), depthwise stride-2 downsampling between stages, 1x1 head + ReLU, Linear;
- **MobileNetV1** (paddle.vision.models.mobilenet_v1, scale 0.25).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import paddle_export as pe  # noqa: E402

SEED = 7707


def _layers():
    from paddle import nn

    class ConvBN(nn.Layer):
        def __init__(self, cin, cout, k, stride=1, groups=1, act=True):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = nn.ReLU() if act else nn.Identity()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class SE(nn.Layer):
        def __init__(self, c, reduction=4):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.conv1 = nn.Conv2D(c, c // reduction, 1)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2D(c // reduction, c, 1)
            self.gate = nn.Hardsigmoid()

        def forward(self, x):
            return x * self.gate(self.conv2(self.relu(self.conv1(self.pool(x)))))

    class LCNetV2Block(nn.Layer):
        def __init__(self, cin, cout, k, stride, split_pw, use_se, shortcut):
            super().__init__()
            self.dw = ConvBN(cin, cin, k, stride, groups=cin, act=False)
            self.act = nn.ReLU()
            self.se = SE(cin) if use_se else nn.Identity()
            if split_pw:
                self.pw = nn.Sequential(ConvBN(cin, cout // 2, 1), ConvBN(cout // 2, cout, 1))
            else:
                self.pw = ConvBN(cin, cout, 1)
            self.shortcut = shortcut and stride == 1 and cin == cout

        def forward(self, x):
            y = self.pw(self.se(self.act(self.dw(x))))
            return x + y if self.shortcut else y

    class PPLCNetV2(nn.Layer):
        # out, kernel, split_pw, use_se, shortcut, depth
        CONFIG = [
            (64, 3, False, False, False, 1),
            (128, 3, False, False, False, 2),
            (256, 5, True, True, True, 3),
            (512, 5, False, True, True, 2),
        ]

        def __init__(self, scale=0.5, classes=32):
            super().__init__()
            c = int(32 * scale)
            self.stem = ConvBN(3, c, 3, 2)
            blocks = []
            for out, k, split, se, sc, depth in self.CONFIG:
                o = int(out * scale)
                for d in range(depth):
                    blocks.append(LCNetV2Block(c, o, k, 2 if d == 0 else 1, split, se, sc))
                    c = o
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.last = nn.Conv2D(c, 1280, 1, bias_attr=False)
            self.relu = nn.ReLU()
            self.dropout = nn.Dropout(0.2, mode="downscale_in_infer")
            self.flatten = nn.Flatten(start_axis=1, stop_axis=-1)
            self.fc = nn.Linear(1280, classes)

        def forward(self, x):
            x = self.pool(self.blocks(self.stem(x)))
            return self.fc(self.flatten(self.dropout(self.relu(self.last(x)))))

    class ESE(nn.Layer):
        def __init__(self, c):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.conv = nn.Conv2D(c, c, 1)
            self.sigmoid = nn.Sigmoid()

        def forward(self, x):
            return x * self.sigmoid(self.conv(self.pool(x)))

    class HGBlock(nn.Layer):
        def __init__(self, cin, mid, cout, layers=5, identity=False):
            super().__init__()
            self.identity = identity
            self.layers = nn.LayerList([ConvBN(cin if i == 0 else mid, mid, 3) for i in range(layers)])
            self.agg = ConvBN(cin + layers * mid, cout, 1)
            self.att = ESE(cout)

        def forward(self, x):
            outs, y = [x], x
            for layer in self.layers:
                y = layer(y)
                outs.append(y)
            y = self.att(self.agg(__import__("paddle").concat(outs, axis=1)))
            return x + y if self.identity else y

    class PPHGNetTiny(nn.Layer):
        # in, mid, out, blocks, downsample
        STAGES = [(96, 96, 224, 1, False), (224, 128, 448, 1, True), (448, 160, 512, 2, True),
                  (512, 192, 768, 1, True)]  # fmt: skip

        def __init__(self, scale=0.5, classes=32):
            super().__init__()
            s = lambda v: int(v * scale)  # noqa: E731
            self.stem = nn.Sequential(
                ConvBN(3, s(48), 3, 2),
                ConvBN(s(48), s(48), 3),
                ConvBN(s(48), s(96), 3),
                nn.MaxPool2D(3, 2, 1),
            )
            stages = []
            for cin, mid, cout, n, down in self.STAGES:
                if down:
                    stages.append(ConvBN(s(cin), s(cin), 3, 2, groups=s(cin), act=False))
                for i in range(n):
                    stages.append(HGBlock(s(cin) if i == 0 else s(cout), s(mid), s(cout), identity=i > 0))
            self.stages = nn.Sequential(*stages)
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.last = nn.Conv2D(s(768), 2048 // 4, 1, bias_attr=False)
            self.relu = nn.ReLU()
            self.flatten = nn.Flatten(start_axis=1, stop_axis=-1)
            self.fc = nn.Linear(2048 // 4, classes)

        def forward(self, x):
            x = self.pool(self.stages(self.stem(x)))
            return self.fc(self.flatten(self.relu(self.last(x))))

    return PPLCNetV2, PPHGNetTiny


def _mnv1(full: bool):
    from paddle.vision import models

    return models.mobilenet_v1(scale=0.25, num_classes=32)


def _build(index: int):
    return lambda full: _layers()[index]()


NOTE = "paddle2onnx opset {op}, batch/H/W written as dim_value -1"
SPECS = [
    pe.Spec(f"{name}_op{op}", family, op, build, lambda full: (64, 64), pe.IMAGENET, NOTE.format(op=op))
    for name, family, build in (
        ("paddle_pplcnetv2", "PP-LCNetV2 x0.5 (PaddleClas)", _build(0)),
        ("paddle_pphgnet_tiny", "PP-HGNet-tiny x0.5 (PaddleClas)", _build(1)),
        ("paddle_mobilenet_v1", "MobileNetV1 x0.25 (paddle.vision)", _mnv1),
    )
    for op in (11, 16)
]


def minus_one_dims(path: Path) -> None:
    """Every dim_param of the graph's inputs and outputs becomes dim_value -1 (older paddle2onnx)."""
    import onnx

    proto = onnx.load(str(path))
    for v in [*proto.graph.input, *proto.graph.output]:
        for d in v.type.tensor_type.shape.dim:
            if d.HasField("dim_param") or not d.HasField("dim_value"):
                d.dim_value = -1
    onnx.save(proto, str(path))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=pe.FULL_DIR / "probe7t")
    parser.add_argument("--only")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    photos = pe.zoo_data.bn_photos(None, pe.default_shared())
    pe.SEED = SEED
    entries = []
    for spec in SPECS:
        if only and spec.name not in only:
            continue
        entry = pe.export(spec, False, args.out, photos)
        minus_one_dims(args.out / entry["file"])
        entry["note"] = entry["note"].replace("dynamic batch", "batch")
        entries.append(entry)
        size = (args.out / entry["file"]).stat().st_size / 1e6
        print(f"{spec.name:30s} {size:.2f} MB {entry['ops']}", flush=True)
    pe.zoo_data.merge_manifest(args.out, entries)


if __name__ == "__main__":
    main()
