"""Verification of a model whose outputs come out of a data-dependent selection: a detector exported with its
NMS (ultralytics ``export(nms=True)``: a NonZero over the score threshold and NonMaxSuppression; PaddleDetection's
``multiclass_nms3``: NonMaxSuppression, Gather, TopK).

Which boxes such a model keeps is a discontinuous function of its scores: a score one rounding step across the
threshold, or two boxes whose overlap is one step across the IoU bar, add or drop a whole row. Comparing the
artifact's detections with the source's therefore judges rounding, not the conversion (a seeded YOLOv8n with NMS,
FP16 IR: cosine 0.93 to the source on 3 photos, every box right). So the model is judged in two parts:

- the **body**, up to the tensors the selection reads (its *frontier*: boxes, scores, class ids before any
  choice), by the precision's yardstick (:mod:`edgekit.targets.yardstick`), as if they were outputs;
- the **tail**, from the first choice on (:data:`CHOICE_OPS` that feed the selection, and the
  :data:`~edgekit.core.shape_checks.DATA_DEPENDENT` ops themselves), by running the source's tail on the artifact's own frontier values: the
  artifact's outputs must be what the source computes from them, within the same yardstick.

Both parts together are the whole model, and neither part forgives a wrong conversion: a wrong body misses the
yardstick on the frontier, a wrong tail differs from the source's tail fed the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from edgekit.core.errors import TargetError
from edgekit.core.protoutil import node_reads
from edgekit.core.shape_checks import is_data_dependent
from edgekit.targets.yardstick import (
    YARDSTICKS,
    IllConditionedSamples,
    OutputKind,
    Yardstick,
    compare_outputs,
    judge_outputs,
    verify_outputs,
)

#: Ops whose output is a choice made on float values (an index, a comparison, a rounding to an integer): one
#: rounding step moves it by a whole unit. Those that feed a data-dependent selection start its tail.
CHOICE_OPS = frozenset(
    {"ArgMax", "ArgMin", "TopK", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Equal", "Round", "Floor",
     "Ceil"}
)  # fmt: skip


#: The name the tensors a selection reads are judged under together (fp32: :func:`verify_with_tail`).
_JOINED = "the tensors the selection reads, together"

#: The tail's bar: the artifact's tail and the source's, fed the same values, both compute in float32.
TAIL_YARDSTICK = YARDSTICKS["fp32"]


@dataclass(frozen=True)
class SelectionTail:
    """The tail of a model from its first choice on (see the module docstring).

    ``nodes``: indices of the tail's nodes in the graph; ``frontier``: the tensors computed before it that it
    reads; ``outputs``: the graph outputs it computes; ``selection``: the data-dependent op it holds (for
    messages)."""

    nodes: tuple[int, ...]
    frontier: tuple[str, ...]
    outputs: tuple[str, ...]
    selection: str


def _float_input(node: onnx.NodeProto, types: Mapping[str, int]) -> bool:
    """Whether ``node`` chooses on float values (an input of unknown type counts: taking a choice into the tail
    only moves the frontier before it, judging no less)."""
    first = node.input[0] if node.input else ""
    return types.get(first, onnx.TensorProto.FLOAT) in (
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.DOUBLE,
    )


def selection_tail(proto: onnx.ModelProto) -> SelectionTail | None:
    """The :class:`SelectionTail` of ``proto`` (shapes inferred), or None when it runs no data-dependent op."""
    graph = proto.graph
    nodes = list(graph.node)
    selections = [k for k, n in enumerate(nodes) if is_data_dependent(n)]
    if not selections:
        return None
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info, *graph.output]}
    types.update((t.name, t.data_type) for t in graph.initializer)

    def descendants(starts: Sequence[int]) -> set[int]:
        found = set(starts)
        for k, node in enumerate(nodes):  # topological order
            if k not in found and any(producer.get(i) in found for i in node_reads(node)):
                found.add(k)
        return found

    first = descendants(selections)
    ancestors: set[int] = set()
    stack = [producer[i] for k in first for i in node_reads(nodes[k]) if i in producer]
    while stack:
        k = stack.pop()
        if k not in ancestors and k not in first:
            ancestors.add(k)
            stack.extend(producer[i] for i in node_reads(nodes[k]) if i in producer)
    choices = [k for k in ancestors if nodes[k].op_type in CHOICE_OPS and _float_input(nodes[k], types)]
    tail = descendants(selections + choices)
    frontier: dict[str, None] = {}
    for k in sorted(tail):
        for name in node_reads(nodes[k]):
            p = producer.get(name)
            if p is not None and p not in tail and nodes[p].op_type != "Constant":
                frontier[name] = None
    computed = {o for k in tail for o in nodes[k].output}
    return SelectionTail(
        nodes=tuple(sorted(tail)),
        frontier=tuple(frontier),
        outputs=tuple(o.name for o in graph.output if o.name in computed),
        selection=f"{nodes[selections[0]].op_type} node {nodes[selections[0]].name!r}",
    )


def tail_model(
    proto: onnx.ModelProto, tail: SelectionTail, frontier: Mapping[str, np.ndarray]
) -> onnx.ModelProto:
    """The source's tail alone: the frontier (typed and shaped as ``frontier``'s values) and the graph inputs it
    reads in, the tail's outputs out; the Constant nodes and initializers it reads come along."""
    graph = proto.graph
    nodes = [graph.node[k] for k in tail.nodes]
    read = {i for n in nodes for i in node_reads(n)}
    constants = [n for n in graph.node if n.op_type == "Constant" and n.output[0] in read]
    inputs = [
        onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(frontier[name].dtype), list(frontier[name].shape)
        )
        for name in tail.frontier
    ]
    inputs += [i for i in graph.input if i.name in read and i.name not in tail.frontier]
    outputs = [o for o in graph.output if o.name in tail.outputs]
    sub = onnx.helper.make_graph(
        constants + nodes,
        f"{graph.name}_tail",
        inputs,
        outputs,
        initializer=[t for t in graph.initializer if t.name in read],
    )
    model = onnx.helper.make_model(sub, opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    return model


def body_model(proto: onnx.ModelProto, tail: SelectionTail) -> onnx.ModelProto:
    """``proto`` without its tail: the tensors the tail reads (and the outputs computed before it) out. The body's
    other references (float64, the int8 kernels' noise) run this: the onnx reference evaluator cannot run every tail
    (its Flatten of an empty array)."""
    graph = proto.graph
    dropped = set(tail.nodes)
    kept = [n for k, n in enumerate(graph.node) if k not in dropped]
    produced = {o for n in kept for o in n.output} | {i.name for i in graph.input}
    types = {v.name: v for v in [*graph.value_info, *graph.output]}
    outputs = [
        types.get(name) or onnx.helper.make_empty_tensor_value_info(name)
        for name in [*tail.frontier, *(o.name for o in graph.output if o.name not in tail.outputs)]
        if name in produced
    ]
    sub = onnx.helper.make_graph(
        kept, f"{graph.name}_body", list(graph.input), outputs, list(graph.initializer)
    )
    model = onnx.helper.make_model(sub, opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    model.functions.extend(proto.functions)
    return model


def onnx_tail_run(
    sub: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]]
) -> list[dict[str, np.ndarray]]:
    """The tail model ``sub`` (:func:`tail_model`) on ``feeds`` by ONNX's semantics: every artifact's selection is
    held to them. The onnx reference evaluator, in the feeds' float32, with the kernels :mod:`edgekit.core.exact`
    vectorises (:func:`~edgekit.core.exact.kernel_ops`: NonMaxSuppression, Conv, ConvTranspose, the pools,
    RoiAlign...; the evaluator's own loop in Python per output point took most of a two-stage detector's deploy);
    where it fails (its Flatten of an empty array: RetinaNet's level without a candidate), OpenVINO with the IoU
    bar read as ONNX reads it (:mod:`edgekit.core.ov_nms`: OpenVINO's own NonMaxSuppression suppresses a box
    exactly at the bar)."""
    from edgekit.core.exact import kernel_ops
    from onnx.reference import ReferenceEvaluator

    names = [o.name for o in sub.graph.output]
    try:
        evaluator = ReferenceEvaluator(sub, new_ops=kernel_ops())
        return [dict(zip(names, evaluator.run(names, dict(f)), strict=True)) for f in feeds]
    except Exception:  # noqa: BLE001 - the reference evaluator's gaps raise many types
        from edgekit.core.ov_nms import nms_bar_as_onnx
        from edgekit.core.runtime import HostRunner

        host = HostRunner(nms_bar_as_onnx(sub))
        return [{n: np.asarray(r[n]) for n in names} for r in (host.run(dict(f)) for f in feeds)]


def onnx_tail_run_float64(
    sub: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]]
) -> list[dict[str, np.ndarray]] | None:
    """The tail model ``sub`` on ``feeds`` in float64 (the tail's float tensors, its control flow's too, and the
    feeds widened; :func:`onnx_tail_run`'s kernels): what the exact model computes from those values, without
    float32 rounding. None where the reference evaluator cannot run it."""
    from edgekit.core.exact import float64_model, kernel_ops
    from onnx.reference import ReferenceEvaluator

    names = [o.name for o in sub.graph.output]
    wide = [{n: a.astype(np.float64) if a.dtype.kind == "f" else a for n, a in f.items()} for f in feeds]
    try:
        evaluator = ReferenceEvaluator(float64_model(sub, control_flow=True), new_ops=kernel_ops())
        return [dict(zip(names, evaluator.run(names, f), strict=True)) for f in wide]
    except Exception:  # noqa: BLE001 - the reference evaluator's gaps raise many types
        return None


def _flat(results: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[dict[str, np.ndarray]]:
    """Each output of every sample flattened and the samples joined: one "sample" per output, whatever shape
    each sample's selection had."""
    return [{n: np.concatenate([np.ravel(r[n]).astype(np.float64) for r in results]) for n in names}]


def _padded(results: Sequence[Mapping[str, np.ndarray]], names: Sequence[str]) -> list[dict[str, np.ndarray]]:
    """Each output of every sample flattened and padded with its own last value to the longest sample's size: one
    row per sample (:func:`~edgekit.targets.yardstick.judge_outputs` stacks them), each row's errors unchanged."""
    flat = [{n: np.ravel(r[n]).astype(np.float64) for n in names} for r in results]
    longest = {n: max(f[n].size for f in flat) for n in names}
    return [
        {
            n: np.pad(f[n], (0, longest[n] - f[n].size), mode="edge") if f[n].size else np.zeros(longest[n])
            for n in names
        }
        for f in flat
    ]


def _judge_tail(
    tail: SelectionTail,
    expected: Sequence[Mapping[str, np.ndarray]],
    got: Sequence[Mapping[str, np.ndarray]],
    exact: Callable[[], list[dict[str, np.ndarray]] | None],
) -> tuple[dict[str, Any], list[str]]:
    """The tail's outputs judged: ``got`` (the artifact's) against ``expected`` (the source's tail run in float32
    on the artifact's own frontier values), at fp32's bar over the samples joined. An output beyond it is judged
    as fp32 judges a body (:func:`~edgekit.targets.yardstick.judge_outputs`' float64 fallback) against ``exact()``,
    the same tail on the same values in float64, sample by sample: within the bar of float64, or, on a sample where
    the source's float32 tail is itself beyond the bar off float64 (a head that amplifies rounding), within
    ``FLOAT32_FLOOR_FACTOR`` times its distance while another sample keeps the bar. The float64 tail runs on the
    frontier values of the artifact, not of a float64 body: a selection is discontinuous, so the exact body's
    values may keep other boxes, in another order, and no row could be compared. Returns the figures and one line
    per failed output."""
    # Both tails run in float32 on the same values: one rounding apart at most, so they are held to fp32's bar.
    flat_expected, flat_got = _flat(expected, tail.outputs), _flat(got, tail.outputs)
    kinds = {n: OutputKind(why=f"computed by the selection ({tail.selection})") for n in tail.outputs}
    figures = compare_outputs(flat_expected, flat_got, kinds)

    def float64() -> list[dict[str, np.ndarray]]:
        wide = exact()
        if wide is None or any(
            np.shape(w[n]) != np.shape(g[n]) for w, g in zip(wide, got, strict=True) for n in tail.outputs
        ):
            raise _NoExactTail
        return _padded(wide, tail.outputs)

    per_sample_expected, per_sample_got = _padded(expected, tail.outputs), _padded(got, tail.outputs)
    try:
        failures = judge_outputs(figures, TAIL_YARDSTICK, per_sample_expected, per_sample_got, float64)
    except _NoExactTail:  # no float64 tail, or it keeps other rows: the float32 judgement alone
        figures = compare_outputs(flat_expected, flat_got, kinds)
        failures = judge_outputs(figures, TAIL_YARDSTICK, flat_expected, flat_got)
    return figures, failures


class _NoExactTail(Exception):
    """The tail has no float64 reference row for row (see :func:`_judge_tail`)."""


def verify_with_tail(
    proto: onnx.ModelProto,
    tail: SelectionTail,
    samples: Sequence[Mapping[str, np.ndarray]],
    reference: Callable[[Sequence[str]], list[dict[str, np.ndarray]]],
    artifact_run: Callable[[Sequence[str]], list[dict[str, np.ndarray]]],
    tail_run: Callable[[onnx.ModelProto, Sequence[Mapping[str, np.ndarray]]], list[dict[str, np.ndarray]]],
    stick: Yardstick,
    kinds: Mapping[str, OutputKind],
    target: str,
    artifact: str,
    noise: Callable[[Sequence[str]], list[dict[str, np.ndarray]]] | None = None,
    exact_tail_run: Callable[
        [onnx.ModelProto, Sequence[Mapping[str, np.ndarray]]], list[dict[str, np.ndarray]] | None
    ]
    | None = None,
) -> dict[str, Any]:
    """Judge ``artifact_run``'s outputs in two parts (module docstring). ``reference`` / ``artifact_run`` run the
    source / the artifact on ``samples`` with the given tensors as extra outputs; ``tail_run`` runs a tail model
    on feeds; ``noise``: the yardstick's other reference (:func:`edgekit.targets.yardstick.judge_outputs`) with
    the given extra outputs, for the body; ``exact_tail_run`` (:func:`onnx_tail_run_float64`): the tail's float64
    reference on the same feeds, for an output beyond the bar of ``tail_run``'s float32 (:func:`_judge_tail`).
    A TargetError names what failed; else the figures."""
    names = list(tail.frontier)
    ref = reference(names)
    got = artifact_run(names)
    outputs = [n for n in ref[0] if n not in names]
    missing = [n for n in [*names, *outputs] if n not in got[0]]
    if missing:
        raise TargetError(f"{target}: verification cannot read {missing[:3]} from {artifact}")
    floats = [n for n in names if np.asarray(ref[0][n]).dtype.kind == "f"]
    for name in (n for n in names if n not in floats):  # integer tensors before any choice: exact
        if any(not np.array_equal(r[name], g[name]) for r, g in zip(ref, got, strict=True)):
            raise TargetError(
                f"{target}: verification failed: {artifact} computes {name!r}, read by the selection after "
                f"it ({tail.selection}), differently from the source model"
            )
    plain = OutputKind(why="a tensor the data-dependent selection reads")
    others = [n for n in outputs if n not in tail.outputs]

    # fp32's bar is 1e-4 of a tensor's range. The same detector exported without its NMS outputs boxes and scores
    # as one tensor (ultralytics' [1, 84, N]) and is judged on that range; the scores alone (range 1 against the
    # boxes' 160) are held 160 times tighter, below float32's own noise on seeded samples (yolov8n nms=True: 2.1e-4
    # of the scores' range, the host's float32 2.6e-4 off float64). So at fp32 the tensors the selection reads are
    # judged each alone and, where that fails, together; a wrong tensor among them is still far off together (a
    # wrong score is ~1/160 of the joint range). The coarser yardsticks (cosine, SQNR) judge each tensor alone.
    def body_of(run: Mapping[str, np.ndarray], joined: bool) -> dict[str, np.ndarray]:
        if not joined:
            return {n: run[n] for n in [*floats, *others]}
        together = np.concatenate([np.ravel(run[n]).astype(np.float32) for n in floats])
        return {_JOINED: together, **{n: run[n] for n in others}}

    def judge(joined: bool) -> tuple[dict[str, Any], list[str]]:
        body_names = ([_JOINED] if joined else floats) + others
        figures = verify_outputs(
            [body_of(r, joined) for r in ref],
            [body_of(g, joined) for g in got],
            stick,
            {n: kinds.get(n, plain) if n in outputs else plain for n in body_names},
            target,
            f"{artifact} (before the selection by {tail.selection})",
            (lambda: [body_of(r, joined) for r in noise(names)]) if noise is not None else None,
        )
        return figures, body_names

    plain = OutputKind(why="a tensor the data-dependent selection reads")
    others = [n for n in outputs if n not in tail.outputs]
    try:
        body, body_names = judge(False)
    except TargetError as alone:
        if stick.precision != "fp32" or len(floats) < 2:
            raise
        try:
            body, body_names = judge(True)
        except TargetError:
            raise alone from None  # each tensor's line (an ill-conditioned one retries gentler samples)
    sub = tail_model(proto, tail, {n: np.asarray(got[0][n]) for n in names})
    graph_inputs = {i.name for i in sub.graph.input} - set(names)
    feeds = [
        {**{n: s[n] for n in graph_inputs}, **{n: g[n] for n in names}}
        for s, g in zip(samples, got, strict=True)
    ]
    expected = tail_run(sub, feeds)
    for k, (e, g) in enumerate(zip(expected, got, strict=True)):
        for name in tail.outputs:
            if np.shape(e[name]) != np.shape(g[name]):
                raise TargetError(
                    f"{target}: verification failed: on sample {k + 1}, {artifact}'s output {name!r} has shape "
                    f"{list(np.shape(g[name]))} where the source's selection ({tail.selection}) on the same "
                    f"scores gives {list(np.shape(e[name]))}"
                )
    tail_figures, failures = _judge_tail(
        tail, expected, got, lambda: exact_tail_run(sub, feeds) if exact_tail_run is not None else None
    )
    if failures:
        line = (
            f"{target}: verification failed: the selection by {tail.selection} in {artifact} differs from the "
            f"source's selection run on the same values, over {len(samples)} sample(s)"
        )
        failed = [e for e in tail_figures["outputs"].values() if not e["passed"]]
        if any(e.get("float64_reference", {}).get("ill_conditioned_samples") for e in failed):
            # as verify_outputs rules for a body: the samples, not the conversion, are what float32 cannot judge
            # (a deploy without data retries gentler seeded samples)
            raise IllConditionedSamples(
                f"{line}, on some of which the source's own float32 tail is near or beyond the bar off float64 "
                f"(the samples drive the network where float32 rounding is amplified): {'; '.join(failures)}"
            )
        raise TargetError(f"{line}: {'; '.join(failures)}")
    same = {
        n: sum(
            np.shape(r[n]) == np.shape(g[n]) and np.allclose(r[n], g[n])
            for r, g in zip(ref, got, strict=True)
        )
        for n in tail.outputs
    }
    end_to_end: dict[str, Any] = {"samples_with_the_same_selection": same}
    if all(v == len(ref) for v in same.values()):
        end_to_end["figures"] = compare_outputs(_flat(ref, tail.outputs), _flat(got, tail.outputs))["outputs"]
    judged = {**{n: body["outputs"][n] for n in outputs if n in body["outputs"]}, **tail_figures["outputs"]}
    for name in tail.outputs:
        judged[name]["judged_on"] = "the source's selection run on the artifact's values before it"
    return {
        "yardstick": stick.precision,
        "max_rel_error": max(e["max_rel_error"] for e in judged.values()),
        "passed": True,
        "samples": len(samples),
        "outputs": judged,
        "selection_tail": {
            "selection": tail.selection,
            "how": "the body judged on the tensors the selection reads; the outputs against the source's selection "
            "run on the artifact's own values of those tensors",
            "frontier": {n: body["outputs"][n] for n in body_names if n not in others},
            "tail_nodes": len(tail.nodes),
            "end_to_end": end_to_end,
        },
    }
