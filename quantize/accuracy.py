"""Accuracy-aware quantization: the fewest layers restored (in what the target runs) that meet a budget.

1. Statistics once: the fp32 model is calibrated once per scheme, observing every tensor a restore could
   leave quantized (histograms and channel means too when the target's int8 fixes need them); every
   candidate only chooses parameters and rewrites (:func:`edgekit.quantize.pipeline.quantize`).
2. The fp32 answers on the accuracy set once (:class:`~edgekit.quantize.budget.Reference`).
2b. Whole-model int8 fixes (bias correction, the other range estimators: ``mean_minmax``, and
   ``percentile``/``mse`` when histograms were collected), each measured on the whole accuracy set; the best
   better than plain int8 is the starting point.
3. Rank, cheap: the per-layer SQNR the quantizer reports, turned into the noise each layer *adds* (its output's
   relative noise power minus its inputs'), on the first SQNR_SAMPLES of the ranking subset (while the executor
   runs the base model on the ranking subset).
4. Rank, measured: each of the top candidates restored alone (its choices in the target's order, a later one only
   when the earlier ones do not meet the budget), its effect on the budget's metric over the ranking subset, in
   parallel, one layer per worker at a time: a single restore that meets the budget there and on the whole set
   ends the search (those meeting it on the ranking subset are confirmed on the whole set in one round). When
   none helps, the next ones are measured (re-rank); int8-only targets stop instead when no single fix moves the
   budget's metric at all.
5. Restore in that order: a galloping then parallel (k-ary) bisection over the ranked list finds the shortest
   prefix meeting the budget, confirmed on the whole accuracy set (the search goes on there when it fails);
   layers whose removal keeps the budget on the whole set are dropped (a restore that did not help): one by
   one for a few, by delta debugging (:func:`~edgekit.quantize.prune.minimise`) for a long prefix. The measured ranking orders by the
   budget's sample counts, then by the shortfall of the samples lost (``Measurement.shortfall``, continuous):
   a restore that moves a borderline sample toward its class ranks before one that does nothing.
6. The curve: the metric on the whole accuracy set after each restored layer, for the report.

Candidates run on an :mod:`~edgekit.quantize.executors` executor: a local process pool or a Ray cluster; once
the base is chosen, each runs only from the last cached activation of the base model it shares
(:mod:`~edgekit.quantize.suffix`; the workers build that cache while step 3 runs, and share it). A candidate
measured before on the same samples is not run again, and one measured on some of them (the ranking subset, then
the whole set) runs only the others: its outputs are kept per sample.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import DataError, QuantizationError
from edgekit.core.shape_checks import selection_axes
from edgekit.quantize import rules
from edgekit.quantize.budget import Budget, Measurement, Reference
from edgekit.quantize.calibrate import Track, no_progress
from edgekit.quantize.candidates import KEEP_VALUES, Search, Step
from edgekit.quantize.executors import (
    KERNEL_RUNNER_TARGETS,
    EvalContext,
    Task,
    make_executor,
    prestart,
)
from edgekit.quantize.options import HISTOGRAM_METHODS, QuantizeOptions
from edgekit.quantize.pipeline import calibrate, layer_hessians, observing_options, quantize
from edgekit.quantize.plan import QuantPlan, make_plan
from edgekit.quantize.prune import minimise as _minimise
from edgekit.quantize.prune import prune as _prune
from edgekit.quantize.restores import Restore, apply_restores, available_restores, fused_followers

log = logging.getLogger("edgekit")


@dataclass(frozen=True)
class SearchOptions:
    budget: Budget
    #: ``process`` | ``inline`` | ``ray`` | ``ray://HOST:PORT``.
    executor: str = "process"
    workers: int | None = None
    #: Accuracy samples the ranking and bisection run on (the whole set confirms).
    ranking_samples: int = 50
    #: Candidates measured one by one after the cheap ranking.
    top_k: int = 12
    #: nnapi: layers the int8 fixes cannot save may stay float on the CPU partition.
    allow_cpu_fallback: bool = False
    #: Candidates run from the base model's cached activations (only what they change; same answers).
    cached_suffix: bool = True


@dataclass
class SearchResult:
    target: str
    budget: Budget
    met: bool
    #: (node, op_type, restore name) in the order restored.
    restored: list[tuple[str, str, str]]
    options: QuantizeOptions
    base: Measurement
    final: Measurement
    #: Whole-set metric after 0, 1, ... restored layers (the report's plot; at CURVE_POINTS points for many).
    curve: list[Measurement]
    steps: list[Step]
    quantizable_layers: int
    ranking_samples: int
    accuracy_samples: int
    executor: str
    wall_s: float
    size_bytes: tuple[int, int] = (0, 0)
    #: How many layers were restored at each curve point.
    curve_at: list[int] = field(default_factory=list)
    restores: dict[str, str] = field(default_factory=dict)
    #: Layers that would need float when the int8 fixes fall short (nnapi).
    float_needed: list[str] = field(default_factory=list)
    #: Whole-model int8 fixes applied before any layer was restored (``bias-correction``).
    base_fixes: list[str] = field(default_factory=list)
    #: The calibration statistics of the search (every tensor observed): quantizing with ``options`` reuses them.
    statistics: Any = field(default=None, repr=False)
    #: The int8 options the search started from (the scheme with its whole-model fixes, nothing restored).
    base_options: Any = field(default=None, repr=False)

    def to_json(self) -> dict:
        b = self.budget
        return {
            "target": self.target,
            "budget": {"kind": b.kind, "flag": b.flag, "value": b.value},
            "met": self.met,
            "restored": [
                {"node": n, "op_type": o, "restore": r, "what": self.restores.get(r, r)}
                for n, o, r in self.restored
            ],  # fmt: skip
            "base": self.base.to_json(),
            "final": self.final.to_json(),
            "curve": [{"restored": i, **m.to_json()} for i, m in zip(self.curve_at, self.curve, strict=True)],
            "steps": [s.to_json() for s in self.steps],
            "evaluations": len(self.steps),
            "quantizable_layers": self.quantizable_layers,
            "restored_fraction": len(self.restored) / max(self.quantizable_layers, 1),
            "ranking_samples": self.ranking_samples,
            "accuracy_samples": self.accuracy_samples,
            "executor": self.executor,
            "wall_s": self.wall_s,
            "size_bytes": {"int8": self.size_bytes[0], "restored": self.size_bytes[1]},
            "float_needed": self.float_needed,
            "base_fixes": self.base_fixes,
        }

    def summary(self) -> str:
        b = self.budget
        layers = ", ".join(f"{n} ({r})" for n, _, r in self.restored) or "none"
        return (
            f"{self.target}: {b.describe()} {'met' if self.met else 'NOT met'}: {b.format(self.final.metric)} "
            f"(int8 {b.format(self.base.metric)}) with {len(self.restored)}/{self.quantizable_layers} layers "
            f"restored: {layers}"
        )


class _NoTarget:
    """`edgekit quantize` without --target: the QDQ file's own restores, its own scheme."""

    name = "onnx"
    precisions: dict = {}

    def quantize_options(self, base: QuantizeOptions) -> QuantizeOptions:
        return base


def quantizable_layers(model: ir.Model, plan: QuantPlan) -> list[ir.Node]:
    """The nodes a restore can act on: quantized nodes that compute (a weight, or their own output scale);
    same-scale data movement (reshapes, pooling by max) and fused activations are not layers of their own."""
    floats = {f.node for f in plan.float_ops}
    fused = set(plan.fused.values())
    layers = []
    for node in model.graph:
        if node.name in floats or node.name in fused:
            continue
        rule = rules.rule_for(node)
        if rule is None or (rule.weight is None and rule.same_scale):
            continue
        layers.append(node)
    return layers


def _observe_all(model: ir.Model, options: QuantizeOptions) -> QuantPlan:
    """The integer-head plan with nothing derived and nothing fixed: statistics then hold every tensor that a
    restore can leave quantized on its own (a Concat's output, a Sigmoid's, ...)."""
    plan = make_plan(model, options.exclude, False)
    plan.derived = set()
    plan.fixed = {}
    return plan


def _enclosed_data_movement(model: ir.Model, plan: QuantPlan, layers: set[str]):
    """A function: float nodes -> the quantized data-movement ops (not layers: reshapes, pooling by max,
    Concat, ...) whose every neighbour is float, repeatedly: a region of float layers is float throughout
    instead of keeping int8 tensors between them. Float neighbours: restored or float nodes, ops the plan never
    quantizes (no rule: Shape, Cast, ...) and the graph's inputs and outputs (every layer restored is the float
    model: PP-OCRv4 rec kept 35 reshapes, transposes and slices int8 between its float attention layers)."""
    floats = {f.node for f in plan.float_ops}
    fused = set(plan.fused.values())
    movers = [
        n for n in model.graph if n.name not in floats | fused | layers and rules.rule_for(n) is not None
    ]
    quantized = layers | fused | {n.name for n in movers}
    neighbours: dict[str, list[str | None]] = {}
    for node in movers:
        near: list[str | None] = []
        for v in node.inputs:
            if v is None or v.const_value is not None:
                continue
            producer = v.producer()
            near.append(producer.name if producer is not None else None)  # None: a graph input
        for out in node.outputs:
            near += [u.node.name for u in out.uses()]
            if out.is_graph_output():
                near.append(None)
        neighbours[node.name] = near

    def enclosed(excluded: frozenset[str]) -> frozenset[str]:
        # The largest set of movers whose every neighbour is float or in the set (a chain of reshapes between two
        # float layers goes float together): start from every mover, drop those next to a quantized node.
        done = set(excluded) | floats
        kept = {name for name, near in neighbours.items() if name not in done and near}
        changed = True
        while changed:
            changed = False
            for name in list(kept):
                if any(
                    n is not None and n in quantized and n not in done and n not in kept
                    for n in neighbours[name]
                ):
                    kept.discard(name)
                    changed = True
        return frozenset(kept)

    return enclosed


def _noise(sqnr_db: float | None) -> float:
    return 0.0 if sqnr_db is None else 10.0 ** (-sqnr_db / 10.0)


def cheap_ranking(
    model: ir.Model, plan: QuantPlan, layers: Sequence[ir.Node], layer_rows: Sequence[dict]
) -> list[tuple[str, float]]:
    """(node, added relative noise power) per layer, worst first, from the quantizer's per-layer SQNR rows
    (``tensor``, ``sqnr_db``): a layer's output noise minus the largest of its inputs'."""
    sqnr = {r["tensor"]: r["sqnr_db"] for r in layer_rows}
    outputs_of = {n.name: n.outputs[0].name for n in model.graph if n.outputs}
    scores = []
    for node in layers:
        out = node.outputs[0].name
        act = plan.fused.get(out)
        if act is not None:
            out = outputs_of.get(act, out)
        inputs = [v.name for v in node.inputs if v is not None and v.name in sqnr]
        before = max((_noise(sqnr[i]) for i in inputs), default=0.0)
        added = max(_noise(sqnr.get(out)) - before, 0.0)
        scores.append((node.name, added))
    scores.sort(key=lambda s: -s[1])
    return scores


#: Samples the cheap per-layer SQNR ranking runs on (the first of the ranking subset).
SQNR_SAMPLES = 8
#: The curve is measured after each restored layer up to this many, else at this many points.
CURVE_POINTS = 16


def curve_points(count: int) -> list[int]:
    """The numbers of restored layers the curve is measured at: each one, or CURVE_POINTS spread evenly."""
    if count <= CURVE_POINTS:
        return list(range(count + 1))
    return sorted({round(i * count / CURVE_POINTS) for i in range(CURVE_POINTS + 1)})


def informative(badness: Sequence[float], size: int) -> tuple[int, ...]:
    """Up to ``size`` sample indices: the worst half by ``badness`` (those int8 gets wrong), then the first
    others in order."""
    order = sorted(range(len(badness)), key=lambda i: -badness[i])
    worst = [i for i in order[: max(1, size // 2)] if badness[i] > 0]
    rest = [i for i in range(len(badness)) if i not in set(worst)][: max(0, size - len(worst))]
    return tuple(sorted(worst + rest))


def _load_samples(
    dataset: Iterable, limit: int | None
) -> tuple[list[dict[str, np.ndarray]], list[int | None]]:
    inputs, labels = [], []
    for i, sample in enumerate(dataset):
        if limit is not None and i >= limit:
            break
        inputs.append({k: np.array(v) for k, v in sample.inputs.items()})
        labels.append(None if sample.label is None else int(sample.label))
    if not inputs:
        raise DataError("the accuracy data set is empty")
    return inputs, labels


def search(
    model: ir.Model,
    calibration: Iterable,
    accuracy: Iterable,
    target: Any,
    base_options: QuantizeOptions,
    options: SearchOptions,
    *,
    track: Track = no_progress,
    statistics: Any = None,
    accuracy_limit: int | None = None,
    say: Callable[[str], None] = lambda line: None,
) -> SearchResult:
    """The fewest layers restored, with what ``target`` runs, for ``model`` quantized with ``target``'s
    scheme of ``base_options`` to meet ``options.budget`` on ``accuracy``.

    ``target`` None: the QDQ file's own restores (layers left float). Raises a QuantizationError (one line,
    with the best reached and the layers) when the budget cannot be met.
    """
    from edgekit.core.runtime import HostRunner
    from edgekit.quantize.evaluation import evaluate as per_layer_sqnr

    start = time.perf_counter()
    target = target if target is not None else _NoTarget()
    budget = options.budget
    sized_by_data = list(selection_axes(model.graph))
    if sized_by_data:
        names = ", ".join(repr(n) for n in sized_by_data)
        raise DataError(
            f"{budget.flag} is measured on outputs of one shape per sample, and the model's output(s) {names} keep as "
            "many rows as its selection (NonMaxSuppression / NonZero) finds on each: search on the detector exported "
            "without its NMS; --eval compares the whole detector's rows"
        )
    scheme = target.quantize_options(base_options)
    choices = available_restores(target, options.allow_cpu_fallback)
    integer_only = all(r.integer for r in choices if not r.fallback)
    if any(r.kind == "range" for r in choices) and scheme.method not in HISTOGRAM_METHODS:
        observe_options = QuantizeOptions(**{**_fields(scheme), "method": "mse"})
    else:
        observe_options = scheme
    # Channel means always: bias correction of the whole model is the first int8 fix tried, on every target;
    # the layers' input moments too: GPTQ rounding of the weights is another (whole_model_fixes).
    observe_options = observing_options(
        QuantizeOptions(**{**_fields(observe_options), "bias_correction": True, "weight_rounding": "gptq"})
    )

    inputs, labels = _load_samples(accuracy, accuracy_limit)
    if budget.needs_labels and any(label is None for label in labels):
        raise DataError(
            f"{budget.flag} needs labels and the accuracy data has none; use --min-agreement or --min-cosine"
        )
    # The pool's workers start (interpreters, imports) while this process calibrates.
    prestart(options.executor, options.workers)
    stats = statistics
    # The accuracy set is the calibration set: calibration's first pass (the fp32 model itself, when depthwise
    # inputs are equalized) gives the fp32 answers too, without a pass of their own.
    answers: list | None = [] if accuracy is calibration else None
    if stats is None or (observe_options.method in HISTOGRAM_METHODS and not stats.histograms):
        stats = calibrate(model, _observe_all(model, scheme), calibration, observe_options, track, answers)
    if stats.hessians is None:  # statistics given, collected without the moments
        stats.hessians = layer_hessians(
            model, _observe_all(model, scheme), calibration, scheme, stats.equalization
        )

    output_names = [v.name for v in model.graph.outputs]
    if not answers or len(answers) < len(inputs):
        fp32_runner = HostRunner(ir.to_proto(model))
        answers = [
            fp32_runner.run({k: s[k] for k in fp32_runner.input_names})
            for s in track(inputs, "fp32 reference", len(inputs))
        ]
        del fp32_runner
    reference = Reference.build(output_names, answers[: len(inputs)], labels, budget)
    everything = tuple(range(len(inputs)))
    ranking = everything[: max(1, min(options.ranking_samples, len(inputs)))]

    base = quantize(model, (), scheme, statistics=stats)
    plan = base.plan
    layers = quantizable_layers(model, plan)
    if not layers:
        raise QuantizationError("nothing to restore: the model has no quantized layer")
    op_types = {n.name: n.op_type for n in layers}
    followers = fused_followers(model, plan)
    enclosed = _enclosed_data_movement(model, plan, {n.name for n in layers})

    class _Samples:
        def __iter__(self):
            for i in ranking:
                yield _Sample(inputs[i], labels[i])

        def __len__(self):
            return len(ranking)

    context = EvalContext(
        uuid.uuid4().hex, ir.to_proto(model).SerializeToString(), stats, inputs, reference, budget,
        exact_qdq=target.name not in KERNEL_RUNNER_TARGETS,
    )  # fmt: skip
    with make_executor(options.executor, context, options.workers) as executor:
        import os

        context.threads = max(1, (os.cpu_count() or 1) // max(executor.workers, 1))
        s = Search(executor, budget, ranking, everything)
        s.stats = stats
        s.reference = reference
        # The outputs a measurement reads, kept per candidate and sample when small (a classifier's scores; not a
        # recogniser's [T, C] sequences on a large set).
        read = output_names if budget.kind == "min_cosine" else output_names[:1]
        if sum(np.size(answers[0][n]) for n in read) <= KEEP_VALUES:
            s.keep = tuple(read)

        def with_restores(restores: dict[str, str]) -> QuantizeOptions:
            options_ = apply_restores(scheme, restores, followers)
            if not any(r == "float" for r in restores.values()):
                return options_
            return replace(options_, exclude=options_.exclude | enclosed(options_.exclude))

        base_fixes: list[str] = []
        # Step 3b: int8 fixes of the whole model, legal on every target, measured together on the whole set:
        # bias correction of every layer and the other range estimators (no method wins on every model: see
        # docs/quantization.md); the best, if better than plain int8, is the search's starting point. They start
        # with plain int8 (one round of the pool, not two); plain int8 meeting the budget ends the search.
        fixes = whole_model_fixes(scheme, bool(stats.histograms), bool(stats.hessians))
        whole_started = s.start("int8", [(scheme, 0)], s.everything)
        fixes_started = s.start("int8-fixes", [(o, 0) for _, o in fixes], s.everything)
        # The one combination measured when both kinds of fix help (below), started in the same round when it can
        # only be this one (bias correction and a single other estimator): not a round of its own after the
        # others. Collected only when wanted (a measurement not collected is not a step of the search).
        single_estimator = len(fixes) == 2 and fixes[0][0] == ("bias-correction",)
        ahead = _combination(fixes, [1]) if single_estimator else None
        ahead_started = s.start("int8-fixes", [(ahead[1], 0)], s.everything) if ahead else None
        whole = whole_started()[0]
        if budget.met(whole.measurement.metric):
            return _result(
                target, budget, scheme, {}, [], op_types, [whole], s, layers, choices, start, options
            )
        if fixes:
            outs = fixes_started()
            for (names, _), out in zip(fixes, outs, strict=True):
                say(
                    f"{target.name}: int8 with {' + '.join(names)} {budget.format(out.measurement.metric)} on the whole set"
                )
            better = [
                i
                for i in range(len(fixes))
                if outs[i].measurement.key(budget) > whole.measurement.key(budget)
            ]
            met_already = any(budget.met(o.measurement.metric) for o in outs)
            if len(better) > 1 and fixes[better[0]][0] == ("bias-correction",) and not met_already:
                # Bias correction and a range estimator both helped (neither met): the best estimator with bias
                # correction too.
                both = _combination(fixes, better[1:], lambda i: outs[i].measurement.key(budget))
                outs += (
                    ahead_started()
                    if ahead_started and ahead == both
                    else s.run("int8-fixes", [(both[1], 0)], s.everything)
                )
                fixes.append(both)
                say(
                    f"{target.name}: int8 with {' + '.join(both[0])} {budget.format(outs[-1].measurement.metric)} on the whole set"
                )
            best = max(range(len(fixes)), key=lambda i: outs[i].measurement.key(budget))
            if outs[best].measurement.key(budget) > whole.measurement.key(budget):
                scheme, whole = fixes[best][1], outs[best]
                base_fixes.extend(fixes[best][0])
                base = quantize(model, (), scheme, statistics=stats)
            if budget.met(whole.measurement.metric):
                return _result(target, budget, scheme, {}, [], op_types, [whole], s, layers, choices, start, options,
                               base_fixes=base_fixes)  # fmt: skip
        s.start_options = scheme
        if options.cached_suffix and context.exact_qdq:
            s.base = scheme
        # The ranking subset: the samples int8 gets most wrong, then the first others (to see new breakage). The
        # base model runs there in the executor (building its cached activations) while this process ranks.
        s.ranking = informative(whole.measurement.badness, options.ranking_samples)
        base_started = s.start("int8", [(scheme, 0)])
        preferred = [r for r in choices if not r.fallback] or list(choices)
        if s.base is not None:
            # Every worker builds its cached base activations on the ranking subset now, in the runtime of the first
            # restore each layer is measured with (arm-cpu's int16x8 runs in onnxruntime, the base in OpenVINO),
            # not in its first candidate: a candidate restoring the last layer shares every cut with the base.
            executor.warm(Task(with_restores({layers[-1].name: preferred[0].name}), tuple(s.ranking), s.base))
        # Step 3 (on the chosen base): the per-layer SQNR ranking.
        # (On the first SQNR_SAMPLES ranking samples: a layer's noise power over thousands of values per sample
        # is stable after a few. One graph on onnxruntime; should it refuse the graph, OpenVINO runs it in the exact
        # form, which the base model already ran in the executor (no compile check in a child), except on intel-vpu
        # (it ran there on the int8 kernels): compiled apart first.)
        _, rows = per_layer_sqnr(
            model, base, _Samples(), limit=SQNR_SAMPLES, isolate=not context.exact_qdq, sqnr_only=True
        )
        cheap = cheap_ranking(model, plan, layers, rows)
        say(
            f"{target.name}: {len(layers)} quantizable layers; worst by SQNR: "
            + ", ".join(n for n, _ in cheap[:5])
        )
        base_out = base_started()[0].measurement
        say(
            f"{target.name}: int8 {budget.format(whole.measurement.metric)} on the whole set, "
            f"{budget.format(base_out.metric)} on {len(s.ranking)} ranking sample(s)"
        )
        # Steps 4-5: rank by the measured effect, then the shortest prefix meeting the budget.
        # Every choice is measured per layer; on a tie the earlier (cheaper: int16x8 before float) is kept.
        per_layer = preferred
        order_cheap = [n for n, _ in cheap]
        met, chosen, ranked = _rank_and_restore(
            s, with_restores, order_cheap, dict(cheap), [r.name for r in per_layer], base_out, options.top_k, say,
            target.name,
        )  # fmt: skip
        float_needed: list[str] = []
        if not met:
            # The best on the whole accuracy set (what the budget is confirmed on), else on the ranking subset.
            whole_set = [st.measurement for st in s.steps if st.measurement.samples == len(s.everything)]
            best_m = max(whole_set or [st.measurement for st in s.steps], key=lambda m: m.key(budget))
            if integer_only:
                say(f"{target.name}: int8 fixes fall short; searching the layers that would need float")
                found, floats, ranked = _rank_and_restore(
                    s, with_restores, order_cheap, dict(cheap), ["float"], base_out, options.top_k, say, target.name
                )  # fmt: skip
                float_needed = [n for n in ranked if n in floats] if found else []
            if integer_only and options.allow_cpu_fallback and float_needed:
                say(f"{target.name}: left float on the CPU: {_named(float_needed, len(layers))}")
                chosen, met = floats, True
            elif integer_only:
                where = (
                    f"; layers that would need float: {_named(float_needed, len(layers))} "
                    "(--allow-cpu-fallback keeps them on the CPU)"
                    if float_needed
                    else "; the search found no set of float layers short of the whole float model"
                )
                raise QuantizationError(
                    f"{target.name}: {budget.describe()} cannot be met in int8: best reached "
                    f"{budget.format(best_m.metric)}{where}"
                )
            else:
                raise QuantizationError(
                    f"{target.name}: {budget.describe()} cannot be met: best reached {budget.format(best_m.metric)} "
                    f"(restoring up to {len(ranked)} of {len(layers)} layers; all of them is the float model)"
                )
        ordered = [n for n in ranked if n in chosen]
        # Step 6: the curve on the whole set.
        points = curve_points(len(ordered))
        curve_tasks = [(with_restores({n: chosen[n] for n in ordered[:i]}), i) for i in points]
        curve_out = s.run("curve", curve_tasks, s.everything)
    s.curve_at = points
    return _result(target, budget, with_restores(chosen), chosen, ordered, op_types, curve_out, s, layers, choices,
                   start, options, float_needed, base_fixes)  # fmt: skip


#: A one-line message names at most this many layers (the others counted).
NAMED_LAYERS = 8


def _named(names: Sequence[str], total: int) -> str:
    """``names`` for a one-line message: all of a few, else the first NAMED_LAYERS and how many more (of
    ``total`` quantizable layers)."""
    if len(names) <= NAMED_LAYERS:
        return ", ".join(names)
    return f"{len(names)} of {total}: {', '.join(names[:NAMED_LAYERS])} and {len(names) - NAMED_LAYERS} more"


#: The range estimators tried for the whole model (step 3b), beside the scheme's own; with histograms, these too.
BASE_METHODS = ("mean_minmax",)
BASE_HISTOGRAM_METHODS = ("percentile", "mse")


def whole_model_fixes(
    scheme: QuantizeOptions, histograms: bool, moments: bool = False
) -> list[tuple[tuple[str, ...], QuantizeOptions]]:
    """The whole-model int8 variants of ``scheme`` the search measures before restoring layers, named as the
    report lists them: bias correction, each other range estimator, and with the layers' input ``moments``
    GPTQ rounding of the weights (docs/benchmarks.md, "GPTQ rounding of the static weights")."""
    methods = [m for m in BASE_METHODS + (BASE_HISTOGRAM_METHODS if histograms else ()) if m != scheme.method]
    variants = [((f"{m} ranges",), replace(scheme, method=m)) for m in methods]
    if moments and scheme.weight_rounding != "gptq":
        variants.append((("gptq rounding",), replace(scheme, weight_rounding="gptq")))
    if not scheme.bias_correction:
        variants.insert(0, (("bias-correction",), replace(scheme, bias_correction=True)))
    return variants


def _combination(fixes, among: list[int], key=None) -> tuple[tuple[str, ...], QuantizeOptions]:
    """The best of the range estimators ``among`` (indices into ``fixes``, by ``key``) with bias correction too
    (``fixes[0]``)."""
    method = max(among, key=key) if key is not None else among[0]
    return fixes[method][0] + fixes[0][0], replace(fixes[method][1], bias_correction=True)


def _result(target, budget, final_options, chosen, ordered, op_types, curve_out, s, layers, choices, start, options,
            float_needed=(), base_fixes=()) -> SearchResult:  # fmt: skip
    curve = [o.measurement for o in curve_out]
    return SearchResult(
        target=target.name,
        budget=budget,
        met=budget.met(curve[-1].metric),
        restored=[(n, op_types[n], chosen[n]) for n in ordered],
        options=final_options,
        base=curve[0],
        final=curve[-1],
        curve=curve,
        steps=s.steps,
        quantizable_layers=len(layers),
        ranking_samples=len(s.ranking),
        accuracy_samples=len(s.everything),
        executor=options.executor,
        wall_s=time.perf_counter() - start,
        size_bytes=(curve_out[0].size_bytes, curve_out[-1].size_bytes),
        curve_at=getattr(s, "curve_at", [0]),
        restores={r.name: r.what for r in choices},
        float_needed=list(float_needed),
        statistics=s.stats,
        base_fixes=list(base_fixes),
        base_options=getattr(s, "start_options", final_options),
    )


@dataclass(frozen=True)
class _Sample:
    inputs: dict
    label: int | None


def _fields(options: QuantizeOptions) -> dict:
    from dataclasses import fields

    return {f.name: getattr(options, f.name) for f in fields(options)}


def _gain(m: Measurement, base: Measurement, budget: Budget) -> tuple:
    return tuple(a - b for a, b in zip(m.rank_key(budget), base.rank_key(budget), strict=True))


def _rank_and_restore(
    s: Search, with_restores, order_cheap: list[str], cheap_score: dict[str, float], per_layer: list[str],
    base_out: Measurement, top_k: int, say, target: str,
) -> tuple[bool, dict[str, str], list[str]]:  # fmt: skip
    """Rank the layers by the measured effect of restoring each alone (each restore of ``per_layer``, the best
    kept) over the ranking subset, the top ``top_k`` of the cheap order first (the next ones when none helps),
    then find the shortest prefix that meets the budget, prune it and confirm it on the whole set.
    (met, layer -> restore, ranked layers)."""
    budget = s.budget
    gains: dict[str, tuple[tuple, str]] = {}
    measured_upto = 0
    confirmed: set[tuple[str, str]] = set()
    #: Only int8 fixes (no precision restore), and whether any single one moved the budget's own metric.
    integer, moved = "float" not in per_layer and "int16x8" not in per_layer, False
    for _round in range(2):
        batch = order_cheap[measured_upto : measured_upto + top_k]
        measured_upto += len(batch)
        # A few layers at a time (one per worker): a single restore that meets the budget on the ranking subset
        # and on the whole set is the answer (plain int8 does not meet it: one layer is the fewest).
        step = max(1, s.executor.workers)
        for at in range(0, len(batch), step):
            chunk = batch[at : at + step]
            moved |= any(
                budget.score(m.metric) > budget.score(base_out.metric)
                for m in _measure_choices(s, with_restores, chunk, per_layer, base_out, gains)
            )
            single = [(n, gains[n][1]) for n in chunk
                      if (n, gains[n][1]) not in confirmed and _meets(s, with_restores({n: gains[n][1]}))]  # fmt: skip
            # Those that meet it on the ranking subset are confirmed on the whole set together (one round of the
            # pool, not one after the other); the best ranked that meets it there is the answer, as in turn.
            single.sort(key=lambda nr: gains[nr[0]][0], reverse=True)
            confirmed.update(single)
            wholes = s.run("confirm", [(with_restores({n: r}), 1) for n, r in single], s.everything)
            for (n, r), whole in zip(single, wholes, strict=True):
                if budget.met(whole.measurement.metric):
                    return True, {n: r}, [n] + [m for m in order_cheap if m != n]
        if integer and not moved:
            # Int8 fixes only (nnapi): when none of the layers most worth fixing moves the budget's metric at all,
            # neither will the next ones nor a prefix of them: the search for float layers decides.
            say(
                f"{target}: no int8 fix of the first {measured_upto} layers moves the {budget.describe()} metric"
            )
            return False, {}, list(order_cheap)
        if any(g[0] > (0.0,) * len(g[0]) for g in gains.values()) or measured_upto >= len(order_cheap):
            break
        say(f"{target}: no restore of the first {measured_upto} candidates helps: re-ranking the next")
    # Layers not measured get the strongest restore (the last: float) on precision targets, else the first.
    default = per_layer[-1] if per_layer[-1] == "float" else per_layer[0]
    #: Every restored layer float: each layer's own best restore (int16x8 where it did as well alone) left every
    #: prefix short, and a cheaper restore that ties alone can fall short together (int8 weights stay int8).
    strongest = False
    while True:
        ranked = sorted(gains, key=lambda n: (gains[n][0], cheap_score[n]), reverse=True)
        ranked += [n for n in order_cheap if n not in gains]
        restore_of = {
            n: "float" if strongest else gains[n][1] if n in gains else default for n in order_cheap
        }

        def prefix(k: int, ranked: list[str] = ranked, restore_of: dict = restore_of) -> dict[str, str]:
            return {n: restore_of[n] for n in ranked[:k]}

        chosen, k2 = None, None
        k, _ = _shortest_prefix(s, with_restores, prefix, len(ranked), base_out, s.ranking)
        if k is not None:
            chosen = prefix(k)
            confirm = s.run("confirm", [(with_restores(chosen), len(chosen))], s.everything)[0].measurement
            if budget.met(confirm.metric):
                # Pruned on the whole set: every set kept meets the budget where it is confirmed.
                return True, _prune(s, with_restores, chosen, s.everything), ranked
            if len(s.everything) <= len(s.ranking):
                return False, chosen, ranked
            say(f"{target}: {budget.format(confirm.metric)} on the whole accuracy set: searching on it")
            k2, _ = _shortest_prefix(s, with_restores, prefix, len(ranked), confirm, s.everything, lo=k)
            if k2 is not None:
                return True, _prune(s, with_restores, prefix(k2), s.everything), ranked
        if not integer and not strongest and "float" in per_layer and set(restore_of.values()) != {"float"}:
            # Before measuring more layers (two evaluations each): the same order with float restores (a few).
            strongest = True
            say(f"{target}: no prefix of each layer's own best restore meets it: every restored layer float")
            continue
        all_float = set(restore_of.values()) == {"float"}
        if (
            not integer
            and all_float
            and (measured_upto >= len(order_cheap) or (k is not None and k2 is None))
        ):
            # The float model meets any budget: from it, delta debugging quantizes back what the whole set allows.
            # Also before measuring more layers when every float prefix but the float model failed on the whole
            # set: the last layer of the order holds a sample (a near tie) that no single restore moves.
            say(f"{target}: no prefix meets it: from the float model, back to int8 what the budget allows")
            every = {n: "float" for n in order_cheap}
            kept = _minimise(s, with_restores, every, s.everything)
            if len(kept) < len(every):
                return True, kept, [n for n in ranked if n in kept] + [n for n in ranked if n not in kept]
            return False, chosen if chosen is not None else prefix(len(ranked)), ranked
        if measured_upto >= len(order_cheap) or integer:  # int8 fixes only: the float-layer search decides
            return False, chosen if chosen is not None else prefix(len(ranked)), ranked
        # Re-rank: no prefix of the order measured so far meets the budget on the whole set, so measure the layers
        # not yet measured (a layer with a high output SQNR can still hold a sample that decides the budget).
        rest = order_cheap[measured_upto:]
        measured_upto = len(order_cheap)
        say(
            f"{target}: no prefix of the measured order meets it on the whole set: measuring the other {len(rest)} layers"
        )
        _measure_choices(s, with_restores, rest, per_layer, base_out, gains)


def _measure_choices(
    s: Search, with_restores, chunk: list[str], per_layer: list[str], base_out: Measurement, gains: dict
) -> list[Measurement]:
    """Each layer of ``chunk`` restored alone with each choice of ``per_layer`` on the ranking subset, the best
    kept in ``gains`` (layer -> (gain, choice); on a tie the earlier, cheaper choice). A layer whose earlier choice
    already meets the budget there is not tried with the later ones: the single-restore answer takes the
    cheapest choice that meets it, so the others could not change it."""
    budget = s.budget
    tried: dict[str, list[tuple[Measurement, str]]] = {n: [] for n in chunk}
    measured: list[Measurement] = []
    for r in per_layer:
        todo = [n for n in chunk if not any(budget.met(m.metric) for m, _ in tried[n])]
        if not todo:
            break
        for n, out in zip(todo, s.run("rank", [(with_restores({n: r}), 1) for n in todo]), strict=True):
            tried[n].append((out.measurement, r))
            measured.append(out.measurement)
    for n in chunk:
        best = max(range(len(tried[n])), key=lambda j: tried[n][j][0].rank_key(budget))
        gains[n] = (_gain(tried[n][best][0], base_out, budget), tried[n][best][1])
    return measured


def _meets(s: Search, options: QuantizeOptions) -> bool:
    """The candidate, already measured on the ranking subset, meets the budget there."""
    out = s.known.get((options, tuple(s.ranking)))
    return out is not None and s.budget.met(out.measurement.metric)


def _shortest_prefix(s: Search, with_restores, prefix, n: int, base: Measurement, indices, lo: int = 0):
    """The smallest k in (lo, n] whose prefix meets the budget: galloping (1, 2, 4, ...) then a k-ary
    bisection, ``executor.workers`` evaluations at a time. (None, best measurement) when even n fails."""
    budget = s.budget
    width = max(1, s.executor.workers)
    sizes, step = [], 1
    while lo + step < n:
        sizes.append(lo + step)
        step *= 2
    if n - 1 > max(sizes, default=lo):
        sizes.append(n - 1)  # every layer restored is the float model, which meets no budget: n - 1 may
    sizes.append(n)
    fail, ok, best = lo, None, base
    for i in range(0, len(sizes), width):
        batch = sizes[i : i + width]
        outs = s.run("gallop", [(with_restores(prefix(k)), k) for k in batch], indices)
        for k, out in zip(batch, outs, strict=True):
            best = max(best, out.measurement, key=lambda m: m.key(budget))
            if budget.met(out.measurement.metric):
                ok = k
                break
            fail = k
        if ok is not None:
            break
    if ok is None:
        return None, best
    while ok - fail > 1:
        inner = list(range(fail + 1, ok))
        picks = sorted(set(inner[int(j * len(inner) / (width + 1))] for j in range(1, width + 1)))
        outs = s.run("bisect", [(with_restores(prefix(k)), k) for k in picks], indices)
        met = {k: budget.met(o.measurement.metric) for k, o in zip(picks, outs, strict=True)}
        ok = min([k for k in picks if met[k]], default=ok)
        fail = max([k for k in picks if not met[k] and k < ok], default=fail)
    return ok, best


def restore_names(restores: Sequence[Restore]) -> list[str]:
    return [r.name for r in restores]


__all__ = ["SearchOptions", "SearchResult", "cheap_ranking", "quantizable_layers", "search"]
