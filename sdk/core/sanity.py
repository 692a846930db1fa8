"""Signs that the data does not fit the model: inputs preprocessed wrongly, or evaluated differently from how they
were calibrated. Each finding is a warning in words, for the console and the reports; nothing is refused.

- fp32 itself scores low on labelled data (below :data:`LOW_FP32_TOP1` % on at least :data:`MIN_SAMPLES`
  samples): a model that is any good scores well on its own float weights unless its inputs are wrong (channel
  order, mean/std, scale, size) or the labels follow another class order.
- an input's range in the evaluation data is far from the calibration data's: the two sets look preprocessed
  differently, so the scales fitted to one do not fit the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

LOW_FP32_TOP1 = 50.0
MIN_SAMPLES = 20
#: How far outside the calibration range, in calibration range widths, an evaluation range may reach.
RANGE_SLACK = 0.5
#: How far apart the two means may be, in calibration range widths.
MEAN_SLACK = 0.25


@dataclass
class InputRanges:
    """Running min, max and mean of every float model input over a data set (constant memory)."""

    lo: dict[str, float] = field(default_factory=dict)
    hi: dict[str, float] = field(default_factory=dict)
    total: dict[str, float] = field(default_factory=dict)
    count: dict[str, int] = field(default_factory=dict)

    def update(self, inputs: Mapping[str, np.ndarray]) -> None:
        for name, array in inputs.items():
            a = np.asarray(array)
            if a.dtype.kind != "f" or a.size == 0:
                continue
            self.lo[name] = min(self.lo.get(name, np.inf), float(a.min()))
            self.hi[name] = max(self.hi.get(name, -np.inf), float(a.max()))
            self.total[name] = self.total.get(name, 0.0) + float(a.sum(dtype=np.float64))
            self.count[name] = self.count.get(name, 0) + int(a.size)

    def to_json(self) -> dict[str, dict[str, float]]:
        return {
            n: {"min": self.lo[n], "max": self.hi[n], "mean": self.total[n] / self.count[n]} for n in self.lo
        }


def data_warnings(
    fp32_top1: float | None,
    labelled_samples: int,
    eval_ranges: Mapping[str, Mapping[str, float]] | None = None,
    calib_ranges: Mapping[str, Mapping[str, float]] | None = None,
) -> list[str]:
    """The warnings that apply (see the module docstring), one line each."""
    warnings = []
    if fp32_top1 is not None and labelled_samples >= MIN_SAMPLES and fp32_top1 < LOW_FP32_TOP1:
        warnings.append(
            f"fp32 on the host scores only {fp32_top1:.1f} % top-1 on {labelled_samples} labelled samples: unless the "
            "model is that weak, its inputs are preprocessed wrongly (check --color, --mean, --std, --scale, --size, "
            "--layout) or the labels follow another class order"
        )
    for name, ev in (eval_ranges or {}).items():
        cal = (calib_ranges or {}).get(name)
        if cal is None:
            continue
        width = max(cal["max"] - cal["min"], 1e-12)
        outside = ev["min"] < cal["min"] - RANGE_SLACK * width or ev["max"] > cal["max"] + RANGE_SLACK * width
        shifted = cal.get("mean") is not None and abs(ev["mean"] - cal["mean"]) > MEAN_SLACK * width
        if outside or shifted:
            warnings.append(
                f"input {name!r} spans [{ev['min']:.4g}, {ev['max']:.4g}] in the evaluation data but "
                f"[{cal['min']:.4g}, {cal['max']:.4g}] in the calibration data"
                + (f" (means {ev['mean']:.4g} and {cal['mean']:.4g})" if shifted else "")
                + ": the two look preprocessed differently"
            )
    return warnings


def calibration_ranges(
    minmax: Mapping, means: Mapping, names: list[str]
) -> dict[str, dict[str, float | None]]:
    """The quantizer's statistics of the model inputs (min, max, mean) in :class:`InputRanges`' form."""
    out = {}
    for name in names:
        seen = minmax.get(name)
        if seen is None or not seen.count:
            continue
        mean = means.get(name)  # collected for bias correction only
        out[name] = {
            "min": float(seen.lo),
            "max": float(seen.hi),
            "mean": float(np.mean(mean)) if mean is not None else None,
        }
    return out
