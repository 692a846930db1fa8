"""Serialise a :class:`~edgekit.targets.tflite.graph.Graph` to a ``.tflite`` flatbuffer.

The schema's ``Buffer.data`` carries ``force_align: 16`` but the generated Python object API packs it
with the element alignment only (1 byte), so weight buffers are packed here with an explicit 16-byte
alignment (:class:`_AlignedBuffer`). Identical constant buffers are stored once, and so are identical
quantization parameters (vectors and tables), shape vectors and tensor names: flatbuffers lets tables share
them (a constant read only through a DEQUANTIZE carries the name of the tensor it becomes, once).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import flatbuffers
import ml_dtypes
import numpy as np
from edgekit.targets.tflite.graph import Graph, Quant, Tensor
from edgekit.targets.tflite.schema import builtin_code, fb, options_type, tensor_type

BUFFER_ALIGNMENT = 16
SCHEMA_VERSION = 3

# Op versions of the int8 kernels (TFLite's op_version.cc); float kernels and ops not listed are 1.
_INT8_VERSIONS = {
    "CONV_2D": 3,
    "DEPTHWISE_CONV_2D": 3,
    "FULLY_CONNECTED": 4,
    "TRANSPOSE_CONV": 3,
    "ADD": 2,
    "SUB": 2,
    "MUL": 2,
    "AVERAGE_POOL_2D": 2,
    "MAX_POOL_2D": 2,
    "CONCATENATION": 2,
    "SOFTMAX": 2,
    "LOGISTIC": 2,
    "TANH": 2,
    "MEAN": 2,
    "PAD": 2,
    "PADV2": 2,
    "TRANSPOSE": 2,
    "RESIZE_BILINEAR": 2,
    "RESIZE_NEAREST_NEIGHBOR": 2,
    "QUANTIZE": 2,
    "DEQUANTIZE": 2,
    "MAXIMUM": 2,
    "MINIMUM": 2,
    "SLICE": 2,
    "STRIDED_SLICE": 2,
    "SPLIT_V": 2,
    "GATHER": 2,
    "DEPTH_TO_SPACE": 2,
}


# Op versions of the 16x8 kernels (int16 activations; op_version.cc GetBuiltinOperatorVersion, the int16
# branches). CONV_2D: op_version.cc's int16 test reads the filter as int16 (never so in 16x8), 4 is the version
# its comment gives the int16 kernel.
_INT16_VERSIONS = {
    "CONV_2D": 4,
    "DEPTHWISE_CONV_2D": 5,
    "FULLY_CONNECTED": 7,
    "TRANSPOSE_CONV": 3,
    "ADD": 3,
    "SUB": 5,
    "MUL": 4,
    "AVERAGE_POOL_2D": 3,
    "MAX_POOL_2D": 3,
    "CONCATENATION": 3,
    "SOFTMAX": 3,
    "LOGISTIC": 3,
    "TANH": 3,
    "MEAN": 3,
    "REDUCE_MAX": 3,
    "REDUCE_MIN": 3,
    "RELU": 3,
    "RELU6": 3,
    "LEAKY_RELU": 2,
    "PAD": 3,
    "PADV2": 3,
    "TRANSPOSE": 5,
    "RESIZE_BILINEAR": 4,
    "RESIZE_NEAREST_NEIGHBOR": 4,
    "DEQUANTIZE": 3,
    "QUANTIZE": 2,
    "MAXIMUM": 4,
    "MINIMUM": 4,
    "SLICE": 4,
    "SPLIT": 4,
    "GATHER": 4,
    "BATCH_MATMUL": 3,
}


class _AlignedBuffer(fb.BufferT):
    """A ``BufferT`` whose data vector starts on a 16-byte boundary of the finished flatbuffer."""

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 - flatbuffers API name
        data_offset = None
        if self.data is not None:
            payload = bytes(self.data)
            builder.StartVector(1, len(payload), BUFFER_ALIGNMENT)
            builder.head = builder.head - len(payload)
            builder.Bytes[builder.head : builder.head + len(payload)] = payload
            data_offset = builder.EndVector()
        fb.BufferStart(builder)
        if data_offset is not None:
            fb.BufferAddData(builder, data_offset)
        return fb.BufferEnd(builder)


def _shared_vector(
    builder: flatbuffers.Builder, cache: dict[tuple[str, bytes], int], kind: str, array: np.ndarray
) -> int:
    """The offset of a vector with ``array``'s content, created the first time that content is asked for."""
    key = (kind, array.tobytes())
    if key not in cache:
        cache[key] = builder.CreateNumpyVector(array)
    return cache[key]


class _SharedQuantization(fb.QuantizationParametersT):
    """Quantization parameters whose scale / zero-point vectors are written once per distinct content.

    Flatbuffers lets tables share a vector; per-channel zero points (all zeros, int64) of a weight and
    its bias, and of every layer with the same channel count, are then stored once.
    """

    def __init__(self, quant: Quant, cache: dict[tuple[str, bytes], int]):
        super().__init__()
        self._cache = cache
        self.scale = np.asarray(quant.scale, dtype="<f4")
        self.zeroPoint = np.asarray(quant.zero_point, dtype="<i8")
        self.quantizedDimension = int(quant.axis)

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 - flatbuffers API name
        # The table itself is shared too: tensors with the same parameters (a pool's input and output, say)
        # point at one table.
        key = ("table", self.scale.tobytes() + self.zeroPoint.tobytes() + bytes([self.quantizedDimension]))
        if key in self._cache:
            return self._cache[key]
        scale = _shared_vector(builder, self._cache, "scale", self.scale)
        zero_point = _shared_vector(builder, self._cache, "zero_point", self.zeroPoint)
        fb.QuantizationParametersStart(builder)
        fb.QuantizationParametersAddScale(builder, scale)
        fb.QuantizationParametersAddZeroPoint(builder, zero_point)
        fb.QuantizationParametersAddQuantizedDimension(builder, self.quantizedDimension)
        self._cache[key] = fb.QuantizationParametersEnd(builder)
        return self._cache[key]


class _SharedShapeTensor(fb.TensorT):
    """A ``TensorT`` whose shape vector is written once per distinct shape."""

    def __init__(self, cache: dict[tuple[str, bytes], int]):
        super().__init__()
        self._cache = cache

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 - flatbuffers API name
        dims = np.asarray(self.shape, dtype="<i4")
        # a dim sized at run time (after a detector's NMS) is -1 in the signature, 1 in the shape LiteRT allocates
        shape = _shared_vector(
            builder, self._cache, "shape", np.maximum(dims, 1) if (dims < 0).any() else dims
        )
        signature = _shared_vector(builder, self._cache, "shape", dims) if (dims < 0).any() else None
        name = builder.CreateSharedString(self.name) if self.name is not None else None
        quantization = self.quantization.Pack(builder) if self.quantization is not None else None
        fb.TensorStart(builder)
        fb.TensorAddShape(builder, shape)
        if signature is not None:
            fb.TensorAddShapeSignature(builder, signature)
        fb.TensorAddType(builder, self.type)
        fb.TensorAddBuffer(builder, self.buffer)
        if name is not None:
            fb.TensorAddName(builder, name)
        if quantization is not None:
            fb.TensorAddQuantization(builder, quantization)
        return fb.TensorEnd(builder)


def pack_int4(values: np.ndarray) -> bytes:
    """int4 values two per byte, the first of each pair in the low nibble (TFLite's INT4 layout)."""
    flat = np.asarray(values).astype(np.int8).reshape(-1)
    if flat.size % 2:
        flat = np.append(flat, np.int8(0))
    low, high = flat[0::2].astype(np.uint8) & 0x0F, flat[1::2].astype(np.uint8) & 0x0F
    return (low | (high << 4)).astype(np.uint8).tobytes()


def _payload(t: Tensor) -> bytes:
    if t.dtype == np.dtype(ml_dtypes.int4):
        return pack_int4(t.data)
    return np.ascontiguousarray(t.data, dtype=t.dtype).astype(t.dtype.newbyteorder("<")).tobytes()


def _blockwise(quant: Quant, scales: int) -> fb.QuantizationParametersT:
    """LiteRT's ``BlockwiseQuantization`` of a weight whose scales are tensor ``scales`` (zero points 0, no
    tensor). Its blocks run along the weight's last (input) dimension; ``quantizedDimension`` stays 0: with 1
    LiteRT 2.3.0's XNNPACK delegate fails to prepare the FULLY_CONNECTED."""
    details = fb.BlockwiseQuantizationT()
    details.scales = scales
    details.zeroPoints = -1
    details.blockSize = int(quant.block_size)
    params = fb.QuantizationParametersT()
    params.detailsType = fb.QuantizationDetails.BlockwiseQuantization
    params.details = details
    return params


# Ops whose first version is above 1.
_MIN_VERSIONS = {"BROADCAST_TO": 2}


def _op_version(code: str, graph_op_inputs: list[Tensor | None], outputs: list[Tensor] = ()) -> int:
    first = next((t for t in graph_op_inputs if t is not None), None)
    if code == "DEQUANTIZE" and first is not None and first.dtype == np.float16:
        return 3  # float16 -> float32 (op_version.cc)
    wide = [t for t in (first, *outputs[:1]) if t is not None and t.dtype == np.int16 and t.quant is not None]
    if wide and (code != "QUANTIZE" or outputs[0].dtype == np.int16):
        return max(_INT16_VERSIONS.get(code, 1), _INT8_VERSIONS.get(code, 1), _MIN_VERSIONS.get(code, 1))
    if (
        first is not None
        and first.dtype in (np.dtype(np.int8), np.dtype(np.uint8))
        and first.quant is not None
    ):
        return max(_INT8_VERSIONS.get(code, 1), _MIN_VERSIONS.get(code, 1))
    return _MIN_VERSIONS.get(code, 1)


def serialize(graph: Graph, description: str = "edgekit", *, names: bool = True) -> bytes:
    """The flatbuffer bytes of ``graph`` (ops must already be in execution order).

    ``names=False`` leaves out every name (tensors, subgraph), the description and the signature: the
    smallest file LiteRT still runs, with tensors found by index only (``benchmarks/tflite_size_floor.py``).
    """
    buffers: list[fb.BufferT] = [_AlignedBuffer()]  # buffer 0: the empty sentinel
    buffer_index: dict[bytes, int] = {}
    tensors: list[fb.TensorT] = []
    tensor_index: dict[int, int] = {}
    vectors: dict[tuple[str, bytes], int] = {}
    scale_tensors: list[Tensor] = []  # kept alive: tensors are indexed by id()

    def index_of(t: Tensor) -> int:
        if id(t) in tensor_index:
            return tensor_index[id(t)]
        ft = _SharedShapeTensor(vectors)
        ft.name = t.name if names else None
        ft.shape = np.asarray(t.shape, dtype=np.int32)
        ft.type = tensor_type(t.dtype, t.name)
        if t.quant is not None and t.quant.block_size:
            # LiteRT reads blockwise scales as float16 (float32 ones are misread)
            scales = Tensor(t.name + "/scales", t.quant.scale.shape, np.float16, data=t.quant.scale)
            scale_tensors.append(scales)
            ft.quantization = _blockwise(t.quant, index_of(scales))
        else:
            ft.quantization = None if t.quant is None else _SharedQuantization(t.quant, vectors)
        if t.data is not None:
            payload = _payload(t)
            key = hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little")
            if key not in buffer_index:
                buffer_index[key] = len(buffers)
                buf = _AlignedBuffer()
                buf.data = payload
                buffers.append(buf)
            ft.buffer = buffer_index[key]
        else:
            ft.buffer = 0
        tensor_index[id(t)] = len(tensors)
        tensors.append(ft)
        return tensor_index[id(t)]

    opcodes: list[fb.OperatorCodeT] = []
    opcode_index: dict[tuple[str, int], int] = {}
    operators: list[fb.OperatorT] = []
    sub = fb.SubGraphT()
    sub.name = "main" if names else None
    sub.inputs = [index_of(t) for t in graph.inputs]
    for op in graph.ops:
        version = _op_version(op.code, op.inputs, op.outputs)
        key = (op.code, version)
        if key not in opcode_index:
            code = fb.OperatorCodeT()
            code.builtinCode = builtin_code(op.code)
            code.deprecatedBuiltinCode = min(code.builtinCode, 127)
            code.version = version
            opcode_index[key] = len(opcodes)
            opcodes.append(code)
        fop = fb.OperatorT()
        fop.opcodeIndex = opcode_index[key]
        fop.inputs = [-1 if t is None else index_of(t) for t in op.inputs]
        fop.outputs = [index_of(t) for t in op.outputs]
        if op.options is not None:
            fop.builtinOptionsType = options_type(op.options)
            fop.builtinOptions = op.options
        operators.append(fop)
    sub.outputs = [index_of(t) for t in graph.outputs]
    sub.tensors = tensors
    sub.operators = operators

    model = fb.ModelT()
    model.version = SCHEMA_VERSION
    model.description = description if names else None
    model.operatorCodes = opcodes
    model.subgraphs = [sub]
    model.buffers = buffers
    model.signatureDefs = [_signature(graph, sub)] if names else None
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _signature(graph: Graph, sub: fb.SubGraphT) -> fb.SignatureDefT:
    sig = fb.SignatureDefT()
    sig.signatureKey = "serving_default"
    sig.subgraphIndex = 0
    sig.inputs, sig.outputs = [], []
    for names, indices, target in (
        (graph.inputs, sub.inputs, sig.inputs),
        (graph.outputs, sub.outputs, sig.outputs),
    ):
        for t, index in zip(names, indices, strict=True):
            m = fb.TensorMapT()
            m.name = t.name
            m.tensorIndex = index
            target.append(m)
    return sig


def write(data: bytes, path: str | Path) -> Path:
    """Write atomically (a temp file in the same directory, then rename), with the umask's mode."""
    from edgekit.core.model import atomic_write_bytes

    return atomic_write_bytes(path, data)


def buffer_layout(data: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every non-empty buffer's data in a serialised model (for checks and tests)."""
    model = fb.Model.GetRootAs(data, 0)
    spans = []
    for i in range(model.BuffersLength()):
        buf = model.Buffers(i)
        size = buf.DataLength()
        if size:
            o = flatbuffers.number_types.UOffsetTFlags.py_type(buf._tab.Offset(4))
            start = buf._tab.Vector(o)
            spans.append((start, size))
    return spans
