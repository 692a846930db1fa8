"""edgekit.core.isolated: a native crash in the child becomes one typed line; the parent survives."""

from __future__ import annotations

import isolated_fns
import numpy as np
import pytest
from edgekit.core import isolated
from edgekit.core.errors import DataError, TargetError, UnsupportedOpError


def test_result_and_arrays_round_trip():
    rng = np.random.default_rng(0)
    arrays = {"x": rng.standard_normal((2, 3, 64, 64)).astype(np.float32), "i": np.arange(5)}
    got = isolated.call(isolated_fns.double, arrays, what="test", doing="doubling")
    assert set(got) == {"x", "i"}
    np.testing.assert_array_equal(got["x"], arrays["x"] * 2)
    np.testing.assert_array_equal(got["i"], arrays["i"] * 2)


def test_child_killed_by_sigabrt_is_a_typed_one_line_error():
    with pytest.raises(TargetError) as info:
        isolated.call(
            isolated_fns.abort_after_message,
            "tensorflow/lite/kernels/gather.cc:80 indices out of range",
            what="LiteRT",
            doing="running the converted model",
        )
    message = str(info.value)
    assert message == (
        "LiteRT aborted (SIGABRT) while running the converted model: "
        "tensorflow/lite/kernels/gather.cc:80 indices out of range"
    )
    assert "\n" not in message


def test_exception_in_child_becomes_its_first_meaningful_line():
    with pytest.raises(DataError) as info:
        isolated.call(isolated_fns.raise_runtime_error, what="LiteRT", doing="verifying", error=DataError)
    assert (
        str(info.value)
        == "LiteRT failed while verifying: tensorflow/lite/kernels/pad.cc:120 zero points differ"
    )


def test_typed_error_in_child_is_reraised_as_is():
    with pytest.raises(UnsupportedOpError) as info:
        isolated.call(isolated_fns.raise_typed, what="x", doing="y")
    assert "unsupported op 'Foo' (node 'node_7') for target 'arm-cpu'" in str(info.value)


def test_openvino_failure_in_a_child_is_named_by_its_summary_line(tmp_path):
    """HostRunner(isolate=True) compiles in a child; OpenVINO's multi-line error becomes its summary item."""
    import onnx
    from edgekit.core.errors import ModelError
    from edgekit.core.runtime import HostRunner
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Scramble", ["x"], ["y"], domain="vendor.ops")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("vendor.ops", 1)]
    )
    onnx.checker.check_model(model)
    with pytest.raises(ModelError) as info:
        HostRunner(model, isolate=True)
    assert str(info.value) == (
        "OpenVINO failed while compiling the model on the host: "
        "No conversion rule found for operations: vendor.ops.Scramble"
    )


def test_each_call_gets_a_fresh_child_and_survives_the_previous_ones_crash():
    import os

    first = isolated.call(isolated_fns.pid, what="test", doing="pid")
    with pytest.raises(TargetError, match=r"aborted \(SIGABRT\)"):
        isolated.call(isolated_fns.abort_after_message, "boom", what="test", doing="aborting")
    second = isolated.call(isolated_fns.pid, what="test", doing="pid")
    assert len({first, second, os.getpid()}) == 3


def test_a_call_that_does_not_finish_is_stopped_and_the_next_one_runs():
    with pytest.raises(TargetError) as info:
        isolated.call(isolated_fns.sleep_long, what="LiteRT", doing="running the converted model", timeout=1)
    assert str(info.value) == "LiteRT did not finish within 1 s while running the converted model"
    assert isolated.call(isolated_fns.double, {"x": np.ones(2)}, what="t", doing="d")["x"].tolist() == [2, 2]


def test_openvino_kernel_failure_at_run_time_names_the_node_and_its_check(tmp_path):
    """OpenVINO's run-time failure starts with the node ("Node /pos/GatherElements of type GatherElements") and
    says what went wrong two lines below, after its source-file header: the one line keeps both (a token
    sequence longer than a position table used to end at the node's name)."""
    import onnx
    from edgekit.core.errors import EdgekitError
    from edgekit.core.runtime import HostRunner
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(8 * 4, dtype=np.float32).reshape(8, 4), "table")
    graph = helper.make_graph(
        [
            helper.make_node("CumSum", ["ids", "axis"], ["pos"]),
            helper.make_node("Unsqueeze", ["pos", "last"], ["pos3"]),
            helper.make_node("Expand", ["pos3", "shape"], ["idx"]),
            helper.make_node("Unsqueeze", ["table", "first"], ["table3"]),
            helper.make_node("GatherElements", ["table3", "idx"], ["y"], axis=1),
        ],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 4])],
        [
            table,
            numpy_helper.from_array(np.array(1, np.int64), "axis"),
            numpy_helper.from_array(np.array([2], np.int64), "last"),
            numpy_helper.from_array(np.array([0], np.int64), "first"),
            numpy_helper.from_array(np.array([1, 12, 4], np.int64), "shape"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    runner = HostRunner(model, isolate=True)
    got = runner.run({"ids": np.zeros((1, 12), np.int64)})["y"][0]  # every position 0: row 0
    np.testing.assert_array_equal(got, np.tile(np.arange(4, dtype=np.float32), (12, 1)))
    with pytest.raises(EdgekitError) as info:  # positions 1..12 in a table of 8 rows
        isolated.call(
            isolated_fns.host_runner_outputs,
            model.SerializeToString(),
            {"ids": np.ones((1, 12), np.int64)},
            what="OpenVINO",
            doing="running the source model on the host",
        )
    message = str(info.value)
    assert message.startswith("OpenVINO failed while running the source model on the host: Node ")
    assert "of type GatherElements: indices values of GatherElement exceed data size" in message
    assert "\n" not in message
