"""Host execution of ONNX models (fp32 and QDQ) on OpenVINO's CPU plugin in f32 precision.

Intermediate tensors are captured by adding them as graph outputs before compiling.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from edgekit.errors import DataError, ModelError

#: OpenVINO's CPU plugin runs bf16 on capable CPUs unless told otherwise (results drift by ~1e-3).
F32_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def _core():
    import openvino as ov

    return ov.Core()


def with_outputs(proto: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``proto`` that also outputs the tensors ``names``."""
    if not names:
        return proto
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    existing = {o.name for o in out.graph.output}
    types = {v.name: v for v in out.graph.value_info}
    for name in names:
        if name in existing:
            continue
        if name in types:
            out.graph.output.append(types[name])
        else:
            out.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
        existing.add(name)
    return out


class HostRunner:
    """Compile an ONNX model once and run it sample by sample."""

    def __init__(
        self,
        model: onnx.ModelProto | ir.Model,
        extra_outputs: Sequence[str] = (),
        *,
        threads: int | None = None,
    ):
        proto = ir.to_proto(model) if isinstance(model, ir.Model) else model
        proto = with_outputs(proto, list(extra_outputs))
        config = dict(F32_CONFIG)
        if threads:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        core = _core()
        with tempfile.TemporaryDirectory(prefix="edgekit-ov-") as tmp:
            path = Path(tmp, "model.onnx")
            path.write_bytes(proto.SerializeToString())
            try:
                ov_model = core.read_model(str(path))
                self._compiled = core.compile_model(ov_model, "CPU", config)
            except RuntimeError as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "unknown error"
                raise ModelError(f"OpenVINO cannot compile the model: {first}") from None
        self._request = self._compiled.create_infer_request()
        self.input_names = [i.get_any_name() for i in self._compiled.inputs]
        self._outputs = {}
        for port in self._compiled.outputs:
            for name in port.get_names():
                self._outputs[name] = port
        initializers = {t.name for t in proto.graph.initializer}
        self.output_names = [o.name for o in proto.graph.output]
        self._input_info = {
            i.name: tuple(d.dim_value for d in i.type.tensor_type.shape.dim)
            for i in proto.graph.input
            if i.name not in initializers
        }

    def run(self, feeds: Mapping[str, np.ndarray], *, copy: bool = True) -> dict[str, np.ndarray]:
        """Run one inference. With ``copy=False`` the arrays are views of the runtime's buffers, valid only until
        the next call."""
        missing = [n for n in self.input_names if n not in feeds]
        if missing:
            raise DataError(f"missing input(s) {missing}; the model's inputs are {self.input_names}")
        for name in self.input_names:
            expected = self._input_info.get(name)
            got = tuple(np.shape(feeds[name]))
            if expected and all(expected) and expected != got:
                raise DataError(f"input {name!r}: expected shape {list(expected)}, got {list(got)}")
        results = self._request.infer({n: np.ascontiguousarray(feeds[n]) for n in self.input_names})
        out: dict[str, np.ndarray] = {}
        for name in self.output_names:
            port = self._outputs.get(name)
            if port is None:
                raise ModelError(f"OpenVINO dropped output {name!r} of the compiled model")
            out[name] = np.array(results[port], copy=True) if copy else results[port]
        return out
