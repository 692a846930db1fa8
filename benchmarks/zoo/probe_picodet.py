"""Issue 12 round 4 probe: a PaddleDetection PicoDet-S style detector exported with paddle2onnx.

    /work/venv-paddle/bin/python benchmarks/zoo/probe_picodet.py --out benchmarks/.zoo/probe4p
    /work/venv-paddle/bin/python benchmarks/zoo/probe_picodet.py --out tests/zoo/models --only picodet_decoded_op13
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe4p/zoo.json --no-shared --workers 1

LCNet-like backbone (depthwise separable 3x3/5x5, Hardswish, SE with Hardsigmoid), CSP-PAN (1x1 laterals, nearest x2
upsampling, depthwise 5x5 + pointwise, an extra stride-64 level), the GFL head (shared-free towers per level, class
logits + 4 x (reg_max + 1) = 32 distribution bins). Exported as PaddleDetection does with ``export.post_process``
off (``picodet_raw_op*``: per-level Sigmoid scores [B, N_l, C] and raw bins [B, N_l, 32]) and on without NMS
(``picodet_decoded_op*``: Softmax over the bins, MatMul with the projection arange(0, 8), * stride,
distance2bbox from the centre points; boxes [B, N, 4], scores [B, C, N]); batch -1, 160x160, opsets 11 and 13.
paddle2onnx 2.1 cannot convert PIR's nearest upsampling by ``scale_factor`` ("the 0th elementwise MUST be
ir::FloatAttribute"), so the neck upsamples to the lateral's size (a Resize with ``sizes``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import paddle_export as pe  # noqa: E402

SIZE = 160
CLASSES = 8
REG_MAX = 7
STRIDES = (8, 16, 32, 64)
DATA = pe.IMAGENET  # the photos' preprocessing of the zoo's Paddle classifiers


def build(decode: bool):
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    class ConvBN(nn.Layer):
        def __init__(self, cin, cout, k=1, s=1, groups=1, act=True):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, s, k // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = nn.Hardswish() if act else None

        def forward(self, x):
            x = self.bn(self.conv(x))
            return self.act(x) if self.act is not None else x

    class SE(nn.Layer):
        def __init__(self, c):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.c1 = nn.Conv2D(c, c // 4, 1)
            self.c2 = nn.Conv2D(c // 4, c, 1)

        def forward(self, x):
            s = F.hardsigmoid(self.c2(F.relu(self.c1(self.pool(x)))), slope=0.2, offset=0.5)
            return x * s

    class DWSep(nn.Layer):
        def __init__(self, cin, cout, k, s, se=False):
            super().__init__()
            self.dw = ConvBN(cin, cin, k, s, cin)
            self.se = SE(cin) if se else None
            self.pw = ConvBN(cin, cout, 1)

        def forward(self, x):
            x = self.dw(x)
            if self.se is not None:
                x = self.se(x)
            return self.pw(x)

    class Backbone(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = ConvBN(3, 16, 3, 2)
            self.b2 = nn.Sequential(DWSep(16, 24, 3, 2), DWSep(24, 24, 3, 1))
            self.b3 = nn.Sequential(DWSep(24, 48, 3, 2), DWSep(48, 48, 3, 1))
            self.b4 = nn.Sequential(DWSep(48, 96, 3, 2), DWSep(96, 96, 5, 1), DWSep(96, 96, 5, 1))
            self.b5 = nn.Sequential(DWSep(96, 192, 5, 2, se=True), DWSep(192, 192, 5, 1, se=True))

        def forward(self, x):
            c3 = self.b3(self.b2(self.stem(x)))
            c4 = self.b4(c3)
            return [c3, c4, self.b5(c4)]

    class CSPPAN(nn.Layer):
        def __init__(self, cins, c):
            super().__init__()
            self.lat = nn.LayerList([ConvBN(ci, c, 1) for ci in cins])
            self.td = nn.LayerList([DWSep(2 * c, c, 5, 1) for _ in range(2)])
            self.down = nn.LayerList([DWSep(c, c, 5, 2) for _ in range(2)])
            self.bu = nn.LayerList([DWSep(2 * c, c, 5, 1) for _ in range(2)])
            self.extra = DWSep(c, c, 5, 2)

        def forward(self, feats):
            p3, p4, p5 = [lat(f) for lat, f in zip(self.lat, feats)]  # noqa: B905 (paddle.jit: no strict=)
            p4 = self.td[0](paddle.concat([F.interpolate(p5, size=p4.shape[2:], mode="nearest"), p4], 1))
            p3 = self.td[1](paddle.concat([F.interpolate(p4, size=p3.shape[2:], mode="nearest"), p3], 1))
            n4 = self.bu[0](paddle.concat([self.down[0](p3), p4], 1))
            n5 = self.bu[1](paddle.concat([self.down[1](n4), p5], 1))
            return [p3, n4, n5, self.extra(n5)]

    class PicoDet(nn.Layer):
        def __init__(self, c=48):
            super().__init__()
            self.backbone = Backbone()
            self.neck = CSPPAN([48, 96, 192], c)
            self.towers = nn.LayerList([nn.Sequential(DWSep(c, c, 5, 1), DWSep(c, c, 5, 1)) for _ in STRIDES])
            self.heads = nn.LayerList([nn.Conv2D(c, CLASSES + 4 * (REG_MAX + 1), 1) for _ in STRIDES])
            rng = np.random.default_rng(7)
            for h in self.heads:
                b = (0.1 * rng.standard_normal(CLASSES + 4 * (REG_MAX + 1))).astype(np.float32)
                b[:CLASSES] = -3.0 + 1.5 * rng.standard_normal(CLASSES)
                h.bias.set_value(b)
            self.register_buffer(
                "project", paddle.to_tensor(np.arange(REG_MAX + 1, dtype="float32")[:, None])
            )
            pts, sts = [], []
            for s in STRIDES:
                n = -(-SIZE // s)
                ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
                pts.append(np.stack([xs.ravel(), ys.ravel()], -1) * s + s // 2)
                sts.append(np.full((n * n, 1), s))
            self.register_buffer("points", paddle.to_tensor(np.concatenate(pts).astype("float32")))
            self.register_buffer("strides", paddle.to_tensor(np.concatenate(sts).astype("float32")))

        def forward(self, x):
            scores, regs = [], []
            for f, t, h in zip(self.neck(self.backbone(x)), self.towers, self.heads):  # noqa: B905
                out = h(t(f))
                cls, reg = paddle.split(out, [CLASSES, 4 * (REG_MAX + 1)], axis=1)
                cls = F.sigmoid(cls).flatten(2).transpose([0, 2, 1])
                reg = reg.flatten(2).transpose([0, 2, 1])
                scores.append(cls)
                regs.append(reg)
            if not decode:
                return scores + regs
            reg = paddle.concat(regs, 1)
            dist = F.softmax(reg.reshape([-1, reg.shape[1], 4, REG_MAX + 1]), axis=-1)
            dist = paddle.matmul(dist, self.project).squeeze(-1) * self.strides
            p = self.points
            lt, rb = paddle.split(dist, 2, axis=-1)
            boxes = paddle.concat([p - lt, p + rb], -1)
            return boxes, paddle.concat(scores, 1).transpose([0, 2, 1])

    return PicoDet()


def export(name: str, decode: bool, opset: int, out: Path, photos) -> dict:
    import onnx
    import onnxruntime as ort
    import paddle

    paddle.seed(pe.SEED)
    model = build(decode)
    pe._randomize_affine(model, pe.SEED + 1)
    spec = pe.Spec(name, "PicoDet", opset, None, lambda full: (SIZE, SIZE), DATA, "")
    n_bn = pe.set_bn_statistics(model, pe._images(spec, False, 32, 1000, photos))
    path = out / f"{name}.onnx"
    pe.paddle_to_onnx(model, path, opset, shape=(None, 3, SIZE, SIZE), name="image")
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    x = pe._images(spec, False, 2, 7, photos)
    want = [np.asarray(t) for t in model(paddle.to_tensor(x))]
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"image": x})
    err = max(float(np.abs(g - w).max() / (np.ptp(w) or 1.0)) for g, w in zip(got, want, strict=True))
    print(
        f"{name}: Paddle vs onnxruntime {err:.1e}, {n_bn} BN, ops {sorted({n.op_type for n in proto.graph.node})}"
    )
    return {
        "name": name,
        "file": path.name,
        "family": "PicoDet-S style (PaddleDetection)",
        "kind": "detector",
        "opset": opset,
        "inputs": [{"name": "image", "shape": [1, 3, SIZE, SIZE], "dtype": "float32"}],
        "outputs": [o.name for o in proto.graph.output],
        "data": DATA,
        "extra_args": ["--input-shape", f"image=1,3,{SIZE},{SIZE}"],
        "size": "reduced",
        "ci": False,
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"paddle2onnx opset {opset}, batch -1, {'decode in the graph' if decode else 'no post-processing'}",
        "seed": pe.SEED,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=pe.ROOT / "benchmarks" / ".zoo" / "probe4p")
    parser.add_argument("--only")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    photos = pe.zoo_data.bn_photos(None, pe.default_shared())
    entries = []
    for opset in (11, 13):
        for decode in (False, True):
            name = f"picodet_{'decoded' if decode else 'raw'}_op{opset}"
            if args.only and name not in args.only.split(","):
                continue
            entries.append(export(name, decode, opset, args.out, photos))
    pe.zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
