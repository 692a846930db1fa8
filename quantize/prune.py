"""The accuracy-aware search's last step: drop the restores that did not help (:mod:`edgekit.quantize.accuracy`).

A restored set that meets the budget often holds layers it does not need: the prefix of a ranked list grows until
the samples that decide the budget flip back, and a borderline sample can flip late. Each function here takes the
search (``s``: ``run(phase, [(options, restored count)], indices)``, ``budget``, ``executor.workers``) and
``with_restores`` (layer -> restore dict to quantization options), and returns a subset that still meets the
budget on ``indices``.
"""

from __future__ import annotations

from typing import Any

#: Restores are pruned one by one up to this many (each costs an evaluation).
PRUNE_LIMIT = 16


def prune(s: Any, with_restores, chosen: dict[str, str], indices=None) -> dict[str, str]:
    """Drop the restores that did not help, keeping the budget met on ``indices`` (default: the ranking subset).
    Up to PRUNE_LIMIT: each left out in turn (in parallel); those whose absence keeps the budget go, all together
    if that still meets it, else the best one alone. More (a prefix grown long on a borderline sample):
    :func:`minimise`."""
    if len(chosen) > PRUNE_LIMIT:
        chosen = minimise(s, with_restores, chosen, indices)
    if len(chosen) < 2 or len(chosen) > PRUNE_LIMIT:
        return chosen
    names = list(chosen)
    trials = [({n: chosen[n] for n in names if n != drop}, drop) for drop in names]
    outs = s.run("prune", [(with_restores(t), len(t)) for t, _ in trials], indices)
    removable = [(o.measurement, drop) for (_, drop), o in zip(trials, outs, strict=True)
                 if s.budget.met(o.measurement.metric)]  # fmt: skip
    if not removable:
        return chosen
    if len(removable) > 1:
        together = {n: chosen[n] for n in names if n not in {d for _, d in removable}}
        out = s.run("prune", [(with_restores(together), len(together))], indices)[0]
        if s.budget.met(out.measurement.metric):
            return together
    _, drop = max(removable, key=lambda r: r[0].key(s.budget))
    return {n: chosen[n] for n in names if n != drop}


#: Evaluations :func:`minimise` may spend.
MINIMISE_LIMIT = 40


def minimise(s: Any, with_restores, chosen: dict[str, str], indices=None) -> dict[str, str]:
    """Delta debugging (ddmin, complements) over a restored set that meets the budget: split it into ``parts``
    chunks and un-restore one chunk at a time (the last-ranked first, ``executor.workers`` trials at a time);
    a set that still meets the budget on ``indices`` replaces it (``parts`` - 1 chunks next), else the chunks
    halve, until single layers were tried or MINIMISE_LIMIT evaluations are spent. A prefix grown long because
    one borderline sample flips back only late keeps the few layers that move it."""
    names = list(chosen)
    width = max(1, s.executor.workers)
    parts, spent = 2, 0
    while len(names) >= 2 and spent < MINIMISE_LIMIT:
        size = len(names) / parts
        chunks = [names[round(i * size) : round((i + 1) * size)] for i in range(parts)][::-1]
        kept = None
        for at in range(0, len(chunks), width):
            batch = chunks[at : at + width][: MINIMISE_LIMIT - spent]
            if not batch:
                break
            trials = [[n for n in names if n not in set(c)] for c in batch]
            outs = s.run(
                "minimise", [(with_restores({n: chosen[n] for n in t}), len(t)) for t in trials], indices
            )
            spent += len(batch)
            met = [t for t, o in zip(trials, outs, strict=True) if s.budget.met(o.measurement.metric)]
            if met:
                kept = min(met, key=len)
                break
        if kept is not None:
            names, parts = kept, max(parts - 1, 2)
        elif parts >= len(names):
            break
        else:
            parts = min(2 * parts, len(names))
    return {n: chosen[n] for n in names}
