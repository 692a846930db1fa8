"""GPTQ rounding of the static recipes' int8 weights (``QuantizeOptions.weight_rounding="gptq"``).

The input moments are collected during calibration (on the model as the depthwise-input equalization rewrites
it); the weight pass rounds each Conv (dense, 1x1, grouped; not depthwise) / Gemm weight row by GPTQ where that
lowers the row's output error. Checked against onnxruntime running the QDQ model (each layer's output against the same
QDQ model with that layer's weight float: the error of its weight's rounding on its real, quantized, inputs),
and against LiteRT running the .tflite the QDQ model converts to.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from edgekit.core.model import load_proto
from edgekit.quantize.equalize import EqualizePass
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from onnx import TensorProto, helper, numpy_helper

LAYERS = ("stem", "dw", "pw", "fc")


def small_cnn() -> onnx.ModelProto:
    """A dense 3x3 Conv (the stem), Relu, a depthwise 3x3 (its input equalized), Relu, a 1x1 Conv, global
    pooling, a Gemm: seeded weights, biases."""
    rng = np.random.default_rng(3)
    weights = {
        "w_stem": rng.normal(0, 0.3, (8, 4, 3, 3)),
        "b_stem": rng.normal(0, 0.1, 8),
        "w_dw": rng.normal(0, 0.3, (8, 1, 3, 3)),
        "b_dw": rng.normal(0, 0.1, 8),
        "w_pw": rng.normal(0, 0.3, (16, 8, 1, 1)),
        "b_pw": rng.normal(0, 0.1, 16),
        "w_fc": rng.normal(0, 0.3, (5, 16)),
        "b_fc": rng.normal(0, 0.1, 5),
    }
    weights["w_stem"][:, :, 1, 1] *= 3.0  # a few large taps: nearest's errors then add up unevenly
    nodes = [
        helper.make_node("Conv", ["x", "w_stem", "b_stem"], ["s"], name="stem", pads=[1] * 4),
        helper.make_node("Relu", ["s"], ["s_relu"], name="stem_relu"),
        helper.make_node("Conv", ["s_relu", "w_dw", "b_dw"], ["d"], name="dw", group=8, pads=[1] * 4),
        helper.make_node("Relu", ["d"], ["d_relu"], name="dw_relu"),
        helper.make_node("Conv", ["d_relu", "w_pw", "b_pw"], ["p"], name="pw"),
        helper.make_node("GlobalAveragePool", ["p"], ["g"], name="pool"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "w_fc", "b_fc"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def smooth_inputs(n: int, seed: int) -> np.ndarray:
    """Smooth images (neighbouring pixels correlated, as in photos) with one loud channel (x 6): the case where
    rounding by the data matters."""
    rng = np.random.default_rng(seed)
    loud = np.array([6.0, 1.0, 1.0, 1.0], np.float32).reshape(1, 4, 1, 1)
    walk = np.cumsum(rng.normal(0.0, 0.3, (n, 4, 12, 12)), axis=3) + rng.normal(0, 1.0, (n, 4, 1, 1))
    return (walk * loud).astype(np.float32)


def _samples(x: np.ndarray) -> list:
    return [SimpleNamespace(inputs={"x": x[i : i + 1]}, label=None) for i in range(len(x))]


def _weights(proto: onnx.ModelProto) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Layer -> (int8 weight, its scales) read from the QDQ model's DequantizeLinear of its weight."""
    init = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    producers = {o: n for n in proto.graph.node for o in n.output}
    out = {}
    for node in proto.graph.node:
        if node.name in LAYERS:
            dq = producers[node.input[1]]
            out[node.name] = (init[dq.input[0]], init[dq.input[1]])
    return out


def _ort(proto: onnx.ModelProto, names: list[str], x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(proto)
    del probe.graph.output[:]
    probe.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # QDQ as written
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    runs = [session.run(names, {"x": x[i : i + 1]}) for i in range(len(x))]
    return [np.concatenate([r[k] for r in runs]).astype(np.float64) for k in range(len(names))]


def _with_float_weight(proto: onnx.ModelProto, layer: str, weight: np.ndarray) -> onnx.ModelProto:
    """The QDQ model with ``layer`` reading a float initializer in place of its dequantized weight."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    node = next(n for n in out.graph.node if n.name == layer)
    name = f"{layer}_float_weight"
    out.graph.initializer.append(numpy_helper.from_array(weight.astype(np.float32), name))
    node.input[1] = name
    return out


def layer_errors(result, source: onnx.ModelProto, x: np.ndarray) -> dict[str, float]:
    """Each layer's squared output error that its weight rounding causes, on inputs ``x`` in onnxruntime: the QDQ
    model's layer output against the same QDQ model with that layer's weight float (the weights of the model
    the QDQ model was rewritten from: equalized depthwise inputs included)."""
    rewritten = ir.from_proto(source)
    EqualizePass(result.stats.equalization)(rewritten)
    floats = {n.name: n.inputs[1].const_value.numpy() for n in rewritten.graph if n.name in LAYERS}
    proto = result.proto()
    errors = {}
    for node in proto.graph.node:
        if node.name in LAYERS:
            out = node.output[0]
            got = _ort(proto, [out], x)[0]
            want = _ort(_with_float_weight(proto, node.name, floats[node.name]), [out], x)[0]
            errors[node.name] = float(np.sum((got - want) ** 2))
    return errors


@pytest.mark.parametrize("precision", ["int8", "int16x8"])
def test_gptq_lowers_each_layers_output_error_on_the_same_grid(precision):
    source = small_cnn()
    calib = smooth_inputs(16, 0)
    runs = {
        rounding: quantize(
            load_proto(source),
            _samples(calib),
            QuantizeOptions(samples=16, precision=precision, weight_rounding=rounding),
        )
        for rounding in ("nearest", "gptq")
    }
    # Every weighted layer but the depthwise one, which keeps its kernel sums (gptq.takes_gptq).
    assert set(runs["gptq"].stats.hessians) == {"stem", "pw", "fc"}
    assert runs["nearest"].stats.hessians is None  # nothing collected unless asked for
    nearest, gptq = (_weights(runs[r].proto()) for r in ("nearest", "gptq"))
    changed = 0
    for layer in LAYERS:
        (qn, sn), (qg, sg) = nearest[layer], gptq[layer]
        np.testing.assert_array_equal(
            sg, sn
        )  # the scales are weight_scales' (GPTQ changes only the integers)
        assert qg.dtype == np.int8 and qg.min() >= -127 and qg.max() <= 127
        changed += int(np.sum(qg != qn))
    assert changed > 10  # the test sees GPTQ's rounding, not nearest's again
    errors = {r: layer_errors(runs[r], source, calib) for r in runs}
    for layer in LAYERS:
        assert errors["gptq"][layer] <= 1.02 * errors["nearest"][layer], (layer, errors)
    rounded = ("stem", "pw", "fc")
    assert sum(errors["gptq"][k] for k in rounded) < 0.85 * sum(errors["nearest"][k] for k in rounded), errors
    assert errors["gptq"]["fc"] < 0.5 * errors["nearest"]["fc"], errors


def test_gptq_rows_do_not_depend_on_the_equalization():
    """The depthwise-input equalization divides the producer's (the stem's) output channels by the ratios: its
    rows and its per-channel scales alike, its input unchanged. Its GPTQ integers are those of the model
    quantized without the equalization (the moments are those of the rewritten model's inputs)."""
    source = small_cnn()
    calib = _samples(smooth_inputs(8, 2))
    runs = {
        equalize: quantize(
            load_proto(source), calib, QuantizeOptions(samples=8, weight_rounding="gptq", equalize=equalize)
        )
        for equalize in (True, False)
    }
    assert np.ptp(runs[True].stats.equalization["s_relu"]) > 0.05  # the rewrite is not the identity here
    q_on, s_on = _weights(runs[True].proto())["stem"]
    q_off, s_off = _weights(runs[False].proto())["stem"]
    assert not np.allclose(s_on, s_off)
    assert np.mean(q_on == q_off) > 0.99  # float32 scales may move a tie


def test_grouped_moments_are_the_diagonal_blocks_of_the_dense_ones():
    """A grouped Conv's moments per group: the diagonal blocks of its input patches' moments (each output
    channel of a group reads that group's channels only)."""
    from edgekit.quantize import gptq

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 6, 5, 7))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="g", group=2, pads=[1] * 4)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    conv = ir.from_proto(helper.make_model(graph)).graph.node(0)
    assert gptq.takes_gptq(conv, grouped=True) and not gptq.takes_gptq(conv)
    moments, count = gptq._sample_moments(conv, x, w)
    patches = gptq._patches(x, conv, (3, 3))  # [positions, 6 * 9], channel-major
    full = patches.T @ patches
    assert moments.shape == (2, 27, 27) and count == 35
    np.testing.assert_allclose(moments[0], full[:27, :27], rtol=1e-12)
    np.testing.assert_allclose(moments[1], full[27:, 27:], rtol=1e-12)


def test_gptq_qdq_model_converts_to_a_tflite_litert_runs_equal(tmp_path):
    """The GPTQ-rounded QDQ model (int8 activations, TFLite's scheme) deploys to arm-cpu, and LiteRT runs the
    .tflite equal to the QDQ model's exact semantics."""
    import edgekit
    from edgekit.core import isolated
    from edgekit.core.exact import ExactRunner

    source = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), source)
    calib, held = tmp_path / "calib.npz", smooth_inputs(6, 4)
    np.savez(calib, x=smooth_inputs(16, 0))
    qdq = tmp_path / "cnn.qdq.onnx"
    options = QuantizeOptions(activations="int8", samples=16, weight_rounding="gptq")
    edgekit.quantize_model(source, str(calib), options=options, output=qdq)
    result = edgekit.deploy(qdq, ["arm-cpu"], output=tmp_path / "out")
    result.raise_for_failures()
    bundle = result.bundle("arm-cpu").path
    samples = [{"x": held[i : i + 1]} for i in range(len(held))]
    from test_exact import _run_bundle

    tflite = isolated.call(_run_bundle, str(bundle), samples, what="LiteRT", doing="running the bundle")
    exact = ExactRunner(onnx.load(qdq))
    for sample, got in zip(samples, tflite, strict=True):
        np.testing.assert_array_equal(got["y"], exact.run(sample)["y"])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["verification"]["reference"].startswith("the QDQ model's exact semantics")


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "COLUMNS": "120"},
    )


def test_cli_weight_rounding(tmp_path: Path):
    """``--weight-rounding gptq`` writes the GPTQ model (the same integers as the API's); a bad value is one
    typed line, exit 2, nothing written."""
    source = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), source)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=smooth_inputs(16, 0))
    bad = tmp_path / "bad.onnx"
    run = _cli("quantize", source, "--calib", calib, "--weight-rounding", "stochastic", "-o", bad)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    assert "--weight-rounding must be one of nearest, gptq" in run.stderr
    assert not bad.exists()
    out = tmp_path / "cnn.gptq.onnx"
    run = _cli("quantize", source, "--calib", calib, "--weight-rounding", "gptq", "-o", out, "-q")
    assert run.returncode == 0, run.stderr
    api = quantize(
        load_proto(small_cnn()),
        _samples(smooth_inputs(16, 0)),
        QuantizeOptions(samples=16, weight_rounding="gptq"),
    ).proto()
    for layer, (q, _) in _weights(api).items():
        np.testing.assert_array_equal(_weights(onnx.load(out))[layer][0], q)


def test_weights_already_on_their_int8_grid_need_no_moments():
    """A model dequantized from int8 (the ONNX zoo's MobileNetV2): nearest rounding is exact, so no layer's
    moments are collected and the integers are nearest's."""
    source = small_cnn()
    for init in source.graph.initializer:
        if init.name.startswith("w_"):
            w = numpy_helper.to_array(init).astype(np.float64)
            rows = w.reshape(w.shape[0], -1)
            scale = (np.abs(rows).max(axis=1) / 127.0).reshape((-1,) + (1,) * (w.ndim - 1))
            init.CopyFrom(
                numpy_helper.from_array((np.round(w / scale) * scale).astype(np.float32), init.name)
            )
    calib = _samples(smooth_inputs(4, 0))
    result = quantize(
        load_proto(source), calib, QuantizeOptions(samples=4, weight_rounding="gptq", equalize=False)
    )
    assert result.stats.hessians == {}
    nearest = quantize(load_proto(source), calib, QuantizeOptions(samples=4, equalize=False))
    for layer, (q, _) in _weights(result.proto()).items():
        np.testing.assert_array_equal(q, _weights(nearest.proto())[layer][0])


def test_the_search_tries_gptq_rounding_as_a_whole_model_fix():
    """With the layers' input moments the accuracy-aware search measures GPTQ rounding among its whole-model
    int8 fixes (the fragile model of tests/test_accuracy_aware.py: cosine 0.957 -> 0.973 with it)."""
    from dataclasses import replace

    from edgekit.quantize.accuracy import whole_model_fixes

    scheme = QuantizeOptions()
    fixes = dict(whole_model_fixes(scheme, False, True))
    assert fixes[("gptq rounding",)] == replace(scheme, weight_rounding="gptq")
    assert ("gptq rounding",) not in dict(whole_model_fixes(scheme, False, False))
    assert ("gptq rounding",) not in dict(
        whole_model_fixes(replace(scheme, weight_rounding="gptq"), False, True)
    )
