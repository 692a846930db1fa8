"""The accuracy-aware search's candidates (:mod:`edgekit.quantize.accuracy`): each evaluation started on the
executor, recorded as a :class:`Step`, and not run again on samples it already ran.

A candidate is a :class:`~edgekit.quantize.options.QuantizeOptions` (the restores applied). Its outcome on a set of
accuracy samples is kept; with classifier-sized outputs, so are its outputs per sample: measured later on more
samples (the ranking subset, then the whole set), it runs only the others and is measured here on all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from edgekit.quantize.budget import Budget, Measurement, Reference, measure
from edgekit.quantize.executors import Executor, Outcome, Task
from edgekit.quantize.options import QuantizeOptions

#: Candidates' outputs are kept per sample (measured on more samples later, they run only the others) up to this
#: many values a sample, and this many bytes in all.
KEEP_VALUES = 1 << 14
KEEP_BYTES = 256 << 20


@dataclass
class Step:
    """One evaluation of the search: which layers were restored, on how many samples, what it measured."""

    phase: str
    restored: int
    measurement: Measurement
    met: bool
    #: Seconds the evaluation took, and the cached activation it ran from (None: the whole model).
    seconds: float = 0.0
    cut: str | None = None

    def to_json(self) -> dict:
        return {"phase": self.phase, "restored": self.restored, "met": self.met, **self.measurement.to_json(),
                "seconds": self.seconds, "ran_from": self.cut}  # fmt: skip


class Search:
    """One target's search (the module docstring's steps 3-6)."""

    def __init__(
        self, executor: Executor, budget: Budget, ranking: tuple[int, ...], everything: tuple[int, ...]
    ):
        self.executor, self.budget = executor, budget
        self.ranking, self.everything = ranking, everything
        self.steps: list[Step] = []
        #: The base int8 options once chosen: candidates run from its cached activations.
        self.base: QuantizeOptions | None = None
        self.known: dict[tuple[QuantizeOptions, tuple[int, ...]], Outcome] = {}
        #: The fp32 answers, and the outputs a candidate's measurement reads (none: outputs too large to keep).
        self.reference: Reference | None = None
        self.keep: tuple[str, ...] = ()
        #: Per candidate, its outputs on each accuracy sample it ran (with ``keep``): measured on more samples
        #: later (the ranking subset, then the whole set), it runs only the others.
        self.outputs: dict[QuantizeOptions, dict[int, dict[str, np.ndarray]]] = {}
        self.kept_bytes = 0

    def run(
        self, phase: str, candidates: Sequence[tuple[QuantizeOptions, int]], indices=None
    ) -> list[Outcome]:
        return self.start(phase, candidates, indices)()

    def start(
        self, phase: str, candidates: Sequence[tuple[QuantizeOptions, int]], indices=None
    ) -> Callable[[], list[Outcome]]:
        """:meth:`run`, the evaluations started now and collected by the function returned (the caller works in
        the meantime)."""
        indices = tuple(self.ranking if indices is None else indices)
        # A candidate measured before on the same samples is not run again (the curve's ends, a confirmed prefix),
        # and one that ran some of them (on the ranking subset, confirmed on the whole set) runs only the others.
        todo = list(dict.fromkeys((o, indices) for o, _ in candidates if (o, indices) not in self.known))
        counts = {(o, indices): c for o, c in candidates}
        missing = {key: tuple(i for i in indices if i not in self.outputs.get(key[0], {})) for key in todo}
        runs = [key for key in todo if missing[key]]
        pending = self.executor.start([Task(o, missing[(o, i)], self.base, self.keep) for o, i in runs])

        def collect() -> list[Outcome]:
            ran = dict(zip(runs, pending(), strict=True))
            for key in todo:
                out = ran.get(key)
                if out is not None and out.outputs is not None:
                    self.outputs.setdefault(key[0], {}).update(zip(missing[key], out.outputs, strict=True))
                    self.kept_bytes += sum(a.nbytes for o in out.outputs for a in o.values())
                    if self.kept_bytes > KEEP_BYTES:
                        self.keep = ()  # the next candidates run every sample asked for
                if out is None or (out.outputs is not None and len(missing[key]) < len(indices)):
                    # Measured here on every sample asked for, from the outputs kept and those just run.
                    kept = self.outputs[key[0]]
                    assert self.reference is not None
                    m = measure(self.budget, self.reference, indices, [kept[i] for i in indices])
                    size = out.size_bytes if out is not None else self._size(key[0])
                    out = Outcome(
                        m, size, out.seconds if out is not None else 0.0, out.cut if out is not None else None
                    )
                self.known[key] = out
                if key in ran:  # an evaluation (not one measured from kept outputs alone)
                    met = self.budget.met(out.measurement.metric)
                    self.steps.append(Step(phase, counts[key], out.measurement, met, out.seconds, out.cut))
            return [self.known[(o, indices)] for o, _ in candidates]

        return collect

    def _size(self, options: QuantizeOptions) -> int:
        return next(out.size_bytes for (o, _), out in self.known.items() if o == options)
