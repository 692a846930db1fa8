"""Per op: the int8 TFLite model matches the QDQ model it came from (1 quantization step, >= 99%).

The QDQ models come from edgekit's own quantizer (TFLite's operator_property rules) and, for the ops
onnxruntime quantizes, from onnxruntime's ``quantize_static`` (QDQ, per-channel int8 weights, int8
activations), both calibrated on random data; the reference is the QDQ model run by onnxruntime.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import helper
from op_cases import CASES, Case
from tflite_helpers import convert_proto, edgekit_qdq, make_model, ort_qdq, random_feeds, run_onnx, run_tflite

INT8_CASES = [c for c in CASES if c.int8]
# Ops onnxruntime's QDQ quantizer leaves in float when they stand alone (no integer reference from it).
ORT_FLOAT = {"relu", "sigmoid", "tanh", "hardswish", "leaky_relu", "clip_relu6", "reduce_mean_v13"} | {
    c.id
    for c in INT8_CASES
    if c.id.startswith("einsum")  # onnxruntime has no QDQ rule for Einsum
}
# Ops edgekit's quantizer has no rule for (a standalone BatchNormalization; load_model folds the usual
# Conv -> BatchNormalization into the convolution).
EDGEKIT_FLOAT = {"batchnorm"}
PARAMS = [
    pytest.param(c, "edgekit", id=f"{c.id}-edgekit") for c in INT8_CASES if c.id not in EDGEKIT_FLOAT
] + [pytest.param(c, "ort", id=f"{c.id}-ort") for c in INT8_CASES if c.id not in ORT_FLOAT]


def output_steps(qdq: onnx.ModelProto) -> list[float]:
    """The quantization step (scale) of each graph output, from the DequantizeLinear producing it."""
    producers = {o: node for node in qdq.graph.node for o in node.output}
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in qdq.graph.initializer}
    steps = []
    for out in qdq.graph.output:
        node = producers[out.name]
        assert node.op_type == "DequantizeLinear", f"output {out.name} is not quantized ({node.op_type})"
        steps.append(float(inits[node.input[1]]))
    return steps


def assert_within_one_step(
    actual: np.ndarray, expected: np.ndarray, step: float, fraction: float = 0.99
) -> None:
    assert actual.shape == expected.shape
    off = np.abs(actual.astype(np.float64) - expected.astype(np.float64)) > step * 1.001
    assert off.mean() <= 1 - fraction, (
        f"{off.mean():.2%} of elements differ by more than one step ({step:.4g})"
    )


@pytest.mark.parametrize("io_dtype", ["float32", "int8"])
@pytest.mark.parametrize(("case", "quantizer"), PARAMS)
def test_int8_matches_qdq(case: Case, quantizer: str, io_dtype: str, tmp_path) -> None:
    model = make_model(case.nodes, case.inputs, case.outputs, case.inits, case.opset)
    calib = [random_feeds(model, seed, case.low, case.high) for seed in range(8)]
    qdq = ort_qdq(model, calib, tmp_path) if quantizer == "ort" else edgekit_qdq(model, calib)
    result = convert_proto(qdq, ConvertOptions(io_dtype=io_dtype, target="test"))
    assert result.float_ops == [], f"ops left in float: {result.float_ops}"
    steps = output_steps(qdq)
    for seed in (100, 101):
        feeds = random_feeds(model, seed, case.low, case.high)
        expected = run_onnx(qdq, feeds)
        actual = run_tflite(result, feeds)
        for a, e, step in zip(actual, expected, steps, strict=True):
            assert_within_one_step(a, e, step)


# Lowerings with no integer kernel (GATHER taps + float weights, spread ConvTranspose kernels): in a
# quantized model they stay float between DEQUANTIZE / QUANTIZE, and still match the QDQ model.
LOWERED = [
    "resize_cubic",
    "maxpool_3d_pads_strides",
    "avgpool_3d_count_include_pad_ceil",
]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in LOWERED], ids=lambda c: c.id)
def test_lowered_op_in_a_quantized_model_stays_float_and_matches_qdq(case: Case) -> None:
    model = make_model(case.nodes, case.inputs, case.outputs, case.inits, case.opset)
    calib = [random_feeds(model, seed, case.low, case.high) for seed in range(8)]
    qdq = edgekit_qdq(model, calib)
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert result.float_ops, "expected the lowering to stay float"
    for seed in (100, 101):
        feeds = random_feeds(model, seed, case.low, case.high)
        for a, e, step in zip(
            run_tflite(result, feeds), run_onnx(qdq, feeds), output_steps(qdq), strict=True
        ):
            assert_within_one_step(a, e, step)


# Ops with no int8 rule (quantize/rules.py): in a quantized model they stay float between DEQUANTIZE / QUANTIZE
# and still match the QDQ model.
FLOAT_ISLANDS = [
    "softplus",
    "mish_pattern",
    "selu",
    "gather_elements_const",
    "gather_nd_batch_dims",
    "scatter_nd_slice_in_place",
    "trilu_upper",
    "hardmax_v13",
    "einsum_sum_one_operand_label",  # its SUM over a label of one operand has no int8 rule: all float
    "reduce_log_sum_exp_v18",
    "lp_norm_p2",
    "mean3",
]


def _between_integer_adds(case: Case) -> onnx.ModelProto:
    """The case's nodes between int8 ADDs (x + 0.25 in, y + 0.25 out): alone, nothing would be quantized."""
    pre = [helper.make_node("Add", [f"{k}_in", "quarter"], [k]) for k in case.inputs]
    post = [helper.make_node("Add", [o, "quarter"], [f"{o}_out"]) for o in case.outputs]
    inits = {**case.inits, "quarter": np.array(0.25, np.float32)}
    return make_model(
        [*pre, *case.nodes, *post],
        {f"{k}_in": s for k, s in case.inputs.items()},
        [f"{o}_out" for o in case.outputs],
        inits,
        case.opset,
    )


@pytest.mark.parametrize("case", [c for c in CASES if c.id in FLOAT_ISLANDS], ids=lambda c: c.id)
def test_op_without_integer_kernel_stays_float_and_matches_qdq(case: Case) -> None:
    model = _between_integer_adds(case)
    calib = [random_feeds(model, seed, case.low, case.high) for seed in range(8)]
    qdq = edgekit_qdq(model, calib)
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert result.float_ops, "expected the op to stay float"
    for seed in (100, 101):
        feeds = random_feeds(model, seed, case.low, case.high)
        for a, e, step in zip(
            run_tflite(result, feeds), run_onnx(qdq, feeds), output_steps(qdq), strict=True
        ):
            assert_within_one_step(a, e, step)
