"""edgekit: take a trained ONNX model to edge hardware and prove what it costs in accuracy."""

from __future__ import annotations

__version__ = "0.1.0"

from edgekit.errors import EdgekitError  # noqa: E402

__all__ = ["EdgekitError", "__version__"]
