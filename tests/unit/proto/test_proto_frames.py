"""The frame codec's bounds: what a hostile stream cannot make the decoder do."""

from __future__ import annotations

import hashlib

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto.frames import (
    MAX_CHUNK_BYTES,
    MAX_FRAME_BYTES,
    Chunk,
    End,
    FrameDecoder,
    FrameError,
    Hello,
    UploadReader,
    chunk_head,
    encode,
)

HELLO = Hello(bundle="b1", node="n1", cluster="c1", incident="i1", reason="manual", agent="0.1.0",
              created=1796117903, plan="replay/v1")


def test_a_full_chunk_passes_and_a_byte_more_is_refused() -> None:
    dec = FrameDecoder()
    frames = list(dec.feed(encode(Chunk(0, b"x" * MAX_CHUNK_BYTES))))
    assert len(frames) == 1 and len(frames[0].data) == MAX_CHUNK_BYTES
    big = msgpack.packb({"t": "chunk", "v": 1, "seq": 0, "data": b"x" * (MAX_CHUNK_BYTES + 1)}, use_bin_type=True)
    with pytest.raises(FrameError) as info:
        list(FrameDecoder().feed(big))
    assert info.value.code == "frame_too_large"


def test_an_oversize_frame_is_refused_once_the_bound_is_buffered() -> None:
    # A str header announcing 64 MiB: the decoder holds at most one frame's bound of it, then refuses.
    head = b"\x81\xa1t" + b"\xdb" + (64 << 20).to_bytes(4, "big")
    dec = FrameDecoder()
    with pytest.raises(FrameError) as info:
        for _ in range(64):
            list(dec.feed(head + b"a" * (1 << 20)))
            head = b""
    assert info.value.code == "frame_too_large"
    assert dec.pending <= MAX_FRAME_BYTES


def test_many_small_frames_in_one_feed_larger_than_the_frame_bound() -> None:
    # A feed that holds the end of one big frame and the start of the next must not trip the bound.
    one = encode(Chunk(0, b"a" * (MAX_CHUNK_BYTES - 10)))
    two = encode(Chunk(1, b"b" * (MAX_CHUNK_BYTES - 10)))
    stream = encode(HELLO) + one + two
    reader = UploadReader()
    got = reader.feed(stream[:100]) + reader.feed(stream[100:])
    assert [type(f).__name__ for f in got] == ["Hello", "Chunk", "Chunk"]


def test_hello_fields_are_typed() -> None:
    doc = {"t": "hello", "v": 1, **HELLO.to_json()}
    doc["created"] = "yesterday"
    with pytest.raises(FrameError, match="created"):
        list(FrameDecoder().feed(msgpack.packb(doc)))
    doc = {"t": "hello", "v": 1, **HELLO.to_json(), "node": "x" * 300}
    with pytest.raises(FrameError, match="longer"):
        list(FrameDecoder().feed(msgpack.packb(doc)))
    doc = {"t": "hello", "v": 1, **HELLO.to_json()}
    del doc["cluster"]
    with pytest.raises(FrameError, match="cluster"):
        list(FrameDecoder().feed(msgpack.packb(doc)))


def test_bool_is_not_an_integer() -> None:
    with pytest.raises(FrameError):
        list(FrameDecoder().feed(msgpack.packb({"t": "end", "v": True, "bytes": 0, "sha256": "0" * 64})))
    with pytest.raises(FrameError):
        list(FrameDecoder().feed(msgpack.packb({"t": "end", "v": 1, "bytes": False, "sha256": "0" * 64})))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_give_frames_or_a_frame_error(raw: bytes) -> None:
    reader = UploadReader()
    try:
        reader.feed(raw)
    except FrameError:
        pass


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=6),
       st.integers(min_value=1, max_value=5000))
def test_any_split_of_a_stream_gives_the_same_frames(chunks: list[bytes], piece: int) -> None:
    body = b"".join(chunks)
    frames = [HELLO] + [Chunk(i, c) for i, c in enumerate(chunks)] + [End(len(body), hashlib.sha256(body).hexdigest())]
    raw = b"".join(encode(f) for f in frames)
    reader = UploadReader()
    got = []
    for i in range(0, len(raw), piece):
        got.extend(reader.feed(raw[i:i + piece]))
    assert got == frames and reader.finished


def test_hello_json_round_trip_and_unknown_keys() -> None:
    doc = HELLO.to_json() | {"future": 1}
    assert Hello.from_json(doc) == HELLO
    with pytest.raises(FrameError):
        Hello.from_json(["not", "a", "map"])


def _stream(*frames: object) -> bytes:
    return b"".join(encode(f) for f in frames)  # type: ignore[arg-type]


@pytest.mark.parametrize("frames, code", [
    ((HELLO, Chunk(0, b""), End(0, hashlib.sha256(b"").hexdigest())), "empty_chunk"),
    ((HELLO, Chunk(0, b"a"), Chunk(1, b""), End(1, hashlib.sha256(b"a").hexdigest())), "empty_chunk"),
    ((HELLO, End(0, hashlib.sha256(b"").hexdigest())), "empty_bundle"),
])
def test_frames_without_bytes_are_refused(frames: tuple, code: str) -> None:
    with pytest.raises(FrameError) as info:
        UploadReader().feed(_stream(*frames))
    assert info.value.code == code


@pytest.mark.parametrize("raw, why", [(b"\xc1", "0xc1"), (b"\x91" * 2000, "nested too deep")])
def test_not_msgpack_names_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(FrameError) as info:
        list(FrameDecoder().feed(raw))
    assert why in str(info.value)


@pytest.mark.parametrize("header", [b"\xc6\xff\xff\xff\xff", b"\xda\xff\xff", b"\xdb\x00\x10\x00\x00"])
def test_a_header_announcing_too_much_is_frame_too_large_at_once(header: bytes) -> None:
    # A chunk's map whose last value announces 4 GiB (bin32), 64 KiB (str16), 1 MiB (str32).
    raw = b"\x84" + msgpack.packb({"t": "chunk", "v": 1, "seq": 0})[1:] + msgpack.packb("data") + header + b"x" * 10
    for piece in (len(raw), 3):
        dec = FrameDecoder()
        with pytest.raises(FrameError) as info:
            for i in range(0, len(raw), piece):
                list(dec.feed(raw[i:i + piece]))
        assert info.value.code == "frame_too_large"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**63 - 1),
       st.sampled_from([1, 2, 255, 256, 257, 65535, 65536, 65537, MAX_CHUNK_BYTES]))
def test_a_chunk_head_and_its_data_are_the_canonical_chunk_frame(seq: int, size: int) -> None:
    # Senders write the head and the data as they are (no packed copy): byte for byte the encoding,
    # across msgpack's int widths for seq and its bin8 / bin16 / bin32 data headers.
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert chunk_head(seq, size) + data == encode(Chunk(seq, data))


def test_a_chunk_head_of_an_impossible_size_is_refused() -> None:
    for size in (-1, 2**32):
        with pytest.raises(ValueError):
            chunk_head(0, size)
