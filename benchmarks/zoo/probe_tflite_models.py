"""Issue 12 probe round 9m: real trained TFLite models converted to ONNX as users do, and Keras models via tf2onnx.

Many public ONNX files are conversions of TensorFlow / TFLite models (tf2onnx): NHWC inputs with Transposes, Pad
then Conv (TF "SAME"), PRelu with per-channel slopes, float16 weights read through Cast, ResizeBilinear with
half_pixel, several outputs of different ranks. This probe converts the real MediaPipe models shipped in the
``mediapipe`` 0.10.14 wheel (Apache-2.0; trained weights, no hub) with ``python -m tf2onnx.convert --tflite``
(opset 13, two at opset 17 too, one with ``--inputs-as-nchw``), checks every ONNX file against LiteRT running the
original ``.tflite`` on photos, and adds Keras models (``keras.applications`` MobileNetV2, MobileNetV3Small,
EfficientNetB0, ResNet50 at 96 x 96, seeded, BatchNorm statistics from the photos; an Embedding +
MultiHeadAttention text classifier with int32 ids and an Embedding + LSTM one with int64 ids) exported by
``tf2onnx.convert.from_keras`` at opset 13 (``--out benchmarks/.zoo/probe9m``, not committed).

TensorFlow and tf2onnx live only in a converter venv of their own (``--tf-python``; tensorflow-cpu 2.21 +
tf2onnx 1.17.0 + tf-keras on Python 3.11); this script runs there for the conversion step (``--tf-side``) and in
edgekit's venv for the rest (LiteRT check, manifest).

    python -m venv /work/venv-tf9 && /work/venv-tf9/bin/pip install tensorflow-cpu tf2onnx tf-keras
    python benchmarks/zoo/probe_tflite_models.py --tf-python /work/venv-tf9/bin/python --wheel mediapipe-0.10.14-*.whl
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe9m/zoo.json --no-shared --workers 1 --calib 16 --eval 8
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve()

#: MediaPipe's ImageToTensorCalculator ranges: [-1, 1] or [0, 1] RGB, NHWC.
PM1 = {"scale": 1 / 127.5, "mean": [1.0] * 3, "std": [1.0] * 3}
P01 = {"scale": 1 / 255, "mean": None, "std": None}

#: name, wheel member (under mediapipe/modules/), kind, pixel range, extra conversions (opset 17, NCHW input)
MEDIAPIPE: list[tuple[str, str, str, dict[str, Any], tuple[str, ...]]] = [
    (
        "face_detection_short",
        "face_detection/face_detection_short_range.tflite",
        "detector",
        PM1,
        ("op17", "nchw"),
    ),
    (
        "face_detection_full_sparse",
        "face_detection/face_detection_full_range_sparse.tflite",
        "detector",
        PM1,
        (),
    ),
    ("face_landmark", "face_landmark/face_landmark.tflite", "detector", P01, ()),
    ("face_landmark_attention", "face_landmark/face_landmark_with_attention.tflite", "detector", P01, ()),
    ("palm_detection_lite", "palm_detection/palm_detection_lite.tflite", "detector", P01, ("op17",)),
    ("palm_detection_full", "palm_detection/palm_detection_full.tflite", "detector", P01, ()),
    ("hand_landmark_lite", "hand_landmark/hand_landmark_lite.tflite", "detector", P01, ()),
    ("hand_landmark_full", "hand_landmark/hand_landmark_full.tflite", "detector", P01, ()),
    ("hand_recrop", "holistic_landmark/hand_recrop.tflite", "detector", PM1, ()),
    ("pose_detection", "pose_detection/pose_detection.tflite", "detector", PM1, ()),
    ("pose_landmark_full", "pose_landmark/pose_landmark_full.tflite", "detector", P01, ()),
    ("iris_landmark", "iris_landmark/iris_landmark.tflite", "detector", P01, ()),
    ("selfie_segmentation", "selfie_segmentation/selfie_segmentation.tflite", "segmenter", P01, ()),
    ("selfie_landscape", "selfie_segmentation/selfie_segmentation_landscape.tflite", "segmenter", P01, ()),
]

#: Keras models: name, builder, input size, data (as keras.applications' own preprocessing expects)
KERAS_IMAGE = [
    ("keras_mobilenet_v2", "MobileNetV2", {"color": "RGB", **PM1}),
    (
        "keras_mobilenet_v3_small",
        "MobileNetV3Small",
        {"color": "RGB", "scale": 1.0, "mean": None, "std": None},
    ),
    ("keras_efficientnet_b0", "EfficientNetB0", {"color": "RGB", "scale": 1.0, "mean": None, "std": None}),
    (
        "keras_resnet50",
        "ResNet50",
        {"color": "BGR", "scale": 1.0, "mean": [103.939, 116.779, 123.68], "std": None},
    ),
]
KERAS_SIZE, KERAS_CLASSES, TEXT_LEN, TEXT_VOCAB = 96, 100, 32, 2000


# --------------------------------------------------------------------------------------------- TF venv side


def _keras_bn_from_photos(model: Any, photos: np.ndarray) -> None:
    """BatchNorm moving statistics = the statistics of the photos' activations: momentum 0 and one training-mode
    pass (dropout and stochastic depth off, so each layer sees what it will see in inference)."""
    import keras

    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.0
        if isinstance(layer, keras.layers.Dropout):
            layer.rate = 0.0
    model(photos, training=True)


def _text_model(kind: str, seed: int) -> Any:
    import keras

    keras.utils.set_random_seed(seed)
    dtype = "int32" if kind == "mha" else "int64"
    ids = keras.Input((TEXT_LEN,), dtype=dtype, name="input_ids", batch_size=1)
    x = keras.layers.Embedding(TEXT_VOCAB, 64)(ids)
    if kind == "mha":
        a = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(x, x)
        x = keras.layers.LayerNormalization()(x + a)
        # tanh GELU: Keras 3's exact gelu is written by tf2onnx 1.17 as Erfc, not an ONNX op (an invalid model)
        f = keras.layers.Dense(128, activation=lambda t: keras.activations.gelu(t, approximate=True))(x)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(64)(f))
        x = keras.layers.GlobalAveragePooling1D()(x)
    else:
        x = keras.layers.LSTM(48)(x)
    out = keras.layers.Dense(8, activation="softmax", name="probs")(x)
    return keras.Model(ids, out)


def _int8_tflite(out: Path, photos: np.ndarray) -> bytes:
    """A Keras MobileNetV2 (alpha 0.35, 96 x 96, BatchNorm from the photos) through TFLite's full-integer
    post-training quantization (``TFLITE_BUILTINS_INT8``, float I/O), the photos as its representative data."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(1234)
    model = keras.applications.MobileNetV2(
        input_shape=(KERAS_SIZE, KERAS_SIZE, 3), weights=None, classes=KERAS_CLASSES, alpha=0.35
    )
    _keras_bn_from_photos(model, photos)
    model.export(str(out / "tflite" / "mnv2_saved_model"), verbose=False)
    conv = tf.lite.TFLiteConverter.from_saved_model(str(out / "tflite" / "mnv2_saved_model"))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([photos[i : i + 1]] for i in range(len(photos)))
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return conv.convert()


def _tf2onnx(tflite: Path | str, onnx_path: Path | str, opset: int, args: list[str]) -> None:
    cmd = [sys.executable, "-m", "tf2onnx.convert", "--tflite", str(tflite), "--output", str(onnx_path),
           "--opset", str(opset), *args]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    status = "ok" if r.returncode == 0 and Path(onnx_path).exists() else "FAILED"
    tail = [ln for ln in r.stderr.splitlines() if " - ERROR - " in ln or "Error:" in ln][-3:]
    print(f"tf2onnx {Path(onnx_path).name}: {status} {' | '.join(tail)[:400]}", flush=True)


def tf_side(out: Path) -> int:
    """Runs in the TF venv: tf2onnx on every .tflite of ``out/tflite``, the Keras models, and their references."""
    import tensorflow as tf
    import tf2onnx

    job = json.loads((out / "tf_job.json").read_text())
    for conv in job["tflite"]:
        if job["reuse"] and Path(conv["onnx"]).exists():
            continue
        _tf2onnx(conv["tflite"], conv["onnx"], conv["opset"], conv.get("args", []))
    import keras

    photos = np.load(out / "keras_photos.npz")
    for name, builder, _ in KERAS_IMAGE:
        if job["reuse"] and (out / f"{name}.onnx").exists():
            continue
        keras.utils.set_random_seed(1234)
        model = getattr(keras.applications, builder)(
            input_shape=(KERAS_SIZE, KERAS_SIZE, 3), weights=None, classes=KERAS_CLASSES
        )
        _keras_bn_from_photos(model, photos[f"{name}_bn"])
        ref_x = photos[f"{name}_ref"]
        ref_y = np.concatenate(
            [np.asarray(model(ref_x[i : i + 1], training=False)) for i in range(len(ref_x))]
        )
        spec = [tf.TensorSpec((1, KERAS_SIZE, KERAS_SIZE, 3), tf.float32, name="input")]
        try:
            tf2onnx.convert.from_keras(
                model, input_signature=spec, opset=13, output_path=str(out / f"{name}.onnx")
            )
        except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
            print(f"{name}: EXPORT FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        np.savez(out / f"{name}.ref.npz", x=ref_x, y=ref_y)
        print(f"keras {name}: ok", flush=True)
    int8 = out / "tflite" / "keras_mobilenet_v2_int8.tflite"
    if not (job["reuse"] and int8.exists()):
        int8.write_bytes(_int8_tflite(out, photos["keras_mobilenet_v2_bn"]))
    _tf2onnx(int8, out / "keras_mobilenet_v2_int8.onnx", 13, [])
    rng = np.random.default_rng(7)
    for kind, dtype in (("mha", np.int32), ("lstm", np.int64)):
        name = f"keras_text_{kind}"
        if job["reuse"] and (out / f"{name}.onnx").exists():
            continue
        model = _text_model(kind, 1234)
        ref_x = rng.integers(1, TEXT_VOCAB, (4, TEXT_LEN)).astype(dtype)
        ref_y = np.concatenate([np.asarray(model(ref_x[i : i + 1])) for i in range(4)])
        spec = [tf.TensorSpec((1, TEXT_LEN), tf.as_dtype(dtype), name="input_ids")]
        try:
            tf2onnx.convert.from_keras(
                model, input_signature=spec, opset=13, output_path=str(out / f"{name}.onnx")
            )
        except Exception as exc:  # noqa: BLE001
            print(f"{name}: EXPORT FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        np.savez(out / f"{name}.ref.npz", x=ref_x, y=ref_y)
        print(f"keras {name}: ok", flush=True)
    return 0


# ------------------------------------------------------------------------------------- edgekit venv side


def _tflite_outputs(path: Path, x: np.ndarray) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(path))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]) for d in it.get_output_details()]


def _check(onnx_path: Path, x: np.ndarray, ref: list[np.ndarray], nchw: bool = False) -> str:
    """Max error of onnxruntime on the ONNX file against the reference outputs, relative to each output's range
    (matched by shape: tf2onnx keeps the TFLite output order)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    feed_x = x.transpose(0, 3, 1, 2) if nchw else x
    name = sess.get_inputs()[0].name
    got = [
        np.concatenate(o)
        for o in zip(*[sess.run(None, {name: feed_x[i : i + 1]}) for i in range(len(x))], strict=True)
    ]
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        r = r.reshape(g.shape)
        rng = float(r.max() - r.min()) or 1.0
        worst = max(worst, float(np.abs(g.astype(np.float64) - r).max()) / rng)
    return f"onnxruntime vs reference: max error {worst:.1e} of the range"


def _entry(name: str, onnx_path: Path, kind: str, data: dict[str, Any], note: str) -> dict[str, Any]:
    import onnx

    model = onnx.load(onnx_path, load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    inputs = []
    for i in model.graph.input:
        if i.name in init:
            continue
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in i.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name
        inputs.append({"name": i.name, "shape": shape, "dtype": dtype})
    ops = sorted({n.op_type for n in model.graph.node})
    return dict(
        name=name, file=onnx_path.name, family=f"tf2onnx: {name}", kind=kind,
        opset=next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        inputs=inputs, outputs=[o.name for o in model.graph.output], data=data, size="full",
        params=int(sum(np.prod(t.dims) for t in model.graph.initializer)), ops=ops, note=note,
    )  # fmt: skip


def build(out: Path, tf_python: str, wheel: Path, reuse: bool = False) -> int:
    sys.path.insert(0, str(ROOT / "tests" / "zoo"))
    import zoo_data

    src = out / "tflite"
    src.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for _, member, *_ in MEDIAPIPE:
            (src / Path(member).name).write_bytes(z.read(f"mediapipe/modules/{member}"))
    convs = []
    for name, member, _, _, extra in MEDIAPIPE:
        tfl = str(src / Path(member).name)
        convs.append({"tflite": tfl, "onnx": str(out / f"{name}.onnx"), "opset": 13})
        if "op17" in extra:
            convs.append({"tflite": tfl, "onnx": str(out / f"{name}_op17.onnx"), "opset": 17})
        if "nchw" in extra:
            convs.append({"tflite": tfl, "onnx": str(out / f"{name}_nchw.onnx"), "opset": 13,
                          "args": ["--inputs-as-nchw", "input"]})  # fmt: skip
    photos = zoo_data.bn_photos(None, ROOT.parent / "shared")
    arrays = {}
    for name, _, data in KERAS_IMAGE:
        spec = {"type": "image", "layout": "NHWC", **data}
        shape = [1, KERAS_SIZE, KERAS_SIZE, 3]
        arrays[f"{name}_bn"] = zoo_data.image_array(spec, shape, 32, 11, photos)
        arrays[f"{name}_ref"] = zoo_data.image_array(spec, shape, 4, 12, photos)
    np.savez(out / "keras_photos.npz", **arrays)
    (out / "tf_job.json").write_text(json.dumps({"tflite": convs, "reuse": reuse}, indent=1))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([tf_python, str(HERE), "--tf-side", "--out", str(out)], check=True, env=env)

    entries = []
    for name, member, kind, rng_, extra in MEDIAPIPE:
        tfl = src / Path(member).name
        variants = [(name, False)] + [(f"{name}_op17", False)] * ("op17" in extra)
        variants += [(f"{name}_nchw", True)] * ("nchw" in extra)
        for vname, nchw in variants:
            path = out / f"{vname}.onnx"
            if not path.exists():
                print(f"{vname}: no ONNX file (tf2onnx failed)")
                continue
            entry = _entry(vname, path, kind, {}, "")
            shape = entry["inputs"][0]["shape"]
            hw = shape[2:4] if nchw else shape[1:3]
            data = {"type": "image", "color": "RGB", **rng_, "layout": "NCHW" if nchw else "NHWC"}
            x = zoo_data.image_array({**data, "layout": "NHWC"}, [1, *hw, 3], 4, 5, photos)
            try:
                ref = [
                    np.concatenate(o)
                    for o in zip(*[_tflite_outputs(tfl, x[i : i + 1]) for i in range(4)], strict=True)
                ]
                check = _check(path, x, ref, nchw)
            except Exception as exc:  # noqa: BLE001 - a probe: say what failed and go on
                check = f"check failed: {type(exc).__name__}: {str(exc)[:200]}"
            note = f"MediaPipe {Path(member).name} (0.10.14 wheel, Apache-2.0), tf2onnx 1.17.0; {check}"
            entries.append(_entry(vname, path, kind, data, note))
            print(f"{vname:32s} {path.stat().st_size / 1e6:6.2f} MB {check}", flush=True)
    for name, builder, data in KERAS_IMAGE:
        path = out / f"{name}.onnx"
        if not path.exists():
            continue
        ref = np.load(out / f"{name}.ref.npz")
        check = _check(path, ref["x"], [ref["y"]])
        note = f"keras.applications.{builder} 96x96 seeded, BN from photos, tf2onnx.from_keras 13; {check}"
        entries.append(_entry(name, path, "classifier", {"type": "image", "layout": "NHWC", **data}, note))
        print(f"{name:32s} {check}", flush=True)
    path = out / "keras_mobilenet_v2_int8.onnx"
    if path.exists():
        data = {"type": "image", "layout": "NHWC", "color": "RGB", **PM1}
        x = zoo_data.image_array(data, [1, KERAS_SIZE, KERAS_SIZE, 3], 4, 5, photos)
        tfl = out / "tflite" / "keras_mobilenet_v2_int8.tflite"
        ref = [
            np.concatenate(o)
            for o in zip(*[_tflite_outputs(tfl, x[i : i + 1]) for i in range(4)], strict=True)
        ]
        check = _check(path, x, ref)
        note = (
            f"Keras MobileNetV2 0.35 -> TFLite full-integer PTQ -> tf2onnx 13 (QDQ); {check} (int8 kernels)"
        )
        entries.append(_entry(path.stem, path, "classifier", data, note))
        print(f"{path.stem:32s} {check}", flush=True)
    for kind in ("mha", "lstm"):
        name = f"keras_text_{kind}"
        path = out / f"{name}.onnx"
        if not path.exists():
            continue
        ref = np.load(out / f"{name}.ref.npz")
        check = _check(path, ref["x"], [ref["y"]])
        data = {"type": "tokens", "vocab_size": TEXT_VOCAB, "roles": {"input_ids": "ids"}}
        entries.append(
            _entry(name, path, "classifier", data, f"Keras Embedding + {kind}, tf2onnx 13; {check}")
        )
        print(f"{name:32s} {check}", flush=True)
    zoo_data.merge_manifest(out, entries)
    print(f"{len(entries)} models -> {out / 'zoo.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".zoo" / "probe9m")
    parser.add_argument("--tf-python", default="/work/venv-tf9/bin/python", help="python of the TF venv")
    parser.add_argument("--wheel", type=Path, help="the mediapipe 0.10.14 wheel (default: pip download)")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the ONNX files converted by an earlier run"
    )
    parser.add_argument("--tf-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.tf_side:
        return tf_side(args.out)
    wheel = args.wheel
    if wheel is None:
        wheels = args.out / "wheels"
        if not list(wheels.glob("mediapipe-0.10.14-*.whl")):
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels),
                            "mediapipe==0.10.14"], check=True)  # fmt: skip
        wheel = next(wheels.glob("mediapipe-0.10.14-*.whl"))
    return build(args.out, args.tf_python, wheel, args.reuse)


if __name__ == "__main__":
    raise SystemExit(main())
