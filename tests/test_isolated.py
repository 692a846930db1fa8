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
