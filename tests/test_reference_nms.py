"""edgekit.core.reference_nms: the onnx reference evaluator's NonMaxSuppression, vectorised, selects what onnx's own
selects (same rows, same order) on boxes built to tie and touch, in float32 and float64, both box formats, with and
without a score bar; and the references that run a detector's selection (the tail of a deploy's verification, the
exact QDQ semantics) use it instead of onnx's pairwise Python loop."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.reference.ops.op_non_max_suppression as onnx_nms
import pytest
from edgekit.core import reference_nms
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator


def nms_model(center_point_box: int, score_bar: bool, dtype: int) -> onnx.ModelProto:
    names = ["boxes", "scores", "limit", "iou"] + (["bar"] if score_bar else [])
    types = {"limit": TensorProto.INT64}
    inputs = [helper.make_tensor_value_info(n, types.get(n, dtype), None) for n in names]
    node = helper.make_node("NonMaxSuppression", names, ["selected"], center_point_box=center_point_box)
    graph = helper.make_graph(
        [node], "nms", inputs, [helper.make_tensor_value_info("selected", TensorProto.INT64, None)]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def feeds(rng, center_point_box: int, score_bar: bool, dtype) -> dict[str, np.ndarray]:
    batches, classes, count = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(0, 120))
    corner = rng.uniform(0, 30, (batches, count, 2))
    size = rng.uniform(
        -2, 12, (batches, count, 2)
    )  # a few boxes of negative size (never kept by onnx's rule)
    if center_point_box:
        boxes = np.concatenate([corner, size], -1)
    else:  # [y1, x1, y2, x2], corners in either order
        boxes = np.concatenate([corner, corner + size], -1)[..., [1, 0, 3, 2]]
    out = {
        "boxes": (np.round(boxes * 2) / 2).astype(dtype),  # half steps: equal edges, equal IoUs
        "scores": (np.round(rng.uniform(0, 1, (batches, classes, count)) * 10) / 10).astype(dtype),  # ties
        "limit": np.array([rng.choice([0, 2, 7, 500])], np.int64),
        "iou": np.array([rng.choice([0.0, 0.25, 0.5])], dtype),
    }
    if score_bar:
        out["bar"] = np.array([rng.choice([0.0, 0.3, 0.6])], dtype)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("score_bar", [True, False])
def test_the_selections_are_onnxs(dtype, center_point_box, score_bar):
    rng = np.random.default_rng(center_point_box * 2 + score_bar)
    model = nms_model(center_point_box, score_bar, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    theirs, ours = (
        ReferenceEvaluator(model),
        ReferenceEvaluator(model, new_ops=[reference_nms.reference_op()]),
    )
    kept = 0
    for _ in range(12):
        inputs = feeds(rng, center_point_box, score_bar, dtype)
        (want,), (got,) = theirs.run(None, inputs), ours.run(None, inputs)
        assert got.dtype == want.dtype == np.int64
        np.testing.assert_array_equal(got, want)
        kept += len(want)
    assert kept > 50  # the cases select boxes (and suppress some: limit 500 keeps fewer than the candidates)


def test_values_that_are_not_finite_go_to_onnxs_own():
    model = nms_model(1, False, TensorProto.FLOAT)
    inputs = feeds(np.random.default_rng(5), 1, False, np.float32)
    inputs["scores"] = np.full((1, 1, 3), np.nan, np.float32)
    inputs["boxes"] = np.ones((1, 3, 4), np.float32)
    inputs["limit"] = np.array([5], np.int64)
    (want,) = ReferenceEvaluator(model).run(None, inputs)
    (got,) = ReferenceEvaluator(model, new_ops=[reference_nms.reference_op()]).run(None, inputs)
    np.testing.assert_array_equal(got, want)


def test_the_references_of_a_selection_use_it(monkeypatch):
    """onnx_tail_run (a deploy's verification of a detector's tail) and ExactRunner (the exact QDQ semantics)
    select what onnx's NonMaxSuppression does, without its pairwise loop (on YOLOv8n-640's tail fed seeded samples it
    took most of an arm-cpu fp32 deploy)."""
    from edgekit.core.exact import ExactRunner
    from edgekit.targets.selection_tail import onnx_tail_run

    model = nms_model(0, True, TensorProto.FLOAT)
    rng = np.random.default_rng(11)
    samples = [feeds(rng, 0, True, np.float32) for _ in range(4)]
    samples = [dict(s, limit=np.array([50], np.int64), iou=np.array([0.4], np.float32)) for s in samples]
    want = [ReferenceEvaluator(model).run(None, s)[0] for s in samples]
    assert sum(len(w) for w in want) > 20
    calls = []
    pairwise = onnx_nms.suppress_by_iou
    monkeypatch.setattr(onnx_nms, "suppress_by_iou", lambda *a: calls.append(1) or pairwise(*a))
    tail = [r["selected"] for r in onnx_tail_run(model, samples)]
    exact = [ExactRunner(model).run(s)["selected"] for s in samples]
    for w, t, e in zip(want, tail, exact, strict=True):
        np.testing.assert_array_equal(t, w)
        np.testing.assert_array_equal(e, w)
    assert not calls, "onnx's pairwise NonMaxSuppression ran"
