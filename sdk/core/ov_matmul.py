"""MatMuls whose first input is a constant, swapped for OpenVINO (an ONNX rewrite, no runtime imported here).

OpenVINO 2026.4's CPU plugin runs an FP16-compressed IR wrong from its second inference on when an attention's
query is a learned constant: ``nn.MultiheadAttention(probe, x, x)`` (SigLIP's pooling head, Mask2Former's queries),
once edgekit has folded the probe's projection, is ``MatMul(constant Q, K^T)``. The first inference matches the
source model; every later one is 0.46-0.85 of the output range off (round 14v). The FP32 IR, self-attention and
the same MatMul alone are right. ``A @ B`` written as ``(B^T @ A^T)^T`` (the constant second, as weights are) holds
the same values and runs right (``tests/targets/test_ov_matmul.py``).
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.qdq_forms import graph_index
from onnx import helper, numpy_helper


def _ranks(proto: onnx.ModelProto) -> dict[str, int]:
    """The declared rank of each graph input, output and annotated value."""
    ranks = {}
    for v in [*proto.graph.input, *proto.graph.output, *proto.graph.value_info]:
        t = v.type.tensor_type
        if v.type.HasField("tensor_type") and t.HasField("shape"):
            ranks[v.name] = len(t.shape.dim)
    return ranks


def _swap_last(rank: int) -> list[int]:
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return perm


def constant_first_matmuls_swapped(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` where each MatMul of a float32 constant ``A`` (rank >= 2, an initializer) and a computed
    ``B`` (rank >= 2) is ``Transpose(MatMul(Transpose(B), A^T))``, the last two axes swapped each time: the same
    values. ``A^T`` is a new initializer (``A`` stays while something else reads it). ``proto`` itself when it has
    no such MatMul."""
    inits, _, _ = graph_index(proto)
    ranks = _ranks(proto)
    found = []
    for i, n in enumerate(proto.graph.node):
        if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx"):
            continue
        a = inits.get(n.input[0])
        if a is None or n.input[1] in inits or a.data_type != onnx.TensorProto.FLOAT or len(a.dims) < 2:
            continue
        if ranks.get(n.input[1], 0) >= 2:
            found.append(i)
    if not found:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    nodes = list(out.graph.node)
    swapped: set[str] = set()
    for i in reversed(found):
        mm = nodes[i]
        a = numpy_helper.to_array(inits[mm.input[0]])
        rank_b = ranks[mm.input[1]]
        base = f"{mm.output[0]}/constant_second"
        out.graph.initializer.append(
            numpy_helper.from_array(np.ascontiguousarray(a.transpose(_swap_last(a.ndim))), f"{base}_a_t")
        )
        nodes[i : i + 1] = [
            helper.make_node(
                "Transpose", [mm.input[1]], [f"{base}_b_t"], name=f"{base}_b_t", perm=_swap_last(rank_b)
            ),
            helper.make_node("MatMul", [f"{base}_b_t", f"{base}_a_t"], [f"{base}_y_t"], name=f"{base}_mm"),
            helper.make_node(
                "Transpose",
                [f"{base}_y_t"],
                [mm.output[0]],
                name=mm.name or base,
                perm=_swap_last(max(a.ndim, rank_b)),
            ),
        ]
        swapped.add(mm.input[0])
    read = {name for n in nodes for name in n.input} | {o.name for o in out.graph.output}
    kept = [t for t in out.graph.initializer if t.name in read or t.name not in swapped]
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out
