"""The classical-ML ops of the ONNX-ML domain (``ai.onnx.ml``) that scikit-learn converters write.

skl2onnx and onnxmltools write a scikit-learn pipeline's preprocessing and linear models as ``ai.onnx.ml`` ops:
``Scaler`` (StandardScaler, MinMaxScaler, ... before an MLPClassifier or a PCA), ``LinearClassifier`` /
``LinearRegressor`` (LogisticRegression, LinearSVC, Ridge, ...) and ``ArrayFeatureExtractor`` (the class label
picked by the ArgMax of the probabilities). Those are exact in standard ONNX and are written out as it at load
(one function per op, keyed by op type in ``_LOWERINGS``), with onnxruntime's semantics (the runtime that runs the
file). The rest of the domain has no form the targets run, and is refused in one line with the reason
(``_REFUSALS``): tree ensembles (data-dependent branching per sample), ``ZipMap`` (a sequence of maps, not a
tensor), string tensors.
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.contrib import NodeWriter
from edgekit.core.errors import ModelError
from onnx import helper

ML_DOMAIN = "ai.onnx.ml"

_TREES = (
    "decision-tree ensembles have no TFLite or OpenVINO op (each sample takes its own branches); convert the "
    "model to tensor ops (hummingbird-ml's GEMM strategy writes standard ONNX) or deploy a neural model"
)
#: Why an op of the domain stays refused: one sentence, after the op's name.
_REFUSALS: dict[str, str] = {
    "TreeEnsembleClassifier": _TREES,
    "TreeEnsembleRegressor": _TREES,
    "TreeEnsemble": _TREES,
    "ZipMap": (
        "it outputs a sequence of maps (class -> probability), not a tensor, which no target has; convert the "
        "classifier without it (skl2onnx: options={id(model): {'zipmap': False}}) and read the probabilities tensor"
    ),
    "SVMClassifier": "kernel SVMs (support vectors, kernels, votes) are not written out as tensor ops here",
    "SVMRegressor": "kernel SVMs (support vectors, kernels) are not written out as tensor ops here",
    "LabelEncoder": "it maps strings or arbitrary keys, which the targets' tensors cannot hold",
    "CategoryMapper": "it maps strings to integers, and the targets' tensors cannot hold strings",
    "DictVectorizer": "its input is a map, not a tensor",
    "CastMap": "its input is a map, not a tensor",
    "OneHotEncoder": "it encodes categories by value (strings or keys): encode them before the model",
}
_DEFAULT_REFUSAL = "the ONNX-ML domain's ops have no TFLite or OpenVINO form, and edgekit writes out only Scaler, " \
    "LinearClassifier, LinearRegressor and ArrayFeatureExtractor"  # fmt: skip


class _Writer(NodeWriter):
    """Emits the default-domain nodes that stand for one ``ai.onnx.ml`` node, named under its name."""

    def __init__(self, graph: onnx.GraphProto, node: onnx.NodeProto, index: int):
        super().__init__(graph, node, index, "onnx_ml")

    def refuse(self, why: str) -> ModelError:
        return ModelError(f"{ML_DOMAIN}.{self.node.op_type} node {self.node.name!r}: {why}")


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _float_input(w: _Writer, name: str) -> str:
    """The ops take float, double and integer inputs and compute in float: a Cast (to float32) the loader's own
    passes drop where the input is float32 already."""
    return w.op("Cast", [name], to=onnx.TensorProto.FLOAT)


def _scaler(w: _Writer, node: onnx.NodeProto) -> None:
    """Y = (X - offset) * scale, both broadcast over the last axis (one value, or one per feature)."""
    a = _attrs(node)
    x = _float_input(w, node.input[0])
    offset = np.asarray(a.get("offset", [0.0]), np.float32)
    scale = np.asarray(a.get("scale", [1.0]), np.float32)
    w.op("Mul", [w.op("Sub", [x, w.const("offset", offset)]), w.const("scale", scale)], node.output[0])


def _array_feature_extractor(w: _Writer, node: onnx.NodeProto) -> None:
    """X[..., indices] (the indices flattened); onnxruntime gives a 1-D X's result the shape [1, n]."""
    rank = _rank(w.graph, node.input[0])
    if rank is None:
        raise w.refuse("the rank of its data input is not known")
    flat = w.op("Reshape", [node.input[1], w.const("flat", np.array([-1], np.int64))])
    if rank == 1:
        picked = w.op("Gather", [node.input[0], flat], axis=0)
        w.op("Reshape", [picked, w.const("row", np.array([1, -1], np.int64))], node.output[0])
    else:
        w.op("Gather", [node.input[0], flat], node.output[0], axis=rank - 1)


def _post_transform(w: _Writer, scores: str, transform: str, out: str) -> str:
    if transform == "NONE":
        return w.op("Identity", [scores], out)
    if transform == "LOGISTIC":
        return w.op("Sigmoid", [scores], out)
    if transform == "SOFTMAX":
        return w.op("Softmax", [scores], out, axis=-1)
    raise w.refuse(f"post_transform {transform} is not written out (NONE, LOGISTIC and SOFTMAX are)")


def _linear(w: _Writer, node: onnx.NodeProto, targets: int) -> str:
    """X W^T + b for ``targets`` outputs: the raw scores [N, targets]."""
    a = _attrs(node)
    coef = np.asarray(a["coefficients"], np.float32)
    if targets < 1 or coef.size % targets:
        raise w.refuse(f"{coef.size} coefficients are not a whole number of rows for {targets} outputs")
    weight = coef.reshape(targets, coef.size // targets).T
    scores = w.op("MatMul", [_float_input(w, node.input[0]), w.const("weight", weight)])
    bias = np.asarray(a.get("intercepts", [0.0] * targets), np.float32)
    return w.op("Add", [scores, w.const("bias", bias)]) if bias.any() else scores


def _linear_classifier(w: _Writer, node: onnx.NodeProto) -> None:
    """Scores of every class (onnxruntime: as many as intercepts), the post-transform, and the label of the
    highest raw score (the transforms keep the order)."""
    a = _attrs(node)
    labels = a.get("classlabels_ints")
    if labels is None:
        raise w.refuse(
            "its class labels are strings, which the targets' tensors cannot hold; give it integer classes"
        )
    targets = len(a.get("intercepts", []))
    if targets < 2 or targets != len(labels):
        raise w.refuse(
            f"{targets} score(s) for {len(labels)} classes: the single-score binary form is not written out"
        )
    transform = a.get("post_transform", b"NONE")
    transform = transform.decode() if isinstance(transform, bytes) else transform
    scores = _linear(w, node, targets)
    if len(node.output) > 1 and node.output[1]:
        _post_transform(w, scores, transform, node.output[1])
    if node.output[0]:
        best = w.op("ArgMax", [scores], axis=1, keepdims=0)
        w.op("Gather", [w.const("labels", np.asarray(labels, np.int64)), best], node.output[0], axis=0)


def _linear_regressor(w: _Writer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    transform = a.get("post_transform", b"NONE")
    transform = transform.decode() if isinstance(transform, bytes) else transform
    _post_transform(w, _linear(w, node, int(a.get("targets", 1))), transform, node.output[0])


_LOWERINGS = {
    "Scaler": _scaler,
    "ArrayFeatureExtractor": _array_feature_extractor,
    "LinearClassifier": _linear_classifier,
    "LinearRegressor": _linear_regressor,
}


def _rank(graph: onnx.GraphProto, name: str) -> int | None:
    for t in graph.initializer:
        if t.name == name:
            return len(t.dims)
    for v in [*graph.input, *graph.value_info, *graph.output]:
        if v.name == name and v.type.tensor_type.HasField("shape"):
            return len(v.type.tensor_type.shape.dim)
    for n in graph.node:
        if n.op_type == "Constant" and name in n.output:
            return len(n.attribute[0].t.dims) if n.attribute and n.attribute[0].name == "value" else None
    return None


def lower(proto: onnx.ModelProto) -> list[str]:
    """Write the ``ai.onnx.ml`` ops of ``proto`` out as standard ONNX, in place; refuse (``ModelError``, one
    line) one that has no such form. Returns the note to show (empty when the model has none)."""
    graph = proto.graph
    if not any(n.domain == ML_DOMAIN for n in graph.node):
        return []
    for node in graph.node:  # refuse first, before anything is rewritten
        if node.domain == ML_DOMAIN and node.op_type not in _LOWERINGS:
            why = _REFUSALS.get(node.op_type, _DEFAULT_REFUSAL)
            raise ModelError(f"{ML_DOMAIN}.{node.op_type} node {node.name!r}: {why}")
    nodes: list[onnx.NodeProto] = []
    done: set[str] = set()
    for index, node in enumerate(graph.node):
        if node.domain != ML_DOMAIN:
            nodes.append(node)
            continue
        w = _Writer(graph, node, index)
        _LOWERINGS[node.op_type](w, node)
        nodes.extend(w.nodes)
        done.add(node.op_type)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in proto.opset_import if i.domain != ML_DOMAIN]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)
    return [f"{ML_DOMAIN} op(s) written out as standard ONNX: {', '.join(sorted(done))}"]
