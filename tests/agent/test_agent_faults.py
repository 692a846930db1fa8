"""Uploads through a fault-injecting relay: bit flips, dropped and duplicated bytes, delays, a link cut
mid-upload. They complete with the right sha256 (the agent verifies it and the bundle), resume after
a reconnect, or fail with a clear error; bounded timeouts throughout."""

from __future__ import annotations

import json
from pathlib import Path

import agent_models as models
import numpy as np
import pytest
from agent_procs import AgentProcess
from agent_relay import Faults, ReplyDropRelay, TcpRelay
from edgekit.device_agents.client import connect, pack_bundle
from edgekit.device_agents.errors import LinkError, LinkTimeout

SIZE = 192 * 1024


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("big")
    return models.tflite_bundle(root / "noisy", extra_bytes=SIZE, seed=3)


def bundle_ids(agent: AgentProcess) -> set[str]:
    with connect(agent.url()) as client:
        return {b["bundle_id"] for b in client.status()["bundles"]}


def delete_all(agent: AgentProcess) -> None:
    with connect(agent.url()) as client:
        for b in client.status()["bundles"]:
            client.delete(b["bundle_id"])


def check_loaded_model_works(client) -> None:  # type: ignore[no-untyped-def]
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    out, _ = client.infer({"a": a, "b": a})
    np.testing.assert_array_equal(out["prod"], a * a)


def test_upload_survives_bit_flips_drops_duplicates_and_delays(
    tcp_agent: AgentProcess, big_bundle: Path
) -> None:
    delete_all(tcp_agent)
    # about 8 bit flips, 1 dropped and 1 duplicated byte expected each way over the ~200 kB upload
    faults = Faults(ber=5e-6, drop=5e-6, dup=5e-6, delay=0.0005, seed=11)
    with TcpRelay(tcp_agent.port, faults) as relay:
        with connect(relay.url + "?chunk=8192&ack_timeout=0.2&retries=20", timeout=20) as client:
            bundle_id = client.put_bundle(big_bundle)
            client.load(bundle_id)  # the agent verified sha256 of the upload and of every file
            check_loaded_model_works(client)
            recoveries = client.recoveries
        stats = relay.stats
    assert stats.flips + stats.drops + stats.dups > 0, "the relay injected no faults"
    # a corrupted chunk is recovered either by sending it again (no ack in time) or, when later chunks of the
    # window arrived first, by continuing from the agent's offset (upload_gap): which one depends on timing
    assert recoveries["retransmissions"] + recoveries["gap_resumes"] > 0, (stats, recoveries)
    assert bundle_id in bundle_ids(tcp_agent)


def test_hopeless_link_fails_clearly_and_stores_nothing(tcp_agent: AgentProcess, big_bundle: Path) -> None:
    delete_all(tcp_agent)
    relay = TcpRelay(tcp_agent.port, Faults(seed=5), down_faults=Faults(ber=0.05, seed=6))
    with relay, pytest.raises(LinkTimeout, match="no answer to HELLO"):
        connect(relay.url + "?ack_timeout=0.1&retries=3", timeout=1.0)
    # a link that turns bad mid-upload (bit error rate 1e-2 after the first 40 kB each way): the
    # upload stops, the reconnects fail too, and the error says where it stopped
    bad = Faults(ber=1e-2, after=40_000, seed=7)
    with TcpRelay(tcp_agent.port, bad) as relay:
        client = connect(relay.url + "?chunk=8192&ack_timeout=0.1&retries=3", timeout=2)
        with pytest.raises(LinkTimeout, match=r"stopped at \d+ of \d+ bytes \(2 reconnects\).*run it again"):
            client.put_bundle(big_bundle, reconnects=2)
        client.link.close()
    assert not any(b.startswith("noisy") for b in bundle_ids(tcp_agent))


def test_cut_link_mid_upload_resumes_after_reconnect(
    tcp_agent: AgentProcess, big_bundle: Path, tmp_path: Path
) -> None:
    delete_all(tcp_agent)
    archive = pack_bundle(big_bundle, tmp_path / "noisy.tar.gz")
    size = archive.stat().st_size
    offsets: list[int] = []
    with TcpRelay(tcp_agent.port, Faults(cut_after=size // 2)) as relay:
        with connect(relay.url + "?chunk=16384&ack_timeout=0.5") as client:
            bundle_id = client.put_bundle(archive, progress=lambda done, total: offsets.append(done))
            client.load(bundle_id)
            check_loaded_model_works(client)
            assert client.recoveries["reconnects"] == 1
        assert relay.stats.cuts == 1 and relay.stats.connections == 2
        assert relay.stats.up < size * 1.3  # resumed, not restarted
    restart = [b for a, b in zip(offsets, offsets[1:], strict=False) if b <= a]
    assert restart and 0 < restart[0] < size  # progress went back only to the last confirmed offset


def test_interrupted_upload_resumes_from_a_new_connection(tcp_agent: AgentProcess, big_bundle: Path) -> None:
    delete_all(tcp_agent)
    files = json.loads((big_bundle / "manifest.json").read_text())["model_files"]
    model, extra = sorted(files, key=lambda f: f["size"])
    total = model["size"] + extra["size"]
    with TcpRelay(tcp_agent.port, Faults(cut_after=total // 3)) as relay:
        client = connect(relay.url + "?chunk=16384&ack_timeout=0.5")
        with pytest.raises(LinkError, match="run it again to resume"):
            client.put_bundle(big_bundle, reconnects=0)
        client.link.close()
    with connect(tcp_agent.url()) as client:
        partial = client.status()["uploads"]
        assert [(u["upload"], u["size"]) for u in partial] == [(extra["sha256"], extra["size"])]
        assert 0 < partial[0]["received"] < extra["size"]
        offsets: list[int] = []
        bundle_id = client.put_bundle(big_bundle, progress=lambda done, total: offsets.append(done))
        assert offsets[0] == model["size"] + partial[0]["received"]  # the model file was already there
        client.load(bundle_id)
        check_loaded_model_works(client)
        assert client.status()["uploads"] == []


def test_lost_reply_is_fetched_from_the_cache_not_executed_twice(tcp_agent: AgentProcess, bundles) -> None:  # type: ignore[no-untyped-def]
    from edgekit.device_agents.protocol import MsgType

    relay = ReplyDropRelay(tcp_agent.port, MsgType.INFER)
    with relay, connect(relay.url + "?ack_timeout=0.2") as client:
        client.load(client.put_bundle(bundles["tflite"]))
        before = client.status()["counters"]["requests"]
        a = np.arange(4, dtype=np.float32).reshape(1, 4)
        out, _ = client.infer({"a": a, "b": a})
        np.testing.assert_array_equal(out["sum"], a + a)
        after = client.status()["counters"]["requests"]
        assert len(relay.dropped) == 1  # the INFER's first RESULT never reached the client
        assert client.requester.retransmissions >= 1  # it polled ...
        assert after - before == 2  # ... and the agent ran INFER once (plus this STATUS)
