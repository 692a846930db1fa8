"""The flatbuffer writer: 16-byte aligned weight buffers, deduplicated constants, a valid model."""

from __future__ import annotations

import numpy as np
import pytest
from edgekit.core.errors import OutputError
from edgekit.targets.tflite import writer
from edgekit.targets.tflite.graph import Graph
from edgekit.targets.tflite.schema import fb
from onnx import helper
from tflite_helpers import (
    assert_close_to_range,
    convert_proto,
    make_model,
    random_feeds,
    run_onnx,
    run_tflite,
)


def _odd_sized_model():
    """Constants of sizes that are not multiples of 16 bytes, so misalignment would show."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2", "b2"], ["y"]),
    ]
    inits = {
        "w1": rng.standard_normal((3, 3, 3, 3)).astype(np.float32),  # 324 bytes
        "b1": rng.standard_normal(3).astype(np.float32),  # 12 bytes
        "w2": rng.standard_normal((5, 3, 1, 1)).astype(np.float32),  # 60 bytes
        "b2": rng.standard_normal(5).astype(np.float32),
    }
    return make_model(nodes, {"x": (1, 3, 5, 5)}, ["y"], inits)


def test_weight_buffers_are_16_byte_aligned() -> None:
    result = convert_proto(_odd_sized_model())
    spans = writer.buffer_layout(result.data)
    assert len(spans) >= 4
    for start, size in spans:
        assert start % 16 == 0, f"buffer at offset {start} (size {size}) is not 16-byte aligned"
    # The object API left alone aligns to 1 byte: make sure our check can see that.
    model = fb.ModelT.InitFromObj(fb.Model.GetRootAs(result.data, 0))
    import flatbuffers

    builder = flatbuffers.Builder(0)
    plain = [fb.BufferT() for _ in model.buffers]
    for new, old in zip(plain, model.buffers, strict=True):
        new.data = old.data
    model.buffers = plain
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    assert any(start % 16 for start, _ in writer.buffer_layout(bytes(builder.Output())))


def test_identical_constants_share_one_buffer() -> None:
    shared = np.arange(48, dtype=np.float32).reshape(2, 3, 8) / 10
    nodes = [
        helper.make_node("Add", ["x", "c1"], ["a"]),
        helper.make_node("Mul", ["a", "c2"], ["y"]),
    ]
    model = make_model(nodes, {"x": (2, 3, 8)}, ["y"], {"c1": shared, "c2": shared.copy()})
    result = convert_proto(model)
    parsed = fb.Model.GetRootAs(result.data, 0)
    sizes = [parsed.Buffers(i).DataLength() for i in range(parsed.BuffersLength())]
    assert sizes.count(shared.nbytes) == 1, sizes
    sub = parsed.Subgraphs(0)
    names = {sub.Tensors(i).Name().decode(): sub.Tensors(i).Buffer() for i in range(sub.TensorsLength())}
    assert names["c1"] == names["c2"] != 0
    feeds = random_feeds(model)
    assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(model, feeds)[0])


def test_serialized_model_runs_and_has_signature() -> None:
    from ai_edge_litert.interpreter import Interpreter

    model = _odd_sized_model()
    result = convert_proto(model)
    interpreter = Interpreter(model_content=result.data)
    runner = interpreter.get_signature_runner("serving_default")
    feeds = random_feeds(model)
    out = runner(x=result.inputs[0].to_tflite(feeds["x"]))
    expected = run_onnx(model, feeds)[0]
    assert_close_to_range(result.outputs[0].to_onnx(out["y"]), expected)


def test_names_false_leaves_out_names_and_signature_and_runs_identically() -> None:
    from edgekit.targets.tflite.converter import build_graph

    model = _odd_sized_model()
    full = writer.serialize(build_graph(model))
    bare = writer.serialize(build_graph(model), names=False)
    assert len(bare) < len(full)
    parsed = fb.Model.GetRootAs(bare, 0)
    sub = parsed.Subgraphs(0)
    assert parsed.SignatureDefsLength() == 0 and parsed.Description() is None and sub.Name() is None
    assert all(sub.Tensors(i).Name() is None for i in range(sub.TensorsLength()))
    assert b"serving_default" not in bare and b"serving_default" in full
    outputs = _litert_outputs(model, full, bare)
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_write_is_atomic(tmp_path) -> None:
    result = convert_proto(_odd_sized_model())
    target = tmp_path / "m.tflite"
    result.save(target)
    assert target.read_bytes() == result.data
    assert [p.name for p in tmp_path.iterdir()] == ["m.tflite"]
    with pytest.raises(OutputError, match="does not exist"):
        writer.write(result.data, tmp_path / "missing" / "m.tflite")
    assert [p.name for p in tmp_path.iterdir()] == ["m.tflite"]


def test_empty_graph_serializes_sentinel_buffer() -> None:
    graph = Graph()
    x = graph.tensor("x", (1, 4), np.float32)
    y = graph.tensor("y", (1, 4), np.float32)
    graph.inputs, graph.outputs = [x], [y]
    graph.add("RELU", [x], [y])
    parsed = fb.Model.GetRootAs(writer.serialize(graph), 0)
    assert parsed.Buffers(0).DataLength() == 0
    assert parsed.Version() == 3


def test_identical_quantization_vectors_are_stored_once() -> None:
    """Per-channel zero points (all zeros) of a weight and its bias share one vector in the file."""
    from tflite_helpers import edgekit_qdq

    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2", "b2"], ["y"]),
    ]
    inits = {
        "w1": rng.standard_normal((6, 3, 3, 3)).astype(np.float32),
        "b1": rng.standard_normal(6).astype(np.float32),
        "w2": rng.standard_normal((6, 6, 1, 1)).astype(np.float32),
        "b2": rng.standard_normal(6).astype(np.float32),
    }
    model = make_model(nodes, {"x": (1, 3, 6, 6)}, ["y"], inits)
    result = convert_proto(edgekit_qdq(model, [random_feeds(model, s) for s in range(3)]))
    sub = fb.Model.GetRootAs(result.data, 0).Subgraphs(0)
    starts = set()
    per_channel = 0
    for i in range(sub.TensorsLength()):
        q = sub.Tensors(i).Quantization()
        if q is not None and q.ScaleLength() == 6:
            per_channel += 1
            starts.add(q.ZeroPointAsNumpy().__array_interface__["data"][0])
    assert per_channel == 4  # two weights, two biases
    assert len(starts) == 1


def test_identical_quantization_tables_and_shapes_are_stored_once() -> None:
    """Tensors with equal quantization parameters point at one table, equal shapes at one vector; the model
    still runs and reads back every tensor's own shape and parameters."""
    from tflite_helpers import edgekit_qdq

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[1, 1]),  # same scale, same shape as its input
        helper.make_node("MaxPool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    model = make_model(nodes, {"x": (1, 4, 6, 6)}, ["y"], {})
    qdq = edgekit_qdq(model, [random_feeds(model, s) for s in range(3)])
    result = convert_proto(qdq)
    sub = fb.Model.GetRootAs(result.data, 0).Subgraphs(0)
    tables: dict[bytes, list[int]] = {}
    shapes: dict[bytes, list[int]] = {}
    for i in range(sub.TensorsLength()):
        t = sub.Tensors(i)
        q = t.Quantization()
        if q is not None and q.ScaleLength():
            key = q.ScaleAsNumpy().tobytes() + q.ZeroPointAsNumpy().tobytes()
            tables.setdefault(key, []).append(q._tab.Pos)
        shape = t.ShapeAsNumpy()
        shapes.setdefault(shape.tobytes(), []).append(shape.__array_interface__["data"][0])
    assert all(len(set(positions)) == 1 for positions in tables.values())
    assert all(len(set(positions)) == 1 for positions in shapes.values())
    # the case happened: the int8 pools' tensors share one table, and the 1x1 pool's input and output one shape
    assert max(len(p) for p in tables.values()) >= 3
    assert max(len(p) for p in shapes.values()) >= 2
    for seed in (0, 1):
        feeds = random_feeds(model, seed)
        assert_close_to_range(run_tflite(result, feeds)[0], run_onnx(qdq, feeds)[0], rel=0.02)


def test_fp16_weights_share_their_name_with_the_dequantize_output_stored_once() -> None:
    """Each float16 constant carries the name of the float32 weight its DEQUANTIZE produces, and the file holds
    that name once (shared strings); LiteRT computes the same outputs, bit for bit, as the nameless file."""
    from edgekit.targets.tflite.converter import ConvertOptions, build_graph

    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2_long_weight_name", "b2"], ["y"]),
    ]
    inits = {
        "w1": rng.standard_normal((16, 8, 3, 3)).astype(np.float32),  # 1152 values: float16
        "b1": rng.standard_normal(16).astype(np.float32),
        "w2_long_weight_name": rng.standard_normal((64, 16, 1, 1)).astype(np.float32),  # 1024: float16
        "b2": rng.standard_normal(64).astype(np.float32),
    }
    model = make_model(nodes, {"x": (1, 8, 6, 6)}, ["y"], inits)
    full = writer.serialize(build_graph(model, ConvertOptions(fp16_weights=True)))
    bare = writer.serialize(build_graph(model, ConvertOptions(fp16_weights=True)), names=False)
    parsed = fb.Model.GetRootAs(full, 0)
    sub = parsed.Subgraphs(0)
    dequantize = [
        sub.Operators(i)
        for i in range(sub.OperatorsLength())
        if parsed.OperatorCodes(sub.Operators(i).OpcodeIndex()).BuiltinCode() == fb.BuiltinOperator.DEQUANTIZE
    ]
    assert len(dequantize) == 2
    for op in dequantize:
        source, out = sub.Tensors(op.Inputs(0)), sub.Tensors(op.Outputs(0))
        assert source.Type() == fb.TensorType.FLOAT16 and out.Type() == fb.TensorType.FLOAT32
        assert source.Name() == out.Name()
        assert full.count(source.Name()) == 1  # one string, two tensors point at it
    assert full.count(b"w2_long_weight_name") == 1
    outputs = _litert_outputs(model, full, bare)
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert_close_to_range(outputs[0].transpose(0, 3, 1, 2), run_onnx(model, random_feeds(model))[0], 1e-2)


def _litert_outputs(model, *files: bytes) -> list[np.ndarray]:
    """LiteRT's first output of each .tflite on the same seeded NHWC input."""
    from ai_edge_litert.interpreter import Interpreter

    x = random_feeds(model)["x"].transpose(0, 2, 3, 1)
    outputs = []
    for data in files:
        interpreter = Interpreter(model_content=data)
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    return outputs
