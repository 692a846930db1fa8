"""A two-stage detector's RoI head on arm-cpu: after the first stage's NonMaxSuppression the boxes it kept
(K, known at run time only) are pooled from a feature map by RoiAlign, merged back in order by a ScatterElements
of whole rows (torchvision's MultiScaleRoIAlign), flattened and classified by two Gemms and a Softmax
(TwoMLPHead + box predictor). LiteRT sizes every tensor of that head while it runs
(``targets/tflite/ops_roi_align.py``; Gemm, Softmax, Range and ScatterElements on run-time rows).

The graph is built here (no torch): the .tflite's outputs equal onnxruntime's sample by sample at fp32 (both
RoiAlign coordinate rules), the int8 bundle passes its two-part verification with the head float, and a
threshold no score passes gives zero rows in both.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli_in_process import cli_text
from edgekit.core.protoutil import with_outputs
from edgekit.targets.selection_tail import onnx_tail_run, onnx_tail_run_float64, selection_tail, tail_model
from onnx import TensorProto, helper, numpy_helper
from test_selection_tail import _tflite_outputs

CLASSES = 3
HIDDEN = 16


def _mask_head(graph: onnx.GraphProto) -> None:
    """Mask / Keypoint R-CNN's per-box head on the pooled [K, 8, 4, 4] RoIs: a 3x3 Conv, a ConvTranspose by 2, a
    1x1 Conv, a bilinear Resize by 2 (the keypoint predictor's upsampling) and a Sigmoid: [K, 3, 16, 16]."""
    rng = np.random.default_rng(1)
    graph.initializer.extend(
        [
            numpy_helper.from_array(rng.normal(0, 0.2, (6, 8, 3, 3)).astype(np.float32), "mask_w1"),
            numpy_helper.from_array(rng.normal(0, 0.2, (6, 4, 2, 2)).astype(np.float32), "mask_wt"),
            numpy_helper.from_array(rng.normal(0, 0.2, 4).astype(np.float32), "mask_bt"),
            numpy_helper.from_array(rng.normal(0, 0.2, (3, 4, 1, 1)).astype(np.float32), "mask_w2"),
            numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "twice"),
        ]
    )
    graph.node.extend(
        [
            helper.make_node("Conv", ["pooled", "mask_w1"], ["m1"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["m1"], ["m1_relu"]),
            helper.make_node("ConvTranspose", ["m1_relu", "mask_wt", "mask_bt"], ["m2"], strides=[2, 2]),
            helper.make_node("Relu", ["m2"], ["m2_relu"]),
            helper.make_node("Conv", ["m2_relu", "mask_w2"], ["m3"]),
            helper.make_node("Resize", ["m3", "", "twice"], ["m4"], mode="linear"),
            helper.make_node("Sigmoid", ["m4"], ["masks"]),
        ]
    )
    graph.output.append(helper.make_tensor_value_info("masks", TensorProto.FLOAT, ["K", 3, 16, 16]))


def _head_model(
    threshold: float, mode: str | None = "output_half_pixel", masks: bool = False, opset: int = 17
) -> onnx.ModelProto:
    """``mode`` None: RoiAlign without coordinate_transformation_mode (``opset`` below 16: output_half_pixel)."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.normal(0, 0.4, (4 + CLASSES, 3, 4, 4)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.2, 4 + CLASSES).astype(np.float32), "b"),
        numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "wf"),
        numpy_helper.from_array(rng.normal(0, 0.1, (HIDDEN, 8 * 4 * 4)).astype(np.float32), "fc6"),
        numpy_helper.from_array(rng.normal(0, 0.1, HIDDEN).astype(np.float32), "fc6_b"),
        numpy_helper.from_array(rng.normal(0, 0.5, (CLASSES + 1, HIDDEN)).astype(np.float32), "cls"),
        numpy_helper.from_array(rng.normal(0, 0.1, CLASSES + 1).astype(np.float32), "cls_b"),
    ]

    def const(name: str, values, dtype=np.int64) -> None:
        inits.append(numpy_helper.from_array(np.array(values, dtype), name))

    for name, values in {
        "flat": [1, 4 + CLASSES, 64], "z": [0], "four": [4], "big": [99], "ax0": [0], "ax1": [1], "max_out": [4],
        "column": [-1, 1],
    }.items():  # fmt: skip
        const(name, values)
    const("px", [32.0], np.float32)
    const("iou", [0.5], np.float32)
    const("thr", [threshold], np.float32)
    const("two", 2)
    const("zero", 0)
    const("one", 1)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["h"], strides=[4, 4]),
        helper.make_node("Reshape", ["h", "flat"], ["r"]),
        helper.make_node("Slice", ["r", "z", "four", "ax1"], ["raw_boxes"]),
        helper.make_node("Sigmoid", ["raw_boxes"], ["unit_boxes"]),
        helper.make_node("Mul", ["unit_boxes", "px"], ["boxes"]),
        helper.make_node("Transpose", ["boxes"], ["box_rows"], perm=[0, 2, 1]),
        helper.make_node("Slice", ["r", "four", "big", "ax1"], ["logits"]),
        helper.make_node("Sigmoid", ["logits"], ["scores"]),
        helper.make_node(
            "NonMaxSuppression", ["box_rows", "scores", "max_out", "iou", "thr"], ["selected"], name="rpn_nms"
        ),
        helper.make_node("Gather", ["selected", "two"], ["box_index"], axis=1),
        helper.make_node("Squeeze", ["box_rows", "ax0"], ["all_boxes"]),
        helper.make_node("Gather", ["all_boxes", "box_index"], ["kept"], axis=0),
        # the feature map the RoIs are pooled from (a 3x3 Conv at stride 2: 16 x 16, scale 1/2)
        helper.make_node("Conv", ["x", "wf"], ["f"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["f"], ["feat"]),
        helper.make_node("Shape", ["kept"], ["kept_shape"]),
        helper.make_node("Gather", ["kept_shape", "zero"], ["k"], axis=0),
        helper.make_node("Slice", ["kept_shape", "z", "ax1"], ["k1"]),
        helper.make_node(
            "ConstantOfShape", ["k1"], ["batch_index"], value=helper.make_tensor("", 7, [1], [0])
        ),
        helper.make_node(
            "RoiAlign",
            ["feat", "kept", "batch_index"],
            ["pooled"],
            output_height=4,
            output_width=4,
            sampling_ratio=2,
            spatial_scale=0.5,
            name="box_roi_pool",
            **({} if mode is None else {"coordinate_transformation_mode": mode}),
        ),  # fmt: skip
        # the rows put back in reverse order by a ScatterElements of whole rows (MultiScaleRoIAlign's merge)
        helper.make_node("Range", ["zero", "k", "one"], ["order"]),
        helper.make_node("Sub", ["k", "one"], ["last"]),
        helper.make_node("Sub", ["last", "order"], ["reversed"]),
        helper.make_node("Reshape", ["reversed", "column"], ["rows"]),
        helper.make_node("Flatten", ["pooled"], ["flat_rois"], axis=1),
        helper.make_node("Shape", ["flat_rois"], ["flat_shape"]),
        helper.make_node("Expand", ["rows", "flat_shape"], ["row_index"]),
        helper.make_node("ConstantOfShape", ["flat_shape"], ["empty"]),
        helper.make_node("ScatterElements", ["empty", "row_index", "flat_rois"], ["merged"], axis=0),
        helper.make_node("Gemm", ["merged", "fc6", "fc6_b"], ["fc6_out"], transB=1, name="fc6"),
        helper.make_node("Relu", ["fc6_out"], ["hidden"]),
        helper.make_node("Gemm", ["hidden", "cls", "cls_b"], ["class_logits"], transB=1, name="cls_score"),
        helper.make_node("Softmax", ["class_logits"], ["class_probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "roi_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [
            helper.make_tensor_value_info("class_probs", TensorProto.FLOAT, ["K", CLASSES + 1]),
            helper.make_tensor_value_info("kept", TensorProto.FLOAT, ["K", 4]),
        ],
        inits,
    )
    if masks:
        _mask_head(graph)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _samples(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 1, (1, 3, 32, 32)).astype(np.float32) for _ in range(n)]


def _deploy(capsys, tmp_path: Path, model: onnx.ModelProto, name: str, *extra: str) -> Path:
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.concatenate(_samples(4, 3)))
    code, text = cli_text(
        capsys,
        "deploy",
        str(path),
        "-t",
        "arm-cpu",
        "--calib",
        str(calib),
        *extra,
        "-o",
        str(tmp_path / name),
    )
    assert code == 0, text
    return tmp_path / name / "arm-cpu"


@pytest.mark.parametrize("mode", ["output_half_pixel", "half_pixel"])
def test_the_roi_head_after_a_selection_equals_onnxruntime_at_fp32(mode, tmp_path, capsys):
    model = _head_model(0.55, mode)
    bundle = _deploy(capsys, tmp_path, model, "fp32", "--precision", "fp32")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "selection_tail" in manifest["verification"], manifest["verification"].keys()
    session = ort.InferenceSession(model.SerializeToString())
    held_out = _samples(6, 11)
    rows = set()
    for x, got in zip(held_out, _tflite_outputs(bundle, held_out), strict=True):
        want = dict(zip(["class_probs", "kept"], session.run(None, {"x": x}), strict=True))
        for name in want:
            assert got[name].shape == want[name].shape, (name, got[name].shape, want[name].shape)
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-5)
        rows.add(len(want["kept"]))
    assert len(rows) > 1 and min(rows) > 0, rows  # the RoI head's batch differs from sample to sample


def test_the_roi_head_runs_float_after_an_int8_body(tmp_path, capsys):
    bundle = _deploy(capsys, tmp_path, _head_model(0.55), "int8", "--precision", "int8")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "selection_tail" in manifest["verification"], manifest["verification"].keys()
    got = _tflite_outputs(bundle, _samples(3, 11))
    assert all(r["class_probs"].dtype == np.float32 and len(r["class_probs"]) == len(r["kept"]) for r in got)
    np.testing.assert_allclose([r["class_probs"].sum(axis=1) for r in got][0], 1, atol=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_no_box_over_the_threshold_gives_the_roi_head_zero_rows(precision, tmp_path, capsys):
    """Also the mask head: XNNPACK's CONV_2D / TRANSPOSE_CONV / RESIZE_BILINEAR and the builtin TRANSPOSE_CONV
    cannot prepare an empty batch; each runs on one zero row more, cut after it."""
    model = _head_model(1.0, masks=True)  # a Sigmoid is never above 1: the selection keeps nothing
    bundle = _deploy(capsys, tmp_path, model, precision, "--precision", precision)
    session = ort.InferenceSession(model.SerializeToString())
    for x, got in zip(_samples(2, 11), _tflite_outputs(bundle, _samples(2, 11)), strict=True):
        probs, kept, masks = session.run(None, {"x": x})
        assert probs.shape == (0, CLASSES + 1) and kept.shape == (0, 4) and masks.shape == (0, 3, 16, 16)
        assert got["class_probs"].shape == probs.shape and got["kept"].shape == kept.shape
        assert got["masks"].shape == masks.shape, got["masks"].shape


def test_a_mask_head_on_the_kept_boxes_equals_onnxruntime(tmp_path, capsys):
    """Conv, ConvTranspose and Resize on a batch of K RoIs (Mask / Keypoint R-CNN's heads): fp32 equal to
    onnxruntime sample by sample; int8 passes its verification with the head float."""
    model = _head_model(0.55, masks=True)
    bundle = _deploy(capsys, tmp_path, model, "fp32", "--precision", "fp32")
    session = ort.InferenceSession(model.SerializeToString())
    held_out = _samples(4, 11)
    for x, got in zip(held_out, _tflite_outputs(bundle, held_out), strict=True):
        want = session.run(["masks"], {"x": x})[0]
        assert got["masks"].shape == want.shape and len(want) > 0, (got["masks"].shape, want.shape)
        np.testing.assert_allclose(got["masks"], want, rtol=0, atol=1e-5)
    _deploy(capsys, tmp_path, model, "int8", "--precision", "int8")


@pytest.mark.parametrize(("mode", "opset"), [(None, 13), ("output_half_pixel", 17), ("half_pixel", 17)])
def test_the_source_tail_runs_as_onnxruntime_in_float32_and_float64(mode, opset):
    """The verification's run of the source's tail (``onnx_tail_run``: the onnx reference evaluator with
    ``edgekit.core.exact``'s vectorised kernels: RoiAlign, Conv, ConvTranspose) on the values before it equals
    onnxruntime's run of the whole model, RoI head and mask head, sample by sample; so does its float64 run
    (``onnx_tail_run_float64``). RoiAlign-10 (opsets 10-15, torchvision's exports at 11) has no
    coordinate_transformation_mode: its rule is output_half_pixel, which onnx's reference evaluator read as opset
    16's half_pixel default (boxes of another selection, 0.69 of their range off on Mask R-CNN)."""
    model = _head_model(0.55, mode, masks=True, opset=opset)
    tail = selection_tail(onnx.shape_inference.infer_shapes(model))
    tapped = with_outputs(model, tail.frontier)
    session = ort.InferenceSession(tapped.SerializeToString())
    names = [o.name for o in tapped.graph.output]
    runs = [dict(zip(names, session.run(None, {"x": x}), strict=True)) for x in _samples(4, 11)]
    feeds = [{n: r[n] for n in tail.frontier} for r in runs]
    sub = tail_model(model, tail, feeds[0])
    for wide in (False, True):
        results = (onnx_tail_run_float64 if wide else onnx_tail_run)(sub, feeds)
        for run, got in zip(runs, results, strict=True):
            assert len(run["kept"]) > 0
            for name in tail.outputs:
                assert got[name].dtype == (np.float64 if wide else np.float32), (name, got[name].dtype)
                np.testing.assert_allclose(got[name], run[name], rtol=0, atol=1e-5, err_msg=name)
