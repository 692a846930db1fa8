"""Loading ONNX models: validate, upgrade the opset, fix dynamic dims, clean the graph.

``load_model`` is what every command starts with. It reads the file with ``onnx`` (so a corrupt file is reported
as such), upgrades old opsets with ``onnx.version_converter``, fixes dynamic input dimensions, runs shape
inference, and then runs the graph-preparation pipeline of :mod:`edgekit.core.passes` on the ``onnx_ir`` graph.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.errors import ModelError, OutputError
from edgekit.core.protoutil import node_reads, subgraphs
from edgekit.device_agents.bundle import follow_umask
from google.protobuf.message import DecodeError
from onnx import numpy_helper

log = logging.getLogger("edgekit")

#: The opset every loaded model is brought to (QDQ below 19 fails in the onnx reference evaluator).
TARGET_OPSET = 19
#: The oldest opset the version converter brings up (with edgekit.core.legacy's rewrites before it: opset 1-6
#: broadcast; Caffe2's squeezenet1.0-3 / -6 style files).
MIN_OPSET = 1
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


def read_proto(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read and parse an ONNX file, with one clear error for each way it can be wrong."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"model file not found: {p}")
    if not p.is_file():
        raise ModelError(f"model path is not a file: {p}")
    data = p.read_bytes()
    if not data:
        raise ModelError(f"model file is empty: {p}")
    try:
        proto = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelError(f"not an ONNX model (corrupt protobuf): {p}: {exc}") from None
    if not proto.HasField("graph") or not proto.graph.node:
        raise ModelError(f"not an ONNX model (no graph): {p}")
    if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        _check_external_files(proto, p)
        try:
            onnx.load_external_data_for_model(proto, str(p.parent))
        except (OSError, ValueError, onnx.checker.ValidationError) as exc:
            raise ModelError(f"model {p}: cannot read its external weights: {exc}") from None
    return proto


def _check_external_files(proto: onnx.ModelProto, path: Path) -> None:
    """Refuse, naming the file, an external-data location that is not a file beside the model (onnx says only
    that a tensor's data 'is not regular file', by raising its checker's ValidationError)."""
    missing: dict[str, list[str]] = {}
    for t in proto.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        if not (path.parent / location).is_file():
            missing.setdefault(location, []).append(t.name)
    if missing:
        location, tensors = next(iter(missing.items()))
        more = f" and {len(missing) - 1} more file(s)" if len(missing) > 1 else ""
        raise ModelError(
            f"model {path}: its external weights file {location!r}{more} is missing beside it "
            f"({len(tensors)} tensor(s), e.g. {tensors[0]!r}): copy the data file(s) with the .onnx"
        )


def default_opset(proto: onnx.ModelProto) -> int:
    for imp in proto.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    raise ModelError("model imports no version of the default ONNX opset")


def _default_domain_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The default-domain nodes of ``graph`` and of its subgraphs (If / Loop / Scan bodies)."""
    out = []
    for node in graph.node:
        if node.domain in ("", "ai.onnx"):
            out.append(node)
        for sub in subgraphs(node):
            out += _default_domain_nodes(sub)
    return out


def check_default_ops(proto: onnx.ModelProto) -> None:
    """Refuse, naming them, default-domain ops that ONNX does not define at the model's opset.

    Converters leave their source framework's ops in the default domain when they cannot translate them
    (tf2onnx writes a TFLite custom op such as MediaPipe's ``Landmarks2TransformMatrix`` as
    ``TFL_Landmarks2TransformMatrix``), or write an op newer than the opset they import (tf2onnx 1.17 writes
    TFLite's HARD_SWISH as ``HardSwish``, an opset-14 op, into an opset-13 model). onnxruntime refuses both
    files; onnx's version converter fails on them with an assertion naming neither the op nor the cause."""
    version = default_opset(proto)
    unknown: dict[str, int] = {}
    newer: dict[str, tuple[int, int]] = {}
    for node in _default_domain_nodes(proto.graph):
        op = node.op_type
        if not onnx.defs.has(op):
            unknown[op] = unknown.get(op, 0) + 1
            continue
        try:
            onnx.defs.get_schema(op, version)
        except onnx.defs.SchemaError:
            since = min(
                sc.since_version
                for sc in onnx.defs.get_all_schemas_with_history()
                if sc.name == op and sc.domain in ("", "ai.onnx")
            )
            newer[op] = (newer.get(op, (0, since))[0] + 1, since)
    if unknown:
        names = ", ".join(f"{op} ({n} node{'s' * (n > 1)})" for op, n in sorted(unknown.items()))
        tflite = (
            " (TFL_*: TFLite ops tf2onnx could not translate)"
            if any(o.startswith("TFL_") for o in unknown)
            else ""
        )
        raise ModelError(
            f"the model is not valid ONNX: {names} {'are not ONNX ops' if len(unknown) > 1 else 'is not an ONNX op'}{tflite}"
        )
    if newer:
        names = ", ".join(
            f"{op} (opset {since}, {n} node{'s' * (n > 1)})" for op, (n, since) in sorted(newer.items())
        )
        raise ModelError(
            f"the model is not valid ONNX: it imports opset {version} but uses ops defined only in later opsets: "
            f"{names}; export it again at opset {max(s for _, s in newer.values())} or later"
        )


def upgrade_opset(proto: onnx.ModelProto, target: int = TARGET_OPSET) -> onnx.ModelProto:
    """Bring the default-domain opset to ``target`` (newer models are kept as they are)."""
    version = default_opset(proto)
    latest = onnx.defs.onnx_opset_version()
    if version < MIN_OPSET or version > latest:
        raise ModelError(f"unsupported opset {version}: edgekit loads opsets {MIN_OPSET} to {latest}")
    check_default_ops(proto)
    if version >= target:
        return proto
    try:
        upgraded = onnx.version_converter.convert_version(proto, target)
    except Exception as exc:  # the converter raises bare RuntimeErrors and ValidationErrors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot upgrade the model from opset {version} to {target}: {first}") from None
    log.info("upgraded the model from opset %d to %d", version, target)
    return upgraded


def batchnorm_batch_statistics(proto: onnx.ModelProto) -> int:
    """Training-mode BatchNormalization (opsets 9-13: more than one output; opset 14 on: ``training_mode=1``) as
    the inference-mode node it computes, in place; returns how many were rewritten.

    A training-mode BatchNormalization normalises with the statistics of its input batch (mean and biased
    variance over every axis but 1), not its mean / var inputs (onnxruntime does so). timm's weight-standardized
    convolutions (NF-ResNet, NFNet: ``F.batch_norm(weight, training=True)``) export so, on the weights, and so
    does torch's ``training=TrainingMode.PRESERVE`` export of a model left in train mode; onnx's version
    converter refuses the opset-9 node (its outputs 4 and 5 do not exist at opset 14), and below, passes would
    fold the running statistics. When only ``Y`` is read, the node becomes ReduceMean / Sub / Mul / ReduceMean
    for the batch mean and variance feeding a one-output BatchNormalization; a node whose statistics outputs are
    read is left to the converter's refusal."""
    opset = default_opset(proto)
    if opset < 9:
        return 0
    graph = proto.graph
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}

    def training(n: onnx.NodeProto) -> bool:
        if opset < 14:
            return len([o for o in n.output if o]) > 1
        return any(a.name == "training_mode" and a.i == 1 for a in n.attribute)

    candidates = [
        n
        for n in graph.node
        if n.op_type == "BatchNormalization"
        and n.domain in ("", "ai.onnx")
        and training(n)
        and not any(o in used for o in n.output[1:] if o)
    ]
    if not candidates:
        return 0
    ranks = _ranks(proto)
    nodes, done = [], 0
    targets = {id(n) for n in candidates}
    mk = onnx.helper.make_node
    for node in graph.node:
        rank = ranks.get(node.input[0]) if id(node) in targets else None
        if rank is None or rank < 2:
            nodes.append(node)
            continue
        x, p = node.input[0], f"{node.name or node.output[0]}/batch_stats"
        axes = [0, *range(2, rank)]
        if opset >= 18:  # ReduceMean takes its axes as an input from opset 18
            graph.initializer.append(numpy_helper.from_array(np.array(axes, np.int64), f"{p}/axes"))

        def mean(src: str, dst: str, keep: int, p: str = p, axes: list[int] = axes) -> onnx.NodeProto:
            if opset >= 18:
                return mk("ReduceMean", [src, f"{p}/axes"], [dst], keepdims=keep)
            return mk("ReduceMean", [src], [dst], axes=axes, keepdims=keep)

        nodes += [
            mean(x, f"{p}/mean", 0),
            mean(x, f"{p}/mean_kept", 1),
            mk("Sub", [x, f"{p}/mean_kept"], [f"{p}/centred"]),
            mk("Mul", [f"{p}/centred", f"{p}/centred"], [f"{p}/squared"]),
            mean(f"{p}/squared", f"{p}/var", 0),
        ]
        eps = [a for a in node.attribute if a.name == "epsilon"]
        bn = mk(
            "BatchNormalization", [*node.input[:3], f"{p}/mean", f"{p}/var"], [node.output[0]], name=node.name
        )
        bn.attribute.extend(eps)
        nodes.append(bn)
        done += 1
    del graph.node[:]
    graph.node.extend(nodes)
    if done:
        log.info("%d training-mode BatchNormalization node(s) normalise with their input's statistics", done)
    return done


def refuse_training_dropout(proto: onnx.ModelProto) -> None:
    """Refuse a Dropout whose ``training_mode`` input is a constant true (opset 12 on): it zeroes a random part
    of its input on every run (onnxruntime does so), which no deployed model can reproduce; torch writes it
    when a model left in train mode is exported with ``training=TrainingMode.PRESERVE``."""
    graph = proto.graph
    consts = {t.name: t for t in graph.initializer}
    consts |= {
        n.output[0]: a.t
        for n in graph.node
        if n.op_type == "Constant"
        for a in n.attribute
        if a.name == "value"
    }
    for node in graph.node:
        if node.op_type != "Dropout" or len(node.input) < 3 or node.input[2] not in consts:
            continue
        if bool(np.any(numpy_helper.to_array(consts[node.input[2]]))):
            raise ModelError(
                f"Dropout {node.name or node.output[0]!r} runs in training mode (its training_mode input is true: "
                "a random output on every run); export the model after model.eval()"
            )


def _ranks(proto: onnx.ModelProto) -> dict[str, int]:
    """The rank of every value shape inference (or an initializer) knows."""
    ranks = {t.name: len(t.dims) for t in proto.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # a model shape inference cannot read: no ranks beside the initializers'
        return ranks
    g = inferred.graph
    for v in [*g.input, *g.value_info, *g.output]:
        if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape"):
            ranks[v.name] = len(v.type.tensor_type.shape.dim)
    return ranks


def _graph_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initializers = {t.name for t in proto.graph.initializer}
    return [i for i in proto.graph.input if i.name not in initializers]


def forget_nonpositive_dims(proto: onnx.ModelProto) -> None:
    """Make every ``dim_value <= 0`` an unknown dimension, in place (graph inputs, outputs, value_info,
    subgraphs included).

    PaddlePaddle (and some other) exporters write ``dim_value: -1`` for a dynamic dimension; read as a number,
    it contradicts every real size and poisons shape inference and constant folding.
    """

    def graph_values(graph: onnx.GraphProto):
        yield from graph.input
        yield from graph.output
        yield from graph.value_info
        for node in graph.node:
            for sub in subgraphs(node):
                yield from graph_values(sub)

    for value in graph_values(proto.graph):
        if not value.type.HasField("tensor_type") or not value.type.tensor_type.HasField("shape"):
            continue
        for d in value.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value <= 0:
                d.ClearField("dim_value")


def _to_float32(proto: onnx.ModelProto, types: tuple[int, ...]) -> tuple[int, set[int]]:
    """Retype every value of one of ``types`` to float32, in place, sub-graphs too: initializers, Constant /
    ConstantOfShape values, Casts' ``to`` and ``dtype`` attributes (RandomNormal, EyeLike, ...), graph inputs,
    outputs and value_info. Returns how many were retyped and which of ``types`` were found."""
    f32 = onnx.TensorProto.FLOAT
    found: set[int] = set()

    def retype(t: onnx.TensorProto) -> int:
        if t.data_type not in types:
            return 0
        found.add(t.data_type)
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
        return 1

    def walk(graph: onnx.GraphProto) -> int:
        changed = sum(retype(t) for t in graph.initializer)
        for v in [*graph.input, *graph.output, *graph.value_info]:
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in types:
                found.add(v.type.tensor_type.elem_type)
                v.type.tensor_type.elem_type = f32
                changed += 1
        for node in graph.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR and node.op_type in ("Constant", "ConstantOfShape"):
                    changed += retype(a.t)
                elif a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT and a.i in types:
                    found.add(a.i)
                    a.i = f32  # Cast's to; RandomNormal / RandomUniform / EyeLike's dtype
                    changed += 1
            changed += sum(walk(sub) for sub in subgraphs(node))
        return changed

    return walk(proto.graph), found


def _read_as_float(proto: onnx.ModelProto, names: set[str]) -> bool:
    """Whether every reader of the initializers ``names`` is a Cast to float32: values stored in half the bytes
    (a weight-only model's float16 scales and weights), the model computing in float32 as written."""
    readers = [n for n in proto.graph.node if names.intersection(n.input)]
    for node in proto.graph.node:
        for sub in subgraphs(node):
            if names.intersection(i for n in sub.node for i in n.input):
                return False
    return all(
        n.op_type == "Cast" and any(a.name == "to" and a.i == onnx.TensorProto.FLOAT for a in n.attribute)
        for n in readers
    )


def float16_to_float32(proto: onnx.ModelProto) -> list[str]:
    """A float16 model (onnxconverter-common's ``convert_float_to_float16``: float16 weights and compute, float16
    or float32 inputs/outputs) as the float32 model it was made from, in place (:func:`_to_float32`, sub-graphs
    too). No target computes in the file's float16 (TFLite's float kernels take float32, its int8 kernels are
    calibrated in float32; ``--precision fp16`` makes float16 weights again), and the values widen exactly. A
    bfloat16 model (torch's export after ``model.to(torch.bfloat16)``: ONNX defines no bfloat16 Conv, Gemm, ...
    below opset 22, so neither onnxruntime nor the onnx checker takes the file) widens the same way, exactly too.
    Returns the note to show (empty when the model has no float16 / bfloat16)."""
    halves = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    inputs = [v.name for v in proto.graph.input if v.type.tensor_type.elem_type in halves]
    stored = {t.name for t in proto.graph.initializer if t.data_type in halves}
    changed, found = _to_float32(proto, halves)
    if not changed or (changed == len(stored) and _read_as_float(proto, stored)):
        return []  # (no note for float16 storage alone: edgekit's weight-only files compute in float32 as written)
    kind = " / ".join(n for t, n in ((halves[0], "float16"), (halves[1], "bfloat16")) if t in found)
    note = f"{kind} model: computed in float32 (its {kind} weights widened exactly)"
    return [note + (f"; input(s) {', '.join(inputs)} are float32" if inputs else "")]


def float64_to_float32(proto: onnx.ModelProto) -> list[str]:
    """float64 computation narrowed to float32, in place (:func:`_to_float32`, sub-graphs too). No target has
    float64 kernels (TFLite's arithmetic, GridSample's grid and OpenVINO's NPU take float32), and torch writes
    float64 islands into float32 models wherever Python floats or ``torch.float64`` reach a traced value:
    Mask2Former's deformable attention computes its sampling grid from float64 reference points (Cast to double,
    Add, Mul, Sub, then GridSample of float32 data with a float64 grid). Each narrowed value is the float64 one
    rounded to float32: within float32's rounding of the float64 model, the fp32 verification's bar. Returns the
    note to show (empty when the model has no float64)."""
    f64 = onnx.TensorProto.DOUBLE
    inputs = [v.name for v in proto.graph.input if v.type.tensor_type.elem_type == f64]
    if not _to_float32(proto, (f64,))[0]:
        return []
    note = "float64 computation narrowed to float32 (no target has float64 kernels)"
    return [note + (f"; input(s) {', '.join(inputs)} are float32" if inputs else "")]


def _from_samples(dims: list[int], stored: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """An input's shape from its data's array shape ``stored`` (a leading sample axis, then the input's full shape
    or its shape without the batch, which becomes 1), or None when the array does not fit ``dims`` (0: dynamic)."""
    if stored is None or len(stored) < 2:
        return None
    sample = tuple(int(d) for d in stored[1:])
    full = sample if len(sample) == len(dims) else (1, *sample) if len(sample) == len(dims) - 1 else None
    if (
        full is None
        or (dims[0] <= 0 and full[0] != 1)
        or any(0 < d != f for d, f in zip(dims, full, strict=True))
    ):
        return None
    return full


def fix_input_shapes(
    proto: onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    data: str | os.PathLike[str] | None = None,
) -> list[str]:
    """Give every graph input a static shape; returns messages about what was assumed.

    A dynamic first dimension defaults to 1 (the batch); any other dynamic dimension is taken from
    ``input_shapes``, else from the ``.npz`` / ``.npy`` ``data`` (the calibration or evaluation samples: a model
    exported with dynamic axes takes its data's sequence length or image size, and says so), else asked for.
    A ``dim_value <= 0`` is dynamic (see :func:`forget_nonpositive_dims`).
    """
    from edgekit.core.array_sources import stored_shapes

    input_shapes = dict(input_shapes or {})
    inputs = _graph_inputs(proto)
    names = [i.name for i in inputs]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise ModelError(f"--input-shape names unknown input(s) {unknown}; the model's inputs are {names}")
    messages: list[str] = []
    stored: dict[str, tuple[int, ...]] | None = None
    for value in inputs:
        tensor_type = value.type.tensor_type
        dims = tensor_type.shape.dim
        current = [d.dim_value if d.dim_value > 0 else (d.dim_param or "?") for d in dims]
        if value.name in input_shapes:
            shape = input_shapes[value.name]
            if tensor_type.HasField("shape") and len(shape) != len(dims):
                raise ModelError(
                    f"--input-shape {value.name}={','.join(map(str, shape))} has rank {len(shape)}, "
                    f"the model's input has rank {len(dims)} {current}"
                )
            # an input with no shape at all (no rank either) takes the one given
            for d, fixed in zip(dims, shape, strict=False):
                if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != fixed:
                    raise ModelError(
                        f"--input-shape {value.name}: dimension {fixed} contradicts the model's {current}"
                    )
            del dims[:]
            for fixed in shape:
                tensor_type.shape.dim.add().dim_value = fixed
            continue
        if not tensor_type.HasField("shape"):
            raise ModelError(f"input {value.name!r} has no shape; pass --input-shape {value.name}=D0,D1,...")
        dynamic = [i for i, d in enumerate(dims) if not d.HasField("dim_value") or d.dim_value <= 0]
        if dynamic == [0]:
            dims[0].Clear()
            dims[0].dim_value = 1
            messages.append(f"input {value.name!r}: batch fixed to 1; pass --input-shape to choose")
        elif dynamic:
            if stored is None:  # read once, and only when a dim needs it
                stored = stored_shapes(data) if data is not None else {}
                if set(stored) == {""} and len(inputs) == 1:
                    stored = {value.name: stored[""]}  # a .npy holds the one input's samples
            full = _from_samples([d.dim_value for d in dims], stored.get(value.name))
            if full is not None:
                del dims[:]
                for size in full:
                    tensor_type.shape.dim.add().dim_value = size
                messages.append(
                    f"input {value.name!r}: dynamic dimensions fixed to {list(full)} from {Path(data).name}; "
                    "pass --input-shape to choose"
                )
                continue
            raise ModelError(
                f"input {value.name!r} has dynamic dimensions {current}; "
                f"pass --input-shape {value.name}="
                + ",".join("N" if i in dynamic else str(d) for i, d in enumerate(current))
            )
    return messages


def _clear_stale_shapes(proto: onnx.ModelProto) -> None:
    """Drop intermediate shape annotations and dynamic output dims so inference recomputes them. An output that
    is a graph input takes the input's (fixed) type: no node computes it, so inference would leave it unknown,
    and the graph reader gives the value the output's annotation. Inside If / Loop / Scan bodies too: torch's
    exporter declares each branch's outputs with the shapes of the branch it traced, and torch_geometric's GATConv
    writes an If whose other branch gives another rank; once folding makes that rank known, inference refused
    the whole graph ("Inferred shape and existing shape differ in rank") and nothing after it folded."""
    del proto.graph.value_info[:]
    for node in proto.graph.node:
        _clear_subgraph_shapes(node)
    inputs = {i.name: i for i in proto.graph.input}
    for out in proto.graph.output:
        if out.name in inputs:
            out.type.CopyFrom(inputs[out.name].type)
        elif out.type.tensor_type.HasField("shape"):
            out.type.tensor_type.ClearField("shape")


def _clear_subgraph_shapes(node: onnx.NodeProto) -> None:
    """The value_info and output shapes of ``node``'s sub-graphs, recursively (their element types stay)."""
    for attribute in node.attribute:
        for graph in [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else attribute.graphs:
            del graph.value_info[:]
            for out in graph.output:
                if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
                    out.type.tensor_type.ClearField("shape")
            for inner in graph.node:
                _clear_subgraph_shapes(inner)


def infer_shapes(proto: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"shape inference failed: {first}") from None


#: Ops that onnx's shape inference gives no output shape (ONNX functions without an inference function) and
#: whose output has their first input's type and shape.
SHAPE_OF_FIRST_INPUT = frozenset({"GroupNormalization"})


def infer_shapes_through_functions(proto: onnx.ModelProto) -> onnx.ModelProto:
    """Shape inference past the :data:`SHAPE_OF_FIRST_INPUT` ops: each one's output gets its input's type, and
    inference runs again from there (the dynamo exporter writes GroupNorm as GroupNormalization-21, and every
    value after it was left without a shape). A graph output takes it in its own annotation (round 21z: a
    GroupNormalization whose output is the graph's was refused as "no static shape")."""
    for _ in range(sum(n.op_type in SHAPE_OF_FIRST_INPUT for n in proto.graph.node)):
        g = proto.graph
        typed = {
            v.name: v for v in [*g.input, *g.value_info, *g.output] if v.type.tensor_type.HasField("shape")
        }
        added = [
            (node.output[0], typed[node.input[0]])
            for node in g.node
            if node.op_type in SHAPE_OF_FIRST_INPUT
            and node.input
            and node.input[0] in typed
            and node.output[0] not in typed
        ]
        if not added:
            break
        outputs = {o.name: o for o in g.output}
        for name, source in added:
            # a graph output: the graph reader takes its type from the output's annotation
            if name in outputs:
                outputs[name].type.CopyFrom(source.type)
                continue
            value = g.value_info.add()
            value.CopyFrom(source)
            value.name = name
        proto = infer_shapes(proto)
    return proto


def load_model(
    path: str | os.PathLike[str],
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    *,
    prepare: bool = True,
    messages: list[str] | None = None,
    data: str | os.PathLike[str] | None = None,
) -> ir.Model:
    """Load an ONNX file as an ``onnx_ir.Model`` ready for quantization and conversion.

    Quantized (QDQ) models are loaded the same way; ``prepare`` runs the cleaning passes, which leave Q/DQ nodes
    and their constant inputs alone. ``data``: the samples dynamic dims may take their sizes from
    (:func:`fix_input_shapes`).
    """
    proto = read_proto(path)
    return load_proto(proto, input_shapes, prepare=prepare, messages=messages, data=data)


def load_proto(
    proto: onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    *,
    prepare: bool = True,
    messages: list[str] | None = None,
    data: str | os.PathLike[str] | None = None,
) -> ir.Model:
    """:func:`load_model` for a model already in memory."""
    from edgekit.core import passes  # local import: passes imports this module's helpers

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)  # the caller's proto stays as it was
    sort_nodes(copy.graph)  # some tools write nodes out of order; ONNX's shape inference reads them in order
    # Before anything reads the shapes: onnx's version converter aborts the process (a failed std::clamp
    # assertion) on a value_info dim of -1, as older paddle2onnx releases write them.
    forget_nonpositive_dims(copy)
    inlined = inline_local_functions(copy)
    expanded = _expand_fused_ops(copy)
    from edgekit.core import onnx_ml

    expanded += onnx_ml.lower(copy)  # scikit-learn's Scaler / LinearClassifier ...; the rest refused
    from edgekit.core import dynamic_quant

    expanded += dynamic_quant.dequantize(copy)
    refuse_training_dropout(copy)
    batchnorm_batch_statistics(copy)
    from edgekit.core import legacy

    # ImageScaler, BatchNormalization spatial=0, opset < 7 broadcast: what the version converter cannot upgrade
    expanded += legacy.rewrite(copy)
    from edgekit.core import unbatched

    # torch's MaxPool on a (C, H, W) input (invalid ONNX) given a batch axis
    expanded += unbatched.rewrite(copy)
    proto = upgrade_opset(copy)
    from edgekit.core import qoperator

    qoperator.ms_qdq_as_standard(proto, default_opset(proto))
    from edgekit.core import fake_quantize

    # NNCF's torch export (FakeQuantize), brevitas' export_qonnx (Quant)
    read = fake_quantize.as_qdq(proto)
    notes_fq = (
        [f"{read} FakeQuantize / QONNX Quant node(s) read as QuantizeLinear / DequantizeLinear"]
        if read
        else []
    )
    # The lowest IR version the opsets allow (>= 4: initializers that are not graph inputs), so that every
    # runtime, including ones older than this onnx package, reads what we write.
    proto.ir_version = max(
        4, onnx.helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True)
    )
    # Old exporters list initializers as graph inputs too; they are weights, not inputs.
    initializers = {t.name for t in proto.graph.initializer}
    kept = [i for i in proto.graph.input if i.name not in initializers]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    forget_nonpositive_dims(proto)
    notes = inlined + expanded + notes_fq + float16_to_float32(proto) + float64_to_float32(proto)
    notes += fix_input_shapes(proto, input_shapes, data)
    if messages is not None:
        messages.extend(notes)  # the caller announces them (once per command, not once per load)
    else:
        for note in notes:
            log.warning(note)
    from edgekit.core.qdq_forms import concat_pairs_restored

    proto = concat_pairs_restored(proto)  # a portable QDQ file's Concats integer again (runtime.portable_qdq)
    _clear_stale_shapes(proto)
    proto = infer_shapes_through_functions(infer_shapes(proto))
    try:
        model = ir.from_proto(proto)
    except Exception as exc:
        raise ModelError(f"cannot read the model's graph: {exc}") from None
    _qoperator_to_qdq(model, messages)
    if prepare:
        model = passes.prepare(model)
    return model


def sort_nodes(graph: onnx.GraphProto) -> bool:
    """Order ``graph``'s nodes so that each comes after the producers of what it reads, in place (the given
    order kept where it already is one: Kahn's algorithm, taking the earliest ready node first). ONNX requires
    that order, onnxruntime sorts the nodes itself, and some editing tools write them unsorted; onnx's shape
    inference and version converter read them in the given order. A cycle is left as it is, for the checks that
    follow to refuse. Returns whether the order changed."""
    import heapq

    nodes = list(graph.node)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    after: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for k, node in enumerate(nodes):
        for p in {producer[i] for i in node_reads(node) if i in producer and producer[i] != k}:
            after[p].append(k)
            waiting[k] += 1
    ready = [k for k in range(len(nodes)) if not waiting[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for j in after[k]:
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, j)
    if len(order) < len(nodes) or order == sorted(order):
        return False
    del graph.node[:]
    graph.node.extend(nodes[k] for k in order)
    return True


def _node_domains(graph: onnx.GraphProto) -> set[str]:
    domains = set()
    for node in graph.node:
        domains.add(node.domain)
        for sub in subgraphs(node):
            domains |= _node_domains(sub)
    return domains


def inline_local_functions(proto: onnx.ModelProto) -> list[str]:
    """Inline the model's local functions (``FunctionProto``s: torch's ``export_modules_as_functions``, a module
    exported as one node), in place: their bodies are standard ops, which every target converts one by one.
    The functions' domains no node uses any more leave the opset imports. Returns the note to show."""
    if not proto.functions:
        return []
    import onnx.inliner

    names = sorted({f"{f.domain}::{f.name}" if f.domain else f.name for f in proto.functions})
    try:
        inlined = onnx.inliner.inline_local_functions(proto)
    except Exception as exc:  # the inliner raises bare C++ errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"cannot inline the model's local functions ({', '.join(names)}): {first}") from None
    used = _node_domains(inlined.graph) | {"", "ai.onnx"}
    kept = [o for o in inlined.opset_import if o.domain in used]
    del inlined.opset_import[:]
    inlined.opset_import.extend(kept)
    proto.CopyFrom(inlined)
    return [f"local function(s) inlined, their ops converted one by one: {', '.join(names)}"]


def _expand_fused_ops(proto: onnx.ModelProto) -> list[str]:
    """onnxruntime's fused transformer ops (optimum O2+, com.microsoft) as standard ONNX; the note to show."""
    from edgekit.core import contrib

    done = contrib.expand(proto)
    return [f"onnxruntime fused op(s) written out as standard ONNX: {', '.join(done)}"] if done else []


def _qoperator_to_qdq(model: ir.Model, messages: list[str] | None) -> None:
    """onnxruntime's QOperator format (QLinearConv, ...) becomes QDQ, keeping the model's scales."""
    from edgekit.core import qoperator

    if not qoperator.has_qoperator_nodes(model):
        return
    count = qoperator.to_qdq(model)
    model.meta[qoperator.META_KEY] = count
    note = f"QOperator model: {count} quantized op(s) rewritten as QDQ with their own scales and zero points"
    log.info(note)
    if messages is not None:
        messages.append(note)


def to_proto(model: ir.Model) -> onnx.ModelProto:
    return ir.to_proto(model)


def is_quantized(model: ir.Model | onnx.ModelProto) -> bool:
    if isinstance(model, onnx.ModelProto):
        return any(n.op_type in QDQ_OPS for n in model.graph.node)
    return any(n.op_type in QDQ_OPS for n in model.graph)


def activation_types(model: ir.Model) -> set[ir.DataType]:
    """The types a QDQ model quantizes activations to (its QuantizeLinear zero points' types)."""
    return {
        n.inputs[2].dtype
        for n in model.graph
        if n.op_type == "QuantizeLinear" and len(n.inputs) > 2 and n.inputs[2] is not None
    }


def qdq_precision(model: ir.Model) -> str | None:
    """The static recipe of a QDQ model: ``int16x8`` when an activation is quantized to 16 bits (in some layers
    at least), ``int8`` for 8-bit activations only, None for a model without QuantizeLinear/DequantizeLinear."""
    if not is_quantized(model):
        return None
    return "int16x8" if activation_types(model) & {ir.DataType.INT16, ir.DataType.UINT16} else "int8"


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise OutputError(f"cannot write {target}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise OutputError(f"cannot write {target}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        follow_umask(tmp)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"cannot write {target}: {exc.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def check_writable(path: str | os.PathLike[str]) -> Path:
    """Fail early (before long work) when ``path`` cannot be written."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise OutputError(f"output path {target} is a directory")
    if not folder.is_dir():
        raise OutputError(f"cannot write {target}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {target}: folder {folder} is not writable")
    return target


def save_model(model: ir.Model | onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    """Serialize a model and write it atomically."""
    proto = model if isinstance(model, onnx.ModelProto) else to_proto(model)
    if proto.graph.value_info:
        # Intermediate shape annotations are recomputed by every runtime: do not ship them.
        stripped = onnx.ModelProto()
        stripped.CopyFrom(proto)
        stripped.graph.ClearField("value_info")
        proto = stripped
    return atomic_write_bytes(path, proto.SerializeToString())
