"""Fleets: the evaluation sharded over real local TCP agents (subprocesses, each with its own --workdir), merged in
sample order, with a device killed mid-run; fleet.toml parsing; `edgekit devices probe --devices`; every failure
one line and exit code 2."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest
from agent.agent_procs import start_tcp_agent, stop
from edgekit.core.data import input_specs, open_dataset
from edgekit.core.errors import DeviceError
from edgekit.core.model import load_model
from edgekit.device_eval import host_reference
from edgekit.fleet import Device, FleetOptions, evaluate_bundle, from_urls, load_fleet
from edgekit.report import render_markdown

#: small shards, so that every device gets several of the 360 digits samples
OPTIONS = FleetOptions(shard_samples=4)


def edgekit(*args, env=None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgekit.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)  # fmt: skip


def one_error_line(run: subprocess.CompletedProcess) -> str:
    lines = [line for line in run.stderr.splitlines() if line.strip() and not line.startswith("INFO:")]
    assert run.returncode == 2 and len(lines) == 1 and "Traceback" not in run.stderr, run.stderr
    return lines[0]


@pytest.fixture(scope="module")
def setup(digits, tmp_path_factory):
    """The digits model packaged for arm-cpu, its fp32 reference, and the 1-agent run every fleet must equal."""
    out = tmp_path_factory.mktemp("fleet")
    run = edgekit("deploy", digits.model, "-t", "arm-cpu", "--calib", digits.calib, "-o", out, "-q")
    assert run.returncode == 0, run.stderr
    fp32 = load_model(digits.model)
    dataset = open_dataset(digits.val, input_specs(fp32))
    reference = host_reference(fp32, dataset, None)
    agent = start_tcp_agent(tmp_path_factory.mktemp("agent-solo"))
    try:
        solo = evaluate_bundle(out / "arm-cpu", [Device("solo", agent.url())], reference, dataset, OPTIONS)
    finally:
        stop(agent.proc)
    yield out / "arm-cpu", reference, dataset, solo
    reference.close()


@pytest.fixture
def agents(tmp_path):
    procs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        procs.append(start_tcp_agent(tmp_path / name))
    yield procs
    for p in procs:
        stop(p.proc)


def wait_serving(agent) -> None:
    """Until ``agent`` serves shards, not still connecting (a failure there makes a device "unavailable", not
    dropped mid-run): its bundle stored, then its load (a few ms) answered."""
    deadline = time.monotonic() + 60
    while not any((agent.workdir / "bundles").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)


def at_shard(n: int, action):
    """A progress callback that calls ``action()`` once ``n`` shards are merged (shards are made as results are
    merged, a window per device: while it runs, the devices only finish the shards already made)."""

    def track(items, description, total):
        for i, item in enumerate(items, 1):
            yield item
            if i == n:
                action()

    return track


def killer(agent, after: int, sig: int = signal.SIGKILL):
    """A progress callback that sends ``sig`` to ``agent`` once ``after`` shards are merged and it serves."""
    return at_shard(after, lambda: (wait_serving(agent), agent.proc.send_signal(sig)))


def waiting_for(agent):
    """A progress callback that, once the first shard is merged, waits until ``agent`` serves, so the other device
    cannot run every shard before this one is set up (under load it did: 360 samples to one agent, 0 to the
    other)."""
    return at_shard(1, lambda: wait_serving(agent))


def test_two_agents_share_the_shards_and_equal_one_agent(setup, agents):
    bundle, reference, dataset, solo = setup
    devices = [Device("a", agents[0].url()), Device("b", agents[1].url())]
    entry = evaluate_bundle(bundle, devices, reference, dataset, OPTIONS, track=waiting_for(agents[1]))
    assert entry["outputs_sha256"] == solo["outputs_sha256"]  # every output, in sample order
    assert entry["evaluation"] == solo["evaluation"]
    assert solo["evaluation"]["samples"] == 360 and solo["devices"][0]["samples"] == 360
    ran = {d["name"]: d["samples"] for d in entry["devices"]}
    assert sum(ran.values()) == 360 and all(n > 0 for n in ran.values()), ran
    assert all(d["status"] == "ok" and d["latency_ms"]["samples"] == d["samples"] for d in entry["devices"])
    assert entry["latency_ms"]["samples"] == 360 and entry["failover"] == []


def test_a_device_killed_halfway_moves_its_shard_to_the_others(setup, agents):
    bundle, reference, dataset, solo = setup
    devices = [Device("a", agents[0].url()), Device("b", agents[1].url())]
    shards = 360 // OPTIONS.shard_samples
    said: list[str] = []
    entry = evaluate_bundle(bundle, devices, reference, dataset, OPTIONS, track=killer(agents[1], shards // 3),
                            say=said.append)  # fmt: skip
    assert agents[1].proc.poll() == -signal.SIGKILL
    assert entry["outputs_sha256"] == solo["outputs_sha256"] and entry["evaluation"] == solo["evaluation"]
    b = next(d for d in entry["devices"] if d["name"] == "b")
    a = next(d for d in entry["devices"] if d["name"] == "a")
    assert b["status"] == "dropped" and a["status"] == "ok" and a["samples"] + b["samples"] == 360
    (event,) = entry["failover"]
    assert event["device"] == "b" and event["after_samples"] == b["samples"]
    first, last = event["moved"]
    assert last - first + 1 == OPTIONS.shard_samples and first >= b["samples"] - OPTIONS.shard_samples
    assert any("device b dropped" in line for line in said)
    md = render_markdown({"format_version": "1.0", "targets": [{**entry, "target": "arm-cpu"}]})
    assert "| b |" in md and f"Device `b` dropped after {b['samples']} samples" in md
    assert f"its unfinished samples {first}-{last} were moved" in md


def test_a_device_that_stops_answering_is_dropped_not_waited_for(setup, agents):
    """SIGSTOP: the agent's socket stays open but nothing answers; the link's own timeouts (short ones here,
    from the URL) drop the device and its shard moves on."""
    bundle, reference, dataset, solo = setup
    devices = [Device("a", agents[0].url()), Device("b", agents[1].url(ack_timeout=0.2, retries=2))]

    try:
        entry = evaluate_bundle(
            bundle, devices, reference, dataset, OPTIONS, track=killer(agents[1], 10, signal.SIGSTOP)
        )
    finally:
        agents[1].proc.send_signal(signal.SIGCONT)
    assert entry["outputs_sha256"] == solo["outputs_sha256"]
    (event,) = entry["failover"]
    assert event["device"] == "b" and "no answer" in event["reason"], event


def test_no_device_left_is_one_error(setup, agents):
    bundle, reference, dataset, _ = setup
    devices = [Device("a", agents[0].url()), Device("b", agents[1].url())]

    def kill_both(items, description, total):
        for i, item in enumerate(items, 1):
            yield item
            if i == 3:
                for agent in agents:
                    agent.proc.send_signal(signal.SIGKILL)

    with pytest.raises(DeviceError, match=r"^no device left for arm-cpu \(a: .*; b: .*\)$"):
        evaluate_bundle(bundle, devices, reference, dataset, OPTIONS, track=kill_both)


def test_devices_limited_to_other_targets_are_not_used(setup, agents):
    bundle, reference, dataset, solo = setup
    devices = [Device("a", agents[0].url(), targets=("intel-vpu",)), Device("b", agents[1].url())]
    entry = evaluate_bundle(bundle, devices, reference, dataset, OPTIONS)
    assert [d["name"] for d in entry["devices"]] == ["b"] and entry["outputs_sha256"] == solo[
        "outputs_sha256"
    ]
    with pytest.raises(DeviceError, match="no device may run arm-cpu"):
        evaluate_bundle(bundle, devices[:1], reference, dataset, OPTIONS)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_deploy_with_every_device_dead_is_one_line(digits, tmp_path):
    urls = [f"tcp://127.0.0.1:{closed_port()}" for _ in range(2)]
    run = edgekit("deploy", digits.model, "-t", "arm-cpu", "--calib", digits.calib, "--eval", digits.val,
                  "--device", urls[0], "--device", urls[1], "-o", tmp_path / "out", "-q")  # fmt: skip
    line = one_error_line(run)
    assert "no device answers" in line and urls[0] in line and urls[1] in line
    assert not (tmp_path / "out").exists()


def test_deploy_over_a_fleet_file_reports_each_device(digits, agents, tmp_path):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[[device]]\nname = "a"\nurl = "{agents[0].url()}"\n\n'
                     f'[[device]]\nname = "b"\nurl = "{agents[1].url()}"\ntags = ["lab"]\n')  # fmt: skip
    run = edgekit("deploy", digits.model, "-t", "arm-cpu", "--calib", digits.calib, "--eval", digits.val,
                  "--devices", fleet, "--report", tmp_path / "r" / "report.html", "-o", tmp_path / "out", "-q")  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert [d["name"] for d in report["devices"]] == ["a", "b"] and report["devices"][1]["tags"] == ["lab"]
    assert all(d["hello"].get("machine") for d in report["devices"])
    entry = report["targets"][0]
    assert sum(d["samples"] for d in entry["devices"]) == 360 and entry["evaluation"]["samples"] == 360
    md = (tmp_path / "r" / "report.md").read_text()
    assert "devices `a`" in md and "| device | samples | shards | p50 ms | p90 ms | status |" in md
    html = (tmp_path / "r" / "report.html").read_text()
    assert 'class="devices"' in html and html.count("data:image/png;base64,") == 3


def test_the_library_takes_several_devices(digits, agents, tmp_path):
    import edgekit

    result = edgekit.deploy(digits.model, "arm-cpu", calib=digits.calib, eval=digits.val,
                            devices=[agents[0].url(), agents[1].url()], report=tmp_path / "report.html")  # fmt: skip
    (evaluation,) = result.evaluations
    assert [d["name"] for d in result.report["devices"]] == [agents[0].url(), agents[1].url()]
    assert sum(d["samples"] for d in evaluation.entry["devices"]) == 360 and evaluation.top1 is not None


BAD_FLEETS = [
    ("[[device]\nname = 'a'", "is not valid TOML"),
    ("", "no devices"),
    ("[[device]]\nname = 'a'\n", "'url' must be a non-empty string"),
    ("[[device]]\nname = 'a'\nurl = 'tcp://h:1'\nport = 3\n", "unknown key(s) port"),
    ("[[device]]\nname = 'a'\nurl = 'http://h'\n", "unknown device URL 'http://h'"),
    ("[[device]]\nname = 'a'\nurl = 'tcp://h:1'\ntargets = ['gpu']\n", "unknown target(s) gpu"),
    ("[[device]]\nname = 'a'\nurl = 'local'\n[[device]]\nname = 'a'\nurl = 'local'\n", "the name is used twice"),
    ("[[device]]\nname = 'a'\nurl = 'local'\ntags = 'x'\n", "'tags' must be a list of strings"),
    ("[[device]]\nname = 'a'\nurl = 'local'\ntoken_env = 'EDGEKIT_TEST_NO_SUCH_TOKEN'\n",
     "environment variable EDGEKIT_TEST_NO_SUCH_TOKEN (its token_env) is not set"),
]  # fmt: skip


@pytest.mark.parametrize("text, message", BAD_FLEETS)
def test_bad_fleet_files_are_one_line(tmp_path, text, message):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(text)
    with pytest.raises(DeviceError, match="fleet.toml") as info:
        load_fleet(fleet)
    assert message in str(info.value) and "\n" not in str(info.value)
    run = edgekit("devices", "probe", "--devices", fleet, timeout=60)
    line = one_error_line(run)
    assert message in line and str(fleet) in line


def test_a_bad_fleet_file_stops_deploy_before_anything_is_written(digits, tmp_path):
    fleet = tmp_path / "fleet.toml"
    fleet.write_text("[[device]]\nname = 'a'\nurl = 'local'\ntoken_env = 'EDGEKIT_TEST_NO_SUCH_TOKEN'\n")
    run = edgekit("deploy", digits.model, "-t", "arm-cpu", "--calib", digits.calib, "--eval", digits.val,
                  "--devices", fleet, "-o", tmp_path / "out", "-q", timeout=120)  # fmt: skip
    assert "EDGEKIT_TEST_NO_SUCH_TOKEN" in one_error_line(run) and not (tmp_path / "out").exists()
    run = edgekit("devices", "probe", "--devices", tmp_path / "missing.toml", timeout=60)
    assert "fleet file not found" in one_error_line(run)


def test_probe_prints_one_table_for_the_fleet(tmp_path):
    import os

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plain = start_tcp_agent(tmp_path / "a")
    secured = start_tcp_agent(tmp_path / "b", "--token", "s3cret")
    try:
        fleet = tmp_path / "fleet.toml"
        fleet.write_text(f'[[device]]\nname = "plain"\nurl = "{plain.url()}"\ntargets = ["arm-cpu"]\n\n'
                         f'[[device]]\nname = "secured"\nurl = "{secured.url()}"\ntoken_env = "EDGEKIT_TEST_TOKEN"\n')  # fmt: skip
        env = {**os.environ, "EDGEKIT_TEST_TOKEN": "s3cret", "COLUMNS": "200"}
        run = edgekit("devices", "probe", "--devices", fleet, "--json", env=env, timeout=60)
        assert run.returncode == 0, run.stderr
        rows = json.loads(run.stdout)
        assert [r["name"] for r in rows] == ["plain", "secured"] and all("error" not in r for r in rows)
        assert rows[0]["targets"] == ["arm-cpu"] and rows[1]["info"]["machine"]
        run = edgekit("devices", "probe", "--devices", fleet, env=env, timeout=60)
        assert run.returncode == 0 and "plain" in run.stdout and "secured" in run.stdout, run.stderr
        env["EDGEKIT_TEST_TOKEN"] = "wrong"
        run = edgekit("devices", "probe", "--devices", fleet, env=env, timeout=60)
        assert run.returncode == 1 and "secured" in run.stdout and "error" in run.stdout, run.stdout
    finally:
        stop(plain.proc)
        stop(secured.proc)


def test_repeated_device_urls_get_distinct_names():
    devices = from_urls(["local", "local", "tcp://h:1"], token="t")
    assert [d.name for d in devices] == ["local", "local#2", "tcp://h:1"] and all(
        d.token == "t" for d in devices
    )
    with pytest.raises(DeviceError, match="unknown device URL"):
        from_urls(["ftp://x"])
