"""--help reads like a CLI's help: value names, not typer's type tags; MODEL, not {model}; the valid targets."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

COMMANDS = [[], ["quantize"], ["inspect"], ["deploy"], ["report"], ["agent"], ["agent", "build"],
            ["agent", "serve"], ["devices"], ["devices", "probe"]]  # fmt: skip


def _help(*command: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", *command, "--help"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"}, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "edgekit")
def test_help_has_no_type_tags(command) -> None:
    text = _help(*command)
    assert not re.search(r"<(bool|int|float|str|path|text|list\[[^\]]*\])>", text), text
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert "{" not in usage, usage


def test_deploy_help_names_the_model_and_the_targets() -> None:
    text = _help("deploy")
    assert "Usage: edgekit deploy [OPTIONS] MODEL" in text
    targets = re.search(r"Target to package for \(repeatable\): ([a-z\-, ]+)\.", text)
    assert targets is not None, text
    from edgekit.targets.base import target_names

    assert targets.group(1).split(", ") == target_names()
