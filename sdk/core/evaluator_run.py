"""The onnx reference evaluator's run, each value dropped after its last reader.

``ReferenceEvaluator.run`` keeps every intermediate value of a run until it returns: on a large input in float64
(the exact semantics of :mod:`edgekit.core.exact`) that is the whole network's activations at once, 3.7 GB on
PP-OCRv4 det at 960 x 960. :func:`run_releasing` runs the same nodes in the same order on the same values and drops
each value once no later node reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def release_plan(evaluator, outputs: Sequence[str]) -> list[tuple[str, ...]] | None:
    """Per node of ``evaluator``'s graph (an ``onnx.reference.ReferenceEvaluator``), the values it computes or reads
    that no later node reads and that are not among ``outputs``: dropped after it runs, so that a run holds only the
    live activations (the evaluator's own ``run`` keeps every one to the end: PP-OCRv4 det at 960 x 960 in float64
    peaked at 3.7 GB). None, and nothing dropped, when a node reads the values around it (If, Loop, Scan: their
    subgraphs name outer values) or the evaluator's layout is not the one this reads."""
    nodes = getattr(evaluator, "rt_nodes_", None)
    inits = getattr(evaluator, "rt_inits_", None)
    if nodes is None or inits is None or any(node.need_context() for node in nodes):
        return None
    kept = {"", *outputs, *inits, *getattr(evaluator, "input_names", ())}
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            last[name] = i
        for name in node.output:
            last.setdefault(name, i)  # computed and never read: dropped at once
    plan: list[list[str]] = [[] for _ in nodes]
    for name, i in last.items():
        if name not in kept:
            plan[i].append(name)
    return [tuple(names) for names in plan]


def run_releasing(
    evaluator, plan: Sequence[Sequence[str]] | None, outputs: Sequence[str], feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """``evaluator.run(outputs, feeds)``: the same nodes in the same order on the same values, each value dropped
    after its last reader (``plan``: :func:`release_plan`; None: the evaluator's own run)."""
    if plan is None:
        return evaluator.run(list(outputs), dict(feeds))
    results: dict[str, object] = {"": None, **evaluator.rt_inits_, **feeds}
    for node, done in zip(evaluator.rt_nodes_, plan, strict=True):
        values = node.run(*[results[name] for name in node.input])
        results.update(zip(node.output, values, strict=False))
        for name in done:
            results.pop(name, None)
    return [results[name] for name in outputs]
