"""A recorded host: a node image (DESIGN §2) in a directory or a ``.tar.gz``.

``fs/<path>`` answers the files door, ``cmd/<slug>.{stdout,stderr,rc}`` the commands door,
``netlink/links.json`` the netlink door. A file or command the image lacks is "not available on
that node", never an error. Only an input that is not an image at all raises ``HostError``.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import zlib
from typing import Any

from agent.host import CmdResult, HostError, slug
from agent.host.paths import RootedFS

__all__ = ["RecordedHost", "open_image"]

# A bundle is a few MB; these bounds keep a hostile or broken archive from filling the disk.
_MAX_MEMBERS = 200_000
_MAX_UNPACKED = 4 << 30


def _looks_like_image(path: str) -> bool:
    return any(
        os.path.exists(os.path.join(path, p))
        for p in ("manifest.json", "fs", "cmd", "netlink")
    )


def _unpack(archive: str) -> tuple[str, str]:
    """Unpack a bundle safely into a temporary directory; return (tmpdir, image root)."""
    tmp = tempfile.mkdtemp(prefix="railscope-image-")
    try:
        try:
            tf = tarfile.open(archive, "r:*")
        except (tarfile.TarError, OSError) as exc:
            raise HostError(f"{archive}: not a readable tar archive ({exc})") from None
        with tf:
            total = 0
            members = []
            try:
                for n, m in enumerate(tf):
                    if n >= _MAX_MEMBERS:
                        raise HostError(f"{archive}: more than {_MAX_MEMBERS} entries, refusing")
                    total += max(m.size, 0)
                    if total > _MAX_UNPACKED:
                        raise HostError(f"{archive}: unpacks to more than {_MAX_UNPACKED >> 30} GiB, refusing")
                    members.append(m)
                # The "data" filter refuses absolute paths, "..", device files and links that
                # point outside the destination (PEP 706).
                tf.extractall(tmp, members=members, filter="data")
            except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
                # A bundle cut short mid-upload ends in the middle of a gzip member.
                raise HostError(f"{archive}: damaged archive ({exc or type(exc).__name__})") from None
        root = tmp
        if not _looks_like_image(root):
            entries = [e for e in os.listdir(tmp) if not e.startswith(".")]
            if len(entries) == 1 and os.path.isdir(os.path.join(tmp, entries[0])):
                root = os.path.join(tmp, entries[0])
        if not _looks_like_image(root):
            raise HostError(f"{archive}: not a railscope node image (no manifest.json, fs/, cmd/ or netlink/)")
        return tmp, root
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class RecordedHost:
    """Answers the three doors from a node image."""

    live = False

    def __init__(self, root: str, cleanup: str | None = None) -> None:
        self.root = os.path.abspath(root)
        self._cleanup = cleanup
        self.fs = RootedFS(os.path.join(self.root, "fs"), flat_links=True)
        self.manifest: dict[str, Any] | None = None
        self.manifest_error: str | None = None
        mpath = os.path.join(self.root, "manifest.json")
        if os.path.exists(mpath):
            try:
                with open(mpath, encoding="utf-8") as fh:
                    m = json.load(fh)
                if not isinstance(m, dict):
                    raise ValueError("not a JSON object")
                self.manifest = m
            except (OSError, ValueError) as exc:
                self.manifest_error = f"manifest.json: {exc}"
        self._items: dict[str, dict[str, Any]] = {}
        for item in (self.manifest or {}).get("items") or []:
            if isinstance(item, dict) and isinstance(item.get("argv"), list):
                self._items[slug([str(a) for a in item["argv"]])] = item
        self._links: list[dict[str, Any]] | None = None
        self._links_loaded = False
        self.links_error: str | None = None

    # -- generated files at the image root (events.json, recorder.jsonl) ------------------
    def image_file(self, name: str, max_bytes: int = 64 << 20) -> bytes | None:
        path = os.path.join(self.root, name)
        try:
            with open(path, "rb") as fh:
                return fh.read(max_bytes)
        except OSError:
            return None

    # -- files ------------------------------------------------------------------------------
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

    # -- commands ---------------------------------------------------------------------------
    def run(self, argv: list[str] | tuple[str, ...], timeout_s: float = 10.0,
            max_bytes: int = 8 << 20) -> CmdResult:
        argv = tuple(str(a) for a in argv)
        stem = os.path.join(self.root, "cmd", slug(argv))
        item = self._items.get(slug(argv), {})
        if item.get("timed_out"):
            return CmdResult(argv, None, timed_out=True, duration_s=float(item.get("duration_s") or 0.0),
                             reason=f"{' '.join(argv)}: timed out when the image was recorded")
        try:
            with open(stem + ".stdout", "rb") as fh:
                out = fh.read(max_bytes)
        except OSError:
            if item.get("skipped"):
                return CmdResult(argv, None, missing=True, reason=str(item.get("reason") or "skipped"))
            return CmdResult(argv, None, missing=True, reason=f"{' '.join(argv)}: not recorded in this image")
        err = b""
        try:
            with open(stem + ".stderr", "rb") as fh:
                err = fh.read(1 << 20)
        except OSError:
            pass
        # Without a .rc file the manifest's rc stands; hand-made images often have neither (success).
        item_rc = item.get("rc")
        rc: int | None = item_rc if isinstance(item_rc, int) and not isinstance(item_rc, bool) else 0
        try:
            with open(stem + ".rc", encoding="ascii") as fh:
                rc = int(fh.read().strip() or "0")
        except OSError:
            pass
        except ValueError:
            rc = None
            return CmdResult(argv, None, out, err, missing=True,
                             reason=f"cmd/{slug(argv)}.rc: not an exit status")
        return CmdResult(argv, rc, out, err, duration_s=float(item.get("duration_s") or 0.0),
                         truncated=bool(item.get("truncated")))

    # -- netlink ----------------------------------------------------------------------------
    def _load_links(self) -> None:
        if self._links_loaded:
            return
        self._links_loaded = True
        path = os.path.join(self.root, "netlink", "links.json")
        if not os.path.exists(path):
            self.links_error = "netlink/links.json: not in this image"
            return
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
            links = doc["links"] if isinstance(doc, dict) else None
            if not isinstance(links, list) or not all(isinstance(x, dict) for x in links):
                raise ValueError('expected {"links": [ {...}, ... ]}')
            self._links = links
        except (OSError, ValueError, KeyError) as exc:
            self.links_error = f"netlink/links.json: {exc}"

    def links(self) -> list[dict[str, Any]] | None:
        self._load_links()
        if self._links is None:
            return None
        # Bulk dumps carry no statistics (DESIGN §3); link_stats() gives them per rail.
        return [{**link, "stats64": None} for link in self._links]

    def link_stats(self, ifnames: list[str]) -> dict[str, dict[str, int]]:
        self._load_links()
        want = set(ifnames)
        return {
            str(link.get("ifname")): dict(link["stats64"])
            for link in self._links or []
            if link.get("ifname") in want and isinstance(link.get("stats64"), dict)
        }

    def ethtool_stats(self, ifname: str) -> list[tuple[str, int]] | None:
        return None

    def ethtool_drvinfo(self, ifname: str) -> dict[str, str] | None:
        return None

    def close(self) -> None:
        if self._cleanup:
            shutil.rmtree(self._cleanup, ignore_errors=True)
            self._cleanup = None

    def __enter__(self) -> RecordedHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_image(path: str) -> RecordedHost:
    """Open a node image: a directory, or a ``.tar.gz`` with or without one top directory."""
    if not os.path.exists(path):
        raise HostError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        root = path
        if not _looks_like_image(root):
            entries = [e for e in os.listdir(path) if not e.startswith(".")]
            if len(entries) == 1 and os.path.isdir(os.path.join(path, entries[0])) and \
                    _looks_like_image(os.path.join(path, entries[0])):
                root = os.path.join(path, entries[0])
            else:
                raise HostError(f"{path}: not a railscope node image (no manifest.json, fs/, cmd/ or netlink/)")
        return RecordedHost(root)
    if not os.path.isfile(path):
        raise HostError(f"{path}: not a directory or a regular file")
    if not tarfile.is_tarfile(path):
        raise HostError(f"{path}: neither a node image directory nor a tar.gz bundle")
    tmp, root = _unpack(path)
    return RecordedHost(root, cleanup=tmp)
