"""Record a host into a node image (docs/design.md §2, format v1) by watching the readers read it.

``RecordingHost`` wraps any ``Host``: every door call is forwarded, and what the inner host answered
is written into the image, so that a ``RecordedHost`` over the image gives the readers the same
answers again and ``railscope doctor --from`` reaches the same diagnosis as it did live.

- files go to ``fs/<path>``; every symlink met on the way (``/sys/class/net/<if>`` ->
  ``../../devices/...``) is recreated as a relative symlink, so sysfs keeps its shape; a directory
  that was listed is recreated with all its entries (links as links, subdirectories empty, files
  that were never read as empty placeholders) so that the listing replays;
- commands go to ``cmd/<slug>.stdout`` / ``.stderr`` / ``.rc``; a command that could not run is
  listed in the manifest as ``skipped`` with the reason, which the recorded host replays as such;
- ``links()`` and ``link_stats()`` are merged into ``netlink/links.json`` (stats64 only for the links
  whose statistics were read, as live);
- the ethtool ioctls are written as the text ``ethtool -S <if>`` / ``ethtool -i <if>`` print: a
  recorded host answers the ioctls with None and the readers parse that text instead (docs/design.md §2).

``agent.capture.replay.record_image`` runs the snapshot readers through a ``RecordingHost``; the
capture plug-ins add what a person wants besides (dmesg, ``ip -d -s link``, OVS, udev, logs).
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, BinaryIO

from agent import __version__
from agent.host import CmdResult, Host, slug
from agent.host.ethtool import format_drvinfo, format_gstats
from agent.host.image import SCHEMA, Manifest, ManifestItem, item_of, manifest_to_json
from agent.host.image.events import events_json
from agent.host.paths import walk_links

__all__ = ["RecordingHost"]

def _keep(keep: str) -> dict[str, str]:
    """``keep`` for an inner host, passed only when it is not the default (a host made for a test
    may know no ``keep``)."""
    return {} if keep == "head" else {"keep": keep}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _inside(parent: str, target: str) -> str:
    """A symlink target that stays inside the image's ``fs/``, for a link in node dir ``parent``.

    An absolute target would point out of ``fs/``, and so would a relative one with more ``..``
    than ``parent`` is deep (the host root clamps it, a tar extractor would not: PEP 706's "data"
    filter refuses such an archive whole). Both become the relative path to where the host root
    resolves them; sysfs links, always ``../../devices/...``, stay as they are.
    """
    if not target.startswith("/"):
        ups = 0
        for part in posixpath.normpath(target).split("/"):
            if part != "..":
                break
            ups += 1
        if ups <= len([p for p in parent.split("/") if p]):
            return target
    return posixpath.relpath(posixpath.normpath(posixpath.join(parent, target)), parent)


class RecordingHost:
    """A ``Host`` that forwards every call to ``inner`` and writes what it answered under ``out_dir``."""

    #: A capture reads each rail's module once, as the text a person reads (docs/design.md §7): the optics
    #: reader asks this before it would read ``ethtool --json -m`` (the text parses to the same record).
    module_text = True

    def __init__(self, inner: Host, out_dir: str,
                 guard: Callable[[tuple[str, ...]], str | None] | None = None) -> None:
        self.inner = inner
        #: why an argv must not run, or None (the capture's allowlist and deny-list): a refused
        #: argv never reaches ``inner`` and is recorded as not available, with why
        self.guard = guard
        self.live = inner.live
        #: A node image being re-recorded keeps its identity (node name, capture time) for the readers.
        self.image = inner.image
        self.root = os.path.abspath(out_dir)
        self.fs_root = os.path.join(self.root, "fs")
        os.makedirs(self.fs_root, exist_ok=True)
        self._lock = threading.RLock()
        self._links_cache: dict[str, str | None] = {}
        self._items: dict[str, ManifestItem] = {}
        self._links: list[dict[str, Any]] | None = None
        self._links_read = False
        self._stats: dict[str, dict[str, int]] = {}
        self.started_at = time.time()

    # -- image paths --------------------------------------------------------------------------
    def _image(self, node_path: str) -> str:
        return self.fs_root + node_path if node_path != "/" else self.fs_root

    def _link_target(self, node_path: str) -> str | None:
        if node_path not in self._links_cache:
            self._links_cache[node_path] = self.inner.readlink(node_path)
        return self._links_cache[node_path]

    def _put_symlink(self, node_path: str, target: str) -> None:
        parent = posixpath.dirname(node_path)
        target = _inside(parent, target)
        dst = self._image(node_path)
        if os.path.lexists(dst):
            return
        os.makedirs(self._image(parent), exist_ok=True)
        os.symlink(target, dst)

    def _mirror(self, path: str, follow_last: bool = True) -> str | None:
        """Recreate the symlinks on the way to ``path``; return the node path they resolve to."""
        done = walk_links(path, self._mirror_link, follow_last)
        return None if done is None else "/" + "/".join(done)

    def _mirror_link(self, node_path: str) -> str | None:
        target = self._link_target(node_path)
        if target is not None:
            self._put_symlink(node_path, target)
        return target

    def _put_dir(self, resolved: str) -> None:
        dst = self._image(resolved)
        if not os.path.lexists(dst):
            os.makedirs(dst, exist_ok=True)

    def _put_placeholder(self, resolved: str) -> None:
        dst = self._image(resolved)
        if os.path.lexists(dst):
            return
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb"):
            pass

    def _put_file(self, path: str, data: bytes) -> None:
        resolved = self._mirror(path)
        if resolved is None:
            return
        dst = self._image(resolved)
        if os.path.isdir(dst) and not os.path.islink(dst):
            return
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as fh:
            fh.write(data)
        rel = os.path.relpath(dst, self.root)
        self._items[rel] = item_of(rel, data)

    def _put_existing(self, path: str, follow_last: bool = True) -> None:
        """Make ``path`` exist in the image as what it is on the host: symlink, directory or file."""
        if not follow_last:
            parent = self._mirror(posixpath.dirname(path) or "/")
            if parent is None:
                return
            node = posixpath.join(parent, posixpath.basename(path))
            target = self._link_target(node)
            if target is not None:
                self._put_symlink(node, target)
                return
        resolved = self._mirror(path)
        if resolved is None:
            return
        if self.inner.listdir(resolved) is not None:
            self._put_dir(resolved)
        else:
            self._put_placeholder(resolved)

    @contextmanager
    def _writing(self, what: str | tuple[str, ...]) -> Iterator[None]:
        """Serialise writes; one thing that cannot be written is listed as such, not fatal."""
        with self._lock:
            try:
                yield
            except OSError as exc:
                if isinstance(what, tuple):
                    rel, argv = f"cmd/{slug(list(what))}.stdout", list(what)
                else:
                    rel, argv = "fs" + what, None
                self._items[rel] = ManifestItem(
                    rel, "command" if argv else "file", argv=tuple(argv) if argv else None, skipped=True,
                    reason=f"not recorded: {exc.strerror or exc}")

    # -- files ----------------------------------------------------------------------------------
    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        text = self.inner.read_text(path, max_bytes)
        if text is not None:
            with self._writing(path):
                self._put_file(path, text.encode("utf-8"))
        return text

    def read_bytes(self, path: str, max_bytes: int = 1 << 20) -> bytes | None:
        data = self.inner.read_bytes(path, max_bytes)
        if data is not None:
            with self._writing(path):
                self._put_file(path, data)
        return data

    def listdir(self, path: str) -> list[str] | None:
        names = self.inner.listdir(path)
        if names is None:
            return None
        with self._writing(path):
            resolved = self._mirror(path)
            if resolved is not None:
                self._put_dir(resolved)
                for name in names:
                    child = posixpath.join(resolved, name)
                    target = self._link_target(child)
                    if target is not None:
                        self._put_symlink(child, target)
                    elif self.inner.listdir(child) is not None:
                        self._put_dir(child)
                    else:
                        self._put_placeholder(child)
        return names

    def readlink(self, path: str) -> str | None:
        target = self.inner.readlink(path)
        if target is not None:
            with self._writing(path):
                self._put_existing(path, follow_last=False)
        return target

    def realpath(self, path: str) -> str | None:
        real = self.inner.realpath(path)
        if real is not None:
            with self._writing(path):
                self._put_existing(path)
        return real

    def exists(self, path: str) -> bool:
        found = self.inner.exists(path)
        if found:
            with self._writing(path):
                self._put_existing(path)
        return found

    def walk(self, path: str, limit: int = 10_000) -> list[str]:
        # Only listed: what the capture then reads of it is recorded as it is read.
        return self.inner.walk(path, limit)

    def copy_tail(self, path: str, max_bytes: int, out: BinaryIO) -> tuple[int, bool]:
        return self.inner.copy_tail(path, max_bytes, out)

    def glob(self, pattern: str) -> list[str]:
        paths = self.inner.glob(pattern)
        for p in paths:
            with self._writing(p):
                self._put_existing(p, follow_last=False)
        return paths

    # -- commands -------------------------------------------------------------------------------
    def _put_command(self, res: CmdResult) -> None:
        stem = slug(list(res.argv))
        rel = f"cmd/{stem}.stdout"
        item = item_of(rel, res.stdout, "command", argv=tuple(res.argv), rc=res.rc,
                       duration_s=round(res.duration_s, 6), truncated=res.truncated, timed_out=res.timed_out)
        cmd_dir = os.path.join(self.root, "cmd")
        os.makedirs(cmd_dir, exist_ok=True)
        base = os.path.join(cmd_dir, stem)
        if res.missing:
            # Nothing ran: no .stdout, so the recorded host answers "not available" with this reason.
            for ext in (".stdout", ".stderr", ".rc"):
                if os.path.exists(base + ext):
                    os.unlink(base + ext)
            self._items[rel] = dataclasses.replace(item, bytes=0, sha256=None, skipped=True, reason=res.why())
            return
        with open(base + ".stdout", "wb") as fh:
            fh.write(res.stdout)
        if res.stderr:
            with open(base + ".stderr", "wb") as fh:
                fh.write(res.stderr)
        elif os.path.exists(base + ".stderr"):
            os.unlink(base + ".stderr")
        if res.rc is not None:
            with open(base + ".rc", "w", encoding="ascii") as fh:
                fh.write(f"{res.rc}\n")
        elif os.path.exists(base + ".rc"):
            os.unlink(base + ".rc")
        self._items[rel] = item

    def note_skipped(self, argv: list[str] | tuple[str, ...], reason: str) -> None:
        """List a command the readers decided not to run, with why (replayed as "not available")."""
        with self._lock:
            stem = slug([str(a) for a in argv])
            if f"cmd/{stem}.stdout" not in self._items:
                self._put_command(CmdResult(tuple(str(a) for a in argv), None, missing=True, reason=reason))

    def run(self, argv: list[str] | tuple[str, ...], timeout_s: float = 10.0,
            max_bytes: int = 8 << 20, keep: str = "head") -> CmdResult:
        why = self.guard(tuple(str(a) for a in argv)) if self.guard is not None else None
        if why is not None:
            res = CmdResult(tuple(str(a) for a in argv), None, missing=True, reason=f"refused: {why}")
        else:
            res = self.inner.run(argv, timeout_s=timeout_s, max_bytes=max_bytes, **_keep(keep))
        with self._writing(res.argv):
            self._put_command(res)
        return res

    # -- netlink --------------------------------------------------------------------------------
    def links(self) -> list[dict[str, Any]] | None:
        links = self.inner.links()
        with self._lock:
            self._links_read = True
            self._links = None if links is None else [dict(x) for x in links]
        return links

    def link_stats(self, ifnames: list[str]) -> dict[str, dict[str, int]]:
        stats = self.inner.link_stats(ifnames)
        with self._lock:
            self._stats.update({k: dict(v) for k, v in stats.items()})
        return stats

    def ethtool_stats(self, ifname: str) -> list[tuple[str, int]] | None:
        stats = self.inner.ethtool_stats(ifname)
        if stats is not None:
            text = format_gstats([(str(k).strip(), int(v)) for k, v in stats]).encode()
            with self._writing(("ethtool", "-S", ifname)):
                self._put_command(CmdResult(("ethtool", "-S", ifname), 0, text))
        return stats

    def ethtool_drvinfo(self, ifname: str) -> dict[str, str] | None:
        info = self.inner.ethtool_drvinfo(ifname)
        if info is not None:
            with self._writing(("ethtool", "-i", ifname)):
                self._put_command(CmdResult(("ethtool", "-i", ifname), 0, format_drvinfo(info).encode()))
        return info

    @property
    def links_error(self) -> str | None:
        return self.inner.links_error

    def close(self) -> None:
        self.inner.close()

    # -- the rest of the image ------------------------------------------------------------------
    def put_file(self, rel: str, data: bytes) -> None:
        """A file a reader gives the image beside the three doors (``lldp/frames.json``: what the passive
        LLDP listener heard), read back through ``RecordedHost.file``; the last one given stands."""
        with self._lock:
            try:
                self._put_generated(rel, data)
            except OSError as exc:
                self._items[rel] = ManifestItem(rel, "generated", skipped=True,
                                                reason=f"not recorded: {exc.strerror or exc}")

    def _put_generated(self, rel: str, data: bytes, kind: str = "generated") -> None:
        dst = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as fh:
            fh.write(data)
        self._items[rel] = item_of(rel, data, kind)

    def items(self, events: list[dict[str, Any]] | None = None) -> tuple[ManifestItem, ...]:
        """End the recording: write ``netlink/links.json`` and ``events.json``; the items of all that
        was recorded, by path (the capture runner puts them in its own manifest)."""
        with self._lock:
            if self._links is not None:
                doc = {"links": [{**lk, "stats64": self._stats.get(str(lk.get("ifname")))} for lk in self._links]}
                self._put_generated("netlink/links.json", (json.dumps(doc, indent=1) + "\n").encode(), "netlink")
            elif self._links_read:
                self._items["netlink/links.json"] = ManifestItem(
                    "netlink/links.json", "netlink", skipped=True,
                    reason=self.inner.links_error or "netlink not available")
            self._put_generated("events.json", events_json(events))
            return tuple(self._items[k] for k in sorted(self._items))

    def finish(self, *, node: str | None = None, cluster: str | None = None, incident: str | None = None,
               reason: str | None = None, events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """End the recording as a node image of its own: its items and ``manifest.json``; returns the manifest."""
        with self._lock:
            manifest = Manifest(
                schema=SCHEMA, node=node, cluster=cluster, incident=incident, reason=reason,
                agent_version=__version__, started_at=_iso(self.started_at), ended_at=_iso(time.time()),
                items=self.items(events),
            )
            with open(os.path.join(self.root, "manifest.json"), "w", encoding="utf-8") as fh:
                fh.write(manifest_to_json(manifest))
            return manifest.as_json()
