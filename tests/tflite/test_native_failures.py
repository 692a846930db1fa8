"""A .tflite that LiteRT rejects or aborts on: verification gives one typed line, the caller survives.

The .tflite files are real (built with tfl_builder, read by LiteRT); the packaging path is the one every
TFLite target takes (package_tflite with a conversion result), only the converter is bypassed so that the
file is one LiteRT fails on whatever the converter and quantizer rules become.
"""

from __future__ import annotations

import numpy as np
import pytest
from edgekit.core.errors import TargetError
from edgekit.core.model import load_proto
from edgekit.targets.base import PackageOptions, get_target
from edgekit.targets.tflite.converter import ConversionResult, ConvertOptions, TensorInfo
from edgekit.targets.tflite.package import package_tflite
from onnx import TensorProto, helper
from tfl_builder import TflBuilder, options

NHWC = (0, 2, 3, 1)


def _onnx_pad():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 6, 6])
    pads = helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1])
    graph = helper.make_graph([helper.make_node("Pad", ["x", "pads"], ["y"])], "pad", [x], [y], [pads])
    return load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))


def _int8_pad_with_other_zero_point() -> bytes:
    """PADV2 whose output zero point (2) differs from its pad constant's (0): pad.cc refuses it."""
    b = TflBuilder()
    x = b.input("x", [1, 4, 4, 2], "int8", scale=0.05, zero_point=2)
    pads = b.tensor("pads", [4, 2], "int32", data=np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    value = b.tensor("value", [1], "int8", data=np.array([0], np.int8), scale=0.05, zero_point=0)
    y = b.output(b.tensor("y", [1, 6, 6, 2], "int8", scale=0.05, zero_point=2))
    b.op("PADV2", [x, pads, value], [y], options("PadV2Options"), version=2)
    return b.build()


def _onnx_add():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    one = helper.make_tensor("one", TensorProto.FLOAT, [1, 4], [1.0] * 4)
    graph = helper.make_graph([helper.make_node("Add", ["x", "one"], ["y"])], "add", [x], [y], [one])
    return load_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]))


def _int8_add_without_quantization() -> bytes:
    """An int8 ADD whose tensors carry no scale: LiteRT 2.x aborts the process (SIGABRT) on it."""
    b = TflBuilder()
    x = b.input("x", [1, 4], "int8")
    one = b.tensor("one", [1, 4], "int8", data=np.ones((1, 4), np.int8))
    y = b.output(b.tensor("y", [1, 4], "int8"))
    b.op("ADD", [x, one], [y], options("AddOptions"))
    return b.build()


def _package(model, data, inputs, outputs, out_dir):
    result = ConversionResult(data=data, inputs=inputs, outputs=outputs, op_counts={})
    target = get_target("arm-cpu")
    return package_tflite(
        target, model, out_dir, PackageOptions(), ConvertOptions(target="arm-cpu"), 0.15, result=result
    )


def test_litert_runtime_error_in_verification_is_one_typed_line(tmp_path):
    infos = (
        [TensorInfo("x", (1, 4, 4, 2), "int8", "NHWC", NHWC, 0.05, 2)],
        [TensorInfo("y", (1, 6, 6, 2), "int8", "NHWC", NHWC, 0.05, 2)],
    )
    out = tmp_path / "bundle"
    with pytest.raises(TargetError) as info:
        _package(_onnx_pad(), _int8_pad_with_other_zero_point(), *infos, out)
    message = str(info.value)
    assert message.startswith("LiteRT failed while running the converted model: ")
    assert "pad.cc" in message and "zero_point" in message and "(2 != 0)" in message
    assert "\n" not in message and "Traceback" not in message
    assert not out.exists()


def test_litert_abort_in_verification_is_one_typed_line(tmp_path):
    infos = ([TensorInfo("x", (1, 4), "int8", None, None)], [TensorInfo("y", (1, 4), "int8", None, None)])
    out = tmp_path / "bundle"
    with pytest.raises(TargetError) as info:
        _package(_onnx_add(), _int8_add_without_quantization(), *infos, out)
    assert str(info.value).startswith("LiteRT aborted (SIGABRT) while running the converted model: ")
    assert "\n" not in str(info.value)
    assert not out.exists()
