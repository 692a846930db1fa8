"""The preparation passes that put layers in the form the integer kernels take (:func:`edgekit.core.passes.prepare`
runs them): BatchNorm and per-channel affines folded into convolutions, bias Adds into their layer, MatMul + Add
as Gemm, Div by a constant as Mul, HardSwish written out as one op, a standalone BatchNorm or an AveragePool as a
depthwise convolution, a Pad by -inf into the MaxPool it feeds.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import NameScope, add_initializer, attr, const_array, only_consumer, replace_value

log = logging.getLogger("edgekit")


def _bias_of(node: ir.Node, channels: int, dtype: np.dtype) -> np.ndarray | None:
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        bias = const_array(node.inputs[2])
        if bias is None:
            return None
        return np.broadcast_to(bias.reshape(-1), (channels,)).astype(dtype)
    return np.zeros(channels, dtype=dtype)


def _set_weight_bias(
    graph: ir.Graph, names: NameScope, node: ir.Node, weight: np.ndarray, bias: np.ndarray
) -> None:
    w = add_initializer(graph, names, (node.inputs[1].name or "W") + "_folded", weight)
    b = add_initializer(graph, names, (node.name or node.op_type) + "_bias", bias)
    node.replace_input_with(1, w)
    if len(node.inputs) > 2:
        node.replace_input_with(2, b)
    else:
        node.resize_inputs(3)
        node.replace_input_with(2, b)


def _conv_like_weight(node: ir.Node) -> tuple[np.ndarray, int] | None:
    """The constant weight of a Conv/Gemm node and its output-channel axis."""
    if node.op_type not in ("Conv", "Gemm") or len(node.inputs) < 2:
        return None
    weight = const_array(node.inputs[1])
    if weight is None:
        return None
    if node.op_type == "Gemm":
        if attr(node, "transA", 0) or attr(node, "alpha", 1.0) != 1.0 or attr(node, "beta", 1.0) != 1.0:
            return None
        return weight, 0 if attr(node, "transB", 0) else 1
    return weight, 0


class FoldBatchNormPass(ir.passes.InPlacePass):
    """Fold an inference BatchNormalization into the Conv or Gemm before it (when it is the only reader)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for bn in list(graph):
            if (
                bn.op_type != "BatchNormalization"
                or len(bn.outputs) > 1
                and any(o.uses() for o in bn.outputs[1:])
            ):
                continue
            src = bn.inputs[0].producer() if bn.inputs[0] is not None else None
            if src is None or only_consumer(bn.inputs[0]) is not bn:
                continue
            found = _conv_like_weight(src)
            params = [const_array(v) for v in bn.inputs[1:5]]
            if found is None or any(p is None for p in params):
                continue
            weight, axis = found
            gamma, beta, mean, var = (p.astype(np.float64) for p in params)
            eps = attr(bn, "epsilon", 1e-5)
            factor = gamma / np.sqrt(var + eps)
            channels = weight.shape[axis]
            bias = _bias_of(src, channels, np.float64)
            if bias is None or factor.shape[0] != channels:
                continue
            shape = [1] * weight.ndim
            shape[axis] = channels
            new_w = (weight.astype(np.float64) * factor.reshape(shape)).astype(weight.dtype)
            new_b = ((bias - mean) * factor + beta).astype(weight.dtype)
            _set_weight_bias(graph, names, src, new_w, new_b)
            replace_value(bn.outputs[0], src.outputs[0])
            graph.remove(bn, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)


class FuseBiasAddPass(ir.passes.InPlacePass):
    """Conv followed by Add of a per-channel constant ([C,1,1] or [1,C,1,1]) becomes the Conv's bias; likewise a
    Gemm followed by Add of a [N] or [1,N] constant (exporters such as CNTK write biases this way)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for add in list(graph):
            if add.op_type != "Add":
                continue
            for data_idx in (0, 1):
                data, const = add.inputs[data_idx], add.inputs[1 - data_idx]
                addend = const_array(const)
                src = data.producer() if data is not None else None
                if addend is None or src is None or only_consumer(data) is not add:
                    continue
                found = _conv_like_weight(src)
                if found is None:
                    continue
                weight, axis = found
                channels = weight.shape[axis]
                out_rank = len(data.shape) if data.shape is not None else None
                if not _is_channel_vector(addend, channels, out_rank, channel_dim=1):
                    continue
                bias = _bias_of(src, channels, weight.dtype)
                if bias is None:
                    continue
                _set_weight_bias(graph, names, src, weight, bias + addend.reshape(-1).astype(weight.dtype))
                replace_value(add.outputs[0], src.outputs[0])
                graph.remove(add, safe=True)
                modified = True
                break
        return ir.passes.PassResult(model, modified)


def _is_channel_vector(addend: np.ndarray, channels: int, out_rank: int | None, channel_dim: int) -> bool:
    if addend.size != channels or out_rank is None:
        return False
    shape = list(addend.shape)
    # Right-align against the output: the only non-1 dim must land on the channel axis.
    if len(shape) > out_rank:
        return False
    padded = [1] * (out_rank - len(shape)) + shape
    non_one = [i for i, d in enumerate(padded) if d != 1]
    return non_one == [channel_dim] or (channels == 1 and not non_one)


#: ``node.meta`` key: the names of the nodes of the file as given that a preparation pass fused into this node
#: (``--layer-precision`` takes those names too).
SOURCE_NODES = "edgekit.source_nodes"


class MatMulAddToGemmPass(ir.passes.InPlacePass):
    """MatMul of an activation by a constant 2-D weight, followed by Add of a constant bias, becomes one Gemm
    with a 1-D bias (a [1,N] bias is flattened: integer kernels take 1-D biases). An N-D activation (static,
    [..., K]) with a bias becomes Reshape [-1, K] -> Gemm -> Reshape [..., N]: int8 then computes ``Q(x W + b)``
    with an int32 bias, not ``Q(Q(x W) + b)``, whose int8 ADD kernels round near a half step their own way
    (XNNPACK's: 3e-5 of a step from one, in all-MiniLM-L6-v2's first query projection). Without a bias an N-D
    MatMul stays (FULLY_CONNECTED with ``keep_num_dims``)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for mm in list(graph):
            a, b = mm.inputs if mm.op_type == "MatMul" else (None, None)
            weight = const_array(b) if a is not None else None
            if weight is None or weight.ndim != 2 or a.shape is None or len(a.shape) < 2:
                continue
            dims, add = list(a.shape), only_consumer(mm.outputs[0])
            gemm_inputs = [a, b]
            if add is not None and add.op_type == "Add":
                other = add.inputs[1] if add.inputs[0] is mm.outputs[0] else add.inputs[0]
                bias = const_array(other)
                if bias is not None and _is_channel_vector(bias, weight.shape[1], len(dims), len(dims) - 1):
                    bias = bias.reshape(-1).astype(weight.dtype)
                    gemm_inputs.append(add_initializer(graph, names, (other.name or "bias") + "_1d", bias))
                else:
                    add = None
            else:
                add = None
            if len(dims) > 2 and (add is None or not all(isinstance(d, int) and d > 0 for d in dims)):
                continue
            if len(dims) > 2:
                gemm_inputs[0] = _reshape(graph, names, mm, a, [int(np.prod(dims[:-1])), dims[-1]])
            gemm = ir.node("Gemm", gemm_inputs, name=names.fresh((mm.name or "MatMul") + "_gemm"))
            gemm.meta[SOURCE_NODES] = tuple(n.name for n in (mm, add) if n is not None and n.name)
            graph.insert_before(mm, gemm)
            gemm.outputs[0].dtype = mm.outputs[0].dtype
            gemm.outputs[0].shape = mm.outputs[0].shape
            result = gemm.outputs[0]
            if len(dims) > 2:
                result.shape = ir.Shape([gemm_inputs[0].shape[0], weight.shape[1]])
                result = _reshape(graph, names, mm, result, [*dims[:-1], weight.shape[1]])
            replace_value((add or mm).outputs[0], result)
            graph.remove([n for n in (add, mm) if n is not None], safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)


def _reshape(graph: ir.Graph, names: NameScope, before: ir.Node, x: ir.Value, dims: list[int]) -> ir.Value:
    """``x`` reshaped to the static ``dims`` by a Reshape inserted before ``before``."""
    shape = add_initializer(graph, names, (before.name or "MatMul") + "_shape", np.array(dims, np.int64))
    node = ir.node("Reshape", [x, shape], name=names.fresh((before.name or "MatMul") + "_reshape"))
    graph.insert_before(before, node)
    node.outputs[0].dtype, node.outputs[0].shape = x.dtype, ir.Shape([int(d) for d in dims])
    return node.outputs[0]


class DivByConstantPass(ir.passes.InPlacePass):
    """A float Div by a constant becomes a Mul by its reciprocal (PaddlePaddle writes ``x / 6``, ``x / 255``...):
    a Mul by a constant has an integer kernel, a Div has none. A Div feeding Erf stays: it belongs to an erf-GELU,
    which the converters match whole (and Erf has no integer kernel anyway)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for div in list(graph):
            if div.op_type != "Div" or div.domain not in ("", "ai.onnx") or len(div.inputs) != 2:
                continue
            divisor = const_array(div.inputs[1])
            if divisor is None or divisor.dtype != np.float32 or not np.all(np.isfinite(divisor)):
                continue
            if np.any(divisor == 0) or np.any(~np.isfinite(1.0 / divisor.astype(np.float64))):
                continue
            if any(use.node.op_type == "Erf" for use in div.outputs[0].uses()):
                continue
            reciprocal = (1.0 / divisor.astype(np.float64)).astype(np.float32)
            const = add_initializer(graph, names, f"{div.inputs[1].name}_reciprocal", reciprocal)
            _stand_in(graph, names, div, "Mul", [div.inputs[0], const], f"{div.name}_as_Mul", "mul")
            graph.remove(div, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)


def _stand_in(
    graph: ir.Graph, names: NameScope, node: ir.Node, op_type: str, inputs: list, name: str, suffix: str
) -> ir.Node:
    """A one-output ``op_type`` node inserted before ``node`` that takes its first output's place: the readers,
    dtype and shape (and a graph output's name), its own output named ``<output>_<suffix>``."""
    old = node.outputs[0]
    new = ir.node(op_type, inputs, name=names.fresh(name))
    graph.insert_before(node, new)
    new.outputs[0].name = names.fresh(f"{old.name}_{suffix}")
    new.outputs[0].dtype, new.outputs[0].shape = old.dtype, old.shape
    replace_value(old, new.outputs[0])
    return new


def _is_scalar_const(value: ir.Value | None, expected: float, rel: float = 1e-5) -> bool:
    array = const_array(value)
    return (
        array is not None
        and array.size == 1
        and abs(float(array.reshape(-1)[0]) - expected) <= rel * abs(expected)
    )


def _other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The other input of a binary ``node`` that reads ``value`` once."""
    if len(node.inputs) != 2 or (node.inputs[0] is value) == (node.inputs[1] is value):
        return None
    return node.inputs[1] if node.inputs[0] is value else node.inputs[0]


def _relu6_of_plus_3(clip: ir.Node) -> ir.Value | None:
    """``a`` when ``clip`` is Clip(Add(a, 3), 0, 6) (its Add read by the Clip alone), else None."""
    if clip.op_type != "Clip" or len(clip.inputs) < 3:
        return None
    if not (_is_scalar_const(clip.inputs[1], 0.0, 0) and _is_scalar_const(clip.inputs[2], 6.0)):
        return None
    add = clip.inputs[0].producer()
    if add is None or add.op_type != "Add" or only_consumer(clip.inputs[0]) is not clip:
        return None
    for i in (0, 1):
        if _is_scalar_const(add.inputs[1 - i], 3.0) and const_array(add.inputs[i]) is None:
            return add.inputs[i]
    return None


def _single(value: ir.Value, op_type: str) -> ir.Node | None:
    node = only_consumer(value)
    return node if node is not None and node.op_type == op_type else None


class FuseHardSwishPass(ir.passes.InPlacePass):
    """The HardSwish written out by exporters becomes the HardSwish op (TFLite's HARD_SWISH, integer in int8):

    - ``a * Clip(a + 3, 0, 6) * (1/6)`` and ``a * (Clip(a + 3, 0, 6) * (1/6))`` (PaddlePaddle, after
      :class:`DivByConstantPass` made its ``/ 6`` a Mul);
    - ``a * HardSigmoid(a)`` with alpha 1/6 and beta 1/2 (torch below opset 14).
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for node in list(graph):
            if node.graph is None:  # removed by an earlier match
                continue
            found = self._match(node)
            if found is None:
                continue
            a, last, removed = found
            _stand_in(graph, names, last, "HardSwish", [a], f"{last.name}_HardSwish", "hardswish")
            graph.remove(removed, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _match(node: ir.Node) -> tuple[ir.Value, ir.Node, list[ir.Node]] | None:
        """(a, the last node of the pattern, every node of the pattern in order) for a pattern starting at node."""
        if node.op_type == "HardSigmoid":
            if not (
                abs(attr(node, "alpha", 0.2) - 1 / 6) <= 1e-5 and abs(attr(node, "beta", 0.5) - 0.5) <= 1e-6
            ):
                return None
            a = node.inputs[0]
            mul = _single(node.outputs[0], "Mul")
            if mul is None or _other_input(mul, node.outputs[0]) is not a:
                return None
            return a, mul, [mul, node]
        if node.op_type != "Clip":
            return None
        a = _relu6_of_plus_3(node)
        if a is None:
            return None
        add = node.inputs[0].producer()
        first = _single(node.outputs[0], "Mul")
        if first is None:
            return None
        other = _other_input(first, node.outputs[0])
        if other is a:  # a * relu6(a + 3), then * 1/6
            second = _single(first.outputs[0], "Mul")
            if second is None or not _is_scalar_const(_other_input(second, first.outputs[0]), 1 / 6):
                return None
        elif _is_scalar_const(other, 1 / 6):  # relu6(a + 3) * 1/6, then * a
            second = _single(first.outputs[0], "Mul")
            if second is None or _other_input(second, first.outputs[0]) is not a:
                return None
        else:
            return None
        return a, second, [second, first, node, add]


def _per_channel(array: np.ndarray, channels: int, out_rank: int | None) -> np.ndarray | None:
    """A scalar or per-channel constant (channel axis 1 of the output) as one value per channel, else None."""
    if out_rank is None or array.ndim > out_rank:  # a constant of higher rank broadcasts the output up
        return None
    if array.size == 1:
        return np.full(channels, float(array.reshape(-1)[0]), np.float64)
    if _is_channel_vector(array, channels, out_rank, channel_dim=1):
        return array.reshape(-1).astype(np.float64)
    return None


class FoldConvAffinePass(ir.passes.InPlacePass):
    """Conv/Gemm followed by a Mul or an Add of a scalar or per-channel constant (PaddlePaddle's learnable affine
    blocks, ``conv * scale + bias``) folds into the weights and bias: one quantization step fewer per op folded,
    and one op fewer on every target."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for node in list(graph):
            if node.op_type not in ("Mul", "Add") or len(node.inputs) != 2 or node.graph is None:
                continue
            for data_idx in (0, 1):
                data, const = node.inputs[data_idx], node.inputs[1 - data_idx]
                operand = const_array(const)
                src = data.producer() if data is not None else None
                if operand is None or src is None or only_consumer(data) is not node:
                    continue
                found = _conv_like_weight(src)
                if found is None or weight_is_shared(src):
                    continue
                weight, axis = found
                channels = weight.shape[axis]
                out_rank = len(data.shape) if data.shape is not None else None
                values = _per_channel(operand, channels, out_rank)
                bias = _bias_of(src, channels, weight.dtype)
                if values is None or bias is None or not np.all(np.isfinite(values)):
                    continue
                if node.op_type == "Mul":
                    shape = [1] * weight.ndim
                    shape[axis] = channels
                    weight = (weight.astype(np.float64) * values.reshape(shape)).astype(weight.dtype)
                    bias = bias.astype(np.float64) * values
                else:
                    bias = bias.astype(np.float64) + values
                _set_weight_bias(graph, names, src, weight, bias.astype(weight.dtype))
                replace_value(node.outputs[0], src.outputs[0])
                graph.remove(node, safe=True)
                modified = True
                break
        return ir.passes.PassResult(model, modified)


def _quantized_neighbour(node: ir.Node) -> bool:
    """The node reads a DequantizeLinear or feeds a QuantizeLinear: it belongs to an already-quantized model."""
    src = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    feeds_q = any(use.node.op_type == "QuantizeLinear" for use in node.outputs[0].uses())
    return feeds_q or (src is not None and src.op_type == "DequantizeLinear")


def _depthwise_conv(
    graph: ir.Graph, names: NameScope, node: ir.Node, weight: np.ndarray, bias: np.ndarray | None, **attrs
) -> None:
    """``node`` (one input read, one output) replaced by a depthwise Conv of ``weight`` [C, 1, kh, kw]."""
    w = add_initializer(graph, names, f"{node.name or node.op_type}_depthwise_weight", weight)
    inputs = [node.inputs[0], w]
    if bias is not None:
        inputs.append(add_initializer(graph, names, f"{node.name or node.op_type}_depthwise_bias", bias))
    conv = _stand_in(graph, names, node, "Conv", inputs, f"{node.name}_as_Conv", "conv")
    conv.attributes.update(
        {k: ir.AttrInt64s(k, v) if isinstance(v, list) else ir.AttrInt64(k, v) for k, v in attrs.items()}
    )
    graph.remove(node, safe=True)


class StandaloneBatchNormPass(ir.passes.InPlacePass):
    """A BatchNormalization left after FoldBatchNormPass (it follows an Add, a Concat, a ConvTranspose) becomes a
    depthwise 1x1 Conv of its per-channel scale and shift: in int8, one kernel that rounds once
    (DEPTHWISE_CONV_2D, its weights exact per channel) where a Mul and an Add round twice, and one op in float.
    Also 3-D (a 1x1x1 Conv): MONAI's DenseNet121 normalises each dense layer's Concat, and OpenVINO's CPU plugin
    aborts (SIGSEGV in query_model) on a BatchNormalization between DequantizeLinear and QuantizeLinear."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for bn in list(graph):
            if bn.op_type != "BatchNormalization" or any(o.uses() for o in bn.outputs[1:]):
                continue
            params = [const_array(v) for v in bn.inputs[1:5]]
            shape = bn.inputs[0].shape
            rank = len(shape) if shape is not None else 0
            if any(p is None for p in params) or rank not in (4, 5) or _quantized_neighbour(bn):
                continue
            gamma, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
            factor = gamma / np.sqrt(var + attr(bn, "epsilon", 1e-5))
            shift = beta - mean * factor
            channels = factor.shape[0]
            if not (isinstance(shape[1], int) and shape[1] == channels) or not np.all(np.isfinite(factor)):
                continue
            weight = factor.reshape(channels, *[1] * (rank - 1)).astype(np.float32)
            _depthwise_conv(graph, names, bn, weight, shift.astype(np.float32), group=channels)
            modified = True
        return ir.passes.PassResult(model, modified)


class AveragePoolAsConvPass(ir.passes.InPlacePass):
    """An AveragePool of an even-sized window that divides by that size everywhere (no padding, or padding counted)
    becomes a depthwise Conv of weights 1 / size: the same average, which the quantizer gives its own output scale.
    TFLite's int8 AVERAGE_POOL_2D keeps its input's scale, so the mean of an even number of steps lands on .5 ties,
    which it rounds away from zero where QuantizeLinear rounds to even (7.7 % of PP-OCRv4 rec's 3x2-pooled values
    one step apart). An odd-sized window's mean is never a tie: it stays a pool. ``ceil_mode`` counts when it adds
    a partial window; where the windows tile the input it changes nothing (ResNet-D / ResNetV1e shortcuts:
    AvgPool(2, 2, ceil_mode=True) on even sizes, SCRFD's backbone: 11.7 % of those values one step apart)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph, names, modified = model.graph, NameScope(model.graph), False
        for pool in list(graph):
            if pool.op_type != "AveragePool" or pool.domain not in ("", "ai.onnx"):
                continue
            shape = pool.inputs[0].shape
            kernel = list(attr(pool, "kernel_shape", []))
            pads = list(attr(pool, "pads", [0] * 2 * len(kernel)))
            if (
                shape is None
                or len(shape) != 4
                or not isinstance(shape[1], int)
                or len(kernel) != 2
                or int(np.prod(kernel)) % 2
                or attr(pool, "auto_pad", "NOTSET") not in ("NOTSET", "VALID")
                or (attr(pool, "ceil_mode", 0) and not _ceil_changes_nothing(pool, shape, kernel, pads))
                or (any(pads) and not attr(pool, "count_include_pad", 0))
                or _quantized_neighbour(pool)
            ):
                continue
            channels = shape[1]
            weight = np.full((channels, 1, *kernel), 1.0 / float(np.prod(kernel)), np.float32)
            conv_attrs = {"group": channels, "kernel_shape": kernel, "pads": pads}
            for name in ("strides", "dilations"):
                if attr(pool, name, None) is not None:
                    conv_attrs[name] = list(attr(pool, name))
            _depthwise_conv(graph, names, pool, weight, None, **conv_attrs)
            modified = True
        return ir.passes.PassResult(model, modified)


class AveragePoolWindowInsidePass(ir.passes.InPlacePass):
    """An AveragePool whose window is larger than its (unpadded) input on an axis (``ceil_mode``: the one window
    starts at 0 and averages what it covers, the whole axis) gets the axis' size as its window there, and one
    that covers the whole input so becomes a GlobalAveragePool: the same values. ALIGN's EfficientNet pools its
    last 10x10 map with ``AvgPool2d(2560, ceil_mode=True)``; OpenVINO cannot convert a window larger than the
    input ("Conversion is failed for: AveragePool") and TFLite's AVERAGE_POOL_2D has no such window."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for pool in list(model.graph):
            if pool.op_type != "AveragePool" or pool.domain not in ("", "ai.onnx"):
                continue
            shape, kernel = pool.inputs[0].shape, list(attr(pool, "kernel_shape", []))
            rank = len(kernel)
            pads = list(attr(pool, "pads", [0] * 2 * rank))
            if (
                shape is None
                or len(shape) != rank + 2
                or attr(pool, "auto_pad", "NOTSET") not in ("NOTSET", "VALID")
            ):
                continue
            dims = [shape[2 + i] for i in range(rank)]
            dilations = list(attr(pool, "dilations", [1] * rank))
            over = [
                isinstance(d, int) and k > d and not pads[i] and not pads[i + rank] and dilations[i] == 1
                for i, (d, k) in enumerate(zip(dims, kernel, strict=True))
            ]
            if not any(over):
                continue
            window = [d if o else k for d, k, o in zip(dims, kernel, over, strict=True)]
            if all(over):
                model.graph.insert_after(
                    pool, glob := ir.node("GlobalAveragePool", [pool.inputs[0]], name=pool.name)
                )
                glob.outputs[0].shape, glob.outputs[0].type = pool.outputs[0].shape, pool.outputs[0].type
                replace_value(pool.outputs[0], glob.outputs[0])
                model.graph.remove(pool, safe=True)
            else:
                pool.attributes["kernel_shape"] = ir.AttrInt64s("kernel_shape", window)
            modified = True
        return ir.passes.PassResult(model, modified)


def _ceil_changes_nothing(pool: ir.Node, shape, kernel: list[int], pads: list[int]) -> bool:
    """Every spatial axis of the (static) input is tiled by whole windows, so ceil_mode gives floor's output."""
    strides = list(attr(pool, "strides", [1] * len(kernel)))
    dilations = list(attr(pool, "dilations", [1] * len(kernel)))
    dims = [shape[2 + i] for i in range(len(kernel))]
    if not all(isinstance(d, int) for d in dims):
        return False
    rank = len(kernel)
    return all(
        (d + pads[i] + pads[i + rank] - ((k - 1) * dl + 1)) % st == 0
        for i, (d, k, st, dl) in enumerate(zip(dims, kernel, strides, dilations, strict=True))
    )


def weight_is_shared(node: ir.Node) -> bool:
    """The node's weight or bias initializer is read by another node too (folding would change that one)."""
    return any(v is not None and len(list(v.uses())) > 1 for v in node.inputs[1:3])


def _minus_inf_pads(pad: ir.Node, rank: int) -> list[int] | None:
    """The spatial pads of a constant Pad by -inf (timm's MaxPool2dSame: TF's "same" max pooling), else None."""
    if (
        pad.op_type != "Pad"
        or pad.domain not in ("", "ai.onnx")
        or attr(pad, "mode", "constant") != "constant"
    ):
        return None
    if len(pad.inputs) > 3 and pad.inputs[3] is not None:  # Pad-18 axes
        return None
    pads = const_array(pad.inputs[1]) if len(pad.inputs) > 1 else np.asarray(attr(pad, "pads", []))
    value = const_array(pad.inputs[2]) if len(pad.inputs) > 2 and pad.inputs[2] is not None else None
    if value is None and len(pad.inputs) <= 1:
        value = np.asarray(attr(pad, "value", 0.0))
    if pads is None or value is None or value.size != 1 or not np.isneginf(float(value.reshape(-1)[0])):
        return None
    pads = [int(p) for p in pads.reshape(-1)]
    if len(pads) != 2 * rank or min(pads) < 0 or any(pads[i] or pads[rank + i] for i in (0, 1)):
        return None
    return pads[2:rank] + pads[rank + 2 :]


class PadIntoMaxPoolPass(ir.passes.InPlacePass):
    """A constant Pad by -inf read only by a MaxPool becomes the MaxPool's own pads, which it ignores the same way.
    timm's MaxPool2dSame (EfficientDet's tf_ BiFPN downsampling) pads by -inf first: calibration saw -inf in the
    padded tensor, and its scale and zero point came out NaN (a crash); the integer kernels have no -inf."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for pool in list(model.graph):
            if pool.op_type != "MaxPool" or pool.domain not in ("", "ai.onnx"):
                continue
            pad = pool.inputs[0].producer()
            kernel = list(attr(pool, "kernel_shape", []))
            if (
                pad is None
                or only_consumer(pool.inputs[0]) is not pool
                or attr(pool, "auto_pad", "NOTSET") != "NOTSET"
            ):
                continue
            extra = _minus_inf_pads(pad, len(kernel) + 2)
            if extra is None:
                continue
            own = list(attr(pool, "pads", [0] * 2 * len(kernel)))
            pool.attributes["pads"] = ir.AttrInt64s("pads", [a + b for a, b in zip(own, extra, strict=True)])
            pool.replace_input_with(0, pad.inputs[0])
            modified = True
        return ir.passes.PassResult(model, modified)
