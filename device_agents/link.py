"""Byte links (TCP socket, serial port, pty file descriptor) and the sender-side reliability layer.

A :class:`Link` moves bytes and nothing else: ``write(data)``, ``read(timeout) -> bytes`` (``b""``
when nothing arrived in time) and ``close()``; a closed or failed link raises :class:`LinkError`.
``byte_time`` is the seconds one byte takes on the wire (``10 / baud`` for 8N1 serial, 0 for TCP)
so that timeouts grow with frame sizes on slow lines.

:class:`Requester` is the host side of the request/reply exchange (stop-and-wait, one request in
flight): it sends a request frame and waits for ACK, RESULT or ERROR with the request's seq. With no
answer within ``ack_timeout`` plus the frame's transmission time it retransmits the frame; once
acked, it polls with a small POLL frame instead, so a long request (BENCH, LOAD) only costs a few
bytes of liveness checks and a lost reply is fetched again from the agent's cache. After
``retries`` unanswered transmissions in a row it raises :class:`LinkTimeout`.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import socket
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .errors import LinkError, LinkTimeout, ProtocolError, VersionMismatch, from_code
from .protocol import (
    DEFAULT_MAX_PAYLOAD,
    PROTOCOL_VERSION,
    Frame,
    FrameDecoder,
    MsgType,
    decode_message,
    encode_frame,
    frame_parts,
    message_parts,
)

READ_SIZE = 256 * 1024


class Link:
    """A bidirectional byte stream."""

    byte_time: float = 0.0
    description: str = "link"

    def write(self, data: bytes) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def write_parts(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write several buffers in order (links that can, avoid joining them)."""
        self.write(b"".join(parts))

    def read(self, timeout: float) -> bytes:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class SocketLink(Link):
    def __init__(self, sock: socket.socket, description: str = "tcp"):
        self.sock = sock
        self.description = description
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @classmethod
    def connect(cls, host: str, port: int, timeout: float) -> SocketLink:
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise LinkError(f"cannot connect to tcp://{host}:{port}: {exc.strerror or exc}") from None
        return cls(sock, f"tcp://{host}:{port}")

    def write(self, data: bytes) -> None:
        try:
            self.sock.settimeout(None)
            self.sock.sendall(data)
        except OSError as exc:
            raise LinkError(f"{self.description}: send failed: {exc.strerror or exc}") from None

    def write_parts(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        try:
            self.sock.settimeout(None)
            for part in parts:
                self.sock.sendall(part)
        except OSError as exc:
            raise LinkError(f"{self.description}: send failed: {exc.strerror or exc}") from None

    def read(self, timeout: float) -> bytes:
        try:
            self.sock.settimeout(max(timeout, 0.0))
            data = self.sock.recv(READ_SIZE)
        except (socket.timeout, BlockingIOError):  # noqa: UP041 - Python 3.9
            return b""
        except OSError as exc:
            raise LinkError(f"{self.description}: receive failed: {exc.strerror or exc}") from None
        if not data:
            raise LinkError(f"{self.description}: connection closed by the peer")
        return data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()


class FdLink(Link):
    """A raw file descriptor, e.g. the master side of a pseudo-terminal pair.

    A pty has small kernel buffers and blocks a writer whose peer does not read. If both ends write a long stream
    at once (a large INFER request retransmitted while the agent writes its reply), both would block for ever. So
    a write here also reads whatever is readable into ``inbound``, which the next ``read`` returns first: this
    end never stops reading, and the agent's writes always complete.
    """

    def __init__(self, fd: int, description: str = "pty", byte_time: float = 0.0, owns_fd: bool = True):
        self.fd = fd
        self.description = description
        self.byte_time = byte_time
        self.owns_fd = owns_fd
        self._closed = False
        self.inbound = bytearray()
        # Non-blocking: a write to a blocking pty waits until all of it fits, which is the deadlock to avoid.
        os.set_blocking(fd, False)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        stalled_since = time.monotonic()
        try:
            while view:
                readable, writable, _ = select.select([self.fd], [self.fd], [], 1.0)
                if readable:
                    self.inbound += self._read_available()
                n = 0
                if writable:
                    try:
                        n = os.write(self.fd, view[:READ_SIZE])
                    except BlockingIOError:
                        n = 0
                if n:
                    view = view[n:]
                    stalled_since = time.monotonic()
                elif time.monotonic() - stalled_since > 30.0:
                    raise LinkError(f"{self.description}: write stalled for 30 s")
        except (OSError, ValueError) as exc:
            raise LinkError(f"{self.description}: write failed: {exc}") from None

    def _read_available(self) -> bytes:
        try:
            data = os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return b""
        if not data:
            raise LinkError(f"{self.description}: closed by the peer")
        return data

    def read(self, timeout: float) -> bytes:
        if self.inbound:
            data = bytes(self.inbound)
            self.inbound.clear()
            return data
        try:
            readable, _, _ = select.select([self.fd], [], [], max(timeout, 0.0))
            if not readable:
                return b""
            return self._read_available()
        except LinkError:
            raise
        except (OSError, ValueError) as exc:
            raise LinkError(f"{self.description}: closed ({exc})") from None

    def close(self) -> None:
        if self.owns_fd and not self._closed:
            self._closed = True
            with contextlib.suppress(OSError):
                os.close(self.fd)


class SerialLink(Link):
    """A serial port through pyserial (imported here, only when a serial link is used).

    pyserial discards pending input when it opens a port, so whatever the peer sent before is lost:
    the requester's retransmitted HELLO is the handshake that gets both ends in step.
    """

    def __init__(self, device: str, baud: int):
        try:
            import serial
        except ImportError:
            raise LinkError("serial links need pyserial: pip install pyserial") from None
        self.description = f"serial://{device}?baud={baud}"
        self.byte_time = 10.0 / baud
        try:
            self.port = serial.Serial(device, baudrate=baud, timeout=0, write_timeout=None)
        except (serial.SerialException, OSError, ValueError) as exc:
            raise LinkError(f"cannot open serial port {device}: {exc}") from None
        self._serial_error: Any = serial.SerialException

    def write(self, data: bytes) -> None:
        # A real serial line does not block the writer when the peer stops reading (unread bytes are lost and
        # retransmitted); on a pty the host side (FdLink) drains while it writes, so both cannot block.
        try:
            self.port.write(data)
        except (self._serial_error, OSError) as exc:
            raise LinkError(f"{self.description}: write failed: {exc}") from None

    def read(self, timeout: float) -> bytes:
        try:
            fileno = self.port.fileno()
            readable, _, _ = select.select([fileno], [], [], max(timeout, 0.0))
            if not readable:
                return b""
            data = self.port.read(max(self.port.in_waiting, 1))
        except (self._serial_error, OSError, ValueError) as exc:
            raise LinkError(f"{self.description}: read failed: {exc}") from None
        return bytes(data)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.port.close()


@dataclass(frozen=True)
class RetryPolicy:
    """Sender-side timing: wait ``ack_timeout`` s (plus the frame's transmission time) for an answer,
    retransmit up to ``retries`` times in a row, then give up with LinkTimeout."""

    ack_timeout: float = 1.0
    retries: int = 8


Payload = Union[bytes, Sequence[Union[bytes, bytearray, memoryview]]]


@dataclass
class _InFlight:
    seq: int
    what: str
    frame: list[bytes | bytearray | memoryview]
    frame_len: int
    poll: bytes
    acked: bool = False
    misses: int = 0
    deadline: float = 0.0


@dataclass(frozen=True)
class Reply:
    header: dict[str, Any]
    blobs: list[memoryview]


class Requester:
    """Host side of the exchange: one request in flight, ack + retransmission + timeouts."""

    def __init__(self, link: Link, policy: RetryPolicy, max_payload: int = DEFAULT_MAX_PAYLOAD):
        self.link = link
        self.policy = policy
        self.decoder = FrameDecoder(max_payload=max_payload + 64 * 1024)
        self.seq = random.getrandbits(32)
        self.retransmissions = 0

    def next_seq(self) -> int:
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        return self.seq

    def call(
        self,
        msg_type: MsgType,
        header: dict[str, Any] | None = None,
        payload: bytes | Sequence[bytes | bytearray | memoryview] | None = None,
        *,
        ack_timeout: float | None = None,
        retries: int | None = None,
    ) -> Reply:
        """Send one request and return its RESULT; an ERROR reply raises the matching AgentError."""
        replies = self.pipeline([(msg_type, header, payload)], ack_timeout=ack_timeout, retries=retries)
        return next(iter(replies))

    def pipeline(
        self,
        requests: Iterable[tuple[MsgType, dict[str, Any] | None, Payload | None]],
        window: int = 1,
        *,
        ack_timeout: float | None = None,
        retries: int | None = None,
    ) -> Iterator[Reply]:
        """Send requests keeping up to ``window`` in flight; yield their RESULTs in request order.

        Each request has its own seq, ack, retransmission and poll timers; the agent executes them
        in arrival order. An ERROR reply raises at once (requests still in flight are abandoned:
        their late replies are ignored as stale).
        """
        base = self.policy.ack_timeout if ack_timeout is None else ack_timeout
        max_misses = self.policy.retries if retries is None else retries
        pending = iter(requests)
        inflight: dict[int, _InFlight] = {}
        order: deque[int] = deque()
        done: dict[int, Reply] = {}
        exhausted = False
        while True:
            while not exhausted and len(order) < window:
                try:
                    msg_type, header, payload = next(pending)
                except StopIteration:
                    exhausted = True
                    break
                # a frame queued behind unacknowledged ones reaches the peer only after them
                ahead = sum(o.frame_len for o in inflight.values() if not o.acked)
                st = self._start(msg_type, header, payload, base, ahead)
                inflight[st.seq] = st
                order.append(st.seq)
            if order and order[0] in done:
                yield done.pop(order.popleft())
                continue
            if not order:
                return
            now = time.monotonic()
            nearest = min(st.deadline for st in inflight.values())
            data = self.link.read(nearest - now) if nearest > now else b""
            if data:
                # bytes arriving show the line is alive (a long reply may be streaming in)
                now = time.monotonic()
                for st in inflight.values():
                    st.deadline = max(st.deadline, now + base + len(data) * self.link.byte_time)
                for frame in self.decoder.feed(data):
                    self._on_frame(frame, inflight, done, base)
                continue
            for st in list(inflight.values()):
                if time.monotonic() < st.deadline:
                    continue
                st.misses += 1
                if st.misses > max_misses:
                    raise LinkTimeout(
                        f"{self.link.description}: no answer to {st.what} after {st.misses} attempts "
                        f"({'acknowledged, then silent' if st.acked else 'never acknowledged'})"
                    )
                self.retransmissions += 1
                if st.acked:
                    self.link.write(st.poll)
                else:
                    self.link.write_parts(st.frame)
                sent = len(st.poll) if st.acked else st.frame_len
                st.deadline = time.monotonic() + base + 1.2 * sent * self.link.byte_time

    def _start(
        self,
        msg_type: MsgType,
        header: dict[str, Any] | None,
        payload: Payload | None,
        base: float,
        ahead: int = 0,
    ) -> _InFlight:
        if payload is None:
            parts: list[bytes | bytearray | memoryview] = message_parts(header or {})
        elif isinstance(payload, (bytes, bytearray, memoryview)):
            parts = [payload]
        else:
            parts = list(payload)
        seq = self.next_seq()
        frame = frame_parts(msg_type, seq, parts)
        frame_len = sum(memoryview(p).nbytes for p in frame)
        st = _InFlight(seq, MsgType.name_of(msg_type), frame, frame_len, encode_frame(MsgType.POLL, seq))
        self.link.write_parts(frame)
        st.deadline = time.monotonic() + base + 1.2 * (frame_len + ahead) * self.link.byte_time
        return st

    def _on_frame(
        self, frame: Frame, inflight: dict[int, _InFlight], done: dict[int, Reply], base: float
    ) -> None:
        st = inflight.get(frame.seq)
        if frame.version != PROTOCOL_VERSION or st is not None:
            result = self._handle(frame, frame.seq, st.what if st else "request")
        else:
            return  # stale reply or echo of an earlier exchange
        if result is None or st is None:
            return
        if result == "ack":
            st.acked, st.misses = True, 0
            st.deadline = time.monotonic() + base
        elif result == "nack":
            st.acked = False
            st.deadline = time.monotonic()  # resend the full request now
        else:
            assert isinstance(result, Reply)
            done[frame.seq] = result
            del inflight[frame.seq]

    def _handle(self, frame: Frame, seq: int, what: str) -> Reply | str | None:
        if frame.version != PROTOCOL_VERSION:
            raise VersionMismatch(
                f"the agent speaks protocol version {frame.version}, this host speaks {PROTOCOL_VERSION}; "
                "use an agent built by the same edgekit (edgekit agent build)"
            )
        if frame.seq != seq:
            return None  # stale reply or echo of an earlier exchange
        if frame.type == MsgType.ACK:
            return "ack"
        if frame.type == MsgType.NACK:
            return "nack"
        if frame.type not in (MsgType.RESULT, MsgType.ERROR):
            return None
        header, blobs = decode_message(frame.payload)
        if frame.type == MsgType.ERROR:
            code = header.get("code", "agent_error")
            message = header.get("message", "unknown error")
            raise from_code(str(code), f"{what}: {message}")
        return Reply(header, blobs)


__all__ = [
    "FdLink",
    "Link",
    "LinkError",
    "ProtocolError",
    "Reply",
    "Requester",
    "RetryPolicy",
    "SerialLink",
    "SocketLink",
]
