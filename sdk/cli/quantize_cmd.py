"""``edgekit quantize``."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    app.command("quantize")(quantize)


def quantize() -> None:
    """Calibrated int8 post-training quantization of an ONNX model (QDQ ONNX out)."""
    raise NotImplementedError
