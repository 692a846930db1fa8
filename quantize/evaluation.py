"""fp32 against a quantized candidate on the host (OpenVINO f32, exact QDQ; the search's per-layer sums on
onnxruntime): the output comparison and the per-layer SQNR, the statistics the report and the accuracy-aware
search read (statistics apart from rewriting)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import islice

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.data import prefetched
from edgekit.core.errors import DataError
from edgekit.core.metrics import Comparison, TensorError, sqnr_db
from edgekit.core.sanity import InputRanges
from edgekit.core.shape_checks import selection_axes, selection_groups
from edgekit.quantize.calibrate import Track, dataset_length, no_progress
from edgekit.quantize.pipeline import Quantized


def _comparison(graph: ir.Graph) -> Comparison:
    """The output comparison of ``graph``'s model, with the outputs its selection sizes matched row to row."""
    axes = selection_axes(graph)
    return Comparison(selection_axes=axes, selection_groups=selection_groups(graph, axes))


def evaluate(
    fp32: ir.Model,
    quantized: Quantized,
    dataset: Iterable,
    track: Track = no_progress,
    limit: int | None = None,
    isolate: bool = True,
    sqnr_only: bool = False,
) -> tuple[dict, list[dict]]:
    """Run the fp32 and the QDQ model on the host (OpenVINO, f32) over ``dataset``.

    Returns the output comparison (accuracy, agreement, errors per output) and the per-layer SQNR of every quantized
    activation against fp32 (worst first). ``isolate=False``: the QDQ model is not first compiled in a child
    process (the caller has already run it: the accuracy-aware search's base model). ``sqnr_only``: the layer rows
    hold the SQNR alone (the same sums; the other error figures not computed: the search's ranking).
    """
    from edgekit.core.runtime import HostRunner

    graph_inputs = {v.name for v in fp32.graph.inputs}
    layers = [n for n in quantized.plan.activations if n not in graph_inputs]
    if sqnr_only:
        summed = _sqnr_in_graph(fp32, quantized, layers, dataset, track, limit, isolate)
        if summed is not None:
            return summed
    ref_runner = HostRunner(
        ir.to_proto(fp32), extra_outputs=list(dict.fromkeys(layers + list(quantized.plan.saturated.values())))
    )
    q_runner = HostRunner(
        quantized.proto(), extra_outputs=[quantized.dequantized[n] for n in layers], isolate=isolate
    )
    output_names = [v.name for v in fp32.graph.outputs]
    comparison = _comparison(fp32.graph)
    per_layer = {n: _NoisePower() if sqnr_only else TensorError() for n in layers}
    ranges = InputRanges()
    total = dataset_length(dataset, limit)
    for sample in track(prefetched(islice(iter(dataset), limit)), "evaluating fp32 vs int8", total):
        ranges.update(sample.inputs)
        ref = ref_runner.run(sample.inputs)
        cand = q_runner.run(sample.inputs)
        comparison.update({n: ref[n] for n in output_names}, {n: cand[n] for n in output_names}, sample.label)
        for n in layers:
            reference = ref[
                quantized.plan.saturated.get(n, n)
            ]  # a Clip's input on its grid: the Clip's values
            candidate = _unscaled(quantized, n, cand[quantized.dequantized[n]])
            bounds = quantized.plan.saturation.get(n)
            if bounds is not None:  # read only by ops that saturate there: compare what they see
                reference, candidate = np.clip(reference, *bounds), np.clip(candidate, *bounds)
            per_layer[n].update(reference, candidate)
    if comparison.samples == 0:
        raise DataError("the evaluation data set is empty")
    layer_rows = [{"tensor": n, **per_layer[n].to_json()} for n in layers]
    layer_rows.sort(key=_worst_first)
    return {**comparison.to_json(), "input_ranges": ranges.to_json()}, layer_rows


def _worst_first(row: dict) -> tuple:
    """Sort key of the per-layer rows: the lowest SQNR first, rows without one last."""
    return (row["sqnr_db"] is None, row["sqnr_db"] if row["sqnr_db"] is not None else 0.0)


#: OpenVINO properties of the graph computing the per-layer SQNR sums.
SQNR_PROPERTIES = {"SNIPPETS_MODE": "DISABLE"}
#: Prefix of the fp32 model's tensors in the graph that computes the per-layer SQNR sums (:func:`_sqnr_in_graph`).
REF = "sqnr_ref/"


def _sqnr_in_graph(
    fp32: ir.Model,
    quantized: Quantized,
    layers: list[str],
    dataset: Iterable,
    track: Track,
    limit: int | None,
    isolate: bool,
) -> tuple[dict, list[dict]] | None:
    """:func:`evaluate`'s ``sqnr_only`` figures from one graph holding the fp32 model beside the QDQ model, each
    layer's two sums (``ReduceSumSquare`` of the reference and of the difference, float32) computed inside it:
    only scalars leave the runtime, where a hundred full-size extra outputs made each QDQ inference ten times
    slower and their float64 sums in numpy cost as much again. None when the two graphs cannot be joined (the
    caller runs them apart).

    The graph runs on onnxruntime, graph optimizations off (the QDQ nodes computed as the standard defines them,
    :class:`~edgekit.core.runtime.HostRunner`'s 16-bit runtime): no compile step, where OpenVINO took 1.1-1.9 s to
    compile the joined MobileNetV2 (700 nodes) for 8 samples (the accuracy search's ranking step: 2.6 -> 1.1-1.3 s,
    and no compile check in a child for intel-vpu). A graph onnxruntime refuses runs on OpenVINO, in the exact
    form the host runner gives a QDQ model (compiled in a child first with ``isolate``)."""
    from edgekit.core.runtime import HostRunner

    runner = None
    for on_ort in (True, False):
        built = _sqnr_graph(fp32, quantized, layers, runner_form=not on_ort)
        if built is None:
            return None
        joined, own, sums, ref_name = built
        try:
            # OpenVINO without snippets: their JIT compiled ~200 Sub/ReduceSumSquare subgraphs slower than it ran
            # them (MobileNetV2: compile 2.3 -> 1.4 s, each inference 15 % faster).
            runner = (
                HostRunner(joined, prepared=True, onnxruntime=True, threads=1)
                if on_ort
                else HostRunner(joined, isolate=isolate, prepared=True, properties=SQNR_PROPERTIES)
            )
            break
        except Exception:  # noqa: BLE001 - a joined graph the runtime refuses: the next, else the two models apart
            continue
    if runner is None:
        return None
    comparison = _comparison(fp32.graph)
    ranges = InputRanges()
    power = {name: [0.0, 0.0, 0] for name in layers}
    for sample in track(
        prefetched(islice(iter(dataset), limit)), "evaluating fp32 vs int8", dataset_length(dataset, limit)
    ):
        ranges.update(sample.inputs)
        out = runner.run(sample.inputs, copy=False)
        comparison.update(
            {n: np.array(out[ref_name(n)]) for n in own}, {n: np.array(out[n]) for n in own}, sample.label
        )
        for name, signal, noise in sums:
            acc = power[name]
            acc[0] += float(out[signal])
            acc[1] += float(out[noise])
            acc[2] += 1
    if comparison.samples == 0:
        raise DataError("the evaluation data set is empty")
    rows = []
    for name in layers:
        signal, noise, samples = power[name]
        sqnr = sqnr_db(signal, noise)
        rows.append({"tensor": name, "samples": samples, "sqnr_db": sqnr if math.isfinite(sqnr) else None})
    rows.sort(key=_worst_first)
    return {**comparison.to_json(), "input_ranges": ranges.to_json()}, rows


def _sqnr_graph(fp32: ir.Model, quantized: Quantized, layers: list[str], runner_form: bool = True):
    """(the joined graph, the model's outputs, (layer, signal sum, noise sum) per layer, the fp32 copy's name
    of a tensor) for :func:`_sqnr_in_graph`, or None when the two models cannot share one graph. ``runner_form``:
    the QDQ model in the form OpenVINO runs exactly (:func:`edgekit.core.runtime.runner_form`), else as written
    (onnxruntime)."""
    from edgekit.core.runtime import runner_form as exact_form
    from onnx import TensorProto, helper, numpy_helper

    qproto = quantized.proto()
    ref = ir.to_proto(fp32)
    read = [quantized.dequantized[n] for n in layers]
    opset = {i.domain: i.version for i in qproto.opset_import}.get("", 0)
    inputs = {i.name for i in ref.graph.input}
    if (
        any(n.domain not in ("", "ai.onnx") for n in ref.graph.node)
        or inputs != {i.name for i in qproto.graph.input}
        or {i.domain: i.version for i in ref.opset_import}.get("", 0) < 21 <= opset  # converted for int16
    ):
        return None
    if runner_form:
        joined = exact_form(qproto, True, keep=read)
    else:
        joined = onnx.ModelProto()
        joined.CopyFrom(qproto)

    def renamed(name: str) -> str:
        return name if not name or name in inputs else REF + name

    for t in ref.graph.initializer:
        t.name = renamed(t.name)
    for node in ref.graph.node:
        if any(a.type == onnx.AttributeProto.GRAPH for a in node.attribute):
            return None  # subgraphs read outer names: not renamed here
        node.name = REF + node.name
        node.input[:] = [renamed(x) for x in node.input]
        node.output[:] = [renamed(x) for x in node.output]
    graph = joined.graph
    graph.initializer.extend(ref.graph.initializer)
    graph.node.extend(ref.graph.node)
    known = {o for node in graph.node for o in node.output} | inputs | {t.name for t in graph.initializer}
    ranks = {v.name: len(v.shape) for node in fp32.graph for v in node.outputs if v.shape is not None}
    sums: list[tuple[str, str, str]] = []
    for i, name in enumerate(layers):
        r, c = renamed(quantized.plan.saturated.get(name, name)), quantized.dequantized[name]
        if r not in known or c not in known:
            return None
        scale = quantized.channel_scales.get(name)
        if scale is not None:  # the equalized tensor in the fp32 model's units
            factor = f"sqnr_scale_{i}"
            rank = ranks.get(name)
            if rank is None:
                return None
            shaped = _per_channel(np.asarray(scale, np.float32), rank)
            graph.initializer.append(numpy_helper.from_array(shaped, factor))
            graph.node.append(helper.make_node("Mul", [c, factor], [f"sqnr_c{i}"]))
            c = f"sqnr_c{i}"
        bounds = quantized.plan.saturation.get(name)
        if bounds is not None:  # read only by ops that saturate there: compare what they see
            lo, hi = f"sqnr_lo_{i}", f"sqnr_hi_{i}"
            graph.initializer.extend(
                [
                    numpy_helper.from_array(np.array(b, np.float32), n)
                    for b, n in zip(bounds, (lo, hi), strict=True)
                ]
            )
            graph.node.extend(
                [
                    helper.make_node("Clip", [r, lo, hi], [f"sqnr_rc{i}"]),
                    helper.make_node("Clip", [c, lo, hi], [f"sqnr_cc{i}"]),
                ]
            )
            r, c = f"sqnr_rc{i}", f"sqnr_cc{i}"
        signal, noise = f"sqnr_signal_{i}", f"sqnr_noise_{i}"
        graph.node.extend([
            helper.make_node("Sub", [r, c], [f"sqnr_d{i}"]),
            helper.make_node("ReduceSumSquare", [r], [signal], keepdims=0),
            helper.make_node("ReduceSumSquare", [f"sqnr_d{i}"], [noise], keepdims=0),
        ])  # fmt: skip
        sums.append((name, signal, noise))
    own = [o.name for o in graph.output]
    for o in list(graph.output):  # the fp32 copy's outputs beside the QDQ model's
        graph.output.add().CopyFrom(o)
        graph.output[-1].name = renamed(o.name)
    for _, signal, noise in sums:
        graph.output.extend(helper.make_tensor_value_info(x, TensorProto.FLOAT, []) for x in (signal, noise))
    del graph.value_info[:]
    return joined, own, sums, renamed


class _NoisePower:
    """:class:`TensorError`'s SQNR alone: the sums of the reference's and of the error's squares (float64)."""

    def __init__(self) -> None:
        self.signal = self.noise = 0.0
        self.samples = 0

    def update(self, ref: np.ndarray, cand: np.ndarray) -> None:
        r = np.asarray(ref, np.float64).reshape(-1)
        d = r - np.asarray(cand, np.float32).reshape(-1)
        self.signal += float(r @ r)
        self.noise += float(d @ d)
        self.samples += 1

    def to_json(self) -> dict:
        sqnr = sqnr_db(self.signal, self.noise)
        return {"samples": self.samples, "sqnr_db": sqnr if math.isfinite(sqnr) else None}


def _unscaled(quantized: Quantized, name: str, array: np.ndarray) -> np.ndarray:
    """A QDQ tensor in the fp32 model's units: a tensor the depthwise-input equalization rescaled per channel is
    multiplied back."""
    scale = quantized.channel_scales.get(name)
    if scale is None:
        return array
    return array * _per_channel(scale, array.ndim)


def _per_channel(scale: np.ndarray, rank: int) -> np.ndarray:
    """Per-channel factors shaped to multiply a rank-``rank`` tensor along axis 1."""
    return scale.reshape((1, -1) + (1,) * (rank - 2))


def evaluate_outputs(
    fp32: ir.Model,
    candidate: onnx.ModelProto,
    dataset: Iterable,
    track: Track = no_progress,
    limit: int | None = None,
) -> dict:
    """fp32 against ``candidate`` (both on the host, OpenVINO f32) over ``dataset``: the output comparison."""
    from edgekit.core.runtime import HostRunner

    ref_runner = HostRunner(ir.to_proto(fp32))
    cand_runner = HostRunner(candidate, isolate=True)
    output_names = [v.name for v in fp32.graph.outputs]
    comparison = _comparison(fp32.graph)
    ranges = InputRanges()
    total = dataset_length(dataset, limit)
    for sample in track(prefetched(islice(iter(dataset), limit)), "evaluating fp32 vs the recipe", total):
        ranges.update(sample.inputs)
        ref, cand = ref_runner.run(sample.inputs), cand_runner.run(sample.inputs)
        comparison.update({n: ref[n] for n in output_names}, {n: cand[n] for n in output_names}, sample.label)
    if comparison.samples == 0:
        raise DataError("the evaluation data set is empty")
    return {**comparison.to_json(), "input_ranges": ranges.to_json()}
