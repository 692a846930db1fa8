"""Tiny models for the loading and quantization tests, built with onnx.helper in old and new opsets."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def squeezenet_like(opset: int = 7, seed: int = 0) -> onnx.ModelProto:
    """A SqueezeNet fire module in opset 7 with its quirks: initializers listed as graph inputs, Dropout with
    ``is_test``-era semantics, Softmax over a [1, C, 1, 1] tensor (opset < 13 flattens to 2-D), BatchNormalization."""
    rng = np.random.default_rng(seed)
    w = {
        "w0": rng.normal(0, 0.4, (8, 3, 3, 3)),
        "b0": rng.normal(0, 0.1, 8),
        "bn_s": rng.uniform(0.5, 1.5, 8),
        "bn_b": rng.normal(0, 0.1, 8),
        "bn_m": rng.normal(0, 0.1, 8),
        "bn_v": rng.uniform(0.5, 1.5, 8),
        "ws": rng.normal(0, 0.4, (4, 8, 1, 1)),
        "bs": rng.normal(0, 0.1, 4),
        "we1": rng.normal(0, 0.4, (6, 4, 1, 1)),
        "be1": rng.normal(0, 0.1, 6),
        "we3": rng.normal(0, 0.3, (6, 4, 3, 3)),
        "be3": rng.normal(0, 0.1, 6),
        "wc": rng.normal(0, 0.3, (10, 12, 1, 1)),
        "bc": rng.normal(0, 0.1, 10),
    }
    w = {k: v.astype(np.float32) for k, v in w.items()}
    nodes = [
        helper.make_node("Conv", ["data", "w0", "b0"], ["c0"], strides=[2, 2], name="conv0"),
        helper.make_node("BatchNormalization", ["c0", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn0"], name="bn0"),
        helper.make_node("Relu", ["bn0"], ["r0"], name="relu0"),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], name="pool0"),
        helper.make_node("Conv", ["p0", "ws", "bs"], ["s"], name="squeeze"),
        helper.make_node("Relu", ["s"], ["rs"], name="relu_s"),
        helper.make_node("Conv", ["rs", "we1", "be1"], ["e1"], name="expand1"),
        helper.make_node("Relu", ["e1"], ["re1"], name="relu_e1"),
        helper.make_node("Conv", ["rs", "we3", "be3"], ["e3"], pads=[1, 1, 1, 1], name="expand3"),
        helper.make_node("Relu", ["e3"], ["re3"], name="relu_e3"),
        helper.make_node("Concat", ["re1", "re3"], ["cat"], axis=1, name="concat"),
        helper.make_node(
            "Dropout", ["cat"], ["drop"], name="dropout", **({"is_test": 1} if opset < 7 else {})
        ),
        helper.make_node("Conv", ["drop", "wc", "bc"], ["cls"], name="classifier"),
        helper.make_node("Relu", ["cls"], ["rcls"], name="relu_cls"),
        helper.make_node("GlobalAveragePool", ["rcls"], ["gap"], name="gap"),
        helper.make_node("Softmax", ["gap"], ["prob"], name="softmax"),
    ]
    inputs = [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 33, 33])]
    # Old exporters list every initializer as a graph input too.
    inputs += [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in w.items()]
    graph = helper.make_graph(
        nodes,
        "fire",
        inputs,
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10, 1, 1])],
        [_init(k, v) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3
    return model


def mnist_like(opset: int = 8, seed: int = 0) -> onnx.ModelProto:
    """CNTK-style export: Conv without bias + Add of a [C,1,1] constant, Reshape of a constant weight,
    MatMul + Add with a [1,10] bias (onnxruntime's quantizer crashes on the Gemm this becomes)."""
    rng = np.random.default_rng(seed)
    w = {
        "W1": rng.normal(0, 0.3, (4, 1, 3, 3)).astype(np.float32),
        "B1": rng.normal(0, 0.1, (4, 1, 1)).astype(np.float32),
        "Wfc_raw": rng.normal(0, 0.2, (4, 6, 6, 10)).astype(np.float32),
        "Wfc_shape": np.array([144, 10], np.int64),
        "Bfc": rng.normal(0, 0.1, (1, 10)).astype(np.float32),
        "flat_shape": np.array([1, 144], np.int64),
    }
    nodes = [
        helper.make_node("Reshape", ["Wfc_raw", "Wfc_shape"], ["Wfc"], name="reshape_w"),
        helper.make_node("Conv", ["x", "W1"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Add", ["c", "B1"], ["cb"], name="conv_bias"),
        helper.make_node("Relu", ["cb"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Reshape", ["p", "flat_shape"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "Wfc"], ["mm"], name="fc"),
        helper.make_node("Add", ["mm", "Bfc"], ["logits"], name="fc_bias"),
    ]
    graph = helper.make_graph(
        nodes,
        "mnist",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 12, 12])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        [_init(k, v) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 3
    # ir_version 3 requires initializers to be graph inputs too
    model.graph.input.extend(
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in w.items()
    )
    return model


def shape_subgraph_model() -> onnx.ModelProto:
    """A PyTorch-style flatten: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, then Gemm."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["n", "axes"], ["n1"], name="unsqueeze"),
        helper.make_node("Concat", ["n1", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["r", "newshape"], ["flat"], name="reshape"),
        helper.make_node("Gemm", ["flat", "w", "b"], ["y"], transB=1, name="fc"),
    ]
    inits = [
        _init("zero", np.array(0, np.int64)),
        _init("axes", np.array([0], np.int64)),
        _init("minus1", np.array([-1], np.int64)),
        _init("w", rng.normal(0, 0.2, (5, 24)).astype(np.float32)),
        _init("b", rng.normal(0, 0.1, 5).astype(np.float32)),
    ]
    graph = helper.make_graph(
        nodes,
        "flatten",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def mixed_ops_model(seed: int = 0) -> onnx.ModelProto:
    """Ops with every kind of quantization rule: weights (Conv, Gemm), own scales (Add with a constant),
    shared scales (MaxPool, Reshape, Concat), fixed ranges (Sigmoid, Softmax), and a float-only op (Exp)."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w", rng.normal(0, 0.4, (4, 2, 3, 3)).astype(np.float32)),
        _init("b", rng.normal(0, 0.1, 4).astype(np.float32)),
        _init("k", rng.normal(0, 0.5, (1, 4, 1, 1)).astype(np.float32)),
        _init("shape", np.array([1, 32], np.int64)),
        _init("wf", rng.normal(0, 0.2, (32, 6)).astype(np.float32)),
        _init("bf", rng.normal(0, 0.1, 6).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "k"], ["a"], name="add_const"),
        helper.make_node("Sigmoid", ["a"], ["s"], name="sigmoid"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("MaxPool", ["s"], ["ps"], kernel_shape=[2, 2], strides=[2, 2], name="pool_s"),
        helper.make_node("Concat", ["p", "ps"], ["cat"], axis=1, name="concat"),
        helper.make_node("Exp", ["cat"], ["e"], name="exp"),
        helper.make_node("Reshape", ["e", "shape"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], name="fc"),
        helper.make_node("Softmax", ["logits"], ["prob"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 6])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
