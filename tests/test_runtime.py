"""Host execution (edgekit.core.runtime): a QDQ model runs with its exact semantics on any x86 CPU."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from edgekit.core.qdq_forms import drop_concat_identity_qdq, fold_constant_dequantize
from edgekit.core.runtime import HostRunner
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from ort_reference import run_node_by_node as exact


def saturating_gemm() -> onnx.ModelProto:
    """QDQ Gemm, 16 inputs in [0, 1] (uint8 activations) times int8 weights near 127.

    u8 x s8 kernels that add products pairwise in 16 bits (AVX2 without VNNI) overflow here:
    2 x 255 x 127 > 32767.
    """
    rng = np.random.default_rng(0)
    w = np.clip(np.rint(125 + 2 * rng.standard_normal((10, 16))), -127, 127).astype(np.int8)
    inits = [
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(np.full(10, 1 / 127, np.float32), "w_scale"),
        numpy_helper.from_array(np.zeros(10, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(1 / 255, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(0, np.uint8), "x_zp"),
        numpy_helper.from_array(np.arange(10, dtype=np.int32) * 100 - 400, "b_q"),
        numpy_helper.from_array(np.full(10, 1 / 255 / 127, np.float32), "b_scale"),
        numpy_helper.from_array(np.array(16 / 255, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(0, np.uint8), "y_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["wd"], axis=0),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale"], ["bd"], axis=0),
        helper.make_node("Gemm", ["xd", "wd", "bd"], ["g"], transB=1),
        helper.make_node("QuantizeLinear", ["g", "y_scale", "y_zp"], ["gq"]),
        helper.make_node("DequantizeLinear", ["gq", "y_scale", "y_zp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "saturating",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_qdq_model_runs_exactly_where_integer_kernels_would_saturate() -> None:
    model = saturating_gemm()
    runner = HostRunner(model)
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.uniform(0.5, 1.0, (1, 16)).astype(np.float32)  # large inputs: the sums that overflow
        np.testing.assert_allclose(runner.run({"x": x})["y"], exact(model, {"x": x})[0], atol=1e-6)


def test_fold_computes_what_dequantize_linear_computes() -> None:
    model = saturating_gemm()
    folded = fold_constant_dequantize(model)
    assert [n.op_type for n in folded.graph.node] == [
        "QuantizeLinear",
        "DequantizeLinear",  # of the activation: not a constant, stays
        "Gemm",
        "QuantizeLinear",
        "DequantizeLinear",
    ]
    names = {t.name for t in folded.graph.initializer}
    assert {"wd", "bd"} <= names and not {"w_q", "w_zp", "b_q", "b_scale"} & names  # unused ones go
    onnx.checker.check_model(folded, full_check=True)
    reference = ReferenceEvaluator(model)
    values = {t.name: numpy_helper.to_array(t) for t in folded.graph.initializer}
    for name in ("wd", "bd"):
        expected = reference.run([name], {"x": np.zeros((1, 16), np.float32)})[0]
        assert values[name].dtype == np.float32
        np.testing.assert_array_equal(values[name], expected)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_fold_per_axis_and_without_zero_point(axis: int) -> None:
    rng = np.random.default_rng(2)
    q = rng.integers(-128, 128, (3, 4, 2)).astype(np.int8)
    scale = rng.uniform(0.01, 0.1, q.shape[axis]).astype(np.float32)
    zp = rng.integers(-5, 5, q.shape[axis]).astype(np.int8)
    for inputs in (["q", "s", "z"], ["q", "s"]):
        graph = helper.make_graph(
            [
                helper.make_node("DequantizeLinear", inputs, ["d"], axis=axis),
                helper.make_node("MatMul", ["x", "d"], ["y"]),
            ],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, 2])],
            [
                numpy_helper.from_array(q, "q"),
                numpy_helper.from_array(scale, "s"),
                numpy_helper.from_array(zp, "z"),
            ],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
        x = rng.standard_normal((3, 5, 4)).astype(np.float32)
        folded = fold_constant_dequantize(model)
        assert [n.op_type for n in folded.graph.node] == ["MatMul"]
        np.testing.assert_array_equal(
            ReferenceEvaluator(folded).run(None, {"x": x})[0],
            ReferenceEvaluator(model).run(None, {"x": x})[0],
        )
        np.testing.assert_allclose(HostRunner(model).run({"x": x})["y"], exact(model, {"x": x})[0], rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.int32])
def test_fold_is_exact_at_every_integer_width(dtype) -> None:
    """Folded constants equal what DequantizeLinear defines, bit for bit: every 8- and 16-bit value (computed in
    float32 there, exact for them) and wide int32 biases (float64), with zero points at the range's ends and
    scales from tiny (float32 subnormal results) to large."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    if info.bits <= 16:
        q = np.arange(info.min, info.max + 1, dtype=np.int64).astype(dtype)
    else:
        q = rng.integers(info.min, info.max, 65536, dtype=np.int64).astype(dtype)
    q = q[: q.size // 16 * 16].reshape(16, -1)
    scale = np.exp(rng.uniform(-100, 10, 16)).astype(np.float32)
    zp = np.concatenate([[info.min, info.max, 0], rng.integers(info.min, info.max, 13)]).astype(dtype)
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=0),
            helper.make_node("MatMul", ["x", "d"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, q.shape[1]])],
        [
            numpy_helper.from_array(q, "q"),
            numpy_helper.from_array(scale, "s"),
            numpy_helper.from_array(zp, "z"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    folded = {t.name: numpy_helper.to_array(t) for t in fold_constant_dequantize(model).graph.initializer}
    expected = ReferenceEvaluator(model).run(["d"], {"x": np.zeros((1, 16), np.float32)})[0]
    if info.bits > 16:  # the reference evaluator computes in float32: the definition's product is exact
        expected = ((q.astype(np.float64) - zp[:, None]) * scale[:, None].astype(np.float64)).astype(
            np.float32
        )
    assert folded["d"].dtype == np.float32
    np.testing.assert_array_equal(folded["d"].view(np.int32), expected.view(np.int32))


def test_constants_read_by_other_ops_stay_dequantize_nodes() -> None:
    """An Add reading a folded constant crashed OpenVINO 2026.4's compiler: only MAC kernels' inputs fold."""
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s"], ["d"]), helper.make_node("Add", ["x", "d"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [
            numpy_helper.from_array(np.arange(4, dtype=np.int8), "q"),
            numpy_helper.from_array(np.float32(0.5), "s"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    assert fold_constant_dequantize(model) is model


def test_fold_leaves_float_models_and_non_constant_or_blocked_dequantize_alone() -> None:
    fp32 = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        ),
        opset_imports=[helper.make_opsetid("", 19)],
    )
    assert fold_constant_dequantize(fp32) is fp32
    blocked = helper.make_model(
        helper.make_graph(
            [helper.make_node("DequantizeLinear", ["q", "s"], ["d"], axis=0, block_size=2),
             helper.make_node("Add", ["d", "x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
            [numpy_helper.from_array(np.arange(4, dtype=np.int8), "q"),
             numpy_helper.from_array(np.array([0.5, 0.25], np.float32), "s")],
        ),
        opset_imports=[helper.make_opsetid("", 21)],
    )  # fmt: skip
    assert fold_constant_dequantize(blocked) is blocked


@pytest.mark.parametrize(("zp_dtype", "zero_point"), [(np.uint8, 100), (np.int8, -20)])
def test_average_pool_counting_its_padding_runs_exactly(zp_dtype, zero_point) -> None:
    """DequantizeLinear -> AveragePool(count_include_pad=1, pads) -> QuantizeLinear: the padding is a real 0 (the
    zero point). OpenVINO 2026.4 pads with the integer 0 (1.12 off here for uint8); the host runner pads the
    integer tensor with the zero point itself."""
    inits = [
        numpy_helper.from_array(np.array(0.02, np.float32), "s"),
        numpy_helper.from_array(np.array(zero_point, zp_dtype), "z"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
        helper.make_node(
            "AveragePool",
            ["xd"],
            ["a"],
            kernel_shape=[3, 3],
            pads=[1, 1, 1, 1],
            strides=[2, 2],
            count_include_pad=1,
        ),
        helper.make_node("QuantizeLinear", ["a", "s", "z"], ["aq"]),
        helper.make_node("DequantizeLinear", ["aq", "s", "z"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = np.random.default_rng(1).normal(0.5, 1, (1, 2, 7, 7)).astype(np.float32)
    (expected,) = exact(model, {"x": x})
    np.testing.assert_allclose(HostRunner(model).run({"x": x})["y"], expected, atol=1e-6)


def normalised_pixels_qdq() -> onnx.ModelProto:
    """The input QuantizeLinear of a QDQ model whose inputs are pixels normalised with mean 0.5 and std 0.5
    (PaddleOCR's): its range [-1, 1] gives int8 scale 2/255, and every input ``p * 2/255 - 1`` lies within
    float noise of half a step."""
    inits = [
        numpy_helper.from_array(np.array(2 / 255, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "x_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "normalised",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 16, 16])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def test_input_quantization_rounds_as_onnx_defines_it_on_half_step_inputs() -> None:
    """OpenVINO's FakeQuantize put 22 % of such pixels a step off the QDQ semantics: the real PP-OCR
    text-direction classifier's exact reference then disagreed with onnxruntime and LiteRT (cosine 0.989)."""
    model = normalised_pixels_qdq()
    pixels = np.random.default_rng(2).integers(0, 256, (1, 3, 16, 16)).astype(np.float32)
    x = ((pixels * np.float32(1 / 255) - np.float32(0.5)) / np.float32(0.5)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = HostRunner(model).run({"x": x})["y"]
    steps = np.abs(got - expected) / (2 / 255)
    assert steps.max() < 1e-3, f"{int((steps > 0.5).sum())} of {steps.size} inputs a step off"


def concat_then_requantize() -> onnx.ModelProto:
    """RetinaFace's SSH tail in QDQ (uint8, as the quantizer writes it): three branches quantized with the Concat's
    scale and zero point 129, Concat, its Q/DQ pair, Relu, a Q/DQ with zero point 0, a quantized 1x1 Conv.

    OpenVINO 2026.4's CPU plugin dies (SIGSEGV) compiling this as it is."""
    rng = np.random.default_rng(3)
    channels = (16, 8, 8)
    inits = [
        numpy_helper.from_array(np.array(0.0669, np.float32), "c_scale"),
        numpy_helper.from_array(np.array(129, np.uint8), "c_zp"),
        numpy_helper.from_array(np.array(0.033, np.float32), "r_scale"),
        numpy_helper.from_array(np.array(0, np.uint8), "r_zp"),
        numpy_helper.from_array(rng.integers(-127, 128, (4, sum(channels), 1, 1)).astype(np.int8), "w_q"),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
        numpy_helper.from_array(np.array(0.25, np.float32), "y_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "y_zp"),
    ]
    nodes, dequantized = [], []
    for i in range(3):
        nodes += [
            helper.make_node("QuantizeLinear", [f"x{i}", "c_scale", "c_zp"], [f"x{i}_q"]),
            helper.make_node("DequantizeLinear", [f"x{i}_q", "c_scale", "c_zp"], [f"x{i}_d"]),
        ]
        dequantized.append(f"x{i}_d")
    nodes += [
        helper.make_node("Concat", dequantized, ["c"], axis=1),
        helper.make_node("QuantizeLinear", ["c", "c_scale", "c_zp"], ["c_q"]),
        helper.make_node("DequantizeLinear", ["c_q", "c_scale", "c_zp"], ["c_d"]),
        helper.make_node("Relu", ["c_d"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "r_scale", "r_zp"], ["r_q"]),
        helper.make_node("DequantizeLinear", ["r_q", "r_scale", "r_zp"], ["r_d"]),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"]),
        helper.make_node("Conv", ["r_d", "w"], ["conv"]),
        helper.make_node("QuantizeLinear", ["conv", "y_scale", "y_zp"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "concat_requantize",
        [
            helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, c, 4, 4])
            for i, c in enumerate(channels)
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    onnx.checker.check_model(model, full_check=True)
    return model


def _concat_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"x{i}": rng.normal(0, 3, (1, c, 4, 4)).astype(np.float32) for i, c in enumerate((16, 8, 8))}


def test_identity_qdq_after_a_concat_is_dropped_with_the_same_values() -> None:
    model = concat_then_requantize()
    dropped = drop_concat_identity_qdq(model)
    ops = [n.op_type for n in dropped.graph.node]
    assert ops.count("QuantizeLinear") == 5 and "c_q" not in {n.output[0] for n in dropped.graph.node}
    for seed in range(5):
        feeds = _concat_feeds(seed)
        np.testing.assert_array_equal(exact(dropped, feeds)[0], exact(model, feeds)[0])
    # A pair whose scale differs from an input's is a real requantization: it stays.
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.node[0].input[1] = "r_scale"
    other.graph.node[1].input[1] = "r_scale"
    assert drop_concat_identity_qdq(other) is other
    # An output a caller asks for stays too.
    assert drop_concat_identity_qdq(model, keep=["c_d"]) is model


def test_host_runner_runs_a_concat_followed_by_a_requantization() -> None:
    """OpenVINO crashed (SIGSEGV) compiling the model as written; the host runner drops the identity pair. In a
    child process, so that a regression is a failed test rather than the end of pytest."""
    from edgekit.core import isolated
    from edgekit.core.errors import ModelError
    from edgekit.core.litert_run import host_outputs

    model = concat_then_requantize()
    samples = [_concat_feeds(seed) for seed in range(3)]
    got = isolated.call(
        host_outputs,
        model.SerializeToString(),
        samples,
        ["y"],
        what="OpenVINO",
        doing="running the QDQ model on the host",
        error=ModelError,
    )
    for sample, out in zip(samples, got, strict=True):
        np.testing.assert_allclose(out["y"], exact(model, sample)[0], atol=1e-5)


def sliced_gather_then_top_k() -> onnx.ModelProto:
    """A detector's decode as torch exports it: top-k of rounded scores (ties), then
    ``torch.gather(boxes[..., :4], 1, index)`` (a Slice straight into GatherElements)."""
    nodes = [
        helper.make_node("Round", ["scores"], ["rounded"]),
        helper.make_node("TopK", ["rounded", "k"], ["top", "index"], axis=1),
        helper.make_node("Unsqueeze", ["index", "last"], ["index3"]),
        helper.make_node("Expand", ["index3", "shape"], ["wide"]),
        helper.make_node("Slice", ["boxes", "start", "end", "last"], ["xyxy"]),
        helper.make_node("GatherElements", ["xyxy", "wide"], ["picked"], axis=1),
    ]
    inits = {"k": [10], "last": [2], "shape": [1, 10, 4], "start": [0], "end": [4]}
    graph = helper.make_graph(
        nodes,
        "decode",
        [
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 96]),
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 96, 7]),
        ],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("top", "picked")]
        + [helper.make_tensor_value_info("index", TensorProto.INT64, None)],
        [numpy_helper.from_array(np.asarray(v, np.int64), k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    return model


def test_host_runner_gathers_from_a_slice_and_orders_top_k_ties_as_onnx() -> None:
    """OpenVINO 2026.4 failed to compile GatherElements right after a Slice ("Shapes [1,96,7] and [1,10,4] are not
    consistent"): it reads it through Max(t, t); its ONNX TopK is unstable (stable=False), so equal scores came
    out in another order than onnxruntime's: the runner makes it stable. Both as onnxruntime, exactly."""
    from edgekit.core.qdq_forms import for_openvino, sliced_gather_elements_apart

    model = sliced_gather_then_top_k()
    assert [n.op_type for n in for_openvino(model).graph.node].count("Max") == 1
    assert sliced_gather_elements_apart(model) is not model
    runner = HostRunner(model)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {"scores": rng.uniform(0, 4, (1, 96)).astype(np.float32),
                 "boxes": rng.normal(0, 1, (1, 96, 7)).astype(np.float32)}  # fmt: skip
        want = dict(zip(("top", "picked", "index"), exact(model, feeds), strict=True))
        assert len(set(want["top"].ravel().tolist())) < 10  # ties among the top 10
        got = runner.run(feeds)
        for name in ("top", "picked", "index"):
            np.testing.assert_array_equal(got[name], want[name])


def test_host_runner_runs_hardmax_whose_top_k_does_not_sort() -> None:
    """OpenVINO makes Hardmax a TopK that does not sort, which cannot be stable ("Stable sort can only be used
    when TopK's sorting mode is set to 'VALUE' or 'INDEX'"): stable_top_k leaves it."""
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], axis=1)],
        "hardmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    feeds = {"x": np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)}
    np.testing.assert_array_equal(HostRunner(model).run(feeds)["y"], exact(model, feeds)[0])


def concat_then_scalar_gather() -> onnx.ModelProto:
    """Two quantized heads of other scales -> Concat on axis 1 -> ``t[..., 1]`` (Gather, 0-d index) -> Q/DQ ->
    Unsqueeze: a detector's anchor decode (BlazeFace: ``r[..., 0] / 128 * anchor_w + anchor_x``)."""
    inits = [
        numpy_helper.from_array(np.array(0.04, np.float32), "sa"),
        numpy_helper.from_array(np.array(0.05, np.float32), "sb"),
        numpy_helper.from_array(np.array(128, np.uint8), "z"),
        numpy_helper.from_array(np.array(1, np.int64), "i"),
        numpy_helper.from_array(np.array([-1], np.int64), "last"),
    ]
    nodes = [  # (heads computed from the inputs: OpenVINO crashed on this Concat read from the inputs' Q/DQ)
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["y"], ["b"]),
        helper.make_node("QuantizeLinear", ["a", "sa", "z"], ["aq"]),
        helper.make_node("DequantizeLinear", ["aq", "sa", "z"], ["ad"]),
        helper.make_node("QuantizeLinear", ["b", "sb", "z"], ["bq"]),
        helper.make_node("DequantizeLinear", ["bq", "sb", "z"], ["bd"]),
        helper.make_node("Concat", ["ad", "bd"], ["c"], axis=1),
        helper.make_node("Gather", ["c", "i"], ["g"], axis=2),
        helper.make_node("QuantizeLinear", ["g", "sb", "z"], ["gq"]),
        helper.make_node("DequantizeLinear", ["gq", "sb", "z"], ["gd"]),
        helper.make_node("Unsqueeze", ["gd", "last"], ["out"]),
    ]
    graph = helper.make_graph(
        nodes,
        "decode",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 4]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 4]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 96, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_host_runner_runs_a_scalar_gather_of_a_quantized_concat(tmp_path) -> None:
    """OpenVINO 2026.4 moves the Concat's per-position dequantization ([1, 96, 1]) below ``t[..., 1]`` unchanged
    and the product broadcasts to [1, 96, 96] ("Shape inference input shapes {[1,96,96],[3]}"): the model as
    written does not compile. Gathering [1] and squeezing the axis (scalar_gathers_squeezed) runs it exactly."""
    import openvino as ov
    from edgekit.core.qdq_forms import for_openvino, scalar_gathers_squeezed

    model = concat_then_scalar_gather()
    onnx.save(model, tmp_path / "decode.onnx")
    core = ov.Core()
    with pytest.raises(RuntimeError, match=r"\[1,96,96\]"):  # if this compiles, the rewrite may go
        core.compile_model(core.read_model(tmp_path / "decode.onnx"), "CPU")
    rewritten = scalar_gathers_squeezed(model)
    assert [n.op_type for n in for_openvino(model).graph.node].count("Squeeze") == 1
    np.testing.assert_array_equal(  # the rewrite computes the same (onnx's reference evaluator)
        ReferenceEvaluator(rewritten).run(None, _decode_feeds(0))[0],
        ReferenceEvaluator(model).run(None, _decode_feeds(0))[0],
    )
    float_model = sliced_gather_then_top_k()
    assert scalar_gathers_squeezed(float_model) is float_model  # no activation QuantizeLinear: left alone
    runner = HostRunner(model)
    for seed in range(3):
        feeds = _decode_feeds(seed)
        np.testing.assert_array_equal(runner.run(feeds)["out"], exact(model, feeds)[0])


def _decode_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(0, 2, (1, 64, 4)).astype(np.float32),
        "y": rng.normal(0, 2, (1, 32, 4)).astype(np.float32),
    }


@pytest.mark.parametrize("options", [{"streams": 2}, {"threads": 1}])
def test_a_runner_compiled_in_a_child_imports_what_it_compiled(options, monkeypatch) -> None:
    """``isolate=True``: the child's compiled model, exported and imported here (no second compile), runs with the
    same properties and gives the same values bit for bit as compiling here."""
    from pathlib import Path

    from edgekit.core import runtime

    core, compiles = runtime._core(), []

    class Spy:
        def __getattr__(self, name):
            return getattr(core, name)

        def compile_model(self, *args, **kwargs):
            compiles.append(args[0])
            return core.compile_model(*args, **kwargs)

    monkeypatch.setattr(runtime, "_core", Spy)
    model = onnx.load(Path(__file__).parent / "zoo" / "models" / "mobilenet_v2.onnx")
    name = model.graph.input[0].name
    extra = [n.output[0] for n in model.graph.node if n.op_type == "Conv"][::5]
    imported = HostRunner(model, extra_outputs=extra, isolate=True, **options)
    assert compiles == []
    compiled = HostRunner(model, extra_outputs=extra, **options)
    assert len(compiles) == 1
    for key in ("NUM_STREAMS", "INFERENCE_NUM_THREADS", "ENABLE_CPU_PINNING", "INFERENCE_PRECISION_HINT"):
        assert str(imported._compiled.get_property(key)) == str(compiled._compiled.get_property(key))
    rng = np.random.default_rng(3)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    for _ in range(3):
        x = {name: rng.standard_normal(shape).astype(np.float32)}
        a, b = imported.run(x), compiled.run(x)
        assert set(a) == set(b) and len(a) == len(extra) + 1
        for key in b:
            np.testing.assert_array_equal(a[key], b[key])


def antialias_model(mode: str, resize_input: str, target: np.ndarray) -> onnx.ModelProto:
    """Conv -> Resize(antialias=1) as torch's dynamo exporter writes ``F.interpolate(..., antialias=True)``
    (opset 18), by scales or by sizes."""
    rng = np.random.default_rng(8)
    inits = [
        numpy_helper.from_array(rng.standard_normal((3, 2, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(target, resize_input),
    ]
    inputs = ["c", "", resize_input] if resize_input == "scales" else ["c", "", "", resize_input]
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Resize", inputs, ["y"], mode=mode, antialias=1),
        ],
        "antialias",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 20, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(
    ("mode", "resize_input", "target"),
    [
        ("linear", "scales", np.array([1, 1, 0.5, 0.5], np.float32)),
        ("cubic", "scales", np.array([1, 1, 0.4, 1.0], np.float32)),
        ("linear", "sizes", np.array([1, 3, 7, 10], np.int64)),
    ],
)
def test_antialiased_resize_runs_as_onnx_defines_it(mode, resize_input, target) -> None:
    """OpenVINO 2026.4's antialiased Interpolate is 0.43 of the output range away from ONNX's Resize (2x
    bilinear), so the host reference and the intel-vpu IR were wrong alike (the FP16 IR "passed"). As two
    MatMuls by constant matrices (:func:`antialias_resizes_as_matmuls`), the host runner gives the onnx
    reference evaluator's values, and so does the form the intel-vpu target converts."""
    from edgekit.core.qdq_forms import antialias_resizes_as_matmuls, for_openvino

    model = antialias_model(mode, resize_input, target)
    ops = [n.op_type for n in for_openvino(model).graph.node]
    assert "Resize" not in ops and ops.count("MatMul") == (1 if mode == "cubic" else 2)
    assert (
        antialias_resizes_as_matmuls(antialias_model("nearest", resize_input, target)).graph.node[1].op_type
        == "Resize"
    )
    x = np.random.default_rng(9).standard_normal((1, 2, 20, 24)).astype(np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    got = HostRunner(model).run({"x": x})["y"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=1e-5 * np.ptp(expected))


def _nms_tail(opset: int) -> onnx.ModelProto:
    """paddle2onnx 1.x's multiclass_nms3 tail in small: NonMaxSuppression's [N, 3] selection, its box column
    gathered as [N, 1], then a Squeeze without axes (N known only at run time), the boxes gathered by it."""
    inits = [
        numpy_helper.from_array(np.array([2], np.int64), "col"),
        numpy_helper.from_array(np.array([10], np.int64), "keep"),
        numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.1], np.float32), "score"),
        numpy_helper.from_array(np.array([6, 4], np.int64), "flat"),
    ]
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "keep", "iou", "score"], ["sel"]),
        helper.make_node("Gather", ["sel", "col"], ["box_col"], axis=1),
        helper.make_node("Squeeze", ["box_col"], ["box_index"]),
        helper.make_node("Reshape", ["boxes", "flat"], ["boxes_2d"]),
        helper.make_node("Gather", ["boxes_2d", "box_index"], ["kept"], axis=0),
    ]
    graph = helper.make_graph(
        nodes,
        "nms_tail",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 6, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 6]),
        ],
        [helper.make_tensor_value_info("kept", TensorProto.FLOAT, [-1, 4])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [11, 13])
def test_host_runner_runs_a_squeeze_without_axes_after_a_selection(opset) -> None:
    """OpenVINO cannot compile a Squeeze without axes on a dim it cannot size ("Squeeze operation with dynamic
    rank"): `edgekit quantize` refused paddle2onnx 1.x's multiclass_nms3 exports. The runner names the size-1
    dims as the axes (opset 11: the attribute; 13: the input) and computes what onnxruntime computes."""
    ort = pytest.importorskip("onnxruntime")
    proto = _nms_tail(opset)
    rng = np.random.default_rng(3)
    corner = rng.uniform(0, 20, (1, 6, 2)).astype(np.float32)
    feeds = {
        "boxes": np.concatenate([corner, corner + rng.uniform(2, 8, (1, 6, 2)).astype(np.float32)], -1),
        "scores": rng.uniform(0, 1, (1, 1, 6)).astype(np.float32),
    }
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]
    assert want.shape[0] > 1
    got = HostRunner(proto).run(feeds)["kept"]
    np.testing.assert_array_equal(got, want)


def test_a_squeeze_with_axes_or_a_known_shape_is_left_as_it_is() -> None:
    from edgekit.core.runtime import squeeze_axes_written

    for axes in (True, False):
        graph = helper.make_graph(
            [helper.make_node("Squeeze", ["x", "axes"] if axes else ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 1, 4] if axes else [2, 1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.array([1], np.int64), "axes")] if axes else [],
        )
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        assert squeeze_axes_written(proto) is proto
