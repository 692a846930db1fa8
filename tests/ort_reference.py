"""onnxruntime as the tests' reference: node by node, graph optimizations off.

With its optimizations on, onnxruntime fuses Q/DQ pairs into integer kernels whose u8 x s8 products
saturate on x86 CPUs without VNNI (it ran the QDQ SqueezeNet at 62.5 % top-1 instead of 68.0 % there).
Node by node is a QDQ model's exact semantics, and the same as fused for a float model.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort


def node_by_node(model: onnx.ModelProto | str | Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def run_node_by_node(
    model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    return node_by_node(model).run(None, dict(feeds))
