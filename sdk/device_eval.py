"""Running a packaged bundle on devices through the agent, and comparing it with fp32 on the host, in bounded
memory.

The host computes the fp32 reference once (OpenVINO CPU, f32) and spills it to an unnamed temporary file, one
fixed-size record per sample (:class:`Reference`). Each target then streams the evaluation data again in shards
(:func:`shards`: at most ``SHARD_SAMPLES`` samples, converted to what the packaged model takes: layout NHWC where
the manifest says so, int8/uint8 with the manifest's scale and zero point for integer inputs). Devices run the
shards (:mod:`edgekit.fleet`) and :class:`TargetEvaluation` merges their outputs in sample order into running
metrics: the comparison with fp32, a latency reservoir, an output digest. Memory holds a bounded number of shards,
never the data set. On-device compute time per sample comes from the agent; transfer and protocol time is
measured apart.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import DataError
from edgekit.core.metrics import Comparison, LatencyStats, primary_output
from edgekit.core.sanity import InputRanges
from edgekit.core.shape_checks import selection_axes, selection_groups
from edgekit.device_agents.bundle import Manifest, TensorSpec

#: Samples in one shard: the unit a device pulls from the work queue and runs in one INFER request.
SHARD_SAMPLES = 64
#: ... and at most this many input bytes (large images make smaller shards).
SHARD_BYTES = 4 << 20
#: A label slot of the reference file that holds no label.
_NO_LABEL = np.iinfo(np.int64).min


class Reference:
    """fp32 outputs on the host for every evaluation sample, spilled to an unnamed temporary file (one fixed-size
    record per sample, read back by index), so memory holds one sample at a time whatever the data set's size."""

    def __init__(
        self,
        inputs_shapes: dict[str, tuple[int, ...]],
        output_names: list[str],
        selection_axes: dict[str, int] | None = None,
        selection_groups: Sequence[tuple[str, ...]] = (),
    ):
        self.inputs_shapes = inputs_shapes
        self.output_names = output_names
        #: outputs whose row count the data sets (a detector's selection), by name: the axis of their rows. Each
        #: sample's array goes to a second file, found by (offset, shape) kept per sample.
        self.selection_axes = dict(selection_axes or {})
        #: selection outputs read together (their rows one detection each): :func:`selection_groups`
        self.selection_groups = list(selection_groups)
        self._fixed = [n for n in output_names if n not in self.selection_axes]
        self._rows_file = tempfile.TemporaryFile(prefix="edgekit-reference-rows-")  # noqa: SIM115 - see close()
        self._rows_at: list[list[tuple[int, tuple[int, ...], np.dtype]]] = []
        self._rows_end = 0
        #: min/max/mean of every float input over the evaluation data (for the preprocessing checks)
        self.ranges = InputRanges()
        #: the QDQ form's agreement with this reference, when host_reference was asked for it
        self.agreement: dict[str, Any] | None = None
        self.count = 0
        self._all_labelled = True
        self._file = tempfile.TemporaryFile(prefix="edgekit-reference-")  # noqa: SIM115 - closed by close()
        self._layout: list[tuple[str, tuple[int, ...], np.dtype, int]] | None = None
        self._record = 0
        self._dtype: np.dtype | None = None
        self._dirty = False

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()
        self._rows_file.close()

    @property
    def labelled(self) -> bool:
        return self.count > 0 and self._all_labelled

    @property
    def output_shapes(self) -> dict[str, tuple[int, ...]]:
        """The fixed outputs' shapes (not the selections')."""
        return {name: shape for name, shape, _, _ in self._layout or ()}

    def append(self, outputs: dict[str, np.ndarray], label: int | None) -> None:
        arrays = [np.asarray(outputs[n]) for n in self._fixed]
        at = []
        for name in self.selection_axes:
            a = np.ascontiguousarray(outputs[name])
            at.append((self._rows_end, a.shape, a.dtype))
            self._rows_file.write(a.tobytes())
            self._rows_end += a.nbytes
        self._rows_at.append(at)
        if self._layout is None:
            offset, layout = 8, []
            for name, a in zip(self._fixed, arrays, strict=True):
                layout.append((name, a.shape, a.dtype, offset))
                offset += a.nbytes
            self._layout, self._record = layout, offset
            # fields by position: an output may be named "label" (scikit-learn classifiers' is)
            self._dtype = np.dtype({
                "names": ["label", *[f"output{i}" for i in range(len(layout))]],
                "formats": [np.int64, *[(dt, shape) for _, shape, dt, _ in layout]],
                "offsets": [0, *[o for *_, o in layout]],
                "itemsize": offset,
            })  # fmt: skip
        parts = [np.int64(_NO_LABEL if label is None else label).tobytes()]
        for (name, shape, dtype, _), a in zip(self._layout, arrays, strict=True):
            if a.shape != shape or a.dtype != dtype:
                raise DataError(
                    f"--eval compares outputs of one shape sample by sample; output {name!r} is {list(shape)} on "
                    f"one sample and {list(a.shape)} on another, and the model does not say it varies (a dim of "
                    "its graph output that is not a number)"
                )
            parts.append(np.ascontiguousarray(a).tobytes())
        self._file.write(b"".join(parts))
        self._dirty = True
        self._all_labelled &= label is not None
        self.count += 1

    def batch(self, start: int, count: int) -> tuple[dict[str, np.ndarray], list[int | None]]:
        """The reference outputs (stacked along a first axis) and labels of samples ``start .. start+count-1``."""
        if not (start >= 0 and count >= 1 and start + count <= self.count):
            raise IndexError(f"samples {start}-{start + count - 1} of {self.count}")
        if self._dirty:
            self._file.flush()
            self._rows_file.flush()
            self._dirty = False
        raw = os.pread(self._file.fileno(), self._record * count, start * self._record)
        records = np.frombuffer(raw, self._dtype, count)
        labels = [None if x == _NO_LABEL else x for x in records["label"].tolist()]
        fixed = {name: records[f"output{i}"] for i, name in enumerate(self._fixed)}
        rows: dict[str, list[np.ndarray]] = {name: [] for name in self.selection_axes}
        for at in self._rows_at[start : start + count]:
            for name, (offset, shape, dtype) in zip(self.selection_axes, at, strict=True):
                size = int(np.prod(shape)) * dtype.itemsize
                data = os.pread(self._rows_file.fileno(), size, offset) if size else b""
                rows[name].append(np.frombuffer(data, dtype).reshape(shape))
        return {name: fixed[name] if name in fixed else rows[name] for name in self.output_names}, labels

    def sample(self, index: int) -> tuple[dict[str, np.ndarray], int | None]:
        """The reference outputs and label of sample ``index``."""
        outputs, labels = self.batch(index, 1)
        return {name: a[0] for name, a in outputs.items()}, labels[0]


def host_reference(
    model: ir.Model,
    dataset: Iterable,
    limit: int | None,
    track: Callable = lambda it, d, n: it,
    runner: Any = None,
    agreement_model: ir.Model | None = None,
) -> Reference:
    """The reference outputs: ``model`` on the host (:class:`edgekit.core.runtime.HostRunner`), or ``runner``
    (anything with ``run(feeds) -> {output: array}`` for the same inputs and outputs), one sample at a time.

    With ``agreement_model``, that model also runs exactly on the host on every sample, and ``agreement`` holds
    its top-1 agreement with the reference and, with labels, both top-1 accuracies (first output, last axis)."""
    from edgekit.core.runtime import HostRunner

    runner = runner if runner is not None else HostRunner(model)
    other = HostRunner(agreement_model) if agreement_model is not None else None
    axes = selection_axes(model.graph)
    ref = Reference(
        {v.name: tuple(v.shape) for v in model.graph.inputs},
        [v.name for v in model.graph.outputs],
        axes,
        selection_groups(model.graph, axes),
    )
    total = min(len(dataset), limit or len(dataset)) if hasattr(dataset, "__len__") else (limit or 0)
    name: str | None = None  # the output top-1 reads (metrics.primary_output), from the first sample
    agree = correct = ref_correct = 0
    try:
        for sample in track(islice(iter(dataset), limit), "fp32 on the host", total):
            ref.ranges.update(sample.inputs)
            outputs = runner.run(sample.inputs)
            ref.append(outputs, sample.label)
            if other is not None:
                name = name or primary_output(outputs)
                got = int(np.argmax(np.asarray(other.run(sample.inputs)[name]).reshape(-1)))
                want = int(np.argmax(np.asarray(outputs[name]).reshape(-1)))
                agree += got == want
                correct += sample.label is not None and got == sample.label
                ref_correct += sample.label is not None and want == sample.label
    except BaseException:
        ref.close()
        raise
    if other is not None:
        n = max(ref.count, 1)
        ref.agreement = {"samples": ref.count, "top1_agreement": 100.0 * agree / n}
        if ref.labelled:
            ref.agreement.update(top1=100.0 * correct / n, reference_top1=100.0 * ref_correct / n)
    return ref


def _permuted(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(shape[p]) for p in perm)


def to_device(array: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """An ONNX-layout float input as the packaged model takes it."""
    return to_device_batch(np.asarray(array)[None], spec)[0]


def to_device_batch(arrays: np.ndarray, spec: TensorSpec) -> np.ndarray:
    """Samples stacked along a new first axis, each in the ONNX layout, as the packaged model takes them."""
    a = np.asarray(arrays)
    # NHWC on the device: move the channels last when that gives the device's shape (also when C == H == W)
    if a.ndim == 5 and spec.layout == "NHWC" and _permuted(a.shape[1:], (0, 2, 3, 1)) == tuple(spec.shape):
        a = a.transpose(0, 1, 3, 4, 2)
    # an integer input without a scale (a uint8 image) goes as it is
    if spec.dtype in ("int8", "uint8") and spec.scale is not None:
        a = a.astype(np.float32)
        info = np.iinfo(spec.dtype)
        q = np.round(a / spec.scale) + (spec.zero_point or 0)
        return np.clip(q, info.min, info.max).astype(spec.dtype).reshape((len(a), *spec.shape))
    return a.astype(spec.dtype).reshape((len(a), *spec.shape))


def from_device(array: np.ndarray, spec: TensorSpec, onnx_shape: Sequence[int]) -> np.ndarray:
    """A packaged model's output back in the ONNX model's layout, dequantized."""
    return from_device_batch(np.asarray(array)[None], spec, onnx_shape)[0]


def from_device_batch(arrays: np.ndarray, spec: TensorSpec, onnx_shape: Sequence[int]) -> np.ndarray:
    """A packaged model's outputs for samples along the first axis, back in the ONNX layout, dequantized."""
    a = np.asarray(arrays)
    if spec.dtype in ("int8", "uint8") and spec.scale is not None:
        a = (a.astype(np.float32) - (spec.zero_point or 0)) * np.float32(spec.scale)
    a = a.astype(np.float32)
    # the device's NHWC back to NCHW whenever that gives the ONNX shape: a shape alone cannot tell the layouts
    # apart when C == H == W (YOLOv8n-seg's mask prototypes at 128x128: [1, 32, 32, 32])
    if a.ndim == 5 and spec.layout == "NHWC" and _permuted(a.shape[1:], (0, 3, 1, 2)) == tuple(onnx_shape):
        a = a.transpose(0, 1, 4, 2, 3)
    return a.reshape((len(a), *onnx_shape))


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


@dataclass
class Shard:
    """Consecutive samples ``start .. start + count - 1`` as the device takes them, stacked per input."""

    index: int
    start: int
    count: int
    feeds: dict[str, np.ndarray]
    #: devices it was handed to and lost with (a shard moved too often fails the run)
    attempts: int = 0

    def __lt__(self, other: Shard) -> bool:  # the work queue hands out the earliest shard first
        return self.index < other.index

    @property
    def samples(self) -> str:
        return f"samples {self.start}-{self.start + self.count - 1}"


def shard_size(manifest: Manifest, limit: int = SHARD_SAMPLES, max_bytes: int = SHARD_BYTES) -> int:
    """Samples per shard for this bundle: ``limit``, fewer when one sample's inputs are large."""
    if any(d < 0 for s in manifest.outputs for d in s.shape):
        return 1  # outputs sized at run time (a selection): one sample per request, each its own shape
    per_sample = sum(int(np.prod(s.shape)) * np.dtype(s.dtype).itemsize for s in manifest.inputs)
    return max(1, min(limit, max_bytes // max(per_sample, 1)))


def shards(
    dataset: Iterable, manifest: Manifest, reference: Reference, size: int = SHARD_SAMPLES
) -> Iterator[Shard]:
    """The evaluation data streamed again (the reference's ``count`` samples) in shards of ``size`` samples."""
    inputs = _match_inputs(manifest, list(reference.inputs_shapes))
    start = index = 0
    batch: dict[str, list[np.ndarray]] = {spec.name: [] for _, spec in inputs}
    count = 0
    names = {spec.name: name for name, spec in inputs}
    specs = {spec.name: spec for _, spec in inputs}

    def shard() -> Shard:
        feeds = {n: to_device_batch(np.stack(a), specs[n]) for n, a in batch.items()}
        return Shard(index, start, count, feeds)

    for sample in islice(iter(dataset), reference.count):
        for device_name, onnx_name in names.items():
            batch[device_name].append(sample.inputs[onnx_name])
        count += 1
        if count == size:
            yield shard()
            index, start, count = index + 1, start + count, 0
            batch = {spec.name: [] for _, spec in inputs}
    if count:
        yield shard()


@dataclass
class DeviceFigures:
    """What one device did for one target."""

    name: str
    url: str
    samples: int = 0
    shards: int = 0
    wall_s: float = 0.0
    compute_s: float = 0.0
    upload_s: float | None = None
    status: str = "ok"  # ok | dropped | unavailable | not used
    reason: str | None = None
    hello: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    latency: LatencyStats = field(default_factory=LatencyStats)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "status": self.status,
            "reason": self.reason,
            "samples": self.samples,
            "shards": self.shards,
            "upload_s": self.upload_s,
            "infer_wall_s": self.wall_s,
            "compute_s": self.compute_s,
            "latency_ms": self.latency.summary(),
            "latency_samples_ms": self.latency.samples_ms(),
        }


class TargetEvaluation:
    """Merges the devices' shard outputs in sample order into running figures: the comparison with the
    reference, the latency reservoir, a sha256 of every output in sample order, and per-device figures."""

    def __init__(self, manifest: Manifest, reference: Reference):
        self.reference = reference
        self.outputs = _match_outputs(manifest, reference.output_names)
        self.comparison = Comparison(
            selection_axes=dict(reference.selection_axes), selection_groups=list(reference.selection_groups)
        )
        self.latency = LatencyStats()
        self.digest = hashlib.sha256()
        self.merged = 0
        #: host seconds spent merging (converting outputs back, comparing, hashing)
        self.merge_s = 0.0

    def merge(
        self, shard: Shard, outputs: dict[str, np.ndarray], times: Sequence[float], device: DeviceFigures
    ) -> None:
        if shard.start != self.merged:
            raise AssertionError(f"shard of {shard.samples} merged out of order (at {self.merged})")
        started = time.perf_counter()
        shapes = self.reference.output_shapes
        ref, labels = self.reference.batch(shard.start, shard.count)
        raw = {spec.name: np.ascontiguousarray(outputs[spec.name][: shard.count]) for _, spec in self.outputs}
        if len(raw) == 1:
            self.digest.update(next(iter(raw.values())).tobytes())  # the same bytes as sample by sample
        else:
            for i in range(shard.count):
                for a in raw.values():
                    self.digest.update(a[i].tobytes())
        cand = {
            name: [from_device(a, spec, a.shape) for a in raw[spec.name]]
            if name in self.reference.selection_axes
            else from_device_batch(raw[spec.name], spec, shapes[name])
            for name, spec in self.outputs
        }
        self.comparison.update_batch(ref, cand, labels)
        for t in times[: shard.count]:
            self.latency.add(t)
            device.latency.add(t)
        self.merged += shard.count
        device.samples += shard.count
        device.shards += 1
        device.compute_s += float(sum(times[: shard.count]))
        self.merge_s += time.perf_counter() - started
