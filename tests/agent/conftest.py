"""Fixtures of the agent tests: real bundles and real agent subprocesses."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import agent_models as models  # noqa: E402
from agent_procs import AgentProcess, start_tcp_agent, stop  # noqa: E402


@pytest.fixture(scope="module")
def tcp_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentProcess]:
    agent = start_tcp_agent(tmp_path_factory.mktemp("agent-work"))
    yield agent
    stop(agent.proc)


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("bundles")
    ov_path, w, b = models.openvino_bundle(root / "mlp-ov", root / "ov-work")
    return {
        "tflite": models.tflite_bundle(root / "addmul-tflite"),
        "tflite_archive": models.tflite_bundle(root / "addmul-archive", archive=True),
        "openvino": ov_path,
        "ov_weights": (w, b),
        "root": root,
    }
