"""Per-op quantization rules: which inputs are quantized, which are per-axis weights, which tensors must share
one scale, which outputs have fixed ranges, which ops absorb a following activation.

They follow TFLite's own rules (``tensorflow/lite/tools/optimize/operator_property.cc``), mapped onto the ONNX op
that each TFLite kernel implements, so that the TFLite target can keep every scale exactly:

- CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV: input 0 per-tensor, weights per output channel
  symmetric int8, bias int32 with scale = input_scale * weight_scale; fused activation.
- ADD / SUB / MUL: every input per-tensor with its own scale; fused activation.
- MAX_POOL_2D / AVERAGE_POOL_2D / RESHAPE / SQUEEZE / EXPAND_DIMS / TRANSPOSE / CONCATENATION / PAD / SLICE /
  SPLIT / GATHER / RESIZE_* / MAXIMUM / MINIMUM / REDUCE_MAX:
  ``restrict_same_scale``: inputs and output share one scale.
- SOFTMAX and LOGISTIC: output scale 1/256, zero point -128 (int8); TANH: 1/128, 0; LOG_SOFTMAX: 16/256, 127.
- MEAN, RELU, LEAKY_RELU, PRELU, HARD_SWISH: own output scale.

Ops not listed here have no integer kernel the targets can use; they stay float (fed by DequantizeLinear).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx_ir as ir
from edgekit.irutil import attr, const_array


@dataclass(frozen=True)
class OpRule:
    """How one ONNX op is quantized."""

    #: Indices of float data inputs that carry quantized activations (or per-tensor quantized constants).
    inputs: tuple[int, ...] = (0,)
    #: Index of the weight input (per-channel symmetric int8), if any.
    weight: int | None = None
    #: Index of the bias input (int32, scale = input scale x weight scale), if any.
    bias: int | None = None
    #: Inputs and output share one scale (TFLite's restrict_same_scale).
    same_scale: bool = False
    #: Output range fixed by the integer kernel: (scale, int8 zero point).
    fixed_output: tuple[float, int] | None = None
    #: A following Relu/Clip is fused: no Q/DQ between them.
    fuses_activation: bool = False
    #: Every float input is a data input (variadic ops such as Concat).
    all_inputs: bool = False


_RULES: dict[str, OpRule] = {}
_WEIGHT_AXIS: dict[str, Callable[[ir.Node], int]] = {}


def register(
    op_types: str | tuple[str, ...], rule: OpRule, weight_axis: Callable[[ir.Node], int] | None = None
):
    for op_type in (op_types,) if isinstance(op_types, str) else op_types:
        if op_type in _RULES:
            raise ValueError(f"a quantization rule for {op_type} is already registered")
        _RULES[op_type] = rule
        if weight_axis is not None:
            _WEIGHT_AXIS[op_type] = weight_axis


def supported_ops() -> list[str]:
    return sorted(_RULES)


def rule_for(node: ir.Node) -> OpRule | None:
    """The rule for ``node``, or None when it stays float. MatMul has a weight only when input 1 is constant."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "MatMul":
        w = const_array(node.inputs[1])
        if w is not None and w.ndim == 2:
            return _MATMUL_WEIGHT
        return _RULES["MatMul"]
    # Only a Clip with constant bounds has an integer kernel (RELU6 / RELU_N1_TO_1 / a requantize).
    if node.op_type == "Clip" and any(v is not None and const_array(v) is None for v in node.inputs[1:]):
        return None
    return _RULES.get(node.op_type)


def weight_axis(node: ir.Node) -> int:
    """The output-channel axis of ``node``'s weight: where the per-channel scales go."""
    return _WEIGHT_AXIS[node.op_type](node)


_CONV = OpRule(inputs=(0,), weight=1, bias=2, fuses_activation=True)
_SAME = OpRule(inputs=(0,), same_scale=True)
_ELEMENTWISE = OpRule(inputs=(0, 1), fuses_activation=True)
_OWN = OpRule(inputs=(0,))
_MATMUL_WEIGHT = OpRule(inputs=(0,), weight=1, fuses_activation=True)

register("Conv", _CONV, lambda n: 0)
# ONNX ConvTranspose weights are [C_in, C_out / group, kH, kW]: output channels on axis 1.
register("ConvTranspose", _CONV, lambda n: 1)
register("Gemm", _CONV, lambda n: 0 if attr(n, "transB", 0) else 1)
register("MatMul", OpRule(inputs=(0, 1)), lambda n: 1)
register(("Add", "Sub", "Mul"), _ELEMENTWISE)
register(("Relu", "LeakyRelu", "HardSwish", "HardSigmoid", "GlobalAveragePool", "ReduceMean"), _OWN)
register("Clip", _OWN)
register("PRelu", OpRule(inputs=(0, 1)))
register(
    (
        "MaxPool",
        "AveragePool",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Pad",
        "Slice",
        "Split",
        "Gather",
        "Resize",
        "ReduceMax",
    ),
    _SAME,
)
register(("Concat", "Max", "Min"), OpRule(same_scale=True, all_inputs=True))
register("Softmax", OpRule(inputs=(0,), fixed_output=(1.0 / 256.0, -128)))
register("Sigmoid", OpRule(inputs=(0,), fixed_output=(1.0 / 256.0, -128)))
register("Tanh", OpRule(inputs=(0,), fixed_output=(1.0 / 128.0, 0)))
register("LogSoftmax", OpRule(inputs=(0,), fixed_output=(16.0 / 256.0, 127)))

#: Activations that fuse into the op before them when that op ``fuses_activation``.
FUSABLE_ACTIVATIONS = frozenset({"Relu", "Clip"})

#: Why an op with no rule stays float (for the report).
FLOAT_REASON = "no integer kernel in the targets' quantized op set (TFLite operator_property)"


def data_inputs(node: ir.Node, rule: OpRule) -> list[int]:
    """Indices of the inputs of ``node`` that carry quantized data (float, present, not weight or bias)."""
    indices = range(len(node.inputs)) if rule.all_inputs else rule.inputs
    out = []
    for i in indices:
        if i >= len(node.inputs) or i in (rule.weight, rule.bias):
            continue
        v = node.inputs[i]
        if v is None or v.dtype not in (ir.DataType.FLOAT, None):
            continue
        out.append(i)
    return out
