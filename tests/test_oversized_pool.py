"""An AveragePool whose window is larger than its input (``ceil_mode``: the one window averages the whole axis),
as ALIGN's EfficientNet pools its last 10x10 map with ``AvgPool2d(2560, ceil_mode=True)`` (round 15m).
OpenVINO cannot convert it ("Conversion is failed for: AveragePool"): every case of ALIGN's vision tower was
refused, the host runs (calibration, verification) included. ``core.fusions.AveragePoolWindowInsidePass`` gives
such an axis its size as the window, and a pool covering the whole input becomes a GlobalAveragePool. Checked
against onnxruntime running the file as written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.ort_reference import run_node_by_node
from tests.tflite_files import run_tflite_file


def _model() -> onnx.ModelProto:
    """conv (stride 4) -> [1, 8, 2, 4]; a 7x7 ceil-mode pool (the whole map: global) and a [5, 2] one (window
    larger than the map on H only: [1, 8, 1, 2])."""
    rng = np.random.default_rng(15)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["f"], strides=[4, 4], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["f"], ["r"]),
        helper.make_node("AveragePool", ["r"], ["g"], kernel_shape=[7, 7], strides=[7, 7], ceil_mode=1),
        helper.make_node("AveragePool", ["r"], ["h"], kernel_shape=[5, 2], strides=[5, 2], ceil_mode=1),
    ]
    inits = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.4).astype(np.float32), "w"),
        numpy_helper.from_array((rng.standard_normal(8) * 0.1).astype(np.float32), "b"),
    ]
    graph = helper.make_graph(
        nodes,
        "oversized_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 16])],
        [
            helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 8, 1, 1]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 8, 1, 2]),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def test_window_becomes_the_input_size():
    from edgekit.core.model import load_proto

    model = load_proto(_model())
    ops = [n.op_type for n in model.graph]
    assert "GlobalAveragePool" in ops, ops
    pools = [n for n in model.graph if n.op_type == "AveragePool"]
    assert all(list(n.attributes["kernel_shape"].value)[0] == 2 for n in pools), pools


@pytest.mark.parametrize("target", ["arm-cpu", "intel-vpu"])
def test_oversized_pool_deploys_and_matches_onnxruntime(tmp_path, target):
    import edgekit

    proto = _model()
    path = tmp_path / "pool.onnx"
    onnx.save(proto, path)
    rng = np.random.default_rng(3)
    result = edgekit.deploy(path, [target], output=tmp_path / "out", precision="fp32")
    result.raise_for_failures()
    x = rng.uniform(-1, 1, (1, 3, 8, 16)).astype(np.float32)
    want = dict(zip(("g", "h"), run_node_by_node(proto, {"x": x}), strict=True))
    if target == "arm-cpu":
        import json

        bundle = tmp_path / "out" / "arm-cpu"
        layouts = {
            o["name"]: o["layout"] for o in json.loads((bundle / "manifest.json").read_text())["outputs"]
        }
        got = run_tflite_file(
            bundle / "model.tflite", {"x": x.transpose(0, 2, 3, 1)}
        )  # the image input is NHWC
        got = {n: v.transpose(0, 3, 1, 2) if layouts[n] == "NHWC" else v for n, v in got.items()}
    else:
        import openvino as ov

        (xml,) = (tmp_path / "out" / "intel-vpu").rglob("model.xml")
        compiled = ov.Core().compile_model(
            ov.Core().read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
        )
        out = compiled({"x": x})
        got = {name: out[port] for port in compiled.outputs for name in port.get_names() if name in want}
    for name, w in want.items():
        assert got[name].shape == w.shape, (name, got[name].shape)
        np.testing.assert_allclose(got[name], w, atol=1e-5 * float(np.abs(w).max()), err_msg=name)
