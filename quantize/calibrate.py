"""Statistics collection (running the fp32 model on calibration data) and the choice of scales and zero points.

Collecting statistics is kept apart from rewriting the graph: :func:`collect_statistics` only runs the model
and fills observers; :func:`choose_params` turns statistics into quantization parameters for the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import TypeVar

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.data import prefetched
from edgekit.core.errors import DataError, QuantizationError
from edgekit.quantize.observers import Histogram, MinMax, choose_range
from edgekit.quantize.options import HISTOGRAM_METHODS, QuantizeOptions
from edgekit.quantize.plan import QuantPlan, constant_key

T = TypeVar("T")
#: ``track(iterable, description, total)`` wraps an iterable in a progress display.
Track = Callable[[Iterable[T], str, int], Iterator[T]]


def no_progress(items: Iterable[T], description: str, total: int) -> Iterator[T]:
    return iter(items)


@dataclass(frozen=True)
class QParams:
    scale: float
    zero_point: int
    dtype: str  # "int8" | "uint8" | "int16"

    @property
    def qmin(self) -> int:
        return QRANGES[self.dtype][0]

    @property
    def qmax(self) -> int:
        return QRANGES[self.dtype][1]


#: The integer range of each activation type.
QRANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


@dataclass
class Statistics:
    minmax: dict[str, MinMax]
    histograms: dict[str, Histogram]
    samples: int
    #: Per-channel means of every observed tensor (axis 1 of N-D tensors, the last axis of 2-D ones).
    means: dict[str, np.ndarray]
    #: Depthwise input -> per-channel ratios (``edgekit.quantize.equalize``): the statistics were collected on
    #: the model rewritten with them, and every model quantized with these statistics carries the rewrite.
    equalization: dict[str, np.ndarray] = field(default_factory=dict)
    #: Layer -> ``E[x x^T]`` of its input vectors (``weight_rounding="gptq"``; :func:`edgekit.quantize.gptq.
    #: input_hessians`), on the model rewritten with ``equalization``: the weights GPTQ rounds. None: not collected.
    hessians: dict[str, np.ndarray] | None = None


def channel_sum(array: np.ndarray) -> np.ndarray:
    axis = 1 if array.ndim >= 3 else array.ndim - 1
    return array.sum(axis=tuple(i for i in range(array.ndim) if i != axis), dtype=np.float64) / (
        array.size / array.shape[axis]
    )


def collect_statistics(
    model: ir.Model,
    plan: QuantPlan,
    dataset: Iterable,
    options: QuantizeOptions,
    track: Track = no_progress,
    channels: dict[str, list[tuple[np.ndarray, np.ndarray]]] | None = None,
    model_outputs: list[dict[str, np.ndarray]] | None = None,
) -> Statistics:
    """Run the fp32 model on up to ``options.samples`` calibration samples and observe every planned tensor.

    In the same pass, ``channels`` (tensor -> an empty list; min/max reduced in the graph only) receives each
    tensor's per-channel (axis 1) minimum and maximum per sample, and ``model_outputs`` the model's own outputs
    per sample (copies)."""
    from edgekit.core.runtime import HostRunner, local_parallelism

    graph_inputs = {v.name for v in model.graph.inputs}
    # Derived ranges come from their group; fixed ranges need no observation at all.
    observed_names = [
        n for n in plan.activations if n not in plan.derived and plan.fixed_of(plan.group(n)) is None
    ]
    captured = [n for n in observed_names if n not in graph_inputs]
    # Bias correction needs the channel means of every weight op's input, derived ranges (a Concat's or a
    # MaxPool's output) included.
    mean_only: list[str] = []
    if options.bias_correction:
        mean_only = list(
            dict.fromkeys(w.input_tensor for w in plan.weights if w.input_tensor not in observed_names)
        )
    mean_captured = [n for n in mean_only if n not in graph_inputs]
    # Min/max (and channel means) are reduced inside the graph: only scalars leave the runtime. Histograms need
    # the tensors themselves.
    reduce_in_graph = options.method not in HISTOGRAM_METHODS
    if channels and not reduce_in_graph:
        raise QuantizationError("per-channel ranges in the statistics pass need min/max reduced in the graph")
    if reduce_in_graph:
        proto, extra = _reduction_model(model, captured, mean_captured, options.bias_correction)
        extra += _channel_reductions(proto, list(channels or ()))
        # A graph edgekit wrote: compiled apart first.
        runner = HostRunner(proto, extra_outputs=extra, isolate=True, streams=local_parallelism())
    else:
        runner = HostRunner(
            ir.to_proto(model), extra_outputs=captured + mean_captured, streams=local_parallelism()
        )
    minmax = {name: MinMax() for name in observed_names}

    seen = [0]
    sums: dict[str, np.ndarray] = {}

    def observed(description: str) -> Iterator[tuple[str, np.ndarray]]:
        seen[0] = 0
        total = dataset_length(dataset, options.samples)
        samples = prefetched((s, s.inputs) for s in islice(iter(dataset), options.samples))
        own = [v.name for v in model.graph.outputs]
        for sample, outputs in track(runner.run_stream(samples), description, total):
            seen[0] += 1  # outputs are consumed before the next item is taken
            if model_outputs is not None:
                model_outputs.append({name: np.array(outputs[name]) for name in own})
            for name, per_sample in (channels or {}).items():
                per_sample.append((np.array(outputs[name + _CMIN]), np.array(outputs[name + _CMAX])))
            for name in observed_names:
                if name in graph_inputs:
                    yield name, sample.inputs[name]
                elif reduce_in_graph:
                    yield name, np.array([outputs[name + _MIN], outputs[name + _MAX]]).reshape(-1)
                    if options.bias_correction and name + _MEAN in outputs:
                        sums[name] = sums.get(name, 0.0) + np.asarray(outputs[name + _MEAN], np.float64)
                else:
                    yield name, outputs[name]
            for name in mean_only:
                if reduce_in_graph and name not in graph_inputs:
                    mean = np.asarray(outputs[name + _MEAN], np.float64)
                else:
                    mean = channel_sum(sample.inputs[name] if name in graph_inputs else outputs[name])
                sums[name] = sums.get(name, 0.0) + mean
        if seen[0] == 0:
            raise DataError("the calibration data set is empty")

    histograms: dict[str, Histogram] = {}
    if options.method in HISTOGRAM_METHODS:
        histograms = {name: Histogram(options.bins) for name in observed_names}
    description = "calibrating" + (f" ({options.method})" if options.method in HISTOGRAM_METHODS else "")
    for name, array in observed(description):
        minmax[name].update(array)
        if histograms:
            histograms[name].update(array)
        if options.bias_correction and (name in graph_inputs or not reduce_in_graph) and array.ndim >= 1:
            sums[name] = sums.get(name, 0.0) + channel_sum(array)
    samples = seen[0]
    means = {name: total / samples for name, total in sums.items()}
    return Statistics(minmax, histograms, samples, means)


_MIN, _MAX, _MEAN = "__edgekit_min", "__edgekit_max", "__edgekit_mean"
_CMIN, _CMAX = "__edgekit_channel_min", "__edgekit_channel_max"


def _channel_reductions(proto: onnx.ModelProto, names: list[str]) -> list[str]:
    """Append to ``proto`` the per-channel (axis 1) ReduceMin/ReduceMax of each tensor in ``names`` (rank 3 or
    more); the names of those outputs."""
    if not names:
        return []
    shape, axes = "__edgekit_nc_rest", "__edgekit_channel_axes"
    proto.graph.initializer.extend(
        [
            onnx.numpy_helper.from_array(np.array([0, 0, -1], np.int64), shape),  # (N, C, everything else)
            onnx.numpy_helper.from_array(np.array([0, 2], np.int64), axes),
        ]
    )
    extra: list[str] = []
    for name in names:
        flat = name + "__edgekit_nc"
        proto.graph.node.append(onnx.helper.make_node("Reshape", [name, shape], [flat]))
        for op, suffix in (("ReduceMin", _CMIN), ("ReduceMax", _CMAX)):
            proto.graph.node.append(onnx.helper.make_node(op, [flat, axes], [name + suffix], keepdims=0))
            extra.append(name + suffix)
    return extra


def channel_ranges(
    model: ir.Model,
    names: list[str],
    dataset: Iterable,
    options: QuantizeOptions,
    track: Track = no_progress,
    model_outputs: list[dict[str, np.ndarray]] | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-channel (axis 1) minimum and maximum of each tensor in ``names`` (rank 3 or more) over up to
    ``options.samples`` calibration samples, reduced inside the graph (only the channel vectors leave the
    runtime). ``model_outputs``, when given, receives the model's own outputs per sample (copies): the fp32
    answers on these samples without another pass."""
    from edgekit.core.runtime import HostRunner, local_parallelism

    proto = ir.to_proto(model)
    extra = _channel_reductions(proto, names)
    # A graph edgekit wrote: compiled apart first.
    runner = HostRunner(proto, extra_outputs=extra, isolate=True, streams=local_parallelism())
    lows: dict[str, np.ndarray] = {}
    highs: dict[str, np.ndarray] = {}
    total = dataset_length(dataset, options.samples)
    samples = prefetched((s, s.inputs) for s in islice(iter(dataset), options.samples))
    own = [v.name for v in model.graph.outputs]
    for _, outputs in track(runner.run_stream(samples), "channel ranges", total):
        if model_outputs is not None:
            model_outputs.append({name: np.array(outputs[name]) for name in own})
        for name in names:
            lo, hi = (
                np.asarray(outputs[name + _CMIN], np.float64),
                np.asarray(outputs[name + _CMAX], np.float64),
            )
            lows[name] = np.minimum(lows[name], lo) if name in lows else lo
            highs[name] = np.maximum(highs[name], hi) if name in highs else hi
    if names and not lows:
        raise DataError("the calibration data set is empty")
    return {name: (lows[name], highs[name]) for name in names}


def _reduction_model(
    model: ir.Model, names: list[str], mean_only: list[str], channel_means: bool
) -> tuple[onnx.ModelProto, list[str]]:
    """The model plus ReduceMin/ReduceMax (and per-channel ReduceMean) of each tensor in ``names``, and the
    per-channel ReduceMean alone of each tensor in ``mean_only``."""
    proto = ir.to_proto(model)
    ranks = {v.name: len(v.shape) for n in model.graph for v in n.outputs if v.shape is not None}
    outputs: list[str] = []
    for name in names:
        for op, suffix in (("ReduceMin", _MIN), ("ReduceMax", _MAX)):
            proto.graph.node.append(onnx.helper.make_node(op, [name], [name + suffix], keepdims=0))
            outputs.append(name + suffix)
    for name in [*names, *mean_only] if channel_means else []:
        rank = ranks.get(name)
        if rank:
            axis = 1 if rank >= 3 else rank - 1
            axes = name + _MEAN + "_axes"
            proto.graph.initializer.append(
                onnx.numpy_helper.from_array(np.array([i for i in range(rank) if i != axis], np.int64), axes)
            )
            proto.graph.node.append(
                onnx.helper.make_node("ReduceMean", [name, axes], [name + _MEAN], keepdims=0)
            )
            outputs.append(name + _MEAN)
    return proto, outputs


def dataset_length(dataset: Iterable, limit: int | None) -> int:
    """How many samples a progress bar over ``dataset`` (at most ``limit``) will see: its length, or ``limit``
    for an iterable without one (0 when neither is known)."""
    try:
        n = len(dataset)  # type: ignore[arg-type]
    except TypeError:
        n = limit or 0
    return min(n, limit) if limit else n


#: A range narrower than this is empty (see :func:`params_for_range`).
EMPTY_RANGE = 1e-8


def params_for_range(lo: float, hi: float, dtype: str) -> QParams:
    """Asymmetric per-tensor parameters covering [lo, hi] (widened to include 0, as integer kernels need);
    int16: symmetric, zero point 0 (TFLite's 16x8 kernels require it), scale max(|lo|, |hi|) / 32767."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if dtype == "int16":
        bound = max(-lo, hi)
        return QParams(float(np.float32(bound / 32767.0)) if bound >= EMPTY_RANGE else 1.0, 0, dtype)
    qmin, qmax = QRANGES[dtype]
    if hi - lo < EMPTY_RANGE:
        # zero on every sample (a zero-initialised or dead layer): scale 1.0, as onnxruntime's compute_scale_zp
        # and edgekit's all-zero weights; 1e-8 / 255 made the producer's requantization multiplier ~1e9, which
        # XNNPACK refuses (its range is [2^-32, 256)) and LiteRT then aborts (double free)
        return QParams(1.0, int(np.clip(round(qmin - lo), qmin, qmax)), dtype)
    scale = (hi - lo) / (qmax - qmin)
    zero_point = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return QParams(float(np.float32(scale)), zero_point, dtype)


def within_saturation(lo: float, hi: float, bounds: tuple[float, float]) -> tuple[float, float]:
    """The range [lo, hi] of a tensor whose readers stop changing outside ``bounds`` (``QuantPlan.saturation``),
    cut to those bounds plus a step of 1/254 of the cut range, so that the saturation point stays on the grid
    whatever the zero point's rounding: values beyond it then quantize to the grid's end, which every reader maps
    to what it maps the value itself to."""
    cut_lo, cut_hi = max(lo, bounds[0]), min(hi, bounds[1])
    if cut_hi <= cut_lo:
        return lo, hi
    step = (max(cut_hi, 0.0) - min(cut_lo, 0.0)) / 254.0
    return (max(lo, bounds[0] - step), min(hi, bounds[1] + step))


def fixed_params(fixed: tuple[float, int], dtype: str) -> QParams:
    """A fixed int8 range, shifted by 128 for uint8 (the uint8 kernels use the same scale); int16's as given."""
    scale, zp = fixed
    return QParams(scale, zp + 128 if dtype == "uint8" else zp, dtype)


def layer_methods(model: ir.Model, plan: QuantPlan, options: QuantizeOptions) -> dict[str, str]:
    """Planned tensor -> calibration method, from ``options.layer_method`` (node -> method): a node's outputs,
    or its fused activation's."""
    nodes = {n.name: n for n in model.graph}
    methods: dict[str, str] = {}
    for node_name, method in options.layer_method:
        node = nodes.get(node_name)
        for out in node.outputs if node is not None else ():
            fused = plan.fused.get(out.name)
            targets = [o.name for o in nodes[fused].outputs] if fused in nodes else [out.name]
            methods.update((t, method) for t in targets)
    return methods


def _boundary_groups(model: ir.Model, plan: QuantPlan) -> set[str]:
    """The scale groups at the integer part's boundary, which keep their whole observed range under mean_minmax:
    the model's inputs (their values are the data itself), and its outputs and the tensors float ops read, with
    the ops computing them back to the last weighted layer (the head: MobileNetV2's logits clipped at their mean
    maximum tie the top scores, 92 % agreement with fp32 against 96 % with their full range; a detector's box
    decoding clipped at its mean extremes moves boxes by 5 % of their span)."""
    planned = set(plan.activations) | set(plan.fused)
    ends = {v.name for v in model.graph.inputs} | {v.name for v in model.graph.outputs}
    for node in model.graph:
        if not any(o.name in planned for o in node.outputs):
            ends.update(v.name for v in node.inputs if v is not None)
    producers = {o.name: n for n in model.graph for o in n.outputs}
    weighted = {w.node for w in plan.weights}
    todo, seen = list(ends), set(ends)
    while todo:
        node = producers.get(todo.pop())
        if node is None or node.name in weighted:
            continue
        for v in node.inputs:
            if v is not None and v.const_value is None and v.name not in seen:
                seen.add(v.name)
                todo.append(v.name)
    return {plan.group(n) for n in seen if n in plan.activations or n in plan.fused}


def choose_params(
    model: ir.Model, plan: QuantPlan, stats: Statistics, options: QuantizeOptions
) -> dict[str, QParams]:
    """Quantization parameters for every planned activation and constant data input, one per scale group."""
    nodes = {n.name: n for n in model.graph}
    methods = layer_methods(model, plan, options)
    uses_mean = "mean_minmax" in {options.method, *methods.values()}
    ends = _boundary_groups(model, plan) if uses_mean else set()
    ranges: dict[str, tuple[float, float]] = {}
    for name in plan.activations:
        if name in plan.derived or plan.fixed_of(plan.group(name)) is not None:
            continue
        mm = stats.minmax[name]
        if mm.count == 0:
            raise DataError(f"tensor {name!r} was never observed during calibration")
        method = methods.get(name, options.method)
        if method == "mean_minmax" and plan.group(name) in ends:
            method = "minmax"
        hist = stats.histograms.get(name)
        if method in HISTOGRAM_METHODS and hist is None:
            raise QuantizationError(
                f"tensor {name!r}: the {method} range needs histograms; calibrate with a histogram method"
            )
        ranges[name] = choose_range(method, mm, hist, options.percentile)
    groups = plan.members()
    for members in groups.values():
        # A scale group whose every member (derived ones too) is read only by saturating ops: the range stops
        # at the union of their bounds.
        if all(m in plan.saturation for m in members):
            for m in members:
                if m in ranges:
                    ranges[m] = within_saturation(*ranges[m], plan.saturation[m])
    for node_name, index in plan.constants:
        array = nodes[node_name].inputs[index].const_value.numpy()
        ranges[constant_key(node_name, index)] = (float(array.min()), float(array.max()))

    def dtype_of(root: str) -> str:
        return "int16" if any(m in plan.int16 for m in groups[root]) else options.activations

    for key, (_, _, source) in plan.requant.items():
        # The source's range: a fixed one's grid span (a fixed range is requantized for a same-scale op that
        # reads it), else its scale group's (a reader of the other activation type reads a requantized copy).
        root = plan.group(source)
        fixed = plan.fixed_of(root)
        if fixed is not None:
            p = fixed_params(fixed, dtype_of(root))
            ranges[key] = ((p.qmin - p.zero_point) * p.scale, (p.qmax - p.zero_point) * p.scale)
        else:
            observed = [ranges[m] for m in groups[root] if m in ranges]
            ranges[key] = (min(r[0] for r in observed), max(r[1] for r in observed))
    params: dict[str, QParams] = {}
    inputs = {v.name for v in model.graph.inputs}
    integer = _integer_casts(model)
    for root, members in groups.items():
        fixed = plan.fixed_of(root)
        grid = [integer[m] for m in members if m in integer]
        if fixed is not None:
            p = fixed_params(fixed, dtype_of(root))
        elif grid and dtype_of(root) != "int16":
            p = params_for_range(min(g[0] for g in grid), max(g[1] for g in grid), dtype_of(root))
        else:
            observed = [ranges[m] for m in members if m in ranges]
            assert observed, f"scale group {root} has no observed member"
            lo = min(r[0] for r in observed)
            hi = max(r[1] for r in observed)
            _refuse_non_finite(members, ranges, lo, hi)
            if inputs.intersection(members) and dtype_of(root) != "int16":
                lo, hi = _off_the_input_grid(lo, hi)
            p = params_for_range(lo, hi, dtype_of(root))
            if p.dtype == "int8" and plan.symmetric.intersection(members):  # the kernel's zero point 0
                p = QParams(float(np.float32(max(-lo, hi, 1e-8) / 127.0)), 0, "int8")
        for m in members:
            params[m] = p
    _raise_min_scales(plan, params)
    return params


def _refuse_non_finite(members, ranges: dict[str, tuple[float, float]], lo: float, hi: float) -> None:
    """A calibration range reaching infinity or NaN (a float32 overflow in the source model, e.g. an Exp of a
    large value) has no integer grid: refuse it in words, naming the tensor ([-inf, inf] crashed on a NaN
    scale; [lo, inf] wrote an infinite scale)."""
    if np.isfinite(lo) and np.isfinite(hi):
        return
    name = next((m for m in members if m in ranges and not np.isfinite(ranges[m]).all()), next(iter(members)))
    what = "NaN" if np.isnan([lo, hi]).any() else "infinity"
    raise DataError(
        f"tensor {name!r} reaches {what} on the calibration data (the source model overflows float32 there, "
        "e.g. an Exp of a large value): an integer activation has no range for it; check the model's weights "
        "and the calibration data, or keep the nodes around it in float (--exclude)"
    )


def _integer_casts(model: ir.Model) -> dict[str, tuple[float, float]]:
    """Float tensors cast from an 8-bit integer tensor (a uint8 image input), each with its integer type's range:
    256 levels at scale 1 are exact in 8 bits, where the observed range's scale (254/255, say) puts levels on
    half steps (127 x 255/254 = 127.5), which QuantizeLinear and TFLite's QUANTIZE round apart."""
    found: dict[str, tuple[float, float]] = {}
    for node in model.graph:
        source = node.inputs[0] if node.op_type == "Cast" and node.inputs else None
        if source is not None and source.dtype in (ir.DataType.UINT8, ir.DataType.INT8):
            info = np.iinfo(np.uint8 if source.dtype == ir.DataType.UINT8 else np.int8)
            found.update((out.name, (float(info.min), float(info.max))) for out in node.outputs)
    return found


#: How much a model input's range widens (both ends, relative to its span): see :func:`_off_the_input_grid`.
INPUT_RANGE_WIDENING = 2.0**-13


def _off_the_input_grid(lo: float, hi: float) -> tuple[float, float]:
    """A model input's range, widened by 2 x 2^-13 of its span. Inputs come on a grid (pixel levels), and a range
    taken from that grid puts values on exact half steps: (p / 255 - 0.5) / 0.5 at scale 2/255 lands every pixel on
    one. QuantizeLinear rounds those to even, TFLite's QUANTIZE (and XNNPACK's) away from zero: 6.4 % of
    PP-OCRv4 rec's input values one step apart. A scale 1.0001 times larger moves every grid value off its half
    step by far more than float32 rounding, so every runtime rounds them alike; the range changes by 0.01 %."""
    pad = (hi - lo) * INPUT_RANGE_WIDENING
    return lo - pad, hi + pad


def _raise_min_scales(plan: QuantPlan, params: dict[str, QParams]) -> None:
    """Outputs whose kernel needs a scale above their input's times a ratio (HARD_SWISH: 1/128, else TFLite refuses
    the model) get that scale, keeping their zero point (the range only widens), with their whole scale group."""
    groups = plan.members()
    for out, (source, ratio) in plan.min_scale.items():
        p = params[out]
        floor = params[source].scale * ratio
        if p.scale > floor:
            continue
        raised = QParams(float(np.float32(floor * 1.001)), p.zero_point, p.dtype)
        for m in groups[plan.group(out)]:
            params[m] = raised
