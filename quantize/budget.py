"""Accuracy budgets (``--max-drop``, ``--min-agreement``, ``--min-cosine``) and the metrics they are judged on.

Statistics only: the fp32 reference's answers are computed once (:class:`Reference`); a candidate model's
outputs are reduced sample by sample to the same answers and compared (:func:`measure`).

- ``max-drop PP``: top-1 accuracy against the labels, judged on the samples fp32 gets right that the candidate
  gets wrong, in percentage points. Samples the candidate gets right where fp32 was wrong do not offset them:
  on an accuracy set of a hundred samples such gains are chance, and a budget met by them does not hold on
  other data. It is named "top-1 loss" in messages; the net drop is reported beside it
  (``Measurement.net_drop``).
- ``min-agreement PCT``: the share of samples whose *decoded argmax* matches fp32's: the class of a
  classifier, the greedy CTC sequence (argmax per step, repeats merged, blank 0 dropped) of a sequence
  output ``[1, T, C]`` such as a text recogniser's.
- ``min-cosine C``: the mean cosine similarity to fp32 over the samples, the lowest over the outputs.

Each measurement also carries a finer, continuous figure (the per-step argmax agreement, the cosine) that
breaks ties between candidates when the budget's own metric moves in whole samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from edgekit.core.errors import DataError

#: Budget kind -> (CLI flag, what it measures, unit).
KINDS = {
    "max_drop": ("--max-drop", "top-1 loss", "pp"),
    "min_agreement": ("--min-agreement", "decoded argmax agreement", "%"),
    "min_cosine": ("--min-cosine", "cosine", ""),
}


@dataclass(frozen=True)
class Budget:
    kind: str
    value: float

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DataError(f"unknown accuracy budget {self.kind!r}")
        flag = KINDS[self.kind][0]
        if self.kind == "max_drop" and self.value < 0:
            raise DataError(f"{flag} must be a non-negative number of percentage points, got {self.value}")
        if self.kind == "min_agreement" and not 0 <= self.value <= 100:
            raise DataError(f"{flag} must be a percentage in [0, 100], got {self.value}")
        if self.kind == "min_cosine" and not -1 <= self.value <= 1:
            raise DataError(f"{flag} must be in [-1, 1], got {self.value}")

    @property
    def flag(self) -> str:
        return KINDS[self.kind][0]

    @property
    def needs_labels(self) -> bool:
        return self.kind == "max_drop"

    def met(self, metric: float) -> bool:
        return metric <= self.value if self.kind == "max_drop" else metric >= self.value

    def describe(self) -> str:
        return f"{self.flag} {self.value:g}"

    def format(self, metric: float) -> str:
        _, what, unit = KINDS[self.kind]
        if self.kind == "min_cosine":  # enough digits that a value short of the budget never prints as it
            digits = 4
            while digits < 9 and metric < self.value and float(f"{metric:.{digits}f}") >= self.value:
                digits += 1
            figure = f"{metric:.{digits}f}"
        else:
            figure = f"{metric:.2f}"
        return f"{what} {figure}{' ' + unit if unit else ''}"

    def score(self, metric: float) -> float:
        """Higher is better."""
        return -metric if self.kind == "max_drop" else metric


def budget_from_flags(
    max_drop: float | None, min_agreement: float | None, min_cosine: float | None
) -> Budget | None:
    """The one budget the flags give, or None; two at once is a DataError."""
    given = [
        Budget(k, v)
        for k, v in (("max_drop", max_drop), ("min_agreement", min_agreement), ("min_cosine", min_cosine))
        if v is not None
    ]
    if len(given) > 1:
        raise DataError(f"pass one accuracy budget, got {' and '.join(b.flag for b in given)}")
    return given[0] if given else None


def decoded(frames: np.ndarray) -> tuple[int, ...]:
    """The greedy CTC reading of per-step argmaxes (a classifier's one class stays as it is)."""
    if frames.size == 1:
        return (int(frames.reshape(-1)[0]),)
    out: list[int] = []
    previous = -1
    for f in frames.reshape(-1).tolist():
        if f != previous and f != 0:
            out.append(f)
        previous = f
    return tuple(out)


def argmax_frames(array: np.ndarray) -> np.ndarray:
    """The argmax over the last axis (per step of a sequence; one value for a classifier)."""
    a = np.asarray(array)
    squeezed = np.squeeze(a)
    if squeezed.ndim <= 1:
        return np.array([int(np.argmax(squeezed))])
    return np.argmax(a.reshape(-1, a.shape[-1]), axis=-1)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    x, y = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    nx, ny = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    if nx == 0 and ny == 0:
        return 1.0
    if nx == 0 or ny == 0:
        return 0.0
    return float(x @ y) / (nx * ny)


#: Outputs up to this many values are kept whole for the cosine (the tie-break of the other budgets).
_KEEP_VALUES = 1 << 17


@dataclass
class Reference:
    """The fp32 model's answers on the accuracy set, what every candidate is compared with."""

    outputs: list[str]
    frames: list[np.ndarray]
    labels: list[int | None]
    #: Per sample, output name -> the fp32 array (every output for --min-cosine; else small primaries only).
    arrays: list[dict[str, np.ndarray]]

    @classmethod
    def build(
        cls, outputs: Sequence[str], results: Sequence[Mapping[str, np.ndarray]], labels, budget: Budget
    ):
        primary = outputs[0]
        arrays = []
        for r in results:
            keep = (
                outputs
                if budget.kind == "min_cosine"
                else [primary]
                if r[primary].size <= _KEEP_VALUES
                else []
            )
            arrays.append({n: np.array(r[n], np.float32) for n in keep})
        return cls(list(outputs), [argmax_frames(r[primary]) for r in results], list(labels), arrays)

    def subset(self, indices: Sequence[int]) -> Reference:
        pick = list(indices)
        return Reference(
            self.outputs,
            [self.frames[i] for i in pick],
            [self.labels[i] for i in pick],
            [self.arrays[i] for i in pick],
        )


@dataclass(frozen=True)
class Measurement:
    """One candidate on some samples: the budget's metric and the finer tie-break figures."""

    metric: float
    agreement: float
    step_agreement: float
    cosine: float | None
    samples: int
    #: Top-1 accuracy, fp32 minus candidate (labels), in pp: gains offset losses.
    net_drop: float | None = None
    #: Per sample, how far the candidate is from fp32 for this budget (0: as fp32); not in the JSON.
    badness: tuple[float, ...] = ()
    #: A classifier's continuous distance from fp32's answers: over the samples that count (``--max-drop``: those
    #: fp32 gets right) and whose class the candidate gets wrong, how far fp32's class is below the candidate's
    #: top logit (0: every such sample back). A restore that moves a borderline sample toward its class lowers it
    #: before the sample flips; the whole-sample counts do not move.
    shortfall: float = 0.0

    def key(self, budget: Budget) -> tuple[float, ...]:
        """Sort key for ranking, higher is closer to fp32. A top-1 drop is ranked by the agreement with fp32
        first: on a few samples the drop moves by whole samples and can be negative by chance (int8 right
        where fp32 was wrong), while a restore should bring the answers back to fp32's."""
        cos = self.cosine if self.cosine is not None else 0.0
        if budget.kind == "min_cosine":
            return (cos, self.agreement, self.step_agreement)
        if budget.kind == "max_drop":
            return (self.agreement, self.step_agreement, cos, -self.metric)
        return (self.agreement, self.step_agreement, cos)

    def rank_key(self, budget: Budget) -> tuple[float, ...]:
        """:meth:`key` with the shortfall (a continuous figure) right after the whole-sample counts: how the search
        ranks the effect of restoring one layer, when the samples that decide the budget are borderline."""
        key = self.key(budget)
        if budget.kind == "min_cosine":
            return key
        return (*key[:2], -self.shortfall, *key[2:])

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "agreement": self.agreement,
            "step_agreement": self.step_agreement,
            "cosine": self.cosine,
            "samples": self.samples,
            "net_drop_pp": self.net_drop,
            "shortfall": self.shortfall,
        }


def measure(
    budget: Budget, reference: Reference, indices: Sequence[int], results: Sequence[Mapping[str, np.ndarray]]
) -> Measurement:
    """Compare a candidate's outputs on samples ``indices`` of the accuracy set with the fp32 reference."""
    agree = steps = steps_total = ref_ok = cand_ok = lost = labelled = 0
    cosines: dict[str, list[float]] = {}
    badness: list[float] = []
    shortfall = 0.0
    primary = reference.outputs[0]
    for i, out in zip(indices, results, strict=True):
        ref_frames = reference.frames[i]
        frames = argmax_frames(out[primary])
        same = decoded(ref_frames) == decoded(frames)
        agree += same
        same_steps = int(np.sum(ref_frames == frames)) if ref_frames.shape == frames.shape else 0
        steps += same_steps
        steps_total += ref_frames.size
        bad = float(not same) + 1.0 - same_steps / max(ref_frames.size, 1)
        label = reference.labels[i]
        if label is not None:
            labelled += 1
            ref_ok += int(ref_frames[0]) == label
            cand_ok += int(frames[0]) == label
            lost += int(ref_frames[0]) == label and int(frames[0]) != label
            bad += 2.0 * (int(ref_frames[0]) == label and int(frames[0]) != label)
        if not same and ref_frames.size == 1 and (label is None or int(ref_frames[0]) == label):
            shortfall += _shortfall(np.asarray(out[primary]).reshape(-1), int(ref_frames[0]))
        sample_cosines = [_cosine(ref, out[name]) for name, ref in reference.arrays[i].items()]
        for name, c in zip(reference.arrays[i], sample_cosines, strict=True):
            cosines.setdefault(name, []).append(c)
        if budget.kind == "min_cosine" and sample_cosines:
            bad = 1.0 - min(sample_cosines)
        badness.append(bad)
    n = len(indices)
    agreement = 100.0 * agree / max(n, 1)
    cosine = min(float(np.mean(v)) for v in cosines.values()) if cosines else None
    if budget.kind == "max_drop":
        if labelled < n:
            raise DataError("--max-drop needs labels for every sample of the accuracy data")
        metric = 100.0 * lost / max(n, 1)
    elif budget.kind == "min_agreement":
        metric = agreement
    else:
        assert cosine is not None
        metric = cosine
    net = 100.0 * (ref_ok - cand_ok) / max(n, 1) if labelled else None
    return Measurement(
        metric, agreement, 100.0 * steps / max(steps_total, 1), cosine, n, net, tuple(badness), shortfall
    )


def _shortfall(scores: np.ndarray, cls: int) -> float:
    """How far class ``cls`` is below the top other score (a tie that argmax resolves elsewhere: a hair above 0)."""
    if not 0 <= cls < scores.size or scores.size < 2:
        return 0.0
    other = float(np.max(np.delete(scores, cls)))
    return max(other - float(scores[cls]), 0.0) + 1e-6
