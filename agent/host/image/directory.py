"""Reading a directory node image by the archive's rules: ``lstat`` first, regular files only (a
FIFO, device or socket is refused without being opened), symlinks kept as text and never followed."""

from __future__ import annotations

import os
import stat

from agent.host.image.tree import LIMITS, ImageError, ImageTree, Limits, _cut

__all__ = ["read_directory"]


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


