"""Running a converted .tflite on LiteRT, and the source model on the host beside it.

:func:`reference_and_tflite` is what TFLite verification runs in a child process (:mod:`edgekit.core.isolated`):
this module imports only numpy, so the child starts fast (onnx, OpenVINO and LiteRT are imported when
called; onnx_ir, which the converter needs, is not imported at all).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from edgekit.core import isolated
from edgekit.core.errors import TargetError


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as the .tflite file has it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str | None  # "NHWC" / "NCHW" for image tensors
    onnx_to_tflite_perm: tuple[int, ...] | None  # transpose the ONNX tensor by this to get the TFLite one
    scale: float | None = None
    zero_point: int | None = None

    def to_tflite(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array, self.onnx_to_tflite_perm) if self.onnx_to_tflite_perm else array

    def to_onnx(self, array: np.ndarray) -> np.ndarray:
        if not self.onnx_to_tflite_perm:
            return array
        return np.transpose(array, np.argsort(self.onnx_to_tflite_perm))


def to_model_input(info: TensorInfo, array: np.ndarray) -> np.ndarray:
    array = info.to_tflite(array)
    if info.scale is not None and info.dtype in ("int8", "uint8"):
        limits = np.iinfo(np.dtype(info.dtype))
        array = np.clip(np.rint(array / info.scale) + info.zero_point, limits.min, limits.max)
    return array.astype(info.dtype)


def from_model_output(info: TensorInfo, array: np.ndarray) -> np.ndarray:
    if info.scale is not None and info.dtype in ("int8", "uint8"):
        array = (array.astype(np.float32) - info.zero_point) * np.float32(info.scale)
    return info.to_onnx(np.asarray(array))


def run_tflite_samples(
    data: bytes,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    samples: Sequence[Mapping[str, np.ndarray]],
    threads: int = 2,
) -> list[dict[str, np.ndarray]]:
    """Run the .tflite on each sample (ONNX-layout float feeds) with one interpreter; float outputs in the
    ONNX layout. In the calling process: a graph LiteRT aborts on takes it down."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data, num_threads=threads)
    interpreter.allocate_tensors()
    ins = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    outs = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    results = []
    for feeds in samples:
        for info in inputs:
            if info.name not in feeds:
                raise TargetError(f"verification sample has no input {info.name!r}")
            interpreter.set_tensor(ins[info.name], to_model_input(info, np.asarray(feeds[info.name])))
        interpreter.invoke()
        results.append(
            {info.name: from_model_output(info, interpreter.get_tensor(outs[info.name])) for info in outputs}
        )
    return results


def host_outputs(
    proto: bytes, samples: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], exact_qdq: bool = True
) -> list[dict[str, np.ndarray]]:
    """The outputs ``names`` of a serialized ONNX model on the host (OpenVINO f32), per sample.

    ``exact_qdq=False``: a QDQ model on OpenVINO's int8 kernels (see :class:`edgekit.core.runtime.HostRunner`).
    """
    import onnx
    from edgekit.core.runtime import HostRunner

    host = HostRunner(onnx.load_model_from_string(proto), exact_qdq=exact_qdq)
    return [_pick(host.run(dict(s)), names) for s in samples]


def exact_outputs(
    proto: bytes, samples: Sequence[Mapping[str, np.ndarray]], names: Sequence[str], jitter: float = 0.0
) -> list[dict[str, np.ndarray]]:
    """The outputs ``names`` of a serialized model computed in float64 (:mod:`edgekit.core.exact`: a QDQ model's
    exact semantics; a float model's values without float32 rounding), per sample; ``jitter``: with every value
    moved by up to that fraction before it is quantized (``ExactRunner``)."""
    import onnx
    from edgekit.core.exact import ExactRunner

    runner = ExactRunner(onnx.load_model_from_string(proto), names, jitter=jitter)
    return [_pick(runner.run(dict(s)), names) for s in samples]


def _pick(outputs: Mapping[str, np.ndarray], names: Sequence[str]) -> dict[str, np.ndarray]:
    """The arrays ``names`` of one run's outputs (one run per sample, not one per output)."""
    return {n: np.asarray(outputs[n]) for n in names}


#: What each verification reference is, as the report says it.
REFERENCES = {
    "host": "source ONNX model on the host (OpenVINO CPU, f32)",
    "exact": "the QDQ model's exact semantics (float64, onnx reference evaluator)",
}


def reference_and_tflite(
    proto: bytes,
    data: bytes,
    inputs: Sequence[TensorInfo],
    outputs: Sequence[TensorInfo],
    samples: Sequence[Mapping[str, np.ndarray]],
    reference: str = "host",
) -> tuple[list[dict[str, np.ndarray]], list[dict[str, np.ndarray]], str]:
    """The source model (serialized ONNX) as ``reference`` computes it (``host``: OpenVINO f32; ``exact``: an
    8-bit QDQ model's exact semantics, else the host when the model has an op the exact runner lacks) and the
    .tflite on LiteRT, per sample, and which reference ran (a key of :data:`REFERENCES`).

    Run in a child by ``edgekit.targets.tflite.package.verify``; says which runtime is at work
    (:func:`edgekit.core.isolated.stage`) so that a crash is attributed to the right one.
    """
    names = [info.name for info in outputs]
    results = None
    if reference == "exact":
        isolated.stage("the onnx reference evaluator", "running the QDQ model's exact semantics")
        try:
            results = exact_outputs(proto, samples, names)
        except (
            Exception
        ):  # an op the reference evaluator lacks or a semantics it cannot give: the host runs it
            reference, results = "host", None
    if results is None:
        isolated.stage("OpenVINO", "running the source model on the host")
        results = host_outputs(proto, samples, names)
    isolated.stage("LiteRT", "running the converted model")
    return results, run_tflite_samples(data, inputs, outputs, samples), reference
