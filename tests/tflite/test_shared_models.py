"""Opt-in (EDGEKIT_SHARED=1): the shared SqueezeNet 1.1 (opset 7) and MNIST-8 (opset 8) as given.

fp32 TFLite matches the ONNX model to 1e-4 of the output range; the int8 TFLite agrees with its QDQ
model's top-1 (ties in the quantized softmax count); neither file has a TRANSPOSE inside. The full
figures (200 images, sizes, conversion cost) come from ``benchmarks/tflite_convert.py``.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
from tflite_helpers import op_types, run_onnx, run_tflite

pytestmark = [
    pytest.mark.shared,
    pytest.mark.skipif(
        os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
    ),
]
SHARED = Path(__file__).resolve().parents[3] / "shared"


def _squeezenet_samples(count: int) -> list[dict[str, np.ndarray]]:
    from edgekit.core.data import ImagePreprocess, InputSpec, open_dataset

    pre = ImagePreprocess(color="BGR", mean=(104.0, 117.0, 123.0))
    ds = open_dataset(
        SHARED / "data/imagenet-sample-200",
        [InputSpec("data_0", (1, 3, 224, 224), np.float32)],
        pre,
        limit=count,
    )
    return [dict(s.inputs) for s in ds]


def _mnist_samples(count: int) -> list[dict[str, np.ndarray]]:
    with gzip.open(SHARED / "data/mnist/t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:count]
    return [{"Input3": image[None].astype(np.float32)} for image in images]


@pytest.mark.parametrize(
    ("name", "samples"),
    [("squeezenet1.1-fp32.onnx", _squeezenet_samples), ("mnist-8.onnx", _mnist_samples)],
    ids=["squeezenet", "mnist"],
)
def test_shared_model_fp32_and_int8(name, samples) -> None:
    import onnx
    from edgekit.core.data import Sample
    from edgekit.core.model import load_model, load_proto
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize
    from edgekit.targets.tflite.converter import convert

    path = SHARED / "models" / name
    feeds = samples(24)
    original = onnx.load(path)
    fp32 = convert(load_model(path))
    assert "TRANSPOSE" not in op_types(fp32)
    for sample in feeds[:8]:
        expected, actual = run_onnx(original, sample)[0], run_tflite(fp32, sample)[0]
        assert np.abs(actual - expected).max() <= 1e-4 * np.ptp(expected)
    calib = [Sample(f, None, str(i)) for i, f in enumerate(feeds[:8])]
    qdq = quantize(
        load_model(path), calib, QuantizeOptions(activations="int8", samples=8, float_output_heads=False)
    ).proto()
    int8 = convert(load_proto(qdq, prepare=False))
    assert "TRANSPOSE" not in op_types(int8) and int8.float_ops == []
    agree = 0
    for sample in feeds[8:]:
        q, got = run_onnx(qdq, sample)[0].reshape(-1), run_tflite(int8, sample)[0].reshape(-1)
        agree += q[np.argmax(got)] == q.max() or got[np.argmax(q)] == got.max()
    assert agree >= len(feeds[8:]) - 1  # >= 15 of 16 (the benchmark: 100 % on 200 images)
    # The arm-cpu default: a float output head (and, for SqueezeNet, float pooled logits): no ties, strict top-1.
    qdq = quantize(load_model(path), calib, QuantizeOptions(activations="int8", samples=8)).proto()
    int8 = convert(load_proto(qdq, prepare=False))
    assert "TRANSPOSE" not in op_types(int8)
    for sample in feeds[8:]:
        q, got = run_onnx(qdq, sample)[0].reshape(-1), run_tflite(int8, sample)[0].reshape(-1)
        assert np.argmax(got) == np.argmax(q)
