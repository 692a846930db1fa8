"""Agent subprocesses for the agent tests and benchmarks/agent_link.py."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path

    def url(self, **query: object) -> str:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return f"tcp://127.0.0.1:{self.port}" + (f"?{q}" if q else "")


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> str:
    """One line of the process's stdout, waiting at most ``timeout`` seconds."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not sel.select(remaining):
            raise TimeoutError(f"no line from the agent within {timeout} s (got {line!r})")
        byte = os.read(proc.stdout.fileno(), 1)
        if not byte:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"agent exited: {line!r} {err}")
        line += byte
    return line.decode()


def start_tcp_agent(workdir: Path, *extra: str, cmd: list[str] | None = None) -> AgentProcess:
    base = cmd or [sys.executable, "-m", "edgekit.device_agents"]
    proc = subprocess.Popen(
        [*base, "--listen", "127.0.0.1:0", "--workdir", str(workdir), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    line = read_line(proc, 30)
    assert "listening on" in line, line
    port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
    return AgentProcess(proc, port, workdir)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()
