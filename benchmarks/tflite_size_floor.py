"""How small can MNIST-8's int8 .tflite get? The issue asks for <= 0.27x the fp32 ONNX file.

    python benchmarks/tflite_size_floor.py [--shared ../shared] [--calib 100] [--eval 1000] [--json out.json]

MNIST-8's fp32 ONNX is 26,454 bytes, 0.27x of it is 7,142 bytes, and its int8 weights and int32
biases alone take 6,096 of them (0.230x). The rest of a .tflite file is structure: tensor, operator,
opcode and buffer tables, shapes, quantization vectors, names, and 16-byte buffer alignment. This
script builds, from the same QDQ model, the default file and ever more stripped variants:

1. ``default``: what ``edgekit deploy --target arm-cpu`` writes (per-channel weights, names, signature).
2. ``no names``: the same graph with ``writer.serialize(names=False)``: no tensor or subgraph names, no
   description, no signature (the interpreter then finds tensors by index only).
3. ``no names, per-tensor dense``: quantized with ``dense_per_channel=False`` (one scale for the
   FULLY_CONNECTED weights; the conv weights keep per-channel scales).
4. ``no names, all per-tensor``: every weight requantized to one scale (``per_tensor_weights`` for
   CONV_2D and FULLY_CONNECTED): the fewest quantization vectors a int8 file can have, at a cost in
   accuracy that a real deployment would not accept. It is here only as the floor.

For each: bytes, ratio to the fp32 ONNX, bytes of buffer data, structure bytes (the rest), and, run in
LiteRT on the first ``--eval`` MNIST test images, top-1 accuracy and top-1 agreement with the default
file (variants 1-2 must give bit-identical outputs). Exit 2 with one line if ../shared is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from shared_data import default_shared, mnist_npz

TARGET_RATIO = 0.27


def build(qdq: Path, names: bool, per_tensor: frozenset[str]) -> bytes:
    from edgekit.core.model import load_model
    from edgekit.targets.tflite import writer
    from edgekit.targets.tflite.converter import ConvertOptions, build_graph

    graph = build_graph(load_model(qdq), ConvertOptions(per_tensor_weights=per_tensor))
    return writer.serialize(graph, names=names)


def data_bytes(data: bytes) -> int:
    from edgekit.targets.tflite.writer import buffer_layout

    return sum(size for _, size in buffer_layout(data))


def counts(data: bytes) -> dict[str, int]:
    from ai_edge_litert import schema_py_generated as fb

    model = fb.Model.GetRootAs(data, 0)
    sub = model.Subgraphs(0)
    return {
        "tensors": sub.TensorsLength(),
        "operators": sub.OperatorsLength(),
        "opcodes": model.OperatorCodesLength(),
        "buffers": model.BuffersLength(),
    }


def run(data: bytes, images: np.ndarray) -> np.ndarray:
    """Outputs of the first output for every image, inputs and outputs found by index."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data, num_threads=1)
    interpreter.allocate_tensors()
    (inp,), out = interpreter.get_input_details(), interpreter.get_output_details()[0]
    results = []
    for image in images:
        interpreter.set_tensor(inp["index"], image.reshape(inp["shape"]).astype(inp["dtype"]))
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"]).reshape(-1).copy())
    return np.stack(results)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--calib", type=int, default=100)
    parser.add_argument("--eval", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    source = args.shared / "models/mnist-8.onnx"
    if not source.is_file():
        print(f"error: {source} not found (the shared models)", file=sys.stderr)
        return 2

    from edgekit import QuantizeOptions, quantize_model
    from edgekit.core.data import input_specs, open_dataset
    from edgekit.core.model import load_model

    onnx_bytes = source.stat().st_size
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        npz = mnist_npz(args.shared, max(args.calib, args.eval), folder)
        with np.load(npz) as f:
            images, labels = f["Input3"][: args.eval], f["labels"][: args.eval]
        qdq = {}
        specs = input_specs(load_model(source))
        for dense_per_channel in (True, False):
            path = folder / f"qdq-{dense_per_channel}.onnx"
            data = open_dataset(npz, specs, limit=args.calib)
            options = QuantizeOptions(
                activations="int8", samples=args.calib, dense_per_channel=dense_per_channel
            )
            quantize_model(source, data, options=options, output=path)
            qdq[dense_per_channel] = path
        variants = [
            ("default", qdq[True], True, frozenset()),
            ("no names", qdq[True], False, frozenset()),
            ("no names, per-tensor dense", qdq[False], False, frozenset()),
            ("no names, all per-tensor", qdq[False], False, frozenset({"CONV_2D", "FULLY_CONNECTED"})),
        ]
        reference = None
        for name, path, names, per_tensor in variants:
            data = build(path, names, per_tensor)
            outputs = run(data, images)
            if reference is None:
                reference = outputs
            top1 = outputs.argmax(1)
            buffer_bytes = data_bytes(data)
            rows.append(
                {
                    "variant": name,
                    "bytes": len(data),
                    "ratio": len(data) / onnx_bytes,
                    "data_bytes": buffer_bytes,
                    "structure_bytes": len(data) - buffer_bytes,
                    **counts(data),
                    "top1": float(np.mean(top1 == labels)),
                    "agree_default": float(np.mean(top1 == reference.argmax(1))),
                    "identical_to_default": bool(np.array_equal(outputs, reference)),
                }
            )

    budget = int(TARGET_RATIO * onnx_bytes)
    print(f"MNIST-8 fp32 ONNX: {onnx_bytes:,} bytes; 0.27x = {budget:,} bytes")
    print(
        f"{'variant':30s} {'bytes':>7s} {'ratio':>7s} {'data':>6s} {'struct':>6s} {'tensors':>7s} "
        f"{'ops':>4s} {'top-1':>7s} {'agree':>7s} identical"
    )
    for r in rows:
        print(
            f"{r['variant']:30s} {r['bytes']:7,d} {r['ratio']:7.3f} {r['data_bytes']:6,d} "
            f"{r['structure_bytes']:6,d} {r['tensors']:7d} {r['operators']:4d} {100 * r['top1']:6.2f}% "
            f"{100 * r['agree_default']:6.2f}% {r['identical_to_default']}"
        )
    smallest = min(rows, key=lambda r: r["bytes"])
    print(
        f"smallest: {smallest['bytes']:,} bytes ({smallest['ratio']:.3f}x); structure budget at 0.27x: "
        f"{budget - smallest['data_bytes']:,} bytes, the smallest file's structure: {smallest['structure_bytes']:,}"
    )
    if args.json:
        args.json.write_text(json.dumps({"onnx_bytes": onnx_bytes, "budget": budget, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
