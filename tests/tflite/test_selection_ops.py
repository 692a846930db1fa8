"""NonMaxSuppression and NonZero written with tensors LiteRT sizes at run time (``ops_selection.py``), against
onnxruntime running the same ONNX graph: the rows kept, their order and their count, on the cases where LiteRT's
own kernel differs from ONNX (an overlap exactly at the IoU bar, equal scores, boxes of zero area), for corner and
center boxes, several images and classes, and a box count known only at run time."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.core.errors import TargetError
from edgekit.targets.tflite.converter import ConvertOptions, convert
from onnx import TensorProto, helper


def _nms_model(
    batches: int, classes: int, boxes: int | str, per_class: int, center: int = 0
) -> onnx.ModelProto:
    inits = [
        helper.make_tensor("max", TensorProto.INT64, [1], [per_class]),
        helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5]),
        helper.make_tensor("threshold", TensorProto.FLOAT, [1], [0.3]),
    ]
    node = helper.make_node(
        "NonMaxSuppression",
        ["boxes", "scores", "max", "iou", "threshold"],
        ["selected"],
        center_point_box=center,
    )
    graph = helper.make_graph(
        [node],
        "nms",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [batches, boxes, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batches, classes, boxes]),
        ],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _runs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    interpreter = Interpreter(model_content=convert(model, ConvertOptions()).data)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        interpreter.resize_tensor_input(d["index"], feeds[d["name"]].shape)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], feeds[d["name"]])
    interpreter.invoke()
    return want, interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def _corner_boxes(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    corner = rng.uniform(0, 10, (*shape, 2))
    return np.concatenate([corner, corner + rng.uniform(0.5, 5, (*shape, 2))], -1).astype(np.float32)


@pytest.mark.parametrize("center", [0, 1], ids=["corners", "center"])
def test_nms_keeps_the_rows_onnxruntime_keeps(center):
    rng = np.random.default_rng(center)
    model = _nms_model(2, 3, 20, 4, center)
    for _ in range(8):
        boxes = _corner_boxes(rng, (2, 20))
        if center:  # [x_center, y_center, width, height]
            boxes = np.concatenate([boxes[..., :2], boxes[..., 2:] - boxes[..., :2]], -1)
        scores = rng.random((2, 3, 20), dtype=np.float32)
        scores[0, 0, :3] = 0.3  # at the score threshold: dropped
        want, got = _runs(model, {"boxes": boxes, "scores": scores})
        np.testing.assert_array_equal(got, want)


def test_nms_keeps_an_overlap_exactly_at_the_bar_and_orders_equal_scores_by_index():
    """ONNX suppresses an overlap above the IoU bar (LiteRT's kernel: at it), and onnxruntime takes equal scores
    lower index first (LiteRT's kernel: in no set order)."""
    model = _nms_model(1, 2, 8, 8)
    boxes = np.array(
        [[[0, 0, 2, 1], [0, 0, 1, 1], *[[3 * i, 5, 3 * i + 1, 6] for i in range(6)]]], np.float32
    )
    scores = np.full((1, 2, 8), 0.7, np.float32)
    scores[0, 0, :2] = (0.9, 0.8)  # box 1 overlaps box 0 at IoU 0.5 exactly
    want, got = _runs(model, {"boxes": boxes, "scores": scores})
    assert [0, 0, 1] in want.tolist()  # kept at the bar
    np.testing.assert_array_equal(got, want)


def test_nms_boxes_of_zero_area_neither_suppress_nor_are_suppressed():
    """LiteRT's kernel returns the first box of zero area over and over; ONNX keeps each once."""
    rng = np.random.default_rng(1)
    model = _nms_model(1, 3, 200, 50)
    for _ in range(3):
        boxes = np.zeros((1, 200, 4), np.float32)
        boxes[..., 0] = rng.choice([0, 7.9], 200)
        boxes[..., 2] = rng.choice([0, 7.9], 200)
        boxes[..., 3] = rng.choice([0, 0.38, 2.0], 200)
        scores = (1 - rng.random((1, 3, 200)) ** 8 * 1e-5).astype(np.float32)  # many equal to 1.0
        want, got = _runs(model, {"boxes": boxes, "scores": scores})
        assert len(np.unique(want[:, 2])) > 40
        np.testing.assert_array_equal(got, want)


def test_nms_over_a_box_count_known_only_at_run_time():
    """The boxes a NonZero over a score threshold kept (ultralytics' export): the NMS's input has no static
    size, and neither has anything after it."""
    inits = [
        helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
        helper.make_tensor("max", TensorProto.INT64, [1], [300]),
        helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.45]),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("two", TensorProto.INT64, [], [2]),
    ]
    nodes = [
        helper.make_node("Greater", ["score", "half"], ["above"]),
        helper.make_node("NonZero", ["above"], ["where"]),
        helper.make_node("Transpose", ["where"], ["rows"], perm=[1, 0]),
        helper.make_node("GatherND", ["boxes", "rows"], ["kept_boxes"]),
        helper.make_node("GatherND", ["score", "rows"], ["kept_scores"]),
        helper.make_node("Unsqueeze", ["kept_boxes", "zero"], ["batch_boxes"]),
        helper.make_node("Unsqueeze", ["kept_scores", "zero"], ["one_class"]),
        helper.make_node("Unsqueeze", ["one_class", "zero"], ["batch_scores"]),
        helper.make_node("NonMaxSuppression", ["batch_boxes", "batch_scores", "max", "iou"], ["selected"]),
        helper.make_node("Gather", ["selected", "two"], ["index"], axis=1),
        helper.make_node("Gather", ["kept_boxes", "index"], ["detections"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "thresholded",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [64, 4]),
            helper.make_tensor_value_info("score", TensorProto.FLOAT, [64]),
        ],
        [helper.make_tensor_value_info("detections", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    rng = np.random.default_rng(2)
    counts = set()
    for _ in range(6):
        feeds = {"boxes": _corner_boxes(rng, (1, 64))[0], "score": rng.random(64, dtype=np.float32)}
        want, got = _runs(model, feeds)
        np.testing.assert_array_equal(got, want)
        counts.add(len(want))
    assert len(counts) > 1  # the output's rows differ from sample to sample


def test_nonzero_gives_onnx_coordinates():
    graph = helper.make_graph(
        [helper.make_node("NonZero", ["x"], ["y"])],
        "nonzero",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(3).normal(size=(3, 5)).astype(np.float32)
    x[x < 0] = 0
    want, got = _runs(model, {"x": x})
    assert want.shape[0] == 2 and got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_nms_keeping_no_box_is_refused():
    model = _nms_model(1, 1, 8, 0)
    with pytest.raises(TargetError, match="max_output_boxes_per_class is 0"):
        convert(model, ConvertOptions())


def test_a_squeeze_without_axes_after_the_selection():
    """paddle2onnx 1.x squeezes the NMS's [N, 1] columns without axes: shape inference cannot tell the rank of a
    tensor sized at run time; the axes meant are the dims of size 1."""
    inits = [
        helper.make_tensor("max", TensorProto.INT64, [1], [8]),
        helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5]),
        helper.make_tensor("two", TensorProto.INT64, [1], [2]),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
    ]
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["selected"]),
        helper.make_node("Gather", ["selected", "two"], ["column"], axis=1),  # [N, 1]
        helper.make_node("Squeeze", ["column"], ["index"]),  # opset 11: no axes
        helper.make_node("Squeeze", ["boxes"], ["all_boxes"], axes=[0]),
        helper.make_node("Gather", ["all_boxes", "index"], ["kept"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "squeezed",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 16, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 16]),
        ],
        [helper.make_tensor_value_info("kept", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    rng = np.random.default_rng(4)
    feeds = {"boxes": _corner_boxes(rng, (1, 16)), "scores": rng.random((1, 1, 16), dtype=np.float32)}
    want, got = _runs(model, feeds)
    assert want.ndim == 2 and len(want) > 1
    np.testing.assert_array_equal(got, want)
