"""The bundle id and the object key scheme of ``proto/SPEC.md`` (docs/design.md §9), shared by agent and collector.

``<prefix>/<cluster>/<yyyy-mm-dd>/<incident>/<node>-<yyyymmddThhmmssZ>-<bundle id>.tar.gz`` and the same
name plus ``.sha256``. Every part is checked against :data:`PART` before it reaches a key or a path,
so a request can never name a place outside its cluster's prefix.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "PART",
    "SHA_SUFFIX",
    "SUFFIX",
    "BundleKey",
    "KeyPartError",
    "bundle_id",
    "check_part",
    "check_prefix",
    "parse_name",
    "parse_rel",
    "sha256_line",
]

#: One key part: lower-case letters, digits, ``.``, ``_``, ``-``; first a letter or a digit; at most 63.
PART = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_NAME = re.compile(r"(?P<node>[a-z0-9][a-z0-9._-]{0,62})-(?P<ts>\d{8}T\d{6}Z)-(?P<bundle>[a-z0-9][a-z0-9._-]{0,62})"
                   r"\.tar\.gz")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
SUFFIX = ".tar.gz"
SHA_SUFFIX = ".tar.gz.sha256"
#: Capture times the collector accepts: after 2020 and before 2200 (a clock at zero is refused).
_MIN_TS, _MAX_TS = 1_577_836_800, 7_258_118_400


class KeyPartError(ValueError):
    """A key part that breaks the grammar; the message names the part, never echoes odd bytes raw."""


def check_part(kind: str, value: object) -> str:
    """``value`` if it is a valid key part, else :class:`KeyPartError`.

    ``..`` is refused although the grammar allows dots: no part may look like a path step.
    """
    if not isinstance(value, str) or not PART.fullmatch(value) or value in (".", ".."):
        shown = repr(value)[:80] if isinstance(value, str) else type(value).__name__
        raise KeyPartError(f"{kind} {shown} is not a valid key part ([a-z0-9][a-z0-9._-]{{0,62}})")
    return value


def check_prefix(prefix: str) -> str:
    """A store prefix: empty, or valid parts joined by ``/`` (no leading or trailing slash)."""
    prefix = prefix.strip("/")
    if prefix:
        for part in prefix.split("/"):
            check_part("prefix part", part)
    return prefix


def bundle_id(incident: str, node: str, plan: str) -> str:
    """The deterministic id of the capture of ``plan`` on ``node`` for ``incident``.

    A second upload of the same capture carries the same id, so the collector stores it once. 96 bits
    of sha256 keep ids short in keys and make an accidental collision out of reach.
    """
    for kind, val in (("incident", incident), ("node", node)):
        check_part(kind, val)
    if not isinstance(plan, str) or not plan or len(plan) > 256:
        raise KeyPartError("plan must be a non-empty string of at most 256 characters")
    digest = hashlib.sha256(b"railscope.bundle/v1\0" + "\0".join((incident, node, plan)).encode()).hexdigest()
    return "b" + digest[:24]


def _stamp(created: int) -> datetime:
    if not isinstance(created, int) or not _MIN_TS <= created < _MAX_TS:
        raise KeyPartError(f"capture time {created!r} is outside 2020..2200 (Unix seconds, UTC)")
    return datetime.fromtimestamp(created, UTC)


@dataclass(frozen=True, slots=True)
class BundleKey:
    """A bundle's place in the store; every field already validated."""

    cluster: str
    date: str  # yyyy-mm-dd
    incident: str
    node: str
    stamp: str  # yyyymmddThhmmssZ
    bundle: str

    @classmethod
    def build(cls, cluster: str, incident: str, node: str, bundle: str, created: int) -> BundleKey:
        when = _stamp(created)
        return cls(cluster=check_part("cluster", cluster), date=when.strftime("%Y-%m-%d"),
                   incident=check_part("incident", incident), node=check_part("node", node),
                   stamp=when.strftime("%Y%m%dT%H%M%SZ"), bundle=check_part("bundle id", bundle))

    @property
    def name(self) -> str:
        return f"{self.node}-{self.stamp}-{self.bundle}{SUFFIX}"

    @property
    def dir(self) -> str:
        """The key's directory below the prefix."""
        return f"{self.cluster}/{self.date}/{self.incident}"

    @property
    def rel(self) -> str:
        """The key below the prefix."""
        return f"{self.dir}/{self.name}"

    def key(self, prefix: str = "") -> str:
        return f"{prefix}/{self.rel}" if prefix else self.rel

    def sha_key(self, prefix: str = "") -> str:
        return self.key(prefix) + ".sha256"

    def to_json(self) -> dict[str, str]:
        return {"key": self.rel, "cluster": self.cluster, "date": self.date, "incident": self.incident,
                "node": self.node, "time": self.stamp, "bundle": self.bundle, "name": self.name}


def parse_name(cluster: str, date: str, incident: str, name: str) -> BundleKey:
    """The key of a stored object from its parts (a listing's or a request's), validated."""
    check_part("cluster", cluster)
    check_part("incident", incident)
    if not isinstance(date, str) or not _DATE.fullmatch(date):
        raise KeyPartError(f"date {str(date)[:40]!r} is not yyyy-mm-dd")
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if not m:
        raise KeyPartError(f"name {str(name)[:80]!r} is not <node>-<yyyymmddThhmmssZ>-<bundle id>.tar.gz")
    try:
        when = datetime.strptime(m["ts"], "%Y%m%dT%H%M%SZ")
    except ValueError:
        raise KeyPartError(f"name {name[:80]!r}: not a real time") from None
    if when.strftime("%Y-%m-%d") != date:
        raise KeyPartError(f"name {name[:80]!r} is not of the date {date}")
    node, bundle = m["node"], m["bundle"]
    check_part("node", node)
    check_part("bundle id", bundle)
    return BundleKey(cluster=cluster, date=date, incident=incident, node=node, stamp=m["ts"], bundle=bundle)


def parse_rel(rel: str) -> BundleKey:
    """``<cluster>/<date>/<incident>/<name>`` to its key, validated."""
    parts = rel.split("/") if isinstance(rel, str) else []
    if len(parts) != 4:
        raise KeyPartError("a bundle key is <cluster>/<yyyy-mm-dd>/<incident>/<name>.tar.gz")
    return parse_name(*parts)


def sha256_line(hexdigest: str, name: str) -> str:
    """The ``.sha256`` file's content, as ``sha256sum`` writes and ``sha256sum -c`` reads it."""
    return f"{hexdigest}  {name}\n"
