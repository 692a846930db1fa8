"""Real models for the agent tests: a TFLite model built with the LiteRT schema object API and an
OpenVINO IR converted from a tiny ONNX model, each packaged as a bundle with ``bundle.write_bundle``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import flatbuffers
import numpy as np
from edgekit.device_agents.bundle import Manifest, Requirement, TensorSpec, write_bundle

SHAPE = (1, 4)


def tflite_add_mul_bytes() -> bytes:
    """A TFLite model with inputs a, b [1,4] float32 and outputs sum = a + b, prod = a * b.

    It has no constant tensors, so the object API's lost buffer alignment does not matter here.
    """
    from ai_edge_litert import schema_py_generated as s

    def tensor(name: str) -> s.TensorT:
        t = s.TensorT()
        t.name = name
        t.shape = list(SHAPE)
        t.type = s.TensorType.FLOAT32
        t.buffer = 0
        return t

    def op(code: int, opts_type: int, opts: object) -> s.OperatorT:
        o = s.OperatorT()
        o.opcodeIndex = code
        o.inputs = [0, 1]
        o.outputs = [2 + code]
        o.builtinOptionsType = opts_type
        o.builtinOptions = opts
        return o

    codes = []
    for builtin in (s.BuiltinOperator.ADD, s.BuiltinOperator.MUL):
        c = s.OperatorCodeT()
        c.builtinCode = builtin
        c.deprecatedBuiltinCode = builtin
        c.version = 1
        codes.append(c)
    sub = s.SubGraphT()
    sub.tensors = [tensor("a"), tensor("b"), tensor("sum"), tensor("prod")]
    sub.inputs = [0, 1]
    sub.outputs = [2, 3]
    sub.operators = [
        op(0, s.BuiltinOptions.AddOptions, s.AddOptionsT()),
        op(1, s.BuiltinOptions.MulOptions, s.MulOptionsT()),
    ]
    sub.name = "main"
    model = s.ModelT()
    model.version = 3
    model.operatorCodes = codes
    model.subgraphs = [sub]
    model.buffers = [s.BufferT()]
    model.description = "edgekit agent test model"
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _manifest(runtime: str, target: str, inputs: list[TensorSpec], outputs: list[TensorSpec]) -> Manifest:
    return Manifest(
        format_version="1.0",
        target=target,
        runtime=runtime,
        model_files=(),
        requirements=(Requirement("ai-edge-litert" if runtime == "tflite" else "openvino", "1.0"),),
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        provenance={"source_sha256": hashlib.sha256(b"test").hexdigest(), "edgekit_version": "test"},
        verification={},
    )


def tflite_bundle(out_dir: Path, archive: bool = False, extra_bytes: int = 0, seed: int = 0) -> Path:
    """The add/mul TFLite bundle; ``extra_bytes`` of random side data make it as large as a test needs."""
    specs = [TensorSpec(n, SHAPE, "float32") for n in ("a", "b")]
    outs = [TensorSpec(n, SHAPE, "float32") for n in ("sum", "prod")]
    files: dict[str, bytes] = {"model.tflite": tflite_add_mul_bytes()}
    if extra_bytes:
        rng = np.random.default_rng(seed)
        files["extra.bin"] = rng.integers(0, 256, extra_bytes, dtype=np.uint8).tobytes()
    manifest = _manifest("tflite", "arm-cpu", specs, outs)
    return write_bundle(out_dir, manifest, files, archive=archive, roles={"extra.bin": "report"})


def onnx_mlp(path: Path, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x [1,8] -> Relu(x @ W + B) [1,3]; returns (W, B) for the numpy reference."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((8, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "B"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    onnx.save(model, path)
    return w, b


def openvino_bundle(out_dir: Path, work: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    import openvino as ov

    work.mkdir(parents=True, exist_ok=True)
    w, b = onnx_mlp(work / "mlp.onnx")
    ov.save_model(ov.convert_model(work / "mlp.onnx"), work / "model.xml", compress_to_fp16=False)
    manifest = _manifest(
        "openvino", "intel-vpu", [TensorSpec("x", (1, 8), "float32")], [TensorSpec("y", (1, 3), "float32")]
    )
    path = write_bundle(
        out_dir,
        manifest,
        {"model.xml": work / "model.xml", "model.bin": work / "model.bin"},
        roles={"model.bin": "weights"},
    )
    return path, w, b
