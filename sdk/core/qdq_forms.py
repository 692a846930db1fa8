"""The graph forms a model takes on its way to a runtime, as ONNX rewrites (no runtime imported here): the extra
outputs the host runner reads, the exact form of a QDQ model (:func:`edgekit.core.runtime.runner_form`: constant
dequantizations folded, 8-bit element-wise ops tabulated, graph-input quantization written out), the form the
intel-vpu target converts (pads before dequantization, Concat's identity Q/DQ pairs dropped), the float16-rounded
constants, and the portable standalone QDQ file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx
from edgekit.core.unsigned import unsigned_activations


def _attr(node: onnx.NodeProto, name: str, default=None):
    """The value of ``node``'s attribute ``name``, or ``default``."""
    return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)


_INTEGER_KERNEL_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})


def fold_constant_dequantize(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose DequantizeLinear nodes of constant (initializer) inputs are float initializers.

    Only those read by convolutions and matrix products (the integer multiply-accumulate kernels): OpenVINO
    2026.4's CPU plugin crashed compiling a QDQ model whose Add read a folded constant.

    ``(x - zero_point) * scale`` in float32, per tensor or per axis; blocked quantization (``block_size``)
    and DequantizeLinear of graph inputs or computed tensors are left alone. ``proto`` itself if there is
    nothing to fold.

    An AveragePool counting its padding first gets that padding in the integer domain
    (:func:`pad_before_dequantize`).
    """
    proto = pad_before_dequantize(proto)
    inits = {t.name: t for t in proto.graph.initializer}
    outputs = {o.name for o in proto.graph.output}
    readers: dict[str, set[str]] = {}
    for n in proto.graph.node:
        for name in n.input:
            readers.setdefault(name, set()).add(n.op_type)
    foldable = [
        n
        for n in proto.graph.node
        if n.op_type == "DequantizeLinear"
        and n.domain in ("", "ai.onnx")
        and n.output[0] in readers
        and readers[n.output[0]] <= _INTEGER_KERNEL_OPS
        and n.input[0] in inits
        and all(name in inits for name in n.input[1:] if name)
        and n.output[0] not in outputs
        and not any(a.name == "block_size" and a.i for a in n.attribute)
    ]
    if not foldable:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    folded = {id(n) for n in foldable}
    keep = [n for n in proto.graph.node if id(n) not in folded]
    new_inits = [dequantized_constant(n, inits) for n in foldable]
    del out.graph.node[:]
    out.graph.node.extend(keep)
    used = {name for n in keep for name in n.input} | outputs
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in keep for a in n.attribute
    ):
        used |= set(inits)  # subgraphs may read any initializer: keep them all
    kept_inits = [t for t in proto.graph.initializer if t.name in used]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept_inits + new_inits)
    return out


def pad_before_dequantize(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each AveragePool that counts its padding (``count_include_pad=1``, explicit
    pads) and reads a per-tensor DequantizeLinear pads the integer tensor with the zero point instead, then
    dequantizes and averages without padding: the same values.

    OpenVINO 2026.4 pads a dequantized tensor with the integer 0 instead of its zero point (its low-precision
    transformations move the dequantization below the padding), which put such a pool off by zero point x scale
    at the borders. ``proto`` itself when there is no such pool. Constant Pads with a non-zero value go the same
    way (:func:`_constant_pads_in_integers`). A 16-bit tensor is left alone: 16-bit QDQ models run on onnxruntime
    (OpenVINO strips their QDQ), which has no int16 Pad (Inception-v3 in int16x8 did not load there).
    """
    proto = _constant_pads_in_integers(proto)
    producers = {name: n for n in proto.graph.node for name in n.output}
    sizes = {t.name: int(np.prod(t.dims)) for t in proto.graph.initializer}
    inits = {t.name: t for t in proto.graph.initializer}
    found = []
    for n in proto.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        pads = list(attrs.get("pads") or [])
        if n.op_type != "AveragePool" or not attrs.get("count_include_pad") or not any(pads):
            continue
        dq = producers.get(n.input[0])
        if (
            dq is None
            or dq.op_type != "DequantizeLinear"
            or sizes.get(dq.input[1]) != 1
            or (len(dq.input) > 2 and dq.input[2] and sizes.get(dq.input[2]) != 1)
            or attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET")
            or _sixteen_bit(dq, inits)
        ):
            continue
        found.append((n, dq, pads, attrs))
    if not found:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    replaced = {id(n): (dq, pads, attrs) for n, dq, pads, attrs in found}
    nodes = []
    for i, n in enumerate(proto.graph.node):
        if id(n) not in replaced:
            nodes.append(n)
            continue
        dq, pads, attrs = replaced[id(n)]
        k = len(pads) // 2
        base = f"{n.output[0]}__pad{i}"
        out.graph.initializer.append(
            onnx.numpy_helper.from_array(
                np.array([0, 0, *pads[:k], 0, 0, *pads[k:]], np.int64), f"{base}_pads"
            )
        )
        pad_inputs = [dq.input[0], f"{base}_pads"] + (
            [dq.input[2]] if len(dq.input) > 2 and dq.input[2] else []
        )
        kept = {k2: v for k2, v in attrs.items() if k2 not in ("pads", "count_include_pad", "auto_pad")}
        nodes += [
            onnx.helper.make_node("Pad", pad_inputs, [f"{base}_padded"], mode="constant"),
            onnx.helper.make_node(
                "DequantizeLinear", [f"{base}_padded", *dq.input[1:]], [f"{base}_dequantized"]
            ),
            onnx.helper.make_node(
                "AveragePool", [f"{base}_dequantized"], list(n.output), name=n.name, **kept
            ),
        ]
    # A DequantizeLinear only the pools read goes (OpenVINO drops it: no FakeQuantize would pair with it).
    read = {name for n in nodes for name in n.input} | {o.name for o in proto.graph.output}
    nodes = [n for n in nodes if n.op_type != "DequantizeLinear" or n.output[0] in read]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


_SIXTEEN_BIT = frozenset({onnx.TensorProto.INT16, onnx.TensorProto.UINT16})


def _sixteen_bit(dq: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto]) -> bool:
    """A DequantizeLinear of 16-bit integers (its zero point's type; the data's when it is a constant)."""
    tensor = inits.get(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else inits.get(dq.input[0])
    return tensor is not None and tensor.data_type in _SIXTEEN_BIT


def _constant_pads_in_integers(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each constant-mode Pad with a non-zero constant ``v`` between a per-tensor
    DequantizeLinear and QuantizeLinears of the same grid pads the integer tensor with ``v``'s integer (what the
    QuantizeLinear makes of ``v``) before dequantizing: the same values.

    OpenVINO 2026.4's low-precision transformations move the dequantization below such a Pad and write ``v``
    itself as the integer padding value: "-1 assigned value out of range for u8" (Longformer's -1 fill of its
    chunked attention scores), or a wrong border where ``v`` is in range. ``proto`` itself when there is none.
    """
    inits, producers, readers = graph_index(proto)
    outputs = {o.name for o in proto.graph.output}
    found = {}
    for n in proto.graph.node:
        if (
            n.op_type != "Pad"
            or _attr(n, "mode", b"constant") not in (b"constant", "constant")
            or len(n.input) < 3
        ):
            continue
        value, dq = inits.get(n.input[2]), producers.get(n.input[0])
        if value is None or dq is None or dq.op_type != "DequantizeLinear" or n.output[0] in outputs:
            continue
        v = onnx.numpy_helper.to_array(value).astype(np.float32).reshape(-1)
        grid, users = _per_tensor_grid(dq, inits), readers.get(n.output[0], [])
        if v.size != 1 or v[0] == 0 or grid is None or not np.isfinite(v[0]) or not users:
            continue
        if _sixteen_bit(dq, inits):  # onnxruntime, where 16-bit QDQ runs, has no int16 Pad
            continue
        if any(u.op_type != "QuantizeLinear" or _per_tensor_grid(u, inits) != grid for u in users):
            continue
        scale = onnx.numpy_helper.to_array(inits[dq.input[1]]).astype(np.float32)
        zero = onnx.numpy_helper.to_array(inits[dq.input[2]])
        info = np.iinfo(zero.dtype)
        q = np.clip(np.round(v[0] / scale) + int(zero), info.min, info.max).astype(zero.dtype)
        found[id(n)] = (dq, onnx.numpy_helper.from_array(q.reshape(()), f"{n.output[0]}__integer_value"))
    if not found:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = []
    for n in proto.graph.node:
        if id(n) not in found:
            nodes.append(n)
            continue
        dq, value = found[id(n)]
        out.graph.initializer.append(value)
        padded = f"{n.output[0]}__integers"
        pad = onnx.NodeProto()
        pad.CopyFrom(n)
        pad.input[0], pad.input[2], pad.output[0] = dq.input[0], value.name, padded
        nodes += [pad, onnx.helper.make_node("DequantizeLinear", [padded, *dq.input[1:]], list(n.output))]
    read = {name for n in nodes for name in n.input} | outputs  # a DequantizeLinear only the Pad read goes
    nodes = [n for n in nodes if n.op_type != "DequantizeLinear" or n.output[0] in read]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def graph_index(
    proto: onnx.ModelProto,
) -> tuple[dict[str, onnx.TensorProto], dict[str, onnx.NodeProto], dict[str, list[onnx.NodeProto]]]:
    """(initializers, producer of each tensor, readers of each tensor) of ``proto``'s graph."""
    inits = {t.name: t for t in proto.graph.initializer}
    producers = {name: n for n in proto.graph.node for name in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for n in proto.graph.node:
        for name in n.input:
            readers.setdefault(name, []).append(n)
    return inits, producers, readers


def _per_tensor_grid(
    node: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto]
) -> tuple[str, bytes, int, bytes] | None:
    """(scale dtype, scale bytes, zero point type, zero point bytes) of a per-tensor Q or DQ with constant
    parameters; None for any other."""
    if len(node.input) < 3 or any(a.name in ("axis", "block_size", "output_dtype") for a in node.attribute):
        return None
    scale, zero = inits.get(node.input[1]), inits.get(node.input[2])
    if scale is None or zero is None or int(np.prod(scale.dims)) != 1 or int(np.prod(zero.dims)) != 1:
        return None
    s, z = onnx.numpy_helper.to_array(scale), onnx.numpy_helper.to_array(zero)
    return s.dtype.str, s.tobytes(), zero.data_type, z.tobytes()


def drop_concat_identity_qdq(
    proto: onnx.ModelProto, keep: Iterable[str] = (), readers: frozenset[str] | None = None
) -> onnx.ModelProto:
    """A copy of ``proto`` without the QuantizeLinear/DequantizeLinear pair on the output of a Concat whose every
    input is a DequantizeLinear with the same (per-tensor) scale and zero point as the pair: the pair is then an
    identity (each value is already on that grid), so the model computes exactly the same.

    OpenVINO 2026.4's CPU plugin crashes (SIGSEGV in ``compile_model`` and ``query_model``) on a Concat whose
    output FakeQuantize feeds a second FakeQuantize of another range, e.g. Concat -> Q/DQ (zero point 129) -> Relu
    -> Q/DQ (zero point 0): RetinaFace's SSH modules end that way (``tests/test_runtime.py``). The quantizer gives
    a Concat's inputs its output's scale, so on such models the pair is that identity. ``proto`` itself when there
    is nothing to drop. A pair whose tensors are graph outputs or in ``keep`` (outputs a caller will ask for) stays;
    with ``readers``, so does a pair whose DequantizeLinear is read by an op not of those types.
    """
    inits, producers, reading = graph_index(proto)

    def readers_of(name: str) -> list[onnx.NodeProto]:
        return reading.get(name, [])

    outputs = {o.name for o in proto.graph.output} | set(keep)

    def params(node: onnx.NodeProto) -> tuple[str, bytes, int, bytes] | None:
        return _per_tensor_grid(node, inits)

    dropped: dict[str, str] = {}  # the pair's DequantizeLinear output -> the Concat's output
    pairs: set[int] = set()
    for n in proto.graph.node:
        if n.op_type != "Concat" or n.domain not in ("", "ai.onnx") or n.output[0] in outputs:
            continue
        users = readers_of(n.output[0])
        if len(users) != 1 or users[0].op_type != "QuantizeLinear":
            continue
        q = users[0]
        dqs = readers_of(q.output[0])
        if len(dqs) != 1 or dqs[0].op_type != "DequantizeLinear" or dqs[0].output[0] in outputs:
            continue
        if readers is not None and any(r.op_type not in readers for r in readers_of(dqs[0].output[0])):
            continue
        own = params(q)
        if own is None or params(dqs[0]) != own or q.output[0] in outputs:
            continue
        sources = [producers.get(name) for name in n.input]
        if all(s is not None and s.op_type == "DequantizeLinear" and params(s) == own for s in sources):
            dropped[dqs[0].output[0]] = n.output[0]
            pairs |= {id(q), id(dqs[0])}
    if not dropped:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    for n in proto.graph.node:
        if id(n) in pairs:
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        for i, name in enumerate(copy.input):
            copy.input[i] = dropped.get(name, name)
        out.graph.node.append(copy)
    read = {name for n in out.graph.node for name in n.input}
    if not any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in out.graph.node
        for a in n.attribute
    ):
        kept = [t for t in proto.graph.initializer if t.name in read or t.name in outputs]
        del out.graph.initializer[:]
        out.graph.initializer.extend(kept)
    return out


def float16_rounded(proto: onnx.ModelProto, min_elements: int = 0) -> onnx.ModelProto:
    """``proto`` with every float32 constant of at least ``min_elements`` values whose values fit float16
    rounded to float16 (and kept float32): the fp16 recipe's own numerics, float compute on float16 weights."""
    from onnx import numpy_helper

    half_max = float(np.finfo(np.float16).max)

    def rounded(tensor: onnx.TensorProto) -> onnx.TensorProto | None:
        if tensor.data_type != onnx.TensorProto.FLOAT or tensor.data_location == onnx.TensorProto.EXTERNAL:
            return None
        array = numpy_helper.to_array(tensor)
        if array.size < max(min_elements, 1) or float(np.abs(array).max()) > half_max:
            return None
        return numpy_helper.from_array(array.astype(np.float16).astype(np.float32), tensor.name)

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for i, init in enumerate(out.graph.initializer):
        if (new := rounded(init)) is not None:
            out.graph.initializer[i].CopyFrom(new)
    for node in out.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value" and (new := rounded(attr.t)) is not None:
                    attr.t.CopyFrom(new)
    return out


def for_openvino(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` as edgekit hands models to OpenVINO: :func:`~edgekit.core.unsigned.unsigned_activations`,
    :func:`pad_before_dequantize`, :func:`concat_and_gather_forms` (four rewrites the host runner's form makes
    too), :func:`antialias_resizes_as_matmuls`,
    :func:`~edgekit.core.ov_conv1d.grouped_conv1d_as_2d` and
    :func:`~edgekit.core.ov_matmul.constant_first_matmuls_swapped` (the same values, around eight OpenVINO 2026.4
    problems), and :func:`~edgekit.core.ov_nms.nms_bar_as_onnx` (ONNX's IoU bar)."""
    from edgekit.core.ov_conv1d import grouped_conv1d_as_2d
    from edgekit.core.ov_matmul import constant_first_matmuls_swapped
    from edgekit.core.ov_nms import nms_bar_as_onnx

    proto = grouped_conv1d_as_2d(pad_before_dequantize(unsigned_activations(nms_bar_as_onnx(proto))))
    proto = concat_and_gather_forms(proto)
    return antialias_resizes_as_matmuls(constant_first_matmuls_swapped(proto))  # its H-axis MatMuls run right


def concat_and_gather_forms(proto: onnx.ModelProto, keep: Iterable[str] = ()) -> onnx.ModelProto:
    """The rewrites of :func:`for_openvino` that the host runner's form
    (:func:`edgekit.core.runtime.runner_form`) makes too, in their order: :func:`drop_concat_identity_qdq` (the
    tensors ``keep`` stay), :func:`~edgekit.core.ov_gather.gather_elements_data_cropped`,
    :func:`sliced_gather_elements_apart`, :func:`scalar_gathers_squeezed`."""
    from edgekit.core.ov_gather import gather_elements_data_cropped

    proto = gather_elements_data_cropped(drop_concat_identity_qdq(proto, keep=keep))
    return scalar_gathers_squeezed(sliced_gather_elements_apart(proto))


def _resize_matrix(
    node: onnx.NodeProto, opset: int, size: int, scale, out_size: int, axis: int
) -> np.ndarray:
    """The [size, out_size] matrix ``M`` of ``node``'s 1-D resize along one axis (a Resize is separable and
    linear): ``y = x @ M`` along that axis, from the onnx reference evaluator on the unit vectors."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    shape = [1, size, 1, 1]
    shape[2 + axis] = size
    basis = np.eye(size, dtype=np.float32).reshape(shape)  # channel i: the i-th unit vector along the axis
    ones, dims = [1.0, 1.0, 1.0, 1.0], [1, size, 1, 1]
    ones[2 + axis], dims[2 + axis] = 1.0 if scale is None else float(scale), out_size
    inputs = ["x", "", "scales", ""] if scale is not None else ["x", "", "", "sizes"]
    attrs = [a for a in node.attribute]
    one = helper.make_node("Resize", inputs, ["y"])
    one.attribute.extend(attrs)
    inits = [onnx.numpy_helper.from_array(np.array(ones, np.float32), "scales")]
    inits.append(onnx.numpy_helper.from_array(np.array(dims, np.int64), "sizes"))
    graph = helper.make_graph(
        [one], "axis", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    (y,) = ReferenceEvaluator(model).run(None, {"x": basis})
    return np.asarray(y, np.float32).reshape(size, out_size)


def antialias_resizes_as_matmuls(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each antialiased linear/cubic Resize (opset 18: ``F.interpolate(...,
    antialias=True)``) of a static 4-D tensor over H and W is two MatMuls by constant matrices (the resize along
    W, then along H): the same values.

    OpenVINO 2026.4's Interpolate with ``antialias`` is far from ONNX's definition (a 2x bilinear downscale:
    0.43 of the output range from onnxruntime and the onnx reference evaluator, which agree to 6e-8): the host
    reference and the intel-vpu IR were both that wrong, so the FP16 IR still "passed" its verification
    (tests/test_runtime.py). Likewise any 4-D Resize with ``coordinate_transformation_mode`` ``half_pixel_symmetric``
    (opset 19), which OpenVINO's front end refuses ("this type of coordinate transformation mode is not
    supported"; round 21z). ``proto`` itself when it has none (or one whose shapes are not static).
    """
    found = [
        n
        for n in proto.graph.node
        if n.op_type == "Resize"
        and n.domain in ("", "ai.onnx")
        and (
            (_attr(n, "antialias", 0) and _attr(n, "mode", b"nearest") != b"nearest")
            or _attr(n, "coordinate_transformation_mode", b"half_pixel") == b"half_pixel_symmetric"
        )
        and _attr(n, "axes", None) is None
        and _attr(n, "coordinate_transformation_mode", b"half_pixel") != b"tf_crop_and_resize"
    ]
    if not found:
        return proto
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 18)
    typed = onnx.shape_inference.infer_shapes(proto).graph
    shapes = {
        v.name: [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]
        for v in [*typed.input, *typed.value_info, *typed.output]
        if v.type.tensor_type.HasField("shape")
    }
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    consts.update(
        {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in proto.graph.node
         if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    )  # fmt: skip
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes: list[onnx.NodeProto] = []
    done = {id(n) for n in found}
    for original, node in zip(proto.graph.node, out.graph.node, strict=True):
        rewritten = (
            _resize_as_matmuls(node, opset, shapes, consts, out.graph) if id(original) in done else None
        )
        nodes.extend(rewritten or [node])
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def _resize_as_matmuls(node, opset, shapes, consts, graph) -> list[onnx.NodeProto] | None:
    from onnx import helper

    x, y = node.input[0], node.output[0]
    shape_in, shape_out = shapes.get(x), shapes.get(y)
    if not shape_in or not shape_out or len(shape_in) != 4 or None in shape_in + shape_out:
        return None
    scales = consts.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if scales is None and not (len(node.input) > 3 and node.input[3] in consts):
        return None  # run-time scales or sizes
    if scales is not None and scales.size and np.any(scales[:2] != 1):
        return None
    if scales is not None and not scales.size:
        scales = None
    if shape_in[:2] != shape_out[:2]:
        return None
    made: list[onnx.NodeProto] = []
    value = x
    for axis, perm_first in ((1, False), (0, True)):  # W, then H
        size, out_size = shape_in[2 + axis], shape_out[2 + axis]
        scale = None if scales is None else scales[2 + axis]
        if size == out_size and (scale is None or scale == 1):
            continue
        matrix = _resize_matrix(node, opset, size, scale, out_size, axis)
        name = f"{y}/antialias_{'hw'[axis]}"
        const = onnx.numpy_helper.from_array(matrix.T.copy() if perm_first else matrix, name + "_matrix")
        graph.initializer.append(const)
        pair = [const.name, value] if perm_first else [value, const.name]
        made.append(helper.make_node("MatMul", pair, [name], name=name))
        value = name
    if not made:
        return None
    made[-1].output[0] = y
    return made


#: The readers of a Concat's identity Q/DQ pair that :func:`portable_qdq` drops the pair for: OpenVINO 2026.4's
#: CPU plugin crashes on Concat -> FakeQuantize -> Relu/Clip -> FakeQuantize of another range (RetinaFace's SSH
#: modules, BlazeFace's clamped scores); before a Conv, MatMul, ... the pair stays (onnxruntime's int8 kernels
#: need it there).
PORTABLE_DROP_READERS = frozenset({"Relu", "Clip"})


def portable_qdq(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The QDQ file ``edgekit quantize`` writes: ``proto`` with the rewrites OpenVINO needs where onnxruntime loses
    nothing by them (the same values): a Concat's identity pair dropped before a Relu/Clip
    (:data:`PORTABLE_DROP_READERS`) and 0-d-index Gathers as Gather + Squeeze (:func:`scalar_gathers_squeezed`).
    The file as given then compiles in OpenVINO instead of crashing it (tests/test_portable_qdq.py);
    :func:`concat_pairs_restored` undoes the first when the file is loaded again."""
    return scalar_gathers_squeezed(drop_concat_identity_qdq(proto, readers=PORTABLE_DROP_READERS))


def concat_pairs_restored(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where a Concat whose inputs are all DequantizeLinear of one per-tensor grid and whose
    output has no QuantizeLinear of its own gets the identity Q/DQ pair on that grid (each value already lies on
    it): the converse of :func:`drop_concat_identity_qdq`, so that a file written by :func:`portable_qdq` converts
    to an integer CONCATENATION again. ``proto`` itself when there is nothing to restore."""
    if not any(n.op_type == "DequantizeLinear" for n in proto.graph.node):  # every float model loaded
        return proto
    inits, producers, reading = graph_index(proto)
    outputs = {o.name for o in proto.graph.output}

    def grid(name: str) -> tuple[str, str, tuple] | None:
        """(scale name, zero point name, the grid) of the per-tensor DequantizeLinear writing ``name``."""
        dq = producers.get(name)
        own = _per_tensor_grid(dq, inits) if dq is not None and dq.op_type == "DequantizeLinear" else None
        return None if own is None else (dq.input[1], dq.input[2], own)

    restore: dict[str, tuple[str, str]] = {}  # Concat output -> (scale, zero point) names
    for n in proto.graph.node:
        if n.op_type != "Concat" or n.domain not in ("", "ai.onnx") or n.output[0] in outputs:
            continue
        users = reading.get(n.output[0], [])
        if not users or any(u.op_type == "QuantizeLinear" for u in users):
            continue
        grids = [grid(name) for name in n.input]
        if grids[0] is None or any(g is None or g[2] != grids[0][2] for g in grids):
            continue
        restore[n.output[0]] = grids[0][:2]
    if not restore:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    del out.graph.node[:]
    renamed = {name: f"{name}/requantized" for name in restore}
    for n in proto.graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        for i, name in enumerate(copy.input):
            copy.input[i] = renamed.get(name, name)
        out.graph.node.append(copy)
        if n.op_type == "Concat" and n.output[0] in restore:
            scale, zero = restore[n.output[0]]
            quantized = f"{n.output[0]}/quantized"
            out.graph.node.append(
                onnx.helper.make_node(
                    "QuantizeLinear", [n.output[0], scale, zero], [quantized], name=quantized
                )
            )
            out.graph.node.append(
                onnx.helper.make_node(
                    "DequantizeLinear",
                    [quantized, scale, zero],
                    [renamed[n.output[0]]],
                    name=renamed[n.output[0]],
                )
            )
    return out


def sliced_gather_elements_apart(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each GatherElements reading a Slice or Split output reads it through
    ``Max(t, t)`` (= t, NaN included): the same values.

    OpenVINO 2026.4's CPU plugin compiles a GatherElements right after a Slice against the tensor before the
    Slice and fails (``gather_elements_shape_inference.hpp``: ``output_shape.merge_into(output_shape,
    indices_pshape)``, e.g. "Shapes [1,768,7] and [1,10,4] are not consistent"): a detector's decode
    ``torch.gather(boxes[..., :4], 1, top_k_index)`` exports that way (``tests/test_runtime.py``). An op between
    them avoids it; Identity, Cast, Mul by 1 and Add of 0 are optimized away first, Max(t, t) is not.
    ``proto`` itself when there is nothing to rewrite.
    """
    from onnx import helper

    producers = {o: n.op_type for n in proto.graph.node for o in n.output}
    found = [
        i
        for i, n in enumerate(proto.graph.node)
        if n.op_type == "GatherElements"
        and n.domain in ("", "ai.onnx")
        and producers.get(n.input[0]) in ("Slice", "Split")
    ]
    if not found:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = list(out.graph.node)
    for i in reversed(found):
        gather = nodes[i]
        apart = gather.output[0] + "/data"
        nodes.insert(i, helper.make_node("Max", [gather.input[0], gather.input[0]], [apart], name=apart))
        gather.input[0] = apart
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def scalar_gathers_squeezed(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of a quantized ``proto`` where each Gather with a constant 0-d index (``t[..., i]``: it removes
    the axis) gathers ``[i]`` instead and squeezes that axis: the same values.

    OpenVINO 2026.4's low-precision transformations move a dequantization below a Gather
    (``low_precision/gather.cpp``, ``gatherDeqConstant``) and keep its constant as it is when the constant is
    1 on the gathered axis, whatever the Gather does to the rank: a Concat of two quantized tensors is dequantized
    per position along the Concat's axis ([1, 896, 1]), and ``t[..., 0]`` of it ([1, 896]) multiplied by that
    constant broadcast to [1, 896, 896] (BlazeFace's anchor decode: "Shape inference input shapes
    {[1,896,896],[3]}" in ``compile_model`` and ``query_model``). Gathering ``[i]`` keeps the rank, and the
    dequantization moves through the Squeeze correctly (``tests/test_runtime.py``). ``proto`` itself when it has
    no activation QuantizeLinear or no such Gather.
    """
    from onnx import helper

    if not any(n.op_type == "QuantizeLinear" for n in proto.graph.node):
        return proto
    producers = {o: n.op_type for n in proto.graph.node for o in n.output}
    scalars = {t.name: t for t in proto.graph.initializer if not t.dims}
    for n in proto.graph.node:
        if (
            n.op_type == "Constant"
            and n.attribute
            and n.attribute[0].name == "value"
            and not n.attribute[0].t.dims
        ):
            scalars[n.output[0]] = n.attribute[0].t
    found = [
        i
        for i, n in enumerate(proto.graph.node)
        if n.op_type == "Gather"
        and n.domain in ("", "ai.onnx")
        and n.input[1] in scalars
        and producers.get(n.input[0]) != "Shape"  # shape arithmetic: never dequantized
    ]
    if not found:
        return proto
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = list(out.graph.node)
    for i in reversed(found):
        gather = nodes[i]
        axis = _attr(gather, "axis", 0)
        base = f"{gather.output[0]}/kept_rank"
        index = onnx.numpy_helper.to_array(scalars[gather.input[1]]).reshape(1)
        out.graph.initializer.append(onnx.numpy_helper.from_array(index, f"{base}_index"))
        squeezed = gather.output[0]
        gather.input[1], gather.output[0] = f"{base}_index", base
        if opset >= 13:
            axes = onnx.numpy_helper.from_array(np.array([axis], np.int64), f"{base}_axes")
            out.graph.initializer.append(axes)
            squeeze = helper.make_node("Squeeze", [base, axes.name], [squeezed], name=base)
        else:
            squeeze = helper.make_node("Squeeze", [base], [squeezed], name=base, axes=[axis])
        nodes.insert(i + 1, squeeze)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def tabulate_elementwise(proto: onnx.ModelProto, keep: Iterable[str] = ()) -> onnx.ModelProto:
    """A copy of ``proto`` where each DequantizeLinear -> element-wise op -> QuantizeLinear (per tensor, 8-bit
    activations; the ops of :data:`edgekit.core.lut.HOST_TABULATED`) is a ``Gather`` of the op's table, indexed by
    the integer input: exactly what the three nodes compute.

    OpenVINO 2026.4 rewrites HardSigmoid and HardSwish into its own float formulas, which round some values one
    step away from the QDQ model's (7 % of a MobileNetV3 squeeze-excite gate); the int8 TFLite (a table too) and
    onnxruntime give the exact value. ``proto`` itself when there is nothing to tabulate. An op whose float output
    is a graph output or in ``keep`` (outputs a caller will ask for) stays.
    """
    from edgekit.core import lut

    inits, producers, readers = graph_index(proto)
    outputs = {o.name for o in proto.graph.output} | set(keep)

    def scalar(name: str) -> np.ndarray | None:
        t = inits.get(name)
        return None if t is None or int(np.prod(t.dims)) != 1 else onnx.numpy_helper.to_array(t).reshape(())

    found = []
    for n in proto.graph.node:
        if n.op_type not in lut.HOST_TABULATED or n.domain not in ("", "ai.onnx") or n.output[0] in outputs:
            continue
        dq, users = producers.get(n.input[0]), readers.get(n.output[0], [])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] in inits or len(users) != 1:
            continue
        q = users[0]
        if q.op_type != "QuantizeLinear" or len(dq.input) < 3 or len(q.input) < 3:
            continue
        params = [scalar(name) for name in (dq.input[1], dq.input[2], q.input[1], q.input[2])]
        if any(v is None for v in params):
            continue
        x_scale, x_zero, y_scale, y_zero = params
        if x_zero.dtype not in (np.int8, np.uint8) or y_zero.dtype not in (np.int8, np.uint8):
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        x_params = (float(x_scale), int(x_zero), x_zero.dtype)
        values = lut.table(n.op_type, attrs, *x_params, float(y_scale), int(y_zero), y_zero.dtype)
        found.append((n, q, dq.input[0], values, lut.index_offset(x_zero.dtype)))
    if not found:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    tabulated = {id(n): (q, x, values, offset) for n, q, x, values, offset in found}
    quantizers = {id(q) for _, q, _, _, _ in found}
    nodes = []
    for i, n in enumerate(proto.graph.node):
        if id(n) in quantizers:
            continue
        if id(n) not in tabulated:
            nodes.append(n)
            continue
        q, x, values, offset = tabulated[id(n)]
        base = f"{q.output[0]}__table{i}"
        out.graph.initializer.extend(
            [
                onnx.numpy_helper.from_array(values, f"{base}_values"),
                onnx.numpy_helper.from_array(np.array(offset, np.int32), f"{base}_offset"),
            ]
        )
        nodes += [
            onnx.helper.make_node("Cast", [x], [f"{base}_levels"], to=onnx.TensorProto.INT32),
            onnx.helper.make_node("Add", [f"{base}_levels", f"{base}_offset"], [f"{base}_index"]),
            onnx.helper.make_node("Gather", [f"{base}_values", f"{base}_index"], list(q.output), axis=0),
        ]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def exact_input_quantize(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each per-tensor 8-bit QuantizeLinear of a graph input is ONNX's definition
    written out: ``Clip(Round(x / scale) + zero_point)`` (Round: half to even), then Cast.

    OpenVINO 2026.4 runs QuantizeLinear as a FakeQuantize, whose float formula rounds values that lie within
    float noise of a half step the other way from ``x / scale``. Model inputs often do: pixels normalised with
    mean 0.5 and std 0.5 (PaddleOCR) are ``p * 2/255 - 1``, half a step of the 2/255 scale off the grid, and put
    the exact reference one step off onnxruntime and LiteRT on a fifth of the pixels. ``proto`` itself when no such
    QuantizeLinear reads a graph input.
    """
    inputs = {i.name for i in proto.graph.input} - {t.name for t in proto.graph.initializer}
    sizes = {t.name: int(np.prod(t.dims)) for t in proto.graph.initializer}
    dtypes = {t.name: t.data_type for t in proto.graph.initializer}
    eight_bit = {onnx.TensorProto.INT8: (-128, 127), onnx.TensorProto.UINT8: (0, 255)}
    found = [
        n
        for n in proto.graph.node
        if n.op_type == "QuantizeLinear"
        and n.domain in ("", "ai.onnx")
        and n.input[0] in inputs
        and len(n.input) > 2
        and sizes.get(n.input[1]) == 1
        and sizes.get(n.input[2]) == 1
        and dtypes.get(n.input[2]) in eight_bit
    ]
    if not found:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = []
    for i, n in enumerate(proto.graph.node):
        if not any(n is f for f in found):
            nodes.append(n)
            continue
        base = f"{n.output[0]}__exact{i}"
        low, high = eight_bit[dtypes[n.input[2]]]
        out.graph.initializer.extend(
            [
                onnx.numpy_helper.from_array(np.array(low, np.float32), f"{base}_low"),
                onnx.numpy_helper.from_array(np.array(high, np.float32), f"{base}_high"),
            ]
        )
        helper = onnx.helper
        nodes += [
            helper.make_node("Div", [n.input[0], n.input[1]], [f"{base}_scaled"]),
            helper.make_node("Round", [f"{base}_scaled"], [f"{base}_rounded"]),
            helper.make_node("Cast", [n.input[2]], [f"{base}_zero"], to=onnx.TensorProto.FLOAT),
            helper.make_node("Add", [f"{base}_rounded", f"{base}_zero"], [f"{base}_shifted"]),
            helper.make_node("Clip", [f"{base}_shifted", f"{base}_low", f"{base}_high"], [f"{base}_clipped"]),
            helper.make_node("Cast", [f"{base}_clipped"], list(n.output), to=dtypes[n.input[2]]),
        ]
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def dequantized_constant(node: onnx.NodeProto, inits: Mapping[str, onnx.TensorProto]) -> onnx.TensorProto:
    """The values of a DequantizeLinear ``node`` of constant inputs (``inits``): a float32 tensor named after its
    output (per tensor or along ``axis``; not blockwise)."""
    x = onnx.numpy_helper.to_array(inits[node.input[0]])
    # Integers of up to 16 bits minus their zero point are exact in float32, and one float32 product of two exact
    # operands rounds as its float64 product then rounded does: the same values, 3x faster (every candidate of the
    # accuracy search folds its weights). Wider integers (int32 biases) go through float64.
    wide = np.float32 if x.dtype.itemsize <= 2 else np.float64
    x = x.astype(wide)
    scale = onnx.numpy_helper.to_array(inits[node.input[1]]).astype(wide)
    zero = (
        onnx.numpy_helper.to_array(inits[node.input[2]]).astype(wide)
        if len(node.input) > 2 and node.input[2]
        else np.zeros_like(scale)
    )
    if scale.ndim == 1 and x.ndim > 0:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1) % x.ndim
        shape = [1] * x.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    value = ((x - zero) * scale).astype(np.float32)
    return onnx.numpy_helper.from_array(value, node.output[0])
