"""float64 computation inside a float32 model (``edgekit.core.model.float64_to_float32``), as torch writes it where
Python floats or ``torch.float64`` reach a traced value: Mask2Former's multi-scale deformable attention computes
its GridSample grid from float64 reference points (Cast to double, Add, Mul, Sub; round 14v). Before, arm-cpu
refused the float64 grid ("GridSample of float32 data and a float64 grid") and float64 arithmetic crashed the
converter (internal error, KeyError: dtype('float64')). Each deploy is checked against the onnx reference
evaluator running the model as written (float64 grid)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator


def _deformable_model() -> onnx.ModelProto:
    """conv features; offsets = conv(x) (float32) -> Cast double -> + float64 reference points -> * 2 - 1: a
    float64 grid -> GridSample of the float32 features -> conv; a second output computed in float64 and cast
    back (the grid's mean over the points)."""
    rng = np.random.default_rng(14)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    ys, xs = np.meshgrid(np.linspace(0.05, 0.95, 8), np.linspace(0.05, 0.95, 8), indexing="ij")
    reference = np.stack([xs, ys], -1)[None]  # [1, 8, 8, 2] in [0, 1], float64 as torch.linspace writes it
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["features"]),
        helper.make_node("Conv", ["x", "wg", "bg"], ["offsets"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Mul", ["offsets", "step"], ["small"]),
        helper.make_node("Transpose", ["small"], ["offsets_nhwc"], perm=[0, 2, 3, 1]),
        helper.make_node("Cast", ["offsets_nhwc"], ["offsets64"], to=TensorProto.DOUBLE),
        helper.make_node("Add", ["offsets64", "reference"], ["locations"]),
        helper.make_node("Mul", ["locations", "two"], ["twice"]),
        helper.make_node("Sub", ["twice", "one"], ["grid"]),
        helper.make_node(
            "GridSample", ["features", "grid"], ["sampled"], mode="linear", padding_mode="zeros"
        ),
        helper.make_node("Conv", ["sampled", "w2", "b2"], ["y"], pads=[1, 1, 1, 1]),
        helper.make_node("ReduceMean", ["grid", "axes"], ["grid_mean64"], keepdims=0),
        helper.make_node("Cast", ["grid_mean64"], ["grid_mean"], to=TensorProto.FLOAT),
    ]
    inits = {
        "w1": w(8, 3, 3, 3), "b1": w(8), "wg": w(2, 3, 3, 3), "bg": w(2), "step": np.float32(0.1),
        "reference": reference, "two": np.float64(2.0), "one": np.float64(1.0), "w2": w(4, 8, 3, 3), "b2": w(4),
        "axes": np.array([1, 2], np.int64),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "deformable",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8]),
            helper.make_tensor_value_info("grid_mean", TensorProto.FLOAT, [1, 2]),
        ],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model


def test_float64_is_narrowed_at_load_and_says_so():
    from edgekit.core.model import load_proto

    messages: list[str] = []
    model = load_proto(_deformable_model(), messages=messages)
    assert any("float64 computation narrowed to float32" in m for m in messages), messages
    types = {v.name: v.type for v in (*model.graph.inputs, *model.graph.outputs)}
    assert all(
        v.const_value is None or v.const_value.dtype.name != "DOUBLE"
        for v in model.graph.initializers.values()
    )
    for node in model.graph:
        for v in node.outputs:
            assert v.dtype is None or v.dtype.name != "DOUBLE", (node.op_type, v.name)
    assert set(types) == {"x", "y", "grid_mean"}


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_deploy_float64_grid_model_to_arm_cpu(tmp_path, precision):
    """arm-cpu passes its verification (fp32 against the host's run, int8 against its QDQ model), and the .tflite
    is within 1e-4 of the output range (fp32) of the model as written, float64 grid and all."""
    import edgekit

    proto = _deformable_model()
    path = tmp_path / "deformable.onnx"
    onnx.save(proto, path)
    rng = np.random.default_rng(5)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=rng.uniform(-1, 1, (16, 3, 16, 16)).astype(np.float32))
    result = edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", calib=calib, precision=precision)
    result.raise_for_failures()
    verification = result.bundle("arm-cpu").verification
    assert verification["passed"], verification
    assert verification["op_counts"]["GATHER"] == 1, verification["op_counts"]
    if precision == "int8":
        return
    assert verification["max_rel_error"] <= 1e-4, verification
    # against the file as written (float64 grid) in the onnx reference evaluator: onnxruntime has no GridSample
    # kernel for float32 data and a float64 grid (NOT_IMPLEMENTED), OpenVINO (the verification's host) runs it
    import json

    from edgekit.core import isolated
    from edgekit.core.litert_run import TensorInfo, run_tflite_samples

    bundle = tmp_path / "out" / "arm-cpu"
    manifest = json.loads((bundle / "manifest.json").read_text())

    def infos(specs):
        nhwc = (0, 2, 3, 1)
        return [
            TensorInfo(
                s["name"], tuple(s["shape"]), s["dtype"], s["layout"], nhwc if s["layout"] == "NHWC" else None
            )
            for s in specs
        ]

    samples = [{"x": rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(2)]
    got = isolated.call(
        run_tflite_samples, (bundle / "model.tflite").read_bytes(), infos(manifest["inputs"]),
        infos(manifest["outputs"]), samples, what="LiteRT", doing="float64 islands",
    )  # fmt: skip
    reference = ReferenceEvaluator(proto)
    for sample, tflite in zip(samples, got, strict=True):
        for name, want in zip(("y", "grid_mean"), reference.run(None, sample), strict=True):
            span = float(want.max() - want.min()) or float(np.abs(want).max())
            error = np.max(np.abs(tflite[name] - want)) / span
            assert error <= 1e-4, (name, error)
