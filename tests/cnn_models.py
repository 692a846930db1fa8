"""Tiny ONNX models built with onnx.helper for the target, inspect and deploy tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn(
    seed: int = 0,
    shape: tuple[int, ...] = (1, 3, 16, 16),
    batch: int | str = 1,
    softmax: bool = True,
    channels: tuple[int, int] = (8, 16),
) -> onnx.ModelProto:
    """Conv-Relu-MaxPool-Conv-Relu-GAP-Flatten-Gemm(-Softmax), opset 19, 10 classes; ``channels``: the two
    convolutions' outputs (the second is the Gemm's input dim)."""
    rng = np.random.default_rng(seed)
    c, (c1, c2) = shape[1], channels
    weights = {
        "w1": rng.standard_normal((c1, c, 3, 3)).astype(np.float32) * 0.3,
        "b1": rng.standard_normal(c1).astype(np.float32) * 0.1,
        "w2": rng.standard_normal((c2, c1, 3, 3)).astype(np.float32) * 0.2,
        "b2": rng.standard_normal(c2).astype(np.float32) * 0.1,
        "wf": rng.standard_normal((10, c2)).astype(np.float32) * 0.5,
        "bf": rng.standard_normal(10).astype(np.float32) * 0.1,
    }
    last = "y" if not softmax else "logits"
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], [last], transB=1, name="fc"),
    ]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["y"], axis=1, name="softmax"))
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, *shape[1:]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19)], producer_name="edgekit-tests"
    )
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def with_unsupported_op(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with a ``Det`` node (no OpenVINO conversion rule) on the first conv, as a second output."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.node.append(helper.make_node("Det", ["c1"], ["det"], name="my_det"))
    out.graph.output.append(helper.make_tensor_value_info("det", TensorProto.FLOAT, [1, 8]))
    onnx.checker.check_model(out)
    return out


def fire_module(seed: int = 0) -> onnx.ModelProto:
    """SqueezeNet's fire module: squeeze 1x1 conv, two expand convs (1x1, 3x3), Concat, opset 19."""
    rng = np.random.default_rng(seed)
    weights = {
        "ws": rng.standard_normal((4, 3, 1, 1)).astype(np.float32) * 0.5,
        "bs": rng.standard_normal(4).astype(np.float32) * 0.1,
        "w1": rng.standard_normal((6, 4, 1, 1)).astype(np.float32) * 0.5,
        "b1": rng.standard_normal(6).astype(np.float32) * 0.1,
        "w3": rng.standard_normal((6, 4, 3, 3)).astype(np.float32) * 0.3,
        "b3": rng.standard_normal(6).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "ws", "bs"], ["s"], name="squeeze"),
        helper.make_node("Relu", ["s"], ["sr"], name="squeeze_relu"),
        helper.make_node("Conv", ["sr", "w1", "b1"], ["e1"], name="expand1x1"),
        helper.make_node("Relu", ["e1"], ["e1r"], name="expand1x1_relu"),
        helper.make_node("Conv", ["sr", "w3", "b3"], ["e3"], pads=[1, 1, 1, 1], name="expand3x3"),
        helper.make_node("Relu", ["e3"], ["e3r"], name="expand3x3_relu"),
        helper.make_node("Concat", ["e1r", "e3r"], ["y"], axis=1, name="concat"),
    ]
    graph = helper.make_graph(
        nodes,
        "fire",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 16, 16])],
        [numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19)], producer_name="edgekit-tests"
    )
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model


def calibration_samples(
    shape: tuple[int, ...] = (1, 3, 16, 16), count: int = 16, seed: int = 1
) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def qdq_with_onnxruntime(model: onnx.ModelProto, folder: Path, activations: str = "uint8") -> onnx.ModelProto:
    """A QDQ model (per-channel int8 weights) made by onnxruntime's static quantizer, as a reference quantizer."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    shape = tuple(d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.samples = iter([{"x": s} for s in calibration_samples(shape)])

        def get_next(self):
            return next(self.samples, None)

    src, dst = folder / "float_for_qdq.onnx", folder / "qdq.onnx"
    onnx.save(model, src)
    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
        weight_type=QuantType.QInt8,
    )
    return onnx.load(dst)


def unet_merge() -> onnx.ModelProto:
    """A U-Net merge in float: Conv-Relu (the skip), a stride-2 Conv-Relu, ConvTranspose back up, Concat of the
    two, Conv-Relu."""
    rng = np.random.default_rng(0)
    inits: list[onnx.TensorProto] = []

    def const(*shape: int, spread: float = 0.3) -> str:
        inits.append(
            numpy_helper.from_array(rng.normal(0, spread, shape).astype(np.float32), f"w{len(inits)}")
        )
        return inits[-1].name

    nodes = [
        helper.make_node("Conv", ["x", const(8, 4, 3, 3), const(8, spread=0.1)], ["a0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a0"], ["a"]),
        helper.make_node(
            "Conv", ["a", const(8, 8, 3, 3), const(8, spread=0.1)], ["d0"], pads=[1, 1, 1, 1], strides=[2, 2]
        ),
        helper.make_node("Relu", ["d0"], ["d"]),
        helper.make_node(
            "ConvTranspose", ["d", const(8, 8, 2, 2), const(8, spread=0.1)], ["u"], strides=[2, 2]
        ),
        helper.make_node("Concat", ["u", "a"], ["c"], axis=1),
        helper.make_node("Conv", ["c", const(8, 16, 3, 3), const(8, spread=0.1)], ["y0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["y0"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "unet_merge",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 16, 16])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8, 16, 16])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
