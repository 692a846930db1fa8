"""Depthwise-input equalization: per-channel activation ranges in a per-tensor form.

TFLite and NNAPI quantize activations per tensor. The input of a depthwise convolution is where that costs most
(NNCF quantizes it per channel, which those kernels cannot run): its channels' ranges differ by orders of
magnitude, and the small channels get a few levels of the tensor's grid. When that input ``X`` is computed by a
Conv (per-output-channel weights and bias) followed only by positively homogeneous ops (:data:`HOMOGENEOUS`:
``f(x / r) = f(x) / r`` for ``r > 0``) and read only by the depthwise Conv, channel ``c`` of ``X`` can be divided
by ``r_c`` (the producer's output channel ``c`` weights and bias divided by ``r_c``) and the depthwise kernel's
channel ``c`` multiplied by ``r_c``: in real arithmetic the model is unchanged, the per-channel weight scales
absorb ``r_c``, and with ``r_c`` the channel's share of the tensor's range every channel of ``X`` spans the
whole per-tensor grid, as per-channel activation quantization would.

A ``Clip(0, hi)`` keeps ``hi``: after the rescale it clips channel ``c`` at ``hi * r_c``, at or beyond the
channel's calibration maximum (``r_c >= max_c / max``, and ``max <= hi``): the model changes only outside the
calibration range, where a per-tensor quantizer saturates anyway.

Statistics apart from rewriting: :func:`channel_ratios` turns per-channel calibration ranges into the ratios,
:class:`EqualizePass` applies them. The ratio of a channel is the smallest for which no quantized tensor of the
chain (the producer's output when it is quantized apart from its activation, the intermediate ones, ``X``)
widens its per-tensor range, bounded below by :data:`MIN_RATIO` (weights keep their resolution, biases stay far
inside int32: the bias-overflow rule of ``qdq.fit_bias_scales`` stays a safety net); a dead channel keeps 1.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import attr, const_array, only_consumer

#: Ops between the producer and the depthwise Conv that commute with a positive per-channel scale, each with the
#: condition on its attributes / constant inputs (a Clip only with the lower bound 0: see the module docstring).
HOMOGENEOUS: dict[str, Callable[[ir.Node], bool]] = {
    "Relu": lambda node: True,
    "LeakyRelu": lambda node: True,
    "PRelu": lambda node: const_array(node.inputs[1]) is not None,
    "Clip": lambda node: _clip_from_zero(node),
}

#: The smallest channel ratio: a channel is enlarged at most 32x (its producer's weights 32x, the depthwise
#: kernel's channel 1/32, the depthwise bias 32x its integer levels).
MIN_RATIO = 1.0 / 32.0

#: Headroom kept below int32 by a depthwise bias at the rescaled weights (a finer range method than min/max, a
#: bias correction, may lower the input scale later).
_BIAS_HEADROOM = 2.0**-8


def _clip_from_zero(node: ir.Node) -> bool:
    lo = node.inputs[1] if len(node.inputs) > 1 else None
    hi = node.inputs[2] if len(node.inputs) > 2 else None
    lo_value = const_array(lo)
    if lo is None or lo_value is None or float(lo_value) != 0.0:
        return False
    return hi is None or const_array(hi) is not None


@dataclass(frozen=True)
class Site:
    #: The depthwise Conv's input, rescaled per channel.
    tensor: str
    #: The Conv whose output channels are divided by the ratios.
    producer: str
    #: The homogeneous ops between them, in order.
    chain: tuple[str, ...]
    #: The depthwise Conv whose kernel channels are multiplied by the ratios.
    depthwise: str
    #: Every tensor the rescale changes: the producer's output, the chain's outputs (the last is ``tensor``).
    scaled: tuple[str, ...]


def _single_use_constant(value: ir.Value | None) -> bool:
    return value is not None and const_array(value) is not None and len(list(value.uses())) == 1


def _depthwise(node: ir.Node) -> bool:
    """A depthwise Conv: one group per input channel, a constant kernel of shape (channels x multiplier, 1, ...)."""
    if node.op_type != "Conv" or len(node.inputs) < 2 or not _single_use_constant(node.inputs[1]):
        return False
    group = attr(node, "group", 1)
    shape = node.inputs[1].const_value.shape
    return group > 1 and shape[1] == 1 and shape[0] % group == 0


def find_sites(model: ir.Model, exclude: frozenset[str] = frozenset()) -> list[Site]:
    """Every depthwise Conv input that can be equalized (graph order); nodes in ``exclude`` are left alone."""
    sites: list[Site] = []
    for node in model.graph:
        if not _depthwise(node) or node.name in exclude or node.inputs[0] is None:
            continue
        x = node.inputs[0]
        if only_consumer(x) is not node:
            continue
        chain: list[ir.Node] = []
        value, producer = x, x.producer()
        while producer is not None and producer.op_type in HOMOGENEOUS:
            if not HOMOGENEOUS[producer.op_type](producer) or producer.name in exclude:
                producer = None
                break
            chain.append(producer)
            value = producer.inputs[0]
            if value is None or only_consumer(value) is not producer:
                producer = None
                break
            producer = value.producer()
        if producer is None or producer.op_type != "Conv" or producer.name in exclude:
            continue
        if len(producer.inputs) < 2 or not _single_use_constant(producer.inputs[1]):
            continue
        bias = producer.inputs[2] if len(producer.inputs) > 2 else None
        if bias is not None and not _single_use_constant(bias):
            continue
        if producer.inputs[1].const_value.shape[0] != attr(node, "group", 1):
            continue
        chain.reverse()
        scaled = (producer.outputs[0].name, *(n.outputs[0].name for n in chain))
        sites.append(Site(x.name, producer.name, tuple(n.name for n in chain), node.name, scaled))
    return sites


def channel_ratios(
    model: ir.Model,
    site: Site,
    ranges: Mapping[str, tuple[np.ndarray, np.ndarray]],
    quantized: set[str],
) -> np.ndarray:
    """The ratios ``r_c`` of one site from per-channel calibration ranges (tensor -> (min per channel, max per
    channel)): for every tensor of the site that is quantized, the channel's share of the tensor's range on each
    side; the largest share, at least :data:`MIN_RATIO` and at least what keeps the depthwise int32 bias clear
    of overflow; 1 for a dead channel."""
    lo_x, hi_x = ranges[site.tensor]
    share = np.zeros(lo_x.shape, np.float64)
    for name in site.scaled:
        if name not in quantized and name != site.tensor:
            continue
        lo, hi = (np.asarray(a, np.float64) for a in ranges[name])
        if hi.max() > 0:
            share = np.maximum(share, np.clip(hi, 0, None) / hi.max())
        if lo.min() < 0:
            share = np.maximum(share, np.clip(lo, None, 0) / lo.min())
    ratios = np.where(share > 0, np.maximum(share, MIN_RATIO), 1.0)
    # The depthwise bias in int32 is b / (s_x * s_w * r): keep it clear of the limit at the min/max input scale.
    nodes = {n.name: n for n in model.graph}
    dw = nodes[site.depthwise]
    bias = const_array(dw.inputs[2]) if len(dw.inputs) > 2 else None
    if bias is not None:
        kernel = const_array(dw.inputs[1]).astype(np.float64)
        per_out = np.abs(kernel.reshape(kernel.shape[0], -1)).max(axis=1) / 127.0
        x_scale = max(float(hi_x.max()), 0.0) - min(float(lo_x.min()), 0.0)
        x_scale = max(x_scale / 255.0, 1e-12)
        limit = float(np.iinfo(np.int32).max) * _BIAS_HEADROOM
        need = np.abs(bias.astype(np.float64)) / (x_scale * np.maximum(per_out, 1e-30) * limit)
        ratios = np.maximum(ratios, need.reshape(ratios.size, -1).max(axis=1))
    return np.minimum(ratios, 1.0).astype(np.float32)


class EqualizePass(ir.passes.InPlacePass):
    """Divide each site's producer output channels by its ratios and multiply its depthwise kernel channels by
    them (``ratios``: depthwise input -> ratios, from :func:`channel_ratios`)."""

    def __init__(self, ratios: Mapping[str, np.ndarray]):
        super().__init__()
        self.ratios = ratios

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        if not self.ratios:
            return ir.passes.PassResult(model, modified=False)
        nodes = {n.name: n for n in model.graph}
        modified = False
        for site in find_sites(model):
            r = self.ratios.get(site.tensor)
            if r is None:
                continue
            producer, dw = nodes[site.producer], nodes[site.depthwise]
            weight = const_array(producer.inputs[1])
            _set(
                producer.inputs[1], weight / r.reshape((-1,) + (1,) * (weight.ndim - 1)).astype(weight.dtype)
            )
            if len(producer.inputs) > 2 and producer.inputs[2] is not None:
                _set(producer.inputs[2], const_array(producer.inputs[2]) / r.astype(weight.dtype))
            kernel = const_array(dw.inputs[1])
            per_out = np.repeat(r, kernel.shape[0] // r.size).astype(kernel.dtype)
            _set(dw.inputs[1], kernel * per_out.reshape((-1,) + (1,) * (kernel.ndim - 1)))
            modified = True
        return ir.passes.PassResult(model, modified=modified)


def _set(value: ir.Value, array: np.ndarray) -> None:
    value.const_value = ir.tensor(np.ascontiguousarray(array), name=value.name)


def scaled_tensors(model: ir.Model, ratios: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every tensor the rewrite changes -> the per-channel factor that gives back the fp32 model's values (the
    rewritten tensor times the ratios): the per-layer comparison with the user's fp32 model needs it."""
    return {
        name: ratios[site.tensor]
        for site in find_sites(model)
        if site.tensor in ratios
        for name in site.scaled
    }
