"""Opt-in: the agent zipapp on an emulated arm64 (aarch64) Debian userland, deployed to from the host.

Build the userland once (root, about 10-20 minutes), then run these tests (root, for chroot):

    sh tests/arm64/make_rootfs.sh /var/tmp/edgekit-arm64
    EDGEKIT_ARM64_ROOTFS=/var/tmp/edgekit-arm64 python -m pytest tests/arm64 -v

The agent runs as ``chroot ROOTFS python3 edgekit-agent.pyz --listen 127.0.0.1:0`` inside a private
mount namespace (``unshare --mount``), every arm64 instruction emulated by qemu-user through binfmt_misc.
LiteRT's XNNPACK crashes (SIGSEGV) under qemu-user when the host's /sys is visible and OpenVINO crashes
when it is not (hwloc finds no CPU topology), so the LiteRT case runs without /sys and the OpenVINO one
with /sys bind-mounted; both on an emulated Cortex-A72 (``QEMU_CPU``). The host deploys the
digits example with ``edgekit deploy --device tcp://127.0.0.1:PORT --token ... --eval`` and then runs
the same bundle on the host's own agent: the outputs must match.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from edgekit.device_agents.bundle import Requirement, read_bundle, write_bundle
from edgekit.device_agents.client import connect
from edgekit.device_agents.errors import RemoteError
from edgekit.device_eval import to_device

sys.path.insert(0, str(Path(__file__).parents[1] / "agent"))
from agent_procs import AgentProcess, read_line, stop  # noqa: E402

ROOTFS_ENV = "EDGEKIT_ARM64_ROOTFS"
TOKEN = "arm64-test-token"
SAMPLES = 32
#: Inside the userland: where the zipapp goes and where the agent keeps its bundles.
PYZ_IN_ROOTFS = "tmp/edgekit-agent.pyz"
WORK_IN_ROOTFS = "tmp/edgekit-agent-work"
#: The emulated CPU: a Cortex-A72 (Raspberry Pi 4 class). qemu's default ("max") has extensions that
#: make OpenVINO's oneDNN JIT die with SIGILL under emulation.
QEMU_CPU = "cortex-a72"

pytestmark = pytest.mark.skipif(
    not os.environ.get(ROOTFS_ENV),
    reason=f"opt-in (slow): build a userland with tests/arm64/make_rootfs.sh DIR and set {ROOTFS_ENV}=DIR",
)


def edgekit(*args: object, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "edgekit.cli.main", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def rootfs() -> Path:
    root = Path(os.environ[ROOTFS_ENV])
    if os.geteuid() != 0:
        pytest.skip("chroot into the arm64 userland needs root")
    for tool in ("unshare", "chroot", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    binfmt = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    if not binfmt.is_file() or "enabled" not in binfmt.read_text():
        pytest.skip("qemu-aarch64 is not registered with binfmt_misc (run tests/arm64/make_rootfs.sh)")
    if not (root / "usr/bin/python3").exists():
        pytest.skip(f"{root} has no usr/bin/python3: build it with tests/arm64/make_rootfs.sh {root}")
    probe = subprocess.run(
        ["chroot", str(root), "/usr/bin/python3", "-c", "import platform; print(platform.machine())"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.stdout.strip() == "aarch64", probe.stderr
    return root


@pytest.fixture(scope="module")
def pyz(rootfs: Path) -> Path:
    out = rootfs / PYZ_IN_ROOTFS
    run = edgekit("agent", "build", "-o", out)
    assert run.returncode == 0, run.stderr
    return out


def start_arm64_agent(rootfs: Path, with_sys: bool) -> AgentProcess:
    """The zipapp under chroot in a private mount namespace (its mounts vanish with the process)."""
    mounts = 'mount -t proc proc "$1/proc"'
    if with_sys:
        mounts += ' && mount --rbind /sys "$1/sys"'
    script = (
        f'{mounts} && rm -rf "$1/{WORK_IN_ROOTFS}" && exec chroot "$1" /usr/bin/env -i PATH=/usr/bin:/bin '
        f"QEMU_CPU={QEMU_CPU} /usr/bin/python3 /{PYZ_IN_ROOTFS} --listen 127.0.0.1:0 "
        f"--workdir /{WORK_IN_ROOTFS} --token {TOKEN}"
    )
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(rootfs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "QEMU_CPU": QEMU_CPU},
    )
    line = read_line(proc, 600)  # python3 + numpy start slowly under emulation
    assert "listening on" in line, line
    port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
    return AgentProcess(proc, port, rootfs / WORK_IN_ROOTFS)


def _outputs(client, bundle: Path, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict]:  # type: ignore[no-untyped-def,type-arg]
    info = client.load(client.put_bundle(bundle))
    out, _ = client.infer(feeds)
    return out, info


@pytest.mark.parametrize(
    ("target", "with_sys", "runtime"),
    [("arm-cpu", False, "ai_edge_litert"), ("intel-vpu", True, "openvino")],
)
def test_deploy_to_the_arm64_agent_matches_the_host(
    rootfs: Path, pyz: Path, digits, tmp_path: Path, target: str, with_sys: bool, runtime: str
) -> None:  # type: ignore[no-untyped-def]
    agent = start_arm64_agent(rootfs, with_sys)
    try:
        with connect(agent.url(), timeout=120, token=TOKEN) as client:
            assert client.info["machine"] == "aarch64"
            assert client.info["runtimes"][runtime] is not None, client.info["runtimes"]
        run = edgekit(
            "deploy", digits.model, "--target", target, "--calib", digits.calib, "--eval", digits.val,
            "--max-samples", SAMPLES, "--device", agent.url(), "--token", TOKEN,
            "--report", tmp_path / "report.html", "-o", tmp_path / "out", "-q",
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        report = json.loads((tmp_path / "report.json").read_text())
        (entry,) = report["targets"]
        assert entry["load"]["runtime"] == runtime and report["samples"] == SAMPLES
        assert entry["evaluation"]["top1_agreement"] >= 90  # against fp32 on the host

        # the same bundle on the arm64 agent and on the host's own agent: the outputs match
        bundle = tmp_path / "out" / target
        with read_bundle(bundle) as loaded:
            spec = loaded.manifest.inputs[0]
        x = np.load(digits.val)["input"][:SAMPLES]
        feeds = {
            spec.name: np.stack([to_device(x[i : i + 1], spec) for i in range(len(x))])
        }  # (batch, *spec)
        with connect(agent.url(), timeout=120, token=TOKEN) as client:
            arm, arm_info = _outputs(client, bundle, feeds)
        with connect("local", timeout=60) as client:
            host, host_info = _outputs(client, bundle, feeds)
        assert arm_info["runtime"] == host_info["runtime"] == runtime
        for name, expected in host.items():
            got = arm[name]
            assert got.dtype == expected.dtype and got.shape == expected.shape
            if np.issubdtype(expected.dtype, np.integer):  # int8 kernels may round one step apart
                assert np.abs(got.astype(np.int32) - expected.astype(np.int32)).max() <= 1
            else:
                np.testing.assert_allclose(
                    got, expected, rtol=1e-3, atol=1e-4 * float(np.abs(expected).max())
                )
            agree = np.mean(got.reshape(SAMPLES, -1).argmax(1) == expected.reshape(SAMPLES, -1).argmax(1))
            assert agree >= 0.97, agree

        # the bundle asks for the oldest runtime that reads it, not the host's; a requirement of the
        # host's own line is refused by an older device runtime (make_rootfs.sh installs OpenVINO 2025.2)
        host_line = Requirement(
            arm_info["runtime"].replace("_", "-"), ".".join(host_info["version"].split(".")[:2])
        )
        if not host_line.met_by(arm_info["version"]):
            with read_bundle(bundle) as loaded:
                manifest = dataclasses.replace(loaded.manifest, requirements=(host_line,))
                files = {f.path: loaded.path(f) for f in manifest.model_files}
                roles = {f.path: f.role for f in manifest.model_files}
                strict = write_bundle(tmp_path / "strict", manifest, files, roles=roles)
            with connect(agent.url(), timeout=120, token=TOKEN) as client, pytest.raises(RemoteError) as err:
                client.load(client.put_bundle(strict))
            assert err.value.remote_code == "runtime_too_old" and arm_info["version"] in err.value.message
    finally:
        stop(agent.proc)
