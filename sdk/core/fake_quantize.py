"""OpenVINO's ``FakeQuantize`` (domain ``org.openvinotoolkit``) as QuantizeLinear / DequantizeLinear.

NNCF's torch backend exports its quantizers so (``nncf.quantize`` on a torch module, then ``torch.onnx.export``
without ``nncf.strip``): ``FakeQuantize(x, input_low, input_high, output_low, output_high, levels)`` computes
``round((clip(x, il, ih) - il) / (ih - il) * (levels - 1)) / (levels - 1) * (oh - ol) + ol``. Where the output
range is the input range and ``il`` is an integer number of steps below 0 (NNCF aligns its ranges so), that is
a QDQ pair with scale ``s = (ih - il) / (levels - 1)`` and zero point ``-il / s``:

- a constant input (weights, ``levels`` 255 or 256, per tensor or per output channel): its integer levels
  computed here, an int8 initializer read by a DequantizeLinear (``axis`` 0 when per channel);
- a run-time input (activations, ``levels`` 256, per tensor): QuantizeLinear -> DequantizeLinear on uint8.

Anything else (other ranges out than in, a zero point off the integer grid, per-channel or narrow activation
quantizers) is refused with one line naming the node.
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.errors import ModelError
from onnx import helper, numpy_helper

DOMAIN = "org.openvinotoolkit"
#: how far off an integer the zero point ``-il / s`` may be (float32 rounding of NNCF's aligned ranges)
ZERO_POINT_SLACK = 1e-3


def _constants(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def _params(node: onnx.NodeProto, values: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """Scale, integer zero point (arrays of the ranges' shape) and levels; a ModelError when not a QDQ pair."""
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
    return scale.astype(np.float32), np.rint(zero).astype(np.int64), levels


def _axis(shape: tuple[int, ...], rank: int) -> int | None:
    """The per-channel axis of a range of ``shape`` over a tensor of ``rank``, None per tensor."""
    if int(np.prod(shape)) == 1:
        return None
    big = [i for i, d in enumerate(shape) if d > 1]
    return big[0] + rank - len(shape) if len(big) == 1 else -1


def as_qdq(proto: onnx.ModelProto) -> int:
    """Every ``org.openvinotoolkit`` FakeQuantize of ``proto`` as QuantizeLinear / DequantizeLinear, in place
    (module docstring); returns how many."""
    graph = proto.graph
    if not any(n.domain == DOMAIN and n.op_type == "FakeQuantize" for n in graph.node):
        return 0
    values = _constants(proto)
    nodes, done = [], 0
    for node in graph.node:
        if node.domain != DOMAIN or node.op_type != "FakeQuantize":
            nodes.append(node)
            continue
        scale, zero, levels = _params(node, values)
        x, out, base = node.input[0], node.output[0], node.name or node.output[0]
        s_name, z_name = f"{base}_scale", f"{base}_zero_point"
        if x in values:
            data = values[x].astype(np.float64)
            axis = _axis(scale.shape, data.ndim)
            if axis == -1:
                raise ModelError(f"FakeQuantize node {node.name!r}: a range of shape {list(scale.shape)}")
            if axis is None:
                s, z = scale.reshape(()), zero.reshape(())
            else:
                s, z = scale.reshape(-1), zero.reshape(-1)
            shape = [1] * data.ndim
            if axis is not None:
                shape[axis] = -1
            levels_of = np.clip(np.rint(data / s.reshape(shape) + z.reshape(shape)), 0, levels - 1)
            q = (levels_of - z.reshape(shape)).astype(np.int64)
            if np.any(q < -128) or np.any(q > 127):
                raise ModelError(f"FakeQuantize node {node.name!r}: its weight levels do not fit int8")
            q_name = f"{base}_quantized"
            graph.initializer.extend(
                [
                    numpy_helper.from_array(q.astype(np.int8), q_name),
                    numpy_helper.from_array(s.astype(np.float32), s_name),
                    numpy_helper.from_array(np.zeros(z.shape, np.int8), z_name),
                ]
            )
            attrs = {"axis": axis} if axis is not None else {}
            nodes.append(helper.make_node("DequantizeLinear", [q_name, s_name, z_name], [out], base, **attrs))
        else:
            if scale.size != 1 or levels != 256:
                raise ModelError(
                    f"FakeQuantize node {node.name!r}: a run-time input quantized per channel or to {levels} "
                    "levels (activations are read per tensor on 256 levels)"
                )
            graph.initializer.extend(
                [
                    numpy_helper.from_array(scale.reshape(()), s_name),
                    numpy_helper.from_array(zero.reshape(()).astype(np.uint8), z_name),
                ]
            )
            q_out = f"{base}_quantized"
            nodes.append(helper.make_node("QuantizeLinear", [x, s_name, z_name], [q_out], f"{base}_Q"))
            nodes.append(helper.make_node("DequantizeLinear", [q_out, s_name, z_name], [out], f"{base}_DQ"))
        done += 1
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(n.domain == DOMAIN for n in graph.node):
        kept = [o for o in proto.opset_import if o.domain != DOMAIN]
        del proto.opset_import[:]
        proto.opset_import.extend(kept)
    return done
