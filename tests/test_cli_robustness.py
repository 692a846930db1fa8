"""The CLI's outer edges: ``--version`` from the installed metadata, and no traceback for a bug."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import typer
from edgekit.cli.common import INTERNAL_ERROR_EXIT, run_app

SCRIPT = Path(sys.executable).with_name("edgekit")


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no edgekit console script beside {sys.executable}")
def test_version_through_the_console_script():
    done = subprocess.run([str(SCRIPT), "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"edgekit {version('edgekit')}"


def _buggy_app() -> typer.Typer:
    app = typer.Typer(pretty_exceptions_enable=False, add_completion=False)

    @app.command()
    def crash() -> None:
        {}["missing key"]  # noqa: B018 - a real bug: KeyError

    @app.command()
    def other() -> None:
        pass

    return app


def _run(capsys, monkeypatch, debug: bool) -> tuple[int, str]:
    if debug:
        monkeypatch.setenv("EDGEKIT_DEBUG", "1")
    else:
        monkeypatch.delenv("EDGEKIT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run_app(_buggy_app(), ["crash"])
    return int(exit_info.value.code), capsys.readouterr().err


def test_unexpected_exception_is_one_line_without_traceback(capsys, monkeypatch):
    code, err = _run(capsys, monkeypatch, debug=False)
    assert code == INTERNAL_ERROR_EXIT != 2
    assert "Traceback" not in err
    assert err.strip().splitlines() == [
        "error: internal error: KeyError: 'missing key' (set EDGEKIT_DEBUG=1 for the traceback)"
    ]


def test_edgekit_debug_shows_the_traceback(capsys, monkeypatch):
    code, err = _run(capsys, monkeypatch, debug=True)
    assert code == INTERNAL_ERROR_EXIT
    assert "Traceback (most recent call last)" in err and "KeyError" in err
    assert err.strip().splitlines()[-1] == "error: internal error: KeyError: 'missing key'"


def test_error_lines_are_plain_text_not_markup(tmp_path, capsys):
    """A path with brackets (rich markup syntax) is printed as it is."""
    from edgekit.cli.main import app

    missing = tmp_path / "model[v2].onnx"
    with pytest.raises(SystemExit) as exit_info:
        run_app(app, ["inspect", str(missing)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == f"error: model file not found: {missing}"


def test_a_failing_pass_names_its_own_error_not_the_pass_runner(capsys, monkeypatch):
    """onnx-ir wraps a pass's exception twice ("An error occurred at step 0"): the line names the cause."""
    import onnx_ir as ir
    import typer

    class Broken(ir.passes.InPlacePass):
        def call(self, model):
            raise ValueError("scale of 'conv_1' rounds to zero")

    app = typer.Typer()

    @app.command()
    def crash() -> None:
        ir.passes.PassManager([Broken()])(ir.Model(ir.Graph([], [], nodes=[]), ir_version=10))

    @app.command()
    def other() -> None:  # two commands, so that `crash` is a subcommand as in edgekit
        pass

    monkeypatch.delenv("EDGEKIT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run_app(app, ["crash"])
    err = capsys.readouterr().err
    assert exit_info.value.code == INTERNAL_ERROR_EXIT
    assert err.strip().splitlines() == [
        "error: internal error: ValueError: scale of 'conv_1' rounds to zero (set EDGEKIT_DEBUG=1 for the traceback)"
    ]
