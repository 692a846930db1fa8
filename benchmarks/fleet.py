"""A fleet of local TCP agents: MNIST-8 arm-cpu on the 10,000 MNIST test images over 1, 2 and 4 agents, and with
one of 4 agents killed (SIGKILL) halfway through.

    python benchmarks/fleet.py [--shared ../shared] [--samples 10000] [--shard 64] [--repeat 3]

The bundle is packaged once (`edgekit deploy ... -o DIR`, a child process); the fp32 reference is computed once on
the host. Each agent is its own process with its own --workdir. For each fleet size the evaluation stage
(`edgekit.fleet.evaluate_bundle`: upload, load, the sharded INFER requests, merging in sample order) is timed
(the best of --repeat runs), and its outputs' sha256 (every output, in sample order) is compared with the 1-agent
run's. Printed per run: the stage's wall time and its ratio to one agent (goal: 4 agents <= 0.35x), the samples
each agent ran, the host's own work in the calling thread (reading and converting inputs, merging and comparing
outputs), the agents' on-device compute, and the mean INFER round trip per shard.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "agent"))

from agent_procs import start_tcp_agent, stop  # noqa: E402
from edgekit.core.data import input_specs, open_dataset  # noqa: E402
from edgekit.core.model import load_model  # noqa: E402
from edgekit.device_eval import host_reference  # noqa: E402
from edgekit.fleet import Device, FleetOptions, evaluate_bundle  # noqa: E402
from shared_data import default_shared, mnist_npz  # noqa: E402


def package(model: Path, data: Path, out: Path) -> Path:
    cmd = [sys.executable, "-m", "edgekit.cli.main", "deploy", str(model), "--target", "arm-cpu", "--calib",
           str(data), "--calib-samples", "100", "-o", str(out), "-q"]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise SystemExit(f"packaging failed:\n{run.stderr}")
    return out / "arm-cpu"


def cpu_seconds(agents: list) -> float | None:
    """CPU time (user + system) of this process (every thread) and of the agent processes so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime
    for agent in agents:
        try:
            fields = Path(f"/proc/{agent.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def killing(proc: subprocess.Popen, after: int):
    """A progress callback that SIGKILLs ``proc`` once ``after`` shards are merged."""

    def track(items, description, total):
        for i, item in enumerate(items, 1):
            yield item
            if i == after:
                proc.send_signal(signal.SIGKILL)

    return track


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--shard", type=int, default=64, help="samples per shard (one INFER request)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="inference threads on each agent")
    args = parser.parse_args()
    model = args.shared / "models" / "mnist-8.onnx"
    options = FleetOptions(shard_samples=args.shard, threads=args.threads)
    rows = []
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="edgekit-fleet-") as tmp:
        work = Path(tmp)
        data = mnist_npz(args.shared, args.samples, work)
        bundle = package(model, data, work / "bundles")
        fp32 = load_model(model)
        dataset = open_dataset(data, input_specs(fp32))
        start = time.perf_counter()
        reference = host_reference(fp32, dataset, None)
        print(f"fp32 reference on the host: {reference.count} samples in {time.perf_counter() - start:.1f} s")
        agents = []
        try:
            for i in range(4):
                (work / f"agent{i}").mkdir()
                agents.append(start_tcp_agent(work / f"agent{i}"))
            devices = [Device(f"agent{i}", a.url()) for i, a in enumerate(agents)]
            runs = [(1, None), (2, None), (4, None), (4, "kill")]
            for count, mode in runs:
                best = None
                for _ in range(1 if mode else args.repeat):
                    track = killing(agents[3].proc, -(-args.samples // args.shard) // 2) if mode else None
                    cpu = cpu_seconds(agents[:count])
                    entry = evaluate_bundle(bundle, devices[:count], reference, dataset, options,
                                            **({"track": track} if track else {}))  # fmt: skip
                    after = cpu_seconds(agents[:count])
                    entry["cpu_s"] = after - cpu if after is not None and cpu is not None else None
                    if best is None or entry["transfer"]["infer_wall_s"] < best["transfer"]["infer_wall_s"]:
                        best = entry
                rows.append((count, mode, best))
        finally:
            for a in agents:
                stop(a.proc)
            reference.close()

    one = rows[0][2]
    print(
        f"\nMNIST-8 arm-cpu int8, {args.samples} samples, shards of {args.shard}, local TCP agents on this host"
    )
    print(f"load average before the runs: {load[0]:.1f} on {os.cpu_count()} cores; agents run {args.threads} "
          "inference thread(s) each")  # fmt: skip
    print(f"{'agents':<14}{'eval s':>8}{'x one':>7}{'host s':>8}{'compute s':>10}{'INFER ms':>10}{'cores':>7}"
          f"{'  samples per agent':<28}{'same outputs':>13}  dropped")  # fmt: skip
    for count, mode, e in rows:
        t = e["transfer"]
        working = [d for d in e["devices"] if d["shards"]]
        per_request = (
            1e3 * sum(d["infer_wall_s"] for d in working) / max(sum(d["shards"] for d in working), 1)
        )
        per_agent = "/".join(str(d["samples"]) for d in e["devices"])
        same = e["outputs_sha256"] == one["outputs_sha256"] and e["evaluation"] == one["evaluation"]
        dropped = ", ".join(f"{f['device']} after {f['after_samples']}" for f in e["failover"]) or "-"
        label = f"{count}" + (" (1 killed)" if mode else "")
        cores = f"{e['cpu_s'] / t['infer_wall_s']:.2f}" if e.get("cpu_s") is not None else "-"
        print(f"{label:<14}{t['infer_wall_s']:>8.2f}{t['infer_wall_s'] / one['transfer']['infer_wall_s']:>7.2f}"
              f"{t['host_s']:>8.2f}{t['compute_s']:>10.2f}{per_request:>10.2f}{cores:>7}  {per_agent:<26}"
              f"{'yes' if same else 'NO':>13}  {dropped}")  # fmt: skip
    print("eval s: wall time of the evaluation stage (upload, load, INFER, merge); host s: the calling thread's "
          "own work within it; compute s: on-device compute summed over the agents; INFER ms: mean round trip "
          "of one shard's request; cores: CPU seconds of this process and the agents during the stage per wall "
          f"second (the host has {os.cpu_count()} cores)")  # fmt: skip


if __name__ == "__main__":
    main()
