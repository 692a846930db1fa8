"""The six deployment cases of the zoo, run as the real ``edgekit`` CLI in subprocesses, and their figures.

Shared by ``tests/test_zoo.py`` and ``benchmarks/zoo.py``. A case is one CLI run; its outcome is

- ``pass``: exit 0 and no traceback;
- ``typed``: exit 2, no traceback, exactly one output line starting with ``error:`` (the typed error);
- ``crash``: anything else (a traceback, a signal, exit 1, several or no ``error:`` lines, a timeout).

The suite (``launch="fork"``) starts each CLI run as a process forked from a forkserver that imported what a
deploy imports once (1 s of every run's 2.5-3.5 s of CPU): the same ``edgekit.cli.main.main`` the
console script calls, in a process of its own, its output in ``cli.log``, its exit code or signal observed.
``benchmarks/zoo.py`` starts the console script (``launch="exec"``), whose CPU time and peak memory it prints.

Figures are computed afterwards, per model, in a child process (``python zoo_cases.py figures SPEC OUT``) so
that a runtime that aborts cannot take the caller down. Each runs the packaged artifacts on the model's
evaluation samples and compares with onnxruntime running the source model (fp32), and for ``arm-cpu int8``
with the QDQ model of the same scheme (``edgekit quantize --activations int8``) run exactly by
``edgekit.core.exact.ExactRunner`` (float64).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CASES = ("arm-cpu fp32", "arm-cpu int8", "nnapi", "intel-vpu fp16", "intel-vpu int8", "quantize")
#: The cases the issue sets a figure for (:func:`figure_problems`); the others' figures are the table's.
JUDGED_CASES = ("arm-cpu fp32", "arm-cpu int8", "intel-vpu fp16")
#: Signs of an internal detail leaking into a user-facing error line (an object repr, a pass name).
INTERNAL_LEAKS = (" object at 0x", "Traceback", "Pass object", "<edgekit.")
#: Calibration and evaluation samples per model in tests/test_zoo.py (and benchmarks/zoo.py --record-expected).
TEST_CALIB, TEST_EVAL = 8, 8
#: The issue's figures for passing cases (one table, used by the test and the benchmark).
FP32_MAX_REL_ERROR = 1e-4  # arm-cpu fp32: max error of the output range, against fp32 onnxruntime
INT8_VS_QDQ_COSINE = 0.999  # arm-cpu int8 against its own QDQ model, per output
INT8_VS_QDQ_TOP1 = 0.99
FP16_COSINE = 0.999  # intel-vpu fp16 against fp32, per output
#: Kinds whose first output is scored by top-1 (classifiers: argmax of the flattened output; sequence models:
#: argmax over the last axis at every step).
TOP1_KINDS = ("classifier", "sequence")


@dataclass
class Model:
    """One model to run: a zoo manifest entry plus where its file and data are."""

    name: str
    path: Path
    kind: str
    inputs: list[dict[str, Any]]
    calib: Path
    eval: Path
    extra_args: list[str] = field(default_factory=list)  # e.g. --input-shape x=1,3,320,320


@dataclass
class CaseResult:
    model: str
    case: str
    outcome: str  # pass | typed | crash
    returncode: int | None
    seconds: float
    error: str | None = None  # the error: line (typed) or the first line of what went wrong (crash)
    out_dir: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    peak_mb: float | None = None  # the CLI's peak resident set (wait4's ru_maxrss), None where not measured
    cpu_seconds: float | None = None  # user + system CPU time of the CLI and the children it waited for


def edgekit_command() -> list[str]:
    """The installed ``edgekit`` console script beside this interpreter (else on PATH)."""
    beside = Path(sys.executable).parent / "edgekit"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("edgekit")
    if found:
        return [found]
    return [
        sys.executable,
        "-c",
        "import sys; from edgekit.cli.main import main; sys.argv[0] = 'edgekit'; main()",
    ]


def case_command(model: Model, case: str, out: Path) -> list[str]:
    """The CLI command line of one case (writes under ``out``)."""
    m, calib = str(model.path), str(model.calib)
    deploy = [*edgekit_command(), "deploy", m, "-o", str(out), "-q", *model.extra_args]
    commands = {
        "arm-cpu fp32": [*deploy, "--target", "arm-cpu", "--precision", "fp32"],
        "arm-cpu int8": [*deploy, "--target", "arm-cpu", "--precision", "int8", "--calib", calib],
        "nnapi": [*deploy, "--target", "nnapi", "--calib", calib],
        "intel-vpu fp16": [*deploy, "--target", "intel-vpu"],
        "intel-vpu int8": [*deploy, "--target", "intel-vpu", "--precision", "int8", "--calib", calib],
        "quantize": [
            *edgekit_command(),
            "quantize",
            m,
            "--calib",
            calib,
            "-o",
            str(out / "model.qdq.onnx"),
            "-q",
            *model.extra_args,
        ],
    }
    return commands[case]


def classify(returncode: int | None, output: str, timed_out: bool = False) -> tuple[str, str | None]:
    """``(outcome, message)`` of one CLI run from its exit code and combined output."""
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    if timed_out:
        return "crash", "timed out"
    if "Traceback (most recent call last)" in output:
        tail = next((line for line in reversed(lines) if line and not line.startswith(" ")), "traceback")
        return "crash", f"traceback: {tail.strip()[:300]}"
    if returncode == 0:
        return "pass", None
    if returncode == 2 and len(errors) == 1:
        message = errors[0][len("error:") :].strip()
        leak = next((m for m in INTERNAL_LEAKS if m in message), None)
        if leak or len(message) < 10:
            return (
                "crash",
                f"typed error that does not name the problem ({leak or 'too short'}): {errors[0][:300]}",
            )
        return "typed", errors[0][:400]
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return "crash", f"killed by {name}" + (f": {lines[-1][:200]}" if lines else "")
    first = errors[0] if errors else (lines[-1] if lines else "no output")
    return "crash", f"exit {returncode} with {len(errors)} error line(s): {first[:300]}"


def run_case(model: Model, case: str, work: Path, timeout: float, launch: str = "exec") -> CaseResult:
    """One case: ``launch`` ``exec`` runs the console script (CPU time and peak memory measured), ``fork`` runs
    the CLI in a process forked from :func:`_cli_forkserver` (the imports paid once)."""
    out = work / model.name / case.replace(" ", "-")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1", NO_COLOR="1", COLUMNS="200")
    start = time.perf_counter()
    command = case_command(model, case, out)
    if launch == "fork":
        code, output, timed_out = _run_forked(
            command[len(edgekit_command()) :], env, timeout, out / "cli.log"
        )
        peak_mb = cpu = None
    else:
        code, output, timed_out, peak_mb, cpu = _run_measured(command, env, timeout, out / "cli.log")
    seconds = time.perf_counter() - start
    outcome, message = classify(code, output, timed_out)
    return CaseResult(
        model.name,
        case,
        outcome,
        code,
        round(seconds, 2),
        message,
        str(out),
        peak_mb=peak_mb,
        cpu_seconds=cpu,
    )


#: Runs ``argv[2:]`` in a process forked from this small interpreter (``python -S``: no site imports) and writes its
#: pid, then its exit code, peak RSS (KB) and CPU seconds (``wait4``: it and every descendant it waited for) to
#: ``argv[1]``. A command started straight from the zoo's process (vfork + exec) inherits that process's peak RSS
#: as its own ``ru_maxrss`` (Linux keeps the old memory map's high-water mark across exec): every case read at
#: least the zoo process's 600-800 MB. Forked from here, the command's peak starts at this interpreter's few MB.
_MEASURED_LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
with open(sys.argv[1], "w") as f:
    f.write("%d\\n" % pid)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "a") as f:
    f.write("%d %d %r\\n" % (os.waitstatus_to_exitcode(status), usage.ru_maxrss, usage.ru_utime + usage.ru_stime))
"""


def _run_measured(
    cmd: Sequence[str], env: Mapping[str, str], timeout: float, log: Path
) -> tuple[int | None, str, bool, float | None, float | None]:
    """Run ``cmd`` with its output (stdout + stderr) into ``log``; ``(returncode or None when it timed out,
    output, timed_out, peak RSS in MB, CPU seconds)``. The peak is ``wait4``'s ``ru_maxrss`` of the command run
    from :data:`_MEASURED_LAUNCHER`: the largest resident set of the command or of any descendant it waited for."""
    usage_file = log.with_name(log.name + ".rusage")
    usage_file.unlink(missing_ok=True)
    launcher = (
        [sys.executable, "-S", "-c", _MEASURED_LAUNCHER, str(usage_file)] if hasattr(os, "fork") else []
    )
    with open(log, "w+b") as sink:
        proc = subprocess.Popen(
            [*launcher, *cmd], stdout=sink, stderr=subprocess.STDOUT, env=env, stdin=subprocess.DEVNULL
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            lines = usage_file.read_text().split() if usage_file.exists() else []
            if lines:  # the command itself, then the launcher
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(lines[0]), signal.SIGKILL)
            proc.kill()
            proc.wait()
        sink.seek(0)
        output = sink.read().decode(errors="replace")
    peak_mb = cpu = None
    returncode = proc.returncode
    fields = usage_file.read_text().split() if launcher and usage_file.exists() else []
    if len(fields) == 4:
        returncode = int(fields[1])
        peak_mb = round(int(fields[2]) / 1024, 1)  # KB on Linux
        cpu = round(float(fields[3]), 2)
    usage_file.unlink(missing_ok=True)
    return (None if timed_out else returncode), output, timed_out, peak_mb, cpu


#: What the suite's CLI runs fork from, imported once: the modules a deploy or quantize imports when it runs. Not
#: the CLI's own (its consoles read NO_COLOR and COLUMNS when they are made, which each run sets), and not
#: OpenVINO or LiteRT's interpreter (each run imports them): OpenVINO's import sends telemetry from a fork.
_CLI_PRELOAD = (
    "edgekit.quantize.accuracy",
    "edgekit.deployment.package",
    "edgekit.targets.tflite.converter",
    "edgekit.targets.tflite.quantized",
)


def _cli_forkserver() -> Any:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(_CLI_PRELOAD))  # (no effect once this process's forkserver runs)
    return context


def _output_into(log: str | Path) -> None:
    """This process's file descriptors 1 and 2 (the CLI's output, and native libraries') into ``log``."""
    sink = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)


def _cli_in_fork(argv: Sequence[str], env: Mapping[str, str], log: str) -> None:
    """(In the forked process.) The console script's work: ``edgekit ARGV``, its output into ``log``; atexit
    handlers run as at the end of an interpreter (multiprocessing ends its processes with ``os._exit``)."""
    _output_into(log)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["edgekit", *argv]
    from edgekit.cli.main import main

    try:
        main()
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()


def _run_forked(
    argv: Sequence[str], env: Mapping[str, str], timeout: float, log: Path
) -> tuple[int | None, str, bool]:
    """``edgekit ARGV`` in a process forked from :func:`_cli_forkserver`: ``(returncode or None when it timed out,
    output, timed_out)``; a signal is a negative return code, as from ``subprocess``."""
    proc = _cli_forkserver().Process(target=_cli_in_fork, args=(list(argv), dict(env), str(log)))
    proc.start()
    proc.join(timeout)
    timed_out = proc.exitcode is None
    if timed_out:
        proc.kill()
        proc.join()
    output = log.read_bytes().decode(errors="replace") if log.exists() else ""
    return (None if timed_out else proc.exitcode), output, timed_out


def run_all(
    models: Sequence[Model],
    cases: Sequence[str],
    work: Path,
    *,
    workers: int = 2,
    timeout: float = 300.0,
    figures: bool = True,
    table_figures: bool = True,
    progress: Callable[[CaseResult], None] | None = None,
    launch: str = "exec",
) -> list[CaseResult]:
    """Every model x case through the CLI (``workers`` at a time), then each model's figures in a child
    (``table_figures``: also the figures no verdict reads, which the benchmark's table prints: the cases outside
    :data:`JUDGED_CASES` and the QDQ file's float32 runs beside arm-cpu int8's verdict)."""
    jobs = [(m, c) for m in models for c in cases]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_case, m, c, work, timeout, launch) for m, c in jobs]
        results = []
        for fut in futures:
            results.append(fut.result())
            if progress:
                progress(results[-1])
    if figures:
        by_model = {m.name: m for m in models}
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(
                pool.map(
                    lambda m: _model_figures(
                        m, [r for r in results if r.model == m.name], work, timeout, table_figures
                    ),
                    by_model.values(),
                )
            )
    return results


def _model_figures(
    model: Model, results: list[CaseResult], work: Path, timeout: float, table_figures: bool = True
) -> None:
    passed = [r for r in results if r.outcome == "pass" and (table_figures or r.case in JUDGED_CASES)]
    if not passed:
        return
    spec = {
        "model": str(model.path),
        "kind": model.kind,
        "eval": str(model.eval),
        "calib": str(model.calib),
        "extra_args": model.extra_args,
        "cases": {r.case: r.out_dir for r in passed},
        "table_figures": table_figures,
    }
    folder = work / model.name
    figures, problem = _figures_child(spec, folder / "figures", timeout)
    if problem and len(passed) > 1:
        # One case's artifact took the child down (a runtime abort): retry each case in its own child.
        for r in passed:
            one, why = _figures_child(
                dict(spec, cases={r.case: r.out_dir}), folder / f"figures-{r.case.replace(' ', '-')}", timeout
            )
            figures[r.case] = one.get(r.case) or {"error": why or "no figures"}
    for r in passed:
        r.figures = figures.get(r.case) or {"error": problem or "no figures"}


def _figures_child(spec: Mapping[str, Any], stem: Path, timeout: float) -> tuple[dict[str, Any], str | None]:
    """Run ``compute_figures(spec)`` in a child process; ``(figures, problem)``."""
    spec_path, out_path = stem.with_suffix(".spec.json"), stem.with_suffix(".json")
    spec_path.write_text(json.dumps(spec))
    out_path.unlink(missing_ok=True)
    try:
        proc = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "figures", str(spec_path), str(out_path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        problem = (
            None if proc.returncode == 0 else f"figures child exited {proc.returncode}: {_tail(proc.stderr)}"
        )
    except subprocess.TimeoutExpired:
        problem = "figures child timed out"
    return (json.loads(out_path.read_text()) if out_path.exists() else {}), problem


def figure_problems(case: str, figures: Mapping[str, Any]) -> list[str]:
    """The issue's figures this passing case misses (empty: all met, or none apply to the case)."""
    if case not in JUDGED_CASES:
        return []
    if not figures:
        return ["no figures were computed"]
    if case == "intel-vpu fp16" and figures.get("source_quantized"):
        return []  # a quantized source deploys as an int8 IR: the FP16 figure is not its yardstick
    if case in ("intel-vpu fp16", "arm-cpu fp32", "arm-cpu int8") and figures.get("selection_tail"):
        # Detections selected by NMS: a score one rounding across a bar adds or drops a whole box, so the figures
        # of the whole output (fp32's max error, FP16's cosine, int8's cosine to its QDQ model) judge rounding; the
        # manifest's verification judged the body and the selection apart (edgekit.targets.selection_tail). The
        # end-to-end figures stay in the table.
        return []
    if "error" in figures:
        return [f"figures could not be computed: {figures['error']}"]
    problems = []
    if case == "arm-cpu fp32":
        measured = figures["vs_fp32"]["max_rel_error"]
        manifest = figures.get("verification_max_rel_error")
        for what, value in (("measured", measured), ("manifest verification", manifest)):
            if value is None or not value <= FP32_MAX_REL_ERROR:
                problems.append(
                    f"fp32 TFLite max error {value} of the output range ({what}) > {FP32_MAX_REL_ERROR}"
                )
    elif case == "arm-cpu int8":
        vs = figures.get("vs_qdq", {})
        if "error" in vs:
            return [vs["error"]]
        for name, v in vs["outputs"].items():
            if not v["cosine"] >= INT8_VS_QDQ_COSINE:
                problems.append(
                    f"int8 TFLite vs its QDQ: cosine {v['cosine']:.6f} on {name} < {INT8_VS_QDQ_COSINE}"
                )
        top1 = vs.get("top1_ties", vs.get("top1"))  # one int8 step apart is a tie, as verification counts it
        if top1 is not None and not top1 >= INT8_VS_QDQ_TOP1:
            problems.append(
                f"int8 TFLite vs its QDQ: top-1 agreement {top1:.3f} < {INT8_VS_QDQ_TOP1} (ties within one step)"
            )
    else:
        for name, v in figures["vs_fp32"]["outputs"].items():
            if not v["cosine"] >= FP16_COSINE:
                problems.append(f"FP16 IR vs fp32: cosine {v['cosine']:.6f} on {name} < {FP16_COSINE}")
    return problems


def verdict(result: CaseResult) -> str:
    """``pass`` | ``typed`` | ``crash`` | ``figures`` (the CLI passed but an issue figure is missed)."""
    if result.outcome == "pass" and figure_problems(result.case, result.figures):
        return "figures"
    return result.outcome


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# ------------------------------------------------------------------------------------------------ figures


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(a @ b / (na * nb))


def sqnr_db(ref: np.ndarray, got: np.ndarray) -> float:
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    noise = float(np.mean((ref - got) ** 2))
    signal_power = float(np.mean(ref**2))
    if noise == 0:
        return float("inf")
    return 10 * np.log10(max(signal_power, 1e-30) / noise)


def max_rel_error(ref: np.ndarray, got: np.ndarray) -> float:
    """max |ref - got| relative to the reference's value range."""
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    span = float(ref.max() - ref.min()) if ref.size else 0.0
    err = float(np.abs(ref - got).max()) if ref.size else 0.0
    return err / span if span > 0 else err


def top1_agreement(kind: str, ref: np.ndarray, got: np.ndarray, ties: bool = False) -> float | None:
    """Top-1 agreement of each sample (classifiers: the flattened scores) or step (sequences: the last axis).
    ``ties``: a class whose reference score is within one int8 step (1/255 of the output's range) of the best
    counts as the same answer, the rule the int8 verification judges by (edgekit.targets.yardstick)."""
    from edgekit.targets.yardstick import top1_agreements

    if kind not in TOP1_KINDS:
        return None
    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if kind == "classifier":
        ref, got = ref.reshape(ref.shape[0], -1), got.reshape(got.shape[0], -1)
    tie = (float(ref.max() - ref.min()) / 255.0) if ties and ref.size else 0.0
    strict, tied = top1_agreements(ref, got, ref.ndim - 2, tie)
    return tied if ties else strict


def compare(kind: str, ref: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Per output: cosine, SQNR, max error of the range; worst over outputs; top-1 on the first output."""
    per_output = {}
    for name, r in ref.items():
        g = got[name]
        if np.shape(r) != np.shape(g) and np.ndim(r) == np.ndim(g):  # selections keeping different rows
            r, g = _padded([np.asarray(r), np.asarray(g)])
        per_output[name] = {
            "cosine": cosine(r, g),
            "sqnr_db": sqnr_db(r, g),
            "max_rel_error": max_rel_error(r, g),
        }
    first = next(iter(ref))
    return {
        "cosine": min(v["cosine"] for v in per_output.values()),
        "sqnr_db": min(v["sqnr_db"] for v in per_output.values()),
        "max_rel_error": max(v["max_rel_error"] for v in per_output.values()),
        "top1": top1_agreement(kind, ref[first], got[first]),
        "top1_ties": top1_agreement(kind, ref[first], got[first], ties=True),
        "outputs": per_output,
    }


def _samples(
    path: str, names: Sequence[str], shapes: Mapping[str, Sequence[int]]
) -> list[dict[str, np.ndarray]]:
    with np.load(path) as data:
        arrays = {n: data[n] for n in names}
    count = len(next(iter(arrays.values())))
    return [{n: np.asarray(arrays[n][i]).reshape(shapes[n]) for n in names} for i in range(count)]


def _padded(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Arrays of one rank zero-padded to the largest of each dim: a selection's outputs (a detector's NMS,
    PaddleDetection's [N, 6]) have as many rows as it keeps, from sample to sample and runtime to runtime."""
    shape = np.max([np.shape(a) for a in arrays], axis=0) if arrays else ()
    return [np.pad(a, [(0, int(m) - d) for d, m in zip(np.shape(a), shape, strict=True)]) for a in arrays]


def _stack(outputs: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.stack(_padded([np.asarray(o[k]) for o in outputs])) for k in outputs[0]}


def _onnx_runner(path: str, reference: str = "onnxruntime") -> tuple[Callable[[dict], dict], list[str], dict]:
    """A function running ONNX ``path`` on one sample: ``onnxruntime`` (node by node), ``host`` (HostRunner,
    OpenVINO f32 with the weight DequantizeLinear folded) or ``exact`` (a QDQ model's exact semantics in
    float64, edgekit.core.exact)."""
    import onnx

    proto = onnx.load(path)
    outputs = [o.name for o in proto.graph.output]
    if reference in ("host", "exact"):
        from edgekit.core.exact import ExactRunner
        from edgekit.core.runtime import HostRunner

        runner = ExactRunner(proto) if reference == "exact" else HostRunner(proto)
        return (lambda feeds: runner.run(feeds)), outputs, {}
    from edgekit.core import dynamic_quant
    from edgekit.core.model import float16_to_float32

    # A float16 model's reference is its float16 weights computed in float32, as edgekit runs it: onnxruntime's
    # float16 kernels are 0.6 % of the output range off those values (MobileNetV2), 60x the fp32 figure's bound.
    # Likewise a dynamically quantized model's (quantize_dynamic, MatMulNBits, MatMulBnb4) is the float model on
    # its dequantized weights (edgekit.core.dynamic_quant, in the order edgekit loads): the file's own run-time
    # activation rounding is 1e-4 to 2.2e-2 of the range off it (round 11t's Hub variants), not a conversion's
    # error; compute_figures reports that distance beside (``source_file_vs_reference``).
    if dynamic_quant.dequantize(proto) + float16_to_float32(proto):
        path = proto.SerializeToString()
    session = _ort_session(path)
    return (lambda feeds: dict(zip(outputs, session.run(outputs, feeds), strict=True))), outputs, {}


def _ort_session(model: str | bytes, node_by_node: bool = True) -> Any:
    """An onnxruntime CPU session of ``model`` (a path or bytes) on one thread; ``node_by_node``: no graph
    optimizations (no fused kernels: each node's own semantics)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    if node_by_node:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _bundle_runner(folder: Path, onnx_shapes: Mapping[str, Sequence[int]]) -> Callable[[dict], dict]:
    from edgekit.device_agents.bundle import read_bundle
    from edgekit.device_agents.runtimes import open_runner
    from edgekit.device_eval import from_device, to_device

    bundle = read_bundle(folder)
    runner = open_runner(bundle, threads=1)
    manifest = bundle.manifest
    in_specs, out_specs = list(manifest.inputs), list(manifest.outputs)

    def run(feeds: dict) -> dict:
        names = list(feeds)
        by_name = {s.name: s for s in in_specs}
        specs = [by_name[n] for n in names] if all(n in by_name for n in names) else in_specs
        ordered = {s.name: to_device(feeds[n], s) for n, s in zip(names, specs, strict=True)}
        outs, _ = runner.run([ordered[s.name] for s in in_specs])
        return {
            s.name: from_device(o, s, onnx_shapes.get(s.name, o.shape))
            for s, o in zip(out_specs, outs, strict=True)
        }

    return run


def compute_figures(spec: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The figures of every passing case of one model (see the module docstring)."""
    import onnx

    proto = onnx.load(spec["model"], load_external_data=False)
    init = {t.name for t in proto.graph.initializer}
    inputs = [i.name for i in proto.graph.input if i.name not in init]
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in proto.graph.input}
    with np.load(spec["eval"]) as data:
        # a sample is the input's shape without the batch, or all of it (edgekit reads both: a state [2, 1, 128])
        shapes = {
            n: tuple(data[n].shape[1:]) if data[n].ndim - 1 == ranks[n] else (1, *data[n].shape[1:])
            for n in inputs
        }
    samples = _samples(spec["eval"], inputs, shapes)
    ref_fn, out_names, _ = _onnx_runner(spec["model"])
    ref_list = [ref_fn(s) for s in samples]
    ref = _stack(ref_list)
    onnx_shapes = {k: v.shape for k, v in ref_list[0].items()}
    kind = spec["kind"]
    beside = _source_file_vs_reference(proto, kind, samples, ref)
    figures: dict[str, dict[str, Any]] = {}
    for case, folder in spec["cases"].items():
        try:
            figures[case] = _case_figures(case, Path(folder), spec, kind, samples, ref, onnx_shapes) | beside
        except Exception as exc:  # noqa: BLE001 - a figure that cannot be computed is reported, not raised
            figures[case] = {
                "error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
            }
    return figures


def _source_file_vs_reference(proto, kind: str, samples: list[dict], ref: Mapping[str, np.ndarray]) -> dict:
    """A dynamically quantized source: onnxruntime running the file as given (its activations rounded at run
    time) against the reference the figures use (:func:`_onnx_runner`), {"source_file_vs_reference": ...}; {}
    for any other model."""
    from edgekit.core import dynamic_quant

    if not dynamic_quant.has_dynamic_quantization(proto):
        return {}
    session = _ort_session(proto.SerializeToString(), node_by_node=False)
    names, half = list(ref), {i.name for i in session.get_inputs() if i.type == "tensor(float16)"}
    feeds = [{k: v.astype(np.float16) if k in half else v for k, v in s.items()} for s in samples]
    runs = [dict(zip(names, session.run(names, f), strict=True)) for f in feeds]
    return {"source_file_vs_reference": compare(kind, ref, _stack(runs))}


def _manifest_verification(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    return json.loads(path.read_text()).get("verification", {}) if path.exists() else {}


def _case_figures(case, root: Path, spec, kind, samples, ref, onnx_shapes) -> dict[str, Any]:
    target = {"arm-cpu fp32": "arm-cpu", "arm-cpu int8": "arm-cpu", "nnapi": "nnapi"}.get(case)
    if case.startswith("intel-vpu"):
        target = "intel-vpu"
    if case == "quantize":
        qdq, _, _ = _onnx_runner(str(root / "model.qdq.onnx"), "exact")
        return {"vs_fp32": compare(kind, ref, _stack([qdq(s) for s in samples]))}
    folder = root / target
    verification = _manifest_verification(folder)
    run = _bundle_runner(folder, onnx_shapes)
    got = _stack([run(s) for s in samples])
    # Beyond 1e-4 of the host's float32 run, verification judged the .tflite against the source model in float64.
    float64 = [o["float64_reference"]["max_rel_error"] for o in verification.get("outputs", {}).values()
               if "float64_reference" in o]  # fmt: skip
    out: dict[str, Any] = {
        "verification_max_rel_error": max(float64) if float64 else verification.get("max_rel_error"),
        "vs_fp32": compare(kind, ref, got),
        "source_quantized": _is_quantized(spec["model"]),
        "selection_tail": "selection_tail" in verification,
    }
    if case == "arm-cpu int8" and out["source_quantized"]:
        # An already-quantized source (QOperator or QDQ) is its own QDQ model: the reference above.
        out["vs_qdq"] = dict(out["vs_fp32"], reference="the quantized source model (onnxruntime)")
    elif case == "arm-cpu int8":
        # The conversion, not the quantization: the int8 TFLite against the QDQ model of the same scheme.
        qdq_path = root / "qdq-int8.onnx"
        argv = ["quantize", spec["model"], "--calib", spec["calib"], "--activations", "int8"]
        code, output = _cli_here(
            [*argv, "-o", str(qdq_path), "-q", *spec["extra_args"]], root / "qdq-int8.log"
        )
        if code != 0:
            out["vs_qdq"] = {"error": f"edgekit quantize --activations int8 failed: {_tail(output)}"}
        else:
            qdq, _, _ = _onnx_runner(str(qdq_path), "exact")
            exact = _stack([qdq(s) for s in samples])
            out["vs_qdq"] = compare(kind, exact, got)
            # Beside it (the verdict stays on vs_qdq): the same QDQ file run in float32, by onnxruntime node by
            # node and by the host runner (OpenVINO), each against the int8 TFLite and against the exact
            # semantics. A float32 run rounds values near a half step either way, and a network grows those
            # flips: how far each float32 run is from the exact model is printed as its floor.
            # A side reference that cannot run the QDQ file (OpenVINO's CPU plugin refuses some, e.g. a
            # BlazeFace decode tail) is recorded beside it and does not take the verdict's figure with it.
            for reference in ("onnxruntime", "host") if spec.get("table_figures", True) else ():
                try:
                    runner, _, _ = _onnx_runner(str(qdq_path), reference)
                    outputs = _stack([runner(s) for s in samples])
                except Exception as exc:  # noqa: BLE001 - reported beside the verdict, not raised
                    first = (str(exc).strip().splitlines() or [""])[0][:300]
                    out[f"vs_qdq_{reference}_error"] = f"{type(exc).__name__}: {first}"
                    continue
                out[f"vs_qdq_{reference}"] = compare(kind, outputs, got)
                out[f"qdq_floor_{reference}"] = compare(kind, exact, outputs)
    return out


def _cli_here(argv: Sequence[str], log: Path) -> tuple[int, str]:
    """``edgekit ARGV`` run in this process (the figures child, which imported most of what it needs already: a
    subprocess paid a whole interpreter's start and imports again), its output (the file descriptors 1 and 2)
    into ``log``: ``(exit code, output)``."""
    from edgekit.cli import common
    from edgekit.cli.main import app

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    _output_into(log)
    try:
        common.run_app(app, list(argv))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
    return code, log.read_text(errors="replace")


def _is_quantized(path: str) -> bool:
    import onnx
    from edgekit.core import dynamic_quant

    proto = onnx.load(path, load_external_data=False)
    if dynamic_quant.has_dynamic_quantization(proto):
        # loaded as the float model on its dequantized weights and calibrated like one: its own QDQ model is the
        # int8 reference (its ConvInteger and the DequantizeLinear of its embedding tables keep no scales)
        return False
    ops = {n.op_type for n in proto.graph.node}
    return bool(ops & {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul"})


def main(argv: Sequence[str]) -> int:
    if len(argv) == 3 and argv[0] == "figures":
        spec = json.loads(Path(argv[1]).read_text())
        Path(argv[2]).write_text(json.dumps(compute_figures(spec), default=float))
        return 0
    print("usage: zoo_cases.py figures SPEC.json OUT.json", file=sys.stderr)
    return 2


def result_json(results: Sequence[CaseResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
