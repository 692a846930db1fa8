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
