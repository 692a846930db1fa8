"""Single-op graphs that probe round 21z's converter fuzzing (``benchmarks/zoo/probe_fuzz.py``) found refused or
wrong, built here with ``onnx.helper``: each deploys and its artifact agrees with onnxruntime on fresh inputs
(LiteRT for the arm-cpu .tflite, OpenVINO for the intel-vpu IR)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from edgekit.deployment import deploy
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "fuzzed",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 21 else 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _run_artifact(target: str, folder: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    if target == "arm-cpu":
        from ai_edge_litert.interpreter import Interpreter

        (path,) = folder.rglob("*.tflite")
        manifest = json.loads((path.parent / "manifest.json").read_text())
        nhwc = [io.get("layout") == "NHWC" for io in (*manifest["inputs"], *manifest["outputs"])]
        it = Interpreter(model_path=str(path))
        it.allocate_tensors()
        for d, x, last in zip(it.get_input_details(), feeds.values(), nhwc, strict=False):
            it.set_tensor(d["index"], np.ascontiguousarray(np.moveaxis(x, 1, -1) if last else x))
        it.invoke()
        outs = [it.get_tensor(d["index"]) for d in it.get_output_details()]
        return [
            np.moveaxis(y, -1, 1) if last else y for y, last in zip(outs, nhwc[len(feeds) :], strict=True)
        ]
    import openvino as ov

    (xml,) = folder.rglob("*.xml")
    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    result = compiled(list(feeds.values()))
    return [result[o] for o in compiled.outputs]


def _deploy_and_compare(model: onnx.ModelProto, target: str, tmp_path: Path, tolerance: float) -> None:
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    result = deploy(path, target, output=tmp_path / "out")
    assert result.ok, result
    rng = np.random.default_rng(21)
    feeds = {
        i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in model.graph.input
    }
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = _run_artifact(target, tmp_path / "out", feeds)
    for w, g in zip(want, got, strict=True):
        assert g.shape == w.shape
        span = float(np.ptp(w)) or 1.0
        assert float(np.abs(g - w).max()) <= tolerance * span


@pytest.mark.parametrize("target", ["arm-cpu", "intel-vpu"])
@pytest.mark.parametrize("shape, groups", [([2, 2, 6], 2), ([1, 6, 3, 4], 3)])
def test_group_normalization_21_as_the_graph_output(shape, groups, target, tmp_path):
    """A GroupNormalization-21 whose output is the graph's: onnx's shape inference gives it no shape (an ONNX
    function), and its output's annotation was cleared as stale: refused as 'no static shape' on arm-cpu."""
    c = shape[1]
    rng = np.random.default_rng(0)
    model = _model(
        [helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=groups, epsilon=1e-5)],
        [("x", shape)],
        [("y", shape)],
        {"s": rng.uniform(0.5, 1.5, c).astype(np.float32), "b": rng.standard_normal(c).astype(np.float32)},
        21,
    )
    _deploy_and_compare(model, target, tmp_path, 1e-4 if target == "arm-cpu" else 1e-2)


@pytest.mark.parametrize("target", ["arm-cpu", "intel-vpu"])
@pytest.mark.parametrize(
    "data, indices, axis",
    [
        ([5, 2, 1], [1, 2, 2], -1),  # smaller on axis 0, larger on the gathered axis
        ([3, 3, 5, 5, 1], [1, 5, 3, 5, 1], 1),
        ([4, 6], [2, 3], 0),
    ],
)
def test_gather_elements_with_indices_smaller_than_the_data(data, indices, axis, target, tmp_path):
    """ONNX (and torch.gather) let the indices be smaller than the data off the gathered axis; OpenVINO's front end
    refused the model ('OpenVINO cannot compile the model: Conversion is failed for: GatherElements-13'), on the
    host (the arm-cpu verification) and for intel-vpu."""
    rng = np.random.default_rng(1)
    n = data[axis]
    model = _model(
        [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
        [("x", data)],
        [("y", indices)],
        {"i": rng.integers(-n, n, indices).astype(np.int64)},
        13,
    )
    _deploy_and_compare(model, target, tmp_path, 1e-5 if target == "arm-cpu" else 1e-2)


@pytest.mark.parametrize(
    "mode, shape, pads",
    [
        ("constant", [3, 5], [-1, 2, 1, -2]),
        ("reflect", [1, 4, 6], [0, -1, 2, 0, 1, -3]),
        ("edge", [2, 3, 4, 5], [0, 0, -2, 1, 0, 0, 3, -1]),
    ],
)
def test_pad_with_negative_pads_crops_first(mode, shape, pads, tmp_path):
    """Negative pads crop (ONNX Pad-11+, onnxruntime crops first and pads what is left): the arm-cpu converter
    refused them ('negative pads (cropping) are not supported'); it now SLICEs, then pads."""
    out = [d + pads[i] + pads[i + len(shape)] for i, d in enumerate(shape)]
    model = _model(
        [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)],
        [("x", shape)],
        [("y", out)],
        {"p": np.asarray(pads, np.int64)},
        13,
    )
    _deploy_and_compare(model, "arm-cpu", tmp_path, 1e-6)


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_with_negative_pads_stays_int8(mode, tmp_path):
    """The crop before the pad (a SLICE between the DEQUANTIZE and the pad) sinks the DEQUANTIZE like the pad
    kernels do (``quantize.rules``: SLICE ``sink_dequantize``): the whole Pad runs int8, not left in float."""
    from ai_edge_litert.interpreter import Interpreter

    model = _model(
        [helper.make_node("Pad", ["x", "p"], ["y"], mode=mode)],
        [("x", [1, 3, 6])],
        [("y", [1, 3, 7])],
        {"p": np.asarray([0, 0, -1, 0, 0, 2], np.int64)},
        13,
    )
    onnx.save(model, tmp_path / "model.onnx")
    np.savez(
        tmp_path / "calib.npz", x=np.random.default_rng(0).standard_normal((8, 1, 3, 6)).astype(np.float32)
    )
    result = deploy(
        tmp_path / "model.onnx",
        "arm-cpu",
        output=tmp_path / "out",
        precision="int8",
        calib=tmp_path / "calib.npz",
    )
    assert result.ok, result
    (path,) = (tmp_path / "out").rglob("*.tflite")
    tensors = {t["name"]: t["dtype"] for t in Interpreter(model_path=str(path)).get_tensor_details()}
    cropped = [name for name in tensors if name.endswith("pad_cropped")]
    assert cropped and all(tensors[name] == np.int8 for name in cropped), tensors


@pytest.mark.parametrize("target", ["arm-cpu", "intel-vpu"])
@pytest.mark.parametrize(
    "mode, size_in, size_out", [("cubic", [2, 1, 7, 7], [2, 1, 14, 21]), ("linear", [1, 2, 5, 4], [1, 2, 3, 9]),
                                ("nearest", [1, 1, 4, 6], [1, 1, 10, 3])]
)  # fmt: skip
def test_resize_half_pixel_symmetric(mode, size_in, size_out, target, tmp_path):
    """Resize-19's ``half_pixel_symmetric``: OpenVINO's front end refuses it ('OpenVINO cannot compile the model:
    Conversion is failed for: Resize-21'), on the host (the arm-cpu verification) and for intel-vpu; it runs as
    two MatMuls by the Resize's own matrices there (``qdq_forms.antialias_resizes_as_matmuls``)."""
    model = _model(
        [
            helper.make_node(
                "Resize",
                ["x", "", "", "s"],
                ["y"],
                mode=mode,
                coordinate_transformation_mode="half_pixel_symmetric",
            )
        ],
        [("x", size_in)],
        [("y", size_out)],
        {"s": np.asarray(size_out, np.int64)},
        19,
    )
    _deploy_and_compare(model, target, tmp_path, 1e-5 if target == "arm-cpu" else 1e-2)


@pytest.mark.parametrize(
    "equation, shapes, out",
    [
        ("bn,anm,bm->ba", [[2, 3], [4, 3, 5], [2, 5]], [2, 4]),  # torch.nn.Bilinear's form
        ("ij,jk,kl->il", [[2, 3], [3, 4], [4, 5]], [2, 5]),
        ("bij,bjk,bkl,blm->bim", [[2, 3, 4], [2, 4, 2], [2, 2, 3], [2, 3, 5]], [2, 3, 5]),
        ("i,i,i->", [[6], [6], [6]], []),
    ],
)
def test_einsum_with_three_or_more_operands(equation, shapes, out, tmp_path):
    """The arm-cpu converter refused Einsum with more than two operands ('Einsum with 3 operands is not supported
    (1 or 2)'); it now contracts them two at a time."""
    names = [f"x{i}" for i in range(len(shapes))]
    model = _model(
        [helper.make_node("Einsum", names, ["y"], equation=equation)],
        list(zip(names, shapes, strict=True)),
        [("y", out)],
        {},
        12,
    )
    _deploy_and_compare(model, "arm-cpu", tmp_path, 1e-5)
