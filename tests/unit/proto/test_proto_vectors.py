"""Every golden vector decodes to its frames and re-encodes byte for byte; every bad one is refused."""

from __future__ import annotations

import pytest

from proto.frames import FrameError, encode
from tests.support.proto_vectors import decode_stream, frame_from_json, load

VECTORS = load()
OK = [v for v in VECTORS if "frames" in v]
BAD = [v for v in VECTORS if "error" in v]


def test_the_vector_file_covers_both_kinds() -> None:
    assert len(OK) >= 5 and len(BAD) >= 10


@pytest.mark.parametrize("vec", OK, ids=[v["name"] for v in OK])
@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_ok_vector_decodes_to_its_frames(vec: dict, piece: int) -> None:
    want = [frame_from_json(f) for f in vec["frames"]]
    assert decode_stream(bytes.fromhex(vec["hex"]), piece) == want


@pytest.mark.parametrize("vec", OK, ids=[v["name"] for v in OK])
def test_ok_vector_reencodes_byte_for_byte(vec: dict) -> None:
    frames = [frame_from_json(f) for f in vec["frames"]]
    again = b"".join(encode(f) for f in frames)
    assert again.hex() == vec.get("canonical_hex", vec["hex"])
    # and the decoded frames themselves encode back to the same bytes
    assert b"".join(encode(f) for f in decode_stream(bytes.fromhex(vec["hex"]))).hex() == again.hex()


@pytest.mark.parametrize("vec", BAD, ids=[v["name"] for v in BAD])
def test_bad_vector_is_refused_with_its_code(vec: dict) -> None:
    with pytest.raises(FrameError) as info:
        decode_stream(bytes.fromhex(vec["hex"]))
    assert info.value.code == vec["error"]
