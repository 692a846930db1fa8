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

    python benchmarks/int8_trace.py model.qdq.onnx model.tflite data.npz --exact [--builtin] [--samples 4]

``--exact``: the same local question against the QDQ model's exact semantics (``edgekit.core.exact``), in one
run: each quantized tensor is computed exactly from the TFLite's own values of the tensors before it (the exact
runner's QuantizeLinear outputs replaced by LiteRT's, in a child process, after they are compared), with the
distance from a half step of the values that differ (float32 arithmetic flips values within ~1e-5 of one; a
kernel that computes something else is further off). LiteRT runs with its default delegate (XNNPACK), or with
``--builtin`` its builtin kernels.
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
    parser.add_argument("--exact", action="store_true", help="against the exact semantics (see above)")
    parser.add_argument("--builtin", action="store_true", help="with --exact: LiteRT's builtin kernels")
    args = parser.parse_args()
    if args.exact:
        return exact_local(args.qdq, args.tflite, args.data, args.samples, args.builtin, args.all)

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


_CHILD = """
import sys, numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
tfl, data, s, out, builtin = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
kw = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES} if builtin else {}
it = Interpreter(tfl, experimental_preserve_all_tensors=True, **kw)
it.allocate_tensors()
d = np.load(data)
for i in it.get_input_details():
    x = d[i["name"]][s : s + 1]
    if x.ndim == 4 and tuple(i["shape"]) != x.shape:
        x = x.transpose(0, 2, 3, 1)  # an image input the TFLite takes NHWC
    it.set_tensor(i["index"], x.astype(i["dtype"]))
it.invoke()
kept = {}
for t in it.get_tensor_details():
    if t["dtype"] in (np.int8, np.uint8, np.int16) and t["name"]:
        try:
            kept[str(len(kept))] = it.get_tensor(t["index"])
            kept["name" + str(len(kept) - 1)] = np.array(t["name"])
        except ValueError:
            kept.pop(str(len(kept)), None)
np.savez(out, **kept)
"""


def exact_local(qdq: Path, tflite: Path, data: Path, samples: int, builtin: bool, show_all: bool) -> int:
    """``--exact``: each quantized tensor computed exactly from LiteRT's inputs to it (see the docstring)."""
    import subprocess
    import tempfile

    import onnx
    from edgekit.core.exact import ExactRunner

    model = onnx.load(str(qdq))
    producer = {o: n for n in model.graph.node for o in n.output}
    kind = {
        n.output[0]: producer[n.input[0]].op_type if n.input[0] in producer else "(input)"
        for n in model.graph.node
        if n.op_type == "QuantizeLinear"
    }
    inputs = [i.name for i in model.graph.input]
    feeds = np.load(data)
    rows: dict[str, list] = {}

    def observe(name: str, q: np.ndarray, steps: np.ndarray) -> np.ndarray:
        got = runtime.get(name)
        if got is None or got.size != q.size:
            return q
        # channels last (NHWC, or NDHWC for 3-D convolutions' tensors)
        nhwc = (q.shape[0], *q.shape[2:], q.shape[1]) if q.ndim in (4, 5) else None
        last = (0, q.ndim - 1, *range(1, q.ndim - 1))
        if got.shape not in (q.shape, nhwc):
            # the converter moved a Transpose across this op (a scalar Mul on attention keys): the tensor of that
            # name is in another layout; the DEQUANTIZE's int8 input beside it has the ONNX one, else skip it
            got = runtime.get(name.removesuffix("_quantized") + "_dequantized/int")
            if got is None or got.shape != q.shape:
                return q
        if q.dtype == np.uint8 and got.dtype == np.int8:
            got = (got.astype(np.int16) + 128).astype(np.uint8)  # a uint8 model's levels run shifted to int8
        if got.shape == nhwc != q.shape:
            got = got.transpose(last)
        elif got.shape == nhwc:
            # C == H == W: the shapes cannot tell the layouts apart; the one closer to the exact values is it
            as_is, moved = got.astype(q.dtype), got.transpose(last).astype(q.dtype)
            got = min((moved, as_is), key=lambda g: int((g != q).sum()))
        got = got.reshape(q.shape).astype(q.dtype)
        diff = np.abs(got.astype(np.int32) - q.astype(np.int32))
        tie = np.abs(np.abs(steps - np.floor(steps)) - 0.5)[diff > 0]
        row = rows.setdefault(name, [0, 0, 0, 0.0])
        row[0], row[1], row[2] = (
            max(row[0], int(diff.max())),
            row[1] + int((diff > 0).sum()),
            row[2] + diff.size,
        )
        row[3] = max(row[3], float(tie.max()) if tie.size else 0.0)
        return got

    runner = ExactRunner(model, observe=observe)
    count = min(samples, len(feeds[inputs[0]]))
    with tempfile.TemporaryDirectory() as tmp:
        for s in range(count):
            out = f"{tmp}/t{s}.npz"
            cmd = [sys.executable, "-c", _CHILD, str(tflite), str(data), str(s), out, "1" if builtin else "0"]
            subprocess.run(cmd, check=True, capture_output=True)
            kept = np.load(out)
            runtime = {str(kept["name" + k]): kept[k] for k in kept if not k.startswith("name")}
            runner.run({n: feeds[n][s : s + 1] for n in inputs})
    print(
        f"{'max':>4} {'values':>8} {'share':>9} {'tie dist':>9}  op  tensor   ({count} samples, local, exact)"
    )
    by_kind: dict[str, list] = collections.defaultdict(lambda: [0, 0])
    for name, (mx, off, total, tie) in rows.items():
        by_kind[kind.get(name, "?")][0] += off
        by_kind[kind.get(name, "?")][1] += total
        if show_all or mx:
            print(f"{mx:4d} {off:8d} {off / total:9.2e} {tie:9.2e}  {kind.get(name, '?')}  {name}")
    print("\nlocal, per op kind (values off / values):")
    for k, (off, total) in sorted(by_kind.items()):
        print(f"  {k:24s} {off:8d} / {total:10d}  ({off / max(total, 1):.2e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
