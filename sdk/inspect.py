"""``edgekit inspect``: what a model is made of and which targets can take each of its ops.

The inventory (inputs, outputs, op counts, parameters) describes the file as given. The target
checks run on the model as ``load_model`` prepares it for conversion (opset 19, static shapes,
folded BatchNorm, fused bias adds, no Identity/Dropout), which is what ``deploy`` hands the targets;
op types that the preparation removes are reported as such.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from edgekit.core.errors import EdgekitError, ModelError


def _dtype_name(elem_type: int) -> str:
    """numpy's name for an ONNX element type (``float32``), else ONNX's own name in lower case."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower() if elem_type else "undefined"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int | str, ...] | None
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": None if self.shape is None else list(self.shape),
            "dtype": self.dtype,
        }


@dataclass(frozen=True)
class OpSupport:
    """One op type for one target: supported, or not with the reasons."""

    op_type: str
    supported: bool
    reasons: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"op_type": self.op_type, "supported": self.supported, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class TargetReport:
    """A target's verdict: per op type, plus problems not tied to an op type of the model."""

    target: str
    ok: bool
    ops: tuple[OpSupport, ...]
    other_problems: tuple[str, ...] = ()
    not_checked: str | None = None

    def op(self, op_type: str) -> OpSupport | None:
        return next((o for o in self.ops if o.op_type == op_type), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "ok": self.ok,
            "ops": [o.to_json() for o in self.ops],
            "other_problems": list(self.other_problems),
            "not_checked": self.not_checked,
        }


@dataclass(frozen=True)
class Inspection:
    path: str
    opset: int | None
    producer: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    op_counts: Mapping[str, int]
    parameter_count: int
    parameter_bytes: int
    quantized: bool
    targets: tuple[TargetReport, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "opset": self.opset,
            "producer": self.producer,
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
            "op_counts": dict(self.op_counts),
            "node_count": sum(self.op_counts.values()),
            "parameter_count": self.parameter_count,
            "parameter_bytes": self.parameter_bytes,
            "quantized": self.quantized,
            "targets": [t.to_json() for t in self.targets],
            "notes": list(self.notes),
        }


def _tensor_info(value: onnx.ValueInfoProto) -> TensorInfo:
    ttype = value.type.tensor_type
    shape = None
    if ttype.HasField("shape"):
        shape = tuple(d.dim_value if d.dim_value > 0 else (d.dim_param or "?") for d in ttype.shape.dim)
    return TensorInfo(value.name, shape, _dtype_name(ttype.elem_type))


def _parameters(proto: onnx.ModelProto) -> tuple[int, int]:
    tensors = list(proto.graph.initializer)
    for node in proto.graph.node:
        if node.op_type == "Constant":
            tensors += [
                a.t for a in node.attribute if a.name == "value" and a.type == onnx.AttributeProto.TENSOR
            ]
    count = nbytes = 0
    for t in tensors:
        n = int(np.prod(t.dims, dtype=np.int64)) if t.dims else 1
        count += n
        try:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 1
        nbytes += n * itemsize
    return count, nbytes


def _qualified(op_type: str, domain: str) -> str:
    """An op's name as inspect shows it: ``Conv``, or ``com.acme.MyOp`` outside the default domain."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def _op_counts(graph: onnx.GraphProto) -> Counter[str]:
    counts: Counter[str] = Counter()
    for node in graph.node:
        counts[_qualified(node.op_type, node.domain)] += 1
    return counts


def _target_report(name: str, model: Any, original_ops: Sequence[str]) -> TargetReport:
    from edgekit.targets.base import get_target

    target = get_target(name)
    try:
        problems = target.support_problems(model)
    except EdgekitError as exc:
        return TargetReport(name, False, (), (str(exc),))
    # problems name a node's bare op type: show them under the op's qualified name, as the inventory does
    qualified = {n.op_type: _qualified(n.op_type, n.domain) for n in model.graph}
    prepared_ops = set(qualified.values())
    errors: dict[str, list[str]] = {}
    other: list[str] = []
    for p in problems:
        op = qualified.get(p.op_type, p.op_type) if p.op_type else None
        if p.severity != "error":
            other.append(str(p))
        elif op in prepared_ops or op in original_ops:
            errors.setdefault(op, []).append(f"{p.node}: {p.message}" if p.node else p.message)
        else:
            other.append(str(p))
    ops = []
    for op_type in sorted(set(original_ops) | prepared_ops):
        if op_type in errors:
            ops.append(OpSupport(op_type, False, tuple(dict.fromkeys(errors[op_type]))))
        elif op_type not in prepared_ops:
            ops.append(OpSupport(op_type, True, ("removed or folded before conversion",)))
        else:
            ops.append(OpSupport(op_type, True))
    ok = not any(p.severity == "error" for p in problems)
    return TargetReport(name, ok, tuple(ops), tuple(other))


def inspect_model(
    path: str | os.PathLike[str],
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    targets: Sequence[str] | None = None,
) -> Inspection:
    """Inspect an ONNX file; ``targets`` (default: every registered target) are checked op by op."""
    from edgekit.core.model import is_quantized, load_proto, read_proto
    from edgekit.targets.base import get_target, target_names

    proto = read_proto(path)
    inits = {t.name for t in proto.graph.initializer}
    inputs = tuple(_tensor_info(v) for v in proto.graph.input if v.name not in inits)
    outputs = tuple(_tensor_info(v) for v in proto.graph.output)
    counts = _op_counts(proto.graph)
    params, nbytes = _parameters(proto)
    opset = next((i.version for i in proto.opset_import if i.domain in ("", "ai.onnx")), None)
    unknown = sorted(set(input_shapes or {}) - {i.name for i in inputs})
    if unknown:
        raise ModelError(
            f"--input-shape names unknown input(s) {unknown}; the model's inputs are {[i.name for i in inputs]}"
        )
    names = list(targets) if targets else target_names()
    for name in names:
        get_target(name)  # unknown names fail before the slow part
    notes: list[str] = []
    reports: list[TargetReport] = []
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    try:
        model = load_proto(copy, input_shapes, messages=notes)
    except EdgekitError as exc:
        reason = str(exc)
        reports = [TargetReport(n, False, (), (), not_checked=reason) for n in names]
    else:
        reports = [_target_report(n, model, list(counts)) for n in names]
    producer = " ".join(x for x in (proto.producer_name, proto.producer_version) if x)
    return Inspection(
        path=str(Path(path)),
        opset=opset,
        producer=producer,
        inputs=inputs,
        outputs=outputs,
        op_counts=dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))),
        parameter_count=params,
        parameter_bytes=nbytes,
        quantized=is_quantized(proto),
        targets=tuple(reports),
        notes=tuple(notes),
    )
