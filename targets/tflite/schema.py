"""Thin helpers over the TFLite schema module that ai-edge-litert ships (``schema_py_generated``)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from ai_edge_litert import schema_py_generated as fb
from edgekit.core.errors import TargetError

__all__ = ["fb", "builtin_code", "options_type", "tensor_type", "activation_code"]

_TENSOR_TYPES: dict[np.dtype, int] = {
    np.dtype(np.float32): fb.TensorType.FLOAT32,
    np.dtype(np.float16): fb.TensorType.FLOAT16,
    np.dtype(np.int8): fb.TensorType.INT8,
    np.dtype(np.uint8): fb.TensorType.UINT8,
    np.dtype(np.int16): fb.TensorType.INT16,
    np.dtype(np.int32): fb.TensorType.INT32,
    np.dtype(np.int64): fb.TensorType.INT64,
    np.dtype(np.bool_): fb.TensorType.BOOL,
    np.dtype(ml_dtypes.int4): fb.TensorType.INT4,  # two per byte (writer.pack_int4)
}


def builtin_code(name: str) -> int:
    """The ``BuiltinOperator`` enum value of an op name such as ``"CONV_2D"``."""
    return getattr(fb.BuiltinOperator, name)


def options_type(options: object) -> int:
    """The ``BuiltinOptions`` union tag of an options object (``Conv2DOptionsT`` -> ``Conv2DOptions``)."""
    name = type(options).__name__
    assert name.endswith("T"), name
    return getattr(fb.BuiltinOptions, name[:-1])


def tensor_type(dtype: np.dtype, name: str = "") -> int:
    """The ``TensorType`` of a numpy dtype; one TFLite has no kernels for (float64, ...) is a typed refusal."""
    try:
        return _TENSOR_TYPES[np.dtype(dtype)]
    except KeyError:
        where = f"tensor {name!r} is " if name else ""
        raise TargetError(
            f"{where}{np.dtype(dtype).name}: TFLite kernels do not take this type "
            f"(they take {', '.join(sorted(d.name for d in _TENSOR_TYPES))}); export the model in float32"
        ) from None


def activation_code(name: str) -> int:
    """``ActivationFunctionType`` value of ``"NONE"``, ``"RELU"``, ``"RELU6"``, ``"RELU_N1_TO_1"``..."""
    return getattr(fb.ActivationFunctionType, name)
