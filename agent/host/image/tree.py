"""A node image in memory: its files, directories and symlinks (``ImageTree``), the caps one image
may use (``Limits``), and the files door over it (``ImageFS``).

Symlinks are resolved inside the tree only (an absolute target is relative to the tree's root, ``..``
stops at the root), so a link cannot name a file of the machine reading the image.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import BinaryIO

from agent.host import HostError
from agent.host.paths import glob_nodes, walk_links, walk_nodes

__all__ = ["LIMITS", "ImageError", "ImageFS", "ImageTree", "Limits"]


class ImageError(HostError):
    """The input is refused as a node image; the message is one line naming the bad part."""


# -- the in-memory tree ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Limits:
    """What one image may hold. A bundle is a few MB (docs/design.md §10: the 8 x 127 VF node's is under 5 MB
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

#: the names that make a directory a node image (docs/design.md §2)
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


