"""Helpers the benchmarks share for reading ../shared (models and data nobody on the team made)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np


def default_shared() -> Path:
    """The shared folder: beside the repository (CI and fresh clones) or the workplace's."""
    here = Path(__file__).resolve()
    for candidate in (here.parents[2] / "shared", here.parents[1] / "shared", Path("/work/shared")):
        if (candidate / "models").is_dir():
            return candidate
    return here.parents[2] / "shared"


def mnist_npz(shared: Path, count: int, folder: Path) -> Path:
    """The first ``count`` MNIST test images as raw 0..255 floats (mnist-8's input ``Input3``) with labels,
    written to ``folder/mnist.npz``."""
    with gzip.open(shared / "data/mnist/t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:count]
    with gzip.open(shared / "data/mnist/t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)[:count]
    path = folder / "mnist.npz"
    np.savez(path, Input3=images.astype(np.float32), labels=labels.astype(np.int64))
    return path


def float_from_quantized(source: Path, out: Path) -> Path:
    """The fp32 model behind a quantized ONNX file (QOperator or QDQ), written to ``out``: the QOperator
    nodes become QDQ (``edgekit.core.qoperator``), every DequantizeLinear of a constant becomes the float constant
    it computes, and every QuantizeLinear -> DequantizeLinear pair on an activation is dropped. MobileNetV2
    with real weights comes out of ``models/mobilenetv2-12-int8.onnx`` this way (issues 13 and 14)."""
    import onnx_ir as ir
    from edgekit.core.model import load_model, save_model

    model = load_model(source)
    graph = model.graph

    def constant(value: ir.Value | None) -> np.ndarray | None:
        if value is None:
            return None
        if value.const_value is not None:
            return value.const_value.numpy()
        producer = value.producer()
        if producer is not None and producer.op_type == "Constant":
            return producer.attributes["value"].as_tensor().numpy()
        return None

    for node in list(graph):
        if node.op_type != "DequantizeLinear":
            continue
        data, scale = constant(node.inputs[0]), constant(node.inputs[1])
        zero = constant(node.inputs[2]) if len(node.inputs) > 2 else None
        if data is not None and scale is not None:
            axis = node.attributes.get_int("axis", 1)
            shape = [1] * data.ndim
            if scale.ndim == 1 and scale.size > 1:
                shape[axis] = -1
            zero_point = np.zeros_like(scale) if zero is None else zero.astype(np.float32)
            real = (data.astype(np.float32) - zero_point.reshape(shape)) * scale.reshape(shape)
            init = ir.Value(
                name=node.outputs[0].name + "_float", const_value=ir.tensor(real.astype(np.float32))
            )
            graph.initializers.add(init)
            node.outputs[0].replace_all_uses_with(init, replace_graph_outputs=True)
            graph.remove(node, safe=True)
            continue
        producer = node.inputs[0].producer() if node.inputs[0] is not None else None
        if producer is not None and producer.op_type == "QuantizeLinear":
            replacement = producer.inputs[0]
            q_scale, q_zero = constant(producer.inputs[1]), constant(producer.inputs[2])
            if q_zero is not None and q_scale is not None and q_zero.size == 1:
                info = np.iinfo(q_zero.dtype)
                if int(q_zero) == info.min:
                    high = np.float32((info.max - info.min) * float(q_scale))
                    clip = ir.node(
                        "Clip",
                        [
                            replacement,
                            ir.Value(const_value=ir.tensor(np.float32(0))),
                            ir.Value(const_value=ir.tensor(high)),
                        ],
                    )
                    for i, v in enumerate(clip.inputs[1:], 1):
                        v.name = f"{node.outputs[0].name}_clip{i}"
                        graph.initializers.add(v)
                    graph.insert_before(node, clip)
                    replacement = clip.outputs[0]
            node.outputs[0].replace_all_uses_with(replacement, replace_graph_outputs=True)
            graph.remove(node, safe=True)
            if not producer.outputs[0].uses():
                graph.remove(producer, safe=True)
    ir.passes.common.RemoveUnusedNodesPass()(model)
    left = sorted({n.op_type for n in graph if n.op_type in ("QuantizeLinear", "DequantizeLinear")})
    if left:
        raise ValueError(f"{source.name}: quantization nodes left after the float rewrite: {left}")
    save_model(model, out)
    return out


#: The 200 labelled ImageNet photos, and MobileNetV2's preprocessing of them (RGB, shorter side 256, centre crop
#: 224, /255, ImageNet mean/std).
PHOTOS = "data/imagenet-sample-200"


def imagenet_photos(shared: Path, samples: int | None = None) -> list[tuple[np.ndarray, int | None]]:
    """The shared photos as MobileNetV2's ``input`` (1, 3, 224, 224) with their labels, the first ``samples``."""
    from edgekit.core.data import ImagePreprocess, InputSpec, open_dataset

    pre = ImagePreprocess(
        resize_mode="shorter-side-crop",
        resize_shorter=256,
        scale=0.00392157,
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
    )
    data = open_dataset(
        shared / PHOTOS, [InputSpec("input", (1, 3, 224, 224), np.float32)], pre, limit=samples
    )
    return [(np.array(s.inputs["input"]), s.label) for s in data]
