"""Einsum with one or two operands, lowered to TRANSPOSE / RESHAPE / SUM / BATCH_MATMUL.

Each label of a two-operand equation is a batch label (both operands and the output), a contracted one (both
operands, not the output), a free one of either operand (that operand and the output), or summed away (one
operand only): the operands are transposed to [batch, free, contracted] / [batch, contracted, free], merged to
one free and one contracted dim, multiplied with BATCH_MATMUL and put back in the output's order. This covers
the attention products of transformer exports ("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd"), batched and plain
matrix products, outer products, transposes and sums. Three or more operands are contracted two at a time, left
to right, each partial product keeping the labels a later operand or the output reads (round 21z: torch's
``einsum("bn,anm,bm->ba")``, a bilinear form, was refused). Declined, naming the equation: a label repeated in one
operand (diagonals) and batch labels broadcast from size 1.
"""

from __future__ import annotations

import string

import numpy as np
import onnx_ir as ir
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.registry import converter
from edgekit.targets.tflite.schema import fb


def _parse(ctx: Context, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' label strings and the output's, "..." replaced by capital letters (aligned right)."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"equation {equation!r} names {len(terms)} operands, the node has {len(ranks)}")
    spare = [c for c in string.ascii_uppercase if c not in equation]
    widths = [rank - len(t.replace("...", "")) for t, rank in zip(terms, ranks, strict=True)]
    ellipsis = spare[: max([0, *widths])]
    expanded = []
    for term, width in zip(terms, widths, strict=True):
        if width < 0 or (width > 0 and "..." not in term):
            raise ctx.error(f"equation {equation!r} does not match the operand ranks {ranks}")
        expanded.append(term.replace("...", "".join(ellipsis[len(ellipsis) - width :])))
    if arrow:
        out = out.replace("...", "".join(ellipsis))
    else:  # implicit output: the ellipsis, then the labels used once, alphabetically
        once = sorted(
            c for c in set("".join(expanded)) if "".join(expanded).count(c) == 1 and c not in ellipsis
        )
        out = "".join(ellipsis) + "".join(once)
    for term, rank in zip(expanded, ranks, strict=True):
        if len(term) != rank or not term.isalpha():
            raise ctx.error(f"equation {equation!r} does not match the operand ranks {ranks}")
        if len(set(term)) != len(term):
            raise ctx.error(
                f"equation {equation!r}: a label repeated in one operand (a diagonal) is not supported"
            )
    return expanded, out


def _sum_out(ctx: Context, x: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    """Sum ``x`` over the labels not in ``keep``."""
    axes = [i for i, c in enumerate(labels) if c not in keep]
    if not axes:
        return x, labels
    opts = fb.ReducerOptionsT()
    opts.keepDims = False
    shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    out = ctx.tmp("summed", shape, x.dtype)
    ctx.op("SUM", [x, ctx.graph.const("axes", axes, np.int32)], [out], opts)
    return out, "".join(c for c in labels if c in keep)


def _arrange(ctx: Context, x: Tensor, labels: str, order: str) -> Tensor:
    return ctx.transpose(x, [labels.index(c) for c in order])


@converter("Einsum", since=12)
def einsum(ctx: Context, node: ir.Node, *, equation: str) -> None:
    equation = equation.decode() if isinstance(equation, bytes) else equation
    operands = [ctx.tensor(v) for v in node.inputs]
    y = ctx.output(node.outputs[0])
    terms, out = _parse(ctx, equation, [t.rank for t in operands])
    sizes: dict[str, int] = {}
    for t, term in zip(operands, terms, strict=True):
        for c, d in zip(term, t.shape, strict=True):
            if sizes.setdefault(c, d) != d:
                raise ctx.error(
                    f"equation {equation!r}: label {c!r} has sizes {sizes[c]} and {d} (broadcasting is not supported)"
                )
    pending = list(zip(operands, terms, strict=True))
    while len(pending) > 2:  # three or more operands: the first two contracted first, left to right
        (a, la), (b, lb) = pending[:2]
        keep = set(out).union(*(term for _, term in pending[2:]))
        labels = "".join(dict.fromkeys(c for c in la + lb if c in keep))
        partial = ctx.tmp("einsum_partial", tuple(sizes[c] for c in labels), y.dtype)
        _contract(ctx, equation, [a, b], [la, lb], labels, partial, sizes)
        pending[:2] = [(partial, labels)]
    _contract(ctx, equation, [t for t, _ in pending], [term for _, term in pending], out, y, sizes)


def _contract(
    ctx: Context,
    equation: str,
    operands: list[Tensor],
    terms: list[str],
    out: str,
    y: Tensor,
    sizes: dict[str, int],
) -> None:
    """One or two operands' einsum into ``y`` (labels ``out``)."""
    if len(operands) == 1:
        x, labels = _sum_out(ctx, operands[0], terms[0], set(out))
        if labels == out:
            ctx.reshape(x, y.shape, out=y)
        else:
            ctx.transpose(x, [labels.index(c) for c in out], out=y)
        return
    (a, la), (b, lb) = (
        _sum_out(ctx, t, term, set(out) | set(other))
        for t, term, other in ((operands[0], terms[0], terms[1]), (operands[1], terms[1], terms[0]))
    )
    batch = "".join(c for c in out if c in la and c in lb)
    left = "".join(c for c in out if c in la and c not in lb)
    right = "".join(c for c in out if c in lb and c not in la)
    contracted = "".join(c for c in la if c in lb and c not in out)

    def size(labels: str) -> int:
        return int(np.prod([sizes[c] for c in labels], dtype=np.int64))

    batch_shape = tuple(sizes[c] for c in batch) if len(batch) <= 3 else (size(batch),)
    if a.quant is None and np.issubdtype(np.dtype(a.dtype), np.integer):
        # BATCH_MATMUL has no int32 / int64 kernel: an integer product without a contracted label (an outer
        # product: BigBird's block masks from the int64 attention mask) is a broadcast MUL, exact in any width
        if contracted:
            raise ctx.error(
                f"equation {equation!r}: an integer ({np.dtype(a.dtype).name}) product summing over "
                f"{contracted!r} is not supported (TFLite's BATCH_MATMUL takes float32, int8 and int16)"
            )
        a = ctx.reshape(_arrange(ctx, a, la, batch + left), (*batch_shape, size(left), 1))
        b = ctx.reshape(_arrange(ctx, b, lb, batch + right), (*batch_shape, 1, size(right)))
        product = ctx.tmp("outer", (*batch_shape, size(left), size(right)), y.dtype)
        ctx.op("MUL", [a, b], [product], fb.MulOptionsT())
    else:
        a = ctx.reshape(
            _arrange(ctx, a, la, batch + left + contracted), (*batch_shape, size(left), size(contracted))
        )
        b = ctx.reshape(
            _arrange(ctx, b, lb, batch + contracted + right), (*batch_shape, size(contracted), size(right))
        )
        product = ctx.tmp("matmul", (*batch_shape, size(left), size(right)), y.dtype)
        ctx.op("BATCH_MATMUL", [a, b], [product], fb.BatchMatMulOptionsT())
    natural = batch + left + right
    unmerged = ctx.reshape(product, tuple(sizes[c] for c in natural))
    if natural == out:
        ctx.reshape(unmerged, y.shape, out=y)
    else:
        ctx.transpose(unmerged, [natural.index(c) for c in out], out=y)
