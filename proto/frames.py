"""The upload frames of ``proto/SPEC.md``: ``hello``, ``chunk``, ``end`` as msgpack maps.

Encoding is canonical (keys in the order SPEC.md lists them, msgpack's smallest encodings, ``str`` for
text and ``bin`` for data), so the golden vectors in ``proto/vectors/`` re-encode byte for byte.
Decoding is bounded: one frame never exceeds :data:`MAX_FRAME_BYTES`, map keys must be strings,
containers inside a frame are refused, unknown keys are ignored, an unknown major version is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import msgpack

__all__ = [
    "MAJOR",
    "MAX_CHUNK_BYTES",
    "MAX_FRAME_BYTES",
    "MINOR",
    "Chunk",
    "End",
    "Frame",
    "FrameDecoder",
    "FrameError",
    "Hello",
    "UnsupportedVersion",
    "UploadReader",
    "chunk_head",
    "encode",
]

MAJOR = 1
MINOR = 1
#: The largest ``data`` of one chunk frame.
MAX_CHUNK_BYTES = 1 << 20
#: A chunk frame at its largest plus room for its map header and keys.
MAX_FRAME_BYTES = MAX_CHUNK_BYTES + 1024
#: Text fields of ``hello``: short, printable; their grammar is checked by ``proto.keys``.
MAX_TEXT = 256
_HEX64 = re.compile(r"[0-9a-f]{64}")


class FrameError(ValueError):
    """A frame that breaks SPEC.md; ``code`` is the machine-readable reason the collector answers."""

    code = "malformed"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


class UnsupportedVersion(FrameError):
    code = "unsupported_version"


@dataclass(frozen=True, slots=True)
class Hello:
    """The first frame: who sends which bundle. ``created`` is the capture's start, Unix seconds UTC."""

    bundle: str
    node: str
    cluster: str
    incident: str
    reason: str
    agent: str
    created: int
    plan: str = ""

    def to_json(self) -> dict[str, object]:
        """The hello as a JSON object (the spool's sidecar uses the same keys)."""
        return {"bundle": self.bundle, "node": self.node, "cluster": self.cluster, "incident": self.incident,
                "reason": self.reason, "agent": self.agent, "created": self.created, "plan": self.plan}

    @classmethod
    def from_json(cls, doc: object) -> Hello:
        """A hello from a mapping with the keys of :meth:`to_json` (unknown keys ignored)."""
        if not isinstance(doc, dict):
            raise FrameError("hello: expected a map")
        return _hello(doc)


@dataclass(frozen=True, slots=True)
class Chunk:
    seq: int
    data: bytes


@dataclass(frozen=True, slots=True)
class End:
    bytes: int
    sha256: str


Frame = Hello | Chunk | End

_HELLO_TEXT = ("bundle", "node", "cluster", "incident", "reason", "agent")


def encode(frame: Frame) -> bytes:
    """The canonical msgpack encoding of one frame."""
    if isinstance(frame, Hello):
        doc: dict[str, object] = {"t": "hello", "v": MAJOR}
        for k in _HELLO_TEXT:
            doc[k] = getattr(frame, k)
        doc["created"] = frame.created
        doc["plan"] = frame.plan
    elif isinstance(frame, Chunk):
        doc = {"t": "chunk", "v": MAJOR, "seq": frame.seq, "data": bytes(frame.data)}
    elif isinstance(frame, End):
        doc = {"t": "end", "v": MAJOR, "bytes": frame.bytes, "sha256": frame.sha256}
    else:
        raise TypeError(f"not a frame: {type(frame).__name__}")
    return msgpack.packb(doc, use_bin_type=True)


_CHUNK_KEYS = msgpack.packb("t") + msgpack.packb("chunk") + msgpack.packb("v") + msgpack.packb(MAJOR) + msgpack.packb("seq")
_DATA_KEY = msgpack.packb("data")


def chunk_head(seq: int, size: int) -> bytes:
    """The bytes of ``encode(Chunk(seq, data))`` before ``data`` (of ``size`` bytes).

    A sender writes the head and then the data as they are, instead of packing a copy of every
    chunk: ``chunk_head(seq, len(d)) + d == encode(Chunk(seq, d))``, byte for byte.
    """
    if size < 0 or size > 0xFFFFFFFF:
        raise ValueError(f"a chunk of {size} bytes")
    if size < 0x100:
        bin_head = b"\xc4" + size.to_bytes(1, "big")
    elif size < 0x10000:
        bin_head = b"\xc5" + size.to_bytes(2, "big")
    else:
        bin_head = b"\xc6" + size.to_bytes(4, "big")
    return b"\x84" + _CHUNK_KEYS + msgpack.packb(seq) + _DATA_KEY + bin_head


def _text(doc: dict, key: str, required: bool = True) -> str:
    val = doc.get(key)
    if val is None and not required:
        return ""
    if not isinstance(val, str):
        raise FrameError(f"hello: {key!r} must be a string")
    if len(val) > MAX_TEXT:
        raise FrameError(f"hello: {key!r} longer than {MAX_TEXT} characters")
    return val


def _uint(doc: dict, key: str, frame: str) -> int:
    val = doc.get(key)
    if not isinstance(val, int) or isinstance(val, bool) or val < 0:
        raise FrameError(f"{frame}: {key!r} must be a non-negative integer")
    return val


def _hello(doc: dict) -> Hello:
    vals = {k: _text(doc, k) for k in _HELLO_TEXT}
    return Hello(**vals, created=_uint(doc, "created", "hello"), plan=_text(doc, "plan", required=False))


def decode_map(doc: object) -> Frame:
    """One unpacked msgpack object to a frame, or :class:`FrameError`."""
    if not isinstance(doc, dict):
        raise FrameError(f"a frame must be a map, got {type(doc).__name__}")
    for val in doc.values():
        if isinstance(val, (dict, list, tuple)):
            raise FrameError("frame values must be scalars (no nested maps or arrays)")
    v = doc.get("v")
    if not isinstance(v, int) or isinstance(v, bool):
        raise FrameError("a frame needs an integer 'v' (the major version)")
    if v != MAJOR:
        raise UnsupportedVersion(f"protocol major version {v} is not supported (this side speaks {MAJOR})")
    t = doc.get("t")
    if t == "hello":
        return _hello(doc)
    if t == "chunk":
        data = doc.get("data")
        if not isinstance(data, bytes):
            raise FrameError("chunk: 'data' must be bin")
        if len(data) > MAX_CHUNK_BYTES:
            raise FrameError(f"chunk: 'data' larger than {MAX_CHUNK_BYTES} bytes")
        return Chunk(seq=_uint(doc, "seq", "chunk"), data=data)
    if t == "end":
        digest = doc.get("sha256")
        if not isinstance(digest, str) or not _HEX64.fullmatch(digest):
            raise FrameError("end: 'sha256' must be 64 lower-case hex digits")
        return End(bytes=_uint(doc, "bytes", "end"), sha256=digest)
    raise FrameError(f"unknown frame type {t!r}", code="unknown_frame")


_WHY: dict[type, str] = {
    msgpack.FormatError: "a byte that starts no msgpack value (0xc1)",
    msgpack.StackError: "values nested too deep",
}


#: How much of an incomplete frame is scanned for a str or bin header beyond the bounds.
_HEAD = 8192
_FIXED = {0xc0: 0, 0xc2: 0, 0xc3: 0, 0xca: 4, 0xcb: 8, 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8,
          0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}
_SIZED = {0xc4: (1, MAX_CHUNK_BYTES), 0xc5: (2, MAX_CHUNK_BYTES), 0xc6: (4, MAX_CHUNK_BYTES),
          0xd9: (1, MAX_TEXT * 4), 0xda: (2, MAX_TEXT * 4), 0xdb: (4, MAX_TEXT * 4)}


def _oversize_header(head: bytes) -> str | None:
    """A str or bin header in a frame's first bytes that announces more than a frame may carry.

    msgpack checks ``max_bin_len`` only once the whole value is buffered, so a header announcing
    4 GiB would otherwise wait for bytes and end as ``truncated``. Only a flat map is walked (the
    frames' shape); anything else is left to msgpack.
    """
    if not head:
        return None
    b0 = head[0]
    if 0x80 <= b0 <= 0x8f:
        n, i = (b0 & 0x0f) * 2, 1
    elif b0 == 0xde and len(head) >= 3:
        n, i = int.from_bytes(head[1:3], "big") * 2, 3
    else:
        return None
    for _ in range(n):
        if i >= len(head):
            return None
        b = head[i]
        if b <= 0x7f or b >= 0xe0:
            i += 1
        elif 0xa0 <= b <= 0xbf:
            i += 1 + (b & 0x1f)
        elif b in _FIXED:
            i += 1 + _FIXED[b]
        elif b in _SIZED:
            width, most = _SIZED[b]
            if i + 1 + width > len(head):
                return None
            size = int.from_bytes(head[i + 1:i + 1 + width], "big")
            if size > most:
                return f"a field announces {size} bytes, more than {most}"
            i += 1 + width + size
        else:
            return None
    return None


class FrameDecoder:
    """Incremental, bounded decoding of a frame stream: ``feed`` bytes, iterate the frames complete so far."""

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        # max_buffer_size bounds what one frame may hold in memory; the str/bin/map limits refuse a
        # header that announces more than a frame may carry before any of it is buffered.
        self._unpacker = msgpack.Unpacker(
            raw=False, strict_map_key=True, use_list=True, max_buffer_size=max_frame,
            max_str_len=MAX_TEXT * 4, max_bin_len=MAX_CHUNK_BYTES, max_array_len=16, max_map_len=32,
            max_ext_len=0,
        )
        self._max = max_frame
        self._fed = 0
        # Unpacker.tell() also counts the header of a frame still incomplete, so the end of the
        # last complete frame is taken when it is returned.
        self._done = 0
        self._head = bytearray()  # the first bytes of the incomplete frame, up to _HEAD

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held so far (non-zero at the end of a stream: truncated)."""
        return self._fed - self._done

    def feed(self, data: bytes) -> Iterator[Frame]:
        """Yield each frame completed by ``data`` (which may be any slice of the stream)."""
        view = memoryview(data)
        while view:
            # Never hand the unpacker more than one frame may hold: a piece that completes one
            # frame and starts the next must not trip max_buffer_size.
            room = self._max - self.pending
            if room <= 0:
                raise FrameError(f"a frame larger than {self._max} bytes", code="frame_too_large")
            piece, view = view[:room], view[room:]
            try:
                self._unpacker.feed(piece)
                self._fed += len(piece)
            except msgpack.BufferFull:
                raise FrameError(f"a frame larger than {self._max} bytes", code="frame_too_large") from None
            yield from self._drain()
            self._check_head(piece)

    def _check_head(self, piece: memoryview) -> None:
        pending = self.pending
        if not pending:
            self._head.clear()
            return
        if pending <= len(piece):
            self._head = bytearray(piece[len(piece) - pending:][:_HEAD])
        elif len(self._head) < _HEAD:
            self._head += piece[:_HEAD - len(self._head)]
        else:
            return
        why = _oversize_header(bytes(self._head))
        if why:
            raise FrameError(why, code="frame_too_large")

    def _drain(self) -> Iterator[Frame]:
        try:
            for obj in self._unpacker:
                self._done = self._unpacker.tell()
                yield decode_map(obj)
        except FrameError:
            raise
        except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError, TypeError) as exc:
            # msgpack refuses a str/bin/map header beyond the max_*_len bounds with "exceeds max".
            if "exceeds max" in str(exc):
                raise FrameError(f"a frame field larger than allowed: {exc}", code="frame_too_large") from None
            # Some msgpack errors carry no text (0xc1, a stack too deep): name the kind instead.
            raise FrameError(f"not msgpack: {str(exc) or _WHY.get(type(exc), type(exc).__name__)}") from None


class UploadReader:
    """The order SPEC.md prescribes: one ``hello``, chunks numbered from 0, one ``end``, nothing after.

    ``feed`` returns the frames in order; the caller hashes the chunks. ``finished`` is true after
    ``end``. A chunk without data and a bundle without a chunk are refused (SPEC.md 1.1): frames
    without bytes would cost the receiver work that no size cap on the data counts.
    """

    def __init__(self, max_frame: int = MAX_FRAME_BYTES) -> None:
        self._decoder = FrameDecoder(max_frame)
        self.hello: Hello | None = None
        self.end: End | None = None
        self.next_seq = 0

    @property
    def finished(self) -> bool:
        return self.end is not None

    def feed(self, data: bytes) -> list[Frame]:
        out: list[Frame] = []
        for frame in self._decoder.feed(data):
            if self.end is not None:
                raise FrameError("data after the end frame", code="order")
            if isinstance(frame, Hello):
                if self.hello is not None:
                    raise FrameError("a second hello frame", code="order")
                self.hello = frame
            elif self.hello is None:
                raise FrameError("the first frame must be hello", code="order")
            elif isinstance(frame, Chunk):
                if frame.seq != self.next_seq:
                    raise FrameError(f"chunk seq {frame.seq}, expected {self.next_seq}", code="order")
                if not frame.data:
                    raise FrameError(f"chunk {frame.seq} has no data", code="empty_chunk")
                self.next_seq += 1
            else:
                if self.next_seq == 0:
                    raise FrameError("a bundle of zero bytes (no chunk before end)", code="empty_bundle")
                self.end = frame
            out.append(frame)
        return out
