"""The streaming bundle archive (docs/design.md §7): ``tar.gz`` under one top directory, gzip and sha256
computed as the bytes are produced, memory bounded whatever the size.

``BundleWriter`` writes members to any binary sink (a file in the spool, an upload); each chunk of
compressed bytes goes through the sha256 and to ``on_chunk`` as it leaves gzip, so the file, its
digest and an upload stream are one pass. Every member's bytes pass through the ``Redactor`` before
they reach the tar: a member whose redacted length is not known in advance is spooled to a
temporary file past ``SPOOL_MEM`` (the tar header needs the size), never held whole in memory.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from agent.capture.redact import Redactor

__all__ = ["SPOOL_MEM", "BundleWriter", "DirWriter", "read_chunks", "sha256_line", "write_sha256_file"]

CHUNK = 1 << 20
#: a redacted member larger than this goes to a temporary file on its way into the tar
SPOOL_MEM = 1 << 20


def read_chunks(fh: IO[bytes], size: int = CHUNK) -> Iterator[bytes]:
    while True:
        data = fh.read(size)
        if not data:
            return
        yield data


class _HashingSink(io.RawIOBase):
    """A write-only file object: counts, hashes and forwards every byte gzip produces."""

    def __init__(self, out: IO[bytes] | None, on_chunk: Callable[[bytes], None] | None) -> None:
        self.out = out
        self.on_chunk = on_chunk
        self.sha = hashlib.sha256()
        self.nbytes = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        b = bytes(data)
        if not b:
            return 0
        self.sha.update(b)
        self.nbytes += len(b)
        if self.out is not None:
            self.out.write(b)
        if self.on_chunk is not None:
            self.on_chunk(b)
        return len(b)


def _copy(pieces: Iterable[bytes], fh: IO[bytes]) -> tuple[int, str]:
    """Write ``pieces`` to ``fh``; their (bytes, sha256)."""
    sha = hashlib.sha256()
    size = 0
    for piece in pieces:
        fh.write(piece)
        sha.update(piece)
        size += len(piece)
    return size, sha.hexdigest()


class _Writer(ABC):
    """What the two writers share: a member from a path on disk goes through the writer's own
    ``add_symlink`` / ``add_dir`` / ``add_stream``."""

    @abstractmethod
    def add_dir(self, rel: str) -> None: ...

    @abstractmethod
    def add_symlink(self, rel: str, target: str) -> None: ...

    @abstractmethod
    def add_stream(self, rel: str, chunks: Iterable[bytes], *, redact: bool = True) -> tuple[int, str]: ...

    def _add_file(self, rel: str, fh: IO[bytes], size: int, redact: bool) -> tuple[int, str]:
        return self.add_stream(rel, read_chunks(fh), redact=redact)

    def add_path(self, rel: str, path: str, *, redact: bool = True) -> tuple[int, str] | None:
        """Add what ``path`` is (regular file or symlink, not followed); None for anything else."""
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            self.add_symlink(rel, os.readlink(path))
            return None
        if stat.S_ISDIR(st.st_mode):
            self.add_dir(rel)
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        with open(path, "rb") as fh:
            return self._add_file(rel, fh, st.st_size, redact)


class BundleWriter(_Writer):
    """A tar.gz stream of one bundle. Members are named ``<top>/<rel>``."""

    def __init__(self, out: IO[bytes] | None, top: str, redactor: Redactor | None = None, *,
                 on_chunk: Callable[[bytes], None] | None = None, level: int = 6,
                 tmp_dir: str | None = None, mtime: float | None = None) -> None:
        if not top or "/" in top or top in (".", ".."):
            raise ValueError(f"bad top directory name {top!r}")
        self.top = top
        self.redactor = redactor or Redactor()
        self.tmp_dir = tmp_dir
        self.mtime = int(mtime if mtime is not None else time.time())
        self._sink = _HashingSink(out, on_chunk)
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._sink,  # type: ignore[arg-type]
                                 compresslevel=level, mtime=self.mtime)
        self._tar = tarfile.open(fileobj=self._gz, mode="w|", format=tarfile.PAX_FORMAT)
        self._closed = False
        self.members = 0
        self._dirs: set[str] = set()
        self._add_dir("")

    # -- members ------------------------------------------------------------------------------
    def _info(self, rel: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(f"{self.top}/{rel}" if rel else self.top)
        ti.type = kind
        ti.mode = mode
        ti.mtime = self.mtime
        ti.uname = ti.gname = "root"
        return ti

    def _add_dir(self, rel: str) -> None:
        if rel in self._dirs:
            return
        if rel:
            parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
            self._add_dir(parent)
        self._dirs.add(rel)
        self._tar.addfile(self._info(rel, tarfile.DIRTYPE, 0o755))
        self.members += 1

    def _parent(self, rel: str) -> None:
        if "/" in rel:
            self._add_dir(rel.rsplit("/", 1)[0])

    def add_dir(self, rel: str) -> None:
        self._add_dir(rel.strip("/"))

    def add_symlink(self, rel: str, target: str) -> None:
        self._parent(rel)
        ti = self._info(rel, tarfile.SYMTYPE, 0o777)
        ti.linkname = target
        self._tar.addfile(ti)
        self.members += 1

    def add_bytes(self, rel: str, data: bytes, *, redact: bool = True) -> tuple[int, str]:
        """Add a member; returns its (bytes, sha256) as stored, after redaction."""
        if redact:
            data = self.redactor.redact(data)
        self._parent(rel)
        ti = self._info(rel, tarfile.REGTYPE, 0o644)
        ti.size = len(data)
        self._tar.addfile(ti, io.BytesIO(data))
        self.members += 1
        return len(data), hashlib.sha256(data).hexdigest()

    def add_stream(self, rel: str, chunks: Iterable[bytes], *, redact: bool = True) -> tuple[int, str]:
        """Add a member from a stream of chunks, redacted on the way; memory stays bounded."""
        stream = self.redactor.stream(chunks) if redact else iter(chunks)
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEM, dir=self.tmp_dir) as tmp:
            size, digest = _copy(stream, tmp)
            tmp.seek(0)
            self._parent(rel)
            ti = self._info(rel, tarfile.REGTYPE, 0o644)
            ti.size = size
            self._tar.addfile(ti, tmp)  # type: ignore[arg-type]
        self.members += 1
        return size, digest

    def _add_file(self, rel: str, fh: IO[bytes], size: int, redact: bool) -> tuple[int, str]:
        # A small file is one redaction in memory; a large one streams through a spooled temp file.
        if size <= SPOOL_MEM:
            return self.add_bytes(rel, fh.read(), redact=redact)
        return super()._add_file(rel, fh, size, redact)

    # -- end ----------------------------------------------------------------------------------
    def close(self) -> tuple[int, str]:
        """Finish the tar and the gzip stream; returns (compressed bytes, sha256 hex)."""
        if not self._closed:
            self._closed = True
            self._tar.close()
            self._gz.close()
        return self._sink.nbytes, self._sink.sha.hexdigest()

    @property
    def compressed_bytes(self) -> int:
        return self._sink.nbytes


def sha256_line(hexdigest: str, filename: str) -> str:
    """The line ``sha256sum -c`` accepts: ``<hex>  <file name>``."""
    return f"{hexdigest}  {os.path.basename(filename)}\n"


def write_sha256_file(archive: str, hexdigest: str) -> str:
    path = archive + ".sha256"
    tmp = path + ".part"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(sha256_line(hexdigest, archive))
    os.replace(tmp, path)
    return path


class DirWriter(_Writer):
    """The same members as ``BundleWriter``, written as a node image directory (``railscope record``,
    test fixtures). ``root`` must not exist; it is created."""

    def __init__(self, root: str, redactor: Redactor | None = None) -> None:
        self.root = os.path.abspath(root)
        self.redactor = redactor or Redactor()
        os.makedirs(self.root)
        self.members = 0

    def _dst(self, rel: str) -> str:
        dst = os.path.normpath(os.path.join(self.root, rel))
        if not dst.startswith(self.root + os.sep):
            raise ValueError(f"{rel}: outside the image")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        return dst

    def add_dir(self, rel: str) -> None:
        os.makedirs(self._dst(rel.strip("/")), exist_ok=True)

    def add_symlink(self, rel: str, target: str) -> None:
        os.symlink(target, self._dst(rel))
        self.members += 1

    def add_bytes(self, rel: str, data: bytes, *, redact: bool = True) -> tuple[int, str]:
        if redact:
            data = self.redactor.redact(data)
        with open(self._dst(rel), "wb") as fh:
            fh.write(data)
        self.members += 1
        return len(data), hashlib.sha256(data).hexdigest()

    def add_stream(self, rel: str, chunks: Iterable[bytes], *, redact: bool = True) -> tuple[int, str]:
        with open(self._dst(rel), "wb") as fh:
            out = _copy(self.redactor.stream(chunks) if redact else chunks, fh)
        self.members += 1
        return out

    def close(self) -> tuple[int, str]:
        return 0, ""
