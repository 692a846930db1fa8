"""Streaming comparison metrics between a reference (fp32) and a candidate (quantized, on-device) model.

Everything accumulates sample by sample in fixed memory: sums of squares for SQNR / RMSE / relative L2, a running
mean of cosine similarity, a running maximum of the absolute error, counters for top-k accuracy and agreement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


def sqnr_db(signal_power: float, noise_power: float) -> float:
    """Signal-to-quantization-noise ratio in dB (``inf`` for an exact match)."""
    if noise_power <= 0:
        return math.inf
    if signal_power <= 0:
        return -math.inf
    return 10.0 * math.log10(signal_power / noise_power)


@dataclass
class TensorError:
    """Error statistics of one tensor over many samples."""

    samples: int = 0
    elements: int = 0
    signal: float = 0.0  # sum of ref^2
    noise: float = 0.0  # sum of (ref - cand)^2
    abs_sum: float = 0.0
    max_abs: float = 0.0
    cosine_sum: float = 0.0

    def update(self, ref: np.ndarray, cand: np.ndarray) -> None:
        """One sample."""
        if np.size(ref) != np.size(cand):
            raise ValueError(f"shape mismatch: reference {np.shape(ref)} vs candidate {np.shape(cand)}")
        self.update_batch(np.reshape(ref, (1, -1)), np.reshape(cand, (1, -1)))

    def update_batch(self, ref: np.ndarray, cand: np.ndarray) -> None:
        """Several samples along the first axis (the same sums as one at a time)."""
        n = len(ref)
        r = np.asarray(ref, dtype=np.float64).reshape(n, -1)
        c = np.asarray(cand, dtype=np.float64).reshape(len(cand), -1)
        if r.shape != c.shape:
            raise ValueError(f"shape mismatch: reference {np.shape(ref)} vs candidate {np.shape(cand)}")
        diff = r - c
        self.samples += n
        self.elements += r.size
        self.signal += float(np.einsum("ij,ij->", r, r))
        self.noise += float(np.einsum("ij,ij->", diff, diff))
        self.abs_sum += float(np.abs(diff).sum())
        self.max_abs = max(self.max_abs, float(np.abs(diff).max(initial=0.0)))
        nr = np.sqrt(np.einsum("ij,ij->i", r, r))
        nc = np.sqrt(np.einsum("ij,ij->i", c, c))
        both = (nr > 0) & (nc > 0)
        dots = np.einsum("ij,ij->i", r, c)
        cosine = np.where(both, dots / np.where(both, nr * nc, 1.0), 0.0)
        cosine[(nr == 0) & (nc == 0)] = 1.0
        self.cosine_sum += float(cosine.sum())

    def to_json(self) -> dict:
        n = max(self.elements, 1)
        return {
            "samples": self.samples,
            "cosine": _finite(self.cosine_sum / max(self.samples, 1)),
            "sqnr_db": _finite(sqnr_db(self.signal, self.noise)),
            "max_abs_error": self.max_abs,
            "mae": self.abs_sum / n,
            "rmse": math.sqrt(self.noise / n),
            "relative_l2": _finite(math.sqrt(self.noise / self.signal)) if self.signal > 0 else None,
        }


#: Two rows of a selection match when each value is within this fraction of its column's scale (the largest
#: magnitude in that column of the reference's rows of the sample): a class id must be equal, a score within 2 % of
#: the best score, a box corner within 2 % of the image extent the boxes span.
ROW_TOLERANCE = 0.02


def match_rows(
    reference: np.ndarray, candidate: np.ndarray, tolerance: float = ROW_TOLERANCE
) -> tuple[int, float]:
    """Rows of ``candidate`` paired one to one with rows of ``reference`` (both ``[rows, values]``), closest
    first, each pair within ``tolerance`` of every column's scale: (pairs, the largest difference of a pair
    over its column's scale)."""
    r = np.asarray(reference, np.float64)
    c = np.asarray(candidate, np.float64)
    if not len(r) or not len(c):
        return 0, 0.0
    scale = np.abs(r).max(axis=0)
    scale = np.where(scale > 0, scale, np.maximum(np.abs(c).max(axis=0), 1e-30))
    distance = (np.abs(r[:, None, :] - c[None, :, :]) / scale).max(axis=2)
    order = np.argsort(distance, axis=None, kind="stable")
    used_r, used_c = np.zeros(len(r), bool), np.zeros(len(c), bool)
    pairs, worst = 0, 0.0
    for flat in order:
        i, j = divmod(int(flat), len(c))
        if distance[i, j] > tolerance:
            break
        if used_r[i] or used_c[j]:
            continue
        used_r[i] = used_c[j] = True
        pairs += 1
        worst = max(worst, float(distance[i, j]))
    return pairs, worst


def as_rows(array: np.ndarray, axis: int) -> np.ndarray:
    """``array`` as ``[rows, values]``, its rows along ``axis``."""
    a = np.moveaxis(np.asarray(array), axis, 0)
    return a.reshape(len(a), int(np.prod(a.shape[1:])))


@dataclass
class SelectionError:
    """An output whose row count the data sets (a detector's kept boxes: ``[rows, 6]``, or ``[rows, 4]`` boxes
    beside ``[rows]`` scores) against the reference's rows of the same sample, matched row to row
    (:func:`match_rows`): how many of the reference's rows the candidate keeps, and how many of its rows are the
    reference's."""

    axis: int = 0
    samples: int = 0
    same_count: int = 0
    reference_rows: int = 0
    candidate_rows: int = 0
    matched: int = 0
    max_matched_error: float = 0.0

    def update(self, ref: np.ndarray, cand: np.ndarray) -> None:
        """One sample: ``ref`` and ``cand`` with their rows along ``axis``."""
        self.update_rows(as_rows(ref, self.axis), as_rows(cand, self.axis))

    def update_rows(self, r: np.ndarray, c: np.ndarray) -> None:
        """One sample, as ``[rows, values]``."""
        if r.shape[1] != c.shape[1]:
            raise ValueError(f"rows of {r.shape[1]} values in the reference, {c.shape[1]} in the candidate")
        pairs, worst = match_rows(r, c)
        self.samples += 1
        self.same_count += len(r) == len(c)
        self.reference_rows += len(r)
        self.candidate_rows += len(c)
        self.matched += pairs
        self.max_matched_error = max(self.max_matched_error, worst)

    def to_json(self) -> dict:
        return {
            "samples": self.samples,
            "reference_rows": self.reference_rows,
            "candidate_rows": self.candidate_rows,
            "matched_rows": self.matched,
            # of the reference's rows, the share the candidate keeps; of the candidate's, the share that are right
            "recall": 100.0 * self.matched / self.reference_rows if self.reference_rows else None,
            "precision": 100.0 * self.matched / self.candidate_rows if self.candidate_rows else None,
            "same_count_samples": self.same_count,
            "max_matched_error": self.max_matched_error,
            "tolerance": ROW_TOLERANCE,
        }


def _finite(x: float) -> float | None:
    """JSON has no infinity: an exact match is reported as null SQNR."""
    return x if math.isfinite(x) else None


def is_classifier_output(array: np.ndarray) -> bool:
    """A [1, C] (or [1, C, 1, 1]) score vector with C > 1."""
    squeezed = np.squeeze(array)
    return squeezed.ndim == 1 and squeezed.size > 1


def primary_output(outputs: Mapping[str, np.ndarray]) -> str:
    """The output top-1 reads: the first, unless it is integer (a classifier's predicted label, as scikit-learn
    converters write it first: ``label``, then ``probabilities``) and a later output is a score vector."""
    names = list(outputs)
    if np.asarray(outputs[names[0]]).dtype.kind in "iu":
        scores = [n for n in names[1:] if np.asarray(outputs[n]).dtype.kind == "f"]
        scores = [n for n in scores if is_classifier_output(np.asarray(outputs[n]))]
        if scores:
            return scores[0]
    return names[0]


@dataclass
class Comparison:
    """Reference vs candidate over a data set: per-output errors, accuracy, agreement, confusion."""

    outputs: dict[str, TensorError] = field(default_factory=dict)
    samples: int = 0
    labelled: int = 0
    ref_top1: int = 0
    ref_top5: int = 0
    cand_top1: int = 0
    cand_top5: int = 0
    agree: int = 0
    classifier: bool | None = None
    primary: str | None = None
    #: label -> predicted (candidate) counts, for a confusion matrix
    confusion: dict[tuple[int, int], int] = field(default_factory=dict)
    #: outputs whose row count the data sets, by name: the axis of their rows (given as one array per sample)
    selection_axes: dict[str, int] = field(default_factory=dict)
    selections: dict[str, SelectionError] = field(default_factory=dict)
    #: outputs of :attr:`selection_axes` sized by the same selection: their rows also matched as one row each
    #: (a box, its score and its class together), under the names joined by " + "
    selection_groups: list[tuple[str, ...]] = field(default_factory=list)

    def update(
        self, ref: Mapping[str, np.ndarray], cand: Mapping[str, np.ndarray], label: int | None
    ) -> None:
        """One sample."""
        self.update_batch(
            {n: np.asarray(a)[None] for n, a in ref.items()}, {n: np.asarray(a)[None] for n, a in cand.items()},
            [label],
        )  # fmt: skip

    def update_batch(
        self, ref: Mapping[str, np.ndarray], cand: Mapping[str, np.ndarray], labels: Sequence[int | None]
    ) -> None:
        """Several samples along the first axis of every array, with their labels (None: unlabelled); an output of
        :attr:`selection_axes` as a sequence of one array per sample."""
        for name, r in ref.items():
            if name in self.selection_axes:
                error = self.selections.setdefault(name, SelectionError(self.selection_axes[name]))
                for one, other in zip(r, cand[name], strict=True):
                    error.update(one, other)
            else:
                self.outputs.setdefault(name, TensorError()).update_batch(r, cand[name])
        for group in self.selection_groups:
            joint = self.selections.setdefault(" + ".join(group), SelectionError())
            for i in range(len(labels)):
                rows = [[as_rows(side[n][i], self.selection_axes[n]) for n in group] for side in (ref, cand)]
                if all(len({len(a) for a in side}) == 1 for side in rows):  # as many rows in each output
                    joint.update_rows(*(np.concatenate(side, axis=1) for side in rows))
        if self.primary is None:
            self.primary = primary_output({n: np.asarray(a[0]) for n, a in ref.items()})
            self.classifier = self.primary not in self.selection_axes and is_classifier_output(
                ref[self.primary][0]
            )
        n = len(labels)
        self.samples += n
        if not self.classifier:
            return
        r = np.asarray(ref[self.primary], np.float64).reshape(n, -1)
        c = np.asarray(cand[self.primary], np.float64).reshape(n, -1)
        r1, c1 = np.argmax(r, axis=1), np.argmax(c, axis=1)
        self.agree += int((r1 == c1).sum())
        rows = [i for i, label in enumerate(labels) if label is not None]
        if not rows:
            return
        lab = np.asarray([labels[i] for i in rows], np.int64)
        r, c, r1, c1 = r[rows], c[rows], r1[rows], c1[rows]
        k = min(5, r.shape[1])
        self.labelled += len(rows)
        self.ref_top1 += int((r1 == lab).sum())
        self.cand_top1 += int((c1 == lab).sum())
        self.ref_top5 += int((np.argsort(-r, axis=1, kind="stable")[:, :k] == lab[:, None]).any(axis=1).sum())
        self.cand_top5 += int(
            (np.argsort(-c, axis=1, kind="stable")[:, :k] == lab[:, None]).any(axis=1).sum()
        )
        for t, p in zip(lab.tolist(), c1.tolist(), strict=True):
            self.confusion[(t, p)] = self.confusion.get((t, p), 0) + 1

    def to_json(self) -> dict:
        out: dict = {
            "samples": self.samples,
            "outputs": {name: err.to_json() for name, err in self.outputs.items()},
            "classifier": bool(self.classifier),
        }
        if self.selections:
            out["selections"] = {name: err.to_json() for name, err in self.selections.items()}
        if self.classifier and self.samples:
            out["primary_output"] = self.primary
            out["top1_agreement"] = 100.0 * self.agree / self.samples
        if self.classifier and self.labelled:
            n = self.labelled
            out["accuracy"] = {
                "labelled_samples": n,
                "reference_top1": 100.0 * self.ref_top1 / n,
                "candidate_top1": 100.0 * self.cand_top1 / n,
                "top1_drop_pp": 100.0 * (self.ref_top1 - self.cand_top1) / n,
                "reference_top5": 100.0 * self.ref_top5 / n,
                "candidate_top5": 100.0 * self.cand_top5 / n,
                "top5_drop_pp": 100.0 * (self.ref_top5 - self.cand_top5) / n,
            }
            out["confusion"] = [[t, p, c] for (t, p), c in sorted(self.confusion.items())]
        return out


#: Per-sample latencies kept for the percentiles and the plotted distribution (a seeded uniform sample beyond).
RESERVOIR = 4096


class LatencyStats:
    """Per-sample times in fixed memory: count, sum, min and max exactly, and a seeded uniform reservoir of at most
    ``size`` samples (Vitter's algorithm R) for the percentiles and the plotted distribution. While ``count <=
    size`` the reservoir holds every sample and the percentiles are exact."""

    def __init__(self, size: int = RESERVOIR, seed: int = 0):
        import random

        self.size = size
        self.count = 0
        self.total = 0.0
        self.lo = math.inf
        self.hi = -math.inf
        self.kept: list[float] = []
        self._rng = random.Random(seed)

    def add(self, seconds: float) -> None:
        s = float(seconds)
        self.count += 1
        self.total += s
        self.lo, self.hi = min(self.lo, s), max(self.hi, s)
        if len(self.kept) < self.size:
            self.kept.append(s)
            return
        j = self._rng.randrange(self.count)
        if j < self.size:
            self.kept[j] = s

    def summary(self) -> dict:
        """p50/p90/p99 (over the reservoir), mean/min/max (over every sample) in milliseconds."""
        if not self.count:
            return {"samples": 0}
        ms = np.asarray(self.kept, np.float64) * 1e3
        out = {
            "samples": self.count,
            "p50": float(np.percentile(ms, 50)),
            "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)),
            "mean": 1e3 * self.total / self.count,
            "min": 1e3 * self.lo,
            "max": 1e3 * self.hi,
        }
        if self.count > len(self.kept):
            out["percentiles_over"] = len(self.kept)  # a uniform sample of the samples
        return out

    def samples_ms(self) -> list[float]:
        """The reservoir in milliseconds (every sample while ``count <= size``), for the distribution plots."""
        return [round(t * 1e3, 4) for t in self.kept]
