"""Other tools' fake-quantize nodes as QuantizeLinear / DequantizeLinear: OpenVINO's ``FakeQuantize`` (domain
``org.openvinotoolkit``) and QONNX's ``Quant`` (domain ``qonnx.custom_op.general``, brevitas ``export_qonnx``).

NNCF's torch backend exports its quantizers so (``nncf.quantize`` on a torch module, then ``torch.onnx.export``
without ``nncf.strip``): ``FakeQuantize(x, input_low, input_high, output_low, output_high, levels)`` computes
``round((clip(x, il, ih) - il) / (ih - il) * (levels - 1)) / (levels - 1) * (oh - ol) + ol``. Where the output
range is the input range and ``il`` is an integer number of steps below 0 (NNCF aligns its ranges so), that is
a QDQ pair with scale ``s = (ih - il) / (levels - 1)`` and zero point ``-il / s``:

- a constant input (weights, ``levels`` 255 or 256, per tensor or per output channel): its integer levels
  computed here, an int8 initializer read by a DequantizeLinear (``axis`` 0 when per channel);
- a run-time input (activations, ``levels`` 256, per tensor): QuantizeLinear -> DequantizeLinear on uint8.

QONNX's ``Quant(x, scale, zeropt, bitwidth; signed, narrow, rounding_mode)`` computes ``(clip(round(x / scale +
zeropt), lo, hi) - zeropt) * scale`` with ``lo, hi`` the signed / unsigned, narrow or full range of ``bitwidth``
bits: the same pair (``rounding_mode`` ROUND: half to even, as QuantizeLinear), with a Clip between Q and DQ when
``lo, hi`` is not the whole 8-bit type (narrow, or fewer bits: brevitas' QCDQ form).

Anything else (other ranges out than in, a zero point off the integer grid, more than 8 bits, per-channel or
narrow activation quantizers) is refused with one line naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.errors import ModelError
from onnx import helper, numpy_helper

DOMAIN = "org.openvinotoolkit"
QONNX_DOMAIN = "qonnx.custom_op.general"
#: how far off an integer the zero point ``-il / s`` may be (float32 rounding of NNCF's aligned ranges)
ZERO_POINT_SLACK = 1e-3


def _constants(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _fake_quantize(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> tuple:
    """Scale, integer zero point (arrays of the ranges' shape), levels lo, hi and signedness of a FakeQuantize;
    a ModelError when it is not a QDQ pair."""
    levels = next((a.i for a in node.attribute if a.name == "levels"), 256)
    where = f"FakeQuantize node {node.name!r}"
    ranges = []
    for i, what in enumerate(("input_low", "input_high", "output_low", "output_high"), start=1):
        if i >= len(node.input) or node.input[i] not in values:
            raise ModelError(f"{where}: its {what} is computed at run time (a constant range is read)")
        ranges.append(values[node.input[i]].astype(np.float64))
    il, ih, ol, oh = ranges
    if not (np.array_equal(il, ol) and np.array_equal(ih, oh)):
        raise ModelError(f"{where}: its output range differs from its input range (not a QDQ pair)")
    if not 2 <= levels <= 256 or np.any(ih <= il):
        raise ModelError(f"{where}: levels {levels} over an empty range (2 to 256 levels are read)")
    scale = (ih - il) / (levels - 1)
    zero = -il / scale
    if (
        np.any(np.abs(zero - np.rint(zero)) > ZERO_POINT_SLACK)
        or np.any(zero < 0)
        or np.any(zero > levels - 1)
    ):
        raise ModelError(
            f"{where}: its range [{float(il.min()):.6g}, {float(ih.max()):.6g}] does not hold 0 on a level "
            "(a QuantizeLinear zero point must be an integer)"
        )
    return scale.astype(np.float32), np.rint(zero).astype(np.int64), 0, levels - 1, False


def _qonnx_quant(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> tuple:
    """The same for a QONNX Quant."""
    where = f"qonnx.custom_op.general::Quant node {node.name!r}"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    got = []
    for i, what in enumerate(("scale", "zero point", "bit width"), start=1):
        if i >= len(node.input) or node.input[i] not in values:
            raise ModelError(f"{where}: its {what} is computed at run time (a constant is read)")
        got.append(values[node.input[i]].astype(np.float64))
    scale, zero, bits = got
    mode = attrs.get("rounding_mode", b"ROUND")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode.upper() != "ROUND" or bits.size != 1 or not 2 <= float(bits) <= 8 or float(bits) % 1:
        raise ModelError(
            f"{where}: {float(bits.reshape(-1)[0]):g} bits, rounding {mode} (2 to 8 bits, ROUND read)"
        )
    if np.any(scale <= 0) or np.any(zero % 1):
        raise ModelError(f"{where}: a scale that is not positive or a zero point off the integer grid")
    n, signed, narrow = int(bits), bool(attrs.get("signed", 1)), bool(attrs.get("narrow", 0))
    lo, hi = (-(2 ** (n - 1)) + narrow, 2 ** (n - 1) - 1) if signed else (0, 2**n - 1 - narrow)
    return scale.astype(np.float32), zero.astype(np.int64), lo, hi, signed


def _axis(shape: tuple[int, ...], rank: int) -> int | None:
    """The per-channel axis of a range of ``shape`` over a tensor of ``rank``, None per tensor."""
    if int(np.prod(shape)) == 1:
        return None
    big = [i for i, d in enumerate(shape) if d > 1]
    return big[0] + rank - len(shape) if len(big) == 1 else -1


def _emit(node: onnx.NodeProto, params: tuple, values: dict[str, np.ndarray], graph: onnx.GraphProto) -> list:
    """The nodes (and initializers, added to ``graph``) computing ``node`` as Q / (Clip) / DQ."""
    scale, zero, lo, hi, signed = params
    x, out, base = node.input[0], node.output[0], node.name or node.output[0]
    where = f"{node.op_type} node {node.name!r}"
    s_name, z_name = f"{base}_scale", f"{base}_zero_point"
    if x in values:  # weights: their integer levels, read by a DequantizeLinear
        data = values[x].astype(np.float64)
        axis = _axis(scale.shape, data.ndim)
        if axis == -1:
            raise ModelError(f"{where}: a range of shape {list(scale.shape)}")
        shape = [1] * data.ndim
        if axis is not None:
            shape[axis] = -1
        s, z = scale.reshape(shape), zero.reshape(shape)
        q = (np.clip(np.rint(data / s + z), lo, hi) - z).astype(np.int64)
        if np.any(q < -128) or np.any(q > 127):
            raise ModelError(f"{where}: its weight levels do not fit int8")
        q_name = f"{base}_quantized"
        flat = () if axis is None else (-1,)
        graph.initializer.extend(
            [
                numpy_helper.from_array(q.astype(np.int8), q_name),
                numpy_helper.from_array(scale.reshape(flat).astype(np.float32), s_name),
                numpy_helper.from_array(np.zeros(zero.reshape(flat).shape, np.int8), z_name),
            ]
        )
        attrs = {"axis": axis} if axis is not None else {}
        return [helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [out], base, **attrs)]
    dtype = np.int8 if signed else np.uint8
    info = np.iinfo(dtype)
    if scale.size != 1 or not info.min <= lo <= int(zero.reshape(-1)[0]) <= hi <= info.max:
        raise ModelError(
            f"{where}: a run-time input quantized per channel or off the 8-bit range (activations are read per "
            "tensor on 8 bits)"
        )
    graph.initializer.extend(
        [
            numpy_helper.from_array(scale.reshape(()), s_name),
            numpy_helper.from_array(zero.reshape(()).astype(dtype), z_name),
        ]
    )
    q_out = f"{base}_quantized"
    nodes = [helper.make_node("QuantizeLinear", [x, s_name, z_name], [q_out], f"{base}_Q")]
    if (lo, hi) != (info.min, info.max):  # narrow or fewer bits: brevitas' QCDQ form
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.array(lo, dtype), f"{base}_lo"),
                numpy_helper.from_array(np.array(hi, dtype), f"{base}_hi"),
            ]
        )
        nodes.append(
            helper.make_node("Clip", [q_out, f"{base}_lo", f"{base}_hi"], [f"{q_out}_clipped"], f"{base}_C")
        )
        q_out = f"{q_out}_clipped"
    nodes.append(helper.make_node("DequantizeLinear", [q_out, s_name, z_name], [out], f"{base}_DQ"))
    return nodes


_PARAMS = {(DOMAIN, "FakeQuantize"): _fake_quantize, (QONNX_DOMAIN, "Quant"): _qonnx_quant}


def as_qdq(proto: onnx.ModelProto) -> int:
    """Every FakeQuantize / QONNX Quant of ``proto`` as QuantizeLinear / DequantizeLinear, in place (module
    docstring); returns how many."""
    graph = proto.graph
    if not any((n.domain, n.op_type) in _PARAMS for n in graph.node):
        return 0
    values = _constants(proto)
    nodes, done = [], 0
    for node in graph.node:
        params = _PARAMS.get((node.domain, node.op_type))
        if params is None:
            nodes.append(node)
            continue
        nodes.extend(_emit(node, params(node, values), values, graph))
        done += 1
    del graph.node[:]
    graph.node.extend(nodes)
    used = {n.domain for n in graph.node}
    kept = [o for o in proto.opset_import if o.domain not in (DOMAIN, QONNX_DOMAIN) or o.domain in used]
    del proto.opset_import[:]
    proto.opset_import.extend(kept)
    return done
