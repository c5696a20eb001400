"""The local directory store: write a hidden temporary file, fsync, then link it to its name.

``os.link`` (not ``rename``) makes the name appear atomically *and* fails when it exists, so two
replicas that finish the same bundle at once never overwrite each other. Temporary files start with
``.`` and end in ``.part``: listings never show them; those older than ``stale_part_s`` (a replica
killed mid-ingest) are removed at start. File I/O runs in worker threads, off the event loop.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from proto.keys import SUFFIX, BundleKey, KeyPartError, check_part, parse_name, sha256_line

from ..config import CollectorSettings
from . import Stored, StoreError

__all__ = ["LocalStore"]

_READ = 1 << 20


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalWriter:
    def __init__(self, store: LocalStore, key: BundleKey) -> None:
        self.store, self.key = store, key
        self.dir = store.root / key.dir
        self.tmp = self.dir / f".{key.name}.{uuid.uuid4().hex[:12]}.part"
        self._fh = None
        self._buf = bytearray()

    async def _run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        self._fh = open(self.tmp, "xb")  # held across awaits, closed in commit/abort

    async def write(self, data: bytes) -> None:
        self._buf += data
        # Coalesce into 4 MiB writes: one thread hop per write, not one per 64 KiB read.
        if len(self._buf) >= 4 << 20:
            await self._flush()

    async def _flush(self) -> None:
        if self._fh is None:
            await self._run(self._open)
        if self._buf:
            buf, self._buf = bytes(self._buf), bytearray()
            await self._run(self._fh.write, buf)  # type: ignore[union-attr]

    def _finish(self, sha256: str) -> bool:
        fh = self._fh
        assert fh is not None
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
        self._fh = None
        final = self.dir / self.key.name
        try:
            os.link(self.tmp, final)
        except FileExistsError:
            return False
        finally:
            self.tmp.unlink(missing_ok=True)
        self.store._write_sha256(self.key, sha256)
        _fsync_dir(self.dir)
        return True

    async def commit(self, sha256: str) -> bool:
        try:
            await self._flush()
            return await self._run(self._finish, sha256)
        except OSError as exc:
            await self.abort()
            raise StoreError(f"local store: {exc.strerror or exc}") from None

    def _abort(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        self.tmp.unlink(missing_ok=True)

    async def abort(self) -> None:
        try:
            await self._run(self._abort)
        except OSError:
            pass


class LocalStore:
    def __init__(self, settings: CollectorSettings) -> None:
        self.root = Path(settings.store.path).resolve()
        self.settings = settings
        self.description = f"local directory {self.root}"

    async def _run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def start(self) -> None:
        await self._run(self._start)

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o750)
        cutoff = time.time() - self.settings.stale_part_s
        for dirpath, _dirs, files in os.walk(self.root):
            for name in files:
                if name.startswith(".") and name.endswith(".part"):
                    p = Path(dirpath) / name
                    try:
                        if p.stat().st_mtime < cutoff:
                            p.unlink()
                    except FileNotFoundError:
                        pass

    async def close(self) -> None:
        return None

    async def ready(self) -> None:
        ok = await self._run(lambda: self.root.is_dir() and os.access(self.root, os.W_OK))
        if not ok:
            raise StoreError(f"{self.root} is not a writable directory")

    async def begin(self, key: BundleKey) -> LocalWriter:
        return LocalWriter(self, key)

    def _write_sha256(self, key: BundleKey, sha256: str) -> None:
        d = self.root / key.dir
        tmp = d / f".{key.name}.sha256.{uuid.uuid4().hex[:12]}.part"
        with open(tmp, "x") as fh:
            fh.write(sha256_line(sha256, key.name))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, d / (key.name + ".sha256"))

    async def write_sha256(self, key: BundleKey, sha256: str) -> None:
        await self._run(self._write_sha256, key, sha256)

    def _stored(self, key: BundleKey, path: Path) -> Stored | None:
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return None
        sha = None
        try:
            line = (path.parent / (key.name + ".sha256")).read_text()
            sha = line.split()[0] if line.split() else None
        except FileNotFoundError:
            pass
        return Stored(key=key, bytes=size, sha256=sha)

    def _find(self, key: BundleKey) -> Stored | None:
        d = self.root / key.dir
        want = f"-{key.bundle}{SUFFIX}"
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            return None
        for name in names:
            if name.startswith(key.node + "-") and name.endswith(want):
                try:
                    found = parse_name(key.cluster, key.date, key.incident, name)
                except KeyPartError:
                    continue
                if found.node == key.node and found.bundle == key.bundle:
                    return self._stored(found, d / name)
        return None

    async def find(self, key: BundleKey) -> Stored | None:
        return await self._run(self._find, key)

    def _list(self, cluster: str | None, date: str | None, incident: str | None, node: str | None) -> list[Stored]:
        out: list[Stored] = []

        def subdirs(p: Path, only: str | None) -> list[str]:
            if only is not None:
                return [only] if (p / only).is_dir() else []
            try:
                return sorted(n for n in os.listdir(p) if not n.startswith(".") and (p / n).is_dir())
            except FileNotFoundError:
                return []

        for c in subdirs(self.root, cluster):
            for d in subdirs(self.root / c, date):
                for i in subdirs(self.root / c / d, incident):
                    base = self.root / c / d / i
                    for name in sorted(os.listdir(base)):
                        if not name.endswith(SUFFIX) or name.startswith("."):
                            continue
                        try:
                            key = parse_name(c, d, i, name)
                        except KeyPartError:
                            continue  # not ours: never listed, never served
                        if node is not None and key.node != node:
                            continue
                        st = self._stored(key, base / name)
                        if st is not None:
                            out.append(st)
        return out

    async def list(self, cluster: str | None = None, date: str | None = None, incident: str | None = None,
                   node: str | None = None) -> list[Stored]:
        for kind, val in (("cluster", cluster), ("incident", incident), ("node", node)):
            if val is not None:
                check_part(kind, val)
        return await self._run(self._list, cluster, date, incident, node)

    async def read(self, key: BundleKey) -> AsyncIterator[bytes]:
        path = self.root / key.rel
        fh = await self._run(open, path, "rb")
        try:
            while True:
                data = await self._run(fh.read, _READ)
                if not data:
                    return
                yield data
        finally:
            fh.close()

    async def stat(self, key: BundleKey) -> Stored | None:
        return await self._run(self._stored, key, self.root / key.rel)
