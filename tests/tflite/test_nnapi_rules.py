"""NNAPI delegate compatibility rules over real .tflite models built with the schema object API.

Every fixture is first checked to load (and, apart from the custom op, run) in the LiteRT interpreter,
so the decisions below are about genuine models. The expected decisions follow the TFLite NNAPI
delegate's ``Validate`` and its operand building (see docs/nnapi.md for the sources).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from edgekit.core.errors import ModelError, TargetError
from edgekit.targets.tflite.nnapi import (
    check_nnapi,
    delegated_partitions,
    is_fully_integer,
    render_summary,
    rule,
)
from rich.console import Console
from tfl_builder import TflBuilder, one_op, options

RNG = np.random.default_rng(0)


# --- fixtures: small models -------------------------------------------------------------------


def conv_int8_per_channel(dilation: int = 1, weight_axis: int = 0) -> bytes:
    """int8 CONV_2D (per-channel weights) -> RESHAPE -> SOFTMAX, the shape of a quantized classifier."""
    b = TflBuilder()
    x = b.input("x", [1, 8, 8, 3], "int8", scale=0.02, zero_point=-3)
    scales = [0.01, 0.02, 0.03]
    w = b.tensor(
        "w", [3, 3, 3, 3], "int8", data=RNG.integers(-127, 128, (3, 3, 3, 3)), scale=scales, axis=weight_axis
    )
    bias = b.tensor("b", [3], "int32", data=RNG.integers(-50, 50, 3), scale=[0.02 * s for s in scales])
    y = b.tensor("y", [1, 8, 8, 3], "int8", scale=0.05, zero_point=-10)
    conv = options("Conv2DOptions", padding=0, strideW=1, strideH=1, fusedActivationFunction=1)
    conv.dilationWFactor = conv.dilationHFactor = dilation
    b.op("CONV_2D", [x, w, bias], [y], conv, version=3)
    r = b.tensor("r", [1, 192], "int8", scale=0.05, zero_point=-10)
    b.op(
        "RESHAPE",
        [y, b.tensor("shape", [2], "int32", data=[1, 192])],
        [r],
        options("ReshapeOptions", newShape=[1, 192]),
    )
    s = b.output(b.tensor("probs", [1, 192], "int8", scale=1 / 256, zero_point=-128))
    b.op("SOFTMAX", [r], [s], options("SoftmaxOptions", beta=1.0), version=2)
    return b.build()


def float_add(activation: int = 0, rank: int = 2, signature: list[int] | None = None) -> bytes:
    shape = [1] * (rank - 1) + [4]
    b = TflBuilder()
    x = b.input("x", shape, shape_signature=signature)
    c = b.tensor("c", shape, data=np.arange(4.0))
    y = b.output(b.tensor("y", shape, shape_signature=signature))
    b.op("ADD", [x, c], [y], options("AddOptions", fusedActivationFunction=activation))
    return b.build()


def int8_add_squeeze() -> bytes:
    """int8 ADD (converted to uint8 by the delegate below level 4) then int8 SQUEEZE (not converted)."""
    b = TflBuilder()
    x = b.input("x", [1, 1, 4], "int8", scale=0.1, zero_point=1)
    c = b.tensor("c", [1, 1, 4], "int8", data=[1, 2, 3, 4], scale=0.1, zero_point=1)
    y = b.tensor("y", [1, 1, 4], "int8", scale=0.2, zero_point=0)
    b.op("ADD", [x, c], [y], options("AddOptions"), version=2)
    z = b.output(b.tensor("z", [4], "int8", scale=0.2, zero_point=0))
    b.op("SQUEEZE", [y], [z], options("SqueezeOptions", squeezeDims=[0, 1]))
    return b.build()


def add_square_add() -> bytes:
    """Two branches: ADD -> SQUARE (not mapped by NNAPI) and an independent ADD, joined by a third ADD.

    Execution order is ADD, SQUARE, ADD, ADD. The greedy partitioner puts the two independent ADDs in
    one partition; only the joining ADD, which waits for SQUARE, forms a second one.
    """
    b = TflBuilder()
    x = b.input("x", [1, 4])
    c = b.tensor("c", [1, 4], data=np.ones(4))
    a = b.tensor("a", [1, 4])
    b.op("ADD", [x, c], [a], options("AddOptions"))
    sq = b.tensor("sq", [1, 4])
    b.op("SQUARE", [a], [sq])
    other = b.tensor("other", [1, 4])
    b.op("ADD", [x, c], [other], options("AddOptions"))
    y = b.output(b.tensor("y", [1, 4]))
    b.op("ADD", [sq, other], [y], options("AddOptions"))
    return b.build()


def chain_with_breaks(runs: list[int]) -> bytes:
    """A chain of float ADD runs of the given lengths, separated by single SQUARE ops."""
    b = TflBuilder()
    t = b.input("x", [1, 4])
    c = b.tensor("c", [1, 4], data=np.ones(4))
    for r, length in enumerate(runs):
        if r:
            nxt = b.tensor(f"sq{r}", [1, 4])
            b.op("SQUARE", [t], [nxt])
            t = nxt
        for i in range(length):
            nxt = b.tensor(f"a{r}_{i}", [1, 4])
            b.op("ADD", [t, c], [nxt], options("AddOptions"))
            t = nxt
    b.output(t)
    return b.build()


def custom_between() -> bytes:
    b = TflBuilder()
    x = b.input("x", [1, 4])
    c = b.tensor("c", [1, 4], data=np.ones(4))
    a = b.tensor("a", [1, 4])
    b.op("ADD", [x, c], [a], options("AddOptions"))
    m = b.tensor("m", [1, 4])
    b.op("CUSTOM", [a], [m], custom_code="EdgekitTestOp")
    y = b.output(b.tensor("y", [1, 4]))
    b.op("ADD", [m, c], [y], options("AddOptions"))
    return b.build()


def reshape_runtime_shape(shape_from: str = "input") -> bytes:
    """ADD -> RESHAPE -> ADD, the shape from a graph input (run time), a constant, or a SHAPE op."""
    b = TflBuilder()
    x = b.input("x", [1, 4])
    c = b.tensor("c", [1, 4], data=np.ones(4))
    a = b.tensor("a", [1, 4])
    b.op("ADD", [x, c], [a], options("AddOptions"))
    if shape_from == "input":
        s = b.input("s", [2], "int32")
    elif shape_from == "constant":
        s = b.tensor("s", [2], "int32", data=[2, 2])
    else:
        s = b.tensor("s", [2], "int32")
        b.op(
            "SHAPE",
            [b.tensor("like", [2, 2], data=np.zeros((2, 2)))],
            [s],
            options("ShapeOptions", outType=2),
        )
    r = b.tensor("r", [2, 2])
    b.op("RESHAPE", [a, s], [r], options("ReshapeOptions"))
    y = b.output(b.tensor("y", [2, 2]))
    b.op("ADD", [r, b.tensor("c2", [2, 2], data=np.ones((2, 2)))], [y], options("AddOptions"))
    return b.build()


def fc_int8(per_channel: bool = False, keep_num_dims: bool = False) -> bytes:
    b = TflBuilder()
    x = b.input("x", [1, 4], "int8", scale=0.1, zero_point=0)
    scales = [0.1, 0.2, 0.3] if per_channel else 0.1
    w = b.tensor("w", [3, 4], "int8", data=RNG.integers(-127, 128, (3, 4)), scale=scales)
    bias = b.tensor("b", [3], "int32", data=np.zeros(3), scale=np.atleast_1d(scales) * 0.1)
    y = b.output(b.tensor("y", [1, 3], "int8", scale=0.2, zero_point=0))
    b.op(
        "FULLY_CONNECTED",
        [x, w, bias],
        [y],
        options("FullyConnectedOptions", keepNumDims=keep_num_dims),
        version=5,
    )
    return b.build()


def resize_bilinear(half_pixel: bool) -> bytes:
    b = TflBuilder()
    x = b.input("x", [1, 2, 2, 1])
    size = b.tensor("size", [2], "int32", data=[4, 4])
    y = b.output(b.tensor("y", [1, 4, 4, 1]))
    opts = options("ResizeBilinearOptions", halfPixelCenters=half_pixel)
    b.op("RESIZE_BILINEAR", [x, size], [y], opts, version=3 if half_pixel else 1)
    return b.build()


def softmax_rank3_float(beta: float = 1.0) -> bytes:
    b = TflBuilder()
    x = b.input("x", [1, 2, 5])
    b.op("SOFTMAX", [x], [b.output(b.tensor("y", [1, 2, 5]))], options("SoftmaxOptions", beta=beta))
    return b.build()


def mean_int8() -> bytes:
    b = TflBuilder()
    x = b.input("x", [1, 4, 4, 8], "int8", scale=0.1, zero_point=-5)
    axes = b.tensor("axes", [2], "int32", data=[1, 2])
    y = b.output(b.tensor("y", [1, 1, 1, 8], "int8", scale=0.1, zero_point=-5))
    b.op("MEAN", [x, axes], [y], options("ReducerOptions", keepDims=True), version=2)
    return b.build()


def quantize_float_io() -> bytes:
    """float input -> QUANTIZE -> int8 ADD -> DEQUANTIZE -> float output (the arm-cpu style edges)."""
    b = TflBuilder()
    x = b.input("x", [1, 4])
    q = b.tensor("q", [1, 4], "int8", scale=0.05, zero_point=0)
    b.op("QUANTIZE", [x], [q])
    c = b.tensor("c", [1, 4], "int8", data=[1, 2, 3, 4], scale=0.05, zero_point=0)
    s = b.tensor("s", [1, 4], "int8", scale=0.1, zero_point=3)
    b.op("ADD", [q, c], [s], options("AddOptions"), version=2)
    b.op("DEQUANTIZE", [s], [b.output(b.tensor("y", [1, 4]))], version=2)
    return b.build()


def concat(rank: int = 4, activation: int = 0) -> bytes:
    shape = [1] * (rank - 1) + [2]
    out = [1] * (rank - 1) + [4]
    b = TflBuilder()
    x1, x2 = b.input("x1", shape), b.input("x2", shape)
    opts = options("ConcatenationOptions", axis=rank - 1, fusedActivationFunction=activation)
    b.op("CONCATENATION", [x1, x2], [b.output(b.tensor("y", out))], opts)
    return b.build()


def average_pool_uint8(window: int) -> bytes:
    b = TflBuilder()
    x = b.input("x", [1, window, window, 2], "uint8", scale=0.1, zero_point=128)
    y = b.output(b.tensor("y", [1, 1, 1, 2], "uint8", scale=0.1, zero_point=128))
    opts = options("Pool2DOptions", padding=1, strideW=1, strideH=1, filterWidth=window, filterHeight=window)
    b.op("AVERAGE_POOL_2D", [x], [y], opts)
    return b.build()


def float_mul(version: int) -> bytes:
    b = TflBuilder()
    x = b.input("x", [1, 4])
    c = b.tensor("c", [1, 4], data=np.arange(4.0))
    b.op("MUL", [x, c], [b.output(b.tensor("y", [1, 4]))], options("MulOptions"), version=version)
    return b.build()


FIXTURES = {
    "conv_int8_per_channel": conv_int8_per_channel,
    "conv_int8_dilated": lambda: conv_int8_per_channel(dilation=2),
    "conv_int8_axis3": lambda: conv_int8_per_channel(weight_axis=3),
    "float_add": float_add,
    "float_add_tanh": lambda: float_add(activation=4),
    "float_add_rank5": lambda: float_add(rank=5),
    "float_add_dynamic": lambda: float_add(signature=[-1, 4]),
    "int8_add_squeeze": int8_add_squeeze,
    "add_square_add": add_square_add,
    "chain_with_breaks": lambda: chain_with_breaks([3, 1, 2, 4]),
    "reshape_runtime_shape": reshape_runtime_shape,
    "reshape_shape_op": lambda: reshape_runtime_shape("shape_op"),
    "fc_int8": fc_int8,
    "fc_int8_per_channel": lambda: fc_int8(per_channel=True),
    "fc_int8_keep_dims": lambda: fc_int8(keep_num_dims=True),
    "resize_half_pixel": lambda: resize_bilinear(True),
    "softmax_rank3": softmax_rank3_float,
    "softmax_beta0": lambda: softmax_rank3_float(beta=0.0),
    "mean_int8": mean_int8,
    "quantize_float_io": quantize_float_io,
    "concat_rank4": concat,
    "concat_rank5": lambda: concat(rank=5),
    "concat_relu": lambda: concat(activation=1),
    "average_pool_17x17": lambda: average_pool_uint8(17),
    "mul_v3": lambda: float_mul(3),
}


def _feeds(interpreter: Interpreter) -> None:
    for d in interpreter.get_input_details():
        if d["dtype"] == np.int32:
            value = np.array([2, 2], dtype=np.int32)  # the runtime reshape shape
        else:
            value = RNG.integers(-5, 5, d["shape"]).astype(d["dtype"])
        interpreter.set_tensor(d["index"], value)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_runs_in_litert(name):
    interpreter = Interpreter(model_content=FIXTURES[name]())
    interpreter.allocate_tensors()
    _feeds(interpreter)
    interpreter.invoke()
    for d in interpreter.get_output_details():
        assert interpreter.get_tensor(d["index"]).size > 0


def test_custom_op_fixture_is_a_real_model_with_an_unregistered_kernel():
    # LiteRT parses the model and fails only for the missing kernel, which is what a custom op means.
    with pytest.raises(RuntimeError, match="unresolved custom op: EdgekitTestOp"):
        Interpreter(model_content=custom_between()).allocate_tensors()


# --- decisions --------------------------------------------------------------------------------


def test_int8_classifier_fully_delegated_at_level_4():
    report = check_nnapi(conv_int8_per_channel())
    assert [op.op for op in report.ops] == ["CONV_2D", "RESHAPE", "SOFTMAX"]
    assert all(op.supported and op.delegated and not op.reasons for op in report.ops)
    assert (report.partitions, report.delegated_partitions, report.delegated_ops) == (1, 1, 3)
    assert report.fully_delegated


def test_int8_per_channel_conv_needs_level_3():
    report = check_nnapi(conv_int8_per_channel(), feature_level=2)
    conv = report.ops[0]
    assert not conv.supported
    assert "input dtype int8 not in [float32, uint8]" in conv.reasons
    assert "per-channel quantized weights need feature level >= 3" in conv.reasons
    # RESHAPE and SOFTMAX on int8 are converted to uint8 by the delegate below level 4.
    assert [op.supported for op in report.ops[1:]] == [True, True]
    assert (report.partitions, report.delegated_ops) == (1, 2)
    assert check_nnapi(conv_int8_per_channel(), feature_level=3).fully_delegated


def test_dilated_conv_needs_level_3():
    model = conv_int8_per_channel(dilation=2)
    assert check_nnapi(model, 3).ops[0].supported
    reasons = check_nnapi(model, 2).ops[0].reasons
    assert "dilated CONV_2D needs feature level >= 3, target is 2" in reasons


def test_per_channel_axis_must_be_the_nnapi_channel_dim():
    report = check_nnapi(conv_int8_per_channel(weight_axis=3))
    conv = report.ops[0]
    assert not conv.supported and conv.breaks_delegation
    assert conv.reasons == ("per-channel weights 'w' on axis 3, NNAPI needs axis 0",)
    assert report.delegated_ops == 0 and report.to_json()["delegation_fails"] is True


def test_per_channel_fully_connected_is_refused():
    assert check_nnapi(fc_int8()).ops[0].supported
    report = check_nnapi(fc_int8(per_channel=True))
    fc = report.ops[0]
    assert fc.reasons == ("per-channel quantized input 'w' is not allowed on FULLY_CONNECTED in NNAPI",)
    assert fc.breaks_delegation and report.delegated_ops == 0


def test_fully_connected_keep_num_dims_needs_level_4():
    assert check_nnapi(fc_int8(keep_num_dims=True), 4).ops[0].supported
    assert check_nnapi(fc_int8(keep_num_dims=True), 3).ops[0].reasons == (
        "keep_num_dims needs feature level >= 4, target is 3",
    )


def test_int8_signed_operands_need_level_4_unless_converted():
    at4, at3 = check_nnapi(int8_add_squeeze(), 4), check_nnapi(int8_add_squeeze(), 3)
    assert at4.fully_delegated
    add, squeeze = at3.ops
    assert add.supported  # ADD is in the delegate's int8 -> uint8 conversion list
    assert not squeeze.supported
    assert "TENSOR_QUANT8_ASYMM_SIGNED (feature level >= 4)" in squeeze.reasons[0]
    # SQUEEZE passes Validate, so it is in the partition; NNAPI then refuses its QUANT8_SYMM operands
    # while the delegate builds the model, and the failed delegation leaves everything on the CPU.
    assert squeeze.breaks_delegation and not add.breaks_delegation
    assert (at3.partitions, at3.delegated_partitions, at3.delegated_ops) == (1, 0, 0)
    assert "the delegation fails and all 2 ops run on the CPU" in at3.summary
    assert "#1 SQUEEZE" in at3.summary


@pytest.mark.parametrize("level", range(1, 9))
def test_float_add_supported_at_every_level(level):
    report = check_nnapi(float_add(), level)
    assert report.fully_delegated
    assert report.android_api == {1: 27, 2: 28, 3: 29, 4: 30, 5: 31, 6: 33, 7: 34, 8: 35}[level]


def test_fused_tanh_has_no_nnapi_fuse_code():
    op = check_nnapi(float_add(activation=4)).ops[0]
    assert op.reasons == ("fused activation TANH has no NNAPI FuseCode",)
    assert op.breaks_delegation


def test_add_rank_above_4_is_refused():
    assert check_nnapi(float_add(rank=5)).ops[0].reasons == ("input rank 5 > 4",)


def test_dynamic_signature_is_compiled_for_the_static_shape():
    op = check_nnapi(float_add(signature=[-1, 4])).ops[0]
    assert op.supported
    assert any("shape_signature [-1, 4]" in note and "shape [1, 4]" in note for note in op.notes)


def test_runtime_sized_tensor_fails_the_whole_delegation():
    report = check_nnapi(reshape_runtime_shape("input"))
    reshape = report.ops[1]
    assert reshape.reasons == ("shape (input 1) must be constant",)
    assert [op.supported for op in report.ops] == [True, False, True]
    # The RESHAPE output is sized at run time; TFLite refuses the NNAPI delegate (no dynamic tensors).
    assert report.dynamic_tensors == ("#1 RESHAPE output 'r' (its input 's' is not a constant)",)
    assert report.delegation_fails and report.delegated_ops == 0 and report.delegated_partitions == 0
    assert report.partitions == 2
    assert "dynamic-sized tensors" in report.summary
    assert report.to_json()["dynamic_tensors"] == list(report.dynamic_tensors)


def test_constant_or_shape_op_shapes_are_static():
    assert check_nnapi(reshape_runtime_shape("constant")).fully_delegated
    report = check_nnapi(reshape_runtime_shape("shape_op"))  # SHAPE fills its output at Prepare
    assert report.dynamic_tensors == ()
    shape_op, reshape = report.ops[1], report.ops[2]
    assert shape_op.reasons == ("SHAPE is not an operation the NNAPI delegate maps",)
    assert reshape.reasons == ("shape (input 1) must be constant",)  # persistent, but not a constant
    assert (report.partitions, report.delegated_ops) == (2, 2)


def test_custom_op_is_not_delegated_and_splits_the_graph():
    report = check_nnapi(custom_between())
    custom = report.ops[1]
    assert not custom.breaks_delegation  # Validate refuses it: it stays out of the partitions
    assert custom.op == "CUSTOM:EdgekitTestOp"
    assert custom.reasons == ("custom op 'EdgekitTestOp' is not an operation the NNAPI delegate maps",)
    assert (report.partitions, report.delegated_partitions, report.delegated_ops) == (2, 2, 2)


def test_greedy_partitioning_merges_independent_branches():
    report = check_nnapi(add_square_add())
    assert [op.supported for op in report.ops] == [True, False, True, True]
    # A run-in-execution-order count would give 3; TFLite's partitioner schedules ADD #2 with ADD #0.
    assert report.partitions == 2


def test_partition_limit_keeps_the_three_largest():
    report = check_nnapi(chain_with_breaks([3, 1, 2, 4]))
    assert (report.partitions, report.delegated_partitions) == (4, 3)
    assert report.delegated_ops == 3 + 2 + 4
    single = [op for op in report.ops if op.supported and not op.delegated]
    assert [op.index for op in single] == [4]  # the 1-op run is the one left on the CPU
    kinds = ", ".join(report.cpu_op_kinds)
    assert report.summary.endswith(
        f"{len(report.cpu_ops)} op(s) on the CPU: {kinds} and 1 supported op(s) of partitions not taken"
    )
    assert "not among the 3 largest" in report.why_on_cpu(single[0])
    unlimited = check_nnapi(chain_with_breaks([3, 1, 2, 4]), max_partitions=0)
    assert (unlimited.delegated_partitions, unlimited.delegated_ops) == (4, 10)


def test_resize_half_pixel_centers_needs_level_4():
    assert check_nnapi(resize_bilinear(True), 4).ops[0].supported
    reasons = check_nnapi(resize_bilinear(True), 3).ops[0].reasons
    assert reasons == ("half_pixel_centers needs feature level >= 4",)
    assert check_nnapi(resize_bilinear(False), 3).ops[0].supported


def test_softmax_rank_3_needs_level_3():
    assert check_nnapi(softmax_rank3_float(), 3).ops[0].supported
    assert check_nnapi(softmax_rank3_float(), 2).ops[0].reasons == (
        "input rank 3: below feature level 3 only rank 2 and 4",
    )


def test_softmax_beta_must_be_positive_for_nnapi():
    op = check_nnapi(softmax_rank3_float(beta=0.0)).ops[0]
    assert op.reasons == ("SOFTMAX beta 0.0 must be > 0 for NNAPI",)
    assert op.breaks_delegation  # the delegate's Validate does not look at beta


def test_quantized_mean_needs_level_3():
    assert check_nnapi(mean_int8(), 3).ops[0].supported
    assert check_nnapi(mean_int8(), 2).ops[0].reasons == ("input dtype int8 not in [float32]",)
    assert check_nnapi(mean_int8(), 1).ops[0].reasons[0] == "needs NNAPI feature level >= 2, target is 1"


def test_quantized_average_pool_window_limit_applies_below_level_3():
    # With default options the delegate targets the device accelerators from level 3 on
    # (disallow_nnapi_cpu), and the 256-element window limit protects only the reference CPU path.
    assert check_nnapi(average_pool_uint8(16), 2).ops[0].supported
    reasons = check_nnapi(average_pool_uint8(17), 2).ops[0].reasons
    assert reasons == ("quantized filter window 289 > 256 overflows the reference CPU path",)
    assert check_nnapi(average_pool_uint8(17), 3).ops[0].supported


def test_mul_version_3_needs_a_targeted_accelerator():
    assert check_nnapi(float_mul(3), 2).ops[0].reasons == (
        "op version 3 is above 2, the highest the delegate maps",
    )
    assert check_nnapi(float_mul(3), 3).ops[0].supported
    assert check_nnapi(float_mul(4), 4).ops[0].reasons == (
        "op version 4 is above 3, the highest the delegate maps",
    )


def test_concatenation_constraints():
    assert check_nnapi(concat()).ops[0].supported
    assert check_nnapi(concat(rank=5)).ops[0].reasons == ("input rank 5 > 4",)
    assert check_nnapi(concat(activation=1)).ops[0].reasons == (
        "fused activation RELU is not supported here",
    )


def test_quantize_dequantize_edges():
    at4, at3 = check_nnapi(quantize_float_io(), 4), check_nnapi(quantize_float_io(), 3)
    assert at4.fully_delegated
    quantize, add, dequantize = at3.ops
    assert quantize.reasons[0] == "output dtype int8 not in [uint8]"
    assert add.supported
    # At level 3 the delegate hands int8 to NNAPI's DEQUANTIZE as QUANT8_SYMM: zero point 0 only.
    assert dequantize.reasons == ("at feature level 3 an int8 input must be symmetric (zero point 0)",)


# --- fully integer check ----------------------------------------------------------------------


def test_fully_integer_model_has_no_float():
    assert is_fully_integer(conv_int8_per_channel()) == []
    assert is_fully_integer(int8_add_squeeze()) == []


def test_float_edges_are_listed():
    found = is_fully_integer(quantize_float_io())
    assert found == [
        "model input 'x' is float32",
        "#0 QUANTIZE: input 'x' is float32",
        "#2 DEQUANTIZE: output 'y' is float32",
        "model output 'y' is float32",
    ]


# --- report, errors, registry -----------------------------------------------------------------


def test_report_json_and_summary():
    report = check_nnapi(custom_between(), 3)
    data = json.loads(json.dumps(report.to_json()))
    assert data["feature_level"] == 3 and data["android_api"] == 29 and data["nnapi"] == "NNAPI 1.2"
    assert data["op_count"] == 3 and data["delegated_ops"] == 2 and data["partitions"] == 2
    assert data["fully_delegated"] is False
    assert data["unsupported"] == [
        "#1 CUSTOM:EdgekitTestOp: custom op 'EdgekitTestOp' is not an operation the NNAPI delegate maps"
    ]
    assert [op["index"] for op in data["ops"]] == [0, 1, 2]
    assert report.summary == (
        "NNAPI feature level 3 (Android API 29, NNAPI 1.2): 2 partition(s) delegated (2/3 ops), "
        "1 op(s) on the CPU: CUSTOM:EdgekitTestOp"
    )
    assert data["delegated_partition_ops"] == [[0], [2]]
    why = "custom op 'EdgekitTestOp' is not an operation the NNAPI delegate maps"
    assert data["cpu_ops"] == [{"index": 1, "op": "CUSTOM:EdgekitTestOp", "why": why}]


def test_render_summary_lists_each_op_with_its_reason():
    console = Console(width=200, record=True)
    console.print(render_summary(check_nnapi(int8_add_squeeze(), 3)))
    text = console.export_text()
    assert "SQUEEZE" in text and "TENSOR_QUANT8_ASYMM_SIGNED" in text and "ADD" in text
    # reasons holding [brackets] are printed as text, not swallowed as rich markup
    console = Console(width=200, record=True)
    console.print(render_summary(check_nnapi(mean_int8(), 2)))
    assert "input dtype int8 not in [float32]" in console.export_text()


def test_bad_inputs_raise_typed_errors():
    with pytest.raises(ModelError, match="not a TFLite model"):
        check_nnapi(b"this is not a flatbuffer")
    with pytest.raises(ModelError, match="not a TFLite model"):
        is_fully_integer(b"")
    with pytest.raises(TargetError, match="feature level must be one of 1..8, got 9"):
        check_nnapi(float_add(), 9)
    broken = bytearray(float_add())
    broken[8:] = b"\xff" * (len(broken) - 8)
    with pytest.raises(ModelError):
        check_nnapi(bytes(broken))


@pytest.mark.parametrize("fixture", [conv_int8_per_channel, quantize_float_io, add_square_add])
def test_damaged_models_give_a_report_or_a_model_error(fixture):
    # Random byte damage anywhere past the identifier: never anything but a report or a ModelError.
    rng = np.random.default_rng(3)
    base = fixture()
    outcomes = {"report": 0, "error": 0}
    for _ in range(300):
        damaged = bytearray(base)
        for pos in rng.integers(8, len(damaged), size=int(rng.integers(1, 6))):
            damaged[int(pos)] = int(rng.integers(0, 256))
        if rng.random() < 0.2:
            damaged = damaged[: int(rng.integers(8, len(damaged)))]
        try:
            check_nnapi(bytes(damaged))
            is_fully_integer(bytes(damaged))
            outcomes["report"] += 1
        except ModelError:
            outcomes["error"] += 1
    assert outcomes["report"] > 0 and outcomes["error"] > 0


def test_rule_registry_rejects_duplicates():
    from edgekit.targets.tflite import nnapi_ops  # noqa: F401 - its import registers the rules
    from edgekit.targets.tflite.nnapi import RULES

    assert RULES["ADD"].__name__ == "_add_mul"
    with pytest.raises(ValueError, match="duplicate NNAPI rule for ADD"):
        rule("ADD")(lambda check: None)


# --- the partitioner against TFLite's own ---------------------------------------------------------


def random_add_cumsum_graph(rng: np.random.Generator, n: int) -> tuple[bytes, list[bool]]:
    """A random DAG of float ADD (XNNPACK takes it) and CUMSUM (XNNPACK does not) ops."""
    b = TflBuilder()
    x = b.input("x", [1, 4])
    c = b.tensor("c", [1, 4], data=np.ones(4))
    axis = b.tensor("axis", [], "int32", data=[1])
    produced, consumed, kinds = [x], set(), []
    for i in range(n):
        a = produced[int(rng.integers(len(produced)))]
        out = b.tensor(f"t{i}", [1, 4])
        if rng.random() < 0.35:
            b.op("CUMSUM", [a, axis], [out], options("CumsumOptions"))
            kinds.append(False)
        else:
            other = produced[int(rng.integers(len(produced)))] if rng.random() < 0.5 else c
            b.op("ADD", [a, other], [out], options("AddOptions"))
            kinds.append(True)
            consumed.add(other)
        consumed.add(a)
        produced.append(out)
    for t in produced[1:]:
        if t not in consumed or t == produced[-1]:
            b.output(t)
    return b.build(), kinds


def test_partitions_match_tflite_partitioner_seen_through_xnnpack():
    # LiteRT applies XNNPACK by default through the same delegate partitioning code
    # (PreviewDelegatePartitioning / ReplaceNodeSubsetsWithDelegateKernels); each partition it takes
    # becomes one DELEGATE node. XNNPACK takes float ADD and not CUMSUM, so feeding our partitioner
    # the same support mask must give the same number of partitions.
    rng = np.random.default_rng(7)
    for _ in range(40):
        model, takes = random_add_cumsum_graph(rng, int(rng.integers(4, 16)))
        interpreter = Interpreter(model_content=model)
        interpreter.allocate_tensors()
        litert = sum(op["op_name"] == "DELEGATE" for op in interpreter._get_ops_details())
        assert len(delegated_partitions(model, takes)) == litert


# --- opt-in: the converter's real SqueezeNet ----------------------------------------------------

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


@pytest.mark.shared
@pytest.mark.skipif(
    os.environ.get("EDGEKIT_SHARED") != "1", reason="needs ../shared; opt in with EDGEKIT_SHARED=1"
)
def test_shared_squeezenet_int8_is_fully_integer_and_delegated():
    from edgekit.core.data import Sample
    from edgekit.core.model import load_model
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize
    from edgekit.targets.tflite.converter import ConvertOptions, convert

    model = load_model(SHARED / "models" / "squeezenet1.1-fp32.onnx")
    name = model.graph.inputs[0].name
    calib = [
        Sample({name: RNG.uniform(0, 255, (1, 3, 224, 224)).astype(np.float32)}, None, str(i))
        for i in range(4)
    ]
    qdq = quantize(model, calib, QuantizeOptions(activations="int8", float_output_heads=False)).proto()
    data = convert(qdq, ConvertOptions(io_dtype="int8", target="nnapi")).data
    assert is_fully_integer(data) == []
    at4, at2 = check_nnapi(data, 4), check_nnapi(data, 2)
    assert at4.fully_delegated and at4.delegated_partitions == 1
    # NNAPI 1.1 has no signed int8 convolution: the CONV_2D ops stay on the CPU.
    assert {op.op for op in at2.unsupported} >= {"CONV_2D"}


# --- one-op models: the lowest feature level at which the delegate takes each op ------------------


def f32(*values, shape=None):
    return np.array(values, dtype=np.float32).reshape(shape or (len(values),))


def i32(*values, shape=None):
    return np.array(values, dtype=np.int32).reshape(shape if shape is not None else (len(values),))


def conv_weights(shape, dtype="float32"):
    return RNG.integers(-3, 4, shape).astype(dtype)


POOL = {"padding": 1, "strideW": 1, "strideH": 1, "filterWidth": 2, "filterHeight": 2}
CONV = {"padding": 0, "strideW": 1, "strideH": 1, "dilationWFactor": 1, "dilationHFactor": 1}
X4 = [1, 4, 4, 2]

# name: (model, lowest feature level that takes it, or None for never)
# fmt: off
ONE_OP_CASES = {
    "ADD": (lambda: one_op("ADD", [[1, 4], f32(1, 2, 3, 4, shape=(1, 4))], [[1, 4]], options("AddOptions")), 1),
    "SUB": (lambda: one_op("SUB", [[1, 4], [1, 4]], [[1, 4]], options("SubOptions")), 2),
    "MUL": (lambda: one_op("MUL", [[1, 4], [1, 4]], [[1, 4]], options("MulOptions")), 1),
    "DIV": (lambda: one_op("DIV", [[1, 4], f32(1, 2, 3, 4, shape=(1, 4))], [[1, 4]], options("DivOptions")), 2),
    "MAXIMUM": (lambda: one_op("MAXIMUM", [[1, 4], [1, 4]], [[1, 4]]), 3),
    "MINIMUM": (lambda: one_op("MINIMUM", [[1, 4], [1, 4]], [[1, 4]]), 3),
    "POW": (lambda: one_op("POW", [[1, 4], f32(2, 2, 2, 2, shape=(1, 4))], [[1, 4]]), 3),
    "SQUARED_DIFFERENCE": (lambda: one_op("SQUARED_DIFFERENCE", [[1, 4], [1, 4]], [[1, 4]]), 2),
    "RELU": (lambda: one_op("RELU", [[1, 4]], [[1, 4]]), 1),
    "RELU6": (lambda: one_op("RELU6", [[1, 4]], [[1, 4]]), 1),
    "LOGISTIC": (lambda: one_op("LOGISTIC", [[1, 4]], [[1, 4]]), 1),
    "TANH": (lambda: one_op("TANH", [[1, 4]], [[1, 4]]), 1),
    "HARD_SWISH": (lambda: one_op("HARD_SWISH", [[1, 4]], [[1, 4]]), 1),
    "LEAKY_RELU": (lambda: one_op("LEAKY_RELU", [[1, 4]], [[1, 4]], options("LeakyReluOptions", alpha=0.1)), 3),
    "PRELU": (lambda: one_op("PRELU", [[1, 4], f32(0.1, 0.2, 0.3, 0.4)], [[1, 4]]), 3),
    "ELU": (lambda: one_op("ELU", [[1, 4]], [[1, 4]]), 4),
    "EXP": (lambda: one_op("EXP", [[1, 4]], [[1, 4]]), 3),
    "LOG": (lambda: one_op("LOG", [[1, 4]], [[1, 4]]), 3),
    "SQRT": (lambda: one_op("SQRT", [[1, 4]], [[1, 4]]), 3),
    "RSQRT": (lambda: one_op("RSQRT", [[1, 4]], [[1, 4]]), 3),
    "ABS": (lambda: one_op("ABS", [[1, 4]], [[1, 4]]), 3),
    "NEG": (lambda: one_op("NEG", [[1, 4]], [[1, 4]]), 3),
    "FLOOR": (lambda: one_op("FLOOR", [[1, 4]], [[1, 4]]), 1),
    "MAX_POOL_2D": (lambda: one_op("MAX_POOL_2D", [X4], [X4], options("Pool2DOptions", **POOL)), 1),
    "AVERAGE_POOL_2D": (lambda: one_op("AVERAGE_POOL_2D", [X4], [X4], options("Pool2DOptions", **POOL)), 1),
    "MEAN": (lambda: one_op("MEAN", [X4, i32(1, 2)], [[1, 1, 1, 2]], options("ReducerOptions", keepDims=True)), 2),
    "SUM": (lambda: one_op("SUM", [X4, i32(1, 2)], [[1, 1, 1, 2]], options("ReducerOptions", keepDims=True)), 3),
    "REDUCE_MAX": (lambda: one_op("REDUCE_MAX", [X4, i32(1, 2)], [[1, 1, 1, 2]], options("ReducerOptions", keepDims=True)), 3),
    "RESHAPE": (lambda: one_op("RESHAPE", [[1, 4], i32(2, 2)], [[2, 2]], options("ReshapeOptions", newShape=[2, 2])), 1),
    "SQUEEZE": (lambda: one_op("SQUEEZE", [[1, 1, 4]], [[4]], options("SqueezeOptions", squeezeDims=[0, 1])), 2),
    "EXPAND_DIMS": (lambda: one_op("EXPAND_DIMS", [[1, 4], i32(0, shape=())], [[1, 1, 4]]), 3),
    "TRANSPOSE": (lambda: one_op("TRANSPOSE", [[1, 2, 3], i32(2, 1, 0)], [[3, 2, 1]]), 2),
    "CONCATENATION": (lambda: one_op("CONCATENATION", [[1, 2], [1, 2]], [[1, 4]], options("ConcatenationOptions", axis=1)), 1),
    "SPLIT": (lambda: one_op("SPLIT", [i32(1, shape=()), [1, 4]], [[1, 2], [1, 2]], options("SplitOptions", numSplits=2)), 3),
    "SLICE": (lambda: one_op("SLICE", [[1, 4], i32(0, 1), i32(1, 2)], [[1, 2]]), 3),
    "STRIDED_SLICE": (lambda: one_op("STRIDED_SLICE", [[1, 4], i32(0, 1), i32(1, 3), i32(1, 1)], [[1, 2]], options("StridedSliceOptions")), 2),
    "PAD": (lambda: one_op("PAD", [[1, 4], i32(0, 0, 1, 1, shape=(2, 2))], [[1, 6]]), 2),
    "PADV2": (lambda: one_op("PADV2", [[1, 4], i32(0, 0, 1, 1, shape=(2, 2)), f32(0.5, shape=())], [[1, 6]]), 3),
    "GATHER": (lambda: one_op("GATHER", [[3, 4], i32(2, 0)], [[2, 4]], options("GatherOptions", axis=0)), 3),
    "TILE": (lambda: one_op("TILE", [[1, 4], i32(2, 1)], [[2, 4]]), 3),
    "SPACE_TO_DEPTH": (lambda: one_op("SPACE_TO_DEPTH", [[1, 4, 4, 1]], [[1, 2, 2, 4]], options("SpaceToDepthOptions", blockSize=2)), 1),
    "DEPTH_TO_SPACE": (lambda: one_op("DEPTH_TO_SPACE", [[1, 2, 2, 4]], [[1, 4, 4, 1]], options("DepthToSpaceOptions", blockSize=2)), 1),
    "RESIZE_BILINEAR": (lambda: one_op("RESIZE_BILINEAR", [[1, 2, 2, 1], i32(4, 4)], [[1, 4, 4, 1]], options("ResizeBilinearOptions")), 1),
    "RESIZE_NEAREST_NEIGHBOR": (lambda: one_op("RESIZE_NEAREST_NEIGHBOR", [[1, 2, 2, 1], i32(4, 4)], [[1, 4, 4, 1]], options("ResizeNearestNeighborOptions")), 3),
    "SOFTMAX": (lambda: one_op("SOFTMAX", [[1, 4]], [[1, 4]], options("SoftmaxOptions", beta=1.0)), 1),
    "LOG_SOFTMAX": (lambda: one_op("LOG_SOFTMAX", [[1, 4]], [[1, 4]]), 3),
    "L2_NORMALIZATION": (lambda: one_op("L2_NORMALIZATION", [[1, 1, 1, 4]], [[1, 1, 1, 4]], options("L2NormOptions")), 1),
    "FULLY_CONNECTED": (lambda: one_op("FULLY_CONNECTED", [[1, 4], conv_weights((3, 4)), f32(0, 0, 0)], [[1, 3]], options("FullyConnectedOptions")), 1),
    "CONV_2D": (lambda: one_op("CONV_2D", [X4, conv_weights((3, 1, 1, 2)), f32(0, 0, 0)], [[1, 4, 4, 3]], options("Conv2DOptions", **CONV)), 1),
    "DEPTHWISE_CONV_2D": (lambda: one_op("DEPTHWISE_CONV_2D", [X4, conv_weights((1, 3, 3, 2)), f32(0, 0)], [X4], options("DepthwiseConv2DOptions", depthMultiplier=1, **CONV)), 1),
    "TRANSPOSE_CONV": (lambda: one_op("TRANSPOSE_CONV", [i32(1, 4, 4, 1), conv_weights((1, 3, 3, 2)), X4], [[1, 4, 4, 1]], options("TransposeConvOptions", strideW=1, strideH=1)), 3),
    "BATCH_MATMUL": (lambda: one_op("BATCH_MATMUL", [[1, 2, 3], conv_weights((1, 3, 4))], [[1, 2, 4]], options("BatchMatMulOptions")), 6),
    "ARG_MAX": (lambda: one_op("ARG_MAX", [[1, 4], i32(1)], [([1], "int32")], options("ArgMaxOptions", outputType=2)), 3),
    "CAST": (lambda: one_op("CAST", [[1, 4]], [([1, 4], "int32")]), 3),
    "QUANTIZE to uint8": (lambda: one_op("QUANTIZE", [[1, 4]], [([1, 4], "uint8")]), 3),
    "GELU": (lambda: one_op("GELU", [[1, 4]], [[1, 4]], options("GeluOptions")), None),
    "SQUARE": (lambda: one_op("SQUARE", [[1, 4]], [[1, 4]]), None),
    # int8 (TFLite's full-integer scheme): below level 4 only the delegate's int8 -> uint8 list.
    "int8 ADD": (lambda: one_op("ADD", [[1, 4], [1, 4]], [[1, 4]], options("AddOptions"), 2, "int8"), 1),
    "int8 CONCATENATION": (lambda: one_op("CONCATENATION", [[1, 2], [1, 2]], [[1, 4]], options("ConcatenationOptions", axis=1), 2, "int8"), 1),
    "int8 MAX_POOL_2D": (lambda: one_op("MAX_POOL_2D", [X4], [X4], options("Pool2DOptions", **POOL), 2, "int8"), 1),
    "int8 RESHAPE": (lambda: one_op("RESHAPE", [[1, 4], i32(2, 2)], [[2, 2]], options("ReshapeOptions", newShape=[2, 2]), 1, "int8"), 1),
    "int8 TRANSPOSE": (lambda: one_op("TRANSPOSE", [[1, 2, 3], i32(2, 1, 0)], [[3, 2, 1]], None, 2, "int8"), 2),
    "int8 SUB": (lambda: one_op("SUB", [[1, 4], [1, 4]], [[1, 4]], options("SubOptions"), 2, "int8"), 3),
    "int8 TANH": (lambda: one_op("TANH", [[1, 4]], [[1, 4]], None, 2, "int8", {"scale": 1 / 128, "zero_point": 0}), 3),
    "int8 MEAN": (lambda: one_op("MEAN", [X4, i32(1, 2)], [[1, 1, 1, 2]], options("ReducerOptions", keepDims=True), 2, "int8"), 3),
    "int8 PAD": (lambda: one_op("PAD", [[1, 4], i32(0, 0, 1, 1, shape=(2, 2))], [[1, 6]], None, 2, "int8"), 3),
    "int8 RESIZE_BILINEAR": (lambda: one_op("RESIZE_BILINEAR", [[1, 2, 2, 1], i32(4, 4)], [[1, 4, 4, 1]], options("ResizeBilinearOptions"), 2, "int8"), 3),
    "int8 SQUEEZE": (lambda: one_op("SQUEEZE", [[1, 1, 4]], [[4]], options("SqueezeOptions", squeezeDims=[0, 1]), 1, "int8"), 4),
    "int8 SPLIT": (lambda: one_op("SPLIT", [i32(1, shape=()), [1, 4]], [[1, 2], [1, 2]], options("SplitOptions", numSplits=2), 2, "int8"), 4),
    "int8 QUANTIZE from float": (lambda: one_op("QUANTIZE", [([1, 4])], [([1, 4], "int8")]), 4),
    # MobileNetV3's activations in int8: HARD_SWISH (ANEURALNETWORKS_HARD_SWISH from level 4, lowered by the
    # delegate to MUL/ADD/RELU1 below it; the converter writes HardSwish as a CAST/ADD/GATHER table instead, see
    # test_int8_hardswish.py), HardSigmoid as MUL and ADD by int8 scalars; RELU_0_TO_1 has no NNAPI mapping.
    "int8 HARD_SWISH": (lambda: one_op("HARD_SWISH", [[1, 4]], [[1, 4]], None, 1, "int8"), 1),
    "int8 MUL by a scalar": (lambda: one_op("MUL", [[1, 4], np.array(127, np.int8)], [[1, 4]], options("MulOptions"), 2, "int8"), 1),
    "int8 ADD of a scalar": (lambda: one_op("ADD", [[1, 4], np.array(64, np.int8)], [[1, 4]], options("AddOptions"), 2, "int8"), 1),
    "int8 RELU_N1_TO_1": (lambda: one_op("RELU_N1_TO_1", [[1, 4]], [[1, 4]], None, 1, "int8"), 1),
    "int8 LOGISTIC": (lambda: one_op("LOGISTIC", [[1, 4]], [[1, 4]], None, 2, "int8", {"scale": 1 / 256, "zero_point": -128}), 1),
    "RELU_0_TO_1": (lambda: one_op("RELU_0_TO_1", [[1, 4]], [[1, 4]]), None),
}
# fmt: on


@pytest.mark.parametrize("case", sorted(ONE_OP_CASES))
def test_lowest_feature_level_per_op(case):
    build, lowest = ONE_OP_CASES[case]
    model = build()
    interpreter = Interpreter(model_content=model)  # the fixture is a model LiteRT runs
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], RNG.integers(1, 4, d["shape"]).astype(d["dtype"]))
    interpreter.invoke()
    taken = [level for level in range(1, 9) if check_nnapi(model, level).ops[0].supported]
    assert taken == ([] if lowest is None else list(range(lowest, 9))), check_nnapi(model, 1).ops[0].reasons


def test_every_rule_copes_with_odd_operands_at_every_level():
    # Robustness of the rule table itself: each rule meets operators with missing or non-constant
    # operands and odd ranks (as a damaged or unusual model has) and must answer with reasons.
    from edgekit.targets.tflite import nnapi_ops  # noqa: F401 - registers the rules
    from edgekit.targets.tflite.nnapi import RULES, OpView, TensorView, _check_op

    def tensor(i, shape, dtype="float32"):
        return TensorView(index=i, name=f"t{i}", dtype=dtype, shape=shape, signature=None, constant=False)

    shapes = [(), (4,), (1, 4), (1, 2, 2, 3), (1, 1, 1, 1, 4)]
    for name in sorted(RULES):
        for level in range(1, 9):
            for n_inputs in (0, 1, 3):
                for shape in shapes:
                    inputs = tuple(tensor(i, shape, "int8" if i % 2 else "float32") for i in range(n_inputs))
                    op = OpView(index=0, name=name, version=1, inputs=inputs, outputs=(tensor(9, shape),))
                    check = _check_op(op, level)
                    assert all(isinstance(r, str) and r for r in check.reasons)
