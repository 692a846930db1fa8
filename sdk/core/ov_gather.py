"""GatherElements whose indices are smaller than the data off the gathered axis, for OpenVINO (an ONNX rewrite, no
runtime imported here).

ONNX's GatherElements takes indices of the data's rank whose dims off ``axis`` are at most the data's (torch's
``gather`` likewise: ``torch.gather(x, 1, idx)`` with ``idx`` narrower than ``x``); the output is the indices'
shape. OpenVINO 2026.4's ONNX front end refuses any such dim that differs ("Conversion is failed for:
GatherElements-13": ``gather_elements_shape_inference.hpp``, ``output_shape.merge_into(output_shape,
indices_pshape)``), so the model did not compile on the host or for intel-vpu (round 21z: 3 of 4 fuzzed
GatherElements). Only the data's leading ``indices.shape[d]`` rows of such an axis are ever read: a Slice of the
data to them gives the same values, and :func:`~edgekit.core.qdq_forms.sliced_gather_elements_apart`, which runs
after, reads that Slice through ``Max(t, t)`` (OpenVINO's other GatherElements-after-Slice failure).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _static_shapes(proto: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in proto.graph.initializer}
    for v in [*proto.graph.input, *proto.graph.value_info, *proto.graph.output]:
        t = v.type.tensor_type
        if (
            v.type.HasField("tensor_type")
            and t.HasField("shape")
            and all(d.HasField("dim_value") for d in t.shape.dim)
        ):
            shapes.setdefault(v.name, tuple(d.dim_value for d in t.shape.dim))
    for n in proto.graph.node:  # a Constant node's indices
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            shapes.setdefault(n.output[0], tuple(n.attribute[0].t.dims))
    return shapes


def gather_elements_data_cropped(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each GatherElements (static shapes) whose indices are smaller than its data on an
    axis other than ``axis`` reads ``Slice(data)`` cut to the indices' size there: the same values. ``proto``
    itself when there is none."""
    shapes = _static_shapes(proto)
    found: list[tuple[int, list[int], list[int]]] = []
    for i, n in enumerate(proto.graph.node):
        if n.op_type != "GatherElements" or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
            continue
        data, indices = shapes.get(n.input[0]), shapes.get(n.input[1])
        if data is None or indices is None or len(data) != len(indices) or not data:
            continue
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0) % len(data)
        axes = [d for d in range(len(data)) if d != axis and indices[d] < data[d]]
        if axes:
            found.append((i, axes, [indices[d] for d in axes]))
    if not found:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = list(out.graph.node)
    for i, axes, ends in reversed(found):
        gather = nodes[i]
        cropped = gather.output[0] + "/data_cropped"
        consts = {
            part: numpy_helper.from_array(np.asarray(values, np.int64), f"{cropped}/{part}")
            for part, values in (("starts", [0] * len(axes)), ("ends", ends), ("axes", axes))
        }
        out.graph.initializer.extend(consts.values())
        nodes.insert(
            i,
            helper.make_node(
                "Slice", [gather.input[0], *(c.name for c in consts.values())], [cropped], name=cropped
            ),
        )
        gather.input[0] = cropped
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
