"""Peak memory of a real `edgekit deploy` with 100 and with 10,000 evaluation samples (MNIST-8, arm-cpu).

    python benchmarks/deploy_memory.py [--shared ../shared] [--samples 100,10000]

Each deploy is a child process (`python -m edgekit.cli.main deploy ...` run through a wrapper that records its own
peak RSS, `resource.getrusage(RUSAGE_SELF).ru_maxrss`, when it exits). The device is a local TCP agent, a separate
process with its own --workdir, so the agent's memory is not counted. Both runs read the same 10,000-sample
file and differ only in --max-samples. Prints both peaks and the difference (goal: at most 20 MB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "agent"))

from agent_procs import start_tcp_agent, stop  # noqa: E402
from shared_data import default_shared, mnist_npz  # noqa: E402

#: Runs the CLI in this process and writes its own peak RSS (KiB on Linux) to the file named by argv[1].
WRAPPER = """
import atexit, resource, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
from edgekit.cli.main import main
sys.argv[0] = "edgekit"
main()
"""


def deploy_peak(model: Path, data: Path, samples: int, url: str, work: Path) -> tuple[float, float, dict]:
    """Peak RSS (MB) and wall time of one deploy child, and its report."""
    out = work / f"run-{samples}"
    peak_file = work / f"peak-{samples}.txt"
    cmd = [sys.executable, "-c", WRAPPER, str(peak_file), "deploy", str(model), "--target", "arm-cpu",
           "--calib", str(data), "--calib-samples", "100", "--eval", str(data), "--max-samples", str(samples),
           "--device", url, "--report", str(out / "report.html"), "-o", str(out / "bundles"), "-q"]  # fmt: skip
    start = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"deploy with {samples} samples failed:\n{run.stderr}")
    report = json.loads((out / "report.json").read_text())
    return int(peak_file.read_text()) / 1024, wall, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--samples", default="100,10000")
    args = parser.parse_args()
    counts = [int(s) for s in args.samples.split(",")]
    model = args.shared / "models" / "mnist-8.onnx"
    with tempfile.TemporaryDirectory(prefix="edgekit-memory-") as tmp:
        work = Path(tmp)
        data = mnist_npz(args.shared, max(counts), work)
        (work / "agent").mkdir()
        agent = start_tcp_agent(work / "agent")
        try:
            rows = []
            for n in counts:
                peak, wall, report = deploy_peak(model, data, n, agent.url(), work)
                entry = report["targets"][0]
                rows.append((n, peak, wall, entry["evaluation"]["accuracy"]["candidate_top1"],
                             len(entry.get("latency_samples_ms") or [])))  # fmt: skip
        finally:
            stop(agent.proc)
    print("\nMNIST-8 arm-cpu int8, local TCP agent: peak RSS of the `edgekit deploy` process")
    print(f"{'samples':>8}{'peak MB':>10}{'wall s':>9}{'device top-1 %':>16}{'latency kept':>14}")
    for n, peak, wall, top1, kept in rows:
        print(f"{n:>8}{peak:>10.1f}{wall:>9.1f}{top1:>16.2f}{kept:>14}")
    if len(rows) >= 2:
        diff = rows[-1][1] - rows[0][1]
        print(f"difference {rows[-1][0]} vs {rows[0][0]} samples: {diff:+.1f} MB (goal: at most 20 MB)")


if __name__ == "__main__":
    main()
