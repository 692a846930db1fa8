"""Planning: which tensors get quantized and how, decided from the graph and the rules alone (no data).

The plan is what statistics are collected for (:mod:`edgekit.quantize.calibrate`) and what the rewrite passes
(:mod:`edgekit.quantize.qdq`) apply; it does not change the graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir
from edgekit.core.errors import QuantizationError
from edgekit.core.irutil import attr, const_array, only_consumer
from edgekit.core.shape_checks import data_dependent_tail
from edgekit.quantize import patterns, rules
from edgekit.quantize.recipes import resolve_layer_names


@dataclass(frozen=True)
class WeightSpec:
    node: str
    weight_index: int
    axis: int
    bias_index: int | None
    #: The activation whose scale multiplies the weight scale to give the bias scale.
    input_tensor: str
    #: The plan's key of that input (its requantized copy when the layer's recipe differs from its producer's).
    input_key: str = ""
    #: The layer computes in 16x8 mode (int16 activations).
    int16: bool = False


@dataclass(frozen=True)
class FloatOp:
    node: str
    op_type: str
    reason: str


@dataclass
class QuantPlan:
    #: Activation tensors to quantize (graph inputs and node outputs), in graph order.
    activations: list[str] = field(default_factory=list)
    #: Constant data inputs quantized per tensor (not weights): (node name, input index).
    constants: list[tuple[str, int]] = field(default_factory=list)
    weights: list[WeightSpec] = field(default_factory=list)
    #: Output ranges fixed by integer kernels, as (scale, int8 zero point) (int16: the zero point, 0).
    fixed: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: Tensors that must share one scale: tensor -> representative.
    parent: dict[str, str] = field(default_factory=dict)
    #: Node outputs not quantized because the activation after them is fused: output -> activation node.
    fused: dict[str, str] = field(default_factory=dict)
    float_ops: list[FloatOp] = field(default_factory=list)
    #: Inputs of multi-input same-scale ops (Concat, Max, Min) whose tensor has a fixed range of its own: they
    #: are requantized to the op's shared scale. key -> (node, input index, source tensor).
    requant: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    #: Tensors whose range never exceeds that of their scale group's other members (outputs of pooling, reshapes,
    #: Concat, ...): calibration need not observe them.
    derived: set[str] = field(default_factory=set)
    #: Outputs whose scale must exceed their input's times a ratio (HARD_SWISH): output -> (input, ratio).
    min_scale: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: Members (activations, constant keys, requantize keys) quantized to int16, symmetric (``int16x8`` layers);
    #: the others take the 8-bit activation type. A tensor takes its producer's type; a reader of the other
    #: type reads a requantized copy (``requant``): each tensor has one quantization.
    int16: set[str] = field(default_factory=set)
    #: Outputs quantized on the grid of the (non-fusable) Clip that reads them -> that Clip's output: their values
    #: are the Clip's, saturated by the grid (the per-layer comparison with fp32 reads the Clip's output).
    saturated: dict[str, str] = field(default_factory=dict)
    #: Constant keys a kernel reads as symmetric int8 (zero point 0: ``Kernel.symmetric_constants``, BATCH_MATMUL's
    #: constant operand), so that the QDQ model holds the constant the .tflite computes with.
    symmetric: set[str] = field(default_factory=set)
    #: (node, input index) of float nodes that read a quantized activation as the float tensor, not its int8 copy
    #: (the skip input of a residual sum: ``patterns.residual_reads``).
    float_reads: set[tuple[str, int]] = field(default_factory=set)
    #: Activations read only by ops that saturate their input (``rules.SATURATING_INPUTS``: HardSwish below -3,
    #: ...) -> the bounds beyond which no reader sees a difference: their range need not reach further.
    saturation: dict[str, tuple[float, float]] = field(default_factory=dict)

    def group(self, name: str) -> str:
        root = name
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(name, name) != root:  # path compression
            self.parent[name], name = root, self.parent[name]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.group(a), self.group(b)
        if ra == rb:
            return
        fa, fb = self.fixed_of(ra), self.fixed_of(rb)
        if fa is not None and fb is not None and fa != fb:
            return  # two fixed ranges cannot share a scale: the converter requantizes between them
        # A group with a fixed range keeps it: make its root the representative.
        if fb is not None:
            ra, rb = rb, ra
        self.parent[rb] = ra

    def fixed_of(self, root: str) -> tuple[float, int] | None:
        for name, value in self.fixed.items():
            if self.group(name) == root:
                return value
        return None

    def members(self) -> dict[str, list[str]]:
        groups: dict[str, list[str]] = {}
        for name in self.activations + [constant_key(n, i) for n, i in self.constants] + list(self.requant):
            groups.setdefault(self.group(name), []).append(name)
        return groups


def constant_key(node: str, index: int) -> str:
    """The plan's name for a constant data input (constants may be shared, their uses are not)."""
    return f"{node}::{index}"


def _is_fusable_activation(node: ir.Node) -> bool:
    if node.op_type == "Relu":
        return True
    if node.op_type == "Clip":
        bounds = [const_array(v) if v is not None else None for v in node.inputs[1:3]]
        if any(v is not None and b is None for v, b in zip(node.inputs[1:3], bounds, strict=False)):
            return False
        lo = float(bounds[0]) if len(bounds) > 0 and bounds[0] is not None else -np.inf
        hi = float(bounds[1]) if len(bounds) > 1 and bounds[1] is not None else np.inf
        # The fused activations TFLite has: RELU (0, inf), RELU6 (0, 6), RELU_N1_TO_1 (-1, 1).
        return (lo, hi) in {(0.0, np.inf), (0.0, 6.0), (-1.0, 1.0)}
    return False


def _is_constant_clip(node: ir.Node) -> bool:
    """A Clip whose bounds are constants (or absent)."""
    return node.op_type == "Clip" and all(v is None or const_array(v) is not None for v in node.inputs[1:3])


def _range_preserving(node: ir.Node) -> bool:
    """The op's output values lie within [min(input), max(input)] widened to 0 (all same-scale single-input ops:
    they move, pick, average or interpolate values), except Pad with a non-zero constant."""
    if node.op_type == "Pad":
        value = const_array(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
        mode = attr(node, "mode", "constant")
        return mode != "constant" or value is None or not np.any(value)
    return True


#: Why an output head (Softmax/Sigmoid/... producing a model output) is left in float.
FLOAT_HEAD_REASON = (
    "model output of a fixed-range op kept float: float-output targets dequantize it anyway, and its int8 grid "
    "(1/256) would tie close scores"
)
#: Why the pooling that feeds a float output head is left in float too.
FLOAT_POOL_REASON = (
    "pools the logits of a float output head: kept float, as the mean of int8 values is finer than the int8 grid "
    "and requantizing it would tie close scores"
)


_RESHAPING = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})
_POOLING = frozenset({"GlobalAveragePool", "ReduceMean"})


def _single_use_producer(value: ir.Value | None) -> ir.Node | None:
    """The producer of ``value`` if one node uses it (it may also be a model output)."""
    if value is None or len(list(value.uses())) != 1:
        return None
    return value.producer()


def _sole_reader_producer(value: ir.Value | None) -> ir.Node | None:
    """The producer of ``value`` if its one consumer is the only reader (no other use, not a model output)."""
    return None if value is None or value.is_graph_output() else _single_use_producer(value)


def _through_reshapes(
    node: ir.Node | None, producer: Callable[[ir.Value | None], ir.Node | None]
) -> tuple[list[ir.Node], ir.Node | None]:
    """Walk up from ``node`` through single-output reshapes: the reshapes passed and the first other node."""
    chain: list[ir.Node] = []
    while node is not None and node.op_type in _RESHAPING and len(node.outputs) == 1:
        chain.append(node)
        node = producer(node.inputs[0])
    return chain, node


def _output_heads(model: ir.Model) -> dict[str, str]:
    """Fixed-range ops (Softmax, Sigmoid, ...) whose output is a model output, directly or through reshapes
    (the version converter wraps an old Softmax in Flatten/Reshape), with those reshapes; and, in front of the
    head, a global average pool with its reshapes (the pooled logits), each mapped to the reason it stays float."""
    heads: dict[str, str] = {}
    for out in model.graph.outputs:
        chain, node = _through_reshapes(out.producer(), _single_use_producer)
        rule = rules.rule_for(node) if node is not None else None
        if rule is None or rule.fixed_output is None or len(list(node.outputs[0].uses())) > 1:
            continue
        heads.update((n.name, FLOAT_HEAD_REASON) for n in [node, *chain])
        before, source = _through_reshapes(_sole_reader_producer(node.inputs[0]), _sole_reader_producer)
        if source is not None and source.op_type in _POOLING:
            heads.update((n.name, FLOAT_POOL_REASON) for n in [*before, source])
    return heads


#: Why a Concat that joins fixed-range values (Sigmoid/Softmax scores) with others into a model output is float.
MIXED_CONCAT_REASON = (
    "joins fixed-range scores (0..1) with values of another range (box coordinates) into a model output, or for "
    "a selection that splits them again: one int8 scale for both rounds the scores away, so it is kept float"
)


def _split_again(node: ir.Node) -> list[ir.Node] | None:
    """The reshapes and the Slice / Split / Gather ops after a Concat whose values are only taken apart again by
    those (through reshapes), or None: ultralytics' export with ``nms=True`` joins boxes and scores in the head, then slices them
    apart for the selection (a seeded YOLOv8n: one int8 scale of 4.3 for both rounded every score to 0, and the
    int8 model selected no box where fp32 selected 89 to 297)."""
    chain: list[ir.Node] = []
    value = node.outputs[0]
    while True:
        readers = [u.node for u in value.uses()]
        if value.is_graph_output() or not readers:
            return None
        if len(readers) == 1 and readers[0].op_type in _RESHAPING and len(readers[0].outputs) == 1:
            chain.append(readers[0])
            value = readers[0].outputs[0]
            continue
        return [*chain, *readers] if all(r.op_type in ("Slice", "Split", "Gather") for r in readers) else None


def _mixed_range_concats(model: ir.Model, float_output_heads: bool) -> dict[str, str]:
    """A detector's output ``Concat([boxes, sigmoid(scores)])`` (YOLOv8's ``[1, 4 + C, N]``): a Concat producing
    a model output (directly or through reshapes), or values only split apart again (:func:`_split_again`), from
    both fixed-range op outputs and other values. The Concat and the reshapes after it stay float; with
    ``float_output_heads`` the fixed-range ops read only by it too."""
    found: dict[str, str] = {}
    ends: list[tuple[list[ir.Node], ir.Node | None]] = [
        _through_reshapes(out.producer(), _single_use_producer) for out in model.graph.outputs
    ]
    for concat in model.graph:
        after = _split_again(concat) if concat.op_type == "Concat" else None
        if after is not None:
            ends.append((after, concat))
    for chain, node in ends:
        if node is None or node.op_type != "Concat":
            continue
        heads: list[ir.Node] = []
        fixed = other = False
        for value in node.inputs:
            if value is None or const_array(value) is not None:
                continue
            before, source = _through_reshapes(value.producer(), lambda v: v.producer() if v else None)
            rule = rules.rule_for(source) if source is not None else None
            if rule is None or rule.fixed_output is None:
                other = True
                continue
            fixed = True
            readers = [value, *(n.outputs[0] for n in before)]
            if all(len(list(v.uses())) == 1 and not v.is_graph_output() for v in readers):
                heads += [source, *before]
        if fixed and other:
            found.update((n.name, MIXED_CONCAT_REASON) for n in [node, *chain])
            if float_output_heads:
                found.update((n.name, FLOAT_HEAD_REASON) for n in heads)
    return found


def _selection_tail(model: ir.Model) -> dict[str, str]:
    """The nodes after an op whose output size depends on values (a detector's NMS, a NonZero over the score
    threshold): post-processing of the boxes it selected, kept float, with the reason naming that op."""
    tail = data_dependent_tail(model.graph)
    first = next((n for n in model.graph if n in tail), None)
    if first is None:
        return {}
    why = f"{SELECTION_TAIL_REASON} ({first.op_type} {first.name!r})"
    return {n.name: why for n in tail if n.name}


#: Why the nodes of a data-dependent selection stay float (their reason starts with it; the table groups them).
SELECTION_TAIL_REASON = "post-processing after a data-dependent selection, kept float"


#: The recipes a layer of a static (QDQ) model can take: ``fp32`` keeps it float.
LAYER_RECIPES = ("int8", "int16x8", "fp32")


def make_plan(
    model: ir.Model,
    exclude: frozenset[str] = frozenset(),
    float_output_heads: bool = False,
    precision: str = "int8",
    layer_precision: Mapping[str, str] | None = None,
) -> QuantPlan:
    """The plan of a static recipe: ``precision`` (``int8`` or ``int16x8``) for every layer but those of
    ``layer_precision`` (node name -> ``int8`` / ``int16x8`` / ``fp32``)."""
    layer_precision = dict(layer_precision or {})
    for name, recipe in [("", precision), *layer_precision.items()]:
        if recipe not in LAYER_RECIPES[: 2 if not name else 3]:
            where = f"--layer-precision {name}={recipe}" if name else f"--precision {recipe}"
            legal = ", ".join(LAYER_RECIPES[: 2 if not name else 3])
            raise QuantizationError(f"{where}: a static model's layers take {legal}")
    layer_precision = dict(resolve_layer_names(model, layer_precision.items()))
    plan = QuantPlan()
    seen: set[str] = set()
    #: Activation -> quantized to int16 (the type its producer, or its first quantized reader, gives it).
    wide_of: dict[str, bool] = {}
    fused_nodes: set[str] = set()
    heads = _output_heads(model) if float_output_heads else {}
    heads.update(_mixed_range_concats(model, float_output_heads))
    heads.update(_selection_tail(model))
    kept_float = patterns.float_patterns(model)

    def kept_float_here(node: ir.Node, wide: bool) -> bool:
        """``node`` stays float (a float head, or a pattern's at this activation type): the op before it cannot
        take it over as its fused activation or its output's scale (ScaleNorm's ``clamp(norm, eps)`` is the guard
        of a division, float: RTMPose's Mul -> Clip read the unobserved Clip's scale)."""
        reason = kept_float.get(node.name)
        return node.name in heads or (
            reason is not None and not (wide and reason in patterns.INT8_ONLY_REASONS)
        )

    def add_activation(value: ir.Value, wide: bool) -> None:
        assert value.name
        if value.name not in seen:
            seen.add(value.name)
            plan.activations.append(value.name)
            wide_of[value.name] = wide
            if wide:
                plan.int16.add(value.name)

    for node in model.graph:
        assert node.name, "NameFixPass names every node"
        if node.name in fused_nodes:
            continue
        rule = rules.rule_for(node)
        if node.name in exclude:
            plan.float_ops.append(FloatOp(node.name, node.op_type, "excluded by the user"))
            continue
        recipe = layer_precision.get(node.name, precision)
        if recipe == "fp32":
            plan.float_ops.append(FloatOp(node.name, node.op_type, "kept float by --layer-precision"))
            continue
        wide = recipe == "int16x8"
        if node.name in heads:
            plan.float_ops.append(FloatOp(node.name, node.op_type, heads[node.name]))
            continue
        if node.name in kept_float and not (wide and kept_float[node.name] in patterns.INT8_ONLY_REASONS):
            plan.float_ops.append(FloatOp(node.name, node.op_type, kept_float[node.name]))
            continue
        if rule is None:
            plan.float_ops.append(FloatOp(node.name, node.op_type, rules.FLOAT_REASON))
            continue
        if wide and not rule.int16:
            plan.float_ops.append(FloatOp(node.name, node.op_type, rules.NO_INT16_REASON))
            continue
        if any(o.dtype not in (ir.DataType.FLOAT, None) for o in node.outputs):
            plan.float_ops.append(FloatOp(node.name, node.op_type, "output is not float32"))
            continue
        if rule.weight is not None and const_array(node.inputs[rule.weight]) is None:
            plan.float_ops.append(FloatOp(node.name, node.op_type, "weight is not a constant"))
            continue
        if node.op_type == "ConvTranspose" and attr(node, "group", 1) != 1:
            plan.float_ops.append(
                FloatOp(node.name, node.op_type, "grouped ConvTranspose has no integer kernel")
            )
            continue
        data = rules.data_inputs(node, rule)
        if not data:
            plan.float_ops.append(FloatOp(node.name, node.op_type, "no float data input"))
            continue
        members: list[str] = []
        for i in data:
            value = node.inputs[i]
            if const_array(value) is not None:
                plan.constants.append((node.name, i))
                members.append(constant_key(node.name, i))
                if any(
                    getattr(rules.TFLITE_KERNELS.get(k), "symmetric_constants", False) for k in rule.kernels
                ):
                    plan.symmetric.add(constant_key(node.name, i))
                if wide:
                    plan.int16.add(constant_key(node.name, i))
            else:
                add_activation(value, wide)
                name = value.name
                if wide_of[name] != wide:  # int8 -> int16 or back: this layer reads a requantized copy
                    name = f"{node.name}::requant{i}"
                    plan.requant[name] = (node.name, i, value.name)
                    if wide:
                        plan.int16.add(name)
                members.append(name)
        if rule.weight is not None:
            bias = rule.bias if rule.bias is not None and rule.bias < len(node.inputs) else None
            if bias is not None and (node.inputs[bias] is None or const_array(node.inputs[bias]) is None):
                bias = None
            plan.weights.append(
                WeightSpec(
                    node.name,
                    rule.weight,
                    rules.weight_axis(node),
                    bias,
                    node.inputs[0].name,
                    members[0],
                    wide,
                )
            )
        outputs = list(node.outputs)
        if rule.fuses_activation and len(outputs) == 1:
            act = only_consumer(outputs[0])
            if (
                act is not None
                and _is_fusable_activation(act)
                and act.name not in exclude
                and not kept_float_here(act, wide)
                and layer_precision.get(act.name, recipe) == recipe  # its layer's recipe unless given one
            ):
                plan.fused[outputs[0].name] = act.name
                fused_nodes.add(act.name)
                outputs = list(act.outputs)
            elif (
                act is not None
                and _is_constant_clip(act)
                and act.name not in exclude
                and not kept_float_here(act, wide)
                and layer_precision.get(act.name, recipe) == recipe
            ):
                # Any other Clip (TFLite fuses RELU, RELU6, RELU_N1_TO_1 only): the output takes the Clip's scale,
                # unobserved, so its grid saturates where the Clip clips. Exact: the Clip's output range lies in
                # [lo, hi], and rounding commutes with the clip on that grid; the Clip requantizes nothing, and the
                # output's levels are not spent on values the Clip discards (MobileNetV2 from its int8 file:
                # Clip(0, 255 x scale) after every expansion Conv).
                plan.union(act.outputs[0].name, outputs[0].name)
                plan.derived.add(outputs[0].name)
                plan.saturated[outputs[0].name] = act.outputs[0].name
        fixed = rule.fixed_output16 if wide else rule.fixed_output
        for out in outputs:
            add_activation(out, wide)
            if fixed is not None:
                plan.fixed[out.name] = fixed
            if rule.min_output_scale_ratio is not None:
                plan.min_scale[out.name] = (members[0], rule.min_output_scale_ratio)
        if rule.same_scale and rule.all_inputs:
            # Concat / Max / Min: inputs take the output's scale; an input with a fixed range of its own
            # (a Sigmoid output, say) keeps it and is requantized to the shared scale in front of the op.
            out = outputs[0].name
            for i, name in zip(data, members, strict=True):
                if name not in plan.requant and plan.fixed_of(plan.group(name)) is not None:
                    key = f"{node.name}::requant{i}"
                    plan.requant[key] = (node.name, i, name)
                    if wide:
                        plan.int16.add(key)
                    name = key
                plan.union(out, name)
            if node.op_type == "Concat":
                plan.derived.add(out)  # the union of its inputs
        elif rule.same_scale:
            # Single data input: the output inherits the input's scale (and a fixed range with it).
            for out in outputs:
                plan.union(members[0], out.name)
                if _range_preserving(node):
                    plan.derived.add(out.name)
    planned = set(plan.activations)
    for node in model.graph:
        for out in node.outputs:
            bounds = rules.saturation_bounds(out) if out.name in planned else None
            if bounds is not None:
                plan.saturation[out.name] = bounds
    float_nodes = {f.node for f in plan.float_ops}
    plan.float_reads = {(n, i) for n, i in patterns.residual_reads(model) if n in float_nodes}
    return plan
