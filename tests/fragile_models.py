"""A small CNN with one known fragile layer, for the accuracy-aware search's tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The node int8 wrecks: every output channel's weights hold one huge value on an input channel that the data
#: never excites, so each channel's int8 scale is huge and its real weights round to zero.
FRAGILE = "conv_fragile"


def fragile_cnn(seed: int = 0, classes: int = 10) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    c = 12
    w = {
        "w0": rng.normal(0, 0.5, (c, 3, 3, 3)),
        "b0": rng.normal(0.1, 0.05, c),
        "w1": rng.normal(0, 0.25, (c, c, 3, 3)),
        "b1": rng.normal(0, 0.05, c),
        "w2": rng.normal(0, 0.25, (c, c, 3, 3)),
        "b2": rng.normal(0, 0.05, c),
        "w3": rng.normal(0, 0.25, (c, c, 1, 1)),
        "b3": rng.normal(0, 0.05, c),
        "wf": rng.normal(0, 0.05, (classes, c * 8 * 8)),
        "bf": rng.normal(0, 0.05, classes),
    }
    # Channel 0 of conv0's output is dead (a large negative bias before the Relu) ...
    w["b0"][0] = -1e3
    # ... and the fragile conv weighs that dead channel with an outlier in every output channel.
    w["w1"][:, 0, 1, 1] = 60.0
    w = {k: v.astype(np.float32) for k, v in w.items()}
    conv = {"pads": [1, 1, 1, 1]}
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="conv0", **conv),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], name=FRAGILE, **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], name="conv3"),
        helper.make_node("Add", ["c3", "r2"], ["sum"], name="add"),
        helper.make_node("AveragePool", ["sum"], ["pool"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "fragile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        [numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def fragile_data(
    model: onnx.ModelProto, folder: Path, count: int = 40, seed: int = 1, labels: bool = True
) -> Path:
    """``count`` inputs, labelled with the fp32 model's own top-1 where a seeded coin says so (about 80 %),
    else another class: an fp32 top-1 near 80 %, so that a drop is measurable."""
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (count, 1, 3, 16, 16)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    top = np.array([int(np.argmax(session.run(None, {"x": s})[0])) for s in x])
    keep = rng.random(count) < 0.8
    y = np.where(keep, top, (top + 1) % 10).astype(np.int64)
    path = folder / ("fragile.npz" if labels else "fragile_unlabelled.npz")
    arrays = {"x": x[:, 0]}
    if labels:
        arrays["labels"] = y
    np.savez(path, **arrays)
    return path
