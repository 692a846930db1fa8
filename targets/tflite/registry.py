"""The op-converter registry: one small function per ONNX op type, per opset version.

    @converter("Conv", since=1)
    def conv(ctx, node, *, strides=None, pads=None, group=1, ...): ...

ONNX attributes are passed as keyword arguments (their names and defaults are the function's keyword
parameters); an attribute the function does not declare is reported, never silently ignored.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir
from edgekit.core.errors import TargetError, UnsupportedOpError

ConverterFn = Callable[..., None]


@dataclass(frozen=True)
class Registration:
    op_type: str
    since: int
    fn: ConverterFn
    attributes: frozenset[str]


_REGISTRY: dict[str, list[Registration]] = {}


def converter(op_type: str, since: int = 1) -> Callable[[ConverterFn], ConverterFn]:
    """Register ``fn`` as the converter of ``op_type`` for opsets >= ``since`` (until a later one)."""

    def decorate(fn: ConverterFn) -> ConverterFn:
        entries = _REGISTRY.setdefault(op_type, [])
        if any(r.since == since for r in entries):
            raise ValueError(f"duplicate converter for {op_type} since opset {since}: {fn.__qualname__}")
        params = inspect.signature(fn).parameters.values()
        attrs = frozenset(p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY)
        entries.append(Registration(op_type, since, fn, attrs))
        entries.sort(key=lambda r: r.since)
        return fn

    return decorate


def supported_ops() -> list[str]:
    """ONNX op types (default domain) the converter takes."""
    _load_converters()
    return sorted(_REGISTRY)


def lookup(node: ir.Node, opset: int, target: str) -> Registration:
    _load_converters()
    if node.domain not in ("", "ai.onnx"):
        raise UnsupportedOpError(f"{node.domain}::{node.op_type}", node.name or "", target, supported_ops())
    candidates = [r for r in _REGISTRY.get(node.op_type, ()) if r.since <= opset]
    if not candidates:
        raise UnsupportedOpError(node.op_type, node.name or "", target, supported_ops())
    return candidates[-1]


def call(reg: Registration, ctx: Any, node: ir.Node, target: str) -> None:
    kwargs: dict[str, Any] = {}
    for name, attr in node.attributes.items():
        if name not in reg.attributes:
            raise TargetError(
                f"{node.op_type} node {node.name!r}: attribute {name!r} is not supported by the {target} "
                f"converter (it handles: {', '.join(sorted(reg.attributes)) or 'none'})"
            )
        kwargs[name] = attr.value
    reg.fn(ctx, node, **kwargs)


def _load_converters() -> None:
    # Importing the op modules registers their converters.
    from edgekit.targets.tflite import (  # noqa: F401
        ops_conv,
        ops_einsum,
        ops_elementwise,
        ops_gridsample,
        ops_index,
        ops_logic,
        ops_math,
        ops_misc,
        ops_resize,
        ops_rnn,
        ops_roi_align,
        ops_selection,
        ops_shape,
    )
