"""Issue 12 probe round 12s: where OpenVINO runs a QDQ model differently from its definition, layer by layer.

    python benchmarks/zoo/probe_sequences2.py --only hubert_ctc          # -> benchmarks/.zoo/probe12a
    python benchmarks/zoo.py --manifest benchmarks/.zoo/probe12a/zoo.json --no-shared --workers 1 --calib 8 \\
        --eval 8 --only hubert_ctc_op14 --cases "intel-vpu int8,quantize" --work /tmp/w --json r.json
    python benchmarks/zoo/probe_ov_qdq.py /tmp/w/hubert_ctc_op14/quantize/model.qdq.onnx \\
        /tmp/w/data/hubert_ctc_op14.eval.npz [--raw] [--sample 0] [--all]

Every activation DequantizeLinear's output becomes a graph output; the model runs in onnxruntime without graph
optimisations (dequantize, float op, quantize: the QDQ model's definition) and in OpenVINO's CPU plugin (f32
inference precision: its int8 kernels, as the intel-vpu target's IR runs). Prints the cosine and the largest
difference in output steps per tensor, the first one below 0.999 marked. By default the model is first put in the
form edgekit hands to OpenVINO (``edgekit.core.qdq_forms.for_openvino``); ``--raw`` gives OpenVINO the file as it is.
Not a benchmark of its own: the round's models are ``probe_sequences2.py``'s speech encoders.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
from edgekit.core.protoutil import with_outputs
from edgekit.core.qdq_forms import for_openvino


def activation_dequantized(proto: onnx.ModelProto) -> list[str]:
    constants = {t.name for t in proto.graph.initializer}
    return [
        n.output[0]
        for n in proto.graph.node
        if n.op_type == "DequantizeLinear" and n.input[0] not in constants
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", type=Path, help="a QDQ .onnx (edgekit quantize's output)")
    parser.add_argument(
        "data", type=Path, help=".npz of inputs, a leading sample axis (zoo.py --work DIR/data)"
    )
    parser.add_argument("--sample", type=int, default=0)
    parser.add_argument("--raw", action="store_true", help="OpenVINO gets the file as it is")
    parser.add_argument(
        "--all", action="store_true", help="every tensor, not only up to the first bad one + 5"
    )
    args = parser.parse_args(argv)

    proto = onnx.load(str(args.model))
    if not args.raw:
        proto = for_openvino(proto)
    names = activation_dequantized(proto)
    probed = with_outputs(proto, names)
    data = np.load(args.data)
    feeds = {k: data[k][args.sample] for k in data.files}
    dims = {i.name: len(i.type.tensor_type.shape.dim) for i in proto.graph.input}
    feeds = {k: v if v.ndim == dims.get(k, v.ndim) else v[None] for k, v in feeds.items()}

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probed.SerializeToString(), options, providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probed.onnx"
        onnx.save(probed, str(path))
        core = ov.Core()
        compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        result = compiled(feeds)
        got = {name: result[port] for port in compiled.outputs for name in port.get_names()}

    producers = {o: n for n in proto.graph.node for o in n.output}
    scales = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    first_bad, shown = None, 0
    for name in [*names, *(o.name for o in proto.graph.output if o.name not in names)]:
        a, b = want[name].astype(np.float64).ravel(), got[name].astype(np.float64).ravel()
        cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))
        dq = producers.get(name)
        step = scales.get(dq.input[1]) if dq is not None and dq.op_type == "DequantizeLinear" else None
        quantize = producers.get(dq.input[0]) if dq is not None else None
        op = producers.get(quantize.input[0]) if quantize is not None and quantize.input else None
        steps = np.abs(a - b).max() / float(np.max(step)) if step is not None else float("nan")
        mark = ""
        if cosine < 0.999 and first_bad is None:
            first_bad, mark = name, "  <-- first below 0.999"
        print(f"{cosine:9.5f}  {steps:8.1f} steps  {op.op_type if op else '-':>12}  {name}{mark}")
        shown += first_bad is not None
        if first_bad is not None and shown > 5 and not args.all:
            break
    print(f"first divergent tensor: {first_bad or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
