"""Element-wise ops on a quantized tensor as lookup tables: the exact QDQ semantics of DQ -> op -> Q.

``QuantizeLinear(op(DequantizeLinear(q)))`` of a one-input element-wise op depends on the 256 values of ``q`` only,
so a table of 256 entries computes it exactly, whatever the scales. Two places use the same tables (one rule):

- the TFLite converter writes HardSwish and LeakyRelu on int8 as CAST -> ADD -> GATHER of their table
  (``targets/tflite/quantized.py``): TFLite's HARD_SWISH kernel approximates in 16-bit fixed point and rounded
  0.3 % of a MobileNetV3's values one step off the QDQ model's; XNNPACK's int8 LEAKY_RELU multiplies with 8
  fractional bits (0.1875 for 0.18865) and rounded 3 % of NanoDet-Plus' first LeakyReLU's outputs one step off;
  likewise Sigmoid and Tanh whose output scale is not their kernel's fixed one (LOGISTIC at 1/256 then a
  requantize rounds twice), and every int8 -> int8 requantize (``Identity``: XNNPACK's multiplier has 8 fractional
  bits; 2.5 % of YOLOv8n's first Concat one step off);
- the host runner's exact QDQ semantics (``edgekit.core.runtime.HostRunner``) runs these ops as ``Gather`` of their
  table: OpenVINO rewrites HardSigmoid / HardSwish into its own float formulas, which round differently.

The function is evaluated in float32 as onnxruntime does, rounded half to even (QuantizeLinear), saturated.
Numpy only (a core module, docs/architecture.md floor 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def _hard_sigmoid(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.minimum(np.maximum(x * np.float32(alpha) + np.float32(beta), np.float32(0)), np.float32(1))


#: ONNX op -> its function on float32 inputs (attributes as a name -> value mapping), in float32 arithmetic as
#: onnxruntime computes it: the tables equal onnxruntime's answers for every level (tests/test_lut.py checks
#: random scales). Only ops an integer runtime or OpenVINO compute differently (see the module docstring).
FUNCTIONS: dict[str, Callable[[np.ndarray, Mapping[str, Any]], np.ndarray]] = {
    "HardSwish": lambda x, a: x * _hard_sigmoid(x, 1 / 6, 0.5),
    "HardSigmoid": lambda x, a: _hard_sigmoid(x, float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))),
    "Identity": lambda x, a: x,
    "Sigmoid": lambda x, a: np.float32(1) / (np.float32(1) + np.exp(-x)),
    "Tanh": lambda x, a: np.tanh(x),
    "LeakyRelu": lambda x, a: np.where(x >= 0, x, x * np.float32(a.get("alpha", 0.01))),
    # one table per slope value (the converter's per-channel PRELU: its ``slope`` input, not an attribute)
    "PRelu": lambda x, a: np.where(x >= 0, x, x * np.float32(a["slope"])),
}
#: The ops the host runner's exact form tabulates (OpenVINO's own formulas round them differently); the others
#: are the TFLite converter's only: Sigmoid and Tanh at an output scale their kernel does not write, and Identity
#: (an int8 -> int8 requantize, which XNNPACK computes with an 8-bit fractional multiplier).
HOST_TABULATED = frozenset({"HardSwish", "HardSigmoid", "LeakyRelu"})


def table(
    op_type: str,
    attrs: Mapping[str, Any],
    x_scale: float,
    x_zero_point: int,
    x_dtype: np.dtype | type,
    y_scale: float,
    y_zero_point: int,
    y_dtype: np.dtype | type,
) -> np.ndarray:
    """The ``y_dtype`` outputs of ``op_type`` for every input level, from the lowest (-128 or 0) up."""
    x_info, y_info = np.iinfo(np.dtype(x_dtype)), np.iinfo(np.dtype(y_dtype))
    levels = np.arange(x_info.min, x_info.max + 1, dtype=np.int32)
    x = (levels - np.int32(x_zero_point)).astype(np.float32) * np.float32(x_scale)  # DequantizeLinear
    y = FUNCTIONS[op_type](x, attrs).astype(np.float32)
    q = np.rint(y / np.float32(y_scale)) + np.float32(y_zero_point)  # QuantizeLinear: half to even, saturate
    return np.clip(q, y_info.min, y_info.max).astype(np.dtype(y_dtype))


def index_offset(x_dtype: np.dtype | type) -> int:
    """What to add to an input level to index its table (128 for int8, 0 for uint8)."""
    return -int(np.iinfo(np.dtype(x_dtype)).min)
