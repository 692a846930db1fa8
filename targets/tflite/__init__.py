"""The direct ONNX -> TFLite converter behind the ``arm-cpu`` and ``nnapi`` targets.

``convert(model, ConvertOptions(...)) -> ConversionResult`` (``converter.py``); ``supported_ops()``
lists the ONNX op types it takes. Nothing heavy is imported here.
"""

from __future__ import annotations

from edgekit.targets.tflite.registry import supported_ops

__all__ = ["supported_ops"]
