"""nnapi with a float tail: the integer body goes to the NNAPI delegate, the float ops (a detector's box
decoding) run on the CPU between DEQUANTIZE/QUANTIZE; ``strict_integer`` keeps the fully-integer refusal.

The detector-like model is built here: a Conv body and a decode tail with Sigmoid, Exp, Mul by anchor
constants, Div and Concat. Bundles are run in LiteRT and compared with the QDQ model in onnxruntime.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from ai_edge_litert.interpreter import Interpreter
from edgekit.core.errors import TargetError
from edgekit.device_agents.bundle import read_bundle
from edgekit.targets.base import PackageOptions, get_target
from edgekit.targets.nnapi_target import NnapiOptions
from edgekit.targets.tflite.nnapi import check_nnapi
from onnx import helper
from test_layout import plain_cnn
from tflite_helpers import edgekit_qdq, make_model, random_feeds, run_onnx

HW = 8  # head grid: HW x HW cells, two box coordinates and two class scores per cell


def detector_like(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    n = HW * HW
    init = {
        "w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
        "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((6, 8, 1, 1)) * 0.3).astype(np.float32),
        "b2": (rng.standard_normal(6) * 0.1).astype(np.float32),
        "shape": np.array([1, 6, n], np.int64),
        "s0": np.array([0], np.int64),
        "s2": np.array([2], np.int64),
        "s4": np.array([4], np.int64),
        "s6": np.array([6], np.int64),
        "axis": np.array([2], np.int64),
        "two": np.array(2.0, np.float32),
        "grid": rng.uniform(0, HW, (1, n, 2)).astype(np.float32),
        "anchors": rng.uniform(1, 4, (1, n, 2)).astype(np.float32),
        "half": np.array(0.5, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["head"]),
        helper.make_node("Reshape", ["head", "shape"], ["flat"]),
        helper.make_node("Transpose", ["flat"], ["cells"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["cells", "s0", "s2", "axis"], ["xy_raw"]),
        helper.make_node("Slice", ["cells", "s2", "s4", "axis"], ["wh_raw"]),
        helper.make_node("Slice", ["cells", "s4", "s6", "axis"], ["cls_raw"]),
        helper.make_node("Sigmoid", ["xy_raw"], ["xy_s"]),
        helper.make_node("Mul", ["xy_s", "two"], ["xy_2"]),
        helper.make_node("Add", ["xy_2", "grid"], ["xy"]),
        helper.make_node("Exp", ["wh_raw"], ["wh_e"], name="box_exp"),
        helper.make_node("Mul", ["wh_e", "anchors"], ["wh"]),
        helper.make_node("Sigmoid", ["cls_raw"], ["s"]),
        helper.make_node("Add", ["s", "half"], ["den"]),
        helper.make_node("Div", ["s", "den"], ["score"], name="score_div"),  # a run-time divisor
        helper.make_node("Concat", ["xy", "wh", "score"], ["boxes"], axis=2),
    ]
    return make_model(nodes, {"x": (1, 3, 2 * HW, 2 * HW)}, ["boxes"], init)


@pytest.fixture(scope="module")
def float_model() -> onnx.ModelProto:
    return detector_like()


@pytest.fixture(scope="module")
def qdq(float_model) -> onnx.ModelProto:
    return edgekit_qdq(float_model, [random_feeds(float_model, s) for s in range(6)])


def _load(proto: onnx.ModelProto):
    from edgekit.core.model import load_proto

    return load_proto(proto, prepare=False)


def _run_bundle(bundle_path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the bundle's .tflite in LiteRT: quantize the inputs, dequantize the outputs (manifest specs)."""
    with read_bundle(bundle_path) as bundle:
        m = bundle.manifest
        interpreter = Interpreter(model_path=str(bundle.primary_path))
        interpreter.allocate_tensors()
        by_name = {d["name"]: d for d in interpreter.get_input_details()}
        for spec in m.inputs:
            x = feeds[spec.name].transpose(0, 2, 3, 1) if spec.layout == "NHWC" else feeds[spec.name]
            if spec.scale is not None:
                info = np.iinfo(np.dtype(spec.dtype))
                x = np.clip(np.rint(x / spec.scale) + spec.zero_point, info.min, info.max)
            interpreter.set_tensor(by_name[spec.name]["index"], x.astype(spec.dtype))
        interpreter.invoke()
        outs = {d["name"]: d for d in interpreter.get_output_details()}
        result = {}
        for spec in m.outputs:
            y = interpreter.get_tensor(outs[spec.name]["index"])
            if spec.scale is not None:
                y = (y.astype(np.float32) - spec.zero_point) * spec.scale
            result[spec.name] = y
        return result


def _output_scale(proto: onnx.ModelProto, output: str) -> float:
    """The QDQ model's quantization step of ``output`` (its DequantizeLinear's scale)."""
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    node = next(n for n in proto.graph.node if output in n.output)
    assert node.op_type == "DequantizeLinear"
    return float(inits[node.input[1]])


def test_float_tail_is_delegated_in_partitions_by_default(qdq, tmp_path) -> None:
    samples = tuple(random_feeds(qdq, s) for s in (30, 31))
    path = get_target("nnapi").package(_load(qdq), tmp_path / "nn", PackageOptions(verify_samples=samples))
    with read_bundle(path) as bundle:
        m = bundle.manifest
        assert [(s.dtype, s.scale is not None) for s in (*m.inputs, *m.outputs)] == [("int8", True)] * 2
        report = json.loads(bundle.path("nnapi_compatibility.json").read_text())
        v = m.verification
    # The float islands: EXP and DIV, with the DEQUANTIZE/QUANTIZE at their borders, nothing else.
    assert sorted(v["float_ops"]) == ["DIV (score_div)", "EXP (box_exp)"]
    cpu = {op["op"] for op in report["cpu_ops"]}
    assert cpu == {"EXP", "DIV", "DEQUANTIZE", "QUANTIZE"}
    assert all("integer-only accelerator" in op["why"] for op in report["cpu_ops"])
    assert report["delegated_partitions"] == len(report["delegated_partition_ops"]) >= 1
    taken = sorted(i for p in report["delegated_partition_ops"] for i in p)
    assert taken == sorted(op["index"] for op in report["ops"] if op["delegated"])
    assert report["delegated_ops"] + len(report["cpu_ops"]) == report["op_count"]
    assert not report["delegation_fails"] and report["integer_accelerator"]
    ops = {op["index"]: op["op"] for op in report["ops"]}
    assert {ops[i] for i in taken} >= {"CONV_2D", "LOGISTIC", "MUL", "CONCATENATION"}
    assert report["summary"].endswith("op(s) on the CPU: EXP, DIV, DEQUANTIZE, QUANTIZE")
    assert f"{report['delegated_partitions']} partition(s) delegated" in report["summary"]
    assert v["nnapi"]["note"] == report["summary"] and v["nnapi"]["cpu_ops"]
    # The .tflite against the QDQ model in onnxruntime, within one int8 step of the output.
    step = _output_scale(qdq, "boxes")
    for seed in (40, 41, 42):
        feeds = random_feeds(qdq, seed)
        got = _run_bundle(path, feeds)["boxes"]
        (want,) = run_onnx(qdq, feeds)
        assert np.max(np.abs(got - want)) <= 1.01 * step, (np.max(np.abs(got - want)), step)


def test_strict_integer_refuses_the_float_ops(qdq, tmp_path) -> None:
    options = PackageOptions(target_options=NnapiOptions(strict_integer=True))
    with pytest.raises(TargetError) as info:
        get_target("nnapi").package(_load(qdq), tmp_path / "nn", options)
    message = str(info.value)
    assert "\n" not in message and "cannot make the model fully integer for nnapi" in message
    assert "EXP (box_exp)" in message and "DIV (score_div)" in message
    assert not (tmp_path / "nn").exists()


def test_output_computed_in_float_stays_float(qdq, tmp_path) -> None:
    """A QDQ model whose output is written by a float op (no QuantizeLinear after it): that output is
    float32, the input stays int8, and the summary says so."""
    proto = onnx.ModelProto()
    proto.CopyFrom(qdq)
    div = next(n for n in proto.graph.node if n.name == "score_div" or n.op_type == "Div")
    score = helper.make_tensor_value_info(div.output[0], onnx.TensorProto.FLOAT, [1, HW * HW, 2])
    proto.graph.output.append(score)  # the Div's own float output, beside its Q/DQ'd copy
    samples = tuple(random_feeds(proto, s) for s in (30, 31))
    path = get_target("nnapi").package(_load(proto), tmp_path / "nn", PackageOptions(verify_samples=samples))
    with read_bundle(path) as bundle:
        m = bundle.manifest
        dtypes = {s.name: s.dtype for s in (*m.inputs, *m.outputs)}
        report = json.loads(bundle.path("nnapi_compatibility.json").read_text())
    assert dtypes == {"x": "int8", "boxes": "int8", div.output[0]: "float32"}
    assert report["float_io"] == [div.output[0]]
    assert f"float32 inputs/outputs (computed in float): {div.output[0]}" in report["summary"]
    feeds = random_feeds(proto, 50)
    got = _run_bundle(path, feeds)
    want = dict(zip([o.name for o in proto.graph.output], run_onnx(proto, feeds), strict=True))
    # The float output is the Div of the same int8 inputs: float rounding only.
    np.testing.assert_allclose(got[div.output[0]], want[div.output[0]], rtol=1e-5, atol=1e-6)


def test_fully_integer_model_is_one_partition_with_nothing_on_the_cpu(tmp_path) -> None:
    model = plain_cnn()
    proto = edgekit_qdq(model, [random_feeds(model, s) for s in range(4)])
    samples = tuple(random_feeds(proto, s) for s in (20, 21))
    path = get_target("nnapi").package(_load(proto), tmp_path / "nn", PackageOptions(verify_samples=samples))
    with read_bundle(path) as bundle:
        report = json.loads(bundle.path("nnapi_compatibility.json").read_text())
        assert bundle.manifest.verification["float_ops"] == []
    assert report["delegated_partitions"] == 1 and report["fully_delegated"]
    assert report["cpu_ops"] == [] and report["float_io"] == []
    assert "on the CPU" not in report["summary"]


def test_float_ops_judged_by_validate_alone_without_the_integer_accelerator(qdq) -> None:
    """Without the integer-accelerator assumption the delegate's Validate takes float EXP and DIV at
    level 4 (an upper bound): one partition; at level 2 EXP needs level 3 and stays out."""
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    data = convert(_load(qdq), ConvertOptions(io_dtype="int8", target="nnapi", strict_integer=False)).data
    assert check_nnapi(data, 4).fully_delegated and check_nnapi(data, 4).delegated_partitions == 1
    at4 = check_nnapi(data, 4, integer_accelerator=True)
    assert not at4.fully_delegated and {op.op for op in at4.cpu_ops} == {
        "EXP",
        "DIV",
        "DEQUANTIZE",
        "QUANTIZE",
    }
    at2 = check_nnapi(data, 2)
    exp = next(op for op in at2.ops if op.op == "EXP")
    assert not exp.delegated and any("feature level >= 3" in r for r in exp.reasons)


def _deploy(capsys, *args: str) -> tuple[int, str, str]:
    from edgekit.cli.common import run_app
    from edgekit.cli.main import app

    try:
        run_app(app, ["deploy", *args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_deploy_cli_default_and_strict_integer(float_model, tmp_path, capsys) -> None:
    model, calib = tmp_path / "det.onnx", tmp_path / "calib.npy"
    onnx.save(float_model, model)
    np.save(calib, np.random.default_rng(5).uniform(-2, 2, (6, 1, 3, 2 * HW, 2 * HW)).astype(np.float32))
    code, out, err = _deploy(
        capsys, str(model), "-t", "nnapi", "-o", str(tmp_path / "a"), "--calib", str(calib), "-q"
    )
    assert code == 0, err
    assert "partition(s) delegated" in out and "op(s) on the CPU: EXP, DIV, DEQUANTIZE, QUANTIZE" in out
    code, out, err = _deploy(
        capsys,
        str(model),
        "-t",
        "nnapi",
        "-o",
        str(tmp_path / "b"),
        "--calib",
        str(calib),
        "-q",
        "--strict-integer",
    )
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err
    assert (
        "cannot make the model fully integer for nnapi" in lines[0]
        and "EXP" in lines[0]
        and "DIV" in lines[0]
    )
    assert not (tmp_path / "b" / "nnapi").exists()


SHARED = Path(__file__).resolve().parents[3] / "shared"


@pytest.mark.shared
@pytest.mark.skipif(
    os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
)
def test_shared_ppocr_det_deploys_to_nnapi(tmp_path, capsys) -> None:
    """PP-OCRv4 det (a Paddle export with dynamic dims) deploys to nnapi: fully integer in partitions, or
    with float ops on the CPU, which --strict-integer then refuses naming them."""
    args = [
        str(SHARED / "models" / "ch_PP-OCRv4_det_infer.onnx"), "-t", "nnapi", "--input-shape", "x=1,3,320,320",
        "--calib", str(SHARED / "data" / "imagenet-sample-200"), "--color", "BGR", "--scale", "0.00392157",
        "--mean", "0.485,0.456,0.406", "--std", "0.229,0.224,0.225", "--calib-samples", "8", "-q",
    ]  # fmt: skip
    code, out, err = _deploy(capsys, *args, "-o", str(tmp_path / "a"))
    assert code == 0, err
    with read_bundle(tmp_path / "a" / "nnapi") as bundle:
        report = json.loads(bundle.path("nnapi_compatibility.json").read_text())
        v = bundle.manifest.verification
    assert v["passed"] and report["delegated_partitions"] >= 1 and not report["delegation_fails"]
    assert report["summary"] in out
    code, out, err = _deploy(capsys, *args, "-o", str(tmp_path / "b"), "--strict-integer")
    if v["float_ops"]:
        assert code == 2 and "cannot make the model fully integer" in err
        assert v["float_ops"][0] in err
    else:
        assert code == 0 and report["fully_delegated"], err
