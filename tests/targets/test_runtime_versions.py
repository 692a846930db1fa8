"""The oldest runtime a bundle requires, computed from real converted artifacts against the tables of
``edgekit.targets.runtime_versions`` (the references: OpenVINO's own reading of the IR, LiteRT's own
schema reading of the .tflite)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import onnx
import onnx_ir as ir
import openvino as ov
import pytest
from edgekit.device_agents.bundle import Requirement, read_bundle, version_key
from edgekit.targets import runtime_versions as rv
from edgekit.targets.base import PackageOptions, get_target
from edgekit.targets.tflite.writer import _INT8_VERSIONS, _MIN_VERSIONS

sys.path.insert(0, str(Path(__file__).parents[1]))
from cnn_models import qdq_with_onnxruntime, tiny_cnn  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, onnx.ModelProto]:
    tmp = tmp_path_factory.mktemp("rv-models")
    return {"fp32": tiny_cnn(), "qdq": qdq_with_onnxruntime(tiny_cnn(), tmp)}


def _package(target: str, model: onnx.ModelProto, out: Path) -> Path:
    return get_target(target).package(ir.from_proto(model), out, PackageOptions())


@pytest.mark.parametrize("kind", ["fp32", "qdq"])
def test_ir_requirement_is_the_newest_of_its_ir_version_and_opsets(
    kind: str, models: dict[str, onnx.ModelProto], tmp_path: Path
) -> None:
    bundle = _package("intel-vpu", models[kind], tmp_path / "b")
    xml = bundle / "model.xml"
    # reference: the opsets as OpenVINO itself reads them from the saved IR
    opsets = {
        int(op.get_type_info().version_id[len("opset") :]) for op in ov.Core().read_model(xml).get_ops()
    }
    ir_version = int(re.search(rb'<net [^>]*version="(\d+)"', xml.read_bytes()).group(1))
    expected = max(
        [rv.OPENVINO_IR_RELEASES[ir_version], *(rv.OPENVINO_OPSET_RELEASES[n] for n in opsets)],
        key=version_key,
    )
    manifest = read_bundle(bundle).manifest
    assert manifest.requirements == (Requirement("openvino", expected),)
    # what this converter writes today is far older than the host's own release line
    assert version_key(expected) < version_key(rv.release_line(ov.get_version()))


def test_ir_parts_outside_the_tables_cost_the_hosts_line(
    models: dict[str, onnx.ModelProto], tmp_path: Path
) -> None:
    bundle = _package("intel-vpu", models["fp32"], tmp_path / "b")
    text = (bundle / "model.xml").read_text()
    assert rv.openvino_ir_min_version(text).version is not None
    newer_opset = re.sub(r'version="opset1"', 'version="opset99"', text, count=1)
    assert rv.openvino_ir_min_version(newer_opset).version is None
    int4 = re.sub(r'element_type="f16"', 'element_type="u4"', text, count=1)
    found = rv.openvino_ir_min_version(int4)
    assert found.version is None and "u4" in found.reason
    (tmp_path / "u4.xml").write_text(int4)
    host = rv.release_line(ov.get_version())
    assert rv.openvino_requirements(tmp_path / "u4.xml", ov.get_version(), blob="model.npu.blob") == (
        Requirement("openvino", host),
        Requirement("openvino", host, file="model.npu.blob"),
    )


def _op_codes_by_litert(data: bytes) -> set[tuple[str, int]]:
    from ai_edge_litert import schema_py_generated as s

    model = s.ModelT.InitFromPackedBuf(data, 0)
    names = {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_")}
    return {(names[max(c.builtinCode, c.deprecatedBuiltinCode)], c.version) for c in model.operatorCodes}


@pytest.mark.parametrize("kind", ["fp32", "qdq"])
def test_tflite_requirement_is_the_newest_op_version(
    kind: str, models: dict[str, onnx.ModelProto], tmp_path: Path
) -> None:
    bundle = _package("arm-cpu", models[kind], tmp_path / "b")
    data = (bundle / "model.tflite").read_bytes()
    codes = _op_codes_by_litert(data)
    assert set(rv.tflite_op_codes(data)) == codes
    expected = max((rv.TFLITE_OP_RUNTIME[c] for c in codes), key=version_key)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["requirements"] == [{"package": "tflite-runtime", "min_version": expected}]
    if kind == "qdq":  # int8 kernels are newer than the float ones
        assert version_key(expected) > version_key(rv.TFLITE_OP_RUNTIME[("CONV_2D", 1)])


def test_every_op_version_the_writer_emits_is_in_the_table() -> None:
    for op, version in {**_INT8_VERSIONS, **_MIN_VERSIONS}.items():
        assert (op, version) in rv.TFLITE_OP_RUNTIME, (op, version)
    for op in _INT8_VERSIONS:
        assert (op, 1) in rv.TFLITE_OP_RUNTIME, op


def test_undatable_tflite_op_costs_the_hosts_litert_line() -> None:
    from ai_edge_litert import schema_py_generated as s

    sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))
    from agent_models import tflite_add_mul_bytes

    model = s.ModelT.InitFromPackedBuf(tflite_add_mul_bytes(), 0)
    assert rv.tflite_min_version(tflite_add_mul_bytes()).version == "1.5.0"  # ADD 1, MUL 1
    model.operatorCodes[1].version = 99
    import flatbuffers

    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    data = bytes(builder.Output())
    assert rv.tflite_min_version(data).version is None
    assert rv.tflite_requirements(data, "2.3.0") == (Requirement("ai-edge-litert", "2.3"),)
