"""Graph-preparation errors name the problem in words: which tensor, made by which op, and why."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from edgekit.cli.common import run_app
from edgekit.cli.main import app
from edgekit.core.errors import ModelError
from edgekit.core.model import load_proto
from edgekit.core.passes import prepare
from edgekit.core.shape_checks import static_shapes_refusal
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits=(), opsets=(("", 19),)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _nonzero_model() -> onnx.ModelProto:
    """Relu -> NonZero -> Transpose: NonZero's output length depends on the data."""
    return _model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
            helper.make_node("Transpose", ["nz"], ["y"], name="transpose"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
    )


def _custom_op_model() -> onnx.ModelProto:
    """A custom-domain op (no shape inference) whose output feeds Shape -> Cast -> Add."""
    return _model(
        [
            helper.make_node("Scramble", ["x"], ["s"], name="scramble", domain="vendor.ops"),
            helper.make_node("Shape", ["s"], ["shape"], name="shape_of"),
            helper.make_node("Cast", ["shape"], ["f"], name="to_float", to=TensorProto.FLOAT),
            helper.make_node("Add", ["f", "one"], ["y"], name="plus_one"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")],
        opsets=(("", 19), ("vendor.ops", 1)),
    )


def _computed_reshape_model() -> onnx.ModelProto:
    """Reshape whose target shape is computed from the data (ArgMax), not a constant."""
    return _model(
        [
            helper.make_node("ArgMax", ["x"], ["am"], name="argmax", axis=1, keepdims=0),
            helper.make_node("Concat", ["minus_one", "am"], ["target"], name="concat", axis=0),
            helper.make_node("Reshape", ["x", "target"], ["y"], name="reshape"),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([-1], np.int64), "minus_one")],
    )


def test_data_dependent_op_is_named_with_the_reason():
    """A data-dependent size loads (OpenVINO and onnxruntime run it); the static-shape targets refuse it."""
    assert static_shapes_refusal(load_proto(_nonzero_model()), "arm-cpu") == (
        "tensor 'nz' (output of NonZero node 'nonzero') has no static shape ([2, ?]): "
        "the size of NonZero's output depends on its input values; arm-cpu writes static shapes only (intel-vpu "
        "and edgekit quantize take the model as it is)"
    )


def test_a_detector_with_nms_inside_is_told_to_export_without_it():
    """ultralytics' export(format="onnx", nms=True) writes a score threshold (NonZero) and NonMaxSuppression into
    the graph: yolov8n_nms was refused naming NonZero alone; the line now names the NMS and the way out."""
    model = _model(
        [
            helper.make_node("Greater", ["scores", "threshold"], ["keep"], name="over_threshold"),
            helper.make_node("NonZero", ["keep"], ["nz"], name="/NonZero"),
            helper.make_node("NonMaxSuppression", ["boxes", "scores", "top_k"], ["selected"], name="/nms"),
            helper.make_node("Transpose", ["nz"], ["kept"], name="transpose"),
        ],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 6, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, 6]),
        ],
        [
            helper.make_tensor_value_info("kept", TensorProto.INT64, None),
            helper.make_tensor_value_info("selected", TensorProto.INT64, None),
        ],
        [
            numpy_helper.from_array(np.array(0.25, np.float32), "threshold"),
            numpy_helper.from_array(np.array([5], np.int64), "top_k"),
        ],
    )
    message = static_shapes_refusal(load_proto(model), "nnapi")
    assert message.startswith("tensor 'nz' (output of NonZero node '/NonZero') has no static shape")
    assert message.endswith(
        "; the graph runs NonMaxSuppression ('/nms'), whose number of boxes depends on the scores: export the "
        "detector without NMS (ultralytics: without nms=True; PaddleDetection: export_model.py -o exclude_nms=True "
        "for PP-YOLOE / PP-YOLOE+, export.nms=False for PicoDet; torchvision: its backbone and head, without the "
        "transform and postprocess) and run NMS on its output; "
        "nnapi writes static shapes only (intel-vpu and edgekit quantize take the model as it is)"
    )
    assert "\n" not in message


def test_custom_op_is_traced_as_the_root_of_a_dynamic_shape():
    with pytest.raises(ModelError) as info:
        load_proto(_custom_op_model())
    message = str(info.value)
    assert message.startswith("tensor 'shape' (output of Shape node 'shape_of') has no static shape ([?])")
    assert message.endswith(
        "it is computed from 's', output of vendor.ops.Scramble node 'scramble', and vendor.ops.Scramble "
        "is a custom op whose output shape onnx cannot infer"
    )


def test_shape_computed_at_run_time_is_named():
    with pytest.raises(ModelError) as info:
        load_proto(_computed_reshape_model())
    message = str(info.value)
    assert "(output of Reshape node 'reshape') has no static shape" in message
    assert "depends on the value of 'target', which is computed at run time" in message


def test_cli_gives_one_line_without_object_reprs(tmp_path, capsys):
    """NonZero then an op LiteRT cannot size at run time (a Hardmax): refused for arm-cpu."""
    model = _nonzero_model()
    model.graph.node.extend(
        [
            helper.make_node("Cast", ["y"], ["f"], to=TensorProto.FLOAT, name="to_float"),
            helper.make_node("Hardmax", ["f"], ["soft"], name="hardmax"),
        ]
    )
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("soft", TensorProto.FLOAT, None))
    path = tmp_path / "nonzero.onnx"
    onnx.save(model, path)
    with pytest.raises(SystemExit) as exit_info:
        run_app(app, ["deploy", str(path), "-t", "arm-cpu", "-o", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: tensor 'nz' (output of NonZero node")
    assert not re.search(r"object at 0x|PassError|An error occurred", err)


class _BrokenPass(ir.passes.InPlacePass):
    def call(self, model: ir.Model) -> ir.passes.PassResult:
        raise KeyError("no such value")


def test_an_unexpected_pass_failure_says_which_pass_without_reprs(monkeypatch):
    """A pass failing with a plain Python error (a bug) is named by its class, its error by its first line."""
    import edgekit.core.passes as passes

    model = ir.from_proto(_nonzero_model())
    real = ir.passes.PassManager

    def with_broken(pass_list, steps=1):
        return real([_BrokenPass(), *pass_list], steps=steps)

    monkeypatch.setattr(passes.ir.passes, "PassManager", with_broken)
    with pytest.raises(ModelError) as info:
        prepare(model)
    assert (
        str(info.value) == "cannot prepare the model's graph: _BrokenPass failed: KeyError: 'no such value'"
    )


def test_a_shape_computed_from_an_input_value_names_the_input():
    """Robust Video Matting's ONNX export takes ``downsample_ratio`` as an input and resizes the source by it
    (Resize scales Concat([1, 1], ratio, ratio)): the refusal named only '/Concat_output_0'; it now names the graph
    input whose value the shape depends on (probe round 16g)."""
    proto = _model(
        [
            helper.make_node("Concat", ["ones", "ratio", "ratio"], ["scales"], name="concat", axis=0),
            helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="linear"),
        ],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("ratio", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([1.0, 1.0], np.float32), "ones")],
    )
    with pytest.raises(ModelError) as info:
        load_proto(proto)
    assert str(info.value).endswith(
        "its shape depends on the value of 'scales', which is computed at run time from graph input 'ratio' (a value "
        "known only when the model runs: export the model with it as a constant)"
    )
