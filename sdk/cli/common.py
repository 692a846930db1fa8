"""Shared CLI helpers: error mapping, option parsing, the console."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import typer
from edgekit.errors import EdgekitError
from rich.console import Console
from rich.markup import escape

# soft_wrap: a long line (a path, a file list) is never broken into several when stdout is not a terminal.
console = Console(stderr=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    """Print one error line and exit."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise SystemExit(code)


class _ConsoleWarnings(logging.Handler):
    """The library's warnings (logger ``edgekit``) as one ``warning:`` line each on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(f"[yellow]warning:[/] {escape(record.getMessage())}", soft_wrap=True)


def route_warnings() -> None:
    logger = logging.getLogger("edgekit")
    if not any(isinstance(h, _ConsoleWarnings) for h in logger.handlers):
        handler = _ConsoleWarnings(logging.WARNING)
        logger.addHandler(handler)
        logger.propagate = False


def run_app(app: typer.Typer, argv: Sequence[str]) -> None:
    """Run the typer app; typed errors from anywhere below become one line and exit code 2."""
    route_warnings()
    try:
        app(list(argv), standalone_mode=True)
    except EdgekitError as exc:
        fail(str(exc), exc.exit_code)
    except _agent_errors() as exc:  # errors of the device agent package, which cannot import edgekit
        fail(str(exc), 2)
    except KeyboardInterrupt:
        fail("interrupted", 130)


def _agent_errors() -> tuple[type[BaseException], ...]:
    try:
        from edgekit.device_agents.errors import AgentError
    except ImportError:
        return ()
    return (AgentError,)


def parse_input_shapes(values: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """Parse ``--input-shape NAME=1,3,224,224`` options."""
    shapes: dict[str, tuple[int, ...]] = {}
    for value in values or ():
        name, sep, dims = value.rpartition("=")
        if not sep or not name:
            raise EdgekitError(f"--input-shape expects NAME=D0,D1,..., got {value!r}")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise EdgekitError(f"--input-shape {value!r}: dimensions must be integers") from None
        if any(d <= 0 for d in shape):
            raise EdgekitError(f"--input-shape {value!r}: dimensions must be positive")
        shapes[name] = shape
    return shapes


def parse_floats(value: str | None, what: str) -> tuple[float, ...]:
    if not value:
        return ()
    try:
        return tuple(float(v) for v in value.split(","))
    except ValueError:
        raise EdgekitError(f"{what} expects comma-separated numbers, got {value!r}") from None


def build_preprocess(
    size: str | None,
    resize_mode: str,
    resize_shorter: int | None,
    color: str,
    scale: float,
    mean: str | None,
    std: str | None,
    layout: str,
):
    """The image preprocessing given on the command line (used for image-folder data only)."""
    from edgekit.data import ImagePreprocess

    hw = None
    if size:
        dims = parse_floats(size, "--size")
        if len(dims) == 1:
            dims = (dims[0], dims[0])
        if len(dims) != 2:
            raise EdgekitError(f"--size expects H,W or one number, got {size!r}")
        hw = (int(dims[0]), int(dims[1]))
    return ImagePreprocess(
        size=hw,
        resize_mode=resize_mode,  # type: ignore[arg-type]
        resize_shorter=resize_shorter,
        color=color.upper(),  # type: ignore[arg-type]
        scale=scale,
        mean=parse_floats(mean, "--mean"),
        std=parse_floats(std, "--std"),
        layout=layout.upper(),  # type: ignore[arg-type]
    )


class RichTrack:
    """A ``track(iterable, description, total)`` that draws rich progress bars (on stderr).

    Only on a terminal: piped or logged, a bar would leave a blank line behind.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled and err_console.is_terminal

    def __call__(self, items, description: str, total: int):
        if not self.enabled:
            yield from items
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        ) as progress:
            task = progress.add_task(description, total=total or None)
            for item in items:
                yield item
                progress.advance(task)
