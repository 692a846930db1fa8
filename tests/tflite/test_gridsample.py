"""GridSample written with TFLite builtins (targets/tflite/ops_gridsample.py) against onnxruntime: every supported
mode x padding_mode x align_corners at opsets 16 and 20 on LiteRT (in a child process), the refusals, and deploys
of a conv -> GridSample -> conv model whose grid is computed in-graph (fp32, and int8 with GridSample left float)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from edgekit.core.errors import TargetError
from onnx import TensorProto, helper, numpy_helper

X_SHAPE, GRID_SHAPE = (1, 3, 6, 7), (1, 5, 4, 2)
COMBINATIONS = [
    (opset, mode, padding, align)
    for opset in (16, 20)
    for mode, padding, align in itertools.product(
        ("bilinear" if opset < 20 else "linear", "nearest"), ("zeros", "border"), (0, 1)
    )
]


def _grid_sample_model(opset: int, x_shape=X_SHAPE, grid_shape=GRID_SHAPE, **attrs) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("GridSample", ["x", "grid"], ["y"], name="gridsample", **attrs)],
        "gridsample",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
            helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid_shape)),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _samples(seed: int, count: int = 2) -> list[dict[str, np.ndarray]]:
    """Grids beyond [-1, 1] (padding matters), plus the exact corners, centre and edges of the normalised range."""
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        grid = rng.uniform(-1.3, 1.3, GRID_SHAPE).astype(np.float32)
        grid[0, 0] = [[-1, -1], [1, 1], [0, 0], [-1, 1]]
        x = rng.standard_normal(X_SHAPE).astype(np.float32)
        samples.append({"x": x, "grid": grid})
    return samples


@pytest.mark.parametrize(("opset", "mode", "padding", "align"), COMBINATIONS)
def test_grid_sample_matches_onnxruntime(opset, mode, padding, align):
    import onnxruntime as ort
    from edgekit.core import isolated
    from edgekit.core.litert_run import run_tflite_samples
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    model = _grid_sample_model(opset, mode=mode, padding_mode=padding, align_corners=align)
    result = convert(model, ConvertOptions(target="arm-cpu"))
    assert "GATHER" in result.op_counts and "TRANSPOSE" not in result.op_counts, result.op_counts
    samples = _samples(seed=opset + align)
    got = isolated.call(
        run_tflite_samples,
        result.data,
        result.inputs,
        result.outputs,
        samples,
        what="LiteRT",
        doing="GridSample",
    )
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for sample, tflite in zip(samples, got, strict=True):
        want = session.run(None, sample)[0]
        assert tflite["y"].shape == want.shape == (1, 3, 5, 4)
        span = float(want.max() - want.min())
        assert np.max(np.abs(tflite["y"] - want)) <= 1e-5 * span
        if padding == "zeros":  # positions far outside the input read only padding
            outside = np.all(np.abs(sample["grid"][0]) > 1.2, axis=-1)
            assert np.all(want[0][:, outside] == 0) and np.all(tflite["y"][0][:, outside] == 0)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_batch_of_two_reads_each_batch_item(mode):
    """N = 2, odd sizes, H != W: each batch item samples its own image (the flattened rows' batch offset)."""
    import onnxruntime as ort
    from edgekit.core import isolated
    from edgekit.core.litert_run import run_tflite_samples
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    x_shape, grid_shape = (2, 4, 5, 9), (2, 3, 6, 2)
    model = _grid_sample_model(20, x_shape, grid_shape, mode=mode)
    result = convert(model, ConvertOptions(target="arm-cpu"))
    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(np.float32)
    x[1] += 10.0  # the second image far from the first: reading the wrong one shows
    sample = {"x": x, "grid": rng.uniform(-1.2, 1.2, grid_shape).astype(np.float32)}
    got = isolated.call(
        run_tflite_samples,
        result.data,
        result.inputs,
        result.outputs,
        [sample],
        what="LiteRT",
        doing="GridSample",
    )[0]["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, sample
    )[0]
    assert got.shape == want.shape == (2, 4, 3, 6)
    assert np.max(np.abs(got - want)) <= 1e-5 * float(want.max() - want.min())


@pytest.mark.parametrize(
    ("opset", "attrs", "x_shape", "grid_shape"),
    [
        (16, {"mode": "bilinear", "padding_mode": "reflection"}, X_SHAPE, GRID_SHAPE),
        (16, {"mode": "bicubic"}, X_SHAPE, GRID_SHAPE),
        (20, {"mode": "cubic"}, X_SHAPE, GRID_SHAPE),
        (20, {"mode": "linear"}, (1, 2, 3, 4, 5), (1, 2, 3, 4, 3)),
    ],
    ids=["reflection", "bicubic", "cubic", "5d"],
)
def test_unsupported_grid_sample_is_a_typed_refusal(opset, attrs, x_shape, grid_shape):
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    model = _grid_sample_model(opset, x_shape, grid_shape, **attrs)
    with pytest.raises(TargetError) as info:
        convert(model, ConvertOptions(target="arm-cpu"))
    message = str(info.value)
    assert "\n" not in message and "GridSample node 'gridsample'" in message
    assert "mode bilinear/linear or nearest, padding_mode zeros or border are" in message


@pytest.mark.parametrize(
    ("opset", "mode", "padding"),
    [
        (16, "bilinear", "zeros"),
        (16, "nearest", "border"),
        (16, "bicubic", "reflection"),
        (20, "linear", "border"),
    ],
)
def test_exact_runner_grid_sample_matches_onnxruntime(opset, mode, padding):
    """The int8 yardstick (edgekit.core.exact, float64 on onnx's reference evaluator) runs GridSample-16's mode
    names (onnx 1.23's own raises on "bilinear") and agrees with onnxruntime; bicubic / reflection through onnx's."""
    import onnxruntime as ort
    from edgekit.core.exact import ExactRunner

    for align in (0, 1):
        model = _grid_sample_model(opset, mode=mode, padding_mode=padding, align_corners=align)
        sample = _samples(seed=align, count=1)[0]
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, sample
        )
        got = ExactRunner(model).run(sample)["y"]
        assert np.max(np.abs(got - want[0])) <= 1e-5 * float(want[0].max() - want[0].min())


def _warp_model() -> onnx.ModelProto:
    """conv -> GridSample (grid = 1.3 * tanh(conv(x)): computed, partly outside [-1, 1]) -> conv."""
    rng = np.random.default_rng(3)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["features"]),
        helper.make_node("Conv", ["x", "wg", "bg"], ["offsets"], pads=[1, 1, 1, 1]),
        helper.make_node("Tanh", ["offsets"], ["bounded"]),
        helper.make_node("Mul", ["bounded", "spread"], ["scaled"]),
        helper.make_node("Transpose", ["scaled"], ["grid"], perm=[0, 2, 3, 1]),
        helper.make_node("GridSample", ["features", "grid"], ["warped"], name="gridsample", mode="bilinear"),
        helper.make_node("Conv", ["warped", "w2", "b2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = {
        "w1": w(8, 3, 3, 3), "b1": w(8), "wg": w(2, 3, 3, 3), "bg": w(2), "spread": np.float32(1.3),
        "w2": w(4, 8, 3, 3), "b2": w(4),
    }  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "warp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_deploy_warp_model_to_arm_cpu(tmp_path, precision):
    """edgekit deploy passes its verification (fp32: vs onnxruntime; int8: vs the QDQ model); in int8 GridSample
    stays a float island between DEQUANTIZE and QUANTIZE (its taps gathered in int8) while the convolutions are int8."""
    import edgekit

    path = tmp_path / "warp.onnx"
    onnx.save(_warp_model(), path)
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=np.random.default_rng(5).uniform(-1, 1, (16, 3, 16, 16)).astype(np.float32))
    result = edgekit.deploy(path, ["arm-cpu"], output=tmp_path / "out", calib=calib, precision=precision)
    result.raise_for_failures()
    verification = result.bundle("arm-cpu").verification
    assert verification["passed"], verification
    ops = verification["op_counts"]
    assert ops["GATHER"] == 1 and "TRANSPOSE" not in ops, ops
    if precision == "fp32":
        assert verification["max_rel_error"] <= 1e-4
    else:
        assert ops["DEQUANTIZE"] >= 1 and ops["QUANTIZE"] >= 1, ops
        # the taps are gathered from the int8 values (a DEQUANTIZE sinks below a GATHER: the same values), and
        # the bilinear weighting stays float
        assert "GATHER (gridsample)" not in verification["float_ops"], verification["float_ops"]
        assert "MUL (gridsample)" in verification["float_ops"], verification["float_ops"]
        assert verification["reference"].startswith("the QDQ model's exact semantics"), verification[
            "reference"
        ]
        assert not any("CONV_2D" in op for op in verification["float_ops"])
