"""Pooling on an unbatched (C, H, W) input (``edgekit.core.unbatched``), as torch's exporter writes
``max_pool2d`` on a 3-D tensor: transformers' SuperPoint exported at opset 17 (round 15r) max-pools its
``[batch, H, W]`` keypoint score map in its NMS. ONNX's MaxPool needs (N, C, H, W): onnx's shape inference,
onnxruntime and OpenVINO refuse the file ("Attribute dilations has incorrect size"), and every edgekit case was
refused with "shape inference failed". The model below is that NMS: scores -> Reshape [C, H, W] -> MaxPool 5x5
-> Equal -> Where, twice (the second pool reads a value only inference after the first fix can shape), checked
against numpy's max filter (torch's semantics)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _max_filter(x: np.ndarray, k: int) -> np.ndarray:
    """``max_pool2d(x, k, stride 1, padding k // 2)`` over the last two axes of ``x``."""
    r = k // 2
    padded = np.pad(x, [(0, 0)] * (x.ndim - 2) + [(r, r), (r, r)], constant_values=-np.inf)
    h, w = x.shape[-2:]
    return np.max([padded[..., i : i + h, j : j + w] for i in range(k) for j in range(k)], axis=0)


def _nms(x: np.ndarray) -> np.ndarray:
    s = x.reshape(4, 8, 8)
    keep = np.where(_max_filter(s, 5) == s, s, 0.0)
    again = np.where(_max_filter(keep, 3) == keep, keep, 0.0)
    return (again * 2.0).reshape(1, 4, 8, 8)


def _model(opset: int) -> onnx.ModelProto:
    pool = {"strides": [1, 1], "dilations": [1, 1], "ceil_mode": 0}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["scores"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["scores", "chw"], ["map"]),
        helper.make_node("MaxPool", ["map"], ["pooled"], kernel_shape=[5, 5], pads=[2, 2, 2, 2], **pool),
        helper.make_node("Equal", ["map", "pooled"], ["peak"]),
        helper.make_node("Where", ["peak", "map", "zero"], ["kept"]),
        helper.make_node("MaxPool", ["kept"], ["pooled2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], **pool),
        helper.make_node("Equal", ["kept", "pooled2"], ["peak2"]),
        helper.make_node("Where", ["peak2", "kept", "zero"], ["kept2"]),
        helper.make_node("Mul", ["kept2", "two"], ["scaled"]),
        helper.make_node("Reshape", ["scaled", "nchw"], ["y"]),
    ]
    rng = np.random.default_rng(15)
    inits = {
        "w": (rng.standard_normal((4, 2, 3, 3)) * 0.4).astype(np.float32),
        "b": (rng.standard_normal(4) * 0.1).astype(np.float32),
        "chw": np.array([4, 8, 8], np.int64), "nchw": np.array([1, 4, 8, 8], np.int64),
        "zero": np.float32(0.0), "two": np.float32(2.0),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "superpoint_nms",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _reference(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The conv in the onnx reference evaluator (a model of its own), the NMS in numpy."""
    from onnx.reference import ReferenceEvaluator

    conv = onnx.ModelProto()
    conv.CopyFrom(proto)
    del conv.graph.node[1:]
    del conv.graph.output[:]
    conv.graph.output.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 4, 8, 8]))
    (scores,) = ReferenceEvaluator(conv).run(None, {"x": x})
    return _nms(scores)


@pytest.mark.parametrize("opset", [11, 17])
def test_unbatched_pooling_gets_a_batch_axis_at_load(opset):
    import onnxruntime as ort
    from edgekit.core.model import load_proto
    from edgekit.core.unbatched import rewrite

    proto = _model(opset)
    with pytest.raises(Exception, match="dilations has incorrect size"):
        onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    fixed = onnx.ModelProto()
    fixed.CopyFrom(proto)
    notes = rewrite(fixed)
    assert len(notes) == 1 and notes[0].startswith("2 pooling node(s) on an unbatched"), notes
    onnx.checker.check_model(fixed, full_check=True)
    x = np.random.default_rng(3).uniform(-1, 1, (1, 2, 8, 8)).astype(np.float32)
    got = ort.InferenceSession(fixed.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )
    np.testing.assert_allclose(got[0], _reference(proto, x), rtol=0, atol=1e-6)
    messages: list[str] = []
    load_proto(proto, messages=messages)
    assert any("pooling node(s) on an unbatched" in m for m in messages), messages
    assert rewrite(fixed) == []  # a valid model is left alone


def test_deploy_unbatched_pooling_to_arm_cpu(tmp_path):
    """arm-cpu fp32 (refused before: "shape inference failed") within 1e-4 of the output range of torch's
    semantics."""
    import edgekit

    proto = _model(17)
    path = tmp_path / "nms.onnx"
    onnx.save(proto, path)
    result = edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", precision="fp32")
    result.raise_for_failures()
    verification = result.bundle("arm-cpu").verification
    assert verification["passed"] and verification["max_rel_error"] <= 1e-4, verification
    import json

    from edgekit.core import isolated
    from edgekit.core.litert_run import TensorInfo, run_tflite_samples

    bundle = tmp_path / "out" / "arm-cpu"
    manifest = json.loads((bundle / "manifest.json").read_text())

    def infos(specs):
        return [
            TensorInfo(s["name"], tuple(s["shape"]), s["dtype"], s["layout"],
                       (0, 2, 3, 1) if s["layout"] == "NHWC" else None)
            for s in specs
        ]  # fmt: skip

    rng = np.random.default_rng(8)
    samples = [{"x": rng.uniform(-1, 1, (1, 2, 8, 8)).astype(np.float32)} for _ in range(3)]
    got = isolated.call(
        run_tflite_samples, (bundle / "model.tflite").read_bytes(), infos(manifest["inputs"]),
        infos(manifest["outputs"]), samples, what="LiteRT", doing="unbatched pooling",
    )  # fmt: skip
    for sample, tflite in zip(samples, got, strict=True):
        want = _reference(proto, sample["x"])
        error = np.max(np.abs(tflite["y"] - want)) / float(want.max() - want.min())
        assert error <= 1e-4, error
