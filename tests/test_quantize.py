"""The quantization pipeline: each pass on tiny models, checked against onnxruntime, the onnx reference evaluator
and OpenVINO, plus the observers and the scale rules."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from edgekit.core.errors import QuantizationError
from edgekit.core.model import load_proto, to_proto
from edgekit.core.runtime import HostRunner
from edgekit.quantize.calibrate import params_for_range
from edgekit.quantize.observers import Histogram, MinMax, choose_range
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.quantize.plan import FLOAT_HEAD_REASON, FLOAT_POOL_REASON, MIXED_CONCAT_REASON, make_plan
from edgekit.quantize.qdq import quantize_bias, quantize_weight
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from ort_reference import node_by_node as ort_session
from quant_models import mixed_ops_model, mnist_like, squeezenet_like


def samples(shape, n=16, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return [
        SimpleNamespace(inputs={"x": (rng.normal(0, scale, shape)).astype(np.float32)}, label=None)
        for _ in range(n)
    ]


def rename_input(model: onnx.ModelProto, new: str) -> onnx.ModelProto:
    old = model.graph.input[0].name
    model.graph.input[0].name = new
    for node in model.graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
    return model


def initializers(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}


def node_by_input(proto: onnx.ModelProto, op_type: str, tensor: str) -> onnx.NodeProto:
    return next(n for n in proto.graph.node if n.op_type == op_type and n.input[0] == tensor)


# ---------------------------------------------------------------------------------------------- passes


def test_weight_quantization_is_symmetric_per_output_channel():
    w = np.random.default_rng(0).normal(0, 1, (3, 2, 3, 3)).astype(np.float32)
    w[1] *= 10  # channels with very different ranges keep their own scale
    q, scales = quantize_weight(w, axis=0)
    assert q.dtype == np.int8 and q.min() >= -127
    np.testing.assert_allclose(scales, np.abs(w).reshape(3, -1).max(axis=1) / 127, rtol=1e-6)
    err = np.abs(q * scales[:, None, None, None] - w)
    assert np.all(err <= scales[:, None, None, None] / 2 + 1e-7)
    # axis 1 (ConvTranspose / MatMul weights)
    q1, s1 = quantize_weight(w.transpose(1, 0, 2, 3), axis=1)
    np.testing.assert_array_equal(q1, q.transpose(1, 0, 2, 3))
    np.testing.assert_array_equal(s1, scales)


def test_bias_is_int32_with_input_times_weight_scale():
    qb, s = quantize_bias(np.array([0.5, -1.25, 3.0]), 0.02, np.array([0.1, 0.01, 0.5], np.float32))
    assert qb.dtype == np.int32
    np.testing.assert_allclose(s, [0.002, 0.0002, 0.01], rtol=1e-6)
    np.testing.assert_array_equal(qb, [250, -6250, 300])


@pytest.mark.parametrize(
    "dtype, lo, hi",
    [("int8", -1.0, 3.0), ("uint8", -1.0, 3.0), ("int8", 0.0, 6.0), ("uint8", 0.0, 6.0), ("int8", 0.5, 2.0)],
)
def test_activation_params_cover_the_range_and_zero_exactly(dtype, lo, hi):
    p = params_for_range(lo, hi, dtype)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    assert p.qmin <= p.zero_point <= p.qmax
    # zero is exactly representable; the ends are within half a step
    assert (p.qmin - p.zero_point) * p.scale <= lo + p.scale / 2
    assert (p.qmax - p.zero_point) * p.scale >= hi - p.scale / 2
    if lo == 0.0:
        assert p.zero_point == p.qmin


def heavy_tailed(seed=0, n=200_000):
    rng = np.random.default_rng(seed)
    x = np.maximum(rng.normal(0, 1, n), 0)
    x[:20] = rng.uniform(40, 60, 20)  # a few huge outliers
    return x


@pytest.mark.parametrize("method", ["percentile", "entropy"])
def test_histogram_methods_clip_a_heavy_tailed_activation_below_its_maximum(method):
    x = heavy_tailed()
    mm = MinMax()
    hist = Histogram()
    for chunk in np.array_split(x, 10)[::-1]:  # streamed in pieces (the outliers come last): fixed size
        hist.update(chunk)
        mm.update(chunk)
    assert hist.counts.shape == (2048,)
    lo, hi = choose_range(method, mm, hist, percentile=99.99)
    assert lo == 0.0
    assert hi < 0.5 * x.max(), (method, hi, x.max())
    assert hi > 2.0  # but keeps the body of the distribution (p99.99 of a half-normal is ~3.9)
    assert choose_range("minmax", mm, hist) == (0.0, x.max())


def test_mse_trades_clipping_against_rounding():
    # A few huge outliers cost more clipped than rounded: mse keeps them (and percentile does not).
    x = heavy_tailed()
    mm = mm_update(MinMax(), x)
    hist = Histogram()
    hist.update(x)
    assert choose_range("mse", mm, hist)[1] > 0.8 * x.max()  # (the histogram subsamples large tensors)
    # A long exponential tail is clipped: the rounding error saved on the body outweighs the clipped tail.
    y = np.random.default_rng(2).exponential(size=200_000)
    mm = mm_update(MinMax(), y)
    hist = Histogram()
    hist.update(y)
    assert choose_range("mse", mm, hist)[1] < 0.95 * y.max()


def mm_update(mm: MinMax, x: np.ndarray) -> MinMax:
    mm.update(x)
    return mm


def test_growing_histogram_equals_one_built_at_the_final_range():
    rng = np.random.default_rng(4)
    first = rng.uniform(0, 1, 50_000)
    later = rng.uniform(-3.5, 3.5, 50_000)
    hist = Histogram(bins=512)
    hist.update(first)
    edge0 = hist.edge
    hist.update(later)
    assert hist.edge == 4 * edge0 and hist.signed
    both = np.concatenate([first, later])
    pos, _ = np.histogram(both[both >= 0], bins=512, range=(0, hist.edge))
    neg, _ = np.histogram(-both[both < 0], bins=512, range=(0, hist.edge))
    assert np.abs(hist.counts - pos).sum() <= 2 and np.abs(hist.neg - neg).sum() <= 2
    assert hist.counts.sum() + hist.neg.sum() == both.size


def test_signed_histogram_clips_both_tails():
    rng = np.random.default_rng(1)
    x = rng.laplace(size=100_000)
    x[0], x[1] = 80.0, -70.0
    mm = mm_update(MinMax(), x)
    hist = Histogram()
    hist.update(x)
    lo, hi = choose_range("percentile", mm, hist, percentile=99.9)
    assert -20 < lo < -3 and 3 < hi < 20


def test_plan_follows_the_tflite_rules():
    model = load_proto(mixed_ops_model())
    plan = make_plan(model, float_output_heads=False)
    # Relu fused into the conv: the conv output is not quantized, the relu output is.
    assert plan.fused == {"c": "relu"}
    assert "c" not in plan.activations and "r" in plan.activations
    # restrict_same_scale: MaxPool and Concat share one scale across inputs and output.
    assert plan.group("r") == plan.group("p") == plan.group("cat")
    # Sigmoid's output range is fixed; the MaxPool after it inherits it (one data input)...
    assert plan.fixed["s"] == (1 / 256, -128) and plan.fixed["prob"] == (1 / 256, -128)
    assert plan.group("ps") == plan.group("s") != plan.group("cat")
    # ...and the Concat requantizes it to the shared scale rather than clipping the Relu branch to [0, 1).
    assert plan.requant == {"concat::requant1": ("concat", 1, "ps")}
    assert plan.group("concat::requant1") == plan.group("cat")
    # Exp has no integer kernel: it stays float, and the report says why.
    assert [(f.node, f.op_type) for f in plan.float_ops] == [("exp", "Exp")]
    assert {w.node for w in plan.weights} == {"conv", "fc"}
    assert plan.constants == [("add_const", 1)]


def _pooled_head_model(gap_is_also_an_output: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    nodes = [
        onnx.helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        onnx.helper.make_node("Relu", ["c"], ["r"], name="relu"),
        onnx.helper.make_node("GlobalAveragePool", ["r"], ["gap"], name="gap"),
        onnx.helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        onnx.helper.make_node("Softmax", ["flat"], ["prob"], name="softmax"),
    ]
    outputs = [onnx.helper.make_tensor_value_info("prob", onnx.TensorProto.FLOAT, [1, 4])]
    if gap_is_also_an_output:
        outputs.append(onnx.helper.make_tensor_value_info("gap", onnx.TensorProto.FLOAT, [1, 4, 1, 1]))
    graph = onnx.helper.make_graph(
        nodes,
        "pooled_head",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 6, 6])],
        outputs,
        [
            numpy_helper.from_array(rng.normal(size=(4, 3, 1, 1)).astype(np.float32), "w"),
            numpy_helper.from_array(rng.normal(size=4).astype(np.float32), "b"),
        ],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 19)])


def test_the_pool_of_a_float_head_stays_float_only_when_it_feeds_nothing_else():
    plan = make_plan(load_proto(_pooled_head_model(False)), float_output_heads=True)
    assert {(f.node, f.reason) for f in plan.float_ops} == {
        ("gap", FLOAT_POOL_REASON),
        ("flatten", FLOAT_POOL_REASON),
        ("softmax", FLOAT_HEAD_REASON),
    }
    assert "r" in plan.activations and "gap" not in plan.activations
    # The pooled tensor is also a model output of its own: it is quantized as usual, only the softmax is float.
    plan = make_plan(load_proto(_pooled_head_model(True)), float_output_heads=True)
    assert [(f.node, f.reason) for f in plan.float_ops] == [("softmax", FLOAT_HEAD_REASON)]
    assert "gap" in plan.activations
    # Integer heads: nothing stays float.
    assert make_plan(load_proto(_pooled_head_model(False)), float_output_heads=False).float_ops == []


# ------------------------------------------------------------------------------------- whole pipeline


def quantize_proto(proto, data, **options):
    model = load_proto(proto)
    return model, quantize(model, data, QuantizeOptions(**options))


@pytest.mark.parametrize("activations", ["int8", "uint8"])
def test_qdq_model_runs_the_same_in_onnxruntime_reference_and_openvino(activations):
    source = rename_input(squeezenet_like(opset=7), "x")
    calib = samples((1, 3, 33, 33), n=24)
    fp32, q = quantize_proto(source, calib, activations=activations, float_output_heads=False)
    proto = q.proto()
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version >= 19
    ref = ReferenceEvaluator(proto)
    sess = ort_session(proto)
    ov = HostRunner(proto)
    fp32_sess = ort_session(to_proto(fp32))
    softmax_step = 1 / 256
    for sample in samples((1, 3, 33, 33), n=6, seed=7):
        x = sample.inputs
        a = ref.run(None, x)[0]
        b = sess.run(None, x)[0]
        c = ov.run(x)["prob"]
        f = fp32_sess.run(None, x)[0]
        # The three runtimes agree to within one step of the output's quantization (1/256).
        assert np.abs(a - b).max() <= softmax_step + 1e-6
        assert np.abs(a - c).max() <= softmax_step + 1e-6
        # and the int8 model approximates fp32
        assert np.abs(b - f).max() < 0.05
        # outputs lie on the fixed softmax grid
        np.testing.assert_allclose(np.round(b * 256), b * 256, atol=1e-4)


def test_quantized_model_keeps_scales_where_tflite_needs_them():
    fp32, q = quantize_proto(
        mixed_ops_model(), samples((1, 2, 4, 4), n=16), activations="int8", float_output_heads=False
    )
    proto = q.proto()
    init = initializers(proto)

    def q_params(tensor):
        # A graph output keeps its name on the DequantizeLinear; other tensors feed a QuantizeLinear.
        outputs = {o.name for o in proto.graph.output}
        node = (
            next(n for n in proto.graph.node if n.output[0] == tensor)
            if tensor in outputs
            else node_by_input(proto, "QuantizeLinear", tensor)
        )
        return float(init[node.input[1]]), int(init[node.input[2]])

    # Shared scales: relu output, pool output, concat output; the sigmoid branch keeps 1/256 and is requantized.
    assert len({q_params(t) for t in ("r", "p", "cat")}) == 1
    assert q_params("s") == q_params("ps") == (1 / 256, -128)
    concat = next(n for n in proto.graph.node if n.op_type == "Concat")
    requant_dq = next(n for n in proto.graph.node if n.output[0] == concat.input[1])
    assert (float(init[requant_dq.input[1]]), int(init[requant_dq.input[2]])) == q_params("cat")
    assert q_params("prob") == (1 / 256, -128)
    # Bias scale = input scale x per-channel weight scale.
    conv = next(n for n in proto.graph.node if n.op_type == "Conv")
    w_dq = next(n for n in proto.graph.node if n.output[0] == conv.input[1])
    b_dq = next(n for n in proto.graph.node if n.output[0] == conv.input[2])
    in_scale, _ = q_params("x")
    np.testing.assert_allclose(init[b_dq.input[1]], in_scale * init[w_dq.input[1]], rtol=1e-6)
    assert init[w_dq.input[0]].dtype == np.int8 and init[b_dq.input[0]].dtype == np.int32
    assert next(a.i for a in w_dq.attribute if a.name == "axis") == 0
    # no Q/DQ between Conv and Relu
    relu = next(n for n in proto.graph.node if n.op_type == "Relu")
    assert relu.input[0] == conv.output[0]
    # The constant addend is an int8 initializer behind a DequantizeLinear.
    add = next(n for n in proto.graph.node if n.op_type == "Add")
    k_dq = next(n for n in proto.graph.node if n.output[0] == add.input[1])
    assert k_dq.op_type == "DequantizeLinear" and init[k_dq.input[0]].dtype == np.int8
    # Exp stays float, fed by a DequantizeLinear.
    exp = next(n for n in proto.graph.node if n.op_type == "Exp")
    assert next(n for n in proto.graph.node if n.output[0] == exp.input[0]).op_type == "DequantizeLinear"


def test_uint8_activations_shift_zero_points():
    _, q8 = quantize_proto(
        mixed_ops_model(), samples((1, 2, 4, 4)), activations="int8", float_output_heads=False
    )
    _, qu = quantize_proto(
        mixed_ops_model(), samples((1, 2, 4, 4)), activations="uint8", float_output_heads=False
    )
    assert q8.params["prob"].zero_point == -128 and qu.params["prob"].zero_point == 0
    assert q8.params["r"].zero_point == -128 and qu.params["r"].zero_point == 0
    assert q8.params["r"].scale == pytest.approx(qu.params["r"].scale)


def test_opset8_cntk_style_model_quantizes_as_given():
    source = rename_input(mnist_like(opset=8), "x")
    fp32, q = quantize_proto(source, samples((1, 1, 12, 12), n=16))
    proto = q.proto()
    sess, ref = ort_session(proto), ReferenceEvaluator(proto)
    base = ort_session(source)
    for sample in samples((1, 1, 12, 12), n=4, seed=3):
        got = sess.run(None, sample.inputs)[0]
        np.testing.assert_allclose(ref.run(None, sample.inputs)[0], got, atol=1e-4)
        expected = base.run(None, sample.inputs)[0]
        assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy", "mse"])
def test_every_method_gives_a_valid_close_model(method):
    source = rename_input(squeezenet_like(opset=7), "x")
    fp32, q = quantize_proto(source, samples((1, 3, 33, 33), n=24), method=method)
    sess = ort_session(q.proto())
    base = ort_session(to_proto(fp32))
    for sample in samples((1, 3, 33, 33), n=4, seed=9):
        assert np.abs(sess.run(None, sample.inputs)[0] - base.run(None, sample.inputs)[0]).max() < 0.05


def test_already_quantized_model_is_rejected():
    _, q = quantize_proto(mixed_ops_model(), samples((1, 2, 4, 4), n=4))
    with pytest.raises(QuantizationError, match="already quantized"):
        quantize(load_proto(q.proto()), samples((1, 2, 4, 4), n=4), QuantizeOptions())


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("method", "magic", "--method must be one of"),
        ("activations", "int4", "--activations must be one of"),
        ("samples", 0, "--samples must be at least 1"),
    ],
)
def test_options_are_validated(field, value, message):
    with pytest.raises(QuantizationError, match=message):
        QuantizeOptions(**{field: value})


def test_dense_weights_can_be_per_tensor_for_nnapi():
    source = rename_input(mnist_like(opset=8), "x")
    _, q = quantize_proto(source, samples((1, 1, 12, 12), n=8), dense_per_channel=False)
    proto = q.proto()
    init = initializers(proto)
    gemm = next(n for n in proto.graph.node if n.op_type == "Gemm")
    conv = next(n for n in proto.graph.node if n.op_type == "Conv")
    w_dq = next(n for n in proto.graph.node if n.output[0] == gemm.input[1])
    c_dq = next(n for n in proto.graph.node if n.output[0] == conv.input[1])
    assert init[w_dq.input[1]].shape == () and not any(a.name == "axis" for a in w_dq.attribute)
    assert init[c_dq.input[1]].shape == (4,)  # convolutions stay per-channel
    sess = ort_session(proto)
    base = ort_session(source)
    for sample in samples((1, 1, 12, 12), n=3, seed=5):
        got, expected = sess.run(None, sample.inputs)[0], base.run(None, sample.inputs)[0]
        assert np.abs(got - expected).max() < 0.05 * np.abs(expected).max()


def _dequantized_conv(proto: onnx.ModelProto, conv_name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The weight and bias a QDQ model's conv really computes with (its DequantizeLinear inputs, dequantized),
    and the bias scale."""
    init = initializers(proto)
    conv = next(n for n in proto.graph.node if n.name == conv_name)
    out = []
    for tensor in conv.input[1:3]:
        dq = next(n for n in proto.graph.node if n.output[0] == tensor)
        q, scale = init[dq.input[0]].astype(np.float64), init[dq.input[1]].astype(np.float64)
        out.append((q * scale.reshape((-1,) + (1,) * (q.ndim - 1)) if scale.ndim else q * scale, scale))
    (w, _), (b, bias_scale) = out
    return w, b, bias_scale


@pytest.mark.parametrize("method", ["minmax", "percentile"])  # means reduced in the graph / from the tensors
def test_bias_correction_removes_the_mean_shift_of_weight_rounding(method):
    # The claim of bias correction: on the calibration data, the quantized weights plus the corrected bias
    # give each output channel of a conv the same mean as the float weights and bias. The classifier is a
    # 1x1 conv, so its channel means are W @ E[x] + b with E[x] the per-channel mean of its input.
    source = rename_input(squeezenet_like(opset=7), "x")
    data = samples((1, 3, 33, 33), n=24)
    fp32, plain = quantize_proto(source, data, method=method)
    _, corrected = quantize_proto(source, data, bias_correction=True, method=method)
    float_proto = to_proto(fp32)
    conv = next(n for n in float_proto.graph.node if n.name == "classifier")
    probe = onnx.helper.make_tensor_value_info(conv.input[0], onnx.TensorProto.FLOAT, None)
    float_proto.graph.output.append(probe)
    sess = ort_session(float_proto)
    mean_x = np.mean([sess.run([conv.input[0]], s.inputs)[0].mean(axis=(0, 2, 3)) for s in data], axis=0)
    init = initializers(float_proto)
    w = init[conv.input[1]].astype(np.float64)[:, :, 0, 0]
    b = init[conv.input[2]].astype(np.float64)
    shifts = {}
    for key, q in (("plain", plain), ("corrected", corrected)):
        wq, bq, bias_step = _dequantized_conv(q.proto(), "classifier")
        shifts[key] = np.abs((wq[:, :, 0, 0] - w) @ mean_x + (bq - b))
    assert shifts["plain"].max() > 4 * bias_step.max()  # rounding the weights did shift the channel means
    assert np.all(shifts["corrected"] <= bias_step)  # corrected to within the bias's own rounding
    # and the biases really changed
    pb = initializers(plain.proto())
    cb = initializers(corrected.proto())
    changed = [k for k, v in pb.items() if v.dtype == np.int32 and not np.array_equal(v, cb[k])]
    assert changed


def test_prefetched_keeps_order_propagates_errors_and_stops_early():
    from edgekit.core.data import prefetched

    assert list(prefetched(range(100), depth=3)) == list(range(100))

    def failing():
        yield 1
        raise QuantizationError("boom in the producer")

    it = prefetched(failing())
    assert next(it) == 1
    with pytest.raises(QuantizationError, match="boom"):
        next(it)
    produced = []

    def endless():
        for i in range(10**9):
            produced.append(i)
            yield i

    gen = prefetched(endless(), depth=2)
    assert [next(gen) for _ in range(5)] == [0, 1, 2, 3, 4]
    gen.close()  # stopping early stops the producer: bounded read-ahead
    assert len(produced) <= 5 + 2 + 2


def test_output_heads_stay_float_by_default_and_reuse_statistics():
    source = rename_input(squeezenet_like(opset=7), "x")
    data = samples((1, 3, 33, 33), n=16)
    model, heads_float = quantize_proto(source, data)
    proto = heads_float.proto()
    # The pooled logits stay float too: the classifier's int8 output is dequantized, then pooled in float
    # (the mean of int8 values is finer than the int8 grid), and from there to the model output (the opset-7
    # softmax became Flatten -> Softmax -> Reshape when the model was upgraded) everything is float.
    gap = next(n for n in proto.graph.node if n.op_type == "GlobalAveragePool")
    assert next(n for n in proto.graph.node if n.output[0] == gap.input[0]).op_type == "DequantizeLinear"
    after = proto.graph.node[list(proto.graph.node).index(gap) :]
    assert [n.op_type for n in after] == ["GlobalAveragePool", "Flatten", "Softmax", "Reshape"]
    assert after[-1].output[0] == "prob"
    reasons = {f.op_type: f.reason for f in heads_float.plan.float_ops}
    assert reasons == {
        "GlobalAveragePool": FLOAT_POOL_REASON,
        "Flatten": FLOAT_POOL_REASON,
        "Softmax": FLOAT_HEAD_REASON,
        "Reshape": FLOAT_HEAD_REASON,
    }
    # A fully integer target quantizes the head too; the same statistics serve it (fixed ranges need none).
    integer = quantize(model, [], QuantizeOptions(float_output_heads=False), statistics=heads_float.stats)
    assert integer.params["prob"].scale == pytest.approx(1 / 256)
    sess_f, sess_i = ort_session(proto), ort_session(integer.proto())
    for sample in samples((1, 3, 33, 33), n=3, seed=4):
        a, b = sess_f.run(None, sample.inputs)[0], sess_i.run(None, sample.inputs)[0]
        assert np.abs(a - b).max() <= 1 / 256 + 1e-6  # differ by the head's rounding only


def _boxes_and_scores_model() -> onnx.ModelProto:
    """YOLOv8's output: ``Concat([boxes in pixels (0..~600), sigmoid(class logits)], 1)`` as one [1, 6, 16]."""
    h, rng = onnx.helper, np.random.default_rng(6)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 1, 1)).astype(np.float32), "wb"),
        numpy_helper.from_array(rng.normal(0, 1.0, (2, 3, 1, 1)).astype(np.float32), "wc"),
        numpy_helper.from_array(np.array(150.0, np.float32), "stride"),
        numpy_helper.from_array(np.array([1, -1, 16], np.int64), "shape"),
    ]
    nodes = [
        h.make_node("Conv", ["x", "wb"], ["b"]),
        h.make_node("Reshape", ["b", "shape"], ["bf"]),
        h.make_node("Mul", ["bf", "stride"], ["boxes"]),
        h.make_node("Conv", ["x", "wc"], ["c"]),
        h.make_node("Reshape", ["c", "shape"], ["cf"]),
        h.make_node("Sigmoid", ["cf"], ["scores"], name="sigmoid"),
        h.make_node("Concat", ["boxes", "scores"], ["out"], axis=1, name="concat"),
    ]
    graph = h.make_graph(
        nodes,
        "detector_output",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4])],
        [h.make_tensor_value_info("out", onnx.TensorProto.FLOAT, [1, 6, 16])],
        inits,
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


@pytest.mark.parametrize("float_heads,method", [(True, "minmax"), (False, "minmax"), (True, "mean_minmax")])
def test_a_detector_output_joining_boxes_and_scores_stays_float(float_heads, method):
    """One int8 scale for boxes (0..~600) and scores (0..1) made every YOLOv8n score 0: the Concat stays float
    (and, for float-output targets, the Sigmoid), so the QDQ model's scores follow onnxruntime's fp32 ones.
    mean_minmax keeps the whole range of the head back to its last weighted layer (the box Conv): clipped at
    their mean extremes, the boxes of unseen samples moved by 5.5 % of their span."""
    source = _boxes_and_scores_model()
    calib = samples((1, 3, 4, 4), n=16, scale=2.0)
    _, q = quantize_proto(source, calib, float_output_heads=float_heads, method=method)
    reasons = {f.node: f.reason for f in q.plan.float_ops}
    assert reasons == (
        {"concat": MIXED_CONCAT_REASON, "sigmoid": FLOAT_HEAD_REASON}
        if float_heads
        else {"concat": MIXED_CONCAT_REASON}
    )
    fp32, qdq = ort_session(source), ort_session(q.proto())
    for sample in samples((1, 3, 4, 4), n=4, seed=9, scale=2.0):
        (a,), (b,) = fp32.run(None, sample.inputs), qdq.run(None, sample.inputs)
        box_range = np.ptp(a[:, :4])
        assert np.abs(a[:, :4] - b[:, :4]).max() <= 0.05 * box_range
        # The scores keep their own grid (int8 logits; a float or 1/256 Sigmoid): not one 2.4-wide step.
        assert np.abs(a[:, 4:] - b[:, 4:]).max() <= 0.05
        assert len(np.unique(b[:, 4:])) > 8


def test_mean_minmax_is_the_mean_of_the_per_sample_extremes():
    # Samples of different spreads, one with an outlier: the range is the mean of each sample's min and max
    # (NNCF's default activation range), not the extremes of all of them.
    rng = np.random.default_rng(5)
    samples = [rng.normal(0.3, 1.0 + i / 4, (1, 8, 6, 6)).astype(np.float32) for i in range(12)]
    samples[3][0, 0, 0, 0] = 40.0
    mm = MinMax()
    for s in samples:
        mm.update(s)
    want = (np.mean([s.min() for s in samples]), np.mean([s.max() for s in samples]))
    assert choose_range("mean_minmax", mm, None) == pytest.approx(want, rel=1e-6)
    assert choose_range("minmax", mm, None) == (pytest.approx(min(s.min() for s in samples)), 40.0)
    # Merged observers keep the sums (the accuracy search merges statistics).
    half = MinMax()
    for s in samples[:6]:
        half.update(s)
    rest = MinMax()
    for s in samples[6:]:
        rest.update(s)
    half.merge(rest)
    assert half.mean_range == pytest.approx(want, rel=1e-6)


def test_entropy_range_of_a_relu_output_keeps_its_body():
    # ReLU(N(0, 1)): half the values are exact zeros. That spike is exact on every grid; counted in the KL
    # divergence it pulled the threshold down (here to 2.42, below the 99th percentile of the positive values;
    # on MobileNetV2 the entropy ranges agreed with fp32 on 48 % of the photos, 90 % without the spike). The
    # numpy reference: the threshold lies between the 99th and the 99.999th percentile of the positive values
    # (it keeps the body, clips the 40 outliers).
    rng = np.random.default_rng(6)
    x = np.maximum(rng.normal(0, 1, 400_000), 0).astype(np.float32)
    x[:40] = rng.uniform(8, 10, 40)  # rare outliers KL should clip
    mm = mm_update(MinMax(), x)
    hist = Histogram()
    hist.update(x)
    positive = x[x > 0]
    _, hi = choose_range("entropy", mm, hist)
    assert np.percentile(positive, 99) < hi < np.percentile(positive, 99.999), hi


def _types(proto: onnx.ModelProto) -> dict[str, bytes]:
    """Each node output's type and shape, as the model records it."""
    computed = {name for n in proto.graph.node for name in n.output}
    values = [*proto.graph.value_info, *proto.graph.output]
    return {v.name: v.type.SerializeToString() for v in values if v.name in computed}


@pytest.mark.parametrize("int16", [False, True])
def test_the_qdq_model_carries_the_types_shape_inference_gives(int16):
    """The passes type every value they add, so quantize runs ONNX shape inference only when the fp32 model left
    a value untyped: either way each value's type and shape are what onnx.shape_inference infers."""
    source = rename_input(squeezenet_like(opset=7), "x")
    options = {"layer_precision": (("squeeze", "int16x8"),)} if int16 else {}
    model = load_proto(source)
    q = quantize(model, samples((1, 3, 33, 33), n=4), QuantizeOptions(float_output_heads=False, **options))
    proto = q.proto()
    bare = onnx.ModelProto()
    bare.CopyFrom(proto)
    del bare.graph.value_info[:]
    inferred = _types(onnx.shape_inference.infer_shapes(bare, strict_mode=True))
    assert _types(proto) == inferred and len(inferred) == len(proto.graph.node)
    # A value the fp32 model left untyped: inferred in the QDQ model all the same.
    untyped = load_proto(source)
    value = next(v for n in untyped.graph for v in n.outputs if v.name == "rs")
    value.shape, value.type = None, None
    again = quantize(untyped, (), QuantizeOptions(float_output_heads=False, **options), statistics=q.stats)
    assert _types(again.proto()) == _types(proto)
