"""The exact QDQ semantics (edgekit.core.exact): its kernels against onnxruntime and the onnx reference
evaluator, and the int8 TFLite of a real zoo network against it (LiteRT in a child process)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from edgekit.core.exact import ExactRunner, dequantize, float64_model, quantize
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from zoo import zoo_data

ROOT = Path(__file__).resolve().parents[1]


def _model(nodes, inputs, initializers, opset=19):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    spatial=st.integers(1, 3),
    group=st.sampled_from([1, 2, 4]),
    transpose=st.booleans(),
)
def test_convolutions_match_onnxruntime(data, spatial, group, transpose):
    """Conv and ConvTranspose (strides, dilations, pads, groups, 1-3 spatial axes) against onnxruntime."""
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    strides = [data.draw(st.integers(1, 2)) for _ in range(spatial)]
    dilations = [data.draw(st.integers(1, 2)) for _ in range(spatial)]
    size = [data.draw(st.integers(k * d + 1, 7)) for k, d in zip(kernel, dilations, strict=True)]
    pads = [data.draw(st.integers(0, k - 1)) for k in kernel for _ in range(2)]
    pads = pads[0::2] + pads[1::2]
    cin, cout = 2 * group, 3 * group
    x = rng.standard_normal([2, cin, *size]).astype(np.float32)
    attrs = dict(strides=strides, dilations=dilations, pads=pads, group=group)
    if transpose:
        w = rng.standard_normal([cin, cout // group, *kernel]).astype(np.float32)
        attrs["output_padding"] = [data.draw(st.integers(0, s - 1)) for s in strides]
        attrs["output_padding"] = [
            min(p, d - 1) if d > 1 else p for p, d in zip(attrs["output_padding"], dilations, strict=True)
        ]
    else:
        w = rng.standard_normal([cout, cin // group, *kernel]).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    op = "ConvTranspose" if transpose else "Conv"
    model = _model([helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)], {"x": x.shape}, {"w": w, "b": b})
    expected = _ort(model, {"x": x})
    got = ExactRunner(model).run({"x": x})["y"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    spatial=st.integers(1, 2),
    group=st.sampled_from(["one", "two", "depthwise"]),
    columns_bytes=st.sampled_from([1, 2000, 64 << 20]),
)
def test_conv_equals_the_reference_evaluator_in_float64(data, spatial, group, columns_bytes):
    """The column-stacked Conv (taps stacked in chunks of ``COLUMNS_BYTES``, one BLAS product per chunk) gives the
    onnx reference evaluator's float64 Conv to float64 rounding (1e-12 of the output's scale): the exact
    semantics do not change with the chunking (one tap, a few, all at once), groups, strides, dilations or pads."""
    from edgekit.core.exact import conv
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    kernel = [data.draw(st.integers(1, 4)) for _ in range(spatial)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(spatial)]
    dilations = [data.draw(st.integers(1, 2)) for _ in range(spatial)]
    size = [data.draw(st.integers(k * d + 1, 9)) for k, d in zip(kernel, dilations, strict=True)]
    pads = [data.draw(st.integers(0, k)) for k in kernel for _ in range(2)]
    pads = pads[0::2] + pads[1::2]
    cin = data.draw(st.integers(1, 4)) * 2
    g = {"one": 1, "two": 2, "depthwise": cin}[group]
    cout = g * data.draw(st.integers(1, 3)) if group != "depthwise" else cin
    x = rng.standard_normal([2, cin, *size])
    w = rng.standard_normal([cout, cin // g, *kernel])
    b = rng.standard_normal(cout)
    attrs = dict(strides=strides, dilations=dilations, pads=pads, group=g)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = conv(x, w, b, **attrs, columns_bytes=columns_bytes)
    assert got.dtype == np.float64 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12 * max(1.0, np.abs(expected).max()))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_auto_pad_and_output_shape_match_onnxruntime(auto_pad):
    rng = np.random.default_rng(3)
    x = rng.standard_normal([1, 4, 5, 6]).astype(np.float32)
    w = rng.standard_normal([4, 3, 3, 3]).astype(np.float32)
    cases = [
        ("ConvTranspose", {"strides": [2, 2], "auto_pad": auto_pad}),
        ("ConvTranspose", {"strides": [2, 2], "output_shape": [10, 12]}),
        ("Conv", {"strides": [2, 2], "auto_pad": auto_pad}),
    ]
    for op, attrs in cases:
        weights = w if op == "ConvTranspose" else w.transpose(1, 0, 2, 3).copy()
        model = _model([helper.make_node(op, ["x", "w"], ["y"], **attrs)], {"x": x.shape}, {"w": weights})
        np.testing.assert_allclose(ExactRunner(model).run({"x": x})["y"], _ort(model, {"x": x}), atol=1e-4)


def test_quantize_rounds_half_to_even_and_saturates():
    scale = np.float32(0.25)  # a power of two: every x / scale below is exact
    x = np.array([0.125, 0.375, 0.625, -0.125, -0.375, 40.0, -40.0], np.float64)
    assert quantize(x, scale, np.int8(0)).tolist() == [0, 2, 2, 0, -2, 127, -128]
    assert quantize(x, scale, np.uint8(128)).tolist() == [128, 130, 130, 128, 126, 255, 0]


def test_dequantize_per_axis_matches_reference_evaluator():
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(1)
    q = rng.integers(-128, 128, (4, 3, 2, 2)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, 4).astype(np.float32)
    zp = np.zeros(4, np.int8)
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0)],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for a, n in ((q, "q"), (scale, "s"), (zp, "z"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    expected = ReferenceEvaluator(model).run(None, {})[0]
    np.testing.assert_array_equal(dequantize(q, scale, zp, 0).astype(np.float32), expected)
    assert ExactRunner(model).run({})["y"].dtype == np.float32


def test_jitter_flips_only_values_within_it_of_a_half_step():
    """``jitter`` (the verification's float32 noise floor) moves a value by at most that fraction before it is
    quantized: values that close to a half step may flip one step, the others keep the exact level."""
    from edgekit.core.exact import FLOAT32_JITTER

    scale, zp = np.float32(0.25), np.int8(0)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    model = _model(nodes, {"x": [4000]}, {"s": np.array(scale), "z": np.array(zp)})
    rng = np.random.default_rng(3)
    x = rng.uniform(-30, 30, 4000).astype(np.float32)
    x[:100] = ((np.round(x[:100] / scale) + 0.5) * scale).astype(np.float32)  # exactly on a half step
    exact = ExactRunner(model).run({"x": x})["y"]
    jittered = ExactRunner(model, jitter=FLOAT32_JITTER, seed=1).run({"x": x})["y"]
    steps = np.abs(jittered - exact) / scale
    assert steps.max() == 1 and np.count_nonzero(steps[:100]) > 20  # half steps go either way
    distance = np.abs(np.abs(x / scale - np.floor(x / scale)) - 0.5)
    assert np.all(distance[steps > 0] <= np.abs(x[steps > 0] / scale) * FLOAT32_JITTER)
    np.testing.assert_array_equal(ExactRunner(model, jitter=0.0).run({"x": x})["y"], exact)


def test_observer_sees_each_quantized_tensor_and_its_replacement_flows_on():
    """``observe`` gets each QuantizeLinear's output name, exact integers and unrounded steps (x / scale); what it
    returns is what the next ops read (``benchmarks/int8_trace.py --exact`` puts LiteRT's tensors there)."""
    s, z = np.array(np.float32(0.5)), np.array(np.int8(0))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q1"]),
        helper.make_node("DequantizeLinear", ["q1", "s", "z"], ["d1"]),
        helper.make_node("Add", ["d1", "d1"], ["a"]),
        helper.make_node("QuantizeLinear", ["a", "s", "z"], ["q2"]),
        helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"]),
    ]
    model = _model(nodes, {"x": [4]}, {"s": s, "z": z})
    x = np.array([0.3, -1.2, 2.0, 0.76], np.float32)
    seen = {}

    def observe(name, q, steps):
        seen[name] = (q.copy(), steps.copy())
        return q + np.int8(1) if name == "q1" else q

    y = ExactRunner(model, observe=observe).run({"x": x})["y"]
    assert list(seen) == ["q1", "q2"]
    np.testing.assert_allclose(seen["q1"][1], x.astype(np.float64) / 0.5)
    np.testing.assert_array_equal(seen["q1"][0], np.round(x / 0.5).astype(np.int8))
    np.testing.assert_array_equal(y, 2 * (np.round(x / 0.5) + 1) * 0.5)  # q2 read the replaced q1
    np.testing.assert_array_equal(ExactRunner(model).run({"x": x})["y"], 2 * np.round(x / 0.5) * 0.5)


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2], "strides": [2, 2]},  # YuNet's
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # ResNet's stem
        {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [0, 1, 2, 0], "dilations": [2, 1]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},  # the reference's own loop
        {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},  # the reference's own loop
    ],
)
def test_max_pool_matches_reference_evaluator(attrs):
    """ExactRunner's vectorised MaxPool gives the reference evaluator's values (and keeps its loop for the
    attributes it does not take)."""
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(3).standard_normal((2, 3, 9, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ExactRunner(model).run({"x": x})["y"], expected)


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},  # GoogLeNet's branch pool
        {"kernel_shape": [3, 3], "strides": [2, 2]},  # GoogLeNet's stage pools
        {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # a last window in the end padding
        {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [0, 1, 1, 0], "dilations": [2, 1]},
    ],
)
def test_ceil_mode_max_pool_matches_onnxruntime(attrs):
    """With ceil_mode the onnx reference evaluator gave GoogLeNet's stride-1 pool a row too many (its Concat
    then failed); the vectorised MaxPool takes ceil_mode and gives onnxruntime's shapes and values."""
    x = np.random.default_rng(4).standard_normal((1, 3, 9, 8)).astype(np.float32)
    model = _model([helper.make_node("MaxPool", ["x"], ["y"], ceil_mode=1, **attrs)], {"x": x.shape}, {})
    expected = _ort(model, {"x": x})
    np.testing.assert_array_equal(ExactRunner(model).run({"x": x})["y"], expected)


@pytest.mark.parametrize(
    "attrs",
    [
        {
            "kernel_shape": [3, 3],
            "strides": [1, 1],
            "pads": [1, 1, 1, 1],
            "count_include_pad": 1,
        },  # Inception's
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # STDC's, pads excluded
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1], "dilations": [2, 1]},
        {
            "kernel_shape": [3, 3],
            "strides": [2, 2],
            "pads": [1, 1, 1, 1],
            "ceil_mode": 1,
        },  # the reference's loop
        {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"},  # the reference's own loop
    ],
)
def test_average_pool_matches_reference_evaluator(attrs):
    """ExactRunner's vectorised AveragePool (a sum of strided views, divided by the window's size or by its taps
    inside the input) gives the reference evaluator's values, float64 inputs within their last bits (a sum in
    another order), and keeps the reference's loop for the attributes it does not take."""
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(6).standard_normal((2, 3, 9, 8))
    graph = helper.make_graph(
        [helper.make_node("AveragePool", ["x"], ["y"], **attrs)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, list(x.shape))],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    runner = ExactRunner(model)
    got = runner._evaluator.run(None, {"x": x})[0]  # float64 out, before run()'s float32
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=1e-15)


def test_folded_weight_dequantization_gives_the_same_values_bit_for_bit():
    """ExactRunner dequantizes constant weights once (``fold_constant_dequantize``): a per-channel int8 Conv and a
    per-tensor uint8 MatMul give exactly what the reference evaluator gives dequantizing them on every run."""
    from edgekit.core.exact import _ops, fold_constant_dequantize
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (6, 3, 3, 3), dtype=np.int8)
    inits = {
        "s_x": np.float32(0.02),
        "z_x": np.uint8(128),
        "w_q": w,
        "s_w": rng.uniform(0.001, 0.01, 6).astype(np.float32),
        "z_w": np.zeros(6, np.int8),
        "b_q": rng.integers(-500, 500, 6, dtype=np.int32),
        "s_b": (0.02 * rng.uniform(0.001, 0.01, 6)).astype(np.float32),
        "m_q": rng.integers(0, 256, (5, 4), dtype=np.uint8),
        "s_m": np.float32(0.003),
        "z_m": np.uint8(131),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s_x", "z_x"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w_q", "s_w", "z_w"], ["w"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "s_b"], ["b"], axis=0),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "s_x", "z_x"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "s_x", "z_x"], ["cd"]),
        helper.make_node("DequantizeLinear", ["m_q", "s_m", "z_m"], ["m"]),
        helper.make_node("MatMul", ["cd", "m"], ["y"]),
    ]
    model = _model(nodes, {"x": [1, 3, 6, 5]}, inits)
    x = rng.standard_normal([1, 3, 6, 5]).astype(np.float32)
    folded = fold_constant_dequantize(float64_model(model))
    assert [n.op_type for n in folded.graph.node].count("DequantizeLinear") == 2  # the activations' only
    per_run = ReferenceEvaluator(float64_model(model), new_ops=_ops(float32_inputs=frozenset({"x"})))
    expected = per_run.run(None, {"x": x.astype(np.float64)})[0]
    got = ExactRunner(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, expected.astype(np.float32))
    np.testing.assert_array_equal(
        ReferenceEvaluator(folded, new_ops=_ops(float32_inputs=frozenset({"x"}))).run(
            None, {"x": x.astype(np.float64)}
        )[0],
        expected,
    )


def test_erf_is_computed_in_float64():
    """Erf (BERT's and ViT's GELU) in the exact runner is float64: the reference evaluator's own rounds every value
    to float32 (3e-8 off), which moves values near a half step of the QuantizeLinear after it."""
    import math

    from edgekit.core.exact import _ops
    from onnx.reference import ReferenceEvaluator

    x = np.random.default_rng(2).standard_normal(2000) * 2
    expected = np.array([math.erf(v) for v in x])
    model = _model([helper.make_node("Erf", ["x"], ["y"])], {"x": [2000]}, {})
    got = ReferenceEvaluator(float64_model(model), new_ops=_ops()).run(None, {"x": x})[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=4e-16, atol=1e-300)
    from edgekit.core.exact import erf

    x32 = x.astype(np.float32)  # another dtype keeps it
    got32 = erf(x32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, np.array([math.erf(v) for v in x32.astype(np.float64)]), rtol=1.2e-7)


def test_float64_model_widens_every_float_tensor():
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.float32([2.0]))),
        helper.make_node("Mul", ["x", "c"], ["m"]),
        helper.make_node("Cast", ["m"], ["k"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["k", "w"], ["y"]),
    ]
    model = _model(nodes, {"x": [3]}, {"w": rng.standard_normal(3).astype(np.float32)})
    wide = float64_model(model)
    assert wide.graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    assert wide.graph.initializer[0].data_type == TensorProto.DOUBLE
    assert wide.graph.node[0].attribute[0].t.data_type == TensorProto.DOUBLE
    assert wide.graph.node[2].attribute[0].i == TensorProto.DOUBLE
    x = rng.standard_normal(3).astype(np.float32)
    np.testing.assert_allclose(ExactRunner(model).run({"x": x})["y"], _ort(model, {"x": x}), rtol=1e-6)


def _zoo_entry(name: str) -> dict:
    return next(e for e in zoo_data.entries() if e["name"] == name)


def test_int8_tflite_computes_the_exact_semantics(tmp_path):
    """EfficientNet-B0 (zoo, seeded, SiLU/SE): the arm-cpu int8 .tflite on LiteRT gives the QDQ model's exact
    semantics on every evaluation sample, and onnxruntime's float32 run of the same QDQ file stays close to
    them (it rounds only values near a half step differently)."""
    import edgekit
    from edgekit.core import isolated

    entry = _zoo_entry("efficientnet_b0")
    calib, evaluation = zoo_data.write_data(entry, tmp_path / "data", calib=16, evaluation=6)
    model = zoo_data.MODELS / entry["file"]
    qdq = tmp_path / "model.qdq.onnx"
    edgekit.quantize_model(model, calib, options=edgekit.QuantizeOptions(activations="int8"), output=qdq)
    result = edgekit.deploy(model, ["arm-cpu"], output=tmp_path / "out", calib=calib, precision="int8")
    result.raise_for_failures()
    bundle = result.bundle("arm-cpu").path
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["verification"]["reference"].startswith("the QDQ model's exact semantics")

    data = np.load(evaluation)
    samples = [{k: data[k][i : i + 1] for k in data.files} for i in range(len(data[data.files[0]]))]
    tflite = isolated.call(_run_bundle, str(bundle), samples, what="LiteRT", doing="running the bundle")
    exact = ExactRunner(onnx.load(qdq))
    node_by_node = _ort_session(qdq)
    for sample, got in zip(samples, tflite, strict=True):
        want = exact.run(sample)
        for name, value in got.items():
            np.testing.assert_array_equal(value, want[name])
            float32 = node_by_node(sample)[name]
            cosine = float(
                np.sum(float32 * want[name]) / np.sqrt(np.sum(float32**2) * np.sum(want[name] ** 2))
            )
            assert cosine > 0.99


def _ort_session(path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, feeds), strict=True))


def _run_bundle(folder: str, samples: list[dict], onnx_shapes: dict | None = None) -> list[dict]:
    """The bundle's .tflite on LiteRT (the device agent's runner), float outputs in the ONNX layout (of
    ``onnx_shapes``, by output name, where a layout differs), in a child."""
    from edgekit.device_agents.bundle import read_bundle
    from edgekit.device_agents.runtimes import open_runner
    from edgekit.device_eval import from_device, to_device

    bundle = read_bundle(Path(folder))
    runner = open_runner(bundle, threads=1)
    ins, outs = list(bundle.manifest.inputs), list(bundle.manifest.outputs)
    results = []
    for feeds in samples:
        got, _ = runner.run([to_device(feeds[s.name], s) for s in ins])
        results.append(
            {
                s.name: from_device(o, s, (onnx_shapes or {}).get(s.name, o.shape))
                for s, o in zip(outs, got, strict=True)
            }
        )
    return results


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_over_a_long_axis_matches_onnxruntime(axis):
    """RoBERTa's token-type lookup: GatherElements over 514 positions (onnx's reference loses the index's columns
    beyond np.choose's 32/64 choices), negative indices included."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((514, 3) if axis == 0 else (3, 514)).astype(np.float32)
    indices = rng.integers(-514, 514, (16, 3) if axis == 0 else (3, 16)).astype(np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    model = _model([node], {"x": data.shape}, {"i": indices})
    got = ExactRunner(model).run({"x": data})["y"]
    np.testing.assert_array_equal(got, _ort(model, {"x": data}))


@pytest.mark.parametrize("name", ["paddle_mobilenet_v3_small", "ppocr_mobile_v2_cls"])
def test_paddle_batchnorm_with_momentum_is_the_inference_form(name):
    """paddle2onnx writes ``momentum`` (0.9) on every inference BatchNormalization; onnx's reference evaluator
    then normalised with the batch's statistics (the float64 reference of the committed Paddle MobileNetV3 was
    0.45 of the output range off onnxruntime, the real PP-OCR classifier's 0.25). A zoo Paddle model with
    BatchNorms the load keeps (they follow Adds and HardSigmoids) and the real PP-OCR text-direction classifier."""
    import onnxruntime as ort

    entry = {e["name"]: e for e in zoo_data.entries(ROOT / "tests" / "zoo" / "models" / "zoo.json")}[name]
    path = ROOT / "tests" / "zoo" / "models" / entry["file"]
    proto = onnx.load(str(path))
    momenta = [a.f for n in proto.graph.node if n.op_type == "BatchNormalization" for a in n.attribute]
    assert any(abs(m - 0.9) < 1e-6 for m in momenta)
    feeds = zoo_data.make_arrays(entry, 1, 3)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ExactRunner(proto).run(feeds)
    for out, ref in zip(proto.graph.output, want, strict=True):
        assert np.abs(got[out.name] - ref).max() <= 1e-5 * np.ptp(ref)


@pytest.mark.parametrize("size", [5, 3, 1])
def test_lrn_sums_over_the_channel_window_as_onnxruntime(size):
    """Caffe's LRN (AlexNet, GoogLeNet: size 5, alpha 1e-4, beta 0.75) on one sample of Caffe-scale values.
    onnx's reference evaluator loops over the batch axis instead of the channels: with one sample every channel
    but the first was divided by bias ** beta alone, and the int8 .tflite of the ONNX zoo's rebuilt CaffeNet
    "differed from its QDQ model" at cosine 0.76."""
    x = np.random.default_rng(size).uniform(-120, 130, (1, 7, 3, 4)).astype(np.float32)
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=1e-4, beta=0.75, bias=1.0)
    model = _model([node], {"x": x.shape}, {})
    want = _ort(model, {"x": x})
    got = ExactRunner(model).run({"x": x})["y"]
    assert np.abs(got - want).max() <= 1e-5 * np.ptp(want)


@pytest.mark.parametrize("shape", [(2, 5, 9), (1, 3, 4, 6), (1, 2, 3, 4, 5)], ids=["1d", "2d", "3d"])
def test_global_max_pool_keeps_the_channels_as_onnxruntime(shape):
    """Magika's ``[N, 512, L]`` GlobalMaxPool over the byte positions: onnx's reference evaluator takes the max
    over the last two axes whatever the rank, so a 1-D (or 3-D) input lost its channels ([N, 1] instead of
    [N, 512, 1]) and the real Magika's QDQ model had no exact semantics (the Squeeze after it raised)."""
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    model = _model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], {"x": x.shape}, {})
    got = ExactRunner(model).run({"x": x})["y"]
    np.testing.assert_array_equal(got, _ort(model, {"x": x}))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("rule", ["half_pixel", "output_half_pixel"])
def test_roi_align_equals_the_reference_evaluator_bit_for_bit(dtype, mode, sampling_ratio, rule):
    """``exact.roi_align`` (the boxes, bins and channels elementwise) gives the onnx reference evaluator's RoiAlign-16
    values bit for bit in float32 and float64: the same operations in the same order, per box's sampling grid
    (``sampling_ratio`` 0: each box's own), on boxes inside, across and outside the map, reversed, and under one
    cell (output_half_pixel makes those one cell, in Python doubles)."""
    from edgekit.core.exact import roi_align
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 12, 10)).astype(dtype)
    x1, y1 = rng.uniform(-20, 150, 14), rng.uniform(-20, 150, 14)
    w, h = rng.uniform(0, 80, 14), rng.uniform(0, 80, 14)
    w[:3], h[2:5] = rng.uniform(0, 10, 3), rng.uniform(0, 10, 3)  # under a cell at scale 1/16
    rois = np.stack([x1, y1, x1 + w, y1 + h], 1).astype(dtype)
    rois[5] = rois[5, [2, 3, 0, 1]]
    batch = rng.integers(0, 2, 14)
    attrs = {"mode": mode, "output_height": 4, "output_width": 3, "sampling_ratio": sampling_ratio}
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node(
        "RoiAlign",
        ["x", "rois", "b"],
        ["y"],
        spatial_scale=0.0625,
        coordinate_transformation_mode=rule,
        **attrs,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", elem, None),
            helper.make_tensor_value_info("rois", elem, None),
            helper.make_tensor_value_info("b", TensorProto.INT64, None),
        ],
        [helper.make_tensor_value_info("y", elem, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    expected = ReferenceEvaluator(model).run(None, {"x": x, "rois": rois, "b": batch})[0]
    got = roi_align(x, rois, batch, spatial_scale=0.0625, half_pixel=rule == "half_pixel", **attrs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_roi_align_10_is_output_half_pixel_as_onnxruntime():
    """RoiAlign at opsets 10-15 has no coordinate_transformation_mode: its rule is output_half_pixel (onnxruntime's,
    torchvision's ``aligned=False``). onnx's reference evaluator reads it with opset 16's half_pixel default (half a
    cell off); ExactRunner and the selection tail's run follow the opset."""
    from edgekit.core.exact import kernel_ops
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(8)
    feeds = {
        "x": rng.standard_normal((1, 3, 12, 10)).astype(np.float32),
        "rois": np.array([[10, 20, 90, 100], [0, 0, 30, 40], [100, 5, 180, 60]], np.float32),
        "b": np.zeros(3, np.int64),
    }
    node = helper.make_node(
        "RoiAlign",
        ["x", "rois", "b"],
        ["y"],
        output_height=4,
        output_width=3,
        sampling_ratio=2,
        spatial_scale=0.0625,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("rois", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("b", TensorProto.INT64, None),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    want = _ort(model, feeds)
    got = ReferenceEvaluator(model, new_ops=kernel_ops()).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ExactRunner(model).run(feeds)["y"], want, rtol=0, atol=1e-6)
