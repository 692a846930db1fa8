"""The converter's own small TFLite-level graph: tensors, ops, and the helpers passes use.

The ONNX graph is translated op by op into this graph (see ``converter.py``); layout, fusion and
quantization passes then rewrite it, and ``writer.py`` serialises it to a flatbuffer.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(eq=False)
class Quant:
    """Affine quantization: ``real = scale * (q - zero_point)``, per tensor or along ``axis``.

    ``block_size``: blockwise (LiteRT's ``BlockwiseQuantization``, int4 weights): ``scale`` has the tensor's
    rank, one scale per ``block_size`` values along ``axis``; zero points 0.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0
    block_size: int = 0

    def __post_init__(self) -> None:
        self.scale = np.atleast_1d(np.asarray(self.scale, dtype=np.float32))
        self.zero_point = np.atleast_1d(np.asarray(self.zero_point, dtype=np.int64))

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and not self.block_size

    def same_as(self, other: Quant | None) -> bool:
        return (
            other is not None
            and self.scale.shape == other.scale.shape
            and self.axis == other.axis
            and self.block_size == other.block_size
            and bool(np.all(self.scale == other.scale))
            and bool(np.all(self.zero_point == other.zero_point))
        )

    def describe(self) -> str:
        if self.per_tensor:
            return f"scale {float(self.scale[0]):.6g} zp {int(self.zero_point[0])}"
        return f"per-axis {self.axis} ({self.scale.size} scales)"


@dataclass(eq=False)
class Tensor:
    """A tensor. ``data`` makes it a constant; ``quant`` makes it an integer (quantized) tensor.

    A float constant that came from a DequantizeLinear of integer weights keeps the integer weights in
    ``qdata``/``qparams`` so that the quantization pass can use them exactly.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    data: np.ndarray | None = None
    quant: Quant | None = None
    qdata: np.ndarray | None = None
    qparams: Quant | None = None

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        self.dtype = np.dtype(self.dtype)
        if self.data is not None:
            self.data = np.asarray(self.data, dtype=self.dtype, order="C")
            assert self.data.shape == self.shape, (self.name, self.data.shape, self.shape)

    @property
    def is_const(self) -> bool:
        return self.data is not None

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(eq=False)
class Op:
    """One TFLite operator. ``code`` is a ``BuiltinOperator`` name, ``options`` a schema ``*OptionsT``."""

    code: str
    inputs: list[Tensor | None]
    outputs: list[Tensor]
    options: object | None = None
    origin: str = ""


@dataclass(eq=False)
class Graph:
    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)  # the ONNX names of ``outputs``
    io_perms: dict[str, tuple[int, ...] | None] = field(default_factory=dict)  # ONNX -> TFLite layout
    #: ONNX layers a QDQ model keeps float on purpose (a weighted op reading float weights, not a
    #: DequantizeLinear): they stay float kernels, never quantized by the converter.
    float_layers: set[str] = field(default_factory=set)
    #: ids of the float ops that quantize a float input as QuantizeLinear does (``quantized.exact_input_quantize``):
    #: part of the input's quantization, not layers left float.
    input_quantization: set[int] = field(default_factory=set)
    #: ids of the float ops that compute an integer kernel on the int8 levels exactly and round as QuantizeLinear
    #: does (``exact_matmul``, ``integer_resize.exact_float_taps``): integer arithmetic, not layers left float.
    integer_arithmetic: set[int] = field(default_factory=set)
    _names: set[str] = field(default_factory=set)
    _counter: Iterator[int] = field(default_factory=itertools.count)

    # -- construction -------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        name = base or "t"
        while name in self._names:
            name = f"{base}_{next(self._counter)}"
        self._names.add(name)
        return name

    def tensor(
        self, name: str, shape: Sequence[int], dtype: np.dtype | type, quant: Quant | None = None
    ) -> Tensor:
        return Tensor(self.unique_name(name), tuple(shape), np.dtype(dtype), quant=quant)

    def const(self, name: str, value: np.ndarray | Sequence, dtype: np.dtype | type | None = None) -> Tensor:
        array = np.asarray(value, dtype=dtype)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        return Tensor(self.unique_name(name), array.shape, array.dtype, data=array)

    def add(
        self,
        code: str,
        inputs: Sequence[Tensor | None],
        outputs: Sequence[Tensor],
        options: object = None,
        origin: str = "",
    ) -> Op:
        op = Op(code, list(inputs), list(outputs), options, origin)
        self.ops.append(op)
        return op

    # -- queries -----------------------------------------------------------------------------
    def producers(self) -> dict[int, Op]:
        return {id(t): op for op in self.ops for t in op.outputs}

    def consumers(self) -> dict[int, list[Op]]:
        users: dict[int, list[Op]] = {}
        for op in self.ops:
            for t in op.inputs:
                if t is not None:
                    users.setdefault(id(t), []).append(op)
        return users

    def is_graph_output(self, tensor: Tensor) -> bool:
        return any(t is tensor for t in self.outputs)

    def replace_op(self, op: Op, new: Sequence[Op], integer: bool = False) -> None:
        """``op`` replaced, where it stands, by ``new``; ``integer``: ``new`` computes an integer kernel on the
        int8 levels exactly (:attr:`integer_arithmetic`, not layers left float)."""
        at = self.ops.index(op)
        self.ops[at : at + 1] = list(new)
        if integer:
            self.integer_arithmetic.update(id(o) for o in new)

    def replace_uses(self, old: Tensor, new: Tensor) -> None:
        """Make every consumer (and the graph outputs) read ``new`` instead of ``old``."""
        for op in self.ops:
            op.inputs = [new if t is old else t for t in op.inputs]
        self.outputs = [new if t is old else t for t in self.outputs]

    def remove_dead(self) -> None:
        """Drop ops none of whose outputs is used (iterating until stable)."""
        while True:
            used = {id(t) for op in self.ops for t in op.inputs if t is not None}
            used |= {id(t) for t in self.outputs}
            kept = [op for op in self.ops if any(id(t) in used for t in op.outputs)]
            if len(kept) == len(self.ops):
                return
            self.ops = kept

    def toposort(self) -> None:
        produced = {id(t) for op in self.ops for t in op.outputs}
        ready = {id(t) for t in self.inputs}
        order: list[Op] = []
        pending = list(self.ops)
        while pending:
            rest = []
            for op in pending:
                if all(t is None or t.is_const or id(t) not in produced or id(t) in ready for t in op.inputs):
                    order.append(op)
                    ready.update(id(t) for t in op.outputs)
                else:
                    rest.append(op)
            assert len(rest) < len(pending), "cycle in TFLite graph"
            pending = rest
        self.ops = order

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.code] = counts.get(op.code, 0) + 1
        return dict(sorted(counts.items()))
