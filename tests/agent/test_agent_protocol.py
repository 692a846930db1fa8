"""The frame decoder and message codec: property tests on random and mutated byte streams."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from edgekit.device_agents.errors import ProtocolError
from edgekit.device_agents.protocol import (
    HEADER_SIZE,
    MAGIC,
    OVERHEAD,
    WIRE_DTYPES,
    Frame,
    FrameDecoder,
    MsgType,
    decode_message,
    encode_frame,
    encode_message,
    tensor_from_wire,
    tensor_to_wire,
    tensors_from_message,
    tensors_to_message,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MAX = 512  # small maximum payload so that oversize frames are cheap to generate

frames_st = st.lists(
    st.builds(
        Frame,
        type=st.sampled_from(list(MsgType)),
        seq=st.integers(0, 2**32 - 1),
        payload=st.binary(max_size=MAX),
    ),
    min_size=1,
    max_size=8,
)


def feed_in_pieces(dec: FrameDecoder, data: bytes, cuts: list[int]) -> list[Frame]:
    out: list[Frame] = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for lo, hi in zip(points, points[1:], strict=False):
        out += dec.feed(data[lo:hi])
        assert dec.buffered < dec.max_frame_size  # bounded buffering after every feed
    return out


def test_encode_layout_matches_the_spec() -> None:
    raw = encode_frame(MsgType.HELLO, 0x01020304, b"xyz")
    assert raw[:2] == MAGIC and raw[2] == 1 and raw[3] == MsgType.HELLO
    assert raw[4:8] == bytes([4, 3, 2, 1]) and raw[8:12] == (3).to_bytes(4, "little")
    assert int.from_bytes(raw[12:16], "little") == zlib.crc32(raw[:12])
    assert raw[16:19] == b"xyz"
    assert int.from_bytes(raw[19:], "little") == zlib.crc32(raw[:19])
    assert len(raw) == 3 + OVERHEAD


def decoder(collect_big: bool) -> FrameDecoder:
    """A decoder; with ``collect_big`` every payload of 16+ bytes takes the large-frame path."""
    dec = FrameDecoder(max_payload=MAX)
    if collect_big:
        dec.BIG = 16
    return dec


@settings(deadline=None)  # timing on a loaded CI machine must not fail a property
@given(frames_st, st.lists(st.integers(0, 10**6), max_size=20), st.booleans())
def test_roundtrip_any_split(frames: list[Frame], cuts: list[int], collect_big: bool) -> None:
    data = b"".join(encode_frame(f.type, f.seq, f.payload) for f in frames)
    dec = decoder(collect_big)
    assert feed_in_pieces(dec, data, cuts) == frames
    assert dec.stats.errors() == 0 and dec.buffered == 0


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096), st.lists(st.integers(0, 10**6), max_size=20), st.booleans())
def test_random_bytes_never_raise_and_stay_bounded(data: bytes, cuts: list[int], collect_big: bool) -> None:
    dec = decoder(collect_big)
    try:
        frames = feed_in_pieces(dec, data, cuts)
    except ProtocolError:
        frames = []
    for f in frames:  # anything accepted is a well-formed frame
        assert len(f.payload) <= MAX


@st.composite
def mutated_stream(draw: st.DrawFn) -> tuple[bytes, list[Frame]]:
    """Frames with garbage between them and mutations (flips, insertions, deletions) in some of them;
    returns the stream and the frames that were left intact, in order."""
    frames = draw(frames_st)
    parts: list[bytes] = []
    intact: list[Frame] = []
    for f in frames:
        raw = bytearray(encode_frame(f.type, f.seq, f.payload))
        parts.append(draw(st.binary(max_size=40)).replace(MAGIC, b"\x00\x00"))
        kind = draw(st.sampled_from(["none", "none", "flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(1 if kind == "insert" else 0, len(raw) - 1))
        if kind == "flip":
            raw[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            inserted = draw(st.binary(min_size=1, max_size=8))
            raw[pos:pos] = inserted
            if pos == 1 and inserted.endswith(MAGIC[:1]):
                intact.append(f)  # junk, then the whole frame again: the magic's first byte starts it anew
        elif kind == "delete":
            del raw[pos : pos + draw(st.integers(1, 8))]
        elif kind == "truncate":
            del raw[max(pos, 1) :]
        else:
            intact.append(f)
        parts.append(bytes(raw))
    return b"".join(parts), intact


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_stream(), st.lists(st.integers(0, 10**6), max_size=10), st.booleans())
def test_resync_recovers_every_intact_frame(
    stream: tuple[bytes, list[Frame]], cuts: list[int], collect_big: bool
) -> None:
    data, intact = stream
    dec = decoder(collect_big)
    assert feed_in_pieces(dec, data, cuts) == intact


def test_oversize_frame_is_skipped_and_counted() -> None:
    big = encode_frame(MsgType.PUT_CHUNK, 1, b"x" * (MAX + 1))
    small = encode_frame(MsgType.STATUS, 2, b"ok")
    dec = FrameDecoder(max_payload=MAX)
    frames = dec.feed(big + small)
    assert frames == [Frame(MsgType.STATUS, 2, b"ok")]
    assert dec.stats.oversize == 1 and dec.buffered == 0


def test_corrupt_length_does_not_stall_the_decoder() -> None:
    raw = bytearray(encode_frame(MsgType.HELLO, 1, b"a" * 100))
    raw[9] ^= 0x40  # length field: the header CRC catches it at once
    good = encode_frame(MsgType.HELLO, 2, b"b")
    dec = FrameDecoder(max_payload=1 << 20)
    assert dec.feed(bytes(raw) + good) == [Frame(MsgType.HELLO, 2, b"b")]
    assert dec.stats.bad_header >= 1


def test_other_protocol_version_is_passed_up() -> None:
    dec = FrameDecoder()
    (frame,) = dec.feed(encode_frame(MsgType.HELLO, 5, b"", version=7))
    assert frame.version == 7


@settings(deadline=None)  # timing on a loaded CI machine must not fail a property
@given(st.binary(max_size=300))
def test_decode_message_only_raises_protocol_errors(data: bytes) -> None:
    try:
        header, blobs = decode_message(data)
    except ProtocolError:
        return
    assert isinstance(header, dict) and all(isinstance(b, memoryview) for b in blobs)


@settings(deadline=None)  # timing on a loaded CI machine must not fail a property
@given(
    st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4),
    st.lists(st.binary(max_size=64), max_size=4),
)
def test_message_roundtrip(header: dict[str, object], blobs: list[bytes]) -> None:
    header.pop("blobs", None)
    got, got_blobs = decode_message(encode_message(header, blobs))
    assert got == header and [bytes(b) for b in got_blobs] == blobs


@settings(deadline=None)  # timing on a loaded CI machine must not fail a property
@given(st.sampled_from(WIRE_DTYPES), st.lists(st.integers(0, 4), max_size=4), st.booleans())
def test_tensor_roundtrip_is_raw_little_endian(dtype: str, shape: list[int], big_endian: bool) -> None:
    rng = np.random.default_rng(len(shape))
    arr = (rng.standard_normal(shape) * 100).astype(dtype)
    if big_endian:
        arr = arr.astype(arr.dtype.newbyteorder(">"))
    desc, blob = tensor_to_wire("t", arr)
    assert blob == np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    back = tensor_from_wire(desc, blob)
    np.testing.assert_array_equal(back, arr)
    assert back.dtype == np.dtype(dtype) and back.shape == tuple(shape)


def test_tensor_message_roundtrip_and_bad_descriptors() -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, -2], np.int8)
    header, blobs = decode_message(tensors_to_message({"k": 1}, [("a", a), ("b", b)]))
    (na, ra), (nb, rb) = tensors_from_message(header, blobs)
    assert (na, nb) == ("a", "b") and header["k"] == 1
    np.testing.assert_array_equal(ra, a)
    np.testing.assert_array_equal(rb, b)
    with pytest.raises(ProtocolError, match="needs 24 bytes"):
        tensor_from_wire({"name": "a", "dtype": "float32", "shape": [2, 3]}, b"\x00" * 20)
    with pytest.raises(ProtocolError, match="dtype"):
        tensor_from_wire({"name": "a", "dtype": "object", "shape": [1]}, b"\x00" * 8)
    with pytest.raises(ProtocolError, match="cannot travel"):
        tensor_to_wire("s", np.array(["x"]))


def test_header_size_constant() -> None:
    assert HEADER_SIZE == 16
