"""A box head on RoiAlign with the boxes as an input (torchvision's ``ops.roi_align`` export: ``rois [K, 5]``, its
column 0 the image index, Gather + Squeeze + Cast to RoiAlign's ``batch_indices``), deployed without data: the
verification's own inputs must name an image that exists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from cli_in_process import cli_text, deploy_verified
from edgekit.device_agents.bundle import read_bundle
from edgekit.targets.base import default_verify_samples
from onnx import TensorProto, helper, numpy_helper


def roi_head() -> onnx.ModelProto:
    consts = [
        numpy_helper.from_array(np.array(0, np.int64), "col0"),
        numpy_helper.from_array(np.array([1, 2, 3, 4], np.int64), "cols"),
        numpy_helper.from_array(
            np.random.default_rng(4).standard_normal((4, 3, 3, 3)).astype(np.float32), "w"
        ),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["f"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Gather", ["rois", "col0"], ["b"], axis=1),
        helper.make_node("Cast", ["b"], ["bi"], to=TensorProto.INT64),
        helper.make_node("Gather", ["rois", "cols"], ["boxes"], axis=1),
        helper.make_node("RoiAlign", ["f", "boxes", "bi"], ["y"], output_height=3, output_width=3, sampling_ratio=2,
                         spatial_scale=0.5, coordinate_transformation_mode="half_pixel"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "roi_head",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [6, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4, 3, 3])], consts,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


def test_verify_samples_give_roi_align_image_zero() -> None:
    samples = default_verify_samples(ir.serde.deserialize_model(roi_head()))
    for feeds in samples:
        assert np.all(feeds["rois"][:, 0] == 0)
        assert np.any(feeds["rois"][:, 1:] != 0)


def test_roi_align_with_box_input_deploys_without_data(tmp_path: Path, capsys) -> None:
    """Before: "Node RoiAlign of type ROIAlign: ... Demanded batch (id = 1) doesn't exist" (OpenVINO, on the
    normal random rois the verification made; probe round 16g's RoiAlign box head, intel-vpu fp16)."""
    model = tmp_path / "roi.onnx"
    onnx.save(roi_head(), model)
    code, text = cli_text(capsys, "deploy", str(model), "-t", "intel-vpu", "-o", str(tmp_path / "out"))
    assert code == 0, text
    verification = read_bundle(tmp_path / "out" / "intel-vpu").manifest.verification
    assert verification["passed"], verification


def _roi_rows(count: int) -> dict[str, np.ndarray]:
    """Photos-free rows: a random image and 6 boxes of image 0 in the 16 x 16 input, some past its edges."""
    rng = np.random.default_rng(6)
    xy = rng.uniform(-4, 14, (count, 6, 2))
    wh = rng.uniform(1, 10, (count, 6, 2))
    rois = np.concatenate([np.zeros((count, 6, 1)), xy, xy + wh], -1).astype(np.float32)
    return {"image": rng.standard_normal((count, 1, 3, 16, 16)).astype(np.float32), "rois": rois}


@pytest.mark.parametrize(
    ("target", "precision"), [("arm-cpu", "fp32"), ("arm-cpu", "int8"), ("intel-vpu", "fp16")]
)
def test_roi_align_deploys(tmp_path: Path, capsys, target: str, precision: str) -> None:
    """Before: "unsupported op 'RoiAlign'" on arm-cpu and nnapi. Now written out as GridSample (border) x the
    inside-mask + AveragePool (``edgekit.core.roi_align``): every case verifies against onnxruntime's RoiAlign,
    the fp32 .tflite within 1e-4 of its range, on boxes that reach past the feature map."""
    model, calib = tmp_path / "roi.onnx", tmp_path / "calib.npz"
    onnx.save(roi_head(), model)
    np.savez(calib, **_roi_rows(16))
    deploy_verified(capsys, model, calib, target, precision, tmp_path / "out")
