"""The ``int16x8`` recipe end to end: ``edgekit quantize --precision int16x8`` (a real process), the arm-cpu bundle
(16x8 kernels, verified in LiteRT against onnxruntime), and the targets that refuse it with their reason (nnapi;
intel-vpu, because OpenVINO strips 16-bit QDQ: shown here on OpenVINO itself)."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cnn_models import calibration_samples, tiny_cnn
from edgekit.core.data import Sample
from edgekit.core.errors import TargetError
from edgekit.core.model import load_proto
from edgekit.core.runtime import HostRunner
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.pipeline import quantize
from edgekit.targets.base import PackageOptions, get_target
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from test_cli_quantize import edgekit


@pytest.fixture(scope="module")
def int16_model() -> onnx.ModelProto:
    samples = [Sample({"x": x}, None, str(i)) for i, x in enumerate(calibration_samples(count=8))]
    options = QuantizeOptions(samples=8, precision="int16x8")
    return quantize(load_proto(tiny_cnn(softmax=False)), samples, options).proto()


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_quantize_cli_writes_an_int16_qdq_model(tmp_path):
    model, calib = tmp_path / "cnn.onnx", tmp_path / "calib.npz"
    onnx.save(tiny_cnn(softmax=False), model)
    np.savez(calib, x=np.stack(calibration_samples(count=8)))
    run = edgekit("quantize", model, "--calib", calib, "--precision", "int16x8", "--eval", calib, "-q",
                  "--layer-precision", "fc=int8", "--report", tmp_path / "report.json")  # fmt: skip
    assert run.returncode == 0, run.stderr
    written = onnx.load(tmp_path / "cnn.int16x8.onnx")
    assert max(i.version for i in written.opset_import if i.domain in ("", "ai.onnx")) >= 21
    inits = {t.name: t.data_type for t in written.graph.initializer}
    types = {inits[n.input[2]] for n in written.graph.node if n.op_type == "QuantizeLinear"}
    assert types == {TensorProto.INT16, TensorProto.UINT8}  # int16x8 layers, and the int8 (uint8) fc
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["quantization"]["precision"] == "int16x8"
    assert report["quantization"]["layer_precision"] == {"fc": "int8"}
    assert report["quantization"]["int16_activations"] > 0
    feeds = {"x": calibration_samples(count=1, seed=9)[0]}
    (expected,) = ReferenceEvaluator(written).run(None, feeds)
    np.testing.assert_allclose(_session(written).run(None, feeds)[0], expected, atol=1e-5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layer-precision", "nosuchnode=int16x8"], "names no node of the model: nosuchnode"),
        (["--layer-precision", "conv1"], "expects NAME=RECIPE"),
        (["--layer-precision", "conv1=int4"], "the recipe of --layer-precision conv1 must be one of"),
    ],
)
def test_quantize_cli_refuses_bad_layer_precision(tmp_path, args, message):
    model, calib = tmp_path / "cnn.onnx", tmp_path / "calib.npz"
    onnx.save(tiny_cnn(softmax=False), model)
    np.savez(calib, x=np.stack(calibration_samples(count=2)))
    run = edgekit("quantize", model, "--calib", calib, "--precision", "int16x8", "-q", *args)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


def test_arm_cpu_bundle_runs_16x8_kernels_verified_against_onnxruntime(int16_model, tmp_path):
    from ai_edge_litert import schema_py_generated as fb

    path = get_target("arm-cpu").package(load_proto(int16_model), tmp_path / "bundle", PackageOptions())
    manifest = json.loads((path / "manifest.json").read_text())
    verification = manifest["verification"]
    assert verification["precision"] == "int16x8" and verification["passed"]
    assert verification["yardstick"] == "int16x8" and "onnxruntime" in verification["reference"]
    assert verification["max_rel_error"] <= 16 / 65535
    tflite = fb.Model.GetRootAs((path / "model.tflite").read_bytes(), 0)
    sub = tflite.Subgraphs(0)
    conv = fb.BuiltinOperator.CONV_2D
    convs = [sub.Operators(i) for i in range(sub.OperatorsLength())
             if tflite.OperatorCodes(sub.Operators(i).OpcodeIndex()).BuiltinCode() == conv]  # fmt: skip
    assert len(convs) == 2
    for op in convs:
        x, weights, bias = (sub.Tensors(op.Inputs(i)).Type() for i in range(3))
        assert (x, weights, bias) == (fb.TensorType.INT16, fb.TensorType.INT8, fb.TensorType.INT64)


def test_nnapi_and_intel_vpu_refuse_an_int16_model_with_their_reason(int16_model, tmp_path):
    for name, reason in (("nnapi", "no 16-bit activation kernels"), ("intel-vpu", "strips 16-bit")):
        target = get_target(name)
        assert reason in target.precisions["int16x8"]
        with pytest.raises(TargetError, match=f"cannot run --precision int16x8: .*{reason}"):
            target.check_precision("int16x8")
        with pytest.raises(TargetError, match=reason):
            target.package(load_proto(int16_model), tmp_path / name, PackageOptions())
        assert not (tmp_path / name).exists()
        problems = target.check(load_proto(int16_model))
        assert any(p.severity == "error" and reason in p.message for p in problems), problems
    assert get_target("arm-cpu").precisions["int16x8"] is None


def _qdq_then_conv(dtype: np.dtype, zero_point: int, conv: bool) -> onnx.ModelProto:
    """x -> QuantizeLinear/DequantizeLinear (scale 0.5) [-> 1x1 Conv summing the channels]."""
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(0.5, np.float32), "s"),
        numpy_helper.from_array(np.array(zero_point, dtype), "z"),
    ]
    if conv:
        nodes.append(helper.make_node("Conv", ["d", "w"], ["y"]))
        inits.append(numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w"))
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y" if conv else "d", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model  # fmt: skip


@pytest.mark.parametrize(("dtype", "zero_point"), [(np.int16, 0), (np.uint16, 32768)])
def test_openvino_strips_16bit_qdq_which_is_why_intel_vpu_refuses_int16x8(dtype, zero_point):
    """OpenVINO's CPU plugin computes a 16-bit QDQ model as if its activations were not quantized (it rounds an
    8-bit one), and cannot compile one whose QDQ feeds a model output. When this fails, OpenVINO has changed:
    revisit intel-vpu's int16x8 entry. edgekit's host runner runs 16-bit QDQ on onnxruntime instead, exactly."""
    import openvino as ov

    x = np.random.default_rng(0).uniform(-20, 20, (1, 3, 4, 4)).astype(np.float32)
    unquantized = np.einsum("oc,nchw->nohw", np.ones((2, 3)), x)
    core = ov.Core()

    def openvino(model: onnx.ModelProto) -> np.ndarray:
        compiled = core.compile_model(
            core.read_model(model.SerializeToString(), b""), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
        )
        return next(iter(compiled.create_infer_request().infer({"x": x}).values()))  # fmt: skip

    model = _qdq_then_conv(dtype, zero_point, conv=True)
    (exact,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert np.abs(exact - unquantized).max() > 0.1  # the QDQ rounds to steps of 0.5
    np.testing.assert_allclose(openvino(model), unquantized, atol=1e-4)  # OpenVINO: no rounding at all
    np.testing.assert_allclose(HostRunner(model).run({"x": x})["y"], exact, atol=1e-5)
    with pytest.raises(RuntimeError, match="FQ stripping failed"):
        openvino(_qdq_then_conv(dtype, zero_point, conv=False))
    eight = _qdq_then_conv(np.uint8, 128, conv=True)  # an 8-bit QDQ rounds in OpenVINO too
    np.testing.assert_allclose(openvino(eight), ReferenceEvaluator(eight).run(None, {"x": x})[0], atol=1e-4)


@pytest.mark.parametrize(
    "options",
    [
        {"precision": "int16x8"},
        {"layer_precision": (("pool0", "fp32"), ("expand3", "int16x8"))},
        {"precision": "int16x8", "layer_precision": (("squeeze", "fp32"),)},
        {"float_output_heads": False},
    ],
    ids=["int16x8", "int8+fp32+int16x8", "int16x8+fp32", "integer-head"],
)
def test_one_calibration_serves_every_recipe_and_per_layer_mix(options):
    """Statistics of a plain int8 run give the same QDQ model as calibrating afresh for another recipe or another
    per-layer mix (a layer kept float needs the range of a tensor int8 derives or fuses away): the accuracy-aware
    search and deploy's targets calibrate once."""
    from quant_models import squeezenet_like

    model = load_proto(squeezenet_like(13))
    data = np.random.default_rng(0).uniform(0, 1, (8, 1, 3, 33, 33)).astype(np.float32)
    calib = [Sample({"data": data[i]}, None, str(i)) for i in range(8)]
    base = quantize(model, calib, QuantizeOptions(samples=8))
    opts = QuantizeOptions(samples=8, **options)
    shared = quantize(model, calib, opts, statistics=base.stats).proto()
    assert shared.SerializeToString() == quantize(model, calib, opts).proto().SerializeToString()


def test_without_onnxruntime_the_host_says_so_and_the_search_restores_float(int16_model, monkeypatch):
    """onnxruntime is a dev extra, and the host runs 16-bit QDQ models in it: without it, running one is a typed
    error naming the package (it was an internal ModuleNotFoundError), and arm-cpu's search offers float where it
    offered int16x8 (it failed on its first int16x8 candidate)."""
    from edgekit.core.errors import ModelError
    from edgekit.quantize.restores import available_restores

    assert [r.name for r in available_restores(get_target("arm-cpu"))] == ["int16x8", "float"]
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # an import of it fails
    with pytest.raises(ModelError, match="pip install onnxruntime"):
        HostRunner(int16_model)
    assert [r.name for r in available_restores(get_target("arm-cpu"))] == ["float"]


def test_an_int16x8_pool_that_counts_its_padding_runs_on_the_host_and_packages(tmp_path):
    """The host runs a 16-bit QDQ model on onnxruntime, which has no int16 Pad; the form that pads the integer
    tensor before an AveragePool with count_include_pad (``qdq_forms.pad_before_dequantize``, for OpenVINO) made
    such a model unloadable there: torchvision's Inception-v3 to arm-cpu int16x8 was refused with "onnxruntime
    cannot load the model: ... Pad(21)" (probe 12r). It runs as written: the host equals onnxruntime, and the
    bundle is verified."""
    rng = np.random.default_rng(0)
    conv_w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "AveragePool", ["c"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1
        ),
    ]
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [conv_w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    samples = [
        Sample({"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)}, None, str(i)) for i in range(4)
    ]
    options = QuantizeOptions(samples=4, precision="int16x8", float_output_heads=False)
    qdq = quantize(load_proto(model), samples, options).proto()
    feeds = {"x": rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32)}
    (expected,) = _session(qdq).run(None, feeds)
    for exact in (True, False):
        (actual,) = HostRunner(qdq, exact_qdq=exact).run(feeds).values()
        np.testing.assert_array_equal(actual, expected)
    path = get_target("arm-cpu").package(load_proto(qdq), tmp_path / "bundle", PackageOptions())
    verification = json.loads((path / "manifest.json").read_text())["verification"]
    assert verification["precision"] == "int16x8" and verification["passed"]
