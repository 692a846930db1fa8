"""The weight-only recipes (``w8``, ``w4``): integer weights read through DequantizeLinear, float activations.

No calibration: only the constant weights of the multiply-accumulate ops change.

- ``w8``: int8, symmetric ([-127, 127], zero point 0), one scale (absmax / 127) per output channel, rounded so
  that each kernel's (each row's) rounding errors do not add up (:func:`round_preserving_sums`), for the
  weights of
  Conv (axis 0), MatMul (``[K, N]``: axis 1), Gemm (axis 0 with ``transB``, else 1) and the tables of
  embedding Gathers (a constant 2-D table gathered on axis 0 by run-time indices: one scale per row, per
  token, or one for the table when that loses at most a bit: :func:`quantize_int8_table`).
- ``w4``: int4, symmetric ([-8, 7], zero point 0), one scale per block of ``block_size`` weights along the
  input dimension (K) and per output channel, for MatMul and Gemm weights (DequantizeLinear ``block_size``,
  opset 21). Conv weights and embedding tables take ``w8``'s int8 per channel: no runtime has an int4
  convolution or gathers int4 rows here, and convolution weights are a small part of the models that want
  4 bits. A MatMul/Gemm whose K is not a multiple of the block size takes int8 per channel too (reported).

``--layer-precision NODE=fp32`` keeps a node's weights float, ``NODE=w8`` / ``NODE=w4`` gives it that recipe;
biases stay float (the kernels add them in float).

Optional calibration data (``edgekit quantize --precision w8 --calib DATA``) does two things, neither of which
changes the artifact's form (same scales, same int8 grid, float activations):

- the int8 weights of dense layers (Conv with one group, MatMul, Gemm) are rounded by their inputs' second
  moments on the data (GPTQ, :mod:`edgekit.quantize.gptq`) where that lowers the layer's output error;
- the float biases absorb ``(W - W_q) E[x]``, the mean output shift the weight rounding leaves, from the input's
  channel means on the data (Nagel et al., "Data-free quantization", bias correction);
- a dense layer whose int8 rounding still leaves its output on the data under :data:`W8_MIN_OUTPUT_SQNR_DB` is
  written in input-channel groups with their own scales (:mod:`edgekit.quantize.weight_split`), or, when no split
  reaches the bar, its weight is stored float16 (read through Cast; the targets keep it float16); the report names
  it with its figures.

PP-OCRv4 rec against fp32, 30 held-out text lines: data-free cosine 0.988; bias correction alone (16 lines)
0.9977; with GPTQ (128 lines) 0.99975 and every decoded sequence equal. On 30 lines of words (the benchmark's
default since): GPTQ 0.99880, with act-order 0.99883, with its last 480 x 480 convolution in 3 input-channel
groups 0.99978.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
from edgekit.core.errors import QuantizationError
from edgekit.core.irutil import NameScope, add_initializer, attr
from edgekit.quantize import gptq, weight_split
from edgekit.quantize.options import QuantizeOptions
from edgekit.quantize.qdq import (
    FLOAT16_MAX,
    float16_scales,
    round_preserving_sums,
    weight_error_shift,
    weight_scales,
)
from edgekit.quantize.recipes import get_recipe, resolve_layer_names
from onnx_ir.passes.common import DeduplicateInitializersPass, TopologicalSortPass

log = logging.getLogger("edgekit")

#: ``w8`` with calibration data writes a dense layer in input-channel groups, each its own int8 weight and scales
#: (:mod:`edgekit.quantize.weight_split`), or, when no split reaches the bar, keeps its weight float16 (read through
#: Cast), when its int8 rounding with one scale per output channel, after GPTQ, leaves the layer's output on the
#: data below this signal-to-noise ratio (dB): a layer whose rows have a few large weights on the inputs that carry
#: the most signal. PP-OCRv4 rec's last backbone 1x1 convolution (480 x 480) is 39.9 dB in int8 (its other 47
#: weights 44.6-79 dB) and alone moved a character's CTC peak by a step on one of 30 word lines: the model's cosine
#: to fp32 0.99883 -> 0.99978 with it in 3 groups (44.4 dB), 0.99976 with it float16 (benchmarks/compression.py).
W8_MIN_OUTPUT_SQNR_DB = 43.0
#: Float16 weights of fewer values stay float32 in the targets' files (the bytes do not matter there).
FLOAT16_MIN_ELEMENTS = 1024


def stores_float16(array: np.ndarray) -> bool:
    """Whether a target stores this float32 constant of a weight-only model as float16: at least
    :data:`FLOAT16_MIN_ELEMENTS` values, every one a float16 value (a weight ``w8`` kept float16, which the
    model's loading widened exactly), so that float16 storage keeps the values and halves the bytes."""
    return (
        array.dtype == np.float32
        and array.size >= FLOAT16_MIN_ELEMENTS
        and bool(np.all(np.abs(array) <= FLOAT16_MAX))
        and np.array_equal(array.astype(np.float16).astype(np.float32), array)
    )


#: The opset of DequantizeLinear with int4 and ``block_size``.
INT4_OPSET = 21
INT4_MIN, INT4_MAX = -8, 7


@dataclass(frozen=True)
class WeightSite:
    """One weight input of one node and how its recipe quantizes it."""

    node: ir.Node
    index: int  # the weight's input index
    #: Output-channel axis of the weight (per-channel int8).
    channel_axis: int
    #: Input (reduction) axis of the weight, blocked by ``w4``; None: not a dense weight (Conv, Gather).
    block_axis: int | None


def weight_sites(node: ir.Node) -> list[WeightSite]:
    """The constant weights of ``node`` that the weight-only recipes quantize (empty for other nodes)."""

    def const(index: int, rank: int | None = None) -> bool:
        if len(node.inputs) <= index or node.inputs[index] is None:
            return False
        value = node.inputs[index]
        tensor = value.const_value
        if tensor is None or value.is_graph_input() or tensor.dtype != ir.DataType.FLOAT:
            return False
        return rank is None or len(tensor.shape) == rank

    op = node.op_type
    if node.domain not in ("", "ai.onnx"):
        return []
    if op == "Conv" and const(1) and len(node.inputs[1].const_value.shape) >= 3 and not const(0):
        return [WeightSite(node, 1, 0, None)]
    if op == "MatMul" and const(1, 2) and not const(0):
        return [WeightSite(node, 1, 1, 0)]
    if op == "Gemm" and const(1, 2) and not const(0) and not attr(node, "transA", 0):
        trans_b = bool(attr(node, "transB", 0))
        return [WeightSite(node, 1, 0 if trans_b else 1, 1 if trans_b else 0)]
    if op == "Gather" and const(0, 2) and not const(1) and attr(node, "axis", 0) == 0:
        return [WeightSite(node, 0, 0, None)]
    return []


def quantize_int8_channels(weight: np.ndarray, axis: int, op_type: str) -> tuple[np.ndarray, np.ndarray]:
    """``w8``'s weights: symmetric int8 in [-127, 127], scale = absmax / 127 per channel along ``axis``, rounded by
    :func:`round_preserving_sums` over each convolution kernel's spatial taps (per output and input channel),
    else over the channel's whole row (its input dimension). The scales are float16 values
    (:func:`~edgekit.quantize.qdq.float16_scales`): the written file stores them in half the bytes."""
    scales = float16_scales(weight_scales(weight, axis))
    moved = np.moveaxis(weight.astype(np.float64), axis, 0)
    scaled = moved / scales.astype(np.float64).reshape((-1,) + (1,) * (moved.ndim - 1))
    if op_type == "Conv" and moved.ndim > 2 and int(np.prod(moved.shape[2:])) > 1:
        groups = scaled.reshape(moved.shape[0] * moved.shape[1], -1)
    else:
        groups = scaled.reshape(moved.shape[0], -1)
    q = round_preserving_sums(groups, -127, 127).reshape(moved.shape)
    return np.moveaxis(q, 0, axis).astype(np.int8), scales


#: An embedding table takes one scale for the whole table when that costs its dequantized values at most this
#: much signal-to-quantization-noise (dB) against one scale per row: one bit (the narrowest rows lose about a bit,
#: the table's rows having alike ranges). TFLite's converter quantizes EMBEDDING_LOOKUP tables per tensor; per
#: row, LiteRT stores a float32 scale and an int64 zero point per token (12 bytes a row), 19 % of a 64-wide int8
#: table.
TABLE_PER_TENSOR_MAX_LOSS_DB = 6.02


def _sqnr_db(x: np.ndarray, dequantized: np.ndarray) -> float:
    noise = float(np.square(x - dequantized).sum())
    return np.inf if noise == 0 else 10 * np.log10(float(np.square(x).sum()) / noise)


def quantize_int8_table(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``w8``'s embedding table (a 2-D Gather table, rows = tokens): :func:`quantize_int8_channels` per row, or one
    scale (absmax / 127, a 0-d array) when that loses at most :data:`TABLE_PER_TENSOR_MAX_LOSS_DB` of the table's
    SQNR; each row's rounding errors sum to within half a step either way."""
    q, scales = quantize_int8_channels(table, 0, "Gather")
    x = table.astype(np.float64)
    per_row = _sqnr_db(x, q.astype(np.float64) * scales.astype(np.float64)[:, None])
    absmax = float(np.abs(x).max(initial=0.0))
    scale = float16_scales(np.asarray(absmax / 127.0 if absmax > 0 else 1.0, np.float32))
    one = round_preserving_sums(x / np.float64(scale), -127, 127).astype(np.int8)
    if per_row - _sqnr_db(x, one.astype(np.float64) * np.float64(scale)) <= TABLE_PER_TENSOR_MAX_LOSS_DB:
        return one, scale
    return q, scales


def quantize_int4_blockwise(weight: np.ndarray, axis: int, block_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int4 in [-8, 7] with one scale per ``block_size`` weights along ``axis`` (which must divide
    evenly): (int4 values, float32 scales whose ``axis`` has ``size // block_size`` entries).

    The scale is ``absmax / 7`` rounded to a float16 value (kept as float32): LiteRT reads blockwise scales as
    float16, so every runtime computes the same numbers. Rounding to nearest: at 4 bits a step is coarse, and
    :func:`round_preserving_sums`, which may move a value by up to one step, lost accuracy on the encoder."""
    moved = np.moveaxis(weight.astype(np.float64), axis, -1)
    blocks = moved.reshape(*moved.shape[:-1], moved.shape[-1] // block_size, block_size)
    absmax = np.abs(blocks).max(axis=-1)
    half = (absmax / INT4_MAX).astype(np.float16)
    tiny = np.float16(2.0**-24)  # the smallest float16 above 0: a block that rounds to 0 keeps a scale
    scales = np.where(absmax > 0, np.maximum(half, tiny), np.float16(1.0)).astype(np.float32)
    q = np.clip(np.round(blocks / scales[..., None].astype(np.float64)), INT4_MIN, INT4_MAX)
    q = np.moveaxis(q.reshape(moved.shape), -1, axis).astype(ml_dtypes.int4)
    return q, np.moveaxis(scales, -1, axis)


def dequantize_blockwise(q: np.ndarray, scales: np.ndarray, axis: int, block_size: int) -> np.ndarray:
    """float32 ``q * scale`` with each scale repeated over its block along ``axis`` (the recipe's numerics)."""
    return (q.astype(np.float32) * np.repeat(scales, block_size, axis=axis)).astype(np.float32)


@dataclass
class WeightOnly:
    """What :func:`quantize_weight_only` returns."""

    model: ir.Model
    #: One row per quantized weight: node, op, weight name, shape, bits, scheme, bytes before and after.
    weights: list[dict] = field(default_factory=list)
    #: Nodes with a weight that stayed float, and why.
    float_weights: list[dict] = field(default_factory=list)
    #: With calibration data: samples used and biases corrected.
    bias_correction: dict | None = None

    def proto(self) -> onnx.ModelProto:
        return ir.to_proto(self.model)

    def describe(self, precision: str) -> str:
        """The weights' form in words, for the report and the terminal."""
        text = (
            "int4 blockwise (MatMul/Gemm), int8 per channel (others)"
            if precision == "w4"
            else "int8 symmetric per-channel"
        )
        groups = sum(1 for w in self.weights if "input-channel groups" in w["scheme"])
        if groups:
            text += f"; {groups} in input-channel groups (one scale per channel below {W8_MIN_OUTPUT_SQNR_DB:g} dB)"
        halves = sum(1 for w in self.weights if w["bits"] == 16)
        if halves:
            text += (
                f"; {halves} float16 (int8 below {W8_MIN_OUTPUT_SQNR_DB:g} dB of the layer's output on the "
                "calibration data)"
            )
        return text

    def to_json(self) -> dict:
        fp32 = sum(w["fp32_bytes"] for w in self.weights)
        stored = sum(w["bytes"] for w in self.weights)
        return {
            "quantized_weights": len(self.weights),
            "weight_rows": self.weights,
            "float_weights": self.float_weights,
            "weight_bytes_fp32": fp32,
            "weight_bytes": stored,
            "weight_size_ratio": stored / fp32 if fp32 else None,
            "bias_correction": self.bias_correction,
        }


def _recipe_of(node: ir.Node, options: QuantizeOptions, layers: dict[str, str]) -> str:
    recipe = layers.get(node.name or "", options.precision)
    if node.name in options.exclude:
        return "fp32"
    if recipe not in ("fp32", "w8", "w4"):
        raise QuantizationError(
            f"--layer-precision {node.name}={recipe}: a {options.precision} model mixes only fp32, w8 and w4 "
            "layers (the static recipes need calibration)"
        )
    return recipe


def quantize_weight_only(model: ir.Model, options: QuantizeOptions, calibration=None) -> WeightOnly:
    """The weight-only model of a prepared fp32 model (from :func:`edgekit.core.model.load_model`). With
    ``calibration`` (samples with ``.inputs``; the first ``options.samples``), biases are corrected (module
    docstring)."""
    if not get_recipe(options.precision).weight_only:
        raise QuantizationError(f"--precision {options.precision} is not a weight-only recipe")
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph):
        raise QuantizationError(
            "the model is already quantized (it has QDQ or onnxruntime QOperator int8 nodes)"
        )
    layers = dict(resolve_layer_names(model, options.layer_precision))
    proto = ir.to_proto(model)  # a copy: the caller keeps its fp32 model
    wants_int4 = any(
        _recipe_of(n, options, layers) == "w4" and any(s.block_axis is not None for s in weight_sites(n))
        for n in model.graph
    )
    if wants_int4 and proto.opset_import and _default_opset(proto) < INT4_OPSET:
        try:
            proto = onnx.version_converter.convert_version(proto, INT4_OPSET)
        except Exception as exc:  # the converter raises bare RuntimeErrors
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise QuantizationError(
                f"w4 needs opset {INT4_OPSET}; the model cannot be upgraded: {first}"
            ) from None
    qmodel = ir.from_proto(proto)
    result = WeightOnly(qmodel)
    hessians = {}
    if calibration is not None:
        dense = [n for n in model.graph if _takes_gptq(n, options, layers)]
        hessians = gptq.input_hessians(model, dense, calibration, options.samples) if dense else {}
    graph = qmodel.graph
    names = NameScope(graph)
    done: dict[tuple[int, str, int], ir.Value] = {}
    for node in list(graph):
        sites = weight_sites(node)
        if not sites:
            continue
        recipe = _recipe_of(node, options, layers)
        for site in sites:
            value = node.inputs[site.index]
            if recipe == "fp32":
                result.float_weights.append(
                    {
                        "node": node.name,
                        "op_type": node.op_type,
                        "reason": "kept float (--layer-precision/--exclude)",
                    }
                )
                continue
            weight = value.const_value.numpy()
            blocked = recipe == "w4" and site.block_axis is not None
            if blocked and weight.shape[site.block_axis] % options.block_size:
                result.float_weights.append(
                    {
                        "node": node.name,
                        "op_type": node.op_type,
                        "reason": f"input dim {weight.shape[site.block_axis]} is not a multiple of block "
                        f"{options.block_size}: int8 per channel instead of int4",
                    }
                )
                blocked = False
            axis = site.block_axis if blocked else site.channel_axis
            key = (id(value), "w4" if blocked else "w8", axis)
            if key not in done:
                got = _dequantized(
                    graph,
                    names,
                    node,
                    value,
                    weight,
                    axis,
                    options.block_size if blocked else 0,
                    hessians.get(node.name),
                )
                if isinstance(got, weight_split.Split):  # one layer per group of its input channels
                    weight_split.apply(graph, names, node, weight, got)
                    result.weights.append(_split_row(node, value, weight, got))
                    break
                done[key] = got
                producer = done[key].producer()
                if producer.op_type == "Cast":  # int8 lost too much of the layer's output on the data
                    result.weights.append(_float16_row(node, value, weight, producer))
                else:
                    scales = producer.inputs[1].const_value.numpy()
                    result.weights.append(_row(node, value, weight, blocked, options.block_size, scales))
            node.replace_input_with(site.index, done[key])
    if not result.weights:
        raise QuantizationError(
            "nothing to quantize: the model has no constant Conv, MatMul, Gemm or embedding weights"
        )
    if calibration is not None:
        result.bias_correction = _correct_biases(model, qmodel, calibration, options.samples)
    TopologicalSortPass()(qmodel)
    for value in list(graph.initializers.values()):
        if not value.uses() and not value.is_graph_output() and not value.is_graph_input():
            graph.initializers.pop(value.name)
    shrink_repeated_constants(graph)
    DeduplicateInitializersPass()(qmodel)  # torch exports repeat small constants (shapes, scalars) per layer
    if wants_int4:
        qmodel.opset_imports[""] = max(qmodel.opset_imports.get("", INT4_OPSET), INT4_OPSET)
    proto = ir.to_proto(qmodel)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:  # pragma: no cover - a bug in this pass, not user input
        raise AssertionError(f"the weight-only model fails onnx.checker: {exc}") from exc
    return result


def _takes_gptq(node: ir.Node, options: QuantizeOptions, layers: dict[str, str]) -> bool:
    """Whether ``node``'s weight gets second-order int8 rounding from the calibration data (:mod:`gptq`):
    a dense weight of a ``w8`` node, or of a ``w4`` node whose weight falls back to int8 per channel."""
    sites = weight_sites(node)
    if len(sites) != 1 or sites[0].index != 1 or not gptq.takes_gptq(node):
        return False
    recipe = _recipe_of(node, options, layers)
    if recipe == "w4" and sites[0].block_axis is not None:
        return node.inputs[1].const_value.shape[sites[0].block_axis] % options.block_size != 0
    return recipe == "w8"


def _correct_biases(fp32: ir.Model, qmodel: ir.Model, calibration, samples: int) -> dict:
    """Each Conv/Gemm bias of ``qmodel`` (a float initializer) absorbs ``(W - W_q) E[x]`` (module docstring);
    E[x] per input channel from the fp32 model on up to ``samples`` calibration samples."""
    from itertools import islice

    from edgekit.core.errors import DataError
    from edgekit.core.runtime import HostRunner

    nodes = {n.name: n for n in qmodel.graph}
    targets = []
    for node in fp32.graph:
        q = nodes.get(node.name)
        if node.op_type not in ("Conv", "Gemm") or q is None or len(q.inputs) < 3 or q.inputs[2] is None:
            continue
        dq = q.inputs[1].producer()
        if dq is None or dq.op_type != "DequantizeLinear" or q.inputs[2].const_value is None:
            continue
        targets.append((node, q, dq))
    inputs = list(dict.fromkeys(node.inputs[0].name for node, _, _ in targets))
    graph_inputs = {v.name for v in fp32.graph.inputs}
    runner = HostRunner(ir.to_proto(fp32), extra_outputs=[n for n in inputs if n not in graph_inputs])
    means: dict[str, np.ndarray] = {}
    count = 0
    for sample in islice(iter(calibration), samples):
        feeds = sample.inputs
        outputs = runner.run(feeds)
        for name in inputs:
            value = np.asarray(feeds[name] if name in graph_inputs else outputs[name], np.float64)
            axes = tuple(i for i in range(value.ndim) if i != (1 if value.ndim > 2 else value.ndim - 1))
            means[name] = means.get(name, 0.0) + value.mean(axis=axes)
        count += 1
    if count == 0:
        raise DataError("the calibration data set is empty")
    corrected = 0
    for node, q, dq in targets:
        weight = node.inputs[1].const_value.numpy()
        quantized = dq.inputs[0].const_value.numpy().astype(np.float64)
        scales = dq.inputs[1].const_value.numpy().astype(np.float64)
        axis, block = attr(dq, "axis", 1), attr(dq, "block_size", 0)
        if block:  # w4: one scale per block along the input dim (a Gemm's int4 weight)
            dequantized = quantized * np.repeat(scales, block, axis=axis)
        else:
            shape = [1] * weight.ndim
            shape[axis] = -1
            dequantized = quantized * scales.reshape(shape)
        shift = weight_error_shift(node, weight, dequantized, means[node.inputs[0].name] / count)
        if shift is None:
            continue
        bias = q.inputs[2]
        corrected_bias = bias.const_value.numpy().astype(np.float64).reshape(-1) + shift
        bias.const_value = ir.tensor(
            corrected_bias.astype(np.float32).reshape(bias.const_value.shape), name=bias.name
        )
        corrected += 1
    return {"samples": count, "corrected_biases": corrected}


def _default_opset(proto: onnx.ModelProto) -> int:
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 0)


def _row(
    node: ir.Node, value: ir.Value, weight: np.ndarray, blocked: bool, block_size: int, scales: np.ndarray
) -> dict:
    """The report's row of one quantized weight and its ``scales``."""
    if blocked:
        return _weight_row(
            node,
            value,
            weight,
            4,
            f"int4 symmetric, block {block_size}",
            weight.size // 2 + _scale_bytes(scales),
        )
    scheme = "int8 symmetric per " + ("channel" if scales.size > 1 else "tensor")
    return _weight_row(node, value, weight, 8, scheme, weight.size + _scale_bytes(scales))


def _scale_bytes(scales: np.ndarray) -> int:
    """The file's bytes for these scales: float16 where they are float16 values (:func:`float16_scale_file`)."""
    return (2 if np.array_equal(float16_scales(scales), scales) else 4) * scales.size


def _weight_row(
    node: ir.Node, value: ir.Value, weight: np.ndarray, bits: int, scheme: str, stored: int
) -> dict:
    return {
        "node": node.name,
        "op_type": node.op_type,
        "weight": value.name,
        "shape": list(weight.shape),
        "bits": bits,
        "scheme": scheme,
        "fp32_bytes": 4 * weight.size,
        "bytes": stored,
    }


def _dequantized(
    graph: ir.Graph,
    names: NameScope,
    node: ir.Node,
    value: ir.Value,
    weight: np.ndarray,
    axis: int,
    block: int,
    hessian: np.ndarray | None = None,
) -> ir.Value | weight_split.Split:
    """A DequantizeLinear of the weight's integer form, inserted before ``node``; returns its output. With the
    ``hessian`` of the node's inputs (calibration data), int8 weights are rounded by :func:`gptq.gptq_round`
    where that lowers the layer's output error on the data; where the layer's output on the data is still under
    :data:`W8_MIN_OUTPUT_SQNR_DB`, the weight in input-channel groups that reach it (a :class:`weight_split.Split`
    for the caller to write; a weight read by one node only), else a float16 weight (:func:`_float16_weight`)."""
    base = value.name or "weight"
    if block:
        q, scales = quantize_int4_blockwise(weight, axis, block)
        attributes = {"axis": axis, "block_size": block}
    else:
        if node.op_type == "Gather":
            q, scales = quantize_int8_table(weight)
        else:
            q, scales = quantize_int8_channels(weight, axis, node.op_type)
        if hessian is not None:
            q = gptq.second_order(node, weight, q, scales, hessian)
            sqnr = gptq.output_sqnr_db(node, weight, q, scales, hessian)
            if sqnr < W8_MIN_OUTPUT_SQNR_DB:
                alone = len(list(value.uses())) == 1 and node.inputs[1] is value
                split = weight_split.plan(node, weight, hessian, W8_MIN_OUTPUT_SQNR_DB) if alone else None
                if split is not None:
                    return split
                if float(np.max(np.abs(weight))) <= FLOAT16_MAX:
                    return _float16_weight(graph, names, node, base, weight, sqnr)
        attributes = {"axis": axis} if scales.ndim else {}
    q_init = add_initializer(graph, names, f"{base}_quantized", q)
    s_init = add_initializer(graph, names, f"{base}_scale", scales)
    # Symmetric: the zero point is the default 0 and is omitted (the integer type is the weight's).
    dq = ir.node(
        "DequantizeLinear", [q_init, s_init], attributes, name=names.fresh(f"{base}_DequantizeLinear")
    )
    return _float_weight_before(graph, names, node, dq, f"{base}_dequantized", weight.shape)


def _float_weight_before(
    graph: ir.Graph, names: NameScope, node: ir.Node, producer: ir.Node, name: str, shape
) -> ir.Value:
    """``producer`` (of a float weight) inserted before ``node``; its output, named ``name``, typed and shaped."""
    graph.insert_before(node, producer)
    out = producer.outputs[0]
    out.name = names.fresh(name)
    out.dtype = ir.DataType.FLOAT
    out.shape = ir.Shape(shape)
    return out


def _split_row(node: ir.Node, value: ir.Value, weight: np.ndarray, split: weight_split.Split) -> dict:
    """The report's row of a weight :func:`weight_split.apply` wrote in groups."""
    scheme = (
        f"int8 symmetric per channel in {split.groups} input-channel groups ({split.sqnr_db:.1f} dB of the layer's "
        f"output on the calibration data; one group: under {W8_MIN_OUTPUT_SQNR_DB:g})"
    )
    return _weight_row(node, value, weight, 8, scheme, weight.size + _scale_bytes(split.scales))


def _float16_weight(
    graph: ir.Graph, names: NameScope, node: ir.Node, base: str, weight: np.ndarray, sqnr: float
) -> ir.Value:
    """The weight as a float16 initializer read through Cast to float, inserted before ``node`` (``w8`` with
    calibration data, for a layer int8 rounds to under :data:`W8_MIN_OUTPUT_SQNR_DB`); returns the Cast's
    output. ``sqnr`` (int8's, in dB) is kept on the Cast for the report."""
    half = add_initializer(graph, names, f"{base}_float16", weight.astype(np.float16))
    cast = ir.node("Cast", [half], {"to": ir.DataType.FLOAT}, name=names.fresh(f"{base}_Cast"))
    cast.meta["int8_output_sqnr_db"] = sqnr
    return _float_weight_before(graph, names, node, cast, f"{base}_float", weight.shape)


def _float16_row(node: ir.Node, value: ir.Value, weight: np.ndarray, cast: ir.Node) -> dict:
    """The report's row of a weight :func:`_float16_weight` stored."""
    sqnr = cast.meta.get("int8_output_sqnr_db")
    scheme = f"float16 (int8 left {sqnr:.1f} dB of the layer's output on the calibration data)"
    return _weight_row(node, value, weight, 16, scheme, 2 * weight.size)


#: Elementwise ops whose constant input may be stored with a broadcast axis (the output shape is unchanged).
_BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div"})


def shrink_repeated_constants(graph: ir.Graph) -> int:
    """Store a float constant read only by elementwise ops with extent 1 on each axis along which all its
    slices are equal and the other operand already has that extent (broadcasting gives the same output, bit
    for bit); returns how many constants shrank.

    A constant-index Gather that the model's preparation folds writes such constants: the zoo encoder's
    token-type embedding (a [2, 64] table, every position reading row 0) becomes a [1, 16, 64] tensor of 16
    equal rows, 4 KB where the table was 512 bytes.
    """
    shrunk = 0
    for value in list(graph.initializers.values()):
        tensor = value.const_value
        uses = value.uses()
        if tensor is None or tensor.dtype != ir.DataType.FLOAT or not uses or value.is_graph_output():
            continue
        array = tensor.numpy()
        keep = list(array.shape)
        for axis, extent in enumerate(array.shape):
            if extent == 1 or not all(
                _other_has_extent(use.node, use.idx, array.ndim, axis, extent) for use in uses
            ):
                continue
            first = np.take(array, [0], axis=axis)
            if np.array_equal(np.broadcast_to(first, array.shape), array):
                array = first
                keep[axis] = 1
        if keep != list(tensor.shape):
            value.const_value = ir.tensor(np.ascontiguousarray(array), name=value.name)
            value.shape = ir.Shape(keep)
            shrunk += 1
    return shrunk


def _other_has_extent(node: ir.Node, index: int, rank: int, axis: int, extent: int) -> bool:
    """Whether ``node`` (an elementwise op reading a rank-``rank`` constant as input ``index``) has another
    operand, of statically known shape, with ``extent`` on the same (right-aligned) axis."""
    if node.op_type not in _BROADCASTING or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return False
    other = node.inputs[1 - index]
    shape = other.shape if other is not None else None
    if shape is None or len(shape) < rank:
        return False
    dim = shape[len(shape) - rank + axis]
    return isinstance(dim, int) and dim == extent


def float16_scale_file(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of the weight-only model ``proto`` as its file stores it: each DequantizeLinear scale initializer
    whose values are all float16 values (:func:`~edgekit.quantize.qdq.float16_scales`) stored float16 and read
    through a Cast to float under its old name. The same numbers on every runtime (onnxruntime and OpenVINO fold
    the Cast), half the scales' bytes: PP-OCRv4 rec's 13,597 per-channel scales, 54 KB -> 27 KB."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    graph = out.graph
    readers: dict[str, set[tuple[str, int]]] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            readers.setdefault(name, set()).add((node.op_type, i))
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}
    casts = []
    for tensor in graph.initializer:
        if (
            tensor.data_type != onnx.TensorProto.FLOAT
            or readers.get(tensor.name, set()) - {("DequantizeLinear", 1)}
            or not readers.get(tensor.name)
            or tensor.name in outputs
            or f"{tensor.name}_float16" in taken
        ):
            continue
        values = onnx.numpy_helper.to_array(tensor)
        if not np.array_equal(float16_scales(values), values):
            continue
        name = tensor.name
        tensor.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float16), f"{name}_float16"))
        casts.append(onnx.helper.make_node("Cast", [tensor.name], [name], name=f"{name}_Cast", to=1))
    if casts:
        nodes = casts + list(graph.node)
        del graph.node[:]
        graph.node.extend(nodes)
    return out


def weight_only_precision(model: ir.Model | onnx.ModelProto) -> str | None:
    """``w4`` / ``w8`` when ``model`` is a weight-only model (DequantizeLinear, no QuantizeLinear; blocked or
    int4 weights make it ``w4``), else None."""
    if isinstance(model, onnx.ModelProto):
        nodes = [(n.op_type, {a.name: a.i for a in n.attribute}) for n in model.graph.node]
        int4 = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT4}
        blocked = any(
            n.op_type == "DequantizeLinear"
            and (n.input[0] in int4 or any(a.name == "block_size" and a.i for a in n.attribute))
            for n in model.graph.node
        )
    else:
        nodes = [(n.op_type, {}) for n in model.graph]
        blocked = any(
            n.op_type == "DequantizeLinear"
            and (
                attr(n, "block_size", 0)
                or (n.inputs[0] is not None and n.inputs[0].dtype == ir.DataType.INT4)
            )
            for n in model.graph
        )
    ops = {op for op, _ in nodes}
    if "DequantizeLinear" not in ops or "QuantizeLinear" in ops:
        return None
    return "w4" if blocked else "w8"


def as_weight_only(model: ir.Model, precision: str, block_size: int = 32) -> ir.Model:
    """``model`` as the weight-only recipe ``precision`` (``w8``/``w4``): itself when it already is one (from
    ``edgekit quantize --precision``), else its weight-only quantization (a float model handed to a target
    with ``PackageOptions.precision``)."""
    have = weight_only_precision(model)
    if have == precision or (
        have == "w8" and precision == "w4"
    ):  # w4 whose dense weights all fell back to int8
        return model
    if have is not None or any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph):
        raise QuantizationError(
            f"--precision {precision}: the model is already quantized ({have or 'QDQ'}); give the float model"
        )
    return quantize_weight_only(model, QuantizeOptions(precision=precision, block_size=block_size)).model
