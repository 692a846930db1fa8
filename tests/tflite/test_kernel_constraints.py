"""Every requirement a TFLite integer kernel puts on its quantization parameters (``rules.TFLITE_KERNELS``, read
from tensorflow/lite/kernels/*.cc) holds in edgekit's QDQ model, for int8 and uint8 activations, and the int8
TFLite model LiteRT runs from it (in a child process: LiteRT aborts on some graphs it refuses) matches the QDQ
model. One small model per constrained kernel, built to break the requirement if the quantizer ignored it
(different ranges on the inputs of a same-scale op, a pad value far from zero, a HardSwish input far wider
than its output...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from edgekit.core.data import Sample
from edgekit.core.model import load_proto
from edgekit.quantize import rules
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.targets.tflite.converter import ConvertOptions
from onnx import helper, numpy_helper
from test_ops_int8 import assert_within_one_step, output_steps
from tflite_helpers import convert_proto, make_model, op_types, random_feeds, run_onnx, run_tflite_isolated

R = np.random.default_rng(11)
X = (1, 3, 8, 8)


def w(*shape: int, scale: float = 0.5) -> np.ndarray:
    return (R.standard_normal(shape) * scale).astype(np.float32)


def node(op: str, inputs: list[str], output: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=output, **attrs)


#: Two convolutions of very different output ranges: a same-scale op reading both must unify them.
TWO_CONVS = [node("Conv", ["x", "w1"], "a"), node("Conv", ["x", "w2"], "b")]
TWO_CONV_INITS = {"w1": w(4, 3, 1, 1, scale=0.2), "w2": w(4, 3, 1, 1, scale=3.0)}
CONV = [node("Conv", ["x", "w1", "b1"], "a", pads=[1, 1, 1, 1])]
CONV_INITS = {"w1": w(4, 3, 3, 3), "b1": w(4)}


@dataclass
class Case:
    kernel: str
    nodes: list
    inits: dict
    #: The ONNX node whose quantization parameters the kernel constrains.
    target: str
    outputs: list = field(default_factory=lambda: ["y"])


def _hard_swish_wide_input() -> dict:
    """Channel 0 of the convolution is around -1000, the others within a few units: the HardSwish output range
    (about [-0.4, 3]) is far below 1/128 of the input range, so the calibrated output scale is too small."""
    weights, bias = w(4, 3, 1, 1, scale=0.3), np.zeros(4, np.float32)
    weights[0], bias[0] = 1.0, -1000.0
    return {"w1": weights, "b1": bias}


CASES = [
    Case("CONV_2D", CONV, CONV_INITS, "a", ["a"]),
    Case(
        "DEPTHWISE_CONV_2D",
        [node("Conv", ["x", "w1", "b1"], "y", group=3, pads=[1, 1, 1, 1])],
        {"w1": w(6, 1, 3, 3), "b1": w(6)},
        "y",
    ),
    Case(
        "FULLY_CONNECTED",
        [*CONV, node("Flatten", ["a"], "f"), node("Gemm", ["f", "g", "gb"], "y", transB=1)],
        {**CONV_INITS, "g": w(5, 256, scale=0.1), "gb": w(5)},
        "y",
    ),
    Case(
        "TRANSPOSE_CONV",
        [node("ConvTranspose", ["x", "w1", "b1"], "y", strides=[2, 2])],
        {"w1": w(3, 4, 2, 2), "b1": w(4)},
        "y",
    ),
    Case("MAX_POOL_2D", [*CONV, node("MaxPool", ["a"], "y", kernel_shape=[2, 2], strides=[2, 2])], CONV_INITS, "y"),
    Case(
        "AVERAGE_POOL_2D",
        [*CONV, node("AveragePool", ["a"], "y", kernel_shape=[3, 3], strides=[2, 2])],
        CONV_INITS,
        "y",
    ),
    Case(
        "RESHAPE",
        [*CONV, node("Reshape", ["a", "shape"], "y")],
        {**CONV_INITS, "shape": np.array([1, 4, 64], np.int64)},
        "y",
    ),
    Case("TRANSPOSE", [*CONV, node("Transpose", ["a"], "y", perm=[0, 2, 1, 3])], CONV_INITS, "y"),
    Case(
        "GATHER",
        [*CONV, node("Gather", ["a", "idx"], "y", axis=1)],
        {**CONV_INITS, "idx": np.array([3, 0, 2], np.int64)},
        "y",
    ),
    Case(
        "SLICE",
        [*CONV, node("Slice", ["a", "s0", "s1", "ax"], "y")],
        {**CONV_INITS, "s0": np.array([1], np.int64), "s1": np.array([3], np.int64), "ax": np.array([1], np.int64)},
        "y",
    ),
    Case(
        "STRIDED_SLICE",
        [*CONV, node("Slice", ["a", "s0", "s1", "ax", "st"], "y")],
        {
            **CONV_INITS,
            "s0": np.array([0], np.int64),
            "s1": np.array([8], np.int64),
            "ax": np.array([2], np.int64),
            "st": np.array([2], np.int64),
        },
        "y",
    ),
    Case(
        "SPLIT_V",
        [*CONV, helper.make_node("Split", ["a", "sp"], ["y", "z"], axis=1, name="split")],
        {**CONV_INITS, "sp": np.array([1, 3], np.int64)},
        "split",
        ["y", "z"],
    ),
    Case(
        "PAD",
        [*CONV, node("Pad", ["a", "p"], "y")],
        {**CONV_INITS, "p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)},
        "y",
    ),
    Case(
        "PADV2",
        [*CONV, node("Pad", ["a", "p", "v"], "y")],
        {**CONV_INITS, "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "v": np.array(2.5, np.float32)},
        "y",
    ),
    Case(
        "MIRROR_PAD",
        [*CONV, node("Pad", ["a", "p"], "y", mode="reflect")],
        {**CONV_INITS, "p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)},
        "y",
    ),
    Case("CONCATENATION", [*TWO_CONVS, node("Concat", ["a", "b"], "y", axis=1)], TWO_CONV_INITS, "y"),
    Case(
        "RESIZE_BILINEAR",
        [*CONV, node("Resize", ["a", "", "sc"], "y", mode="linear")],
        {**CONV_INITS, "sc": np.array([1, 1, 2, 2], np.float32)},
        "y",
    ),
    Case(
        "RESIZE_NEAREST_NEIGHBOR",
        [*CONV, node("Resize", ["a", "", "sc"], "y", mode="nearest")],
        {**CONV_INITS, "sc": np.array([1, 1, 2, 2], np.float32)},
        "y",
    ),
    Case("MAXIMUM", [*TWO_CONVS, node("Max", ["a", "b"], "y")], TWO_CONV_INITS, "y"),
    Case("MINIMUM", [*TWO_CONVS, node("Min", ["a", "b"], "y")], TWO_CONV_INITS, "y"),
    Case("REDUCE_MAX", [*CONV, node("ReduceMax", ["a", "ax"], "y")], {**CONV_INITS, "ax": np.array([1], np.int64)}, "y"),
    Case("SOFTMAX", [*CONV, node("Softmax", ["a"], "y", axis=1)], CONV_INITS, "y"),
    Case("LOGISTIC", [*CONV, node("Sigmoid", ["a"], "y")], CONV_INITS, "y"),
    Case("TANH", [*CONV, node("Tanh", ["a"], "y")], CONV_INITS, "y"),
    Case("LOG_SOFTMAX", [*CONV, node("LogSoftmax", ["a"], "y", axis=1)], CONV_INITS, "y"),
    Case("HARD_SWISH", [*CONV[:0], node("Conv", ["x", "w1", "b1"], "a"), node("HardSwish", ["a"], "y")],
         _hard_swish_wide_input(), "y"),
]  # fmt: skip
BY_KERNEL = {c.kernel: c for c in CASES}


def _constrained(kernel: rules.Kernel) -> bool:
    return (
        kernel.same_scale
        or kernel.fixed_output is not None
        or kernel.min_output_scale_ratio is not None
        or kernel.symmetric_weights
    )


def test_every_constrained_kernel_the_quantizer_targets_has_a_case():
    targeted = {k for op in rules.supported_ops() for k in rules._RULES[op].kernels}
    constrained = {k for k in targeted if _constrained(rules.TFLITE_KERNELS[k])}
    assert constrained <= set(BY_KERNEL), sorted(constrained - set(BY_KERNEL))


class _QDQ:
    """Reads a QDQ model's parameters around one node."""

    def __init__(self, proto: onnx.ModelProto) -> None:
        self.init = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
        self.producer = {o: n for n in proto.graph.node for o in n.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for n in proto.graph.node:
            for i in n.input:
                self.readers.setdefault(i, []).append(n)
        self.nodes = {n.name: n for n in proto.graph.node}

    def params(self, dq_or_q: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray]:
        scale = self.init[dq_or_q.input[1]]
        zp = (
            self.init[dq_or_q.input[2]]
            if len(dq_or_q.input) > 2 and dq_or_q.input[2]
            else np.zeros_like(scale)
        )
        return scale.astype(np.float64), zp.astype(np.int64)

    def input_params(self, node: onnx.NodeProto, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        dq = self.producer.get(node.input[i])
        return self.params(dq) if dq is not None and dq.op_type == "DequantizeLinear" else None

    def output_params(self, node: onnx.NodeProto, i: int = 0) -> tuple[np.ndarray, np.ndarray]:
        (q,) = [r for r in self.readers[node.output[i]] if r.op_type == "QuantizeLinear"]
        return self.params(q)


def assert_kernel_requirements(qdq: onnx.ModelProto, case: Case, dtype: str) -> None:
    kernel = rules.TFLITE_KERNELS[case.kernel]
    m = _QDQ(qdq)
    node = m.nodes[case.target]
    shift = 0 if dtype == "int8" else 128
    data = [i for i in range(len(node.input)) if node.input[i] and m.input_params(node, i) is not None]
    if kernel.symmetric_weights:
        weight_scale, weight_zp = m.input_params(node, 1)
        assert not weight_zp.any(), "weights must be symmetric"
        channels = m.init[m.producer[node.input[1]].input[0]].shape[
            1 if node.op_type == "ConvTranspose" else 0
        ]
        assert weight_scale.size in (1, channels)
        if len(node.input) > 2:
            bias_scale, bias_zp = m.input_params(node, 2)
            input_scale, _ = m.input_params(node, 0)
            np.testing.assert_allclose(bias_scale, input_scale * weight_scale, rtol=1e-6)
            assert not bias_zp.any()
            data = [0]
    outputs = [m.output_params(node, i) for i in range(len(node.output))]
    if kernel.same_scale:
        for scale, zp in [m.input_params(node, i) for i in data] + outputs[1:]:
            assert (scale, zp) == outputs[0], f"{case.kernel}: a data input or output has its own scale"
    if kernel.fixed_output is not None:
        scale, zp = kernel.fixed_output
        assert outputs[0] == (pytest.approx(scale, rel=1e-7), zp + shift)
    if kernel.min_output_scale_ratio is not None:
        (input_scale, _), (output_scale, _) = m.input_params(node, 0), outputs[0]
        assert float(output_scale) > float(input_scale) * kernel.min_output_scale_ratio


def _quantize(model: onnx.ModelProto, feeds: list[dict], dtype: str) -> onnx.ModelProto:
    samples = [Sample(f, None, str(i)) for i, f in enumerate(feeds)]
    options = QuantizeOptions(samples=len(samples), activations=dtype, float_output_heads=False)
    return quantize(load_proto(model), samples, options).proto()


@pytest.mark.parametrize("case", CASES, ids=[c.kernel for c in CASES])
def test_kernel_requirements_hold_and_litert_matches_the_qdq_model(case: Case) -> None:
    model = make_model(case.nodes, {"x": X}, case.outputs, case.inits)
    calib = [random_feeds(model, seed, -3.0, 3.0) for seed in range(8)]
    for dtype in ("uint8", "int8"):
        qdq = _quantize(model, calib, dtype)
        assert_kernel_requirements(qdq, case, dtype)
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert result.float_ops == [], result.float_ops
    # The int8 HardSwish is a table (GATHER); HARD_SWISH's rule still holds for a HardSwish the table cannot take.
    assert {"HARD_SWISH": "GATHER"}.get(case.kernel, case.kernel) in op_types(result), op_types(result)
    assert not [n for n in result.notes if "requantize" in n], (
        result.notes
    )  # the QDQ scales were usable as given
    steps = output_steps(qdq)
    for seed in (100, 101):
        feeds = random_feeds(model, seed, -3.0, 3.0)
        for a, e, step in zip(run_tflite_isolated(result, feeds), run_onnx(qdq, feeds), steps, strict=True):
            assert_within_one_step(a, e, step)


def test_hard_swish_from_another_quantizer_takes_any_output_scale() -> None:
    """A QDQ HardSwish whose output scale is below input scale / 128 (written by hand here, as another quantizer
    may; HARD_SWISH's kernel refuses it) converts: the int8 HardSwish is a table, exact at any scale."""
    case = BY_KERNEL["HARD_SWISH"]
    model = make_model(case.nodes, {"x": X}, case.outputs, case.inits)
    calib = [random_feeds(model, seed, -3.0, 3.0) for seed in range(8)]
    qdq = _quantize(model, calib, "int8")
    m = _QDQ(qdq)
    (q,) = [r for r in m.readers[m.nodes["y"].output[0]] if r.op_type == "QuantizeLinear"]
    input_scale = float(m.input_params(m.nodes["y"], 0)[0])
    for init in qdq.graph.initializer:
        if init.name == q.input[1]:
            init.CopyFrom(numpy_helper.from_array(np.array(input_scale / 200, np.float32), init.name))
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert not any("requantize" in n for n in result.notes), result.notes
    assert "GATHER" in op_types(result) and "HARD_SWISH" not in op_types(result)
    feeds = random_feeds(model, 100, -3.0, 3.0)
    (actual,), (expected,) = run_tflite_isolated(result, feeds), run_onnx(qdq, feeds)
    np.testing.assert_array_equal(actual, expected)


def test_no_activation_is_fused_into_concatenation() -> None:
    """concatenation.cc takes no fused activation (older kernels refuse one, newer ignore it): Concat -> Relu keeps
    its RELU, in float and in int8."""
    model = make_model([*TWO_CONVS, node("Concat", ["a", "b"], "c", axis=1), node("Relu", ["c"], "y")], {"x": X},
                       ["y"], TWO_CONV_INITS)  # fmt: skip
    feeds = random_feeds(model, 5, -3.0, 3.0)
    result = convert_proto(model)
    assert op_types(result).get("RELU") == 1
    np.testing.assert_allclose(run_tflite_isolated(result, feeds)[0], run_onnx(model, feeds)[0], atol=1e-4)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_add_of_an_attention_mask_at_scale_1e36_stays_float(dtype: str, tmp_path) -> None:
    """onnxruntime's quantize_static quantizes a BERT attention mask ((1 - mask) x float32 min) at scale ~1.3e36;
    the scores it is added to are at ~0.01, so add.cc's input multiplier (0.01 / 2.7e36, a float32 denormal) is
    flushed to 0 and LiteRT aborted in Prepare (bert_tiny_op13, SIGABRT). rules.rescaled_inputs_fit refuses those
    scales: that ADD stays float between DEQUANTIZE and QUANTIZE and the model matches the QDQ model."""
    pytest.importorskip("onnxruntime.quantization", reason="the QDQ model is written by onnxruntime")
    assert not rules.rescaled_inputs_fit([0.0126, 1.334e36], 1.334e36)
    assert rules.rescaled_inputs_fit([0.0126, 0.02], 0.03)
    assert not rules.rescaled_inputs_fit([1.0, 1.0], 1e-7)  # the output multiplier must be below 1
    fmin = np.array(np.finfo(np.float32).min, np.float32)
    model = make_model(
        [node("Sub", ["one", "m"], "inv"), node("Mul", ["inv", "fmin"], "bias"), node("Add", ["x", "bias"], "s"),
         node("Softmax", ["s"], "y", axis=-1)],
        {"x": (1, 2, 8, 8), "m": (1, 1, 1, 8)}, ["y"], {"one": np.array(1.0, np.float32), "fmin": fmin},
    )  # fmt: skip
    mask = np.array([[[[1, 1, 1, 1, 1, 0, 0, 0]]]], np.float32)
    calib = [{**random_feeds(model, seed, -3.0, 3.0), "m": mask} for seed in range(4)]
    from tflite_helpers import ort_qdq

    qdq = ort_qdq(model, calib, tmp_path, dtype=dtype)
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert any("ADD" in n and "stays float" in n for n in result.notes), result.notes
    assert "SOFTMAX" in op_types(result)
    (step,) = output_steps(qdq)
    feeds = {**random_feeds(model, 100, -3.0, 3.0), "m": mask}
    (actual,), (expected,) = run_tflite_isolated(result, feeds), run_onnx(qdq, feeds)
    assert_within_one_step(actual, expected, step)
