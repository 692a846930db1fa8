"""The ``fp16`` recipe as an ONNX model: float16 weights and compute, float32 at the model's inputs/outputs.

Every float32 tensor becomes float16 except where an op cannot take float16:

- the op's schema (at the model's opset) does not allow ``tensor(float16)`` for that operand, or pins it
  to ``tensor(float)`` (Resize's ``scales``, Upsample's ``scales``): that operand stays float32;
- the op is in :data:`FP32_OPS` (no float16 meaning, or results float16 cannot hold), reads a
  constant whose values float16 cannot hold (|x| > 65504: an attention mask's ``-1e38``), or its float
  output's type is set by an attribute rather than by a float input (ConstantOfShape, Constant, EyeLike):
  the whole op stays float32.

A Cast joins the two worlds wherever a tensor's producer and consumer disagree (one Cast per tensor and
type), and at the edges: each float32 model input is cast to float16 after it, each float16 output cast
back, so the model keeps its float32 interface and its input/output names. Weights read both ways are
stored once per type. Runtimes without a float16 kernel for an op (onnxruntime's CPU provider has few)
insert their own casts around it and compute in float32; the numbers are then float16 weights and
float16-rounded activations between ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.errors import QuantizationError

FLOAT, HALF = ir.DataType.FLOAT, ir.DataType.FLOAT16
FP16_MAX = float(np.finfo(np.float16).max)

#: Ops kept in float32 whatever their schema allows, with the reason (one table: reported per node).
FP32_OPS: dict[str, str] = {
    "Cast": "a Cast keeps the type it was asked for",
    "RandomNormal": "random generators keep float32",
    "RandomUniform": "random generators keep float32",
    "RandomNormalLike": "random generators keep float32",
    "RandomUniformLike": "random generators keep float32",
    "Range": "index arithmetic",
    "CumSum": "a running sum loses float16's 11 bits of precision over long axes",
    "NonMaxSuppression": "boxes and scores are compared, not computed",
    "TopK": "ties between float16-rounded scores would reorder the result",
    "RoiAlign": "box coordinates need float32 positions",
}


@dataclass
class Fp16Result:
    model: ir.Model
    #: (node name, op type, reason) of every node left in float32.
    float32_nodes: list[tuple[str, str, str]] = field(default_factory=list)
    casts: int = 0
    converted_weights: int = 0

    def to_json(self) -> dict:
        return {
            "float32_nodes": [{"node": n, "op_type": o, "reason": r} for n, o, r in self.float32_nodes],
            "casts": self.casts,
            "converted_weights": self.converted_weights,
        }


def _formal(
    schema: onnx.defs.OpSchema, index: int, outputs: bool
) -> onnx.defs.OpSchema.FormalParameter | None:
    params = schema.outputs if outputs else schema.inputs
    if not params:
        return None
    if index < len(params):
        return params[index]
    last = params[-1]
    return last if last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic else None


def _allows_half(schema: onnx.defs.OpSchema, index: int, outputs: bool) -> bool:
    """Whether operand ``index`` of ``schema`` takes float16."""
    param = _formal(schema, index, outputs)
    if param is None:
        return False
    if param.type_str.startswith("tensor(") or param.type_str.startswith("seq("):
        return param.type_str == "tensor(float16)"
    for constraint in schema.type_constraints:
        if constraint.type_param_str == param.type_str:
            return "tensor(float16)" in constraint.allowed_type_strs
    return False


def _is_float(value: ir.Value | None) -> bool:
    return value is not None and value.dtype == FLOAT


def _why_fp32(node: ir.Node, opset: int) -> str | None:
    """Why ``node`` stays float32 as a whole, or None when its float operands can be float16."""
    if node.op_type in FP32_OPS:
        return FP32_OPS[node.op_type]
    if node.domain not in ("", "ai.onnx"):
        return f"an op of domain {node.domain!r}"
    if any(
        attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values()
    ):
        return "an op with sub-graphs"
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return "no schema at this opset"
    for outputs, values in ((False, node.inputs), (True, node.outputs)):
        for i, v in enumerate(values):
            if (
                _is_float(v)
                and not _allows_half(schema, i, outputs)
                and (outputs or not _pinned_float(schema, i))
            ):
                return (
                    f"its schema at opset {opset} takes no float16 for {'output' if outputs else 'input'} {i}"
                )
    bound = {_formal(schema, i, False).type_str for i, v in enumerate(node.inputs) if _is_float(v)}
    for i, v in enumerate(node.outputs):
        if _is_float(v) and _formal(schema, i, True).type_str not in bound:
            return "its output type comes from an attribute, not from a float input"
    for v in node.inputs:
        data = v.const_value if v is not None and _is_float(v) else None
        if data is not None and data.size and float(np.max(np.abs(data.numpy()))) > FP16_MAX:
            return f"constant {v.name!r} holds values beyond float16's range (|x| > 65504)"
    return None


def _pinned_float(schema: onnx.defs.OpSchema, index: int) -> bool:
    """An input fixed to ``tensor(float)`` whatever the op computes in (Resize's scales): it stays float32."""
    param = _formal(schema, index, False)
    return param is not None and param.type_str == "tensor(float)"


def to_fp16(model: ir.Model) -> Fp16Result:
    """Rewrite ``model`` (a float model from :func:`edgekit.core.model.load_model`) in place to the fp16 recipe."""
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph):
        raise QuantizationError("--precision fp16 needs a float model; this one is already quantized")
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
    graph = model.graph
    result = Fp16Result(model)
    nodes = list(graph)
    half_nodes: set[int] = set()
    for node in nodes:
        why = _why_fp32(node, opset)
        if why is None:
            half_nodes.add(id(node))
        elif any(_is_float(v) for v in (*node.inputs, *node.outputs)):
            result.float32_nodes.append((node.name or "", node.op_type, why))

    # The type each float tensor wants at each consumer: float16 operands of float16 nodes, else float32.
    def wants_half(node: ir.Node, index: int) -> bool:
        if id(node) not in half_nodes:
            return False
        schema = onnx.defs.get_schema(node.op_type, opset, "")
        return _allows_half(schema, index, False)

    home: dict[int, ir.DataType] = {}  # the type a float tensor is produced in
    for node in nodes:
        for out in node.outputs:
            if _is_float(out):
                home[id(out)] = HALF if id(node) in half_nodes else FLOAT

    initializers = dict(graph.initializers)
    casts: dict[tuple[int, ir.DataType], ir.Value] = {}
    half_copies: dict[int, ir.Value] = {}

    def cast(value: ir.Value, to: ir.DataType) -> ir.Value:
        key = (id(value), to)
        if key not in casts:
            node = ir.node(
                "Cast", [value], {"to": int(to)}, name=f"{value.name}_to_{'fp16' if to == HALF else 'fp32'}"
            )
            out = node.outputs[0]
            out.name = f"{value.name}_{'fp16' if to == HALF else 'fp32'}"
            out.dtype, out.shape = to, value.shape
            producer = value.producer()
            if producer is None:  # a graph input: cast before everything
                graph.insert_before(nodes[0], node)
            else:
                graph.insert_after(producer, node)
            casts[key] = out
            result.casts += 1
        return casts[key]

    def half_weight(value: ir.Value) -> ir.Value:
        """A float16 copy of a float32 initializer (stored once)."""
        if id(value) not in half_copies:
            array = value.const_value.numpy().astype(np.float16)
            copy = ir.Value(
                name=f"{value.name}_fp16",
                type=ir.TensorType(HALF),
                shape=value.shape,
                const_value=ir.tensor(array),
            )
            graph.register_initializer(copy)
            half_copies[id(value)] = copy
            result.converted_weights += 1
        return half_copies[id(value)]

    for node in nodes:
        for i, v in enumerate(list(node.inputs)):
            if not _is_float(v) and not (v is not None and v.dtype == HALF):
                continue
            want = HALF if wants_half(node, i) else FLOAT
            have = v.dtype
            if want == have:
                continue
            if v.name in initializers and want == HALF and have == FLOAT:
                node.replace_input_with(i, half_weight(v))
            else:
                node.replace_input_with(i, cast(v, want))
        if id(node) in half_nodes:
            for out in node.outputs:
                if _is_float(out):
                    out.dtype = HALF

    # Initializers only float16 nodes read are stored in float16 alone.
    for name, value in list(graph.initializers.items()):
        if value.dtype == FLOAT and not value.uses() and not value.is_graph_output():
            graph.initializers.pop(name)

    # The interface stays float32: outputs produced in float16 are cast back under their own names.
    for i, out in enumerate(list(graph.outputs)):
        if out.dtype != HALF:
            continue
        name = out.name
        out.name = f"{name}_fp16"
        node = ir.node("Cast", [out], {"to": int(FLOAT)}, name=f"{name}_to_fp32")
        back = node.outputs[0]
        back.name, back.dtype, back.shape = name, FLOAT, out.shape
        graph.append(node)
        graph.outputs[i] = back
        result.casts += 1
    return result
