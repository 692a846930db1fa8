"""Helpers of the TFLite converter tests: tiny ONNX models, references, and running .tflite files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from edgekit.targets.tflite.converter import ConversionResult, ConvertOptions, convert
from onnx import TensorProto, helper, numpy_helper

FLOAT = TensorProto.FLOAT


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Mapping[str, Sequence[int]],
    outputs: Sequence[str],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 19,
) -> onnx.ModelProto:
    """A shape-inferred model of ``nodes`` with float inputs of the given shapes."""
    graph = helper.make_graph(
        list(nodes),
        "test",
        [helper.make_tensor_value_info(n, FLOAT, list(s)) for n, s in inputs.items()],
        [onnx.ValueInfoProto(name=n) for n in outputs],  # types and shapes from inference
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9 if opset < 21 else 10
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    onnx.checker.check_model(model)
    return model


def random_feeds(
    model: onnx.ModelProto, seed: int = 0, low: float = -2.0, high: float = 2.0
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    init = {i.name for i in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in init:
            continue
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.uniform(low, high, shape).astype(np.float32)
    return feeds


def run_onnx(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The reference: onnxruntime's CPU provider with graph optimizations off."""
    from ort_reference import run_node_by_node

    return run_node_by_node(model, feeds)


def run_tflite(result: ConversionResult, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a converted model in the LiteRT interpreter; inputs/outputs in the ONNX layout."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=result.data, num_threads=1)
    interpreter.allocate_tensors()
    details = {d["name"]: d for d in interpreter.get_input_details()}
    for info in result.inputs:
        array = info.to_tflite(np.asarray(feeds[info.name]))
        if info.scale is not None and info.dtype in ("int8", "uint8"):
            array = np.clip(np.rint(array / info.scale) + info.zero_point, *_limits(info.dtype)).astype(
                info.dtype
            )
        interpreter.set_tensor(details[info.name]["index"], array)
    interpreter.invoke()
    out_details = {d["name"]: d for d in interpreter.get_output_details()}
    outputs = []
    for info in result.outputs:
        array = interpreter.get_tensor(out_details[info.name]["index"])
        if info.scale is not None and info.dtype in ("int8", "uint8"):
            array = (array.astype(np.float32) - info.zero_point) * info.scale
        outputs.append(info.to_onnx(array))
    return outputs


def _limits(dtype: str) -> tuple[int, int]:
    info = np.iinfo(np.dtype(dtype))
    return info.min, info.max


def convert_proto(model: onnx.ModelProto, options: ConvertOptions = ConvertOptions()) -> ConversionResult:
    return convert(model, options)


def op_types(result: ConversionResult) -> dict[str, int]:
    """Op counts read back from the flatbuffer itself (not from the converter's bookkeeping)."""
    from ai_edge_litert import schema_py_generated as fb

    model = fb.Model.GetRootAs(result.data, 0)
    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    sub = model.Subgraphs(0)
    counts: dict[str, int] = {}
    for i in range(sub.OperatorsLength()):
        code = model.OperatorCodes(sub.Operators(i).OpcodeIndex()).BuiltinCode()
        counts[names[code]] = counts.get(names[code], 0) + 1
    return counts


def assert_close_to_range(actual: np.ndarray, expected: np.ndarray, rel: float = 1e-5) -> None:
    """max |actual - expected| <= rel * (range of expected), with shapes equal."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    value_range = float(np.ptp(expected)) if expected.size > 1 else abs(float(expected.reshape(-1)[0]))
    err = (
        float(np.max(np.abs(actual.astype(np.float64) - expected.astype(np.float64))))
        if expected.size
        else 0.0
    )
    assert err <= rel * max(value_range, 1e-3), f"max abs error {err:.3g} > {rel} x range {value_range:.3g}"


def edgekit_qdq(
    model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]], float_output_heads: bool = False
) -> onnx.ModelProto:
    """edgekit's QDQ model; integer output heads unless ``float_output_heads`` (the quantizer's default)."""
    from edgekit.core.data import Sample
    from edgekit.core.model import load_proto
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize

    samples = [Sample(f, None, str(i)) for i, f in enumerate(feeds)]
    return quantize(
        load_proto(model),
        samples,
        QuantizeOptions(activations="int8", samples=len(samples), float_output_heads=float_output_heads),
    ).proto()


def ort_qdq(
    model: onnx.ModelProto,
    feeds: list[dict[str, np.ndarray]],
    tmp_path,
    per_channel: bool = True,
    dtype: str = "int8",
) -> onnx.ModelProto:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self):
            return next(self._it, None)

    src, dst = tmp_path / "f.onnx", tmp_path / "q.onnx"
    onnx.save(model, src)
    quantize_static(
        str(src),
        str(dst),
        Reader(),
        quant_format=QuantFormat.QDQ,
        per_channel=per_channel,
        activation_type=QuantType.QInt8 if dtype == "int8" else QuantType.QUInt8,
        weight_type=QuantType.QInt8 if dtype == "int8" else QuantType.QUInt8,
        extra_options={"ForceQuantizeNoInputCheck": True},
    )
    return onnx.load(dst)


def run_tflite_isolated(result: ConversionResult, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """:func:`run_tflite` in a forked child: LiteRT aborts the process (SIGABRT) on some graphs it refuses,
    which must fail the test, not kill the test run. A refusal (RuntimeError) or a crash raises AssertionError."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send(("ok", run_tflite(result, feeds)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            send.send(("error", f"{type(exc).__name__}: {exc}"))

    process = context.Process(target=child)
    process.start()
    send.close()
    try:
        status, payload = receive.recv()
    except EOFError:
        status, payload = "crash", None
    process.join()
    assert status == "ok", (
        f"LiteRT refused the model: {payload}"
        if status == "error"
        else f"LiteRT crashed (exit code {process.exitcode})"
    )
    return payload
