"""fp32 against a quantized candidate on the host (OpenVINO f32, exact QDQ): the output comparison and the
per-layer SQNR, the statistics the report and the accuracy-aware search read (statistics apart from rewriting)."""

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
from edgekit.quantize.calibrate import Track, dataset_length, no_progress
from edgekit.quantize.pipeline import Quantized


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
    ref_runner = HostRunner(
        ir.to_proto(fp32), extra_outputs=list(dict.fromkeys(layers + list(quantized.plan.saturated.values())))
    )
    q_runner = HostRunner(
        quantized.proto(), extra_outputs=[quantized.dequantized[n] for n in layers], isolate=isolate
    )
    output_names = [v.name for v in fp32.graph.outputs]
    comparison = Comparison()
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
    layer_rows.sort(key=lambda r: (r["sqnr_db"] is None, r["sqnr_db"] if r["sqnr_db"] is not None else 0.0))
    return {**comparison.to_json(), "input_ranges": ranges.to_json()}, layer_rows


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
    return array * scale.reshape((1, -1) + (1,) * (array.ndim - 2))


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
    comparison = Comparison()
    ranges = InputRanges()
    total = dataset_length(dataset, limit)
    for sample in track(prefetched(islice(iter(dataset), limit)), "evaluating fp32 vs the recipe", total):
        ranges.update(sample.inputs)
        ref, cand = ref_runner.run(sample.inputs), cand_runner.run(sample.inputs)
        comparison.update({n: ref[n] for n in output_names}, {n: cand[n] for n in output_names}, sample.label)
    if comparison.samples == 0:
        raise DataError("the evaluation data set is empty")
    return {**comparison.to_json(), "input_ranges": ranges.to_json()}
