"""Trace an int8 TFLite against its own QDQ model, layer by layer (dev tool; needs onnxruntime).

    python benchmarks/int8_trace.py model.qdq.onnx model.tflite data.npz [--samples 4] [--all]

For every quantized activation of the QDQ model (a QuantizeLinear output) that the TFLite keeps under the same
name, two figures in integer steps:

- ``run``: the TFLite's tensor (LiteRT, ``experimental_preserve_all_tensors``) against onnxruntime running the
  whole QDQ model node by node: where the two first part, and how the difference grows;
- ``local``: the same layer alone (the QDQ nodes from the quantized tensors it reads to the one it writes, cut out
  with ``onnx.utils.Extractor``) run by onnxruntime on the TFLite's own input tensors: what this layer's kernel
  adds by itself. A kernel that computes differently from DQ -> float op -> Q shows here, whatever came before.

Then the local figures per op kind. Rank-4 tensors are compared in the ONNX layout (NHWC TFLite tensors are
transposed when the shapes say so).
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np


def to_onnx_layout(a: np.ndarray, shape) -> np.ndarray:
    shape = tuple(int(d) for d in shape)
    if a.ndim != 4:
        return a.reshape(shape) if a.size == int(np.prod(shape)) else a
    nhwc = (shape[0], shape[2], shape[3], shape[1])
    if a.shape == shape and a.shape != nhwc:
        return a
    return a.transpose(0, 3, 1, 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("qdq", type=Path)
    parser.add_argument("tflite", type=Path)
    parser.add_argument("data", type=Path, help=".npz with the model's inputs (leading sample axis)")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--all", action="store_true", help="print layers that agree too")
    args = parser.parse_args()

    import onnx
    import onnxruntime as ort
    from ai_edge_litert.interpreter import Interpreter

    model = onnx.shape_inference.infer_shapes(onnx.load(str(args.qdq)))
    graph = model.graph
    inits = {t.name for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    quantized = [n.output[0] for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] not in inits]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    whole = onnx.ModelProto()
    whole.CopyFrom(model)
    for name in quantized:
        whole.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    session = ort.InferenceSession(whole.SerializeToString(), options, providers=["CPUExecutionProvider"])

    interpreter = Interpreter(str(args.tflite), experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    details = {d["name"]: d for d in interpreter.get_tensor_details()}
    model_inputs = [i.name for i in graph.input if i.name not in inits]
    tfl_inputs = interpreter.get_input_details()

    layers = []  # (output, inputs, op kinds, session)
    for name in quantized:
        if name not in details:
            continue
        reads, kinds, stack, seen = set(), [], [producer[name].input[0]], set()
        while stack:
            t = stack.pop()
            if t in seen or t in inits or not t:
                continue
            seen.add(t)
            node = producer.get(t)
            if node is None:
                reads = None
                break
            if node.op_type == "QuantizeLinear" and node.input[0] not in inits:
                reads.add(t)
                continue
            if node.op_type != "DequantizeLinear":
                kinds.append(node.op_type)
            stack.extend(node.input)
        if not reads or not all(r in details for r in reads):
            continue
        cut = onnx.utils.Extractor(model).extract_model(sorted(reads), [name])
        local = ort.InferenceSession(cut.SerializeToString(), options, providers=["CPUExecutionProvider"])
        layers.append((name, "+".join(dict.fromkeys(reversed(kinds))) or "-", local))

    data = np.load(args.data)
    run_stats: dict[str, list] = {}
    local_stats: dict[str, list] = {}
    count = min(args.samples, len(data[model_inputs[0]]))
    for s in range(count):
        feeds = {n: data[n][s : s + 1] for n in model_inputs}
        reference = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))
        for info in tfl_inputs:
            x = feeds[info["name"]] if info["name"] in feeds else feeds[model_inputs[0]]
            if x.ndim == 4 and tuple(info["shape"]) != x.shape:
                x = x.transpose(0, 2, 3, 1)
            interpreter.set_tensor(info["index"], x.astype(info["dtype"]))
        interpreter.invoke()
        for name, _, local in layers:
            got = interpreter.get_tensor(details[name]["index"])
            ref = reference[name]
            for stats, expected in (
                (run_stats, ref),
                (local_stats, _local(local, interpreter, details, to_onnx_layout)),
            ):
                diff = np.abs(
                    to_onnx_layout(got, expected.shape).astype(np.int32) - expected.astype(np.int32)
                )
                st = stats.setdefault(name, [0, 0, 0])
                st[0] = max(st[0], int(diff.max()))
                st[1] += int((diff > 0).sum())
                st[2] += diff.size
    print(f"{'run':>14} {'local':>14}  op(s)  tensor   ({count} samples; max steps, share of values off)")
    by_kind: dict[str, list] = collections.defaultdict(lambda: [0, 0, 0])
    for name, kind, _ in layers:
        r, lo = run_stats[name], local_stats[name]
        k = by_kind[kind]
        k[0], k[1], k[2] = max(k[0], lo[0]), k[1] + lo[1], k[2] + lo[2]
        if args.all or r[0] or lo[0]:
            print(
                f"{r[0]:4d} {100 * r[1] / r[2]:8.3f}% {lo[0]:4d} {100 * lo[1] / lo[2]:8.3f}%  {kind}  {name}"
            )
    print("\nlocal, per op kind:")
    for kind, (mx, off, total) in sorted(by_kind.items()):
        print(f"  {kind:40s} max {mx} step(s), {100 * off / total:.4f} % of values")
    return 0


def _local(session, interpreter, details, layout) -> np.ndarray:
    feeds = {
        i.name: layout(interpreter.get_tensor(details[i.name]["index"]), i.shape)
        for i in session.get_inputs()
    }
    return session.run(None, feeds)[0]


if __name__ == "__main__":
    sys.exit(main())
