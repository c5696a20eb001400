"""Node paths under a root directory, with symlinks resolved *inside* that root.

Both hosts need it: a live agent reads the node under ``/host`` (an absolute symlink there must not
escape to the container's own ``/``), and a node image keeps sysfs symlinks as relative links under
``fs/``.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import posixpath
import stat
from collections.abc import Callable
from typing import Any, BinaryIO

#: Symlinks followed on the way to one path at the most, like the kernel's MAXSYMLINKS.
MAX_LINKS = 40
_FLAT_LINK_MAX = 4096
#: a file this large is a real file (not sysfs / procfs): its tail is copied by seeking, streamed
_REAL_FILE = 64 << 10
_COPY = 1 << 20


class NotRegularFile(OSError):
    """A FIFO, socket or device where a file was expected: never opened for reading."""

    def __init__(self, path: str) -> None:
        super().__init__(errno.EINVAL, "not a regular file", path)


def open_regular(real: str) -> BinaryIO:
    """Open ``real`` for reading only if it is a regular file (sysfs and procfs files are).

    A FIFO under the host root would block ``open()`` until a writer came, and a device's open can
    act on the device: the mode is checked first, then the file is opened with ``O_NONBLOCK`` (a
    FIFO's open returns at once, see fifo(7)) and checked again with ``fstat`` on what was opened,
    so a file swapped in between is caught too.
    """
    if not stat.S_ISREG(os.stat(real).st_mode):
        raise NotRegularFile(real)
    fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(real)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _flat_link(real: str, st: os.stat_result | None = None) -> str | None:
    """The target a "flattened" symlink names, or None.

    Copies made without symlink support (``git`` with ``core.symlinks=false``, zip tools, some
    artifact stores) turn a symlink into a small regular file holding the target text. sysfs links
    are always relative (``../../devices/...``), and no sysfs attribute value starts with ``../``, so
    such a file can be told apart from a real attribute.
    """
    try:
        st = st or os.lstat(real)
        if not stat.S_ISREG(st.st_mode) or not 3 <= st.st_size <= _FLAT_LINK_MAX:
            return None
        with open_regular(real) as fh:
            data = fh.read(_FLAT_LINK_MAX)
    except OSError:
        return None
    if not data.startswith(b"../") or b"\n" in data.rstrip(b"\n") or b"\0" in data:
        return None
    try:
        return data.rstrip(b"\n").decode("utf-8")
    except UnicodeDecodeError:
        return None


class BrokenLink(Exception):
    """A symlink on the way that cannot be read: the path does not resolve."""


def walk_links(path: str, target_of: Callable[[str], str | None], follow_last: bool = True) -> list[str] | None:
    """The components ``path`` names once every symlink on the way is followed, never above the top.

    ``..`` stops at the top and an absolute target starts again from it, so nothing resolves outside
    the tree the caller reads (a host root, a node image). ``target_of`` gets each component's path
    from the top (``/sys/class``) and gives its symlink target, None when it is no symlink, or raises
    ``BrokenLink``. None for a broken link and past ``MAX_LINKS`` links (a loop). The last component
    is not followed when ``follow_last`` is false (``readlink``).
    """
    todo = [p for p in path.split("/") if p]
    todo.reverse()  # a stack: the next component last
    done: list[str] = []
    hops = 0
    while todo:
        name = todo.pop()
        if name == ".":
            continue
        if name == "..":
            if done:
                done.pop()
            continue
        if todo or follow_last:
            try:
                target = target_of("/" + "/".join([*done, name]))
            except BrokenLink:
                return None
            if target is not None:
                hops += 1
                if hops > MAX_LINKS:
                    return None
                if target.startswith("/"):
                    done = []
                todo.extend(reversed([p for p in target.split("/") if p]))
                continue
        done.append(name)
    return done


def walk_nodes(path: str, listdir: Callable[[str], list[str] | None], readlink: Callable[[str], str | None],
               limit: int = 10_000) -> list[str]:
    """``walk`` over node paths through ``listdir`` and ``readlink`` (a tree with no path on disk)."""
    out: list[str] = []
    stack = [path]
    while stack and len(out) <= limit:
        d = stack.pop()
        for name in listdir(d) or []:
            node = posixpath.join(d, name)
            if readlink(node) is None and listdir(node) is not None:
                stack.append(node)
            else:
                out.append(node)
    return sorted(out)


def glob_nodes(pattern: str, listdir: Callable[[str], list[str] | None],
               lexists: Callable[[str], bool]) -> list[str]:
    """A small glob over node paths: ``*``/``?``/``[]`` within one component, no ``**``.

    A magic component matches the names ``listdir`` gives; a plain one is kept when ``lexists``
    (the path is there, itself a symlink or not).
    """
    found = ["/"]
    for part in (p for p in pattern.split("/") if p):
        nxt: list[str] = []
        magic = any(c in part for c in "*?[")
        for base in found:
            if magic:
                nxt.extend(posixpath.join(base, n) for n in listdir(base) or [] if fnmatch.fnmatchcase(n, part))
            else:
                cand = posixpath.join(base, part)
                if lexists(cand):
                    nxt.append(cand)
        found = nxt
    return sorted(found)


def _is_proc_root(node_path: str) -> bool:
    """Whether ``node_path`` is ``/proc/<pid>/root``."""
    parts = node_path.split("/")
    return len(parts) == 4 and parts[0] == "" and parts[1] == "proc" and parts[2].isdigit() and parts[3] == "root"


class RootedFS:
    """Read-only file access to node paths stored under ``root``.

    ``flat_links`` also follows symlinks that a copy flattened into files (see ``_flat_link``); a
    node image may have been through such a copy, a live host never is.

    ``proc_roots`` (the live node only): ``/proc/<pid>/root`` is left to the kernel, never resolved
    by its link text. It is a magic link to the process's own root: for a process of another mount
    namespace (any container) its text reads ``/``, and resolving that text would read the host's
    files where the container's were asked for (proc(5)). A node image stores it as a directory.
    """

    def __init__(self, root: str, flat_links: bool = False, proc_roots: bool = False) -> None:
        self.root = os.path.abspath(root)
        self.flat_links = flat_links
        self.proc_roots = proc_roots

    def _resolve(self, path: str, follow_last: bool = True) -> str | None:
        """Node path -> node path with symlinks resolved, never leaving the root."""
        done = walk_links(path, self._target, follow_last)
        return None if done is None else "/" + "/".join(done)

    def _target(self, node_path: str) -> str | None:
        real = self.root + node_path if self.root != "/" else node_path
        try:
            st = os.lstat(real)
        except OSError:
            return None
        if stat.S_ISLNK(st.st_mode):
            if self.proc_roots and _is_proc_root(node_path):
                return None  # the kernel follows it to the process's root (see the class)
            try:
                return os.readlink(real)
            except OSError:
                raise BrokenLink(node_path) from None
        return _flat_link(real, st) if self.flat_links else None

    def real(self, path: str, follow_last: bool = True) -> str | None:
        node = self._resolve(path, follow_last)
        if node is None:
            return None
        return self.root + node if self.root != "/" else node

    def read_bytes(self, path: str, max_bytes: int = 1 << 20) -> bytes | None:
        real = self.real(path)
        if real is None:
            return None
        try:
            with open_regular(real) as fh:
                return fh.read(max_bytes)
        except OSError:
            return None

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        data = self.read_bytes(path, max_bytes)
        return None if data is None else data.decode("utf-8", "replace")

    def listdir(self, path: str) -> list[str] | None:
        real = self.real(path)
        if real is None:
            return None
        try:
            return sorted(os.listdir(real))
        except OSError:
            return None

    def readlink(self, path: str) -> str | None:
        real = self.real(path, follow_last=False)
        if real is None:
            return None
        try:
            return os.readlink(real)
        except OSError:
            return _flat_link(real) if self.flat_links else None

    def realpath(self, path: str) -> str | None:
        node = self._resolve(path)
        if node is None:
            return None
        real = self.root + node if self.root != "/" else node
        return node if os.path.lexists(real) else None

    def exists(self, path: str) -> bool:
        real = self.real(path)
        return real is not None and os.path.exists(real)

    def glob(self, pattern: str) -> list[str]:
        return glob_nodes(pattern, self.listdir, self._lexists)

    def _lexists(self, path: str) -> bool:
        real = self.real(path, follow_last=False)
        return real is not None and os.path.lexists(real)

    def walk(self, path: str, limit: int = 10_000) -> list[str]:
        real = self.real(path)
        if real is None or not os.path.isdir(real):
            return []
        out: list[str] = []
        for dirpath, dirs, files in os.walk(real):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, real)
            # os.walk lists a symlink to a directory among the directories, and does not enter it.
            for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]):
                out.append(posixpath.normpath(posixpath.join(path, rel_dir, name)))
            if len(out) > limit:
                break
        return out

    def copy_tail(self, path: str, max_bytes: int, out: BinaryIO) -> tuple[int, bool]:
        real = self.real(path)
        if real is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        with open_regular(real) as src:
            size = os.fstat(src.fileno()).st_size
            if size > _REAL_FILE:
                # A real file: its size is true, so seek to the tail and stream it.
                start = max(0, size - max_bytes)
                src.seek(start)
                left, n = size - start, 0
                while left > 0:
                    data = src.read(min(_COPY, left))
                    if not data:
                        break
                    out.write(data)
                    n += len(data)
                    left -= len(data)
                return n, start > 0
            # sysfs / procfs report a size of 0 or 4096 whatever they hold: read to the end.
            kept, cut = bytearray(), False
            while data := src.read(_COPY):
                kept += data
                if len(kept) > max_bytes:
                    del kept[:len(kept) - max_bytes]
                    cut = True
            out.write(kept)
            return len(kept), cut


class FilesDoor:
    """The files door of a host, answered by its ``fs``: a ``RootedFS`` under the host root (the live
    host) or an ``ImageFS`` over a node image's ``fs/`` (the recorded host)."""

    fs: Any

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        return self.fs.read_text(path, max_bytes)

    def read_bytes(self, path: str, max_bytes: int = 1 << 20) -> bytes | None:
        return self.fs.read_bytes(path, max_bytes)

    def listdir(self, path: str) -> list[str] | None:
        return self.fs.listdir(path)

    def readlink(self, path: str) -> str | None:
        return self.fs.readlink(path)

    def realpath(self, path: str) -> str | None:
        return self.fs.realpath(path)

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    def glob(self, pattern: str) -> list[str]:
        return self.fs.glob(pattern)

    def walk(self, path: str, limit: int = 10_000) -> list[str]:
        return self.fs.walk(path, limit)

    def copy_tail(self, path: str, max_bytes: int, out: BinaryIO) -> tuple[int, bool]:
        return self.fs.copy_tail(path, max_bytes, out)
