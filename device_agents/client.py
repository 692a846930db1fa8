"""Host-side client of the edgekit agent, connected by URL.

URLs::

    local                                  spawn an agent subprocess on a pseudo-terminal pair (the
                                           real serial code path, no hardware); ?agent=X.pyz runs a
                                           zipapp instead of the installed package
    serial:///dev/ttyUSB0?baud=921600      a serial port (default baud 115200)
    tcp://host:7100?token=SECRET           TCP (default port 7100); the token when the agent has one

Common query options: ``ack_timeout`` (s), ``retries``, ``chunk`` (upload chunk bytes), ``window``
(upload chunks in flight, 1..4), ``workdir`` and ``agent`` (local only). Example::

    with connect("local") as agent:
        bundle_id = agent.put_bundle("out/arm-cpu")
        agent.load(bundle_id, threads=2)
        outputs, times = agent.infer({"input": x})
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tty
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np

from .agent import auth_mac
from .errors import AgentError, AuthError, InputError, LinkError, RemoteError
from .link import FdLink, Link, Requester, RetryPolicy, SerialLink, SocketLink
from .protocol import (
    DEFAULT_MAX_PAYLOAD,
    PROTOCOL_VERSION,
    MsgType,
    message_parts,
    tensors_from_message,
    tensors_to_message,
)

DEFAULT_PORT = 7100
DEFAULT_BAUD = 115200
Progress = Callable[[int, int], None]


class LocalAgentLink(FdLink):
    """The master side of a pty whose slave side is served by an agent subprocess we started."""

    def __init__(
        self, agent_cmd: Sequence[str] | None, workdir: Path | None, env: Mapping[str, str] | None = None
    ):
        master, slave = os.openpty()
        tty.setraw(slave)  # no echo, no line editing, before anyone writes
        tty.setraw(master)
        super().__init__(master, description="local agent (pty)")
        self._slave = slave
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="edgekit-agent-")) if workdir is None else Path(workdir)
        log_fd, log_name = tempfile.mkstemp(prefix="edgekit-agent-", suffix=".log")
        os.close(log_fd)
        self.log_path = Path(log_name)
        cmd = list(agent_cmd or [sys.executable, "-m", "edgekit.device_agents"])
        cmd += ["--serial", os.ttyname(slave), "--baud", "921600", "--workdir", str(self.workdir)]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the subprocess
        try:
            self.process = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env
            )
        except OSError as exc:
            self._log.close()
            super().close()
            raise LinkError(f"cannot start the local agent ({cmd[0]}): {exc.strerror or exc}") from None

    def _check_alive(self) -> None:
        if self.process.poll() is not None:
            tail = ""
            with contextlib.suppress(OSError):
                lines = self.log_path.read_text(errors="replace").strip().splitlines()
                tail = lines[-1] if lines else ""
            raise LinkError(
                f"the local agent exited with code {self.process.returncode}: {tail or 'no output'}"
            )

    def read(self, timeout: float) -> bytes:
        data = super().read(timeout)
        if not data:
            self._check_alive()
        return data

    def write(self, data: bytes) -> None:
        self._check_alive()
        super().write(data)

    def close(self) -> None:
        super().close()
        with contextlib.suppress(OSError):
            os.close(self._slave)
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()
        with contextlib.suppress(OSError):
            self.log_path.unlink()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _query(url: str) -> tuple[Any, dict[str, str]]:
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    return parts, query


def open_link(url: str, timeout: float) -> tuple[Link, dict[str, str]]:
    """The link a URL names (not yet handshaken) and its query options."""
    parts, query = _query(url)
    scheme = parts.scheme or parts.path.split("?")[0]
    if scheme == "local":
        agent = query.get("agent")
        cmd = [sys.executable, agent] if agent else None
        return LocalAgentLink(cmd, Path(query["workdir"]) if "workdir" in query else None), query
    if scheme == "serial":
        device = parts.path or parts.netloc
        if not device:
            raise InputError(f"{url!r}: give the serial device, e.g. serial:///dev/ttyUSB0?baud=921600")
        try:
            baud = int(query.get("baud", DEFAULT_BAUD))
        except ValueError:
            raise InputError(f"{url!r}: baud must be an integer") from None
        return SerialLink(device, baud), query
    if scheme == "tcp":
        if not parts.hostname:
            raise InputError(f"{url!r}: give the host, e.g. tcp://192.168.1.20:7100")
        try:
            port = parts.port or DEFAULT_PORT
        except ValueError:
            raise InputError(f"{url!r}: the port is not a number") from None
        return SocketLink.connect(parts.hostname, port, timeout), query
    raise InputError(f"unknown device URL {url!r}; use local, serial:///dev/ttyX?baud=N or tcp://host:port")


def connect(url: str = "local", timeout: float = 20.0, token: str | None = None) -> AgentClient:
    """Open the link ``url`` names and handshake (HELLO, and AUTH when the agent wants a token)."""
    link, query = open_link(url, timeout)
    try:
        client = AgentClient(link, url, query, timeout, token if token is not None else query.get("token"))
        client.hello(timeout=timeout)
    except BaseException:
        link.close()
        raise
    return client


def _float(query: Mapping[str, str], key: str, default: float) -> float:
    try:
        return float(query.get(key, default))
    except ValueError:
        raise InputError(f"URL option {key}={query[key]!r} is not a number") from None


class AgentClient:
    """A connected agent. Use as a context manager, or call :meth:`close`."""

    def __init__(self, link: Link, url: str, query: Mapping[str, str], timeout: float, token: str | None):
        self.url = url
        self.link = link
        self.timeout = timeout
        self.token = token
        self.policy = RetryPolicy(
            ack_timeout=_float(query, "ack_timeout", 1.0 if isinstance(link, SocketLink) else 0.5),
            retries=int(_float(query, "retries", 8)),
        )
        self.chunk = int(_float(query, "chunk", 1 << 20 if isinstance(link, SocketLink) else 16 * 1024))
        self.window = max(1, min(4, int(_float(query, "window", 3 if isinstance(link, SocketLink) else 2))))
        self.requester = Requester(link, self.policy, DEFAULT_MAX_PAYLOAD)
        # how the link's faults were recovered from, over every connection of this client
        self._retransmitted = 0  # by requesters of earlier connections
        self.gap_resumes = 0  # uploads continued from the agent's offset after a lost chunk
        self.reconnects = 0
        self.info: dict[str, Any] = {}
        self.loaded: dict[str, Any] | None = None
        self.last_infer_wall = 0.0

    # -- connection ---------------------------------------------------------------------------------
    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, msg_type: MsgType, header: dict[str, Any] | None = None, **kw: Any) -> Any:
        return self.requester.call(msg_type, header, **kw)

    def hello(self, timeout: float | None = None) -> dict[str, Any]:
        """Handshake; returns what the agent reports about itself (machine, OS, runtimes, disk...).

        The first HELLO is retransmitted every 0.2 s until ``timeout``: a serial peer that just
        opened its port (and so flushed its input) or an agent still starting will answer one.
        """
        timeout = self.timeout if timeout is None else timeout
        interval = min(0.2, self.policy.ack_timeout)
        reply = self._call(
            MsgType.HELLO,
            {"protocol": PROTOCOL_VERSION, "client": "edgekit"},
            ack_timeout=interval,
            retries=max(self.policy.retries, int(timeout / interval)),
        )
        header = reply.header
        if header.get("auth_required"):
            if not self.token:
                raise AuthError(f"the agent at {self.url} needs a token: add ?token=SECRET to the URL")
            nonce = secrets.token_bytes(32)
            challenge = bytes.fromhex(str(header.get("challenge", "")))
            mac = auth_mac(self.token, challenge, b"client")
            header = self._call(MsgType.AUTH, {"mac": mac, "nonce": nonce.hex()}).header
            if not isinstance(header.get("mac"), str) or header["mac"] != auth_mac(
                self.token, nonce, b"agent"
            ):
                raise AuthError("the agent did not prove it knows the token")
        self.info = dict(header.get("info", {}))
        max_payload = int(self.info.get("max_payload", DEFAULT_MAX_PAYLOAD))
        self.chunk = max(1024, min(self.chunk, max_payload - 4096))
        self.max_payload = max_payload
        self.requester.decoder.max_payload = max(self.requester.decoder.max_payload, max_payload + 64 * 1024)
        return self.info

    def reconnect(self) -> None:
        """Open the link again (after a cut) and handshake; keeps the URL's options."""
        with contextlib.suppress(Exception):
            self.link.close()
        self.link, _ = open_link(self.url, self.timeout)
        self._retransmitted += self.requester.retransmissions
        self.requester = Requester(self.link, self.policy, DEFAULT_MAX_PAYLOAD)
        self.reconnects += 1
        self.hello()

    @property
    def recoveries(self) -> dict[str, int]:
        """How this client recovered from link faults so far: frames sent again (no ack or answer in
        time, or a NACK), uploads continued from the agent's offset after a lost chunk (``upload_gap``:
        later chunks arrived first), reconnects."""
        return {
            "retransmissions": self._retransmitted + self.requester.retransmissions,
            "gap_resumes": self.gap_resumes,
            "reconnects": self.reconnects,
        }

    def close(self) -> None:
        """Say BYE (best effort) and close the link; a local agent subprocess is stopped."""
        with contextlib.suppress(AgentError, OSError):
            self._call(MsgType.BYE, {}, ack_timeout=0.5, retries=1)
        self.link.close()

    # -- bundles ------------------------------------------------------------------------------------
    def put_bundle(
        self,
        bundle: str | os.PathLike[str],
        progress: Progress | None = None,
        reconnects: int = 3,
    ) -> str:
        """Upload a bundle directory or ``.tar.gz``; returns its bundle id on the agent.

        The manifest's files travel one by one, keyed by their sha256 (the agent checks each while
        it arrives), then the manifest is committed. Files the agent already has are skipped, and a
        file cut short resumes from the agent's last confirmed offset: after a cut link (up to
        ``reconnects`` times here), or when called again later. ``progress(done, total)`` counts bytes.
        """
        from .bundle import MANIFEST_NAME, Manifest, read_bundle

        path = Path(bundle)
        if not path.exists():
            raise InputError(f"bundle {path} does not exist")
        with contextlib.ExitStack() as stack:
            if path.is_dir():
                root = path
            else:  # an archive: unpacked and verified here, then sent like a directory
                loaded = read_bundle(path)
                stack.callback(loaded.cleanup)
                root = loaded.root
            try:
                manifest_json = json.loads((root / MANIFEST_NAME).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise InputError(f"{path} is not a bundle: cannot read {MANIFEST_NAME} ({exc})") from None
            manifest = Manifest.from_json(manifest_json)
            files: dict[str, tuple[int, Path]] = {}
            for f in manifest.model_files:
                local = root / f.path
                if not local.is_file() or local.stat().st_size != f.size:
                    raise InputError(
                        f"bundle file {local} is missing or not {f.size} bytes as the manifest says"
                    )
                files.setdefault(f.sha256, (f.size, local))
            name = path.name[: -len(".tar.gz")] if path.name.endswith(".tar.gz") else path.name
            total = sum(size for size, _ in files.values())
            confirmed = [0]

            def track(done: int) -> None:
                confirmed[0] = done
                if progress:
                    progress(done, total)

            attempts = 0
            while True:
                try:
                    return self._upload(manifest_json, name, files, total, track)
                except LinkError as exc:
                    attempts += 1
                    if attempts > reconnects or isinstance(self.link, LocalAgentLink):
                        raise type(exc)(
                            f"upload of {name} stopped at {confirmed[0]} of {total} bytes "
                            f"({attempts - 1} reconnects): {exc}; run it again to resume"
                        ) from None
                    try:
                        self.reconnect()
                    except LinkError:
                        continue  # counts as one more attempt
        raise AssertionError("unreachable")  # pragma: no cover

    def _upload(
        self,
        manifest_json: dict[str, Any],
        name: str,
        files: dict[str, tuple[int, Path]],
        total: int,
        track: Callable[[int], None],
    ) -> str:
        check = {"manifest": manifest_json, "name": name, "check": True}
        missing = set(self._call(MsgType.COMMIT, check).header["missing"])
        done = sum(size for sha, (size, _) in files.items() if sha not in missing)
        for sha, (size, local) in files.items():
            if sha in missing:
                self._upload_file(sha, size, local, done, track)
                done += size
        track(total)
        return str(self._call(MsgType.COMMIT, {"manifest": manifest_json, "name": name}).header["bundle_id"])

    def _upload_file(self, sha: str, size: int, local: Path, base: int, track: Callable[[int], None]) -> None:
        begin = self._call(MsgType.PUT_BEGIN, {"sha256": sha, "size": size}).header
        if begin.get("complete"):
            return
        offset = int(begin["offset"])
        # up to `window` chunks in flight; each needs its own buffer until its reply is in
        ring = [bytearray(min(self.chunk, max(size, 1))) for _ in range(self.window + 1)]
        with open(local, "rb", buffering=0) as f:
            while offset < size:
                track(base + offset)
                try:
                    replies = self.requester.pipeline(self._chunks(f, sha, offset, size, ring), self.window)
                    for reply in replies:
                        offset = max(offset, int(reply.header["offset"]))
                        track(base + offset)
                except RemoteError as exc:
                    if exc.remote_code != "upload_gap":
                        raise
                    # a chunk was lost while later ones arrived: continue from the agent's offset
                    self.gap_resumes += 1
                    offset = int(
                        self._call(MsgType.PUT_BEGIN, {"sha256": sha, "size": size}).header["offset"]
                    )
        self._call(MsgType.PUT_END, {"upload": sha})

    def _chunks(
        self, f: Any, sha: str, offset: int, size: int, ring: list[bytearray]
    ) -> Iterator[tuple[MsgType, None, list[bytes | bytearray | memoryview]]]:
        for i, pos in enumerate(range(offset, size, len(ring[0]))):
            buf = ring[i % len(ring)]
            f.seek(pos)
            n = f.readinto(buf)
            if not n:
                raise InputError(f"{f.name} shrank while it was being uploaded")
            yield (
                MsgType.PUT_CHUNK,
                None,
                message_parts({"upload": sha, "offset": pos}, [memoryview(buf)[:n]]),
            )

    def load(self, bundle_id: str, threads: int = 2, delegate: str | None = None) -> dict[str, Any]:
        """Load a stored bundle (verified again on the agent); returns runtime, tensors, delegated ops."""
        header = {"bundle_id": bundle_id, "threads": threads, "delegate": delegate}
        self.loaded = self._call(MsgType.LOAD, header).header
        return dict(self.loaded)

    def delete(self, bundle_id: str) -> None:
        self._call(MsgType.DELETE, {"bundle_id": bundle_id})
        if self.loaded and self.loaded.get("bundle_id") == bundle_id:
            self.loaded = None

    def status(self) -> dict[str, Any]:
        return dict(self._call(MsgType.STATUS, {}).header)

    def bench(self, warmup: int = 5, runs: int = 20) -> list[float]:
        """Warm-up runs, then ``runs`` timed runs on the device; every run's compute time (s)."""
        return [float(t) for t in self._call(MsgType.BENCH, {"warmup": warmup, "runs": runs}).header["times"]]

    # -- inference ----------------------------------------------------------------------------------
    def infer(
        self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray]
    ) -> tuple[dict[str, np.ndarray], list[float]]:
        """Run samples on the device: ``(outputs by name, on-device compute seconds per sample)``.

        Each input is one sample of the model's shape, or several along a leading axis: either
        stacked (``(N, *shape)``) or, for a model with batch 1, concatenated (``(N, *shape[1:])``).
        Outputs come back in the same form. Batches are split to fit the agent's frame size.
        """
        if self.loaded is None:
            raise InputError("no model loaded: call load(bundle_id) first")
        specs = self.loaded["inputs"]
        out_specs = self.loaded["outputs"]
        stacked, mode = _to_samples(inputs, specs)
        count = next(iter(stacked.values())).shape[0]
        per_sample = max(
            sum(a[0].nbytes for a in stacked.values()) if count else 0,
            sum(int(np.prod(s["shape"])) * np.dtype(s["dtype"]).itemsize for s in out_specs),
        )
        room = self.max_payload - 64 * 1024
        if per_sample > room:
            raise InputError(f"one sample needs {per_sample} bytes, more than the agent's frame limit {room}")
        step = max(1, room // max(per_sample, 1))
        outs: dict[str, list[np.ndarray]] = {s["name"]: [] for s in out_specs}
        times: list[float] = []
        start = time.perf_counter()
        for lo in range(0, count, step):
            payload = tensors_to_message({}, [(n, a[lo : lo + step]) for n, a in stacked.items()])
            reply = self._call(MsgType.INFER, payload=payload)
            times += [float(t) for t in reply.header["times"]]
            for name, arr in tensors_from_message(reply.header, reply.blobs):
                outs[name].append(arr)
        self.last_infer_wall = time.perf_counter() - start
        result = {}
        for spec in out_specs:
            arr = np.concatenate(outs[spec["name"]]) if outs[spec["name"]] else np.zeros((0, *spec["shape"]))
            if mode == "single":
                arr = arr[0]
            elif mode == "concat":
                arr = arr.reshape((-1, *spec["shape"][1:]))
            result[spec["name"]] = arr
        return result, times


def _to_samples(
    inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray], specs: list[dict[str, Any]]
) -> tuple[dict[str, np.ndarray], str]:
    names = [s["name"] for s in specs]
    if isinstance(inputs, Mapping):
        missing = [n for n in names if n not in inputs]
        extra = [n for n in inputs if n not in names]
        if missing or extra:
            raise InputError(f"inputs {sorted(inputs)} do not match the model's inputs {names}")
        arrays = [np.asarray(inputs[n]) for n in names]
    else:
        if len(inputs) != len(names):
            raise InputError(f"{len(inputs)} inputs given, the model takes {len(names)} ({names})")
        arrays = [np.asarray(a) for a in inputs]
    stacked: dict[str, np.ndarray] = {}
    modes, counts = [], []
    for spec, arr in zip(specs, arrays):  # noqa: B905 - equal lengths checked above; Python 3.9
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if arr.dtype != dtype:
            ints = arr.dtype.kind in "iu" and dtype.kind in "iu"
            if arr.dtype.kind != dtype.kind and not ints:
                raise InputError(f"input {spec['name']!r} is {arr.dtype}, the model takes {dtype}")
            if ints and arr.size and (arr.min() < np.iinfo(dtype).min or arr.max() > np.iinfo(dtype).max):
                raise InputError(f"input {spec['name']!r} has values outside the range of {dtype}")
            arr = arr.astype(dtype)
        if arr.shape == shape:
            modes.append("single")
            arr = arr[None]
        elif shape and shape[0] == 1 and arr.ndim == len(shape) and arr.shape[1:] == shape[1:]:
            modes.append("concat")
            arr = arr.reshape((-1, *shape))
        elif arr.shape[1:] == shape:
            modes.append("stack")
        else:
            raise InputError(
                f"input {spec['name']!r} has shape {list(arr.shape)}, the model takes {list(shape)}"
            )
        counts.append(arr.shape[0])
        stacked[spec["name"]] = np.ascontiguousarray(arr)
    if len(set(counts)) != 1:
        raise InputError(f"inputs disagree on the number of samples: {counts}")
    return stacked, modes[0]


def pack_bundle(directory: Path, out: Path) -> Path:
    """A deterministic ``.tar.gz`` of a bundle directory (same content, same bytes, same sha256)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
    # nested, not parenthesised, context managers: this module also runs on Python 3.9
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz:  # noqa: SIM117
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for p in files:
                info = tarfile.TarInfo(f"{directory.name}/{p.relative_to(directory).as_posix()}")
                info.size = p.stat().st_size
                info.mode = 0o644
                with open(p, "rb") as f:
                    tar.addfile(info, f)
    return out
