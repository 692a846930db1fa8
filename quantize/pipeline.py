"""The quantization pipeline, top to bottom.

1. plan       which tensors are quantized, which share a scale, which ranges are fixed (graph + rules only)
2. calibrate  run the fp32 model on calibration data and observe every planned tensor (statistics only)
3. params     choose scales and zero points per scale group (method: minmax / mean_minmax / percentile /
              entropy / mse)
4. weights    int8 per-channel weights (rounded to nearest, or by GPTQ from the input moments calibration
              collected: ``weight_rounding``), int32 biases (a weight scale is raised where the bias would overflow
              int32, never clipped; an int16x8 layer's bias that overflows stays float), int8 constants
              (QuantizeWeightsPass)
5. activations QuantizeLinear -> DequantizeLinear after every planned tensor (InsertActivationQDQPass)
   (bias correction, an option: each bias absorbs (W - W_int8) E[x], the mean shift weight rounding causes)
6. tidy       topological order, shape inference, opset 19 (21 with int16 activations), onnx.checker

Recipes: ``int8`` (8-bit activations) or ``int16x8`` (int16 symmetric activations, int8 weights: TFLite's 16x8
mode), for the whole model (``precision``) or per layer (``layer_precision``; ``fp32`` keeps a layer float).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.errors import DataError, QuantizationError
from edgekit.quantize import gptq
from edgekit.quantize.calibrate import (
    MinMax,
    QParams,
    Statistics,
    Track,
    channel_ranges,
    choose_params,
    collect_statistics,
    no_progress,
)
from edgekit.quantize.equalize import EqualizePass, channel_ratios, find_sites, scaled_tensors
from edgekit.quantize.options import HISTOGRAM_METHODS, QuantizeOptions
from edgekit.quantize.plan import QuantPlan, make_plan
from edgekit.quantize.qdq import InsertActivationQDQPass, QuantizeWeightsPass, RaisedWeightScales
from onnx_ir.passes.common import RemoveUnusedNodesPass, ShapeInferencePass, TopologicalSortPass

log = logging.getLogger("edgekit")


class NothingToQuantizeError(QuantizationError):
    """No op of the model is quantized (it has no integer kernel, or every one is kept float)."""


@dataclass
class Quantized:
    model: ir.Model
    plan: QuantPlan
    params: dict[str, QParams]
    stats: Statistics
    #: fp32 tensor name -> the QDQ model's DequantizeLinear output for it.
    dequantized: dict[str, str]
    #: Layers whose weight scales were raised so that their int32 bias fits (never clipped).
    raised_weight_scales: list[RaisedWeightScales] = field(default_factory=list)
    #: int16x8 layers whose bias stays float in the QDQ model (it exceeds int32 at its scale; TFLite: int64).
    float_biases: list[str] = field(default_factory=list)
    #: Tensors the depthwise-input equalization rescaled -> per-channel factor back to the fp32 model's values.
    channel_scales: dict = field(default_factory=dict)

    def proto(self) -> onnx.ModelProto:
        return ir.to_proto(self.model)


def _warn_degenerate_inputs(model: ir.Model, stats: Statistics) -> None:
    """Name every model input whose calibration data holds one value only: its scale says nothing of real data."""
    for value in model.graph.inputs:
        seen = stats.minmax.get(value.name)
        if seen is not None and seen.count and seen.lo == seen.hi:
            what = "all zero" if seen.lo == 0 else f"constant ({seen.lo:g})"
            log.warning(
                "calibration data for input %r is %s over %d sample(s): its scale cannot fit real inputs; "
                "check the data",
                value.name,
                what,
                stats.samples,
            )


def observing_options(options: QuantizeOptions) -> QuantizeOptions:
    """The options statistics are collected with: histograms when a layer's range method needs them, channel
    means when a layer's bias is corrected."""
    from dataclasses import replace

    if options.method not in HISTOGRAM_METHODS and any(
        m in HISTOGRAM_METHODS for _, m in options.layer_method
    ):
        options = replace(options, method=next(m for _, m in options.layer_method if m in HISTOGRAM_METHODS))
    if options.layer_bias_correction and not options.bias_correction:
        options = replace(options, bias_correction=True)
    return options


def _corrected_means(plan: QuantPlan, stats: Statistics, options: QuantizeOptions) -> dict | None:
    """The input channel means the weight pass corrects biases with: every layer's (``bias_correction``), or
    those of the ``layer_bias_correction`` layers' inputs."""
    if options.bias_correction:
        return stats.means
    if not options.layer_bias_correction:
        return None
    inputs = {w.input_tensor for w in plan.weights if w.node in options.layer_bias_correction}
    return {name: mean for name, mean in stats.means.items() if name in inputs}


def quantize(
    model: ir.Model,
    calibration: Iterable,
    options: QuantizeOptions,
    track: Track = no_progress,
    statistics: Statistics | None = None,
) -> Quantized:
    """Quantize a prepared fp32 model (from :func:`edgekit.core.model.load_model`) to QDQ ONNX.

    ``statistics`` from an earlier run on the same model, data and calibration options skip the calibration run:
    targets that differ only in activation type or weight granularity share one pass over the data.
    """
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph):
        raise QuantizationError(
            "the model is already quantized (it has QDQ or onnxruntime QOperator int8 nodes)"
        )
    layers = dict(options.layer_precision)
    plan = make_plan(model, options.exclude, options.float_output_heads, options.precision, layers)
    if not plan.activations:
        raise NothingToQuantizeError("nothing to quantize: the model has no op with an integer kernel")
    stats = statistics
    if stats is None:
        stats = calibrate(model, _observation_plan(model, plan, options), calibration, options, track)
        _warn_degenerate_inputs(model, stats)
    if options.weight_rounding == "gptq" and stats.hessians is None:  # statistics collected without them
        stats.hessians = layer_hessians(model, plan, calibration, options, stats.equalization)
    params = choose_params(model, plan, stats, options)

    opset = 21 if plan.int16 else 19
    qmodel = _copy_at_opset(model, opset)  # a copy: the caller keeps its fp32 model
    EqualizePass(stats.equalization)(qmodel)  # the rewrite the statistics were collected on
    activations = InsertActivationQDQPass(plan, params)
    weights = QuantizeWeightsPass(
        plan,
        params,
        _corrected_means(plan, stats, options),
        options.dense_per_channel,
        stats.hessians if options.weight_rounding == "gptq" else None,
    )
    passes = ir.passes.PassManager(
        [weights, activations, RemoveUnusedNodesPass(), TopologicalSortPass()], steps=1
    )
    qmodel = passes(qmodel).model
    if _untyped(qmodel):  # the passes type what they add: inference only for what the fp32 model left open
        qmodel = ShapeInferencePass()(qmodel).model
    proto = ir.to_proto(qmodel)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:  # pragma: no cover - a bug in the passes, not user input
        raise AssertionError(f"the QDQ model fails onnx.checker: {exc}") from exc
    return Quantized(
        qmodel,
        plan,
        params,
        stats,
        activations.dequantized,
        weights.raised_weight_scales,
        weights.float_biases,
        scaled_tensors(model, stats.equalization),
    )


def _untyped(model: ir.Model) -> bool:
    """Some value of ``model``'s graph has no type or no shape (ONNX shape inference would add one: 0.05-0.1 s
    a call on MobileNetV2, run for every candidate of the accuracy search)."""
    return any(v.dtype is None or v.shape is None for n in model.graph for v in n.outputs)


def calibrate(
    model: ir.Model,
    observe: QuantPlan,
    calibration: Iterable,
    options: QuantizeOptions,
    track: Track = no_progress,
    model_outputs: list | None = None,
) -> Statistics:
    """The statistics of ``observe``'s tensors (:func:`_ranges`); with ``weight_rounding="gptq"``, the input
    moments of the layers whose weights GPTQ rounds too (:func:`layer_hessians`)."""
    stats = _ranges(model, observe, calibration, options, track, model_outputs)
    if options.weight_rounding == "gptq":
        stats.hessians = layer_hessians(model, observe, calibration, options, stats.equalization)
    return stats


def layer_hessians(
    model: ir.Model, plan: QuantPlan, calibration: Iterable, options: QuantizeOptions, equalization: dict
) -> dict[str, np.ndarray]:
    """``E[x x^T]`` of the input vectors of ``plan``'s weighted layers that GPTQ rounds (Conv, grouped and
    depthwise included, MatMul, Gemm: :func:`gptq.takes_gptq`), on the fp32 model rewritten with the depthwise-
    input ``equalization`` (the weights the weight pass rounds are those of the rewritten model, and so are
    the inputs of the depthwise convolutions it rescales). A weight already on its int8 grid (a model
    dequantized from int8: nearest rounding is exact) needs none. A pass over the data of its own: the inputs leave
    the runtime whole (im2col patches in numpy), where range statistics are reduced inside the graph."""
    if iter(calibration) is calibration:  # type: ignore[comparison-overlap]
        log.warning("GPTQ weight rounding skipped (nearest kept): the calibration data can be read only once")
        return {}
    if equalization:
        model = ir.from_proto(ir.to_proto(model))  # a copy: the caller keeps its fp32 model
        EqualizePass(equalization)(model)
    weighted = {w.node for w in plan.weights}
    nodes = [
        n
        for n in model.graph
        if n.name in weighted and gptq.takes_gptq(n, grouped=True) and not gptq.on_grid(n)
    ]
    moments = gptq.input_hessians(model, nodes, calibration, options.samples) if nodes else {}
    # Kept as float32 (the rounding computes in float64): half the size in a search's context (rec: 55 MB).
    return {name: m.astype(np.float32) for name, m in moments.items()}


def _ranges(
    model: ir.Model,
    observe: QuantPlan,
    calibration: Iterable,
    options: QuantizeOptions,
    track: Track = no_progress,
    model_outputs: list | None = None,
) -> Statistics:
    """The statistics of ``observe``'s tensors (with ``observing_options(options)``). With ``options.equalize``
    and depthwise inputs to equalize (:mod:`edgekit.quantize.equalize`): a first pass over the data takes their
    per-channel ranges, which decide the ratios; the statistics are then those of the rewritten model, and carry
    the ratios (``Statistics.equalization``) for every model quantized with them. Min/max reduced in the graph
    (not the histogram methods), one pass does both: the ratios and the rewritten model's statistics come from
    the fp32 model's per-channel ranges. ``model_outputs``, when given, receives the fp32 model's outputs per
    sample."""
    ratios: dict = {}
    sites = find_sites(model, options.exclude) if options.equalize else []
    if sites and iter(calibration) is calibration:  # type: ignore[comparison-overlap]
        log.warning("depthwise-input equalization skipped: the calibration data can be read only once")
        sites = []
    if sites:
        plan = make_plan(
            model,
            options.exclude,
            options.float_output_heads,
            options.precision,
            dict(options.layer_precision),
        )
        quantized = set(plan.activations) - plan.derived  # a derived tensor takes its group's range
        names = list(dict.fromkeys(name for site in sites for name in site.scaled))
        if observing_options(options).method not in HISTOGRAM_METHODS:
            # One pass: the statistics of the fp32 model and the per-channel ranges of the tensors the rewrite
            # scales, which give both the ratios and the rewritten model's statistics (those tensors divided by
            # the ratios per channel, everything else unchanged).
            channels: dict[str, list] = {name: [] for name in names}
            stats = collect_statistics(
                model, observe, calibration, observing_options(options), track, channels, model_outputs
            )
            ranges = {
                n: (np.min([lo for lo, _ in v], axis=0), np.max([hi for _, hi in v], axis=0))
                for n, v in channels.items()
                if v
            }
            if len(ranges) < len(names):
                raise DataError("the calibration data set is empty")
            ratios = {site.tensor: channel_ratios(model, site, ranges, quantized) for site in sites}
            _equalized_statistics(stats, channels, scaled_tensors(model, ratios))
            stats.equalization = ratios
            return stats
        ranges = channel_ranges(model, names, calibration, options, track, model_outputs)
        ratios = {site.tensor: channel_ratios(model, site, ranges, quantized) for site in sites}
        model = ir.from_proto(ir.to_proto(model))  # a copy: the caller keeps its fp32 model
        EqualizePass(ratios)(model)
    outputs = None if sites else model_outputs  # the rewritten model's are not the fp32 model's
    stats = collect_statistics(model, observe, calibration, observing_options(options), track, None, outputs)
    stats.equalization = ratios
    return stats


def _equalized_statistics(
    stats: Statistics, channels: dict[str, list], scaled: dict[str, np.ndarray]
) -> None:
    """The fp32 model's statistics made those of the model rewritten with the ratios (:mod:`equalize`): each
    scaled tensor's per-sample min/max from its per-channel ones divided by the ratios (positive), its channel
    means divided by them."""
    for name, ratio in scaled.items():
        r = np.asarray(ratio, np.float64)
        if name in stats.minmax:
            observer = MinMax()
            for lo, hi in channels[name]:
                lo_r, hi_r = np.asarray(lo, np.float64) / r, np.asarray(hi, np.float64) / r
                observer.update(np.array([lo_r.min(), hi_r.max()], np.float32))
            stats.minmax[name] = observer
        if name in stats.means and np.size(stats.means[name]) == r.size:
            stats.means[name] = stats.means[name] / r


def _observation_plan(model: ir.Model, plan: QuantPlan, options: QuantizeOptions) -> QuantPlan:
    """What calibration observes: every activation ``plan`` or the integer-head int8 plan quantizes, derived and
    fixed ranges included, and the outputs the int8 plan fuses into an activation (cheap: min/max are reduced in
    the graph). Any plan of the same model then finds its
    ranges there: targets that differ in activation type, in recipe, or in per-layer recipes (a layer kept float
    makes the derived output before it an observed one; the accuracy-aware search) reuse one pass over the data."""
    base = make_plan(model, options.exclude, False)
    names = list(dict.fromkeys(base.activations + list(base.fused) + plan.activations))
    return QuantPlan(activations=names, weights=list(dict.fromkeys(base.weights + plan.weights)))


#: Ops whose meaning changed between opsets 19 and 21 (the rest only gained types): a model using them is
#: upgraded by onnx's version converter rather than relabelled.
_CHANGED_BY_21 = frozenset({"GridSample", "DFT", "GroupNormalization"})


def _copy_at_opset(model: ir.Model, opset: int) -> ir.Model:
    """A copy of the fp32 model at ``opset`` or above, where its QDQ nodes will be valid (QDQ below 19 fails in
    the onnx reference evaluator; int16 QuantizeLinear/DequantizeLinear need 21)."""
    proto = ir.to_proto(model)
    current = model.opset_imports.get("", opset)
    if current < 21 <= opset and any(n.op_type in _CHANGED_BY_21 for n in model.graph.all_nodes()):
        try:
            proto = onnx.version_converter.convert_version(proto, opset)
        except Exception as exc:  # noqa: BLE001 - the converter raises many types
            raise QuantizationError(f"cannot bring the model to opset {opset} for int16 QDQ: {exc}") from None
    else:
        for imp in proto.opset_import:
            if imp.domain in ("", "ai.onnx"):
                imp.version = max(imp.version, opset)
    if opset >= 21:
        proto.ir_version = max(proto.ir_version, 10)
    return ir.from_proto(proto)
