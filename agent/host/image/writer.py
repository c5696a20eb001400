"""Writing a node image tree out as a directory (``railscope record``, the test images)."""

from __future__ import annotations

import os
import posixpath

from agent.host.image.tree import ImageTree

__all__ = ["write_tree"]


def write_tree(tree: ImageTree, out: str) -> None:
    """Write the image root of ``tree`` as a new directory ``out`` (which must not exist): files,
    directories, and symlinks whose targets are rewritten to stay inside ``out`` (docs/design.md §2 keeps
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
