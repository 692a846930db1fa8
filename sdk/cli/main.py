"""Entry point of the ``edgekit`` console script.

Each sub-command lives in its own module and registers itself on :data:`app`; this module only wires
them together and turns typed errors into one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

import typer
from edgekit.cli import agent_cmd, common, deploy_cmd, inspect_cmd, quantize_cmd, report_cmd

app = typer.Typer(
    name="edgekit",
    help="Take a trained ONNX model to edge hardware and prove what it costs in accuracy.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        common.console.print(f"edgekit {installed_version()}", highlight=False)
        raise typer.Exit()


def installed_version() -> str:
    """The installed distribution's version (its metadata), or the package's own when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("edgekit")
    except PackageNotFoundError:
        import edgekit

        return edgekit.__version__


@app.callback()
def _root(
    _version: bool = typer.Option(
        False, "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
    ),
) -> None:
    """Take a trained ONNX model to edge hardware and prove what it costs in accuracy."""


# One line per sub-command module, in the order they appear in --help.
quantize_cmd.register(app)
inspect_cmd.register(app)
deploy_cmd.register(app)
agent_cmd.register(app)
report_cmd.register(app)


def main() -> None:  # pragma: no cover - exercised through the console script
    common.run_app(app, sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    main()
