"""The exact runner's int8 Q/DQ pairs in uint8 form (``runtime.int8_pairs_as_uint8``): the same values by the
definition, which OpenVINO runs ~40 % faster."""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.runtime import HostRunner, int8_pairs_as_uint8
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.4).astype(np.float32)
    inits = [
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(0.02, np.float32), "s_in"),
        numpy_helper.from_array(np.array(-3, np.int8), "z_in"),
        numpy_helper.from_array(np.array(0.05, np.float32), "s_mid"),
        numpy_helper.from_array(np.array(7, np.int8), "z_mid"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "s_in", "z_in"], ["x_dq"]),
        helper.make_node("Conv", ["x_dq", "w"], ["y"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["y", "s_mid", "z_mid"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "s_mid", "z_mid"], ["y_dq"]),
        helper.make_node("Relu", ["y_dq"], ["out"]),
        helper.make_node("QuantizeLinear", ["out", "s_mid", "z_mid"], ["out_q"]),  # an int8 graph output
    ]
    graph = helper.make_graph(
        nodes,
        "pairs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [
            helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 8, 8]),
            helper.make_tensor_value_info("out_q", TensorProto.INT8, [1, 4, 8, 8]),
        ],
        inits,
        value_info=[helper.make_tensor_value_info("y_q", TensorProto.INT8, [1, 4, 8, 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def test_int8_pairs_become_uint8_with_the_same_values():
    model = _model()
    rewritten = int8_pairs_as_uint8(model)
    onnx.checker.check_model(rewritten, full_check=True)
    zero_of = {n.output[0]: n.input[2] for n in rewritten.graph.node if n.op_type == "QuantizeLinear"}
    inits = {t.name: numpy_helper.to_array(t) for t in rewritten.graph.initializer}
    # The two pairs: uint8, zero point + 128; the graph output's int8 tensor stays as it is.
    assert inits[zero_of["x_q"]].dtype == np.uint8 and int(inits[zero_of["x_q"]]) == -3 + 128
    assert inits[zero_of["y_q"]].dtype == np.uint8 and int(inits[zero_of["y_q"]]) == 7 + 128
    assert zero_of["out_q"] == "z_mid"
    assert next(v for v in rewritten.graph.value_info if v.name == "y_q").type.tensor_type.elem_type == (
        TensorProto.UINT8
    )
    # A pair whose int8 tensor someone reads keeps it.
    kept = int8_pairs_as_uint8(model, keep=["y_q"])
    assert {n.input[2] for n in kept.graph.node if n.output[0] == "y_q"} == {"z_mid"}

    x = (np.random.default_rng(0).standard_normal((1, 3, 8, 8)) * 2).astype(np.float32)
    x[0, 0, 0, :4] = np.array([0.01, -0.03, 0.05, 2.55], np.float32)  # half steps and the clip
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = ReferenceEvaluator(rewritten).run(None, {"x": x})
    for a, b in zip(want, got, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)  # the definition: bit for bit
    # The exact host runner (the uint8 form inside) computes the same as the reference evaluator.
    # (Its convolution sums in another order than numpy: a value a float32 ulp from a half step may round the
    # other way; one such value at most, one step off.)
    diff = np.abs(HostRunner(model).run({"x": x})["out"] - want[0])
    assert (diff > 0).sum() <= 1 and diff.max() <= 0.05 * (1 + 1e-6)
