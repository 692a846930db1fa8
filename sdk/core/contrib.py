"""onnxruntime's fused transformer ops (``com.microsoft``) written out as standard ONNX.

optimum's O2-O4 exports and onnxruntime's transformers optimizer (``optimize_model(model_type="bert")``; the
``model_O2.onnx`` ... files that sentence-transformers repositories ship) fuse a BERT-style encoder into
onnxruntime-only ops: ``EmbedLayerNormalization``, ``Attention``, ``SkipLayerNormalization``, ``BiasGelu``,
``FastGelu``, T5's ``SkipSimplifiedLayerNormalization`` (RMSNorm), ... and a ``LayerNormalization`` (or
``SimplifiedLayerNormalization``) in the default domain below opset 17 (onnxruntime registers it
there since opset 1; ONNX has it from 17, so the version converter has no adapter for it). Each becomes the
standard ops it stands for, with onnxruntime's semantics (the reference that runs the file): the attention's
1-D ``mask_index`` (valid keys per batch row) and raw 2-D masks add ``mask_filter_value`` (-10000) to masked
scores; the fused QKV weight is split into three MatMuls, as the unfused export has them.

The rewrite runs on the ``onnx.ModelProto`` at the model's own opset, before the opset upgrade. One function
per op, keyed by op type in ``_EXPANSIONS``; a ``com.microsoft`` op without one stays and is reported as
unsupported by the targets, and a variant an expansion does not cover (past key/values, rotary, ...) is a
``ModelError`` naming it. The standard function ops newer exporters write (ONNX Attention and
RMSNormalization, opset 23) and Col2Im (opset 18, ``F.fold``: a one-hot ConvTranspose) are written out the same
way (``_ONNX_EXPANSIONS``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx
from edgekit.core.errors import ModelError
from onnx import helper, numpy_helper

MS_DOMAIN = "com.microsoft"
#: onnxruntime's default ``mask_filter_value`` of Attention.
MASK_FILTER = -10000.0


class NodeWriter:
    """Collects the standard nodes (``nodes``) and constants (added to ``graph``) that stand for one node, each
    named under that node's name and ``suffix``: the load-time rewrites of onnxruntime's fused ops here and of
    the ONNX-ML ops (``edgekit.core.onnx_ml``) write through it."""

    def __init__(self, graph: onnx.GraphProto, node: onnx.NodeProto, index: int, suffix: str):
        self.graph, self.node = graph, node
        self.prefix = f"{node.name or node.op_type + '_' + str(index)}/{suffix}"
        self.nodes: list[onnx.NodeProto] = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{self.prefix}/{hint}_{self._count}"

    def const(self, hint: str, array: np.ndarray) -> str:
        name = self.name(hint)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name(op_type), **attrs))
        return out


class _Writer(NodeWriter):
    """Emits the standard nodes of one fused node, at the model's opset, with names under its name."""

    def __init__(self, graph: onnx.GraphProto, opset: int, node: onnx.NodeProto, index: int):
        super().__init__(graph, node, index, "expanded")
        self.opset, self.fused = opset, node
        self.consts = {t.name: t for t in graph.initializer}
        # Where value types and shapes are read: ``expand`` infers them for _ONNX_EXPANSIONS.
        self.typed = graph

    def array(self, name: str) -> np.ndarray | None:
        t = self.consts.get(name)
        return None if t is None else numpy_helper.to_array(t)

    def reduce(self, op_type: str, x: str, axes: list[int], keepdims: int = 1) -> str:
        if self.opset >= (13 if op_type == "ReduceSum" else 18):
            return self.op(op_type, [x, self.const("axes", np.array(axes, np.int64))], keepdims=keepdims)
        return self.op(op_type, [x], axes=axes, keepdims=keepdims)

    def layer_norm(
        self, x: str, gamma: str, beta: str, eps: float, axis: int = -1, out: str | None = None
    ) -> str:
        if self.opset >= 17:
            return self.op(
                "LayerNormalization", [x, gamma, beta] if beta else [x, gamma], out, axis=axis, epsilon=eps
            )
        if axis != -1:
            raise ModelError(
                f"{self.fused.op_type} node {self.fused.name!r}: axis {axis} below opset 17 (-1 is)"
            )
        mean = self.reduce("ReduceMean", x, [-1])
        centred = self.op("Sub", [x, mean])
        var = self.reduce("ReduceMean", self.op("Mul", [centred, centred]), [-1])
        std = self.op("Sqrt", [self.op("Add", [var, self.const("eps", np.array(eps, np.float32))])])
        scaled = self.op("Mul", [self.op("Div", [centred, std]), gamma], None if beta else out)
        return self.op("Add", [scaled, beta], out) if beta else scaled

    def rms_norm(self, x: str, gamma: str, eps: float, out: str) -> str:
        """T5's RMSNorm: x / sqrt(mean(x^2) + eps) * gamma (onnxruntime's SimplifiedLayerNormalization)."""
        mean_square = self.reduce("ReduceMean", self.op("Mul", [x, x]), [-1])
        rms = self.op("Sqrt", [self.op("Add", [mean_square, self.const("eps", np.array(eps, np.float32))])])
        return self.op("Mul", [self.op("Div", [x, rms]), gamma], out)

    def gelu_erf(self, x: str, out: str) -> str:
        erf = self.op(
            "Erf", [self.op("Mul", [x, self.const("rsqrt2", np.array(1 / np.sqrt(2), np.float32))])]
        )
        one = self.op("Add", [erf, self.const("one", np.array(1.0, np.float32))])
        half = self.op("Mul", [x, self.const("half", np.array(0.5, np.float32))])
        return self.op("Mul", [half, one], out)


def _opt(node: onnx.NodeProto, i: int) -> str:
    return node.input[i] if len(node.input) > i else ""


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _used_outputs(node: onnx.NodeProto, first: int) -> list[int]:
    return [i for i in range(first, len(node.output)) if node.output[i]]


def _layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    if _used_outputs(node, 1):
        raise ModelError(f"LayerNormalization node {node.name!r}: its mean / inverse std outputs are used")
    w.layer_norm(
        node.input[0], node.input[1], _opt(node, 2), a.get("epsilon", 1e-5), a.get("axis", -1), node.output[0]
    )


def _skip_sum(w: _Writer, node: onnx.NodeProto, bias_index: int) -> str:
    """The normalized sum of the Skip*LayerNormalization ops: input + skip (+ the optional bias at
    ``bias_index``), also written to the optional fourth output. The bias is added to the input first: the input
    is the projection the optimizer took the bias from (MatMul), and MatMul + Add becomes one Gemm whose bias
    the integer kernels accumulate in int32, as in the unfused export (added after the skip, it was requantized
    on its own: BERT QA's int8 35.2 -> 27.4 dB against fp32)."""
    total = node.input[0]
    if _opt(node, bias_index):
        total = w.op("Add", [total, node.input[bias_index]])
    total = w.op("Add", [total, node.input[1]])
    if len(node.output) > 3 and node.output[3]:
        total = w.op("Identity", [total], node.output[3])
    return total


def _skip_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    if any(i in (1, 2) for i in _used_outputs(node, 1)):
        raise ModelError(
            f"SkipLayerNormalization node {node.name!r}: its mean / inverse std outputs are used"
        )
    total = _skip_sum(w, node, bias_index=4)
    w.layer_norm(total, node.input[2], _opt(node, 3), a.get("epsilon", 1e-12), out=node.output[0])


def _simplified_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    a = _attrs(node)
    if a.get("axis", -1) != -1 or _used_outputs(node, 1):
        raise ModelError(
            f"SimplifiedLayerNormalization node {node.name!r}: only axis -1 and one output are expanded"
        )
    w.rms_norm(node.input[0], node.input[1], a.get("epsilon", 1e-5), node.output[0])


def _skip_simplified_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    if any(i in (1, 2) for i in _used_outputs(node, 1)):
        raise ModelError(
            f"SkipSimplifiedLayerNormalization node {node.name!r}: its inverse std output is used"
        )
    total = _skip_sum(w, node, bias_index=3)
    w.rms_norm(total, node.input[2], _attrs(node).get("epsilon", 1e-5), node.output[0])


def _bias_gelu(w: _Writer, node: onnx.NodeProto) -> None:
    x = w.op("Add", [node.input[0], node.input[1]]) if _opt(node, 1) else node.input[0]
    w.gelu_erf(x, node.output[0])


def _fast_gelu(w: _Writer, node: onnx.NodeProto) -> None:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), of x + bias when a bias is given."""
    x = w.op("Add", [node.input[0], node.input[1]]) if _opt(node, 1) else node.input[0]
    cube = w.op("Mul", [w.op("Mul", [x, x]), x])
    inner = w.op("Add", [x, w.op("Mul", [cube, w.const("c", np.array(0.044715, np.float32))])])
    tanh = w.op("Tanh", [w.op("Mul", [inner, w.const("k", np.array(np.sqrt(2 / np.pi), np.float32))])])
    one = w.op("Add", [tanh, w.const("one", np.array(1.0, np.float32))])
    w.op("Mul", [w.op("Mul", [x, w.const("half", np.array(0.5, np.float32))]), one], node.output[0])


def _quick_gelu(w: _Writer, node: onnx.NodeProto) -> None:
    alpha = _attrs(node).get("alpha", 1.702)
    sig = w.op("Sigmoid", [w.op("Mul", [node.input[0], w.const("alpha", np.array(alpha, np.float32))])])
    w.op("Mul", [node.input[0], sig], node.output[0])


def _embed_layer_norm(w: _Writer, node: onnx.NodeProto) -> None:
    """word[ids] + position[positions] (+ segment[segment_ids]) -> LayerNorm; mask_index = tokens per row."""
    a = _attrs(node)
    if _opt(node, 9) or (len(node.output) > 2 and node.output[2]):
        raise ModelError(f"EmbedLayerNormalization node {node.name!r}: embedding-sum output / extra inputs")
    ids = w.op("Cast", [node.input[0]], to=onnx.TensorProto.INT64)
    total = w.op("Gather", [node.input[2], ids], axis=0)
    if _opt(node, 8):
        positions = w.op("Cast", [node.input[8]], to=onnx.TensorProto.INT64)
    else:  # 0 .. S-1
        shape = w.op("Shape", [ids])
        length = w.op("Gather", [shape, w.const("one", np.array(1, np.int64))], axis=0)
        positions = w.op(
            "Range", [w.const("zero", np.array(0, np.int64)), length, w.const("step", np.array(1, np.int64))]
        )
    total = w.op("Add", [total, w.op("Gather", [node.input[3], positions], axis=0)])
    if _opt(node, 1) and _opt(node, 4):
        segments = w.op("Cast", [node.input[1]], to=onnx.TensorProto.INT64)
        total = w.op("Add", [total, w.op("Gather", [node.input[4], segments], axis=0)])
    w.layer_norm(total, node.input[5], _opt(node, 6), a.get("epsilon", 1e-12), out=node.output[0])
    if len(node.output) > 1 and node.output[1]:
        if not _opt(node, 7):
            raise ModelError(f"EmbedLayerNormalization node {node.name!r}: mask_index without a mask input")
        ones = w.op(
            "Cast",
            [
                w.op(
                    "Equal",
                    [
                        w.op("Cast", [node.input[7]], to=onnx.TensorProto.INT64),
                        w.const("one", np.array(1, np.int64)),
                    ],
                )
            ],
            to=onnx.TensorProto.INT32,
        )
        w.op("Identity", [w.reduce("ReduceSum", ones, [1], keepdims=0)], node.output[1])


def _attention(w: _Writer, node: onnx.NodeProto) -> None:
    """Multi-head self-attention with a fused QKV projection (no past state, no rotary)."""
    a = _attrs(node)
    name = f"Attention node {node.name!r}"
    extra = [k for k in ("unidirectional", "do_rotary", "past_present_share_buffer") if a.get(k)]
    if extra or any(_opt(node, i) for i in range(4, len(node.input))) or _used_outputs(node, 1):
        raise ModelError(
            f"{name}: past state / attention bias / {', '.join(extra) or 'present output'} is not expanded"
        )
    weight, bias = w.array(node.input[1]), w.array(_opt(node, 2)) if _opt(node, 2) else None
    if weight is None:
        raise ModelError(f"{name}: its QKV weight is not a constant")
    heads = int(a["num_heads"])
    sizes = list(a.get("qkv_hidden_sizes", [weight.shape[1] // 3] * 3))
    if sizes[0] != sizes[1]:
        raise ModelError(f"{name}: query and key sizes differ ({sizes[0]} vs {sizes[1]})")
    bounds = np.cumsum([0, *sizes])
    qkv = []
    for k, hint in enumerate("qkv"):
        y = w.op("MatMul", [node.input[0], w.const(f"{hint}_weight", weight[:, bounds[k] : bounds[k + 1]])])
        if bias is not None:
            y = w.op("Add", [y, w.const(f"{hint}_bias", bias[bounds[k] : bounds[k + 1]])])
        heads_shape = w.const("heads_shape", np.array([0, 0, heads, sizes[k] // heads], np.int64))
        qkv.append(w.op("Reshape", [y, heads_shape]))
    q = w.op("Transpose", [qkv[0]], perm=[0, 2, 1, 3])
    kt = w.op("Transpose", [qkv[1]], perm=[0, 2, 3, 1])
    v = w.op("Transpose", [qkv[2]], perm=[0, 2, 1, 3])
    scale = a.get("scale") or 1.0 / np.sqrt(sizes[0] // heads)
    scores = w.op("Mul", [w.op("MatMul", [q, kt]), w.const("scale", np.array(scale, np.float32))])
    if _opt(node, 3):
        scores = w.op("Add", [scores, _mask_bias(w, node, a.get("mask_filter_value", MASK_FILTER))])
    probs = w.op("Softmax", [scores], axis=-1 if w.opset >= 13 else 3)
    ctx = w.op("Transpose", [w.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    w.op("Reshape", [ctx, w.const("merge_shape", np.array([0, 0, sizes[2]], np.int64))], node.output[0])


def _mask_bias(w: _Writer, node: onnx.NodeProto, fill: float) -> str:
    """The additive mask [B, 1, 1|S, T]: ``fill`` where a key is masked, 0 elsewhere."""
    mask = node.input[3]
    rank = _rank(w.typed, mask)
    zero, masked = w.const("zero", np.array(0.0, np.float32)), w.const("fill", np.array(fill, np.float32))
    if rank == 1:  # end position of the valid keys per batch row (right padding)
        keys = w.op("Shape", [node.input[0]])
        length = w.op("Gather", [keys, w.const("one", np.array(1, np.int64))], axis=0)
        positions = w.op(
            "Range", [w.const("zero", np.array(0, np.int64)), length, w.const("step", np.array(1, np.int64))]
        )
        ends = w.op(
            "Reshape",
            [
                w.op("Cast", [mask], to=onnx.TensorProto.INT64),
                w.const("shape", np.array([-1, 1, 1, 1], np.int64)),
            ],
        )
        valid = w.op("Less", [positions, ends])
    elif rank in (2, 3):  # raw 0/1 mask [B, T] or [B, S, T]
        shape = [0, 1, 1, -1] if rank == 2 else [0, 1, 0, -1]
        raw = w.op("Reshape", [mask, w.const("shape", np.array(shape, np.int64))])
        valid = w.op(
            "Equal", [w.op("Cast", [raw], to=onnx.TensorProto.INT64), w.const("one", np.array(1, np.int64))]
        )
    else:
        raise ModelError(
            f"Attention node {node.name!r}: a mask_index of rank {rank} is not expanded (1 to 3 are)"
        )
    return w.op("Where", [valid, zero, masked])


def _declared(graph: onnx.GraphProto, name: str) -> list[onnx.TypeProto.Tensor]:
    """The tensor types ``graph`` declares for ``name`` (inputs, value_info, outputs), in that order."""
    return [v.type.tensor_type for v in [*graph.input, *graph.value_info, *graph.output] if v.name == name]


def _rank(graph: onnx.GraphProto, name: str) -> int | None:
    for t in _declared(graph, name):
        if t.HasField("shape"):
            return len(t.shape.dim)
    for n in graph.node:  # EmbedLayerNormalization's mask_index is 1-D
        if n.op_type == "EmbedLayerNormalization" and len(n.output) > 1 and n.output[1] == name:
            return 1
        if n.op_type == "Cast" and n.output[0] == name:
            return _rank(graph, n.input[0])
    return None


def _last_dim(graph: onnx.GraphProto, name: str) -> int | None:
    for t in _declared(graph, name):
        if t.HasField("shape") and t.shape.dim:
            last = t.shape.dim[-1]
            return last.dim_value if last.HasField("dim_value") else None
    return None


def _onnx_attention(w: _Writer, node: onnx.NodeProto) -> None:
    """ONNX's Attention (opset 23; torch's dynamo exporter writes scaled_dot_product_attention as it from
    opset 23) as the MatMul / Mul / Softmax / MatMul the earlier exports have: Q [B, H, S, D] (or [B, S, H*D]
    with ``q_num_heads``), K^T, ``scale`` (default 1 / sqrt(D)), an additive float mask or a boolean one
    (False: -inf), Softmax over the keys, times V. Past key/values, causal masking, softcap, grouped-query
    heads and the extra outputs are not expanded (one line naming the one)."""
    a = _attrs(node)
    name = f"Attention node {node.name!r}"
    q_heads, kv_heads = a.get("q_num_heads"), a.get("kv_num_heads")
    extra = [k for k in ("is_causal", "softcap", "qk_matmul_output_mode") if a.get(k)]
    extra += ["past key/value inputs"] if _opt(node, 4) or _opt(node, 5) else []
    extra += ["present / qk outputs"] if _used_outputs(node, 1) else []
    extra += ["grouped-query heads"] if q_heads != kv_heads else []
    if extra:
        raise ModelError(f"{name}: {', '.join(extra)} not expanded (plain attention is)")
    q, k, v = node.input[:3]
    head = _last_dim(w.typed, q)
    if q_heads:  # 3-D inputs [B, S, heads * D]: split the heads
        split = w.const("heads_shape", np.array([0, 0, int(q_heads), -1], np.int64))
        q = w.op("Transpose", [w.op("Reshape", [q, split])], perm=[0, 2, 1, 3])
        kt = w.op("Transpose", [w.op("Reshape", [k, split])], perm=[0, 2, 3, 1])
        v = w.op("Transpose", [w.op("Reshape", [v, split])], perm=[0, 2, 1, 3])
        head = head // int(q_heads) if head else None
    else:
        kt = w.op("Transpose", [k], perm=[0, 1, 3, 2])
    scale = a.get("scale")
    if scale is None:
        if not head:
            raise ModelError(f"{name}: the head size (Q's last dim) is not static, so neither is the scale")
        scale = 1.0 / np.sqrt(head)
    scores = w.op("Mul", [w.op("MatMul", [q, kt]), w.const("scale", np.array(scale, np.float32))])
    mask = _opt(node, 3)
    if mask:
        if _elem_type(w.typed, mask) == onnx.TensorProto.BOOL:
            zero, masked = (
                w.const("zero", np.array(0.0, np.float32)),
                w.const("fill", np.array(-np.inf, np.float32)),
            )
            mask = w.op("Where", [mask, zero, masked])
        scores = w.op("Add", [scores, mask])
    probs = w.op("Softmax", [scores], axis=-1)
    if not q_heads:
        w.op("MatMul", [probs, v], node.output[0])
        return
    y = w.op("Transpose", [w.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    w.op("Reshape", [y, w.const("merge_shape", np.array([0, 0, -1], np.int64))], node.output[0])


def _elem_type(graph: onnx.GraphProto, name: str) -> int | None:
    declared = _declared(graph, name)
    if declared:
        return declared[0].elem_type
    for t in graph.initializer:
        if t.name == name:
            return t.data_type
    return None


def _onnx_rms_norm(w: _Writer, node: onnx.NodeProto) -> None:
    """ONNX's RMSNormalization (opset 23) over the last axis: x / sqrt(mean(x^2) + epsilon) * scale."""
    a = _attrs(node)
    if a.get("axis", -1) != -1:
        raise ModelError(f"RMSNormalization node {node.name!r}: axis {a['axis']} not expanded (-1 is)")
    w.rms_norm(node.input[0], node.input[1], a.get("epsilon", 1e-5), node.output[0])


def _onnx_col2im(w: _Writer, node: onnx.NodeProto) -> None:
    """ONNX's Col2Im (opset 18; torch's ``F.fold``, VOLO's outlook attention) over 2-D images as the
    ConvTranspose it is: the columns [N, C * kh * kw, L] reshaped to the block grid [N, C * kh * kw, Lh, Lw], and a
    one-hot kernel (column channel c * kh * kw + i * kw + j to output channel c at offset (i, j)) with Col2Im's
    strides, dilations and pads sums every block's values into its pixels. Constant image and block shapes,
    2-D only."""
    name = f"Col2Im node {node.name!r}"
    x, image, block = node.input[:3]
    image_shape, block_shape = w.array(image), w.array(block)
    if image_shape is None or block_shape is None:
        raise ModelError(f"{name}: image_shape and block_shape must be constants")
    if len(image_shape) != 2 or len(block_shape) != 2:
        raise ModelError(f"{name}: {len(image_shape)}-D images are not expanded (2-D are)")
    a = _attrs(node)
    dil, strides = a.get("dilations", [1, 1]), a.get("strides", [1, 1])
    pads = a.get("pads", [0, 0, 0, 0])
    channels = next((t.shape.dim[1] for t in _declared(w.typed, x) if t.HasField("shape")), None)
    if channels is None or not channels.HasField("dim_value"):
        raise ModelError(f"{name}: the columns' channel dim (input dim 1) is not static")
    kh, kw = (int(b) for b in block_shape)
    cols = channels.dim_value
    c = cols // (kh * kw)
    grid, extra = [], []
    for d in range(2):
        span = int(image_shape[d]) + pads[d] + pads[d + 2] - dil[d] * (int(block_shape[d]) - 1) - 1
        grid.append(span // strides[d] + 1)
        extra.append(span % strides[d])  # pixels no block reaches: ConvTranspose's output_padding
    kernel = np.zeros((cols, c, kh, kw), np.float32)
    for ch in range(c):
        for i in range(kh):
            for j in range(kw):
                kernel[ch * kh * kw + i * kw + j, ch, i, j] = 1.0
    blocks = w.op("Reshape", [x, w.const("grid", np.array([0, cols, *grid], np.int64))])
    w.op(
        "ConvTranspose",
        [blocks, w.const("one_hot", kernel)],
        node.output[0],
        strides=list(strides),
        dilations=list(dil),
        pads=list(pads),
        output_padding=extra,
    )


def _width(w: _Writer, name: str) -> int | None:
    """The last dim of ``name``: declared, or the output width of the constant-weight MatMul it comes from
    (through a bias Add): onnxruntime-genai's packed QKV projection."""
    last = _last_dim(w.typed, name)
    if last:
        return last
    producer = next((n for n in w.graph.node if name in n.output), None)
    if producer is None:
        return None
    if producer.op_type == "MatMul" and (weight := w.array(producer.input[1])) is not None:
        return int(weight.shape[-1])
    if producer.op_type == "Add":
        return next((wd for i in producer.input if w.array(i) is None and (wd := _width(w, i))), None)
    return None


def _rotate(w: _Writer, x: str, cos: str, sin: str, half: int, head: int) -> str:
    """Non-interleaved rotary embedding of the first ``2 half`` dims of ``x`` [B, N, S, D] (the rest as is),
    written as the Hugging Face exports write it: ``x * cat(cos, cos) + cat(-x2, x1) * cat(sin, sin)``
    (onnxruntime's ``rotary_interleaved=0``). OpenVINO's CPU plugin fuses that form; the two-product form
    (x1 cos - x2 sin, x2 cos + x1 sin) gave non-deterministic values there on round 20k's genai builds."""

    def part(lo: int, hi: int) -> str:
        return w.op("Slice", [x, w.const("lo", np.array([lo], np.int64)), w.const("hi", np.array([hi], np.int64)),
                              w.const("axis", np.array([3], np.int64))])  # fmt: skip

    rotated = part(0, 2 * half) if 2 * half < head else x
    x1, x2 = part(0, half), part(half, 2 * half)
    cos_full, sin_full = w.op("Concat", [cos, cos], axis=3), w.op("Concat", [sin, sin], axis=3)
    turned = w.op("Concat", [w.op("Neg", [x2]), x1], axis=3)
    out = w.op("Add", [w.op("Mul", [rotated, cos_full]), w.op("Mul", [turned, sin_full])])
    return w.op("Concat", [out, part(2 * half, head)], axis=3) if 2 * half < head else out


def _group_query_attention(w: _Writer, node: onnx.NodeProto) -> None:
    """onnxruntime's GroupQueryAttention as onnxruntime-genai's model builder writes a decoder (Llama, Qwen2,
    Phi-3, ...): a packed QKV input (or Q, K, V), rotary from ``cos_cache`` / ``sin_cache`` at positions
    ``seqlens_k + 1 - S + i`` (the valid keys so far), the past keys / values concatenated with the new ones
    (``present_key`` / ``present_value``, no shared buffer), the KV heads repeated over their query groups, a
    causal mask (key j visible to query i when ``j <= seqlens_k + 1 - S + i``: left-aligned rows, as onnxruntime
    reads them), Softmax, times V. Interleaved rotary, a local window, softcap, smooth softmax and the optional
    position ids / attention bias / head sink inputs are declined in one line naming the one."""
    a = _attrs(node)
    name = f"GroupQueryAttention node {node.name!r}"
    extra = [k for k in ("rotary_interleaved", "softcap", "smooth_softmax", "qk_output") if a.get(k)]
    if a.get("local_window_size", -1) not in (-1, 0):
        extra.append("local_window_size")
    extra += [f"input {i}" for i in range(9, len(node.input)) if node.input[i]]
    if extra or len(node.input) < 7 or not node.input[3] or not node.input[4]:
        raise ModelError(f"{name}: {', '.join(extra) or 'no past key / value input'} is not expanded")
    if w.opset < 13:
        raise ModelError(f"{name}: expanded at opset 13 or later, the model has {w.opset}")
    heads, kv_heads = int(a["num_heads"]), int(a["kv_num_heads"])
    packed = not _opt(node, 1)
    width = _width(w, node.input[0])
    if not width:
        raise ModelError(f"{name}: the width of its query input is not known (give the model static shapes)")
    head = width // (heads + 2 * kv_heads) if packed else width // heads
    sizes = [heads * head, kv_heads * head, kv_heads * head]

    def heads_of(x: str, n: int) -> str:  # [B, S, n * D] -> [B, n, S, D]
        shaped = w.op("Reshape", [x, w.const("heads_shape", np.array([0, 0, n, head], np.int64))])
        return w.op("Transpose", [shaped], perm=[0, 2, 1, 3])

    if packed:
        bounds = np.cumsum([0, *sizes])
        qkv = [w.op("Slice", [node.input[0], w.const("lo", bounds[k : k + 1]), w.const("hi", bounds[k + 1 : k + 2]),
                              w.const("axis", np.array([2], np.int64))]) for k in range(3)]  # fmt: skip
    else:
        qkv = list(node.input[:3])
    q, k, v = heads_of(qkv[0], heads), heads_of(qkv[1], kv_heads), heads_of(qkv[2], kv_heads)
    one = w.const("one", np.array(1, np.int64))
    valid = w.op("Add", [w.op("Cast", [node.input[5]], to=onnx.TensorProto.INT64), one])  # [B] keys so far
    query_len = w.op("Gather", [w.op("Shape", [node.input[0]]), one], axis=0)
    steps = w.op("Range", [w.const("zero", np.array(0, np.int64)), query_len, one])
    start = w.op("Sub", [w.op("Unsqueeze", [valid, w.const("axis", np.array([1], np.int64))]), query_len])
    positions = w.op("Add", [start, steps])  # [B, S]
    if a.get("do_rotary"):
        cos_cache, sin_cache = node.input[7], node.input[8]
        half = (w.array(cos_cache).shape[-1]) if w.array(cos_cache) is not None else head // 2
        axis1 = w.const("axis", np.array([1], np.int64))
        cos = w.op("Unsqueeze", [w.op("Gather", [cos_cache, positions], axis=0), axis1])  # [B, 1, S, half]
        sin = w.op("Unsqueeze", [w.op("Gather", [sin_cache, positions], axis=0), axis1])
        q, k = _rotate(w, q, cos, sin, half, head), _rotate(w, k, cos, sin, half, head)
    outputs = list(node.output) + [""] * (3 - len(node.output))
    present_k = w.op("Concat", [node.input[3], k], outputs[1] or None, axis=2)
    present_v = w.op("Concat", [node.input[4], v], outputs[2] or None, axis=2)
    groups = heads // kv_heads

    def repeat(x: str) -> str:  # [B, KvH, T, D] -> [B, H, T, D], each KV head once per query of its group
        if groups == 1:
            return x
        five = w.op("Unsqueeze", [x, w.const("axis", np.array([2], np.int64))])
        tiled = w.op("Expand", [five, w.const("groups", np.array([1, 1, groups, 1, 1], np.int64))])
        return w.op("Reshape", [tiled, w.const("shape", np.array([0, heads, -1, head], np.int64))])

    kt = w.op("Transpose", [repeat(present_k)], perm=[0, 1, 3, 2])
    scale = a.get("scale") or 1.0 / np.sqrt(head)
    scores = w.op("Mul", [w.op("MatMul", [q, kt]), w.const("scale", np.array(scale, np.float32))])
    total = w.op("Gather", [w.op("Shape", [present_k]), w.const("two", np.array(2, np.int64))], axis=0)
    keys = w.op("Range", [w.const("zero", np.array(0, np.int64)), total, one])  # [T]
    last = w.op("Unsqueeze", [positions, w.const("axes", np.array([1, 3], np.int64))])  # [B, 1, S, 1]
    visible = w.op("LessOrEqual", [keys, last])
    bias = w.op("Where", [visible, w.const("zero", np.array(0.0, np.float32)),
                          w.const("fill", np.array(MASK_FILTER, np.float32))])  # fmt: skip
    probs = w.op("Softmax", [w.op("Add", [scores, bias])], axis=-1)
    ctx = w.op("Transpose", [w.op("MatMul", [probs, repeat(present_v)])], perm=[0, 2, 1, 3])
    w.op("Reshape", [ctx, w.const("merge_shape", np.array([0, 0, heads * head], np.int64))], outputs[0])


#: Standard ONNX ops (default domain) written out the same way: newer function ops the targets convert as
#: their parts.
_ONNX_EXPANSIONS: dict[str, Callable[[_Writer, onnx.NodeProto], None]] = {
    "Attention": _onnx_attention,
    "RMSNormalization": _onnx_rms_norm,
    "Col2Im": _onnx_col2im,
}

_EXPANSIONS: dict[str, Callable[[_Writer, onnx.NodeProto], None]] = {
    "SkipLayerNormalization": _skip_layer_norm,
    "SimplifiedLayerNormalization": _simplified_layer_norm,
    "SkipSimplifiedLayerNormalization": _skip_simplified_layer_norm,
    "BiasGelu": _bias_gelu,
    "Gelu": _bias_gelu,
    "FastGelu": _fast_gelu,
    "QuickGelu": _quick_gelu,
    "EmbedLayerNormalization": _embed_layer_norm,
    "Attention": _attention,
    "GroupQueryAttention": _group_query_attention,
    "LayerNormalization": _layer_norm,
}


def expand(proto: onnx.ModelProto) -> list[str]:
    """Rewrite the fused ops of ``proto`` in place; the fused op types rewritten (empty when there were none).
    The standard function ops of ``_ONNX_EXPANSIONS`` are rewritten too, and only logged: nothing was fused."""
    opset = next((i.version for i in proto.opset_import if i.domain in ("", "ai.onnx")), 0)
    graph = proto.graph
    done: list[str] = []
    written: list[str] = []
    nodes: list[onnx.NodeProto] = []
    fused_inputs: set[str] = set()
    typed = graph
    # head sizes and mask types of the standard ops; the rank of a fused Attention's computed mask_index (the
    # optimizer's ReduceSum of the mask where no EmbedLayerNormalization gives it: RoBERTa / XLM-R)
    if any(
        (n.domain in ("", "ai.onnx") and n.op_type in _ONNX_EXPANSIONS)
        or (n.domain == MS_DOMAIN and n.op_type == "Attention" and _opt(n, 3))
        for n in graph.node
    ):
        typed = onnx.shape_inference.infer_shapes(proto).graph
    for index, node in enumerate(graph.node):
        # onnxruntime also registers (Simplified)LayerNormalization in the default domain (below opset 17)
        fused = node.domain == MS_DOMAIN or node.op_type == "SimplifiedLayerNormalization"
        fused = fused or (node.op_type == "LayerNormalization" and opset < 17)
        fn = _EXPANSIONS.get(node.op_type) if fused else None
        standard = node.domain in ("", "ai.onnx") and node.op_type in _ONNX_EXPANSIONS
        fn = _ONNX_EXPANSIONS[node.op_type] if standard else fn
        if fn is None:
            nodes.append(node)
            continue
        if opset < 11:
            raise ModelError(
                f"{node.op_type} node {node.name!r}: fused ops are expanded at opset 11 or later, the model has {opset}"
            )
        fused_inputs.update(node.input)
        w = _Writer(graph, opset, node, index)
        w.typed = typed
        fn(w, node)
        nodes.extend(w.nodes)
        (written if standard else done).append(node.op_type)
    if written:
        logging.getLogger("edgekit").info("written out as their parts: %s", ", ".join(sorted(set(written))))
    if done or written:
        del graph.node[:]
        graph.node.extend(nodes)
        used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}
        dropped = [t for t in graph.initializer if t.name in fused_inputs and t.name not in used]
        for t in dropped:  # the fused QKV weights, now split
            graph.initializer.remove(t)
        if not any(n.domain == MS_DOMAIN for n in graph.node):
            kept = [i for i in proto.opset_import if i.domain != MS_DOMAIN]
            del proto.opset_import[:]
            proto.opset_import.extend(kept)
    return sorted(set(done))
