"""Layout passes: cancel the NCHW<->NHWC transposes the op converters emit.

Converters wrap every NHWC kernel in explicit TRANSPOSEs. These passes push transposes down through
layout-agnostic ops (element-wise, concatenation, reductions, padding, quantize/dequantize), fold
consecutive transposes, drop identities and turn transposes that only move size-1 dims into reshapes,
so a plain CNN ends up with no TRANSPOSE inside.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from edgekit.targets.tflite.context import inverse_perm, permute
from edgekit.targets.tflite.graph import Graph, Op, Tensor
from edgekit.targets.tflite.schema import fb

_UNARY = {
    "RELU", "RELU6", "RELU_N1_TO_1", "RELU_0_TO_1", "LOGISTIC", "TANH", "LEAKY_RELU", "HARD_SWISH", "ELU",
    "EXP", "LOG", "SQRT", "RSQRT", "ABS", "NEG", "GELU", "FLOOR", "CEIL", "SIN", "COS", "SIGN", "SQUARE",
    "CAST", "QUANTIZE", "DEQUANTIZE", "ROUND",
}  # fmt: skip
_BINARY = {
    "ADD", "SUB", "MUL", "DIV", "POW", "MAXIMUM", "MINIMUM", "PRELU", "SQUARED_DIFFERENCE", "FLOOR_MOD",
}  # fmt: skip
_REDUCE = {"MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD"}


def transpose_perm(op: Op) -> tuple[int, ...] | None:
    if op.code != "TRANSPOSE" or op.inputs[1] is None or not op.inputs[1].is_const:
        return None
    return tuple(int(p) for p in op.inputs[1].data)


def _compose(first: Sequence[int], second: Sequence[int]) -> tuple[int, ...]:
    """Permutation of transpose(transpose(x, first), second)."""
    return tuple(first[p] for p in second)


def _is_identity(perm: Sequence[int]) -> bool:
    return tuple(perm) == tuple(range(len(perm)))


def _transpose_const(graph: Graph, t: Tensor, perm: Sequence[int], rank: int) -> Tensor:
    """A constant broadcast-aligned to ``rank`` dims and transposed by ``perm``."""
    data = t.data.reshape((1,) * (rank - t.rank) + t.shape) if t.rank < rank else t.data
    if t.rank == 0 or t.data.size == 1 and t.rank < rank:
        return t  # scalars broadcast in any layout
    new = graph.const(t.name, np.transpose(data, perm), t.dtype)
    new.quant = t.quant
    if t.qdata is not None and t.qparams is not None:
        qdata = t.qdata.reshape(data.shape)
        new.qdata = np.asarray(np.transpose(qdata, perm), order="C")
        axis = t.qparams.axis + (rank - t.rank)
        new.qparams = type(t.qparams)(t.qparams.scale, t.qparams.zero_point, list(perm).index(axis))
    return new


def fold_constant_transposes(graph: Graph) -> Graph:
    """TRANSPOSE and RESHAPE of constants become constants."""
    for op in list(graph.ops):
        x = op.inputs[0] if op.inputs else None
        if x is None or not x.is_const or op.code not in ("TRANSPOSE", "RESHAPE"):
            continue
        out = op.outputs[0]
        if op.code == "TRANSPOSE":
            folded = _transpose_const(graph, x, transpose_perm(op), x.rank)
        else:
            folded = graph.const(x.name, x.data.reshape(out.shape), x.dtype)
            if x.qdata is not None and x.qparams is not None and x.qparams.per_tensor:
                folded.qdata, folded.qparams = x.qdata.reshape(out.shape), x.qparams
        folded.quant = x.quant
        graph.replace_uses(out, folded)
    graph.remove_dead()
    return graph


def _sink_one(graph: Graph, op: Op, producers: dict[int, Op]) -> bool:
    """Rewrite op(T(x, P), ...) as T(op(x, ...), P). Returns True when it changed the graph."""
    if len(op.outputs) != 1:
        return False
    perm = None
    sources: list[Tensor | None] = []
    data_inputs = (
        op.inputs[:1] if op.code in _REDUCE or op.code in ("PAD", "PADV2", "MIRROR_PAD") else op.inputs
    )
    for t in data_inputs:
        if t is None or t.is_const:
            sources.append(None)
            continue
        prod = producers.get(id(t))
        p = transpose_perm(prod) if prod is not None else None
        if p is None or (perm is not None and p != perm):
            return False
        perm = p
        sources.append(prod.inputs[0])
    if perm is None:
        return False
    out = op.outputs[0]
    rank = len(perm)
    inv = inverse_perm(perm)
    if op.code in _UNARY:
        if out.quant is not None and not out.quant.per_tensor:
            return False
        new_inputs = [sources[0]]
    elif op.code in _BINARY:
        if any(t is not None and t.rank > rank for t in op.inputs):
            return False
        new_inputs = []
        for t, src in zip(op.inputs, sources, strict=True):
            if src is not None:
                new_inputs.append(src)
            elif t.is_const:
                new_inputs.append(_transpose_const(graph, t, inv, rank))
            else:
                return False
        if out.rank != rank:
            return False
    elif op.code == "CONCATENATION":
        if any(src is None for src in sources):
            return False
        op.options.axis = perm[op.options.axis]
        new_inputs = sources
    elif op.code in _REDUCE:
        axes = sorted(int(a) % rank for a in op.inputs[1].data.reshape(-1))
        new_axes = sorted(perm[a] for a in axes)
        new_inputs = [sources[0], graph.const("axes", new_axes, np.int32)]
        if not op.options.keepDims:
            kept = [d for d in range(rank) if d not in new_axes]  # source dims that survive
            out_perm = tuple(kept.index(perm[i]) for i in range(rank) if i not in axes)
            return _finish(graph, op, new_inputs, out, out_perm)
    elif op.code in ("PAD", "PADV2", "MIRROR_PAD"):
        paddings = op.inputs[1].data
        new_pad = graph.const("paddings", paddings[list(inv)], paddings.dtype)
        new_inputs = [sources[0], new_pad, *op.inputs[2:]]
    else:
        return False
    return _finish(graph, op, new_inputs, out, perm)


def _finish(graph: Graph, op: Op, new_inputs: list[Tensor | None], out: Tensor, perm: Sequence[int]) -> bool:
    inv = inverse_perm(perm)
    inner = Tensor(graph.unique_name(out.name + "/sunk"), permute(out.shape, inv), out.dtype, quant=out.quant)
    op.inputs = list(new_inputs)
    op.outputs = [inner]
    index = graph.ops.index(op)
    perm_t = graph.const("perm", list(perm), np.int32)
    graph.ops.insert(index + 1, Op("TRANSPOSE", [inner, perm_t], [out], fb.TransposeOptionsT(), op.origin))
    return True


def _merge_transposes(graph: Graph) -> bool:
    producers = graph.producers()
    changed = False
    for op in graph.ops:
        perm = transpose_perm(op)
        if perm is None:
            continue
        prod = producers.get(id(op.inputs[0]))
        first = transpose_perm(prod) if prod is not None else None
        if first is not None:
            source = prod.inputs[0]
            composed = _compose(first, perm)
            op.inputs = [source, graph.const("perm", list(composed), np.int32)]
            perm = composed
            changed = True
        feeds_through = graph.is_graph_output(op.outputs[0]) and any(op.inputs[0] is t for t in graph.inputs)
        if _is_identity(perm) and not feeds_through:
            graph.replace_uses(op.outputs[0], op.inputs[0])
            changed = True
    graph.remove_dead()
    return changed


def cancel_transposes(graph: Graph) -> Graph:
    """Sink transposes through layout-agnostic ops and fold them until nothing changes."""
    for _ in range(10 * max(len(graph.ops), 1)):
        changed = _merge_transposes(graph)
        producers = graph.producers()
        for op in list(graph.ops):
            if op.code != "TRANSPOSE" and _sink_one(graph, op, producers):
                changed = True
                producers = graph.producers()
        if not changed:
            break
    _merge_transposes(graph)
    return graph


def _pointwise_input(op: Op) -> Tensor | None:
    """The one tensor input ``op`` computes its output from element by element (a unary op with a per-tensor
    output, or a binary op with a scalar constant: it runs the same in any layout), else None."""
    if len(op.outputs) != 1:
        return None
    quant = op.outputs[0].quant
    if quant is not None and not quant.per_tensor:
        return None
    if op.code in _UNARY and len(op.inputs) == 1:
        x = op.inputs[0]
    elif op.code in _BINARY and len(op.inputs) == 2:
        consts = [t for t in op.inputs if t is not None and t.is_const]
        if len(consts) != 1 or consts[0].data.size != 1:
            return None
        x = next(t for t in op.inputs if t is not consts[0])
    else:
        return None
    return x if x is not None and x.shape == op.outputs[0].shape else None


def _input_chain(graph: Graph, t: Tensor, consumers: dict[int, list[Op]]) -> tuple[list[Op], Tensor]:
    """The single-use pointwise ops from input ``t`` on (a float input's quantization: DIV, ROUND, MUL,
    QUANTIZE), and the tensor they end on."""
    chain, end = [], t
    while len(users := consumers.get(id(end), [])) == 1 and _pointwise_input(users[0]) is end:
        if graph.is_graph_output(users[0].outputs[0]):
            break
        chain.append(users[0])
        end = users[0].outputs[0]
    return chain, end


def _output_chain(graph: Graph, t: Tensor, producers: dict[int, Op]) -> tuple[list[Op], Tensor]:
    """The pointwise ops that produce output ``t`` (an int8 output's DEQUANTIZE), each reading a tensor only
    it reads, and the tensor the first of them reads."""
    chain, start = [], t
    consumers = graph.consumers()
    while (prod := producers.get(id(start))) is not None and (x := _pointwise_input(prod)) is not None:
        if (
            len(consumers.get(id(x), [])) != 1
            or graph.is_graph_output(x)
            or any(x is i for i in graph.inputs)
        ):
            break
        chain.append(prod)
        start = x
    return chain, start


def choose_io_layout(graph: Graph) -> Graph:
    """Keep NCHW for a rank-4 input/output whose NHWC layout would cost a TRANSPOSE inside.

    Image tensors come out NHWC because their edge transposes cancel against the NHWC kernels; a
    rank-4 tensor that is not an image (an attention mask, a feature map fed to MatMul) would keep
    its edge transpose, so it stays in the ONNX layout instead. Pointwise ops between the tensor and its
    edge transpose (an int8 model's float input quantized: DIV, ROUND, MUL, QUANTIZE; its output
    dequantized) run in the ONNX layout then: a model that takes NHWC already (a TensorFlow model
    converted by tf2onnx) keeps its [1, H, W, C] input in int8 too, not [1, H, C, W] and a TRANSPOSE.
    """
    consumers = graph.consumers()
    producers = graph.producers()
    for i, t in enumerate(list(graph.inputs)):
        perm = graph.io_perms.get(t.name)
        chain, end = _input_chain(graph, t, consumers)
        users = consumers.get(id(end), [])
        if perm is None or not users or any(transpose_perm(u) != inverse_perm(perm) for u in users):
            continue
        if any(transposes_are_free(u) for u in users):
            continue
        shape = users[0].outputs[0].shape
        nchw = Tensor(t.name, shape, t.dtype, quant=t.quant)
        graph.replace_uses(t, nchw)
        for op in chain:
            op.outputs[0].shape = shape
        for user in users:
            graph.replace_uses(user.outputs[0], end if chain else nchw)
        graph.inputs[i] = nchw
        graph.io_perms[t.name] = None
    for i, (t, name) in enumerate(zip(list(graph.outputs), graph.output_names, strict=True)):
        perm = graph.io_perms.get(name)
        chain, start = _output_chain(graph, t, producers) if perm is not None else ([], t)
        prod = producers.get(id(start))
        if perm is None or prod is None or transpose_perm(prod) != tuple(perm) or transposes_are_free(prod):
            continue
        source = prod.inputs[0]
        if any(source is x for x in graph.inputs) or any(source is o for o in graph.outputs):
            continue  # the output would alias another graph tensor
        if chain:
            for op in chain:
                op.outputs[0].shape = source.shape
            chain[-1].inputs = [source if x is start else x for x in chain[-1].inputs]
        else:
            graph.outputs[i] = source
        graph.io_perms[name] = None
    graph.remove_dead()
    return graph


def transposes_are_free(op: Op) -> bool:
    """A TRANSPOSE that only moves unit dims (it becomes a RESHAPE)."""
    perm = transpose_perm(op)
    shape = op.inputs[0].shape
    moved = [p for p in perm if shape[p] != 1]
    return moved == sorted(moved)


def transposes_to_reshapes(graph: Graph) -> Graph:
    """A TRANSPOSE that keeps the order of the non-unit dims is a RESHAPE."""
    for i, op in enumerate(graph.ops):
        perm = transpose_perm(op)
        if perm is None:
            continue
        shape = op.inputs[0].shape
        moved = [p for p in perm if shape[p] != 1]
        if moved == sorted(moved):
            out = op.outputs[0]
            opts = fb.ReshapeOptionsT()
            opts.newShape = list(out.shape)
            graph.ops[i] = Op(
                "RESHAPE", [op.inputs[0], graph.const("shape", out.shape, np.int32)], [out], opts, op.origin
            )
    return merge_reshapes(graph)


def merge_reshapes(graph: Graph) -> Graph:
    """RESHAPE(RESHAPE(x)) -> RESHAPE(x); a RESHAPE to the same shape disappears."""
    producers = graph.producers()
    for op in graph.ops:
        if op.code != "RESHAPE":
            continue
        prod = producers.get(id(op.inputs[0]))
        if prod is not None and prod.code == "RESHAPE":
            op.inputs = [prod.inputs[0], op.inputs[1]]
        if op.inputs[0].shape == op.outputs[0].shape and not graph.is_graph_output(op.outputs[0]):
            graph.replace_uses(op.outputs[0], op.inputs[0])
    graph.remove_dead()
    return graph
