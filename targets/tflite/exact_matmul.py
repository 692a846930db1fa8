"""An int8 BATCH_MATMUL of two run-time tensors (attention's q k^T and softmax v) computed on the integer levels and
rounded half to even, as QuantizeLinear rounds.

LiteRT's int8 BATCH_MATMUL (XNNPACK hands it to the builtin kernel) requantizes its int32 sums with
``MultiplyByQuantizedMultiplier``: a rounding doubling high multiply by the 31-bit mantissa of ``sa * sb / sy``, then a
rounding right shift by its exponent. The first rounding moves the value by up to half a unit of ``2^-shift`` steps
before the second rounds it, so a result within ``0.5 * 2^-shift`` of a half step goes either way (MONAI UNETR's
attention scores, multiplier 0.0072 = 0.93 * 2^-7: 0.5 % of the values a step off; with that double rounding
emulated on the exact semantics alone, the QDQ model's output moves to cosine 0.99397, the .tflite's figure 0.99392).

Here the levels ``q - zero_point`` of both inputs are CAST to float32 (exact), multiplied by a float32 BATCH_MATMUL
(products of levels and their sums are integers below 2^24 when the inner size is at most 258: exact), scaled by
``sa * sb / sy`` in one float32 MUL, rounded by ROUND (half to even) and shifted, clamped and CAST to int8. Only where
the multiplier is below 0.5 (a shift: above it the kernel rounds once).
"""

from __future__ import annotations

import numpy as np
from edgekit.targets.tflite.graph import Graph, Op, Tensor
from edgekit.targets.tflite.schema import fb

#: the largest inner size whose sums of level products (levels within [-255, 255]) stay exact in float32:
#: 258 * 255 * 255 < 2^24
MAX_INNER = 258


def levels(graph: Graph, x: Tensor, origin: str, out: Tensor | None = None) -> tuple[list[Op], Tensor]:
    """(ops, float32 tensor) of ``x``'s integer levels ``q - zero_point`` (CAST, and SUB when the zero point is not 0)."""
    zp = float(x.quant.zero_point[0])
    shape = x.shape
    cast = out if out is not None and not zp else graph.tensor(f"{x.name}/levels", shape, np.float32)
    ops = [Op("CAST", [x], [cast], None, origin)]
    if not zp:
        return ops, cast
    shifted = out if out is not None else graph.tensor(f"{x.name}/levels_shifted", shape, np.float32)
    ops.append(
        Op("SUB", [cast, graph.const("zero_point", np.float32(zp))], [shifted], fb.SubOptionsT(), origin)
    )
    return ops, shifted


def requantize(graph: Graph, f: Tensor, y: Tensor, origin: str) -> list[Op]:
    """Ops writing int8 ``y`` from float32 levels-scaled ``f``: ROUND (half to even), ADD of ``y``'s zero point,
    clamp to [-128, 127], CAST."""
    zp = float(y.quant.zero_point[0])
    rounded = graph.tensor(f"{y.name}/round", f.shape, np.float32)
    shifted = graph.tensor(f"{y.name}/shifted", f.shape, np.float32)
    low = graph.tensor(f"{y.name}/low", f.shape, np.float32)
    clamped = graph.tensor(f"{y.name}/clamped", f.shape, np.float32)
    return [
        Op("ROUND", [f], [rounded], None, origin),
        Op("ADD", [rounded, graph.const("zero_point", np.float32(zp))], [shifted], fb.AddOptionsT(), origin),
        Op(
            "MAXIMUM",
            [shifted, graph.const("qmin", np.float32(-128))],
            [low],
            fb.MaximumMinimumOptionsT(),
            origin,
        ),
        Op(
            "MINIMUM",
            [low, graph.const("qmax", np.float32(127))],
            [clamped],
            fb.MaximumMinimumOptionsT(),
            origin,
        ),
        Op("CAST", [clamped], [y], None, origin),
    ]


def quantize_levels(graph: Graph, f: Tensor, y: Tensor, origin: str) -> list[Op]:
    """Ops writing int8 ``y`` from float32 levels ``f`` whose exact value is a convex combination of levels (no
    clamp needed): ROUND (half to even), MUL by ``y``'s scale, QUANTIZE. The product is within ``255 * 2^-23`` of a
    step of the integer level, so QUANTIZE's own rounding (half away from zero) cannot move it; QUANTIZE adds the
    zero point and clamps. Three ops where ``requantize`` has five: DeepLabV3-MobileNetV3's x16 logits resize on
    LiteRT (one thread) 3.69 -> 3.31 ms per image, the model 3.05 ms before the rewrite."""
    rounded = graph.tensor(f"{y.name}/round", f.shape, np.float32)
    real = graph.tensor(f"{y.name}/rescaled", f.shape, np.float32)
    return [
        Op("ROUND", [f], [rounded], None, origin),
        Op(
            "MUL",
            [rounded, graph.const("scale", np.float32(y.quant.scale[0]))],
            [real],
            fb.MulOptionsT(),
            origin,
        ),
        Op("QUANTIZE", [real], [y], None, origin),
    ]


def listed(names: list[str]) -> str:
    """The first three of ``names``, then ``...``: a rewrite pass's note."""
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _eligible(op: Op) -> bool:
    if len(op.inputs) != 2 or len(op.outputs) != 1:
        return False
    a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
    tensors = (a, b, y)
    if any(
        t is None or t.is_const or t.dtype != np.int8 or t.quant is None or not t.quant.per_tensor
        for t in tensors
    ):
        return False
    inner = a.shape[-2] if getattr(op.options, "adjX", False) else a.shape[-1]
    if inner <= 0 or inner > MAX_INNER:
        return False
    return _multiplier(a, b, y) < 0.5


def _multiplier(a: Tensor, b: Tensor, y: Tensor) -> np.float32:
    """The kernel's rescale ``sa * sb / sy`` (in float64, rounded once to float32)."""
    return np.float32(
        np.float64(a.quant.scale[0]) * np.float64(b.quant.scale[0]) / np.float64(y.quant.scale[0])
    )


def exact_batch_matmul(graph: Graph) -> Graph:
    """Each eligible int8 BATCH_MATMUL (see the module docstring) becomes levels -> float32 BATCH_MATMUL -> MUL by
    the multiplier -> ROUND -> int8; the ops it adds are integer arithmetic (``graph.integer_arithmetic``), not
    layers left float."""
    rewritten = []
    for op in [op for op in graph.ops if op.code == "BATCH_MATMUL" and _eligible(op)]:
        a, b, y = op.inputs[0], op.inputs[1], op.outputs[0]
        ops_a, la = levels(graph, a, op.origin)
        ops_b, lb = levels(graph, b, op.origin)
        acc = graph.tensor(f"{y.name}/levels_product", y.shape, np.float32)
        opts = fb.BatchMatMulOptionsT()
        opts.adjX = bool(getattr(op.options, "adjX", False))
        opts.adjY = bool(getattr(op.options, "adjY", False))
        multiplier = _multiplier(a, b, y)
        scaled = graph.tensor(f"{y.name}/levels_scaled", y.shape, np.float32)
        new = [
            *ops_a,
            *ops_b,
            Op("BATCH_MATMUL", [la, lb], [acc], opts, op.origin),
            Op("MUL", [acc, graph.const("multiplier", multiplier)], [scaled], fb.MulOptionsT(), op.origin),
            *requantize(graph, scaled, y, op.origin),
        ]
        graph.replace_op(op, new, integer=True)
        rewritten.append(op.origin)
    if rewritten:
        graph.notes.append(
            f"{len(rewritten)} int8 BATCH_MATMUL(s) ({listed(rewritten)})"
            " on the int8 levels in float32 (exact sums), rounded half to even (ROUND), as QuantizeLinear: LiteRT's "
            "int8 kernel rounds twice"
        )
    return graph
