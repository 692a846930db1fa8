"""Model loading: opset upgrade, input shapes, and each preparation pass checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core.errors import ModelError
from edgekit.core.model import load_model, to_proto
from edgekit.core.runtime import HostRunner
from ort_reference import run_node_by_node as ort_run
from quant_models import mnist_like, shape_subgraph_model, squeezenet_like


def save(model: onnx.ModelProto, tmp_path, name: str = "m.onnx"):
    path = tmp_path / name
    path.write_bytes(model.SerializeToString())
    return path


def op_types(model) -> list[str]:
    return [n.op_type for n in model.graph]


def test_opset7_model_is_upgraded_and_cleaned(tmp_path):
    source = squeezenet_like(opset=7)
    model = load_model(save(source, tmp_path))
    assert model.opset_imports[""] == 19
    ops = op_types(model)
    # BatchNormalization folded into the conv, Dropout dropped; initializers are no longer graph inputs.
    assert "BatchNormalization" not in ops and "Dropout" not in ops
    assert [v.name for v in model.graph.inputs] == ["data"]
    x = np.random.default_rng(0).normal(0, 1, (1, 3, 33, 33)).astype(np.float32)
    (expected,) = ort_run(source, {"data": x})
    (got,) = ort_run(to_proto(model), {"data": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    onnx.checker.check_model(to_proto(model), full_check=True)


def test_cntk_style_bias_adds_fuse_into_conv_and_gemm(tmp_path):
    source = mnist_like(opset=8)
    model = load_model(save(source, tmp_path))
    assert op_types(model) == ["Conv", "Relu", "MaxPool", "Reshape", "Gemm"]
    gemm = [n for n in model.graph if n.op_type == "Gemm"][0]
    assert gemm.inputs[2].const_value.numpy().shape == (10,)  # the [1,10] bias became 1-D
    x = np.random.default_rng(1).normal(0, 1, (1, 1, 12, 12)).astype(np.float32)
    (expected,) = ort_run(source, {"x": x})
    (got,) = ort_run(to_proto(model), {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_shape_subgraph_folds_to_a_constant_after_fixing_the_batch(tmp_path):
    messages: list[str] = []
    model = load_model(save(shape_subgraph_model(), tmp_path), messages=messages)
    assert op_types(model) == ["Relu", "Reshape", "Gemm"]
    assert "input 'x': batch fixed to 1; pass --input-shape to choose" in messages
    assert list(model.graph.inputs[0].shape) == [1, 2, 3, 4]
    x = np.random.default_rng(2).normal(0, 1, (1, 2, 3, 4)).astype(np.float32)
    (expected,) = ort_run(shape_subgraph_model(), {"x": x})
    (got,) = ort_run(to_proto(model), {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_input_shape_option_fixes_batch_and_rejects_bad_names(tmp_path):
    path = save(shape_subgraph_model(), tmp_path)
    model = load_model(path, {"x": (3, 2, 3, 4)})
    assert list(model.graph.inputs[0].shape) == [3, 2, 3, 4]
    with pytest.raises(ModelError, match=r"unknown input\(s\) \['y'\]; the model's inputs are \['x'\]"):
        load_model(path, {"y": (1, 2, 3, 4)})
    with pytest.raises(ModelError, match="has rank 2"):
        load_model(path, {"x": (1, 24)})
    with pytest.raises(ModelError, match="contradicts"):
        load_model(path, {"x": (1, 5, 3, 4)})


def test_dynamic_spatial_dims_need_input_shape(tmp_path):
    model = shape_subgraph_model()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    path = save(model, tmp_path)
    with pytest.raises(ModelError, match=r"dynamic dimensions .* pass --input-shape x=N,2,N,4"):
        load_model(path)
    assert list(load_model(path, {"x": (1, 2, 3, 4)}).graph.inputs[0].shape) == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "model file not found"),
        (b"", "model file is empty"),
        (b"this is not a protobuf \xff\xfe at all", "not an ONNX model"),
    ],
)
def test_bad_model_files(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ModelError, match=message):
        load_model(path)


def test_truncated_protobuf_is_reported_as_corrupt(tmp_path):
    data = squeezenet_like().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match="corrupt protobuf|no graph"):
        load_model(path)


def test_unsupported_opset(tmp_path):
    model = squeezenet_like(opset=7)
    model.opset_import[0].version = 5
    with pytest.raises(ModelError, match="unsupported opset 5"):
        load_model(save(model, tmp_path))


def test_host_runner_runs_in_f32_and_captures_intermediates(tmp_path):
    model = load_model(save(squeezenet_like(), tmp_path))
    runner = HostRunner(model, extra_outputs=["rs", "cat"])
    x = np.random.default_rng(3).normal(0, 1, (1, 3, 33, 33)).astype(np.float32)
    out = runner.run({"data": x})
    proto = to_proto(model)
    from edgekit.core.runtime import with_outputs

    expected = ort_run(with_outputs(proto, ["rs", "cat"]), {"data": x})
    for name, ref in zip(["prob", "rs", "cat"], expected, strict=True):
        np.testing.assert_allclose(out[name], ref, rtol=1e-5, atol=1e-6)
