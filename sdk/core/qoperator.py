"""QOperator models (onnxruntime's QLinearConv, QLinearMatMul, com.microsoft QLinearAdd, ...) as QDQ models.

onnxruntime's quantizer can write a model in the *QOperator* format: every quantized op is one integer node
(``QLinearConv``, ``QLinearMatMul``, ``com.microsoft.QLinearAdd`` ...) that reads and writes uint8/int8
tensors and carries its own scales and zero points, and data-movement ops (Reshape, MaxPool, ...) run
directly on the integer tensors. :class:`QOperatorToQDQPass` rewrites each such node into
``DequantizeLinear -> float op -> QuantizeLinear`` with the node's own scales and zero points, so that what
follows sees a QDQ model like the one ``edgekit quantize`` writes, with the model's numbers kept:

- activations keep their dtype (uint8 or int8), scale and zero point; every quantized tensor is read through
  one DequantizeLinear;
- weights stay integer initializers read through a (per-axis, when given so) DequantizeLinear. Weights with a
  zero point are rewritten as symmetric int8 (zero point 0, same scale) when the values fit, which is exact;
  otherwise they are kept as given;
- int32 biases stay int32 with scale ``x_scale * w_scale`` (what the integer kernels use);
- an op run directly on integer data (Reshape, MaxPool, Pad, ...) becomes DequantizeLinear -> op ->
  QuantizeLinear with its input's parameters (exact: these ops only move or select values).

The rewrite is exact up to where a value rounds: onnxruntime's integer kernels and the float op between
DequantizeLinear and QuantizeLinear can round a tie differently, so results agree within one quantization
step. Dynamic quantization (``DynamicQuantizeLinear``, ``MatMulInteger``, ``ConvInteger``) computes activation
scales at run time: :mod:`edgekit.core.dynamic_quant` rewrites it as float ops on the dequantized weights first.

One rewrite function per op, keyed by (domain, op type) in ``_REWRITES``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.dynamic_quant import DYNAMIC_OPS
from edgekit.core.errors import ModelError, UnsupportedOpError
from edgekit.core.irutil import NameScope, add_initializer, attr, const_array

log = logging.getLogger("edgekit")

MS_DOMAIN = "com.microsoft"
#: ``ir.Model.meta`` key set by model loading on a model rewritten from QOperator: how many ops were rewritten.
META_KEY = "edgekit.qoperator_rewritten"
#: The name :class:`UnsupportedOpError` gives as the "target" of a QOperator op it cannot rewrite.
CONVERSION = "QOperator to QDQ conversion"

#: Ops that onnxruntime runs directly on quantized tensors: their output has their (first) input's scale and
#: zero point. Each becomes DequantizeLinear -> op -> QuantizeLinear with those parameters.
SAME_PARAMS_OPS = frozenset(
    {
        "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "MaxPool", "Split", "Slice", "Gather",
        "Pad", "Resize", "Identity", "DepthToSpace", "SpaceToDepth", "Expand", "Tile",
    }
)  # fmt: skip
#: Ops reading a quantized tensor whose result does not depend on how it is quantized (a shape, an index of
#: the largest value): they read its dequantized form.
READS_FLOAT_OPS = frozenset({"Shape", "Size", "ArgMax", "ArgMin"})
#: onnxruntime's other quantized contrib ops (no rewrite: refused by name).
_MS_QUANTIZED = frozenset(
    {"QAttention", "QEmbedLayerNormalization", "QOrderedMatMul", "QOrderedLayerNormalization"}
)
#: Dynamic quantization (``edgekit.core.dynamic_quant`` rewrites it before this module runs): a file with it is
#: still one whose own answers come from onnxruntime (:func:`is_qoperator_file`).
_DYNAMIC = DYNAMIC_OPS


@dataclass(frozen=True)
class QParams:
    """A quantized tensor's scale and zero point (0-d per tensor, 1-d along ``axis``)."""

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None = None

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1

    def key(self) -> tuple:
        return (self.scale.tobytes(), self.zero_point.tobytes(), str(self.zero_point.dtype), self.axis)


RewriteFn = Callable[["Rewriter", ir.Node], None]
_REWRITES: dict[tuple[str, str], RewriteFn] = {}


def rewrite(domain: str, *op_types: str) -> Callable[[RewriteFn], RewriteFn]:
    def register(fn: RewriteFn) -> RewriteFn:
        for op_type in op_types:
            if (domain, op_type) in _REWRITES:
                raise ValueError(f"a QOperator rewrite for {domain}::{op_type} is already registered")
            _REWRITES[(domain, op_type)] = fn
        return fn

    return register


def supported_ops() -> list[str]:
    """The QOperator ops the rewrite knows, as ``[domain::]op_type``."""
    return sorted(f"{d}::{o}" if d else o for d, o in _REWRITES)


def _domain(node: ir.Node | onnx.NodeProto) -> str:
    return "" if node.domain in ("", "ai.onnx") else node.domain


def is_qoperator(node: ir.Node | onnx.NodeProto) -> bool:
    """True for a node this module rewrites or refuses (QLinear*, QGemm, dynamic quantization...)."""
    domain = _domain(node)
    if node.op_type in _DYNAMIC:
        return True
    if domain == "":
        return (domain, node.op_type) in _REWRITES
    return domain == MS_DOMAIN and (
        (domain, node.op_type) in _REWRITES
        or node.op_type.startswith("QLinear")
        or node.op_type in _MS_QUANTIZED
    )


def has_qoperator_nodes(model: ir.Model) -> bool:
    return any(is_qoperator(node) for node in model.graph)


class Rewriter:
    """What a rewrite function needs: the graph, fresh names, the parameters of every quantized tensor."""

    def __init__(self, model: ir.Model):
        self.graph = model.graph
        self.names = NameScope(model.graph)
        #: Parameters of each quantized (integer activation) tensor, from the node that wrote it.
        self.params: dict[ir.Value, QParams] = {}
        #: (tensor, parameters) -> its DequantizeLinear output: every quantized tensor is dequantized once.
        self.dequantized: dict[tuple, ir.Value] = {}
        self._param_values: dict[tuple, tuple[ir.Value, ir.Value]] = {}
        self.rewritten = 0

    # -- reading a node's parameters ----------------------------------------------------------------------
    def const(self, node: ir.Node, index: int, what: str) -> np.ndarray | None:
        """Input ``index`` of ``node`` as an array (None when absent); it must be a constant."""
        value = node.inputs[index] if index < len(node.inputs) else None
        if value is None:
            return None
        array = const_array(value)
        if array is None:
            raise ModelError(
                f"{node.op_type} node {node.name!r}: its {what} ({value.name!r}) is computed at run time; "
                "QOperator models convert to QDQ only with constant scales and zero points"
            )
        return array

    def qparams(
        self, node: ir.Node, scale: int, zero_point: int | None, data: ir.Value | None, what: str
    ) -> QParams:
        """Per-tensor parameters read from inputs ``scale``/``zero_point`` of ``node``."""
        s = self.const(node, scale, f"{what} scale")
        z = self.const(node, zero_point, f"{what} zero point") if zero_point is not None else None
        assert s is not None
        if s.size != 1 or (z is not None and z.size != 1):
            raise ModelError(
                f"{node.op_type} node {node.name!r}: {what} has {s.size} scales; activations must be quantized "
                "per tensor (one scale and zero point) for the targets"
            )
        if z is None:
            dtype = data.dtype.numpy() if data is not None and data.dtype is not None else np.dtype(np.uint8)
            z = np.zeros((), dtype)
        return QParams(s.reshape(()).astype(np.float32), z.reshape(()))

    def weight_qparams(self, node: ir.Node, scale: int, zero_point: int, axis: int, what: str) -> QParams:
        """Per-tensor or per-``axis`` parameters of a constant weight."""
        s = self.const(node, scale, f"{what} scale")
        z = self.const(node, zero_point, f"{what} zero point")
        assert s is not None
        if s.size == 1:
            z = np.zeros((), np.int8) if z is None else z.reshape(())
            return QParams(s.reshape(()).astype(np.float32), z.reshape(()))
        if z is None:
            z = np.zeros(s.size, np.int8)
        return QParams(
            s.reshape(-1).astype(np.float32), np.broadcast_to(z.reshape(-1), (s.size,)).copy(), axis
        )

    # -- building the QDQ graph ----------------------------------------------------------------------------
    def params_values(self, base: str, p: QParams) -> tuple[ir.Value, ir.Value]:
        key = (base, *p.key())
        if key not in self._param_values:
            scale = add_initializer(self.graph, self.names, f"{base}_scale", p.scale)
            zero_point = add_initializer(self.graph, self.names, f"{base}_zero_point", p.zero_point)
            self._param_values[key] = (scale, zero_point)
        return self._param_values[key]

    def dequantize(self, before: ir.Node, value: ir.Value, p: QParams) -> ir.Value:
        """``value`` (integer) dequantized with ``p``; one DequantizeLinear per tensor and parameters."""
        key = (id(value), *p.key())
        cached = self.dequantized.get(key)
        if cached is not None:
            return cached
        base = _float_name(value.name or "q")
        scale, zero_point = self.params_values(base, p)
        attributes = {"axis": p.axis} if p.axis is not None else {}
        dq = ir.node(
            "DequantizeLinear",
            [value, scale, zero_point],
            attributes,
            name=self.names.fresh(f"{base}_DequantizeLinear"),
        )
        self.graph.insert_before(before, dq)
        out = dq.outputs[0]
        out.name = self.names.fresh(f"{base}_dequantized")
        out.dtype = ir.DataType.FLOAT
        out.shape = value.shape
        self.dequantized[key] = out
        return out

    def input(self, node: ir.Node, index: int, scale: int, zero_point: int | None, what: str) -> ir.Value:
        """Quantized data input ``index`` of ``node`` (activation or constant), dequantized with the node's
        own parameters at ``scale``/``zero_point``."""
        value = node.inputs[index]
        if value is None:
            raise ModelError(f"{node.op_type} node {node.name!r}: its {what} (input {index}) is missing")
        return self.dequantize(node, value, self.qparams(node, scale, zero_point, value, what))

    def weight(self, node: ir.Node, index: int, scale: int, zero_point: int, axis: int) -> ir.Value:
        """A constant integer weight read through DequantizeLinear (per ``axis`` when it has several scales);
        an activation (computed) second operand is dequantized per tensor."""
        value = node.inputs[index]
        w = const_array(value)
        if w is None:
            return self.input(node, index, scale, zero_point, "second operand")
        p = self.weight_qparams(node, scale, zero_point, axis % w.ndim, "weight")
        shape = [1] * w.ndim
        if not p.per_tensor:
            shape[p.axis] = -1
        centred = w.astype(np.int64) - p.zero_point.astype(np.int64).reshape(shape)
        symmetric_int8 = w.dtype == np.int8 and not p.zero_point.any()
        if not symmetric_int8 and np.abs(centred).max(initial=0) <= 127:
            # Exact: the same real values as symmetric int8 (what the targets' integer kernels take).
            value = add_initializer(self.graph, self.names, f"{value.name}_int8", centred.astype(np.int8))
            p = QParams(p.scale, np.zeros(p.zero_point.shape, np.int8), p.axis)
        elif not symmetric_int8:
            log.info(
                "%s %r: weights kept as given (their centred values do not fit int8)", node.op_type, node.name
            )
        return self.dequantize(node, value, p)

    def bias(self, node: ir.Node, index: int, scale: np.ndarray) -> ir.Value | None:
        """The int32 bias input ``index`` read through DequantizeLinear with ``scale`` (x_scale * w_scale)."""
        value = node.inputs[index] if index < len(node.inputs) else None
        if value is None:
            return None
        b = self.const(node, index, "bias")
        assert b is not None
        scale = np.asarray(scale, np.float32)
        axis = None
        if scale.size > 1:
            if b.ndim == 0 or b.shape[-1] != scale.size:
                raise ModelError(f"{node.op_type} node {node.name!r}: bias shape {list(b.shape)} does not "
                                 f"match its {scale.size} weight scales")  # fmt: skip
            axis = b.ndim - 1
        else:
            scale = scale.reshape(())
        p = QParams(scale, np.zeros(scale.shape, np.int32), axis)
        return self.dequantize(node, value, p)

    def float_node(
        self, node: ir.Node, op_type: str, inputs: list[ir.Value | None], attributes: dict | None = None
    ) -> ir.Node:
        """A float node inserted before ``node`` (whose first output it stands for)."""
        new = ir.node(op_type, inputs, attributes or {}, name=self.names.fresh(node.name or op_type))
        self.graph.insert_before(node, new)
        for out in new.outputs:
            out.dtype = ir.DataType.FLOAT
        base = _float_name(node.outputs[0].name or op_type)
        new.outputs[0].name = self.names.fresh(base)
        new.outputs[0].shape = node.outputs[0].shape
        return new

    def quantize(self, node: ir.Node, result: ir.Value, output: ir.Value, p: QParams) -> None:
        """``result`` (float) quantized with ``p``; the QuantizeLinear output takes the place (readers, name)
        of the integer tensor ``output``."""
        base = _float_name(output.name or "q")
        scale, zero_point = self.params_values(base, p)
        q = ir.node(
            "QuantizeLinear", [result, scale, zero_point], name=self.names.fresh(f"{base}_QuantizeLinear")
        )
        self.graph.insert_before(node, q)
        new = q.outputs[0]
        new.dtype = ir.DataType.from_numpy(p.zero_point.dtype)
        new.shape = output.shape
        self.take_over(output, new)
        self.params[new] = p

    def take_over(self, old: ir.Value, new: ir.Value) -> None:
        """Every reader of ``old`` (and the graph output) reads ``new``, which takes ``old``'s name."""
        name = old.name
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        old.name = self.names.fresh(f"{name}_replaced") if name else None
        new.name = name

    def replace(self, node: ir.Node, result: ir.Value, output_params: QParams | None) -> None:
        """Finish a rewrite: quantize ``result`` to the node's output parameters (or hand the float result
        to the readers when the node's output is float) and remove ``node``."""
        if output_params is None:
            self.take_over(node.outputs[0], result)
        else:
            self.quantize(node, result, node.outputs[0], output_params)
        self.graph.remove(node, safe=True)
        self.rewritten += 1


def _float_name(name: str) -> str:
    return name[: -len("_quantized")] if name.endswith("_quantized") and len(name) > 10 else name


def _pool_attributes(node: ir.Node, names: tuple[str, ...]) -> dict:
    return {k: node.attributes[k].value for k in names if k in node.attributes}


# -- rewrites, one per QOperator op -------------------------------------------------------------------------
_CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
_POOL_ATTRS = ("auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides", "dilations")


@rewrite("", "QLinearConv")
def _qlinear_conv(rw: Rewriter, node: ir.Node) -> None:
    # x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B
    x = rw.input(node, 0, 1, 2, "input")
    x_scale = rw.qparams(node, 1, 2, node.inputs[0], "input").scale
    w = rw.weight(node, 3, 4, 5, axis=0)
    w_scale = rw.const(node, 4, "weight scale")
    bias = rw.bias(node, 8, x_scale.astype(np.float32) * w_scale.reshape(-1).astype(np.float32))
    conv = rw.float_node(
        node, "Conv", [x, w, bias] if bias is not None else [x, w], _pool_attributes(node, _CONV_ATTRS)
    )
    rw.replace(node, conv.outputs[0], rw.qparams(node, 6, 7, node.outputs[0], "output"))


@rewrite("", "QLinearMatMul")
def _qlinear_matmul(rw: Rewriter, node: ir.Node) -> None:
    # a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point
    a = rw.input(node, 0, 1, 2, "input A")
    b = rw.weight(node, 3, 4, 5, axis=-1)  # per column of B
    matmul = rw.float_node(node, "MatMul", [a, b])
    rw.replace(node, matmul.outputs[0], rw.qparams(node, 6, 7, node.outputs[0], "output"))


@rewrite(MS_DOMAIN, "QGemm")
def _qgemm(rw: Rewriter, node: ir.Node) -> None:
    # A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point (no y_scale: float output)
    # onnxruntime: Y = alpha * a_scale * b_scale * ((A - a_zp)(B - b_zp) + C), C int32.
    trans_b = attr(node, "transB", 0)
    alpha = float(attr(node, "alpha", 1.0))
    a = rw.input(node, 0, 1, 2, "input A")
    a_scale = rw.qparams(node, 1, 2, node.inputs[0], "input A").scale
    b = rw.weight(node, 3, 4, 5, axis=0 if trans_b else 1)
    b_scale = rw.const(node, 4, "weight scale").reshape(-1).astype(np.float32)
    c = rw.bias(node, 6, a_scale * b_scale)
    attributes = {"transA": attr(node, "transA", 0), "transB": trans_b}
    if alpha != 1.0:
        attributes.update(alpha=alpha, beta=alpha)
    gemm = rw.float_node(node, "Gemm", [a, b, c] if c is not None else [a, b], attributes)
    has_output_q = len(node.inputs) > 7 and node.inputs[7] is not None
    rw.replace(
        node, gemm.outputs[0], rw.qparams(node, 7, 8, node.outputs[0], "output") if has_output_q else None
    )


def _binary(op_type: str) -> RewriteFn:
    def run(rw: Rewriter, node: ir.Node) -> None:
        # A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point
        a = rw.input(node, 0, 1, 2, "input A")
        b = rw.input(node, 3, 4, 5, "input B")
        result = rw.float_node(node, op_type, [a, b])
        rw.replace(node, result.outputs[0], rw.qparams(node, 6, 7, node.outputs[0], "output"))

    return run


rewrite(MS_DOMAIN, "QLinearAdd")(_binary("Add"))
rewrite(MS_DOMAIN, "QLinearMul")(_binary("Mul"))


def _unary(op_type: str, attribute_names: tuple[str, ...] = ()) -> RewriteFn:
    def run(rw: Rewriter, node: ir.Node) -> None:
        # X, X_scale, X_zero_point, Y_scale, Y_zero_point
        if attr(node, "channels_last", 0):
            raise ModelError(f"{node.op_type} node {node.name!r}: channels_last=1 (NHWC) is not supported")
        x = rw.input(node, 0, 1, 2, "input")
        result = rw.float_node(node, op_type, [x], _pool_attributes(node, attribute_names))
        rw.replace(node, result.outputs[0], rw.qparams(node, 3, 4, node.outputs[0], "output"))

    return run


rewrite(MS_DOMAIN, "QLinearGlobalAveragePool")(_unary("GlobalAveragePool"))
rewrite(MS_DOMAIN, "QLinearAveragePool")(_unary("AveragePool", _POOL_ATTRS))
rewrite(MS_DOMAIN, "QLinearSigmoid")(_unary("Sigmoid"))
rewrite(MS_DOMAIN, "QLinearLeakyRelu")(_unary("LeakyRelu", ("alpha",)))


@rewrite(MS_DOMAIN, "QLinearSoftmax")
def _qlinear_softmax(rw: Rewriter, node: ir.Node) -> None:
    # X, X_scale, x_zero_point, y_scale, y_zero_point; attributes axis, opset (the float model's opset)
    x = rw.input(node, 0, 1, 2, "input")
    axis = attr(node, "axis", -1)
    rank = len(node.inputs[0].shape) if node.inputs[0].shape is not None else None
    last = axis == -1 or (rank is not None and axis == rank - 1)
    if attr(node, "opset", 13) >= 13 or last:
        result = rw.float_node(node, "Softmax", [x], {"axis": axis})
    else:
        # Opsets < 13: softmax over everything from ``axis`` on (the input coerced to 2-D).
        flat = rw.float_node(node, "Flatten", [x], {"axis": axis})
        soft = rw.float_node(node, "Softmax", [flat.outputs[0]], {"axis": -1})
        shape = rw.float_node(node, "Shape", [x])
        shape.outputs[0].dtype = ir.DataType.INT64
        shape.outputs[0].shape = None
        result = rw.float_node(node, "Reshape", [soft.outputs[0], shape.outputs[0]])
        flat.outputs[0].shape = soft.outputs[0].shape = None
    rw.replace(node, result.outputs[0], rw.qparams(node, 3, 4, node.outputs[0], "output"))


@rewrite(MS_DOMAIN, "QLinearConcat")
def _qlinear_concat(rw: Rewriter, node: ir.Node) -> None:
    # Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input. Inputs with other scales than the
    # output's are requantized by the concatenation (onnxruntime's kernel does, TFLite's too).
    if (len(node.inputs) - 2) % 3:
        raise ModelError(
            f"QLinearConcat node {node.name!r} has {len(node.inputs)} inputs; expected 2 + 3 per tensor"
        )
    parts = [rw.input(node, i, i + 1, i + 2, f"input {(i - 2) // 3}") for i in range(2, len(node.inputs), 3)]
    result = rw.float_node(node, "Concat", parts, {"axis": attr(node, "axis", 0)})
    rw.replace(node, result.outputs[0], rw.qparams(node, 0, 1, node.outputs[0], "output"))


@rewrite(MS_DOMAIN, "QLinearWhere")
def _qlinear_where(rw: Rewriter, node: ir.Node) -> None:
    # condition, X, x_scale, x_zero_point, Y, y_scale, y_zero_point, z_scale, z_zero_point
    x = rw.input(node, 1, 2, 3, "input X")
    y = rw.input(node, 4, 5, 6, "input Y")
    result = rw.float_node(node, "Where", [node.inputs[0], x, y])
    rw.replace(node, result.outputs[0], rw.qparams(node, 7, 8, node.outputs[0], "output"))


@rewrite(MS_DOMAIN, "QuantizeLinear", "DequantizeLinear")
def _ms_qdq(rw: Rewriter, node: ir.Node) -> None:
    """onnxruntime's own QuantizeLinear/DequantizeLinear (for opsets before per-axis Q/DQ): the standard op."""
    attributes = {"axis": attr(node, "axis")} if "axis" in node.attributes else {}
    new = ir.node(node.op_type, list(node.inputs), attributes, name=rw.names.fresh(node.name or node.op_type))
    rw.graph.insert_before(node, new)
    new.outputs[0].dtype = node.outputs[0].dtype
    new.outputs[0].shape = node.outputs[0].shape
    rw.take_over(node.outputs[0], new.outputs[0])
    rw.graph.remove(node, safe=True)
    rw.rewritten += 1
    _standard_qdq(rw, new)


# -- standard Q/DQ and ops run on integer data -------------------------------------------------------------
def _standard_qdq(rw: Rewriter, node: ir.Node) -> None:
    """Record a QuantizeLinear's output parameters; merge a DequantizeLinear of a tensor already dequantized."""
    if node.op_type == "QuantizeLinear":
        s = const_array(node.inputs[1])
        z = const_array(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
        if s is not None and s.size == 1:
            z = np.zeros((), np.uint8) if z is None else z.reshape(())
            rw.params[node.outputs[0]] = QParams(s.reshape(()).astype(np.float32), z)
        return
    value = node.inputs[0]
    p = rw.params.get(value)
    s = const_array(node.inputs[1])
    z = const_array(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if p is None or s is None or s.size != 1:
        return
    mine = QParams(
        s.reshape(()).astype(np.float32), (np.zeros((), p.zero_point.dtype) if z is None else z.reshape(()))
    )
    key = (id(value), *mine.key())
    if key in rw.dequantized:
        rw.take_over(node.outputs[0], rw.dequantized[key])
        rw.graph.remove(node, safe=True)
    else:
        rw.dequantized[key] = node.outputs[0]


def _same_params(rw: Rewriter, node: ir.Node, p: QParams) -> None:
    """An op run on integer data (Reshape, MaxPool, ...): DequantizeLinear -> op -> QuantizeLinear, all with
    its input's parameters."""
    dtype = node.inputs[0].dtype
    node.replace_input_with(0, rw.dequantize(node, node.inputs[0], p))
    if node.op_type == "Pad" and len(node.inputs) > 2 and node.inputs[2] is not None:
        level = rw.const(node, 2, "padding value")
        real = (level.astype(np.float64) - p.zero_point.astype(np.float64)) * float(p.scale)
        pad_value = add_initializer(
            rw.graph, rw.names, f"{node.name or 'Pad'}_value", real.astype(np.float32)
        )
        node.replace_input_with(2, pad_value)
    for i, out in enumerate(node.outputs):
        if out.dtype != dtype and not (out.dtype is None and i == 0):
            continue  # e.g. MaxPool's int64 indices
        readers = [(use.node, use.idx) for use in out.uses()]
        positions = [k for k, o in enumerate(rw.graph.outputs) if o is out]
        name = out.name
        out.name = rw.names.fresh(_float_name(name or "float"))
        out.dtype = ir.DataType.FLOAT
        base = _float_name(name or "q")
        scale, zero_point = rw.params_values(base, p)
        q = ir.node("QuantizeLinear", [out, scale, zero_point], name=rw.names.fresh(f"{base}_QuantizeLinear"))
        rw.graph.insert_after(node, q)
        integer = q.outputs[0]
        integer.dtype = ir.DataType.from_numpy(p.zero_point.dtype)
        integer.shape = out.shape
        integer.name = name
        for reader, index in readers:
            reader.replace_input_with(index, integer)
        for k in positions:
            rw.graph.outputs[k] = integer
        rw.params[integer] = p


def _integer_data_node(rw: Rewriter, node: ir.Node) -> None:
    """A standard op reading quantized tensors: rewritten when its result is defined on the real values."""
    quantized = [i for i, v in enumerate(node.inputs) if v is not None and v in rw.params]
    if not quantized:
        return
    if node.op_type in READS_FLOAT_OPS:
        for i in quantized:
            node.replace_input_with(i, rw.dequantize(node, node.inputs[i], rw.params[node.inputs[i]]))
        return
    if node.op_type in SAME_PARAMS_OPS and quantized == [0]:
        _same_params(rw, node, rw.params[node.inputs[0]])
        return
    tensor = node.inputs[quantized[0]].name
    raise UnsupportedOpError(
        f"{node.op_type} on the quantized tensor {tensor!r}",
        node.name or "",
        CONVERSION,
        [*supported_ops(), *sorted(SAME_PARAMS_OPS | READS_FLOAT_OPS)],
    )


class QOperatorToQDQPass(ir.passes.InPlacePass):
    """Rewrite every QOperator node into DequantizeLinear -> float op -> QuantizeLinear (module docstring)."""

    rewritten = 0

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        graph.sort()
        rw = Rewriter(model)
        for node in list(graph):
            domain = _domain(node)
            if node.op_type in _DYNAMIC:
                raise ModelError(
                    f"{node.op_type} node {node.name!r}: the model is dynamically quantized (activation scales "
                    "are computed at run time), so it has no scales to keep; deploy its float original with --calib"
                )
            fn = _REWRITES.get((domain, node.op_type))
            if fn is not None:
                fn(rw, node)
            elif domain == "" and node.op_type in ("QuantizeLinear", "DequantizeLinear"):
                _standard_qdq(rw, node)
            elif domain not in ("", "ai.onnx.ml"):
                raise UnsupportedOpError(
                    f"{domain}::{node.op_type}", node.name or "", CONVERSION, supported_ops()
                )
            else:
                _integer_data_node(rw, node)
        used = {_domain(n) for n in graph}
        for domain in list(model.opset_imports):
            if domain not in ("", "ai.onnx") and domain not in used:
                del model.opset_imports[domain]
        self.rewritten = rw.rewritten
        return ir.passes.PassResult(model, rw.rewritten > 0)


def to_qdq(model: ir.Model) -> int:
    """Rewrite ``model``'s QOperator nodes as QDQ in place; returns how many were rewritten."""
    qoperator_pass = QOperatorToQDQPass()
    try:
        qoperator_pass(model)
    except ir.passes.PassError as exc:
        cause = exc.__cause__ or exc
        if isinstance(cause, (ModelError, UnsupportedOpError)):
            raise cause from None
        raise ModelError(f"cannot convert the QOperator model to QDQ: {cause}") from None
    return qoperator_pass.rewritten


#: the default-domain opset from which the standard QuantizeLinear / DequantizeLinear take an integer type
#: (per-axis 8-bit from 13; 16-bit and 4-bit from 21)
_STANDARD_QDQ_SINCE = {
    **dict.fromkeys((onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT32), 13),
    **dict.fromkeys(
        (onnx.TensorProto.INT16, onnx.TensorProto.UINT16, onnx.TensorProto.INT4, onnx.TensorProto.UINT4), 21
    ),
}


def ms_qdq_as_standard(proto: onnx.ModelProto, opset: int) -> int:
    """onnxruntime's ``com.microsoft`` QuantizeLinear / DequantizeLinear (``quantize_static`` with
    ``UseQDQContribOps``: 16-bit activations, 4-bit weights) as the standard ops, in place, where the model's
    default-domain ``opset`` defines the node's integer type (its zero point's, else a DequantizeLinear's
    constant input's); returns how many. The others are left to :func:`_ms_qdq`. Both read the same inputs and
    ``axis`` and compute the same values."""
    types = {t.name: t.data_type for t in proto.graph.initializer}
    types.update(
        (v.name, v.type.tensor_type.elem_type) for v in [*proto.graph.value_info, *proto.graph.input]
    )
    done = 0
    for node in proto.graph.node:
        if node.domain != MS_DOMAIN or node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        names = [node.input[2]] if len(node.input) > 2 and node.input[2] else []
        if node.op_type == "DequantizeLinear":
            names.append(node.input[0])
        since = next((_STANDARD_QDQ_SINCE.get(types[n]) for n in names if n in types), None)
        if since is None or opset < since:
            continue
        node.domain = ""
        done += 1
    if done and not any(n.domain == MS_DOMAIN for n in proto.graph.node):
        kept = [o for o in proto.opset_import if o.domain != MS_DOMAIN]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    return done


# -- the model's own answers: onnxruntime running the QOperator file as given ------------------------------
def is_qoperator_file(proto: onnx.ModelProto) -> bool:
    """True when the ONNX model (as read from its file) is in onnxruntime's QOperator format."""
    return any(is_qoperator(node) for node in proto.graph.node)


class OnnxruntimeReference:
    """onnxruntime running a QOperator model file as given (its integer kernels): the answers the model's
    authors get, and what an integer deployment should reproduce. Runs with ``run(feeds) -> {name: array}``
    like :class:`edgekit.core.runtime.HostRunner`."""

    description = "onnxruntime (CPU) running the QOperator model file as given"

    def __init__(self, path: str | os.PathLike[str]):
        import onnxruntime

        try:
            self._session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"onnxruntime cannot run the QOperator model {path}: {first}") from None
        self.input_names = [i.name for i in self._session.get_inputs()]
        self.output_names = [o.name for o in self._session.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self._session.run(None, {n: np.asarray(feeds[n]) for n in self.input_names})
        return dict(zip(self.output_names, outputs, strict=True))


def onnxruntime_reference(path: str | os.PathLike[str]) -> OnnxruntimeReference | None:
    """The :class:`OnnxruntimeReference` of ``path`` when it is a QOperator model and onnxruntime is installed
    (it is not an edgekit dependency; whoever made the model has it), else None."""
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:
        return None
    if not is_qoperator_file(proto):
        return None
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        log.warning("onnxruntime is not installed: %s is compared with its QDQ form on the host only", path)
        return None
    try:
        return OnnxruntimeReference(path)
    except ModelError as exc:
        log.warning("%s; comparing with its QDQ form on the host only", exc)
        return None


def quantization_source(model: ir.Model) -> str:
    """Where a quantized model's scales come from, for the bundle's provenance."""
    count = model.meta.get(META_KEY)
    if count:
        return f"onnxruntime QOperator model, {count} quantized op(s) rewritten as QDQ with their own scales"
    return "QDQ model as given"
