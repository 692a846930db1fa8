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
from edgekit.core.data import Sample
from edgekit.core.model import load_proto
from edgekit.quantize import rules
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.targets.tflite.converter import ConvertOptions
from test_kernel_constraints import _QDQ, CASES, CONV, CONV_INITS, TWO_CONV_INITS, TWO_CONVS, Case, X, node, w
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


def test_every_16x8_kernel_has_a_case():
    """Each kernel ``TFLITE_KERNELS`` declares a 16x8 mode for is converted to and run in LiteRT below."""
    declared = {k for k, kernel in rules.TFLITE_KERNELS.items() if kernel.int16 is not None}
    assert declared == {c.kernel for c in INT16_CASES}


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


MIXED = [
    # (model, recipe, per-layer recipes): an int8 model with one int16x8 layer (requantized in and out), an
    # int16x8 model with an int8 layer and a float one (a Concat reading both types).
    ("tiny_cnn", "int8", (("conv2", "int16x8"),)),
    ("fire_module", "int16x8", (("expand1x1", "int8"), ("squeeze", "fp32"))),
    ("tiny_cnn", "int16x8", (("fc", "int8"),)),
]


@pytest.mark.parametrize(("name", "precision", "layers"), MIXED, ids=[f"{m}-{p}" for m, p, _ in MIXED])
def test_mixed_int8_int16_layers_convert_and_run_in_litert_and_onnxruntime(name, precision, layers) -> None:
    """Per-layer recipes: every float tensor has one QuantizeLinear; a reader of the other type reads a requantize
    (DequantizeLinear -> QuantizeLinear of the other type); the onnx reference evaluator and onnxruntime agree;
    the .tflite computes the int8 layers in int8, the int16x8 ones in 16x8, requantizes between them wherever the
    QDQ model does (int16 -> int8 in one QUANTIZE, int8 -> int16 through float), keeps the fp32 layer float, and matches onnxruntime within two output steps (99 %
    of the elements; all within one int8 step)."""
    import cnn_models
    from onnx.reference import ReferenceEvaluator

    model = cnn_models.tiny_cnn(softmax=False) if name == "tiny_cnn" else cnn_models.fire_module()
    feeds = [{"x": x} for x in cnn_models.calibration_samples(count=8)]
    qdq = _quantize16(model, feeds, precision=precision, layer_precision=layers)
    m = _QDQ(qdq)
    quantize_nodes = [n for n in qdq.graph.node if n.op_type == "QuantizeLinear"]
    sources = [n.input[0] for n in quantize_nodes]
    assert len(sources) == len(set(sources)), "a tensor is quantized twice"
    requant = [
        n
        for n in quantize_nodes
        if n.input[0] in m.producer and m.producer[n.input[0]].op_type == "DequantizeLinear"
    ]
    assert requant, "no requantize between the int8 and the int16 layers"
    for n in requant:
        before = m.init[m.producer[n.input[0]].input[2]].dtype
        assert before != m.init[n.input[2]].dtype, f"{n.name} requantizes to the same type"
    for layer, recipe in layers:
        if recipe == "fp32":
            assert all(
                m.producer.get(i) is None or m.producer[i].op_type != "DequantizeLinear" or i == "x"
                for i in m.nodes[layer].input[1:]
            ), "the fp32 layer reads quantized weights"
            continue
        wanted = np.int16 if recipe == "int16x8" else np.int8
        dq = m.producer[m.nodes[layer].input[0]]
        assert m.init[dq.input[2]].dtype == wanted, (layer, m.init[dq.input[2]].dtype)
    sample = {"x": cnn_models.calibration_samples(count=1, seed=7)[0]}
    (expected,), (reference,) = run_onnx(qdq, sample), ReferenceEvaluator(qdq).run(None, sample)
    np.testing.assert_allclose(expected, reference, atol=1e-5)
    result = convert_proto(qdq, ConvertOptions(target="test"))
    floats = [f for f in result.float_ops if not any(f"({layer})" in f for layer, r in layers if r == "fp32")]
    assert floats == [], result.float_ops
    assert _requantizes_between_types(result) == _type_changes(qdq)
    (actual,) = run_tflite_isolated(result, sample)
    assert_within_one_step(actual, expected, 2 * output_steps(qdq)[0])
    # An int8 layer's output may round one int8 step apart in LiteRT; requantized to int16, the step stays.
    int8_steps = [float(m.init[n.input[1]]) for n in quantize_nodes if m.init[n.input[2]].dtype == np.int8]
    assert_within_one_step(actual, expected, max([2 * output_steps(qdq)[0], *int8_steps]), fraction=1.0)


def _type_changes(qdq: onnx.ModelProto) -> set[tuple[str, str]]:
    """(from, to) of every requantize (DequantizeLinear -> QuantizeLinear) between activation types in the QDQ
    model (uint8 counts as int8: the converter shifts it)."""
    m = _QDQ(qdq)
    name = {np.dtype(np.int8): "int8", np.dtype(np.uint8): "int8", np.dtype(np.int16): "int16"}
    changes = set()
    for n in qdq.graph.node:
        dq = m.producer.get(n.input[0]) if n.op_type == "QuantizeLinear" else None
        if dq is not None and dq.op_type == "DequantizeLinear":
            changes.add((name[m.init[dq.input[2]].dtype], name[m.init[n.input[2]].dtype]))
    return {c for c in changes if c[0] != c[1]}


def _requantizes_between_types(result) -> set[tuple[str, str]]:
    """(from, to) of each change of activation type in the flatbuffer: int16 -> int8 as one QUANTIZE; int8 ->
    int16 as DEQUANTIZE -> QUANTIZE (never one int8 -> int16 QUANTIZE, which older TFLite runtimes refuse)."""
    from ai_edge_litert import schema_py_generated as fb

    model = fb.Model.GetRootAs(result.data, 0)
    sub = model.Subgraphs(0)
    names = {fb.TensorType.INT8: "int8", fb.TensorType.INT16: "int16", fb.TensorType.FLOAT32: "float32"}
    ops = [sub.Operators(i) for i in range(sub.OperatorsLength())]
    code = {id(op): model.OperatorCodes(op.OpcodeIndex()).BuiltinCode() for op in ops}
    produced_by = {op.Outputs(0): op for op in ops}
    changes = set()
    for op in ops:
        if code[id(op)] != fb.BuiltinOperator.QUANTIZE:
            continue
        a, b = (names.get(sub.Tensors(t).Type()) for t in (op.Inputs(0), op.Outputs(0)))
        assert (a, b) != ("int8", "int16"), "one QUANTIZE int8 -> int16: older TFLite runtimes refuse it"
        if a == "float32" and op.Inputs(0) in produced_by:
            dq = produced_by[op.Inputs(0)]
            if code[id(dq)] == fb.BuiltinOperator.DEQUANTIZE:
                a = names.get(sub.Tensors(dq.Inputs(0)).Type())
        if a in ("int8", "int16") and b in ("int8", "int16") and a != b:
            changes.add((a, b))
    return changes


def test_a_bias_beyond_int32_at_the_int16_scale_stays_float_and_becomes_int64_in_tflite() -> None:
    """A tiny input range gives an int16 input scale so fine that the bias (scale input x weight) exceeds int32:
    the QDQ model keeps that bias float (DequantizeLinear reads no int64) without touching the weight scales, and
    the 16x8 CONV_2D gets it as int64, matching onnxruntime."""
    from ai_edge_litert import schema_py_generated as fb

    inits = {"w1": w(4, 3, 1, 1), "b1": np.array([3000.0, -2000.0, 0.5, 1.0], np.float32)}
    model = make_model([node("Conv", ["x", "w1", "b1"], "y")], {"x": X}, ["y"], inits)
    calib = [random_feeds(model, seed, -0.01, 0.01) for seed in range(4)]
    samples = [Sample(f, None, str(i)) for i, f in enumerate(calib)]
    options = QuantizeOptions(samples=4, activations="int8", float_output_heads=False, precision="int16x8")
    quantized = quantize(load_proto(model), samples, options)
    assert quantized.float_biases == ["y"] and not quantized.raised_weight_scales
    qdq = quantized.proto()
    m = _QDQ(qdq)
    assert m.nodes["y"].input[2] in m.init and m.init[m.nodes["y"].input[2]].dtype == np.float32
    result = convert_proto(qdq, ConvertOptions(target="test"))
    tflite = fb.Model.GetRootAs(result.data, 0)
    sub = tflite.Subgraphs(0)
    (conv,) = [sub.Operators(i) for i in range(sub.OperatorsLength())
               if tflite.OperatorCodes(sub.Operators(i).OpcodeIndex()).BuiltinCode() == fb.BuiltinOperator.CONV_2D]  # fmt: skip
    assert sub.Tensors(conv.Inputs(2)).Type() == fb.TensorType.INT64
    feeds = random_feeds(model, 100, -0.01, 0.01)
    (actual,), (expected,) = run_tflite_isolated(result, feeds), run_onnx(qdq, feeds)
    assert_within_one_step(actual, expected, 2 * output_steps(qdq)[0], fraction=1.0)


def test_hard_sigmoid_runs_as_16x8_mul_and_add() -> None:
    """TFLite has no HARD_SIGMOID: an int16x8 HardSigmoid (a squeeze-excitation gate) becomes the 16x8 MUL and ADD,
    the clip to [0, 1] being the ADD's fused RELU and its int16 output range (at most 1), nothing in float."""
    nodes = [*CONV, node("HardSigmoid", ["a"], "g", alpha=0.2, beta=0.5), node("Mul", ["a", "g"], "y")]
    model = make_model(nodes, {"x": X}, ["y"], CONV_INITS)
    calib = [random_feeds(model, seed, -3.0, 3.0) for seed in range(8)]
    qdq = _quantize16(model, calib, precision="int16x8")
    result = convert_proto(qdq, ConvertOptions(target="test"))
    assert result.float_ops == [], result.float_ops
    assert op_types(result).get("MUL") == 2 and "RELU_0_TO_1" not in op_types(result)
    assert _int16_tensors_of(result, "ADD")
    for seed in (100, 101):
        feeds = random_feeds(model, seed, -3.0, 3.0)
        (actual,), (expected,) = run_tflite_isolated(result, feeds), run_onnx(qdq, feeds)
        assert_within_one_step(actual, expected, 2 * output_steps(qdq)[0], fraction=1.0)


def test_a_16x8_add_whose_scales_overflow_add_cc_multiplier_stays_float() -> None:
    """add.cc's general 16x8 path shifts its inputs left by 15 (int8: 20), so (2 x the larger input scale) /
    (2^15 x output scale) must stay below 1. An all-zero bias (a quantize_dynamic BERT's projections, MatMul then
    Mul by the weight scale then Add of the bias) is quantized at scale 1.0 beside a sum at ~1e-5: that multiplier
    is ~6 and LiteRT aborted in Prepare (SIGABRT, no message; probe 12r, p_bert_dynq arm-cpu int16x8). That ADD
    stays float between DEQUANTIZE and QUANTIZE, with the reason, and the .tflite matches the QDQ model."""
    assert not rules.rescaled_inputs_fit([1.0, 1.68e-5], 1.68e-5, "int16")
    assert rules.rescaled_inputs_fit([1.0, 1.68e-5], 1.68e-5, "int8")  # 2 / (2^20 x 1.68e-5) = 0.11
    assert rules.rescaled_inputs_fit([2e-5, 3e-5], 4e-5, "int16")
    inits = {"s": np.array(0.25, np.float32), "bias": np.zeros(8, np.float32)}
    nodes = [node("Mul", ["x", "x2"], "p"), node("Mul", ["p", "s"], "q"), node("Add", ["q", "bias"], "y")]
    model = make_model(nodes, {"x": (1, 4, 8), "x2": (1, 4, 8)}, ["y"], inits)
    calib = [random_feeds(model, seed, -1.0, 1.0) for seed in range(4)]
    qdq = _quantize16(model, calib, precision="int16x8")
    result = convert_proto(qdq, ConvertOptions(target="test"))
    for seed in (100, 101):
        feeds = random_feeds(model, seed, -1.0, 1.0)
        (actual,), (expected,) = run_tflite_isolated(result, feeds), run_onnx(qdq, feeds)
        assert_within_one_step(actual, expected, 2 * output_steps(qdq)[0], fraction=1.0)
    assert any(n.startswith("ADD") and "its int16 kernel cannot rescale" in n for n in result.notes), (
        result.notes
    )
