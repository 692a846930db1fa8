"""Issue 12 probe round 9l: the ONNX Model Zoo's legacy files (opsets 7-10, non-torch converters).

The classic ONNX Model Zoo (github.com/onnx/models, "validated") is where many users still take models from; its
old files were written by WinMLTools, CNTK, MXNet, Caffe2, torch 1.x and tf2onnx / keras2onnx. None can be
downloaded here, so each graph is rebuilt with ``onnx.helper`` as its converter wrote it: the original opset and
IR version, every initializer also listed as a graph input, the converters' idioms (ImageScaler, BatchNormalization
with ``spatial`` / ``momentum`` and five inputs, MXNet's ``spatial=0``, Dropout, old Pad / Upsample / Clip attributes,
a Reshape with a shape initializer, Gemm with ``transB``, LRN, Caffe2's AveragePool, CNTK's Constant Sub/Div
preprocessing and MatMul + Add), the real layer sequence at reduced width / depth and seeded weights. BatchNorm
statistics come from real photos: each BatchNormalization in turn gets the mean / variance of its input, evaluated
by onnxruntime on photo crops with the statistics before it already set (the float graph, layer by layer).

    python benchmarks/zoo/probe_legacy_zoo.py --out benchmarks/.zoo/probe9l
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe9l/zoo.json --no-shared --workers 1 --calib 16 \
        --eval 8 --json r.json

``--extra DIR`` also writes the files that are not zoo cases (typed refusals checked with the CLI alone): a
tf2onnx YOLOv3-10-style detector with NonMaxSuppression and two inputs (image + image_shape), a BiDAF-style
string input, and opset 3 / 6 Caffe2 files (SqueezeNet 1.0-3 / -6 with ``consumed_inputs`` and Dropout
``is_test``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "zoo"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import zoo_data  # noqa: E402
from shared_data import default_shared  # noqa: E402

RAW_RGB = {"type": "image", "color": "RGB", "scale": 1.0, "mean": None, "std": None}
RAW_BGR = {"type": "image", "color": "BGR", "scale": 1.0, "mean": None, "std": None}
CAFFE_BGR = {"type": "image", "color": "BGR", "scale": 1.0, "mean": [104.0, 117.0, 123.0], "std": None}
IMAGENET = dict(zoo_data.IMAGENET_DATA)


class Graph:
    """A legacy ONNX graph written node by node: seeded He-initialised weights, initializers listed as inputs."""

    def __init__(self, opset: int, seed: int):
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count: dict[str, int] = {}

    def name(self, prefix: str) -> str:
        self.count[prefix] = self.count.get(prefix, 0) + 1
        return f"{prefix}{self.count[prefix]}"

    def init(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], name: str | None = None, outputs: int = 1, **attrs: Any):
        name = name or self.name(op.lower())
        outs = [f"{name}_output" if outputs == 1 else f"{name}_output{i}" for i in range(outputs)]
        self.nodes.append(oh.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if outputs == 1 else outs

    def weight(self, name: str, shape: tuple[int, ...], fan_in: int, gain: float = 2.0) -> str:
        w = self.rng.normal(0, np.sqrt(gain / fan_in), shape).astype(np.float32)
        return self.init(name, w)

    def conv(
        self, x: str, cin: int, cout: int, k: int | tuple[int, int], s: int = 1, p: int | list[int] | None = None,
        group: int = 1, bias: bool = True, name: str | None = None, dilation: int = 1, **attrs: Any,
    ) -> str:  # fmt: skip
        name = name or self.name("conv")
        kh, kw = (k, k) if isinstance(k, int) else k
        pads = (
            [p] * 4
            if isinstance(p, int)
            else p
            if p is not None
            else [kh // 2 * dilation, kw // 2 * dilation] * 2
        )
        inputs = [x, self.weight(f"{name}_weight", (cout, cin // group, kh, kw), cin // group * kh * kw)]
        if bias:
            inputs.append(self.init(f"{name}_bias", self.rng.normal(0, 0.05, cout).astype(np.float32)))
        extra = {"dilations": [dilation] * 2} if dilation != 1 else {}
        return self.node(
            "Conv",
            inputs,
            name,
            kernel_shape=[kh, kw],
            strides=[s, s],
            pads=pads,
            group=group,
            **extra,
            **attrs,
        )

    def bn(self, x: str, c: int, name: str | None = None, **attrs: Any) -> str:
        """BatchNormalization with its five inputs; the mean / variance are placeholders set from photos later."""
        name = name or self.name("batchnorm")
        gamma = self.rng.uniform(0.8, 1.2, c).astype(np.float32)
        beta = self.rng.normal(0, 0.1, c).astype(np.float32)
        inputs = [
            x, self.init(f"{name}_gamma", gamma), self.init(f"{name}_beta", beta),
            self.init(f"{name}_moving_mean", np.zeros(c, np.float32)),
            self.init(f"{name}_moving_var", np.ones(c, np.float32)),
        ]  # fmt: skip
        attrs.setdefault("epsilon", 1e-5)
        return self.node("BatchNormalization", inputs, name, **attrs)

    def gemm(self, x: str, cin: int, cout: int, name: str | None = None, **attrs: Any) -> str:
        """Gemm with a [cout, cin] weight (transB=1), as Caffe2 / MXNet / tf2onnx wrote fully connected layers."""
        name = name or self.name("fc")
        w = self.weight(f"{name}_weight", (cout, cin), cin, gain=1.0)
        b = self.init(f"{name}_bias", self.rng.normal(0, 0.05, cout).astype(np.float32))
        return self.node("Gemm", [x, w, b], name, transB=1, **attrs)

    def model(
        self, inputs: list[tuple[str, list[int]]], outputs: list[str], *, ir_version: int, producer: str,
        producer_version: str = "", input_type: int = TensorProto.FLOAT,
    ) -> onnx.ModelProto:  # fmt: skip
        """The ModelProto as old files are: every initializer also a graph input, output shapes from inference."""
        graph_inputs = [oh.make_tensor_value_info(n, input_type, s) for n, s in inputs]
        graph_inputs += [oh.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in self.inits]
        outs = [oh.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
        graph = oh.make_graph(self.nodes, "main", graph_inputs, outs, self.inits)
        model = oh.make_model(
            graph, opset_imports=[oh.make_opsetid("", self.opset)], ir_version=ir_version,
            producer_name=producer, producer_version=producer_version,
        )  # fmt: skip
        inferred = onnx.shape_inference.infer_shapes(model)
        shapes = {o.name: o for o in inferred.graph.output}
        for o in model.graph.output:
            if shapes[o.name].type.tensor_type.HasField("shape"):
                o.type.CopyFrom(shapes[o.name].type)
        return model


# --------------------------------------------------------------------------------------------------- models


def tinyyolov2(opset: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """WinMLTools' Tiny YOLOv2 (VOC, 20 classes, 5 anchors): ImageScaler(scale 1/255), Conv without bias +
    BatchNormalization + LeakyRelu(0.1) + MaxPool 2x2, the last MaxPool stride 1 with pads [0, 0, 1, 1], a biased
    1x1 Conv to 125 channels. Reduced: 128 x 128, widths / 4."""
    g = Graph(opset, 71 + opset)
    x = g.node("ImageScaler", ["image"], "scalerPreprocessor", scale=1 / 255, bias=[0.0, 0.0, 0.0])
    c, widths = 3, [4, 8, 16, 32, 64, 128, 256]
    for i, w in enumerate(widths):
        x = g.conv(x, c, w, 3, bias=False, name=f"convolution{i}")
        x = g.bn(x, w, name=f"BatchNormalization{i}", spatial=1)
        x = g.node("LeakyRelu", [x], f"activation{i}", alpha=0.1)
        c = w
        if i < 5:
            x = g.node("MaxPool", [x], f"pooling{i}", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0])
        elif i == 5:
            x = g.node("MaxPool", [x], f"pooling{i}", kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1])
    x = g.conv(x, c, 256, 3, bias=False, name="convolution7")
    x = g.bn(x, 256, name="BatchNormalization7", spatial=1)
    x = g.node("LeakyRelu", [x], "activation7", alpha=0.1)
    g.conv(x, 256, 125, 1, p=0, name="grid")
    model = g.model([("image", [1, 3, 128, 128])], ["grid_output"], ir_version=3, producer="WinMLTools")
    return model, dict(family="Tiny YOLOv2 (WinMLTools)", kind="detector", data=RAW_RGB)


def emotion_ferplus() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """CNTK's FER+ emotion net (opset 8): Constant Sub / Div preprocessing, 3x3 Conv + Add bias + Relu blocks with
    MaxPool (pads), Dropout, Reshape with a shape initializer, MatMul + Add fully connected layers, 8 emotions.
    Reduced: 64 x 64 gray, widths / 4."""
    g = Graph(8, 88)
    mean = g.node("Constant", [], "Constant339", value=numpy_helper.from_array(np.array([127.5], np.float32)))
    scale = g.node(
        "Constant", [], "Constant343", value=numpy_helper.from_array(np.array([255.0], np.float32))
    )
    x = g.node("Sub", ["Input3", mean], "Minus340")
    x = g.node("Div", [x, scale], "Block352")
    c = 1
    for i, (w, n) in enumerate([(16, 2), (32, 2), (64, 3), (64, 3)]):
        for j in range(n):
            name = f"Convolution{i}{j}"
            wt = g.weight(f"{name}_W", (w, c, 3, 3), c * 9)
            x = g.node("Conv", [x, wt], name, kernel_shape=[3, 3], strides=[1, 1], auto_pad="SAME_UPPER",
                       group=1, dilations=[1, 1])  # fmt: skip
            x = g.node("Add", [x, g.init(f"{name}_b", g.rng.normal(0, 0.05, (w, 1, 1)).astype(np.float32))])
            x = g.node("Relu", [x])
            c = w
        x = g.node("MaxPool", [x], f"Pooling{i}", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0],
                   auto_pad="NOTSET")  # fmt: skip
        x = g.node("Dropout", [x], f"Dropout{i}", ratio=0.25)
    flat = c * 4 * 4
    x = g.node("Reshape", [x, g.init("Pooling_reshape0_shape", np.array([1, flat], np.int64))], "reshape0")
    for i, (cin, cout) in enumerate([(flat, 128), (128, 128), (128, 8)]):
        w = g.weight(f"Parameter{i}_W", (cin, cout), cin, gain=2.0 if i < 2 else 1.0)
        x = g.node("MatMul", [x, w], f"Times{i}")
        x = g.node("Add", [x, g.init(f"Parameter{i}_b", g.rng.normal(0, 0.05, cout).astype(np.float32))],
                   f"Plus{i}")  # fmt: skip
        if i < 2:
            x = g.node("Dropout", [g.node("Relu", [x])], f"Dropout_fc{i}", ratio=0.5)
    model = g.model(
        [("Input3", [1, 1, 64, 64])], [x], ir_version=3, producer="CNTK", producer_version="2.5.1"
    )
    return model, dict(family="FER+ emotion (CNTK)", kind="classifier", data=RAW_RGB | {"color": "GRAY"})


def arcface(spatial: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """MXNet's ArcFace LResNet100E-IR (opset 8): Sub mean / Mul scale preprocessing, BatchNormalization with
    ``spatial=0`` (the MXNet converter's choice; the parameters are per channel), PRelu with [C, 1, 1] slopes,
    improved residual units (BN, Conv, BN, PRelu, Conv stride 2, BN, + shortcut Conv/BN), BN + Dropout + Flatten +
    Gemm + BN on the [1, 512] embedding. Reduced: 64 x 64, 4 units, widths / 4, embedding 128."""
    g = Graph(8, 808 + spatial)
    bn_attrs = {"epsilon": 2e-5, "momentum": 0.9, "spatial": spatial}
    x = g.node("Sub", ["data", g.init("_minusscalar0_second", np.array(127.5, np.float32))], "_minusscalar0")
    x = g.node("Mul", [x, g.init("_mulscalar0_second", np.array(0.0078125, np.float32))], "_mulscalar0")
    x = g.conv(x, 3, 16, 3, bias=False, name="conv0")
    x = g.bn(x, 16, name="bn0", **bn_attrs)
    x = g.node("PRelu", [x, g.init("relu0_gamma", np.full((16, 1, 1), 0.25, np.float32))], "relu0")
    c = 16
    for s, w in enumerate([16, 32, 64, 128]):
        p = f"stage{s + 1}_unit1"
        y = g.bn(x, c, name=f"{p}_bn1", **bn_attrs)
        y = g.conv(y, c, w, 3, bias=False, name=f"{p}_conv1")
        y = g.bn(y, w, name=f"{p}_bn2", **bn_attrs)
        y = g.node(
            "PRelu", [y, g.init(f"{p}_relu1_gamma", np.full((w, 1, 1), 0.25, np.float32))], f"{p}_relu1"
        )
        y = g.conv(y, w, w, 3, s=2, bias=False, name=f"{p}_conv2")
        y = g.bn(y, w, name=f"{p}_bn3", **bn_attrs)
        sc = g.conv(x, c, w, 1, s=2, p=0, bias=False, name=f"{p}_conv1sc")
        sc = g.bn(sc, w, name=f"{p}_sc", **bn_attrs)
        x = g.node("Add", [y, sc], f"_plus{s}")
        c = w
    x = g.bn(x, c, name="bn1", **bn_attrs)
    x = g.node("Dropout", [x], "dropout0", ratio=0.4)
    x = g.node("Flatten", [x], "flatten0", axis=1)
    x = g.gemm(x, c * 4 * 4, 128, name="pre_fc1", alpha=1.0, beta=1.0, transA=0)
    x = g.bn(x, 128, name="fc1", **bn_attrs)
    model = g.model([("data", [1, 3, 64, 64])], [x], ir_version=3, producer="mxnet")
    return model, dict(family="ArcFace LResNet-IR (MXNet)", kind="encoder", data=RAW_RGB)


def resnet_mxnet(version: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """MXNet Gluon ResNet-50 v1 / v2 (opset 7): v1 Conv/BN/Relu bottlenecks with a Conv/BN projection; v2
    pre-activation (a BN on the data, BN/Relu before each Conv) ending BN/Relu. MaxPool with pads, global pool,
    Flatten, Gemm. Reduced: 96 x 96, one bottleneck per stage, widths / 8."""
    g = Graph(7, 500 + version)
    bn_attrs = {"epsilon": 1e-5, "momentum": 0.9, "spatial": 1}
    x = "data"
    if version == 2:
        x = g.bn(x, 3, name="resnetv24_batchnorm0", **bn_attrs)
    x = g.conv(x, 3, 8, 7, s=2, p=3, bias=False, name="resnetv_conv0")
    if version == 1:
        x = g.node("Relu", [g.bn(x, 8, name="resnetv_batchnorm0", **bn_attrs)])
    else:
        x = g.node("Relu", [g.bn(x, 8, name="resnetv_batchnorm1", **bn_attrs)])
    x = g.node("MaxPool", [x], "resnetv_pool0", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 8
    for s, w in enumerate([8, 16, 32, 64]):
        stride = 1 if s == 0 else 2
        p = f"stage{s + 1}"
        if version == 1:
            y = g.node("Relu", [g.bn(g.conv(x, c, w, 1, s=stride, p=0, bias=False), w, **bn_attrs)])
            y = g.node("Relu", [g.bn(g.conv(y, w, w, 3, bias=False), w, **bn_attrs)])
            y = g.bn(g.conv(y, w, 4 * w, 1, p=0, bias=False), 4 * w, **bn_attrs)
            sc = g.bn(g.conv(x, c, 4 * w, 1, s=stride, p=0, bias=False, name=f"{p}_down"), 4 * w, **bn_attrs)
            x = g.node("Relu", [g.node("Add", [y, sc], f"{p}_add")])
        else:
            pre = g.node("Relu", [g.bn(x, c, **bn_attrs)])
            y = g.conv(pre, c, w, 1, p=0, bias=False)
            y = g.node("Relu", [g.bn(y, w, **bn_attrs)])
            y = g.conv(y, w, w, 3, s=stride, bias=False)
            y = g.node("Relu", [g.bn(y, w, **bn_attrs)])
            y = g.conv(y, w, 4 * w, 1, p=0, bias=False)
            sc = g.conv(pre, c, 4 * w, 1, s=stride, p=0, bias=False, name=f"{p}_down")
            x = g.node("Add", [y, sc], f"{p}_add")
        c = 4 * w
    if version == 2:
        x = g.node("Relu", [g.bn(x, c, **bn_attrs)])
    x = g.node("GlobalAveragePool", [x], "resnetv_pool1")
    x = g.node("Flatten", [x], "flatten0", axis=1)
    x = g.gemm(x, c, 100, name="resnetv_dense0", alpha=1.0, beta=1.0)
    model = g.model([("data", [1, 3, 96, 96])], [x], ir_version=3, producer="mxnet")
    return model, dict(family=f"ResNet-50 v{version} (MXNet Gluon)", kind="classifier", data=IMAGENET)


def mobilenetv2_mxnet() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """MXNet Gluon MobileNetV2 1.0 (mobilenetv2-7): Conv/BN/Clip(min 0, max 6 attributes: ReLU6 at opset 7),
    depthwise Convs (group = C), linear bottlenecks with Add, GlobalAveragePool, a 1x1 Conv classifier, Flatten.
    Reduced: 96 x 96, width 0.35, one block per stage."""
    g = Graph(7, 72)
    bn = {"epsilon": 1e-5, "momentum": 0.9, "spatial": 1}

    def cbr(x: str, cin: int, cout: int, k: int, s: int = 1, group: int = 1, act: bool = True) -> str:
        y = g.bn(g.conv(x, cin, cout, k, s=s, group=group, bias=False), cout, **bn)
        return g.node("Clip", [y], min=0.0, max=6.0) if act else y

    x, c = cbr("data", 3, 16, 3, s=2), 16
    for t, w, s in [(1, 8, 1), (6, 16, 2), (6, 16, 1), (6, 24, 2), (6, 32, 2), (6, 48, 1), (6, 64, 2)]:
        y = cbr(x, c, c * t, 1) if t != 1 else x
        y = cbr(y, c * t, c * t, 3, s=s, group=c * t)
        y = cbr(y, c * t, w, 1, act=False)
        x = g.node("Add", [x, y]) if s == 1 and c == w else y
        c = w
    x = cbr(x, c, 256, 1)
    x = g.node("GlobalAveragePool", [x], "mobilenetv20_features_pool0")
    x = g.conv(x, 256, 100, 1, p=0, name="mobilenetv20_output_pred")
    x = g.node("Flatten", [x], "mobilenetv20_output_flatten0", axis=1)
    model = g.model([("data", [1, 3, 96, 96])], [x], ir_version=3, producer="mxnet")
    return model, dict(family="MobileNetV2 (MXNet Gluon)", kind="classifier", data=IMAGENET)


def fire(g: Graph, x: str, cin: int, squeeze: int, expand: int, name: str) -> str:
    s = g.node("Relu", [g.conv(x, cin, squeeze, 1, p=0, name=f"{name}/squeeze1x1")])
    e1 = g.node("Relu", [g.conv(s, squeeze, expand, 1, p=0, name=f"{name}/expand1x1")])
    e3 = g.node("Relu", [g.conv(s, squeeze, expand, 3, p=1, name=f"{name}/expand3x3")])
    return g.node("Concat", [e1, e3], f"{name}/concat", axis=1)


def squeezenet10(opset: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Caffe2's SqueezeNet 1.0 (squeezenet1.0-7/8/9): 7x7 stride 2 Conv, MaxPool 3x3 s2, Fire modules (squeeze
    1x1, expand 1x1 + 3x3, Concat), Dropout, Conv10, GlobalAveragePool, Softmax on [1, 1000, 1, 1]. Reduced:
    96 x 96, fire widths / 4, 100 classes."""
    g = Graph(opset, 10 + opset)
    x = g.node("Relu", [g.conv("data_0", 3, 24, 7, s=2, p=0, name="conv1")])
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0])
    c = 24
    for i, (sq, ex) in enumerate([(4, 16), (4, 16), (8, 32)]):
        x, c = fire(g, x, c, sq, ex, f"fire{i + 2}"), 2 * ex
    x = g.node("MaxPool", [x], "pool3", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0])
    for i, (sq, ex) in enumerate([(8, 32), (12, 48), (12, 48), (16, 64)]):
        x, c = fire(g, x, c, sq, ex, f"fire{i + 5}"), 2 * ex
    x = g.node("MaxPool", [x], "pool5", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0])
    x, c = fire(g, x, c, 16, 64, "fire9"), 128
    x = g.node("Dropout", [x], "fire9/concat_dropout", ratio=0.5)
    x = g.node("Relu", [g.conv(x, c, 100, 1, p=0, name="conv10")])
    x = g.node("GlobalAveragePool", [x], "pool10")
    x = g.node("Softmax", [x], "softmaxout")
    model = g.model([("data_0", [1, 3, 96, 96])], [x], ir_version=3, producer="onnx-caffe2")
    return model, dict(family="SqueezeNet 1.0 (Caffe2)", kind="classifier", data=CAFFE_BGR)


def lrn(g: Graph, x: str, name: str) -> str:
    return g.node("LRN", [x], name, size=5, alpha=1e-4, beta=0.75, bias=1.0)


def googlenet(opset: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Caffe2's BVLC GoogLeNet / Inception-v1 (opsets 7-9): Conv 7x7 s2, MaxPool (pads [0,0,1,1]: Caffe's ceil
    mode), LRN, Conv 1x1 / 3x3, LRN, inception modules (four branches, Concat), AveragePool 7x7 (no pads), Dropout,
    Gemm (transB), Softmax on [1, 1000]. Reduced: 96 x 96, widths / 4, 3 modules, 100 classes."""
    g = Graph(opset, 20 + opset)
    x = g.node("Relu", [g.conv("data_0", 3, 16, 7, s=2, p=3, name="conv1/7x7_s2")])
    x = g.node("MaxPool", [x], "pool1/3x3_s2", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    x = lrn(g, x, "pool1/norm1")
    x = g.node("Relu", [g.conv(x, 16, 16, 1, p=0, name="conv2/3x3_reduce")])
    x = g.node("Relu", [g.conv(x, 16, 48, 3, p=1, name="conv2/3x3")])
    x = lrn(g, x, "conv2/norm2")
    x = g.node("MaxPool", [x], "pool2/3x3_s2", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    c = 48
    for i, (b1, r3, b3, r5, b5, bp) in enumerate([(16, 24, 32, 4, 8, 8), (32, 32, 48, 8, 24, 16),
                                                  (48, 24, 52, 4, 12, 16)]):  # fmt: skip
        p = f"inception_{i}"
        y1 = g.node("Relu", [g.conv(x, c, b1, 1, p=0, name=f"{p}/1x1")])
        y3 = g.node("Relu", [g.conv(x, c, r3, 1, p=0, name=f"{p}/3x3_reduce")])
        y3 = g.node("Relu", [g.conv(y3, r3, b3, 3, p=1, name=f"{p}/3x3")])
        y5 = g.node("Relu", [g.conv(x, c, r5, 1, p=0, name=f"{p}/5x5_reduce")])
        y5 = g.node("Relu", [g.conv(y5, r5, b5, 5, p=2, name=f"{p}/5x5")])
        yp = g.node("MaxPool", [x], f"{p}/pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
        yp = g.node("Relu", [g.conv(yp, c, bp, 1, p=0, name=f"{p}/pool_proj")])
        x, c = g.node("Concat", [y1, y3, y5, yp], f"{p}/output", axis=1), b1 + b3 + b5 + bp
        if i == 1:
            x = g.node("MaxPool", [x], "pool3/3x3_s2", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    x = g.node("AveragePool", [x], "pool5/7x7_s1", kernel_shape=[6, 6], strides=[1, 1], pads=[0, 0, 0, 0])
    x = g.node("Dropout", [x], "pool5/drop_7x7_s1", ratio=0.4)
    x = g.node("Reshape", [x, g.init("OC2_DUMMY_1", np.array([1, c], np.int64))], "OC2_DUMMY_0")
    x = g.gemm(x, c, 100, name="loss3/classifier", alpha=1.0, beta=1.0)
    x = g.node("Softmax", [x], "prob")
    model = g.model([("data_0", [1, 3, 96, 96])], [x], ir_version=3, producer="onnx-caffe2")
    return model, dict(family="GoogLeNet / Inception-v1 (Caffe2)", kind="classifier", data=CAFFE_BGR)


def alexnet(opset: int, family: str = "bvlc_alexnet") -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Caffe2's AlexNet / CaffeNet / ZFNet-512 / R-CNN ILSVRC13 family (opsets 7-9): Conv 11x11 s4, Relu, LRN
    (before or after the pool), MaxPool, grouped Convs (group 2), Gemm x3 with Dropout, Softmax. Reduced:
    99 x 99, widths / 8, fc 256, 100 classes."""
    g = Graph(opset, 30 + opset)
    x = g.node("Relu", [g.conv("data_0", 3, 12, 11, s=4, p=0, name="conv1")])
    if family == "caffenet":  # CaffeNet: pool before norm
        x = lrn(
            g,
            g.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0]),
            "norm1",
        )
    else:
        x = g.node(
            "MaxPool", [lrn(g, x, "norm1")], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0]
        )
    x = g.node("Relu", [g.conv(x, 12, 32, 5, p=2, group=2, name="conv2")])
    x = g.node(
        "MaxPool", [lrn(g, x, "norm2")], "pool2", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0]
    )
    x = g.node("Relu", [g.conv(x, 32, 48, 3, p=1, name="conv3")])
    x = g.node("Relu", [g.conv(x, 48, 48, 3, p=1, group=2, name="conv4")])
    x = g.node("Relu", [g.conv(x, 48, 32, 3, p=1, group=2, name="conv5")])
    x = g.node("MaxPool", [x], "pool5", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0])
    x = g.node("Reshape", [x, g.init("OC2_DUMMY_1", np.array([1, 32 * 2 * 2], np.int64))], "OC2_DUMMY_0")
    c = 128
    for i, cout in enumerate([256, 256]):
        x = g.node("Relu", [g.gemm(x, c, cout, name=f"fc{i + 6}", alpha=1.0, beta=1.0)])
        x = g.node("Dropout", [x], f"drop{i + 6}", ratio=0.5)
        c = cout
    x = g.node("Softmax", [g.gemm(x, c, 100, name="fc8", alpha=1.0, beta=1.0)], "prob")
    model = g.model([("data_0", [1, 3, 99, 99])], [x], ir_version=3, producer="onnx-caffe2")
    return model, dict(family="AlexNet / CaffeNet (Caffe2)", kind="classifier", data=CAFFE_BGR)


def shufflenet_v1() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Caffe2's ShuffleNet v1 (g = 3, opset 9): grouped 1x1 Convs, channel shuffle as Reshape [1, g, C/g, H, W] /
    Transpose(0, 2, 1, 3, 4) / Reshape [1, C, H, W] with shape initializers, depthwise 3x3 + BN, AveragePool 3x3
    s2 shortcut + Concat on stride-2 units, Add + Relu otherwise. Reduced: 96 x 96, one unit per stage change."""
    g = Graph(9, 93)
    bn = {"epsilon": 1e-5, "momentum": 0.9}
    groups = 3
    x = g.node("Relu", [g.bn(g.conv("gpu_0/data_0", 3, 12, 3, s=2, p=1, bias=False), 12, **bn)])
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c, hw = 12, 24
    for i, (out, stride) in enumerate([(60, 2), (60, 1), (120, 2), (120, 1), (240, 2)]):
        mid = out // 4
        concat = stride == 2
        branch_out = out - c if concat else out
        g1 = 1 if i == 0 else groups
        y = g.node("Relu", [g.bn(g.conv(x, c, mid, 1, p=0, group=g1, bias=False), mid, **bn)])
        oh_ = hw
        shp = [1, groups, mid // groups, oh_, oh_]
        y = g.node("Reshape", [y, g.init(g.name("shuffle_shape"), np.array(shp, np.int64))])
        y = g.node("Transpose", [y], perm=[0, 2, 1, 3, 4])
        y = g.node("Reshape", [y, g.init(g.name("unshuffle_shape"), np.array([1, mid, oh_, oh_], np.int64))])
        y = g.bn(g.conv(y, mid, mid, 3, s=stride, p=1, group=mid, bias=False), mid, **bn)
        y = g.bn(g.conv(y, mid, branch_out, 1, p=0, group=groups, bias=False), branch_out, **bn)
        if concat:
            sc = g.node("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            x = g.node("Relu", [g.node("Concat", [sc, y], axis=1)])
            hw //= 2
        else:
            x = g.node("Relu", [g.node("Add", [x, y])])
        c = out
    x = g.node("AveragePool", [x], "pool_final", kernel_shape=[hw, hw], strides=[1, 1], pads=[0, 0, 0, 0])
    x = g.node("Reshape", [x, g.init("final_shape", np.array([1, c], np.int64))])
    x = g.gemm(x, c, 100, name="pred", alpha=1.0, beta=1.0)
    x = g.node("Softmax", [x], "gpu_0/softmax_1")
    model = g.model([("gpu_0/data_0", [1, 3, 96, 96])], [x], ir_version=4, producer="onnx-caffe2")
    return model, dict(family="ShuffleNet v1 (Caffe2)", kind="classifier", data=IMAGENET)


def densenet() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """Caffe2's DenseNet-121 (densenet-7 .. 9): Conv 7x7 s2 (no bias), BN (``spatial=1`` written out, epsilon
    1e-5), Relu, MaxPool pads, dense layers (BN/Relu/Conv 1x1/BN/Relu/Conv 3x3, Concat), transitions (BN/Relu/
    Conv/AveragePool 2x2), final BN/Relu, GlobalAveragePool, a 1x1 Conv classifier, Reshape with a shape
    initializer and Softmax. Reduced: 96 x 96, growth 8, blocks (2, 2, 2)."""
    g = Graph(7, 121)
    bn = {"epsilon": 1e-5, "spatial": 1}
    x = g.conv("data_0", 3, 16, 7, s=2, p=3, bias=False, name="conv1")
    x = g.node("Relu", [g.bn(x, 16, name="conv1/bn", **bn)])
    x = g.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c, growth = 16, 8
    for b, layers in enumerate([2, 2, 2]):
        for i in range(layers):
            p = f"conv{b + 2}_{i + 1}"
            y = g.node("Relu", [g.bn(x, c, name=f"{p}/x1/bn", **bn)])
            y = g.conv(y, c, 4 * growth, 1, p=0, bias=False, name=f"{p}/x1")
            y = g.node("Relu", [g.bn(y, 4 * growth, name=f"{p}/x2/bn", **bn)])
            y = g.conv(y, 4 * growth, growth, 3, p=1, bias=False, name=f"{p}/x2")
            x, c = g.node("Concat", [x, y], f"concat_{b + 2}_{i + 1}", axis=1), c + growth
        if b < 2:
            p = f"conv{b + 2}_blk"
            x = g.node("Relu", [g.bn(x, c, name=f"{p}/bn", **bn)])
            x = g.conv(x, c, c // 2, 1, p=0, bias=False, name=p)
            x = g.node(
                "AveragePool", [x], f"pool{b + 2}", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0]
            )
            c //= 2
    x = g.node("Relu", [g.bn(x, c, name="conv5_blk/bn", **bn)])
    x = g.node("GlobalAveragePool", [x], "pool5")
    x = g.conv(x, c, 100, 1, p=0, name="fc6")
    x = g.node("Reshape", [x, g.init("fc6_shape", np.array([1, 100], np.int64))])
    x = g.node("Softmax", [x], "fc6_1")
    model = g.model([("data_0", [1, 3, 96, 96])], [x], ir_version=3, producer="onnx-caffe2")
    return model, dict(family="DenseNet-121 (Caffe2)", kind="classifier", data=IMAGENET)


def vgg16_bn() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """MXNet Gluon VGG-16-BN (vgg16-bn-7): Conv/BN/Relu blocks, MaxPool 2x2, Flatten, Gemm/Relu/Dropout x2,
    Gemm. Reduced: 64 x 64, widths / 8, 2+2+3 convs, fc 256."""
    g = Graph(7, 16)
    bn = {"epsilon": 1e-5, "momentum": 0.9, "spatial": 1}
    x, c = "data", 3
    for w, n in [(8, 2), (16, 2), (32, 3), (64, 3)]:
        for _ in range(n):
            x, c = g.node("Relu", [g.bn(g.conv(x, c, w, 3, p=1), w, **bn)]), w
        x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0])
    x = g.node("Flatten", [x], "flatten0", axis=1)
    c = c * 4 * 4
    for _ in range(2):
        x = g.node("Dropout", [g.node("Relu", [g.gemm(x, c, 256, alpha=1.0, beta=1.0)])], ratio=0.5)
        c = 256
    x = g.gemm(x, c, 100, name="vgg0_dense2", alpha=1.0, beta=1.0)
    model = g.model([("data", [1, 3, 64, 64])], [x], ir_version=3, producer="mxnet")
    return model, dict(family="VGG-16-BN (MXNet Gluon)", kind="classifier", data=IMAGENET)


def super_resolution() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """torch 1.x's super-resolution-10 (the ESPCN tutorial model, opset 10): Conv 5x5 / Relu / Conv 3x3 / Relu /
    Conv 3x3 / Relu / Conv 3x3 to r^2 channels, pixel shuffle as Reshape [1, 1, r, r, H, W] / Transpose(0, 1, 4,
    2, 5, 3) / Reshape [1, 1, rH, rW] with Constant shapes. Reduced: 64 x 64 Y channel, widths / 2, r = 3."""
    g = Graph(10, 224)
    r, hw = 3, 64
    x = g.node("Relu", [g.conv("input", 1, 32, 5, p=2)])
    x = g.node("Relu", [g.conv(x, 32, 32, 3, p=1)])
    x = g.node("Relu", [g.conv(x, 32, 16, 3, p=1)])
    x = g.conv(x, 16, r * r, 3, p=1)
    s1 = g.node("Constant", [], value=numpy_helper.from_array(np.array([1, 1, r, r, hw, hw], np.int64)))
    x = g.node("Reshape", [x, s1])
    x = g.node("Transpose", [x], perm=[0, 1, 4, 2, 5, 3])
    s2 = g.node("Constant", [], value=numpy_helper.from_array(np.array([1, 1, r * hw, r * hw], np.int64)))
    x = g.node("Reshape", [x, s2], "output")
    model = g.model(
        [("input", [1, 1, hw, hw])], [x], ir_version=5, producer="pytorch", producer_version="1.3"
    )
    return model, dict(family="Super-resolution ESPCN (torch 1.x)", kind="segmenter",
                       data={"type": "image", "color": "GRAY", "scale": 1 / 255, "mean": None, "std": None})  # fmt: skip


def fast_neural_style(opset: int) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """torch 1.x's fast neural style (mosaic / candy / udnie / pointilism / rain-princess, opsets 8 and 9): reflect
    Pad (Pad-2 ``pads`` attribute), Conv, InstanceNormalization, Relu, residual blocks, nearest Upsample x2 (opset
    9: ``scales`` from a Constant input; opset 8: the ``scales`` attribute of Upsample-7) before the up Convs.
    Reduced: 64 x 64, widths / 4, 2 residual blocks, raw 0..255 RGB."""
    g = Graph(opset, 900 + opset)

    def conv_in(x: str, cin: int, cout: int, k: int, s: int = 1, norm: bool = True, relu: bool = True) -> str:
        x = g.node("Pad", [x], mode="reflect", pads=[0, 0, k // 2, k // 2, 0, 0, k // 2, k // 2])
        x = g.conv(x, cin, cout, k, s=s, p=0)
        if norm:
            x = g.node("InstanceNormalization", [x, g.init(g.name("in_scale"), g.rng.uniform(0.8, 1.2, cout)
                       .astype(np.float32)), g.init(g.name("in_bias"), g.rng.normal(0, 0.1, cout)
                       .astype(np.float32))], epsilon=1e-5)  # fmt: skip
        return g.node("Relu", [x]) if relu else x

    x = conv_in("input1", 3, 8, 9)
    x = conv_in(x, 8, 16, 3, s=2)
    x = conv_in(x, 16, 32, 3, s=2)
    for _ in range(2):
        y = conv_in(conv_in(x, 32, 32, 3), 32, 32, 3, relu=False)
        x = g.node("Add", [x, y])
    for cin, cout in [(32, 16), (16, 8)]:
        if opset >= 9:
            sc = g.node("Constant", [], value=numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32)))
            x = g.node("Upsample", [x, sc], mode="nearest")
        else:
            x = g.node("Upsample", [x], mode="nearest", scales=[1.0, 1.0, 2.0, 2.0])
        x = conv_in(x, cin, cout, 3)
    x = conv_in(x, 8, 3, 9, norm=False, relu=False)
    model = g.model(
        [("input1", [1, 3, 64, 64])], [x], ir_version=4, producer="pytorch", producer_version="1.0"
    )
    return model, dict(family="Fast neural style (torch 1.x)", kind="segmenter", data=RAW_RGB)


def ultraface_rfb() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """UltraFace version-RFB-320 (torch 1.2, opset 9): Conv/BN/Relu, depthwise separable convs, an RFB module
    (three dilated branches, Concat, 1x1, shortcut Add), per-scale heads permuted with Transpose and flattened with
    a Reshape, Concat, Softmax on the scores, boxes decoded from priors with Slice-1 (``starts``/``ends``
    attributes), Exp, Mul, Add, Sub, Concat. Reduced: 80 x 60 (W x H), widths / 2, 2 scales."""
    g = Graph(9, 320)
    bn = {"epsilon": 1e-5, "momentum": 0.9}

    def cbr(
        x: str, cin: int, cout: int, k: int = 3, s: int = 1, group: int = 1, dil: int = 1, relu: bool = True
    ):
        y = g.bn(g.conv(x, cin, cout, k, s=s, group=group, dilation=dil, bias=False), cout, **bn)
        return g.node("Relu", [y]) if relu else y

    def dw(x: str, cin: int, cout: int, s: int = 1) -> str:
        return cbr(cbr(x, cin, cin, 3, s=s, group=cin), cin, cout, 1)

    x = cbr("input", 3, 8, s=2)
    x = dw(dw(x, 8, 16), 16, 16, s=2)
    x = dw(dw(x, 16, 32, s=2), 32, 32)
    b = [cbr(cbr(x, 32, 8, 1), 8, 8, 3, dil=d, relu=False) for d in (1, 2, 3)]
    y = cbr(g.node("Concat", b, axis=1), 24, 32, 1, relu=False)
    x = g.node("Relu", [g.node("Add", [y, x])])
    feats = [x, dw(x, 32, 64, s=2)]
    anchors = [3, 2]
    scores, boxes, priors = [], [], []
    h, w = 8, 10
    for i, (f, a, cin) in enumerate(zip(feats, anchors, (32, 64), strict=True)):
        hh, ww = (h, w) if i == 0 else (h // 2, w // 2)
        for out, dim, lst in ((scores, 2, "cls"), (boxes, 4, "reg")):
            y = g.conv(g.node("Relu", [g.conv(f, cin, cin, 3, group=cin)]), cin, a * dim, 1, p=0)
            y = g.node("Transpose", [y], perm=[0, 2, 3, 1])
            y = g.node("Reshape", [y, g.init(g.name(f"{lst}_shape"), np.array([1, -1, dim], np.int64))])
            out.append(y)
        ys, xs = np.meshgrid((np.arange(hh) + 0.5) / hh, (np.arange(ww) + 0.5) / ww, indexing="ij")
        sizes = np.array([0.1, 0.15, 0.2][:a]) * (1 + i)
        p = np.stack([np.broadcast_to(xs[..., None], (hh, ww, a)), np.broadcast_to(ys[..., None], (hh, ww, a)),
                      np.broadcast_to(sizes, (hh, ww, a)), np.broadcast_to(sizes, (hh, ww, a))], -1)  # fmt: skip
        priors.append(p.reshape(-1, 4))
    sc = g.node("Softmax", [g.node("Concat", scores, axis=1)], "scores", axis=2)
    loc = g.node("Concat", boxes, axis=1)
    pri = g.init("priors", np.concatenate(priors)[None].astype(np.float32))
    lxy = g.node("Slice", [loc], axes=[2], starts=[0], ends=[2])
    lwh = g.node("Slice", [loc], axes=[2], starts=[2], ends=[4])
    pxy = g.node("Slice", [pri], axes=[2], starts=[0], ends=[2])
    pwh = g.node("Slice", [pri], axes=[2], starts=[2], ends=[4])
    v0, v1 = (
        g.init("center_variance", np.array(0.1, np.float32)),
        g.init("size_variance", np.array(0.2, np.float32)),
    )
    cxy = g.node("Add", [g.node("Mul", [g.node("Mul", [lxy, v0]), pwh]), pxy])
    wh = g.node("Mul", [g.node("Exp", [g.node("Mul", [lwh, v1])]), pwh])
    half = g.init("half", np.array(0.5, np.float32))
    hwh = g.node("Mul", [wh, half])
    bx = g.node("Concat", [g.node("Sub", [cxy, hwh]), g.node("Add", [cxy, hwh])], "boxes", axis=2)
    model = g.model(
        [("input", [1, 3, 60, 80])], [sc, bx], ir_version=4, producer="pytorch", producer_version="1.2"
    )
    return model, dict(family="UltraFace version-RFB (torch 1.2)", kind="detector",
                       data={"type": "image", "color": "RGB", "scale": 1.0, "mean": [127.0] * 3,
                             "std": [128.0] * 3})  # fmt: skip


def mnist7() -> tuple[onnx.ModelProto, dict[str, Any]]:
    """CNTK's mnist-7 (opset 7): Conv auto_pad SAME_UPPER + Add bias [C, 1, 1], Relu, MaxPool, a Reshape of the
    weight by a shape initializer feeding MatMul, Add. The shared mnist-8 is the opset-8 twin with real weights."""
    g = Graph(7, 7)
    x, c = "Input3", 1
    for i, w in enumerate([8, 16]):
        wt = g.weight(f"Parameter{5 + i}", (w, c, 5, 5), c * 25)
        x = g.node("Conv", [x, wt], f"Convolution{28 + i}", kernel_shape=[5, 5], strides=[1, 1],
                   auto_pad="SAME_UPPER", group=1, dilations=[1, 1])  # fmt: skip
        x = g.node(
            "Add", [x, g.init(f"Parameter{6 + i}_b", g.rng.normal(0, 0.05, (w, 1, 1)).astype(np.float32))]
        )
        k = 2 + i  # CNTK's mnist: 2x2 / 2 then 3x3 / 3 (28 -> 14 -> 4)
        x = g.node("MaxPool", [g.node("Relu", [x])], f"Pooling{160 + i}", kernel_shape=[k, k], strides=[k, k],
                   pads=[0, 0, 0, 0], auto_pad="NOTSET")  # fmt: skip
        c = w
    x = g.node("Reshape", [x, g.init("Pooling160_Output_0_reshape0_shape", np.array([1, 256], np.int64))])
    w4 = g.weight("Parameter193", (16, 4, 4, 10), 256, gain=1.0)
    w2 = g.node("Reshape", [w4, g.init("Parameter193_reshape1_shape", np.array([256, 10], np.int64))])
    x = g.node("MatMul", [x, w2], "Times212")
    x = g.node(
        "Add", [x, g.init("Parameter194", g.rng.normal(0, 0.05, (1, 10)).astype(np.float32))], "Plus214"
    )
    model = g.model([("Input3", [1, 1, 28, 28])], [x], ir_version=3, producer="CNTK", producer_version="2.4")
    return model, dict(family="MNIST (CNTK)", kind="classifier", data=RAW_RGB | {"color": "GRAY"})


BUILDERS: dict[str, Callable[[], tuple[onnx.ModelProto, dict[str, Any]]]] = {
    "legacy_tinyyolov2_7": lambda: tinyyolov2(7),
    "legacy_tinyyolov2_8": lambda: tinyyolov2(8),
    "legacy_emotion_ferplus_8": emotion_ferplus,
    "legacy_arcface_8": lambda: arcface(0),
    "legacy_arcface_8_spatial1": lambda: arcface(1),
    "legacy_resnet50_v1_7": lambda: resnet_mxnet(1),
    "legacy_resnet50_v2_7": lambda: resnet_mxnet(2),
    "legacy_mobilenetv2_7": mobilenetv2_mxnet,
    "legacy_squeezenet10_7": lambda: squeezenet10(7),
    "legacy_squeezenet10_9": lambda: squeezenet10(9),
    "legacy_googlenet_7": lambda: googlenet(7),
    "legacy_googlenet_9": lambda: googlenet(9),
    "legacy_alexnet_7": lambda: alexnet(7),
    "legacy_caffenet_9": lambda: alexnet(9, "caffenet"),
    "legacy_shufflenet_v1_9": shufflenet_v1,
    "legacy_densenet121_7": densenet,
    "legacy_vgg16_bn_7": vgg16_bn,
    "legacy_super_resolution_10": super_resolution,
    "legacy_mosaic_8": lambda: fast_neural_style(8),
    "legacy_mosaic_9": lambda: fast_neural_style(9),
    "legacy_ultraface_rfb_9": ultraface_rfb,
    "legacy_mnist_7": mnist7,
}


# ------------------------------------------------------------------------------------------ BN statistics


def _reference(model: onnx.ModelProto, spatial_as_channel: bool = False):
    import onnxruntime as ort

    proto = onnx.ModelProto()
    proto.CopyFrom(model)
    if spatial_as_channel:  # onnxruntime refuses spatial=0 with per-channel parameters (the MXNet files)
        for n in proto.graph.node:
            for a in n.attribute:
                if n.op_type == "BatchNormalization" and a.name == "spatial":
                    a.i = 1
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # old files list initializers as inputs: one warning per weight
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return proto, opts


def set_bn_statistics(model: onnx.ModelProto, batch: dict[str, np.ndarray]) -> int:
    """Each BatchNormalization in graph order gets the per-channel mean / variance of its input on ``batch``
    (onnxruntime, the statistics before it already set), in place. Returns how many were set."""
    import onnxruntime as ort

    inits = {t.name: t for t in model.graph.initializer}
    bns = [n for n in model.graph.node if n.op_type == "BatchNormalization"]
    for node in bns:
        proto, opts = _reference(model, spatial_as_channel=True)
        proto.graph.output.append(oh.make_tensor_value_info(node.input[0], TensorProto.FLOAT, None))
        session = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        n = len(next(iter(batch.values())))
        x = np.concatenate(
            [session.run([node.input[0]], {k: v[i : i + 1] for k, v in batch.items()})[0] for i in range(n)]
        ).astype(np.float64)
        axes = (0, *range(2, x.ndim))
        mean, var = x.mean(axis=axes), x.var(axis=axes)
        for name, value in ((node.input[3], mean), (node.input[4], var)):
            inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))
    return len(bns)


def temper_softmax_head(model: onnx.ModelProto, batch: dict[str, np.ndarray], spread: float = 3.0) -> None:
    """Scale the layer in front of each output Softmax (through Relu / pooling / Reshape / Flatten / Dropout) so
    that its logits have a standard deviation of ``spread`` on ``batch``, as trained ImageNet classifiers' do:
    seeded He-initialised weights give logits 25x wider, a one-hot Softmax where one int8 step flips the answer."""
    import onnxruntime as ort

    producers = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: t for t in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    for soft in [n for n in model.graph.node if n.op_type == "Softmax" and n.output[0] in outputs]:
        layer = producers.get(soft.input[0])
        while layer is not None and layer.op_type in (
            "Relu",
            "GlobalAveragePool",
            "Reshape",
            "Flatten",
            "Dropout",
        ):
            layer = producers.get(layer.input[0])
        if layer is None or layer.op_type not in ("Gemm", "Conv"):
            continue
        proto, opts = _reference(model, spatial_as_channel=True)
        proto.graph.output.append(oh.make_tensor_value_info(soft.input[0], TensorProto.FLOAT, None))
        session = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        n = len(next(iter(batch.values())))
        logits = np.concatenate(
            [session.run([soft.input[0]], {k: v[i : i + 1] for k, v in batch.items()})[0] for i in range(n)]
        )
        factor = spread / float(logits.reshape(n, -1).std(axis=1).mean())
        for name in layer.input[1:3]:
            t = inits[name]
            t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t) * factor).astype(np.float32), name))


def build(name: str, out: Path, photos: list[np.ndarray]) -> dict[str, Any]:
    import onnxruntime as ort

    model, meta = BUILDERS[name]()
    graph_inputs = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    inputs = [
        {"name": i.name, "shape": [d.dim_value for d in i.type.tensor_type.shape.dim], "dtype": "float32"}
        for i in model.graph.input
        if i.name in graph_inputs
    ]
    entry = {"name": name, "data": meta["data"], "inputs": inputs}
    batch = zoo_data.make_arrays(entry, 16, 1000, photos)
    n_bn = set_bn_statistics(model, batch)
    temper_softmax_head(model, batch)
    proto, opts = _reference(model, spatial_as_channel=True)
    session = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    outs = session.run(None, {k: v[:1] for k, v in zoo_data.make_arrays(entry, 1, 7, photos).items()})
    assert all(np.isfinite(o).all() for o in outs), name
    for value, array in zip(model.graph.output, outs, strict=True):  # as old files: every output's shape
        value.type.CopyFrom(oh.make_tensor_type_proto(TensorProto.FLOAT, list(array.shape)))
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, out / f"{name}.onnx")
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    note = "rebuilt as the original converter wrote it (onnx.helper), seeded weights"
    if any(a.name == "spatial" and a.i == 0 for n in model.graph.node for a in n.attribute):
        note += (
            "; BatchNormalization spatial=0 with per-channel parameters (onnxruntime refuses the file as is)"
        )
    return {
        "name": name, "file": f"{name}.onnx", "family": meta["family"], "kind": meta["kind"],
        "opset": model.opset_import[0].version, "inputs": inputs, "outputs": [o.name for o in model.graph.output],
        "data": meta["data"], "size": "reduced", "params": params, "batchnorm_layers_set": n_bn,
        "ops": sorted({n.op_type for n in model.graph.node}), "note": note, "ir_version": model.ir_version,
    }  # fmt: skip


# ------------------------------------------------------------------------------- typed-refusal extras


def yolov3_nms() -> onnx.ModelProto:
    """keras2onnx's YOLOv3-10 head in miniature: two inputs (``input_1`` image, ``image_shape`` [1, 2]), boxes and
    scores, NonMaxSuppression-10 and Gathers on its selected indices (three outputs)."""
    g = Graph(10, 3)
    x = g.node("LeakyRelu", [g.conv("input_1", 3, 8, 3, s=2)], alpha=0.1)
    x = g.node("LeakyRelu", [g.conv(x, 8, 16, 3, s=2)], alpha=0.1)
    y = g.conv(x, 16, 4 + 3, 1, p=0)  # 4 box numbers + 3 classes per cell
    y = g.node(
        "Reshape",
        [g.node("Transpose", [y], perm=[0, 2, 3, 1]), g.init("shape", np.array([1, -1, 7], np.int64))],
    )
    boxes = g.node("Slice", [y, g.init("s0", np.array([0], np.int64)), g.init("e0", np.array([4], np.int64)),
                             g.init("a0", np.array([2], np.int64))])  # fmt: skip
    sc = g.node("Slice", [y, g.init("s1", np.array([4], np.int64)), g.init("e1", np.array([7], np.int64)),
                          g.init("a1", np.array([2], np.int64))])  # fmt: skip
    boxes = g.node("Mul", [boxes, g.node("Concat", ["image_shape", "image_shape"], axis=1)], "yolonms_boxes")
    scores = g.node("Transpose", [g.node("Sigmoid", [sc])], "yolonms_scores", perm=[0, 2, 1])
    sel = g.node("NonMaxSuppression", [boxes, scores, g.init("max_out", np.array([10], np.int64)),
                                       g.init("iou", np.array([0.5], np.float32)),
                                       g.init("thr", np.array([0.3], np.float32))], "yolonms_layer_1")  # fmt: skip
    proto = g.model([("input_1", [1, 3, 64, 64]), ("image_shape", [1, 2])], [boxes, scores, sel],
                    ir_version=5, producer="keras2onnx")  # fmt: skip
    proto.graph.output[2].type.tensor_type.elem_type = TensorProto.INT64
    return proto


def bidaf_strings() -> onnx.ModelProto:
    """BiDAF's string inputs (``context_word`` [N, 1] strings) through ai.onnx.ml CategoryMapper to ids."""
    node = oh.make_node("CategoryMapper", ["context_word"], ["ids"], domain="ai.onnx.ml",
                        cats_strings=["the", "a", "edge"], cats_int64s=[1, 2, 3], default_int64=0)  # fmt: skip
    emb = numpy_helper.from_array(np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32), "emb")
    gather = oh.make_node("Gather", ["emb", "ids"], ["out"])
    graph = oh.make_graph([node, gather], "bidaf", [oh.make_tensor_value_info("context_word", TensorProto.STRING, [4, 1])],
                          [oh.make_tensor_value_info("out", TensorProto.FLOAT, None)], [emb])  # fmt: skip
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 9), oh.make_opsetid("ai.onnx.ml", 1)],
                         ir_version=4, producer_name="pytorch")  # fmt: skip


def squeezenet_old(opset: int) -> onnx.ModelProto:
    """Caffe2's squeezenet1.0-3 / -6: opset 3 / 6 with ``consumed_inputs`` on Relu (opset 3), Dropout with
    ``is_test``, Softmax, and the rest of squeezenet1.0-7."""
    model, _ = squeezenet10(7)
    del model.opset_import[:]
    model.opset_import.append(oh.make_opsetid("", opset))
    for n in model.graph.node:
        if n.op_type == "Dropout":
            n.attribute.append(oh.make_attribute("is_test", 1))
        if opset < 6 and n.op_type == "Relu":
            n.attribute.append(oh.make_attribute("consumed_inputs", [0]))
    return model


def write_extras(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, model in [
        ("legacy_yolov3_nms_10", yolov3_nms()),
        ("legacy_bidaf_strings_9", bidaf_strings()),
        ("legacy_squeezenet10_3", squeezenet_old(3)),
        ("legacy_squeezenet10_6", squeezenet_old(6)),
    ]:
        if not name.startswith(
            "legacy_squeezenet10_"
        ):  # output shapes from a run (onnxruntime has no opset < 7)
            import onnxruntime as ort

            opts = ort.SessionOptions()
            opts.log_severity_level = 3
            session = ort.InferenceSession(
                model.SerializeToString(), opts, providers=["CPUExecutionProvider"]
            )
            feeds = {
                i.name: np.array([["the"]] * 4, object) if i.type.tensor_type.elem_type == TensorProto.STRING
                else np.full([d.dim_value for d in i.type.tensor_type.shape.dim], 64, np.float32)
                for i in model.graph.input
                if i.name not in {t.name for t in model.graph.initializer}
            }  # fmt: skip
            for value, array in zip(model.graph.output, session.run(None, feeds), strict=True):
                value.type.tensor_type.shape.CopyFrom(
                    oh.make_tensor_type_proto(1, list(array.shape)).tensor_type.shape
                )
        onnx.checker.check_model(model)
        onnx.save(model, out / f"{name}.onnx")
        print("wrote", out / f"{name}.onnx")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / ".zoo" / "probe9l")
    parser.add_argument("--only", help="comma-separated names")
    parser.add_argument("--photos", type=Path, help="photos for the BatchNorm statistics")
    parser.add_argument("--extra", type=Path, help="also write the typed-refusal files (not zoo cases) here")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    photos = zoo_data.bn_photos(args.photos, default_shared())
    names = args.only.split(",") if args.only else list(BUILDERS)
    entries = []
    for name in names:
        entries.append(build(name, out, photos))
        print(f"{name}: opset {entries[-1]['opset']}, {entries[-1]['params']} params")
    zoo_data.merge_manifest(out, entries)
    if args.extra:
        write_extras(args.extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
