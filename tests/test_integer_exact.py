"""Where the int8 .tflite and its QDQ model's exact semantics used to part, and the forms that keep them equal:
a BatchNormalization no Conv absorbs (a depthwise 1x1 Conv: one rounding), an even-sized AveragePool (a depthwise
Conv: no .5 ties at its input's scale), a model input on a pixel grid (a range widened off the grid's half steps).
Each network is quantized (int8 activations) and deployed to arm-cpu; its .tflite runs on LiteRT in a child
process and is compared with the QDQ model's exact semantics (edgekit.core.exact) and the fp32 model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from edgekit.core.exact import ExactRunner
from edgekit.core.model import load_proto
from onnx import TensorProto, helper, numpy_helper

RNG = np.random.default_rng(7)


def _w(*shape, scale=0.3):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes, initializers, shape=(1, 3, 12, 12), opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _two_convs_then(tail, tail_inits):
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["ra", "b"], ["s"]),
        *tail,
    ]
    inits = {"w1": _w(4, 3, 3, 3), "b1": _w(4), "w2": _w(4, 3, 3, 3), "b2": _w(4), **tail_inits}
    return _model(nodes, inits)


def _pixel_images(n, shape=(1, 3, 12, 12)):
    """Inputs as (p / 255 - 0.5) / 0.5 of 8-bit pixels: the grid whose half steps the input scale would hit."""
    pixels = RNG.integers(0, 256, (n, *shape[1:]))
    pixels[..., 0, 0], pixels[..., 0, 1] = 0, 255  # the grid's full range, as real photos reach it
    return ((pixels / 255.0 - 0.5) / 0.5).astype(np.float32)


def _ops(proto: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in onnx.shape_inference.infer_shapes(proto).graph.node]


def _deploy_and_compare(model: onnx.ModelProto, tmp_path, samples: int = 8, shape=(1, 3, 12, 12)):
    """int8 QDQ and arm-cpu .tflite of ``model``: (QDQ proto, exact outputs, LiteRT outputs) on fresh inputs."""
    import edgekit
    from edgekit.core import isolated

    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=_pixel_images(16, shape))
    qdq = tmp_path / "model.qdq.onnx"
    edgekit.quantize_model(path, calib, options=edgekit.QuantizeOptions(activations="int8"), output=qdq)
    result = edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", calib=calib, precision="int8")
    result.raise_for_failures()
    feeds = [{"x": x[None]} for x in _pixel_images(samples, shape)]
    from test_exact import _run_bundle

    proto = onnx.load(qdq)
    exact = ExactRunner(proto)
    want = [exact.run(f)["y"] for f in feeds]
    bundle = str(result.bundle("arm-cpu").path)
    tflite = isolated.call(
        _run_bundle, bundle, feeds, {"y": want[0].shape}, what="LiteRT", doing="running the bundle"
    )
    return proto, want, [t["y"] for t in tflite], result


def test_standalone_batchnorm_is_a_depthwise_conv_and_int8_exact(tmp_path):
    c = 4
    bn = {
        "g": RNG.uniform(0.5, 2, c).astype(np.float32),
        "be": _w(c),
        "m": _w(c),
        "v": RNG.uniform(0.5, 2, c).astype(np.float32),
    }
    model = _two_convs_then([helper.make_node("BatchNormalization", ["s", "g", "be", "m", "v"], ["y"])], bn)
    prepared = onnx.shape_inference.infer_shapes(onnx.ModelProto.FromString(_prepared(model)))
    assert "BatchNormalization" not in _ops(prepared)
    depthwise = [n for n in prepared.graph.node if n.op_type == "Conv" and _group(n) == c]
    assert len(depthwise) == 1
    _same_as_onnxruntime(model, prepared)
    _, exact, tflite, _ = _deploy_and_compare(model, tmp_path)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def test_standalone_batchnorm_3d_is_a_depthwise_conv_and_runs_on_openvino_int8(tmp_path):
    """MONAI's DenseNet121 (spatial_dims=3): a pre-activation BatchNormalization after each dense layer's Concat.
    Left a BatchNormalization between DequantizeLinear and QuantizeLinear, OpenVINO's CPU plugin aborted (SIGSEGV)
    in query_model on the intel-vpu int8 model; as a depthwise 1x1x1 Conv it runs, and the .tflite is exact."""
    c, shape = 8, (1, 3, 4, 6, 6)
    bn = {
        "g": RNG.uniform(0.5, 2, c).astype(np.float32),
        "be": _w(c),
        "m": _w(c),
        "v": RNG.uniform(0.5, 2, c).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1] * 6),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["b"], pads=[1] * 6),
        helper.make_node("Concat", ["ra", "b"], ["s"], axis=1),
        helper.make_node("BatchNormalization", ["s", "g", "be", "m", "v"], ["n"]),
        helper.make_node("Relu", ["n"], ["y"]),
    ]
    inits = {"w1": _w(4, 3, 3, 3, 3), "b1": _w(4), "w2": _w(4, 3, 3, 3, 3), "b2": _w(4), **bn}
    model = _model(nodes, inits, shape)
    prepared = onnx.shape_inference.infer_shapes(onnx.ModelProto.FromString(_prepared(model)))
    assert "BatchNormalization" not in _ops(prepared)
    assert len([n for n in prepared.graph.node if n.op_type == "Conv" and _group(n) == c]) == 1
    _same_as_onnxruntime(model, prepared, shape)
    _, exact, tflite, _ = _deploy_and_compare(model, tmp_path, shape=shape)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)
    import edgekit

    calib = tmp_path / "calib.npz"  # written by _deploy_and_compare
    result = edgekit.deploy(tmp_path / "model.onnx", ["intel-vpu"], output=tmp_path / "ov", calib=calib,
                            precision="int8")  # fmt: skip
    result.raise_for_failures()  # verified against the QDQ model by the target


@pytest.mark.parametrize(
    ("attrs", "becomes_conv"),
    [
        ({"kernel_shape": [2, 2], "strides": [2, 2]}, True),
        ({"kernel_shape": [3, 2], "strides": [3, 2]}, True),  # PP-OCRv4 rec's
        ({"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1}, True),
        ({"kernel_shape": [3, 3], "strides": [2, 2]}, False),  # odd: never a tie
        ({"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]}, False),  # the border divides by fewer values
        # ceil_mode on 12 x 12: the 2x2/2 windows tile it, so it changes nothing (SCRFD's ResNetV1e shortcut) ...
        ({"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}, True),
        # ... but a 4x2/3x2 window leaves a partial last row, which divides by fewer values
        ({"kernel_shape": [4, 2], "strides": [3, 2], "ceil_mode": 1}, False),
    ],
)
def test_even_averagepool_becomes_a_depthwise_conv(attrs, becomes_conv):
    model = _two_convs_then([helper.make_node("AveragePool", ["s"], ["y"], **attrs)], {})
    prepared = onnx.ModelProto.FromString(_prepared(model))
    assert ("AveragePool" not in _ops(prepared)) == becomes_conv
    _same_as_onnxruntime(model, prepared)


@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_averagepool_ties_int8_exact(tmp_path, ceil_mode):
    """A 2x2 mean of int8 steps is a .5 tie a quarter of the time: as a depthwise Conv the .tflite is exact
    (also with ceil_mode where the windows tile the input: ResNet-D's AvgPool(2, 2, ceil_mode=True) shortcut)."""
    model = _two_convs_then(
        [
            helper.make_node(
                "AveragePool", ["s"], ["y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=ceil_mode
            )
        ],
        {},
    )
    _, exact, tflite, _ = _deploy_and_compare(model, tmp_path)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def test_input_scale_keeps_pixel_grids_off_half_steps(tmp_path):
    """Every 8-bit pixel level of (p / 255 - 0.5) / 0.5 quantizes the same way in QuantizeLinear (ties to even)
    and in TFLite's QUANTIZE (ties away from zero): none lands on a half step, and the .tflite (float input,
    QUANTIZE inside) equals the exact semantics."""
    model = _two_convs_then([helper.make_node("Identity", ["s"], ["y"])], {})
    qdq, exact, tflite, _ = _deploy_and_compare(model, tmp_path)
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    first = next(n for n in qdq.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    scale = float(inits[first.input[1]])
    levels = (np.arange(256) / 255.0 - 0.5) / 0.5
    fractions = np.abs(np.float32(levels) / np.float32(scale)) % 1.0
    assert np.min(np.abs(fractions - 0.5)) > 1e-5  # float32 rounds x / scale within 1e-5 of a step
    assert abs(scale / (2.0 / 255.0) - 1.0) < 1e-3  # the range barely moved
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def _token_projections(bias: bool) -> onnx.ModelProto:
    """Two projections of a [1, S, K] token tensor as torch exports nn.Linear: Add(bias, MatMul(x, W))."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["b1", "m1"], ["h"]) if bias else helper.make_node("Identity", ["m1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m2"]),
        helper.make_node("Add", ["b2", "m2"], ["y"]) if bias else helper.make_node("Identity", ["m2"], ["y"]),
    ]
    inits = {"w1": _w(16, 24), "b1": _w(24), "w2": _w(24, 8), "b2": _w(8)}
    return _model(nodes, inits if bias else {"w1": inits["w1"], "w2": inits["w2"]}, shape=(1, 12, 16))


def test_token_projection_bias_is_the_fully_connected_bias_and_int8_exact(tmp_path):
    """A projection of [1, S, K] tokens plus its bias is one layer, Reshape -> Gemm -> Reshape: int8 computes
    Q(x W + b) with an int32 bias (one rounding), not Q(Q(x W) + b) through an int8 ADD, whose XNNPACK kernel
    rounded values 3e-5 of a step above a half step down (all-MiniLM-L6-v2's first query projection: 0.9951 ->
    0.9984 against the exact semantics at 128 tokens). Without a bias the MatMul stays as it is."""
    import onnxruntime as ort

    model = _token_projections(bias=True)
    prepared = onnx.ModelProto.FromString(_prepared(model))
    assert _ops(prepared) == ["Reshape", "Gemm", "Reshape", "Relu", "Reshape", "Gemm", "Reshape"]
    x = _pixel_images(1, (1, 12, 16))
    want, got = (
        ort.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0] for m in (model, prepared)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    no_bias = _ops(onnx.ModelProto.FromString(_prepared(_token_projections(bias=False))))
    assert no_bias.count("MatMul") == 2 and "Gemm" not in no_bias

    qdq, exact, tflite, result = _deploy_and_compare(model, tmp_path, shape=(1, 12, 16))
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    producers = {o: n for n in qdq.graph.node for o in n.output}
    gemms = [n for n in qdq.graph.node if n.op_type == "Gemm"]
    assert len(gemms) == 2 and "Add" not in _ops(qdq)
    for gemm in gemms:
        bias = producers[gemm.input[2]]
        assert bias.op_type == "DequantizeLinear" and inits[bias.input[0]].dtype == np.int32
    manifest = json.loads((result.bundle("arm-cpu").path / "manifest.json").read_text())
    counts = manifest["verification"]["op_counts"]
    assert counts["FULLY_CONNECTED"] == 2 and "ADD" not in counts
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def test_batch_matmul_constant_is_symmetric_in_the_qdq_model_too(tmp_path):
    """NanoDet's distribution integral, Softmax(x) times the constant [0, 1, ..., 7]: a BATCH_MATMUL whose int8
    constant operand TFLite's kernels read with zero point 0 (``symmetric_constants``). The QDQ model quantizes it
    symmetric itself, so the .tflite computes with the constant the QDQ model holds (asymmetric, the converter
    requantized it: NanoDet-Plus 416 had 4 % of the integral's values one step off, up to 0.05 step from a tie)."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "project"], ["y"]),
    ]
    model = _model(nodes, {"project": np.arange(8, dtype=np.float32)}, shape=(1, 16, 8))
    qdq, exact, tflite, result = _deploy_and_compare(model, tmp_path, shape=(1, 16, 8))
    inits = {t.name: numpy_helper.to_array(t) for t in qdq.graph.initializer}
    producers = {o: n for n in qdq.graph.node for o in n.output}
    matmul = next(n for n in qdq.graph.node if n.op_type == "MatMul")
    constant = producers[matmul.input[1]]
    assert constant.op_type == "DequantizeLinear" and inits[constant.input[0]].dtype == np.int8
    assert len(constant.input) < 3 or not inits[constant.input[2]].any()  # zero point 0
    manifest = json.loads((result.bundle("arm-cpu").path / "manifest.json").read_text())
    assert not any("asymmetric" in note for note in manifest["verification"]["converter_notes"])
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def _prepared(model: onnx.ModelProto) -> bytes:
    import onnx_ir as ir

    return ir.to_proto(load_proto(model)).SerializeToString()


def _group(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "group"), 1)


def _same_as_onnxruntime(model: onnx.ModelProto, prepared: onnx.ModelProto, shape=(1, 3, 12, 12)) -> None:
    import onnxruntime as ort

    x = _pixel_images(2, shape)
    for proto in (model, prepared):
        assert ort.InferenceSession(proto.SerializeToString()).get_inputs()[0].name == "x"
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x[:1]})[0]
    got = ort.InferenceSession(prepared.SerializeToString()).run(None, {"x": x[:1]})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _quantize_dequantize(scale: float, zero_point: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    inits = {"s": np.array(scale, np.float32), "z": np.array(zero_point, np.int8)}
    return _model(nodes, inits, shape=(1, 4096), opset=19)


def _near_half_steps(scale: float, n: int) -> np.ndarray:
    """float32 values whose quotient by ``scale`` lies within a few ulps of a half step, plus values beyond the
    int8 range, across the range."""
    s = np.float32(scale)
    halves = (np.arange(-140, 140) + np.float32(0.5)).astype(np.float32) * s
    values = [np.nextafter(halves, np.float32(np.sign(k) * np.inf)) for k in (-1, 1)]
    for _ in range(2):
        values += [np.nextafter(v, np.float32(np.inf)) for v in values[-2:]]
        values += [np.nextafter(v, np.float32(-np.inf)) for v in values[-4:-2]]
    flat = np.concatenate([halves, *values]).astype(np.float32)
    return np.resize(flat, n).reshape(1, n)


def test_float_input_quantizes_as_quantizelinear():
    """A float input's QUANTIZE in the arm-cpu .tflite is DIV, ROUND, MUL, QUANTIZE: LiteRT gives onnxruntime's
    QuantizeLinear (x / scale in float32, half to even) on values within ulps of a half step, where TFLite's own
    QUANTIZE (x times 1 / scale, half away from zero; the .tflite without the pass) lands on the other step; the
    exact runner divides a float32 input in float32 too."""
    import onnxruntime as ort
    from edgekit.core import isolated
    from edgekit.core.litert_run import run_tflite_samples
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    scale, zero_point = 0.018658448, -14
    model = _quantize_dequantize(scale, zero_point)
    x = _near_half_steps(scale, 4096)
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ExactRunner(model).run({"x": x})["y"], want)
    outputs = {}
    for target in ("arm-cpu", "nnapi"):  # nnapi with float I/O: the plain QUANTIZE
        result = convert(model, ConvertOptions(target=target))
        ops = list(result.op_counts)
        assert ("DIV" in ops and "ROUND" in ops) == (target == "arm-cpu"), ops
        outputs[target] = isolated.call(
            run_tflite_samples, result.data, result.inputs, result.outputs, [{"x": x}],
            what="LiteRT", doing="running the converted model",
        )[0]["y"]  # fmt: skip
    np.testing.assert_array_equal(outputs["arm-cpu"], want)
    assert np.count_nonzero(outputs["nnapi"] != want) > 0  # what the pass is for


@pytest.mark.parametrize("channels", [True, False])
def test_prelu_is_a_table_per_slope_and_int8_exact(tmp_path, channels):
    """TFLite's int8 PRELU multiplies its negative side by input x alpha / output scale (1/125 at MTCNN P-Net's last
    PReLU) with MultiplyByQuantizedMultiplier, which rounds to 2^-shift of a step before rounding to the step: values
    within 1/128 of a half step came out one step off the QDQ model (0.7 % of P-Net's, its boxes at cosine 0.9983
    at 240x320). As one 256-level table per slope value (CAST, ADD of 128 + 256 x channel, GATHER) the .tflite
    equals the exact semantics; a single slope is one table."""
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    c = 6
    slope = RNG.uniform(-0.2, 0.6, (c, 1, 1)) if channels else np.array([0.23])
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("PRelu", ["a", "slope"], ["p"]),
        helper.make_node("Conv", ["p", "w2", "b2"], ["y"]),
    ]
    inits = {
        "w1": _w(c, 3, 3, 3),
        "b1": _w(c),
        "slope": slope.astype(np.float32),
        "w2": _w(4, c, 1, 1),
        "b2": _w(4),
    }
    shape = (1, 3, 32, 32)
    qdq, exact, tflite, _ = _deploy_and_compare(
        _model(nodes, inits, shape=shape), tmp_path, samples=8, shape=shape
    )
    ops = convert(qdq, ConvertOptions(target="arm-cpu")).op_counts
    assert "PRELU" not in ops and ops.get("GATHER") == 1
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def test_pad_by_minus_inf_before_maxpool_is_its_pads(tmp_path):
    """timm's MaxPool2dSame (EfficientDet tf_ variants' BiFPN downsampling) pads by -inf, then max-pools: the Pad
    becomes the MaxPool's own pads (the same maximum), so calibration never sees -inf (its zero point was NaN: a
    crash) and the int8 .tflite equals the exact semantics."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Pad", ["a", "pads", "ninf"], ["p"]),
        helper.make_node("MaxPool", ["p"], ["m"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["m", "w2", "b2"], ["y"]),
    ]
    inits = {
        "w1": _w(4, 3, 3, 3),
        "b1": _w(4),
        "pads": np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64),
        "ninf": np.array(-np.inf, np.float32),
        "w2": _w(4, 4, 1, 1),
        "b2": _w(4),
    }
    model = _model(nodes, inits)
    prepared = onnx.ModelProto.FromString(_prepared(model))
    assert "Pad" not in _ops(prepared)
    _same_as_onnxruntime(model, prepared)
    _, exact, tflite, _ = _deploy_and_compare(model, tmp_path)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def test_pad_by_minus_inf_read_by_two_maxpools_stays_float(tmp_path):
    """A Pad by -inf that two MaxPools read cannot become one MaxPool's pads: its output holds -inf, so the
    quantizer keeps it float up to the MaxPools (``quantize.patterns.non_finite_paths``). Before, a Pad read only
    by MaxPools was taken for a finite value, and calibration's zero point came out NaN (exit 3)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Pad", ["a", "pads", "ninf"], ["p"]),
        helper.make_node("MaxPool", ["p"], ["m"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("MaxPool", ["p"], ["m2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Add", ["m", "m2"], ["s"]),
        helper.make_node("Conv", ["s", "w2", "b2"], ["y"]),
    ]
    inits = {
        "w1": _w(4, 3, 3, 3),
        "b1": _w(4),
        "pads": np.array([0, 0, 0, 0, 0, 0, 1, 1], np.int64),
        "ninf": np.array(-np.inf, np.float32),
        "w2": _w(4, 4, 1, 1),
        "b2": _w(4),
    }
    model = _model(nodes, inits)
    assert "Pad" in _ops(onnx.ModelProto.FromString(_prepared(model)))
    qdq, exact, tflite, _ = _deploy_and_compare(model, tmp_path)
    # the MaxPools read the float Pad requantized in integers (fixed-point rounding): one output step at a tie
    (dq,) = [n for n in qdq.graph.node if n.output[0] == "y"]
    step = float(numpy_helper.to_array(next(t for t in qdq.graph.initializer if t.name == dq.input[1])))
    for e, t in zip(exact, tflite, strict=True):
        assert np.abs(t - e).max() <= step * 1.001


@pytest.mark.parametrize("factors", [(2, 2), (1, 2)])
def test_bilinear_upsampling_ties_int8_exact(tmp_path, factors):
    """A half-pixel bilinear x2 upsampling of int8 steps lands on .5 ties ((9a + 3b + 3c + d) / 16):
    TFLite's RESIZE_BILINEAR rounds them up where QuantizeLinear rounds to even (PP-LiteSeg's decoder: 4 % of
    the values one step off). As an edge pad, a nearest upsampling and a depthwise Conv of the triangle filter
    (requantized half to even), the .tflite equals the exact semantics."""
    scales = np.array([1, 1, *factors], np.float32)
    model = _two_convs_then(
        [helper.make_node("Resize", ["s", "", "scales"], ["y"], mode="linear")], {"scales": scales}
    )
    _, exact, tflite, result = _deploy_and_compare(model, tmp_path)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)
    counts = json.loads((result.bundle("arm-cpu").path / "manifest.json").read_text())["verification"][
        "op_counts"
    ]
    assert "RESIZE_BILINEAR" not in counts and counts["DEPTHWISE_CONV_2D"] == 1


def _conv_read_by_q_and_a_float_mul() -> onnx.ModelProto:
    """PT2E's X86 form: a Conv's float output read by its QuantizeLinear and, unquantized, by a float Mul (an SE
    gate's product) whose result is quantized at a finer scale."""
    w = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s0", "z0"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s0", "z0"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"], axis=0),
        helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "s1", "z1"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "s1", "z1"], ["y1"]),
        helper.make_node("Mul", ["c", "gate"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "s2", "z1"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "s2", "z1"], ["y"]),
    ]
    inits = {
        "s0": np.float32(2 / 255),
        "z0": np.uint8(128),
        "w": w,
        "sw": RNG.uniform(0.002, 0.004, 4).astype(np.float32),
        "zw": np.zeros(4, np.int8),
        "b": _w(4),
        "s1": np.float32(0.05),
        "z1": np.uint8(128),
        "gate": RNG.uniform(0.2, 1.0, (1, 4, 1, 1)).astype(np.float32),
        "s2": np.float32(0.0125),
    }
    model = _model(nodes, inits)
    model.graph.output.insert(0, helper.make_tensor_value_info("y1", TensorProto.FLOAT, None))
    return model


def test_a_kernel_output_also_read_unquantized_runs_in_float_for_that_reader(tmp_path):
    """The int8 Conv writes its QuantizeLinear's levels; the Mul reads the Conv's float output, as the QDQ model
    says, not the DEQUANTIZE of those levels (a second rounding: PT2E MobileNetV3's SE products were 16 % one
    step off, int8 .tflite vs its QDQ file 0.9964 -> 0.9982)."""
    import edgekit
    from edgekit.core import isolated
    from test_exact import _run_bundle

    model = _conv_read_by_q_and_a_float_mul()
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    result = edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", precision="int8")
    result.raise_for_failures()
    feeds = [{"x": x[None]} for x in _pixel_images(4)]
    exact = ExactRunner(model)
    want = [exact.run(f)["y"] for f in feeds]
    bundle = str(result.bundle("arm-cpu").path)
    got = isolated.call(_run_bundle, bundle, feeds, {"y": want[0].shape}, what="LiteRT", doing="running")
    steps = np.abs(np.stack([g["y"] for g in got]) - np.stack(want)) / 0.0125
    assert steps.max() <= 1.0 + 1e-3
    assert np.mean(steps > 0.5) < 0.005  # float32 convolution noise near a half step only


@pytest.mark.parametrize("scales", [(2, 2, 2), (1, 2, 2)])
def test_trilinear_upsampling_ties_int8_exact(tmp_path, scales):
    """A 3-D linear Resize (MONAI SegResNet's decoder) is lowered to float taps (GATHER, MUL by the weights, ADD)
    between int8 tensors of one scale; at x2 its exact result is a .5 tie on a share of the values (a multiple of
    1/64 of a step), which DEQUANTIZE / float32 taps / QUANTIZE rounded either way (1 % of SegResNet's upsampled
    values a step off). On the integer levels and rounded by ROUND (half to even), it equals the exact semantics."""
    shape = (1, 3, 4, 6, 6)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1] * 6),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("Conv", ["x", "w2", "b2"], ["b"], pads=[1] * 6),
        helper.make_node("Add", ["ra", "b"], ["s"]),
        helper.make_node("Resize", ["s", "", "scales"], ["y"], mode="linear"),
    ]
    inits = {"w1": _w(4, 3, 3, 3, 3), "b1": _w(4), "w2": _w(4, 3, 3, 3, 3), "b2": _w(4),
             "scales": np.array([1, 1, *scales], np.float32)}  # fmt: skip
    _, exact, tflite, result = _deploy_and_compare(_model(nodes, inits, shape), tmp_path, shape=shape)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)
    notes = json.loads((result.bundle("arm-cpu").path / "manifest.json").read_text())["verification"][
        "converter_notes"
    ]
    assert any("linear map(s) of float taps" in n for n in notes), notes


def test_average_pool_3d_ties_int8_exact(tmp_path):
    """A 3-D AveragePool (MONAI DenseNet121's transitions, 2 x 2 x 2) is lowered to the same float taps (weights
    1/2 per axis): the mean of 8 levels is a .5 tie whenever their sum is 4 mod 8, which DEQUANTIZE / float32 /
    QUANTIZE rounded either way (DenseNet121's int8 .tflite vs QDQ cosine 0.9687); on the levels with ROUND it
    equals the exact semantics."""
    shape = (1, 3, 4, 6, 6)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1] * 6),
        helper.make_node("Relu", ["a"], ["ra"]),
        helper.make_node("AveragePool", ["ra"], ["y"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
    ]
    inits = {"w1": _w(4, 3, 3, 3, 3), "b1": _w(4)}
    _, exact, tflite, _ = _deploy_and_compare(_model(nodes, inits, shape), tmp_path, shape=shape)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)


def test_attention_batch_matmul_int8_exact(tmp_path):
    """q k^T of two run-time int8 tensors: LiteRT's int8 BATCH_MATMUL requantizes by a rounding high multiply and a
    rounding shift (two roundings: a value within 0.5 * 2^-shift of a half step goes either way; MONAI UNETR's
    attention, 0.5 % of the scores a step off). On the int8 levels in float32 (exact sums) with ROUND, the .tflite
    equals the exact semantics."""
    shape = (1, 2, 16, 24)
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["y"]),
    ]
    inits = {"wq": _w(24, 24), "wk": _w(24, 24)}
    _, exact, tflite, result = _deploy_and_compare(_model(nodes, inits, shape), tmp_path, shape=shape)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)
    notes = json.loads((result.bundle("arm-cpu").path / "manifest.json").read_text())["verification"][
        "converter_notes"
    ]
    assert any("BATCH_MATMUL(s)" in n for n in notes), notes


@pytest.mark.parametrize("factors", [(4, 4), (1, 16)])
def test_power_of_two_bilinear_upsampling_ties_int8_exact(tmp_path, factors):
    """DeepLabV3's and PP-LiteSeg's logits upsampled x16 / x8 to the input size: a half-pixel bilinear x k lands on
    .5 ties (weights odd multiples of 1 / 2k), which TFLite's int8 RESIZE_BILINEAR rounds up. Resized on the levels
    in float32 (exact for a power of two) and rounded by ROUND (half to even), the .tflite equals the exact
    semantics."""
    scales = np.array([1, 1, *factors], np.float32)
    model = _two_convs_then(
        [helper.make_node("Resize", ["s", "", "scales"], ["y"], mode="linear")], {"scales": scales}
    )
    _, exact, tflite, result = _deploy_and_compare(model, tmp_path, samples=4)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)
    counts = json.loads((result.bundle("arm-cpu").path / "manifest.json").read_text())["verification"][
        "op_counts"
    ]
    # one ROUND quantizes the float input (quantized.exact_input_quantize), the other rounds the resize
    assert counts["ROUND"] == 2 and counts["RESIZE_BILINEAR"] == 1


@pytest.mark.parametrize(
    "attrs",
    [
        # STDC's (PP-LiteSeg): pads excluded, the first row and column average 6 or 4 values
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]},  # the first row and column average 1 or 2 values
    ],
)
def test_averagepool_excluding_pads_ties_int8_exact(tmp_path, attrs):
    """A window that averages fewer values at the border (6 or 4 of a 3 x 3) is a .5 tie of int8 steps when its
    sum is 3 mod 6 (2 mod 4): as a float pool, a MUL by the window counts and QUANTIZE (ties away from zero) the
    .tflite was a step off there; as the window sums of the levels divided by the counts and ROUND, it is exact."""
    model = _two_convs_then([helper.make_node("AveragePool", ["s"], ["y"], **attrs)], {})
    _, exact, tflite, result = _deploy_and_compare(model, tmp_path)
    for e, t in zip(exact, tflite, strict=True):
        np.testing.assert_array_equal(t, e)
    counts = json.loads((result.bundle("arm-cpu").path / "manifest.json").read_text())["verification"][
        "op_counts"
    ]
    assert "AVERAGE_POOL_2D" not in counts and counts["DEPTHWISE_CONV_2D"] == 1
