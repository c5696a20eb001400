"""The local directory store: write a hidden temporary file, fsync, then link it to its name.

``os.link`` (not ``rename``) makes the name appear atomically *and* fails when it exists, so two
replicas that finish the same bundle at once never overwrite each other. Temporary files start with
``.`` and end in ``.part`` and live in ``<root>/.tmp`` until the commit, so a failed upload leaves no
directory behind; those older than ``stale_part_s`` (a replica killed mid-ingest) are removed at
start. File I/O runs in worker threads, off the event loop.

A bundle id is stored once per cluster, whatever ``created`` the agent sends (the date is part of
the key): ``<root>/<cluster>/.ids/<node>+<bundle>`` is created with ``O_EXCL`` before the object
becomes visible and holds the object's key. ``+`` is in no key part, so the name is unambiguous.

Bundles hold topology and kernel logs: every directory is created 0o750 and every file 0o640, so
only the collector's user and group read them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from proto.keys import SUFFIX, BundleKey, KeyPartError, check_part, parse_name, parse_rel, sha256_line

from ..config import CollectorSettings
from . import StoreClock, Stored, StoreError, check_small_rel, sweep_interval

__all__ = ["LocalStore"]

log = logging.getLogger("railscope.collector")

_READ = 1 << 20
_DIR_MODE = 0o750
_FILE_MODE = 0o640
_IDS = ".ids"
_TMP = ".tmp"
#: the store's clock is sampled at most this often (``LocalStore._probe_clock``)
PROBE_EVERY_S = 30.0


def _mkdirs(path: Path) -> None:
    """Create ``path`` and every missing level above it, each 0o750 (``mkdir(parents=True)`` gives
    the levels above the last the default mode)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, _DIR_MODE)
        except FileExistsError:
            pass


def _create(path: Path) -> int:
    """A new file, 0o640 from its first moment; ``FileExistsError`` when it exists."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), _FILE_MODE)


def _write_new(path: Path, data: bytes) -> None:
    fd = _create(path)
    try:
        os.write(fd, data)
        os.fsync(fd)
    except BaseException:
        # A full disk fails the write after the create: an empty file left here would read as a
        # claim (or a digest) that is not there.
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


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
        self.tmp = store.root / _TMP / f".{key.name}.{uuid.uuid4().hex[:12]}.part"
        self._fh = None
        self._buf = bytearray()

    async def _run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def _open(self) -> None:
        _mkdirs(self.tmp.parent)
        self._fh = os.fdopen(_create(self.tmp), "wb")  # held across awaits, closed in commit/abort

    async def write(self, data: bytes) -> None:
        self._buf += data
        # Coalesce into 4 MiB writes: one thread hop per write, not one per 64 KiB read.
        if len(self._buf) >= 4 << 20:
            try:
                await self._flush()
            except OSError as exc:  # a full disk is the store's failure (503), not the server's (500)
                raise StoreError(f"local store: {exc.strerror or exc}") from None

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
        sha_tmp: Path | None = None
        try:
            if not self.store._claim(self.key):
                return False
            final = self.dir / self.key.name
            try:
                # The incident's directory appears only now, with the object; its .sha256 is
                # written before the object is linked (a rename needs no room), so a full disk
                # never leaves a visible object without its digest.
                _mkdirs(self.dir)
                sha_tmp = self.store._sha256_part(self.key, sha256)
                os.link(self.tmp, final)
            except FileExistsError:
                return False  # stored before ids were claimed: the claim names it, which is right
            except OSError:
                self.store._release(self.key)
                raise
            os.replace(sha_tmp, self.dir / (self.key.name + ".sha256"))
            sha_tmp = None
        finally:
            self.tmp.unlink(missing_ok=True)
            if sha_tmp is not None:
                sha_tmp.unlink(missing_ok=True)
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
        self._sweeper: asyncio.Task[None] | None = None
        self.clock = StoreClock()
        self._probed = float("-inf")

    async def _run(self, fn, *args):  # type: ignore[no-untyped-def]
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def start(self) -> None:
        await self._run(self._start)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    async def _sweep_forever(self) -> None:
        # Again while the replica runs (its own temporary directory only; the whole tree at start):
        # what a killed replica left goes within about stale_part_s, restart or not.
        every = sweep_interval(self.settings.stale_part_s)
        while True:
            await asyncio.sleep(every)
            try:
                await self._run(self._sweep, self.root / _TMP)
            except OSError as exc:
                log.warning("sweeping %s: %s", self.root / _TMP, exc)

    def _start(self) -> None:
        _mkdirs(self.root)
        self._sweep(self.root)

    def _sweep(self, top: Path) -> None:
        cutoff = time.time() - self.settings.stale_part_s
        for dirpath, _dirs, files in os.walk(top):
            for name in files:
                if name.startswith(".") and name.endswith(".part"):
                    p = Path(dirpath) / name
                    try:
                        if p.stat().st_mtime < cutoff:
                            p.unlink()
                    except FileNotFoundError:
                        pass

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    async def ready(self) -> None:
        ok = await self._run(lambda: self.root.is_dir() and os.access(self.root, os.W_OK))
        if not ok:
            raise StoreError(f"{self.root} is not a writable directory")

    async def begin(self, key: BundleKey) -> LocalWriter:
        return LocalWriter(self, key)

    def _sha256_part(self, key: BundleKey, sha256: str) -> Path:
        """The ``.sha256`` of ``key`` written under a hidden temporary name, for a rename into place."""
        tmp = self.root / key.dir / f".{key.name}.sha256.{uuid.uuid4().hex[:12]}.part"
        _write_new(tmp, sha256_line(sha256, key.name).encode())
        return tmp

    def _write_sha256(self, key: BundleKey, sha256: str) -> None:
        os.replace(self._sha256_part(key, sha256), self.root / key.dir / (key.name + ".sha256"))

    def _id_path(self, key: BundleKey) -> Path:
        return self.root / key.cluster / _IDS / f"{key.node}+{key.bundle}"

    def _claimed(self, key: BundleKey) -> BundleKey | None:
        """The key the bundle id's claim names, if there is a claim (and it is ours)."""
        try:
            rel = self._id_path(key).read_text().strip()
            found = parse_rel(rel)
        except (FileNotFoundError, KeyPartError, UnicodeDecodeError):
            return None
        if (found.cluster, found.node, found.bundle) != (key.cluster, key.node, key.bundle):
            return None
        return found

    def _claim(self, key: BundleKey) -> bool:
        """Claim the bundle id for ``key``; False when it is stored (or being stored) under any date.

        A claim whose object never appeared and that is older than ``stale_part_s`` (a replica
        killed between claim and link) is taken over.
        """
        path = self._id_path(key)
        _mkdirs(path.parent)
        for _ in range(2):
            try:
                _write_new(path, (key.rel + "\n").encode())
                _fsync_dir(path.parent)
                return True
            except FileExistsError:
                pass
            found = self._claimed(key)
            if found is not None and (self.root / found.rel).exists():
                return False
            try:
                if path.stat().st_mtime > time.time() - self.settings.stale_part_s:
                    return False
                path.unlink()
            except FileNotFoundError:
                continue
        return False

    def _release(self, key: BundleKey) -> None:
        try:
            self._id_path(key).unlink()
        except OSError:
            pass

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
        found = self._claimed(key)
        if found is not None:
            st = self._stored(found, self.root / found.rel)
            if st is not None:
                return st
        # Stored before bundle ids were claimed: look in the date directory of this ``created``.
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
                        # Without its .sha256 a bundle is not complete (a replica died between the
                        # two): listed once an upload of it writes the digest again.
                        if st is not None and st.sha256 is not None:
                            out.append(st)
        return out

    async def list(self, cluster: str | None = None, date: str | None = None, incident: str | None = None,
                   node: str | None = None, *, with_sha256: bool = True) -> list[Stored]:
        # ``with_sha256`` is the S3 store's saving; here a .sha256 is a small local read, kept.
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

    # -- small objects (requests, cached analyses): write, fsync, rename (or link, to create only) --

    def _put_small(self, rel: str, data: bytes, only_new: bool) -> bool:
        path = self.root / check_small_rel(rel)
        _mkdirs(path.parent)  # 0o750 every level, files 0o640: they name nodes and incidents
        tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.part"
        with os.fdopen(_create(tmp), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            if only_new:
                try:
                    os.link(tmp, path)  # atomic create-if-absent, across replicas on one filesystem
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, path)
            return True
        finally:
            tmp.unlink(missing_ok=True)

    async def put_small(self, rel: str, data: bytes, *, only_new: bool = False) -> bool:
        try:
            return await self._run(self._put_small, rel, data, only_new)
        except OSError as exc:
            raise StoreError(f"write {rel[:120]}: {exc.strerror or exc}") from None

    def _get_small(self, rel: str, max_bytes: int) -> bytes | None:
        try:
            with open(self.root / check_small_rel(rel), "rb") as fh:
                return fh.read(max_bytes)
        except (FileNotFoundError, NotADirectoryError):
            return None

    async def get_small(self, rel: str, max_bytes: int) -> bytes | None:
        try:
            return await self._run(self._get_small, rel, max_bytes)
        except OSError as exc:
            raise StoreError(f"read {rel[:120]}: {exc.strerror or exc}") from None

    def _list_small(self, rel_dir: str) -> list[tuple[str, str]]:
        return [(rel, f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}") for rel, st in self._stat_small(rel_dir)]

    def _stat_small(self, rel_dir: str) -> list[tuple[str, os.stat_result]]:
        out = []
        for dirpath, _dirs, files in os.walk(self.root / check_small_rel(rel_dir)):
            for name in files:
                if name.startswith("."):
                    continue  # a write in progress
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                out.append((str(p.relative_to(self.root)), st))
        return sorted(out, key=lambda item: item[0])

    def _probe_clock(self) -> None:
        """One sample of the store's clock at most every ``PROBE_EVERY_S``: the mtime of a byte this
        replica writes now (the kernel's clock, or the NFS server's when the directory is a share)."""
        mono = time.monotonic()
        if mono - self._probed < PROBE_EVERY_S:
            return
        self._probed = mono
        _mkdirs(self.root / _TMP)
        probe = self.root / _TMP / "clock-probe"
        before = self.clock.clock()
        with open(probe, "wb") as fh:
            fh.write(b"\n")
        mtime = os.stat(probe).st_mtime
        self.clock.sample((before + self.clock.clock()) / 2 - mtime)

    def _times_small(self, rel_dir: str) -> list[tuple[str, float]]:
        self._probe_clock()
        return [(rel, self.clock.to_replica(st.st_mtime)) for rel, st in self._stat_small(rel_dir)]

    async def list_small_times(self, rel_dir: str) -> list[tuple[str, float]]:
        try:
            return await self._run(self._times_small, rel_dir)
        except OSError as exc:
            raise StoreError(f"list {rel_dir[:120]}: {exc.strerror or exc}") from None

    async def list_small(self, rel_dir: str) -> list[tuple[str, str]]:
        try:
            return await self._run(lambda: (self._probe_clock(), self._list_small(rel_dir))[1])
        except OSError as exc:
            raise StoreError(f"list {rel_dir[:120]}: {exc.strerror or exc}") from None

    async def delete_small(self, rel: str) -> None:
        try:
            await self._run(lambda: (self.root / check_small_rel(rel)).unlink(missing_ok=True))
        except OSError as exc:
            raise StoreError(f"delete {rel[:120]}: {exc.strerror or exc}") from None
