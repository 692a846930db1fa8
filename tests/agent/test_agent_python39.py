"""The agent claims Python 3.9: its sources parse as 3.9 and avoid 3.10-only calls, and (opt-in, with a
3.9 interpreter that has numpy and a TFLite runtime) the zipapp serves a bundle under Python 3.9."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from agent_procs import start_tcp_agent, stop
from edgekit.device_agents.client import connect

AGENT_DIR = Path(__file__).parents[2] / "device_agents"
PY39_ENV = "EDGEKIT_PYTHON39"


def test_agent_sources_are_python39() -> None:
    problems = []
    for path in sorted(AGENT_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(), str(path), feature_version=(3, 9))  # match, except*, ... fail
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            keywords = {k.arg for k in node.keywords}
            if name == "zip" and "strict" in keywords:  # 3.10
                problems.append(f"{path.name}:{node.lineno} zip(strict=)")
            if name == "dataclass" and keywords & {"slots", "kw_only", "match_args"}:  # 3.10
                problems.append(f"{path.name}:{node.lineno} dataclass({', '.join(sorted(keywords))})")
    assert not problems, problems


def _python39() -> str:
    python = os.environ.get(PY39_ENV) or shutil.which("python3.9")
    if not python:
        pytest.skip(
            f"no Python 3.9 interpreter (set {PY39_ENV}=/path/to/python3.9 with numpy and ai-edge-litert)"
        )
    probe = subprocess.run(
        [python, "-c", "import sys, numpy, ai_edge_litert; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "(3, 9)":
        first = (probe.stderr.strip().splitlines() or [probe.stdout.strip()])[0]
        pytest.skip(
            f"{python} is not a Python 3.9 with numpy and ai-edge-litert ({first[:160]}); set {PY39_ENV}"
        )
    return python


def test_zipapp_serves_a_bundle_on_python39(tmp_path: Path, bundles) -> None:  # type: ignore[no-untyped-def]
    python = _python39()
    pyz = tmp_path / "edgekit-agent.pyz"
    built = subprocess.run(
        [sys.executable, "-m", "edgekit.cli.main", "agent", "build", "-o", str(pyz)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    agent = start_tcp_agent(tmp_path / "work", cmd=[python, "-I", str(pyz)])
    try:
        with connect(agent.url()) as client:
            assert client.info["python"].startswith("3.9.")
            client.load(client.put_bundle(bundles["tflite"]))
            a = np.arange(4, dtype=np.float32).reshape(1, 4)
            out, _ = client.infer({"a": a, "b": a})
            np.testing.assert_array_equal(out["sum"], a + a)
            np.testing.assert_array_equal(out["prod"], a * a)
    finally:
        stop(agent.proc)
