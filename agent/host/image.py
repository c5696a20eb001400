"""Node image format v1 (DESIGN §2): the manifest, and reading an image from a directory or a ``.tar.gz``.

A node image is untrusted input: it may come from a ticket, a vendor or another cluster, and the
collector opens every bundle it stores. So:

- a ``.tar.gz`` is read as a stream of members into an in-memory tree and never extracted. Regular
  files, directories and symlinks are kept (a hard link only to a regular file read before it); every
  other member type is refused by name. Caps on the member count, name lengths, path depth, GNU / PAX
  extended headers, each file and the total are checked from the header, before the bytes are read;
- a directory image is loaded by the same rules: ``lstat`` first, regular files only (a FIFO, device or
  socket is refused without being opened), symlinks kept as text and resolved inside the tree;
- symlinks are resolved inside the tree only (an absolute target is relative to the tree's root, ``..``
  stops at the root), so a link cannot name a file of the machine reading the image;
- every JSON file of an image goes through ``agent.safejson.load_json`` (re-exported here): bounded
  nesting depth, and no ``NaN`` / ``Infinity`` / 5,000-digit numbers (they read as ``null``, which
  the field validators drop).

The manifest writer (``Manifest``, ``ManifestItem``, ``manifest_to_json``) and its validating reader
(``parse_manifest``) live here too, so that capture, the recording host and the collector agree.

This module imports nothing of the agent but the host seam's ``HostError``.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import posixpath
import re
import stat
import zlib
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

from agent.host import HostError
from agent.host.paths import glob_nodes, walk_links, walk_nodes
from agent.safejson import MAX_JSON_DEPTH, JSONError, load_json, loads_bounded

__all__ = [
    "KINDS",
    "LIMITS",
    "MAX_JSON_DEPTH",
    "SCHEMA",
    "ImageError",
    "ImageFS",
    "ImageTree",
    "JSONError",
    "Limits",
    "Manifest",
    "ManifestItem",
    "item_of",
    "load_json",
    "loads_bounded",
    "manifest_to_json",
    "open_tree",
    "parse_manifest",
    "read_directory",
    "read_tar",
    "write_tree",
]

SCHEMA = "railscope.bundle/v1"
KINDS = ("file", "command", "netlink", "generated")


class ImageError(HostError):
    """The input is refused as a node image; the message is one line naming the bad part."""


# -- the manifest ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ManifestItem:
    """One ``items[]`` entry: a file, command, link dump or generated file of the image, or one
    that was skipped or never started (``skipped`` + ``reason``). ``path`` is relative to the root,
    None for a command that never ran (nothing was written)."""

    path: str | None
    kind: str
    argv: tuple[str, ...] | None = None
    rc: int | None = None
    duration_s: float = 0.0
    bytes: int = 0
    sha256: str | None = None
    truncated: bool = False
    timed_out: bool = False
    skipped: bool = False
    reason: str | None = None

    def as_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "path": self.path, "kind": self.kind, "argv": list(self.argv) if self.argv is not None else None,
            "rc": self.rc, "duration_s": _finite(self.duration_s), "bytes": self.bytes, "sha256": self.sha256,
            "truncated": self.truncated, "timed_out": self.timed_out, "skipped": self.skipped,
        }
        if self.reason is not None:
            doc["reason"] = self.reason
        return doc


def item_of(path: str, data: bytes, kind: str = "file", **fields: Any) -> ManifestItem:
    """The item of content written at ``path``: its size and sha256 filled in."""
    return ManifestItem(path=path, kind=kind, bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), **fields)


@dataclass(frozen=True, slots=True)
class Manifest:
    """``manifest.json``. Times are RFC 3339 text as written (``2026-03-01T10:00:00Z``)."""

    schema: str = SCHEMA
    node: str | None = None
    cluster: str | None = None
    incident: str | None = None
    reason: str | None = None
    agent_version: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    items: tuple[ManifestItem, ...] = ()
    #: top-level keys beyond v1's (a capture's ``plugins``, ``notes``, ``hung``), kept as read
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def as_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "schema": self.schema, "node": self.node, "cluster": self.cluster, "incident": self.incident,
            "reason": self.reason, "agent_version": self.agent_version, "started_at": self.started_at,
            "ended_at": self.ended_at, "items": [it.as_json() for it in sorted(self.items, key=lambda i: (i.path or "", i.argv or ()))],
        }

    def item(self, path: str | None) -> ManifestItem | None:
        for it in self.items:
            if it.path == path:
                return it
        return None

    def time_of(self, key: str = "ended_at") -> float | None:
        """``ended_at`` (or ``started_at``) as unix seconds; None when absent or without a zone."""
        text = self.ended_at if key == "ended_at" else self.started_at
        if text is None:
            return None
        # Imported here: only a node image has a manifest, and datetime costs a live doctor run its import.
        from datetime import datetime

        try:
            dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        if dt.tzinfo is None:
            return None
        return dt.timestamp()


def manifest_to_json(manifest: Manifest) -> str:
    """The ``manifest.json`` text: strict JSON (RFC 8259), items sorted by path, a final newline."""
    return json.dumps(manifest.as_json(), indent=1, allow_nan=False) + "\n"


def _finite(x: float) -> float:
    return float(x) if math.isfinite(x) else 0.0


_TEXT_FIELDS = ("node", "cluster", "incident", "reason", "agent_version", "started_at", "ended_at")
#: a field of the manifest longer than this is not a name or a time: dropped
_MAX_FIELD = 4096


def parse_manifest(data: bytes) -> tuple[Manifest, tuple[str, ...]]:
    """Read ``manifest.json``: each field is checked where it is read. A bad field or item is dropped
    and named in the problems (one line each, at most a few); a document that is not a JSON object
    gives an empty ``Manifest`` and one problem. Never raises for bad content."""
    problems: list[str] = []
    try:
        doc = load_json(data, "manifest.json")
    except JSONError as exc:
        return Manifest(), (str(exc),)
    if not isinstance(doc, dict):
        return Manifest(), ("manifest.json: not a JSON object",)
    text: dict[str, str | None] = {}
    for key in _TEXT_FIELDS:
        val = doc.get(key)
        if val is None or (isinstance(val, str) and len(val) <= _MAX_FIELD):
            text[key] = val
        else:
            text[key] = None
            problems.append(f"manifest.json: {key}: not a string, ignored")
    schema = doc.get("schema")
    if schema is not None and schema != SCHEMA:
        problems.append(f"manifest.json: schema {_short(schema)} is not {SCHEMA}; read as v1")
    raw_items = doc.get("items", [])
    items: list[ManifestItem] = []
    if not isinstance(raw_items, list):
        problems.append("manifest.json: items: not a list, ignored")
        raw_items = []
    bad = 0
    first_bad = ""
    for n, raw in enumerate(raw_items):
        item, why = _item(raw)
        if item is None:
            bad += 1
            first_bad = first_bad or f"items[{n}]: {why}"
        else:
            items.append(item)
    if bad:
        problems.append(f"manifest.json: {bad} malformed item(s) ignored (first: {first_bad})")
    extra = {k: v for k, v in doc.items() if k not in _TEXT_FIELDS and k not in ("schema", "items")}
    return Manifest(schema=SCHEMA, items=tuple(items), extra=extra, **text), tuple(problems)


def _short(v: Any) -> str:
    s = json.dumps(v) if not isinstance(v, str) else repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _item(raw: Any) -> tuple[ManifestItem | None, str]:
    if not isinstance(raw, dict):
        return None, "not an object"
    path = raw.get("path")
    kind = raw.get("kind", "file")
    if kind not in KINDS:
        return None, f"kind: not one of {'|'.join(KINDS)}"
    argv = raw.get("argv")
    if argv is not None:
        if not isinstance(argv, list) or not all(isinstance(a, str) and len(a) <= _MAX_FIELD for a in argv) \
                or not 0 < len(argv) <= 256:
            return None, "argv: not a list of strings"
        argv = tuple(argv)
    # A command that never ran has no file: its argv names it.
    if not (isinstance(path, str) and 0 < len(path) <= _MAX_FIELD) and not (path is None and argv is not None):
        return None, "path: not a string"
    rc = raw.get("rc")
    if rc is not None and not (_is_int(rc) and -(1 << 31) <= rc < (1 << 31)):
        return None, "rc: not an integer"
    dur = raw.get("duration_s", 0.0)
    if dur is None:
        dur = 0.0
    if isinstance(dur, bool) or not isinstance(dur, int | float) or not math.isfinite(dur) or dur < 0:
        return None, "duration_s: not a non-negative number"
    size = raw.get("bytes", 0)
    if size is None:
        size = 0
    if not _is_int(size) or size < 0:
        return None, "bytes: not a non-negative integer"
    sha = raw.get("sha256")
    if sha is not None and not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        return None, "sha256: not a hex digest"
    flags = {}
    for key in ("truncated", "timed_out", "skipped"):
        val = raw.get(key, False)
        if val is None:
            val = False
        if not isinstance(val, bool):
            return None, f"{key}: not true or false"
        flags[key] = val
    reason = raw.get("reason")
    if reason is not None and not (isinstance(reason, str) and len(reason) <= _MAX_FIELD):
        return None, "reason: not a string"
    return ManifestItem(path=path, kind=kind, argv=argv, rc=rc, duration_s=float(dur), bytes=size, sha256=sha,
                        reason=reason, **flags), ""


# -- the in-memory tree ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Limits:
    """What one image may hold. A bundle is a few MB (DESIGN §10: the 8 x 127 VF node's is under 5 MB
    unpacked); each bound is far above that and far below what hurts a node or the collector."""

    #: entries of any kind, extended headers included (the 8 x 127-VF node of bigimage.py has 10,500)
    members: int = 100_000
    #: bytes of one member name or symlink target (PATH_MAX)
    name_bytes: int = 4096
    #: components of one path (sysfs device paths are about 12 deep)
    depth: int = 128
    #: bytes of one GNU long-name / long-link or PAX extended header
    header_bytes: int = 64 << 10
    #: bytes of one file (a full dmesg ring is 16 MiB at most)
    file_bytes: int = 32 << 20
    #: bytes of every file and extended header together
    total_bytes: int = 128 << 20


LIMITS = Limits()

#: the names that make a directory a node image (DESIGN §2)
_MARKERS = ("manifest.json", "fs", "cmd", "netlink")
_FLAT_LINK_MAX = 4096


def _flat_link(data: bytes) -> str | None:
    """The target a "flattened" symlink names, or None.

    Copies made without symlink support (``git`` with ``core.symlinks=false``, zip tools, some
    artifact stores) turn a symlink into a small regular file holding the target text. sysfs links
    are always relative (``../../devices/...``), and no sysfs attribute value starts with ``../``, so
    such a file can be told apart from a real attribute.
    """
    if not 3 <= len(data) <= _FLAT_LINK_MAX or not data.startswith(b"../"):
        return None
    body = data.rstrip(b"\n")
    if b"\n" in body or b"\0" in body:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


class ImageTree:
    """Files, directories and symlinks of an image, keyed by relative path (``fs/sys/class/net``;
    the root is ``""``). Built by ``read_tar`` / ``read_directory``; read through ``resolve``."""

    def __init__(self, name: str, limits: Limits = LIMITS) -> None:
        self.name = name
        self.limits = limits
        self.files: dict[str, bytes] = {}
        self.links: dict[str, str] = {}
        self.dirs: dict[str, set[str]] = {"": set()}
        #: parts of the input left out, one line each (non-UTF-8 names): for ``unavailable``
        self.problems: list[str] = []
        self.total = 0
        self.entries = 0
        #: the image root inside the tree: "" or the bundle's one top directory
        self.base = ""

    # -- building ----------------------------------------------------------------------------
    def _refuse(self, what: str) -> ImageError:
        return ImageError(f"{self.name}: {what}, refusing")

    def _parent(self, key: str, member: str) -> None:
        parent, _, leaf = key.rpartition("/")
        if parent not in self.dirs:
            if parent in self.files or parent in self.links:
                raise self._refuse(f"member {_cut(member)!r} is inside a file or symlink")
            self._parent(parent, member)
            self.dirs[parent] = set()
        self.dirs[parent].add(leaf)

    def _claim(self, key: str, member: str, kind: str) -> None:
        taken = "dir" if key in self.dirs else "file" if key in self.files else "link" if key in self.links else None
        if taken is not None and taken != kind:
            raise self._refuse(f"member {_cut(member)!r} appears twice, as a {taken} and a {kind}")
        if key:
            self._parent(key, member)

    def add_file(self, key: str, data: bytes, member: str) -> None:
        self._claim(key, member, "file")
        self.files[key] = data

    def add_dir(self, key: str, member: str) -> None:
        self._claim(key, member, "dir")
        self.dirs.setdefault(key, set())

    def add_link(self, key: str, target: str, member: str) -> None:
        if len(target.encode("utf-8", "surrogateescape")) > self.limits.name_bytes or "\0" in target:
            raise self._refuse(f"member {_cut(member)!r}: symlink target longer than {self.limits.name_bytes} bytes")
        self._claim(key, member, "link")
        self.links[key] = target

    def count(self, member: str) -> None:
        self.entries += 1
        if self.entries > self.limits.members:
            raise self._refuse(f"more than {self.limits.members} members")

    def spend(self, size: int, member: str) -> None:
        if size > self.limits.file_bytes:
            raise self._refuse(f"member {_cut(member)!r} is {_mib(size)}, more than the {_mib(self.limits.file_bytes)} "
                               "one file may have")
        self.total += size
        if self.total > self.limits.total_bytes:
            raise self._refuse(f"more than {_mib(self.limits.total_bytes)} in all")

    def key(self, raw: str, member: str) -> str | None:
        """A member name -> tree key; None (and a problem noted) for a name to leave out."""
        if raw.startswith("/"):
            raise self._refuse(f"member {_cut(member)!r} has an absolute name")
        parts = [p for p in raw.split("/") if p and p != "."]
        if ".." in parts:
            raise self._refuse(f"member {_cut(member)!r} climbs out with '..'")
        if len(parts) > self.limits.depth:
            raise self._refuse(f"member {_cut(member)!r} is more than {self.limits.depth} directories deep")
        return "/".join(parts)

    def skip(self, member: str, why: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(f"member {_cut(member)!r}: {why}, left out")
        elif len(self.problems) == 20:
            self.problems.append("more members left out")

    def find_base(self) -> None:
        """The image root: the tree's root, or its one top directory (a bundle packed as sos does)."""
        if any(self._has(m) for m in _MARKERS):
            return
        tops = [n for n in self.dirs.get("", ()) if not n.startswith(".")]
        if len(tops) == 1 and tops[0] in self.dirs and \
                any(self._has(f"{tops[0]}/{m}") for m in _MARKERS):
            self.base = tops[0]
            return
        raise ImageError(f"{self.name}: not a railscope node image (no manifest.json, fs/, cmd/ or netlink/)")

    def _has(self, key: str) -> bool:
        return key in self.files or key in self.dirs or key in self.links

    # -- reading -----------------------------------------------------------------------------
    def resolve(self, root: str, path: str, follow_last: bool = True, flat_links: bool = False) -> str | None:
        """The key ``path`` names under the directory key ``root``, with every symlink resolved inside
        ``root``: an absolute target starts again at ``root``, ``..`` stops there. None past 40 hops."""
        prefix = root + "/" if root else ""

        def target_of(sub: str) -> str | None:
            key = prefix + sub[1:]
            target = self.links.get(key)
            if target is None and flat_links:
                data = self.files.get(key)
                target = _flat_link(data) if data is not None else None
            return target

        done = walk_links(path, target_of, follow_last)
        if done is None:
            return None
        return prefix + "/".join(done) if done else root

    def file(self, name: str) -> bytes | None:
        """A file of the image root (``events.json``, ``cmd/x.stdout``), symlinks resolved inside it."""
        key = self.resolve(self.base, name)
        return None if key is None else self.files.get(key)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.1f} GiB"


def _cut(text: str, n: int = 120) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


class ImageFS:
    """The files door of a recorded host: node paths under ``fs/`` of the tree, like ``RootedFS``
    over a directory (``flat_links`` followed: an image may have been through a copy without symlinks)."""

    def __init__(self, tree: ImageTree) -> None:
        self.tree = tree
        self.root = f"{tree.base}/fs" if tree.base else "fs"

    def _key(self, path: str, follow_last: bool = True) -> str | None:
        return self.tree.resolve(self.root, path, follow_last, flat_links=True)

    def _node(self, key: str) -> str:
        return "/" + key[len(self.root) + 1:] if key != self.root else "/"

    def read_bytes(self, path: str, max_bytes: int = 1 << 20) -> bytes | None:
        key = self._key(path)
        data = None if key is None else self.tree.files.get(key)
        return None if data is None else data[:max_bytes]

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        data = self.read_bytes(path, max_bytes)
        return None if data is None else data.decode("utf-8", "replace")

    def listdir(self, path: str) -> list[str] | None:
        key = self._key(path)
        names = None if key is None else self.tree.dirs.get(key)
        return None if names is None else sorted(names)

    def readlink(self, path: str) -> str | None:
        key = self._key(path, follow_last=False)
        if key is None:
            return None
        target = self.tree.links.get(key)
        if target is None and key in self.tree.files:
            target = _flat_link(self.tree.files[key])
        return target

    def realpath(self, path: str) -> str | None:
        key = self._key(path)
        return self._node(key) if key is not None and self.tree._has(key) else None

    def exists(self, path: str) -> bool:
        key = self._key(path)
        return key is not None and (key in self.tree.files or key in self.tree.dirs)

    def glob(self, pattern: str) -> list[str]:
        return glob_nodes(pattern, self.listdir, self._lexists)

    def _lexists(self, path: str) -> bool:
        key = self._key(path, follow_last=False)
        return key is not None and self.tree._has(key)

    def walk(self, path: str, limit: int = 10_000) -> list[str]:
        return walk_nodes(path, self.listdir, self.readlink, limit)

    def copy_tail(self, path: str, max_bytes: int, out: BinaryIO) -> tuple[int, bool]:
        key = self._key(path)
        data = None if key is None else self.tree.files.get(key)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "no such file in the image", path)
        cut = len(data) > max_bytes
        kept = data[len(data) - max_bytes:] if cut else data
        out.write(kept)
        return len(kept), cut


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


# -- directories -----------------------------------------------------------------------------------

_O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: should a FIFO take the place of a checked file, opening it does not wait for a writer.
_O_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_KIND_OF = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
            stat.S_IFBLK: "a block device"}


def read_directory(path: str, limits: Limits = LIMITS) -> ImageTree:
    """Load a directory image into a tree by the archive's rules: every entry ``lstat``-ed before it
    is opened, regular files read (within the caps), symlinks kept as text and never followed, any
    other kind refused by name. The directory itself may be reached through a symlink."""
    tree = ImageTree(path, limits)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ImageError(f"{path}: {exc.strerror or exc}") from None
    try:
        _walk(fd, "", tree)
    finally:
        os.close(fd)
    tree.find_base()
    return tree


def _walk(dir_fd: int, prefix: str, tree: ImageTree, depth: int = 1) -> None:
    # Built here without add_file/add_dir: a directory has no duplicate names and every parent is
    # in the tree before its children.
    lim = tree.limits
    children = tree.dirs[prefix[:-1]]
    if depth > lim.depth:
        raise tree._refuse(f"{_cut(prefix + '...')!r} is more than {lim.depth} directories deep")
    with os.scandir(dir_fd) as it:
        entries = list(it)
    tree.entries += len(entries)
    if tree.entries > lim.members:
        raise tree._refuse(f"more than {lim.members} members")
    for entry in entries:
        name = entry.name
        rel = prefix + name
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            tree.skip(rel.encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "name is not UTF-8")
            continue
        if len(rel) * 4 > lim.name_bytes and len(rel.encode()) > lim.name_bytes:
            raise tree._refuse(f"a path of more than {lim.name_bytes} bytes ({_cut(rel)!r})")
        # The entry's type from the directory itself (d_type; lstat where the filesystem gives none):
        # a FIFO, socket or device is known before anything is opened.
        try:
            if entry.is_symlink():
                mode = stat.S_IFLNK
            elif entry.is_dir(follow_symlinks=False):
                mode = stat.S_IFDIR
            elif entry.is_file(follow_symlinks=False):
                mode = stat.S_IFREG
            else:
                mode = stat.S_IFMT(entry.stat(follow_symlinks=False).st_mode)
        except OSError as exc:
            tree.skip(rel, f"cannot be read ({exc.strerror or exc})")
            continue
        if mode == stat.S_IFREG:
            data = _read_regular(dir_fd, name, rel, tree)
            if data is not None:
                tree.files[rel] = data
                children.add(name)
        elif mode == stat.S_IFLNK:
            try:
                target = os.readlink(name, dir_fd=dir_fd)
            except OSError as exc:
                tree.skip(rel, f"cannot be read ({exc.strerror or exc})")
                continue
            if len(target) * 4 > lim.name_bytes and len(target.encode("utf-8", "surrogateescape")) > lim.name_bytes:
                raise tree._refuse(f"{_cut(rel)!r}: symlink target longer than {lim.name_bytes} bytes")
            tree.links[rel] = target
            children.add(name)
        elif mode == stat.S_IFDIR:
            try:
                sub = os.open(name, _O_DIR, dir_fd=dir_fd)
            except OSError as exc:
                tree.skip(rel, f"cannot be read ({exc.strerror or exc})")
                continue
            tree.dirs[rel] = set()
            children.add(name)
            try:
                _walk(sub, rel + "/", tree, depth + 1)
            finally:
                os.close(sub)
        else:
            raise tree._refuse(f"{_cut(rel)!r} is {_KIND_OF.get(mode, 'not a regular file')}")


def _read_regular(dir_fd: int, name: str, rel: str, tree: ImageTree) -> bytes | None:
    try:
        fd = os.open(name, _O_FILE, dir_fd=dir_fd)
    except OSError as exc:
        tree.skip(rel, f"cannot be read ({exc.strerror or exc})")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise tree._refuse(f"{_cut(rel)!r} changed while it was read")
        tree.spend(st.st_size, rel)
        # One byte past the size: a file that grows while it is read is noticed (and cut at the cap).
        cap = min(tree.limits.file_bytes, st.st_size) + 1
        data = os.read(fd, cap)
        if len(data) < st.st_size:
            chunks = [data]
            got = len(data)
            while got < cap and (chunk := os.read(fd, cap - got)):
                chunks.append(chunk)
                got += len(chunk)
            data = b"".join(chunks)
        if len(data) > st.st_size:
            tree.spend(len(data) - st.st_size, rel)
        return data
    finally:
        os.close(fd)


def open_tree(source: str | os.PathLike[str] | bytes | bytearray | memoryview | IO[bytes],
              limits: Limits = LIMITS, name: str | None = None) -> ImageTree:
    """Read a node image from a directory, a ``.tar.gz`` file, the archive's bytes, or a binary file
    object (an upload being received). Raises ``ImageError`` (a ``HostError``) with one line."""
    if isinstance(source, bytes | bytearray | memoryview):
        return read_tar(io.BytesIO(bytes(source)), name or "bundle", limits)
    if not isinstance(source, str | os.PathLike):
        return read_tar(source, name or getattr(source, "name", None) or "bundle", limits)
    path = os.fspath(source)
    shown = name or path
    if not path:
        raise ImageError("an empty path is not a node image")
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ImageError(f"{shown}: {'no such file or directory' if not os.path.lexists(path) else exc.strerror}") \
            from None
    if stat.S_ISDIR(st.st_mode):
        return read_directory(path, limits)
    if not stat.S_ISREG(st.st_mode):
        raise ImageError(f"{shown}: not a directory or a regular file")
    if st.st_size > limits.total_bytes:
        raise ImageError(f"{shown}: a bundle of {_mib(st.st_size)}, more than {_mib(limits.total_bytes)}, refusing")
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise ImageError(f"{shown}: {exc.strerror or exc}") from None
    with fh:
        return read_tar(fh, shown, limits)


def write_tree(tree: ImageTree, out: str) -> None:
    """Write the image root of ``tree`` as a new directory ``out`` (which must not exist): files,
    directories, and symlinks whose targets are rewritten to stay inside ``out`` (DESIGN §2 keeps
    sysfs links relative; one that climbed out or was absolute points where the tree resolved it)."""
    base = tree.base
    prefix = base + "/" if base else ""
    os.mkdir(out, 0o755)
    for key in sorted(k for k in tree.dirs if k.startswith(prefix) and k != base):
        os.makedirs(os.path.join(out, key[len(prefix):]), exist_ok=True)
    for key, data in tree.files.items():
        if not key.startswith(prefix):
            continue
        fd = os.open(os.path.join(out, key[len(prefix):]), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    for key, target in tree.links.items():
        if not key.startswith(prefix):
            continue
        rel = key[len(prefix):]
        parent = posixpath.dirname(rel)
        joined = posixpath.normpath(posixpath.join("/", parent, target) if not target.startswith("/")
                                    else "/" + target)
        os.symlink(posixpath.relpath(joined, "/" + parent), os.path.join(out, rel))
