"""The one token-file reader: what it reads, and every file it refuses with a line that says the fix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proto.tokens import MAX_TOKEN_BYTES, TokenFileError, read_token


def _token_file(tmp_path: Path, text: str | bytes, mode: int = 0o600, name: str = "token") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    p.chmod(mode)
    return p


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o700, 0o620, 0o602])
def test_a_file_only_its_owner_reads_is_read_and_stripped(tmp_path: Path, mode: int) -> None:
    assert read_token(_token_file(tmp_path, "  abc.DEF-123_=\n", mode)) == "abc.DEF-123_="


@pytest.mark.parametrize(("mode", "who"), [(0o640, "its group"), (0o604, "others"), (0o644, "its group and others"),
                                           (0o444, "its group and others")])
def test_a_file_others_may_read_is_refused_naming_the_file_and_the_fix(tmp_path: Path, mode: int, who: str) -> None:
    p = _token_file(tmp_path, "secret-token", mode)
    with pytest.raises(TokenFileError) as info:
        read_token(p, "--token-file")
    msg = str(info.value)
    assert msg.startswith(f"--token-file {p}: readable by {who} (mode {mode:04o})")
    assert f"chmod 600 {p}" in msg and "secret-token" not in msg


def test_the_size_is_capped(tmp_path: Path) -> None:
    assert read_token(_token_file(tmp_path, "a" * MAX_TOKEN_BYTES)) == "a" * MAX_TOKEN_BYTES
    p = _token_file(tmp_path, "a" * (MAX_TOKEN_BYTES + 1), name="big")
    with pytest.raises(TokenFileError, match=r"big: larger than 16 KiB"):
        read_token(p)


@pytest.mark.parametrize(("text", "why"), [("", "empty"), (" \n\t", "empty"), ("two words", "whitespace"),
                                           ("line1\nline2", "whitespace"), ("tok\x00en", "control"),
                                           (b"caf\xc3\xa9", "not ASCII")])
def test_what_is_not_one_token_is_refused(tmp_path: Path, text: str | bytes, why: str) -> None:
    with pytest.raises(TokenFileError, match=why):
        read_token(_token_file(tmp_path, text))


def test_a_missing_file_or_a_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match=r"--agent-token-file .*/nope: No such file"):
        read_token(tmp_path / "nope", "--agent-token-file")
    d = tmp_path / "dir"
    d.mkdir(mode=0o700)
    with pytest.raises(TokenFileError, match="not a regular file"):
        read_token(d)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(TokenFileError):
        # opened read-only a FIFO would block until a writer came: never read, refused by its type
        fd = os.open(fifo, os.O_RDWR)  # a writer, so that the reader's open returns
        try:
            read_token(fifo)
        finally:
            os.close(fd)


def test_a_symlink_is_followed_as_the_kubelet_mounts_tokens(tmp_path: Path) -> None:
    """A projected token is ``token -> ..data/token``; the mode that counts is the target's."""
    data = tmp_path / "..data"
    data.mkdir()
    target = _token_file(data, "rotated-1")
    link = tmp_path / "token"
    link.symlink_to(Path("..data") / target.name)
    assert read_token(link) == "rotated-1"
    target.write_text("rotated-2")  # rotated in place: read again, never cached
    assert read_token(link) == "rotated-2"
    target.chmod(0o644)
    with pytest.raises(TokenFileError, match="chmod 600"):
        read_token(link)


def test_a_token_file_error_is_an_os_error() -> None:
    """Callers that handled an unreadable file (OSError) handle a refused one the same way."""
    assert issubclass(TokenFileError, OSError)
