"""Graph patterns the quantizer keeps float as a whole (transformer encoders), each node mapped to its reason.

- ``mask_paths``: arithmetic on integer model inputs (token ids, attention masks): Cast, Unsqueeze, Sub, Mul,
  Equal, Where, Expand, ... and every op that reads their result, up to the Softmax that consumes the masked
  scores. The extended attention mask ``(1 - mask) * float_min`` (or ``-10000``) spans ~1e38: one int8 scale
  for it, or for the scores it is added to, wipes out the scores (and TFLite aborts on the requantize
  multiplier). The Softmax output is a probability again: its readers quantize it as usual (so are the outputs
  of a MatMul/Gemm/Conv reading the path). A Gather reading ids as indices is not on the path (it picks rows of
  a float table).
- ``non_finite_paths``: ops computing from a constant that holds -inf / +inf / NaN (Longformer fills the scores
  outside each sliding window with ``-inf``: ConstantOfShape(-inf), Where, ScatterND into the chunked scores), up
  to the Softmax that ends it (as ``mask_paths``). No int8 range holds an infinite value: its scale would be
  infinite (calibration stopped on a NaN zero point). A Clip's bound and a Pad value read by a MaxPool (timm's
  "same" max pooling) are not on such a path: their outputs are finite.
- ``layer_norms``: LayerNorm written out as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div (+ the affine Mul/Add),
  as PyTorch exports it below opset 17, and T5's RMSNorm (Pow/ReduceMean/Add/Sqrt/Div/Mul, + the scale Mul):
  float inside like the LayerNormalization op (an int8 variance of int8 deviations loses most of its precision,
  and one step of a row's variance rescales the whole row), quantized at its input and output. Also flax's
  LayerNorm as jax2tf / tf2onnx write it, the variance as ``max(0, mean(x*x) - mean(x)^2)`` (ReduceSum times
  1/n, Reshape/Expand of the statistics, Sqrt, Reciprocal; ``moments_layer_norm_at``): in int8 the two moments
  cancel (Magika's first LayerNorm: its variance at cosine 0.97 to float, the normalised rows at 0.47).
- ``erf_gelus``: the nodes of ``x * 0.5 * (1 + erf(x / sqrt 2))`` (PyTorch's exact GELU). Kept float inside,
  with ``x`` and the result quantized, the converter fuses them into TFLite's GELU and runs its int8 kernel
  (a lookup table of the same function), which is what the QDQ model computes.
- ``tanh_gelus``: ``x * 0.5 * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (GELU's tanh approximation: jax's
  default ``gelu``, as jax2tf / tf2onnx write it, and PyTorch's ``approximate="tanh"`` below opset 20), its inner
  polynomial recognised by value. Kept float inside, ``x`` and the result quantized: one int8 step of ``x^3``
  spans the whole useful range of the tanh (Magika's second GELU: ``x^3`` up to 3.4e5, a step of 1300, every
  tanh input of a row below it rounded to 0: the tanh at cosine 0.04 to float).
- ``attention_cores``: ``softmax(Q K^T * scale + mask) V``: the scores MatMul (two activations), the scaling and
  masking up to the Softmax (and the ``where(isnan(p), 0, p)`` guard after it that dynamo exports write), and
  the MatMul reading the probabilities. Real encoders' scores span +-100
  (all-MiniLM-L6-v2: an int8 step of 0.55): one step is a factor 1.7 on a probability, so int8 scores cost
  accuracy, and one rounding flip of an integer kernel moves the probabilities by up to 10 steps.
- ``residual_sums``: a post-LayerNorm encoder's residual ``LayerNorm(skip + projection(h))``: the Add and, when the
  projection narrows (the feed-forward down projection, 4x wider in than out), that MatMul/Gemm and its bias Add.
  The feed-forward output carries the residual stream's outlier channels (all-MiniLM-L6-v2: up to 194 where the
  others stay within +-4; Bondarenko et al. 2021): one int8 scale for them leaves the others a few steps, and the
  LayerNorm's standard deviation, set by the outliers, spreads their error over every channel. The Add reads the
  float tensors (``residual_reads``), not their int8 copies: the residual stream stays float.
- ``guarded_divisors``: ``x / (y + eps)`` (or ``Max(y, eps)``, ``Clip(y, eps)``): the guard that keeps a computed
  divisor off zero and the Div (or Reciprocal) reading it. An int8 step of ``y``'s range rounds ``eps`` away, so
  where ``y`` is 0 (EfficientViT's ReLU linear attention normaliser ``out[..., :-1] / (out[..., -1:] + eps)``
  on a token whose ReLU query is all zero) the QDQ model divides 0 by 0: NaN, which each runtime quantizes
  differently. Kept float; ``y`` and the quotient are quantized.
- ``linear_attention_cores``: around such a division, ``out = q (k^T [v, 1])`` (EfficientViT) divided by its last
  column: the two activation MatMuls and the Slices of ``out``. Their int8 steps, on sums the division then
  divides, left timm's efficientvit_b0 reduced at cosine 0.53 from fp32 (0.96 float).
- ``ranked_scores``: the scores of a TopK read for its indices only (DGCNN's k-NN: pairwise distances
  ``-|x_i|^2 + 2 x_i.x_j - |x_j|^2`` from MatMul / Pow / ReduceSum / Neg / Sub), back to the tensors read elsewhere
  (the points, int8). One int8 step of the distances' range ties near neighbours, and one rounding flip of an
  integer kernel gathers another row (round 12a's DGCNN: its int8 .tflite at cosine 0.9965 to its own QDQ model).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from edgekit.core.irutil import attr, const_array

MASK_REASON = (
    "attention-mask arithmetic on integer inputs (its range is set by mask constants such as -3.4e38)"
)
LAYER_NORM_REASON = (
    "inside a LayerNorm written out: float like LayerNormalization, quantized at its input and output"
)
NON_FINITE_REASON = (
    "computes from a constant holding -inf, inf or NaN (a -inf fill of masked scores), up to the Softmax: no int8 "
    "range holds an infinite value"
)
GELU_REASON = "inside an Erf-GELU: quantized at its input and output only (TFLite GELU)"
ATTENTION_REASON = (
    "attention scores and probabilities (Q K^T, scaling, mask, Softmax, times V): kept float, as one int8 step of "
    "the scores' range is a large factor on a probability"
)
RESIDUAL_REASON = (
    "residual sum into a LayerNorm (and the feed-forward down projection into it): kept float, as its outlier "
    "channels leave the other channels a few int8 steps"
)
DIVISOR_REASON = (
    "a divisor's guard against zero (x / (y + eps)) and the division: kept float, as a quantized y + eps rounds eps "
    "away and divides by zero"
)
LINEAR_ATTENTION_REASON = (
    "ReLU linear attention (q (k^T [v, 1]), normalised by its last column): kept float, as its numerator and "
    "denominator are sums whose int8 steps the division multiplies"
)
RANKED_SCORES_REASON = (
    "scores a TopK only ranks (k-NN distances, its indices read, not its values): kept float, as int8 steps tie "
    "near neighbours and one rounding flip gathers other rows"
)
STANDARDIZATION_REASON = (
    "per-feature standardisation of a model input ((x - offset) * scale, scikit-learn's Scaler): kept float, as the "
    "raw features' ranges differ by orders of magnitude and one int8 scale for them rounds the small ones away"
)
#: How much the per-feature scales of an input's standardisation must spread (largest / smallest) to keep it
#: float: a table's columns (load_wine: 1/std from 0.003 to 9) and not an image's channels (1/0.229 .. 1/0.225).
_STANDARDIZATION_SPREAD = 10.0
#: The patterns kept float for int8's coarse step only: an ``int16x8`` layer (256 times finer) quantizes them.
INT8_ONLY_REASONS = frozenset({ATTENTION_REASON, RESIDUAL_REASON, LINEAR_ATTENTION_REASON})

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


def _non_finite(array) -> bool:
    return array is not None and np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all()


def non_finite_paths(model: ir.Model) -> dict[str, str]:
    """Nodes computing from a constant holding -inf / inf / NaN (an initializer, or a ConstantOfShape / Constant
    of such a value), up to the op that ends a mask's range (Softmax, or a weighing op) or a MaxPool; a Clip's
    bounds do not start a path (its output is finite). A Pad by -inf holds -inf in its output, so it stays float
    up to the MaxPool that reads it (a Pad read only by one MaxPool is that MaxPool's pads by then:
    ``PadIntoMaxPoolPass``)."""
    reached: set[int] = set()
    found: dict[str, str] = {}
    for node in model.graph:  # topological order
        if node.op_type in ("ConstantOfShape", "Constant"):
            value = attr(node, "value")
            seeded = value is not None and _non_finite(value.numpy())
        else:
            reads = node.inputs[:1] if node.op_type == "Clip" else node.inputs
            seeded = any(v is not None and (id(v) in reached or _non_finite(const_array(v))) for v in reads)
        if not seeded:
            continue
        found[node.name] = NON_FINITE_REASON
        if node.op_type in _MASK_ENDS or node.op_type == "MaxPool":
            continue
        reached.update(id(v) for v in node.outputs)
    return found


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


#: The ops of a polynomial in x with constant coefficients (the tanh GELU's inner ``c (x + 0.044715 x^3)``).
_POLYNOMIAL_OPS = frozenset({"Mul", "Add", "Sub", "Div", "Pow"})
_POLYNOMIAL_STEPS = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Div": np.divide, "Pow": np.power}
#: Where the tanh GELU's inner polynomial is compared with ``sqrt(2 / pi) (x + 0.044715 x^3)``.
_TANH_GELU_PROBES = np.linspace(-6.0, 6.0, 25)


def _polynomial(value: ir.Value, x: ir.Value, nodes: dict[int, ir.Node]) -> np.ndarray | None:
    """``value`` evaluated at :data:`_TANH_GELU_PROBES` when it is computed from ``x`` and scalar constants by
    :data:`_POLYNOMIAL_OPS` only (each node added to ``nodes``), else None."""
    if value is x:
        return _TANH_GELU_PROBES
    array = const_array(value)
    if array is not None:
        return np.float64(array.reshape(-1)[0]) if array.size == 1 else None
    node = value.producer()
    if node is None or node.op_type not in _POLYNOMIAL_OPS or len(node.inputs) != 2 or len(nodes) > 8:
        return None
    nodes[id(node)] = node
    a, b = (_polynomial(v, x, nodes) for v in node.inputs)
    return None if a is None or b is None else _POLYNOMIAL_STEPS[node.op_type](a, b)


def _tanh_gelu_at(tanh: ir.Node) -> list[ir.Node] | None:
    """``x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))`` (GELU's tanh approximation, as jax2tf / tf2onnx
    and PyTorch below opset 20 write it, in any association): its nodes, or None. ``x`` is the other factor of the
    last Mul; the inner polynomial is checked by value."""
    add = _only_user(tanh.outputs[0], "Add")
    if add is None or not _scalar(_other(add, tanh.outputs[0]), 1.0):
        return None
    m1 = _only_user(add.outputs[0], "Mul")
    if m1 is None:
        return None
    nodes = [add, m1]
    other = _other(m1, add.outputs[0])
    half = other.producer() if other is not None else None
    if half is not None and half.op_type == "Mul" and any(_scalar(v, 0.5) for v in half.inputs):
        x = next(v for v in half.inputs if not _scalar(v, 0.5))  # (x * 0.5) * (1 + tanh)
        nodes.append(half)
    else:
        m2 = _only_user(m1.outputs[0], "Mul")
        last = _other(m2, m1.outputs[0]) if m2 is not None else None
        if _scalar(other, 0.5) and last is not None:
            x = last  # (0.5 * (1 + tanh)) * x
        elif _scalar(last, 0.5):
            x = other  # (x * (1 + tanh)) * 0.5
        else:
            return None
        nodes.append(m2)
    inner: dict[int, ir.Node] = {}
    values = _polynomial(tanh.inputs[0], x, inner)
    expected = np.sqrt(2 / np.pi) * (_TANH_GELU_PROBES + 0.044715 * _TANH_GELU_PROBES**3)
    if values is None or np.ndim(values) == 0 or not np.allclose(values, expected, rtol=1e-4, atol=1e-5):
        return None
    if any(v is not x and len(list(v.uses())) != 1 for n in inner.values() for v in n.outputs):
        return None
    return [*inner.values(), tanh, *nodes]


def tanh_gelus(model: ir.Model) -> dict[str, str]:
    """The nodes of every tanh-approximated GELU written out in ``model``."""
    return _every(model, "Tanh", _tanh_gelu_at, GELU_REASON)


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


def rms_norm_at(sqrt: ir.Node) -> list[ir.Node] | None:
    """T5's RMSNorm ``x * (1 / sqrt(mean(x^2) + eps))`` or ``x / sqrt(mean(x^2) + eps)`` [* gamma]: its nodes (the
    square first, the last node the result), or None."""
    add = _producer(sqrt.inputs[0], "Add")
    if add is None or not any(const_array(v) is not None for v in add.inputs):
        return None
    var = next((n for v in add.inputs if (n := _producer(v, "ReduceMean")) is not None), None)
    square = _producer(var.inputs[0], "Pow", "Mul") if var is not None else None
    if square is None:
        return None
    x = square.inputs[0]
    if (square.op_type == "Pow" and not _scalar(square.inputs[1], 2.0)) or (
        square.op_type == "Mul" and square.inputs[1] is not x
    ):
        return None
    div = _only_user(sqrt.outputs[0], "Div")
    if div is None or div.inputs[1] is not sqrt.outputs[0]:
        return None
    nodes = [square, var, add, sqrt, div]
    if div.inputs[0] is not x:  # 1 / sqrt(...), then times x
        scale = _only_user(div.outputs[0], "Mul")
        if not _scalar(div.inputs[0], 1.0) or scale is None or _other(scale, div.outputs[0]) is not x:
            return None
        nodes.append(scale)
    out = nodes[-1].outputs[0]
    user = _only_user(out, "Mul")  # the constant scale gamma
    if user is not None and const_array(_other(user, out)) is not None:
        nodes.append(user)
    return nodes


#: Ops that only move or broadcast a value (jax2tf writes a Reshape and an Expand between a LayerNorm's statistics
#: and their use).
_SHAPE_OPS = frozenset({"Reshape", "Expand", "Squeeze", "Unsqueeze", "Identity"})


def _through_shape_ops(value: ir.Value | None, nodes: list[ir.Node]) -> ir.Value | None:
    """``value`` before the shape-only ops producing it (each added to ``nodes``)."""
    while value is not None and (node := value.producer()) is not None and node.op_type in _SHAPE_OPS:
        nodes.append(node)
        value = node.inputs[0]
    return value


def _mean_of(value: ir.Value | None) -> tuple[ir.Value, list[ir.Node]] | None:
    """``value`` as a mean over some axes: ReduceMean(x), or ReduceSum(x) times (or divided by) a constant
    (jax2tf: ``sum(x) * (1 / n)``): (x, its nodes, the reduction first)."""
    node = value.producer() if value is not None else None
    if node is not None and node.op_type == "ReduceMean":
        return node.inputs[0], [node]
    if node is None or node.op_type not in ("Mul", "Div") or len(node.inputs) != 2:
        return None
    total = _producer(node.inputs[0], "ReduceSum")
    if total is None and node.op_type == "Mul":
        total = _producer(node.inputs[1], "ReduceSum")
    if total is None or const_array(_other(node, total.outputs[0])) is None:
        return None
    return total.inputs[0], [total, node]


def moments_layer_norm_at(sqrt: ir.Node) -> list[ir.Node] | None:
    """A LayerNorm written with the variance as ``mean(x^2) - mean(x)^2`` (flax's ``nn.LayerNorm`` through jax2tf /
    tf2onnx, Magika): ``(x - mean) * (1 / sqrt(max(0, mean(x*x) - mean*mean) + eps)) [* gamma]`` [+ beta], the
    statistics possibly reshaped / broadcast on the way: its nodes (the mean's reduction first, the last node the
    result), or None. In int8 the difference of the two moments cancels: one step of mean(x^2) is larger than the
    variance of a row whose mean is large."""
    nodes: list[ir.Node] = []
    add = _producer(_through_shape_ops(sqrt.inputs[0], nodes), "Add")
    if add is None or not any(const_array(v) is not None for v in add.inputs):
        return None
    nodes.append(add)
    var = _through_shape_ops(next((v for v in add.inputs if const_array(v) is None), None), nodes)
    guard = _producer(var, "Max")
    if guard is not None and any(_scalar(v, 0.0) for v in guard.inputs):
        nodes.append(guard)
        var = _through_shape_ops(next((v for v in guard.inputs if const_array(v) is None), None), nodes)
    sub = _producer(var, "Sub")
    squared_mean = _producer(sub.inputs[1], "Mul") if sub is not None else None
    if squared_mean is None or squared_mean.inputs[0] is not squared_mean.inputs[1]:
        return None
    first, second = _mean_of(squared_mean.inputs[0]), _mean_of(sub.inputs[0])
    if first is None or second is None:
        return None
    x = first[0]
    square = _producer(second[0], "Mul", "Pow")
    if square is None or square.inputs[0] is not x:
        return None
    if (square.op_type == "Mul" and square.inputs[1] is not x) or (
        square.op_type == "Pow" and not _scalar(square.inputs[1], 2.0)
    ):
        return None
    nodes = [*first[1], square, *second[1], squared_mean, sub, *nodes, sqrt]
    # 1 / sqrt (Reciprocal or Div(1, .)), [* gamma], then times the centred x
    inverse = _only_user(sqrt.outputs[0], "Reciprocal") or _only_user(sqrt.outputs[0], "Div")
    if inverse is None or (inverse.op_type == "Div" and not _scalar(inverse.inputs[0], 1.0)):
        return None
    nodes.append(inverse)
    out = inverse.outputs[0]
    scale = _only_user(out, "Mul")
    if scale is not None and const_array(_other(scale, out)) is not None:
        nodes.append(scale)
        out = scale.outputs[0]
        scale = _only_user(out, "Mul")
    centered = _other(scale, out) if scale is not None else None
    center = _producer(centered, "Sub")
    if center is None or center.inputs[0] is not x:
        return None
    mean_copies: list[ir.Node] = []
    if _through_shape_ops(center.inputs[1], mean_copies) is not first[1][-1].outputs[0]:
        return None
    nodes += [*mean_copies, center, scale]
    out = scale.outputs[0]
    shift = _only_user(out, "Add")
    if shift is not None and const_array(_other(shift, out)) is not None:
        nodes.append(shift)
    return nodes


def layer_norms(model: ir.Model) -> dict[str, str]:
    """The nodes of every LayerNorm (and RMSNorm) written out in ``model``."""
    return {
        **_every(model, "Sqrt", rms_norm_at, LAYER_NORM_REASON),
        **_every(model, "Sqrt", moments_layer_norm_at, LAYER_NORM_REASON),
        **_every(model, "Div", layer_norm_at, LAYER_NORM_REASON),
    }


#: Ops between the scores MatMul and the Softmax: scaling by a constant, adding the mask, picking by it.
_SCORE_OPS = frozenset({"Mul", "Div", "Add", "Sub", "Where", "Cast"})


def _activation_matmul(node: ir.Node | None) -> bool:
    """A MatMul of two computed tensors (no constant weight)."""
    return (
        node is not None
        and node.op_type == "MatMul"
        and all(v is not None and v.producer() is not None and const_array(v) is None for v in node.inputs)
    )


def _attention_at(softmax: ir.Node) -> list[ir.Node] | None:
    """The scores MatMul, the ops from it to ``softmax``, ``softmax``, and the MatMul reading the probabilities."""
    chain: list[ir.Node] = []
    node = softmax.inputs[0].producer()
    while node is not None and node.op_type in _SCORE_OPS and len(chain) < 4:
        chain.append(node)
        # follow the computed input that is not the mask (a mask path starts at a model input or a constant)
        computed = [
            v for v in node.inputs if v is not None and const_array(v) is None and v.producer() is not None
        ]
        scores = [
            v for v in computed if _activation_matmul(v.producer()) or v.producer().op_type in _SCORE_OPS
        ]
        node = scores[0].producer() if scores else None
    if not _activation_matmul(node):
        return None
    guard, probs = _nan_guard(softmax)
    users = [u.node for u in probs.uses()]
    if len(users) != 1 or not _activation_matmul(users[0]) or users[0].inputs[0] is not probs:
        return None
    return [node, *chain, softmax, *guard, users[0]]


def _nan_guard(softmax: ir.Node) -> tuple[list[ir.Node], ir.Value]:
    """``where(isnan(p), 0, p)`` after the Softmax (``torch.onnx.export(dynamo=True)``'s scaled_dot_product_attention
    writes it for fully masked rows): its IsNaN and Where, and the probabilities it writes; else none and ``p``."""
    probs = softmax.outputs[0]
    users = [u.node for u in probs.uses()]
    isnan = [n for n in users if n.op_type == "IsNaN"]
    where = [n for n in users if n.op_type == "Where"]
    guarded = len(users) == 2 and len(isnan) == 1 and len(where) == 1
    if guarded and where[0].inputs[0] is isnan[0].outputs[0] and where[0].inputs[2] is probs:
        return [isnan[0], where[0]], where[0].outputs[0]
    return [], probs


def attention_cores(model: ir.Model) -> dict[str, str]:
    """The nodes of every ``softmax(Q K^T * scale + mask) V`` in ``model``."""
    return _every(model, "Softmax", _attention_at, ATTENTION_REASON)


def _layer_norm_ends(model: ir.Model) -> tuple[set[int], set[int]]:
    """The ids of the values LayerNorms (the op, or written out) read, and of those they write."""
    inputs: set[int] = set()
    outputs: set[int] = set()
    for node in model.graph:
        if node.op_type == "LayerNormalization":
            inputs.add(id(node.inputs[0]))
            outputs.add(id(node.outputs[0]))
        elif (node.op_type == "Div" and (nodes := layer_norm_at(node)) is not None) or (
            node.op_type == "Sqrt" and (nodes := moments_layer_norm_at(node)) is not None
        ):
            inputs.add(id(nodes[0].inputs[0]))
            outputs.add(id(nodes[-1].outputs[0]))
    return inputs, outputs


def _narrowing_projection(value: ir.Value) -> list[ir.Node]:
    """``value``'s producer when it is a projection with more inputs than outputs (a constant 2-D weight), or its
    bias Add after one, or the Reshape back to [..., N] after a Gemm of a flattened N-D input
    (``fusions.MatMulAddToGemmPass``): those nodes; else none."""
    node = value.producer()
    nodes: list[ir.Node] = []
    inner = node.inputs[0] if node is not None and node.op_type == "Reshape" else None
    if inner is not None and inner.producer() is not None and inner.producer().op_type == "Gemm":
        if len(list(value.uses())) == 1 and len(list(inner.uses())) == 1:
            nodes, node = [node], inner.producer()
    elif node is not None and node.op_type == "Add" and len(list(value.uses())) == 1:
        bias = next((v for v in node.inputs if const_array(v) is not None), None)
        other = _other(node, bias) if bias is not None else None
        if other is not None and len(list(other.uses())) == 1:
            nodes, node = [node], other.producer()
    if node is None or node.op_type not in ("MatMul", "Gemm"):
        return []
    weight = const_array(node.inputs[1])
    if weight is None or weight.ndim != 2:
        return []
    if node.op_type == "Gemm" and attr(node, "transB", 0):
        weight = weight.T
    return [node, *nodes] if weight.shape[0] > weight.shape[1] else []


def _residuals(model: ir.Model) -> list[tuple[ir.Node, int, list[ir.Node]]]:
    """Every post-LayerNorm residual Add (a LayerNorm output plus another tensor, into a LayerNorm): the Add, the
    index of its skip input (the LayerNorm output) and the narrowing projection that feeds its other input."""
    reads, writes = _layer_norm_ends(model)
    found = []
    for node in model.graph:
        if node.op_type != "Add" or len(node.inputs) != 2 or id(node.outputs[0]) not in reads:
            continue
        skips = [i for i, v in enumerate(node.inputs) if v is not None and id(v) in writes]
        if len(skips) == 1 and all(v is not None and v.producer() is not None for v in node.inputs):
            branch = node.inputs[1 - skips[0]]
            found.append((node, skips[0], _narrowing_projection(branch)))
    return found


def residual_sums(model: ir.Model) -> dict[str, str]:
    """The nodes of every post-LayerNorm residual sum: the Add and the narrowing projection into it."""
    found: dict[str, str] = {}
    for add, _, projection in _residuals(model):
        found.update((n.name, RESIDUAL_REASON) for n in [add, *projection])
    return found


def residual_reads(model: ir.Model) -> frozenset[tuple[str, int]]:
    """(residual Add, skip input index): the skip input is read as the LayerNorm's float output, not its int8
    copy (the LayerNorm is float; the residual stream stays float)."""
    return frozenset((add.name, index) for add, index, _ in _residuals(model))


#: Ops that keep a value off zero with a constant: y + eps, max(y, eps), clip(y, eps, ...).
_GUARDS = frozenset({"Add", "Max", "Clip"})
#: The largest constant taken for such a guard's eps (EfficientViT 1e-5 or 1e-7, sentence-transformers' clamp 1e-9,
#: F.normalize 1e-12): a larger one (a detector's ``s / (s + 0.5)``) is an offset int8 keeps, not a guard.
_GUARD_MAX_EPS = 1e-3


def _divisor_at(div: ir.Node) -> list[ir.Node] | None:
    """The guard producing ``div``'s divisor (one computed tensor and small constants) and ``div``."""
    divisor = div.inputs[0] if div.op_type == "Reciprocal" else div.inputs[1]
    guard = divisor.producer() if divisor is not None else None
    if guard is None or guard.op_type not in _GUARDS or len(list(divisor.uses())) != 1:
        return None
    present = [v for v in guard.inputs if v is not None]
    constants = [v for v in present if const_array(v) is not None]
    # Clip's eps is its min (its max, if any, may be anything)
    eps = [guard.inputs[1]] if guard.op_type == "Clip" and len(guard.inputs) > 1 else constants
    small = all(v is not None and np.abs(const_array(v)).max() <= _GUARD_MAX_EPS for v in eps)
    return [guard, div] if constants and small and len(present) - len(constants) == 1 else None


def guarded_divisors(model: ir.Model) -> dict[str, str]:
    """The nodes of every division by a guarded computed divisor, ``x / (y + eps)``."""
    return {
        **_every(model, "Div", _divisor_at, DIVISOR_REASON),
        **_every(model, "Reciprocal", _divisor_at, DIVISOR_REASON),
    }


def _linear_attention_at(div: ir.Node) -> list[ir.Node] | None:
    """EfficientViT's ``out[..., :-1] / (out[..., -1:] + eps)`` with ``out = q (k^T v)``: the two activation
    MatMuls and the two Slices of ``out`` (the guard and the Div are :func:`guarded_divisors`')."""
    if div.op_type != "Div" or _divisor_at(div) is None:
        return None
    num, guard = div.inputs[0].producer(), div.inputs[1].producer()
    den = next((v.producer() for v in guard.inputs if v is not None and const_array(v) is None), None)
    if num is None or den is None or num.op_type != "Slice" or den.op_type != "Slice":
        return None
    out = num.inputs[0]
    if den.inputs[0] is not out or not _activation_matmul(out.producer()):
        return None
    nodes = [out.producer(), num, den]
    kv = out.producer().inputs[1].producer()
    return [kv, *nodes] if _activation_matmul(kv) else nodes


def linear_attention_cores(model: ir.Model) -> dict[str, str]:
    """The MatMuls and Slices of every ReLU linear attention normalised by its last column."""
    return _every(model, "Div", _linear_attention_at, LINEAR_ATTENTION_REASON)


#: The arithmetic of a pairwise distance ``|x_i|^2 - 2 x_i.x_j + |x_j|^2`` (or a difference's norm), and the layout
#: ops between its parts.
_DISTANCE_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Neg", "Pow", "Sqrt", "Abs", "ReduceSum", "ReduceMean",
                           "ReduceSumSquare", "ReduceL2", "MatMul"})  # fmt: skip
_LAYOUT_OPS = frozenset({"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Expand", "Identity"})


def _ranked_scores_at(topk: ir.Node) -> list[ir.Node] | None:
    """The nodes computing the scores of a TopK whose values are not read (only its indices: DGCNN's k-NN over
    pairwise distances): back from its input through distance arithmetic and layout ops, each node taken when
    every reader of its outputs is taken too (the features the distances are computed from, read elsewhere, are
    the ends). The arithmetic nodes, or None when there is none."""
    if (
        len(topk.outputs) < 2
        or any(True for _ in topk.outputs[0].uses())
        or topk.outputs[0].is_graph_output()
    ):
        return None
    taken: dict[int, ir.Node] = {id(topk): topk}
    grown = True
    while grown:
        grown = False
        for node in list(taken.values()):
            for value in node.inputs:
                producer = value.producer() if value is not None else None
                if producer is None or id(producer) in taken:
                    continue
                if producer.op_type not in _DISTANCE_OPS | _LAYOUT_OPS or const_array(value) is not None:
                    continue
                readers = [u.node for out in producer.outputs for u in out.uses()]
                if any(out.is_graph_output() for out in producer.outputs) or any(
                    id(r) not in taken for r in readers
                ):
                    continue
                taken[id(producer)] = producer
                grown = True
    # the layout ops between them are walked through, not named: they move int8 values as they are
    nodes = [n for n in taken.values() if n.op_type in _DISTANCE_OPS]
    return nodes or None


def ranked_scores(model: ir.Model) -> dict[str, str]:
    """The score computations of every TopK read for its indices only."""
    return _every(model, "TopK", _ranked_scores_at, RANKED_SCORES_REASON)


def _only_reader(value: ir.Value) -> ir.Node | None:
    readers = [u.node for u in value.uses()]
    return readers[0] if len(readers) == 1 and not value.is_graph_output() else None


def _feature_vector(node: ir.Node, value: ir.Value) -> np.ndarray | None:
    """The constant per-feature operand of ``node`` (more than one value), beside ``value``."""
    other = _other(node, value)
    array = const_array(other) if other is not None else None
    return None if array is None or array.size < 2 else np.asarray(array, np.float64)


def _standardization_at(value: ir.Value) -> list[ir.Node] | None:
    """``(x - offset) * scale`` (or ``/ std``) on the graph input ``value`` (through a Cast), per-feature
    constants whose scales spread :data:`_STANDARDIZATION_SPREAD` times or more."""
    nodes: list[ir.Node] = []
    node = _only_reader(value)
    if node is not None and node.op_type == "Cast":
        nodes.append(node)
        value, node = node.outputs[0], _only_reader(node.outputs[0])
    if node is None or node.op_type not in ("Sub", "Add") or node.inputs[0] is not value:
        return None
    if _feature_vector(node, value) is None:
        return None
    nodes.append(node)
    value, node = node.outputs[0], _only_reader(node.outputs[0])
    if node is None or node.op_type not in ("Mul", "Div") or node.inputs[0] is not value:
        return None
    scale = _feature_vector(node, value)
    if scale is None or not np.all(np.abs(scale) > 0):
        return None
    spread = np.abs(scale).max() / np.abs(scale).min()
    return [*nodes, node] if spread >= _STANDARDIZATION_SPREAD else None


def input_standardizations(model: ir.Model) -> dict[str, str]:
    """The nodes of every spread per-feature standardisation of a model input."""
    found: dict[str, str] = {}
    for value in model.graph.inputs:
        nodes = _standardization_at(value)
        if nodes is not None:
            found.update((n.name, STANDARDIZATION_REASON) for n in nodes)
    return found


def float_patterns(model: ir.Model) -> dict[str, str]:
    """Every node one of the patterns keeps float, with the reason."""
    return {
        **guarded_divisors(model),
        **linear_attention_cores(model),
        **layer_norms(model),
        **erf_gelus(model),
        **tanh_gelus(model),
        **attention_cores(model),
        **residual_sums(model),
        **mask_paths(model),
        **non_finite_paths(model),
        **ranked_scores(model),
        **input_standardizations(model),
    }
