"""Where the accuracy-aware search evaluates its candidates: a local process pool (the default), a Ray cluster
(``--executor ray`` or ``ray://HOST:PORT``, the optional extra ``edgekit[ray]``), or this process (``inline``).

A candidate is a :class:`~edgekit.quantize.options.QuantizeOptions` (the restores applied) and the indices of
the accuracy samples to run. Every worker holds one :class:`EvalContext`: the fp32 model, the calibration
statistics (a candidate never recalibrates: it only chooses parameters and rewrites), the accuracy inputs and
the fp32 reference's answers (computed once). No scheduler of our own: ``concurrent.futures`` or Ray's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from edgekit.core.errors import QuantizationError
from edgekit.quantize.budget import Budget, Measurement, Reference, measure

RAY_HINT = "pip install edgekit[ray]"
#: Targets whose candidates are measured on the runtime the target deploys to rather than on the exact QDQ
#: semantics: the intel-vpu IR runs the QDQ model on OpenVINO's int8 kernels, whose rounding differs from the
#: exact semantics by whole samples on borderline photos (MobileNetV2, 100 photos: minmax uint8 loses 1 sample
#: exactly and 4 on the int8 kernels). These candidates run whole (the cached activations are exact-runner cuts).
KERNEL_RUNNER_TARGETS = frozenset({"intel-vpu"})
WORKER_DIED = "a worker of the accuracy search died evaluating a candidate (a runtime crash)"


@dataclass
class EvalContext:
    """Everything a worker needs to evaluate candidates (pickled once per worker)."""

    key: str
    model: bytes
    stats: Any
    inputs: list[dict[str, np.ndarray]]
    reference: Reference
    budget: Budget
    threads: int = 1
    #: False: candidates run on OpenVINO's int8 kernels, as the intel-vpu IR runs (:data:`KERNEL_RUNNER_TARGETS`);
    #: True: the QDQ model's exact semantics (float, the answers the other targets' integer kernels reproduce).
    exact_qdq: bool = True
    #: A directory the workers of this machine share their cached base activations through (None: each its own).
    store: str | None = None
    #: This worker's number among ``workers`` (where in the samples it starts building its cache).
    worker: int = 0
    workers: int = 1
    _model: Any = field(default=None, repr=False, compare=False)
    #: (base options, its :class:`~edgekit.quantize.suffix.SuffixCache`): built in each worker, never pickled.
    _suffix: Any = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_model"] = None
        state["_suffix"] = None
        return state

    def suffix_cache(self, base: Any) -> Any:
        """The cached activations of the base model quantized with ``base`` (one base at a time)."""
        from edgekit.quantize.pipeline import quantize
        from edgekit.quantize.suffix import SuffixCache

        if self._suffix is None or self._suffix[0] != base:
            self._suffix = None  # free the previous base's values first
            proto = quantize(self.fp32(), (), base, statistics=self.stats).proto()
            shared = (self.store, self.worker, self.workers) if self.store is not None else None
            self._suffix = (base, SuffixCache(proto, self.inputs, self.threads, shared))
        return self._suffix[1]

    def fp32(self) -> Any:
        if self._model is None:
            import onnx
            import onnx_ir as ir

            self._model = ir.from_proto(onnx.load_from_string(self.model))
        return self._model


@dataclass(frozen=True)
class Task:
    options: Any
    indices: tuple[int, ...]
    #: The search's base int8 options: the candidate runs only from the last cached activation of that base
    #: model it shares (:mod:`edgekit.quantize.suffix`). None: the whole model.
    base: Any = None
    #: Outputs returned per sample (``Outcome.outputs``), for the search to measure the candidate later on more
    #: samples without running these again.
    keep: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    measurement: Measurement
    size_bytes: int
    seconds: float
    #: The cached activation the candidate ran from (None: the whole model ran).
    cut: str | None = None
    #: Per sample of the task, its ``Task.keep`` outputs (None: not asked for).
    outputs: tuple[dict[str, np.ndarray], ...] | None = None


def evaluate(context: EvalContext, task: Task) -> Outcome:
    """Quantize with the task's options from the context's statistics, run the QDQ model on the host
    (:class:`edgekit.core.runtime.HostRunner`: exactly in OpenVINO f32, or on OpenVINO's int8 kernels with
    ``context.exact_qdq`` False) on the task's samples and measure it; with a base (exact runs only), only the
    part after the last cached activation it shares with the base model runs (same outputs)."""
    from edgekit.core.runtime import HostRunner
    from edgekit.quantize.pipeline import NothingToQuantizeError, quantize
    from edgekit.quantize.suffix import candidate_runner

    start = time.perf_counter()
    try:
        proto = quantize(context.fp32(), (), task.options, statistics=context.stats).proto()
    except NothingToQuantizeError:  # every layer restored to float: no quantization, it meets no budget
        nothing = Measurement(float("nan"), 0.0, 0.0, None, len(task.indices))
        return Outcome(nothing, 0, time.perf_counter() - start)
    results, cut = (
        context.suffix_cache(task.base).run(proto, task.indices)
        if task.base is not None and context.exact_qdq
        else ([], None)
    )
    if cut is None:
        runner = (
            candidate_runner(proto, context.threads)
            if context.exact_qdq
            else HostRunner(proto, threads=context.threads, exact_qdq=False)
        )
        results = [runner.run({k: context.inputs[i][k] for k in runner.input_names}) for i in task.indices]
    measurement = measure(context.budget, context.reference, task.indices, results)
    kept = tuple({n: np.array(r[n]) for n in task.keep} for r in results) if task.keep else None
    return Outcome(measurement, proto.ByteSize(), time.perf_counter() - start, cut, kept)


_WORKER: dict[str, EvalContext] = {}


def _install(context: EvalContext | tuple[str, str]) -> None:
    """A worker's context: given, or ``(key, path)`` of its pickle, read by the worker itself."""
    if isinstance(context, tuple):
        import pickle

        key, path = context
        with open(path, "rb") as f:
            _WORKER[key] = loaded = pickle.load(f)
        if loaded.store is not None:  # this worker's number: the first free of the store's claims
            for number in range(loaded.workers):
                try:
                    os.close(os.open(os.path.join(loaded.store, f"worker-{number}"), os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    continue
                loaded.worker = number
                break
        return
    _WORKER[context.key] = context


def _pool_evaluate(key: str, path: str, task: Task) -> Outcome:
    from edgekit.quantize.qdq import quiet_warnings

    quiet_warnings()
    if key not in _WORKER:  # the first task of this search in this worker: its context, from the file
        _install((key, path))
    return evaluate(_WORKER[key], task)


def _exit_with_parent() -> None:
    """End this worker when the process that started it ends: a search killed from outside (SIGTERM, SIGKILL)
    never shuts its pool down, and its workers went on evaluating the candidates queued for minutes."""
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None or any(t.name == "edgekit-exit-with-parent" for t in threading.enumerate()):
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="edgekit-exit-with-parent", daemon=True).start()


def _preload() -> None:
    """What every candidate needs imported (a worker started before the search's context exists); the worker
    ends with its parent."""
    import importlib

    _exit_with_parent()
    for name in _PRELOAD:
        importlib.import_module(name)


#: Local pools started ahead (:func:`prestart`), by size: the next ProcessExecutor of that size takes one.
_SPARE: dict[int, ProcessPoolExecutor] = {}


def _pool_size(workers: int | None) -> int:
    from edgekit.core.runtime import local_parallelism

    return max(1, workers or local_parallelism())


#: What the forkserver the local pools' workers fork from imports once for all of them (0.5 s of imports each):
#: not OpenVINO, whose import sends a telemetry event from a forked process (the forkserver would reap that
#: process as a stray child, with a warning, and the telemetry thread then signal a pid no longer its own).
_FORKSERVER_PRELOAD = ("edgekit.core.runtime", "edgekit.quantize.pipeline", "edgekit.quantize.suffix")
#: What each worker imports before its first task (0.06 s more after the forkserver's).
_PRELOAD = (*_FORKSERVER_PRELOAD, "openvino")


def _new_pool(size: int) -> ProcessPoolExecutor:
    import multiprocessing

    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(_FORKSERVER_PRELOAD))
    else:
        context = multiprocessing.get_context("spawn")
    return ProcessPoolExecutor(size, mp_context=context, initializer=_preload)


def prestart(spec: str, workers: int | None = None) -> None:
    """Start the local pool's workers now (forked from a forkserver that imported edgekit once) while the caller
    calibrates: the next ``make_executor(spec, ...)`` of that size takes them. Other executors: nothing."""
    size = _pool_size(workers)
    if spec != "process" or size in _SPARE:
        return
    pool = _SPARE[size] = _new_pool(size)

    def start() -> None:
        try:
            for _ in range(size):  # a pool starts a worker per task submitted while none is idle
                pool.submit(_preload)
        except Exception:  # noqa: BLE001 - the search ended (and shut the pool down) first, or the workers
            pass  # cannot start: the search's own submits then raise, in its thread, as a typed error

    # In a thread: a worker's start waits for the forkserver's imports (0.5 s), which this process need not.
    threading.Thread(target=start, name="edgekit-pool-start", daemon=True).start()


class Executor:
    """Runs tasks; ``map`` keeps their order."""

    name = "executor"
    workers = 1

    def map(self, tasks: Sequence[Task]) -> list[Outcome]:
        raise NotImplementedError

    def start(self, tasks: Sequence[Task]) -> Callable[[], list[Outcome]]:
        """``map`` begun now, its outcomes collected by the function returned (here: run when collected)."""
        return lambda: self.map(tasks)

    def warm(self, task: Task) -> None:
        """Run ``task`` on every worker for what it leaves behind (each worker's cached base activations in the
        candidate's runtime), its outcome dropped: every worker's next candidates start from the cache. (Here:
        nothing; this process's context builds its cache in the first candidate.)"""

    def close(self) -> None:
        pass

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InlineExecutor(Executor):
    name = "inline"

    def __init__(self, context: EvalContext):
        self.context = context

    def map(self, tasks: Sequence[Task]) -> list[Outcome]:
        return [evaluate(self.context, t) for t in tasks]


class ProcessExecutor(Executor):
    """A local process pool: workers forked from a forkserver (a process that only imported modules: the
    runtimes' threads do not survive a fork, and this process's are never forked), else spawned."""

    name = "process"

    def __init__(self, context: EvalContext, workers: int | None = None):
        import pickle
        import tempfile

        self.workers = _pool_size(workers)
        self.key = context.key
        # The context (the accuracy inputs: tens of MB) goes through a file each worker reads as it starts: handed
        # through the spawn pipe, it blocked this process until each worker in turn had started and read it.
        handle, self.path = tempfile.mkstemp(prefix="edgekit-search-", suffix=".pkl")
        # The workers share the base model's cached activations through a directory: each sample runs once.
        self.store = tempfile.mkdtemp(prefix="edgekit-search-cache-")
        with os.fdopen(handle, "wb") as f:
            pickle.dump(
                replace(context, store=self.store, workers=self.workers), f, protocol=pickle.HIGHEST_PROTOCOL
            )
        # Workers started ahead (prestart) or now; each reads the context with its first task.
        self.pool = _SPARE.pop(self.workers, None) or _new_pool(self.workers)

    def map(self, tasks: Sequence[Task]) -> list[Outcome]:
        return self.start(tasks)()

    def start(self, tasks: Sequence[Task]) -> Callable[[], list[Outcome]]:
        try:
            futures = [self.pool.submit(_pool_evaluate, self.key, self.path, t) for t in tasks]
        except BrokenProcessPool:
            raise QuantizationError(WORKER_DIED) from None

        def collect() -> list[Outcome]:
            try:
                return [f.result() for f in futures]
            except BrokenProcessPool:
                raise QuantizationError(WORKER_DIED) from None

        return collect

    def warm(self, task: Task) -> None:
        # One copy per worker: idle workers take one each (a worker taking two only runs the cached suffix again).
        try:
            for _ in range(self.workers):
                self.pool.submit(_pool_evaluate, self.key, self.path, task)
        except BrokenProcessPool:
            raise QuantizationError(WORKER_DIED) from None

    def close(self) -> None:
        import shutil

        self.pool.shutdown(cancel_futures=True)
        if os.path.exists(self.path):
            os.unlink(self.path)
        shutil.rmtree(self.store, ignore_errors=True)


def _ray_evaluate(context: EvalContext, task: Task) -> Outcome:
    from edgekit.quantize.qdq import quiet_warnings

    quiet_warnings()
    cached = _WORKER.setdefault(context.key, context)  # a Ray worker keeps its parsed model between tasks
    return evaluate(cached, task)


class RayExecutor(Executor):
    """Tasks on a Ray cluster: ``address`` None starts (or joins, with RAY_ADDRESS) a local Ray; ``ray://HOST:PORT``
    connects to a cluster. The context goes to the object store once."""

    name = "ray"

    def __init__(self, context: EvalContext, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise QuantizationError(f"--executor ray needs Ray: {RAY_HINT}") from None
        self.ray = ray
        if not ray.is_initialized():
            try:
                ray.init(
                    address=address, include_dashboard=False, log_to_driver=False, configure_logging=False
                )
            except Exception as exc:  # noqa: BLE001 - Ray raises many types; the user gets one line
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise QuantizationError(
                    f"cannot start or reach Ray at {address or 'local'}: {first}"
                ) from None
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.context_ref = ray.put(context)
        self.remote = ray.remote(num_cpus=1)(_ray_evaluate)

    def map(self, tasks: Sequence[Task]) -> list[Outcome]:
        return self.start(tasks)()

    def start(self, tasks: Sequence[Task]) -> Callable[[], list[Outcome]]:
        refs = [self.remote.remote(self.context_ref, t) for t in tasks]
        return lambda: self.ray.get(refs)


def make_executor(spec: str, context: EvalContext, workers: int | None = None) -> Executor:
    """``process`` (default), ``inline``, ``ray`` or ``ray://HOST:PORT``."""
    if spec == "process":
        return ProcessExecutor(context, workers)
    if spec == "inline":
        return InlineExecutor(context)
    if spec == "ray":
        return RayExecutor(context, None)
    if spec.startswith("ray://"):
        return RayExecutor(context, spec)
    raise QuantizationError(f"--executor must be process, inline, ray or ray://HOST:PORT, got {spec!r}")
