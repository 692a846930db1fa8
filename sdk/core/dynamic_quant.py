"""Dynamically quantized models (onnxruntime's ``quantize_dynamic``) as float models on their int8 weights.

``quantize_dynamic`` stores each weight as int8/uint8 with its scale and zero point and quantizes activations at
run time: ``DynamicQuantizeLinear`` computes an activation's scale and zero point from the values it sees,
``MatMulInteger`` / ``ConvInteger`` (or the fused ``com.microsoft`` ``DynamicQuantizeMatMul``,
``MatMulIntegerToFloat``, ``DynamicQuantizeLSTM``) multiply in integers, and a ``Cast`` and a ``Mul`` by the
product of the two scales give the real result back. Hugging Face repositories ship such files
(``model_quantized.onnx``), and so do libraries (ddddocr's OCR). onnxruntime's blockwise weight-only format,
``com.microsoft`` ``MatMulNBits`` (``model_q4.onnx``), its NF4 / FP4 format, ``MatMulBnb4``
(``model_bnb4.onnx``), and its blockwise embedding tables, ``GatherBlockQuantized``, are read here too: a MatMul
on the dequantized weight, a Gather of the dequantized table.

No target runs a scale computed at run time (TFLite's hybrid kernels and OpenVINO's compressed weights keep the
weights in int8 and compute in float), so the model is rewritten as what it stands for: each integer op on the
dequantized weight, ``(w - zero_point) * scale`` exactly as stored, in float, and the run-time quantization
of activations dropped:

- ``DynamicQuantizeLinear(x)`` gives ``(x, 1, 0)``: the activation itself, a scale of 1 and a zero point of 0;
- a value computed from those (the *run-time* values: a quantized activation, its scale or zero point, and
  what integer arithmetic makes of them) is kept in float: ``ConvInteger`` / ``MatMulInteger`` become
  ``Conv`` / ``MatMul`` on ``w - zero_point``, a ``Cast`` to an integer type becomes a ``Cast`` to float, and a
  ``Floor`` / ``Round`` / ``Ceil`` (a constant rounded to the run-time grid: the onnx.quantize 0.1 bias) is
  dropped, as the activations' rounding is;
- a ``Cast`` to float of a run-time value (the integer accumulator) ends the run-time domain: what follows is
  the model's own float computation (its scale product now ``1 * w_scale``) and is left as it is;
- a constant read through ``DequantizeLinear`` (the embedding tables ``quantize_dynamic`` stores as uint8 for
  their Gathers) becomes its float values, so that the model is a float model throughout: every recipe applies
  to it (``--precision w8`` stores 8-bit weights again).

The result computes ``x @ dequantized(w)`` where the file computed ``dequantized(quantized(x)) @
dequantized(w)``: the weights are the model's, the activations are not rounded (within the activation's step
of onnxruntime running the file, which stays the reference a report compares with). Each rewrite is one
function keyed by op type in ``_REWRITES``; a pattern outside them is left to the QOperator rewrite, which
refuses it by name.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from edgekit.core.errors import ModelError
from onnx import TensorProto, helper, numpy_helper

MS_DOMAIN = "com.microsoft"
#: The ops of dynamic quantization this module rewrites (``DynamicQuantizeLinear`` itself is handled apart).
DYNAMIC_OPS = frozenset(
    {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
     "DynamicQuantizeLSTM", "MatMulNBits", "MatMulBnb4", "GatherBlockQuantized"}
)  # fmt: skip
_ROUNDING = frozenset({"Floor", "Round", "Ceil"})
_FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16})


class _Graph:
    """The graph being rewritten: its constants, fresh names, the nodes written so far."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
                self.consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        self.runtime: set[str] = set()  # run-time quantization values (module docstring)
        self.stale: set[str] = set()  # other values whose type changes (a Gather of a dequantized table)
        self.nodes: list[onnx.NodeProto] = []
        self._names = {n for node in graph.node for n in (*node.input, *node.output)} | set(self.consts)
        self._count = 0

    def name(self, hint: str) -> str:
        while True:
            self._count += 1
            candidate = f"{hint}/dequantized_{self._count}"
            if candidate not in self._names:
                self._names.add(candidate)
                return candidate

    def const(self, hint: str, array: np.ndarray) -> str:
        name = self.name(hint)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        self.consts[name] = np.asarray(array)
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(op_type), **attrs))
        return out

    def constant(self, node: onnx.NodeProto, i: int, what: str) -> np.ndarray:
        name = node.input[i] if len(node.input) > i else ""
        if name not in self.consts:
            raise ModelError(f"{node.op_type} node {node.name!r}: its {what} is not a constant")
        return self.consts[name]

    def centred(self, node: onnx.NodeProto, i: int, zero: int, axis: int | None = None) -> str:
        """Input ``i`` of ``node`` minus its zero point (input ``zero``), as float: a constant when both are
        constants, else Cast / Sub nodes. ``axis``: the axis a 1-D zero point runs along."""
        x = node.input[i]
        z = node.input[zero] if len(node.input) > zero else ""
        if z and z in self.runtime:  # a zero point of DynamicQuantizeLinear: 0 (module docstring)
            z = ""
        if x in self.consts and (not z or z in self.consts):
            values = self.consts[x].astype(np.float32)
            if z:
                zp = self.consts[z].astype(np.float32)
                if zp.ndim == 1 and axis is not None:
                    zp = zp.reshape([-1 if d == axis % values.ndim else 1 for d in range(values.ndim)])
                values = values - zp
            return self.const(x, values)
        if x not in self.runtime:
            x = self.op("Cast", [x], to=TensorProto.FLOAT)
        if not z:
            return x
        if axis is not None and z in self.consts and self.consts[z].ndim == 1:
            raise ModelError(f"{node.op_type} node {node.name!r}: a per-axis zero point on a run-time input")
        return self.op("Sub", [x, self.op("Cast", [z], to=TensorProto.FLOAT)])


RewriteFn = Callable[[_Graph, onnx.NodeProto], None]
_REWRITES: dict[str, RewriteFn] = {}


def _rewrite(*op_types: str) -> Callable[[RewriteFn], RewriteFn]:
    def register(fn: RewriteFn) -> RewriteFn:
        _REWRITES.update(dict.fromkeys(op_types, fn))
        return fn

    return register


@_rewrite("DynamicQuantizeLinear")
def _dynamic_quantize_linear(g: _Graph, node: onnx.NodeProto) -> None:
    q, scale, zero = (list(node.output) + ["", "", ""])[:3]
    if q:
        g.op("Identity", [node.input[0]], q)
    if scale:
        g.op("Identity", [g.const("scale_one", np.array(1.0, np.float32))], scale)
    if zero:
        g.op("Identity", [g.const("zero_point", np.array(0.0, np.float32))], zero)
    g.runtime.update(o for o in (q, scale, zero) if o)


@_rewrite("DequantizeLinear")
def _dequantize_linear(g: _Graph, node: onnx.NodeProto) -> None:
    """A stored weight read through DequantizeLinear: its float values. quantize_dynamic's embedding tables are
    read by a Gather first (Gather on the uint8 table, then DequantizeLinear): the Gather reads the float table."""
    data = node.input[0]
    gather = next((n for n in reversed(g.nodes) if data in n.output), None)
    if gather is not None and gather.op_type == "Gather" and gather.input[0] in g.consts:
        data = gather.input[0]
    if not all(i in g.consts for i in [data, *node.input[1:]] if i):
        g.nodes.append(node)
        return
    values, scale = g.consts[data].astype(np.float32), g.consts[node.input[1]].astype(np.float32)
    zero = (
        g.consts[node.input[2]].astype(np.float32) if len(node.input) > 2 and node.input[2] else np.float32(0)
    )
    axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 1)
    if scale.ndim == 1 and values.ndim > 1:
        shape = [-1 if d == axis % values.ndim else 1 for d in range(values.ndim)]
        scale, zero = scale.reshape(shape), np.reshape(zero, shape) if np.ndim(zero) else zero
        if data != node.input[0]:
            raise ModelError(f"DequantizeLinear node {node.name!r}: a per-axis scale after a Gather")
    table = g.const(data, (values - zero) * scale)
    if data == node.input[0]:
        g.op("Identity", [table], node.output[0])
        return
    gather.input[0] = table
    g.stale.add(gather.output[0])  # uint8 before, float now
    g.op("Identity", [gather.output[0]], node.output[0])


@_rewrite("MatMulInteger")
def _matmul_integer(g: _Graph, node: onnx.NodeProto) -> None:
    a, b = g.centred(node, 0, 2), g.centred(node, 1, 3, axis=-1)
    g.op("MatMul", [a, b], node.output[0])
    g.runtime.add(node.output[0])  # the accumulator, until its Cast to float


@_rewrite("ConvInteger")
def _conv_integer(g: _Graph, node: onnx.NodeProto) -> None:
    x, w = g.centred(node, 0, 2), g.centred(node, 1, 3, axis=0)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    g.op("Conv", [x, w], node.output[0], **attrs)
    g.runtime.add(node.output[0])


def _scaled(g: _Graph, node: onnx.NodeProto, b: str, scale: np.ndarray) -> str:
    """The constant ``b`` (centred) times the per-tensor or per-column ``scale``."""
    return g.const(node.input[1], g.consts[b] * scale.astype(np.float32))


@_rewrite("DynamicQuantizeMatMul")
def _dynamic_quantize_matmul(g: _Graph, node: onnx.NodeProto) -> None:
    # com.microsoft: A (float), B (8-bit), b_scale, b_zero_point, bias
    b = _scaled(g, node, g.centred(node, 1, 3, axis=-1), g.constant(node, 2, "weight scale"))
    _matmul_bias(g, node, node.input[0], b, 4)


@_rewrite("MatMulIntegerToFloat")
def _matmul_integer_to_float(g: _Graph, node: onnx.NodeProto) -> None:
    # com.microsoft: A, B (8-bit), a_scale, b_scale, a_zero_point, b_zero_point, bias
    a = g.op("Mul", [g.centred(node, 0, 4), node.input[2]])
    b = _scaled(g, node, g.centred(node, 1, 5, axis=-1), g.constant(node, 3, "weight scale"))
    _matmul_bias(g, node, a, b, 6)


def _matmul_bias(g: _Graph, node: onnx.NodeProto, a: str, b: str, bias_index: int) -> None:
    bias = node.input[bias_index] if len(node.input) > bias_index else ""
    out = g.op("MatMul", [a, b], None if bias else node.output[0])
    if bias:
        g.op("Add", [out, bias], node.output[0])


@_rewrite("DynamicQuantizeLSTM")
def _dynamic_quantize_lstm(g: _Graph, node: onnx.NodeProto) -> None:
    # com.microsoft: X, W, R, B, sequence_lens, initial_h, initial_c, P, W_scale, W_zero_point, R_scale,
    # R_zero_point; W / R are [num_directions, input (hidden), 4 * hidden] (ONNX LSTM: the last two swapped)
    weights = []
    for w, scale, zero in ((1, 8, 9), (2, 10, 11)):
        values = g.constant(node, w, "weight").astype(np.float32)
        s = g.constant(node, scale, "weight scale").astype(np.float32)
        z = g.constant(node, zero, "weight zero point").astype(np.float32)
        # per direction ([D]) or per direction and gate column ([D, 4H])
        s, z = (a.reshape(a.shape[0], 1, -1) for a in (s, z))
        weights.append(g.const(node.input[w], ((values - z) * s).transpose(0, 2, 1)))
    inputs = [node.input[0], *weights, *list(node.input[3:8])]
    while inputs and not inputs[-1]:
        inputs.pop()
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    g.nodes.append(helper.make_node("LSTM", inputs, list(node.output), name=node.name, **attrs))


def _unpacked(packed: np.ndarray, bits: int) -> np.ndarray:
    """uint8 bytes holding 8 / bits values each along the last axis, the first in the lowest bits."""
    if bits == 8:
        return packed
    per = 8 // bits
    parts = [(packed >> (bits * i)) & ((1 << bits) - 1) for i in range(per)]
    return np.stack(parts, axis=-1).reshape(*packed.shape[:-1], packed.shape[-1] * per)


@_rewrite("MatMulNBits")
def _matmul_nbits(g: _Graph, node: onnx.NodeProto) -> None:
    """com.microsoft MatMulNBits (blockwise 4- or 8-bit weights, onnxruntime's ``MatMulNBitsQuantizer``, the
    ``model_q4.onnx`` of Hugging Face repositories): A, B packed [N, blocks, block_size * bits / 8], scales
    [N * blocks], zero points (packed like B, or float; default 2^(bits - 1)), g_idx, bias. A MatMul on the
    dequantized [K, N] weight."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k, n, bits, block = attrs["K"], attrs["N"], attrs.get("bits", 4), attrs["block_size"]
    if bits not in (4, 8):
        raise ModelError(f"MatMulNBits node {node.name!r}: {bits}-bit weights (4 and 8 are read)")
    blocks = -(-k // block)
    packed = g.constant(node, 1, "weight")
    scale = g.constant(node, 2, "weight scale")
    # NNCF's compress_weights(INT4, all_layers=True) writes an embedding table's Gather as a MatMulNBits on the
    # int64 ids with scales of the table's transposed blocks: not a valid file (onnxruntime refuses it too)
    want = {"weight": (packed.size, n * blocks * block * bits // 8), "weight scale": (scale.size, n * blocks)}
    for what, (size, expected) in want.items():
        if size != expected:
            raise ModelError(
                f"MatMulNBits node {node.name!r}: its {what} holds {size} values where K={k}, N={n}, "
                f"block_size {block} and {bits} bits need {expected}; the file is not a valid MatMulNBits model"
            )
    q = _unpacked(packed.reshape(n, blocks, -1), bits)
    scale = scale.astype(np.float32).reshape(n, blocks)
    zero: np.ndarray | float = float(1 << (bits - 1))
    if len(node.input) > 3 and node.input[3]:
        z = g.constant(node, 3, "weight zero point")
        if z.dtype != np.uint8:
            zero = z.astype(np.float32).reshape(n, blocks)
        else:
            zero = _unpacked(z.reshape(n, -1), bits)[:, :blocks]
        zero = np.asarray(zero, np.float32)[..., None]
    if len(node.input) > 4 and node.input[4]:
        g_idx = g.constant(node, 4, "g_idx")
        if not np.array_equal(g_idx, np.arange(k) // block):
            raise ModelError(f"MatMulNBits node {node.name!r}: a g_idx that reorders the weight's blocks")
    weight = ((q.astype(np.float32) - zero) * scale[..., None]).reshape(n, -1)[:, :k]
    b = g.const(node.input[1], np.ascontiguousarray(weight.T))
    _matmul_bias(g, node, node.input[0], b, 5)


#: bitsandbytes' 4-bit codes (onnxruntime's ``blockwise_quant_block_bnb4.h``): the value of each code, times
#: its block's absmax. FP4: sign bit, then 3 bits (bias 3, subnormals), normalised by 12, the FP4 absmax.
BNB4_CODES = {
    0: np.array([0, 0.0625, 8, 12, 4, 6, 2, 3, -0.0, -0.0625, -8, -12, -4, -6, -2, -3], np.float64) / 12,
    1: np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0]),
}  # fmt: skip


@_rewrite("MatMulBnb4")
def _matmul_bnb4(g: _Graph, node: onnx.NodeProto) -> None:
    """com.microsoft MatMulBnb4 (onnxruntime's ``MatMulBnb4Quantizer``, the ``model_bnb4.onnx`` of Hugging Face
    repositories): A, B packed [(N * K + 1) / 2] (the [N, K] transposed weight flattened, two codes a byte, the
    first in the high nibble), absmax [blocks of block_size over that flat weight]; ``quant_type`` 0 FP4, 1 NF4.
    A MatMul on the dequantized [K, N] weight: each code's value times its block's absmax in float32, stored
    in the absmax's type (a float16 model's weight is that product rounded to float16, as onnxruntime's)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k, n, block, kind = attrs["K"], attrs["N"], attrs["block_size"], attrs.get("quant_type", 1)
    if kind not in BNB4_CODES:
        raise ModelError(f"MatMulBnb4 node {node.name!r}: quant_type {kind} (0 FP4 and 1 NF4 are read)")
    packed = g.constant(node, 1, "weight").reshape(-1)
    codes = np.stack([packed >> 4, packed & 0x0F], axis=-1).reshape(-1)[: n * k]
    absmax = g.constant(node, 2, "absmax")
    values = BNB4_CODES[kind].astype(np.float32)[codes] * np.repeat(absmax.astype(np.float32), block)[: n * k]
    weight = values.astype(absmax.dtype).reshape(n, k)  # the type of A, which float16 loading widens
    _matmul_bias(g, node, node.input[0], g.const(node.input[1], np.ascontiguousarray(weight.T)), 3)


@_rewrite("GatherBlockQuantized")
def _gather_block_quantized(g: _Graph, node: onnx.NodeProto) -> None:
    """com.microsoft GatherBlockQuantized (``MatMulNBitsQuantizer`` with ``Gather`` among its op types: an
    embedding table in 4-bit blocks along ``quantize_axis``): data (uint8 packing 8 / bits values along the last
    axis, the first in the low bits, or int4 / uint4), indices, scales (a block's scale per ``block_size`` values
    of the quantize axis), zero points (packed like the data; default 2^(bits - 1) for uint8 data, 0 for int4 /
    uint4). A Gather along ``gather_axis`` of the dequantized table, in the scales' type."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    bits, block = attrs.get("bits", 4), attrs.get("block_size", 128)
    data = g.constant(node, 0, "table")
    packed = data.dtype == np.uint8  # int4 / uint4 tensors read as their own (ml_dtypes) types
    if packed and bits not in (2, 4, 8):
        raise ModelError(f"GatherBlockQuantized node {node.name!r}: {bits}-bit values (2, 4 and 8 are read)")
    q = (_unpacked(data, bits) if packed else data).astype(np.float32)
    axis = attrs.get("quantize_axis", 1) % q.ndim
    scales = g.constant(node, 2, "scales")
    length = q.shape[axis]

    def per_value(blocks: np.ndarray) -> np.ndarray:  # one entry per block -> one per value along the axis
        return np.take(np.repeat(blocks, block, axis=axis), np.arange(length), axis=axis)

    zero: np.ndarray | float = float(1 << (bits - 1)) if packed else 0.0
    if len(node.input) > 3 and node.input[3]:
        z = g.constant(node, 3, "zero points")
        z = _unpacked(z, bits) if packed else z
        zero = per_value(np.take(z, np.arange(scales.shape[axis]), axis=axis).astype(np.float32))
    values = (q - zero) * per_value(scales.astype(np.float32))
    table = g.const(node.input[0], values.astype(scales.dtype))
    g.op("Gather", [table, node.input[1]], node.output[0], axis=attrs.get("gather_axis", 0))


def _runtime_node(g: _Graph, node: onnx.NodeProto) -> bool:
    """Rewrite a node reading run-time values (module docstring); False when it is left as it is."""
    readers = [i for i in node.input if i and i not in g.consts]
    if not readers or not all(i in g.runtime for i in readers):
        return False
    if node.op_type == "Cast":
        to = next(helper.get_attribute_value(a) for a in node.attribute if a.name == "to")
        if to in _FLOAT_TYPES:
            g.nodes.append(node)  # the end of the run-time domain
            return True
        g.op("Cast", [node.input[0]], node.output[0], to=TensorProto.FLOAT)
    elif node.op_type in _ROUNDING:
        g.op("Identity", [node.input[0]], node.output[0])
    else:
        g.nodes.append(node)
    g.runtime.update(o for o in node.output if o)
    return True


def has_dynamic_quantization(proto: onnx.ModelProto) -> bool:
    return any(n.op_type in DYNAMIC_OPS for n in proto.graph.node)


def dequantize(proto: onnx.ModelProto) -> list[str]:
    """Rewrite ``proto``'s dynamic quantization in place (module docstring); the note to show, or []."""
    if not has_dynamic_quantization(proto):
        return []
    graph = proto.graph
    g = _Graph(graph)
    counts: dict[str, int] = {}
    for node in graph.node:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        fn = _REWRITES.get(node.op_type) if domain in ("", MS_DOMAIN) else None
        if node.op_type == "DequantizeLinear" and (
            domain or any(a.name == "block_size" for a in node.attribute)
        ):
            fn = None
        if fn is not None:
            fn(g, node)
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
        elif not _runtime_node(g, node):
            g.nodes.append(node)
    del graph.node[:]
    graph.node.extend(g.nodes)
    # Types inferred for the integer values no longer hold; shape inference gives the new ones.
    kept = [v for v in graph.value_info if v.name not in g.runtime | g.stale]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}
    for t in [t for t in graph.initializer if t.name not in used]:
        graph.initializer.remove(t)  # the 8-bit weights, now float
    notes = []
    blockwise = {
        "MatMulNBits": "blockwise 4/8-bit weights",
        "MatMulBnb4": "NF4 / FP4 4-bit weights",
        "GatherBlockQuantized": "blockwise 4-bit embedding tables",
    }
    for op, what in blockwise.items():
        if counts.get(op):
            notes.append(
                f"{counts[op]} {op} op(s) (onnxruntime's {what}) computed in float on their dequantized weights"
            )
    integer = sum(
        v for k, v in counts.items() if k not in ("DynamicQuantizeLinear", "DequantizeLinear", *blockwise)
    )
    if integer:
        notes.append(
            f"dynamically quantized model (onnxruntime quantize_dynamic): {integer} integer op(s) computed in float "
            "on their dequantized int8 weights; the activations' run-time quantization is dropped"
        )
    return notes
