"""The zipapp (``edgekit agent build``) as a real subprocess, ``edgekit agent serve``, ``edgekit devices
probe``, and the serial URL through two pty pairs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tty
import zipfile
from pathlib import Path

import numpy as np
import pytest
from agent_procs import AgentProcess, read_line, start_tcp_agent, stop
from agent_relay import FdRelay
from edgekit.device_agents.client import connect

CLI = [sys.executable, "-m", "edgekit.cli.main"]


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pyz") / "edgekit-agent.pyz"
    proc = run_cli("agent", "build", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_zipapp_holds_only_the_agent_package(pyz: Path) -> None:
    names = zipfile.ZipFile(pyz).namelist()
    files = [n for n in names if not n.endswith("/")]
    assert "__main__.py" in files and "edgekit/__init__.py" in files
    others = [n for n in files if n not in ("__main__.py", "edgekit/__init__.py")]
    assert others and all(n.startswith("edgekit/device_agents/") and n.endswith(".py") for n in others)
    assert {"edgekit/device_agents/agent.py", "edgekit/device_agents/bundle.py"} <= set(files)
    assert len(zipfile.ZipFile(pyz).read("edgekit/__init__.py")) < 200  # a stub, not edgekit's package


def test_zipapp_runs_as_a_subprocess_over_tcp(pyz: Path, tmp_path: Path, bundles) -> None:  # type: ignore[no-untyped-def]
    agent = start_tcp_agent(tmp_path / "work", cmd=[sys.executable, "-I", str(pyz)])
    try:
        with connect(agent.url()) as client:
            assert client.info["agent_path"].startswith(str(pyz))  # the code in the zipapp ran
            bundle_id = client.put_bundle(bundles["tflite"])
            client.load(bundle_id)
            a = np.full((1, 4), 3, np.float32)
            out, _ = client.infer({"a": a, "b": a})
            np.testing.assert_array_equal(out["prod"], a * a)
    finally:
        stop(agent.proc)


def test_zipapp_over_pty_with_local_url(pyz: Path) -> None:
    with connect(f"local?agent={pyz}", timeout=30) as client:
        assert client.info["agent_path"].startswith(str(pyz))
        assert client.status()["link"].startswith("serial://")


def test_serial_url_through_two_pty_pairs(tmp_path: Path, bundles) -> None:  # type: ignore[no-untyped-def]
    """Host pyserial <-> pty A <-> relay <-> pty B <-> agent pyserial: both serial code paths run."""
    ma, sa = os.openpty()
    mb, sb = os.openpty()
    for fd in (ma, sa, mb, sb):
        tty.setraw(fd)
    relay = FdRelay(ma, mb)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgekit.device_agents",
            "--serial",
            os.ttyname(sb),
            "--workdir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert "serving serial://" in read_line(proc, 30)
        with connect(f"serial://{os.ttyname(sa)}?baud=921600", timeout=20) as client:
            bundle_id = client.put_bundle(bundles["openvino"])
            client.load(bundle_id)
            x = np.ones((2, 8), np.float32)
            w, b = bundles["ov_weights"]
            out, times = client.infer({"x": x})
            np.testing.assert_allclose(out["y"], np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-5)
        # the port stays served: a second client on the same line
        with connect(f"serial://{os.ttyname(sa)}?baud=921600", timeout=20) as client:
            assert bundle_id in {b["bundle_id"] for b in client.status()["bundles"]}
    finally:
        stop(proc)
        relay.close()
        for fd in (ma, sa, mb, sb):
            os.close(fd)


def test_probe_and_serve_commands(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*CLI, "agent", "serve", "--listen", "127.0.0.1:0", "--workdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        line = read_line(proc, 60)
        port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        agent = AgentProcess(proc, port, tmp_path)
        probe = run_cli("devices", "probe", agent.url(), "--json")
        assert probe.returncode == 0, probe.stderr
        report = json.loads(probe.stdout)
        assert report["info"]["protocol"] == 1 and report["status"]["bundles"] == []
        table = run_cli("devices", "probe", agent.url())
        assert table.returncode == 0 and "runtimes" in table.stdout and "ai_edge_litert" in table.stdout
    finally:
        stop(proc)
    dead = run_cli("devices", "probe", f"tcp://127.0.0.1:{port}", "--timeout", "2")
    assert (
        dead.returncode == 2
        and dead.stderr.startswith("error: cannot connect")
        and "Traceback" not in dead.stderr
    )
    bad = run_cli("devices", "probe", "ftp://x")
    assert bad.returncode == 2 and "unknown device URL" in bad.stderr
    open_net = run_cli("agent", "serve", "--listen", "0.0.0.0:0", "--workdir", str(tmp_path))
    assert (
        open_net.returncode == 2 and "needs a token" in open_net.stderr and "Traceback" not in open_net.stderr
    )
