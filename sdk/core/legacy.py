"""Old converters' idioms that onnx's version converter cannot bring up, written out as the ops they compute.

The classic ONNX Model Zoo files (WinMLTools, MXNet, Caffe2, CNTK; opsets 1-9) use ops and attributes that later
opsets dropped. :func:`rewrite` runs before ``onnx.version_converter`` on the loaded proto, in place, one function
per idiom (each returns the note to show, or nothing when the model does not have it):

- ``ImageScaler`` (experimental, removed at opset 10; WinMLTools' Tiny YOLOv2): the converter has no schema for
  it and aborts. It is ``x * scale + bias[c]``: a Mul and an Add with constants.
- ``BatchNormalization`` with ``spatial=0`` (opsets 7-8; MXNet's converter wrote it on every BatchNorm, e.g. the
  zoo's ArcFace): the converter refuses ``spatial=0``. With one-dimensional [C] parameters the node is per channel
  (MXNet's BatchNorm is; the attribute only describes the parameters' shape, and onnxruntime rejects the file as
  is: onnx/models#156), so the attribute goes; with per-activation [C, D1, ...] parameters (constants) it is the
  affine map ``x * a + b`` with ``a = scale / sqrt(var + eps)``, ``b = B - mean * a``, broadcast as [C, D1, ...].
- ``broadcast=1`` with ``axis`` on the arithmetic ops below opset 7 (Caffe2's opset 1-6 files): the converter
  unsqueezes B at the wrong axes (an [C] bias at ``axis=1`` of [N, C, H, W] becomes [C, 1, 1, 1] and the output
  [C, C, H, W]). B is given the rank of A (ones before ``axis`` and after its own dims), which is exactly the
  legacy broadcast in today's numpy rules.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnx.version_converter
from edgekit.core.errors import ModelError
from onnx import helper, numpy_helper

log = logging.getLogger("edgekit")

_DEFAULT = ("", "ai.onnx")
#: The ops whose opset 1-6 versions take ``broadcast`` / ``axis`` (Add-6, Sub-6, Mul-6, Div-6, Pow-1, And-1, ...).
LEGACY_BROADCAST_OPS = frozenset(
    {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"}
)


def _opset(proto: onnx.ModelProto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in _DEFAULT), 0)


def _attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _shapes(proto: onnx.ModelProto) -> dict[str, list[int | None]]:
    """Every value's shape that shape inference (or an initializer) knows; unknown dims are None."""
    shapes: dict[str, list[int | None]] = {t.name: list(t.dims) for t in proto.graph.initializer}
    try:
        g = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # a graph shape inference cannot read: the initializers' shapes only
        return shapes
    for v in [*g.input, *g.value_info, *g.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            dims = v.type.tensor_type.shape.dim
            shapes.setdefault(v.name, [d.dim_value if d.HasField("dim_value") else None for d in dims])
    return shapes


def _constants(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    out = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for n in proto.graph.node:
        if (
            n.op_type == "Constant"
            and n.domain in _DEFAULT
            and n.attribute
            and n.attribute[0].name == "value"
        ):
            out[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return out


def _add_constant(proto: onnx.ModelProto, name: str, array: np.ndarray) -> str:
    """A new initializer; below IR version 4 also a graph input, as the version converter requires."""
    tensor = numpy_helper.from_array(np.asarray(array, np.float32), name)
    proto.graph.initializer.append(tensor)
    if proto.ir_version < 4:
        proto.graph.input.append(helper.make_tensor_value_info(name, tensor.data_type, list(tensor.dims)))
    return name


def _splice(proto: onnx.ModelProto, replaced: dict[int, list[onnx.NodeProto]]) -> None:
    """Replace the nodes at the given positions by their lists of nodes, keeping the graph order."""
    nodes = [m for i, n in enumerate(proto.graph.node) for m in replaced.get(i, [n])]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)


def image_scaler(proto: onnx.ModelProto) -> list[str]:
    """ImageScaler(x; scale, bias) as Mul(x, scale) and Add(bias as [1, C, 1, 1])."""
    replaced: dict[int, list[onnx.NodeProto]] = {}
    for i, node in enumerate(proto.graph.node):
        if node.op_type != "ImageScaler" or node.domain not in _DEFAULT:
            continue
        attrs = _attrs(node)
        scale = float(attrs.get("scale", 1.0))
        bias = np.asarray(attrs.get("bias", []), np.float32)
        x, y, p = node.input[0], node.output[0], node.name or node.output[0]
        scaled = f"{p}/scaled" if bias.size else y
        factor = _add_constant(proto, f"{p}/scale", np.array(scale))
        replaced[i] = [helper.make_node("Mul", [x, factor], [scaled], name=f"{p}/mul")]
        if bias.size:
            offset = _add_constant(proto, f"{p}/bias", bias.reshape(1, -1, 1, 1))
            replaced[i].append(helper.make_node("Add", [scaled, offset], [y], name=f"{p}/add"))
    _splice(proto, replaced)
    return (
        [f"{len(replaced)} ImageScaler node(s) (removed at opset 10) written as Mul + Add"]
        if replaced
        else []
    )


def batchnorm_spatial(proto: onnx.ModelProto) -> list[str]:
    """BatchNormalization with ``spatial=0`` as the per-channel node its [C] parameters make it, or as the affine
    map of its per-activation constant parameters."""
    if not 7 <= _opset(proto) < 9:  # spatial exists at opsets 7-8 (opset 6's is_test models are spatial=1)
        return []
    nodes = [
        (i, n)
        for i, n in enumerate(proto.graph.node)
        if n.op_type == "BatchNormalization" and n.domain in _DEFAULT and _attrs(n).get("spatial", 1) == 0
    ]
    if not nodes:
        return []
    consts = _constants(proto)
    replaced: dict[int, list[onnx.NodeProto]] = {}
    channel = 0
    for i, node in nodes:
        params = [consts.get(name) for name in node.input[1:5]]
        if all(p is not None and p.ndim == 1 for p in params):
            kept = [a for a in node.attribute if a.name != "spatial"]
            del node.attribute[:]
            node.attribute.extend(kept)
            channel += 1
            continue
        if any(p is None for p in params) or len([o for o in node.output if o]) > 1:
            raise ModelError(
                f"BatchNormalization {node.name or node.output[0]!r}: spatial=0 (per-activation statistics) is "
                "supported with constant scale, bias, mean and variance in inference mode only"
            )
        scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
        eps = float(_attrs(node).get("epsilon", 1e-5))
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
        p = node.name or node.output[0]
        a_name, b_name = _add_constant(proto, f"{p}/a", a), _add_constant(proto, f"{p}/b", b)
        replaced[i] = [
            helper.make_node("Mul", [node.input[0], a_name], [f"{p}/scaled"], name=f"{p}/mul"),
            helper.make_node("Add", [f"{p}/scaled", b_name], [node.output[0]], name=f"{p}/add"),
        ]
    _splice(proto, replaced)
    notes = []
    if channel:
        notes.append(
            f"{channel} BatchNormalization node(s) with spatial=0 and per-channel [C] parameters (MXNet's "
            "converter) normalise per channel"
        )
    if replaced:
        notes.append(
            f"{len(replaced)} per-activation BatchNormalization node(s) (spatial=0) written as Mul + Add"
        )
    return notes


def legacy_broadcast(proto: onnx.ModelProto) -> list[str]:
    """Below opset 7: ``broadcast=1`` (with ``axis``) on an arithmetic op becomes today's broadcast, B reshaped to
    A's rank by an Unsqueeze-1 (``axes``) after its own dims."""
    if _opset(proto) >= 7:
        return []
    if _opset(proto) < 6 and any(
        n.op_type in LEGACY_BROADCAST_OPS and _attrs(n).get("broadcast") for n in proto.graph.node
    ):
        # Opset 1-5 ops have no shape inference; the converter's steps up to opset 6 keep broadcast / axis as
        # they are (they drop consumed_inputs), and opset 6's inference gives the ranks.
        try:
            proto.CopyFrom(onnx.version_converter.convert_version(proto, 6))
        except Exception as exc:  # the converter raises bare RuntimeErrors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"cannot upgrade the model from opset {_opset(proto)} to 6: {first}") from None
    shapes = None
    replaced: dict[int, list[onnx.NodeProto]] = {}
    done = 0
    for i, node in enumerate(proto.graph.node):
        attrs = _attrs(node)
        if (
            node.op_type not in LEGACY_BROADCAST_OPS
            or node.domain not in _DEFAULT
            or not attrs.get("broadcast")
        ):
            continue
        if shapes is None:
            shapes = _shapes(proto)
        a_shape, b_shape = shapes.get(node.input[0]), shapes.get(node.input[1])
        if a_shape is None or b_shape is None:
            raise ModelError(
                f"{node.op_type} {node.name or node.output[0]!r}: opset {_opset(proto)} broadcast=1 needs the "
                "ranks of both inputs, which shape inference does not give"
            )
        axis = int(attrs.get("axis", len(a_shape) - len(b_shape)))
        axis = axis + len(a_shape) if axis < 0 else axis
        trailing = len(a_shape) - axis - len(b_shape)
        if axis < 0 or trailing < 0:
            raise ModelError(
                f"{node.op_type} {node.name or node.output[0]!r}: broadcast axis {attrs.get('axis')} does not fit "
                f"input shapes {a_shape} and {b_shape}"
            )
        kept = [a for a in node.attribute if a.name not in ("broadcast", "axis")]
        del node.attribute[:]
        node.attribute.extend(kept)
        done += 1
        if trailing == 0:
            continue  # B's dims already align with A's last ones: today's rule
        expanded = f"{node.name or node.output[0]}/broadcast_b"
        axes = list(range(len(b_shape), len(b_shape) + trailing))
        replaced[i] = [helper.make_node("Unsqueeze", [node.input[1]], [expanded], axes=axes), node]
        node.input[1] = expanded
    _splice(proto, replaced)
    return [f"{done} opset-{_opset(proto)} broadcast=1 op(s) given today's broadcast"] if done else []


def rewrite(proto: onnx.ModelProto) -> list[str]:
    """Every legacy idiom above, in place; the notes to show."""
    notes = image_scaler(proto) + batchnorm_spatial(proto) + legacy_broadcast(proto)
    for note in notes:
        log.info(note)
    return notes
