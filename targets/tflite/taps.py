"""Fixed linear maps along one axis, as GATHERs of constant source indices (+ MUL by constant weights).

Used where the source positions and weights of every output are known at conversion time (Resize
variants TFLite lacks, pooling windows TFLite's pooling kernels cannot express).
"""

from __future__ import annotations

import numpy as np
from edgekit.targets.tflite.context import Context
from edgekit.targets.tflite.graph import Tensor
from edgekit.targets.tflite.ops_elementwise import binary
from edgekit.targets.tflite.schema import fb


def gather(ctx: Context, x: Tensor, axis: int, indices: np.ndarray) -> Tensor:
    shape = list(x.shape)
    shape[axis] = len(indices)
    out = ctx.tmp("taps_gather", shape, x.dtype)
    opts = fb.GatherOptionsT()
    opts.axis = axis
    ctx.op("GATHER", [x, ctx.graph.const("indices", indices.astype(np.int32))], [out], opts)
    return out


def weighted_sum(ctx: Context, x: Tensor, axis: int, indices: np.ndarray, weights: np.ndarray) -> Tensor:
    # Merge taps reading the same source for every output (e.g. at scale 1), drop zero-weight taps.
    merged: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    for index, weight in zip(indices, weights, strict=True):
        key = index.tobytes()
        if key in merged:
            merged[key] = (index, merged[key][1] + weight)
        else:
            merged[key] = (index, weight.copy())
    taps = [(i, w) for i, w in merged.values() if np.any(w != 0)]
    picks = all(np.all(np.isin(w, (0.0, 1.0))) for _, w in taps)
    if picks:  # every output copies one input (nearest, or sample positions): gather only
        index = np.zeros(indices.shape[1], np.int64)
        for i, w in taps:
            index = np.where(w == 1.0, i, index)
        return gather(ctx, x, axis, index)
    shape = list(x.shape)
    shape[axis] = indices.shape[1]
    weight_shape = [1] * x.rank
    weight_shape[axis] = indices.shape[1]
    total = None
    for index, weight in taps:
        picked = gather(ctx, x, axis, index)
        w = ctx.graph.const("tap_weights", weight.astype(np.float32).reshape(weight_shape))
        term = binary(ctx, "MUL", picked, w, ctx.tmp("tap_term", shape))
        total = term if total is None else binary(ctx, "ADD", total, term, ctx.tmp("tap_sum", shape))
    return total


def maximum(ctx: Context, x: Tensor, axis: int, indices: np.ndarray) -> Tensor:
    """out[o] = max over taps t of x[indices[t, o]] along ``axis`` (indices [taps, out])."""
    unique = list({i.tobytes(): i for i in indices}.values())
    result = gather(ctx, x, axis, unique[0])
    for index in unique[1:]:
        picked = gather(ctx, x, axis, index)
        result = binary(ctx, "MAXIMUM", result, picked, ctx.tmp("tap_max", result.shape))
    return result
