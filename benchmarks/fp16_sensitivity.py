"""Which weights' float16 rounding moves PP-OCRv4 det's output (issue 13's fp16 figure, diagnosis).

The fp16 recipe's numerics are float32 compute on float16-rounded constants (``targets/tflite/fp16.py``); this
runs them in onnxruntime (graph optimizations off, one thread) on the shared photos, three ways:

- the prepared model (BatchNormalization and Paddle's affine Mul/Add folded into the convolutions, what the
  converter writes) with every float constant of at least 1024 values rounded: the fp16 .tflite's numbers;
- the ONNX file as exported (nothing folded) with the same constants rounded: the per-channel scale and shift
  stay float32 after the convolution (the "do not fold" alternative);
- the first, with each rounded convolution's float32 bias corrected for the rounding's effect on its mean output
  (``b -= dW . E[x]``, the input channels' means over ``--calibration`` photos not among the worst): what is left
  once the rounding's DC shift is gone;
- per weight, on the ``--worst`` photos of the first run: only that constant rounded, the rest float32.

    python benchmarks/fp16_sensitivity.py [--samples 200] [--worst 4]

Prints the largest error of the probability map over its range, the largest error of the logits (the
sigmoid's input), how many photos exceed 1e-3 of the range, and the per-weight table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared_data import default_shared  # noqa: E402

MIN_ELEMENTS = 1024
LOGITS = "p2o.Add.281"  # the sigmoid's input in PP-OCRv4 det


def _rounded(proto: onnx.ModelProto, keep: set[str] | None = None) -> onnx.ModelProto:
    """``proto`` with its float32 initializers and Constant values of >= MIN_ELEMENTS values rounded to
    float16 (only those named in ``keep`` when given)."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    tensors = [(t.name, t) for t in out.graph.initializer]
    tensors += [(n.output[0], n.attribute[0].t) for n in out.graph.node if n.op_type == "Constant"]
    for name, tensor in tensors:
        array = numpy_helper.to_array(tensor)
        if array.dtype == np.float32 and array.size >= MIN_ELEMENTS and (keep is None or name in keep):
            half = array.astype(np.float16).astype(np.float32)
            tensor.CopyFrom(numpy_helper.from_array(half, tensor.name))
    return out


def _bias_corrected(proto: onnx.ModelProto, feeds: list[dict]) -> onnx.ModelProto:
    """:func:`_rounded` with each rounded Conv/ConvTranspose's bias moved by ``-dW . E[x]`` (E[x]: the float32
    model's input channel means over ``feeds``)."""
    weights = set(_weights(proto))
    convs = [n for n in proto.graph.node if n.op_type in ("Conv", "ConvTranspose") and n.input[1] in weights]
    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    for n in convs:
        probe.graph.output.append(
            onnx.helper.make_tensor_value_info(n.input[0], onnx.TensorProto.FLOAT, None)
        )
    runs = _run(probe, feeds)
    skip = len(proto.graph.output)
    means = [np.mean([r[skip + k].mean(axis=(0, 2, 3)) for r in runs], axis=0) for k in range(len(convs))]
    out = _rounded(proto)
    exact = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer}
    tensors = {t.name: t for t in out.graph.initializer}
    nodes = [n for n in out.graph.node if n.op_type in ("Conv", "ConvTranspose") and n.input[1] in weights]
    for n, mean in zip(nodes, means, strict=True):
        delta = numpy_helper.to_array(tensors[n.input[1]]).astype(np.float64) - exact[n.input[1]]
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        if (
            n.op_type == "Conv"
        ):  # [Cout, Cin/group, kh, kw]: each output reads its group's inputs at every tap
            per_group = delta.shape[0] // group
            grouped = mean.reshape(group, -1).repeat(per_group, axis=0)
            shift = -(delta.sum(axis=(2, 3)) * grouped).sum(axis=1)
        else:  # ConvTranspose [Cin, Cout, kh, kw] with stride == kernel: each output pixel gets one tap
            shift = -(delta.mean(axis=(2, 3)).T @ mean)
        if len(n.input) > 2 and n.input[2]:
            bias = exact[n.input[2]] + shift
        else:
            bias = shift
            n.input.extend([""] * (3 - len(n.input)))
            n.input[2] = n.input[1] + "_bias_correction"
            out.graph.initializer.append(
                numpy_helper.from_array(np.zeros(shift.shape, np.float32), n.input[2])
            )
            tensors[n.input[2]] = out.graph.initializer[-1]
        tensors[n.input[2]].CopyFrom(numpy_helper.from_array(bias.astype(np.float32), n.input[2]))
    return out


def _weights(proto: onnx.ModelProto) -> list[str]:
    return [
        t.name
        for t in proto.graph.initializer
        if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) >= MIN_ELEMENTS
    ]


def _run(proto: onnx.ModelProto, feeds: list[dict]) -> list[list[np.ndarray]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options)
    return [session.run(None, f) for f in feeds]


def _with_logits(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    out.graph.output.append(onnx.helper.make_tensor_value_info(LOGITS, onnx.TensorProto.FLOAT, None))
    return out


def _errors(reference: list[list[np.ndarray]], actual: list[list[np.ndarray]]) -> dict:
    prob = [float(np.abs(r[0] - a[0]).max()) for r, a in zip(reference, actual, strict=True)]
    return {
        "per_photo": prob,
        "max": max(prob),
        "logits": max(float(np.abs(r[1] - a[1]).max()) for r, a in zip(reference, actual, strict=True)),
        "over": sum(e > 1e-3 for e in prob),  # the map's range is 0..1
    }


def main() -> None:
    import onnx_ir as ir
    from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
    from edgekit.core.model import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--worst", type=int, default=4)
    parser.add_argument("--calibration", type=int, default=8)
    args = parser.parse_args()
    shared = default_shared()
    path = shared / "models/ch_PP-OCRv4_det_infer.onnx"
    model = load_model(path, {"x": (1, 3, 640, 640)})
    preprocess = ImagePreprocess(
        size=(640, 640), color="BGR", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), scale=1 / 255
    )
    data = open_dataset(
        shared / "data/imagenet-sample-200", input_specs(model), preprocess, limit=args.samples
    )
    feeds = [dict(s.inputs) for s in data]
    folded = _with_logits(ir.serde.serialize_model(model))
    exported = _with_logits(onnx.load(path))
    reference = _run(folded, feeds)
    exported_reference = _run(exported, feeds)
    drift = max(float(np.abs(a[0] - b[0]).max()) for a, b in zip(reference, exported_reference, strict=True))
    print(f"{len(feeds)} photos; float32 folded vs as exported: max error {drift:.2e}")
    rows = [
        ("folded (the fp16 .tflite)", _errors(reference, _run(_rounded(folded), feeds))),
        ("not folded (scale/shift float32)", _errors(exported_reference, _run(_rounded(exported), feeds))),
    ]
    worst = list(np.argsort(rows[0][1]["per_photo"])[::-1][: args.worst])
    calibration = [f for i, f in enumerate(feeds) if i not in worst][: args.calibration]
    corrected = _bias_corrected(folded, calibration)
    rows.append(
        (f"folded, bias-corrected ({len(calibration)} photos)", _errors(reference, _run(corrected, feeds)))
    )
    for name, e in rows:
        print(
            f"{name}: max error {e['max']:.3g} of the range, logits {e['logits']:.3g}, "
            f"{e['over']}/{len(feeds)} photos over 1e-3"
        )
    few = [feeds[i] for i in worst]
    few_reference = [reference[i] for i in worst]
    print(f"\nonly one weight rounded (folded model, photos {[int(i) for i in worst]}):")
    print("| weight | shape | max error / range | logits |")
    print("|---|---|---|---|")
    shapes = {t.name: tuple(t.dims) for t in folded.graph.initializer}
    for name in _weights(folded):
        e = _errors(few_reference, _run(_rounded(folded, {name}), few))
        print(f"| {name} | {shapes[name]} | {e['max']:.2e} | {e['logits']:.2e} |", flush=True)


if __name__ == "__main__":
    main()
