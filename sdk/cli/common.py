"""Shared CLI helpers: error mapping, option parsing, the console."""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Sequence
from typing import Any

import typer
import typer.main
from edgekit.core.errors import EdgekitError
from rich.console import Console
from rich.markup import escape
from typer.core import TyperArgument

# soft_wrap: a long line (a path, a file list) is never broken into several when stdout is not a terminal.
console = Console(stderr=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    """Print one error line and exit (``message`` is plain text: "[v2]" in a path is not markup)."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
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


#: Value names shown in --help where the option's own name would say less (the rest: the name in capitals).
METAVARS = {
    "output": "DIR", "calib": "DATA", "eval_data": "DATA", "accuracy_data": "DATA", "input_shape": "NAME=D0,D1,...",
    "device": "URL", "report": "PATH", "html": "PATH", "md": "PATH", "fail_on_drop": "PP", "max_samples": "N",
    "calib_samples": "N", "samples": "N", "eval_samples": "N", "layer_precision": "NAME=RECIPE",
    "max_drop": "PP", "min_agreement": "PCT", "min_cosine": "C", "workers": "N", "ranking_samples": "N",
    "executor": "process|ray|ray://HOST:PORT",
}  # fmt: skip


class _Argument(TyperArgument):
    """An argument shown as ``MODEL`` in the usage line, as in every CLI, not typer's ``{model}``."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw + ("..." if self.nargs != 1 else "")
        return name if self.required else f"[{name}]"

    def display_type_rich(self, ctx: Any) -> str | None:
        return ""  # the name says what it is


def _tidy_param(param: Any) -> None:
    if isinstance(param, TyperArgument):
        param.__class__ = _Argument
        param.metavar = param.metavar or param.name.upper()
    elif getattr(param, "is_flag", False) or getattr(param, "count", False):
        param.metavar = ""  # a flag takes no value: no type tag
    elif param.metavar is None:
        param.metavar = METAVARS.get(param.name, param.name.upper())


def _tidy_help(command: Any) -> Any:
    """Value names instead of typer's type tags (``<bool>``, ``<list[str]>``) in every command's help."""
    base = type(command)

    class Tidy(base):  # type: ignore[misc, valid-type]
        def get_params(self, ctx):
            params = super().get_params(ctx)
            for param in params:
                _tidy_param(param)
            return params

        def format_help(self, ctx, formatter):
            for param in self.get_params(ctx):
                if "{targets}" in (
                    getattr(param, "help", None) or ""
                ):  # the registry is read for --help only
                    from edgekit.targets.base import target_names

                    param.help = param.help.replace("{targets}", ", ".join(target_names()))
            return super().format_help(ctx, formatter)

    command.__class__ = Tidy
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)
    return command


#: Exit code of an unexpected exception (a bug in edgekit, not bad input, which exits with 2).
INTERNAL_ERROR_EXIT = 3
#: Set (to anything non-empty) to see the traceback of an internal error and the native libraries' stderr.
DEBUG_ENV = "EDGEKIT_DEBUG"


def run_app(app: typer.Typer, argv: Sequence[str]) -> None:
    """Run the typer app; typed errors from anywhere below become one line and exit code 2.

    Anything else is a bug: one line ``internal error: ...`` and exit code 3, the traceback only with
    ``EDGEKIT_DEBUG=1``.
    """
    from typer._click import exceptions as click_errors
    from typer.rich_utils import rich_format_error

    route_warnings()
    try:
        # standalone_mode=False: click's usage errors come here (one line) instead of a framed box
        code = _tidy_help(typer.main.get_command(app))(list(argv), prog_name="edgekit", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:  # `edgekit` alone: the help, as before
        rich_format_error(exc)
        raise SystemExit(exc.exit_code) from None
    except click_errors.ClickException as exc:  # bad usage: an unknown option, a missing argument, ...
        command = exc.ctx.command_path if getattr(exc, "ctx", None) is not None else "edgekit"
        fail(f"{exc.format_message()} (see '{command} --help')", exc.exit_code)
    except EdgekitError as exc:
        fail(str(exc), exc.exit_code)
    except _agent_errors() as exc:  # errors of the device agent package, which cannot import edgekit
        fail(str(exc), 2)
    except (KeyboardInterrupt, typer.Abort):
        fail("interrupted", 130)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: never a traceback by default
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc()
            hint = ""
        else:
            hint = f" (set {DEBUG_ENV}=1 for the traceback)"
        while exc.__cause__ is not None and type(exc).__name__ == "PassError":  # name the pass's own failure
            exc = exc.__cause__
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        detail = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        fail(f"internal error: {detail}{hint}", INTERNAL_ERROR_EXIT)
    # As click's standalone mode does: always exit, with an explicit typer.Exit's code (non-standalone click
    # returns it; --help and --version give 0)
    raise SystemExit(code if isinstance(code, int) and not isinstance(code, bool) else 0)


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


def parse_layer_precision(values: Sequence[str] | None) -> tuple[tuple[str, str], ...]:
    """Parse ``--layer-precision NAME=RECIPE`` options (the recipe names are checked by QuantizeOptions)."""
    pairs = []
    for value in values or ():
        name, sep, recipe = value.rpartition("=")
        if not sep or not name or not recipe:
            raise EdgekitError(
                f"--layer-precision expects NAME=RECIPE (a node name and a recipe), got {value!r}"
            )
        pairs.append((name, recipe))
    return tuple(pairs)


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
    from edgekit.core.data import ImagePreprocess

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
    """A ``track(iterable, description, total)`` that shows progress on stderr.

    On a terminal, rich progress bars (``live``). Piped or logged, a bar would leave a blank line behind, so
    each stage prints one line when it ends instead: what it did, how many items, how long it took.
    """

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self.live = enabled and err_console.is_terminal

    def __call__(self, items, description: str, total: int):
        if not self.enabled:
            yield from items
            return
        if not self.live:
            start, done = time.perf_counter(), 0
            for item in items:
                yield item
                done += 1
            err_console.print(
                f"{description}: done in {time.perf_counter() - start:.1f} s ({done} steps)", soft_wrap=True
            )
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
