"""Figures of the ``intel-vpu`` target on the shared SqueezeNet 1.1 and MNIST-8 (issue 4).

    python benchmarks/openvino_figures.py [--shared ../shared] [--mnist 1000] [--json out.json]

For each model: package the fp32 model (FP16 IR) and the model quantized by edgekit for uint8
activations (INT8 IR) with the target, then run every evaluation sample through

- the fp32 ONNX model in onnxruntime (reference) and the FP16 IR in OpenVINO (CPU, f32 precision):
  max abs error and max error relative to the output range, top-1 agreement;
- the QDQ model in onnxruntime and the INT8 IR in OpenVINO: top-1 agreement;

and compare file sizes: FP16 ``.bin`` and INT8 ``.bin`` against the fp32 ONNX file.
Targets: fp16 error <= 1e-2, int8 agreement >= 99 %, fp16 bin <= 0.52x, int8 bin <= 0.3x.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
from edgekit.core.model import load_model, load_proto
from edgekit.core.runtime import F32_CONFIG
from edgekit.targets.base import PackageOptions, get_target
from shared_data import default_shared, mnist_npz

CALIB_SAMPLES = 100


@dataclass(frozen=True)
class Case:
    name: str
    model: Path
    data: Path  # anything open_dataset reads
    preprocess: ImagePreprocess | None


@dataclass(frozen=True)
class Built:
    case: Case
    fp16: Path  # bundle dirs
    int8: Path
    qdq: onnx.ModelProto
    calib_seconds: float
    package_seconds: dict[str, float]


def cases(shared: Path, mnist_count: int, folder: Path) -> list[Case]:
    squeeze_pre = ImagePreprocess(size=(224, 224), color="BGR", mean=(104.0, 117.0, 123.0), layout="NCHW")
    return [
        Case(
            "squeezenet1.1",
            shared / "models/squeezenet1.1-fp32.onnx",
            shared / "data/imagenet-sample-200",
            squeeze_pre,
        ),
        Case("mnist-8", shared / "models/mnist-8.onnx", mnist_npz(shared, mnist_count, folder), None),
    ]


def dataset(case: Case, model: Any, limit: int | None = None):
    return open_dataset(case.data, input_specs(model), case.preprocess, limit=limit)


def build(case: Case, folder: Path) -> Built:
    """The FP16 and INT8 intel-vpu bundles of ``case`` (quantized by edgekit, uint8 activations)."""
    from edgekit import QuantizeOptions, quantize_model

    target = get_target("intel-vpu")
    model = load_model(case.model)
    verify = tuple(dict(s.inputs) for s, _ in zip(dataset(case, model, 3), range(3), strict=False))
    pre = case.preprocess.to_json() if case.preprocess else {}
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    fp16 = target.package(
        model, folder / f"{case.name}-fp16", PackageOptions(verify_samples=verify, preprocessing=pre)
    )
    times["fp16"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    options = QuantizeOptions(activations=target.activation_dtype, samples=CALIB_SAMPLES)
    result = quantize_model(case.model, dataset(case, model, CALIB_SAMPLES), options=options)
    calib_seconds = time.perf_counter() - t0
    qdq = (
        result.model
        if isinstance(result.model, onnx.ModelProto)
        else onnx.ModelProto.FromString(result.model)
    )
    copy = onnx.ModelProto()
    copy.CopyFrom(qdq)
    t0 = time.perf_counter()
    int8 = target.package(
        load_proto(copy),
        folder / f"{case.name}-int8",
        PackageOptions(verify_samples=verify, preprocessing=pre),
    )
    times["int8"] = time.perf_counter() - t0
    return Built(case, fp16, int8, qdq, calib_seconds, times)


def _ort(model: onnx.ModelProto | Path, optimize: bool = True) -> ort.InferenceSession:
    """onnxruntime; ``optimize=False`` runs a QDQ model node by node (exact QuantizeLinear semantics)
    instead of fusing it into integer kernels."""
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def _ov(bundle: Path):
    core = ov.Core()
    return core.compile_model(core.read_model(str(bundle / "model.xml")), "CPU", F32_CONFIG)


def measure(built: Built) -> dict[str, Any]:
    case = built.case
    model = load_model(case.model)
    from edgekit.core.runtime import HostRunner

    fp32, qdq, qdq_kernels = _ort(case.model), _ort(built.qdq, optimize=False), _ort(built.qdq)
    qdq_openvino = HostRunner(built.qdq, exact_qdq=False)  # the QDQ file as OpenVINO deploys it
    fp16_ir, int8_ir = _ov(built.fp16), _ov(built.int8)
    out_name = fp32.get_outputs()[0].name
    max_abs = max_rel = 0.0
    top1: dict[str, list[int]] = {
        "fp32": [],
        "fp16": [],
        "qdq": [],
        "int8": [],
        "qdq_ort_kernels": [],
        "qdq_openvino": [],
    }
    tie_aware = 0
    labels: list[int] = []
    for sample in dataset(case, model):
        feeds = dict(sample.inputs)
        ref = fp32.run([out_name], feeds)[0]
        got16 = fp16_ir(feeds)[fp16_ir.output(0)]
        err = float(np.abs(got16 - ref).max())
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / float(ref.max() - ref.min()))
        q = qdq.run(None, feeds)[0]
        got8 = int8_ir(feeds)[int8_ir.output(0)]
        others = (
            ("qdq_ort_kernels", qdq_kernels.run(None, feeds)[0]),
            ("qdq_openvino", qdq_openvino.run(feeds)[out_name]),
        )
        for key, value in (("fp32", ref), ("fp16", got16), ("qdq", q), ("int8", got8), *others):
            top1[key].append(int(np.argmax(value)))
        # the IR's top-1 is one of the QDQ model's top-1 classes (quantized outputs can tie)
        tie_aware += int(q.ravel()[int(np.argmax(got8))] == q.max())
        if sample.label is not None:
            labels.append(sample.label)
    n = len(top1["fp32"])
    arr = {k: np.array(v) for k, v in top1.items()}
    onnx_bytes = case.model.stat().st_size
    figures: dict[str, Any] = {
        "model": case.name,
        "samples": n,
        "fp16_max_abs_error": max_abs,
        "fp16_max_rel_error": max_rel,
        "fp16_top1_agreement": float(np.mean(arr["fp16"] == arr["fp32"])),
        "int8_vs_qdq_top1_agreement": float(np.mean(arr["int8"] == arr["qdq"])),
        "int8_vs_qdq_top1_agreement_ties": tie_aware / n,
        "int8_vs_qdq_ort_kernels_top1_agreement": float(np.mean(arr["int8"] == arr["qdq_ort_kernels"])),
        "int8_vs_qdq_openvino_top1_agreement": float(np.mean(arr["int8"] == arr["qdq_openvino"])),
        "qdq_ort_kernels_vs_qdq_top1_agreement": float(np.mean(arr["qdq_ort_kernels"] == arr["qdq"])),
        "onnx_bytes": onnx_bytes,
        "fp16_bin_ratio": (built.fp16 / "model.bin").stat().st_size / onnx_bytes,
        "int8_bin_ratio": (built.int8 / "model.bin").stat().st_size / onnx_bytes,
        "calibration_seconds": built.calib_seconds,
        "package_seconds": built.package_seconds,
    }
    if labels:
        lab = np.array(labels)
        figures["top1_accuracy"] = {k: float(np.mean(arr[k] == lab)) for k in ("fp32", "fp16", "qdq", "int8")}
    manifest = json.loads((built.int8 / "manifest.json").read_text())["verification"]["int8"]
    figures["int8_ir"] = {
        k: manifest[k]
        for k in (
            "qdq_pairs",
            "fake_quantize",
            "fake_quantize_in_ir",
            "compute_layers",
            "int8_compute_layers",
        )
    }
    figures["int8_ir"]["float_layers"] = manifest["float_layers"]
    figures["pass"] = {
        "fp16_error<=1e-2": max_abs <= 1e-2 or max_rel <= 1e-2,
        "int8_agreement>=99%": figures["int8_vs_qdq_top1_agreement"] >= 0.99,
        "fp16_bin<=0.52x": figures["fp16_bin_ratio"] <= 0.52,
        "int8_bin<=0.3x": figures["int8_bin_ratio"] <= 0.3,
    }
    return figures


def print_figures(all_figures: list[dict[str, Any]]) -> None:
    print(
        "| model | samples | fp16 max abs err | fp16 max err / range | fp16 top-1 agree | fp16 .bin / ONNX "
        "| int8 .bin / ONNX | top-1 fp32 / fp16 / QDQ / int8 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for f in all_figures:
        acc = f.get("top1_accuracy")
        acc_s = " / ".join(f"{100 * acc[k]:.1f}" for k in ("fp32", "fp16", "qdq", "int8")) if acc else "-"
        print(
            f"| {f['model']} | {f['samples']} | {f['fp16_max_abs_error']:.2e} | {f['fp16_max_rel_error']:.2e} "
            f"| {100 * f['fp16_top1_agreement']:.1f}% | {f['fp16_bin_ratio']:.3f}x | {f['int8_bin_ratio']:.3f}x "
            f"| {acc_s} |"
        )
    print()
    print(
        "| model | int8 IR vs QDQ (onnxruntime, node by node) | same, ties count | int8 IR vs QDQ (onnxruntime "
        "integer kernels) | int8 IR vs QDQ (OpenVINO int8 kernels) | onnxruntime kernels vs node by node |"
    )
    print("|---|---|---|---|---|---|")
    for f in all_figures:
        print(
            f"| {f['model']} | {100 * f['int8_vs_qdq_top1_agreement']:.1f}% "
            f"| {100 * f['int8_vs_qdq_top1_agreement_ties']:.1f}% "
            f"| {100 * f['int8_vs_qdq_ort_kernels_top1_agreement']:.1f}% "
            f"| {100 * f['int8_vs_qdq_openvino_top1_agreement']:.1f}% "
            f"| {100 * f['qdq_ort_kernels_vs_qdq_top1_agreement']:.1f}% |"
        )
    for f in all_figures:
        ir = f["int8_ir"]
        print(
            f"{f['model']}: {ir['qdq_pairs']} Q/DQ pairs -> {ir['fake_quantize']} FakeQuantize(256) "
            f"({ir['fake_quantize_in_ir']} after OpenVINO merges repeats), {ir['int8_compute_layers']}/"
            f"{ir['compute_layers']} conv/FC layers in u8/i8, float: {ir['float_layers']}; "
            f"checks: {', '.join(k + ('=ok' if v else '=FAIL') for k, v in f['pass'].items())}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--mnist", type=int, default=1000, help="MNIST test images to evaluate")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    if not (args.shared / "models").is_dir():
        print(f"shared models not found under {args.shared} (pass --shared)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="edgekit-ovfig-") as tmp:
        figures = [measure(build(case, Path(tmp))) for case in cases(args.shared, args.mnist, Path(tmp))]
    print_figures(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0 if all(all(f["pass"].values()) for f in figures) else 1


if __name__ == "__main__":
    sys.exit(main())
