"""Functions that tests/test_isolated.py runs in a child process (they must be importable by name)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
from edgekit.core.errors import UnsupportedOpError


def double(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    print("noise on stdout from a native library")  # must not corrupt the result
    return {k: v * 2 for k, v in arrays.items()}


def abort_after_message(message: str) -> None:
    sys.stderr.write("INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os.abort()


def raise_runtime_error() -> None:
    raise RuntimeError("tensorflow/lite/kernels/pad.cc:120 zero points differ\nNode number 1 (PAD) failed.\n")


def raise_typed() -> None:
    raise UnsupportedOpError("Foo", "node_7", "arm-cpu", ["Add", "Conv"])


def sleep_long() -> None:
    import time

    time.sleep(120)


def pid() -> int:
    return os.getpid()


def host_runner_outputs(proto: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A serialized ONNX model's outputs on edgekit's host runner (OpenVINO)."""
    import onnx
    from edgekit.core.runtime import HostRunner

    return {k: np.asarray(v) for k, v in HostRunner(onnx.load_model_from_string(proto)).run(inputs).items()}


def package_intel_vpu(model: bytes, out_dir: str) -> str:
    """The intel-vpu bundle of a serialized ONNX model (tests/targets/test_openvino_target.py)."""
    import onnx
    from edgekit.core.model import load_proto
    from edgekit.targets.base import PackageOptions, get_target

    return str(
        get_target("intel-vpu").package(
            load_proto(onnx.load_from_string(model)), Path(out_dir), PackageOptions()
        )
    )


def intel_vpu_check_as_written(model: bytes) -> str:
    """The intel-vpu target's check with ``query_model`` of a serialized ONNX model handed to OpenVINO as written (without
    ``for_openvino``'s rewrites): the typed error's message, or what the check returned."""
    import onnx
    from edgekit.core.errors import EdgekitError
    from edgekit.core.model import load_proto
    from edgekit.targets import openvino_ir
    from edgekit.targets.base import get_target

    openvino_ir.for_openvino = lambda proto: proto
    try:
        target = get_target("intel-vpu")
        return f"no error: {target.support_problems(load_proto(onnx.load_from_string(model)))}"
    except EdgekitError as exc:
        return str(exc)
