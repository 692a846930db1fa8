"""Issue 12 probe round 17p: Paddle exports from the two ends of the toolchain users have.

    python -m venv /work/venv-pd26 && /work/venv-pd26/bin/pip install paddlepaddle==2.6.2 paddle2onnx==1.2.11 \
        "numpy<2" onnx==1.16.2 onnxruntime scikit-learn packaging
    python -m venv /work/venv-pd33 && /work/venv-pd33/bin/pip install paddlepaddle==3.3.1 paddle2onnx==2.1.0 \
        onnxruntime scikit-learn packaging
    /work/venv-pd26/bin/python benchmarks/zoo/probe_paddle6.py     # paddle 2.6 .pdmodel + paddle2onnx 1.x, 11 / 13
    /work/venv-pd33/bin/python benchmarks/zoo/probe_paddle6.py     # paddle 3.3 PIR .json + paddle2onnx 2.1, 16 / 17
    # a second 1.x: a venv with paddlepaddle==2.6.2 and paddle2onnx==1.0.8 (--no-deps, plus six): NAME_p26v10_opN
    python benchmarks/zoo/probe_paddle6.py --slim a,b               # edgekit's venv: onnxsim / onnxslim copies
    /work/venv-pd26/bin/python benchmarks/zoo/probe_paddle6.py --p2o-optimize a,b   # paddle2onnx.optimize copies
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe17p/zoo.json --no-shared --workers 1

Most public Paddle ONNX files (rapidocr, PaddleOCR's older releases, model hubs, user exports of 2022-2024) were
written by paddle 2.x programs (``.pdmodel``) through paddle2onnx 0.9-1.3 at opsets 11-13 with dynamic dims as -1;
new users get paddle 3.3 (PIR ``.json`` programs) + paddle2onnx 2.1. The same seeded models (BatchNorm statistics
from the photos / rendered text lines, momentum back to Paddle's 0.9) are written by whichever toolchain runs this
script, named ``NAME_p26_opN`` / ``NAME_p33_opN``:

- PaddleOCR: PP-OCRv4 mobile det style (PP-LCNetV3 with its rep layers folded: ConvBN + HardSwish, SE with
  HardSigmoid; RSE-FPN whose upsampling is PaddleOCR's ``F.upsample(scale_factor=2, mode="nearest")`` under paddle
  2.6, the lateral's size under PIR, where paddle2onnx 2.1 cannot convert a scale factor; DB head), the PP-OCRv3 det
  (round 8p's MobileNetV3 / RSE-FPN / DB) and rec (SVTR-LCNet, CTC) with the width written -1, PP-LCNet x0.25
  text-line orientation (Softmax over 2);
- PaddleClas: MobileNetV3-small (paddle.vision: HardSwish, SE with Paddle's HardSigmoid 1/6), PP-LCNet x0.5;
- PaddleDetection: PicoDet-S style raw and decoded (probe_picodet), and with ``multiclass_nms3`` (the refusal);
- PaddleSeg: PP-LiteSeg, PP-HumanSeg-lite; PP-TinyPose (round 8p's builders).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import paddle_export as pe  # noqa: E402

SEED = 1717
OCR_TEXT = {**pe.PPOCR, "text": True}
SEG = "segmenter"


@dataclass(frozen=True)
class Model:
    name: str
    family: str
    kind: str
    build: object  # () -> paddle.nn.Layer
    hw: tuple[int, int]
    dyn: str = "bhw"  # which dims the InputSpec leaves None: b, h, w
    data: dict = field(default_factory=lambda: pe.IMAGENET)
    note: str = ""
    input: str = "x"


def _legacy() -> bool:
    import paddle

    return int(paddle.__version__.split(".")[0]) < 3


def ppocrv4_det():
    """PP-OCRv4 mobile det style: PP-LCNetV3 x0.25-ish with the rep branches folded, RSE-FPN, DB head."""
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    legacy = _legacy()

    class ConvBN(nn.Layer):
        def __init__(self, cin, cout, k, s=1, groups=1, act=True):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, s, (k - 1) // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = nn.Hardswish() if act else nn.Identity()

        def forward(self, x):
            return self.act(self.bn(self.conv(x)))

    class SE(nn.Layer):
        def __init__(self, c):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.c1 = nn.Conv2D(c, c // 4, 1)
            self.c2 = nn.Conv2D(c // 4, c, 1)

        def forward(self, x):
            return x * nn.functional.hardsigmoid(self.c2(F.relu(self.c1(self.pool(x)))))

    class LCNetV3Block(nn.Layer):  # LearnableRepLayer folded to one ConvBN (as PaddleOCR's export does)
        def __init__(self, cin, cout, k, s, se):
            super().__init__()
            self.dw = ConvBN(cin, cin, k, s, groups=cin)
            self.se = SE(cin) if se else nn.Identity()
            self.pw = ConvBN(cin, cout, 1)

        def forward(self, x):
            return self.pw(self.se(self.dw(x)))

    def up(x, ref, factor):
        if legacy:  # PaddleOCR's DBFPN / RSEFPN
            return F.upsample(x, scale_factor=factor, mode="nearest", align_mode=1)
        return F.interpolate(x, paddle.shape(ref)[2:], mode="nearest")

    class RSELayer(nn.Layer):
        def __init__(self, cin, cout, k):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, padding=k // 2, bias_attr=False)
            self.se = SE(cout)

        def forward(self, x):
            x = self.conv(x)
            return x + self.se(x)

    class Det(nn.Layer):
        def __init__(self):
            super().__init__()
            self.stem = ConvBN(3, 16, 3, 2)
            cfg = [[(16, 24, 3, 1, False), (24, 32, 3, 2, False)], [(32, 48, 3, 1, False), (48, 48, 3, 2, False)],
                   [(48, 64, 5, 1, False), (64, 96, 5, 2, False)], [(96, 96, 5, 1, True), (96, 128, 5, 2, True)]]  # fmt: skip
            self.stages = nn.LayerList([nn.Sequential(*[LCNetV3Block(*c) for c in st]) for st in cfg])
            chans, out = (32, 48, 96, 128), 32
            self.ins = nn.LayerList([RSELayer(c, out, 1) for c in chans])
            self.inp = nn.LayerList([RSELayer(out, out // 4, 3) for _ in chans])
            self.h_conv = nn.Conv2D(out, out // 4, 3, padding=1, bias_attr=False)
            self.h_bn = nn.BatchNorm2D(out // 4)
            self.h_up1 = nn.Conv2DTranspose(out // 4, out // 4, 2, 2)
            self.h_bn2 = nn.BatchNorm2D(out // 4)
            self.h_up2 = nn.Conv2DTranspose(out // 4, 1, 2, 2)

        def forward(self, x):
            x = self.stem(x)
            feats = []
            for s in self.stages:
                x = s(x)
                feats.append(x)
            c2, c3, c4, c5 = [f(c) for f, c in zip(self.ins, feats)]  # noqa: B905
            out4 = c4 + up(c5, c4, 2)
            out3 = c3 + up(out4, c3, 2)
            out2 = c2 + up(out3, c2, 2)
            p5, p4, p3, p2 = [f(c) for f, c in zip(self.inp[::-1], (c5, out4, out3, out2))]  # noqa: B905
            p5, p4, p3 = up(p5, p2, 8), up(p4, p2, 4), up(p3, p2, 2)
            y = F.relu(self.h_bn(self.h_conv(paddle.concat([p5, p4, p3, p2], 1))))
            return F.sigmoid(self.h_up2(F.relu(self.h_bn2(self.h_up1(y)))))

    return Det()


def picodet_nms():
    """The decoded PicoDet + multiclass_nms3 as PaddleDetection 2.6 appends it (ppdet/modeling/ops.py); under
    paddle 3, round 8p's builder."""
    import paddle

    if not _legacy():
        import probe_paddle2

        return probe_paddle2.picodet_nms()
    import probe_picodet
    from paddle.base.layer_helper import LayerHelper

    def nms(boxes, scores):
        attrs = {"background_label": -1, "score_threshold": 0.025, "nms_top_k": 1000, "nms_threshold": 0.6,
                 "keep_top_k": 100, "nms_eta": 1.0, "normalized": True}  # fmt: skip
        if paddle.in_dynamic_mode():
            out, num, _ = paddle._legacy_C_ops.multiclass_nms3(boxes, scores, None, *sum(attrs.items(), ()))
            return out, num
        helper = LayerHelper("multiclass_nms3")
        out = helper.create_variable_for_type_inference(dtype=boxes.dtype)
        index = helper.create_variable_for_type_inference(dtype="int32")
        num = helper.create_variable_for_type_inference(dtype="int32")
        helper.append_op(type="multiclass_nms3", inputs={"BBoxes": boxes, "Scores": scores},
                         attrs=attrs, outputs={"Out": out, "Index": index, "NmsRoisNum": num})  # fmt: skip
        return out, num

    class WithNMS(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.det = probe_picodet.build(True)

        def forward(self, x):
            boxes, scores = self.det(x)
            return nms(boxes, scores)

    return WithNMS()


def _p2(name, *args):
    def build():
        import probe_paddle2

        return getattr(probe_paddle2, name)(*args)

    return build


def _picodet(decode):
    def build():
        import probe_picodet

        return probe_picodet.build(decode)

    return build


def _pe_cls(build, softmax=False):
    def make():
        import paddle

        m = build(False)
        return paddle.nn.Sequential(m, paddle.nn.Softmax(axis=-1)) if softmax else m

    return make


MODELS = [
    Model("ppocrv4_det", "PP-OCRv4 mobile det style (PP-LCNetV3 folded, RSE-FPN, DB)", SEG, ppocrv4_det, (64, 96),
          data=OCR_TEXT, note="LCNetV3 blocks (rep folded), RSE-FPN nearest x2/x4/x8, DB head"),
    Model("ppocrv3_det", "PP-OCRv3 det style (PaddleOCR)", SEG, _p2("ppocrv3_det"), (64, 64), data=OCR_TEXT,
          note="MobileNetV3, RSE-FPN (Resize to the lateral's size), DB head: 2 ConvTranspose, Sigmoid"),
    Model("ppocrv3_rec", "PP-OCRv3 rec style SVTR-LCNet (PaddleOCR), width -1", "sequence", _p2("ppocrv3_rec"),
          (48, 160), "bw", OCR_TEXT, "MobileNetV1Enhance (2,1) strides, SVTR mixing, CTC Softmax; [-1, 3, 48, -1]"),
    Model("textline_ori", "PP-LCNet x0.25 text-line orientation (PaddleOCR / PaddleClas)", "classifier",
          _pe_cls(pe._lcnet(0.25, 2), True), (48, 192), data=pe.PPOCR,
          note="PP-LCNet x0.25, SE HardSigmoid, HardSwish, Softmax over 0 / 180 degrees"),
    Model("mnv3_small", "MobileNetV3-small x0.35 (paddle.vision / PaddleClas)", "classifier",
          _pe_cls(pe._mnv3("small", 0.35, 32)), (64, 64), note="HardSwish, SE with HardSigmoid 1/6, Linear head"),
    Model("lcnet_x0_5", "PP-LCNet x0.5 (PaddleClas)", "classifier", _pe_cls(pe._lcnet(0.5, 32)), (64, 64),
          note="depthwise 3x3 / 5x5, SE, HardSwish, 1280 head"),
    Model("picodet_raw", "PicoDet-S style (PaddleDetection), no post-processing", "detector", _picodet(False),
          (160, 160), "b", note="LCNet-like, CSP-PAN, GFL head: per-level scores + bins", input="image"),
    Model("picodet_decoded", "PicoDet-S style (PaddleDetection), decoded without NMS", "detector", _picodet(True),
          (160, 160), "b", note="DFL Softmax + MatMul projection, distance2bbox", input="image"),
    Model("picodet_nms", "PicoDet-S style + multiclass_nms3", "detector", picodet_nms, (160, 160), "b",
          note="multiclass_nms3 (the typed refusal)", input="image"),
    Model("pp_liteseg", "PP-LiteSeg (PaddleSeg), STDC x0.25", SEG, _p2("pp_liteseg"), (128, 128), "b",
          note="STDC, SPPM adaptive pools, UAFM"),
    Model("humanseg_lite", "PP-HumanSeg-lite (PaddleSeg)", SEG, _p2("humanseg_lite"), (64, 64),
          note="shuffle blocks, bilinear decoder"),
    Model("tinypose", "PP-TinyPose style (Lite-HRNet)", SEG, _p2("tinypose"), (64, 48), "b",
          note="channel shuffle, cross-resolution weighting, nearest fuse, 17 heatmaps"),
]  # fmt: skip


def _toolchain():
    import paddle
    import paddle2onnx
    import probe_paddle2
    import probe_picodet

    # paddle 2.6's dygraph-to-static rewrites a forward's source and loses the names its closure held
    for mod in (sys.modules[__name__], probe_paddle2, probe_picodet, pe):
        mod.paddle, mod.F, mod.nn = paddle, paddle.nn.functional, paddle.nn
    legacy = _legacy()
    tag = "p26" if legacy else "p33"
    if legacy and not paddle2onnx.__version__.startswith("1.2."):
        tag += "v" + "".join(paddle2onnx.__version__.split(".")[:2])  # p26v09: paddle2onnx 0.9, p26v10: 1.0
    return (
        tag,
        ((11, 13) if legacy else (16, 17)),
        f"paddle {paddle.__version__} + paddle2onnx {paddle2onnx.__version__}",
    )


def _arrays(m: Model, count: int, seed: int, photos) -> np.ndarray:
    entry = {"name": m.name, "data": m.data, "inputs": [{"name": "x", "shape": [1, 3, *m.hw]}]}
    return pe.zoo_data.make_arrays(entry, count, seed, photos)["x"]


def _closures_to_globals(model) -> None:
    """paddle 2.6's dygraph-to-static recompiles each forward from its source with the module's globals only:
    the names a forward (and the functions it calls) took from its builder's closure are put there."""
    import types

    seen = set()

    def inject(fn):
        if not isinstance(fn, types.FunctionType) or fn in seen:
            return
        seen.add(fn)
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            fn.__globals__.setdefault(name, value)
            if fn.__globals__[name] is not value:
                fn.__globals__[name] = value
            inject(value)

    for layer in [model, *model.sublayers()]:
        inject(getattr(type(layer).forward, "__func__", type(layer).forward))


def _save_and_convert(model, spec, path: Path, opset: int) -> None:
    """paddle.jit.save, then paddle2onnx as users run it (the opset raised where an op needs it, both versions'
    default): 1.x with the checker on (its CLI's --enable_onnx_checker True)."""
    import tempfile

    import paddle
    import paddle2onnx

    _closures_to_globals(model)
    with tempfile.TemporaryDirectory(prefix="p6-") as tmp:
        prefix = str(Path(tmp, "inference"))
        paddle.jit.save(model, prefix, input_spec=[spec])
        program = prefix + (".json" if Path(prefix + ".json").exists() else ".pdmodel")
        if _legacy():  # paddle2onnx 0.9 / 1.x: its CLI, as users and PaddleOCR's docs run it
            cli = Path(sys.executable).parent / "paddle2onnx"
            cmd = [str(cli), "--model_dir", tmp, "--model_filename", Path(program).name, "--params_filename",
                   "inference.pdiparams", "--save_file", str(path), "--opset_version", str(opset),
                   "--enable_onnx_checker", "True"]  # fmt: skip
            run = subprocess.run(cmd, capture_output=True, text=True)
            data = path.read_bytes() if run.returncode == 0 and path.exists() else b""
            if not data:
                raise RuntimeError(f"paddle2onnx: {(run.stdout + run.stderr)[-300:]}")
        else:
            data = paddle2onnx.export(
                program, prefix + ".pdiparams", opset_version=opset, auto_upgrade_opset=True
            )
    if not data:
        raise RuntimeError("paddle2onnx wrote nothing")
    path.write_bytes(data)


def export(m: Model, opset: int, out: Path, photos, tag: str, tool: str) -> dict:
    import onnx
    import onnxruntime as ort
    import paddle
    from probe_paddle_backbones import minus_one_dims

    name = f"{m.name}_{tag}_op{opset}"
    paddle.seed(SEED)
    np.random.seed(SEED)
    model = m.build()
    pe._randomize_affine(model, SEED + 1)
    bns = [b for b in model.sublayers() if isinstance(b, paddle.nn.layer.norm._BatchNormBase)]
    for bn in bns:
        bn._momentum = 0.0
    model.train()
    with paddle.no_grad():
        model(paddle.to_tensor(_arrays(m, 32, 1000, photos)))
    for bn in bns:
        bn._momentum = 0.9
    model.eval()
    h, w = m.hw
    shape = [None if "b" in m.dyn else 1, 3, None if "h" in m.dyn else h, None if "w" in m.dyn else w]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.onnx"
    _save_and_convert(model, paddle.static.InputSpec(shape, "float32", m.input), path, opset)
    minus_one_dims(path)
    proto = onnx.load(str(path))
    written = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
    onnx.checker.check_model(proto)
    x = _arrays(m, 1 if m.name == "picodet_nms" else 2, 7, photos)
    with paddle.no_grad():
        want = model(paddle.to_tensor(x))
    want = [np.asarray(t) for t in (want if isinstance(want, list | tuple) else [want])]
    got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {m.input: x})
    err = 0.0
    if m.name != "picodet_nms":
        for g, wv in zip(got, want, strict=True):
            err = max(err, float(np.abs(g - wv).max() / (np.ptp(wv) or 1.0)))
        assert err < 1e-4, f"{name}: ort vs Paddle {err:.2e}"
    return {
        "name": name,
        "file": path.name,
        "family": m.family,
        "kind": m.kind,
        "opset": written,
        "inputs": [{"name": m.input, "shape": [1, 3, h, w], "dtype": "float32"}],
        "outputs": [o.name for o in proto.graph.output],
        "data": m.data,
        "extra_args": ["--input-shape", f"{m.input}=1,3,{h},{w}"],
        "size": "reduced",
        "ci": False,
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"{tool} opset {opset} (written {written}), dims {shape} as -1; {m.note}; {len(bns)} BatchNorm from photos; "
        f"Paddle vs onnxruntime {err:.1e}",
        "seed": SEED,
    }


def slim(out: Path, names: list[str], p2o: bool = False) -> None:
    """onnxsim (else onnxslim) copies ``NAME_sim`` of built files, at their fixed input shape, as users run it;
    ``p2o``: ``NAME_p2oopt``, paddle2onnx 1.x's own ``python -m paddle2onnx.optimize --input_shape_dict``
    (PaddleOCR's docs for a fixed-shape file; run in the paddle 2.6 venv)."""
    import json

    entries = {e["name"]: e for e in pe.zoo_data.entries(out / "zoo.json")}
    new = []
    for name in names:
        e = dict(entries[name])
        src, dst = out / e["file"], out / f"{name}_{'p2oopt' if p2o else 'sim'}.onnx"
        shape = e["extra_args"][1]
        if p2o:
            feed, dims = shape.split("=")
            cmd = [sys.executable, "-m", "paddle2onnx.optimize", "--input_model", str(src), "--output_model",
                   str(dst), "--input_shape_dict", str({feed: [int(d) for d in dims.split(",")]})]  # fmt: skip
            subprocess.run(cmd, check=True, capture_output=True)
            e.update(name=dst.stem, file=dst.name, note=f"paddle2onnx.optimize of {name}; " + e["note"])
            new.append(e)
            continue
        try:
            import onnxsim  # noqa: F401

            cmd = ["onnxsim", str(src), str(dst), "--overwrite-input-shape", shape.replace("=", ":")]
            tool = "onnxsim"
        except ImportError:
            cmd = ["onnxslim", str(src), str(dst)]
            tool = "onnxslim"
        subprocess.run(cmd, check=True, capture_output=True)
        e.update(name=f"{name}_sim", file=dst.name, note=f"{tool} of {name}; " + e["note"])
        new.append(e)
        print(name, "->", dst.name, json.dumps(e["extra_args"]))
    pe.zoo_data.merge_manifest(out, new)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=pe.ROOT / "benchmarks" / ".zoo" / "probe17p")
    parser.add_argument("--only")
    parser.add_argument("--opsets", help="N,N: these opsets instead of the toolchain's two")
    parser.add_argument("--slim", help="NAME,NAME: onnxsim / onnxslim copies (edgekit's venv)")
    parser.add_argument("--p2o-optimize", help="NAME,NAME: paddle2onnx.optimize copies (the paddle 2.6 venv)")
    args = parser.parse_args(argv)
    if args.slim or args.p2o_optimize:
        slim(args.out, (args.slim or args.p2o_optimize).split(","), p2o=bool(args.p2o_optimize))
        return 0
    tag, opsets, tool = _toolchain()
    opsets = tuple(int(o) for o in args.opsets.split(",")) if args.opsets else opsets
    only = set(args.only.split(",")) if args.only else None
    photos = pe.zoo_data.bn_photos(None, pe.default_shared())
    entries = []
    for m in MODELS:
        for op in opsets:
            if only and m.name not in only:
                continue
            try:
                entries.append(export(m, op, args.out, photos, tag, tool))
            except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
                print(
                    f"{m.name}_{tag}_op{op}: EXPORT FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True
                )
                continue
            e = entries[-1]
            print(f"{e['name']:28s} {e['note'][-32:]} {e['ops']}", flush=True)
    pe.zoo_data.merge_manifest(args.out, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
