"""Typed errors that users see as one clear line (the CLI maps each to exit code 2)."""

from __future__ import annotations


class EdgekitError(Exception):
    """Base class of every error edgekit reports to a user.

    The message is one line naming the problem; the CLI prints ``error: <message>`` and exits with
    ``exit_code``. Internal invariants use ``assert``; anything a user can cause raises one of these.
    """

    exit_code = 2


class ModelError(EdgekitError):
    """A model file is missing, not ONNX, corrupt, of an unsupported opset, or has unfixed dynamic dims."""


class DataError(EdgekitError):
    """Calibration or evaluation data is missing, empty, or does not match the model's inputs."""


class QuantizationError(EdgekitError):
    """The quantization pipeline cannot quantize the model as asked."""


class UnsupportedOpError(EdgekitError):
    """An op that a converter or target does not support."""

    def __init__(self, op_type: str, node: str, target: str, supported: list[str] | tuple[str, ...]):
        self.op_type = op_type
        self.node = node
        self.target = target
        self.supported = sorted(supported)
        super().__init__(
            f"unsupported op {op_type!r} (node {node!r}) for target {target!r}; "
            f"supported: {', '.join(self.supported)}"
        )


class TargetError(EdgekitError):
    """A target cannot package the model (failed checks, failed verification)."""


class OutputError(EdgekitError):
    """An output path cannot be written."""


class DeviceError(EdgekitError):
    """Devices cannot be named (a bad fleet file or device URL) or none is left to run a target."""
