"""The fp16 recipe (issue 13): arm-cpu FLOAT16 weights + DEQUANTIZE in LiteRT, nnapi relaxed float, intel-vpu
FP16/FP32 IR, and ``edgekit quantize --precision fp16`` in onnxruntime, each against a reference run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from edgekit.core.errors import TargetError
from edgekit.core.model import load_proto
from edgekit.device_agents.bundle import Manifest, read_bundle
from edgekit.targets.base import PackageOptions, get_target
from edgekit.targets.nnapi_target import NnapiOptions
from edgekit.targets.openvino_ir import IntelVpuOptions
from edgekit.targets.tflite.fp16 import FP16_MIN_ELEMENTS
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"


def fp16_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv 3->32, depthwise 3x3, Conv 32->48, GAP, Gemm 48->40: weights both sides of FP16_MIN_ELEMENTS."""
    rng = np.random.default_rng(seed)
    weights = {
        "w1": rng.standard_normal((32, 3, 3, 3)) * 0.3,  # 864 values: stays float32
        "b1": rng.standard_normal(32) * 0.1,
        "wd": rng.standard_normal((32, 1, 3, 3)) * 0.3,  # 288
        "w2": rng.standard_normal((48, 32, 3, 3)) * 0.1,  # 13,824: float16
        "b2": rng.standard_normal(48) * 0.1,
        "wf": rng.standard_normal((40, 48)) * 0.3,  # 1,920: float16
        "bf": rng.standard_normal(40) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "wd"], ["d1"], pads=[1, 1, 1, 1], group=32),
        helper.make_node("Conv", ["d1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "fp16_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def weights_rounded(model: onnx.ModelProto, min_elements: int = 0) -> onnx.ModelProto:
    """The recipe's numerics in numpy: every float32 initializer of at least ``min_elements`` values rounded to
    float16 and back, computed in float32."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for init in out.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32 and array.size >= min_elements:
            init.CopyFrom(numpy_helper.from_array(array.astype(np.float16).astype(np.float32), init.name))
    return out


def _feeds(n: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(n)]


def _ort(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [session.run(None, f)[0] for f in feeds]


def _litert(path: Path, feeds: list[dict[str, np.ndarray]]) -> tuple[list[np.ndarray], list[dict]]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path / "model.tflite"))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    results = []
    for f in feeds:
        interpreter.set_tensor(inp["index"], f["x"].transpose(0, 2, 3, 1).copy())  # NHWC image input
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"]).copy())
    return results, interpreter._get_ops_details()


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return fp16_cnn()


def test_arm_cpu_fp16_runs_the_rounded_weights_in_litert(model, tmp_path) -> None:
    feeds = _feeds()
    fp32 = get_target("arm-cpu").package(load_proto(model), tmp_path / "fp32", PackageOptions())
    fp16 = get_target("arm-cpu").package(
        load_proto(model), tmp_path / "fp16", PackageOptions(precision="fp16")
    )
    with read_bundle(fp16) as bundle:
        v = bundle.manifest.verification
    assert v["precision"] == "fp16" and v["passed"] and v["yardstick"] == "fp16"
    got, ops = _litert(fp16, feeds)
    # The float16 buffers: the two kernels of FP16_MIN_ELEMENTS values or more, each read by one DEQUANTIZE.
    dequantize = [op for op in ops if op["op_name"] == "DEQUANTIZE"]
    assert len(dequantize) == 2
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_path=str(fp16 / "model.tflite")).get_tensor_details()
    halves = sorted(int(np.prod(d["shape"])) for d in details if d["dtype"] == np.float16)
    assert halves == [1920, 13824] and all(n >= FP16_MIN_ELEMENTS for n in halves)
    # LiteRT computes exactly what float32 compute on the float16-rounded kernels gives (onnxruntime) ...
    rounded = _ort(weights_rounded(model, FP16_MIN_ELEMENTS), feeds)
    exact = _ort(model, feeds)
    scale = float(np.ptp(np.stack(exact)))
    assert max(float(np.abs(g - r).max()) for g, r in zip(got, rounded, strict=True)) <= 2e-6 * scale
    # ... which is not the fp32 model: the kernels really are float16.
    assert max(float(np.abs(g - e).max()) for g, e in zip(got, exact, strict=True)) > 1e-5 * scale
    size = lambda p: (p / "model.tflite").stat().st_size  # noqa: E731
    assert size(fp16) < 0.75 * size(fp32)  # most of this tiny model's bytes are the two float16 kernels


def test_fp16_of_a_quantized_model_is_refused(model, tmp_path) -> None:
    sys.path.insert(0, str(ROOT / "tests" / "tflite"))
    from tflite_helpers import edgekit_qdq, random_feeds

    qdq = edgekit_qdq(model, [random_feeds(model, s) for s in range(3)])
    with pytest.raises(TargetError, match="needs a float model"):
        get_target("arm-cpu").package(
            load_proto(qdq, prepare=False), tmp_path / "a", PackageOptions(precision="fp16")
        )
    with pytest.raises(TargetError, match="needs a quantized"):
        get_target("arm-cpu").package(load_proto(model), tmp_path / "b", PackageOptions(precision="int8"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_nnapi_fp16_is_a_float_model_the_delegate_may_relax(model, tmp_path) -> None:
    target = get_target("nnapi")
    path = target.package(load_proto(model), tmp_path / "nnapi", PackageOptions(precision="fp16"))
    with read_bundle(path) as bundle:
        m = bundle.manifest
        report = json.loads(bundle.path("nnapi_compatibility.json").read_text())
    assert m.delegate_options == {"nnapi": {"allow_fp16": "true"}}
    assert [t.dtype for t in (*m.inputs, *m.outputs)] == ["float32", "float32"]
    v = m.verification
    assert v["precision"] == "fp16" and v["yardstick"] == "fp32" and v["passed"]  # the host runs float32
    assert v["nnapi"]["relax_fp32_to_fp16"] and "float32" in v["nnapi"]["note"]
    assert not report["integer_accelerator"] and v["nnapi"]["fully_delegated"]  # every op taken in float
    got, _ = _litert(path, _feeds(2))
    expected = _ort(model, _feeds(2))
    assert max(float(np.abs(g - e).max()) for g, e in zip(got, expected, strict=True)) <= 1e-4
    # Relaxed computation came with NNAPI 1.1 (feature level 2); the float model without a recipe is refused.
    old = PackageOptions(precision="fp16", target_options=NnapiOptions(feature_level=1))
    with pytest.raises(TargetError, match="feature level >= 2"):
        target.package(load_proto(model), tmp_path / "old", old)
    with pytest.raises(TargetError, match="integer models only"):
        target.package(load_proto(model), tmp_path / "none", PackageOptions())
    with pytest.raises(TargetError, match="cannot run --precision fp32.*it runs: fp16, int8"):
        target.package(load_proto(model), tmp_path / "fp32", PackageOptions(precision="fp32"))


def test_delegate_options_reach_the_nnapi_delegate(tmp_path) -> None:
    from edgekit.device_agents import runtimes

    manifest = Manifest.from_json(
        json.loads(json.dumps(_minimal_manifest({"nnapi": {"allow_fp16": "true"}})))
    )
    assert manifest.delegate_options == {"nnapi": {"allow_fp16": "true"}}
    assert (
        "delegate_options" not in Manifest.from_json(_minimal_manifest({})).to_json()
    )  # old bundles unchanged
    calls = []
    runtimes._load_nnapi(
        lambda lib, *options: calls.append((lib, options)) or "delegate", {"allow_fp16": "true"}
    )
    assert calls[0][1] == ({"allow_fp16": "true"},)
    from edgekit.device_agents.bundle import BundleError

    with pytest.raises(BundleError, match="delegate_options.nnapi"):
        Manifest.from_json(_minimal_manifest({"nnapi": {"allow_fp16": True}}))


def _minimal_manifest(delegate_options: dict) -> dict:
    return {
        "format_version": "1.0",
        "target": "nnapi",
        "runtime": "tflite",
        "model_files": [{"path": "model.tflite", "sha256": "0" * 64, "size": 1, "role": "model"}],
        "requirements": [],
        "inputs": [{"name": "x", "shape": [1], "dtype": "float32"}],
        "outputs": [{"name": "y", "shape": [1], "dtype": "float32"}],
        "preprocessing": {},
        "provenance": {"source_sha256": "0" * 64, "edgekit_version": "0"},
        "verification": {},
        "delegate_options": delegate_options,
    }


def _ir_element_types(path: Path) -> set[str]:
    import xml.etree.ElementTree as ET

    root = ET.parse(path / "model.xml").getroot()
    return {d.get("element_type") for d in root.iter("data") if d.get("element_type")}


def test_intel_vpu_precision_decides_the_ir(model, tmp_path) -> None:
    target = get_target("intel-vpu")
    fp16 = target.package(load_proto(model), tmp_path / "fp16", PackageOptions(precision="fp16"))
    fp32 = target.package(load_proto(model), tmp_path / "fp32", PackageOptions(precision="fp32"))
    # PackageOptions.precision wins over the target option.
    explicit = PackageOptions(precision="fp16", target_options=IntelVpuOptions(compress_to_fp16=False))
    also16 = target.package(load_proto(model), tmp_path / "also16", explicit)
    default = target.package(load_proto(model), tmp_path / "default", PackageOptions())
    assert "f16" in _ir_element_types(fp16) and "f16" in _ir_element_types(also16)
    assert "f16" not in _ir_element_types(fp32) and "f16" in _ir_element_types(default)
    for path, precision in ((fp16, "fp16"), (fp32, "fp32"), (default, "fp16")):
        with read_bundle(path) as bundle:
            v = bundle.manifest.verification
            assert v["precision"] == precision and v["passed"]
    assert (fp32 / "model.bin").stat().st_size > 1.8 * (fp16 / "model.bin").stat().st_size


def test_quantize_fp16_onnx_in_onnxruntime(model) -> None:
    from edgekit.quantize.fp16 import to_fp16

    result = to_fp16(load_proto(model))
    proto = ir.to_proto(result.model)
    onnx.checker.check_model(proto, full_check=True)
    inits = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    assert all(a.dtype == np.float16 for a in inits.values()) and len(inits) == 7
    assert [(i.name, i.type.tensor_type.elem_type) for i in (*proto.graph.input, *proto.graph.output)] == [
        ("x", TensorProto.FLOAT),
        ("y", TensorProto.FLOAT),
    ]
    assert result.casts == 2 and result.float32_nodes == []
    feeds = _feeds()
    got, exact = _ort(proto, feeds), _ort(model, feeds)
    scale = float(np.ptp(np.stack(exact)))
    assert got[0].dtype == np.float32
    error = max(float(np.abs(g - e).max()) for g, e in zip(got, exact, strict=True)) / scale
    assert 1e-5 < error <= 2e-3  # float16 weights and activations: rounding, not mistakes


def test_quantize_fp16_keeps_what_float16_cannot_hold() -> None:
    """A BERT-style encoder: its attention mask's -1e38 constant and the integer-to-float Casts stay float32."""
    from edgekit.core.model import load_model
    from edgekit.quantize.fp16 import to_fp16
    from edgekit.targets.base import default_verify_samples

    path = ROOT / "tests" / "zoo" / "models" / "bert_tiny_op13.onnx"
    reference = load_model(path)
    feeds = [dict(s) for s in default_verify_samples(reference, count=2)]
    result = to_fp16(load_model(path))
    kept = {op: why for _, op, why in result.float32_nodes}
    assert "float16's range" in kept["Mul"] or "float16's range" in kept["Where"]
    proto = ir.to_proto(result.model)
    onnx.checker.check_model(proto)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    base = ort.InferenceSession(
        ir.to_proto(reference).SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for f in feeds:
        got, exact = session.run(None, f)[0], base.run(None, f)[0]
        assert np.isfinite(got).all()
        assert np.abs(got - exact).max() <= 2e-3 * np.ptp(exact)


def test_quantize_fp16_keeps_ops_whose_type_an_attribute_sets() -> None:
    """ConstantOfShape writes the type its ``value`` attribute has: it stays float32, a Cast joins it to the
    float16 Add, and Resize's ``scales`` stay float32 as its schema pins them."""
    from edgekit.quantize.fp16 import to_fp16

    value = numpy_helper.from_array(np.array([0.5], np.float32), "value")
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["half"], value=value),
        helper.make_node("Add", ["x", "half"], ["a"]),
        helper.make_node("Resize", ["a", "", "scales"], ["y"], mode="nearest"),
    ]
    inits = [
        numpy_helper.from_array(np.array([1, 3, 16, 16], np.int64), "shape"),
        numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 32, 32])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    result = to_fp16(load_proto(model, prepare=False))
    assert [(op, why) for _, op, why in result.float32_nodes] == [
        ("ConstantOfShape", "its output type comes from an attribute, not from a float input")
    ]
    proto = ir.to_proto(result.model)
    onnx.checker.check_model(proto, full_check=True)
    scales = next(i for i in proto.graph.initializer if i.name == "scales")
    assert scales.data_type == TensorProto.FLOAT
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got, exact = _ort(proto, [{"x": x}])[0], _ort(model, [{"x": x}])[0]
    assert got.dtype == np.float32 and np.abs(got - exact).max() <= 2e-3


def test_cli_quantize_fp16_without_calibration(model, tmp_path) -> None:
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    out, report = tmp_path / "m.fp16.onnx", tmp_path / "r.json"
    cmd = [sys.executable, "-m", "edgekit.cli.main", "quantize", str(source), "--precision", "fp16"]
    run = subprocess.run([*cmd, "-o", str(out), "--report", str(report)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    data = json.loads(report.read_text())
    assert data["verification"]["passed"] and data["quantization"]["precision"] == "fp16"
    assert data["output"]["size_ratio"] < 0.6 and "fp16 model" in run.stdout
    got, exact = _ort(onnx.load(out), _feeds(2)), _ort(model, _feeds(2))
    assert max(float(np.abs(g - e).max()) for g, e in zip(got, exact, strict=True)) < 1e-2
    missing = subprocess.run(cmd[:-2] + ["-o", str(tmp_path / "x.onnx")], capture_output=True, text=True)
    assert missing.returncode == 2 and missing.stderr.strip().splitlines() == [
        "error: --precision int8 needs calibration data: pass --calib DATA"
    ]


@pytest.mark.shared
@pytest.mark.skipif(
    os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
)
def test_squeezenet_fp16_tflite_is_half_the_size(tmp_path) -> None:
    from edgekit.core.model import load_model

    path = SHARED / "models" / "squeezenet1.1-fp32.onnx"
    fp32 = get_target("arm-cpu").package(load_model(path), tmp_path / "fp32", PackageOptions())
    fp16 = get_target("arm-cpu").package(
        load_model(path), tmp_path / "fp16", PackageOptions(precision="fp16")
    )
    ratio = (fp16 / "model.tflite").stat().st_size / (fp32 / "model.tflite").stat().st_size
    assert ratio <= 0.51
    with read_bundle(fp16) as bundle:
        v = bundle.manifest.verification
        assert v["passed"] and v["max_rel_error"] <= 1e-3


@pytest.mark.shared
@pytest.mark.skipif(
    os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
)
def test_ppocr_det_fp16_tflite_is_at_most_051x(tmp_path) -> None:
    """PP-OCRv4 det at 640x640: the fp16 file <= 0.51x the fp32 one (issue 13; 0.5099x, 495 bytes under, since each
    float16 constant shares its weight's name), and LiteRT runs it: the same outputs, bit for bit, as the same
    graph written without names (the names are labels only)."""
    from ai_edge_litert.interpreter import Interpreter
    from edgekit.core.model import load_model
    from edgekit.targets.tflite import writer
    from edgekit.targets.tflite.converter import ConvertOptions, build_graph, convert

    model = load_model(SHARED / "models" / "ch_PP-OCRv4_det_infer.onnx", {"x": (1, 3, 640, 640)})
    fp32 = convert(model, ConvertOptions())
    fp16 = convert(model, ConvertOptions(fp16_weights=True))
    assert len(fp16.data) <= 0.51 * len(fp32.data)
    bare = writer.serialize(build_graph(model, ConvertOptions(fp16_weights=True)), names=False)
    x = np.random.default_rng(0).uniform(-2, 2, (1, 640, 640, 3)).astype(np.float32)  # NHWC
    outputs = []
    for data in (fp16.data, bare):
        interpreter = Interpreter(model_content=data)
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    assert np.ptp(outputs[0]) > 0
    np.testing.assert_array_equal(outputs[0], outputs[1])


def cancelling_matmuls(delta: float) -> onnx.ModelProto:
    """y = x W - x (W + delta D): the difference of two nearly equal products, so float16-rounding W and W + delta D
    (relative 2^-11) moves y by far more than float32 does. The smaller ``delta``, the larger fp16's own cost."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 32)).astype(np.float32)  # 2,048 values: float16 on every target
    w2 = (w + delta * rng.standard_normal((64, 32))).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["a"]),
            helper.make_node("MatMul", ["x", "w2"], ["b"]),
            helper.make_node("Sub", ["a", "b"], ["y"]),
        ],
        "cancelling",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("target", ["intel-vpu", "arm-cpu"])
def test_fp16_is_judged_against_its_rounded_weights_when_float16_itself_costs(
    target, tmp_path, caplog
) -> None:
    """An fp16 artifact below 0.999 of fp32 only because its weights are float16 passes (with the cost reported
    and a warning) when it equals the source with float16-rounded weights; a cost beyond 0.99 is refused on the
    user's data, and reported with a warning on the seeded normal samples of a deploy without data (timm's
    efficientnetv2_rw_t: 0.96 on that noise, 0.999998 on photos)."""
    model = cancelling_matmuls(0.004)
    feeds = [{"x": np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)}]
    # onnxruntime on our own rounding of the weights: the recipe's cost is real and in the fallback's band
    cost = _cosine(_ort(model, feeds)[0], _ort(weights_rounded(model), feeds)[0])
    assert 0.99 < cost < 0.999
    with caplog.at_level("WARNING", logger="edgekit"):
        path = get_target(target).package(
            load_proto(model), tmp_path / "ok", PackageOptions(precision="fp16")
        )
    with read_bundle(path) as bundle:
        entry = bundle.manifest.verification["outputs"]["y"]
    assert entry["passed"] and 0.99 < entry["cosine"] < 0.999  # against fp32, reported as measured
    assert entry["fp16_weights_reference"]["cosine"] >= 0.999
    assert "cost of float16 weights" in caplog.text
    data = PackageOptions(precision="fp16", verify_samples=tuple(feeds))
    with pytest.raises(TargetError, match="cosine_fp16_cost"):
        get_target(target).package(load_proto(cancelling_matmuls(0.001)), tmp_path / "bad", data)
    assert not (tmp_path / "bad").exists()
    caplog.clear()
    with caplog.at_level("WARNING", logger="edgekit"):
        path = get_target(target).package(
            load_proto(cancelling_matmuls(0.001)), tmp_path / "seeded", PackageOptions(precision="fp16")
        )
    with read_bundle(path) as bundle:
        entry = bundle.manifest.verification["outputs"]["y"]
    assert entry["passed"] and entry["cosine"] < 0.99 and not entry["fp16_weights_reference"]["cost_gated"]
    assert entry["fp16_weights_reference"]["cosine"] >= 0.999  # the conversion itself is still held to it
    assert "no data given" in caplog.text and "pass --calib" in caplog.text
