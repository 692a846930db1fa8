"""The ONNX model zoo's QOperator MobileNetV2 (``mobilenetv2-12-int8``) deployed with its own scales.

    python benchmarks/qoperator.py [--shared ../shared] [--samples 200] [--out DIR] [--json out.json]

1. ``edgekit deploy MODEL -t arm-cpu -t nnapi -t intel-vpu --eval PHOTOS ...`` (``edgekit.deploy``, the library behind the CLI, on the local agent)
   with the model's preprocessing (RGB, shorter side 256, centre crop 224, /255, ImageNet mean/std). The
   report's reference is onnxruntime running the QOperator file as given; it also gives the QDQ form's
   answers run exactly on the host (``edgekit.core.runtime.HostRunner``).
2. Each written bundle again, here in LiteRT / OpenVINO, against both references: top-1 agreement with
   onnxruntime on the original file and with the QDQ model run exactly.

Prints, per row: top-1 on the labelled photos, the change against onnxruntime on the original (target:
within 0.5 pp), the agreement with each reference (``=ort``, ``=qdq``) and the top-1 the deploy report gives. A last check measures how sensitive the model is:
the share of photos whose onnxruntime top-1 changes when one input value moves by one quantization step.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from shared_data import PHOTOS, default_shared, imagenet_photos

MODEL = "models/mobilenetv2-12-int8.onnx"
TARGETS = ("arm-cpu", "nnapi", "intel-vpu")
#: The model's preprocessing (RGB, shorter side 256, centre crop 224, /255, ImageNet mean/std).
PREPROCESS = {"resize_mode": "shorter-side-crop", "resize_shorter": 256, "scale": 0.00392157,
              "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}  # fmt: skip


def deploy(model: Path, photos: Path, samples: int, out: Path) -> tuple[dict[str, Any], str]:
    """``edgekit.deploy`` (the library behind the CLI) on the local agent: the report and its progress lines."""
    import edgekit
    from edgekit.deployment import Hooks

    lines: list[str] = []
    hooks = Hooks(say=lines.append, bundle=lambda b: lines.append(f"✓ {b.target} → {b.path} ({b.precision})"),
                  failure=lambda target, message: lines.append(f"✗ {target}: {message}"))  # fmt: skip
    try:
        result = edgekit.deploy(model, TARGETS, output=out / "bundles", eval=photos, preprocess=PREPROCESS,
                                max_samples=samples, report=out / "report.html", hooks=hooks)  # fmt: skip
    except edgekit.EdgekitError as exc:
        return {}, "\n".join([*lines, f"error: {exc}"])
    return dict(result.report or {}), "\n".join(lines)


def photo_inputs(shared: Path, samples: int) -> list[tuple[np.ndarray, int | None]]:
    return imagenet_photos(shared, samples)


def bundle_runner(target: str, bundle: Path):
    """A function running one ONNX-layout float input through the bundle (LiteRT or OpenVINO CPU)."""
    if target == "intel-vpu":
        import openvino as ov

        core = ov.Core()
        xml = next(bundle.glob("*.xml"))
        compiled = core.compile_model(core.read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return lambda x: np.asarray(compiled({0: x})[compiled.outputs[0]])
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(bundle / "model.tflite"), num_threads=2)
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()

    def run(x: np.ndarray) -> np.ndarray:
        x = x.transpose(0, 2, 3, 1)
        if inp["dtype"] != np.float32:
            scale, zero = inp["quantization"]
            x = np.clip(np.rint(x / scale) + zero, -128, 127).astype(inp["dtype"])
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"])
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        return y

    return run


def top1s(run, photos) -> list[int]:
    return [int(np.argmax(run(x))) for x, _ in photos]


def sensitivity(session, photos, step: float) -> float:
    """Share of photos whose top-1 changes when one input value (a random one) moves by one step."""
    rng = np.random.default_rng(0)
    changed = 0
    for x, _ in photos:
        y = x.copy()
        y[tuple(rng.integers(0, k) for k in x.shape)] += step
        changed += int(
            np.argmax(session.run(None, {"input": x})[0]) != np.argmax(session.run(None, {"input": y})[0])
        )
    return 100.0 * changed / len(photos)


def input_step(path: Path) -> float:
    """The scale of the QuantizeLinear reading the model's input: one quantization step of the input."""
    import onnx

    proto = onnx.load(str(path))
    inits = {t.name: t for t in proto.graph.initializer}
    node = next(n for n in proto.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input")
    return float(onnx.numpy_helper.to_array(inits[node.input[1]]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import onnxruntime as ort
    from edgekit.core.model import load_model
    from edgekit.core.runtime import HostRunner

    model_path = args.shared / MODEL
    out = args.out or Path(tempfile.mkdtemp(prefix="edgekit-qoperator-"))
    report, log = deploy(model_path, args.shared / PHOTOS, args.samples, out)
    print(f"edgekit deploy ... --eval: bundles and report in {out}")
    for line in log.splitlines():
        if line.startswith(("✓", "✗", "error", "reference")):
            print("  " + line)

    photos = photo_inputs(args.shared, args.samples)
    labels = [label for _, label in photos]
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    host = HostRunner(load_model(model_path))
    answers = {
        "onnxruntime, original": top1s(lambda x: session.run(None, {"input": x})[0], photos),
        "QDQ exact (HostRunner)": top1s(lambda x: host.run({"input": x})["output"], photos),
    }
    for target in TARGETS:
        bundle = out / "bundles" / target
        if (bundle / "manifest.json").exists():
            answers[target] = top1s(bundle_runner(target, bundle), photos)
    ort_answers, qdq_answers = answers["onnxruntime, original"], answers["QDQ exact (HostRunner)"]

    def pct(a: list[int], b: list[int | None]) -> float:
        return 100.0 * sum(x == y for x, y in zip(a, b, strict=True)) / len(a)

    rows = {}
    base = pct(ort_answers, labels)
    print(
        f"\n{len(photos)} photos; top-1 and agreement in %; change in pp against onnxruntime on the original"
    )
    print(f"{'':24s} {'top-1':>6s} {'change':>7s} {'=ort':>6s} {'=qdq':>6s} {'report':>7s}  within 0.5 pp")
    by_target = {t["target"]: t for t in report.get("targets", [])}
    for name, answer in answers.items():
        top1 = pct(answer, labels)
        reported = by_target.get(name, {}).get("evaluation", {}).get("accuracy", {}).get("candidate_top1")
        rows[name] = {
            "top1": top1,
            "change_pp": top1 - base,
            "agreement_onnxruntime": pct(answer, ort_answers),
            "agreement_qdq_exact": pct(answer, qdq_answers),
            "report_top1": reported,
        }
        shown = f"{reported:7.1f}" if reported is not None else f"{'-':>7s}"
        r = rows[name]
        print(
            f"{name:24s} {top1:6.1f} {r['change_pp']:+7.1f} {r['agreement_onnxruntime']:6.1f} "
            f"{r['agreement_qdq_exact']:6.1f} {shown}  {'yes' if abs(r['change_pp']) <= 0.5 else 'no'}"
        )
    for target in TARGETS:
        if target not in answers:
            print(f"{target:24s} not packaged (see the deploy output above)")
    flips = sensitivity(session, photos, step=input_step(model_path))
    print(
        f"\nonnxruntime itself: one input value moved by one step changes the top-1 on {flips:.1f} % of the photos"
    )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "one_step_flips_pct": flips, "samples": len(photos)}, indent=1)
        )


if __name__ == "__main__":
    main()
