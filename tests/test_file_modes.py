"""Files and bundle folders edgekit writes follow the umask, like any tool (not mkstemp's 0600/0700)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest


def _edgekit(umask: int, *args: str) -> subprocess.CompletedProcess:
    code = f"import os, sys; os.umask({umask}); from edgekit.cli.main import main; sys.argv[0] = 'edgekit'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600, check=False
    )


def _modes(root: Path) -> dict[str, int]:
    paths = [root, *root.rglob("*")] if root.is_dir() else [root]
    return {str(p.relative_to(root.parent)): stat.S_IMODE(p.stat().st_mode) for p in paths}


# 0o027, not the usual 0o022: a file written 0o644 or 0o600 regardless of the umask fails here either way
@pytest.mark.parametrize("umask", [0o027])
def test_written_files_follow_the_umask(digits, tmp_path, umask) -> None:
    file_mode, dir_mode = 0o666 & ~umask, 0o777 & ~umask
    run = _edgekit(
        umask, "quantize", str(digits.model), "--calib", str(digits.calib), "-o", str(tmp_path / "q.onnx"),
        "--report", str(tmp_path / "q.json"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    run = _edgekit(
        umask, "deploy", str(tmp_path / "q.onnx"), "--target", "arm-cpu", "--target", "intel-vpu",
        "-o", str(tmp_path / "out"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    run = _edgekit(
        umask, "deploy", str(tmp_path / "q.onnx"), "--target", "arm-cpu", "--archive", "-o", str(tmp_path / "tar"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr

    written = {**_modes(tmp_path / "q.onnx"), **_modes(tmp_path / "q.json")}
    for bundle in (tmp_path / "out").iterdir():
        written.update(_modes(bundle))
    written.update({p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "tar").iterdir()})
    assert len(written) >= 8, written
    for name, mode in written.items():
        is_dir = os.path.isdir(tmp_path / name) or os.path.isdir(tmp_path / "out" / name)
        assert mode == (dir_mode if is_dir else file_mode), f"{name}: {oct(mode)}"
