"""NonMaxSuppression's IoU bar as ONNX has it, for OpenVINO (an ONNX rewrite, no runtime imported here).

ONNX suppresses a box whose overlap with a kept one is above ``iou_threshold`` (onnxruntime and the onnx reference
evaluator keep a box exactly at it); OpenVINO 2026.4 suppresses it at the bar too. Overlaps exactly at the bar are
not rare: int8 boxes lie on a grid, and [0, 0, 2, 1] against [0, 0, 1, 1] is 0.5. The next float32 above the bar
keeps what ONNX keeps and suppresses everything else alike (``tests/targets/test_selection_tail.py``).
"""

from __future__ import annotations

import numpy as np
import onnx
from edgekit.core.qdq_forms import graph_index
from onnx import numpy_helper


def _constant(name: str, inits, producers) -> np.ndarray | None:
    if name in inits:
        return numpy_helper.to_array(inits[name])
    node = producers.get(name)
    if (
        node is not None
        and node.op_type == "Constant"
        and node.attribute
        and node.attribute[0].name == "value"
    ):
        return numpy_helper.to_array(node.attribute[0].t)
    return None


def nms_bar_as_onnx(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose NonMaxSuppression nodes with a constant float32 ``iou_threshold`` read the next
    float32 above it (a new initializer); ``proto`` itself when it has none."""
    inits, producers, _ = graph_index(proto)
    targets = [
        n
        for n in proto.graph.node
        if n.op_type == "NonMaxSuppression"
        and n.domain in ("", "ai.onnx")
        and len(n.input) > 3
        and n.input[3]
    ]
    bars = {n.name or n.output[0]: _constant(n.input[3], inits, producers) for n in targets}
    if not any(v is not None and v.dtype == np.float32 for v in bars.values()):
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for node in out.graph.node:
        bar = bars.get(node.name or node.output[0]) if node.op_type == "NonMaxSuppression" else None
        if bar is None or bar.dtype != np.float32:
            continue
        name = f"{node.input[3]}_above"
        if name not in inits:
            above = np.nextafter(bar, np.float32(np.inf)).astype(np.float32)
            out.graph.initializer.append(numpy_helper.from_array(above, name))
            inits[name] = out.graph.initializer[-1]
        node.input[3] = name
    return out
