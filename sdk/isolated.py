"""Run a native-library call where a crash cannot take the CLI down: in a child Python process.

LiteRT aborts the whole process (SIGABRT) on some graphs and OpenVINO can segfault compiling one; a model
edgekit has just written is exactly where that may happen. :func:`call` runs a module-level function in a
fresh interpreter (``python -m edgekit.isolated``, so no forked copy of the parent's runtime threads) and
turns every way it can go wrong into one typed, one-line error:

- the child dies from a signal: ``<what> aborted (SIGABRT) while <doing>: <last meaningful stderr line>``;
- the function raises an :class:`~edgekit.errors.EdgekitError`: the same error, re-raised as is;
- it raises anything else (LiteRT's ``RuntimeError``, ...): ``<what> failed while <doing>: <first line>``.

Arguments and the result travel as one pickle each way over the child's stdin and a private pipe (pickle
protocol 5 writes numpy arrays as raw bytes, no per-element cost). One child per call: callers batch their
samples into one call. The child's stderr is captured (shown with ``EDGEKIT_DEBUG=1``); native libraries
that print to stdout cannot corrupt the result, which has its own file descriptor.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from edgekit.errors import EdgekitError, TargetError

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
    return item[3:] if item else (lines[0] if lines else None)


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
    payload = pickle.dumps(list(sys.path)) + pickle.dumps((fn, args, kwargs), protocol=5)
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "edgekit.isolated", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(write_fd,),
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise error(f"cannot start a process to run {what}: {exc.strerror}") from None
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as result_pipe:
        chunks: list[bytes] = []
        reader = threading.Thread(target=lambda: chunks.append(result_pipe.read()), daemon=True)
        reader.start()
        try:
            _, stderr_bytes = proc.communicate(payload, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            reader.join()
            raise error(f"{what} did not finish within {timeout:g} s while {doing}") from None
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        reader.join()
    stderr, what, doing = _split_stages(stderr_bytes.decode("utf-8", "replace"), what, doing)
    if os.environ.get("EDGEKIT_DEBUG") and stderr.strip():
        sys.stderr.write(stderr.rstrip("\n") + "\n")
    raw = b"".join(chunks)
    if proc.returncode < 0 or not raw:
        lines = meaningful_lines(stderr)
        detail = lines[-1] if lines else "it printed no message"
        if proc.returncode < 0:
            try:
                name = signal.Signals(-proc.returncode).name
            except ValueError:
                name = f"signal {-proc.returncode}"
            raise error(f"{what} aborted ({name}) while {doing}: {detail}")
        raise error(f"{what} exited with status {proc.returncode} while {doing}: {detail}")
    kind, value = pickle.loads(raw)
    if kind == "ok":
        return value
    if kind == "edgekit":
        module, qualname, message = value
        raise _rebuild(module, qualname, message, error)
    type_name, message = value
    raise error(f"{what} failed while {doing}: {first_message(message) or type_name}")


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


def _child(result_fd: int) -> None:
    # Whatever a native library prints to stdout goes to stderr; the result has its own pipe.
    os.dup2(2, 1)
    fn, args, kwargs = _read_payload()
    try:
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
    with os.fdopen(result_fd, "wb") as fh:
        fh.write(data)
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: native libraries' destructors are not our business here


def _read_payload() -> tuple[Callable[..., Any], tuple, dict]:
    stream = sys.stdin.buffer
    # The parent's sys.path first (a pickle of its own), so that the function's module resolves as it does
    # in the parent.
    parent_path = pickle.load(stream)
    sys.path[:0] = [p for p in parent_path if p not in sys.path]
    return pickle.load(stream)


if __name__ == "__main__":
    _child(int(sys.argv[1]))
