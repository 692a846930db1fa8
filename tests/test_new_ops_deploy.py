"""A small model mixing ops the TFLite converter lowers onto other builtins (Mish, Selu, Einsum, Trilu, Softsign,
ReduceLogSumExp, ScatterND, GatherElements, TopK) through ``edgekit deploy`` to all three targets and through
``edgekit quantize`` (Einsum gets int8 inputs, the others stay float): every case packages and passes its
verification (fp32 vs onnxruntime, int8 vs its QDQ model, FP16 IR), except nnapi with --strict-integer, which
refuses with one line naming the float ops."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_in_process import cli
from edgekit.device_agents.bundle import read_bundle
from onnx import TensorProto, helper, numpy_helper

NEW_OPS = (
    "Mish",
    "Selu",
    "Einsum",
    "Trilu",
    "Softsign",
    "ReduceLogSumExp",
    "ScatterND",
    "GatherElements",
    "TopK",
)


def mixed_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    def i64(*values: int) -> np.ndarray:
        return np.asarray(values, np.int64)

    inits = {
        "w1": w(8, 3, 3, 3), "b1": w(8), "w2": w(8, 8, 1, 1), "b2": w(8), "flat": i64(1, 8, 64),
        "diag": np.array(0, np.int64), "axis": i64(2), "s0": i64(0, 0), "s1": i64(1, 2), "sa": i64(0, 1),
        "two": i64(2), "at": np.array([[0, 1], [0, 6]], np.int64), "pick": np.array([[7, 0, 3, 3]], np.int64),
        "k": i64(3), "wide": i64(1, 3, 4), "zero": i64(0), "four": i64(4),
    }  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        node("Mish", ["c1"], ["m1"]),
        node("Conv", ["m1", "w2", "b2"], ["c2"]),
        node("Selu", ["c2"], ["s2"]),
        node("Reshape", ["s2", "flat"], ["r2"]),
        node("Einsum", ["r2", "r2"], ["gram"], equation="bcn,bdn->bcd"),
        node("Trilu", ["gram", "diag"], ["upper"]),
        node("Softsign", ["upper"], ["soft"]),
        node("ReduceLogSumExp", ["soft", "axis"], ["lse"], keepdims=0),
        node("Slice", ["lse", "s0", "s1", "sa"], ["head"]),
        node("Sigmoid", ["head"], ["gate"]),
        node("Reshape", ["gate", "two"], ["updates"]),
        node("ScatterND", ["lse", "at", "updates"], ["scores"]),  # scores[0, [1, 6]] = sigmoid(lse[0, :2])
        node("GatherElements", ["scores", "pick"], ["picked"], axis=1),
        node("TopK", ["scores", "k"], ["top", "top_index"], axis=-1),
        # torch.gather(gram[..., :4], 1, top_index): a Slice straight into GatherElements (a detector's decode)
        node("Unsqueeze", ["top_index", "axis"], ["index3"]),
        node("Expand", ["index3", "wide"], ["index_wide"]),
        node("Slice", ["gram", "zero", "four", "axis"], ["first4"]),
        node("GatherElements", ["first4", "index_wide"], ["boxes"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "new_ops_mix",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
            for o in ("scores", "picked", "top", "boxes")
        ],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from zoo import zoo_data

    folder = tmp_path_factory.mktemp("new_ops")
    paths = {"model": folder / "mix.onnx", "calib": folder / "calib.npy"}
    onnx.save(mixed_model(), paths["model"])
    crops = zoo_data.photo_crops(zoo_data.cached_photos(), 16, 16, 16, seed=0)  # real photos, NHWC uint8
    np.save(paths["calib"], (crops.transpose(0, 3, 1, 2) / 255.0).astype(np.float32))
    return paths


@pytest.mark.parametrize(
    ("target", "precision"),
    [
        ("arm-cpu", "fp32"),
        ("arm-cpu", "int8"),
        ("nnapi", "int8"),
        ("intel-vpu", "fp16"),
        ("intel-vpu", "int8"),
    ],
)
def test_every_target_packages_and_verifies(files, tmp_path, capsys, target: str, precision: str) -> None:
    code, out, err = cli(
        capsys, "deploy", str(files["model"]), "-t", target, "--precision", precision,
        "--calib", str(files["calib"]), "-o", str(tmp_path),
    )  # fmt: skip
    assert code == 0, err
    assert "Traceback" not in err and "error:" not in err
    verification = read_bundle(tmp_path / target).manifest.verification
    assert verification["precision"] == precision and verification["passed"], verification
    if target != "intel-vpu" and precision == "int8":  # the ops without an int8 kernel stay float, said so
        # Mish's softplus first, its TFLite ops grouped under its ONNX node
        assert re.search(r"ops left in float: \S+ \(ABS", out + err), out + err


def test_float_ops_are_grouped_by_their_onnx_node() -> None:
    from edgekit.targets.tflite.package import float_ops_line

    ops = ["FULLY_CONNECTED (lstm)", "LOGISTIC (lstm)", "TANH (lstm)", "LOGISTIC (lstm)", "EXP (decode)"]
    assert float_ops_line(ops) == "lstm (FULLY_CONNECTED, LOGISTIC x2, TANH), decode (EXP)"
    assert float_ops_line(ops, shown=1) == "lstm (FULLY_CONNECTED, LOGISTIC x2, TANH) and 1 more node(s)"


def test_nnapi_strict_integer_names_the_float_ops_in_one_line(files, tmp_path, capsys) -> None:
    out_dir = tmp_path / "out"
    code, out, err = cli(
        capsys, "deploy", str(files["model"]), "-t", "nnapi", "--strict-integer",
        "--calib", str(files["calib"]), "-o", str(out_dir),
    )  # fmt: skip
    assert code == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot make the model fully integer for nnapi")
    for op in ("SCATTER_ND", "GATHER_ND", "TOPK_V2", "SELECT_V2"):
        assert op in errors[0]
    assert not out_dir.exists()


def test_quantize_takes_the_new_ops_and_stays_close_to_fp32(files, tmp_path, capsys) -> None:
    out = tmp_path / "mix.qdq.onnx"
    code, stdout, err = cli(
        capsys, "quantize", str(files["model"]), "--calib", str(files["calib"]), "-o", str(out)
    )
    assert code == 0, err
    qdq = onnx.load(out)
    ops = {n.op_type for n in qdq.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops and set(NEW_OPS) <= ops
    x = np.load(files["calib"])[:1]
    want = ort.InferenceSession(str(files["model"])).run(None, {"x": x})
    have = ort.InferenceSession(str(out)).run(None, {"x": x})
    for a, b in zip(have, want, strict=True):
        cosine = float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))
        assert cosine > 0.99, cosine
