"""Rewrite passes that turn a planned, calibrated fp32 graph into standard QDQ ONNX.

- :class:`QuantizeWeightsPass`: weights become int8 initializers (symmetric, per output channel) read through a
  per-axis DequantizeLinear; biases int32 with scale = input scale x weight scale; other constant data inputs
  int8 per tensor.
- :class:`InsertActivationQDQPass`: every planned activation gets a QuantizeLinear -> DequantizeLinear pair right
  after its producer; all its readers read the DequantizeLinear output. Graph output names are kept.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import NameScope, add_initializer
from edgekit.quantize import gptq
from edgekit.quantize.calibrate import QParams
from edgekit.quantize.plan import QuantPlan, WeightSpec, constant_key

log = logging.getLogger("edgekit")

#: Inside ``warnings_once()``, the warnings already given: a search quantizes the same model for every candidate
#: (its pool's forked workers inherit the set), so a layer's bias note is said once, not once per candidate.
_SAID: set[str] | None = None


@contextmanager
def warnings_once() -> Iterator[None]:
    global _SAID
    outer, _SAID = _SAID, set() if _SAID is None else _SAID
    try:
        yield
    finally:
        _SAID = outer


#: In a search's worker process: the notes are the lead process's to give (it quantizes the base model and the
#: answer itself), so a worker's candidates say none of them (spawned workers do not inherit ``_SAID``).
_QUIET = False


def quiet_warnings() -> None:
    """This process (a search's pool or Ray worker) gives no quantization notes."""
    global _QUIET
    _QUIET = True


def _warn_once(message: str) -> None:
    if _QUIET:
        log.debug(message)
    elif _SAID is None or message not in _SAID:
        if _SAID is not None:
            _SAID.add(message)
        log.warning(message)


_INT32 = np.iinfo(np.int32)

#: GPTQ integers already computed in this process, by (layer, its moments' id, weight and scales digest), each
#: with the moments it came from (held, so that their id is not reused): the accuracy-aware search quantizes the
#: same model with the same statistics for every candidate, and rounds each layer once per worker, not once per
#: candidate (PP-OCRv4 rec: ~10 s a model).
_GPTQ_ROWS: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
_GPTQ_KEPT = 1024


#: The smallest normal float16 (2**-14): scales at or above it keep float16's 11-bit precision.
FLOAT16_TINY = float(np.finfo(np.float16).tiny)
FLOAT16_MAX = float(np.finfo(np.float16).max)


def float16_scales(scales: np.ndarray) -> np.ndarray:
    """Weight-only scales rounded up to float16 values (kept float32), when every one is a normal float16 number
    (else as given): a file can store them in half the bytes, every runtime reads the same numbers, and rounding
    up keeps ``absmax / scale`` within the integer range. The weights are quantized with these scales; each moves
    by at most 2**-11 of itself (NNCF's compressed OpenVINO weights store float16 scales too)."""
    s = np.asarray(scales, np.float32)
    if s.size == 0 or not bool(np.all((s >= FLOAT16_TINY) & (s <= FLOAT16_MAX))):
        return s
    half = np.atleast_1d(s.astype(np.float16))
    below = half.astype(np.float32) < np.atleast_1d(s)
    half[below] = np.nextafter(half[below], np.float16(np.inf))
    return half.astype(np.float32).reshape(s.shape)


def weight_scales(weight: np.ndarray, axis: int | None) -> np.ndarray:
    """Symmetric int8 scales (absmax / 127, 1 for an all-zero channel) per channel along ``axis``, float32;
    ``axis=None``: one scale for the whole tensor (a 0-d array)."""
    if axis is None:
        absmax = float(np.abs(weight).max(initial=0.0))
        return np.asarray(absmax / 127.0 if absmax > 0 else 1.0, np.float32)
    absmax = np.abs(np.moveaxis(weight.astype(np.float64), axis, 0).reshape(weight.shape[axis], -1)).max(
        axis=1
    )
    return np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)


def quantize_weight(weight: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 in [-127, 127] (TFLite's weight range), rounded to nearest: (int8 values,
    float32 scales). ``axis=None`` gives one scale for the whole tensor (a 0-d scale array)."""
    scales = weight_scales(weight, axis)
    return round_kernels(weight, axis, scales, None), scales


def round_preserving_sums(x: np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """Round ``x`` (weights over their scale, one group per row of the last axis) to integers in [qmin, qmax]
    so that each row's sum of rounding errors is within half a step: round to nearest, then move the
    fewest values whose rounding was closest to a tie one step the other way.

    A kernel that computes a small difference of large taps (PP-OCRv4 rec's stem: taps up to 0.43, sum 0.10)
    loses its response to smooth inputs when the rounding errors of its taps add up (3 % on one stem channel,
    cosine 0.958 to fp32 over the recogniser with nearest rounding, 0.991 with this); the error of each value
    stays below one step. Static int8 and int16x8 round convolution kernels this way too
    (:func:`round_kernels`).
    """
    x = x.astype(np.float64)
    q = np.clip(np.round(x), qmin, qmax)
    need = np.round((x - q).sum(axis=-1, keepdims=True))  # steps to add (> 0) or remove (< 0) per row
    residual = q - x
    for sign in (1, -1):
        cost = np.where((q < qmax) if sign > 0 else (q > qmin), 1 + 2 * sign * residual, np.inf)
        rank = np.argsort(np.argsort(cost, axis=-1, kind="stable"), axis=-1, kind="stable")
        move = (rank < np.abs(need)) & (np.sign(need) == sign) & np.isfinite(cost)
        q = q + sign * move
    return q


def quantize_bias(
    bias: np.ndarray, input_scale: float, weight_scales: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """int32 bias with scale input scale x weight scale. The weight scales must leave room for the bias
    (:func:`fit_bias_scales`): a bias that still overflows int32 is a bug, never clipped silently."""
    scales = (np.float64(input_scale) * weight_scales.astype(np.float64)).astype(np.float32)
    q = np.round(bias.astype(np.float64) / scales.astype(np.float64))
    if np.any(q > _INT32.max) or np.any(q < _INT32.min):
        raise AssertionError("bias exceeds int32 after quantization although its weight scales were fitted")
    return q.astype(np.int32), scales


#: The smallest bias scale (input x weight scale) kept: far above float32's smallest normal number.
_MIN_BIAS_SCALE = float(np.finfo(np.float32).tiny) * 2.0**20

#: Headroom below int32's limit kept by a fitted bias (float32 rounding of the scales, bias correction).
_BIAS_LIMIT = float(_INT32.max) * 0.99


def fit_bias_scales(
    bias: np.ndarray, input_scale: float, weight_scales: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weight scales raised, channel by channel, just enough for ``round(bias / (input_scale * weight_scale))``
    to fit int32: (new float32 scales, mask of the raised channels). A bias is huge against its scale when the
    channel's weights are (almost) zero, a dead channel, or the input scale is tiny; the raised scale quantizes
    that channel's weights more coarsely instead of clipping its bias (which shifts every output of it)."""
    scales = np.asarray(weight_scales, np.float32)
    need = np.abs(np.broadcast_to(bias.astype(np.float64), scales.shape if scales.ndim else bias.shape))
    need = need / (np.float64(input_scale) * _BIAS_LIMIT)
    # A channel of (almost) denormal weights under a tiny input scale: input x weight scale must stay a normal
    # float32, or the bias's scale rounds to 0 (a bias that cannot be quantized at all).
    need = np.maximum(need, _MIN_BIAS_SCALE / np.float64(input_scale))
    if scales.ndim == 0:  # one scale for the whole tensor
        need = np.asarray(need.max(initial=0.0))
    raised = need > scales.astype(np.float64)
    if not np.any(raised):
        return scales, raised
    return np.where(raised, need, scales).astype(np.float32), raised


_NP_QDTYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16}
_IR_QDTYPES = {"int8": ir.DataType.INT8, "uint8": ir.DataType.UINT8, "int16": ir.DataType.INT16}


def _np_qdtype(dtype: str) -> type:
    return _NP_QDTYPES[dtype]


def bias_fits_int32(bias: np.ndarray, input_scale: float, weight_scales: np.ndarray) -> bool:
    """``round(bias / (input_scale * weight_scale))`` fits int32 (with :data:`_BIAS_LIMIT`'s headroom)."""
    scales = np.float64(input_scale) * np.asarray(weight_scales, np.float64)
    return bool(np.all(np.abs(bias.astype(np.float64)) <= scales * _BIAS_LIMIT))


def weight_error_shift(
    node: ir.Node, weight: np.ndarray, dequantized: np.ndarray, mean: np.ndarray
) -> np.ndarray | None:
    """``(W - W_int8) E[x]`` per output channel: the mean output shift that weight rounding causes (Nagel et al.,
    "Data-free quantization", bias correction), from the input's per-channel mean on the calibration data."""
    error = weight.astype(np.float64) - dequantized
    if node.op_type == "Conv":
        groups = node.attributes["group"].value if "group" in node.attributes else 1
        out_ch, in_per_group = error.shape[:2]
        if mean.shape != (in_per_group * groups,):
            return None
        per_group = out_ch // groups
        means = mean.reshape(groups, in_per_group)[np.arange(out_ch) // per_group]  # [O, I/g]
        return np.einsum("oik,oi->o", error.reshape(out_ch, in_per_group, -1), means)
    if node.op_type == "Gemm" and error.ndim == 2:
        trans_b = node.attributes["transB"].value if "transB" in node.attributes else 0
        w = error if trans_b else error.T  # [O, I]
        return w @ mean if mean.shape == (w.shape[1],) else None
    return None


@dataclass(frozen=True)
class RaisedWeightScales:
    """A layer whose bias did not fit int32 at its weight scales: the scales of ``channels`` were raised."""

    node: str
    op_type: str
    #: Output channels whose weight scale was raised (empty: the layer has one weight scale).
    channels: list[int]
    count: int

    def to_json(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "channels": self.channels, "count": self.count}


def round_kernels(
    weight: np.ndarray, axis: int | None, scales: np.ndarray, op_type: str | None
) -> np.ndarray:
    """Symmetric int8 weights at the given scales; a convolution's kernels (more than one spatial tap, per output
    and input channel) by :func:`round_preserving_sums`, so that no kernel's response to smooth input (the sum of
    its taps) drifts by more than half a step; other weights (and ``op_type`` None) to nearest.

    PP-OCRv4 rec's stem depthwise convolution (16 near zero-sum 3x3 kernels: |sum| / absmax 0.01) alone took the
    recogniser's decoded agreement with fp32 to 44 % on rendered text lines with nearest rounding.
    """
    shape = [1] * weight.ndim
    if axis is not None:
        shape[axis] = -1
    scaled = weight.astype(np.float64) / scales.reshape(shape if axis is not None else ()).astype(np.float64)
    kernel = weight.ndim > 2 and int(np.prod(weight.shape[2:])) > 1
    if op_type not in ("Conv", "ConvTranspose") or not kernel:
        return np.clip(np.round(scaled), -127, 127).astype(np.int8)
    groups = scaled.reshape(-1, int(np.prod(weight.shape[2:])))  # [O, C, *k] / [C, O, *k]: one row per kernel
    return round_preserving_sums(groups, -127, 127).reshape(weight.shape).astype(np.int8)


class QuantizeWeightsPass(ir.passes.InPlacePass):
    def __init__(
        self,
        plan: QuantPlan,
        params: dict[str, QParams],
        input_means: dict[str, np.ndarray] | None = None,
        dense_per_channel: bool = True,
        hessians: dict[str, np.ndarray] | None = None,
    ):
        super().__init__()
        self.plan, self.params = plan, params
        #: Layer -> ``E[x x^T]`` of its inputs (calibration): its weight rows are rounded by GPTQ where that
        #: lowers the layer's output error on the data (:func:`edgekit.quantize.gptq.second_order`).
        self.hessians = hessians or {}
        #: False: Gemm/MatMul weights get one scale (NNAPI's FULLY_CONNECTED takes no per-channel weights).
        self.dense_per_channel = dense_per_channel
        #: With per-channel input means (from calibration), biases absorb the weight-rounding shift.
        self.input_means = input_means
        #: Layers whose weight scales were raised so that their bias fits int32 (for the report).
        self.raised_weight_scales: list[RaisedWeightScales] = []
        #: 16x8 layers whose bias stays float: at scale input x weight it exceeds int32 (TFLite's 16x8 kernels
        #: take an int64 bias; ONNX's DequantizeLinear reads no int64).
        self.float_biases: list[str] = []

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = NameScope(graph)
        nodes = {n.name: n for n in graph}
        for spec in self.plan.weights:
            self._weight(graph, names, nodes[spec.node], spec)
        for node_name, index in self.plan.constants:
            node = nodes[node_name]
            p = self.params[constant_key(node_name, index)]
            value = node.inputs[index]
            array = value.const_value.numpy().astype(np.float64)
            q = np.clip(np.round(array / p.scale) + p.zero_point, p.qmin, p.qmax).astype(_np_qdtype(p.dtype))
            base = f"{value.name}_{node_name}"
            dq = self._dq(
                graph, names, node, base, q, np.float32(p.scale), np.array(p.zero_point, q.dtype), None
            )
            node.replace_input_with(index, dq)
        return ir.passes.PassResult(model, bool(self.plan.weights or self.plan.constants))

    def _weight(self, graph: ir.Graph, names: NameScope, node: ir.Node, spec: WeightSpec) -> None:
        weight_value = node.inputs[spec.weight_index]
        weight = weight_value.const_value.numpy()
        axis = spec.axis if self.dense_per_channel or node.op_type not in ("Gemm", "MatMul") else None
        scales = weight_scales(weight, axis)
        q = self._round(node, weight, axis, scales)
        bias = None
        if spec.bias_index is not None:
            input_scale = self.params[spec.input_key or spec.input_tensor].scale
            bias = node.inputs[spec.bias_index].const_value.numpy().reshape(-1)
            bias = np.broadcast_to(bias, (weight.shape[spec.axis],)).astype(np.float64)
            if spec.int16 and not bias_fits_int32(bias, input_scale, scales):
                # int16 input scales are ~256x finer than int8's: the bias's int32 levels may run out. The
                # weights keep their scales (raising them would cost the precision int16x8 is for); the bias
                # stays float here, and the TFLite target writes it as the int64 its 16x8 kernels take.
                self.float_biases.append(node.name)
                log.info(
                    f"{node.op_type} {node.name!r}: int16x8 bias exceeds int32 at scale input x weight: kept "
                    "float in the QDQ model (int64 in TFLite)"
                )
                bias = None
        if bias is not None:
            scales, raised = fit_bias_scales(bias, input_scale, scales)
            if np.any(raised):
                q = self._round(node, weight, axis, scales)
                channels = np.flatnonzero(raised).tolist() if raised.ndim else []
                self.raised_weight_scales.append(
                    RaisedWeightScales(
                        node.name, node.op_type, channels, int(raised.sum()) if raised.ndim else 1
                    )
                )
                _warn_once(
                    f"{node.op_type} {node.name!r}: bias too large for int32 at its scale: the weight scale of "
                    + (f"{int(raised.sum())} channel(s)" if raised.ndim else "the layer")
                    + " raised to fit it (no clipping)"
                )
        dq = self._dq(
            graph,
            names,
            node,
            f"{weight_value.name}_{node.name}",
            q,
            scales,
            np.zeros(scales.shape, np.int8),
            axis,
        )
        node.replace_input_with(spec.weight_index, dq)
        if bias is None:
            return
        bias_value = node.inputs[spec.bias_index]
        if self.input_means is not None and spec.input_tensor in self.input_means:
            shape = [1] * weight.ndim
            if axis is not None:
                shape[axis] = -1
            shift = weight_error_shift(
                node,
                weight,
                q * scales.reshape(shape).astype(np.float64),
                self.input_means[spec.input_tensor],
            )
            if shift is not None:
                bias = bias + shift
                if np.any(fit_bias_scales(bias, input_scale, scales)[1]):
                    bias = bias - shift  # the corrected bias would not fit int32 at these scales
        qb, bias_scales = quantize_bias(bias, input_scale, scales)
        dqb = self._dq(
            graph,
            names,
            node,
            f"{bias_value.name}_{node.name}",
            qb,
            bias_scales,
            np.zeros(bias_scales.shape, np.int32),
            0,
        )
        node.replace_input_with(spec.bias_index, dqb)

    def _round(self, node: ir.Node, weight: np.ndarray, axis: int | None, scales: np.ndarray) -> np.ndarray:
        """The weight's int8 values at ``scales``: :func:`round_kernels`, then GPTQ's rows where they lower the
        layer's output error on the calibration data (only the integers change, never the scales)."""
        q = round_kernels(weight, axis, scales, node.op_type)
        hessian = self.hessians.get(node.name)
        if hessian is None:
            return q
        key = (node.name, id(hessian), hashlib.blake2b(weight.tobytes() + scales.tobytes()).digest())
        kept = _GPTQ_ROWS.get(key)
        if kept is None or kept[0] is not hessian:
            if len(_GPTQ_ROWS) >= _GPTQ_KEPT:
                _GPTQ_ROWS.clear()
            kept = _GPTQ_ROWS[key] = (hessian, gptq.second_order(node, weight, q, scales, hessian))
        return kept[1].copy()

    @staticmethod
    def _dq(graph, names, node, base, q, scale, zero_point, axis) -> ir.Value:
        q_init = add_initializer(graph, names, f"{base}_quantized", q)
        s_init = add_initializer(graph, names, f"{base}_scale", np.asarray(scale, np.float32))
        inputs = [q_init, s_init]
        if np.any(zero_point):  # a zero point of 0 is the default: symmetric weights and biases omit it
            inputs.append(add_initializer(graph, names, f"{base}_zero_point", np.asarray(zero_point)))
        attributes = {"axis": axis} if axis is not None and np.ndim(scale) == 1 else {}
        dq = ir.node("DequantizeLinear", inputs, attributes, name=names.fresh(f"{base}_DequantizeLinear"))
        graph.insert_before(node, dq)
        dq.outputs[0].name = names.fresh(f"{base}_dequantized")
        dq.outputs[0].dtype = ir.DataType.FLOAT
        dq.outputs[0].shape = ir.Shape(q.shape)
        return dq.outputs[0]


class InsertActivationQDQPass(ir.passes.InPlacePass):
    def __init__(self, plan: QuantPlan, params: dict[str, QParams]):
        super().__init__()
        self.plan, self.params = plan, params
        #: fp32 tensor name -> name of its DequantizeLinear output in the QDQ model (for per-layer comparison).
        self.dequantized: dict[str, str] = {}

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        graph = model.graph
        names = NameScope(graph)
        values = {v.name: v for v in graph.inputs}
        for node in graph:
            for out in node.outputs:
                values[out.name] = out
        first = next(iter(graph))
        for name in self.plan.activations:
            value = values[name]
            p = self.params[name]
            scale = add_initializer(graph, names, f"{name}_scale", np.array(p.scale, np.float32))
            zp = add_initializer(
                graph, names, f"{name}_zero_point", np.array(p.zero_point, _np_qdtype(p.dtype))
            )
            quant = ir.node("QuantizeLinear", [value, scale, zp], name=names.fresh(f"{name}_QuantizeLinear"))
            quant.outputs[0].name = names.fresh(f"{name}_quantized")
            dequant = ir.node(
                "DequantizeLinear",
                [quant.outputs[0], scale, zp],
                name=names.fresh(f"{name}_DequantizeLinear"),
            )
            dequant.outputs[0].name = names.fresh(f"{name}_dequantized")
            quant.outputs[0].dtype = _IR_QDTYPES[p.dtype]
            quant.outputs[0].shape = value.shape
            dequant.outputs[0].dtype = ir.DataType.FLOAT
            dequant.outputs[0].shape = value.shape
            producer = value.producer()
            if producer is None:
                graph.insert_before(first, [quant, dequant])
            else:
                graph.insert_after(producer, [quant, dequant])
            readers = [
                (u.node, u.idx)
                for u in value.uses()
                if u.node is not quant and (u.node.name, u.idx) not in self.plan.float_reads
            ]
            for reader, idx in readers:
                reader.replace_input_with(idx, dequant.outputs[0])
            if value.is_graph_output() and not value.is_graph_input():
                # Keep the output's name on the dequantized tensor; the float tensor gets a new one. (An output
                # that is a graph input stays the input: its name is what users feed.)
                original = value.name
                value.name = names.fresh(f"{original}_float")
                out_idx = [i for i, o in enumerate(graph.outputs) if o is value]
                for i in out_idx:
                    graph.outputs[i] = dequant.outputs[0]
                dequant.outputs[0].name = original
            self.dequantized[name] = dequant.outputs[0].name
        nodes = {n.name: n for n in graph}
        for key, (node_name, index, _) in self.plan.requant.items():
            node = nodes[node_name]
            _, dequant = self._pair(
                graph, names, node.inputs[index], key.replace("::", "_"), self.params[key]
            )
            graph.insert_before(node, [dequant.inputs[0].producer(), dequant])
            node.replace_input_with(index, dequant.outputs[0])
        return ir.passes.PassResult(model, bool(self.plan.activations))

    @staticmethod
    def _pair(
        graph: ir.Graph, names: NameScope, value: ir.Value, base: str, p: QParams
    ) -> tuple[ir.Node, ir.Node]:
        """A QuantizeLinear -> DequantizeLinear pair reading ``value`` (not yet inserted in the graph)."""
        scale = add_initializer(graph, names, f"{base}_scale", np.array(p.scale, np.float32))
        zp = add_initializer(graph, names, f"{base}_zero_point", np.array(p.zero_point, _np_qdtype(p.dtype)))
        quant = ir.node("QuantizeLinear", [value, scale, zp], name=names.fresh(f"{base}_QuantizeLinear"))
        quant.outputs[0].name = names.fresh(f"{base}_quantized")
        dequant = ir.node(
            "DequantizeLinear", [quant.outputs[0], scale, zp], name=names.fresh(f"{base}_DequantizeLinear")
        )
        dequant.outputs[0].name = names.fresh(f"{base}_dequantized")
        quant.outputs[0].dtype = _IR_QDTYPES[p.dtype]
        quant.outputs[0].shape = value.shape
        dequant.outputs[0].dtype = ir.DataType.FLOAT
        dequant.outputs[0].shape = value.shape
        return quant, dequant
