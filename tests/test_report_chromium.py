"""The HTML report in headless Chromium: it loads, and its tables and plots are there and drawn.

Runs where Chromium is installed (`.ci/run` installs Debian's chromium); the screenshot check is opt-in with
EDGEKIT_SCREENSHOT=1 (it writes the PNG next to the report for a person to look at)."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from edgekit.report import render_html
from PIL import Image
from test_report import make_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)"
)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def chromium(tmp_path, *args) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_report_loads_with_tables_and_plots(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_html(make_report(tmp_path)))
    run = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    assert dom.count("<table") >= 3 and "arm-cpu" in dom and "intel-vpu" in dom
    assert dom.count('src="data:image/png;base64,') == 3


@pytest.mark.skipif(os.environ.get("EDGEKIT_SCREENSHOT") != "1", reason="opt-in: EDGEKIT_SCREENSHOT=1")
def test_report_screenshot_shows_the_plots(tmp_path):
    page = tmp_path / "report.html"
    page.write_text(render_html(make_report(tmp_path)))
    shot = tmp_path / "report.png"
    run = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2200", page.as_uri())
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    # The plots' coloured bars: a fair share of the page is strongly coloured (not white or grey text).
    saturation = pixels.max(axis=2) - pixels.min(axis=2)
    assert (saturation > 60).mean() > 0.01
