"""Depthwise-input equalization (``edgekit.quantize.equalize``): per-channel activation ranges in a per-tensor form.

On the zoo's MobileNetV2 (seeded weights, BatchNorm statistics from real photos, ReLU6 before every depthwise
Conv): the rewritten float model gives the original's outputs on the calibration data (onnxruntime), the QDQ
model's depthwise inputs stay per tensor and every channel spans (nearly) the tensor's range; excluded patterns
are left alone; the depthwise biases stay inside int32 without raising a weight scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from edgekit.core.model import load_model
from edgekit.quantize.calibrate import channel_ranges
from edgekit.quantize.equalize import MIN_RATIO, EqualizePass, channel_ratios, find_sites
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.quantize.plan import make_plan
from onnx import TensorProto, helper, numpy_helper
from zoo import zoo_data

MODELS = zoo_data.MANIFEST.parent


@dataclass
class Sample:
    inputs: dict
    label: int | None = None


@pytest.fixture(scope="module")
def mobilenet():
    entry = next(e for e in zoo_data.entries() if e["name"] == "mobilenet_v2")
    arrays = zoo_data.make_arrays(entry, 16, 1)
    samples = [Sample({k: v[i : i + 1] for k, v in arrays.items()}) for i in range(16)]
    return load_model(MODELS / entry["file"]), samples


def _ort(model: ir.Model | onnx.ModelProto, samples, extra: list[str] = ()) -> list[list[np.ndarray]]:
    proto = model if isinstance(model, onnx.ModelProto) else ir.to_proto(model)
    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    names = [o.name for o in proto.graph.output] + list(extra)
    proto.graph.output.extend(helper.make_empty_tensor_value_info(n) for n in extra)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return [session.run(names, s.inputs) for s in samples]


def _ratios(model: ir.Model, samples, options: QuantizeOptions = QuantizeOptions()):
    sites = find_sites(model)
    plan = make_plan(model, options.exclude, options.float_output_heads)
    names = list(dict.fromkeys(n for s in sites for n in s.scaled))
    ranges = channel_ranges(model, names, samples, options)
    return sites, ranges, {s.tensor: channel_ratios(model, s, ranges, set(plan.activations)) for s in sites}


def test_rewrite_keeps_the_float_model_on_calibration_data(mobilenet):
    model, samples = mobilenet
    sites, _, ratios = _ratios(model, samples)
    assert len(sites) == 17  # every depthwise Conv of MobileNetV2 (ReLU6 between it and its producer)
    assert any(float(r.min()) < 0.5 for r in ratios.values())  # the rewrite does something
    rewritten = ir.from_proto(ir.to_proto(model))
    assert EqualizePass(ratios)(rewritten).modified
    before, after = _ort(model, samples), _ort(rewritten, samples)
    for a, b in zip(before, after, strict=True):
        span = float(a[0].max() - a[0].min())
        assert np.abs(a[0] - b[0]).max() <= 1e-4 * span


def test_qdq_depthwise_input_is_per_tensor_and_every_channel_spans_it(mobilenet):
    model, samples = mobilenet
    options = QuantizeOptions(activations="int8")
    quantized = quantize(model, samples, options)
    assert quantized.stats.equalization
    proto = quantized.proto()
    produced = {o: n for n in proto.graph.node for o in n.output}
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    rewritten = ir.from_proto(ir.to_proto(model))
    EqualizePass(quantized.stats.equalization)(rewritten)
    ranges_after = channel_ranges(rewritten, list(quantized.stats.equalization), samples, options)
    _, ranges_before, _ = _ratios(model, samples, options)
    for site in find_sites(model):
        dw = next(n for n in proto.graph.node if n.name == site.depthwise)
        dq = produced[dw.input[0]]
        assert dq.op_type == "DequantizeLinear"
        assert inits[dq.input[1]].size == 1  # one scale: per tensor, as TFLite / NNAPI kernels need
        r = quantized.stats.equalization[site.tensor]
        hi_before, hi_after = ranges_before[site.tensor][1], ranges_after[site.tensor][1]
        spans = hi_after / hi_after.max()
        # Every live channel spans the tensor's range, but for those held at the 1/32 floor.
        live = (hi_before > 0) & (r > MIN_RATIO)
        assert np.all(spans[live] > 0.99), site.tensor
        assert np.all(
            spans[hi_before > 0] >= np.minimum(1.0, 32 * hi_before[hi_before > 0] / hi_before.max()) * 0.99
        )
    # The per-layer comparison with fp32 reads the rewritten tensors in fp32 units.
    from edgekit.quantize.evaluation import evaluate

    _, rows = evaluate(model, quantized, samples[:4])
    by_name = {r["tensor"]: r["sqnr_db"] for r in rows}
    sqnr = [by_name[s.tensor] for s in find_sites(model)]
    assert sqnr[0] > 30.0 and min(sqnr) > 3.0, sqnr  # read in the rewritten units, the first would be ~0 dB


# ------------------------------------------------------------------------------------------------ patterns


def _block(
    between: list[str], extra_consumer: bool = False, bias: float = 0.0, seed: int = 0
) -> onnx.ModelProto:
    """x -> Conv 1x1 (8 channels, widely different scales) -> ``between`` ops -> depthwise 3x3 -> y."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 1, (8, 4, 1, 1)) * np.logspace(-2, 0, 8).reshape(-1, 1, 1, 1)
    inits = [
        numpy_helper.from_array(w.astype(np.float32), "w"),
        numpy_helper.from_array(np.zeros(8, np.float32), "b"),
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 1, 3, 3)).astype(np.float32), "dw"),
        numpy_helper.from_array(np.full(8, bias, np.float32), "dwb"),
        numpy_helper.from_array(np.float32(0), "zero"),
        numpy_helper.from_array(np.float32(6), "six"),
        numpy_helper.from_array(np.float32(-1), "minus_one"),
    ]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t0"], name="pw")]
    ops = {
        "Relu": lambda i, o: [helper.make_node("Relu", [i], [o], name="relu")],
        "LeakyRelu": lambda i, o: [helper.make_node("LeakyRelu", [i], [o], alpha=0.1, name="leaky")],
        "Relu6": lambda i, o: [helper.make_node("Clip", [i, "zero", "six"], [o], name="relu6")],
        "ClipNeg": lambda i, o: [helper.make_node("Clip", [i, "minus_one", "six"], [o], name="clip")],
        "SiLU": lambda i, o: [
            helper.make_node("Sigmoid", [i], [o + "_s"], name="sig"),
            helper.make_node("Mul", [i, o + "_s"], [o], name="silu"),
        ],
        "HardSwish": lambda i, o: [helper.make_node("HardSwish", [i], [o], name="hswish")],
    }
    current = "t0"
    for k, op in enumerate(between):
        nodes += ops[op](current, f"t{k + 1}")
        current = f"t{k + 1}"
    nodes.append(
        helper.make_node("Conv", [current, "dw", "dwb"], ["y"], group=8, pads=[1, 1, 1, 1], name="dwconv")
    )
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])]
    if extra_consumer:
        nodes.append(helper.make_node("Relu", [current], ["side"], name="side"))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, [1, 8, 6, 6]))
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])], outputs, inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _load(proto: onnx.ModelProto, tmp_path) -> ir.Model:
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    return load_model(path)


def _samples(count: int = 8) -> list[Sample]:
    rng = np.random.default_rng(1)
    return [Sample({"x": rng.normal(0, 1, (1, 4, 6, 6)).astype(np.float32)}) for _ in range(count)]


@pytest.mark.parametrize("between", [[], ["Relu"], ["LeakyRelu"], ["Relu6"], ["Relu", "Relu6"]])
def test_homogeneous_chains_are_equalized_and_unchanged_in_float(between, tmp_path):
    model = _load(_block(between), tmp_path)
    samples = _samples()
    sites, _, ratios = _ratios(model, samples)
    assert [s.depthwise for s in sites] == ["dwconv"]
    assert float(ratios[sites[0].tensor].min()) < 0.5
    rewritten = ir.from_proto(ir.to_proto(model))
    EqualizePass(ratios)(rewritten)
    for a, b in zip(_ort(model, samples), _ort(rewritten, samples), strict=True):
        np.testing.assert_allclose(b[0], a[0], rtol=1e-4, atol=1e-5 * float(np.abs(a[0]).max()))


@pytest.mark.parametrize("between", [["SiLU"], ["HardSwish"], ["ClipNeg"], ["Relu", "HardSwish"]])
def test_non_homogeneous_activations_are_left_alone(between, tmp_path):
    assert find_sites(_load(_block(between), tmp_path)) == []


def test_a_tensor_with_other_consumers_is_left_alone(tmp_path):
    assert find_sites(_load(_block(["Relu"], extra_consumer=True), tmp_path)) == []
    model = _load(_block(["Relu"]), tmp_path)
    assert find_sites(model, exclude=frozenset({"dwconv"})) == []
    assert len(find_sites(model)) == 1


def test_equalize_off_leaves_the_weights(tmp_path):
    model = _load(_block(["Relu"]), tmp_path)
    off = quantize(model, _samples(), QuantizeOptions(equalize=False))
    assert off.stats.equalization == {} and off.channel_scales == {}
    on = quantize(model, _samples(), QuantizeOptions())
    assert set(on.stats.equalization) == {"t1"}
    assert set(on.channel_scales) == {"t0", "t1"}


def test_depthwise_biases_never_overflow(tmp_path):
    """A depthwise bias huge against its kernel: the ratio of its channel is raised until the int32 bias fits with
    headroom, so the bias-overflow rule (raising weight scales) is not needed, and every int32 bias fits."""
    model = _load(_block(["Relu"], bias=3.0e3), tmp_path)
    samples = _samples()
    sites, _, ratios = _ratios(model, samples)
    r = ratios[sites[0].tensor]
    plain = _ratios(_load(_block(["Relu"]), tmp_path), samples)[2][sites[0].tensor]
    assert np.all(r >= plain) and np.any(r > plain)
    quantized = quantize(model, samples, QuantizeOptions(activations="int8"))
    assert quantized.raised_weight_scales == []
    proto = quantized.proto()
    for t in proto.graph.initializer:
        if t.data_type == TensorProto.INT32:
            values = numpy_helper.to_array(t).astype(np.int64)
            assert np.abs(values).max() < 2**31 - 1


def test_equalization_improves_a_block_with_unequal_channels(tmp_path):
    """Channels 100x apart in range before a depthwise Conv: per tensor, the small ones get a few levels; with the
    equalization the depthwise input's worst channel (the QDQ model's dequantized tensor in fp32 units, against
    fp32 in onnxruntime) is far closer."""
    model = _load(_block(["Relu6"]), tmp_path)
    samples = _samples(16)
    reference = np.concatenate([o[1] for o in _ort(model, samples, ["t1"])])
    sqnr = {}
    for equalize in (False, True):
        q = quantize(model, samples, QuantizeOptions(activations="int8", equalize=equalize))
        out = np.concatenate([o[1] for o in _ort(q.proto(), samples, [q.dequantized["t1"]])])
        out = out * q.channel_scales.get("t1", np.ones(8, np.float32)).reshape(1, -1, 1, 1)
        per_channel = np.sum(reference**2, axis=(0, 2, 3)) / np.sum((reference - out) ** 2, axis=(0, 2, 3))
        sqnr[equalize] = 10 * np.log10(per_channel.min())
    assert sqnr[True] > sqnr[False] + 12.0, sqnr


# ------------------------------------------------------------------------------------------------ Clip's scale


def test_a_conv_read_by_a_non_fusable_clip_takes_the_clips_scale(tmp_path):
    """Conv -> Clip(0, 4.5) (no TFLite fused activation): the Conv's output is quantized on the Clip's grid
    (same scale and zero point, not observed), so none of its levels go to the negative values the Clip
    discards; the QDQ model's Clip output equals fp32's within the weight and grid rounding."""
    proto = _block(["Relu6"])
    clip = next(n for n in proto.graph.node if n.op_type == "Clip")
    proto.graph.initializer.append(numpy_helper.from_array(np.float32(4.5), "four_half"))
    clip.input[2] = "four_half"
    model = _load(proto, tmp_path)
    plan = make_plan(model, frozenset(), True)
    assert "t0" not in plan.fused and plan.group("t0") == plan.group("t1") and "t0" in plan.derived
    samples = _samples(16)
    q = quantize(model, samples, QuantizeOptions(activations="int8"))
    qproto = q.proto()
    inits = {t.name: numpy_helper.to_array(t) for t in qproto.graph.initializer}
    dq = {n.output[0]: n for n in qproto.graph.node if n.op_type == "DequantizeLinear"}
    conv_dq, clip_dq = dq[q.dequantized["t0"]], dq[q.dequantized["t1"]]
    assert inits[conv_dq.input[1]] == inits[clip_dq.input[1]]
    assert int(inits[conv_dq.input[2]]) == int(inits[clip_dq.input[2]]) == -128  # the grid starts at 0
    reference = np.concatenate([o[1] for o in _ort(model, samples, ["t1"])])
    out = np.concatenate([o[1] for o in _ort(qproto, samples, [q.dequantized["t1"]])])
    out = out * q.channel_scales["t1"].reshape(1, -1, 1, 1)
    assert np.abs(out - reference).max() <= 0.05 * float(reference.max())


def test_one_calibration_pass_gives_the_rewritten_models_statistics(mobilenet):
    """Min/max reduced in the graph, calibration runs once: the fp32 model's per-channel ranges of the tensors the
    rewrite scales give the ratios and, divided by them, those tensors' statistics; they equal (to float32
    rounding) the statistics collected by running the rewritten model, and the model outputs it hands back are
    onnxruntime's fp32 outputs."""
    from edgekit.quantize.calibrate import collect_statistics
    from edgekit.quantize.pipeline import calibrate, observing_options

    model, samples = mobilenet
    options = QuantizeOptions(activations="int8", bias_correction=True)
    observe = make_plan(model, options.exclude, False)
    outputs: list = []
    one = calibrate(model, observe, samples, options, model_outputs=outputs)
    _, _, ratios = _ratios(model, samples, options)
    assert set(one.equalization) == set(ratios)
    assert all(np.allclose(one.equalization[k], ratios[k], rtol=1e-5) for k in ratios)
    rewritten = ir.from_proto(ir.to_proto(model))
    EqualizePass(ratios)(rewritten)
    two = collect_statistics(rewritten, observe, samples, observing_options(options))
    assert set(one.minmax) == set(two.minmax) and set(one.means) == set(two.means)
    for name, b in two.minmax.items():
        a = one.minmax[name]
        assert (a.updates, a.count) == (b.updates, b.count)
        # lo, hi and the means of the per-sample lo / hi, within float32 rounding of the tensor's span
        got = np.array([a.lo, a.hi, a.sum_lo / a.updates, a.sum_hi / a.updates])
        want = np.array([b.lo, b.hi, b.sum_lo / b.updates, b.sum_hi / b.updates])
        assert np.abs(got - want).max() <= 1e-4 * max(b.hi - b.lo, 1e-6), name
    for name, b in two.means.items():
        assert np.abs(one.means[name] - b).max() <= 1e-4 * float(np.abs(b).max()), name
    reference = _ort(model, samples)
    first = [o.name for o in model.graph.outputs][0]
    assert len(outputs) == len(samples)
    for got, want in zip(outputs, reference, strict=True):
        assert np.abs(got[first] - want[0]).max() <= 1e-4 * float(want[0].max() - want[0].min())
