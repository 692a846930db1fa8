"""Accuracy-aware quantization (issue 14): edgekit's search against NNCF's ``quantize_with_accuracy_control``.

    python benchmarks/accuracy_aware.py [--shared ../shared] [--out DIR] [--json out.json] [--skip-nncf]
        [--workers N] [--cases mobilenetv2,...] [--strict-agreement PCT]

MobileNetV2 with real weights (the fp32 model behind ``models/mobilenetv2-12-int8.onnx``,
``shared_data.float_from_quantized``); the 200 shared photos with the model's preprocessing (as
``benchmarks/qoperator.py``): calibration and the accuracy budget on the first 100, the figures reported on
the other 100. Per target (arm-cpu, intel-vpu): ``--max-drop 0.5``, the layers restored (of the quantizable
layers), the search's wall time, and on the held-out photos the top-1 of fp32 and of the real artifacts, plain
int8 and restored (the .tflite in LiteRT, the QDQ model through OpenVINO's int8 kernels as its IR runs), with
host latency (p50 of 30 runs) and size. NNCF (ONNX backend, the same model, data and budget, 0.005 absolute):
wall time, held-out drop in onnxruntime, layers reverted (weighted ops left without a weight quantizer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from shared_data import default_shared, float_from_quantized, imagenet_photos

WEIGHTED = ("Conv", "Gemm", "MatMul", "ConvTranspose")


@dataclass
class Sample:
    inputs: dict
    label: int | None


def photos(shared: Path) -> list[Sample]:
    return [Sample({"input": x}, label) for x, label in imagenet_photos(shared)]


def top1(outputs: list, samples: list[Sample]) -> float:
    return 100.0 * float(
        np.mean([int(np.argmax(o)) == s.label for o, s in zip(outputs, samples, strict=True)])
    )


def artifact_runner(target: str, proto) -> tuple[Any, int]:
    """A function running one sample (ONNX-layout feeds) through the target's real artifact (its first output,
    ONNX layout), and the artifact's size."""
    if target in ("arm-cpu", "nnapi"):
        from ai_edge_litert.interpreter import Interpreter
        from edgekit.core.litert_run import from_model_output, to_model_input
        from edgekit.targets.tflite.converter import ConvertOptions, convert

        io = "float32" if target == "arm-cpu" else "int8"
        options = ConvertOptions(keep_io_layout=True, target=target, io_dtype=io, strict_integer=False)
        if target == "nnapi":
            from edgekit.targets.nnapi_target import NNAPI_PER_TENSOR

            options = ConvertOptions(keep_io_layout=True, target=target, io_dtype=io, strict_integer=False,
                                     per_tensor_weights=NNAPI_PER_TENSOR)  # fmt: skip
        result = convert(proto, options)
        interpreter = Interpreter(model_content=result.data, num_threads=2)
        interpreter.allocate_tensors()
        details = {d["name"]: d for d in interpreter.get_input_details()}
        out = {d["name"]: d for d in interpreter.get_output_details()}

        def run(feeds):
            for info in result.inputs:
                interpreter.set_tensor(details[info.name]["index"], to_model_input(info, feeds[info.name]))
            interpreter.invoke()
            info = result.outputs[0]
            return {"y": from_model_output(info, interpreter.get_tensor(out[info.name]["index"]))}

        return run, len(result.data)
    from edgekit.core.runtime import HostRunner

    runner = HostRunner(proto, exact_qdq=False, threads=2)  # OpenVINO's int8 kernels: what the IR runs
    name = runner.output_names[0]
    return (lambda feeds: {"y": runner.run(feeds)[name]}), proto.ByteSize()


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the search's pool workers, once shut down, and
    its child compiles): what a run costs whatever else the machine runs (wall time follows the load)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forkserver_cpu_seconds()


def forkserver_cpu_seconds() -> float:
    """CPU seconds of multiprocessing's forkserver (its imports) and of its finished children: the search's pool
    workers fork from it, so their time never reaches this process's RUSAGE_CHILDREN (Linux: /proc)."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime + cutime + cstime) / os.sysconf("SC_CLK_TCK")


def p50(run, feeds: dict, repeats: int = 30) -> float:
    run(feeds)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times)


def edgekit_case(model_path: Path, calib: list[Sample], held: list[Sample], target: str, budget, workers,
                 input_shapes=None, ranking: int = 50) -> dict:  # fmt: skip
    """The search on ``calib`` (calibration and accuracy), then fp32, plain int8 and the restored model's real
    artifacts on ``held``: the budget's metric (first output), host p50 and size."""
    from edgekit.core.model import load_model
    from edgekit.core.runtime import HostRunner
    from edgekit.quantize.accuracy import SearchOptions, search
    from edgekit.quantize.budget import Reference, measure
    from edgekit.quantize.options import QuantizeOptions
    from edgekit.quantize.pipeline import quantize
    from edgekit.quantize.qdq import warnings_once
    from edgekit.targets.base import get_target

    model = load_model(model_path, input_shapes)
    tgt = get_target(target)
    start, cpu = time.perf_counter(), cpu_seconds()

    def say(line: str) -> None:  # the seconds since the search started: where its time goes, phase by phase
        print(f"  {time.perf_counter() - start:6.1f} s  {line}", flush=True)

    try:
        with warnings_once():
            result = search(model, calib, calib, tgt, QuantizeOptions(), SearchOptions(budget, workers=workers,
                            ranking_samples=ranking), say=say)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a refusal is a result here
        return {"target": target, "refused": str(exc), "wall_s": time.perf_counter() - start,
                "cpu_s": cpu_seconds() - cpu}  # fmt: skip
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    plain = quantize(model, (), tgt.quantize_options(QuantizeOptions()), statistics=result.statistics).proto()
    base_proto = quantize(model, (), result.base_options, statistics=result.statistics).proto()
    restored = quantize(model, (), result.options, statistics=result.statistics).proto()
    fp32 = HostRunner(ir_proto(model))
    first = fp32.output_names[0]
    ref_out = [{"y": fp32.run(s.inputs)[first]} for s in held]
    reference = Reference.build(["y"], ref_out, [s.label for s in held], budget)
    indices = list(range(len(held)))
    row = {"target": target, "wall_s": wall, "cpu_s": cpu, "search": result.to_json()}
    for name, proto in (("int8", plain), ("base", base_proto), ("restored", restored)):
        run, size = artifact_runner(target, proto)
        outs = [run(s.inputs) for s in held]
        m = measure(budget, reference, indices, outs)
        row[name] = {**m.to_json(), "p50_ms": p50(run, held[0].inputs), "size_bytes": size}
    return row


def ir_proto(model):
    import onnx_ir as ir

    return ir.to_proto(model)


def nncf_case(fp32_path: Path, calib: list[Sample], held: list[Sample], budget=None) -> dict:
    """NNCF on the same model and data; ``budget`` a ``Budget`` (default ``--max-drop 0.5``): ``max_drop`` is
    top-1 against the labels, ``min_agreement`` top-1 agreement with fp32's class (fp32 scores 1.0 against
    itself, so NNCF's absolute max_drop is 1 - PCT / 100: the same samples allowed to differ)."""
    import nncf
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(fp32_path))
    kind, value = (budget.kind, budget.value) if budget is not None else ("max_drop", 0.5)

    def outputs(m, samples):
        session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name
        return [session.run(None, {name: s.inputs["input"]})[0] for s in samples]

    fp32_class = {id(s): int(np.argmax(o)) for s, o in zip(calib, outputs(model, calib), strict=True)}

    def validate(m, items) -> float:
        items = list(items)
        outs = outputs(m, items)
        if kind == "min_agreement":
            return float(
                np.mean([int(np.argmax(o)) == fp32_class[id(s)] for o, s in zip(outs, items, strict=True)])
            )
        return top1(outs, items) / 100.0

    start, cpu = time.perf_counter(), cpu_seconds()
    quantized = nncf.quantize_with_accuracy_control(
        model,
        nncf.Dataset(calib, lambda s: {"input": s.inputs["input"]}),
        nncf.Dataset(calib),
        validate,
        max_drop=value / 100.0 if kind == "max_drop" else 1.0 - value / 100.0,
        drop_type=nncf.DropType.ABSOLUTE,
        subset_size=len(calib),
    )
    wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    produced = {o: n for n in quantized.graph.node for o in n.output}
    weighted = [n for n in quantized.graph.node if n.op_type in WEIGHTED]
    reverted = [n.name for n in weighted if len(n.input) > 1 and getattr(produced.get(n.input[1]), "op_type", "")
                != "DequantizeLinear"]  # fmt: skip
    ref, outs = outputs(model, held), outputs(quantized, held)
    return {"wall_s": wall, "cpu_s": cpu, "reverted": reverted, "weighted_ops": len(weighted), "fp32_top1": top1(ref, held),
            "top1": top1(outs, held), "drop_pp": top1(ref, held) - top1(outs, held),
            "agreement": 100.0 * float(np.mean([int(np.argmax(a)) == int(np.argmax(b)) for a, b in zip(ref, outs, strict=True)]))}  # fmt: skip


def zoo_samples(entry: dict, count: int, seed: int) -> list[Sample]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "zoo"))
    import zoo_data

    arrays = zoo_data.make_arrays(entry, count, seed)
    return [Sample({k: v[i : i + 1] for k, v in arrays.items()}, None) for i in range(count)]


def zoo_entry(name: str) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "zoo"))
    import zoo_data

    return next(e for e in zoo_data.entries() if e["name"] == name)


def report(name: str, row: dict) -> None:
    if "refused" in row:
        print(f"{name} {row['target']}: refused in {row['wall_s']:.1f} s ({row['cpu_s']:.1f} s CPU): {row['refused']}",
              flush=True)  # fmt: skip
        return
    s = row["search"]
    print(f"{name} {row['target']}: {len(s['restored'])}/{s['quantizable_layers']} layers restored in "
          f"{row['wall_s']:.1f} s ({row['cpu_s']:.1f} s CPU, {s['evaluations']} evaluations); held-out metric int8 {row['int8']['metric']:.4g} "
          f"({row['int8']['p50_ms']:.2f} ms, {row['int8']['size_bytes']} B), base ({'+'.join(s['base_fixes']) or 'plain'}) "
          f"{row['base']['metric']:.4g} (agreement {row['base']['agreement']:.1f}), restored {row['restored']['metric']:.4g} "
          f"({row['restored']['p50_ms']:.2f} ms, {row['restored']['size_bytes']} B), agreement "
          f"{row['int8']['agreement']:.1f} -> {row['restored']['agreement']:.1f}; restored: "
          f"{[(r['node'], r['restore']) for r in s['restored']]}", flush=True)  # fmt: skip


def main() -> None:
    from edgekit.quantize.budget import Budget

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip-nncf", action="store_true")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--cases", default="mobilenetv2,nnapi,nncf,zoo,rec")
    parser.add_argument(
        "--rec-data",
        choices=("words", "text", "photos"),
        default="words",
        help="PP-OCRv4 rec's samples: rendered lines of words (default), of random letters, or crops of the shared "
        "photos",
    )
    parser.add_argument(
        "--strict-agreement",
        type=float,
        default=100.0,
        help="the strict case's --min-agreement (top-1 agreement with fp32 on the accuracy half): a budget "
        "the int8 bases miss by a few photos, so layers must be restored",
    )
    parser.add_argument("--rec-lines", type=int, default=48, help="rec samples per half (search / held out)")
    args = parser.parse_args()
    cases = args.cases.split(",")
    out = args.out or Path(tempfile.mkdtemp(prefix="edgekit-accuracy-"))
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")

    if {"mobilenetv2", "nnapi", "nncf", "strict"} & set(cases):
        fp32 = float_from_quantized(
            args.shared / "models/mobilenetv2-12-int8.onnx", out / "mobilenetv2-fp32.onnx"
        )
        samples = photos(args.shared)
        calib, held = samples[: len(samples) // 2], samples[len(samples) // 2 :]
        drop = Budget("max_drop", 0.5)
        for target in [t for t, c in (("arm-cpu", "mobilenetv2"), ("intel-vpu", "mobilenetv2"), ("nnapi", "nnapi"))
                       if c in cases]:  # fmt: skip
            print(f"mobilenetv2 {target} --max-drop 0.5 ...", flush=True)
            results[f"mobilenetv2/{target}"] = row = edgekit_case(
                fp32, calib, held, target, drop, args.workers
            )
            report("mobilenetv2", row)
            save()
        if "nncf" in cases:
            print("nncf quantize_with_accuracy_control ...", flush=True)
            results["mobilenetv2/nncf"] = row = nncf_case(fp32, calib, held)
            print(f"nncf: {len(row['reverted'])}/{row['weighted_ops']} reverted in {row['wall_s']:.1f} s ({row['cpu_s']:.1f} s CPU); held-out "
                  f"top-1 {row['top1']:.1f} (fp32 {row['fp32_top1']:.1f}), agreement {row['agreement']:.1f}; reverted: {row['reverted']}", flush=True)  # fmt: skip
            save()
        if "strict" in cases:
            # A budget the int8 bases miss by a few photos (layers must be restored), NNCF with the same
            # budget in the same run.
            strict = Budget("min_agreement", args.strict_agreement)
            for target in ("arm-cpu", "intel-vpu"):
                print(f"mobilenetv2 {target} {strict.describe()} ...", flush=True)
                results[f"strict/{target}"] = row = edgekit_case(
                    fp32, calib, held, target, strict, args.workers
                )
                report("strict", row)
                save()
            print(f"nncf quantize_with_accuracy_control, {strict.describe()} ...", flush=True)
            results["strict/nncf"] = row = nncf_case(fp32, calib, held, strict)
            print(f"nncf strict: {len(row['reverted'])}/{row['weighted_ops']} reverted in {row['wall_s']:.1f} s ({row['cpu_s']:.1f} s CPU); held-out "
                  f"top-1 {row['top1']:.1f} (fp32 {row['fp32_top1']:.1f}), agreement {row['agreement']:.1f}; reverted: {row['reverted']}", flush=True)  # fmt: skip
            save()
    if "zoo" in cases:
        models = Path(__file__).resolve().parents[1] / "tests/zoo/models"
        for name in ("mobilenet_v3_small", "bert_tiny_op13"):
            entry = zoo_entry(name)
            calib, held = zoo_samples(entry, 32, 1), zoo_samples(entry, 32, 2)
            print(f"{name} arm-cpu --min-cosine 0.99 ...", flush=True)
            results[f"{name}/arm-cpu"] = row = edgekit_case(
                models / entry["file"],
                calib,
                held,
                "arm-cpu",
                Budget("min_cosine", 0.99),
                args.workers,
                ranking=16,
            )
            report(name, row)
            save()
    if "rec" in cases:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from zoo import SHARED_MODELS

        entry = next(e for e in SHARED_MODELS if e["name"] == "ppocrv4_rec")
        if args.rec_data in (
            "text",
            "words",
        ):  # rendered lines: what a recogniser reads (benchmarks/compression.py)
            import compression

            lines = compression.word_lines if args.rec_data == "words" else compression.text_lines
            calib = [Sample(x, None) for x in lines(args.rec_lines, seed=1)]
            held = [Sample(x, None) for x in lines(args.rec_lines, seed=2)]
        else:  # crops of the shared photos (no text: near-tie sequences)
            calib, held = zoo_samples(entry, args.rec_lines, 1), zoo_samples(entry, args.rec_lines, 2)
        for target in ("arm-cpu", "intel-vpu"):
            print(f"ppocrv4_rec {target} --min-agreement 99 ...", flush=True)
            results[f"ppocrv4_rec/{target}"] = row = edgekit_case(
                args.shared / "models" / entry["file"], calib, held, target, Budget("min_agreement", 99),
                args.workers, input_shapes={"x": (1, 3, 48, 320)}, ranking=12,
            )  # fmt: skip
            report("ppocrv4_rec", row)
            save()
    return None


if __name__ == "__main__":
    sys.exit(main())
