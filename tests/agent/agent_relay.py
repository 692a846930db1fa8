"""A fault-injecting relay between an agent client and an agent (a test helper, also used by
``benchmarks/agent_link.py``).

:class:`TcpRelay` listens on loopback and, for every client connection, connects to the agent and
pumps bytes both ways through :class:`Faults`: bit flips at a bit error rate, dropped and
duplicated bytes, added latency, pacing at a serial line rate (8N1: 10 bits a byte), and a cut of
the link after a given number of client-to-agent bytes. :class:`FdRelay` pumps between two file
descriptors (pty masters) with the same faults, so the serial code path runs at a simulated baud
rate. Every pump is a thread; ``close()`` stops them all.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Faults:
    ber: float = 0.0  # probability that a bit is flipped
    drop: float = 0.0  # probability that a byte is dropped
    dup: float = 0.0  # probability that a byte is sent twice
    delay: float = 0.0  # latency added to every forwarded piece (s)
    baud: int | None = None  # pace at baud/10 bytes per second
    cut_after: int | None = None  # close the first connection after this many client->agent bytes
    after: int = 0  # inject bit errors, drops and duplicates only after this many bytes (per direction)
    seed: int = 0


@dataclass
class RelayStats:
    up: int = 0  # client -> agent bytes read
    down: int = 0
    flips: int = 0
    drops: int = 0
    dups: int = 0
    connections: int = 0
    cuts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class _Pump:
    def __init__(self, faults: Faults, stats: RelayStats, upstream: bool, seed: int):
        self.faults = faults
        self.stats = stats
        self.upstream = upstream
        self.rng = np.random.default_rng(seed)
        self.next_free = 0.0  # when the simulated line is free again
        self.backlog = False  # data was waiting when the last piece went out
        self.rate = faults.baud / 10.0 if faults.baud else None

    def read_size(self) -> int:
        return max(16, int(self.rate * 0.005)) if self.rate else 65536

    def mangle(self, data: bytes) -> bytes:
        f = self.faults
        if not (f.ber or f.drop or f.dup):
            return data
        arr = np.frombuffer(data, dtype=np.uint8).copy()
        if f.ber:
            nflips = self.rng.binomial(arr.size * 8, f.ber)
            if nflips:
                pos = self.rng.integers(0, arr.size * 8, nflips)
                np.bitwise_xor.at(arr, pos // 8, (1 << (pos % 8)).astype(np.uint8))
                self._count("flips", int(nflips))
        if f.drop or f.dup:
            counts = np.ones(arr.size, dtype=np.int64)
            if f.drop:
                dropped = self.rng.random(arr.size) < f.drop
                counts[dropped] = 0
                self._count("drops", int(dropped.sum()))
            if f.dup:
                dupped = (self.rng.random(arr.size) < f.dup) & (counts == 1)
                counts[dupped] = 2
                self._count("dups", int(dupped.sum()))
            arr = np.repeat(arr, counts)
        return arr.tobytes()

    def _count(self, name: str, n: int) -> None:
        with self.stats.lock:
            setattr(self.stats, name, getattr(self.stats, name) + n)

    def pace(self, n: int, stop: threading.Event) -> None:
        now = time.monotonic()
        if self.rate:
            # while data was already waiting when the previous piece went out, the line never
            # idled: this piece follows it back to back (a late thread wake-up costs no line time);
            # otherwise the line was idle and the piece starts when it was read
            start = self.next_free if self.backlog else max(now, self.next_free)
            self.next_free = start + n / self.rate
            wait = self.next_free - now + self.faults.delay
        else:
            wait = self.faults.delay
        if wait > 0:
            stop.wait(wait)  # simulated transmission time, not synchronisation


def _write_all(fd: int, data: bytes, stop: threading.Event) -> None:
    view = memoryview(data)
    while view and not stop.is_set():
        _, w, _ = select.select([], [fd], [], 0.2)
        if w:
            view = view[os.write(fd, view) :]


def _pump(src: int, dst: int, pump: _Pump, stop: threading.Event, on_cut: object = None) -> None:
    """Copy src -> dst through the faults until EOF, an error or stop."""
    try:
        while not stop.is_set():
            r, _, _ = select.select([src], [], [], 0.2)
            if not r:
                continue
            data = os.read(src, pump.read_size())
            if not data:
                break
            with pump.stats.lock:
                if pump.upstream:
                    pump.stats.up += len(data)
                    total = pump.stats.up
                else:
                    pump.stats.down += len(data)
                    total = pump.stats.down
            mangle = pump.mangle if total > pump.faults.after else bytes
            cut = pump.upstream and pump.faults.cut_after is not None and pump.stats.cuts == 0
            if cut and total >= pump.faults.cut_after:  # type: ignore[operator]
                pump.stats.cuts += 1
                keep = len(data) - (total - pump.faults.cut_after)
                _write_all(dst, mangle(data[:keep]), stop)
                break
            pump.pace(len(data), stop)
            _write_all(dst, mangle(data), stop)
            pump.backlog = bool(select.select([src], [], [], 0)[0])
    except OSError:
        pass
    finally:
        stop.set()


class TcpRelay:
    def __init__(self, agent_port: int, faults: Faults = Faults(), down_faults: Faults | None = None):
        self.agent_port = agent_port
        self.faults = faults
        self.down_faults = faults if down_faults is None else down_faults
        self.stats = RelayStats()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[tuple[socket.socket, socket.socket, threading.Event]] = []
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except (TimeoutError, OSError):
                continue
            agent = socket.create_connection(("127.0.0.1", self.agent_port))
            n = self.stats.connections
            self.stats.connections += 1
            stop = threading.Event()
            self._conns.append((client, agent, stop))
            up = _Pump(self.faults, self.stats, True, self.faults.seed + 2 * n)
            down = _Pump(self.down_faults, self.stats, False, self.faults.seed + 2 * n + 1)
            for args in ((client.fileno(), agent.fileno(), up), (agent.fileno(), client.fileno(), down)):
                t = threading.Thread(target=_pump, args=(*args, stop), daemon=True)
                t.start()
                self._threads.append(t)
            threading.Thread(target=self._closer, args=(client, agent, stop), daemon=True).start()

    @staticmethod
    def _closer(client: socket.socket, agent: socket.socket, stop: threading.Event) -> None:
        stop.wait()
        for s in (client, agent):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        for _, _, stop in self._conns:
            stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for client, agent, _ in self._conns:
            client.close()
            agent.close()
        self.server.close()

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FdRelay:
    """Pumps between two file descriptors (e.g. two pty masters) with faults, both ways."""

    def __init__(self, fd_a: int, fd_b: int, faults: Faults = Faults()):
        self.stats = RelayStats()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(
                target=_pump, args=(a, b, _Pump(faults, self.stats, up, faults.seed + up), self._stop)
            )
            for a, b, up in ((fd_a, fd_b, True), (fd_b, fd_a, False))
        ]
        for t in self._threads:
            t.daemon = True
            t.start()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)


class ReplyDropRelay:
    """A TCP relay that decodes frames and drops the first RESULT answering a request of type
    ``request_type`` (one connection), to exercise the poll-and-cached-reply path exactly."""

    def __init__(self, agent_port: int, request_type: int):
        from edgekit.device_agents.protocol import FrameDecoder, MsgType, encode_frame

        self._decoder_cls, self._encode, self._result = FrameDecoder, encode_frame, MsgType.RESULT
        self.request_type = request_type
        self.agent_port = agent_port
        self.dropped: list[int] = []
        self._seq_types: dict[int, int] = {}
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        client, _ = self.server.accept()
        agent = socket.create_connection(("127.0.0.1", self.agent_port))
        self._sockets = (client, agent)
        threads = [
            threading.Thread(target=self._pump, args=(client, agent, True), daemon=True),
            threading.Thread(target=self._pump, args=(agent, client, False), daemon=True),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        decoder = self._decoder_cls()
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                for frame in decoder.feed(data):
                    if upstream:
                        self._seq_types.setdefault(frame.seq, frame.type)
                    elif (
                        frame.type == self._result
                        and not self.dropped
                        and self._seq_types.get(frame.seq) == self.request_type
                    ):
                        self.dropped.append(frame.seq)
                        continue
                    dst.sendall(self._encode(frame.type, frame.seq, frame.payload, frame.version))
        except OSError:
            pass
        finally:
            self._stop.set()
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ReplyDropRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
