"""The on-device agent: serves the edgekit protocol over a serial port or TCP.

One :class:`Agent` holds the state (bundle store, loaded model, counters); a :class:`Session`
serves it over one :class:`~.link.Link`. In a session the calling thread reads and decodes frames
and answers link control at once (ACK for a new or running request, the cached reply for a
repeated one, NACK for a poll of an unknown request); a worker thread executes requests one at a
time. Every failure of a request becomes an ERROR reply with a typed code; nothing a host sends
stops the agent.

TCP: the agent binds loopback unless told otherwise; any other address needs a token, and then every
connection must pass the HMAC-SHA256 challenge-response of HELLO/AUTH before anything else (a client
that fails it gets an error and is disconnected). Serial needs no token. One TCP client is served at
a time; the next waits in the listen backlog.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import platform
import queue
import secrets
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import runtimes
from .errors import AgentError, AuthError, LinkError, VersionMismatch
from .link import Link, SocketLink
from .protocol import (
    DEFAULT_MAX_PAYLOAD,
    PROTOCOL_VERSION,
    REQUEST_TYPES,
    Frame,
    FrameDecoder,
    MsgType,
    decode_message,
    encode_frame,
    encode_message,
    tensors_from_message,
    tensors_to_message,
)
from .store import BadRequest, BundleStore

AGENT_VERSION = "0.1.0"
AUTH_CONTEXT = b"edgekit-agent-auth-v1"
MAX_BENCH_RUNS = 100_000


def auth_mac(token: str, challenge: bytes, role: bytes) -> str:
    """HMAC-SHA256 proving knowledge of ``token`` for one challenge; ``role`` is b"client" or b"agent"."""
    return hmac.new(token.encode(), AUTH_CONTEXT + role + challenge, hashlib.sha256).hexdigest()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class AgentOptions:
    workdir: Path
    quota_bytes: int = 2 * 1024**3
    max_payload: int = DEFAULT_MAX_PAYLOAD
    token: str | None = None
    idle_timeout: float = 600.0


class CloseSession(Exception):
    """Raised by a handler (after its reply is sent) to end the session, e.g. BYE or failed auth."""


class Agent:
    def __init__(self, options: AgentOptions):
        self.options = options
        self.store = BundleStore(options.workdir, options.quota_bytes)
        self.started = time.time()
        self.runner: runtimes.Runner | None = None
        self.loaded: str | None = None
        self.last_inputs: list[np.ndarray] | None = None
        self.counters = {"requests": 0, "errors": 0, "sessions": 0}
        self._lock = threading.Lock()
        self.handlers: dict[int, Callable[[Session, dict[str, Any], list[memoryview]], bytes]] = {
            MsgType.HELLO: self.on_hello,
            MsgType.AUTH: self.on_auth,
            MsgType.PUT_BEGIN: self.on_put_begin,
            MsgType.PUT_CHUNK: self.on_put_chunk,
            MsgType.PUT_END: self.on_put_end,
            MsgType.LOAD: self.on_load,
            MsgType.INFER: self.on_infer,
            MsgType.BENCH: self.on_bench,
            MsgType.STATUS: self.on_status,
            MsgType.DELETE: self.on_delete,
            MsgType.BYE: self.on_bye,
            MsgType.COMMIT: self.on_commit,
        }

    # -- dispatch -----------------------------------------------------------------------------------
    def execute(self, session: Session, frame: Frame) -> tuple[int, bytes, bool]:
        """(reply type, reply payload, close the session afterwards) for one request frame.

        Requests of concurrent sessions run one at a time (they share the store and the model)."""
        with self._lock:
            return self._execute(session, frame)

    def _execute(self, session: Session, frame: Frame) -> tuple[int, bytes, bool]:
        self.counters["requests"] += 1
        close = False
        try:
            if (
                session.token is not None
                and not session.authed
                and frame.type not in (MsgType.HELLO, MsgType.AUTH)
            ):
                close = True
                raise AuthError("authenticate first: this agent needs a token (tcp://host:port?token=...)")
            header, blobs = decode_message(frame.payload)
            payload = self.handlers[frame.type](session, header, blobs)
            return MsgType.RESULT, payload, False
        except CloseSession as stop:
            return MsgType.RESULT, stop.args[0], True
        except AgentError as exc:
            self.counters["errors"] += 1
            close = close or isinstance(exc, AuthError)
            return MsgType.ERROR, encode_message({"code": exc.code, "message": str(exc)}), close
        except Exception as exc:  # a bug or an unexpected runtime failure: report it, keep serving
            self.counters["errors"] += 1
            message = f"{type(exc).__name__}: {str(exc)[:500]}"
            return MsgType.ERROR, encode_message({"code": "internal_error", "message": message}), close

    # -- handlers -----------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        disk = shutil.disk_usage(self.store.root)
        return {
            "agent_version": AGENT_VERSION,
            "protocol": PROTOCOL_VERSION,
            "machine": platform.machine(),
            "os": platform.platform(),
            "python": platform.python_version(),
            "runtimes": runtimes.available(),
            "numpy": np.__version__,
            "disk_free": disk.free,
            "memory_available": _memory_available(),
            "max_payload": self.options.max_payload,
            "quota": self.store.quota,
            "agent_path": str(Path(__file__).resolve().parent),
            "pid": os.getpid(),
        }

    def on_hello(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        version = header.get("protocol")
        if version != PROTOCOL_VERSION:
            raise VersionMismatch(
                f"the host speaks protocol version {version}, this agent speaks {PROTOCOL_VERSION}; "
                "rebuild the agent with the host's edgekit (edgekit agent build)"
            )
        if session.token is None or session.authed:
            return encode_message({"auth_required": False, "info": self.info()})
        session.challenge = secrets.token_bytes(32)
        return encode_message({"auth_required": True, "challenge": session.challenge.hex()})

    def on_auth(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        if session.token is None:
            return encode_message({"info": self.info()})
        challenge, session.challenge = session.challenge, None
        mac, client_nonce = header.get("mac"), header.get("nonce")
        if challenge is None or not isinstance(mac, str) or not isinstance(client_nonce, str):
            raise AuthError("AUTH without a HELLO challenge or without mac/nonce")
        if not hmac.compare_digest(mac, auth_mac(session.token, challenge, b"client")):
            raise AuthError("wrong token: the HMAC of the challenge does not match")
        try:
            nonce = bytes.fromhex(client_nonce)
        except ValueError:
            raise AuthError("AUTH nonce is not hex") from None
        session.authed = True
        return encode_message({"info": self.info(), "mac": auth_mac(session.token, nonce, b"agent")})

    def on_put_begin(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        return encode_message(self.store.begin(header.get("sha256"), header.get("size")))

    def on_put_chunk(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        if len(blobs) != 1:
            raise BadRequest("PUT_CHUNK carries exactly one blob")
        offset = self.store.chunk(header.get("upload"), header.get("offset"), blobs[0])
        return encode_message({"offset": offset})

    def on_put_end(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        return encode_message(self.store.finish(header.get("upload")))

    def on_commit(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        manifest, name = header.get("manifest"), header.get("name")
        if header.get("check"):
            _, bundle_id, missing = self.store.check_manifest(manifest, name)
            return encode_message({"bundle_id": bundle_id, "missing": missing})
        return encode_message(self.store.commit(manifest, name))

    def on_load(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        bundle_id = header.get("bundle_id")
        threads = header.get("threads", 2)
        delegate = header.get("delegate")
        if delegate is not None and not isinstance(delegate, str):
            raise BadRequest("delegate must be a string or null")
        self.unload()
        bundle = self.store.open(bundle_id)  # verifies every file's size and sha256 again
        runner = runtimes.open_runner(bundle, threads=threads, delegate=delegate)
        self.runner, self.loaded, self.last_inputs = runner, bundle_id, None
        return encode_message(
            {
                "bundle_id": bundle_id,
                "target": bundle.manifest.target,
                "inputs": [t.to_json() for t in runner.inputs],
                "outputs": [t.to_json() for t in runner.outputs],
                **runner.info,
            }
        )

    def unload(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.runner, self.loaded, self.last_inputs = None, None, None

    def _runner(self) -> runtimes.Runner:
        if self.runner is None:
            raise BadRequest("no model loaded (send LOAD first)")
        return self.runner

    def on_infer(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        runner = self._runner()
        given = dict(tensors_from_message(header, blobs))
        batches = []
        count = None
        for spec in runner.inputs:
            arr = given.pop(spec.name, None)
            if arr is None:
                raise BadRequest(f"INFER is missing input {spec.name!r}")
            if arr.dtype.name != spec.dtype or tuple(arr.shape[1:]) != spec.shape:
                raise BadRequest(
                    f"input {spec.name!r}: expected samples of {spec.dtype}{list(spec.shape)}, "
                    f"got {arr.dtype.name}{list(arr.shape)} (first axis = samples)"
                )
            if count is not None and arr.shape[0] != count:
                raise BadRequest("inputs disagree on the number of samples")
            count = arr.shape[0]
            batches.append(arr)
        if given:
            raise BadRequest(
                f"INFER got unknown inputs {sorted(given)}; the model takes {[s.name for s in runner.inputs]}"
            )
        outputs: list[list[np.ndarray]] = [[] for _ in runner.outputs]
        times = []
        for i in range(count or 0):
            outs, elapsed = runner.run([b[i] for b in batches])
            times.append(elapsed)
            for slot, out in zip(outputs, outs):  # noqa: B905 - one per model output
                slot.append(out)
        self.last_inputs = [b[:1][0] for b in batches] if count else self.last_inputs
        for spec, slot in zip(runner.outputs, outputs):  # noqa: B905
            if len({o.shape for o in slot}) > 1:  # a selection's rows (NMS) differ from sample to sample
                raise AgentError(
                    f"output {spec.name!r} has a different shape on each sample ({slot[0].shape}, "
                    f"{next(o.shape for o in slot if o.shape != slot[0].shape)}): run one sample per request"
                )
        tensors = [
            (
                spec.name,
                np.stack(slot) if slot else np.zeros((0, *(max(d, 0) for d in spec.shape)), spec.dtype),
            )
            for spec, slot in zip(runner.outputs, outputs)  # noqa: B905
        ]
        return tensors_to_message({"times": times}, tensors)

    def on_bench(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        runner = self._runner()
        warmup, runs = header.get("warmup", 5), header.get("runs", 20)
        for value in (warmup, runs):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_BENCH_RUNS:
                raise BadRequest(f"warmup and runs must be integers from 0 to {MAX_BENCH_RUNS}")
        feeds = self.last_inputs or [_sample_input(spec) for spec in runner.inputs]
        for _ in range(warmup):
            runner.run(feeds)
        times = [runner.run(feeds)[1] for _ in range(runs)]
        return encode_message({"times": times, "inputs": "last INFER" if self.last_inputs else "random"})

    def on_status(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        return encode_message(
            {
                "loaded": self.loaded,
                "runner": self.runner.info if self.runner else None,
                "bundles": self.store.list(),
                "uploads": self.store.partial_uploads(),
                "files": self.store.blobs(),  # uploaded files not yet committed in a bundle
                "used": self.store.used(),
                "quota": self.store.quota,
                "uptime": time.time() - self.started,
                "counters": dict(self.counters),
                "link": session.link.description,
                "decoder": vars(session.decoder.stats),
                "memory_rss": _rss(),
            }
        )

    def on_delete(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        bundle_id = header.get("bundle_id")
        if bundle_id == self.loaded:
            self.unload()
        self.store.delete(bundle_id)
        return encode_message({"deleted": bundle_id})

    def on_bye(self, session: Session, header: dict[str, Any], blobs: list[memoryview]) -> bytes:
        session.authed = False
        raise CloseSession(encode_message({"bye": True}))


def _sample_input(spec: runtimes.TensorInfo) -> np.ndarray:
    rng = np.random.default_rng(0)
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(spec.shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -128), min(info.max, 255) + 1, spec.shape).astype(dtype)
    return np.zeros(spec.shape, dtype)


def _memory_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def _rss() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------------------------------------------
# serving one link


class Session:
    """Serves one link until it closes, BYE (over TCP), a failed authentication or idle timeout."""

    def __init__(self, agent: Agent, link: Link, token: str | None, end_on_bye: bool):
        self.agent = agent
        self.link = link
        self.token = token
        self.end_on_bye = end_on_bye
        self.authed = False
        self.challenge: bytes | None = None
        self.decoder = FrameDecoder(max_payload=agent.options.max_payload)
        self._lock = threading.Lock()  # guards the reply cache and link writes
        self._pending: set[int] = set()  # seqs queued or running
        self._done: dict[int, bytes] = {}  # seq -> reply frame (the last few)
        self._queue: queue.Queue[Frame | None] = queue.Queue(maxsize=8)
        self._closing = threading.Event()

    def send(self, data: bytes) -> None:
        with self._lock:
            self.link.write(data)

    def run(self) -> str:
        """Serve until the session ends; returns why: "closed" (link), "bye" or "idle"."""
        self.agent.counters["sessions"] += 1
        reason = "bye"
        worker = threading.Thread(target=self._work, name="edgekit-agent-worker", daemon=True)
        worker.start()
        last = time.monotonic()
        try:
            while not self._closing.is_set():
                data = self.link.read(0.2)
                if not data:
                    if time.monotonic() - last > self.agent.options.idle_timeout:
                        reason = "idle"
                        break
                    continue
                last = time.monotonic()
                for frame in self.decoder.feed(data):
                    try:
                        self._on_frame(frame)
                    except LinkError:
                        raise
                    except Exception as exc:  # a bug must not take the agent down: log, keep serving
                        print(
                            f"edgekit-agent: internal error on a frame: {exc!r}", file=sys.stderr, flush=True
                        )
        except LinkError:
            reason = "closed"
        finally:
            self._closing.set()
            while True:  # drop what is still queued (its sender is gone), then stop the worker
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            self._queue.put(None)
            worker.join(timeout=60)
        return reason

    def _on_frame(self, frame: Frame) -> None:
        if frame.version != PROTOCOL_VERSION:
            msg = {
                "code": "version_mismatch",
                "message": f"this agent speaks protocol version {PROTOCOL_VERSION}",
            }
            self.send(encode_frame(MsgType.ERROR, frame.seq, encode_message(msg)))
            return
        if frame.type >= 0x40 and frame.type != MsgType.POLL:
            return  # replies and acks are not for the agent (or echoes on a shared line)
        if frame.type not in REQUEST_TYPES and frame.type != MsgType.POLL:
            msg = {"code": "bad_request", "message": f"unknown message type {MsgType.name_of(frame.type)}"}
            self.send(encode_frame(MsgType.ERROR, frame.seq, encode_message(msg)))
            return
        with self._lock:
            if frame.seq in self._pending:
                self.link.write(encode_frame(MsgType.ACK, frame.seq))
                return
            cached = self._done.get(frame.seq)
            if cached is not None:
                if frame.type != MsgType.POLL:  # a retransmitted request: ack it, so the sender polls next
                    self.link.write(encode_frame(MsgType.ACK, frame.seq))
                self.link.write(cached)
                return
            if frame.type == MsgType.POLL:
                self.link.write(encode_frame(MsgType.NACK, frame.seq))
                return
            try:
                self._queue.put_nowait(frame)
            except queue.Full:
                msg = {"code": "busy", "message": "too many requests in flight"}
                self.link.write(encode_frame(MsgType.ERROR, frame.seq, encode_message(msg)))
                return
            self._pending.add(frame.seq)
            self.link.write(encode_frame(MsgType.ACK, frame.seq))

    def _work(self) -> None:
        while True:
            frame = self._queue.get()
            if frame is None:
                return
            reply_type, payload, close = self.agent.execute(self, frame)
            reply = encode_frame(reply_type, frame.seq, payload)
            try:
                with self._lock:
                    self.link.write(reply)
                    self._done[frame.seq] = reply
                    while len(self._done) > 4:
                        self._done.pop(next(iter(self._done)))
                    self._pending.discard(frame.seq)
            except LinkError:
                self._closing.set()
                return
            if close and self.end_on_bye:
                self._closing.set()
                self.link.close()  # wakes the reader
                return


# ---------------------------------------------------------------------------------------------------
# servers


def serve_serial(agent: Agent, device: str, baud: int, log: Callable[[str], None] = print) -> None:
    """Serve a serial port forever (sessions are delimited by HELLO/BYE, the port stays open)."""
    from .link import SerialLink

    link = SerialLink(device, baud)
    log(f"edgekit-agent serving {link.description} (workdir {agent.store.root})")
    try:
        while True:
            if Session(agent, link, token=None, end_on_bye=False).run() != "closed":
                continue  # idle: keep the port open, start a fresh session
            link.close()
            if not os.path.exists(device):
                raise LinkError(f"serial device {device} disappeared")
            link = SerialLink(device, baud)
    finally:
        link.close()


def serve_tcp(
    agent: Agent,
    host: str,
    port: int,
    token: str | None,
    log: Callable[[str], None] = print,
    stop: threading.Event | None = None,
    max_sessions: int = 8,
) -> None:
    """Accept TCP clients forever (or until ``stop`` is set); each connection is a session in its own
    thread, their requests run one at a time. Beyond ``max_sessions`` a connection is closed at once."""
    if not is_loopback(host) and not token:
        raise AuthError(f"listening on {host} (not loopback) needs a token: --token SECRET")
    try:
        server = socket.create_server((host, port), backlog=8)
    except OSError as exc:
        raise LinkError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = server.getsockname()
    log(f"edgekit-agent listening on {bound[0]}:{bound[1]} (workdir {agent.store.root})")
    server.settimeout(0.5)
    active: list[threading.Thread] = []
    try:
        while stop is None or not stop.is_set():
            try:
                conn, addr = server.accept()
            except socket.timeout:  # noqa: UP041 - not TimeoutError on Python 3.9
                continue
            active = [t for t in active if t.is_alive()]
            link = SocketLink(conn, f"tcp client {addr[0]}:{addr[1]}")
            if len(active) >= max_sessions:
                link.close()
                continue
            thread = threading.Thread(target=_serve_connection, args=(agent, link, token), daemon=True)
            thread.start()
            active.append(thread)
    finally:
        server.close()


def _serve_connection(agent: Agent, link: Link, token: str | None) -> None:
    try:
        Session(agent, link, token=token, end_on_bye=True).run()
    finally:
        link.close()


def main_log(message: str) -> None:
    print(message, flush=True)
    sys.stdout.flush()
