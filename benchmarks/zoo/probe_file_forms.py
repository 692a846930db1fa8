"""Issue 12 probe round 13f: model files and I/O forms as users hand them over
(``--out benchmarks/.zoo/probe13f``, not committed).

Two small seeded models (a CNN with BatchNorm statistics from the photos, 32x32, and ``transformers.py``'s
BERT-style encoder, 16 tokens) are written in the forms real files come in, one per row of :data:`FORMS`:
external data (one file, many files, a sub-folder, the dynamo exporter's ``model.onnx.data``, optimum's
``model.onnx_data``, missing / truncated), float16 / bfloat16, input forms (uint8 / NHWC / two images / a scalar /
a bool / int32 ids / shared ``dim_param`` / unread / odd names / initializers as inputs / no shape), output forms
(an input, one tensor twice, a constant, int64, bool, very different ranges) and graph hygiene (stale value_info,
duplicate / empty node names, unsorted nodes, an unused 100 MB initializer, metadata and doc strings, training-mode
attributes, a full-check failure).

Every form runs the zoo's six CLI cases (``tests/zoo/zoo_cases.py``: each a child process), from a working
directory that is not the model's (the model path given relative to it). A row records each case's outcome, exit
code and first error line, then: the passing cases' figures (the zoo's yardsticks), whether the artifacts load
with the source folder moved away (self-contained), whether a failing case left files behind (a half-written
artifact) and the artifacts' size (an unused initializer must not be carried).

    python benchmarks/zoo/probe_file_forms.py --out benchmarks/.zoo/probe13f [--only a,b] [--cases "arm-cpu fp32"]
        [--json r.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "tests" / "zoo"))

import export as zoo_export  # noqa: E402
import transformers as zoo_transformers  # noqa: E402
import zoo_cases  # noqa: E402
import zoo_data  # noqa: E402

SEED = 1313
SIZE = 32
CALIB, EVAL = 8, 8
IMAGE = [1, 3, SIZE, SIZE]
MEAN = np.array(zoo_data.IMAGENET_MEAN, np.float32)
STD = np.array(zoo_data.IMAGENET_STD, np.float32)


# ------------------------------------------------------------------------------------------------ base models


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()

        def block(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()
            )

        self.features = nn.Sequential(block(3, 8, 1), block(8, 16, 2), block(16, 16, 1), block(16, 24, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(0.2)
        self.fc = nn.Linear(24, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(self.pool(self.features(x)).flatten(1)))


CNN_SPEC = zoo_export.Spec(
    "cnn", "small CNN", "classifier", 17, lambda full: SmallCNN(), lambda full: [("input", IMAGE)], ["logits"]
)


def photos() -> list[np.ndarray]:
    return zoo_data.cached_photos()


def image_batches(count: int, seed: int, layout: str = "NCHW") -> np.ndarray:
    """Normalised crops [count, 1, 3, H, W] (or raw uint8 NHWC pixels with ``layout="uint8"``)."""
    crops = zoo_data.photo_crops(photos(), count, SIZE, SIZE, seed)  # uint8 [N, H, W, 3]
    if layout == "uint8":
        return crops[:, None].astype(np.uint8)
    x = (crops.astype(np.float32) / 255.0 - MEAN) / STD
    if layout == "NHWC":
        return x[:, None].astype(np.float32)
    return x.transpose(0, 3, 1, 2)[:, None].astype(np.float32)


def trained_cnn() -> nn.Module:
    torch.manual_seed(SEED)
    model = SmallCNN()
    zoo_export.set_bn_statistics(model, CNN_SPEC, False, photos(), 4)
    return model.eval()


def export_torch(
    model: nn.Module, args: tuple, path: Path, names: list[str], outputs: list[str], **kw
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    kw.setdefault("dynamo", False)
    kw.setdefault("opset_version", 17)
    with torch.no_grad():
        torch.onnx.export(model, args, str(path), input_names=names, output_names=outputs, **kw)


def example_image() -> torch.Tensor:
    return torch.from_numpy(image_batches(1, 7)[0])


# ---------------------------------------------------------------------------------------------------- forms


@dataclass
class Built:
    """One form on disk: its model file, data, kind and extra CLI arguments."""

    path: Path
    calib: dict[str, np.ndarray]
    eval: dict[str, np.ndarray]
    kind: str = "classifier"
    extra_args: list[str] = field(default_factory=list)
    expect: str = "pass"  # pass | typed: what a correct edgekit does with the form
    #: the same model in a form onnxruntime loads, for the figures (onnxruntime refuses duplicate node names,
    #: contradicting value_info; a shapeless input gives the figures no rank): the base model
    reference: Path | None = None


@dataclass(frozen=True)
class Form:
    name: str
    group: str
    what: str
    build: Callable[[Path, Base], Built]


@dataclass
class Base:
    """The base models, built once: the CNN's module and ONNX proto, the encoder's proto and token data."""

    cnn: nn.Module
    cnn_proto: onnx.ModelProto
    bert_proto: onnx.ModelProto
    bert_calib: dict[str, np.ndarray]
    bert_eval: dict[str, np.ndarray]


def cnn_data() -> tuple[dict, dict]:
    return {"input": image_batches(CALIB, 11)}, {"input": image_batches(EVAL, 12)}


def save(proto: onnx.ModelProto, folder: Path, name: str = "model.onnx", **kw) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if "/" in kw.get("location", ""):
        (folder / kw["location"]).parent.mkdir(parents=True, exist_ok=True)  # onnx does not create it
    path = folder / name
    onnx.save(proto, str(path), **kw)
    return path


def copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    return out


def cnn_form(
    edit: Callable[[onnx.ModelProto], onnx.ModelProto | None], **built
) -> Callable[[Path, Base], Built]:
    """A form of the CNN made by editing its ONNX proto in place (``edit`` may return a new proto)."""

    def build(folder: Path, base: Base) -> Built:
        proto = copy(base.cnn_proto)
        proto = edit(proto) or proto
        calib, evaluation = built.get("data", cnn_data)()
        rest = {k: v for k, v in built.items() if k not in ("data", "reference")}
        if built.get("reference"):
            rest["reference"] = save(base.cnn_proto, folder, "reference.onnx")
        return Built(save(proto, folder), calib, evaluation, **rest)

    return build


def bert_form(
    edit: Callable[[onnx.ModelProto], onnx.ModelProto | None], **built
) -> Callable[[Path, Base], Built]:
    def build(folder: Path, base: Base) -> Built:
        proto = copy(base.bert_proto)
        proto = edit(proto) or proto
        convert = built.get("convert")
        calib, evaluation = base.bert_calib, base.bert_eval
        if convert:
            calib, evaluation = convert(calib), convert(evaluation)
        rest = {k: v for k, v in built.items() if k != "convert"}
        return Built(save(proto, folder), calib, evaluation, kind="encoder", **rest)

    return build


# ---- external data


def external(**kw) -> Callable[[Path, Base], Built]:
    def build(folder: Path, base: Base) -> Built:
        calib, evaluation = cnn_data()
        path = save(copy(base.cnn_proto), folder, save_as_external_data=True, size_threshold=0, **kw)
        return Built(path, calib, evaluation)

    return build


def external_broken(how: str) -> Callable[[Path, Base], Built]:
    def build(folder: Path, base: Base) -> Built:
        calib, evaluation = cnn_data()
        path = save(
            copy(base.cnn_proto), folder, save_as_external_data=True, size_threshold=0, location="w.bin"
        )
        data = folder / "w.bin"
        if how == "missing":
            data.unlink()
        else:
            data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
        return Built(path, calib, evaluation, expect="typed")

    return build


def dynamo_external(folder: Path, base: Base) -> Built:
    calib, evaluation = cnn_data()
    path = folder / "model.onnx"
    export_torch(base.cnn, (example_image(),), path, ["input"], ["logits"], dynamo=True, opset_version=18,
                 external_data=True)  # fmt: skip
    return Built(path, calib, evaluation)


# ---- float16 / bfloat16


def half_export(dtype: torch.dtype) -> Callable[[Path, Base], Built]:
    def build(folder: Path, base: Base) -> Built:
        calib, evaluation = cnn_data()
        model = trained_cnn().to(dtype)
        path = folder / "model.onnx"
        export_torch(model, (example_image().to(dtype),), path, ["input"], ["logits"])
        return Built(path, calib, evaluation)

    return build


def occ_fp16(proto: onnx.ModelProto) -> onnx.ModelProto:
    from onnxconverter_common import float16

    return float16.convert_float_to_float16(proto, keep_io_types=False)


# ---- inputs


def wrap_input(proto: onnx.ModelProto, new_input: onnx.ValueInfoProto, nodes: list[onnx.NodeProto]) -> None:
    """Replace the CNN's input by ``new_input`` and ``nodes`` computing the old input from it."""
    graph = proto.graph
    old = graph.input[0].name
    renamed = "prep_" + old
    for node in graph.node:
        node.input[:] = [renamed if i == old else i for i in node.input]
    for node in nodes:
        node.output[:] = [renamed if o == old else o for o in node.output]
    del graph.input[:]
    graph.input.append(new_input)
    rest = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *rest])


def const(graph: onnx.GraphProto, name: str, value: np.ndarray) -> str:
    graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
    return name


def uint8_nhwc(proto: onnx.ModelProto) -> None:
    g = proto.graph
    const(g, "mean255", (MEAN * 255).reshape(1, 1, 1, 3))
    const(g, "std255", (STD * 255).reshape(1, 1, 1, 3))
    nodes = [
        helper.make_node("Cast", ["image"], ["image_f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["image_f", "mean255"], ["centred"]),
        helper.make_node("Div", ["centred", "std255"], ["normed"]),
        helper.make_node("Transpose", ["normed"], ["input"], perm=[0, 3, 1, 2]),
    ]
    wrap_input(proto, helper.make_tensor_value_info("image", TensorProto.UINT8, [1, SIZE, SIZE, 3]), nodes)


def uint8_data() -> tuple[dict, dict]:
    return {"image": image_batches(CALIB, 11, "uint8")}, {"image": image_batches(EVAL, 12, "uint8")}


def nhwc(proto: onnx.ModelProto) -> None:
    nodes = [helper.make_node("Transpose", ["image"], ["input"], perm=[0, 3, 1, 2])]
    wrap_input(proto, helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, SIZE, SIZE, 3]), nodes)


def nhwc_data() -> tuple[dict, dict]:
    return {"image": image_batches(CALIB, 11, "NHWC")}, {"image": image_batches(EVAL, 12, "NHWC")}


def rename_everywhere(proto: onnx.ModelProto, mapping: dict[str, str]) -> None:
    g = proto.graph
    for node in g.node:
        node.input[:] = [mapping.get(i, i) for i in node.input]
        node.output[:] = [mapping.get(o, o) for o in node.output]
    for v in [*g.input, *g.output, *g.value_info]:
        v.name = mapping.get(v.name, v.name)
    for t in g.initializer:
        t.name = mapping.get(t.name, t.name)


def second_input(
    proto: onnx.ModelProto, vi: onnx.ValueInfoProto, nodes: list[onnx.NodeProto], out: str
) -> None:
    """Add input ``vi`` and ``nodes`` that combine it with the CNN's logits into ``out`` (the new output)."""
    g = proto.graph
    logits = g.output[0].name
    rename_everywhere(proto, {logits: "raw_logits"})
    g.input.append(vi)
    g.node.extend(nodes)
    g.output[0].name = out


def two_images(proto: onnx.ModelProto) -> None:
    """Two images through the same backbone weights, logits added (a siamese / stereo pair's shape)."""
    g = proto.graph
    nodes = [copy_node(n, "b_") for n in g.node]
    second = {n.output[0] for n in g.node}
    for node in nodes:
        node.input[:] = ["b_" + i if i in second or i == "input" else i for i in node.input]
    g.input.append(helper.make_tensor_value_info("b_input", TensorProto.FLOAT, IMAGE))
    g.node.extend(nodes)
    logits = g.output[0].name
    g.node.append(helper.make_node("Add", [logits, "b_" + logits], ["pair_logits"]))
    g.output[0].name = "pair_logits"
    g.output[0].type.tensor_type.shape.dim[0].dim_value = 1


def copy_node(node: onnx.NodeProto, prefix: str) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    out.name = prefix + node.name
    out.output[:] = [prefix + o for o in node.output]
    return out


def two_images_data() -> tuple[dict, dict]:
    return (
        {"input": image_batches(CALIB, 11), "b_input": image_batches(CALIB, 21)},
        {"input": image_batches(EVAL, 12), "b_input": image_batches(EVAL, 22)},
    )


def scalar_input(proto: onnx.ModelProto) -> None:
    second_input(
        proto,
        helper.make_tensor_value_info("threshold", TensorProto.FLOAT, []),
        [
            helper.make_node("Sigmoid", ["raw_logits"], ["probs"]),
            helper.make_node("Sub", ["probs", "threshold"], ["margin"]),
            helper.make_node("Relu", ["margin"], ["scores"]),
        ],
        "scores",
    )


def with_extra(name: str, values: Callable[[int, int], np.ndarray]) -> Callable[[], tuple[dict, dict]]:
    def data() -> tuple[dict, dict]:
        calib, evaluation = cnn_data()
        return calib | {name: values(CALIB, 1)}, evaluation | {name: values(EVAL, 2)}

    return data


def bool_input(proto: onnx.ModelProto) -> None:
    const(proto.graph, "zero", np.zeros((), np.float32))
    second_input(
        proto,
        helper.make_tensor_value_info("keep", TensorProto.BOOL, [1, 10]),
        [helper.make_node("Where", ["keep", "raw_logits", "zero"], ["kept"])],
        "kept",
    )


def unused_input(proto: onnx.ModelProto) -> None:
    proto.graph.input.append(helper.make_tensor_value_info("unused", TensorProto.FLOAT, [1, 4]))


def odd_names(proto: onnx.ModelProto) -> None:
    g = proto.graph
    mapping = {
        g.input[0].name: "serving_default_input:0",
        g.output[0].name: "StatefulPartitionedCall/logits ü 出力",
    }
    for i, node in enumerate(g.node):
        for o in node.output:
            if o not in mapping:
                mapping[o] = f"model/block {i}/{o}:0"
    rename_everywhere(proto, mapping)


def odd_names_data() -> tuple[dict, dict]:
    calib, evaluation = cnn_data()
    return {"serving_default_input:0": calib["input"]}, {"serving_default_input:0": evaluation["input"]}


def initializers_as_inputs(folder: Path, base: Base) -> Built:
    """torch's exporter at opset 8 with ``keep_initializers_as_inputs=True``: IR version 3, every initializer
    also a graph input (as old exporters wrote)."""
    calib, evaluation = cnn_data()
    path = folder / "model.onnx"
    export_torch(base.cnn, (example_image(),), path, ["input"], ["logits"], opset_version=8,
                 keep_initializers_as_inputs=True)  # fmt: skip
    return Built(path, calib, evaluation)


def no_shape(proto: onnx.ModelProto) -> None:
    proto.graph.input[0].type.tensor_type.ClearField("shape")


def bert_int32(proto: onnx.ModelProto) -> None:
    g = proto.graph
    for vi in g.input:
        old = vi.name
        vi.type.tensor_type.elem_type = TensorProto.INT32
        for node in g.node:
            node.input[:] = [f"{old}_i64" if i == old else i for i in node.input]
        rest = list(g.node)
        del g.node[:]
        g.node.extend([helper.make_node("Cast", [old], [f"{old}_i64"], to=TensorProto.INT64), *rest])


def bert_dim_params(proto: onnx.ModelProto) -> None:
    for vi in proto.graph.input:
        dims = vi.type.tensor_type.shape.dim
        dims[0].dim_param, dims[1].dim_param = "batch_size", "sequence_length"
    out = proto.graph.output[0].type.tensor_type.shape.dim
    out[0].dim_param = "batch_size"


# ---- outputs


def output_is_input(proto: onnx.ModelProto) -> None:
    g = proto.graph
    g.output.append(onnx.ValueInfoProto())
    g.output[-1].CopyFrom(g.input[0])


def same_tensor_twice(proto: onnx.ModelProto) -> None:
    g = proto.graph
    logits = g.output[0].name
    g.node.append(helper.make_node("Identity", [logits], ["logits_copy"]))
    g.output.append(helper.make_tensor_value_info("logits_copy", TensorProto.FLOAT, [1, 10]))


def constant_output(proto: onnx.ModelProto) -> None:
    g = proto.graph
    g.node.append(
        helper.make_node(
            "Constant",
            [],
            ["class_bias"],
            value=numpy_helper.from_array(np.linspace(-1, 1, 10, dtype=np.float32)),
        )
    )
    g.output.append(helper.make_tensor_value_info("class_bias", TensorProto.FLOAT, [10]))


def argmax_output(proto: onnx.ModelProto) -> None:
    g = proto.graph
    g.node.append(helper.make_node("ArgMax", [g.output[0].name], ["label"], axis=1, keepdims=0))
    g.output.append(helper.make_tensor_value_info("label", TensorProto.INT64, [1]))


def bool_output(proto: onnx.ModelProto) -> None:
    g = proto.graph
    const(g, "zero", np.zeros((), np.float32))
    g.node.append(helper.make_node("Greater", [g.output[0].name, "zero"], ["positive"]))
    g.output.append(helper.make_tensor_value_info("positive", TensorProto.BOOL, [1, 10]))


def ranges_outputs(proto: onnx.ModelProto) -> None:
    g = proto.graph
    logits = g.output[0].name
    const(g, "big", np.array(1e4, np.float32))
    const(g, "small", np.array(1e-3, np.float32))
    g.node.extend(
        [
            helper.make_node("Mul", [logits, "big"], ["logits_big"]),
            helper.make_node("Sigmoid", [logits], ["probs"]),
            helper.make_node("Mul", ["probs", "small"], ["probs_small"]),
        ]
    )
    for name in ("logits_big", "probs_small"):
        g.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 10]))


# ---- graph hygiene


def stale_value_info(proto: onnx.ModelProto) -> None:
    g = proto.graph
    inferred = onnx.shape_inference.infer_shapes(proto).graph.value_info
    del g.value_info[:]
    for vi in inferred:
        stale = onnx.ValueInfoProto()
        stale.CopyFrom(vi)
        for d in stale.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value > 1:
                d.dim_value = d.dim_value * 2  # the shapes before an editing tool halved the input
        g.value_info.append(stale)


def duplicate_node_names(proto: onnx.ModelProto) -> None:
    for node in proto.graph.node:
        node.name = "node"


def empty_node_names(proto: onnx.ModelProto) -> None:
    for node in proto.graph.node:
        node.name = ""


def unsorted_nodes(proto: onnx.ModelProto) -> None:
    nodes = list(proto.graph.node)
    del proto.graph.node[:]
    proto.graph.node.extend(reversed(nodes))


def unused_100mb(proto: onnx.ModelProto) -> None:
    rng = np.random.default_rng(0)
    const(proto.graph, "optimizer_state", rng.normal(0, 1, 25 * 1024 * 1024).astype(np.float32))


def metadata(proto: onnx.ModelProto) -> None:
    proto.doc_string = "A model with documentation everywhere."
    proto.graph.doc_string = "graph doc"
    helper.set_model_props(proto, {"author": "someone", "license": "Apache-2.0", "labels": "a,b,c,ü"})
    proto.producer_name, proto.producer_version, proto.domain, proto.model_version = (
        "edit-tool",
        "9.9",
        "ai.x",
        7,
    )
    for node in proto.graph.node:
        node.doc_string = f"from layer {node.name}"
    proto.graph.input[0].doc_string = "RGB image"


def training_mode(folder: Path, base: Base) -> Built:
    """Exported with ``training=TrainingMode.PRESERVE`` from a model left in train mode (Dropout with
    training_mode true, BatchNormalization training_mode=1 with its running statistics outputs)."""
    calib, evaluation = cnn_data()
    model = trained_cnn().train()
    path = folder / "model.onnx"
    export_torch(model, (example_image(),), path, ["input"], ["logits"], training=torch.onnx.TrainingMode.PRESERVE,
                 do_constant_folding=False)  # fmt: skip
    return Built(path, calib, evaluation, expect="typed")


def training_attrs_inference(proto: onnx.ModelProto) -> None:
    """Dropout with its training_mode input false and a ratio; BatchNormalization nodes left unfolded."""
    g = proto.graph
    const(g, "ratio", np.array(0.2, np.float32))
    const(g, "training", np.array(False))
    logits = g.output[0].name
    rename_everywhere(proto, {logits: "pre_dropout"})
    g.node.append(helper.make_node("Dropout", ["pre_dropout", "ratio", "training"], [logits, "dropout_mask"]))


def checker_fails(proto: onnx.ModelProto) -> None:
    """A stale output shape ([1, 7] for [1, 10]): full_check's strict shape inference fails, onnxruntime warns."""
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    dims[1].dim_value = 7


FORMS: tuple[Form, ...] = (
    Form("ext_one_file", "external data", "save_as_external_data, one file", external(location="model.onnx.data")),
    Form("ext_many_files", "external data", "all_tensors_to_one_file=False", external(all_tensors_to_one_file=False)),
    Form("ext_subfolder", "external data", 'location="weights/w.bin"', external(location="weights/w.bin")),
    Form("ext_dynamo", "external data", "torch.onnx.export(dynamo=True, external_data=True)", dynamo_external),
    Form("ext_optimum", "external data", "optimum's model.onnx_data", external(location="model.onnx_data")),
    Form("ext_missing", "external data", "the data file missing", external_broken("missing")),
    Form("ext_truncated", "external data", "the data file cut in half", external_broken("truncated")),
    Form("fp16_half", "float16", "model.half() exported (fp16 I/O and weights)", half_export(torch.float16)),
    Form("fp16_occ", "float16", "convert_float_to_float16(keep_io_types=False)", cnn_form(occ_fp16)),
    Form("bf16", "float16", "model.to(bfloat16) exported", half_export(torch.bfloat16)),
    Form("uint8_nhwc", "inputs", "uint8 NHWC, Cast/Sub/Div/Transpose in the graph", cnn_form(uint8_nhwc, data=uint8_data)),
    Form("nhwc", "inputs", "float NHWC input + Transpose", cnn_form(nhwc, data=nhwc_data)),
    Form("two_images", "inputs", "two image inputs", cnn_form(two_images, data=two_images_data)),
    Form("scalar_input", "inputs", "a rank-0 threshold input",
         cnn_form(scalar_input, data=with_extra("threshold", lambda n, s: np.full((n,), 0.3 + 0.1 * s, np.float32)))),
    Form("bool_input", "inputs", "a bool input (Where)",
         cnn_form(bool_input, data=with_extra("keep", lambda n, s: np.random.default_rng(s).random((n, 1, 10)) > 0.3))),
    Form("int32_ids", "inputs", "BERT with int32 ids and mask", bert_form(bert_int32, convert=lambda d: {k: v.astype(np.int32) for k, v in d.items()})),
    Form("dim_params", "inputs", "BERT, dim_param batch_size / sequence_length on both inputs", bert_form(bert_dim_params)),
    Form("dim_params_shape", "inputs", "the same with --input-shape",
         bert_form(bert_dim_params, extra_args=["--input-shape", "input_ids=1,16", "--input-shape", "attention_mask=1,16"])),
    Form("unused_input", "inputs", "an input nothing reads",
         cnn_form(unused_input, data=with_extra("unused", lambda n, s: np.ones((n, 1, 4), np.float32)))),
    Form("odd_names", "inputs", "names with ':0', '/', spaces, non-ASCII", cnn_form(odd_names, data=odd_names_data)),
    Form("init_as_input", "inputs", "IR 3 / opset 8, initializers listed as inputs", initializers_as_inputs),
    Form("no_shape", "inputs", "an input with no shape", cnn_form(no_shape)),
    Form("no_shape_given", "inputs", "the same with --input-shape", cnn_form(no_shape, extra_args=["--input-shape", "input=1,3,32,32"], reference=True)),
    Form("output_is_input", "outputs", "a graph output that is a graph input", cnn_form(output_is_input)),
    Form("same_tensor_twice", "outputs", "one tensor as two outputs (Identity)", cnn_form(same_tensor_twice)),
    Form("constant_output", "outputs", "an output that is a constant", cnn_form(constant_output)),
    Form("argmax_output", "outputs", "an int64 ArgMax output", cnn_form(argmax_output)),
    Form("bool_output", "outputs", "a bool output", cnn_form(bool_output)),
    Form("ranges_outputs", "outputs", "outputs of ranges 1e4 and 1e-3", cnn_form(ranges_outputs)),
    Form("stale_value_info", "hygiene", "value_info shapes doubled", cnn_form(stale_value_info, reference=True)),
    Form("dup_node_names", "hygiene", "every node named 'node'", cnn_form(duplicate_node_names, reference=True)),
    Form("empty_node_names", "hygiene", "every node name empty", cnn_form(empty_node_names)),
    Form("unsorted_nodes", "hygiene", "nodes in reverse order", cnn_form(unsorted_nodes, reference=True)),
    Form("unused_100mb", "hygiene", "an unused 100 MB initializer", cnn_form(unused_100mb)),
    Form("metadata", "hygiene", "metadata_props, doc strings, producer", cnn_form(metadata)),
    Form("training_export", "hygiene", "exported in train mode (TrainingMode.PRESERVE)", training_mode),
    Form("dropout_attrs", "hygiene", "Dropout with ratio and training_mode=false inputs", cnn_form(training_attrs_inference)),
    Form("checker_fails", "hygiene", "a stale output shape: onnx.checker full_check fails", cnn_form(checker_fails, reference=True)),
)  # fmt: skip


# ------------------------------------------------------------------------------------------------------ run


def build_base(out: Path) -> Base:
    model = trained_cnn()
    path = out / "base" / "cnn.onnx"
    export_torch(model, (example_image(),), path, ["input"], ["logits"])
    bert_path = out / "base" / "bert.onnx"
    entry = zoo_transformers.export_bert(bert_path, 17)
    calib = zoo_data.make_arrays(entry, CALIB, 31)
    evaluation = zoo_data.make_arrays(entry, EVAL, 32)
    add_axis = lambda d: {k: v[:, None] if v.ndim == 2 else v for k, v in d.items()}  # noqa: E731
    return Base(model, onnx.load(str(path)), onnx.load(str(bert_path)), add_axis(calib), add_axis(evaluation))


def artifacts(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "cli.log")


def loads(path: Path) -> str | None:
    """None if the artifact at ``path`` opens in its runtime, else why not."""
    try:
        if path.suffix == ".onnx":
            import onnxruntime as ort

            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        elif path.suffix == ".tflite":
            from ai_edge_litert.interpreter import Interpreter

            Interpreter(model_path=str(path)).allocate_tensors()
        elif path.suffix == ".xml":
            import openvino as ov

            ov.Core().compile_model(str(path), "CPU")
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return f"{path.name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ''}"
    return None


def portable(results: list[zoo_cases.CaseResult], source: Path, scratch: Path) -> dict[str, str]:
    """Each passing case's artifacts copied elsewhere, with the source folder moved away: what fails to load."""
    hidden = source.with_name(source.name + ".hidden")
    source.rename(hidden)
    problems = {}
    try:
        for r in results:
            if r.outcome != "pass":
                continue
            dest = scratch / r.case.replace(" ", "-")
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(r.out_dir, dest)
            bad = [why for p in artifacts(dest) if (why := loads(p))]
            if bad:
                problems[r.case] = bad[0]
    finally:
        hidden.rename(source)
        shutil.rmtree(scratch, ignore_errors=True)
    return problems


def run_form(form: Form, base: Base, out: Path, cases: list[str], timeout: float) -> dict[str, Any]:
    folder = out / "models" / form.name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    built = form.build(folder, base)
    data = out / "data"
    data.mkdir(exist_ok=True)
    calib, evaluation = data / f"{form.name}.calib.npz", data / f"{form.name}.eval.npz"
    np.savez(calib, **built.calib)
    np.savez(evaluation, **built.eval)
    cwd = out / "cwd"
    cwd.mkdir(exist_ok=True)
    here = os.getcwd()
    os.chdir(cwd)  # the CLI runs from a folder that is not the model's, the model path relative to it
    try:
        model = zoo_cases.Model(
            form.name,
            Path(os.path.relpath(built.path, cwd)),
            built.kind,
            [],
            calib,
            evaluation,
            built.extra_args,
        )
        work = out / "work"
        results = [zoo_cases.run_case(model, case, work, timeout) for case in cases]
    finally:
        os.chdir(here)
    left = {r.case: [p.name for p in artifacts(Path(r.out_dir))] for r in results if r.outcome != "pass"}
    sizes = {
        r.case: sum(p.stat().st_size for p in artifacts(Path(r.out_dir)))
        for r in results
        if r.outcome == "pass"
    }
    moved = portable(results, folder, out / "moved") if any(r.outcome == "pass" for r in results) else {}
    model.path = built.reference or built.path
    zoo_cases._model_figures(model, results, work, timeout, table_figures=False)
    row = {"form": form.name, "group": form.group, "what": form.what, "expect": built.expect, "cases": {}}
    for r in results:
        problems = zoo_cases.figure_problems(r.case, r.figures) if r.outcome == "pass" else []
        verdict = "figures" if problems else r.outcome
        if r.case in moved:
            verdict, problems = "not self-contained", [moved[r.case]]
        if r.outcome != "pass" and left.get(r.case):
            problems.append(f"left behind: {', '.join(left[r.case][:4])}")
            verdict = verdict if r.outcome == "crash" else "typed, half-written"
        row["cases"][r.case] = {
            "verdict": verdict,
            "returncode": r.returncode,
            "seconds": r.seconds,
            "first_line": r.error,
            "problems": problems,
            "bytes": sizes.get(r.case),
        }
    return row


def cell(case: dict[str, Any]) -> str:
    v = case["verdict"]
    text = {"pass": "pass", "typed": f"typed (exit {case['returncode']})"}.get(v, v)
    if case["bytes"] and case["bytes"] > 10 << 20:
        text += f", {case['bytes'] / 2**20:.0f} MB"
    return text


def table(rows: list[dict[str, Any]], cases: list[str]) -> str:
    lines = ["| form | what | " + " | ".join(cases) + " |", "|---|---|" + "---|" * len(cases)]
    for row in rows:
        lines.append(
            f"| {row['form']} | {row['what']} | " + " | ".join(cell(row["cases"][c]) for c in cases) + " |"
        )
    notes = [
        f"- {row['form']} / {case}: {c['first_line'] or ''} {'; '.join(c['problems'])}".rstrip()
        for row in rows
        for case, c in row["cases"].items()
        if c["verdict"] != "pass"
    ]
    return "\n".join(lines + [""] + notes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/.zoo/probe13f"))
    parser.add_argument("--only", help="comma-separated form names")
    parser.add_argument("--cases", help="comma-separated cases (default: the six)")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cases = [c.strip() for c in args.cases.split(",")] if args.cases else list(zoo_cases.CASES)
    forms = [f for f in FORMS if not args.only or f.name in args.only.split(",")]
    base = build_base(out)
    rows = []
    for form in forms:
        try:
            rows.append(run_form(form, base, out, cases, args.timeout))
        except Exception as exc:  # noqa: BLE001 - a form the builder cannot write is a row, not the end of the run
            rows.append({"form": form.name, "group": form.group, "what": form.what, "build_error": repr(exc)[:300],
                         "cases": {c: {"verdict": "not built", "returncode": None, "first_line": repr(exc)[:200],
                                       "problems": [], "bytes": None, "seconds": 0} for c in cases}})  # fmt: skip
        print(table(rows[-1:], cases).splitlines()[2], flush=True)
    print(table(rows, cases))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
