"""The source registry: every part of a ``Snapshot`` the agent reads, found where it is declared.

Each reader module of this package that is a source declares ``SOURCE`` (``agent.readers.source``):
its name is the module's name, and it says what it reads, which tools it runs, its intervals, the
snapshot fields it owns, what it needs of the sources before it and provides to those after it, and
the roles the daemon gives it. This module finds them, puts them in order and composes their reads;
it names none of them. ``take_snapshot`` (``readers/snapshot.py``) runs every source once in
registry order, which respects their dependencies (a source comes after every source that provides
what it needs, and after the one whose thread it shares); the daemon schedules the same objects each
on its own interval and composes their latest reads into one snapshot with ``compose``.

Adding a source is a reader module that declares its ``SOURCE``: nothing here changes.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from agent.model import Snapshot
from agent.readers.source import PROVIDED_BY_CALLER, ROLES, Context, Part, Source

__all__ = ["ROLES", "SOURCES", "Context", "Part", "Source", "after", "by_name", "compose", "discover", "names",
           "source_of", "touches_firmware", "with_role"]

#: modules of this package that are the registry itself, not readers (``snapshot`` imports this one)
_REGISTRY = frozenset({"source", "sources", "snapshot"})


def discover(package_dir: str | None = None, package: str = __package__) -> tuple[Source, ...]:
    """Every ``SOURCE`` declared by a module of ``package``, in registry order; raises RuntimeError
    for a declaration that cannot hold (a name that is not its module's, a need no earlier source
    provides, an unknown role, a lane of no earlier source)."""
    here = package_dir or os.path.dirname(os.path.abspath(__file__))
    found: list[tuple[str, Source]] = []
    for fname in sorted(os.listdir(here)):
        mod, ext = os.path.splitext(fname)
        if ext != ".py" or mod.startswith("_") or mod in _REGISTRY:
            continue
        src = getattr(importlib.import_module(f"{package}.{mod}"), "SOURCE", None)
        if isinstance(src, Source):
            found.append((mod, src))
    return _ordered(found)


def _ordered(found: Iterable[tuple[str, Source]]) -> tuple[Source, ...]:
    out = sorted((src for _, src in found), key=lambda s: (s.order, s.name))
    for mod, src in found:
        if src.name != mod:
            raise RuntimeError(f"agent.readers.{mod} declares the source {src.name!r}: a source is named after its module")
    provided = set(PROVIDED_BY_CALLER)
    seen: set[str] = set()
    dump = [s.name for s in out if s.netlink]
    if len(dump) > 1:
        raise RuntimeError(f"sources {', '.join(dump)} all claim the link dump (netlink): one may")
    for src in out:
        if src.name in seen:
            raise RuntimeError(f"two sources are named {src.name!r}")
        missing = [n for n in src.needs if n not in provided]
        if missing:
            raise RuntimeError(f"source {src.name!r} needs {', '.join(missing)}, which no source before it provides")
        unknown = sorted(src.roles - ROLES)
        if unknown:
            raise RuntimeError(f"source {src.name!r}: unknown role(s) {', '.join(unknown)} (known: {', '.join(sorted(ROLES))})")
        if src.lane is not None and src.lane not in seen:
            raise RuntimeError(f"source {src.name!r} runs in the thread of {src.lane!r}, which is not a source before it")
        bad = [k for k in src.provides if k not in Context.__dataclass_fields__]
        if bad:
            raise RuntimeError(f"source {src.name!r} provides {', '.join(bad)}, which the Context has no field for")
        provided.update(src.provides)
        seen.add(src.name)
    return tuple(out)


#: Every source, in registry order (the order of a first sample and of ``take_snapshot``).
SOURCES: tuple[Source, ...] = discover()
_BY_NAME: dict[str, Source] = {s.name: s for s in SOURCES}


def names() -> tuple[str, ...]:
    return tuple(s.name for s in SOURCES)


def by_name(name: str) -> Source:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no source {name!r} (known: {', '.join(names())})") from None


def with_role(role: str, sources: Iterable[Source] = SOURCES) -> tuple[Source, ...]:
    """The sources (of ``sources``, in their order) the daemon gives ``role`` (``ROLES``)."""
    if role not in ROLES:
        raise KeyError(f"no role {role!r} (known: {', '.join(sorted(ROLES))})")
    return tuple(s for s in sources if role in s.roles)


def source_of(argv: Iterable[str]) -> str | None:
    """The source that runs ``argv`` (longest declared prefix): ``ethtool -S net_rail0`` -> ``counters``."""
    args = tuple(argv)
    best: tuple[int, str | None] = (0, None)
    for s in SOURCES:
        for prefix in s.commands:
            if args[:len(prefix)] == prefix and len(prefix) > best[0]:
                best = (len(prefix), s.name)
    return best[1]


def touches_firmware(argv: Iterable[str]) -> bool:
    """Whether ``argv`` reads a NIC's firmware: the source that runs it is ``firmware_touching``
    and ``argv`` is not one of its ``no_device`` queries (the one declaration the daemon's firmware
    gate goes by)."""
    args = tuple(argv)
    name = source_of(args)
    if name is None:
        return False
    src = by_name(name)
    return src.firmware_touching and not any(args[:len(p)] == p for p in src.no_device)


def after(ctx: Context, part: Part) -> Context:
    """The context the next sources see once ``part`` is read: the fields its source ``provides``."""
    src = _BY_NAME.get(part.source)
    if src is None or not src.provides:
        return ctx
    given: dict[str, Any] = {k: part.gives[k] for k in src.provides if k in part.gives}
    return replace(ctx, **given) if given else ctx


def compose(base: Snapshot | None, parts: Mapping[str, Part]) -> Snapshot:
    """A snapshot from the latest part of every source (fields of missing parts stay as in ``base``);
    the reasons of what is missing in registry order."""
    snap = base or Snapshot(taken_at=time.time())
    values: dict[str, Any] = {}
    unavailable: list[tuple[str, str]] = []
    busy: list[str] = []
    for src in SOURCES:
        part = parts.get(src.name)
        if part is None:
            continue
        values.update(part.fields)
        unavailable.extend(part.unavailable)
        busy.extend(b for b in part.busy if b not in busy)
    dump = next((parts[s.name] for s in SOURCES if s.netlink and s.name in parts), None)
    if dump is not None:
        values["taken_at"] = dump.taken_at
    return replace(snap, **values, unavailable=tuple(unavailable), busy=tuple(busy))
