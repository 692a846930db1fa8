"""Where a QDQ model's error against fp32 comes from: its quantization points switched on by group (dev tool; needs
onnxruntime).

    python benchmarks/qdq_noise.py model.onnx model.qdq.onnx data.npz [--input-shape x=1,3,320,320]
        [--samples 8] [--per-tensor conv,Mul]

The QDQ model runs in onnxruntime with graph optimizations off (DequantizeLinear -> float op -> QuantizeLinear,
no fused integer kernels) against the fp32 model, SQNR and cosine of the first output. Rows:

- ``all``: the QDQ model as written;
- ``weights only``: every activation QuantizeLinear -> DequantizeLinear pair bypassed (its readers read the float
  tensor): the integer weights and biases alone;
- ``only KIND``: the weights and the activations that ops of one kind produce (``conv`` a dense Conv,
  ``dwconv`` a grouped one, else the op type), the others bypassed;
- ``--per-tensor KINDS``: the weights and one activation, for each activation of those kinds: the noise power
  (relative to the output's) each adds over the weights alone, largest first.

Noise powers from independent points add roughly, so the rows say which layers and which kinds to fix.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx


def _session(proto: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _run(proto: onnx.ModelProto, data: dict[str, np.ndarray], count: int) -> np.ndarray:
    session = _session(proto)
    names = [i.name for i in session.get_inputs()]
    return np.concatenate(
        [session.run(None, {n: data[n][i : i + 1] for n in names})[0] for i in range(count)]
    )


def _figures(ref: np.ndarray, out: np.ndarray) -> tuple[float, float]:
    a, b = ref.astype(np.float64).ravel(), out.astype(np.float64).ravel()
    cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    return cosine, float(10 * np.log10(np.sum(a**2) / max(np.sum((a - b) ** 2), 1e-300)))


def _kind(node: onnx.NodeProto | None) -> str:
    if node is None:
        return "input"
    if node.op_type == "Conv":
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        return "dwconv" if group > 1 else "conv"
    return node.op_type


def activation_points(qdq: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    """Activation QuantizeLinear -> (the float tensor it quantizes, its producer's kind), keyed by the paired
    DequantizeLinear's output."""
    producers = {o: n for n in qdq.graph.node for o in n.output}
    constants = {i.name for i in qdq.graph.initializer}
    dq_of = {n.input[0]: n.output[0] for n in qdq.graph.node if n.op_type == "DequantizeLinear"}
    points = {}
    for node in qdq.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in constants or node.output[0] not in dq_of:
            continue
        producer = producers.get(node.input[0])
        if producer is not None and producer.op_type == "DequantizeLinear":
            continue  # a requantization
        points[dq_of[node.output[0]]] = (node.input[0], _kind(producer))
    return points


def bypassed(qdq: onnx.ModelProto, points: dict[str, tuple[str, str]], keep) -> onnx.ModelProto:
    """``qdq`` with every activation point for which ``keep(tensor, kind)`` is false bypassed."""
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    rename = {dq: tensor for dq, (tensor, kind) in points.items() if not keep(tensor, kind)}
    for node in out.graph.node:
        for k, name in enumerate(node.input):
            if name in rename:
                node.input[k] = rename[name]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("fp32", type=Path)
    parser.add_argument("qdq", type=Path)
    parser.add_argument("data", type=Path, help=".npz with the model's inputs (leading sample axis)")
    parser.add_argument(
        "--input-shape", action="append", default=[], help="NAME=1,3,H,W for a dynamic fp32 model"
    )
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--per-tensor", default="", help="comma-separated kinds to split per tensor")
    args = parser.parse_args()

    import onnx_ir as ir
    from edgekit.core.model import load_model

    shapes = {}
    for spec in args.input_shape:
        name, dims = spec.split("=")
        shapes[name] = tuple(int(d) for d in dims.split(","))
    fp32 = ir.to_proto(load_model(args.fp32, shapes or None))
    qdq = onnx.load(args.qdq)
    data = dict(np.load(args.data))
    count = min(args.samples, min(len(v) for v in data.values()))
    ref = _run(fp32, data, count)
    points = activation_points(qdq)

    def row(label: str, keep) -> float:
        cosine, sqnr = _figures(ref, _run(bypassed(qdq, points, keep), data, count))
        print(f"{label:40s} cos {cosine:.4f}  SQNR {sqnr:6.1f} dB", flush=True)
        return sqnr

    row(f"all ({len(points)} activation points)", lambda t, k: True)
    floor = row("weights only", lambda t, k: False)
    kinds = sorted({k for _, k in points.values()})
    for kind in kinds:
        n = sum(1 for _, k in points.values() if k == kind)
        row(f"only {kind} ({n})", lambda t, k, kind=kind: k == kind)
    split = {k for k in args.per_tensor.split(",") if k}
    if split:
        rows = []
        for tensor, kind in points.values():
            if kind in split:
                cosine, sqnr = _figures(
                    ref, _run(bypassed(qdq, points, lambda t, k, x=tensor: t == x), data, count)
                )
                rows.append((10 ** (-sqnr / 10) - 10 ** (-floor / 10), tensor, kind, sqnr))
        print("\nadded noise power (relative to the output's) over the weights alone, largest first:")
        for extra, tensor, kind, sqnr in sorted(rows, reverse=True)[:20]:
            print(f"  {kind:10s} {tensor:40s} {extra:+.4f}  ({sqnr:.1f} dB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
