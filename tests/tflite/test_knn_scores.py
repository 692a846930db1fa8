"""A k-NN over pairwise distances (DGCNN's EdgeConv: ``-|x_i|^2 + 2 x_i.x_j - |x_j|^2``, TopK k, the neighbours'
features gathered by its indices) keeps its distances float (``quantize.patterns.ranked_scores``).

Round 12a's DGCNN (3 EdgeConvs, k = 8, 256 points) quantized them: one int8 step of the distances' range tied
near neighbours, and the int8 .tflite failed its verification against its own QDQ model on arm-cpu (cosine
0.9965, SQNR 21.6 dB: one rounding flip gathers another row). The scores a TopK only ranks are now kept float
(the points they are computed from stay int8); the TopK's values, when read, are a detector's scores and stay
as they were.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from edgekit.core.model import load_proto
from edgekit.quantize import patterns
from onnx import TensorProto, helper, numpy_helper
from tflite_helpers import convert_proto, edgekit_qdq, run_tflite

POINTS, K, C = 64, 4, 8


def edge_conv(read_values: bool = False) -> onnx.ModelProto:
    """x [1, 3, N] -> features Conv1d(3 -> 8); k-NN of the points (as torch exports DGCNN's knn); the features
    of each point's k neighbours gathered and max-pooled: [1, N, 8] (and the TopK values if ``read_values``)."""
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.normal(0, 0.5, (C, 3, 1)).astype(np.float32), "b": rng.normal(0, 0.1, C).astype(np.float32),
        "two": np.array(-2.0, np.float32), "p2": np.array(2.0, np.float32), "axis1": np.array([1], np.int64),
        "k": np.array([K], np.int64), "flat": np.array([-1], np.int64), "rows": np.array([POINTS, C], np.int64),
        "out": np.array([1, POINTS, K, C], np.int64),
    }  # fmt: skip
    node = helper.make_node
    nodes = [
        node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        node("MatMul", ["xt", "x"], ["inner"]), node("Mul", ["inner", "two"], ["inner2"]),
        node("Pow", ["x", "p2"], ["sq"]), node("ReduceSum", ["sq", "axis1"], ["xx"], keepdims=1),
        node("Neg", ["xx"], ["nxx"]), node("Sub", ["nxx", "inner2"], ["s"]),
        node("Transpose", ["xx"], ["xxt"], perm=[0, 2, 1]), node("Sub", ["s", "xxt"], ["dist"]),
        node("TopK", ["dist", "k"], ["near", "idx"], axis=-1),
        node("Conv", ["x", "w", "b"], ["f"]), node("Relu", ["f"], ["fr"]),
        node("Transpose", ["fr"], ["ft"], perm=[0, 2, 1]), node("Reshape", ["ft", "rows"], ["f2"]),
        node("Reshape", ["idx", "flat"], ["idx1"]), node("Gather", ["f2", "idx1"], ["g"], axis=0),
        node("Reshape", ["g", "out"], ["g4"]), node("ReduceMax", ["g4"], ["y"], axes=[2], keepdims=0),
    ]  # fmt: skip
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, POINTS, C])]
    if read_values:
        outputs.append(helper.make_tensor_value_info("near", TensorProto.FLOAT, [1, POINTS, K]))
    graph = helper.make_graph(
        nodes, "edge_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, POINTS])], outputs,
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def points(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Points on a unit sphere (the normalised clouds DGCNN reads)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        p = rng.normal(size=(3, POINTS))
        out.append(
            {"x": (p / np.linalg.norm(p, axis=0) * rng.uniform(0.6, 1.0, POINTS)).astype(np.float32)[None]}
        )
    return out


def neighbours(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The TopK indices the model computes (onnxruntime, the graph with ``idx`` as an output)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.append(helper.make_tensor_value_info("idx", TensorProto.INT64, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(["idx"], feeds)[0]


def test_distances_a_topk_ranks_are_kept_float() -> None:
    kept = patterns.ranked_scores(load_proto(edge_conv()))
    names = {n.name: n.op_type for n in load_proto(edge_conv()).graph}
    assert sorted(names[n] for n in kept) == ["MatMul", "Mul", "Neg", "Pow", "ReduceSum", "Sub", "Sub"]
    assert patterns.ranked_scores(load_proto(edge_conv(read_values=True))) == {}  # values read: scores


def test_int8_neighbours_and_tflite_follow_the_float_distances() -> None:
    model = edge_conv()
    calib, evaluation = points(16, 1), points(4, 2)
    qdq = edgekit_qdq(model, calib)
    distance_q = [n for n in qdq.graph.node if n.op_type == "QuantizeLinear" and n.input[0] in {"dist", "s"}]
    assert not distance_q  # the distances are not int8
    same = [np.mean(neighbours(qdq, f) == neighbours(model, f)) for f in evaluation]
    assert min(same) >= 0.95, same  # 0.96-0.98 of the neighbours are fp32's (0.89-0.91 with int8 distances)
    tflite = convert_proto(qdq)
    for f in evaluation:
        (got,) = run_tflite(tflite, f)
        session = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(["y"], f)[0]
        scale = np.abs(want).max()
        assert np.abs(got - want).max() <= 2 * scale / 127, np.abs(got - want).max() / scale
