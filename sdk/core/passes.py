"""Graph-preparation passes run on every loaded model, in one readable pipeline (:func:`prepare`).

Each pass is an ``onnx_ir`` in-place pass: ``pass_(model) -> PassResult``. They leave QuantizeLinear and
DequantizeLinear nodes (and the constants they read) alone, so a QDQ model survives loading unchanged, but for a
QuantizeLinear that gives back the DequantizeLinear's input it reads (:class:`DropRequantizeIdentityPass`).
"""

from __future__ import annotations

import logging
import re

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.computed_weights import ComputedConvWeightPass
from edgekit.core.deform_conv import DeformConvAsGridSamplePass
from edgekit.core.errors import EdgekitError, ModelError
from edgekit.core.fusions import (
    AveragePoolAsConvPass,
    AveragePoolWindowInsidePass,
    DivByConstantPass,
    FoldBatchNormPass,
    FoldConvAffinePass,
    FuseBiasAddPass,
    FuseHardSwishPass,
    MatMulAddToGemmPass,
    PadIntoMaxPoolPass,
    StandaloneBatchNormPass,
)
from edgekit.core.irutil import NameScope, add_initializer, attr, const_array, replace_value
from edgekit.core.loops import UnrollConstantLoopPass
from edgekit.core.roi_align import RoiAlignAsGridSamplePass
from edgekit.core.shape_checks import CheckStaticShapesPass, DeclineControlFlowPass, is_static
from edgekit.core.spectral import DftAsMatMulPass, StftAsConvPass
from onnx_ir.passes.common import (
    LiftConstantsToInitializersPass,
    NameFixPass,
    RemoveUnusedNodesPass,
    ShapeInferencePass,
    TopologicalSortPass,
)

log = logging.getLogger("edgekit")

#: Ops never folded even when every input is constant (their output is not a function of the inputs, or
#: folding them would dequantize a quantized weight).
_NO_FOLD = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)
#: A folded constant larger than this stays a computation.
_FOLD_LIMIT_BYTES = 64 << 20


def _bypass(model: ir.Model, node: ir.Node, source: ir.Value | None) -> bool:
    """Remove ``node``, whose output equals ``source``: its readers read ``source``. Not when a graph output would
    become a graph input or another output (the graph's interface stays)."""
    out = node.outputs[0]
    if source is None or (out.is_graph_output() and (source.is_graph_output() or source.is_graph_input())):
        return False
    replace_value(out, source)
    model.graph.remove(node, safe=True)
    return True


class DropNoOpsPass(ir.passes.InPlacePass):
    """Remove Identity and inference-time Dropout: their output is their input."""

    #: The op types removed (``edgekit.docs_gen`` lists them as removed before conversion, as inspect does).
    op_types = ("Identity", "Dropout")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for node in list(model.graph):
            if node.op_type in self.op_types and (
                node.op_type != "Dropout" or len(node.outputs) < 2 or not node.outputs[1].uses()
            ):
                modified = _bypass(model, node, node.inputs[0]) or modified
        return ir.passes.PassResult(model, modified)


def _is_whole_slice(node: ir.Node) -> bool:
    """A Slice (opset 10+) with unit steps whose output has its input's static shape: it copies its input.
    (Unit steps and an unchanged extent on every axis leave only start 0.)"""
    if node.op_type != "Slice" or len(node.inputs) < 3 or node.inputs[0] is None:
        return False
    steps = const_array(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] is not None else None
    if len(node.inputs) > 4 and node.inputs[4] is not None and (steps is None or np.any(steps != 1)):
        return False
    shape_in, shape_out = node.inputs[0].shape, node.outputs[0].shape
    return is_static(shape_in) and is_static(shape_out) and list(shape_in) == list(shape_out)


class DropWholeSlicesPass(ir.passes.InPlacePass):
    """Remove Slices that keep the whole tensor (GhostNet's ``cat([x1, x2])[:, :oup]`` when ``oup`` is even,
    as NanoDet-Plus' GhostPAN exports it). Their output is their input, and OpenVINO's CPU plugin crashes
    (SIGSEGV) compiling one between a Concat and a QuantizeLinear with a non-zero zero point (2026.4)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for node in list(model.graph):
            if _is_whole_slice(node):
                modified = _bypass(model, node, node.inputs[0]) or modified
        return ir.passes.PassResult(model, modified)


def _same_quantization(dq: ir.Node, q: ir.Node) -> bool:
    """``q`` quantizes to ``dq``'s input type, with its scale, zero point and axis (constants equal by value)."""
    if q.op_type != "QuantizeLinear" or dq.op_type != "DequantizeLinear" or dq.inputs[0] is None:
        return False
    if attr(dq, "block_size", 0) or attr(q, "block_size", 0):
        return False
    if attr(dq, "axis", 1) != attr(q, "axis", 1) or q.outputs[0].dtype != dq.inputs[0].dtype:
        return False
    for index in (1, 2):
        a = dq.inputs[index] if len(dq.inputs) > index else None
        b = q.inputs[index] if len(q.inputs) > index else None
        if (a is None) != (b is None):
            return False
        if a is not None and a is not b:
            x, y = const_array(a), const_array(b)
            if x is None or y is None or x.dtype != y.dtype or not np.array_equal(x, y):
                return False
    return True


class DropRequantizeIdentityPass(ir.passes.InPlacePass):
    """Remove a QuantizeLinear that quantizes a DequantizeLinear's output back with the same type, scale, zero
    point and axis: ``Q(DQ(x)) = x`` for 8- and 16-bit ``x`` (``(x - z) * s / s`` is within 2^-9 of ``x - z``).
    A model onnxruntime quantized leaves one where a whole-tensor Slice was (Concat -> Q -> DQ -> Q -> DQ on
    NanoDet-Plus' GhostPAN), on which OpenVINO's CPU plugin crashes (SIGSEGV in ``query_model``, 2026.4)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for q in list(model.graph):
            dq = q.inputs[0].producer() if q.op_type == "QuantizeLinear" and q.inputs[0] is not None else None
            if dq is not None and _same_quantization(dq, q):
                modified = _bypass(model, q, dq.inputs[0]) or modified
        return ir.passes.PassResult(model, modified)


class ConstantFoldPass(ir.passes.InPlacePass):
    """Evaluate nodes whose inputs are all constant (with the onnx reference evaluator), and Shape/Size of
    statically shaped tensors, replacing them by initializers."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = NameScope(graph)
        opset = model.opset_imports.get("", 19)
        modified = False
        for node in list(graph):
            if node.domain not in ("", "ai.onnx") or node.op_type in _NO_FOLD or node.attributes.get("body"):
                continue
            arrays = self._fold(node, opset)
            if arrays is None:
                continue
            for out, array in zip(node.outputs, arrays, strict=True):
                new = add_initializer(graph, names, out.name or "folded", array)
                replace_value(out, new)
            graph.remove(node, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _fold(node: ir.Node, opset: int) -> list[np.ndarray] | None:
        if node.op_type in ("Shape", "Size") and node.inputs[0] is not None:
            shape = node.inputs[0].shape
            if shape is None or not all(isinstance(d, int) and d >= 0 for d in shape):
                return None
            dims = np.array(list(shape), dtype=np.int64)
            if node.op_type == "Size":
                return [np.array(int(np.prod(dims)), dtype=np.int64)]
            rank = len(dims)
            start = attr(node, "start", 0)
            end = attr(node, "end", rank)
            return [dims[slice(start, end)]]
        if node.op_type == "CastLike" and (cast := ConstantFoldPass._fold_cast_like(node)) is not None:
            return cast
        inputs = [v for v in node.inputs if v is not None]
        if not inputs or any(v.const_value is None for v in inputs):
            return None
        if sum(v.const_value.nbytes for v in inputs) > _FOLD_LIMIT_BYTES:
            return None
        proto_node = ir.serde.serialize_node(node)
        feeds = {}
        renamed = []
        for i, v in enumerate(node.inputs):
            if v is None:
                renamed.append("")
                continue
            key = f"in{i}"
            feeds[key] = v.const_value.numpy()
            renamed.append(key)
        del proto_node.input[:]
        proto_node.input.extend(renamed)
        out_names = [f"out{i}" for i in range(len(node.outputs))]
        del proto_node.output[:]
        proto_node.output.extend(out_names)
        try:
            from onnx.reference import ReferenceEvaluator

            evaluator = ReferenceEvaluator(
                onnx.helper.make_model(
                    onnx.helper.make_graph(
                        [proto_node],
                        "fold",
                        [
                            onnx.helper.make_tensor_value_info(
                                k, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape
                            )
                            for k, a in feeds.items()
                        ],
                        [onnx.helper.make_value_info(o, onnx.TypeProto()) for o in out_names],
                    ),
                    opset_imports=[onnx.helper.make_opsetid("", opset)],
                )
            )
            # ONNX's float semantics are IEEE's: log(0) = -inf, and a bucket computation (MPNet, T5) casts that
            # to int64 in a branch its Where discards; numpy's warnings about it are not the user's
            with np.errstate(all="ignore"):
                results = evaluator.run(None, feeds)
        except Exception as exc:  # an op the evaluator cannot run stays a computation
            log.debug("not folding %s (%s): %s", node.name, node.op_type, exc)
            return None
        arrays = [np.asarray(r) for r in results]
        if sum(a.nbytes for a in arrays) > _FOLD_LIMIT_BYTES:
            return None
        return arrays

    @staticmethod
    def _fold_cast_like(node: ir.Node) -> list[np.ndarray] | None:
        """CastLike of a constant reads only input 1's type: torch's dynamo exporter (``optimize=False``) gives a
        bias-free Conv the bias ``Expand(CastLike(0, images), ...)``."""
        source, like = node.inputs[0], node.inputs[1] if len(node.inputs) > 1 else None
        if source is None or source.const_value is None or like is None or like.dtype is None:
            return None
        try:
            dtype = like.dtype.numpy()
        except (TypeError, ValueError):  # no numpy type (bfloat16, float8, ...): the evaluator's job
            return None
        if like.const_value is not None or np.dtype(dtype).kind not in "biuf":
            return None
        return [np.asarray(source.const_value.numpy()).astype(dtype)]


class SequenceSplitPass(ir.passes.InPlacePass):
    """A SplitToSequence read only by SequenceAt at constant positions as a Split (torch.chunk through the dynamo
    exporter with ``optimize=False``: "unsupported op 'SplitToSequence'" on TFLite). Needs the axis' size."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = NameScope(graph)
        modified = False
        for node in list(graph):
            parts = self._parts(node)
            if parts is None:
                continue
            sizes, squeeze = parts
            x, axis = node.inputs[0], attr(node, "axis", 0)
            split = ir.node(
                "Split",
                [x, add_initializer(graph, names, "split_sizes", np.array(sizes, np.int64))],
                attributes={"axis": axis},
                num_outputs=len(sizes),
                name=names.fresh(node.name or "SplitToSequence"),
            )
            graph.insert_before(node, split)
            readers = [use.node for use in node.outputs[0].uses()]
            for reader in readers:
                part = split.outputs[int(reader.inputs[1].const_value.numpy()) % len(sizes)]
                if squeeze:
                    axes = add_initializer(graph, names, "squeeze_axes", np.array([axis], np.int64))
                    squeezed = ir.node("Squeeze", [part, axes], name=names.fresh(reader.name or "SequenceAt"))
                    graph.insert_before(reader, squeezed)
                    part = squeezed.outputs[0]
                replace_value(reader.outputs[0], part)
            graph.remove([*readers, node], safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)

    @staticmethod
    def _parts(node: ir.Node) -> tuple[list[int], bool] | None:
        """The split sizes and whether each part loses the axis (keepdims=0 without ``split``), or None."""
        if node.op_type != "SplitToSequence" or node.inputs[0] is None or node.inputs[0].shape is None:
            return None
        seq = node.outputs[0]
        readers = [use.node for use in seq.uses()]
        if seq.is_graph_output() or not readers:
            return None
        if any(
            r.op_type != "SequenceAt" or r.inputs[1] is None or r.inputs[1].const_value is None
            for r in readers
        ):
            return None
        shape, axis = node.inputs[0].shape, attr(node, "axis", 0)
        dim = shape[axis] if -len(shape) <= axis < len(shape) else None
        if not isinstance(dim, int) or dim <= 0:
            return None
        given = node.inputs[1] if len(node.inputs) > 1 else None
        if given is None:
            return [1] * dim, not attr(node, "keepdims", 1)
        if (split := const_array(given)) is None:
            return None
        if split.ndim == 0:  # chunks of that size, the last one smaller
            step = int(split)
            return [min(step, dim - start) for start in range(0, dim, step)], False
        return [int(v) for v in split.reshape(-1)], False


class InlineConstantIfPass(ir.passes.InPlacePass):
    """An If whose condition is a constant becomes the branch it takes, inlined into the graph. A test of a shape
    is one once the input shapes are fixed: Silero VAD (``silero_vad_16k_op15.onnx``) branches on
    ``x.shape[-1]`` and on the state's batch; OpenVINO converts it with its If, and onnxsim folds such an If the
    same way. An If on a value computed at run time is left (and declined by :class:`DeclineControlFlowPass`)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = False
        for node in _top_level_ifs(graph):
            cond = const_array(node.inputs[0])
            if cond is None or cond.size != 1:
                continue
            taken = node.attributes["then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"].as_graph()
            modified |= _replace_by_branch(graph, node, taken)
        return ir.passes.PassResult(model, modified)


class EmptyGuardIfPass(ir.passes.InPlacePass):
    """An If guarding a computation against an empty tensor, ``if x.numel() == 0: return <empty constant>``, becomes
    its else branch inlined: given an empty ``x`` the else branch computes the same empty result (a selection of
    none). torchvision's ``batched_nms``, scripted into every whole detector's export, is one:
    ``If(Equal(ReduceProd(Shape(boxes)), 0))`` -> ``[]``, else the offsets trick and NonMaxSuppression. Only this
    form is taken: the condition an element count (Size, or ReduceProd of Shape) equal to 0, through a Cast, and
    the then branch Constants of no element."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = False
        for node in _top_level_ifs(graph):
            then_branch = node.attributes["then_branch"].as_graph()
            else_branch = node.attributes["else_branch"].as_graph()
            if _counts_nothing(node.inputs[0]) and _empty_constants(then_branch):
                modified |= _replace_by_branch(graph, node, else_branch)
        return ir.passes.PassResult(model, modified)


def _replace_by_branch(graph: ir.Graph, node: ir.Node, branch: ir.Graph) -> bool:
    """``node`` (an If) replaced by ``branch`` inlined, when every output of the branch is computed inside it."""
    if not _inlinable(node, branch):
        return False
    for out, new in zip(node.outputs, _inline_branch(graph, node, branch), strict=True):
        replace_value(out, new)
    graph.remove(node, safe=True)
    return True


def _counts_nothing(cond: ir.Value | None) -> bool:
    """``cond`` is ``count(x) == 0`` (Equal of Size(x) or ReduceProd(Shape(x)) and a constant 0), maybe Cast."""
    node = cond.producer() if cond is not None else None
    while node is not None and node.op_type == "Cast":
        node = node.inputs[0].producer() if node.inputs[0] is not None else None
    if node is None or node.op_type != "Equal":
        return False
    zero = next((v for v in node.inputs if const_array(v) is not None), None)
    count = next((v for v in node.inputs if v is not zero), None)
    if zero is None or count is None or np.any(const_array(zero) != 0):
        return False
    producer = count.producer()
    if producer is not None and producer.op_type == "Cast":
        producer = producer.inputs[0].producer() if producer.inputs[0] is not None else None
    if producer is None:
        return False
    if producer.op_type == "Size":
        return True
    inner = producer.inputs[0].producer() if producer.op_type == "ReduceProd" and producer.inputs[0] else None
    return inner is not None and inner.op_type == "Shape"


def _empty_constants(branch: ir.Graph) -> bool:
    """Every output of ``branch`` is a Constant node's tensor with no element."""
    outputs = list(branch.outputs)
    if not outputs or any(n.op_type != "Constant" for n in branch):
        return False
    for out in outputs:
        producer = out.producer()
        value = producer.attributes.get("value") if producer is not None else None
        if value is None or value.type != ir.AttributeType.TENSOR or value.as_tensor().size != 0:
            return False
    return True


def _top_level_ifs(graph: ir.Graph) -> list[ir.Node]:
    """The If nodes of ``graph`` itself (not of its subgraphs), in order."""
    return [n for n in graph if n.op_type == "If" and n.domain in ("", "ai.onnx") and n.graph is graph]


def _inlinable(node: ir.Node, branch: ir.Graph) -> bool:
    """Every output of ``branch`` is computed inside it (one read from the outer scope as it is: rare, left as
    control flow)."""
    outputs = list(branch.outputs)
    return len(outputs) == len(node.outputs) and all(
        out.producer() is not None and out.producer().graph is branch for out in outputs
    )


def _inline_branch(graph: ir.Graph, node: ir.Node, branch: ir.Graph) -> list[ir.Value]:
    """Move ``branch``'s initializers and nodes into ``graph`` before ``node``; return its outputs. A value named
    like one of ``graph``'s own is renamed (the two branches of an If may both write ``r``)."""
    outputs = list(branch.outputs)
    names = NameScope(graph)
    taken = {v.name for n in graph for v in (*n.inputs, *n.outputs) if v is not None and v.name}
    taken |= {v.name for v in (*graph.inputs, *graph.outputs, *graph.initializers.values())}
    branch.outputs.clear()
    for name, init in list(branch.initializers.items()):
        branch.initializers.pop(name)
        init.name = names.fresh(name)
        graph.register_initializer(init)
    nodes = list(branch)
    branch.remove(nodes)
    graph.insert_before(node, nodes)
    for inner in nodes:
        for value in inner.outputs:
            if value.name in taken:
                value.name = names.fresh(value.name)
            # a branch's symbolic shapes (its own dim names) are inferred again out here
            if value.shape is not None and not is_static(value.shape):
                value.shape = None
    return outputs


class SelectIfPass(ir.passes.InPlacePass):
    """An If on a value computed at run time whose two branches are plain dataflow (no nested control flow) and
    give outputs of the same static shapes and types becomes both branches inlined and ``Where(cond, then,
    else)`` per output: the same values, at the cost of computing the branch not taken (TensorFlow lowers a
    ``tf.cond`` of cheap branches to a select the same way). openWakeWord's "hey jarvis" head runs its verifier
    MLP when its first MLP's score passes 0.5 (``If(score >= 0.5)`` -> the verifier's score, else the first
    score). An If whose branches hold control flow or whose outputs differ in shape is left (and declined by
    :class:`DeclineControlFlowPass`)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        modified = False
        for node in _top_level_ifs(graph):
            branches = [node.attributes[k].as_graph() for k in ("then_branch", "else_branch")]
            plain = all(_inlinable(node, b) and _plain(b) for b in branches)
            if not plain or not _selectable(node, *branches):
                continue
            names = NameScope(graph)
            picked = [_inline_branch(graph, node, b) for b in branches]
            for out, then_value, else_value in zip(node.outputs, *picked, strict=True):
                select = ir.node(
                    "Where",
                    [node.inputs[0], then_value, else_value],
                    name=names.fresh(f"{node.name or 'If'}_select"),
                )
                select.outputs[0].name = names.fresh(f"{out.name or 'if_out'}_selected")
                select.outputs[0].shape, select.outputs[0].type = then_value.shape, then_value.type
                graph.insert_before(node, select)
                replace_value(out, select.outputs[0])
            graph.remove(node, safe=True)
            modified = True
        return ir.passes.PassResult(model, modified)


def _plain(branch: ir.Graph) -> bool:
    """No node of ``branch`` holds a graph (a nested If, Loop or Scan)."""
    return not any(
        a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
        for n in branch
        for a in n.attributes.values()
    )


def _selectable(node: ir.Node, then_branch: ir.Graph, else_branch: ir.Graph) -> bool:
    """The condition has one element and no more dims than the outputs; each output pair has one type and one
    static shape (Where's broadcast then gives that shape)."""
    cond = node.inputs[0]
    if (
        cond is None
        or cond.shape is None
        or not is_static(cond.shape)
        or int(np.prod(cond.shape.numpy())) != 1
    ):
        return False
    for a, b in zip(then_branch.outputs, else_branch.outputs, strict=True):
        if a.type is None or a.type != b.type or a.shape is None or b.shape is None:
            return False
        if not (is_static(a.shape) and is_static(b.shape)):  # a data-dependent branch (e.g. NMS's kept boxes)
            return False
        if a.shape.numpy() != b.shape.numpy() or len(a.shape) < len(cond.shape):
            return False
    return True


class ForgetAbsentOutputShapesPass(ir.passes.InPlacePass):
    """Forget the shape of an output that onnx_ir's RemoveUnusedNodesPass made absent (an unread optional output:
    its name becomes ""). Shape inference no longer reaches a nameless value, so the shape it had from the file's
    first inference stays, stale: Silero VAD's unread LSTM ``Y`` kept ``[1, 1, unk, 128]`` once its input's
    batch folded to 1, and the model was refused as dynamic. The converters infer what they need themselves."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for node in model.graph:
            for out in node.outputs:
                if not out.name and out.shape is not None and not out.uses() and not out.is_graph_output():
                    out.shape = None
                    modified = True
        return ir.passes.PassResult(model, modified)


class ScalarOneHotDepthPass(ir.passes.InPlacePass):
    """A OneHot whose depth is a one-element tensor (paddle2onnx writes ``[50]``: SLANet's decoding step) reads it
    as a scalar. ONNX takes both, but the onnx reference evaluator, which runs a quantized model's exact semantics
    (and folds constants), refuses the tensor: the int8 verification failed on it."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = NameScope(graph)
        modified = False
        for node in graph:
            if node.op_type != "OneHot" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
                continue
            depth = _constant(node.inputs[1])
            if depth is None or depth.ndim == 0 or depth.size != 1:
                continue
            base = f"{node.inputs[1].name or 'depth'}_scalar"
            node.replace_input_with(1, add_initializer(graph, names, base, depth.reshape(())))
            modified = True
        return ir.passes.PassResult(model, modified)


def _constant(value: ir.Value | None) -> np.ndarray | None:
    """An initializer's array, or a Constant node's ``value`` (a Loop body's constants, once unrolled)."""
    array = const_array(value)
    if array is not None or value is None:
        return array
    producer = value.producer()
    if producer is None or producer.op_type != "Constant" or "value" not in producer.attributes:
        return None
    return producer.attributes["value"].as_tensor().numpy()


class FoldShapesPass(ir.passes.InPlacePass):
    """Constant folding, the Ifs that folding decided (:class:`InlineConstantIfPass`), the Loops whose trip count
    it made constant (:class:`~edgekit.core.loops.UnrollConstantLoopPass`: torch's EmbeddingBag) and shape
    inference in turn until nothing folds: each folded shape computation gives the next its static input (timm's
    TF-"SAME" padding computes every Pad from the shape the previous one made: tf_mixnet_s needed five rounds)."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for _ in range(64):
            folded = ConstantFoldPass()(model).modified
            inlined = InlineConstantIfPass()(model).modified
            if not (UnrollConstantLoopPass()(model).modified or inlined or folded):
                break
            ShapeInferencePass()(model)
            modified = True
        return ir.passes.PassResult(model, modified)


def prepare(model: ir.Model) -> ir.Model:
    """The graph-preparation pipeline, top to bottom."""
    pipeline = ir.passes.PassManager(
        [
            LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
            DropNoOpsPass(),
            ConstantFoldPass(),
            FoldBatchNormPass(),
            FoldConvAffinePass(),
            FuseBiasAddPass(),
            MatMulAddToGemmPass(),
            DivByConstantPass(),
            FuseHardSwishPass(),
            RemoveUnusedNodesPass(),
            TopologicalSortPass(),
            ShapeInferencePass(),
            SequenceSplitPass(),  # needs the split axis' size
            StandaloneBatchNormPass(),  # these two need the channel count
            AveragePoolWindowInsidePass(),  # a window larger than the input: the input's size
            AveragePoolAsConvPass(),
            FoldShapesPass(),  # shapes now known everywhere: fold shape sub-graphs
            DeformConvAsGridSamplePass(),  # DeformConv: GridSample + 1x1 Conv (static shapes)
            RoiAlignAsGridSamplePass(),  # RoiAlign over a batch-1 map: GridSample + AveragePool
            ComputedConvWeightPass(),  # a Conv weight still computed now: patches + MatMul (static shapes)
            DftAsMatMulPass(),  # DFT / STFT by constant matrices (static shapes)
            StftAsConvPass(),
            ScalarOneHotDepthPass(),  # after the Loops it unrolled
            PadIntoMaxPoolPass(),  # a Pad by -inf before a MaxPool (its pads folded now): its own pads
            SelectIfPass(),  # an If folding left: both branches and a Where, when they are plain dataflow
            EmptyGuardIfPass(),  # if x.numel() == 0: [] else ... (torchvision's batched_nms): the else branch
            DropWholeSlicesPass(),
            DropRequantizeIdentityPass(),  # after the Slices and no-ops that sat between DQ and Q
            RemoveUnusedNodesPass(),
            ForgetAbsentOutputShapesPass(),  # the outputs it made absent
            ShapeInferencePass(),
            MatMulAddToGemmPass(),  # again: an N-D projection needs the static shapes known only now
            NameFixPass(),
            DeclineControlFlowPass(),
            CheckStaticShapesPass(),
        ],
        steps=1,
    )
    try:
        return pipeline(model).model
    except EdgekitError:
        raise
    except ir.passes.PassError as exc:
        raise _unwrap_pass_error(exc) from None


def _unwrap_pass_error(exc: ir.passes.PassError) -> EdgekitError:
    """The error a pass raised, out of the PassManager's PassErrors (nested, one per step and per pass)."""
    pass_name = "a graph pass"
    cause: BaseException = exc
    while isinstance(cause, ir.passes.PassError):
        match = re.search(r"'<(?:[\w.]+\.)?(\w+) object at 0x[0-9a-f]+>' pass", str(cause))
        if match:
            pass_name = match.group(1)
        if cause.__cause__ is None:
            break
        cause = cause.__cause__
    if isinstance(cause, EdgekitError):
        return cause
    lines = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]
    detail = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
    return ModelError(f"cannot prepare the model's graph: {pass_name} failed: {detail}")
