"""The ``int16x8`` recipe (TFLite's 16x8 mode) through the quantizer and the TFLite writer, kernel by kernel.

For every TFLite kernel with a 16x8 mode (``rules.TFLITE_KERNELS[k].int16``), a small model quantized with
``--precision int16x8``: its QDQ model has int16 symmetric activations (zero point 0), int8 symmetric weights and
the kernel's fixed int16 output range; it converts to that kernel on int16 tensors with nothing left in float,
and LiteRT (in a child process: it aborts on graphs it refuses) matches the QDQ model (onnxruntime) within two
int16 steps (the 16x8 ADD/SUB/MUL rescale their inputs and their sum: two roundings), sixteen for the lookup-table
kernels (SOFTMAX, LOGISTIC, TANH interpolate a 513-entry table: measured 6, 3 and 9 steps of 1/32768, still 16x
finer than their int8 grids). Kernels without a 16x8 mode stay float in an int16x8 layer, with the reason.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.data import Sample
from edgekit.model import load_proto
from edgekit.quantize import rules
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.targets.tflite.converter import ConvertOptions
from test_kernel_constraints import _QDQ, CASES, CONV, CONV_INITS, TWO_CONV_INITS, TWO_CONVS, Case, X, node
from test_ops_int8 import assert_within_one_step, output_steps
from tflite_helpers import convert_proto, make_model, op_types, random_feeds, run_onnx, run_tflite_isolated

#: Kernels whose int8 mode has no constraint on scales (so test_kernel_constraints has no case) but whose 16x8
#: mode has one (zero points 0), plus the 16x8 kernels of other ops.
EXTRA_CASES = [
    Case("ADD", [*TWO_CONVS, node("Add", ["a", "b"], "y")], TWO_CONV_INITS, "y"),
    Case("SUB", [*TWO_CONVS, node("Sub", ["a", "b"], "y")], TWO_CONV_INITS, "y"),
    Case("MUL", [*TWO_CONVS, node("Mul", ["a", "b"], "y")], TWO_CONV_INITS, "y"),
    Case("MEAN", [*CONV, node("GlobalAveragePool", ["a"], "y")], CONV_INITS, "y"),
    Case("RELU", [*CONV, node("Concat", ["a", "a"], "c", axis=1), node("Relu", ["c"], "y")], CONV_INITS, "y"),
    Case("LEAKY_RELU", [*CONV, node("LeakyRelu", ["a"], "y", alpha=0.1)], CONV_INITS, "y"),
    Case(
        "BATCH_MATMUL",
        [*TWO_CONVS, node("Reshape", ["a", "s"], "ra"), node("Reshape", ["b", "s2"], "rb"), node("MatMul", ["ra", "rb"], "y")],
        {**TWO_CONV_INITS, "s": np.array([1, 4, 64], np.int64), "s2": np.array([1, 64, 4], np.int64)},
        "y",
    ),
]  # fmt: skip
#: Steps of the output's int16 grid LiteRT may be off the QDQ model by (module docstring).
STEPS = {"SOFTMAX": 16, "LOGISTIC": 16, "TANH": 16}
INT16_CASES = [c for c in CASES + EXTRA_CASES if rules.TFLITE_KERNELS[c.kernel].int16 is not None]
FLOAT_CASES = [c for c in CASES if rules.TFLITE_KERNELS[c.kernel].int16 is None]


def _quantize16(model: onnx.ModelProto, feeds: list[dict], **options) -> onnx.ModelProto:
    samples = [Sample(f, None, str(i)) for i, f in enumerate(feeds)]
    opts = QuantizeOptions(samples=len(samples), activations="int8", float_output_heads=False, **options)
    return quantize(load_proto(model), samples, opts).proto()


def _int16_requirements(qdq: onnx.ModelProto, case: Case) -> None:
    """Around the case's node: int16 zero-point-0 activations, int8 symmetric weights, the kernel's fixed
    int16 output range, one scale for same-scale kernels."""
    kernel = rules.TFLITE_KERNELS[case.kernel]
    m = _QDQ(qdq)
    target = m.nodes[case.target]
    for n in qdq.graph.node:
        if n.op_type == "QuantizeLinear":
            zp = m.init[n.input[2]]
            assert zp.dtype == np.int16 and not zp.any(), (n.name, zp.dtype, zp)
    inputs = [m.input_params(target, i) for i in range(len(target.input)) if target.input[i]]
    if kernel.symmetric_weights:
        weight = m.init[m.producer[target.input[1]].input[0]]
        assert weight.dtype == np.int8 and weight.min() >= -127
        inputs = inputs[:1]
    outputs = [m.output_params(target, i) for i in range(len(target.output))]
    if kernel.same_scale:
        for scale, zp in [p for p in inputs if p is not None] + outputs[1:]:
            assert (scale, zp) == outputs[0], f"{case.kernel}: a data input or output has its own scale"
    if kernel.fixed_output16 is not None:
        assert outputs[0] == (pytest.approx(kernel.fixed_output16[0], rel=1e-7), kernel.fixed_output16[1])


def _int16_tensors_of(result, kernel: str) -> bool:
    """Every run-time input and output of every ``kernel`` op in the flatbuffer is int16."""
    from ai_edge_litert import schema_py_generated as fb

    model = fb.Model.GetRootAs(result.data, 0)
    sub = model.Subgraphs(0)
    codes = [model.OperatorCodes(i).BuiltinCode() for i in range(model.OperatorCodesLength())]
    wanted = getattr(fb.BuiltinOperator, kernel)
    found = False
    for i in range(sub.OperatorsLength()):
        op = sub.Operators(i)
        if codes[op.OpcodeIndex()] != wanted:
            continue
        found = True
        runtime = [t for t in (op.Inputs(j) for j in range(op.InputsLength())) if t >= 0]
        runtime = [t for t in runtime if model.Buffers(sub.Tensors(t).Buffer()).DataLength() == 0]
        if any(sub.Tensors(t).Type() != fb.TensorType.INT16 for t in [*runtime, op.Outputs(0)]):
            return False
    return found


@pytest.mark.parametrize("case", INT16_CASES, ids=[c.kernel for c in INT16_CASES])
def test_16x8_kernel_requirements_hold_and_litert_matches_the_qdq_model(case: Case) -> None:
    model = make_model(case.nodes, {"x": X}, case.outputs, case.inits)
    calib = [random_feeds(model, seed, -3.0, 3.0) for seed in range(8)]
    qdq = _quantize16(model, calib, precision="int16x8")
    assert qdq.opset_import[0].version >= 21
    _int16_requirements(qdq, case)
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert result.float_ops == [], result.float_ops
    assert case.kernel in op_types(result), op_types(result)
    assert _int16_tensors_of(result, case.kernel), f"{case.kernel} does not run on int16 tensors"
    assert not [n for n in result.notes if "requantize" in n], result.notes
    steps = output_steps(qdq)
    for seed in (100, 101):
        feeds = random_feeds(model, seed, -3.0, 3.0)
        for a, e, step in zip(run_tflite_isolated(result, feeds), run_onnx(qdq, feeds), steps, strict=True):
            assert_within_one_step(a, e, step * STEPS.get(case.kernel, 2), fraction=1.0)


@pytest.mark.parametrize("case", FLOAT_CASES, ids=[c.kernel for c in FLOAT_CASES])
def test_ops_without_a_16x8_kernel_stay_float_with_the_reason(case: Case) -> None:
    model = make_model(case.nodes, {"x": X}, case.outputs, case.inits)
    calib = [random_feeds(model, seed, -3.0, 3.0) for seed in range(4)]
    samples = [Sample(f, None, str(i)) for i, f in enumerate(calib)]
    options = QuantizeOptions(samples=4, activations="int8", float_output_heads=False, precision="int16x8")
    quantized = quantize(load_proto(model), samples, options)
    assert (case.target, rules.NO_INT16_REASON) in {(f.node, f.reason) for f in quantized.plan.float_ops}
    qdq = quantized.proto()
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert any(f.startswith(case.kernel) for f in result.float_ops), result.float_ops
    feeds = random_feeds(model, 100, -3.0, 3.0)
    for a, e in zip(run_tflite_isolated(result, feeds), run_onnx(qdq, feeds), strict=True):
        np.testing.assert_allclose(a, e, atol=1e-3 * max(1.0, float(np.abs(e).max())))


def test_int16x8_matches_onnx_reference_evaluator_and_onnxruntime() -> None:
    """The int16 QDQ model computes the same in onnxruntime and the onnx reference evaluator, and closer to fp32
    than int8 does."""
    from onnx.reference import ReferenceEvaluator

    case = next(c for c in INT16_CASES if c.kernel == "CONCATENATION")
    model = make_model(case.nodes, {"x": X}, case.outputs, case.inits)
    calib = [random_feeds(model, seed, -3.0, 3.0) for seed in range(8)]
    q16, q8 = _quantize16(model, calib, precision="int16x8"), _quantize16(model, calib)
    feeds = random_feeds(model, 100, -3.0, 3.0)
    (fp32,) = run_onnx(model, feeds)
    (ort16,), (ref16,) = run_onnx(q16, feeds), ReferenceEvaluator(q16).run(None, feeds)
    np.testing.assert_allclose(ort16, ref16, atol=1e-6)
    (ort8,) = run_onnx(q8, feeds)
    assert np.abs(ort16 - fp32).max() * 2 < np.abs(ort8 - fp32).max()
