"""The CLI run in the test's own process (``run_app``, as the console script calls it), its exit code and output."""

from __future__ import annotations

from pathlib import Path

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


def deploy_verified(
    capsys: pytest.CaptureFixture[str], model: Path, calib: Path, target: str, precision: str, out: Path
) -> dict:
    """``edgekit deploy MODEL -t TARGET --precision P --calib CALIB``: asserts exit 0 and a passed verification
    (the fp32 .tflite / IR within 1e-4 of the output range), and returns the bundle's verification."""
    from edgekit.device_agents.bundle import read_bundle

    code, text = cli_text(
        capsys,
        "deploy",
        str(model),
        "-t",
        target,
        "--precision",
        precision,
        "--calib",
        str(calib),
        "-o",
        str(out),
    )
    assert code == 0, text
    verification = read_bundle(out / target).manifest.verification
    assert verification["passed"], verification
    if precision == "fp32":
        assert verification["max_rel_error"] <= 1e-4, verification
    return verification
