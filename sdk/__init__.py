"""edgekit: take a trained ONNX model to edge hardware and prove what it costs in accuracy.

The public API is imported lazily so that ``edgekit.device_agents`` (which runs on small devices) does not pull in
onnx, openvino or the rest of edgekit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "DeployResult",
    "EdgekitError",
    "ImagePreprocess",
    "QuantizeOptions",
    "QuantizeResult",
    "__version__",
    "deploy",
    "quantize_model",
]

if TYPE_CHECKING:  # pragma: no cover
    from edgekit.api import QuantizeResult, quantize_model
    from edgekit.core.data import ImagePreprocess
    from edgekit.core.errors import EdgekitError
    from edgekit.deployment import DeployResult, deploy
    from edgekit.quantize.options import QuantizeOptions

_LAZY = {
    "deploy": "edgekit.deployment",
    "DeployResult": "edgekit.deployment",
    "EdgekitError": "edgekit.core.errors",
    "quantize_model": "edgekit.api",
    "QuantizeResult": "edgekit.api",
    "QuantizeOptions": "edgekit.quantize.options",
    "ImagePreprocess": "edgekit.core.data",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'edgekit' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
