"""Rewrite passes that turn a planned, calibrated fp32 graph into standard QDQ ONNX.

- :class:`QuantizeWeightsPass`: weights become int8 initializers (symmetric, per output channel) read through a
  per-axis DequantizeLinear; biases int32 with scale = input scale x weight scale; other constant data inputs
  int8 per tensor.
- :class:`InsertActivationQDQPass`: every planned activation gets a QuantizeLinear -> DequantizeLinear pair right
  after its producer; all its readers read the DequantizeLinear output. Graph output names are kept.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir
from edgekit.irutil import NameScope, add_initializer
from edgekit.quantize.calibrate import QParams
from edgekit.quantize.plan import QuantPlan, WeightSpec, constant_key

log = logging.getLogger("edgekit")

_INT32 = np.iinfo(np.int32)


def quantize_weight(weight: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-channel int8 in [-127, 127] (TFLite's weight range): (int8 values, float32 scales).
    ``axis=None`` gives one scale for the whole tensor (a 0-d scale array)."""
    if axis is None:
        absmax = float(np.abs(weight).max(initial=0.0))
        scale = np.float32(absmax / 127.0 if absmax > 0 else 1.0)
        q = np.clip(np.round(weight / np.float64(scale)), -127, 127).astype(np.int8)
        return q, np.asarray(scale, np.float32)
    moved = np.moveaxis(weight.astype(np.float64), axis, 0).reshape(weight.shape[axis], -1)
    absmax = np.abs(moved).max(axis=1)
    scales = np.where(absmax > 0, absmax / 127.0, 1.0).astype(np.float32)
    shape = [1] * weight.ndim
    shape[axis] = -1
    q = np.clip(np.round(weight / scales.reshape(shape).astype(np.float64)), -127, 127).astype(np.int8)
    return q, scales


def quantize_bias(
    bias: np.ndarray, input_scale: float, weight_scales: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    scales = (np.float64(input_scale) * weight_scales.astype(np.float64)).astype(np.float32)
    q = np.round(bias.astype(np.float64) / scales.astype(np.float64))
    if np.any(q > _INT32.max) or np.any(q < _INT32.min):
        log.warning("bias values exceed int32 after quantization and were clipped")
    return np.clip(q, _INT32.min, _INT32.max).astype(np.int32), scales


def _np_qdtype(dtype: str) -> type:
    return np.int8 if dtype == "int8" else np.uint8


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


class QuantizeWeightsPass(ir.passes.InPlacePass):
    def __init__(
        self,
        plan: QuantPlan,
        params: dict[str, QParams],
        input_means: dict[str, np.ndarray] | None = None,
        dense_per_channel: bool = True,
    ):
        super().__init__()
        self.plan, self.params = plan, params
        #: False: Gemm/MatMul weights get one scale (NNAPI's FULLY_CONNECTED takes no per-channel weights).
        self.dense_per_channel = dense_per_channel
        #: With per-channel input means (from calibration), biases absorb the weight-rounding shift.
        self.input_means = input_means

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
        q, scales = quantize_weight(weight, axis)
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
        if spec.bias_index is None:
            return
        bias_value = node.inputs[spec.bias_index]
        bias = bias_value.const_value.numpy().reshape(-1)
        input_scale = self.params[spec.input_tensor].scale
        bias = np.broadcast_to(bias, (weight.shape[spec.axis],)).astype(np.float64)
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
            quant.outputs[0].dtype = ir.DataType.INT8 if p.dtype == "int8" else ir.DataType.UINT8
            quant.outputs[0].shape = value.shape
            dequant.outputs[0].dtype = ir.DataType.FLOAT
            dequant.outputs[0].shape = value.shape
            producer = value.producer()
            if producer is None:
                graph.insert_before(first, [quant, dequant])
            else:
                graph.insert_after(producer, [quant, dequant])
            readers = [(u.node, u.idx) for u in value.uses() if u.node is not quant]
            for reader, idx in readers:
                reader.replace_input_with(idx, dequant.outputs[0])
            if value.is_graph_output():
                # Keep the output's name on the dequantized tensor; the float tensor gets a new one.
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
        quant.outputs[0].dtype = ir.DataType.INT8 if p.dtype == "int8" else ir.DataType.UINT8
        quant.outputs[0].shape = value.shape
        dequant.outputs[0].dtype = ir.DataType.FLOAT
        dequant.outputs[0].shape = value.shape
        return quant, dequant
