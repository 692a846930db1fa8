"""Graph patterns the quantizer keeps float as a whole (transformer encoders), each node mapped to its reason.

- ``mask_paths``: arithmetic on integer model inputs (token ids, attention masks): Cast, Unsqueeze, Sub, Mul,
  Equal, Where, Expand, ... and every op that reads their result, up to the Softmax that consumes the masked
  scores. The extended attention mask ``(1 - mask) * float_min`` (or ``-10000``) spans ~1e38: one int8 scale
  for it, or for the scores it is added to, wipes out the scores (and TFLite aborts on the requantize
  multiplier). The Softmax output is a probability again: its readers quantize it as usual (so are the outputs
  of a MatMul/Gemm/Conv reading the path). A Gather reading ids as indices is not on the path (it picks rows of
  a float table).
- ``layer_norms``: LayerNorm written out as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div (+ the affine Mul/Add),
  as PyTorch exports it below opset 17: float inside like the LayerNormalization op (an int8 variance of int8
  deviations loses most of its precision), quantized at its input and output.
- ``erf_gelus``: the nodes of ``x * 0.5 * (1 + erf(x / sqrt 2))`` (PyTorch's exact GELU). Kept float inside,
  with ``x`` and the result quantized, the converter fuses them into TFLite's GELU and runs its int8 kernel
  (a lookup table of the same function), which is what the QDQ model computes.
"""

from __future__ import annotations

import onnx_ir as ir
from edgekit.core.irutil import const_array

MASK_REASON = (
    "attention-mask arithmetic on integer inputs (its range is set by mask constants such as -3.4e38)"
)
LAYER_NORM_REASON = (
    "inside a LayerNorm written out: float like LayerNormalization, quantized at its input and output"
)
GELU_REASON = "inside an Erf-GELU: quantized at its input and output only (TFLite GELU)"

#: Ops whose output no longer carries the mask's range: the Softmax of the masked scores (probabilities), and ops
#: that weigh their input (an integer input that scales data, say, leaves the layers after them quantized).
_MASK_ENDS = frozenset({"Softmax", "MatMul", "Gemm", "Conv", "ConvTranspose"})


def _integer_paths(model: ir.Model, inputs: list[ir.Value]) -> tuple[dict[str, set[int]], set[int]]:
    """For each node computing from the integer model ``inputs`` (other than Gather indices), up to the ops
    that end a mask's range: the indices of the inputs it computes from; and the indices of the inputs that
    are data: a weighing op (Conv, MatMul, Gemm, ConvTranspose) reads, as its data, a value computed from the
    input and constants alone, and nothing on the input's path mixes it into another activation (a mask is
    added to scores or multiplies hidden states)."""
    origins: dict[int, set[int]] = {id(v): {i} for i, v in enumerate(inputs)}
    pure: set[int] = {id(v) for v in inputs}  # computed from integer inputs and constants alone
    found: dict[str, set[int]] = {}
    weighed: set[int] = set()
    mixed: set[int] = set()
    for node in model.graph:  # topological order
        hits = [i for i, v in enumerate(node.inputs) if v is not None and id(v) in origins]
        if not hits or (node.op_type == "Gather" and hits == [1]):
            continue
        reached = set().union(*(origins[id(node.inputs[i])] for i in hits))
        found[node.name] = reached
        others = [v for i, v in enumerate(node.inputs) if v is not None and i not in hits]
        alone = all(id(node.inputs[i]) in pure for i in hits) and all(
            const_array(v) is not None for v in others
        )
        if node.op_type in _MASK_ENDS:
            if node.op_type != "Softmax" and 0 in hits and id(node.inputs[0]) in pure:
                weighed |= origins[id(node.inputs[0])]
            continue
        if not alone:
            mixed |= reached
        for v in node.outputs:
            origins[id(v)] = reached
            if alone:
                pure.add(id(v))
    return found, weighed - mixed


def mask_paths(model: ir.Model) -> dict[str, str]:
    """Nodes computing from integer model inputs (other than Gather indices), up to the Softmax that ends it.

    An integer input that is data in integer form (a uint8 image: Cast, Transpose, Div, Sub, then the first
    convolution; see :func:`_integer_paths`) is not a mask: its path is quantized as usual.
    """
    inputs = [
        v
        for v in model.graph.inputs
        if v.dtype is not None and v.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE)
    ]
    found, data = _integer_paths(model, inputs)
    return {name: MASK_REASON for name, origins in found.items() if origins - data}


def _scalar(value: ir.Value | None, expected: float) -> bool:
    array = const_array(value)
    return array is not None and array.size == 1 and abs(float(array.reshape(-1)[0]) - expected) < 1e-4


def _only_user(value: ir.Value, op_type: str) -> ir.Node | None:
    uses = list(value.uses())
    if len(uses) != 1 or value.is_graph_output() or uses[0].node.op_type != op_type:
        return None
    return uses[0].node


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    others = [v for v in node.inputs if v is not value]
    return others[0] if len(others) == 1 else None


def _gelu_at(erf: ir.Node) -> list[ir.Node] | None:
    scaled = erf.inputs[0].producer()
    if scaled is None or scaled.op_type not in ("Div", "Mul") or len(scaled.inputs) != 2:
        return None
    x, c = scaled.inputs
    if not _scalar(c, 2**0.5 if scaled.op_type == "Div" else 2**-0.5):
        return None
    add = _only_user(erf.outputs[0], "Add")
    if add is None or not _scalar(_other(add, erf.outputs[0]), 1.0):
        return None
    m1 = _only_user(add.outputs[0], "Mul")
    if m1 is None:
        return None
    nodes = [scaled, erf, add, m1]
    other = _other(m1, add.outputs[0])
    half = other.producer() if other is not None else None
    if (
        half is not None
        and half.op_type == "Mul"
        and x in half.inputs
        and _scalar(_other(half, x), 0.5)
        and len(list(other.uses())) == 1
    ):
        return [*nodes, half]  # (x * 0.5) * (1 + erf)
    m2 = _only_user(m1.outputs[0], "Mul")
    if m2 is None:
        return None
    last = _other(m2, m1.outputs[0])
    if (other is x and _scalar(last, 0.5)) or (_scalar(other, 0.5) and last is x):
        return [*nodes, m2]  # (x * (1 + erf)) * 0.5 or (0.5 * (1 + erf)) * x
    return None


def _every(model: ir.Model, op_type: str, match, reason: str) -> dict[str, str]:
    """The nodes of every match of ``match`` (tried at each ``op_type`` node), each with ``reason``."""
    found: dict[str, str] = {}
    for node in model.graph:
        if node.op_type == op_type:
            nodes = match(node)
            if nodes is not None:
                found.update((n.name, reason) for n in nodes)
    return found


def erf_gelus(model: ir.Model) -> dict[str, str]:
    """The nodes of every exact (erf) GELU written out in ``model``."""
    return _every(model, "Erf", _gelu_at, GELU_REASON)


def _producer(value: ir.Value | None, *op_types: str) -> ir.Node | None:
    node = value.producer() if value is not None else None
    return node if node is not None and node.op_type in op_types else None


def layer_norm_at(div: ir.Node) -> list[ir.Node] | None:
    """Div(x - mean(x), sqrt(mean((x - mean(x))^2) + eps)) [* gamma] [+ beta]: its nodes (the first mean first,
    the last node the result), or None."""
    centered, std = div.inputs
    sqrt = _producer(std, "Sqrt")
    add = _producer(sqrt.inputs[0], "Add") if sqrt is not None else None
    if add is None or not any(const_array(v) is not None for v in add.inputs):
        return None
    var = next((n for v in add.inputs if (n := _producer(v, "ReduceMean")) is not None), None)
    square = _producer(var.inputs[0], "Pow", "Mul") if var is not None else None
    sub = _producer(centered, "Sub")
    if square is None or sub is None or square.inputs[0] is not centered:
        return None
    if square.op_type == "Pow" and not _scalar(square.inputs[1], 2.0):
        return None
    if square.op_type == "Mul" and square.inputs[1] is not centered:
        return None
    mean = _producer(sub.inputs[1], "ReduceMean")
    if mean is None or mean.inputs[0] is not sub.inputs[0]:
        return None
    nodes = [mean, sub, square, var, add, sqrt, div]
    out = div.outputs[0]
    for op_type in ("Mul", "Add"):  # the affine part: a constant scale, then a constant shift
        user = _only_user(out, op_type)
        if user is None or const_array(_other(user, out)) is None:
            break
        nodes.append(user)
        out = user.outputs[0]
    return nodes


def layer_norms(model: ir.Model) -> dict[str, str]:
    """The nodes of every LayerNorm written out in ``model``."""
    return _every(model, "Div", layer_norm_at, LAYER_NORM_REASON)


def float_patterns(model: ir.Model) -> dict[str, str]:
    """Every node one of the patterns keeps float, with the reason."""
    return {**layer_norms(model), **erf_gelus(model), **mask_paths(model)}
