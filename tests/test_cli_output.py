"""What a non-interactive run prints (CI logs, pipes): no blank lines where progress bars were, no line broken in two."""

from __future__ import annotations

import os
import subprocess
import sys


def test_piped_deploy_prints_whole_lines_and_no_blank_ones(digits, tmp_path) -> None:
    out = tmp_path / "a-rather-long-folder-name-so-that-paths-exceed-the-default-width" / "bundles"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    run = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "deploy", str(digits.model), "--target", "arm-cpu",
         "--calib", str(digits.calib), "--eval", str(digits.val), "--max-samples", "40", "-o", str(out),
         "--report", str(out / "report.html")],
        capture_output=True, text=True, timeout=600, env=env, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines() + run.stderr.splitlines()
    assert all(line.strip() for line in lines), lines
    wrote = [line for line in run.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and all(str(out / f"report.{ext}") in wrote[0] for ext in ("json", "md", "html"))
    bundle = [line for line in run.stdout.splitlines() if "arm-cpu →" in line]
    assert len(bundle) == 1 and str(out / "arm-cpu") in bundle[0]
