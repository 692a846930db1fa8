"""Einsum of integer operands in TFLite (round 15m): BigBird's block-sparse attention builds its band masks
from the int64 attention mask with ``einsum("blq,blk->blqk")`` / ``einsum("blq,bhlk->bhlqk")``, outer products
with no contracted label. They were written as BATCH_MATMUL, which has no int32 / int64 kernel: LiteRT refused
the .tflite at run time ("batch_matmul.cc:342 lhs_data->type == kTfLiteFloat32 || ..."; arm-cpu fp32 / int8
and nnapi). Now a broadcast MUL, exact in the integers' width; a contracted integer product is refused by name.
Checked against onnxruntime."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.ort_reference import run_node_by_node
from tests.tflite_files import run_tflite_file


def _model(contract: bool = False) -> onnx.ModelProto:
    """int64 masks m1 [1, 3, 4], m2 [1, 2, 3, 5] -> band = einsum(blq,blk->blqk)(m1, m1[..., :... ]) and
    einsum(blq,bhlk->bhlqk)(m1, m2) -> cast to float -> added to a float input."""
    second = "blq,bhlq->bhl" if contract else "blq,bhlk->bhlqk"
    out2 = [1, 2, 3] if contract else [1, 2, 3, 4, 5]
    m2_shape = [1, 2, 3, 4] if contract else [1, 2, 3, 5]
    nodes = [
        helper.make_node("Einsum", ["m1", "m1"], ["band"], equation="blq,blk->blqk"),
        helper.make_node("Einsum", ["m1", "m2"], ["band2"], equation=second),
        helper.make_node("Cast", ["band"], ["bandf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["band2"], ["band2f"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "bandf"], ["y"]),
        helper.make_node("Mul", ["band2f", "three"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "integer_einsum",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
            helper.make_tensor_value_info("m1", TensorProto.INT64, [1, 3, 4]),
            helper.make_tensor_value_info("m2", TensorProto.INT64, m2_shape),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, out2),
        ],
        [helper.make_tensor("three", TensorProto.FLOAT, [], [3.0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _samples(rng, count, m2_shape=(1, 2, 3, 5)):
    return {
        "x": rng.standard_normal((count, 3, 4, 4)).astype(np.float32),
        "m1": rng.integers(-3, 4, (count, 3, 4)).astype(np.int64),
        "m2": rng.integers(-3, 4, (count, *m2_shape[1:])).astype(np.int64),
    }


def test_integer_outer_product_einsum_runs_in_litert(tmp_path):
    import edgekit

    proto = _model()
    path = tmp_path / "einsum.onnx"
    onnx.save(proto, path)
    rng = np.random.default_rng(15)
    calib = tmp_path / "calib.npz"
    np.savez(calib, **_samples(rng, 8))
    result = edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", calib=calib, precision="fp32")
    result.raise_for_failures()
    bundle = tmp_path / "out" / "arm-cpu"
    inputs = {i["name"]: i for i in json.loads((bundle / "manifest.json").read_text())["inputs"]}
    sample = {k: v[:1] for k, v in _samples(rng, 1).items()}
    want = dict(zip(("y", "z"), run_node_by_node(proto, sample), strict=True))
    feeds = {k: v.astype(inputs[k]["dtype"]) for k, v in sample.items()}
    if inputs["x"]["layout"] == "NHWC":
        feeds["x"] = feeds["x"].transpose(0, 2, 3, 1)
    got = run_tflite_file(bundle / "model.tflite", feeds)
    outputs = {o["name"]: o for o in json.loads((bundle / "manifest.json").read_text())["outputs"]}
    for name, w in want.items():
        g = got[name]
        if outputs[name]["layout"] == "NHWC":
            g = np.moveaxis(g, -1, 1)
        np.testing.assert_array_equal(g, w, err_msg=name)  # integers: exact


def test_integer_einsum_with_a_contracted_label_is_refused_by_name(tmp_path):
    import edgekit
    from edgekit.core.errors import EdgekitError

    path = tmp_path / "einsum.onnx"
    onnx.save(_model(contract=True), path)
    with pytest.raises(EdgekitError, match="integer .*BATCH_MATMUL"):
        edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", precision="fp32").raise_for_failures()
