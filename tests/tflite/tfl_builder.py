"""Build tiny .tflite models with the schema object API, for tests.

A test describes a graph (tensors, constants, operators) and gets the flatbuffer bytes back. Constant
buffers are written 16-byte aligned (the object API alone would align them to 1 byte). Every fixture
built here must load in the LiteRT interpreter; the tests check that, so the fixtures are real models.
"""

from __future__ import annotations

from collections.abc import Sequence

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

_DTYPES = {
    "float32": (schema.TensorType.FLOAT32, np.float32),
    "float16": (schema.TensorType.FLOAT16, np.float16),
    "int32": (schema.TensorType.INT32, np.int32),
    "int64": (schema.TensorType.INT64, np.int64),
    "uint8": (schema.TensorType.UINT8, np.uint8),
    "int8": (schema.TensorType.INT8, np.int8),
    "int16": (schema.TensorType.INT16, np.int16),
    "bool": (schema.TensorType.BOOL, np.bool_),
}


class _AlignedBufferT(schema.BufferT):
    """A buffer whose data vector starts on a 16-byte boundary in the finished flatbuffer."""

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 - the object API's method name
        data_offset = None
        if self.data is not None and len(self.data):
            raw = bytes(np.asarray(self.data, dtype=np.uint8))
            builder.StartVector(1, len(raw), 16)
            builder.head -= len(raw)
            builder.Bytes[builder.head : builder.head + len(raw)] = raw
            data_offset = builder.EndVector()
        schema.BufferStart(builder)
        if data_offset is not None:
            schema.BufferAddData(builder, data_offset)
        return schema.BufferEnd(builder)


class TflBuilder:
    """Accumulates one subgraph and packs it as a TFLite model (schema version 3)."""

    def __init__(self) -> None:
        self._tensors: list[schema.TensorT] = []
        self._buffers: list[schema.BufferT] = [_AlignedBufferT()]  # buffer 0 is the empty sentinel
        self._opcodes: list[tuple[int, str | None, int]] = []
        self._operators: list[schema.OperatorT] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []

    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str = "float32",
        *,
        data: np.ndarray | Sequence[float] | None = None,
        scale: float | Sequence[float] | None = None,
        zero_point: int | Sequence[int] | None = None,
        axis: int = 0,
        shape_signature: Sequence[int] | None = None,
    ) -> int:
        """Add a tensor (a constant when ``data`` is given) and return its index."""
        ttype, np_dtype = _DTYPES[dtype]
        t = schema.TensorT()
        t.name = name
        t.type = ttype
        t.shape = list(shape)
        if shape_signature is not None:
            t.shapeSignature = list(shape_signature)
        t.buffer = 0
        if data is not None:
            array = np.asarray(data, dtype=np_dtype).reshape(tuple(shape))
            buf = _AlignedBufferT()
            buf.data = np.frombuffer(array.tobytes(), dtype=np.uint8)
            self._buffers.append(buf)
            t.buffer = len(self._buffers) - 1
        if scale is not None:
            scales = [float(s) for s in np.atleast_1d(scale)]
            zps = [int(z) for z in np.atleast_1d(0 if zero_point is None else zero_point)]
            if len(zps) == 1 and len(scales) > 1:
                zps = zps * len(scales)
            q = schema.QuantizationParametersT()
            q.scale = scales
            q.zeroPoint = zps
            q.quantizedDimension = axis
            t.quantization = q
        self._tensors.append(t)
        return len(self._tensors) - 1

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32", **kwargs) -> int:
        """Add a graph input tensor."""
        index = self.tensor(name, shape, dtype, **kwargs)
        self._inputs.append(index)
        return index

    def output(self, index: int) -> int:
        """Mark a tensor as a graph output."""
        self._outputs.append(index)
        return index

    def op(
        self,
        name: str,
        inputs: Sequence[int],
        outputs: Sequence[int],
        options: object | None = None,
        *,
        version: int = 1,
        custom_code: str | None = None,
    ) -> int:
        """Append an operator (``name`` is a BuiltinOperator name, or CUSTOM with ``custom_code``)."""
        code = getattr(schema.BuiltinOperator, name)
        key = (code, custom_code, version)
        if key not in self._opcodes:
            self._opcodes.append(key)
        o = schema.OperatorT()
        o.opcodeIndex = self._opcodes.index(key)
        o.inputs = list(inputs)
        o.outputs = list(outputs)
        if options is not None:
            o.builtinOptionsType = getattr(schema.BuiltinOptions, type(options).__name__[:-1])
            o.builtinOptions = options
        if custom_code is not None:
            o.customOptions = []
        self._operators.append(o)
        return len(self._operators) - 1

    def build(self) -> bytes:
        """Pack the model and return the flatbuffer bytes (file identifier TFL3)."""
        sub = schema.SubGraphT()
        sub.tensors = self._tensors
        sub.inputs = self._inputs
        sub.outputs = self._outputs
        sub.operators = self._operators
        sub.name = "main"
        model = schema.ModelT()
        model.version = 3
        model.description = "edgekit test fixture"
        model.subgraphs = [sub]
        model.buffers = self._buffers
        codes = []
        for code, custom, version in self._opcodes:
            oc = schema.OperatorCodeT()
            oc.builtinCode = code
            oc.deprecatedBuiltinCode = min(code, 127)
            oc.version = version
            if custom is not None:
                oc.customCode = custom
            codes.append(oc)
        model.operatorCodes = codes
        builder = flatbuffers.Builder(1024)
        builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
        return bytes(builder.Output())


def options(kind: str, **fields: object) -> object:
    """An options object, e.g. ``options("Conv2DOptions", padding=1, strideW=1)``."""
    obj = getattr(schema, kind + "T")()
    for key, value in fields.items():
        if not hasattr(obj, key):
            raise AttributeError(f"{kind} has no field {key!r}")
        setattr(obj, key, value)
    return obj


Q = {"scale": 0.05, "zero_point": 2}  # per-tensor int8/uint8 quantization of activations


def one_op(op, inputs, outputs, opts=None, version=1, dtype="float32", quant=None):
    """A model of a single op. ``inputs``: shapes (graph inputs, ``dtype``) or arrays (constants);
    ``outputs``: shapes, or (shape, dtype) pairs."""
    b = TflBuilder()
    q = Q if quant is None and dtype in ("int8", "uint8") else (quant or {})
    ins = []
    for i, spec in enumerate(inputs):
        if isinstance(spec, np.ndarray):
            ins.append(
                b.tensor(
                    f"c{i}", spec.shape, str(spec.dtype), data=spec, **(q if spec.dtype == dtype else {})
                )
            )
        else:
            ins.append(b.input(f"x{i}", spec, dtype, **q))
    outs = []
    for i, spec in enumerate(outputs):
        shape, odtype = spec if isinstance(spec, tuple) else (spec, dtype)
        outs.append(
            b.output(b.tensor(f"y{i}", shape, odtype, **((q or Q) if odtype in ("int8", "uint8") else {})))
        )
    b.op(op, ins, outs, opts, version=version)
    return b.build()
