"""Helpers for the capture tests: real scripts as the commands, a real directory as the host root,
and a stand-in *replay* plug-in that hands the runner the rails of a made-up snapshot (no NIC
exists here to read them from; the runner only needs the rail -> PF map)."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agent.capture.plugin import Plugin
from agent.model import EthtoolStats, Link, Snapshot

#: argv[0]s the runner tests run (their own scripts): the allowlist admits them in these tests only
TEST_TOOLS: set[str] = set()


def allow(tool: str) -> str:
    """Admit ``tool`` (any argv) past the capture's allowlist for the current test."""
    TEST_TOOLS.add(tool)
    return tool


def script(bindir: Path, name: str, body: str) -> str:
    """An executable ``#!/bin/sh`` script (argv[0] is its path: the runner never runs a shell)."""
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return allow(str(path))


def plugin(plug: Plugin, **kw: Any) -> SimpleNamespace:
    return SimpleNamespace(PLUGIN=plug, **kw)


def fake_replay(rails: dict[str, str]) -> SimpleNamespace:
    """A replay stand-in: a snapshot whose rails (netdev -> PCI function) are ``rails``."""
    links = tuple(Link(ifindex=i + 1, ifname=n, parent_bus="pci", parent_dev=pf)
                  for i, (n, pf) in enumerate(sorted(rails.items())))
    snap = Snapshot(taken_at=0.0, node="node-t", links=links,
                    ethtool=tuple(EthtoolStats(n, ()) for n in sorted(rails)))
    return SimpleNamespace(PLUGIN=Plugin("replay", 1, ()), record=lambda ctx, rec: snap)


def members(bundle: bytes) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tf:
        for m in tf.getmembers():
            if m.isfile():
                f = tf.extractfile(m)
                assert f is not None
                out[m.name.split("/", 1)[1]] = f.read()
    return out


def manifest(bundle: bytes) -> dict[str, Any]:
    return json.loads(members(bundle)["manifest.json"])


def items(bundle: bytes) -> dict[str, dict[str, Any]]:
    return {i["path"]: i for i in manifest(bundle)["items"]}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


__all__ = ["alive", "fake_replay", "items", "manifest", "members", "os", "plugin", "script"]
