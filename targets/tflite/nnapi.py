"""Would the TFLite NNAPI delegate take each operator of a .tflite model, and in how many partitions?

``check_nnapi(tflite_bytes, feature_level)`` applies the delegate's per-op rules (``nnapi_ops``) to
every operator of the primary subgraph, then partitions the graph the way TFLite does for a delegate
(``PartitionGraphIntoIndependentNodeSubsets`` in ``tensorflow/lite/graph_info.cc``, greedy mode, as
``PreviewDelegatePartitioning`` uses it) and keeps the ``max_delegated_partitions`` largest delegated
partitions (``StatefulNnApiDelegate::LimitDelegatedPartitions``; the delegate's default is 3).

Feature levels follow Android's NNAPI numbering: 1 = Android API 27 (NNAPI 1.0), 2 = API 28 (1.1),
3 = API 29 (1.2), 4 = API 30 (1.3), 5 = API 31, 6 = API 33, 7 = API 34, 8 = API 35. See docs/nnapi.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from edgekit.core.errors import ModelError, TargetError

FEATURE_LEVELS: dict[int, tuple[int, str]] = {
    1: (27, "NNAPI 1.0"),
    2: (28, "NNAPI 1.1"),
    3: (29, "NNAPI 1.2"),
    4: (30, "NNAPI 1.3"),
    5: (31, "feature level 5"),
    6: (33, "feature level 6"),
    7: (34, "feature level 7"),
    8: (35, "feature level 8"),
}
DEFAULT_FEATURE_LEVEL = 4
DEFAULT_MAX_PARTITIONS = 3  # StatefulNnApiDelegate::Options::max_number_delegated_partitions

_FLOAT_TYPES = ("float32", "float16", "float64", "bfloat16")


# --- the model as the rules see it, and the rule registry ---------------------------------------

NNAPI_1_1 = 2  # kMinSdkVersionForNNAPI11, Android API 28
NNAPI_1_2 = 3  # kMinSdkVersionForNNAPI12, Android API 29
NNAPI_1_3 = 4  # kMinSdkVersionForNNAPI13, Android API 30
FEATURE_LEVEL_6 = 6  # kNNAPIRuntimeFeatureLevel6
FEATURE_LEVEL_7 = 7  # kNNAPIRuntimeFeatureLevel7

FLOAT = ("float32",)
QUANT8 = ("uint8", "int8")
FLOAT_OR_QUANT8 = ("float32", "uint8", "int8")
_NNAPI_TENSOR_TYPES = ("float32", "float16", "uint8", "int8", "int32", "bool", "int16")


@dataclass(frozen=True)
class TensorView:
    """What the rules need to know about one tensor of the model."""

    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    signature: tuple[int, ...] | None
    constant: bool
    scales: tuple[float, ...] = ()
    zero_points: tuple[int, ...] = ()
    axis: int = 0
    data: np.ndarray | None = field(default=None, compare=False, repr=False)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def per_channel(self) -> bool:
        return len(self.scales) > 1

    @property
    def scale(self) -> float:
        """TFLite's legacy per-tensor scale (0 for per-channel or unquantized tensors)."""
        return self.scales[0] if len(self.scales) == 1 else 0.0

    @property
    def zero_point(self) -> int:
        return self.zero_points[0] if len(self.zero_points) == 1 else 0

    @property
    def dynamic(self) -> bool:
        return self.signature is not None and any(d < 0 for d in self.signature)

    def values(self) -> np.ndarray | None:
        """The constant's values (None for non-constant tensors)."""
        return None if self.data is None else self.data.reshape(self.shape)


@dataclass(frozen=True)
class OpView:
    """One operator of the execution plan."""

    index: int
    name: str
    version: int
    inputs: tuple[TensorView | None, ...]  # None: an omitted optional input (-1)
    outputs: tuple[TensorView, ...]
    options: object | None = field(default=None, compare=False, repr=False)
    custom_code: str | None = None

    def input(self, i: int) -> TensorView | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def opt(self, name: str, default: object = 0) -> object:
        """A builtin option (the schema default when the op has no options table)."""
        return default if self.options is None else getattr(self.options, name, default)


class Check:
    """Collects the reasons one op is refused at one feature level."""

    def __init__(self, op: OpView, level: int) -> None:
        self.op = op
        self.level = level
        self.reasons: list[str] = []
        self.validate_reasons = 0  # how many of ``reasons`` come from the op's Validate rule

    @property
    def accelerator_specified(self) -> bool:
        """The delegate's ``is_accelerator_specified``: true from level 3 with default options, where
        ``disallow_nnapi_cpu`` (default true) makes it target the device accelerators only."""
        return self.level >= NNAPI_1_2

    def expect(self, condition: bool, reason: str) -> bool:
        if not condition and reason not in self.reasons:
            self.reasons.append(reason)
        return condition

    def max_version(self, highest: int) -> bool:
        return self.expect(
            self.op.version <= highest,
            f"op version {self.op.version} is above {highest}, the highest the delegate maps",
        )

    def min_level(self, level: int) -> bool:
        return self.expect(
            self.level >= level,
            f"needs NNAPI feature level >= {level}, target is {self.level}",
        )

    def dtype_in(self, tensor: TensorView | None, allowed: Sequence[str], role: str = "input") -> bool:
        if tensor is None:
            return self.expect(False, f"{role} is missing")
        return self.expect(
            tensor.dtype in allowed, f"{role} dtype {tensor.dtype} not in [{', '.join(allowed)}]"
        )

    def input0_in(self, allowed: Sequence[str]) -> bool:
        return self.dtype_in(self.op.input(0), allowed)

    def constant(self, i: int, what: str) -> bool:
        tensor = self.op.input(i)
        return self.expect(tensor is not None and tensor.constant, f"{what} (input {i}) must be constant")

    def ranks_at_most(self, highest: int, inputs: Sequence[int] = (0, 1)) -> bool:
        ranks = [t.rank for t in (self.op.input(i) for i in inputs) if t is not None]
        return self.expect(
            max(ranks, default=0) <= highest, f"input rank {max(ranks, default=0)} > {highest}"
        )

    def no_activation(self) -> bool:
        act = self.op.opt("fusedActivationFunction", 0)
        return self.expect(act == 0, f"fused activation {_ACTIVATIONS.get(act, act)} is not supported here")


Rule = Callable[[Check], None]
RULES: dict[str, Rule] = {}


def rule(*op_names: str) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the rule of the given builtin ops; a second rule for an op is an error."""

    def register(fn: Rule) -> Rule:
        for name in op_names:
            if name in RULES:
                raise ValueError(f"duplicate NNAPI rule for {name}")
            RULES[name] = fn
        return fn

    return register


_ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}


def is_hybrid(op: OpView, weights_index: int = 1) -> bool:
    """Float activations with quantized weights (IsHybridOperator)."""
    x, w = op.input(0), op.input(weights_index)
    return x is not None and w is not None and x.dtype == "float32" and w.dtype in QUANT8


# --- operand rules: how the delegate builds NNAPI operands (AddOpsAndTensors / AddTensor) ---------

# NeedInt8Conversion: below level 4 the delegate rewrites int8 operands of these ops (when input 0
# is int8) as TENSOR_QUANT8_ASYMM with zero point + 128. Any other int8 operand becomes
# TENSOR_QUANT8_SYMM, which NNAPI operations do not accept as data, so building the model fails.
# fmt: off
INT8_CONVERTED_OPS = frozenset((
    "ADD", "ARG_MAX", "ARG_MIN", "AVERAGE_POOL_2D", "BATCH_TO_SPACE_ND", "CONCATENATION", "EQUAL",
    "EXPAND_DIMS", "GATHER", "GREATER", "GREATER_EQUAL", "HARD_SWISH", "L2_NORMALIZATION", "LEAKY_RELU",
    "LESS", "LESS_EQUAL", "LOGISTIC", "MAXIMUM", "MAX_POOL_2D", "MEAN", "MINIMUM", "MUL", "NOT_EQUAL",
    "PAD", "PADV2", "PRELU", "REDUCE_MAX", "REDUCE_MIN", "RELU", "RELU_N1_TO_1", "RELU6",
    "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "RESHAPE", "SLICE", "SOFTMAX", "SPACE_TO_BATCH_ND",
    "SPACE_TO_DEPTH", "DEPTH_TO_SPACE", "STRIDED_SLICE", "SUB", "TANH", "TILE", "TOPK_V2", "TRANSPOSE",
))
# fmt: on

# NNAPI takes TENSOR_QUANT8_SYMM_PER_CHANNEL (feature level >= 3) only as these filters, on this axis
# (NeuralNetworksTypes.h: CONV_2D and TRANSPOSE_CONV_2D channelDim 0, DEPTHWISE_CONV_2D channelDim 3;
# FULLY_CONNECTED weights are per-tensor only).
PER_CHANNEL_FILTERS = {("CONV_2D", 1): 0, ("DEPTHWISE_CONV_2D", 1): 3, ("TRANSPOSE_CONV", 1): 0}

# Inputs the delegate passes as converted scalars instead of NNAPI tensors (int64 allowed there).
_SCALAR_INPUTS = {("ARG_MAX", 1), ("ARG_MIN", 1), ("FILL", 0), ("FILL", 1)}


def _int8_converted(op: OpView) -> bool:
    x = op.input(2 if op.name == "TRANSPOSE_CONV" else 1 if op.name == "SELECT" else 0)
    if x is None or x.dtype != "int8":
        return False
    if op.name in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
        w = op.input(1)
        return w is not None and w.dtype in QUANT8 and bool(w.scales)
    return op.name in INT8_CONVERTED_OPS or op.name in ("TRANSPOSE_CONV", "SELECT")


def operand_rules(c: Check) -> None:
    """Operand checks the delegate does while building the NNAPI model, after ``Validate``."""
    op = c.op
    tensors = [(i, t, "input") for i, t in enumerate(op.inputs) if t is not None]
    tensors += [(i, t, "output") for i, t in enumerate(op.outputs)]
    if op.name == "SOFTMAX":  # NNAPI SOFTMAX's beta is "the positive scaling factor" (NeuralNetworksTypes.h)
        beta = float(op.opt("beta", 0.0))
        c.expect(beta > 0.0, f"SOFTMAX beta {beta} must be > 0 for NNAPI")
    # Fused activations are passed to NNAPI as a FuseCode: NONE, RELU, RELU1 or RELU6 only.
    act = op.opt("fusedActivationFunction", 0)
    c.expect(act in (0, 1, 2, 3), f"fused activation {_ACTIVATIONS.get(act, act)} has no NNAPI FuseCode")
    for i, t, role in tensors:
        if (op.name, i) in _SCALAR_INPUTS and role == "input":
            continue
        c.expect(
            t.dtype in _NNAPI_TENSOR_TYPES, f"{role} '{t.name}' dtype {t.dtype} has no NNAPI operand type"
        )
        if t.dtype == "int8" and t.per_channel:
            axis = PER_CHANNEL_FILTERS.get((op.name, i)) if role == "input" else None
            if axis is None:
                c.expect(
                    False, f"per-channel quantized {role} '{t.name}' is not allowed on {op.name} in NNAPI"
                )
            else:
                c.expect(
                    t.axis == axis,
                    f"per-channel weights '{t.name}' on axis {t.axis}, NNAPI needs axis {axis}",
                )
                c.expect(c.level >= NNAPI_1_2, "per-channel quantized weights need feature level >= 3")
                c.expect(not any(t.zero_points), f"per-channel weights '{t.name}' must have zero points 0")
    if c.level < NNAPI_1_3 and not _int8_converted(op) and not is_hybrid(op) and op.name != "DEQUANTIZE":
        int8 = [t.name for _, t, _ in tensors if t.dtype == "int8" and not t.per_channel]
        c.expect(
            not int8,
            f"int8 operand '{int8[0] if int8 else ''}' needs TENSOR_QUANT8_ASYMM_SIGNED (feature level >= 4); "
            f"below it the delegate converts int8 to uint8 only for a fixed list of ops",
        )


# --- the report ------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpDecision:
    """The delegate's decision for one operator.

    ``supported``: NNAPI can run the op (no reason against it). ``breaks_delegation``: the delegate's
    ``Validate`` accepts the op, so it goes into a partition, but NNAPI then refuses its operands while
    the delegate builds the model; that failure undoes the whole delegation. ``delegated``: the op
    runs on NNAPI (in a partition the delegate takes, and the delegation succeeds).
    """

    index: int
    op: str
    version: int
    supported: bool
    reasons: tuple[str, ...]
    notes: tuple[str, ...] = ()
    delegated: bool = False
    breaks_delegation: bool = False

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "op": self.op,
            "version": self.version,
            "supported": self.supported,
            "delegated": self.delegated,
            "breaks_delegation": self.breaks_delegation,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class NnapiReport:
    """Per-op decisions and the partitioning for one model at one feature level."""

    feature_level: int
    android_api: int
    ops: tuple[OpDecision, ...]
    partitions: int  # partitions of the ops Validate accepts, before the delegate's partition limit
    delegated_partitions: int  # partitions that run on NNAPI (0 when the delegation fails)
    max_partitions: int
    dynamic_tensors: tuple[str, ...] = ()  # tensors sized at run time: the delegate refuses the graph
    partition_ops: tuple[tuple[int, ...], ...] = ()  # op indices of each delegated partition
    integer_accelerator: bool = False  # float ops were counted as refused by the device (check_nnapi)
    float_io: tuple[str, ...] = ()  # model inputs/outputs that are float (next to a float op)

    @property
    def delegated_ops(self) -> int:
        return sum(op.delegated for op in self.ops)

    @property
    def unsupported(self) -> tuple[OpDecision, ...]:
        return tuple(op for op in self.ops if not op.supported)

    @property
    def delegation_breakers(self) -> tuple[OpDecision, ...]:
        """Ops in the delegate's partitions whose NNAPI operands are refused: nothing is delegated."""
        return tuple(op for op in self.ops if op.breaks_delegation)

    @property
    def delegation_fails(self) -> bool:
        return bool(self.delegation_breakers or self.dynamic_tensors)

    @property
    def fully_delegated(self) -> bool:
        return bool(self.ops) and self.delegated_ops == len(self.ops)

    @property
    def cpu_ops(self) -> tuple[OpDecision, ...]:
        """The ops TFLite runs itself (on the CPU): every op not delegated."""
        return tuple(op for op in self.ops if not op.delegated)

    def why_on_cpu(self, op: OpDecision) -> str:
        if op.reasons:
            return "; ".join(op.reasons)
        if self.delegation_fails:
            return "supported, but the delegation fails (see the summary)"
        return (
            f"supported, but its partition is not among the {self.max_partitions} largest the delegate takes"
        )

    @property
    def cpu_op_kinds(self) -> list[str]:
        """The kinds of the refused ops, computing ops first, in execution order (QUANTIZE/DEQUANTIZE last)."""
        edges = ("QUANTIZE", "DEQUANTIZE")
        ordered = sorted(self.unsupported, key=lambda op: (op.op in edges, op.index))
        return list(dict.fromkeys(op.op for op in ordered))

    @property
    def summary(self) -> str:
        api, name = FEATURE_LEVELS[self.feature_level]
        head = f"NNAPI feature level {self.feature_level} (Android API {api}, {name}): "
        if self.dynamic_tensors:
            return (
                f"{head}the delegation fails and all {len(self.ops)} ops run on the CPU: the graph has "
                f"dynamic-sized tensors ({'; '.join(self.dynamic_tensors)}), which the delegate only takes "
                f"with allow_dynamic_dimensions"
            )
        if self.delegation_breakers:
            culprits = ", ".join(f"#{op.index} {op.op}" for op in self.delegation_breakers)
            return (
                f"{head}the delegation fails and all {len(self.ops)} ops run on the CPU: NNAPI refuses "
                f"the operands of {culprits}, which the delegate's Validate accepts"
            )
        head += (
            f"{self.delegated_partitions} partition(s) delegated ({self.delegated_ops}/{len(self.ops)} ops)"
        )
        if self.partitions > self.delegated_partitions:
            head += f" ({self.partitions} delegable, the delegate takes the {self.max_partitions} largest)"
        if self.cpu_ops:
            head += f", {len(self.cpu_ops)} op(s) on the CPU"
            left = len(self.cpu_ops) - len(self.unsupported)
            if self.unsupported:
                head += f": {', '.join(self.cpu_op_kinds)}"
            if left:
                head += (
                    f"{' and ' if self.unsupported else ': '}{left} supported op(s) of partitions not taken"
                )
        if self.float_io and self.integer_accelerator:
            head += f"; float32 inputs/outputs (computed in float): {', '.join(self.float_io)}"
        return head

    def to_json(self) -> dict:
        """The content of ``nnapi_compatibility.json``."""
        api, name = FEATURE_LEVELS[self.feature_level]
        return {
            "feature_level": self.feature_level,
            "android_api": api,
            "nnapi": name,
            "ops": [op.to_json() for op in self.ops],
            "op_count": len(self.ops),
            "supported_ops": len(self.ops) - len(self.unsupported),
            "delegated_ops": self.delegated_ops,
            "partitions": self.partitions,
            "delegated_partitions": self.delegated_partitions,
            "max_delegated_partitions": self.max_partitions,
            "fully_delegated": self.fully_delegated,
            "delegation_fails": self.delegation_fails,
            "dynamic_tensors": list(self.dynamic_tensors),
            "integer_accelerator": self.integer_accelerator,
            "float_io": list(self.float_io),
            "delegated_partition_ops": [list(p) for p in self.partition_ops],
            "cpu_ops": [{"index": op.index, "op": op.op, "why": self.why_on_cpu(op)} for op in self.cpu_ops],
            "unsupported": [f"#{op.index} {op.op}: {'; '.join(op.reasons)}" for op in self.unsupported],
            "summary": self.summary,
        }


@dataclass(frozen=True)
class _Graph:
    tensors: tuple[TensorView, ...]
    ops: tuple[OpView, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    op_io: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]  # raw tensor indices per op


def check_nnapi(
    tflite_bytes: bytes,
    feature_level: int = DEFAULT_FEATURE_LEVEL,
    *,
    max_partitions: int = DEFAULT_MAX_PARTITIONS,
    integer_accelerator: bool = False,
) -> NnapiReport:
    """Decide, for every operator, whether the TFLite NNAPI delegate takes it, and why not.

    ``integer_accelerator``: the device is an integer-only accelerator (what the ``nnapi`` target
    builds for), so ops with float operands stay on the CPU: the delegate keeps only the ops the
    device supports (``GetNodesSupportedByAccelerator``). Off, float ops are judged by ``Validate``
    alone (an upper bound).
    """
    if feature_level not in FEATURE_LEVELS:
        raise TargetError(f"NNAPI feature level must be one of 1..8, got {feature_level}")
    graph = _parse(tflite_bytes)
    checks = [_check_op(op, feature_level) for op in graph.ops]
    if integer_accelerator:
        for check in checks:
            _float_on_cpu(check)
    validated = [not c.reasons[: c.validate_reasons] for c in checks]
    delegable = [s for s in _partition(graph, validated) if validated[s[0]]]
    taken = _limit_partitions(delegable, max_partitions)
    taken_nodes = {i for s in taken for i in s}
    if len(taken) < len(delegable):  # the delegate re-partitions the reduced node set
        reduced = _partition(graph, [i in taken_nodes for i in range(len(graph.ops))])
        taken = [s for s in reduced if s[0] in taken_nodes]
    breakers = {i for i in taken_nodes if checks[i].reasons}
    dynamic = _dynamic_tensors(graph)
    delegated = set() if breakers or dynamic else taken_nodes
    decisions = tuple(
        OpDecision(
            index=op.index,
            op=_display_name(op),
            version=op.version,
            supported=not checks[op.index].reasons,
            reasons=tuple(checks[op.index].reasons),
            notes=_notes(op),
            delegated=op.index in delegated,
            breaks_delegation=op.index in breakers,
        )
        for op in graph.ops
    )
    return NnapiReport(
        feature_level=feature_level,
        android_api=FEATURE_LEVELS[feature_level][0],
        ops=decisions,
        partitions=len(delegable),
        delegated_partitions=0 if breakers or dynamic else len(taken),
        max_partitions=max_partitions,
        dynamic_tensors=dynamic,
        partition_ops=() if breakers or dynamic else tuple(tuple(p) for p in taken),
        integer_accelerator=integer_accelerator,
        float_io=tuple(
            graph.tensors[i].name
            for i in (*graph.inputs, *graph.outputs)
            if graph.tensors[i].dtype in _FLOAT_TYPES
        ),
    )


def _float_on_cpu(check: Check) -> None:
    """An op with a float operand is refused by an integer-only device (before partitioning)."""
    floats = [
        t.name
        for t in (*check.op.inputs, *check.op.outputs)
        if t is not None and not t.constant and t.dtype in _FLOAT_TYPES
    ]
    if floats:
        check.reasons.insert(
            check.validate_reasons,
            f"computes in float ('{floats[0]}'): an integer-only accelerator refuses float operands, so it "
            f"runs on the CPU (the delegate keeps the ops the device supports)",
        )
        check.validate_reasons += 1


def _check_op(op: OpView, level: int) -> Check:
    """Apply the op's ``Validate`` rule, then the operand rules (``check.validate_reasons`` splits them)."""
    rule = _rules().get(op.name)
    check = Check(op, level)
    if rule is None:
        what = f"custom op {op.custom_code!r}" if op.name == "CUSTOM" else op.name
        check.expect(False, f"{what} is not an operation the NNAPI delegate maps")
        check.validate_reasons = len(check.reasons)
        return check
    try:
        rule(check)
        check.validate_reasons = len(check.reasons)
        operand_rules(check)
    except (
        IndexError,
        ValueError,
        TypeError,
        ZeroDivisionError,
        AttributeError,
    ) as exc:  # e.g. missing operands
        raise ModelError(
            f"operator #{op.index} {op.name} is malformed: {type(exc).__name__}: {exc}"
        ) from None
    return check


def delegated_partitions(tflite_bytes: bytes, delegated: Sequence[bool]) -> list[list[int]]:
    """The node subsets TFLite forms for a delegate that takes the ops marked True (in op order)."""
    graph = _parse(tflite_bytes)
    if len(delegated) != len(graph.ops):
        raise ValueError(f"{len(delegated)} flags for {len(graph.ops)} operators")
    return [s for s in _partition(graph, list(delegated)) if delegated[s[0]]]


def _rules() -> dict[str, Rule]:
    """The per-op rule table (the rules module registers itself into RULES when imported)."""
    from edgekit.targets.tflite import nnapi_ops  # noqa: F401 - imported for its registrations

    return RULES


def is_fully_integer(tflite_bytes: bytes) -> list[str]:
    """The places where a float tensor is used between the model's inputs and outputs (empty: none)."""
    graph = _parse(tflite_bytes)
    found = []
    for i in graph.inputs:
        t = graph.tensors[i]
        if t.dtype in _FLOAT_TYPES:
            found.append(f"model input '{t.name}' is {t.dtype}")
    for op in graph.ops:
        for role, tensors in (("input", op.inputs), ("output", op.outputs)):
            for t in tensors:
                if t is not None and t.dtype in _FLOAT_TYPES:
                    found.append(f"#{op.index} {op.name}: {role} '{t.name}' is {t.dtype}")
    for i in graph.outputs:
        t = graph.tensors[i]
        if t.dtype in _FLOAT_TYPES:
            found.append(f"model output '{t.name}' is {t.dtype}")
    return found


def render_summary(report: NnapiReport, *, only_unsupported: bool = False):
    """A rich Table of the decisions, for the CLI (rich is imported here, not at module import)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(report.summary), title_justify="left", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("op")
    table.add_column("v", justify="right")
    table.add_column("NNAPI")
    table.add_column("why not / notes")
    for op in report.ops:
        if only_unsupported and op.supported:
            continue
        status = _status(op)
        table.add_row(
            str(op.index), escape(op.op), str(op.version), status, escape("; ".join(op.reasons + op.notes))
        )
    return table


def _status(op: OpDecision) -> str:
    if op.delegated:
        return "[green]yes[/]"
    if op.supported:
        return "[yellow]supported, not delegated[/]"
    if op.breaks_delegation:
        return "[red]no, fails the delegation[/]"
    return "[red]no[/]"


# --- parsing ----------------------------------------------------------------------------------


def _parse(tflite_bytes: bytes) -> _Graph:
    from ai_edge_litert import schema_py_generated as schema

    data = bytes(tflite_bytes)
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelError("not a TFLite model: the flatbuffer file identifier 'TFL3' is missing")
    try:
        model = schema.ModelT.InitFromPackedBuf(data, 0)
    except Exception as exc:  # a damaged flatbuffer raises anything from struct/index errors
        raise ModelError(f"cannot parse the TFLite flatbuffer: {type(exc).__name__}: {exc}") from None
    if not model.subgraphs:
        raise ModelError("the TFLite model has no subgraph")
    try:
        return _graph(model, schema)
    except (IndexError, ValueError, TypeError, OverflowError, AttributeError) as exc:  # damaged tables
        raise ModelError(f"cannot read the TFLite model: {type(exc).__name__}: {exc}") from None


def _graph(model, schema) -> _Graph:
    sub = model.subgraphs[0]
    type_names = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    op_names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    tensors = tuple(_tensor(i, t, model.buffers or [], type_names) for i, t in enumerate(sub.tensors or []))
    ops = []
    op_io = []
    for index, o in enumerate(sub.operators or []):
        codes = model.operatorCodes or []
        if o.opcodeIndex >= len(codes):
            raise ModelError(f"operator #{index} refers to a missing operator code {o.opcodeIndex}")
        code = codes[o.opcodeIndex]
        builtin = max(code.builtinCode, code.deprecatedBuiltinCode)
        ins = tuple(int(i) for i in (o.inputs if o.inputs is not None else ()))
        outs = tuple(int(i) for i in (o.outputs if o.outputs is not None else ()))
        if any(i >= len(tensors) for i in ins + outs) or any(i < 0 for i in outs):
            raise ModelError(f"operator #{index} refers to a tensor that does not exist")
        custom = _text(code.customCode) if code.customCode is not None else None
        ops.append(
            OpView(
                index=index,
                name=op_names.get(builtin, f"BUILTIN_{builtin}"),
                version=int(code.version or 1),
                inputs=tuple(None if i < 0 else tensors[i] for i in ins),
                outputs=tuple(tensors[i] for i in outs),
                options=o.builtinOptions,
                custom_code=custom,
            )
        )
        op_io.append((ins, outs))
    inputs = tuple(int(i) for i in (sub.inputs if sub.inputs is not None else ()))
    outputs = tuple(int(i) for i in (sub.outputs if sub.outputs is not None else ()))
    if any(not 0 <= i < len(tensors) for i in inputs + outputs):
        raise ModelError("the model's inputs or outputs refer to a tensor that does not exist")
    return _Graph(tensors=tensors, ops=tuple(ops), inputs=inputs, outputs=outputs, op_io=tuple(op_io))


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


_NUMPY_TYPES = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "int64": np.int64,
                "uint8": np.uint8, "int8": np.int8, "int16": np.int16, "bool": np.bool_}  # fmt: skip


def _tensor(index: int, t, buffers: Sequence, type_names: dict[int, str]) -> TensorView:
    dtype = type_names.get(t.type, f"type{t.type}")
    raw = buffers[t.buffer].data if 0 < t.buffer < len(buffers) else None
    external = 0 < t.buffer < len(buffers) and (buffers[t.buffer].offset or 0) > 1
    data = None
    np_type = _NUMPY_TYPES.get(dtype)
    if raw is not None and len(raw) and np_type is not None and len(raw) % np.dtype(np_type).itemsize == 0:
        data = np.frombuffer(np.asarray(raw, dtype=np.uint8).tobytes(), dtype=np_type)
    q = t.quantization
    scales = tuple(float(s) for s in (q.scale if q is not None and q.scale is not None else ()))
    zps = tuple(int(z) for z in (q.zeroPoint if q is not None and q.zeroPoint is not None else ()))
    name = _text(t.name) if t.name else f"tensor{index}"
    shape = tuple(int(d) for d in (t.shape if t.shape is not None else ()))
    signature = None if t.shapeSignature is None else tuple(int(d) for d in t.shapeSignature)
    return TensorView(
        index=index,
        name=name,
        dtype=dtype,
        shape=shape,
        signature=signature,
        constant=(raw is not None and len(raw) > 0) or external,
        scales=scales,
        zero_points=zps,
        axis=int(q.quantizedDimension) if q is not None else 0,
        data=data if data is not None and data.size == int(np.prod(shape, dtype=np.int64)) else None,
    )


def _display_name(op: OpView) -> str:
    return f"CUSTOM:{op.custom_code}" if op.name == "CUSTOM" else op.name


def _notes(op: OpView) -> tuple[str, ...]:
    """Facts that do not stop delegation but change what the delegate compiles."""
    notes = []
    for t in (*op.inputs, *op.outputs):
        if t is not None and not t.constant and t.dynamic:
            notes.append(
                f"'{t.name}' has a dynamic dimension (shape_signature {list(t.signature)}); "
                f"with allow_dynamic_dimensions off (the default) the delegate compiles it for shape {list(t.shape)}"
            )
    return tuple(dict.fromkeys(notes))


# --- dynamic-sized tensors ----------------------------------------------------------------------

# Kernels that size an output from the values of these inputs; when such an input is not a constant,
# their Prepare marks the output dynamic (SetTensorToDynamic). Subgraph::ModifyGraphWithDelegate then
# refuses every delegate without kTfLiteDelegateFlagsAllowDynamicTensors, which the NNAPI delegate only
# sets with allow_dynamic_dimensions. Outputs of SHAPE count as known (filled at Prepare); other
# shape arithmetic on them is taken as run-time, so shape sub-graphs may be over-reported.
# fmt: off
_SHAPE_DEFINING_INPUTS: dict[str, tuple[int, ...]] = {
    "RESHAPE": (1,), "RESIZE_BILINEAR": (1,), "RESIZE_NEAREST_NEIGHBOR": (1,), "PAD": (1,), "PADV2": (1,),
    "MIRROR_PAD": (1,), "TILE": (1,), "SLICE": (1, 2), "STRIDED_SLICE": (1, 2, 3), "TRANSPOSE": (1,),
    "FILL": (0,), "BROADCAST_TO": (1,), "EXPAND_DIMS": (1,), "SPLIT": (0,), "SPLIT_V": (1, 2),
    "MEAN": (1,), "SUM": (1,), "REDUCE_MAX": (1,), "REDUCE_MIN": (1,), "REDUCE_PROD": (1,),
    "REDUCE_ANY": (1,), "ARG_MAX": (1,), "ARG_MIN": (1,), "TOPK_V2": (1,), "TRANSPOSE_CONV": (0,),
    "SPACE_TO_BATCH_ND": (1, 2), "BATCH_TO_SPACE_ND": (1, 2), "ONE_HOT": (1,), "RANGE": (0, 1, 2),
}
# fmt: on
_ALWAYS_DYNAMIC = frozenset(("WHERE", "UNIQUE", "NON_MAX_SUPPRESSION_V4", "NON_MAX_SUPPRESSION_V5"))


def _dynamic_tensors(graph: _Graph) -> tuple[str, ...]:
    """The op outputs TFLite sizes only at run time (their shape depends on non-constant values)."""
    known = {i for i, t in enumerate(graph.tensors) if t.constant}
    for op, (_, outs) in zip(graph.ops, graph.op_io, strict=True):
        if op.name == "SHAPE":  # shape.cc fills its output at Prepare (SetTensorToPersistentRo)
            known.update(outs)
    found = []
    for op, (ins, outs) in zip(graph.ops, graph.op_io, strict=True):
        runtime = [ins[i] for i in _SHAPE_DEFINING_INPUTS.get(op.name, ()) if i < len(ins) and ins[i] >= 0]
        runtime = [i for i in runtime if i not in known]
        if runtime or op.name in _ALWAYS_DYNAMIC:
            why = (
                f"its input '{graph.tensors[runtime[0]].name}' is not a constant"
                if runtime
                else "data-dependent"
            )
            found += [f"#{op.index} {op.name} output '{graph.tensors[o].name}' ({why})" for o in outs[:1]]
    return tuple(found)


# --- partitioning -----------------------------------------------------------------------------


def _partition(graph: _Graph, delegated: Sequence[bool]) -> list[list[int]]:
    """Node subsets of equal delegation status, as TFLite's greedy graph partitioner forms them.

    Each epoch starts with the first ready node in execution order, which fixes the epoch's type; it
    then keeps sweeping the nodes in order, adding every ready node of the same type, until none is
    added. A node is ready when all its input tensors are model inputs, constants or outputs of
    nodes already placed.
    """
    produced = {t for _, outs in graph.op_io for t in outs}
    ready = {i for i in range(len(graph.tensors)) if i not in produced}
    placed = [False] * len(graph.ops)
    subsets: list[list[int]] = []
    while not all(placed):
        subset: list[int] = []
        kind: bool | None = None
        progress = True
        while progress:
            progress = False
            for n, (ins, outs) in enumerate(graph.op_io):
                if placed[n] or any(i >= 0 and i not in ready for i in ins):
                    continue
                if kind is None:
                    kind = delegated[n]
                if delegated[n] != kind:
                    continue
                placed[n] = True
                subset.append(n)
                ready.update(outs)
                progress = True
        if not subset:  # a cycle or a dangling input: the rest can never be scheduled
            break
        subsets.append(subset)
    return subsets


def _limit_partitions(partitions: list[list[int]], max_partitions: int) -> list[list[int]]:
    """The delegate keeps the largest ``max_partitions`` partitions (all when the limit is <= 0)."""
    if max_partitions <= 0 or len(partitions) <= max_partitions:
        return partitions
    ranked = sorted(partitions, key=len, reverse=True)[:max_partitions]
    return sorted(ranked, key=lambda s: s[0])
