"""onnx2tf, the usual ONNX -> TFLite tool, against edgekit on the shared SqueezeNet 1.1 (opset 7).

    python benchmarks/onnx2tf_peer.py [--shared ../shared] [--venv benchmarks/.peers/onnx2tf]
        [--calib 100] [--eval 200] [--runs 300] [--repeats 1] [--json out.json]

0. The peer's environment. onnx2tf needs TensorFlow, which is not a project dependency and never goes
   into the project's environment: the peer runs from its own venv at ``--venv``. If that venv is
   missing or does not import onnx2tf and tensorflow, it is made with ``python -m venv`` and
   ``pip install tensorflow tf_keras onnx2tf onnx onnx_graphsurgeon sng4onnx onnxruntime onnxsim psutil
   ai_edge_litert`` (several minutes). The disk size of the venv and of its ``site-packages/tensorflow``
   is printed.
1. Traps handled. onnx2tf overwrites its input .onnx in place with its simplified model: it only ever
   gets a copy in a temporary folder, and the shared model's sha256 is checked before and after every
   peer run (exit 2 if it changed). onnx2tf downloads
   ``calibration_image_sample_data_20x128x128x3_float32.npy`` at start-up unless its working directory
   holds it (there is no network here): the script writes it there from 20 shared photos (RGB, 128x128,
   float32 in [0, 1]). onnx2tf runs ``onnxsim`` by name, so the venv's ``bin`` is first on its PATH.
2. Cost. Each job is a fresh process: onnx2tf fp32 (``-i copy.onnx -o dir``) and int8 (``-oiqt -cind
   <input> calib_nhwc.npy "[[[[0,0,0]]]]" "[[[[1,1,1]]]]"``, calibrated on the same first ``--calib``
   images edgekit calibrates on, preprocessed as edgekit does: BGR, mean 104/117/123, NHWC); beside them,
   edgekit fp32 (load + convert + write), edgekit int8 from the QDQ model (the ``tflite_convert.py`` job)
   and edgekit quantize + convert (calibration included, like ``-oiqt``). onnx2tf's peak RSS is
   ``ru_maxrss`` of its process tree as a small wrapper sees it (the largest process: onnx2tf itself or
   an ``onnxsim`` it starts); edgekit's is the process's own ``VmHWM``. Median of ``--repeats``,
   interleaved.
3. Correctness on the first ``--eval`` shared photos: onnx2tf's ``float32``, ``integer_quant`` (int8,
   float I/O: the same contract as edgekit's arm-cpu int8) and ``full_integer_quant`` (int8 I/O) files
   and edgekit's fp32 / int8 files, all in LiteRT, against the fp32 ONNX in onnxruntime: max abs error,
   the spread of each output element across images (0 = a constant output), top-1 agreement and top-1
   accuracy. For onnx2tf's files also the top-1 of the tensor feeding its SOFTMAX (its logits), read
   without the XNNPACK delegate. The log of each onnx2tf run is searched for "softmax" and warnings.
4. Latency, one process, LiteRT interpreter (default XNNPACK delegate), 2 threads, warm-up, then
   interleaved rounds of 25 runs, the order shuffled each round: ours int8, ours int8 with an integer
   head, onnx2tf integer_quant, onnx2tf full_integer_quant, ours fp32, onnx2tf fp32. Prints medians,
   10th percentiles and ratios: of the medians, and the median of the per-round ratios (less affected
   by the drift of a shared machine); the target is ours int8 / onnx2tf int8 <= 1.0. Also the op counts
   of the int8 files. "Integer head" is a diagnostic: edgekit's default keeps the output Softmax and
   the pooling before it in float (DEQUANTIZE of conv10's 13x13x1000 output, float MEAN), onnx2tf
   computes them in int8; ``float_output_heads=False`` (what nnapi uses) gives the same op list as
   onnx2tf's. It is in the correctness table too.
``--json`` writes every figure. Exit 2 with one line if ../shared is missing, the venv cannot be made,
onnx2tf fails, or the shared model changed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import tflite_convert as tc
import tflite_latency as tl
from shared_data import default_shared

PEER_PACKAGES = (
    "tensorflow",
    "tf_keras",
    "onnx2tf",
    "onnx",
    "onnx_graphsurgeon",
    "sng4onnx",
    "onnxruntime",
    "onnxsim",
    "psutil",
    "ai_edge_litert",
)
STARTUP_SAMPLE = "calibration_image_sample_data_20x128x128x3_float32.npy"
PEER_TIMEOUT_S = 1800
THREADS = tl.THREADS


class BenchError(Exception):
    """A one-line reason to stop (exit 2)."""


# -- 0. the peer's venv ---------------------------------------------------------------------------------
_PROBE = (
    "import json, importlib.metadata as m, onnx2tf, tensorflow; "
    "print(json.dumps({p: m.version(p) for p in ('tensorflow', 'onnx2tf', 'onnx', 'onnxsim')}))"
)


def _probe(venv: Path) -> dict[str, str] | None:
    python = venv / "bin/python"
    if not (python.exists() and (venv / "bin/onnx2tf").exists()):
        return None
    done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=300)
    return json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None


def ensure_venv(venv: Path) -> dict[str, str]:
    """The peer venv's package versions, making the venv first if needed."""
    versions = _probe(venv)
    if versions is not None:
        return versions
    print(f"making the onnx2tf venv at {venv} (pip install {' '.join(PEER_PACKAGES)}) ...", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=600)
        subprocess.run(
            [venv / "bin/python", "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True, timeout=3600
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        raise BenchError(f"cannot make the onnx2tf venv at {venv}: {exc}") from None
    versions = _probe(venv)
    if versions is None:
        raise BenchError(f"the venv at {venv} was made but does not import onnx2tf and tensorflow")
    return versions


def disk_mb(path: Path) -> float:
    """Disk usage (allocated blocks, like ``du``) of a folder, in MB."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total / 2**20


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- inputs for the peer ---------------------------------------------------------------------------------
def write_startup_sample(images: Path, folder: Path) -> None:
    """The 20-image file onnx2tf would download at start-up: RGB, 128x128, float32 in [0, 1], NHWC."""
    from edgekit.core.data import ImagePreprocess, InputSpec, open_dataset

    pre = ImagePreprocess(size=(128, 128), color="RGB", scale=1 / 255, layout="NHWC")
    data = open_dataset(images, [InputSpec("x", (1, 128, 128, 3))], pre, limit=20)
    arr = np.concatenate([s.inputs["x"] for s in data]).astype(np.float32)
    assert arr.shape == (20, 128, 128, 3), arr.shape
    np.save(folder / STARTUP_SAMPLE, arr)


def write_calibration(case: tc.Case, count: int, path: Path) -> str:
    """edgekit's first ``count`` calibration inputs, NCHW -> NHWC, for ``-cind``; returns the input name."""
    from edgekit.core.model import load_model

    model = load_model(case.model)
    (name,) = [v.name for v in model.graph.inputs]
    batch = np.concatenate([s.inputs[name] for s in tc.dataset(case, model, count)])
    np.save(path, batch.transpose(0, 2, 3, 1).astype(np.float32))
    return name


# -- 2. cost ---------------------------------------------------------------------------------------------
_WRAPPER = r"""
import json, resource, subprocess, sys, time
cwd, log, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
t0 = time.perf_counter()
with open(log, "wb") as out:
    rc = subprocess.run(sys.argv[4:], cwd=cwd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout).returncode
wall = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": rc, "total_s": wall, "peak_rss_mb": rss / 1024}))
"""

_QUANTIZE_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from pathlib import Path
import tflite_convert as tc
from edgekit.core.model import load_model
from edgekit.targets.tflite.converter import convert
t1 = time.perf_counter()
case = tc.Case("squeezenet1.1", Path(sys.argv[2]), Path(sys.argv[3]), tc.SQUEEZENET_PRE)
folder = Path(sys.argv[5]).parent
convert(load_model(tc.quantized(case, int(sys.argv[4]), folder))).save(sys.argv[5])
t2 = time.perf_counter()
hwm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"total_s": t2 - t0, "work_s": t2 - t1, "peak_rss_mb": hwm / 1024}))
"""


def run_onnx2tf(venv: Path, work: Path, src: Path, tag: str, extra: list[str]) -> dict[str, Any]:
    """onnx2tf on a fresh copy of ``src`` in ``work``; cost, log findings and the copy's fate."""
    copy = work / f"{tag}.onnx"
    shutil.copyfile(src, copy)
    before = sha256(copy)
    out, log = work / f"out_{tag}", work / f"{tag}.log"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(venv / "bin/onnx2tf"), "-i", copy.name, "-o", out.name, *extra]
    env = dict(os.environ, PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    wrapper = [sys.executable, "-I", "-c", _WRAPPER, str(work), str(log), str(PEER_TIMEOUT_S), *cmd]
    try:
        done = subprocess.run(
            wrapper, capture_output=True, text=True, env=env, timeout=PEER_TIMEOUT_S + 60, check=True
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise BenchError(f"onnx2tf {tag} did not finish: {exc}") from None
    cost = json.loads(done.stdout.strip().splitlines()[-1])
    if cost.pop("rc") != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        print("\n".join(tail), file=sys.stderr)
        raise BenchError(f"onnx2tf {tag} failed (exit status not 0; last lines of its log above)")
    cost["overwrote_its_input"] = sha256(copy) != before
    cost["log"] = scan_log(log)
    cost["files"] = {p.name[len(tag) + 1 : -len(".tflite")]: p for p in sorted(out.glob("*.tflite"))}
    return cost


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def scan_log(log: Path) -> dict[str, Any]:
    lines = [_ANSI.sub("", line) for line in log.read_text(errors="replace").splitlines()]
    softmax = [line.strip() for line in lines if "softmax" in line.lower()]
    warnings = [line.strip() for line in lines if re.search(r"\bwarn(ing)?\b", line, re.IGNORECASE)]
    return {
        "softmax_lines": softmax,
        "softmax_warnings": [line for line in softmax if re.search(r"warn", line, re.IGNORECASE)],
        "warning_lines": len(warnings),
        "distinct_warnings": sorted(set(warnings))[:10],
    }


def measure_cost(
    args: argparse.Namespace, case: tc.Case, qdq: Path, work: Path, input_name: str
) -> tuple[dict[str, Any], dict[str, Path], dict[str, Any]]:
    shared_sha = sha256(case.model)
    int8_flags = ["-oiqt", "-cind", input_name, "calib_nhwc.npy", "[[[[0,0,0]]]]", "[[[[1,1,1]]]]"]
    here = str(Path(__file__).resolve().parent)
    runs: dict[str, list[dict[str, Any]]] = {}
    files: dict[str, Path] = {}
    logs: dict[str, Any] = {}
    for r in range(args.repeats):
        for tag, flags in (("fp32", []), ("int8", int8_flags)):
            peer = run_onnx2tf(args.venv, work, case.model, f"{tag}{r}", flags)
            if sha256(case.model) != shared_sha:
                raise BenchError(f"{case.model} CHANGED during the onnx2tf {tag} run: restore it")
            for key, path in peer.pop("files").items():
                files[f"{tag}/{key}"] = path
            logs[tag] = peer.pop("log")
            runs.setdefault(f"onnx2tf {tag}", []).append(peer)
        jobs: list[tuple[str, Callable[[], dict[str, float]]]] = [
            ("edgekit fp32", lambda: tc.child("edgekit", case.model, work / "ours_fp32.tflite")),
            ("edgekit int8 from QDQ", lambda: tc.child("edgekit", qdq, work / "ours_int8.tflite")),
            ("edgekit quantize + int8", lambda: _quantize_child(here, case, args.calib, work)),
        ]
        for name, job in jobs:
            runs.setdefault(name, []).append(job())
    cost = {
        name: {
            key: (
                float(np.median([i[key] for i in items])) if key != "overwrote_its_input" else items[0][key]
            )
            for key in items[0]
        }
        for name, items in runs.items()
    }
    return cost, files, logs


def _quantize_child(here: str, case: tc.Case, calib: int, work: Path) -> dict[str, float]:
    folder = work / "quantize_child"
    folder.mkdir(exist_ok=True)
    dst = folder / "ours_int8.tflite"
    argv = [here, str(case.model), str(case.data), str(calib), str(dst)]
    done = subprocess.run(
        [sys.executable, "-c", _QUANTIZE_CHILD, *argv],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- 3. correctness --------------------------------------------------------------------------------------
class PeerModel:
    """An onnx2tf .tflite in LiteRT: NHWC input (quantized if the file's input is integer)."""

    def __init__(self, data: bytes, preserve: bool = False) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        kwargs: dict[str, Any] = {"num_threads": THREADS}
        if preserve:  # intermediate tensors are readable only without the delegate
            kwargs["experimental_op_resolver_type"] = OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
            kwargs["experimental_preserve_all_tensors"] = True
        self.interp = Interpreter(model_content=data, **kwargs)
        self.interp.allocate_tensors()
        self.input = self.interp.get_input_details()[0]
        self.output = self.interp.get_output_details()[0]
        self.logits = None
        if preserve:
            (op,) = [o for o in self.interp._get_ops_details() if o["op_name"] == "SOFTMAX"]
            self.logits = self.interp.get_tensor_details()[int(op["inputs"][0])]

    def set(self, nchw: np.ndarray) -> None:
        x = nchw.transpose(0, 2, 3, 1)
        if self.input["dtype"] != np.float32:
            scale, zero = self.input["quantization"]
            info = np.iinfo(self.input["dtype"])
            x = np.clip(np.round(x / scale) + zero, info.min, info.max)
        self.interp.set_tensor(self.input["index"], x.astype(self.input["dtype"]))

    def _read(self, detail: dict[str, Any]) -> np.ndarray:
        value = self.interp.get_tensor(detail["index"]).reshape(-1)
        if detail["dtype"] == np.float32:
            return value
        scale, zero = detail["quantization"]
        return (value.astype(np.float32) - zero) * scale

    def __call__(self, nchw: np.ndarray) -> np.ndarray:
        self.set(nchw)
        self.interp.invoke()
        return self._read(self.output)

    def read_logits(self) -> np.ndarray:
        assert self.logits is not None
        return self._read(self.logits)


def ours_model(result: Any) -> Callable[[np.ndarray], np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=result.data, num_threads=THREADS)
    interp.allocate_tensors()
    (inp,), (out,) = result.inputs, result.outputs
    in_index, out_index = interp.get_input_details()[0]["index"], interp.get_output_details()[0]["index"]

    def run(nchw: np.ndarray) -> np.ndarray:
        interp.set_tensor(in_index, inp.to_tflite(nchw))
        interp.invoke()
        return out.to_onnx(interp.get_tensor(out_index)).reshape(-1)

    return run


def measure_correctness(
    case: tc.Case, ours: dict[str, Any], peer: dict[str, bytes], count: int
) -> dict[str, dict[str, Any]]:
    from edgekit.core.model import load_model

    session = tc._ort(case.model)
    out_name = session.get_outputs()[0].name
    models: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "edgekit fp32": ours_model(ours["fp32"]),
        "edgekit int8": ours_model(ours["int8"]),
        "edgekit int8 integer head": ours_model(ours["int8 integer head"]),
    }
    logit_readers: dict[str, PeerModel] = {}
    for key, data in peer.items():
        models[f"onnx2tf {key}"] = PeerModel(data)
        logit_readers[f"onnx2tf {key}"] = PeerModel(data, preserve=True)
    outputs: dict[str, list[np.ndarray]] = {name: [] for name in models}
    logits_top1: dict[str, list[int]] = {name: [] for name in logit_readers}
    refs, labels = [], []
    for sample in tc.dataset(case, load_model(case.model), count):
        (x,) = sample.inputs.values()
        refs.append(session.run([out_name], sample.inputs)[0].reshape(-1))
        labels.append(sample.label)
        for name, run in models.items():
            outputs[name].append(run(x))
        for name, reader in logit_readers.items():
            reader(x)
            logits_top1[name].append(int(np.argmax(reader.read_logits())))
    ref = np.stack(refs)
    ref_top1 = ref.argmax(1)
    lab = np.array(labels)
    figures = {
        "onnx fp32 (onnxruntime)": {"top1_accuracy": float(np.mean(ref_top1 == lab)), "samples": len(lab)}
    }
    for name, outs in outputs.items():
        got = np.stack(outs).astype(np.float64)
        spread = got.max(0) - got.min(0)
        top1 = got.argmax(1)
        fig: dict[str, Any] = {
            "max_abs_error": float(np.abs(got - ref).max()),
            "max_spread_across_images": float(spread.max()),
            "constant_output": bool(spread.max() == 0.0),
            "output_range": [float(got.min()), float(got.max())],
            "top1_agreement": float(np.mean(top1 == ref_top1)),
            "top1_accuracy": float(np.mean(top1 == lab)),
        }
        if name in logits_top1:
            fig["logits_top1_accuracy"] = float(np.mean(np.array(logits_top1[name]) == lab))
            fig["logits_top1_agreement"] = float(np.mean(np.array(logits_top1[name]) == ref_top1))
        figures[name] = fig
    return figures


def integer_head_qdq(case: tc.Case, calib: int, folder: Path) -> Path:
    """The QDQ model with the Softmax head (and the pool before it) quantized too, as nnapi has it: a
    diagnostic for the latency of edgekit's default float head against onnx2tf's integer one."""
    from edgekit import QuantizeOptions, quantize_model
    from edgekit.core.model import load_model

    path = folder / f"{case.name}-qdq-integer-head.onnx"
    options = QuantizeOptions(activations="int8", samples=calib, float_output_heads=False)
    quantize_model(case.model, tc.dataset(case, load_model(case.model), calib), options=options, output=path)
    return path


# -- 4. latency ------------------------------------------------------------------------------------------
def op_counts(data: bytes) -> dict[str, int]:
    from ai_edge_litert import schema_py_generated as fb

    names = {v: k for k, v in vars(fb.BuiltinOperator).items() if not k.startswith("_")}
    m = fb.Model.GetRootAs(data, 0)
    sub = m.Subgraphs(0)
    counts: dict[str, int] = {}
    for i in range(sub.OperatorsLength()):
        code = m.OperatorCodes(sub.Operators(i).OpcodeIndex())
        name = names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")
        counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


LATENCY_PAIRS = (
    ("edgekit int8", "onnx2tf integer_quant"),
    ("edgekit int8", "onnx2tf full_integer_quant"),
    ("edgekit int8 integer head", "onnx2tf integer_quant"),
    ("edgekit int8", "edgekit int8 integer head"),
    ("edgekit fp32", "onnx2tf float32"),
)


def measure_latency(
    ours: dict[str, Any], peer: dict[str, bytes], x: np.ndarray, input_name: str, runs: int, warmup: int
) -> dict[str, Any]:
    def peer_runner(data: bytes) -> Callable[[], None]:
        model = PeerModel(data)
        model.set(x)
        return model.interp.invoke

    feeds, head = {input_name: x}, "int8 integer head"
    runners = {
        "edgekit int8": tl.litert_runner(ours["int8"].data, ours["int8"], feeds),
        "edgekit int8 integer head": tl.litert_runner(ours[head].data, ours[head], feeds),
        "onnx2tf integer_quant": peer_runner(peer["integer_quant"]),
        "onnx2tf full_integer_quant": peer_runner(peer["full_integer_quant"]),
        "edgekit fp32": tl.litert_runner(ours["fp32"].data, ours["fp32"], feeds),
        "onnx2tf float32": peer_runner(peer["float32"]),
    }
    for run in runners.values():
        for _ in range(warmup):
            run()
    rounds: dict[str, list[list[float]]] = {name: [] for name in runners}
    order = list(runners)
    shuffle = random.Random(0).shuffle
    for _ in range(max(1, runs // 25)):
        shuffle(order)  # no model always runs right after the same other one
        for name in order:
            run, times = runners[name], []
            for _ in range(25):
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
            rounds[name].append(times)
    flat = {name: [t * 1000 for ts in rs for t in ts] for name, rs in rounds.items()}
    per_round = {name: [statistics.median(ts) for ts in rs] for name, rs in rounds.items()}
    ratios = {}
    for ours_name, peer_name in LATENCY_PAIRS:
        pairs = zip(per_round[ours_name], per_round[peer_name], strict=True)
        ratios[f"{ours_name} / {peer_name}"] = statistics.median(a / b for a, b in pairs)
    return {
        "median_ms": {name: statistics.median(ts) for name, ts in flat.items()},
        "p10_ms": {name: float(np.percentile(ts, 10)) for name, ts in flat.items()},
        "ratio_median_of_rounds": ratios,
        "timed_runs": len(next(iter(flat.values()))),
    }


# -- main ------------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> dict[str, Any]:
    from edgekit.core.model import load_model
    from edgekit.targets.tflite.converter import convert

    if not (args.shared / "models").is_dir():
        raise BenchError(f"shared models not found under {args.shared} (pass --shared)")
    results: dict[str, Any] = {"threads": THREADS, "calib": args.calib, "eval": args.eval}
    results["peer_versions"] = ensure_venv(args.venv)
    results["venv_mb"] = disk_mb(args.venv)
    tf_dirs = list(args.venv.glob("lib/python*/site-packages/tensorflow"))
    results["tensorflow_mb"] = disk_mb(tf_dirs[0]) if tf_dirs else None
    with tempfile.TemporaryDirectory(prefix="edgekit-onnx2tf-") as tmp:
        folder = Path(tmp)
        work = folder / "peer"
        work.mkdir()
        case = tc.cases(args.shared, 1, folder)[0]
        write_startup_sample(case.data, work)
        input_name = write_calibration(case, args.calib, work / "calib_nhwc.npy")
        qdq = tc.quantized(case, args.calib, folder)
        print(f"onnx2tf {results['peer_versions']['onnx2tf']}: converting (fresh processes) ...", flush=True)
        cost, files, logs = measure_cost(args, case, qdq, work, input_name)
        results["cost"], results["onnx2tf_log"] = cost, logs
        wanted = {"float32": "fp32/float32", "integer_quant": "int8/integer_quant"}
        wanted["full_integer_quant"] = "int8/full_integer_quant"
        missing = sorted(set(wanted.values()) - set(files))
        if missing:
            raise BenchError(f"onnx2tf wrote no {', '.join(missing)} .tflite (it wrote {sorted(files)})")
        peer = {key: files[path].read_bytes() for key, path in wanted.items()}
        ours = {"fp32": convert(load_model(case.model)), "int8": convert(load_model(qdq))}
        ours["int8 integer head"] = convert(load_model(integer_head_qdq(case, args.calib, folder)))
        results["correctness"] = measure_correctness(case, ours, peer, args.eval)
        x = next(iter(tc.dataset(case, load_model(case.model), 1))).inputs[input_name]
        results["latency"] = measure_latency(ours, peer, x, input_name, args.runs, args.warmup)
        results["ops"] = {
            "edgekit int8": op_counts(ours["int8"].data),
            "edgekit int8 integer head": op_counts(ours["int8 integer head"].data),
            "onnx2tf integer_quant": op_counts(peer["integer_quant"]),
            "onnx2tf full_integer_quant": op_counts(peer["full_integer_quant"]),
        }
        results["sizes_bytes"] = {f"edgekit {k}": len(v.data) for k, v in ours.items()}
        results["sizes_bytes"].update({f"onnx2tf {k}": len(v) for k, v in peer.items()})
    return results


def report(r: dict[str, Any], repeats: int) -> None:
    v = r["peer_versions"]
    print(
        f"\nPeer venv: tensorflow {v['tensorflow']}, onnx2tf {v['onnx2tf']}; venv {r['venv_mb']:.0f} MB on disk, "
        f"site-packages/tensorflow {r['tensorflow_mb']:.0f} MB"
    )
    print(f"\nSqueezeNet 1.1 conversion, fresh process each, median of {repeats}")
    print("| job | wall s | peak RSS MB |")
    print("|---|---|---|")
    for name, c in r["cost"].items():
        print(f"| {name} | {c['total_s']:.2f} | {c['peak_rss_mb']:.0f} |")
    c = r["cost"]
    for ours, peer in (("edgekit fp32", "onnx2tf fp32"), ("edgekit quantize + int8", "onnx2tf int8")):
        print(
            f"{ours} / {peer}: time {c[ours]['total_s'] / c[peer]['total_s']:.3f}x, "
            f"RSS {c[ours]['peak_rss_mb'] / c[peer]['peak_rss_mb']:.2f}x"
        )
    print(
        "edgekit int8 from QDQ / onnx2tf int8: time "
        f"{c['edgekit int8 from QDQ']['total_s'] / c['onnx2tf int8']['total_s']:.3f}x; "
        f"onnx2tf overwrote its input copy: {c['onnx2tf fp32']['overwrote_its_input']}"
    )
    for tag, log in r["onnx2tf_log"].items():
        print(
            f"onnx2tf {tag} log: {len(log['softmax_lines'])} lines mention softmax, "
            f"{len(log['softmax_warnings'])} of them warnings; {log['warning_lines']} warning lines in all"
        )
    n = r["correctness"]["onnx fp32 (onnxruntime)"]
    print(
        f"\nCorrectness on {n['samples']} shared photos vs the fp32 ONNX in onnxruntime "
        f"(top-1 {100 * n['top1_accuracy']:.1f} %)"
    )
    print(
        "| model (LiteRT) | max abs err | output spread across images | constant | top-1 agree | top-1 acc | top-1 acc of its logits |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, f in r["correctness"].items():
        if "max_abs_error" not in f:
            continue
        logits = f"{100 * f['logits_top1_accuracy']:.1f} %" if "logits_top1_accuracy" in f else "-"
        print(
            f"| {name} | {f['max_abs_error']:.2e} | {f['max_spread_across_images']:.3g} | {f['constant_output']} "
            f"| {100 * f['top1_agreement']:.1f} % | {100 * f['top1_accuracy']:.1f} % | {logits} |"
        )
    lat = r["latency"]
    med, p10 = lat["median_ms"], lat["p10_ms"]
    print(
        f"\nLatency, LiteRT {THREADS} threads, {lat['timed_runs']} timed runs each in shuffled interleaved "
        "rounds of 25"
    )
    print("| model | median ms | p10 ms | file KB |")
    print("|---|---|---|---|")
    sizes = r["sizes_bytes"]
    for name, ms in med.items():
        print(f"| {name} | {ms:.2f} | {p10[name]:.2f} | {sizes[name] / 1024:.0f} |")
    print("| ratio | of medians | median of per-round ratios |")
    print("|---|---|---|")
    for pair, ratio in lat["ratio_median_of_rounds"].items():
        a, b = pair.split(" / ")
        print(f"| {pair} | {med[a] / med[b]:.3f}x | {ratio:.3f}x |")
    ratio = lat["ratio_median_of_rounds"]["edgekit int8 / onnx2tf integer_quant"]
    print(f"ours int8 / onnx2tf int8 (integer_quant), per-round: {ratio:.3f}x, target <= 1.0: {ratio <= 1.0}")
    for name, ops in r["ops"].items():
        print(f"ops {name}: {ops}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--venv", type=Path, default=Path(__file__).resolve().parent / ".peers/onnx2tf")
    parser.add_argument("--calib", type=int, default=100, help="calibration images (both tools)")
    parser.add_argument("--eval", type=int, default=200, help="evaluation images")
    parser.add_argument("--runs", type=int, default=300, help="timed runs per model (rounds of 25)")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=1, help="fresh-process conversions per job")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    args.venv = args.venv.absolute()
    try:
        results = run(args)
    except BenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report(results, args.repeats)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
