"""edgekit quantize vs onnxruntime's quantize_static on the same model and data, in one run.

    python benchmarks/quantize_vs_ort.py [--shared ../shared] [--methods minmax,percentile,entropy,mse]

Each quantizer runs in its own subprocess so that wall time and peak RSS are its own. onnxruntime runs as its
documentation says: ``quant_pre_process`` then ``quantize_static`` (QDQ, per-channel int8 weights, int8
activations, MinMax). Both QDQ models are then evaluated by the same runtime on the same evaluation data
against the fp32 model: top-1, its drop, and top-1 agreement with fp32. That runtime is onnxruntime CPU node
by node (graph optimizations off), i.e. the QDQ models' exact semantics: with its optimizations on,
onnxruntime fuses Q/DQ into integer kernels whose u8 x s8 products saturate on x86 CPUs without VNNI.

The same models are also run by OpenVINO (CPU) on its int8 kernels (``HostRunner(exact_qdq=False)``), as an
OpenVINO deployment of the QDQ file would run them; edgekit's own host evaluation runs the exact semantics.

Both quantizers use int8 activations here (like with like: onnxruntime's documented default), although
``edgekit quantize`` writes uint8 activations by default, the scheme OpenVINO runs right
(docs/quantization.md); the OpenVINO figures of edgekit's default file are in tests/test_portable_qdq.py.

Jobs: SqueezeNet 1.1 (opset 7) calibrated on 100 of the 200 shared ImageNet photos and evaluated on all 200;
MNIST-8 (opset 8) calibrated on 200 MNIST test images and evaluated on all 10,000. When onnxruntime fails on a
model as given (it does on both), it is run again on the opset-19 model that edgekit's loader produces, so the
figures still compare like with like.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from shared_data import default_shared, mnist_npz

SQUEEZENET_PRE = {"size": [224, 224], "color": "BGR", "mean": [104.0, 117.0, 123.0], "layout": "NCHW"}


# ------------------------------------------------------------------------------------------ workers


def worker_ours(args: argparse.Namespace) -> dict:
    import edgekit
    from edgekit.core.data import ImagePreprocess

    pre = ImagePreprocess.from_json(args.preprocess) if args.preprocess else None
    options = edgekit.QuantizeOptions(method=args.method, samples=args.samples, activations="int8")
    start = time.perf_counter()
    result = edgekit.quantize_model(args.model, args.calib, options=options, output=args.out, preprocess=pre)
    return {
        "seconds": time.perf_counter() - start,
        "float_ops": len(result.report["quantization"]["float_ops"]),
    }


class _Reader:
    """onnxruntime's CalibrationDataReader over edgekit's streamed data set (the same samples)."""

    def __init__(self, model: str, calib: str, preprocess: str | None, samples: int):
        from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
        from edgekit.core.model import load_model

        pre = ImagePreprocess.from_json(preprocess) if preprocess else None
        self.it = iter(open_dataset(calib, input_specs(load_model(model)), pre, limit=samples))

    def get_next(self):
        sample = next(self.it, None)
        return None if sample is None else sample.inputs

    def rewind(self):  # pragma: no cover - newer onnxruntime calls it for some methods
        pass


def worker_ort(args: argparse.Namespace) -> dict:
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    methods = {
        "minmax": CalibrationMethod.MinMax,
        "percentile": CalibrationMethod.Percentile,
        "entropy": CalibrationMethod.Entropy,
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        pre = str(Path(tmp, "pre.onnx"))
        quant_pre_process(args.model, pre)
        quantize_static(
            pre,
            args.out,
            _Reader(args.model, args.calib, args.preprocess, args.samples),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=methods[args.method],
        )
    seconds = time.perf_counter() - start
    onnx.checker.check_model(onnx.load(args.out), full_check=True)
    return {"seconds": seconds}


def run_worker(
    kind: str, model: Path, calib: Path, out: Path, method: str, samples: int, pre: dict | None
) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, "--model", str(model), "--calib", str(calib),
           "--out", str(out), "--method", method, "--samples", str(samples)]  # fmt: skip
    if pre:
        cmd += ["--preprocess", json.dumps(pre)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"ok": False, "error": tail[:200]}
    return {"ok": True, **json.loads(lines[-1])}


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). ``getrusage``'s ru_maxrss is not: Linux keeps the parent's peak in it
    across fork and exec, so every worker would report at least the benchmark driver's size."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_main(args: argparse.Namespace) -> None:
    result = worker_ours(args) if args.worker == "ours" else worker_ort(args)
    result["peak_rss_mb"] = peak_rss_mb()
    print(json.dumps(result))


# ------------------------------------------------------------------------------------------- evaluation


def evaluate(
    fp32: Path, candidates: dict[str, Path], data: Path, pre: dict | None, runtime: str = "onnxruntime"
) -> dict[str, dict]:
    """top-1 (with labels), drop, agreement with fp32, every model run by ``runtime``: onnxruntime CPU node
    by node, or OpenVINO CPU on its int8 kernels."""
    from edgekit.core.data import ImagePreprocess, input_specs, open_dataset
    from edgekit.core.model import load_model

    if runtime == "openvino":
        import onnx
        from edgekit.core.runtime import HostRunner

        class _OpenVino:
            def __init__(self, path: Path):
                self.runner = HostRunner(onnx.load(str(path)), exact_qdq=False)

            def run(self, _names, feeds):
                return list(self.runner.run(feeds).values())

        make = _OpenVino
    else:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL

        def make(path: Path):
            return ort.InferenceSession(str(path), opts)

    sessions = {"fp32": make(fp32)}
    sessions.update({k: make(p) for k, p in candidates.items()})
    dataset = open_dataset(
        data, input_specs(load_model(fp32)), ImagePreprocess.from_json(pre) if pre else None
    )
    correct = dict.fromkeys(sessions, 0)
    agree = dict.fromkeys(sessions, 0)
    n = 0
    for sample in dataset:
        preds = {k: int(np.argmax(s.run(None, sample.inputs)[0])) for k, s in sessions.items()}
        n += 1
        for k, p in preds.items():
            correct[k] += p == sample.label
            agree[k] += p == preds["fp32"]
    out = {}
    for k in sessions:
        out[k] = {
            "top1": 100.0 * correct[k] / n,
            "drop_pp": 100.0 * (correct["fp32"] - correct[k]) / n,
            "agreement": 100.0 * agree[k] / n,
            "samples": n,
        }
    return out


# ------------------------------------------------------------------------------------------- jobs


REPEATS = 3


def _median_run(runs: list[dict]) -> dict:
    ok = [r for r in runs if r["ok"]]
    if not ok:
        return runs[0]
    ok.sort(key=lambda r: r["seconds"])
    median = dict(ok[len(ok) // 2])
    median["all_seconds"] = [round(r["seconds"], 3) for r in ok]
    median["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok)
    return median


def upgraded(model: Path, tmp: Path) -> Path:
    """The opset-19 model edgekit's loader makes (a fair input for onnxruntime when it fails on the original)."""
    from edgekit.core.model import load_model, save_model

    out = tmp / (model.stem + ".opset19.onnx")
    save_model(load_model(model), out)
    return out


def job(name: str, model: Path, calib: Path, val: Path, samples: int, pre, methods, tmp: Path) -> dict:
    print(f"\n## {name}", flush=True)
    ours = tmp / f"{name}.edgekit.onnx"
    theirs = tmp / f"{name}.ort.onnx"
    r_ort = run_worker("ort", model, calib, theirs, "minmax", samples, pre)
    result = {"onnxruntime_as_given": dict(r_ort)}
    ort_model = model
    if not r_ort["ok"]:
        print(f"onnxruntime on the model as given: FAILED ({r_ort['error']}); retrying on the opset-19 model")
        ort_model = upgraded(model, tmp)
    # Alternate the two, REPEATS times each, and keep the median time: the machine's load varies.
    runs_ours, runs_ort = [], []
    for _ in range(REPEATS):
        runs_ours.append(run_worker("ours", model, calib, ours, "minmax", samples, pre))
        runs_ort.append(run_worker("ort", ort_model, calib, theirs, "minmax", samples, pre))
    r_ours, r_ort = _median_run(runs_ours), _median_run(runs_ort)
    result["edgekit"], result["onnxruntime"] = r_ours, r_ort
    fp32_size = model.stat().st_size
    candidates = {"edgekit": ours}
    if r_ort["ok"]:
        candidates["onnxruntime"] = theirs
    acc = evaluate(model, candidates, val, pre)
    result["accuracy"] = acc
    acc_ov = evaluate(model, candidates, val, pre, runtime="openvino")
    result["accuracy_openvino"] = acc_ov
    print(
        f"{'':14}{'time s':>9}{'peak RSS MB':>13}{'size x fp32':>13}{'top-1 %':>9}{'drop pp':>9}{'agree %':>9}"
    )
    print(f"{'fp32':14}{'':9}{'':13}{1.0:13.3f}{acc['fp32']['top1']:9.2f}{'':9}{'':9}")
    for k, r, path in (("edgekit", r_ours, ours), ("onnxruntime", r_ort, theirs)):
        if not r.get("ok"):
            print(f"{k:14} failed: {r.get('error')}")
            continue
        a = acc[k]
        print(f"{k:14}{r['seconds']:9.2f}{r['peak_rss_mb']:13.0f}{path.stat().st_size / fp32_size:13.3f}"
              f"{a['top1']:9.2f}{a['drop_pp']:9.2f}{a['agreement']:9.2f}")  # fmt: skip
        result[k + "_size_ratio"] = path.stat().st_size / fp32_size
    print("run by OpenVINO's int8 CPU kernels (as an OpenVINO deployment of the QDQ file runs) instead:")
    for k, a in acc_ov.items():
        print(
            f"  {k:12} top-1 {a['top1']:.2f} %  drop {a['drop_pp']:.2f} pp  agreement {a['agreement']:.2f} %"
        )
    if r_ort.get("ok") and r_ours.get("ok"):
        ratio = r_ours["seconds"] / r_ort["seconds"]
        result["time_ratio"] = ratio
        print(f"time ratio edgekit / onnxruntime (median of {REPEATS}): {ratio:.2f}  "
              f"(edgekit {r_ours['all_seconds']} s, onnxruntime {r_ort['all_seconds']} s)")  # fmt: skip
    if methods:
        print("edgekit calibration methods (peak RSS, time, top-1 agreement via onnxruntime):")
        result["methods"] = {}
        for method in methods:
            path = tmp / f"{name}.{method}.onnx"
            r = run_worker("ours", model, calib, path, method, samples, pre)
            if not r["ok"]:
                print(f"  {method:11} failed: {r['error']}")
                continue
            a = evaluate(model, {method: path}, val, pre)[method]
            result["methods"][method] = {**r, **a}
            print(f"  {method:11} {r['peak_rss_mb']:6.0f} MB {r['seconds']:7.2f} s  top-1 {a['top1']:.2f} "
                  f"drop {a['drop_pp']:.2f} pp  agreement {a['agreement']:.2f} %")  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--methods", default="minmax,percentile,entropy,mse")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--worker", choices=["ours", "ort"])
    parser.add_argument("--model")
    parser.add_argument("--calib")
    parser.add_argument("--out")
    parser.add_argument("--method", default="minmax")
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--preprocess")
    args = parser.parse_args()
    if args.worker:
        worker_main(args)
        return
    shared = args.shared
    methods = [m for m in args.methods.split(",") if m]
    results = {}
    with tempfile.TemporaryDirectory(prefix="edgekit-bench-") as tmp_name:
        tmp = Path(tmp_name)
        images = shared / "data" / "imagenet-sample-200"
        results["squeezenet"] = job("squeezenet1.1", shared / "models" / "squeezenet1.1-fp32.onnx", images,
                                    images, 100, SQUEEZENET_PRE, methods, tmp)  # fmt: skip
        (tmp / "calib").mkdir()
        (tmp / "val").mkdir()
        calib, val = mnist_npz(shared, 200, tmp / "calib"), mnist_npz(shared, 10_000, tmp / "val")
        results["mnist"] = job("mnist-8", shared / "models" / "mnist-8.onnx", calib, val, 200, None, [], tmp)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
