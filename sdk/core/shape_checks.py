"""Preparation checks that refuse a model with one sentence: tensors without a static shape (and why), and
control flow. Run by :func:`edgekit.core.passes.prepare` after the rewriting passes."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import onnx_ir as ir
from edgekit.core.errors import ModelError

#: Ops whose output size depends on the values of their inputs, never on shapes alone.
DATA_DEPENDENT = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression", "StringSplit"})
#: Control-flow ops: their sub-graphs run a data-dependent number of times or branch at run time, which no
#: target here converts (TFLite has no loops of ONNX's kind; shapes behind them are not static).
CONTROL_FLOW = ("If", "Loop", "Scan")


def is_data_dependent(node: ir.Node | onnx.NodeProto) -> bool:
    """Whether ``node`` (of the IR or of a proto) is one of ONNX's :data:`DATA_DEPENDENT` ops."""
    return node.op_type in DATA_DEPENDENT and node.domain in ("", "ai.onnx")


def is_static(shape: ir.Shape | None) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def shape_text(shape: ir.Shape | None) -> str:
    if shape is None:
        return "unknown rank"
    return "[" + ", ".join(str(d) if isinstance(d, int) and d >= 0 else "?" for d in shape) + "]"


def _op_text(node: ir.Node) -> str:
    """``Conv node 'conv1'``, ``com.microsoft.QLinearAdd node 'add_3'``."""
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
    return f"{op} node {node.name!r}"


def _why_no_static_shape(node: ir.Node) -> str:
    """Why the outputs of ``node``, whose inputs all have static shapes, do not."""
    if node.domain not in ("", "ai.onnx"):
        return f"{node.domain}.{node.op_type} is a custom op whose output shape onnx cannot infer"
    if node.op_type in DATA_DEPENDENT:
        return f"the size of {node.op_type}'s output depends on its input values"
    if node.op_type in CONTROL_FLOW:
        return f"the output shape of control flow ({node.op_type}) depends on the data"
    computed = [v for v in node.inputs[1:] if v is not None and v.const_value is None]
    if computed:
        sources = _graph_inputs_behind(computed[0])
        if sources:
            names = ", ".join(repr(v.name) for v in sources)
            return (
                f"its shape depends on the value of {computed[0].name!r}, which is computed at run time from "
                f"graph input {names} (a value known only when the model runs: export the model with it as "
                "a constant)"
            )
        return (
            f"its shape depends on the value of {computed[0].name!r}, which is computed at run time "
            "(not a constant)"
        )
    return "onnx shape inference cannot infer it"


def _graph_inputs_behind(value: ir.Value, limit: int = 200) -> list[ir.Value]:
    """The graph inputs whose values ``value`` is computed from (a Shape's input counts only by its shape: not
    followed), by name; at most ``limit`` values visited."""
    seen: set[int] = set()
    found: list[ir.Value] = []
    stack = [value]
    while stack and len(seen) < limit:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        node = v.producer()
        if node is None:
            if v.is_graph_input():
                found.append(v)
            continue
        if node.op_type in ("Shape", "Size"):
            continue
        stack.extend(i for i in node.inputs if i is not None and i.const_value is None)
    return sorted(found, key=lambda v: v.name or "")


def explain_dynamic_shape(value: ir.Value) -> str:
    """One sentence: which tensor has no static shape, which op produced it, and where that comes from.

    Follows the first input without a static shape back to the op where the shapes stop being static
    (its inputs all static: a custom op, a data-dependent op, a shape computed at run time) or to a
    dynamic graph input.
    """
    node = value.producer()
    head = f"tensor {value.name!r}"
    if node is not None:
        head += f" (output of {_op_text(node)})"
    head += f" has no static shape ({shape_text(value.shape)})"
    seen: set[int] = set()
    current = node
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        dynamic = next((v for v in current.inputs if v is not None and not is_static(v.shape)), None)
        if dynamic is None:
            reason = _why_no_static_shape(current)
            if current is node:
                return f"{head}: {reason}"
            return (
                f"{head}: it is computed from {current.outputs[0].name!r}, output of {_op_text(current)}, "
                f"and {reason}"
            )
        if dynamic.producer() is None:
            return (
                f"{head}: graph input {dynamic.name!r} has shape {shape_text(dynamic.shape)}; "
                f"pass --input-shape {dynamic.name}=D0,D1,..."
            )
        current = dynamic.producer()
    return f"{head}: onnx shape inference cannot infer it"


def squeeze_axes_meant(dims: Sequence[int | None]) -> list[int]:
    """The axes a Squeeze without axes means on an input of ``dims`` (None or -1: sized at run time): its dims of
    size 1. Were a run-time dim 1 too, ONNX would squeeze it as well, but the exporters that write it (paddle2onnx
    1.x after NonMaxSuppression: [N, 1] -> [N]) read the result as rank 1."""
    return [i for i, d in enumerate(dims) if d == 1]


class CheckStaticShapesPass(ir.passes.InPlacePass):
    """Every tensor must have a static shape after preparation (the targets need them), except after an op whose
    output size depends on values (:func:`data_dependent_tail`: a detector's NMS), which OpenVINO and onnxruntime
    run and the static-shape targets refuse (:func:`static_shapes_refusal`).

    A tensor whose shape is partly known (its rank, some dims) but not static is refused with the reason
    (:func:`explain_dynamic_shape`); tensors without any shape are left to the converters, which infer
    what onnx could not and refuse what they cannot.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        tail = data_dependent_tail(model.graph)
        for node in model.graph:
            if node in tail:
                continue
            for out in node.outputs:
                if out.shape is not None and not is_static(out.shape):
                    raise ModelError(explain_dynamic_shape(out) + _nms_hint(model.graph))
        return ir.passes.PassResult(model, False)


def data_dependent_tail(graph: ir.Graph) -> set[ir.Node]:
    """The nodes at or after an op whose output size depends on values (NonZero, NonMaxSuppression...): a
    detector's selection of boxes, which OpenVINO and onnxruntime run as it is and static-shape targets cannot."""
    tail: set[ir.Node] = set()
    for node in graph:
        if is_data_dependent(node) or any(v is not None and v.producer() in tail for v in _reads(node)):
            tail.add(node)
    return tail


def selection_axes(graph: ir.Graph) -> dict[str, int]:
    """The outputs whose row count the data sets (after a data-dependent selection: NonZero, NonMaxSuppression),
    with the axis of their rows: the first dim the graph does not fix."""
    tail = data_dependent_tail(graph)
    axes = {}
    for out in graph.outputs:
        if out.producer() not in tail or out.shape is None:
            continue
        dims = [d if isinstance(d, int) and d >= 0 else None for d in out.shape]
        if None in dims:
            axes[out.name] = dims.index(None)
    return axes


def selection_groups(graph: ir.Graph, axes: dict[str, int]) -> list[tuple[str, ...]]:
    """The outputs of ``axes`` (:func:`selection_axes`) that the same selections size (the same data-dependent ops
    upstream: torchvision's ``boxes``, ``scores`` and ``labels`` gathered by one NMS's kept indices), two or more
    per group, in the graph's output order: their rows are one detection each, read together."""
    sources: dict[str, frozenset[ir.Node]] = {}
    for out in graph.outputs:
        if out.name not in axes:
            continue
        seen: set[ir.Node] = set()
        stack = [out.producer()]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            stack.extend(v.producer() for v in _reads(node) if v is not None)
        sources[out.name] = frozenset(n for n in seen if is_data_dependent(n))
    groups: dict[frozenset[ir.Node], list[str]] = {}
    for name, source in sources.items():
        groups.setdefault(source, []).append(name)
    return [tuple(names) for names in groups.values() if len(names) > 1]


def _reads(node: ir.Node):
    """The values ``node`` reads: its inputs, and those its sub-graphs' nodes read (an If's branches capture
    outer values)."""
    yield from node.inputs
    for attr in node.attributes.values():
        graphs = [attr.value] if attr.type == ir.AttributeType.GRAPH else []
        graphs += list(attr.value) if attr.type == ir.AttributeType.GRAPHS else []
        for sub in graphs:
            for inner in ir.traversal.RecursiveGraphIterator(sub):
                yield from inner.inputs


def static_shapes_refusal(model: ir.Model, target: str) -> str | None:
    """Why ``target``, whose artifacts have static shapes only, cannot take ``model`` (its data-dependent tail,
    which preparation lets through for the targets that run it), or None."""
    tail = data_dependent_tail(model.graph)
    first = next((n for n in model.graph if n in tail), None)
    if first is None:
        return None
    return (
        f"{explain_dynamic_shape(first.outputs[0])}{_nms_hint(model.graph)}; {target} writes static shapes only "
        "(intel-vpu and edgekit quantize take the model as it is)"
    )


def _nms_hint(graph: ir.Graph) -> str:
    """A detector exported with its NMS inside (ultralytics ``export(nms=True)``: NonZero over the score
    threshold, NonMaxSuppression; PaddleDetection's multiclass_nms3, which paddle2onnx writes as
    NonMaxSuppression, Gather and TopK) keeps a number of boxes known only at run time: say so, and how it
    deploys."""
    nms = next(
        (
            n
            for n in ir.traversal.RecursiveGraphIterator(graph)  # torchvision's batched_nms runs it in an If
            if n.op_type == "NonMaxSuppression" and n.domain in ("", "ai.onnx")
        ),
        None,
    )
    if nms is None:
        return ""
    return (
        f"; the graph runs NonMaxSuppression ({nms.name!r}), whose number of boxes depends on the scores: "
        "export the detector without NMS (ultralytics: without nms=True; PaddleDetection: export_model.py -o "
        "exclude_nms=True for PP-YOLOE / PP-YOLOE+, export.nms=False for PicoDet; torchvision: its backbone and "
        "head, without the transform and postprocess) and run NMS on its output"
    )


#: boolean graph inputs that choose a branch of an exporter's merged graph, and what to deploy instead
MERGED_DECODER_FLAGS = {
    "use_cache_branch": "optimum's merged decoder chooses between its no-past and with-past graphs at run time; "
    "deploy the decoder_model.onnx / decoder_with_past_model.onnx that `optimum-cli export onnx "
    "--no-post-process` writes, one graph per step kind",
}


class DeclineControlFlowPass(ir.passes.InPlacePass):
    """Control flow left after constant folding is declined with the op named, for every target alike."""

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        for node in model.graph:
            if node.op_type in CONTROL_FLOW and node.domain in ("", "ai.onnx"):
                nms = _nms_hint(model.graph)
                raise ModelError(
                    f"{node.op_type} node {node.name!r}: control flow ({'/'.join(CONTROL_FLOW)}) is not supported "
                    "by any target"
                    + (
                        nms
                        or _merged_flag(node)
                        or "; export the model with the loop unrolled or the branch chosen"
                        + _condition_inputs(node)
                    )
                )
        return ir.passes.PassResult(model, False)


def _merged_flag(node: ir.Node) -> str:
    """For an If whose condition is one of :data:`MERGED_DECODER_FLAGS`: what to deploy instead."""
    cond = node.inputs[0] if node.op_type == "If" and node.inputs else None
    if cond is None or not cond.is_graph_input() or cond.name not in MERGED_DECODER_FLAGS:
        return ""
    return f"; its condition is the input {cond.name!r}: {MERGED_DECODER_FLAGS[cond.name]}"


def _condition_inputs(node: ir.Node) -> str:
    """For an If left after folding (its condition is not a shape test): the graph inputs its condition is computed
    from, e.g. Silero VAD's sample rate ``sr``."""
    if node.op_type != "If" or not node.inputs or node.inputs[0] is None:
        return ""
    found: list[str] = []
    todo, seen = [node.inputs[0]], set()
    while todo:
        value = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if value.is_graph_input():
            found.append(value.name or "")
        elif (producer := value.producer()) is not None:
            todo.extend(v for v in producer.inputs if v is not None)
    if not found:
        return ""
    return (
        f" (its condition is computed from the value of input(s) {', '.join(repr(n) for n in sorted(found))})"
    )
