"""The target registry and the ``intel-vpu`` target (OpenVINO IR), checked against onnxruntime."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import openvino as ov
import pytest
from cnn_models import qdq_with_onnxruntime, tiny_cnn, with_unsupported_op
from edgekit.core.errors import TargetError
from edgekit.core.model import load_proto
from edgekit.core.qdq_forms import drop_concat_identity_qdq
from edgekit.device_agents.bundle import read_bundle
from edgekit.targets import base, openvino_ir, yardstick
from edgekit.targets.base import PackageOptions, Problem, Target, get_target, register_target, target_names
from edgekit.targets.openvino_ir import IntelVpuOptions, IntelVpuTarget, export_blob
from ort_reference import node_by_node


def prepared(model: onnx.ModelProto) -> ir.Model:
    """``load_proto`` on a copy (it edits the proto it is given in place)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return load_proto(copy)


def ort_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnxruntime node by node: a QDQ model's exact semantics.

    With graph optimizations on, onnxruntime fuses Q/DQ pairs into its integer kernels; on an AVX2 CPU
    without VNNI (where its docs warn that u8 x s8 products can saturate) those were up to 4 output
    steps from the node-by-node result on this model, the OpenVINO IR at most 3.
    """
    return node_by_node(model).run(None, {"x": x})[0]


def ov_compile(bundle_dir: Path):
    core = ov.Core()
    return core.compile_model(
        core.read_model(str(bundle_dir / "model.xml")), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
    )


def inputs(count: int, seed: int = 42) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(count)]


@pytest.fixture(scope="module")
def float_model() -> onnx.ModelProto:
    return tiny_cnn()


@pytest.fixture(scope="module")
def qdq_model(tmp_path_factory: pytest.TempPathFactory, float_model: onnx.ModelProto) -> onnx.ModelProto:
    return qdq_with_onnxruntime(float_model, tmp_path_factory.mktemp("qdq"), activations="uint8")


@pytest.fixture(scope="module")
def fp16_bundle(tmp_path_factory: pytest.TempPathFactory, float_model: onnx.ModelProto) -> Path:
    out = tmp_path_factory.mktemp("fp16") / "bundle"
    options = PackageOptions(
        device_hint="cpu",
        preprocessing={"mean": [0.5]},
        provenance={"source_sha256": "cd" * 32, "calibration_samples": None},
    )
    return get_target("intel-vpu").package(prepared(float_model), out, options)


@pytest.fixture(scope="module")
def int8_bundle(tmp_path_factory: pytest.TempPathFactory, qdq_model: onnx.ModelProto) -> Path:
    out = tmp_path_factory.mktemp("int8") / "bundle"
    return get_target("intel-vpu").package(prepared(qdq_model), out, PackageOptions(device_hint="NPU"))


# --------------------------------------------------------------------------------------- registry


def test_registry_lists_and_builds_targets() -> None:
    assert "intel-vpu" in target_names()
    target = get_target("intel-vpu")
    assert isinstance(target, IntelVpuTarget)
    assert (target.runtime, target.activation_dtype) == ("openvino", "uint8")


def test_unknown_target_names_the_supported_ones() -> None:
    with pytest.raises(TargetError, match=r"unknown target 'tpu'; supported targets: .*intel-vpu"):
        get_target("tpu")


def test_duplicate_registration_is_rejected() -> None:
    class Other(Target):
        name = "intel-vpu"
        runtime = "openvino"
        activation_dtype = "uint8"

        def check(self, model: ir.Model) -> list[Problem]:
            return []

        def package(self, model: ir.Model, out_dir: Path, options: PackageOptions) -> Path:
            return out_dir

    with pytest.raises(ValueError, match="already registered by IntelVpuTarget"):
        register_target(Other)
    assert base._REGISTRY["intel-vpu"] is IntelVpuTarget


def test_target_options_and_device_hint_are_validated() -> None:
    target = get_target("intel-vpu")
    assert target.target_options(PackageOptions()) == IntelVpuOptions()
    with pytest.raises(TargetError, match="expects options of type IntelVpuOptions"):
        target.target_options(PackageOptions(target_options={"fp16": True}))
    assert target.check_device_hint("npu") == "NPU"
    with pytest.raises(TargetError, match="does not take --device-hint 'GPU'; accepted: NPU, CPU"):
        target.check_device_hint("GPU")
    with pytest.raises(TargetError, match=r"removed the MYRIAD plugin .* in 2023.0.*use --device-hint NPU"):
        target.check_device_hint("myriad")


# --------------------------------------------------------------------------------------- checks


def test_check_accepts_a_plain_cnn(float_model: onnx.ModelProto) -> None:
    assert get_target("intel-vpu").check(prepared(float_model)) == []


def test_check_reports_an_op_openvino_cannot_convert(float_model: onnx.ModelProto) -> None:
    problems = get_target("intel-vpu").check(prepared(with_unsupported_op(float_model)))
    assert [(p.severity, p.op_type, p.node) for p in problems] == [("error", "Det", "my_det")]
    assert "no conversion for Det" in problems[0].message


def test_check_reports_dynamic_inputs() -> None:
    model = ir.from_proto(tiny_cnn(batch="N"))  # not through load_model, which would fix the batch
    problems = get_target("intel-vpu").check(model)
    assert len(problems) == 1 and problems[0].node == "x" and "--input-shape x=" in problems[0].message


def test_check_warns_about_int8_activations_it_cannot_put_on_uint8(
    tmp_path: Path, float_model: onnx.ModelProto
) -> None:
    """int8 Q -> DQ chains go to OpenVINO on uint8 (tests/test_unsigned.py); one whose int8 values also leave the
    graph cannot, and is named."""
    qdq = qdq_with_onnxruntime(float_model, tmp_path, activations="int8")
    assert get_target("intel-vpu").check(prepared(qdq)) == []
    quantize = next(n for n in qdq.graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in
                    {t.name for t in qdq.graph.initializer})  # fmt: skip
    qdq.graph.output.append(
        onnx.helper.make_tensor_value_info(quantize.output[0], onnx.TensorProto.INT8, None)
    )
    problems = get_target("intel-vpu").check(prepared(qdq))
    assert [p.severity for p in problems] == ["warning"]
    assert "expect uint8 activations" in problems[0].message and problems[0].node == quantize.name


def test_a_target_asks_openvino_about_a_model_once(
    tmp_path: Path, float_model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deploy checks its model (the warnings), then ``package`` checks it again: the child process running
    OpenVINO's frontend runs once per model form, and without ``query_model`` (about what compiling costs),
    which ``support_problems`` (``edgekit inspect``) asks."""
    asked: list[str] = []
    queried: list[bool] = []
    real = openvino_ir._openvino_problems

    def spy(m, path, query=True):
        asked.append(path)
        queried.append(query)
        return real(m, path, query)

    monkeypatch.setattr(openvino_ir, "_openvino_problems", spy)
    target = get_target("intel-vpu")
    unsupported = prepared(with_unsupported_op(float_model))
    first = target.check(unsupported)
    assert [p.op_type for p in first] == ["Det"] and target.check(unsupported) == first and len(asked) == 1
    model = prepared(float_model)
    assert target.check(model) == [] and len(asked) == 2  # another model is asked about
    target.package(model, tmp_path / "b", PackageOptions())
    assert len(asked) == 2 and queried == [False, False]
    assert target.support_problems(model) == [] and queried == [False, False, True]


def test_unsupported_model_fails_packaging_and_leaves_nothing(
    tmp_path: Path, float_model: onnx.ModelProto
) -> None:
    with pytest.raises(TargetError, match=r"cannot take this model: Det 'my_det'"):
        get_target("intel-vpu").package(
            prepared(with_unsupported_op(float_model)), tmp_path / "b", PackageOptions()
        )
    assert list(tmp_path.iterdir()) == []


def test_failed_verification_leaves_nothing(
    tmp_path: Path, float_model: onnx.ModelProto, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgekit.targets import openvino_ir

    convert = openvino_ir._convert

    def corrupted(proto: onnx.ModelProto, folder: Path, compress: bool):  # a conversion that breaks a weight
        bad = onnx.ModelProto()
        bad.CopyFrom(proto)
        w = next(t for t in bad.graph.initializer if len(t.dims) == 4)
        array = onnx.numpy_helper.to_array(w).copy()
        array[0] *= -1.0  # one output channel of the first convolution negated
        w.CopyFrom(onnx.numpy_helper.from_array(array, w.name))
        return convert(bad, folder, compress)

    monkeypatch.setattr(openvino_ir, "_convert", corrupted)
    with pytest.raises(TargetError, match=r"verification failed: .*output 'y' \(probabilities\): .*cosine"):
        get_target("intel-vpu").package(prepared(float_model), tmp_path / "b", PackageOptions())
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------- fp16 IR


def test_fp16_ir_weights_are_fp16(fp16_bundle: Path, float_model: onnx.ModelProto) -> None:
    xml = (fp16_bundle / "model.xml").read_text()
    assert 'element_type="f16"' in xml
    weight_bytes = sum(t.ByteSize() for t in float_model.graph.initializer)
    assert (fp16_bundle / "model.bin").stat().st_size <= 0.6 * weight_bytes


def test_fp16_ir_matches_onnx(fp16_bundle: Path, float_model: onnx.ModelProto) -> None:
    compiled = ov_compile(fp16_bundle)
    for x in inputs(8):
        ref = ort_run(float_model, x)
        got = compiled({"x": x})[compiled.output(0)]
        assert np.abs(got - ref).max() <= 1e-2 * (ref.max() - ref.min())
        assert got.argmax() == ref.argmax()


def test_fp16_manifest_fields(fp16_bundle: Path) -> None:
    loaded = read_bundle(fp16_bundle)
    m = loaded.manifest
    assert (m.target, m.runtime, m.device_hint) == ("intel-vpu", "openvino", "CPU")
    assert [(f.path, f.role) for f in m.model_files] == [("model.xml", "model"), ("model.bin", "weights")]
    assert m.requirements[0].package == "openvino" and m.requirements[0].min_version.count(".") == 1
    assert [(t.name, t.shape, t.dtype, t.layout) for t in m.inputs] == [
        ("x", (1, 3, 16, 16), "float32", "NCHW")
    ]
    assert [(t.name, t.shape, t.dtype) for t in m.outputs] == [("y", (1, 10), "float32")]
    assert m.preprocessing == {"mean": [0.5]}
    assert m.provenance["source_sha256"] == "cd" * 32 and m.provenance["edgekit_version"]
    v = m.verification
    assert v["precision"] == "fp16" and v["passed"] is True and v["samples"] == 3
    y = v["outputs"]["y"]
    assert v["yardstick"] == "fp16" and y["kind"] == "probabilities" and y["passed"] is True
    assert y["max_rel_error"] > 0 and all(c["passed"] or c["metric"] == "max_rel_error" for c in y["checks"])
    if "NPU" not in ov.Core().available_devices:
        assert v["npu"]["compiled"] is False and "no NPU plugin" in v["npu"]["note"]


def test_archive_bundle_with_given_verify_samples(tmp_path: Path, float_model: onnx.ModelProto) -> None:
    samples = tuple({"x": x} for x in inputs(5, seed=7))
    options = PackageOptions(archive=True, verify_samples=samples)
    out = get_target("intel-vpu").package(prepared(float_model), tmp_path / "b", options)
    assert out == tmp_path / "b.tar.gz"
    with read_bundle(out) as loaded:
        assert loaded.primary_path.name == "model.xml" and loaded.path("model.bin").is_file()
        assert loaded.manifest.verification["samples"] == 5


# --------------------------------------------------------------------------------------- int8 IR


def test_int8_ir_has_fake_quantize_where_the_qdq_pairs_were(
    int8_bundle: Path, qdq_model: onnx.ModelProto
) -> None:
    model = ov.Core().read_model(str(int8_bundle / "model.xml"))
    fq = [op for op in model.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]
    assert {op.get_attributes()["levels"] for op in fq} == {256}
    q_outputs = {n.output[0] for n in qdq_model.graph.node if n.op_type == "QuantizeLinear"}
    pairs = {
        n.output[0]
        for n in qdq_model.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] in q_outputs
    }
    # Each pair's DequantizeLinear output is a FakeQuantize's, or its dequantization's (Convert/Subtract/Multiply
    # after a FakeQuantize with integer output levels, as OpenVINO's ONNX frontend writes it).
    by_name = {
        n: op
        for op in model.get_ordered_ops()
        if op.get_output_size() and op.get_type_name() != "Result"
        for n in op.output(0).get_names()
    }
    assert pairs and pairs <= set(by_name)
    for name in pairs:
        op = by_name[name]
        while op.get_type_name() in ("Multiply", "Subtract", "Convert"):
            op = op.input_value(0).get_node()
        assert op.get_type_name() == "FakeQuantize", name
    report = read_bundle(int8_bundle).manifest.verification["int8"]
    assert report["qdq_pairs"] == report["fake_quantize"] == len(pairs)
    assert report["fake_quantize_in_ir"] == len(fq)


def test_int8_ir_runs_integer_convolutions(int8_bundle: Path) -> None:
    runtime = ov_compile(int8_bundle).get_runtime_model()
    precisions = Counter(
        op.get_rt_info()["runtimePrecision"].astype(str)
        for op in runtime.get_ordered_ops()
        if op.get_rt_info()["layerType"].astype(str) in ("Convolution", "FullyConnected")
    )
    assert sum(precisions.values()) == 3 and set(precisions) <= {"u8", "i8"}
    report = read_bundle(int8_bundle).manifest.verification["int8"]
    assert report["int8_compute_layers"] == 3 and report["float_compute_layers"] == []
    assert "Softmax" in report["float_layers"]  # what stayed float is reported


def test_int8_ir_agrees_with_the_qdq_model(int8_bundle: Path, qdq_model: onnx.ModelProto) -> None:
    compiled = ov_compile(int8_bundle)
    out_scale = next(
        onnx.numpy_helper.to_array(t)
        for t in qdq_model.graph.initializer
        if t.name
        == next(
            n.input[1] for n in qdq_model.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == "y"
        )
    )
    agree = 0
    xs = inputs(20)
    for x in xs:
        ref = ort_run(qdq_model, x)
        got = compiled({"x": x})[compiled.output(0)]
        assert np.abs(got - ref).max() <= 3 * float(out_scale) + 1e-6  # within 3 output quantization steps
        agree += int(got.argmax() == ref.argmax())
    assert agree >= 19
    v = read_bundle(int8_bundle).manifest.verification
    assert v["precision"] == "int8" and v["passed"] is True and v["yardstick"] == "int8"
    # Beside the conversion check: the IR against the QDQ model's exact semantics (this CPU's kernels).
    assert 0.0 <= v["max_rel_error_vs_exact_qdq"] <= 0.05


def test_int8_bin_is_smaller_than_fp16(int8_bundle: Path, fp16_bundle: Path) -> None:
    assert (int8_bundle / "model.bin").stat().st_size < (fp16_bundle / "model.bin").stat().st_size


# --------------------------------------------------------------------------------------- NPU blob path


def test_exported_blob_imports_and_runs(fp16_bundle: Path) -> None:
    """The NPU code path (compile + export) exercised on the CPU plugin, the device this host has."""
    core = ov.Core()
    model = core.read_model(str(fp16_bundle / "model.xml"))
    blob = export_blob(core, model, "CPU")
    assert len(blob) > 0
    imported = core.import_model(blob, "CPU")
    direct = core.compile_model(model, "CPU")
    x = inputs(1)[0]
    np.testing.assert_allclose(
        imported({"x": x})[imported.output(0)], direct({"x": x})[direct.output(0)], rtol=1e-5
    )


def test_options_dataclass_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        IntelVpuOptions().compile_npu = False  # type: ignore[misc]


def test_compare_outputs_figures() -> None:
    ref = [{"y": np.array([[0.0, 1.0, 3.0]])}, {"y": np.array([[2.0, 0.0, 1.0]])}]
    got = [{"y": np.array([[0.0, 1.5, 3.0]])}, {"y": np.array([[1.0, 2.5, 1.0]])}]
    figures = yardstick.compare_outputs(ref, got)
    y = figures["outputs"]["y"]
    assert figures["samples"] == 2
    assert y["max_abs_error"] == 2.5 and y["reference_range"] == 3.0
    assert y["max_rel_error"] == pytest.approx(2.5 / 3.0) and y["mean_abs_error"] == pytest.approx(4.0 / 6)
    assert y["top1_agreement"] == 0.5
    with pytest.raises(TargetError, match="has shape"):
        yardstick.compare_outputs(ref, [{"y": np.zeros((1, 4))}, {"y": np.zeros((1, 4))}])


def test_default_verify_samples_follow_the_inputs(float_model: onnx.ModelProto) -> None:
    samples = base.default_verify_samples(prepared(float_model), count=2)
    assert (
        len(samples) == 2 and samples[0]["x"].shape == (1, 3, 16, 16) and samples[0]["x"].dtype == np.float32
    )
    assert not np.array_equal(samples[0]["x"], samples[1]["x"])
    again = base.default_verify_samples(prepared(float_model), count=2)
    np.testing.assert_array_equal(samples[1]["x"], again[1]["x"])  # seeded: the manifest figures repeat


def test_fake_quantize_of_a_concat_is_reported(tmp_path: Path) -> None:
    """edgekit's quantizer puts Q/DQ on both sides of a Concat with one scale: every pair is a FakeQuantize
    (the CPU plugin merges the repeats when it compiles the IR)."""
    from cnn_models import calibration_samples, fire_module
    from edgekit import QuantizeOptions, quantize_model

    path = tmp_path / "fire.onnx"
    onnx.save(fire_module(), path)
    calib = tmp_path / "calib.npy"
    np.save(calib, np.stack(calibration_samples((1, 3, 16, 16), count=8)))
    qdq = quantize_model(path, calib, options=QuantizeOptions(activations="uint8", samples=8)).model
    bundle = get_target("intel-vpu").package(prepared(qdq), tmp_path / "b", PackageOptions())
    report = read_bundle(bundle).manifest.verification["int8"]
    q_outputs = {n.output[0] for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    pairs = [n for n in qdq.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in q_outputs]
    assert report["qdq_pairs"] == report["fake_quantize"] == len(pairs)
    assert 0 < report["fake_quantize_in_ir"] <= len(pairs)
    assert report["int8_compute_layers"] == report["compute_layers"] == 3


@pytest.mark.shared
@pytest.mark.skipif(
    os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
)
def test_shared_squeezenet_fp16_and_int8(tmp_path: Path) -> None:
    """The issue's figures on a slice of the shared images (the full run: benchmarks/openvino_figures.py)."""
    from edgekit import QuantizeOptions, quantize_model
    from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
    from edgekit.core.model import load_model

    shared = Path(__file__).resolve().parents[3] / "shared"
    source = shared / "models" / "squeezenet1.1-fp32.onnx"
    model = load_model(source)
    pre = ImagePreprocess(size=(224, 224), color="BGR", mean=(104.0, 117.0, 123.0))
    images = list(open_dataset(shared / "data" / "imagenet-sample-200", input_specs(model), pre, limit=40))
    target = get_target("intel-vpu")
    fp16 = target.package(model, tmp_path / "fp16", PackageOptions(verify_samples=(images[0].inputs,)))
    qdq = quantize_model(source, images[:20], options=QuantizeOptions(activations="uint8", samples=20)).model
    int8 = target.package(
        prepared(qdq), tmp_path / "int8", PackageOptions(verify_samples=(images[0].inputs,))
    )
    onnx_size = source.stat().st_size
    assert (fp16 / "model.bin").stat().st_size <= 0.52 * onnx_size
    assert (int8 / "model.bin").stat().st_size <= 0.3 * onnx_size
    ref = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"])
    fp16_ir, int8_ir = ov_compile(fp16), ov_compile(int8)
    qdq_ref = node_by_node(qdq)  # exact QDQ rounding
    agree = 0
    for s in images:
        probs = ref.run(None, s.inputs)[0]
        assert np.abs(fp16_ir(s.inputs)[fp16_ir.output(0)] - probs).max() <= 1e-2
        q = qdq_ref.run(None, s.inputs)[0].ravel()
        agree += int(int8_ir(s.inputs)[int8_ir.output(0)].argmax() == q.argmax())
    # 20 calibration images here; with 100, all 200 images agree (docs/benchmarks.md)
    assert agree >= len(images) - 1
    report = read_bundle(int8).manifest.verification["int8"]
    # every Q/DQ pair becomes a FakeQuantize, but the identity pairs after the fire modules' Concats, which the
    # IR drops (edgekit.core.qdq_forms.drop_concat_identity_qdq: OpenVINO crashes on some of them)
    given = drop_concat_identity_qdq(qdq)
    q_outputs = {n.output[0] for n in given.graph.node if n.op_type == "QuantizeLinear"}
    pairs = [n for n in given.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in q_outputs]
    assert report["fake_quantize"] == report["qdq_pairs"] == len(pairs) >= 28
    assert report["int8_compute_layers"] == 26


def uint8_qdq_around(
    op: onnx.NodeProto, scale: float, zero: int, out_shape: list[int], inits: list[onnx.TensorProto] = ()
) -> onnx.ModelProto:
    """x [1, 3, 16, 16] -> Q -> DQ -> ``op`` (reading ``xd``, writing ``p``) -> Q -> DQ -> y, uint8 on one grid."""
    h = onnx.helper
    grid = [
        onnx.numpy_helper.from_array(np.array(scale, np.float32), "s"),
        onnx.numpy_helper.from_array(np.array(zero, np.uint8), "z"),
    ]
    nodes = [
        h.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        h.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        op,
        h.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
        h.make_node("DequantizeLinear", ["pq", "s", "z"], ["y"]),
    ]
    graph = h.make_graph(
        nodes,
        f"uint8_{op.op_type.lower()}",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 16, 16])],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
        [*grid, *inits],
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 19)])


def padded_uint8_average_pool() -> onnx.ModelProto:
    """x -> Q -> DQ -> AveragePool (3x3, pads 1, counting the padding) -> Q -> DQ, uint8 with zero point 100."""
    pool = onnx.helper.make_node(
        "AveragePool", ["xd"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1
    )
    return uint8_qdq_around(pool, 0.02, 100, [1, 3, 16, 16])


def test_int8_ir_pads_an_average_pool_with_the_zero_point(tmp_path: Path) -> None:
    """OpenVINO pads a dequantized tensor with the integer 0, not its zero point: the IR's border values of a pool
    counting its padding were 56 steps off; the IR pads the integer tensor with the zero point first."""
    model = padded_uint8_average_pool()
    bundle = get_target("intel-vpu").package(prepared(model), tmp_path / "bundle", PackageOptions())
    compiled = ov_compile(bundle)
    for x in inputs(3):
        x = np.abs(x)  # around the zero point's side of the range, where padding with 0 shows most
        ref = ort_run(model, x)
        got = compiled({"x": x})[compiled.output(0)]
        assert np.abs(got - ref).max() <= 0.02 * 1.001, np.abs(got - ref).max() / 0.02


def padded_uint8_constant(value: float) -> onnx.ModelProto:
    """x -> Q -> DQ -> Pad (constant ``value``, the last axis by 2 and 3) -> Q -> DQ, uint8 on one grid (Longformer
    fills its chunked attention scores with -1 so)."""
    inits = [
        onnx.numpy_helper.from_array(np.array([0, 0, 0, 2, 0, 0, 0, 3], np.int64), "pads"),
        onnx.numpy_helper.from_array(np.array(value, np.float32), "value"),
    ]
    pad = onnx.helper.make_node("Pad", ["xd", "pads", "value"], ["p"], mode="constant")
    return uint8_qdq_around(pad, 0.0061, 164, [1, 3, 16, 21], inits)


@pytest.mark.parametrize("value", [-1.0, 0.3])
def test_int8_ir_pads_with_a_non_zero_constant(tmp_path: Path, value: float) -> None:
    """OpenVINO writes a Pad's constant itself as the integer padding of a dequantized tensor: -1 was refused ("-1
    assigned value out of range for u8", Longformer) and 0.3 padded 0 steps, -1.0 off. The IR pads the integer
    tensor with the constant's integer first."""
    model = padded_uint8_constant(value)
    bundle = get_target("intel-vpu").package(prepared(model), tmp_path / "bundle", PackageOptions())
    compiled = ov_compile(bundle)
    for x in inputs(2):
        x = np.clip(x * 0.3, -0.9, 0.5)
        ref = ort_run(model, x)
        border = np.concatenate([ref[..., :2], ref[..., 18:]], axis=-1)
        assert np.abs(border - value).max() <= 0.0061 / 2
        got = compiled({"x": x})[compiled.output(0)]
        np.testing.assert_allclose(got, ref, atol=0.0061 * 1.001)


def test_int8_ir_of_a_concat_followed_by_a_requantization(tmp_path: Path) -> None:
    """RetinaFace's SSH tail (Concat -> Q/DQ -> Relu -> Q/DQ of another range): OpenVINO crashed (SIGSEGV) reading
    and compiling it until the identity Q/DQ pair after the Concat was dropped. Packaged in a child process so
    that a regression fails this test instead of ending pytest; the IR must give the QDQ model's values."""
    import isolated_fns
    from edgekit.core import isolated
    from test_runtime import _concat_feeds, concat_then_requantize

    model = concat_then_requantize()
    out = isolated.call(
        isolated_fns.package_intel_vpu,
        model.SerializeToString(),
        str(tmp_path / "bundle"),
        what="intel-vpu",
        doing="packaging",
    )
    compiled = ov_compile(Path(out))
    for seed in range(3):
        feeds = _concat_feeds(seed)
        ref = node_by_node(model).run(None, feeds)[0]
        got = compiled(feeds)[compiled.output(0)]
        np.testing.assert_allclose(got, ref, atol=1e-4)
    v = read_bundle(Path(out)).manifest.verification
    assert v["precision"] == "int8" and v["passed"] is True


def test_an_openvino_crash_while_checking_is_a_typed_error() -> None:
    """The check runs OpenVINO's query_model in a child: on the model OpenVINO crashes on (the Concat pattern,
    handed over as written) the CLI gets a TargetError naming the step, not a SIGSEGV of its own process."""
    import isolated_fns
    from edgekit.core import isolated
    from test_runtime import concat_then_requantize

    message = isolated.call(
        isolated_fns.intel_vpu_check_as_written,
        concat_then_requantize().SerializeToString(),
        what="test",
        doing="checking",
    )
    assert message.startswith("intel-vpu: OpenVINO aborted (SIGSEGV) while checking which ops"), (
        f"{message}: if OpenVINO no longer crashes here, drop_concat_identity_qdq may go"
    )


def anchor_decode_detector() -> onnx.ModelProto:
    """Two convolution heads flattened to [1, anchors, 4] and concatenated, then the anchor decode as BlazeFace and
    SSD exports write it: ``r[..., k]`` (Gather, 0-d index) / 128 * anchor_wh + anchor_xy, corners by Sub/Add,
    Unsqueeze + Concat; scores are Sigmoid(r[..., 1])."""
    h, rng = onnx.helper, np.random.default_rng(7)
    n = 16 * 16 * 2 + 8 * 8 * 2  # anchors: 2 per cell at 16x16 and 8x8
    consts = {
        "w16": rng.normal(0, 8, (8, 4, 1, 1)),
        "w8": rng.normal(0, 4, (8, 4, 3, 3)),
        "b": rng.normal(0, 4, 8),
        "flat": np.array([1, -1, 4]),
        "k0": np.array(0),
        "k1": np.array(1),
        "k2": np.array(2),
        "d": np.array(128.0),
        "half": np.array(2.0),
        "aw": rng.uniform(0.05, 0.5, n),
        "ax": rng.uniform(0.0, 1.0, n),
        "last": np.array([-1]),
    }
    inits = [
        onnx.numpy_helper.from_array(v.astype(np.int64 if v.dtype.kind == "i" else np.float32), k)
        for k, v in consts.items()
    ]
    nodes = [
        h.make_node("Conv", ["x", "w16", "b"], ["c16"]),
        h.make_node("Conv", ["x", "w8", "b"], ["c8"], strides=[2, 2], pads=[1, 1, 1, 1]),
        h.make_node("Transpose", ["c16"], ["t16"], perm=[0, 2, 3, 1]),
        h.make_node("Transpose", ["c8"], ["t8"], perm=[0, 2, 3, 1]),
        h.make_node("Reshape", ["t16", "flat"], ["r16"]),
        h.make_node("Reshape", ["t8", "flat"], ["r8"]),
        h.make_node("Concat", ["r16", "r8"], ["r"], axis=1),
    ]
    for k in ("k0", "k1", "k2"):
        nodes.append(h.make_node("Gather", ["r", k], [f"g{k}"], axis=2))
    nodes += [
        h.make_node("Div", ["gk0", "d"], ["x0"]),
        h.make_node("Mul", ["x0", "aw"], ["x1"]),
        h.make_node("Add", ["x1", "ax"], ["xc"]),
        h.make_node("Div", ["gk2", "d"], ["w0"]),
        h.make_node("Mul", ["w0", "aw"], ["w1"]),
        h.make_node("Div", ["w1", "half"], ["hw"]),
        h.make_node("Sub", ["xc", "hw"], ["left"]),
        h.make_node("Add", ["xc", "hw"], ["right"]),
        h.make_node("Unsqueeze", ["left", "last"], ["l1"]),
        h.make_node("Unsqueeze", ["right", "last"], ["r1"]),
        h.make_node("Concat", ["l1", "r1"], ["boxes"], axis=-1),
        h.make_node("Sigmoid", ["gk1"], ["scores"]),
    ]
    graph = h.make_graph(
        nodes,
        "anchor_decode",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 16, 16])],
        [
            h.make_tensor_value_info("boxes", onnx.TensorProto.FLOAT, [1, n, 2]),
            h.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [1, n]),
        ],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_int8_ir_of_an_anchor_decode_tail(tmp_path: Path) -> None:
    """A detector's decode ``r[..., k] / 128 * anchor_wh + anchor_xy`` after a Concat of its heads: OpenVINO's
    CPU plugin refused the QDQ model ("Shape inference input shapes {[1,640,640],[3]}": its dequantization moved
    below the 0-d-index Gather unchanged, edgekit.core.qdq_forms.scalar_gathers_squeezed). The int8 deploy packages
    it, the CPU runs the convolutions in u8, and the IR gives the QDQ model's exact values (onnxruntime node by
    node): cosine >= 0.999 per output."""
    from edgekit import QuantizeOptions, quantize_model

    model = anchor_decode_detector()
    onnx.save(model, tmp_path / "decode.onnx")
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((24, 1, 4, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", x=samples[:16, 0])
    options = QuantizeOptions(activations="uint8")
    qdq = quantize_model(tmp_path / "decode.onnx", tmp_path / "calib.npz", options=options).model
    qdq = qdq if isinstance(qdq, onnx.ModelProto) else ir.to_proto(qdq)
    bundle = get_target("intel-vpu").package(prepared(qdq), tmp_path / "int8", PackageOptions())
    verification = read_bundle(bundle).manifest.verification
    assert verification["passed"] is True and verification["precision"] == "int8"
    assert verification["int8"]["int8_compute_layers"] == verification["int8"]["compute_layers"] == 2
    compiled, exact = ov_compile(bundle), node_by_node(qdq)
    got: dict[str, list[np.ndarray]] = {"boxes": [], "scores": []}
    want: dict[str, list[np.ndarray]] = {"boxes": [], "scores": []}
    for x in samples[16:]:
        out = compiled({"x": x})
        for name, ref in zip(("boxes", "scores"), exact.run(["boxes", "scores"], {"x": x}), strict=True):
            got[name].append(out[compiled.output(name)].ravel())
            want[name].append(ref.ravel())
    for name in got:
        a, b = np.concatenate(got[name]), np.concatenate(want[name])
        cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert cosine >= 0.999, (name, cosine)


def dfl_head(anchors: int = 336) -> onnx.ModelProto:
    """YOLOv8's distribution focal loss decode: a pointwise Conv1d's box logits [1, 64, A] -> [1, 4, 16, A] -> softmax over the 16 bins
    (between two Transposes, as torch exports it) -> a 1x1 Conv with the weights 0..15 -> [1, 4, A]."""
    h, tp = onnx.helper, onnx.TensorProto
    inits = [
        onnx.numpy_helper.from_array(
            np.random.default_rng(1).normal(0, 0.2, (64, 64, 1)).astype(np.float32), "k"
        ),
        onnx.numpy_helper.from_array(np.array([1, 4, 16, anchors], np.int64), "bins"),
        onnx.numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(1, 16, 1, 1), "w"),
        onnx.numpy_helper.from_array(np.array([1, 4, anchors], np.int64), "sides"),
    ]
    nodes = [
        h.make_node("Conv", ["x", "k"], ["logits"], name="box_conv"),
        h.make_node("Reshape", ["logits", "bins"], ["r"]),
        h.make_node("Transpose", ["r"], ["t"], perm=[0, 3, 1, 2]),
        h.make_node("Softmax", ["t"], ["p"], axis=-1),
        h.make_node("Transpose", ["p"], ["pt"], perm=[0, 3, 2, 1]),
        h.make_node("Conv", ["pt", "w"], ["c"], name="dfl_conv"),
        h.make_node("Reshape", ["c", "sides"], ["y"]),
    ]
    graph = h.make_graph(nodes, "dfl", [h.make_tensor_value_info("x", tp.FLOAT, [1, 64, anchors])],
                         [h.make_tensor_value_info("y", tp.FLOAT, [1, 4, anchors])], inits)  # fmt: skip
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 13)])


@pytest.mark.parametrize("precision", ["w8", "w4"])
def test_weight_only_ir_keeps_a_transposed_1x1_conv_float(tmp_path: Path, precision: str) -> None:
    """Found by benchmarks/recipe_survey.py: `edgekit deploy yolov8n --target intel-vpu --precision w8|w4` was
    refused by verification (cosine 0.9977, boxes 63 px off): OpenVINO's CPU plugin computes a 1x1 Conv with i8
    weights fed by a Transpose with its output's last two axes swapped (this head with DequantizeLinear weights:
    13.2 off on a range of 14.9 against onnxruntime; with float weights 3e-6). That Conv's weights stay float in
    the IR (the same values), the manifest names it, and the IR agrees with onnxruntime on the weight-only model."""
    from edgekit.quantize.weight_only import as_weight_only

    model = dfl_head()
    bundle = get_target("intel-vpu").package(
        prepared(model), tmp_path / precision, PackageOptions(precision=precision)
    )
    verification = read_bundle(bundle).manifest.verification
    assert verification["passed"] is True and verification["precision"] == precision
    kept = verification["compressed_weights"]["kept_float"]
    assert kept["nodes"] == ["dfl_conv"] and "Transpose" in kept["reason"]
    assert verification["compressed_weights"]["weight_constants"] == {"i8": 1}  # box_conv's weights stay int8
    weight_only = ir.to_proto(as_weight_only(prepared(model), precision))
    assert any(
        n.op_type == "DequantizeLinear" for n in weight_only.graph.node
    )  # the conv is compressed there
    x = (np.random.default_rng(0).standard_normal((1, 64, 336)) * 3).astype(np.float32)
    want = ort_run(weight_only, x)
    got = ov_compile(bundle)({"x": x})[0]
    np.testing.assert_allclose(got, want, atol=1e-4 * float(np.ptp(want)))


@pytest.mark.parametrize("precision", ["w8", "w4"])
def test_weight_only_ir_is_the_one_convert_model_writes(tmp_path: Path, precision: str) -> None:
    """The weight-only IR is ``Core.read_model`` plus ``ovc``'s own offline transformations
    (``openvino_ir.ovc_transformations``), not ``convert_model``, which sends a usage event over the network:
    the same ``.bin`` bytes and the same XML as ``convert_model``'s but for generated names and its
    conversion-parameters record."""
    import re

    import openvino as ov
    from edgekit.quantize.weight_only import as_weight_only
    from edgekit.targets.openvino_ir import ovc_transformations

    path = tmp_path / "weight_only.onnx"
    onnx.save(ir.to_proto(as_weight_only(prepared(dfl_head()), precision)), path)
    ov.save_model(ov.convert_model(str(path)), str(tmp_path / "ovc.xml"), compress_to_fp16=False)
    ours = ovc_transformations(ov.Core().read_model(str(path)))
    ov.save_model(ours, str(tmp_path / "ours.xml"), compress_to_fp16=False)
    assert (tmp_path / "ovc.bin").read_bytes() == (tmp_path / "ours.bin").read_bytes()

    def layers(name: str) -> str:
        text = (tmp_path / name).read_text()
        return re.sub(r'_[0-9]+"', '_N"', text[: text.rindex("<rt_info>")])

    assert layers("ovc.xml") == layers("ours.xml")
    assert "Convert" in layers("ours.xml")  # the compressed weights' decompression


def requantized_concat(with_slice: bool = True, same_params: bool = True) -> onnx.ModelProto:
    """Two QDQ Conv + LeakyRelu layers (uint8, different scales) -> Concat -> Q -> DQ -> [whole-tensor Slice] ->
    Q -> DQ -> Conv, as onnxruntime's quantize_static writes NanoDet-Plus' GhostPAN (``cat([x1, x2])[:, :oup]``):
    the second Q/DQ has the Concat's own scale and zero point (``same_params``) or another one."""
    h, rng = onnx.helper, np.random.default_rng(3)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(onnx.numpy_helper.from_array(value, name))
        return name

    def qdq(name: str, src: str, scale: float, zero_point: int) -> str:
        s, z = (
            const(name + "_s", np.array(scale, np.float32)),
            const(name + "_z", np.array(zero_point, np.uint8)),
        )
        nodes.append(h.make_node("QuantizeLinear", [src, s, z], [name + "_q"]))
        nodes.append(h.make_node("DequantizeLinear", [name + "_q", s, z], [name + "_dq"]))
        return name + "_dq"

    def conv(name: str, x: str, cout: int, cin: int, k: int) -> str:
        w = np.round(rng.normal(0, 30, (cout, cin, k, k))).clip(-127, 127).astype(np.int8)
        wq = const(name + "_w", w)
        nodes.append(
            h.make_node("DequantizeLinear", [wq, const(name + "_ws", np.array(0.01, np.float32))], [wq + "d"])
        )
        nodes.append(h.make_node("Conv", [x, wq + "d"], [name], pads=[k // 2] * 4))
        return name

    def leaky(name: str, x: str) -> str:
        nodes.append(h.make_node("LeakyRelu", [x], [name], alpha=0.1))
        return name

    x = qdq("x", "x", 0.02, 128)
    a0 = qdq("a0", leaky("r0", conv("c0", x, 4, 4, 3)), 0.019, 24)
    a1 = qdq("a1", leaky("r1", conv("c1", a0, 4, 4, 3)), 0.0233, 25)
    nodes.append(h.make_node("Concat", [a0, a1], ["cat"], axis=1))
    cat = qdq("cat", "cat", 0.0233, 25)
    if with_slice:
        ends = (const("st", np.array([0], np.int64)), const("en", np.array([8], np.int64)))
        nodes.append(h.make_node("Slice", [cat, *ends, const("ax", np.array([1], np.int64))], ["sliced"]))
        cat = "sliced"
    cat = qdq("again", cat, 0.0233 if same_params else 0.03, 25)
    y = conv("y", cat, 4, 8, 1)
    graph = h.make_graph(
        nodes,
        "requantized_concat",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        [h.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("with_slice", [True, False])
def test_a_requantize_to_the_same_parameters_is_dropped_and_the_ir_builds(
    tmp_path: Path, with_slice: bool
) -> None:
    """Q(DQ(x)) with DQ's own type, scale and zero point is x: loading drops that Q (``DropRequantizeIdentityPass``)
    with the same values on onnxruntime, and intel-vpu packages the model. OpenVINO 2026.4's CPU plugin crashed
    (SIGSEGV in query_model) on the Concat -> Q -> DQ -> Q -> DQ left where a whole-tensor Slice was: onnxruntime's
    quantize_static of NanoDet-Plus was refused with "OpenVINO aborted (SIGSEGV)". Another scale stays."""
    model = requantized_concat(with_slice)
    proto = ir.to_proto(prepared(model))
    kinds = [n.op_type for n in proto.graph.node]
    assert "Slice" not in kinds and kinds.count("QuantizeLinear") == 4  # x, a0, a1, the Concat's
    x = np.random.default_rng(0).normal(0, 1, (1, 4, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(ort_run(proto, x), ort_run(model, x))
    kept = ir.to_proto(prepared(requantized_concat(with_slice, same_params=False)))
    assert [n.op_type for n in kept.graph.node].count("QuantizeLinear") == 5

    out = tmp_path / "out"
    IntelVpuTarget().package(prepared(model), out, PackageOptions())
    compiled = ov_compile(out)
    got = compiled({"x": x})[compiled.outputs[0]]
    np.testing.assert_allclose(got, ort_run(model, x), atol=0.01 * float(np.ptp(ort_run(model, x))))


def test_an_fp32_ir_whose_index_output_misses_its_bar_is_a_typed_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ArgMax output of an fp32 IR that differs from the host's beyond fp32's bar is refused in one typed
    line. (The verification once handed the selection tail's float64 runner to the index outputs' score hook,
    which it calls without arguments: a TypeError here.) The IR's indices are shifted by one channel in the
    in-process run, as a wrong layout would."""
    h, tp = onnx.helper, onnx.TensorProto
    graph = h.make_graph(
        [h.make_node("ArgMax", ["x"], ["idx"], axis=1, keepdims=1)],
        "argmax",
        [h.make_tensor_value_info("x", tp.FLOAT, [1, 4, 8, 8])],
        [h.make_tensor_value_info("idx", tp.INT64, [1, 1, 8, 8])],
    )
    model = prepared(h.make_model(graph, opset_imports=[h.make_opsetid("", 13)]))
    real = openvino_ir.run_compiled
    monkeypatch.setattr(
        openvino_ir,
        "run_compiled",
        lambda compiled, feeds: {n: (v + 1) % 4 for n, v in real(compiled, feeds).items()},
    )
    target = get_target("intel-vpu")
    with pytest.raises(TargetError, match="verification failed") as failed:
        target.package(model, tmp_path / "b", PackageOptions(precision="fp32"))
    assert "idx" in str(failed.value) and not (tmp_path / "b").exists()
