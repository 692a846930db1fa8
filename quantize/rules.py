"""Per-op quantization rules: which inputs are quantized, which are per-axis weights, which tensors must share
one scale, which outputs have fixed ranges, which ops absorb a following activation.

Each ONNX op's rule names the TFLite integer kernels it becomes; :data:`TFLITE_KERNELS` holds what each kernel
requires, read from its source (``tensorflow/lite/kernels/<file>.cc``, the ``TF_LITE_ENSURE*`` checks of its
``Prepare``/``Eval`` and what its arithmetic assumes), following TFLite's own quantizer
(``tensorflow/lite/tools/optimize/operator_property.cc``), so that the quantizer never writes a QDQ model a
TFLite kernel refuses and the TFLite target keeps every scale exactly:

- CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / TRANSPOSE_CONV: input 0 per-tensor, weights per output channel
  symmetric int8 (zero point 0), bias int32 with scale = input_scale * weight_scale; fused activation.
- ADD / SUB / MUL: every input per-tensor with its own scale; fused activation.
- MAX_POOL_2D / AVERAGE_POOL_2D / RESHAPE / SQUEEZE / EXPAND_DIMS / TRANSPOSE / CONCATENATION / PAD / SLICE /
  SPLIT / GATHER / RESIZE_* / MAXIMUM / MINIMUM / REDUCE_MAX: inputs and output share one scale and zero point
  (PADV2: its pad value too).
- SOFTMAX and LOGISTIC: output scale 1/256, zero point -128 (int8); TANH: 1/128, 0; LOG_SOFTMAX: 16/256, 127.
- HARD_SWISH: output scale above input scale / 128.
- MEAN, RELU, LEAKY_RELU, PRELU: own output scale.

The zero points are int8's; uint8 activations use the same scales with zero points 128 higher.

16x8 (``int16x8`` layers: int16 activations, int8 weights, int64 bias): ``Kernel.int16`` says whether the kernel
has that mode in LiteRT and what it checks; every int16 tensor is symmetric (zero point 0); SOFTMAX, LOGISTIC and
TANH fix their int16 output at scale 1/32768, zero point 0 (``fixed_output16``). Each declared 16x8 kernel is run in
LiteRT by ``tests/tflite/test_16x8_kernels.py``; PRELU (runs int16 but miscomputes), RELU_N1_TO_1, HARD_SWISH and
LOG_SOFTMAX (refuse int16) have none.
Ops not listed here have no integer kernel the targets can use; they stay float (fed by DequantizeLinear).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import attr, const_array


@dataclass(frozen=True)
class Kernel:
    """What one TFLite integer kernel requires of the quantization parameters around it.

    Read from the kernel's source under ``tensorflow/lite/kernels/`` (``source``): the ``TF_LITE_ENSURE*`` checks
    of its ``Prepare``/``Eval`` (LiteRT refuses the model, or aborts, when they fail) and what its arithmetic
    assumes without checking (it then computes wrong values). Zero points are given for int8; uint8 ones are
    128 higher (the uint8 kernels use the same scales).
    """

    source: str
    #: Every int8 data input and the output share one scale and zero point.
    same_scale: bool = False
    #: The int8 output's required (scale, zero point).
    fixed_output: tuple[float, int] | None = None
    #: The output scale must exceed the input scale times this (an output multiplier the kernel needs below 1).
    min_output_scale_ratio: float | None = None
    #: Weights (input 1) symmetric int8 (zero point 0), one scale per output channel or one for the tensor; the
    #: int32 bias has scale input scale x weight scale and zero point 0.
    symmetric_weights: bool = False
    #: With ``symmetric_weights``: the output-channel axis of the filter in TFLite's layout (where per-channel
    #: scales go), the index of the bias input and of the data input.
    filter_axis: int | None = None
    bias_input: int | None = None
    data_input: int = 0
    #: Constant int8 inputs are symmetric (zero point 0).
    symmetric_constants: bool = False
    #: A same-scale kernel that averages its input: a scale change goes after it (requantized), not before.
    averages: bool = False
    #: A data-movement op converters put between a DequantizeLinear and the op it feeds (layout transposes,
    #: explicit padding): the converter's integer pass runs it on the int8 values instead (same scale both
    #: sides). ``hoist_quantize``: likewise between an op and its QuantizeLinear (the QUANTIZE moves before it).
    sink_dequantize: bool = False
    hoist_quantize: bool = False
    #: The kernel takes a fused activation.
    fused_activation: bool = False
    #: The general int8 path rescales each input by its scale / twice the larger input scale (float32) and the
    #: sum by that / (2^20 x output scale), the general int16 path (``pot_scale_int16`` false) by that / (2^15 x
    #: output scale): QuantizeMultiplierSmallerThanOneExp aborts (TFLITE_CHECK, no message) unless each is a
    #: positive normal float below 1 (:func:`rescaled_inputs_fit`). Else the op stays float.
    rescales_inputs: bool = False
    #: The ONNX op whose 256-entry table (``edgekit.core.lut``) the converter writes instead of this kernel
    #: between a DEQUANTIZE and a QUANTIZE: the kernel rounds some levels differently from DQ -> op -> Q (with
    #: ``fixed_output``: only at another output scale, where the kernel's output would be requantized).
    table: str | None = None
    #: The TFLite op's options passed to the table's function as the ONNX attributes of the same name.
    table_attributes: tuple[str, ...] = ()
    #: What the kernel checks, in words (docs and test names).
    checks: str = ""
    #: The kernel's 16x8 mode (int16 activations, int8 weights, int64 bias; ``--precision int16x8``): None when
    #: it has none (the op then stays float in an int16x8 layer), else what it checks beyond the int8 mode's
    #: requirements, in words. Every int16 tensor is symmetric (zero point 0): TFLite's 16x8 kernels check it.
    int16: str | None = None
    #: The int16 output's required (scale, zero point) in 16x8 mode.
    fixed_output16: tuple[float, int] | None = None

    def __post_init__(self) -> None:
        if self.symmetric_weights != (self.filter_axis is not None and self.bias_input is not None):
            raise ValueError(
                f"{self.source}: symmetric weights need filter_axis and bias_input, and only they"
            )


_SAME_CHECKED = "int8 inputs and output: same scale and zero point (TF_LITE_ENSURE_EQ)"
_SAME_ASSUMED = (
    "moves int8 values unchanged: the output must have the input's scale and zero point (not checked)"
)
_ZP0 = "input and output zero points 0"
_RESCALES = (
    "own scales; input scale / (2 x the larger input scale) a normal float32 and (2 x the larger input scale) / "
    "(2^20 x output scale; int16: 2^15) below 1 (Prepare: QuantizeMultiplierSmallerThanOneExp aborts otherwise)"
)
_CONV16 = (
    "input and output zero points 0; filter int8 symmetric; bias int64 (or int32) with scale input x filter "
    "(conv.cc / depthwise_conv.cc / fully_connected.cc / transpose_conv.cc: the kTfLiteInt16 branch)"
)
_CONV_CHECKS = (
    "filter zero points all 0; one filter scale per output channel or one; bias int32 with scale input x filter "
    "(kernel_util.cc PopulateConvolutionQuantizationParams)"
)

#: The TFLite integer kernels the converter emits, keyed by builtin op name.
TFLITE_KERNELS: dict[str, Kernel] = {
    # filters: CONV_2D [O, H, W, I], DEPTHWISE_CONV_2D [1, H, W, O], FULLY_CONNECTED [O, I],
    # TRANSPOSE_CONV [O, H, W, I] with inputs (output shape, filter, data, bias)
    "CONV_2D": Kernel(
        "conv.cc",
        symmetric_weights=True,
        filter_axis=0,
        bias_input=2,
        fused_activation=True,
        checks=_CONV_CHECKS,
        int16=_CONV16,
    ),
    "DEPTHWISE_CONV_2D": Kernel(
        "depthwise_conv.cc",
        symmetric_weights=True,
        filter_axis=3,
        bias_input=2,
        fused_activation=True,
        checks=_CONV_CHECKS,
        int16=_CONV16,
    ),
    "FULLY_CONNECTED": Kernel(
        "fully_connected.cc",
        symmetric_weights=True,
        filter_axis=0,
        bias_input=2,
        fused_activation=True,
        checks=_CONV_CHECKS,
        int16=_CONV16,
    ),
    "TRANSPOSE_CONV": Kernel(
        "transpose_conv.cc",
        symmetric_weights=True,
        filter_axis=0,
        bias_input=3,
        data_input=2,
        checks=_CONV_CHECKS,
        int16=_CONV16,
    ),
    "BATCH_MATMUL": Kernel(
        "batch_matmul.cc",
        symmetric_constants=True,
        checks="int8 zero points allowed (int16: 0); constant operands are made symmetric",
        int16=_ZP0,
    ),
    "ADD": Kernel(
        "add.cc",
        fused_activation=True,
        rescales_inputs=True,
        checks=_RESCALES + " (int16: zero points 0)",
        int16=_ZP0,
    ),
    "SUB": Kernel(
        "sub.cc",
        fused_activation=True,
        rescales_inputs=True,
        checks=_RESCALES + " (int16: zero points 0)",
        int16=_ZP0,
    ),
    "MUL": Kernel("mul.cc", fused_activation=True, checks="own scales (int16: zero points 0)", int16=_ZP0),
    "MAX_POOL_2D": Kernel(
        "pooling.cc",
        same_scale=True,
        fused_activation=True,
        checks="same scale and zero point (DCHECK)",
        int16=_ZP0,
    ),
    "AVERAGE_POOL_2D": Kernel(
        "pooling.cc",
        same_scale=True,
        averages=True,
        fused_activation=True,
        checks="same scale and zero point (DCHECK)",
        int16=_ZP0,
    ),
    "RESHAPE": Kernel(
        "reshape.cc",
        same_scale=True,
        sink_dequantize=True,
        hoist_quantize=True,
        checks=_SAME_ASSUMED,
        int16=_ZP0,
    ),
    "SQUEEZE": Kernel("squeeze.cc", same_scale=True, checks=_SAME_ASSUMED),
    "EXPAND_DIMS": Kernel("expand_dims.cc", same_scale=True, checks=_SAME_ASSUMED),
    "TRANSPOSE": Kernel(
        "transpose.cc",
        same_scale=True,
        sink_dequantize=True,
        hoist_quantize=True,
        checks=_SAME_ASSUMED,
        int16=_ZP0,
    ),
    "GATHER": Kernel("gather.cc", same_scale=True, sink_dequantize=True, checks=_SAME_ASSUMED, int16=_ZP0),
    # hoist_quantize: the crop after a TRANSPOSE_CONV with pads (ONNX ConvTranspose's pads / output_padding);
    # sink_dequantize: the crop before a PAD / MIRROR_PAD / GATHER (ONNX Pad's negative pads)
    "SLICE": Kernel(
        "slice.cc",
        same_scale=True,
        sink_dequantize=True,
        hoist_quantize=True,
        checks=_SAME_ASSUMED,
        int16=_ZP0,
    ),
    "STRIDED_SLICE": Kernel("strided_slice.cc", same_scale=True, checks=_SAME_ASSUMED, int16=_ZP0),
    "SPLIT": Kernel("split.cc", same_scale=True, checks=_SAME_ASSUMED),
    "SPLIT_V": Kernel("split_v.cc", same_scale=True, checks=_SAME_ASSUMED, int16=_ZP0),
    "TILE": Kernel("tile.cc", same_scale=True, checks=_SAME_ASSUMED),
    "BROADCAST_TO": Kernel("broadcast_to.cc", same_scale=True, checks=_SAME_ASSUMED),
    "MIRROR_PAD": Kernel("mirror_pad.cc", same_scale=True, checks=_SAME_ASSUMED, int16=_ZP0),
    "PAD": Kernel(
        "pad.cc",
        same_scale=True,
        sink_dequantize=True,
        checks=_SAME_ASSUMED + "; pads with the output zero point",
        int16=_ZP0,
    ),
    "PADV2": Kernel(
        "pad.cc",
        same_scale=True,
        sink_dequantize=True,
        checks=_SAME_ASSUMED
        + "; the pad value has the output's scale and zero point (TF_LITE_ENSURE_EQ in EvalInt)",
        int16=_ZP0,
    ),
    "CONCATENATION": Kernel(
        "concatenation.cc",
        same_scale=True,
        checks=_SAME_CHECKED + "; no fused activation (ignored or refused)",
        int16=_ZP0,
    ),
    "RESIZE_BILINEAR": Kernel("resize_bilinear.cc", same_scale=True, checks=_SAME_ASSUMED, int16=_ZP0),
    "RESIZE_NEAREST_NEIGHBOR": Kernel(
        "resize_nearest_neighbor.cc", same_scale=True, checks=_SAME_ASSUMED, int16=_ZP0
    ),
    "MAXIMUM": Kernel("maximum_minimum.cc", same_scale=True, checks=_SAME_ASSUMED, int16=_ZP0),
    "MINIMUM": Kernel("maximum_minimum.cc", same_scale=True, checks=_SAME_ASSUMED, int16=_ZP0),
    "REDUCE_MAX": Kernel("reduce.cc", same_scale=True, checks=_SAME_CHECKED + " (EvalType)", int16=_ZP0),
    "REDUCE_MIN": Kernel("reduce.cc", same_scale=True, checks=_SAME_CHECKED + " (EvalType)"),
    "MEAN": Kernel("reduce.cc", checks="own scales (requantizes the mean)", int16=_ZP0),
    "SUM": Kernel("reduce.cc", checks="own scales (requantizes the sum)"),
    "SOFTMAX": Kernel(
        "activations.cc",
        fixed_output=(1.0 / 256.0, -128),
        checks="output zero point -128, scale 1/256 (SoftmaxPrepare)",
        int16="input and output zero points 0; output scale 1/32768 (SoftmaxPrepare)",
        fixed_output16=(1.0 / 32768.0, 0),
    ),
    "LOGISTIC": Kernel(
        "activations.cc",
        fixed_output=(1.0 / 256.0, -128),
        checks="output zero point -128, scale == 1/256 (SigmoidPrepare)",
        int16="output scale 1/32768, zero point 0 (SigmoidPrepare)",
        fixed_output16=(1.0 / 32768.0, 0),
        # At another output scale (another quantizer's QDQ), LOGISTIC at 1/256 then a requantize rounds twice: the
        # table is exact (YOLOv8n's SiLUs quantized by onnxruntime: cosine 0.9986 -> 0.99995 on the boxes).
        table="Sigmoid",
    ),
    "TANH": Kernel(
        "activations.cc",
        fixed_output=(1.0 / 128.0, 0),
        checks="output zero point 0, scale 1/128 (TanhPrepare)",
        int16="output scale 1/32768, zero point 0 (TanhPrepare)",
        fixed_output16=(1.0 / 32768.0, 0),
        table="Tanh",
    ),
    "LOG_SOFTMAX": Kernel(
        "activations.cc",
        fixed_output=(16.0 / 256.0, 127),
        checks="output scale 16/256, zero point 127 (LogSoftmaxPrepare)",
    ),
    "HARD_SWISH": Kernel(
        "activations.cc",
        min_output_scale_ratio=1.0 / 128.0,
        checks="output multiplier (input scale / 128) / output scale below 1 (HardSwishPrepare: exponent <= 0)",
        # 16-bit fixed point: 0.3 % of MobileNetV3-Large's values one step off the QDQ model's (amplified to a
        # cosine of 0.992 on the logits); the table is exact.
        table="HardSwish",
    ),
    "RELU": Kernel("activations.cc", checks="own scales (ReluPrepare requantizes)", int16=_ZP0),
    "RELU6": Kernel("activations.cc", checks="own scales (ReluPrepare requantizes)"),
    "RELU_N1_TO_1": Kernel("activations.cc", checks="own scales (ReluPrepare requantizes)"),
    "LEAKY_RELU": Kernel(
        "activations.cc",
        checks="own scales (LeakyReluPrepare)",
        int16=_ZP0,
        # XNNPACK's int8 kernel multiplies with 8 fractional bits: 3 % of NanoDet-Plus' stem outputs one step off
        # the QDQ model's, amplified to a cosine of 0.93 on its scores; the table is exact.
        table="LeakyRelu",
        table_attributes=("alpha",),
    ),
    "PRELU": Kernel(
        "activations.cc",
        checks="own scales (PreluPrepare)",
        # Its negative side is MultiplyByQuantizedMultiplier(x * alpha, input x alpha / output scale), which
        # rounds twice: first to 2^-shift of a step (1/64 at MTCNN P-Net's 0.008), then half away from zero, so
        # values within 1/128 of a half step go one step off (0.7 % of P-Net's last PReLU, cosine 0.9983 on its
        # boxes at 240x320). One table per slope value (channel) is exact.
        table="PRelu",
    ),
    "GELU": Kernel("gelu.cc", checks="own scales (lookup table)"),
}


#: add.cc's ``left_shift`` of the general path: the inputs are shifted left by it before they are rescaled.
RESCALE_LEFT_SHIFT = {"int8": 20, "int16": 15}


def rescaled_inputs_fit(input_scales: list[float], output_scale: float, activations: str = "int8") -> bool:
    """Whether a ``rescales_inputs`` kernel (ADD, SUB) can take these ``activations`` (int8 or int16) scales: its
    multipliers, computed in float32 as add.cc does, are positive normal floats below 1 (e.g. an attention mask
    quantized at scale 1e36 beside scores at 0.01 gives an input multiplier of 5e-39, flushed to 0; an int16
    all-zero bias at scale 1.0 added to an output at scale 1.7e-5 gives an output multiplier of 3.6: LiteRT
    aborts in Prepare)."""
    scales = np.asarray(input_scales, np.float32)
    shift = RESCALE_LEFT_SHIFT[activations]
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        twice_max = np.float32(2) * scales.max()
        multipliers = scales / twice_max
        out = np.float64(twice_max) / (2.0**shift * np.float64(np.float32(output_scale)))
    tiny = np.finfo(np.float32).tiny
    return bool(
        np.isfinite(twice_max) and np.all(multipliers >= tiny) and np.all(multipliers < 1) and 0 < out < 1
    )


@dataclass(frozen=True)
class OpRule:
    """How one ONNX op is quantized; ``kernels`` are the TFLite integer kernels it becomes, whose requirements
    (:data:`TFLITE_KERNELS`) give its shared and fixed scales."""

    #: The TFLite kernels the op is converted to (one of them, depending on its attributes).
    kernels: tuple[str, ...]
    #: Indices of float data inputs that carry quantized activations (or per-tensor quantized constants).
    inputs: tuple[int, ...] = (0,)
    #: Index of the weight input (per-channel symmetric int8), if any.
    weight: int | None = None
    #: Index of the bias input (int32, scale = input scale x weight scale), if any.
    bias: int | None = None
    #: A following Relu/Clip is fused: no Q/DQ between them.
    fuses_activation: bool = False
    #: Every float input is a data input (variadic ops such as Concat).
    all_inputs: bool = False

    def __post_init__(self) -> None:
        found = [TFLITE_KERNELS[k] for k in self.kernels]
        if (
            len({(k.same_scale, k.fixed_output, k.fixed_output16, k.min_output_scale_ratio) for k in found})
            != 1
        ):
            raise ValueError(f"kernels {self.kernels} disagree on shared or fixed scales")

    @property
    def kernel(self) -> Kernel:
        return TFLITE_KERNELS[self.kernels[0]]

    @property
    def same_scale(self) -> bool:
        """Inputs and output share one scale (TFLite's restrict_same_scale)."""
        return self.kernel.same_scale

    @property
    def fixed_output(self) -> tuple[float, int] | None:
        """Output range fixed by the integer kernel: (scale, int8 zero point)."""
        return self.kernel.fixed_output

    @property
    def int16(self) -> bool:
        """Every kernel the op may become has a 16x8 mode (``int16x8`` layers; else the op stays float)."""
        return all(TFLITE_KERNELS[k].int16 is not None for k in self.kernels)

    @property
    def fixed_output16(self) -> tuple[float, int] | None:
        """Output range fixed by the 16x8 kernel: (scale, zero point 0)."""
        return self.kernel.fixed_output16

    @property
    def min_output_scale_ratio(self) -> float | None:
        """The output scale must exceed the (first) input's scale times this."""
        return self.kernel.min_output_scale_ratio


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
    # Only a two-operand Einsum is a product (BATCH_MATMUL); one operand is a transpose or a sum.
    if node.op_type == "Einsum" and len(node.inputs) != 2:
        return None
    # Only a Clip with constant bounds has an integer kernel (RELU6 / RELU_N1_TO_1 / a requantize).
    if node.op_type == "Clip" and any(v is not None and const_array(v) is None for v in node.inputs[1:]):
        return None
    return _RULES.get(node.op_type)


def weight_axis(node: ir.Node) -> int:
    """The output-channel axis of ``node``'s weight: where the per-channel scales go."""
    return _WEIGHT_AXIS[node.op_type](node)


_CONV = ("CONV_2D", "DEPTHWISE_CONV_2D")
_DENSE = ("FULLY_CONNECTED", "BATCH_MATMUL")
_MATMUL_WEIGHT = OpRule(_DENSE, inputs=(0,), weight=1, fuses_activation=True)


def _unary(*kernels: str) -> OpRule:
    return OpRule(kernels, inputs=(0,))


register("Conv", OpRule(_CONV, weight=1, bias=2, fuses_activation=True), lambda n: 0)
# ONNX ConvTranspose weights are [C_in, C_out / group, kH, kW]: output channels on axis 1.
register("ConvTranspose", OpRule(("TRANSPOSE_CONV",), weight=1, bias=2, fuses_activation=True), lambda n: 1)
register(
    "Gemm",
    OpRule(("FULLY_CONNECTED",), weight=1, bias=2, fuses_activation=True),
    lambda n: 0 if attr(n, "transB", 0) else 1,
)
register("MatMul", OpRule(_DENSE, inputs=(0, 1)), lambda n: 1)
# The converter lowers a two-operand Einsum to one BATCH_MATMUL between data-movement ops (TRANSPOSE, RESHAPE).
register("Einsum", OpRule(("BATCH_MATMUL",), inputs=(0, 1)))
for _op, _kernel in (("Add", "ADD"), ("Sub", "SUB"), ("Mul", "MUL")):
    register(_op, OpRule((_kernel,), inputs=(0, 1), fuses_activation=True))
register("Relu", _unary("RELU"))
register("LeakyRelu", _unary("LEAKY_RELU"))
register("HardSwish", _unary("HARD_SWISH"))
# TFLite has no HARD_SIGMOID: int8 MUL then ADD, whose saturation to the output range is the clip to [0, 1].
register("HardSigmoid", _unary("MUL", "ADD"))
register(("GlobalAveragePool", "ReduceMean"), _unary("MEAN"))
# Other constant bounds become MAXIMUM/MINIMUM, with a requantize to the Clip's output scale in front.
register("Clip", _unary("RELU6", "RELU_N1_TO_1", "RELU"))
register("PRelu", OpRule(("PRELU",), inputs=(0, 1)))
register("MaxPool", _unary("MAX_POOL_2D", "PAD", "PADV2"))
register("AveragePool", _unary("AVERAGE_POOL_2D", "PAD"))
register(("Reshape", "Flatten", "Squeeze", "Unsqueeze"), _unary("RESHAPE"))
register("Transpose", _unary("TRANSPOSE"))
register("Pad", _unary("PAD", "PADV2", "MIRROR_PAD"))
register("Slice", _unary("SLICE", "STRIDED_SLICE"))
register("Split", _unary("SPLIT_V"))
register("Gather", _unary("GATHER"))
register("Resize", _unary("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"))
register("ReduceMax", _unary("REDUCE_MAX"))
register("Concat", OpRule(("CONCATENATION",), all_inputs=True))
register(("Max", "Min"), OpRule(("MAXIMUM", "MINIMUM"), all_inputs=True))
register("Softmax", _unary("SOFTMAX"))
register("Sigmoid", _unary("LOGISTIC"))
register("Tanh", _unary("TANH"))
register("LogSoftmax", _unary("LOG_SOFTMAX"))


def _hard_sigmoid_bounds(node: ir.Node) -> tuple[float, float]:
    alpha, beta = float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))
    if alpha <= 0:
        return (-np.inf, np.inf)
    return (-beta / alpha, (1.0 - beta) / alpha)


#: Ops whose output stops changing once their data input (input 0) leaves [lo, hi]: node -> (lo, hi). A tensor
#: that only such ops read needs no int8 levels beyond those bounds (HardSwish is 0 below -3, HardSigmoid 0 below
#: -beta/alpha and 1 above (1 - beta)/alpha, Relu 0 below 0): its grid saturates there instead, and every reader
#: computes the same values (PP-LCNetV3's Conv -> HardSwish outputs span [-211, 184]: half the grid went to
#: values HardSwish maps to 0).
SATURATING_INPUTS: dict[str, Callable[[ir.Node], tuple[float, float]]] = {
    "HardSwish": lambda node: (-3.0, np.inf),
    "HardSigmoid": _hard_sigmoid_bounds,
    "Relu": lambda node: (0.0, np.inf),
}


def saturation_bounds(value: ir.Value) -> tuple[float, float] | None:
    """The [lo, hi] outside which none of ``value``'s readers sees a difference (the union of their
    :data:`SATURATING_INPUTS` bounds), or None when a reader is another op, reads it as another input, or the
    value is a model output."""
    if value.is_graph_output():
        return None
    bounds = []
    for node, index in value.uses():
        bound = SATURATING_INPUTS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        if bound is None or index != 0:
            return None
        bounds.append(bound(node))
    if not bounds:
        return None
    return min(b[0] for b in bounds), max(b[1] for b in bounds)


#: Activations that fuse into the op before them when that op ``fuses_activation``.
FUSABLE_ACTIVATIONS = frozenset({"Relu", "Clip"})

#: Why an op of an ``int16x8`` layer whose TFLite kernels have no 16x8 mode stays float (for the report).
NO_INT16_REASON = "no 16x8 (int16 activations) kernel in TFLite for this op: kept float in an int16x8 layer"

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
