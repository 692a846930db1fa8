"""Is PP-OCRv4 det's fp16 error the weights' rounding or the arithmetic? (issue 13's fp16 figure, diagnosis)

Runs the prepared model (what the converter writes: BatchNormalization and Paddle's affine blocks folded) four
ways on a few shared photos: float32 (onnxruntime) and float64 (the onnx reference evaluator, every float
tensor float64 but Resize's scales), each with the float32 constants as they are and with the constants of at
least 1024 values rounded to float16 (the fp16 recipe's numerics, ``targets/tflite/fp16.py``). For each pair it
prints the largest error of the probability map, where it is (pixel, distance to the border, the map's value
there), the largest error away from the border (8 pixels in) and on pixels where the map is not saturated
(0.02..0.98), and the share of pixels over 1e-3.

    python benchmarks/fp16_float64.py [--size 320] [--photos 3,4]

The reference evaluator is slow (about a minute per photo and model at 320x320 on one core).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fp16_sensitivity import _rounded  # noqa: E402
from shared_data import default_shared  # noqa: E402


def _float64(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with every float tensor float64 (Resize's roi/scales stay float32: the op requires it)."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    keep = {name for n in out.graph.node if n.op_type == "Resize" for name in n.input[1:]}
    for t in out.graph.initializer:
        if t.data_type == TensorProto.FLOAT and t.name not in keep:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
    for node in out.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT:
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float64), a.t.name))
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    for v in list(out.graph.input) + list(out.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    del out.graph.value_info[:]
    return out


def _maps(proto: onnx.ModelProto, feeds: list[dict], double: bool) -> list[np.ndarray]:
    if double:
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(proto)
        return [
            np.asarray(evaluator.run(None, {k: v.astype(np.float64) for k, v in f.items()})[0]) for f in feeds
        ]
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return [session.run(None, f)[0].astype(np.float64) for f in feeds]


def _compare(name: str, reference: list[np.ndarray], actual: list[np.ndarray], size: int) -> None:
    errors = [np.abs(r - a) for r, a in zip(reference, actual, strict=True)]
    worst = int(np.argmax([e.max() for e in errors]))
    e = errors[worst]
    at = np.unravel_index(int(np.argmax(e)), e.shape)
    h, w = int(at[-2]), int(at[-1])
    border = min(h, w, size - 1 - h, size - 1 - w)
    interior = max(float(x[..., 8:-8, 8:-8].max()) for x in errors)
    live = max(float((x * ((r > 0.02) & (r < 0.98))).max()) for x, r in zip(errors, reference, strict=True))
    over = float(np.mean([(x > 1e-3).mean() for x in errors]))
    print(
        f"{name}: max {e.max():.3g} (photo {worst}, pixel {h},{w}, {border} px from the border, map "
        f"{reference[worst][at]:.3f} -> {actual[worst][at]:.3f}); 8 px in {interior:.3g}; "
        f"map 0.02..0.98 {live:.3g}; pixels over 1e-3 {over:.2e}"
    )


def main() -> None:
    import onnx_ir as ir
    from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
    from edgekit.core.model import load_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--photos", default="3,4", help="indices among the shared photos")
    args = parser.parse_args()
    wanted = [int(i) for i in args.photos.split(",")]
    shared = default_shared()
    model = load_model(shared / "models/ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, args.size, args.size)})
    preprocess = ImagePreprocess(
        size=(args.size, args.size),
        color="BGR",
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
        scale=1 / 255,
    )
    data = open_dataset(
        shared / "data/imagenet-sample-200", input_specs(model), preprocess, limit=max(wanted) + 1
    )
    feeds = [dict(s.inputs) for i, s in enumerate(data) if i in wanted]
    folded = ir.serde.serialize_model(model)
    f32 = _maps(folded, feeds, False)
    f32_half = _maps(_rounded(folded), feeds, False)
    f64 = _maps(_float64(folded), feeds, True)
    f64_half = _maps(_float64(_rounded(folded)), feeds, True)
    print(f"PP-OCRv4 det {args.size}x{args.size}, photos {wanted}")
    _compare("float32: fp16-rounded constants vs float32 constants", f32, f32_half, args.size)
    _compare("float64: fp16-rounded constants vs float32 constants", f64, f64_half, args.size)
    _compare("float32 arithmetic vs float64 (float32 constants)", f64, f32, args.size)


if __name__ == "__main__":
    main()
