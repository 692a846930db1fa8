"""ONNX -> TFLite: translate op by op, then one readable, ordered pipeline of passes (``_pipeline``).

translate                      one converter per ONNX op; explicit NCHW<->NHWC transposes
fold_constant_transposes       transposed / reshaped weights become constants
cancel_transposes              sink transposes through layout-agnostic ops, fold pairs
choose_io_layout               NHWC inputs/outputs only where the edge transpose cancelled
fuse_activations               RELU / RELU6 / RELU_N1_TO_1 into the preceding conv/fc/add/pool
quantize_kernels               DEQUANTIZE -> op -> QUANTIZE becomes the integer kernel
exact_bilinear_upsampling      (arm-cpu) int8 bilinear x2 as pad, nearest, depthwise triangle: ties to even
exact_levels_resize            (arm-cpu) int8 bilinear x4, x8, x16 ... on the levels in float32: ties to even
exact_average_pool             (arm-cpu) int8 AveragePool with excluded pads as sums of the levels / counts: ties to even
exact_float_taps               (arm-cpu) float taps between int8 tensors (3-D Resize) on the levels: ties to even
exact_batch_matmul             (arm-cpu) int8 BATCH_MATMUL of run-time tensors on the levels: one rounding, ties to even
hybrid_weights                 weight-only models: int8 weights on the hybrid kernels (weight_only.py)
flatten_into_fully_connected   NCHW flatten before a dense layer -> permuted weights instead
drop_reshape_before_fully_connected  FULLY_CONNECTED flattens its input itself
transposes_to_reshapes         transposes that move only unit dims become (merged) reshapes
float_spatial_mean_to_average_pool  float MEAN over H, W -> one AVERAGE_POOL_2D (cheaper in XNNPACK)
softmax_on_last_axis           SOFTMAX reads the tensor before a RESHAPE that keeps its rows; no-op RESHAPEs go
integer_io                     int8 / uint8 graph inputs and outputs (nnapi)
fp16_weights                   (the fp16 recipe) FLOAT16 constants read through DEQUANTIZE
exact_fp16_weights             (weight-only models) constants whose values are float16 ones: FLOAT16 + DEQUANTIZE
finalize                       dead ops, topological order, ONNX names on the outputs
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.errors import TargetError, UnsupportedOpError
from edgekit.core.litert_run import TensorInfo  # noqa: F401 - defined there to be light, used here
from edgekit.core.model import forget_nonpositive_dims, infer_shapes_through_functions
from edgekit.targets.tflite import (
    exact_matmul,
    exact_pool,
    fp16,
    fusion,
    integer_resize,
    layout,
    lowering,
    quantized,
    selection,
    weight_only,
    writer,
)
from edgekit.targets.tflite.context import Context, permute, to_nchw_perm, to_nhwc_perm
from edgekit.targets.tflite.graph import Graph, Op, Tensor
from edgekit.targets.tflite.registry import call, lookup
from edgekit.targets.tflite.schema import fb

IoDtype = Literal["float32", "int8", "uint8"]


@dataclass(frozen=True)
class ConvertOptions:
    """How to convert.

    ``keep_io_layout``: keep ONNX's NCHW layout for image inputs/outputs (one transpose at each edge)
    instead of NHWC. (Without it, rank-4 float inputs/outputs are NHWC where that costs no transpose
    inside, i.e. images feeding/leaving NHWC kernels; other rank-4 tensors keep the ONNX layout.) ``io_dtype``: "float32" keeps float inputs/outputs (QUANTIZE/DEQUANTIZE at the
    edges of a quantized model); "int8"/"uint8" make them integer (quantized models only). int64 inputs
    (token ids, masks) are int32 whatever the options: feed them through ``litert_run.to_model_input``.
    ``target``: the target name used in messages. ``per_tensor_weights``: TFLite ops (e.g.
    ``{"FULLY_CONNECTED"}``) whose per-channel int8 weights are requantized per tensor, for runtimes
    that lack the per-channel kernel (NNAPI); each is reported in ``notes``. ``strict_integer`` (with
    integer ``io_dtype``): refuse a model with ops left in float; off, they stay float between
    DEQUANTIZE/QUANTIZE and the inputs/outputs next to them stay float32. ``fp16_weights`` (the ``fp16``
    recipe, float models): float constants stored as FLOAT16 and read through DEQUANTIZE (``fp16.py``).
    ``weight_only``: a weight-only model
    (``w8``, ``w4``): ``hybrid`` gives its integer weights to LiteRT's hybrid kernels, ``dequantize`` reads the
    int8 ones through DEQUANTIZE into the float kernels (:mod:`.weight_only`); empty: not a weight-only model.
    """

    keep_io_layout: bool = False
    io_dtype: IoDtype = "float32"
    target: str = "arm-cpu"
    per_tensor_weights: frozenset[str] = frozenset()
    strict_integer: bool = True
    fp16_weights: bool = False
    weight_only: Literal["", "hybrid", "dequantize"] = ""

    def __post_init__(self) -> None:
        if self.io_dtype not in ("float32", "int8", "uint8"):
            raise TargetError(f"io_dtype must be float32, int8 or uint8, got {self.io_dtype!r}")


@dataclass
class ConversionResult:
    data: bytes
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    op_counts: dict[str, int]
    notes: list[str] = field(default_factory=list)
    float_ops: list[str] = field(default_factory=list)  # ops that stayed float in a quantized model

    def save(self, path) -> None:
        writer.write(self.data, path)


Pass = Callable[[Graph], Graph]


#: arm-cpu's int8 kernels whose rounding differs from the QDQ model's, rewritten to compute it (in this order;
#: nnapi keeps the delegate's kernels).
_ARM_CPU_EXACT: list[Pass] = [
    integer_resize.exact_bilinear_upsampling,
    integer_resize.exact_levels_resize,
    exact_pool.exact_average_pool,
    integer_resize.exact_float_taps,
    exact_matmul.exact_batch_matmul,
]


def _pipeline(options: ConvertOptions) -> list[Pass]:
    return [
        layout.fold_constant_transposes,
        layout.cancel_transposes,
        layout.choose_io_layout,
        fusion.fuse_activations,
        quantized.quantize_kernels(options.per_tensor_weights),
        *(_ARM_CPU_EXACT if options.target == "arm-cpu" else []),
        weight_only.hybrid_weights(options.weight_only),
        fusion.flatten_into_fully_connected,
        fusion.drop_reshape_before_fully_connected,
        layout.transposes_to_reshapes,
        lowering.float_spatial_mean_to_average_pool,
        lowering.softmax_on_last_axis,
        quantized.integer_io(options.io_dtype, options.target, options.strict_integer),
        *([quantized.exact_input_quantize] if options.target == "arm-cpu" else []),
        *(
            [fp16.fp16_weights]
            if options.fp16_weights
            else [fp16.exact_fp16_weights]
            if options.weight_only
            else []
        ),
        finalize,
    ]


def convert(
    model: ir.Model | onnx.ModelProto, options: ConvertOptions = ConvertOptions()
) -> ConversionResult:
    """Convert an ONNX model (static shapes, opset >= 7) to a TFLite flatbuffer."""
    graph = build_graph(model, options)
    data = writer.serialize(graph)
    return ConversionResult(
        data=data,
        inputs=[_info(graph, t) for t in graph.inputs],
        outputs=[_info(graph, t) for t in graph.outputs],
        op_counts=graph.op_counts(),
        notes=list(graph.notes),
        float_ops=quantized.float_ops(graph),
    )


def build_graph(model: ir.Model | onnx.ModelProto, options: ConvertOptions = ConvertOptions()) -> Graph:
    """The TFLite graph ``convert`` serialises: the ONNX graph translated, then every pass run."""
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
        forget_nonpositive_dims(proto)  # -1 is a dynamic dim (Paddle exports), not a size
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
        model = ir.from_proto(infer_shapes_through_functions(inferred))
    dynamic = selection.dynamic_values(model, options.target)
    graph = translate(model, options, dynamic)
    for run in _pipeline(options):
        graph = run(graph)
    return graph


def _info(graph: Graph, t: Tensor) -> TensorInfo:
    perm = graph.io_perms.get(t.name)
    layout_name = None if perm is None and t.rank != 4 else ("NHWC" if perm else "NCHW")
    q = t.quant
    return TensorInfo(
        name=t.name,
        shape=t.shape,
        dtype=str(t.dtype),
        layout=layout_name,
        onnx_to_tflite_perm=perm,
        scale=float(q.scale[0]) if q is not None else None,
        zero_point=int(q.zero_point[0]) if q is not None else None,
    )


# -- translation -----------------------------------------------------------------------------------
#: Weighted ONNX ops: in a QDQ model, one whose weight is a float constant was kept float by the quantizer.
_WEIGHTED = {"Conv": 1, "ConvTranspose": 1, "Gemm": 1, "MatMul": 1}


def _float_layers(model: ir.Model) -> set[str]:
    """Weighted nodes of a QDQ model reading a float constant weight (an accuracy restore, ``--exclude``)."""
    if not any(n.op_type == "DequantizeLinear" for n in model.graph):
        return set()
    kept = set()
    for node in model.graph:
        index = _WEIGHTED.get(node.op_type)
        if index is None or len(node.inputs) <= index or node.inputs[index] is None:
            continue
        weight = node.inputs[index]
        if weight.const_value is not None and weight.dtype == ir.DataType.FLOAT:
            kept.add(node.name)
    return kept


def translate(model: ir.Model, options: ConvertOptions, dynamic: frozenset[str] = frozenset()) -> Graph:
    """One converter per ONNX node; ONNX layouts inside, explicit transposes at NHWC kernels. ``dynamic``: the
    values after a data-dependent op (:func:`.selection.dynamic_values`), whose unknown dims are sized at run
    time."""
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 0))
    graph = Graph()
    ctx = Context(graph, opset, options.target)
    ctx.dynamic = set(dynamic)
    onnx_graph = model.graph
    initializers = set(onnx_graph.initializers)
    for value in onnx_graph.inputs:
        if value.name in initializers:
            continue
        shape = ctx.shape(value)
        dtype = value.dtype.numpy() if value.dtype is not None else np.float32
        if dtype == np.int64:  # token ids, masks: int32 (TFLite's index type; NNAPI has no int64)
            dtype = np.dtype(np.int32)
        if len(shape) == 4 and not options.keep_io_layout and dtype == np.float32:
            perm = to_nhwc_perm(4)
            t = graph.tensor(value.name, permute(shape, perm), dtype)
            graph.io_perms[t.name] = perm
            graph.inputs.append(t)
            ctx.bind(value, ctx.transpose(t, to_nchw_perm(4)))
        else:
            t = graph.tensor(value.name, shape, dtype)
            graph.inputs.append(t)
            ctx.bind(value, t)
    graph.float_layers = _float_layers(model)
    for node in onnx_graph:
        if id(node) in ctx.claimed:
            continue
        ctx.node = node
        _infer_missing_shapes(ctx, node)
        if not _fold(ctx, node):
            reg = lookup(node, opset, options.target)
            if node.op_type in selection.ONE_ROW_MORE and node.outputs[0].name in ctx.dynamic:
                selection.with_one_row_more(ctx, node, lambda: call(reg, ctx, node, options.target))  # noqa: B023
            else:
                call(reg, ctx, node, options.target)
    ctx.node = None
    for value in onnx_graph.outputs:
        t = ctx.tensor(value)
        if t.is_const and 0 in t.shape:
            raise TargetError(
                f"output {value.name!r} is an empty constant (shape {list(t.shape)}); LiteRT cannot output it"
            )
        if t.rank == 4 and not options.keep_io_layout and t.dtype == np.float32:
            perm = to_nhwc_perm(4)
            t = ctx.transpose(t, perm)
            graph.io_perms[value.name] = perm
        graph.outputs.append(t)
        graph.output_names.append(value.name)
    return graph


def _infer_missing_shapes(ctx: Context, node: ir.Node) -> None:
    """Output shapes ONNX's model-level inference left unknown, from the now known inputs and constants.

    (After shape sub-graphs fold to constants, a Reshape's target shape is known even where the model's
    shape inference could not propagate it.)
    """
    outputs = [v for v in node.outputs if v.name]
    if all(v.shape is not None and all(isinstance(d, int) and d >= 0 for d in v.shape) for v in outputs):
        return
    if node.domain not in ("", "ai.onnx"):
        return
    try:
        schema = onnx.defs.get_schema(node.op_type, ctx.opset, "")
        types, data = {}, {}
        for v in node.inputs:
            if v is None or not v.name:
                continue
            array = ctx.const(v)
            if array is not None:
                data[v.name] = onnx.numpy_helper.from_array(np.asarray(array), v.name)
                elem = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)
                types[v.name] = onnx.helper.make_tensor_type_proto(elem, list(np.shape(array)))
            elif v.dtype is not None:
                dims = [d if d >= 0 else None for d in ctx.shape(v)]  # onnx aborts on a -1 dim
                types[v.name] = onnx.helper.make_tensor_type_proto(int(v.dtype), dims)
        inferred = onnx.shape_inference.infer_node_outputs(
            schema,
            ir.serde.serialize_node(node),
            types,
            data,
            opset_imports=[onnx.helper.make_opsetid("", ctx.opset)],
        )
    except Exception:  # noqa: BLE001 - best effort: the converter reports the missing shape itself
        return
    for v in outputs:
        tensor_type = inferred.get(v.name)
        if tensor_type is None or not tensor_type.tensor_type.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.tensor_type.shape.dim]
        if all(d is not None for d in dims) or (v.name in ctx.dynamic and v.shape is None):
            v.shape = ir.Shape(dims)
            if v.dtype is None:
                v.dtype = ir.DataType(tensor_type.tensor_type.elem_type)


def _fold(ctx: Context, node: ir.Node) -> bool:
    """Evaluate nodes whose inputs are all constants (shape sub-graphs, Constant nodes)."""
    if node.domain not in ("", "ai.onnx") or node.op_type == "DequantizeLinear":
        return False
    inputs = [v for v in node.inputs if v is not None and v.name]
    if node.op_type in ("Shape", "Size") or not all(ctx.is_const(v) for v in inputs):
        return False  # Shape and Size have converters that read the static shape
    from onnx.reference import ReferenceEvaluator

    proto = ir.serde.serialize_node(node)
    try:
        evaluator = ReferenceEvaluator(proto, opsets={"": ctx.opset})
        results = evaluator.run(None, {v.name: ctx.const(v) for v in inputs})
    except Exception as exc:  # noqa: BLE001 - the reference evaluator raises many types
        if _has_converter(node, ctx.opset):
            return False  # e.g. the evaluator's OneHot refuses negative indices: convert it as an op instead
        raise ctx.error(f"cannot evaluate this constant sub-graph: {type(exc).__name__}: {exc}") from None
    for value, result in zip(node.outputs, results, strict=False):
        ctx.set_const(value, np.asarray(result))
    return True


def _has_converter(node: ir.Node, opset: int) -> bool:
    try:
        lookup(node, opset, "")
    except UnsupportedOpError:
        return False
    return True


# -- the last pass ---------------------------------------------------------------------------------
def finalize(graph: Graph) -> Graph:
    """Drop dead ops, order the ops, give the outputs their ONNX names."""
    graph.remove_dead()
    for i, t in enumerate(list(graph.outputs)):
        # An output that is an input, another output or a constant (e.g. a Shape of a static input)
        # is written by an op of its own: TFLite outputs are tensors some op computes.
        if t.is_const or any(t is x for x in graph.inputs) or any(t is o for o in graph.outputs[:i]):
            copy = Tensor(graph.unique_name(t.name + "_copy"), t.shape, t.dtype, quant=t.quant)
            opts = fb.ReshapeOptionsT()
            opts.newShape = list(t.shape)
            shape = graph.const("shape", t.shape, np.int32)
            graph.ops.append(Op("RESHAPE", [t, shape], [copy], opts, "output copy"))
            graph.outputs[i] = copy  # an output of its own, not an alias of an input or another output
    graph.toposort()
    taken = {}
    for op in graph.ops:
        for t in [*op.inputs, *op.outputs]:
            if t is not None:
                taken[t.name] = t
    for t, name in zip(graph.outputs, graph.output_names, strict=True):
        other = taken.get(name)
        # an output that is a graph input: the input keeps the name users feed, its output copy shares it (a
        # signature names inputs and outputs apart)
        if other is not None and other is not t and not any(other is x for x in graph.inputs):
            other.name = graph.unique_name(name + "_internal")
            taken[other.name] = other
        if t.name != name:
            taken.pop(t.name, None)
            t.name = name
            taken[name] = t
    _tidy_names(taken)
    return graph


_PASS_SUFFIXES = ("/sunk", "/int", "/q", "/reshaped")


def _tidy_names(tensors: dict[str, Tensor]) -> None:
    """Drop the suffixes passes add to tensor names (``x/sunk`` -> ``x``) where the plain name is free."""
    for name, t in list(tensors.items()):
        base = name
        while base.endswith(_PASS_SUFFIXES):
            base = base.rsplit("/", 1)[0]
        if base != name and base not in tensors:
            del tensors[name]
            t.name = base
            tensors[base] = t
