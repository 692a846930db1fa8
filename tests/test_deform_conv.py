"""ONNX DeformConv (opset 19, torchvision's ``deform_conv2d`` / mmcv's DCNv2) written out as GridSample + 1x1 Conv
(``edgekit.core.deform_conv``): against onnxruntime's DeformConv kernel, and deployed through the CLI."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from cli_in_process import deploy_verified
from edgekit.core.deform_conv import DeformConvAsGridSamplePass
from onnx import TensorProto, helper, numpy_helper
from onnx_ir.passes.common import ShapeInferencePass

C, M, H, W = 4, 5, 9, 11


def dcn(strides, pads, dilations, k: int, mask: bool, bias: bool) -> onnx.ModelProto:
    """DCNv2 as exported: x [1, 4, 9, 11], offsets and mask from a 3x3 Conv of x (the mask through a Sigmoid),
    DeformConv with a constant weight [5, 4, k, k], then a Relu."""
    rng = np.random.default_rng(19)
    ho = (H + pads[0] + pads[2] - dilations[0] * (k - 1) - 1) // strides[0] + 1
    wo = (W + pads[1] + pads[3] - dilations[1] * (k - 1) - 1) // strides[1] + 1
    taps = k * k
    off_w = rng.standard_normal((3 * taps, C, 3, 3)).astype(np.float32)
    inits = [
        numpy_helper.from_array(rng.standard_normal((M, C, k, k)).astype(np.float32), "w"),
        numpy_helper.from_array(off_w, "off_w"),
        numpy_helper.from_array(np.array([0, 0, 0, 0], np.int64), "s0"),
        numpy_helper.from_array(np.array([1, 2 * taps, ho, wo], np.int64), "s1"),
        numpy_helper.from_array(np.array([1, taps, ho, wo], np.int64), "s2"),
        numpy_helper.from_array(np.array([0, 2 * taps, 0, 0], np.int64), "e0"),
        numpy_helper.from_array(np.array([1, 3 * taps, ho, wo], np.int64), "e1"),
        numpy_helper.from_array(rng.standard_normal(M).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "off_w"], ["o"], pads=[1, 1, 1, 1]),
        # the offset / mask map is at the output's size: a strided / dilated DCN samples Ho x Wo of it
        helper.make_node("Slice", ["o", "s0", "s1"], ["off"]),
        helper.make_node("Slice", ["o", "e0", "e1"], ["mlog"]),
        helper.make_node("Sigmoid", ["mlog"], ["mask"]),
    ]
    ins = ["x", "w", "off", "b" if bias else "", "mask" if mask else ""]
    while not ins[-1]:
        ins.pop()
    nodes += [
        helper.make_node(
            "DeformConv", ins, ["d"], strides=strides, pads=pads, dilations=dilations, kernel_shape=[k, k]
        ),
        helper.make_node("Relu", ["d"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "dcn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, M, ho, wo])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


CASES = {
    "dcnv2": ([1, 1], [1, 1, 1, 1], [1, 1], 3, True, True),
    "strided_dcnv1": ([2, 2], [1, 0, 1, 0], [1, 1], 3, False, True),
    "dilated": ([1, 1], [2, 2, 2, 2], [2, 2], 3, True, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rewrite_matches_onnxruntime(case: str) -> None:
    """No DeformConv left, onnxruntime's DeformConv results (offsets of several pixels: samples outside the
    input read zeros)."""
    source = dcn(*CASES[case])
    x = {"x": np.random.default_rng(2).standard_normal((1, C, H, W)).astype(np.float32)}
    model = ir.serde.deserialize_model(source)
    ShapeInferencePass()(model)
    assert DeformConvAsGridSamplePass()(model).modified
    written = ir.serde.serialize_model(model)
    assert "DeformConv" not in {n.op_type for n in written.graph.node}

    def run(m: onnx.ModelProto) -> np.ndarray:
        return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]

    reference = run(source)
    np.testing.assert_allclose(run(written), reference, atol=1e-5 * np.abs(reference).max())


@pytest.mark.parametrize(
    ("target", "precision"), [("arm-cpu", "fp32"), ("arm-cpu", "int8"), ("intel-vpu", "fp16")]
)
def test_deform_conv_deploys(tmp_path: Path, capsys, target: str, precision: str) -> None:
    """Before: "unsupported op 'DeformConv'" (arm-cpu, nnapi), "No conversion rule found for operations:
    DeformConv-19" (OpenVINO, also on the int8 cases' host). Now each verifies; the fp32 .tflite within 1e-4."""
    model, calib = tmp_path / "dcn.onnx", tmp_path / "calib.npz"
    onnx.save(dcn(*CASES["dcnv2"]), model)
    np.savez(calib, x=np.random.default_rng(3).standard_normal((16, 1, C, H, W)).astype(np.float32))
    deploy_verified(capsys, model, calib, target, precision, tmp_path / "out")
