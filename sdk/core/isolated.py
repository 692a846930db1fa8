"""Run a native-library call where a crash cannot take the CLI down: in a child Python process.

LiteRT aborts the whole process (SIGABRT) on some graphs and OpenVINO can segfault compiling one; a model
edgekit has just written is exactly where that may happen. :func:`call` runs a module-level function in a
child process and turns every way it can go wrong into one typed, one-line error:

- the child dies from a signal: ``<what> aborted (SIGABRT) while <doing>: <last meaningful stderr line>``;
- the function raises an :class:`~edgekit.core.errors.EdgekitError`: the same error, re-raised as is;
- it raises anything else (LiteRT's ``RuntimeError``, ...): ``<what> failed while <doing>: <first line>``.

The children are forked from a helper process (``python -m edgekit.core.isolated serve``, started on the first
call and kept for the life of this process) that has already imported numpy, onnx, OpenVINO and LiteRT but
run nothing: a child starts in milliseconds instead of paying those imports, and never inherits this
process's runtime threads. Where there is no ``fork`` each call starts a fresh interpreter instead.

Arguments and the result travel as pickles in a private temporary folder (protocol 5 writes numpy arrays as
raw bytes). One child per call: callers batch their samples into one call. The child's stdout and stderr go
to a file there (shown with ``EDGEKIT_DEBUG=1``), so native libraries' messages neither reach the user nor
corrupt the result.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import re
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from edgekit.core.errors import EdgekitError, TargetError

R = TypeVar("R")

#: stderr lines that say nothing about a failure (LiteRT's delegate banner, Python's own noise).
_NOISE = ("INFO:", "Fatal Python error", "Current thread", "Thread 0x", "Extension modules:", 'File "')


#: Prefix of the stderr line :func:`stage` writes in the child.
_STAGE = "\x00edgekit-stage\t"


def stage(what: str, doing: str) -> None:
    """In a child run by :func:`call`: name the library and the step now running, for the error messages.

    A function that calls several native libraries (OpenVINO, then LiteRT) says which one a crash came from.
    Outside a child it only writes one line to stderr that nobody reads, so call it only from child code.
    """
    sys.stderr.write(f"{_STAGE}{what}\t{doing}\n")
    sys.stderr.flush()


def _split_stages(stderr: str, what: str, doing: str) -> tuple[str, str, str]:
    """The stderr text without the stage lines, and the last stage announced (``what``/``doing`` if none)."""
    kept = []
    for line in stderr.splitlines():
        if line.startswith(_STAGE):
            _, what, doing = line.split("\t", 2)
        else:
            kept.append(line)
    return "\n".join(kept), what, doing


def meaningful_lines(text: str) -> list[str]:
    """The lines of a native library's message or log that are worth showing, in order."""
    lines = []
    for raw in text.splitlines():
        # LiteRT's error reporter runs its messages together: "...(2 != 0)Node number 0 (PADV2) failed..."
        line = re.sub(r"(?<=[^\s;])(Node number \d+ \()", r"; \1", raw.strip())
        # Headers that only introduce what follows (OpenVINO: "Exception from src/...cpp:84:", "Summary:").
        if line and not line.startswith(_NOISE) and line != "Aborted" and not line.endswith(":"):
            lines.append(line)
    return lines


def first_message(text: str) -> str | None:
    """The line of an exception's message that names the problem: OpenVINO's summary item ("-- No conversion
    rule found for operations: X") if there is one, else the first meaningful line (LiteRT's check)."""
    lines = meaningful_lines(text)
    item = next((ln for ln in lines if ln.startswith("-- ")), None)
    if item:
        return item[3:]
    # OpenVINO names the failing node first, then (after its source-file header) what the node's check found
    if len(lines) > 1 and _OV_NODE.match(lines[0]):
        return f"{lines[0]}: {lines[1]}"
    return lines[0] if lines else None


#: OpenVINO's first line of a kernel's failure at run time ("Node /emb/GatherElements of type GatherElements").
_OV_NODE = re.compile(r"Node \S+ of type \w+$")


def call(
    fn: Callable[..., R],
    *args: Any,
    what: str,
    doing: str,
    error: type[EdgekitError] = TargetError,
    timeout: float | None = None,
    **kwargs: Any,
) -> R:
    """``fn(*args, **kwargs)`` in a child process; native failures become ``error`` (see the module doc).

    ``fn`` must be importable by name (a module-level function), its arguments and result picklable.
    """
    with tempfile.TemporaryDirectory(prefix="edgekit-isolated-") as tmp:
        job = Path(tmp)
        with open(job / _PAYLOAD, "wb") as fh:
            pickle.dump(list(sys.path), fh)  # first, so that the function's module resolves as here
            pickle.dump((fn, args, kwargs), fh, protocol=5)
        try:
            returncode = _run(job, timeout)
        except TimeoutError:
            raise error(f"{what} did not finish within {timeout:g} s while {doing}") from None
        except OSError as exc:
            raise error(f"cannot start a process to run {what}: {exc.strerror or exc}") from None
        log = (job / _LOG).read_bytes() if (job / _LOG).exists() else b""
        raw = (job / _RESULT).read_bytes() if (job / _RESULT).exists() else b""
    stderr, what, doing = _split_stages(log.decode("utf-8", "replace"), what, doing)
    if os.environ.get("EDGEKIT_DEBUG") and stderr.strip():
        sys.stderr.write(stderr.rstrip("\n") + "\n")
    if returncode != 0 or not raw:
        lines = meaningful_lines(stderr)
        detail = lines[-1] if lines else "it printed no message"
        if returncode < 0:
            try:
                name = signal.Signals(-returncode).name
            except ValueError:
                name = f"signal {-returncode}"
            raise error(f"{what} aborted ({name}) while {doing}: {detail}")
        raise error(f"{what} exited with status {returncode} while {doing}: {detail}")
    kind, value = pickle.loads(raw)
    if kind == "ok":
        return value
    if kind == "edgekit":
        module, qualname, message = value
        raise _rebuild(module, qualname, message, error)
    type_name, message = value
    raise error(f"{what} failed while {doing}: {first_message(message) or type_name}")


_PAYLOAD, _RESULT, _LOG = "payload.pickle", "result.pickle", "output.log"
#: What the helper process imports before forking children (a missing one is skipped).
_PRELOAD = (
    "numpy",
    "onnx",
    "openvino",
    "ai_edge_litert.interpreter",
    "edgekit.core.litert_run",
    "edgekit.core.runtime",
)


class _Server:
    """The helper process children are forked from; one job at a time."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def run(self, job: Path, timeout: float | None) -> int:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "edgekit.core.isolated", "serve"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # Ctrl-C reaches this process, which then stops the helper
                )
            proc = self._proc
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(f"{job}\n".encode())
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], timeout)
                if not ready:
                    raise TimeoutError
                line = proc.stdout.readline()
            except BaseException:
                self.stop()
                raise
            if not line:  # the helper itself died (it runs nothing of its own: should not happen)
                self.stop()
                return -signal.SIGKILL
            return int(line)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)  # the helper and a child it may be waiting for
            proc.wait()


_SERVER = _Server()
atexit.register(_SERVER.stop)


def _run(job: Path, timeout: float | None) -> int:
    """Run the job in ``job`` in a child; its exit code (negative: killed by that signal)."""
    if hasattr(os, "fork"):
        return _SERVER.run(job, timeout)
    done = subprocess.run(  # pragma: no cover - platforms without fork
        [sys.executable, "-m", "edgekit.core.isolated", "job", str(job)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=timeout,
    )
    return done.returncode


def _rebuild(module: str, qualname: str, message: str, fallback: type[EdgekitError]) -> EdgekitError:
    """The child's typed error, as the same class (whatever its ``__init__`` takes) with the same message."""
    import importlib

    cls: Any = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    if not (isinstance(cls, type) and issubclass(cls, EdgekitError)):
        cls = fallback
    exc = cls.__new__(cls)
    Exception.__init__(exc, message)
    return exc


#: True in a child :func:`call` runs a job in: an error raised there is reported by the parent with what the
#: child was doing (its :func:`stage`), so code that would turn a native error into a typed one lets it go.
IN_CHILD = False


def _run_job(job: Path) -> None:
    """In the child: run the pickled call of ``job``, write its outcome, and exit without teardown."""
    import edgekit.core.isolated as this  # the helper runs this file as __main__: set the importable module's flag

    this.IN_CHILD = True
    fd = os.open(job / _LOG, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)  # native libraries' stdout and stderr: into the log, never the helper's reply pipe
    os.dup2(fd, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    try:
        with open(job / _PAYLOAD, "rb") as fh:
            parent_path = pickle.load(fh)
            sys.path[:0] = [p for p in parent_path if p not in sys.path]
            fn, args, kwargs = pickle.load(fh)
        out: tuple[str, Any] = ("ok", fn(*args, **kwargs))
    except EdgekitError as exc:
        out = ("edgekit", (type(exc).__module__, type(exc).__qualname__, str(exc)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent as a typed error
        if os.environ.get("EDGEKIT_DEBUG"):
            import traceback

            traceback.print_exc()
        out = ("exception", (type(exc).__name__, str(exc)))
    try:
        data = pickle.dumps(out, protocol=5)
    except Exception as exc:  # noqa: BLE001 - an unpicklable result is the caller's bug, said in words
        data = pickle.dumps(("exception", (type(exc).__name__, f"cannot return the result: {exc}")))
    (job / _RESULT).write_bytes(data)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: native libraries' destructors are not our business here


def _serve() -> None:
    """The helper: import the heavy modules once, then fork one child per job folder read from stdin."""
    import importlib

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S112 - a missing runtime is the job's problem, said there
            continue
    replies = os.fdopen(os.dup(1), "w")
    for line in sys.stdin.buffer:
        job = Path(line.decode().strip())
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _run_job(job)
        _, status = os.waitpid(pid, 0)
        replies.write(f"{os.waitstatus_to_exitcode(status)}\n")
        replies.flush()


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        _serve()
    elif sys.argv[1:2] == ["job"]:  # pragma: no cover - platforms without fork
        _run_job(Path(sys.argv[2]))
