"""Reading a ``.tar.gz`` node image as a stream of members into an ``ImageTree``, never extracted.

Regular files, directories and symlinks are kept (a hard link only to a regular file read before it);
every other member type is refused by name. Caps on the member count, name lengths, path depth,
GNU / PAX extended headers, each file and the total are checked from the header, before the bytes
are read.
"""

from __future__ import annotations

import zlib
from typing import IO, Any

from agent.host.image.tree import LIMITS, ImageError, ImageTree, Limits, _cut, _mib

__all__ = ["read_tar"]


# -- .tar.gz -----------------------------------------------------------------------------------

_BLOCK = 512
_REGULAR = (b"0", b"\0", b"7")
_REFUSED_TYPES = {
    b"3": "a character device", b"4": "a block device", b"6": "a FIFO", b"S": "a GNU sparse file",
    b"D": "a GNU dump directory", b"M": "a GNU multi-volume continuation", b"V": "a volume label",
    b"N": "a GNU old long name",
}


def _nul(field_: bytes) -> bytes:
    return field_.split(b"\0", 1)[0]


def _number_field(field_: bytes) -> int:
    if field_[:1] == b"\x80":  # GNU base-256, for sizes past 8 GiB
        return int.from_bytes(field_[1:], "big")
    if field_[:1] == b"\xff":
        raise ValueError("negative number")
    text = _nul(field_).strip(b" ")
    return int(text, 8) if text else 0


class _Stream:
    """Exact reads from the (decompressed) archive; a short read is a damaged archive.

    Decompression runs in steps of at most 1 MiB of output (``max_length``), so what is held is
    what was asked for plus one step, whatever the compression ratio; the member parser slices a
    buffer instead of calling into ``gzip`` for every 512-byte header.
    """

    _STEP = 1 << 20

    def __init__(self, raw: IO[bytes], name: str) -> None:
        self.name = name
        self.raw = raw
        self.pending = raw.read(2)
        self.gz: Any = zlib.decompressobj(31) if self.pending == b"\x1f\x8b" else None
        self.buf = bytearray()
        self.pos = 0
        self.offset = 0
        self.eof = False

    def _raw(self) -> bytes:
        if self.pending:
            chunk, self.pending = self.pending, b""
            return chunk
        return self.raw.read(1 << 16)

    def _fill(self, need: int) -> None:
        while len(self.buf) - self.pos < need and not self.eof:
            if self.pos >= self._STEP:
                del self.buf[: self.pos]
                self.pos = 0
            if self.gz is None:
                chunk = self._raw()
                if not chunk:
                    self.eof = True
                self.buf += chunk
                continue
            if self.gz.unconsumed_tail:
                self.buf += self.gz.decompress(self.gz.unconsumed_tail, self._STEP)
            elif self.gz.eof:
                rest = self.gz.unused_data or self._raw()
                if not rest:
                    self.eof = True
                    break
                self.gz = zlib.decompressobj(31)  # a gzip file may hold several members
                self.buf += self.gz.decompress(rest, self._STEP)
            else:
                chunk = self._raw()
                if not chunk:
                    raise ImageError(f"{self.name}: damaged archive (the gzip stream ends early, "
                                     f"at byte {self.offset + len(self.buf) - self.pos} of the tar)")
                self.buf += self.gz.decompress(chunk, self._STEP)

    def read(self, n: int) -> bytes:
        self._fill(n)
        data = bytes(self.buf[self.pos: self.pos + n])
        self.pos += len(data)
        self.offset += len(data)
        if len(data) != n:
            raise ImageError(f"{self.name}: damaged archive (ends inside a member at byte {self.offset})")
        return data

    def skip(self, n: int) -> None:
        while n > 0:
            n -= len(self.read(min(n, self._STEP)))


_ZERO_BLOCK = b"\0" * 512


def _is_tar_header(block: bytes) -> bool:
    try:
        want = _number_field(block[148:156])
    except ValueError:
        return False
    rest = block[:148] + block[156:]
    plain = sum(rest) + 256
    if want == plain:
        return True
    # Some old tars summed signed chars: every byte above 127 counts 256 less.
    return want == plain - 256 * sum(1 for b in rest if b > 127)


def _pax(data: bytes, tree: ImageTree) -> dict[str, str]:
    """PAX extended header records ``"<len> <key>=<value>\\n"``."""
    out: dict[str, str] = {}
    pos = 0
    while pos < len(data):
        if data[pos:pos + 1] == b"\0":
            break
        sp = data.find(b" ", pos, pos + 24)
        try:
            length = int(data[pos:sp]) if sp > pos else 0
        except ValueError:
            length = 0
        rec = data[sp + 1: pos + length]
        if length <= 0 or pos + length > len(data) or not rec.endswith(b"\n") or b"=" not in rec:
            raise tree._refuse("a malformed PAX extended header")
        k, _, v = rec[:-1].partition(b"=")
        out[k.decode("utf-8", "replace")] = v.decode("utf-8", "surrogateescape")
        pos += length
    return out


def read_tar(fileobj: IO[bytes], name: str, limits: Limits = LIMITS) -> ImageTree:
    """Read a ``.tar.gz`` (or a plain tar) stream into a tree; nothing is written anywhere.

    Member headers are read and checked one by one; a member's bytes are read only after its size
    passed the caps. Raises ``ImageError`` (one line: which member, which rule)."""
    tree = ImageTree(name, limits)
    try:
        _read_members(_Stream(fileobj, name), tree)
    except ImageError:
        raise
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        # gzip.BadGzipFile is an OSError; a stream cut short mid-upload ends in EOFError
        raise ImageError(f"{name}: damaged archive ({_cut(str(exc) or type(exc).__name__)})") from None
    tree.find_base()
    return tree


def _read_members(st: _Stream, tree: ImageTree) -> None:
    lim = tree.limits
    long_name: bytes | None = None
    long_link: bytes | None = None
    pax: dict[str, str] = {}
    first = True
    while True:
        try:
            block = st.read(_BLOCK)
        except ImageError:
            if first:
                raise ImageError(f"{st.name}: neither a node image directory nor a tar.gz bundle") from None
            raise
        if block == _ZERO_BLOCK:
            return
        if not _is_tar_header(block):
            if first:
                raise ImageError(f"{st.name}: neither a node image directory nor a tar.gz bundle")
            raise ImageError(f"{st.name}: damaged archive (bad header checksum at byte {st.offset - _BLOCK})")
        first = False
        typ = block[156:157]
        raw_name = _nul(block[0:100])
        if block[257:263] == b"ustar\x00" and block[345:346] != b"\0":
            raw_name = _nul(block[345:500]) + b"/" + raw_name
        try:
            size = _number_field(block[124:136])
        except ValueError:
            raise ImageError(f"{st.name}: damaged archive (bad size field at byte {st.offset - _BLOCK})") from None
        shown = (long_name or raw_name).decode("utf-8", "replace")
        tree.count(shown)
        if typ in (b"L", b"K", b"x", b"g"):
            what = {b"L": "GNU long name", b"K": "GNU long link", b"x": "PAX header", b"g": "PAX global header"}[typ]
            cap = lim.name_bytes if typ in (b"L", b"K") else lim.header_bytes
            if size > cap:
                raise tree._refuse(f"a {what} of {_mib(size)} (more than {cap} bytes)")
            tree.spend(size, what)
            data = st.read(size)
            st.skip(-size % _BLOCK)
            if typ == b"L":
                long_name = _nul(data)
            elif typ == b"K":
                long_link = _nul(data)
            elif typ == b"x":
                pax = _pax(data, tree)
            continue
        if "path" in pax:
            name_b = pax["path"].encode("utf-8", "surrogateescape")
        else:
            name_b = long_name if long_name is not None else raw_name
        link_b = pax["linkpath"].encode("utf-8", "surrogateescape") if "linkpath" in pax else \
            long_link if long_link is not None else _nul(block[157:257])
        if "size" in pax:
            try:
                size = int(pax["size"])
            except ValueError:
                raise tree._refuse("a PAX size that is not a number") from None
        long_name = long_link = None
        pax = {}
        member = name_b.decode("utf-8", "replace")
        if len(name_b) > lim.name_bytes:
            raise tree._refuse(f"a member name of {len(name_b)} bytes (more than {lim.name_bytes})")
        if size < 0:
            raise tree._refuse(f"member {_cut(member)!r} has a negative size")
        if typ in _REFUSED_TYPES:
            raise tree._refuse(f"member {_cut(member)!r} is {_REFUSED_TYPES[typ]}")
        if typ not in (*_REGULAR, b"1", b"2", b"5"):
            raise tree._refuse(f"member {_cut(member)!r} has type {typ!r}, which a node image never holds")
        try:
            text = name_b.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        key = tree.key(text if text is not None else member, member)
        data_size = size if typ in _REGULAR else 0
        tree.spend(data_size, member)
        if text is None:
            st.skip(data_size + (-data_size % _BLOCK))
            tree.skip(member, "name is not UTF-8")
            continue
        assert key is not None
        if typ in _REGULAR:
            data = st.read(size)
            st.skip(-size % _BLOCK)
            if key == "":
                raise tree._refuse(f"member {_cut(member)!r} is a file at the archive's root")
            tree.add_file(key, data, member)
        elif typ == b"5":
            tree.add_dir(key, member)
        else:
            try:
                target = link_b.decode("utf-8")
            except UnicodeDecodeError:
                tree.skip(member, "link target is not UTF-8")
                continue
            if typ == b"2":
                tree.add_link(key, target, member)
            else:
                # A hard link shares the bytes of a regular file read before it; anything else refused.
                tkey = tree.key(target, target)
                if tkey not in tree.files:
                    raise tree._refuse(f"member {_cut(member)!r} is a hard link to {_cut(target)!r}, "
                                       "which is not a file of the archive")
                tree.add_file(key, tree.files[tkey], member)
            if size and typ == b"1":
                st.skip(size + (-size % _BLOCK))


