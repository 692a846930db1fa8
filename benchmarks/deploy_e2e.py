"""`edgekit deploy` end to end on SqueezeNet 1.1 with all three targets on the local agent, in one run.

    python benchmarks/deploy_e2e.py [--shared ../shared] [--out DIR]

Prints, per target: top-1 of fp32 (host) and of the device run and the drop (goal <= 1.0 pp); whether the
device-side top-1 equals what the host gets running the same bundle directly in LiteRT / OpenVINO (the agent adds
no error); and the wall time of each stage (quantize, package, upload, evaluate) with the share of time that is not
on-device inference.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

import edgekit
import numpy as np
from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
from edgekit.core.model import load_model
from edgekit.deployment import Hooks
from edgekit.device_agents.bundle import read_bundle
from edgekit.device_eval import from_device, to_device

TARGETS = ("arm-cpu", "intel-vpu", "nnapi")
PRE = ImagePreprocess(size=(224, 224), color="BGR", mean=(104.0, 117.0, 123.0))


def direct_top1(bundle: Path, model_path: Path, images: Path) -> list[int]:
    """Run the bundle straight in its runtime on the host (no agent) and return the top-1 per image."""
    fp32 = load_model(model_path)
    preds = []
    with read_bundle(bundle) as loaded:
        m = loaded.manifest
        if m.runtime == "tflite":
            from ai_edge_litert.interpreter import Interpreter

            interp = Interpreter(model_path=str(loaded.primary_path), num_threads=2)
            interp.allocate_tensors()
            (inp,), (out,) = interp.get_input_details(), interp.get_output_details()

            def run(x):
                interp.set_tensor(inp["index"], to_device(x, m.inputs[0]))
                interp.invoke()
                return interp.get_tensor(out["index"])
        else:
            import openvino as ov

            compiled = ov.Core().compile_model(
                str(loaded.primary_path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"}
            )

            def run(x):
                return compiled(to_device(x, m.inputs[0]))[0]

        for sample in open_dataset(images, input_specs(fp32), PRE):
            y = run(sample.inputs["data_0"])
            preds.append(int(np.argmax(from_device(y, m.outputs[0], (1, 1000, 1, 1)))))
    return preds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[1].parent / "shared")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    model = args.shared / "models" / "squeezenet1.1-fp32.onnx"
    images = args.shared / "data" / "imagenet-sample-200"
    out = args.out or Path(tempfile.mkdtemp(prefix="edgekit-deploy-"))
    start = time.perf_counter()
    stages: dict[str, float] = {}

    def say(line: str) -> None:
        if line.startswith("connecting to the agent"):  # packaging is over, the device stage starts
            stages["packaged"] = time.perf_counter()
        print(line)

    result = edgekit.deploy(model, TARGETS, output=out / "bundles", calib=images, eval=images, devices="local",
                            report=out / "report.html", fail_on_drop=1.0, preprocess=PRE,
                            hooks=Hooks(say=say))  # fmt: skip
    if result.failures:
        raise SystemExit(f"packaging failed: {list(result.failures)}")
    end = time.perf_counter()
    report, packaged = result.report, result.bundles
    # the device stage starts with fp32 on the host, before connecting to the agent
    package_wall = stages.get("packaged", end) - start - report["timings"]["host_fp32_s"]
    device_wall = end - start - package_wall
    rows = csv.reader((images / "labels.csv").read_text().splitlines())
    labels = {row[0]: int(row[1]) for row in rows if row[1].isdigit()}

    print(f"\nSqueezeNet 1.1, {report['samples']} images, local agent")
    print(f"{'target':10}{'fp32 %':>8}{'device %':>10}{'drop pp':>9}{'agree %':>9}{'direct %':>10}{'same':>6}"
          f"{'quant s':>9}{'pack s':>8}{'upload s':>10}{'eval s':>8}{'compute s':>11}")  # fmt: skip
    figures = {}
    names = sorted(labels)
    for item, entry in zip(packaged, report["targets"], strict=True):
        acc = entry["evaluation"]["accuracy"]
        preds = direct_top1(item.path, model, images)
        direct = 100.0 * sum(p == labels[n] for p, n in zip(preds, names, strict=True)) / len(preds)
        t = entry["transfer"]
        quant, pack = item.timings.get("quantize_s", 0.0), item.timings.get("package_s", 0.0)
        same = abs(direct - acc["candidate_top1"]) < 1e-9
        print(f"{item.target:10}{acc['reference_top1']:8.2f}{acc['candidate_top1']:10.2f}{acc['top1_drop_pp']:9.2f}"
              f"{entry['evaluation']['top1_agreement']:9.2f}{direct:10.2f}{'yes' if same else 'NO':>6}"
              f"{quant:9.2f}{pack:8.2f}{t['upload_s']:10.2f}{t['infer_wall_s']:8.2f}{t['compute_s']:11.2f}")  # fmt: skip
        figures[item.target] = {**acc, "agreement": entry["evaluation"]["top1_agreement"], "direct_top1": direct,
                                "device_equals_direct": same, "quantize_s": quant, "package_s": pack,
                                "upload_s": t["upload_s"], "evaluate_s": t["infer_wall_s"], "compute_s": t["compute_s"],
                                "latency_ms": entry["latency_ms"]}  # fmt: skip
    total = package_wall + device_wall
    compute = sum(f["compute_s"] for f in figures.values())
    print(f"wall time: packaging (incl. quantization) {package_wall:.1f} s, device stage {device_wall:.1f} s "
          f"(incl. fp32 on the host); on-device inference {compute:.1f} s = {100 * compute / total:.1f} % of "
          f"{total:.1f} s, so {100 - 100 * compute / total:.1f} % is not inference")  # fmt: skip
    (out / "figures.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(f"report: {out / 'report.html'}")


if __name__ == "__main__":
    main()
