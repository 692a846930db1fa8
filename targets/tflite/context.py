"""State shared by the op converters while one ONNX graph is translated into a TFLite graph."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import TargetError
from edgekit.targets.tflite.graph import Graph, Op, Quant, Tensor
from edgekit.targets.tflite.schema import fb

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)


def attr_text(value: str | bytes) -> str:
    """A string attribute as text (onnx_ir gives some as bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def to_nhwc_perm(rank: int) -> tuple[int, ...]:
    """Channels-first -> channels-last permutation for any rank >= 3 (NCW -> NWC, NCHW -> NHWC...)."""
    return (0, *range(2, rank), 1)


def to_nchw_perm(rank: int) -> tuple[int, ...]:
    return (0, rank - 1, *range(1, rank - 1))


def inverse_perm(perm: Sequence[int]) -> tuple[int, ...]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def permute(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape[p] for p in perm)


class Context:
    """Maps ONNX values to TFLite tensors, holds the ONNX constants, and emits ops for one node."""

    def __init__(self, graph: Graph, opset: int, target: str):
        self.graph = graph
        self.opset = opset
        self.target = target
        self.node: ir.Node | None = None
        #: Nodes a converter already covered as part of a pattern (e.g. the Adds/Muls of a GELU).
        self.claimed: set[int] = set()
        self._tensors: dict[str, Tensor] = {}
        self._consts: dict[str, np.ndarray] = {}
        self._qconsts: dict[str, tuple[np.ndarray, Quant]] = {}
        #: ONNX values after a data-dependent op (a detector's NMS): their unknown dims are -1, sized at run time.
        self.dynamic: set[str] = set()

    # -- ONNX values -------------------------------------------------------------------------
    def const(self, value: ir.Value | None) -> np.ndarray | None:
        """The constant array of an ONNX value, or None when it is computed at run time."""
        if value is None:
            return None
        if value.name in self._consts:
            return self._consts[value.name]
        if value.const_value is not None:
            array = value.const_value.numpy()
            self._consts[value.name] = array
            return array
        return None

    def require_const(self, value: ir.Value | None, what: str) -> np.ndarray:
        array = self.const(value)
        if array is None:
            raise self.error(f"{what} must be a constant (it is computed at run time)")
        return array

    def set_const(
        self, value: ir.Value, array: np.ndarray, quantized: tuple[np.ndarray, Quant] | None = None
    ) -> None:
        self._consts[value.name] = np.asarray(array)
        if quantized is not None:
            self._qconsts[value.name] = quantized

    def is_const(self, value: ir.Value | None) -> bool:
        return value is not None and self.const(value) is not None

    def quantized_const(self, value: ir.Value) -> tuple[np.ndarray, Quant] | None:
        return self._qconsts.get(value.name)

    def shape(self, value: ir.Value) -> tuple[int, ...]:
        array = self.const(value)
        if array is not None:
            return tuple(array.shape)
        if value.name in self._tensors:
            return self._tensors[value.name].shape
        if value.name in self.dynamic and value.shape is not None:
            return tuple(d if isinstance(d, int) and d >= 0 else -1 for d in value.shape)
        if value.shape is None or not all(isinstance(d, int) and d >= 0 for d in value.shape):
            raise self.error(
                f"value {value.name!r} has no static shape ({value.shape}); fix it with --input-shape"
            )
        return tuple(int(d) for d in value.shape)

    def rank(self, value: ir.Value) -> int:
        return len(self.shape(value))

    def tensor(self, value: ir.Value) -> Tensor:
        """The TFLite tensor holding an ONNX value (a constant tensor for constants)."""
        if value.name in self._tensors:
            return self._tensors[value.name]
        array = self.const(value)
        if array is None:
            raise self.error(f"value {value.name!r} has no producer")
        tensor = self.weight(value)
        self._tensors[value.name] = tensor
        return tensor

    def weight(
        self,
        value: ir.Value,
        perm: Sequence[int] | None = None,
        dtype: type | None = None,
        insert_axis: int | None = None,
        shape: Sequence[int] | None = None,
    ) -> Tensor:
        """A constant tensor of ``value`` (a unit dim inserted at ``insert_axis``, then transposed by
        ``perm``, then reshaped to ``shape`` merging axes after the per-channel one), keeping integer weights
        from a DequantizeLinear."""
        if shape is not None:
            return self._reshaped_weight(value, perm, tuple(int(d) for d in shape))
        array = self.require_const(value, f"input {value.name!r}")
        if insert_axis is not None:
            array = np.expand_dims(array, insert_axis)
        if array.dtype in (np.int64, np.uint32, np.uint64) and dtype is None:
            dtype = np.int32
        if array.dtype == np.float64 and dtype is None:
            dtype = np.float32
        data = array if perm is None else np.transpose(array, perm)
        tensor = self.graph.const(value.name, data, dtype)
        quantized = self._qconsts.get(value.name)
        if quantized is not None:
            qdata, quant = quantized
            axis = quant.axis
            if quant.block_size:  # blockwise int4: the scales have the weight's rank and move with it
                if insert_axis is not None:
                    raise self.error("blockwise int4 weights must be 2-D (MatMul/Gemm)")
                scale = quant.scale if perm is None else np.transpose(quant.scale, perm)
                quant = Quant(np.ascontiguousarray(scale), quant.zero_point, axis, quant.block_size)
            if insert_axis is not None:
                qdata = np.expand_dims(qdata, insert_axis)
                axis += int(axis >= insert_axis)
            axis = axis if perm is None else list(perm).index(axis)
            tensor.qdata = np.asarray(qdata if perm is None else np.transpose(qdata, perm), order="C")
            tensor.qparams = Quant(quant.scale, quant.zero_point, axis, quant.block_size)
        return tensor

    def _reshaped_weight(self, value: ir.Value, perm: Sequence[int] | None, shape: tuple[int, ...]) -> Tensor:
        moved = self.weight(value, perm)
        quant = moved.qparams
        if quant is not None and not (
            quant.axis < len(shape)
            and shape[quant.axis] == moved.shape[quant.axis]
            and shape[: quant.axis] == tuple(moved.shape[: quant.axis])
        ):
            raise self.error(f"per-channel weights {moved.shape} cannot be reshaped to {shape}")
        tensor = self.graph.const(value.name, np.reshape(moved.data, shape))
        if quant is not None:
            tensor.qdata = np.ascontiguousarray(np.reshape(moved.qdata, shape))
            tensor.qparams = quant
        return tensor

    def bind(self, value: ir.Value, tensor: Tensor) -> None:
        self._tensors[value.name] = tensor

    def output(
        self, value: ir.Value, shape: Sequence[int] | None = None, dtype: type | None = None
    ) -> Tensor:
        """A new tensor for an ONNX output value (shape and dtype from the ONNX graph unless given)."""
        if shape is None:
            shape = self.shape(value)
        if dtype is None:
            dtype = value.dtype.numpy() if value.dtype is not None else np.float32
            if dtype == np.int64:
                dtype = np.int32
        tensor = self.graph.tensor(value.name, shape, dtype)
        self._tensors[value.name] = tensor
        return tensor

    def tmp(self, hint: str, shape: Sequence[int], dtype: type | np.dtype = np.float32) -> Tensor:
        base = (self.node.name if self.node is not None and self.node.name else "t") + "/" + hint
        return self.graph.tensor(base, shape, dtype)

    # -- emitting ops ------------------------------------------------------------------------
    def op(
        self, code: str, inputs: Sequence[Tensor | None], outputs: Sequence[Tensor], options: object = None
    ) -> Op:
        return self.graph.add(code, inputs, outputs, options, origin=self.node.name if self.node else "")

    def transpose(self, x: Tensor, perm: Sequence[int], out: Tensor | None = None) -> Tensor:
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(len(perm))) and out is None:
            return x
        if out is None:
            out = self.tmp("transpose", permute(x.shape, perm), x.dtype)
        self.op("TRANSPOSE", [x, self.graph.const("perm", perm, np.int32)], [out], fb.TransposeOptionsT())
        return out

    def reshape(self, x: Tensor, shape: Sequence[int], out: Tensor | None = None) -> Tensor:
        shape = tuple(int(d) for d in shape)
        if out is None:
            if shape == x.shape:
                return x
            out = self.tmp("reshape", shape, x.dtype)
        opts = fb.ReshapeOptionsT()
        opts.newShape = list(shape)
        self.op("RESHAPE", [x, self.graph.const("shape", shape, np.int32)], [out], opts)
        return out

    def error(self, message: str) -> TargetError:
        node = self.node
        where = f"{node.op_type} node {node.name!r}: " if node is not None else ""
        return TargetError(f"{where}{message} ({self.target} converter)")
