"""Shared CLI helpers: error mapping, option parsing, the console."""

from __future__ import annotations

from collections.abc import Sequence

import typer
from rich.console import Console

from edgekit.errors import EdgekitError

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)


def fail(message: str, code: int = 2) -> None:
    """Print one error line and exit."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise SystemExit(code)


def run_app(app: typer.Typer, argv: Sequence[str]) -> None:
    """Run the typer app; typed errors from anywhere below become one line and exit code 2."""
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
