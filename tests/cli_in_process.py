"""The CLI run in the test's own process (``run_app``, as the console script calls it), its exit code and output."""

from __future__ import annotations

import pytest
from edgekit.cli.common import run_app
from edgekit.cli.main import app


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``edgekit ARGS``: the exit code, stdout and stderr."""
    try:
        run_app(app, list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def cli_text(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``edgekit ARGS``: the exit code and stdout + stderr."""
    code, out, err = cli(capsys, *args)
    return code, out + err
