"""The edgekit agent wire protocol: frames, the byte-fed frame decoder, and the message codec.

Everything here is pure computation (no I/O), so it runs the same over serial, TCP and a pty, and
it is what the property tests hammer. ``docs/protocol.md`` is the long form of this docstring.

Frame (all integers little-endian)::

    offset size  field
    0      2     magic            b"\\xedK" (0xED 0x4B)
    2      1     version          PROTOCOL_VERSION (1)
    3      1     type             MsgType
    4      4     seq              uint32, chosen by the requester; a reply carries the request's seq
    8      4     length           uint32, payload bytes (<= the decoder's max_payload)
    12     4     header CRC32     zlib.crc32 of bytes 0..11
    16     N     payload
    16+N   4     frame CRC32      zlib.crc32 of bytes 0..16+N-1 (header and payload)

The header CRC lets the decoder reject a corrupted length at once instead of waiting for a payload
that never comes; the frame CRC protects the payload. A decoder scans for the magic, checks the
header CRC, the length limit and then the frame CRC; on any mismatch it drops one byte and scans on
(resynchronisation), counting what it dropped. Frames of another protocol version are decoded and
passed up, so the receiver can answer with a clear version error.

Payload of a message::

    4 bytes  uint32 J = length of the JSON header
    J bytes  UTF-8 JSON object (the message's fields; "blobs": [n0, n1, ...] lists the raw parts)
    n0 bytes blob 0, n1 bytes blob 1, ...   (raw bytes: tensor data, upload chunks)

Tensors are described in the JSON header by ``{"name", "dtype", "shape"}`` and travel as one raw
little-endian C-order blob each; never as text.

Reliability (ack, retransmission, timeouts) is the sender's job and lives in ``link.py``: every
request frame is answered at once with ACK(seq), later with RESULT(seq) or ERROR(seq); a sender
that hears nothing retransmits, one that was acked polls with POLL(seq); the receiver answers a
repeated seq from its cache instead of executing the request twice.
"""

from __future__ import annotations

import enum
import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import ProtocolError

MAGIC = b"\xedK"
PROTOCOL_VERSION = 1
HEADER = struct.Struct("<2sBBII")  # magic, version, type, seq, length
HEADER_SIZE = HEADER.size + 4  # plus the header CRC32
TRAILER_SIZE = 4
OVERHEAD = HEADER_SIZE + TRAILER_SIZE
DEFAULT_MAX_PAYLOAD = 8 * 1024 * 1024
_U32 = struct.Struct("<I")
MAX_JSON_HEADER = 1024 * 1024

# Tensor dtypes allowed on the wire (never object or structured dtypes).
WIRE_DTYPES = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "float16",
    "float32",
    "float64",
)


class MsgType(enum.IntEnum):
    """Message types. Requests are < 0x40, link control 0x40..0x7f, replies >= 0x80."""

    HELLO = 0x01
    AUTH = 0x02
    PUT_BEGIN = 0x03
    PUT_CHUNK = 0x04
    PUT_END = 0x05
    LOAD = 0x06
    INFER = 0x07
    BENCH = 0x08
    STATUS = 0x09
    DELETE = 0x0A
    BYE = 0x0B
    COMMIT = 0x0C
    ACK = 0x40
    NACK = 0x41
    POLL = 0x42
    RESULT = 0x80
    ERROR = 0x81

    @classmethod
    def name_of(cls, value: int) -> str:
        try:
            return cls(value).name
        except ValueError:
            return f"0x{value:02x}"


REQUEST_TYPES = frozenset(t for t in MsgType if t < 0x40)
REPLY_TYPES = frozenset({MsgType.RESULT, MsgType.ERROR})


@dataclass(frozen=True)
class Frame:
    type: int
    seq: int
    payload: bytes | memoryview = b""
    version: int = PROTOCOL_VERSION


def _nbytes(part: bytes | bytearray | memoryview) -> int:
    return part.nbytes if isinstance(part, memoryview) else len(part)


def frame_parts(
    msg_type: int,
    seq: int,
    payload: Sequence[bytes | bytearray | memoryview] = (),
    version: int = PROTOCOL_VERSION,
) -> list[bytes | bytearray | memoryview]:
    """One frame as a list of buffers (header, the payload's parts, CRC), without joining them:
    a large payload is sent without being copied. Raises ProtocolError for values that do not fit."""
    if not 0 <= seq <= 0xFFFFFFFF:
        raise ProtocolError(f"sequence number {seq} does not fit 32 bits")
    if not 0 <= msg_type <= 0xFF or not 0 <= version <= 0xFF:
        raise ProtocolError(f"message type {msg_type} or version {version} does not fit a byte")
    head = HEADER.pack(MAGIC, version, msg_type, seq, sum(_nbytes(p) for p in payload))
    head += _U32.pack(zlib.crc32(head))
    crc = zlib.crc32(head)
    for part in payload:
        crc = zlib.crc32(part, crc)
    return [head, *payload, _U32.pack(crc)]


def encode_frame(
    msg_type: int, seq: int, payload: bytes | bytearray | memoryview = b"", version: int = PROTOCOL_VERSION
) -> bytes:
    """One frame's bytes. Raises ProtocolError for values that do not fit the format."""
    return b"".join(frame_parts(msg_type, seq, [payload], version))


@dataclass
class DecoderStats:
    frames: int = 0
    skipped_bytes: int = 0
    bad_header: int = 0
    bad_crc: int = 0
    oversize: int = 0

    def errors(self) -> int:
        return self.bad_header + self.bad_crc + self.oversize


@dataclass
class FrameDecoder:
    """Byte-fed frame decoder: ``feed(data) -> [Frame, ...]``. No I/O, never raises on bad input.

    Garbage, corrupted headers, oversize lengths and CRC mismatches are skipped (counted in
    ``stats``); decoding resumes at the next magic. After every ``feed`` the internal buffer holds
    less than one maximal frame (``max_frame_size``), whatever was fed.
    """

    max_payload: int = DEFAULT_MAX_PAYLOAD
    stats: DecoderStats = field(default_factory=DecoderStats)
    _buf: bytearray = field(default_factory=bytearray, repr=False)
    # a large frame whose header was accepted is collected as a list of pieces and joined once
    _pieces: list[bytes] = field(default_factory=list, repr=False)
    _pieces_len: int = 0
    _need: int = 0

    BIG = 64 * 1024  # payloads from this size on take the collecting path

    @property
    def max_frame_size(self) -> int:
        return self.max_payload + OVERHEAD

    @property
    def buffered(self) -> int:
        return len(self._buf) + self._pieces_len

    def reset(self) -> None:
        self._buf.clear()
        self._pieces.clear()
        self._pieces_len = self._need = 0

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        if not self._need:
            self._buf += data
            return self._scan()
        self._pieces.append(bytes(data))
        self._pieces_len += len(self._pieces[-1])
        if len(self._buf) + self._pieces_len < self._need:
            return []
        whole = b"".join([self._buf, *self._pieces])  # the frame's only copy
        end = self._need - TRAILER_SIZE
        self._pieces.clear()
        self._pieces_len = self._need = 0
        view = memoryview(whole)
        (crc,) = _U32.unpack_from(view, end)
        frames: list[Frame] = []
        if zlib.crc32(view[:end]) == crc:
            _, version, msg_type, seq, _ = HEADER.unpack_from(view, 0)
            frames.append(Frame(msg_type, seq, view[HEADER_SIZE:end], version))
            self.stats.frames += 1
            self._buf = bytearray(view[end + TRAILER_SIZE :])
        else:
            self.stats.bad_crc += 1
            self.stats.skipped_bytes += 1
            self._buf = bytearray(view[1:])
        return frames + self._scan()

    def _scan(self) -> list[Frame]:
        buf = self._buf
        frames: list[Frame] = []
        while buf:
            start = buf.find(MAGIC)
            if start < 0:
                keep = 1 if buf[-1] == MAGIC[0] else 0  # a magic may be split across feeds
                self._skip(len(buf) - keep)
                break
            if start:
                self._skip(start)
            if len(buf) < HEADER_SIZE:
                break
            _, version, msg_type, seq, length = HEADER.unpack_from(buf, 0)
            (hcrc,) = _U32.unpack_from(buf, HEADER.size)
            if zlib.crc32(memoryview(buf)[: HEADER.size]) != hcrc:
                self.stats.bad_header += 1
                self._skip(1)
                continue
            if length > self.max_payload:
                self.stats.oversize += 1
                self._skip(1)
                continue
            end = HEADER_SIZE + length
            if len(buf) < end + TRAILER_SIZE:
                if length >= self.BIG:
                    self._need = end + TRAILER_SIZE
                break
            view = memoryview(buf)
            try:
                (crc,) = _U32.unpack_from(view, end)
                ok = zlib.crc32(view[:end]) == crc
                payload = bytes(view[HEADER_SIZE:end]) if ok else b""
            finally:
                view.release()
            if not ok:
                self.stats.bad_crc += 1
                self._skip(1)
                continue
            del buf[: end + TRAILER_SIZE]
            self.stats.frames += 1
            frames.append(Frame(msg_type, seq, payload, version))
        return frames

    def _skip(self, n: int) -> None:
        if n > 0:
            del self._buf[:n]
            self.stats.skipped_bytes += n


# ---------------------------------------------------------------------------------------------------
# messages: JSON header + raw blobs


def message_parts(
    header: dict[str, Any], blobs: Sequence[bytes | bytearray | memoryview] = ()
) -> list[bytes | bytearray | memoryview]:
    """A message payload as buffers: length-prefixed JSON header, then the raw blobs it lists."""
    if "blobs" in header:
        raise ProtocolError("'blobs' is reserved in message headers")
    head = dict(header)
    head["blobs"] = [_nbytes(b) for b in blobs]
    try:
        text = json.dumps(head, separators=(",", ":"), allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"message header is not JSON-serialisable: {exc}") from None
    return [_U32.pack(len(text)) + text, *blobs]


def encode_message(header: dict[str, Any], blobs: Sequence[bytes | bytearray | memoryview] = ()) -> bytes:
    """A message payload (see :func:`message_parts`) as one bytes object."""
    return b"".join(message_parts(header, blobs))


def decode_message(payload: bytes | memoryview) -> tuple[dict[str, Any], list[memoryview]]:
    """Inverse of :func:`encode_message`; raises ProtocolError for anything malformed."""
    payload = memoryview(payload).cast("B")
    if len(payload) < 4:
        raise ProtocolError("message payload shorter than its header length field")
    (jlen,) = _U32.unpack_from(payload, 0)
    if jlen > MAX_JSON_HEADER or 4 + jlen > len(payload):
        raise ProtocolError(f"message JSON header length {jlen} exceeds the payload")
    try:
        header = json.loads(bytes(payload[4 : 4 + jlen]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"message JSON header is invalid: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("message JSON header is not an object")
    sizes = header.pop("blobs", [])
    if not isinstance(sizes, list) or not all(isinstance(n, int) and n >= 0 for n in sizes):
        raise ProtocolError("message 'blobs' must be a list of non-negative sizes")
    view = payload
    pos = 4 + jlen
    blobs = []
    for n in sizes:
        if pos + n > len(payload):
            raise ProtocolError("message blobs run past the end of the payload")
        blobs.append(view[pos : pos + n])
        pos += n
    if pos != len(payload):
        raise ProtocolError(f"message has {len(payload) - pos} trailing bytes")
    return header, blobs


def tensor_to_wire(name: str, array: np.ndarray) -> tuple[dict[str, Any], bytes]:
    """(descriptor, raw little-endian C-order bytes) of one tensor."""
    arr = np.asarray(array)
    dtype = arr.dtype.name
    if dtype not in WIRE_DTYPES:
        raise ProtocolError(
            f"tensor {name!r}: dtype {arr.dtype} cannot travel (allowed: {', '.join(WIRE_DTYPES)})"
        )
    little = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    return {"name": name, "dtype": dtype, "shape": list(arr.shape)}, little.tobytes()


def tensor_from_wire(desc: Any, blob: bytes | memoryview) -> np.ndarray:
    """The array a descriptor and blob describe (a copy, native byte order)."""
    if not isinstance(desc, dict):
        raise ProtocolError("tensor descriptor is not an object")
    dtype, shape = desc.get("dtype"), desc.get("shape")
    if dtype not in WIRE_DTYPES:
        raise ProtocolError(f"tensor dtype {dtype!r} is not one of {', '.join(WIRE_DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ProtocolError(f"tensor shape {shape!r} is not a list of non-negative integers")
    dt = np.dtype(dtype).newbyteorder("<")
    count = 1
    for d in shape:
        count *= d
    nbytes = memoryview(blob).nbytes
    if count * dt.itemsize != nbytes:
        raise ProtocolError(
            f"tensor {desc.get('name')!r}: shape {shape} of {dtype} needs {count * dt.itemsize} bytes, got {nbytes}"
        )
    return np.frombuffer(blob, dtype=dt).reshape(shape).astype(np.dtype(dtype), copy=True)


def tensors_to_message(header: dict[str, Any], tensors: Sequence[tuple[str, np.ndarray]]) -> bytes:
    """A message whose blobs are the given tensors, described in ``header["tensors"]``."""
    descs, blobs = [], []
    for name, arr in tensors:
        desc, blob = tensor_to_wire(name, arr)
        descs.append(desc)
        blobs.append(blob)
    return encode_message({**header, "tensors": descs}, blobs)


def tensors_from_message(header: dict[str, Any], blobs: Sequence[memoryview]) -> list[tuple[str, np.ndarray]]:
    descs = header.get("tensors", [])
    if not isinstance(descs, list) or len(descs) != len(blobs):
        raise ProtocolError("message 'tensors' does not match its blobs")
    out = []
    for desc, blob in zip(descs, blobs):  # noqa: B905 - lengths checked above; runs on Python 3.9
        name = desc.get("name") if isinstance(desc, dict) else None
        if not isinstance(name, str):
            raise ProtocolError("tensor descriptor has no name")
        out.append((name, tensor_from_wire(desc, blob)))
    return out
