"""Converters for element-wise ops: arithmetic with broadcasting, activations, Erf/Gelu."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb

_BINARY = {"Add": "ADD", "Sub": "SUB", "Mul": "MUL", "Div": "DIV", "Pow": "POW"}
_UNARY = {
    "Relu": ("RELU", None),
    "Sigmoid": ("LOGISTIC", None),
    "Tanh": ("TANH", None),
    "Exp": ("EXP", fb.ExpOptionsT),
    "Log": ("LOG", None),
    "Sqrt": ("SQRT", None),
    "Abs": ("ABS", fb.AbsOptionsT),
    "Neg": ("NEG", fb.NegOptionsT),
    "HardSwish": ("HARD_SWISH", fb.HardSwishOptionsT),
    "Floor": ("FLOOR", None),
    "Ceil": ("CEIL", None),
    "Sin": ("SIN", None),
    "Cos": ("COS", fb.CosOptionsT),
}


def _options(cls: type | None) -> object | None:
    return cls() if cls is not None else None


_BINARY_OPTIONS = {
    "ADD": fb.AddOptionsT,
    "SUB": fb.SubOptionsT,
    "MUL": fb.MulOptionsT,
    "DIV": fb.DivOptionsT,
    "POW": fb.PowOptionsT,
    "MAXIMUM": fb.MaximumMinimumOptionsT,
    "MINIMUM": fb.MaximumMinimumOptionsT,
}


def binary(ctx: Context, code: str, a: Tensor, b: Tensor, out: Tensor) -> Tensor:
    """Emit a broadcasting binary op."""
    ctx.op(code, [a, b], [out], _options(_BINARY_OPTIONS.get(code)))
    return out


def _scalar(ctx: Context, value: float, dtype: np.dtype = np.float32) -> Tensor:
    return ctx.graph.const("c", np.array(value, dtype=dtype))


def _register_binary(op_type: str, code: str) -> None:
    def convert(ctx: Context, node: ir.Node) -> None:
        a_value, b_value = node.inputs
        b = ctx.const(b_value)
        y = ctx.output(node.outputs[0])
        x = ctx.tensor(a_value)
        if code == "POW" and b is not None and b.size == 1 and float(b.reshape(-1)[0]) in (0.5, 1.0, 2.0):
            exponent = float(b.reshape(-1)[0])
            if exponent == 2.0:
                ctx.op("MUL", [x, x], [y], fb.MulOptionsT())
            elif exponent == 0.5:
                ctx.op("SQRT", [x], [y])
            else:
                ctx.reshape(x, y.shape, out=y)
            return
        other = ctx.tensor(b_value)
        if code == "POW" and b is not None and other.dtype != x.dtype:  # ONNX allows an integer exponent
            other = ctx.graph.const(b_value.name, b.astype(x.dtype))
        binary(ctx, code, x, other, y)

    convert.__name__ = f"convert_{op_type.lower()}"
    converter(op_type, since=1)(convert)


for _op_type, _code in _BINARY.items():
    _register_binary(_op_type, _code)


def _register_unary(op_type: str, code: str, cls: type | None) -> None:
    def convert(ctx: Context, node: ir.Node) -> None:
        ctx.op(code, [ctx.tensor(node.inputs[0])], [ctx.output(node.outputs[0])], _options(cls))

    convert.__name__ = f"convert_{op_type.lower()}"
    converter(op_type, since=1)(convert)


for _op_type, (_code, _cls) in _UNARY.items():
    _register_unary(_op_type, _code, _cls)


def _variadic(ctx: Context, node: ir.Node, code: str) -> None:
    inputs = [ctx.tensor(v) for v in node.inputs]
    y_value = node.outputs[0]
    if len(inputs) == 1:
        ctx.reshape(inputs[0], ctx.shape(y_value), out=ctx.output(y_value))
        return
    acc = inputs[0]
    for i, t in enumerate(inputs[1:], start=2):
        last = i == len(inputs)
        out = ctx.output(y_value) if last else ctx.tmp(code.lower(), np.broadcast_shapes(acc.shape, t.shape))
        acc = binary(ctx, code, acc, t, out)


@converter("Max", since=1)
def max_(ctx: Context, node: ir.Node) -> None:
    _variadic(ctx, node, "MAXIMUM")


@converter("Min", since=1)
def min_(ctx: Context, node: ir.Node) -> None:
    _variadic(ctx, node, "MINIMUM")


@converter("Sum", since=1)
def sum_(ctx: Context, node: ir.Node) -> None:
    _variadic(ctx, node, "ADD")


@converter("Reciprocal", since=1)
def reciprocal(ctx: Context, node: ir.Node) -> None:
    x = ctx.tensor(node.inputs[0])
    binary(ctx, "DIV", _scalar(ctx, 1.0, x.dtype), x, ctx.output(node.outputs[0]))


def _clip(ctx: Context, node: ir.Node, low: float | Tensor | None, high: float | Tensor | None) -> None:
    """``min(max(x, low), high)``; a bound is a constant (float), a run-time tensor or absent (None)."""
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    fused = {(0.0, None): "RELU", (0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU_N1_TO_1", (0.0, 1.0): "RELU_0_TO_1"}
    key = (low, high)
    # TFLite's RELU kernels take float32 / int8 / uint8 (int16 some): an integer Clip (Longformer's
    # attention_mask.clamp(0, 1) on int64 ids, written as int32) is MAXIMUM / MINIMUM, which take int32 / int64
    constant = not isinstance(low, Tensor) and not isinstance(high, Tensor)
    if constant and key in fused and np.dtype(x.dtype).kind == "f":
        ctx.op(fused[key], [x], [y])
        return

    def operand(bound: float | Tensor) -> Tensor:
        return bound if isinstance(bound, Tensor) else _scalar(ctx, bound, x.dtype)

    if low is not None:
        clipped = y if high is None else ctx.tmp("clip_low", x.shape, x.dtype)
        x = binary(ctx, "MAXIMUM", x, operand(low), clipped)
    if high is not None:
        binary(ctx, "MINIMUM", x, operand(high), y)
    if low is None and high is None:
        ctx.reshape(x, y.shape, out=y)


def _bound(value: float | None) -> float | None:
    if value is None or not np.isfinite(value) or abs(value) >= float(np.finfo(np.float32).max):
        return None
    return float(value)


@converter("Clip", since=1)
def clip_v1(
    ctx: Context, node: ir.Node, *, min: float = -3.4028234663852886e38, max: float = 3.4028234663852886e38
) -> None:  # noqa: A002
    _clip(ctx, node, _bound(min), _bound(max))


@converter("Clip", since=11)
def clip_v11(ctx: Context, node: ir.Node) -> None:
    bounds = []
    for i in (1, 2):
        value = (
            node.inputs[i]
            if len(node.inputs) > i and node.inputs[i] is not None and node.inputs[i].name
            else None
        )
        if value is None:
            bounds.append(None)
            continue
        # A bound computed at run time (torchaudio's AmplitudeToDB(top_db): max(x, x.max() - 80), exported as a
        # Clip whose min is ReduceMax - 80; openWakeWord's melspectrogram) is the tensor MAXIMUM / MINIMUM read.
        array = ctx.const(value)
        bounds.append(_bound(float(array)) if array is not None else ctx.tensor(value))
    _clip(ctx, node, bounds[0], bounds[1])


@converter("LeakyRelu", since=1)
def leaky_relu(ctx: Context, node: ir.Node, *, alpha: float = 0.01) -> None:
    opts = fb.LeakyReluOptionsT()
    opts.alpha = float(alpha)
    ctx.op("LEAKY_RELU", [ctx.tensor(node.inputs[0])], [ctx.output(node.outputs[0])], opts)


@converter("PRelu", since=1)
def prelu(ctx: Context, node: ir.Node) -> None:
    x_value, slope_value = node.inputs
    x = ctx.tensor(x_value)
    slope = ctx.tensor(slope_value)
    if slope.is_const and slope.rank < x.rank:
        # Broadcast against the full rank so layout passes can permute it like the input.
        full = (1,) * (x.rank - slope.rank) + slope.shape
        slope = ctx.graph.const(slope.name, slope.data.reshape(full))
    ctx.op("PRELU", [x, slope], [ctx.output(node.outputs[0])])


@converter("Elu", since=1)
def elu(ctx: Context, node: ir.Node, *, alpha: float = 1.0) -> None:
    x = ctx.tensor(node.inputs[0])
    y = ctx.output(node.outputs[0])
    if alpha == 1.0:
        ctx.op("ELU", [x], [y])
        return
    # alpha * (exp(min(x, 0)) - 1) + relu(x)
    neg = binary(ctx, "MINIMUM", x, _scalar(ctx, 0.0), ctx.tmp("neg", x.shape))
    exp = ctx.tmp("exp", x.shape)
    ctx.op("EXP", [neg], [exp], fb.ExpOptionsT())
    em1 = binary(ctx, "SUB", exp, _scalar(ctx, 1.0), ctx.tmp("em1", x.shape))
    scaled = binary(ctx, "MUL", em1, _scalar(ctx, alpha), ctx.tmp("scaled", x.shape))
    pos = ctx.tmp("pos", x.shape)
    ctx.op("RELU", [x], [pos])
    binary(ctx, "ADD", pos, scaled, y)


@converter("HardSigmoid", since=1)
def hard_sigmoid(ctx: Context, node: ir.Node, *, alpha: float = 0.2, beta: float = 0.5) -> None:
    x = ctx.tensor(node.inputs[0])
    scaled = binary(ctx, "MUL", x, _scalar(ctx, alpha), ctx.tmp("scaled", x.shape))
    shifted = binary(ctx, "ADD", scaled, _scalar(ctx, beta), ctx.tmp("shifted", x.shape))
    ctx.op("RELU_0_TO_1", [shifted], [ctx.output(node.outputs[0])])


@converter("Gelu", since=20)
def gelu(ctx: Context, node: ir.Node, *, approximate: str = "none") -> None:
    opts = fb.GeluOptionsT()
    opts.approximate = (approximate.decode() if isinstance(approximate, bytes) else approximate) == "tanh"
    ctx.op("GELU", [ctx.tensor(node.inputs[0])], [ctx.output(node.outputs[0])], opts)


# Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7): erf(x) = sign(x) (1 - t P(t) exp(-x^2)), t = 1/(1+p|x|)
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _single_user(value: ir.Value, op_type: str) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or uses[0].node.op_type != op_type:
        return None
    return uses[0].node


def _other_input(node: ir.Node, value: ir.Value) -> ir.Value | None:
    others = [v for v in node.inputs if v is not value]
    return others[0] if len(others) == 1 else None


def _is_scalar(ctx: Context, value: ir.Value | None, expected: float) -> bool:
    array = ctx.const(value)
    producer = value.producer() if value is not None else None
    if array is None and producer is not None and producer.op_type == "DequantizeLinear":
        # a quantized constant whose DequantizeLinear comes later in the node order
        parts = [ctx.const(v) for v in producer.inputs]
        if len(parts) >= 2 and all(p is not None for p in parts):
            zero = parts[2].astype(np.float64) if len(parts) > 2 else 0.0
            array = (parts[0].astype(np.float64) - zero) * parts[1]
    return array is not None and array.size == 1 and abs(float(array.reshape(-1)[0]) - expected) < 1e-4


def _after(value: ir.Value, op_type: str) -> tuple[ir.Node | None, ir.Value, list[ir.Node]]:
    """The single ``op_type`` user of ``value``, looking through one QuantizeLinear/DequantizeLinear pair.

    Returns (user, the value it reads, the Q/DQ nodes passed)."""
    passed: list[ir.Node] = []
    uses = list(value.uses())
    if len(uses) == 1 and uses[0].node.op_type == "QuantizeLinear":
        q = uses[0].node
        dq_uses = list(q.outputs[0].uses())
        if len(dq_uses) == 1 and dq_uses[0].node.op_type == "DequantizeLinear":
            passed = [q, dq_uses[0].node]
            value = dq_uses[0].node.outputs[0]
    return _single_user(value, op_type), value, passed


def _gelu_pattern(ctx: Context, node: ir.Node) -> tuple[ir.Value, ir.Node, list[ir.Node]] | None:
    """x * 0.5 * (1 + erf(x / sqrt 2)) as PyTorch exports it (also with Q/DQ pairs between the steps,
    as in a QDQ model): (x, the last node, the nodes after Erf it covers)."""
    scaled = node.inputs[0].producer()
    if scaled is None or scaled.op_type not in ("Div", "Mul") or len(scaled.inputs) != 2:
        return None
    x, c = scaled.inputs
    if not _is_scalar(ctx, c, 2**0.5 if scaled.op_type == "Div" else 2**-0.5):
        return None
    add, erf_out, covered = _after(node.outputs[0], "Add")
    if add is None or not _is_scalar(ctx, _other_input(add, erf_out), 1.0):
        return None
    m1, add_out, passed = _after(add.outputs[0], "Mul")
    if m1 is None:
        return None
    covered += [add, *passed, m1]
    other = _other_input(m1, add_out)
    half = other.producer() if other is not None else None
    if (
        half is not None
        and half.op_type == "Mul"
        and x in half.inputs
        and _is_scalar(ctx, _other_input(half, x), 0.5)
    ):
        return x, m1, covered  # (x * 0.5) * (1 + erf)
    m2, m1_out, passed = _after(m1.outputs[0], "Mul")
    if m2 is None:
        return None
    last = _other_input(m2, m1_out)
    if (other is x and _is_scalar(ctx, last, 0.5)) or (_is_scalar(ctx, other, 0.5) and last is x):
        return x, m2, [*covered, *passed, m2]
    return None


@converter("Erf", since=1)
def erf(ctx: Context, node: ir.Node) -> None:
    pattern = _gelu_pattern(ctx, node)
    if pattern is not None:  # the exact (erf) GELU: one TFLite op instead of the erf expansion
        x_value, last, covered = pattern
        ctx.claimed.update(id(n) for n in covered)
        if any(n.op_type == "QuantizeLinear" for n in covered):
            ctx.graph.notes.append(
                f"GELU ({node.name}): erf pattern fused across its intermediate Q/DQ pairs (computed unrounded)"
            )
        ctx.op("GELU", [ctx.tensor(x_value)], [ctx.output(last.outputs[0])], fb.GeluOptionsT())
        return
    x = ctx.tensor(node.inputs[0])
    shape = x.shape

    def t(hint: str) -> Tensor:
        return ctx.tmp(hint, shape)

    ax = t("abs")
    ctx.op("ABS", [x], [ax], fb.AbsOptionsT())
    denom = binary(
        ctx, "ADD", binary(ctx, "MUL", ax, _scalar(ctx, _ERF_P), t("px")), _scalar(ctx, 1.0), t("den")
    )
    tt = binary(ctx, "DIV", _scalar(ctx, 1.0), denom, t("t"))
    poly = binary(ctx, "MUL", tt, _scalar(ctx, _ERF_A[4]), t("p"))
    for coef in reversed(_ERF_A[:4]):
        poly = binary(ctx, "MUL", binary(ctx, "ADD", poly, _scalar(ctx, coef), t("p")), tt, t("p"))
    sq = binary(ctx, "MUL", x, x, t("sq"))
    neg_sq = t("neg_sq")
    ctx.op("NEG", [sq], [neg_sq], fb.NegOptionsT())
    ex = t("exp")
    ctx.op("EXP", [neg_sq], [ex], fb.ExpOptionsT())
    one_minus = binary(ctx, "SUB", _scalar(ctx, 1.0), binary(ctx, "MUL", poly, ex, t("pe")), t("om"))
    sign = t("sign")
    ctx.op("SIGN", [x], [sign])
    binary(ctx, "MUL", sign, one_minus, ctx.output(node.outputs[0]))
