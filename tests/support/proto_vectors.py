"""The golden vectors of ``proto/vectors/v1.json`` and a decoder that runs a whole stream through them."""

from __future__ import annotations

import json
from pathlib import Path

from proto.frames import Chunk, End, Frame, FrameError, Hello, UploadReader

VECTORS_FILE = Path(__file__).resolve().parents[2] / "proto" / "vectors" / "v1.json"


def load() -> list[dict]:
    return json.loads(VECTORS_FILE.read_text())["vectors"]


def frame_from_json(doc: dict) -> Frame:
    if doc["t"] == "hello":
        return Hello.from_json(doc)
    if doc["t"] == "chunk":
        return Chunk(seq=doc["seq"], data=bytes.fromhex(doc["data_hex"]))
    return End(bytes=doc["bytes"], sha256=doc["sha256"])


def decode_stream(raw: bytes, piece: int = 7) -> list[Frame]:
    """Decode a whole stream fed in small pieces (frames split anywhere); ``truncated`` at a bad end."""
    reader = UploadReader()
    out: list[Frame] = []
    for i in range(0, len(raw), piece):
        out.extend(reader.feed(raw[i:i + piece]))
    if reader._decoder.pending:
        raise FrameError("the stream ends inside a frame", code="truncated")
    return out
