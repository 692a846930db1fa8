"""A packaged image tensor whose channels, height and width are equal: its shape alone cannot tell NCHW from the
device's NHWC, and the device evaluation (and the zoo's figures) used to read such an output untransposed.
YOLOv8n-seg at 128x128 (its mask prototypes [1, 32, 32, 32]): the arm-cpu fp32 bundle verified at 1.7e-5, and
the same bundle run through to_device/from_device was 0.98 of the range off onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from edgekit.deployment import deploy
from edgekit.device_agents.bundle import read_bundle
from edgekit.device_agents.runtimes import open_runner
from edgekit.device_eval import from_device, to_device
from onnx import TensorProto, helper, numpy_helper


def test_a_square_nchw_tensor_goes_to_and_comes_back_from_the_device_in_its_layout(tmp_path) -> None:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "square",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [numpy_helper.from_array(weight, "w")],
    )
    path = tmp_path / "square.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    (bundle_result,) = deploy(path, "arm-cpu", output=tmp_path / "out", precision="fp32").bundles
    x = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
    expected = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    with read_bundle(bundle_result.path) as bundle:
        (spec_in,), (spec_out,) = bundle.manifest.inputs, bundle.manifest.outputs
        assert (
            spec_in.layout == spec_out.layout == "NHWC"
        )  # the case: both layouts have the shape [1, 4, 4, 4]
        device_x = to_device(x, spec_in)
        np.testing.assert_array_equal(device_x, x.transpose(0, 2, 3, 1))
        (raw,), _ = open_runner(bundle).run([device_x])
        got = from_device(raw, spec_out, (1, 4, 4, 4))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * float(np.ptp(expected)))
