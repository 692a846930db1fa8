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
    assert not any("XNNPACK delegate" in line for line in lines), lines  # the runtimes' own chatter stays out
    wrote = [line for line in run.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and all(str(out / f"report.{ext}") in wrote[0] for ext in ("json", "md", "html"))
    bundle = [line for line in run.stdout.splitlines() if "arm-cpu →" in line]
    assert len(bundle) == 1 and str(out / "arm-cpu") in bundle[0]
    # one line per stage instead of a bar
    for stage in ("calibrating", "fp32 on the host", "evaluating on the device (arm-cpu)"):
        assert sum(line.startswith(f"{stage}: done in ") for line in run.stderr.splitlines()) == 1, run.stderr


def test_deploy_report_warns_when_fp32_itself_scores_low(digits, tmp_path) -> None:
    import json

    import numpy as np

    with np.load(digits.val) as data:
        name = next(k for k in data.files if k != "labels")
        np.savez(
            tmp_path / "shuffled.npz",
            **{name: data[name], "labels": np.random.default_rng(1).permutation(data["labels"])},
        )
    run = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "deploy", str(digits.model), "--target", "arm-cpu",
         "--eval", str(tmp_path / "shuffled.npz"), "--max-samples", "60", "-o", str(tmp_path / "out"),
         "--report", str(tmp_path / "out" / "report.html")],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    warning = [
        line for line in run.stdout.splitlines() if line.startswith("warning: fp32 on the host scores only")
    ]
    assert len(warning) == 1, run.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["warnings"] == [warning[0].removeprefix("warning: ")]
    assert "fp32 on the host scores only" in (tmp_path / "out" / "report.html").read_text()
    assert "fp32 on the host scores only" in (tmp_path / "out" / "report.md").read_text()
