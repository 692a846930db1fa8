"""Model files and I/O forms as users hand them over (round 13f, ``benchmarks/zoo/probe_file_forms.py``):
external data, bfloat16, odd inputs / outputs and graph hygiene, each against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cli_in_process import cli_text
from edgekit.core.errors import ModelError
from edgekit.core.model import load_model, to_proto
from onnx import TensorProto, helper, numpy_helper
from ort_reference import run_node_by_node as ort_run


def small_cnn(dtype: int = TensorProto.FLOAT, seed: int = 0) -> onnx.ModelProto:
    """Conv / Relu / GlobalAveragePool / Flatten / Gemm on [1, 3, 8, 8], weights in ``dtype``."""
    rng = np.random.default_rng(seed)

    def init(name: str, array: np.ndarray) -> onnx.TensorProto:
        t = numpy_helper.from_array(array.astype(np.float32), name)
        if dtype == TensorProto.BFLOAT16:
            t = helper.make_tensor(name, dtype, array.shape, array.astype(np.float32).ravel())
        return t

    inits = [
        init("w", rng.normal(0, 0.3, (8, 3, 3, 3))),
        init("b", rng.normal(0, 0.1, (8,))),
        init("fc_w", rng.normal(0, 0.3, (4, 8))),
        init("fc_b", rng.normal(0, 0.1, (4,))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", dtype, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", dtype, [1, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def image(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 1, (1, 3, 8, 8)).astype(np.float32)


# ------------------------------------------------------------------------------------------- external data


def test_a_missing_external_data_file_is_named_in_one_typed_line(tmp_path, capsys):
    path = tmp_path / "model.onnx"
    onnx.save(small_cnn(), str(path), save_as_external_data=True, size_threshold=0, location="w.bin")
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ModelError, match=r"external weights file 'w.bin' is missing beside it \(4 tensor"):
        load_model(path)
    code, text = cli_text(capsys, "deploy", str(path), "--target", "arm-cpu", "-o", str(tmp_path / "out"))
    assert code == 2 and "internal error" not in text
    assert [line for line in text.splitlines() if line.startswith("error:")] == [
        f"error: model {path}: its external weights file 'w.bin' is missing beside it (4 tensor(s), e.g. 'w'): "
        "copy the data file(s) with the .onnx"
    ]
    assert not (tmp_path / "out").exists()


def test_external_data_in_a_sub_folder_loads_from_another_working_directory(tmp_path, monkeypatch):
    source = small_cnn()
    folder = tmp_path / "model"
    (folder / "weights").mkdir(parents=True)
    onnx.save(small_cnn(), str(folder / "m.onnx"), save_as_external_data=True, size_threshold=0,
              location="weights/w.bin")  # fmt: skip
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    model = load_model("../model/m.onnx")
    (expected,) = ort_run(source, {"x": image()})
    (got,) = ort_run(to_proto(model), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------- bfloat16


def test_a_bfloat16_model_loads_as_the_float32_model_of_its_weights(tmp_path):
    """torch's export after ``model.to(torch.bfloat16)``: a bfloat16 Conv / Gemm, which ONNX defines only from
    opset 22 (onnxruntime cannot run the file). Its bfloat16 weights widen exactly to float32: the reference is
    the float32 model of the same (bfloat16-rounded) weights."""
    half = small_cnn(TensorProto.BFLOAT16)
    path = tmp_path / "bf16.onnx"
    onnx.save(half, str(path))
    messages: list[str] = []
    model = load_model(path, messages=messages)
    assert messages[0] == (
        "bfloat16 model: computed in float32 (its bfloat16 weights widened exactly); input(s) x are float32"
    )
    reference = small_cnn()
    for t, h in zip(reference.graph.initializer, half.graph.initializer, strict=True):
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(h).astype(np.float32), t.name))
    (expected,) = ort_run(reference, {"x": image()})
    (got,) = ort_run(to_proto(model), {"x": image()})
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
