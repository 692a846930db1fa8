"""Running a packaged bundle on a device through the agent, and comparing it with fp32 on the host.

The host computes the fp32 reference once (OpenVINO CPU, f32); each bundle is uploaded, loaded and fed the same
samples, converted to what the packaged model takes (layout NHWC where the manifest says so, int8/uint8 with the
manifest's scale and zero point for integer inputs) and its outputs converted back. On-device compute time per
sample comes from the agent; transfer and protocol time is measured apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import onnx_ir as ir
from edgekit.device_agents.bundle import Manifest, TensorSpec, read_bundle
from edgekit.metrics import Comparison
from edgekit.report import latency_summary
from edgekit.sanity import InputRanges

#: Samples sent to the agent in one INFER request.
BATCH = 16


@dataclass
class Reference:
    """fp32 outputs on the host for each evaluation sample (kept: they are small next to the inputs)."""

    inputs_shapes: dict[str, tuple[int, ...]]
    output_names: list[str]
    samples: list[tuple[dict[str, np.ndarray], dict[str, np.ndarray], int | None]] = field(
        default_factory=list
    )
    #: min/max/mean of every float input over the evaluation data (for the preprocessing checks)
    ranges: InputRanges = field(default_factory=InputRanges)

    @property
    def labelled(self) -> bool:
        return bool(self.samples) and all(label is not None for _, _, label in self.samples)


def host_reference(
    model: ir.Model,
    dataset: Iterable,
    limit: int | None,
    track: Callable = lambda it, d, n: it,
    runner: Any = None,
) -> Reference:
    """The reference outputs: ``model`` on the host (:class:`edgekit.runtime.HostRunner`), or ``runner``
    (anything with ``run(feeds) -> {output: array}`` for the same inputs and outputs)."""
    from edgekit.runtime import HostRunner

    runner = runner if runner is not None else HostRunner(model)
    ref = Reference(
        {v.name: tuple(v.shape) for v in model.graph.inputs}, [v.name for v in model.graph.outputs]
    )
    total = min(len(dataset), limit or len(dataset)) if hasattr(dataset, "__len__") else (limit or 0)
    for sample in track(islice(iter(dataset), limit), "fp32 on the host", total):
        ref.ranges.update(sample.inputs)
        ref.samples.append((sample.inputs, runner.run(sample.inputs), sample.label))
    return ref


def agreement_with_reference(model: ir.Model, reference: Reference) -> dict[str, Any]:
    """``model`` run exactly on the host (:class:`edgekit.runtime.HostRunner`) on the reference's samples: its
    top-1 agreement with the reference and, with labels, both top-1 accuracies (first output, last axis)."""
    from edgekit.runtime import HostRunner

    runner = HostRunner(model)
    name = reference.output_names[0]
    agree = correct = ref_correct = 0
    for inputs, ref_out, label in reference.samples:
        got = int(np.argmax(np.asarray(runner.run(inputs)[name]).reshape(-1)))
        want = int(np.argmax(np.asarray(ref_out[name]).reshape(-1)))
        agree += got == want
        correct += label is not None and got == label
        ref_correct += label is not None and want == label
    n = max(len(reference.samples), 1)
    out: dict[str, Any] = {"samples": len(reference.samples), "top1_agreement": 100.0 * agree / n}
    if reference.labelled:
        out.update(top1=100.0 * correct / n, reference_top1=100.0 * ref_correct / n)
    return out


def to_device(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """An ONNX-layout float input as the packaged model takes it."""
    a = np.asarray(array, np.float32)
    if a.ndim == 4 and spec.layout == "NHWC" and tuple(spec.shape) != a.shape:
        a = a.transpose(0, 2, 3, 1)
    if spec.dtype in ("int8", "uint8"):
        info = np.iinfo(spec.dtype)
        q = np.round(a / spec.scale) + (spec.zero_point or 0)
        return np.clip(q, info.min, info.max).astype(spec.dtype)
    return a.astype(spec.dtype).reshape(spec.shape)


def from_device(array: np.ndarray, spec: TensorSpec, onnx_shape: Sequence[int]) -> np.ndarray:
    """A packaged model's output back in the ONNX model's layout, dequantized."""
    a = np.asarray(array)
    if spec.dtype in ("int8", "uint8"):
        a = (a.astype(np.float32) - (spec.zero_point or 0)) * np.float32(spec.scale)
    a = a.astype(np.float32)
    if a.ndim == 4 and spec.layout == "NHWC" and tuple(onnx_shape) != a.shape:
        a = a.transpose(0, 3, 1, 2)
    return a.reshape(tuple(onnx_shape))


def _match_outputs(manifest: Manifest, onnx_names: list[str]) -> list[tuple[str, TensorSpec]]:
    by_name = {s.name: s for s in manifest.outputs}
    if all(n in by_name for n in onnx_names):
        return [(n, by_name[n]) for n in onnx_names]
    if len(manifest.outputs) == len(onnx_names):
        return list(zip(onnx_names, manifest.outputs, strict=True))
    raise ValueError(
        f"bundle outputs {[s.name for s in manifest.outputs]} do not match the model's {onnx_names}"
    )


def _match_inputs(manifest: Manifest, onnx_names: list[str]) -> list[tuple[str, TensorSpec]]:
    by_name = {s.name: s for s in manifest.inputs}
    if all(n in by_name for n in onnx_names):
        return [(n, by_name[n]) for n in onnx_names]
    return list(zip(onnx_names, manifest.inputs, strict=True))


def run_on_device(
    client: Any,
    bundle: Path,
    reference: Reference,
    track: Callable = lambda it, d, n: it,
    upload_progress: Callable[[int, int], None] | None = None,
    threads: int = 2,
) -> dict:
    """Upload, load and evaluate one bundle; the target's entry of the report (without host-side extras)."""
    with read_bundle(bundle) as loaded:
        manifest = loaded.manifest
    start = time.perf_counter()
    bundle_id = client.put_bundle(bundle, progress=upload_progress)
    upload_s = time.perf_counter() - start
    load_info = client.load(bundle_id, threads=threads)
    inputs = _match_inputs(manifest, list(reference.inputs_shapes))
    outputs = _match_outputs(manifest, reference.output_names)
    onnx_out_shapes = {n: reference.samples[0][1][n].shape for n in reference.output_names}
    comparison = Comparison()
    times: list[float] = []
    wall = 0.0
    batches = [reference.samples[i : i + BATCH] for i in range(0, len(reference.samples), BATCH)]
    for batch in track(batches, f"evaluating on the device ({manifest.target})", len(batches)):
        feeds = {spec.name: np.stack([to_device(s[0][n], spec) for s in batch]) for n, spec in inputs}
        start = time.perf_counter()
        device_out, batch_times = client.infer(feeds)
        wall += time.perf_counter() - start
        times += batch_times
        for i, (_, ref_out, label) in enumerate(batch):
            cand = {n: from_device(device_out[spec.name][i], spec, onnx_out_shapes[n]) for n, spec in outputs}
            comparison.update({n: ref_out[n] for n in reference.output_names}, cand, label)
    client.delete(bundle_id)
    compute = float(sum(times))
    n = max(len(reference.samples), 1)
    return {
        "target": manifest.target,
        "bundle": str(bundle),
        "runtime": manifest.runtime,
        "size_bytes": sum(f.size for f in manifest.model_files),
        "files": [{"name": f.path, "role": f.role, "size_bytes": f.size} for f in manifest.model_files],
        "evaluation": comparison.to_json(),
        "latency_ms": latency_summary(times),
        "latency_samples_ms": [round(t * 1e3, 4) for t in times],
        "transfer": {
            "upload_s": upload_s,
            "upload_bytes": sum(f.size for f in manifest.model_files),
            "infer_wall_s": wall,
            "compute_s": compute,
            "overhead_per_sample_ms": 1e3 * max(wall - compute, 0.0) / n,
        },
        "load": {
            k: v for k, v in load_info.items() if k in ("runtime", "delegate", "delegated_ops", "threads")
        },
    }
