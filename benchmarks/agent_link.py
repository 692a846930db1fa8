"""Agent link figures: serial goodput and INFER overhead at 115200 and 921600 baud, loopback TCP upload
throughput, the agent's idle memory and import time.

Serial: host pyserial <-> pty A <-> relay paced at the baud rate (8N1: 10 bits a byte, both directions
independently) <-> pty B <-> agent subprocess (pyserial). The peer of every figure is measured in the
same run: the line rate for goodput, the bytes a sample puts on the line for INFER, a plain socket copy
for TCP, a bare interpreter for memory and import time.

    python benchmarks/agent_link.py              # everything (about 2.5 minutes: 1 MB at 115200 takes ~90 s)
    python benchmarks/agent_link.py --quick      # 256 kB serial uploads instead of 1 MB
    python benchmarks/agent_link.py --only tcp   # one part (serial | tcp)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tty
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "agent"))

import agent_models  # noqa: E402
from agent_procs import read_line, start_tcp_agent, stop  # noqa: E402
from agent_relay import Faults, FdRelay  # noqa: E402
from edgekit.device_agents.client import connect  # noqa: E402


def make_bundle(work: Path, name: str, size: int) -> Path:
    """A TFLite bundle directory of about ``size`` bytes (random side data make up the size)."""
    return agent_models.tflite_bundle(work / name, extra_bytes=size - 504, seed=size)


def bundle_bytes(bundle: Path) -> int:
    return sum(p.stat().st_size for p in bundle.iterdir() if p.name != "manifest.json")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def serial_run(baud: int, bundle: Path, work: Path, samples: int) -> dict[str, float]:
    ma, sa = os.openpty()
    mb, sb = os.openpty()
    for fd in (ma, sa, mb, sb):
        tty.setraw(fd)
    relay = FdRelay(ma, mb, Faults(baud=baud))
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgekit.device_agents",
            "--serial",
            os.ttyname(sb),
            "--baud",
            str(baud),
            "--workdir",
            str(work / f"serial-{baud}"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        read_line(agent, 60)
        with connect(f"serial://{os.ttyname(sa)}?baud={baud}", timeout=30) as client:
            size = bundle_bytes(bundle)
            start = time.perf_counter()
            bundle_id = client.put_bundle(bundle)
            upload = time.perf_counter() - start
            client.load(bundle_id, threads=1)
            x = {"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)}
            client.infer(x)  # warm
            single = []
            for _ in range(samples):
                t = time.perf_counter()
                _, times = client.infer(x)
                single.append((time.perf_counter() - t) - times[0])
            batch_n = 32
            xb = {k: np.repeat(v, batch_n, axis=0) for k, v in x.items()}
            t = time.perf_counter()
            _, times = client.infer(xb)
            batch_overhead = (time.perf_counter() - t - sum(times)) / batch_n
    finally:
        stop(agent)
        relay.close()
        for fd in (ma, sa, mb, sb):
            os.close(fd)
    line_rate = baud / 10.0
    return {
        "baud": baud,
        "bytes": size,
        "upload_s": upload,
        "goodput_fraction": size / upload / line_rate,
        "infer_overhead_ms": statistics.median(single) * 1e3,
        "infer_overhead_batch32_ms": batch_overhead * 1e3,
        "sample_wire_ms": 2 * 32 * 10 / baud * 1e3,  # 32 tensor bytes each way: the line's lower bound
    }


def raw_tcp_copy(bundle: Path, work: Path) -> float:
    """Peer: a plain socket copy of the same bytes into a file with sha256, in this process."""
    archive = max(bundle.iterdir(), key=lambda p: p.stat().st_size)
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    digest = []

    def receive() -> None:
        conn, _ = server.accept()
        h = hashlib.sha256()
        with conn, open(work / "raw-copy.bin", "wb") as f:
            while data := conn.recv(1 << 20):
                f.write(data)
                h.update(data)
        digest.append(h.hexdigest())

    t = threading.Thread(target=receive)
    t.start()
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as sock, open(archive, "rb") as f:
        while block := f.read(1 << 20):
            sock.sendall(block)
    t.join()
    elapsed = time.perf_counter() - start
    server.close()
    return archive.stat().st_size / elapsed / 1e6


def tcp_run(bundle: Path, work: Path) -> dict[str, float]:
    agent = start_tcp_agent(work / "tcp-agent")
    try:
        idle_rss = rss_kib(agent.proc.pid)
        with connect(agent.url()) as client:
            after_hello = rss_kib(agent.proc.pid)
            marks: dict[str, float] = {}

            def progress(done: int, total: int) -> None:
                if done == total and "sent" not in marks:  # the last chunk is confirmed
                    marks["sent"] = time.perf_counter()

            start = time.perf_counter()
            bundle_id = client.put_bundle(bundle, progress=progress)
            total = time.perf_counter() - start
            client.load(bundle_id, threads=1)
            loaded_rss = rss_kib(agent.proc.pid)
        size = bundle_bytes(bundle)
        return {
            "bytes": size,
            "transfer_MBps": size / (marks["sent"] - start) / 1e6,
            "total_MBps": size / total / 1e6,
            "idle_rss_mib": idle_rss / 1024,
            "hello_rss_mib": after_hello / 1024,
            "tflite_loaded_rss_mib": loaded_rss / 1024,
        }
    finally:
        stop(agent.proc)


def import_times() -> dict[str, float]:
    def wall(code: str) -> float:
        runs = []
        for _ in range(5):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            runs.append(float(out.stdout))
        return statistics.median(runs)

    timer = "import time; t = time.perf_counter(); {}; print(time.perf_counter() - t)"
    return {
        "numpy_s": wall(timer.format("import numpy")),
        "agent_s": wall(timer.format("import edgekit.device_agents.agent")),
        "client_s": wall(timer.format("import edgekit.device_agents.client")),
    }


def bare_rss() -> float:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import numpy, sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    time.sleep(1.0)  # let the interpreter finish importing (a measurement delay, not synchronisation)
    rss = rss_kib(proc.pid) / 1024
    proc.communicate(b"")
    return rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="256 kB serial uploads")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--only", choices=["serial", "tcp"], help="run one part")
    parser.add_argument("--bauds", default="921600,115200")
    args = parser.parse_args()
    serial_size = (256 if args.quick else 1024) * 1024
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        small = make_bundle(work, "serial", serial_size)
        big = make_bundle(work, "tcp", 50 * 1024 * 1024)
        print(f"serial bundle {bundle_bytes(small)} bytes, tcp bundle {bundle_bytes(big)} bytes")
        for baud in [int(b) for b in args.bauds.split(",")] if args.only != "tcp" else []:
            r = serial_run(baud, small, work, args.samples)
            print(
                f"serial {baud:>6} baud: upload {r['bytes']} B in {r['upload_s']:.1f} s = "
                f"{r['goodput_fraction']:.3f} of the line rate; INFER overhead beyond compute "
                f"{r['infer_overhead_ms']:.1f} ms/sample (1 per call), {r['infer_overhead_batch32_ms']:.2f} ms/sample "
                f"(32 per call); the sample's own bytes need {r['sample_wire_ms']:.2f} ms"
            )
        if args.only == "serial":
            return
        peer = raw_tcp_copy(big, work)
        r = tcp_run(big, work)
        print(
            f"tcp loopback: {r['bytes'] / 1e6:.1f} MB bundle: chunks at {r['transfer_MBps']:.0f} MB/s, "
            f"whole put_bundle (check, chunks, sha256 check, commit) {r['total_MBps']:.0f} MB/s; "
            f"plain socket copy with sha256 {peer:.0f} MB/s (put_bundle/peer {r['total_MBps'] / peer:.2f})"
        )
        bare = bare_rss()
        print(
            f"agent RSS: {r['idle_rss_mib']:.1f} MiB idle, {r['hello_rss_mib']:.1f} MiB after HELLO, "
            f"{r['tflite_loaded_rss_mib']:.1f} MiB with a TFLite model loaded; bare python+numpy {bare:.1f} MiB"
        )
        t = import_times()
        print(
            f"import: edgekit.device_agents.agent {t['agent_s'] * 1e3:.0f} ms, client {t['client_s'] * 1e3:.0f} ms, "
            f"numpy alone {t['numpy_s'] * 1e3:.0f} ms (fresh interpreter, median of 5)"
        )


if __name__ == "__main__":
    main()
