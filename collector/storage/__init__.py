"""Where bundles live: the local directory (the embedded default) or S3 (boto3).

Both stores keep the same promise: an object is visible only after :meth:`Writer.commit`, its
``.sha256`` beside it afterwards, and :meth:`Writer.abort` leaves nothing behind (no temporary file,
no incomplete multipart upload).

Beside the bundles, both keep small objects (a capture request, a bundle's cached analysis) by a
relative key below the store's prefix: ``put_small``, ``get_small``, ``list_small``, ``delete_small``.
Nothing above the store knows whether it is a directory or a bucket.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from proto.keys import BundleKey

if TYPE_CHECKING:
    from ..config import CollectorSettings

__all__ = ["Store", "StoreClock", "StoreError", "Stored", "Writer", "check_small_rel", "open_store", "sweep_interval"]


def sweep_interval(stale_part_s: float) -> float:
    """How often a running replica looks for what a killed one left: half the age that makes it
    stale, between 1 s and 10 min."""
    return max(1.0, min(stale_part_s / 2, 600.0))


class StoreClock:
    """How far this replica's clock is ahead of the store's (seconds; negative: behind).

    The store stamps what it keeps with its own clock (S3's ``LastModified``, a file's mtime, which an
    NFS server sets), and the agents' poll markers are judged by those stamps against this replica's
    clock: a replica a few minutes ahead would call every node agentless. Each sample compares a
    reading of the store's clock (an S3 answer's ``Date``, the mtime of a probe this replica just
    wrote) with ``clock()`` at that moment; the skew is the median of the last few, so one slow
    answer does not move it. ``clock`` is the replica's wall clock (a test's may run ahead).
    """

    SAMPLES = 5

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._samples: deque[float] = deque(maxlen=self.SAMPLES)

    def sample(self, skew_s: float) -> None:
        self._samples.append(skew_s)

    @property
    def skew_s(self) -> float | None:
        """The measured skew, or None before any sample."""
        return statistics.median(self._samples) if self._samples else None

    def to_replica(self, store_time: float) -> float:
        """A time the store stamped, on this replica's clock (unchanged while nothing is measured)."""
        return store_time + (self.skew_s or 0.0)

    def gauge(self) -> float:
        skew = self.skew_s
        return float("nan") if skew is None else skew


class StoreError(Exception):
    """The store failed (unreachable, refused a write); the ingest answers 503."""


@dataclass(frozen=True, slots=True)
class Stored:
    key: BundleKey
    bytes: int
    sha256: str | None  # from the .sha256 beside it; None while it is missing

    def to_json(self) -> dict[str, object]:
        return {**self.key.to_json(), "bytes": self.bytes, "sha256": self.sha256}


class Writer(Protocol):
    async def write(self, data: bytes) -> None:
        """Take the next bytes; may wait (back-pressure) while parts upload."""

    async def commit(self, sha256: str) -> bool:
        """Make the object visible and write its .sha256; False if another upload stored it first."""

    async def abort(self) -> None:
        """Remove everything written; never raises."""


class Store(Protocol):
    description: str
    #: this replica's clock against the store's (``list_small_times`` answers on this replica's)
    clock: StoreClock

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ready(self) -> None:
        """Raise :class:`StoreError` when the store cannot be reached."""

    async def find(self, key: BundleKey) -> Stored | None:
        """The stored bundle with ``key``'s cluster, date, incident, node and bundle id, if any."""

    async def begin(self, key: BundleKey) -> Writer: ...

    async def list(self, cluster: str | None = None, date: str | None = None, incident: str | None = None,
                   node: str | None = None, *, with_sha256: bool = True) -> list[Stored]:
        """The stored bundles the filters name, sorted by key. ``with_sha256=False`` (a page that shows
        no digest) lets a store answer from its listing alone: on S3 no GET per bundle, ``sha256`` None."""

    async def read(self, key: BundleKey) -> AsyncIterator[bytes]:
        """The object's bytes in chunks; :class:`FileNotFoundError` when absent."""

    async def write_sha256(self, key: BundleKey, sha256: str) -> None: ...

    async def stat(self, key: BundleKey) -> Stored | None:
        """The object at exactly ``key``, if present."""

    async def put_small(self, rel: str, data: bytes, *, only_new: bool = False) -> bool:
        """Write the small object ``rel`` (below the prefix) whole; with ``only_new``, False and nothing
        written when it exists. :class:`StoreError` when the store fails."""

    async def get_small(self, rel: str, max_bytes: int) -> bytes | None:
        """The first ``max_bytes`` of ``rel`` (a caller asks one more than it accepts, to see a larger
        object), or None when it is absent. :class:`StoreError` when the store fails."""

    async def list_small(self, rel_dir: str) -> list[tuple[str, str]]:
        """(rel, version tag) of every small object below ``rel_dir``, sorted; the tag changes when an
        object is rewritten. Temporary files are never listed."""

    async def list_small_times(self, rel_dir: str) -> list[tuple[str, float]]:
        """(rel, last modified, seconds since the epoch on this replica's clock: the store's stamp moved
        by ``clock``'s measured skew) of every small object below ``rel_dir``, from the listing alone
        (no read per object): the agents' poll markers are judged by it."""

    async def delete_small(self, rel: str) -> None:
        """Remove ``rel``; absent is not an error."""


def check_small_rel(rel: str) -> str:
    """``rel`` when it is a relative key of plain parts (no empty, ``.`` or ``..`` part, not absolute):
    callers build keys from checked parts, and this keeps a mistake from reaching outside the prefix."""
    parts = rel.split("/")
    if not rel or any(p in ("", ".", "..") for p in parts) or "\\" in rel or "\0" in rel:
        raise ValueError(f"not a relative store key: {rel[:120]!r}")
    return rel


def open_store(settings: CollectorSettings) -> Store:
    if settings.store.kind == "s3":
        from .s3 import S3Store

        return S3Store(settings)
    from .local import LocalStore

    return LocalStore(settings)
