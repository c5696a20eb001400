"""Node image format v1 (docs/design.md §2): the manifest, and reading an image from a directory or a ``.tar.gz``.

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

One module per job: ``manifest`` (the manifest written and read, so that capture, the recording host,
the test images and the collector agree), ``tree`` (the in-memory tree, its limits, the files door),
``tar`` (the ``.tar.gz`` reader), ``directory`` (the directory reader) and ``writer``; ``open_tree``
here picks the reader. The package imports nothing of the agent but the host seam's ``HostError``.
"""

from __future__ import annotations

import io
import os
import stat
from typing import IO

from agent.host.image.directory import read_directory
from agent.host.image.manifest import (
    KINDS,
    SCHEMA,
    Manifest,
    ManifestItem,
    item_of,
    manifest_to_json,
    parse_manifest,
)
from agent.host.image.tar import read_tar
from agent.host.image.tree import LIMITS, ImageError, ImageFS, ImageTree, Limits, _mib
from agent.host.image.writer import write_tree
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


