"""Token/HMAC authentication, version checks, malformed input, path traversal, quota, tampering."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import agent_models as models
import numpy as np
import pytest
from agent_procs import AgentProcess, start_tcp_agent, stop
from edgekit.device_agents.bundle import BundleError
from edgekit.device_agents.client import connect
from edgekit.device_agents.errors import AuthError, LinkError, ProtocolError, RemoteError, VersionMismatch
from edgekit.device_agents.link import Requester, RetryPolicy, SocketLink
from edgekit.device_agents.protocol import MsgType, encode_frame, encode_message

FAST = RetryPolicy(ack_timeout=0.5, retries=2)


def raw(agent: AgentProcess) -> Requester:
    return Requester(SocketLink.connect("127.0.0.1", agent.port, 5), FAST)


def hello(req: Requester) -> dict:
    return req.call(MsgType.HELLO, {"protocol": 1}).header


def put_raw(req: Requester, data: bytes) -> str:
    """Upload one file by hand; returns its sha256."""
    sha = hashlib.sha256(data).hexdigest()
    req.call(MsgType.PUT_BEGIN, {"sha256": sha, "size": len(data)})
    req.call(MsgType.PUT_CHUNK, payload=encode_message({"upload": sha, "offset": 0}, [data]))
    req.call(MsgType.PUT_END, {"upload": sha})
    return sha


def manifest_of(bundle_dir: Path) -> dict:
    return json.loads((bundle_dir / "manifest.json").read_text())


def upload_raw(req: Requester, bundle_dir: Path, name: str) -> str:
    """Upload a bundle's files and commit its manifest by hand; returns the bundle id."""
    manifest = manifest_of(bundle_dir)
    for f in manifest["model_files"]:
        put_raw(req, (bundle_dir / f["path"]).read_bytes())
    return req.call(MsgType.COMMIT, {"manifest": manifest, "name": name}).header["bundle_id"]


@pytest.fixture(scope="module")
def token_agent(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    agent = start_tcp_agent(tmp_path_factory.mktemp("token-agent"), "--token", "s3cret")
    yield agent
    stop(agent.proc)


def test_token_auth(token_agent: AgentProcess, bundles) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(AuthError, match="needs a token"):
        connect(token_agent.url(ack_timeout=0.5))
    with pytest.raises(AuthError, match="wrong token"):
        connect(token_agent.url(token="nope", ack_timeout=0.5))
    with connect(token_agent.url(token="s3cret")) as client:
        assert client.info["protocol"] == 1
        bundle_id = client.put_bundle(bundles["tflite"])
        assert client.load(bundle_id)["runtime"] == "ai_edge_litert"


def test_unauthenticated_requests_are_refused_and_disconnected(token_agent: AgentProcess) -> None:
    req = raw(token_agent)
    with pytest.raises(AuthError, match="authenticate first"):
        req.call(MsgType.STATUS, {})
    with pytest.raises(LinkError):  # the agent hung up
        req.call(MsgType.STATUS, {})
    req.link.close()
    req = raw(token_agent)
    challenge = hello(req)
    assert challenge["auth_required"] and "info" not in challenge  # nothing about the device before auth
    with pytest.raises(AuthError, match="wrong token"):
        req.call(MsgType.AUTH, {"mac": "00" * 32, "nonce": "00"})
    with pytest.raises(LinkError):
        req.call(MsgType.STATUS, {})
    req.link.close()


def test_non_loopback_needs_a_token(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edgekit.device_agents", "--listen", "0.0.0.0:0", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "needs a token" in proc.stderr and "Traceback" not in proc.stderr


def test_version_mismatch(tcp_agent: AgentProcess) -> None:
    req = raw(tcp_agent)
    with pytest.raises(VersionMismatch, match="protocol version 2"):
        req.call(MsgType.HELLO, {"protocol": 2})
    req.link.write(encode_frame(MsgType.HELLO, 77, encode_message({"protocol": 9}), version=9))
    with pytest.raises(VersionMismatch, match="agent speaks protocol version 1"):
        req.seq = 76  # the reply to our foreign-version frame carries seq 77
        req.call(MsgType.STATUS, {})
    req.link.close()


def test_garbage_and_malformed_messages_get_errors_not_crashes(tcp_agent: AgentProcess) -> None:
    req = raw(tcp_agent)
    req.link.write(bytes(np.random.default_rng(0).integers(0, 256, 20000, dtype=np.uint8)))
    assert hello(req)["info"]["protocol"] == 1
    with pytest.raises(ProtocolError, match="JSON"):
        req.call(MsgType.STATUS, payload=b"\x05\x00\x00\x00{nope")
    with pytest.raises(RemoteError, match="unknown message type"):
        req.call(0x3E, {})  # type: ignore[arg-type]
    with pytest.raises(RemoteError, match="bad_request"):
        req.call(MsgType.PUT_BEGIN, {"sha256": "z" * 64, "size": 10})
    with pytest.raises(RemoteError, match="bad_request"):
        req.call(MsgType.PUT_BEGIN, {"sha256": "0" * 64, "size": -3})
    with pytest.raises(RemoteError, match="not_found"):
        req.call(MsgType.PUT_CHUNK, payload=encode_message({"upload": "1" * 64, "offset": 0}, [b"x"]))
    assert "bundles" in req.call(MsgType.STATUS, {}).header
    req.link.close()


def test_path_traversal_is_refused(tcp_agent: AgentProcess, bundles, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    req = raw(tcp_agent)
    hello(req)
    for bad in ("../../etc", "..", "a/b", "/abs", ".hidden", ""):
        with pytest.raises(RemoteError, match="bad_request"):
            req.call(MsgType.LOAD, {"bundle_id": bad})
        with pytest.raises(RemoteError, match="bad_request"):
            req.call(MsgType.DELETE, {"bundle_id": bad})
    # a hostile name becomes a plain label inside the agent's store
    bundle_id = upload_raw(req, bundles["tflite"], name="../../../../tmp/evil name;rm -rf")
    assert "/" not in bundle_id and bundle_id.startswith("evil_name_rm_-rf-")
    assert (tcp_agent.workdir.resolve() / "bundles" / bundle_id / "manifest.json").is_file()
    # a manifest naming files outside the bundle is refused before anything is written
    manifest = manifest_of(bundles["tflite"])
    for evil in ("../escaped.txt", "/etc/passwd", "sub/dir.bin", "..\\x"):
        manifest["model_files"][0]["path"] = evil
        with pytest.raises(BundleError, match="plain file name"):
            req.call(MsgType.COMMIT, {"manifest": manifest, "name": "escape"})
    assert not (tcp_agent.workdir / "escaped.txt").exists()
    assert not (tcp_agent.workdir.parent / "escaped.txt").exists()
    # a manifest whose files were never uploaded cannot be committed
    manifest = manifest_of(bundles["tflite"])
    manifest["model_files"][0]["sha256"] = "ab" * 32
    with pytest.raises(BundleError, match="not uploaded"):
        req.call(MsgType.COMMIT, {"manifest": manifest, "name": "ghost"})
    names = {b["bundle_id"] for b in req.call(MsgType.STATUS, {}).header["bundles"]}
    assert not any(n.startswith(("escape", "ghost")) for n in names)
    req.link.close()


def test_corrupt_upload_and_tampered_bundles_are_never_loaded(
    tcp_agent: AgentProcess, tmp_path: Path
) -> None:
    req = raw(tcp_agent)
    hello(req)
    good = models.tflite_bundle(tmp_path / "good")
    data = (good / "model.tflite").read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    req.call(MsgType.PUT_BEGIN, {"sha256": sha, "size": len(data)})
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF
    req.call(MsgType.PUT_CHUNK, payload=encode_message({"upload": sha, "offset": 0}, [bytes(bad)]))
    with pytest.raises(BundleError, match="sha256 .* does not match"):
        req.call(MsgType.PUT_END, {"upload": sha})
    status = req.call(MsgType.STATUS, {}).header
    assert status["uploads"] == [] and sha not in {b["sha256"] for b in status["files"]}
    with pytest.raises(BundleError, match="not uploaded"):
        req.call(MsgType.COMMIT, {"manifest": manifest_of(good), "name": "corrupt"})
    # a bundle whose model no longer matches its manifest is refused at upload
    tampered = models.tflite_bundle(tmp_path / "tampered")
    model = tampered / "model.tflite"
    data2 = bytearray(model.read_bytes())
    data2[len(data2) // 2] ^= 0x01
    model.write_bytes(bytes(data2))
    with pytest.raises(BundleError, match="tampered"), connect(tcp_agent.url()) as client:
        client.put_bundle(tampered)
    # and a stored bundle modified on the device is refused at LOAD
    bundle_id = upload_raw(req, good, name="ondisk")
    stored = tcp_agent.workdir.resolve() / "bundles" / bundle_id / "model.tflite"
    stored.write_bytes(stored.read_bytes() + b"\x01")
    with pytest.raises(BundleError, match="tampered"):
        req.call(MsgType.LOAD, {"bundle_id": bundle_id})
    req.link.close()


def test_quota(tmp_path: Path) -> None:
    agent = start_tcp_agent(tmp_path / "work", "--quota-mb", "1")
    try:
        req = raw(agent)
        hello(req)
        with pytest.raises(RemoteError, match="quota_exceeded"):
            req.call(MsgType.PUT_BEGIN, {"sha256": "a" * 64, "size": 2 * 1024 * 1024})
        # files that fit one by one but not together
        put_raw(req, bytes(700 * 1024))
        with pytest.raises(RemoteError, match="quota_exceeded"):
            put_raw(req, b"\x01" * (400 * 1024))
        status = req.call(MsgType.STATUS, {}).header
        assert status["bundles"] == [] and status["uploads"] == [] and status["used"] == 700 * 1024
        req.link.close()
    finally:
        stop(agent.proc)
