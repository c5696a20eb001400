"""A collector process whose local store sits on a full filesystem (a tmpfs of a few MiB): it says
503 store_unavailable (the agent tries again), leaves no claim that blocks the bundle id, and never
lists a bundle without its ``.sha256``; once there is room the same bundle is stored."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.collector_env import Collector

from tests.support.collector_helpers import HELLO, OPERATOR_TOKEN, body, post, write_tokens  # isort: skip

pytestmark = pytest.mark.slow
MiB = 1 << 20
PAGE = 4096


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    d = tmp_path / "tiny"
    d.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(d)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {res.stderr.decode().strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", str(d)], check=False)


def _fill(d: Path, leave: int) -> Path:
    """A filler file that leaves ``leave`` bytes free."""
    st = os.statvfs(d)
    free = st.f_bavail * st.f_frsize
    filler = d / "filler"
    with open(filler, "ab") as fh:
        fh.write(b"\0" * max(0, free - leave))
    return filler


def _listed(url: str) -> list[dict]:
    req = urllib.request.Request(url + "/v1/bundles", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())["bundles"]


# Room for part of the data (the first 4 MiB write fails), then for the data and 0-5 pages more: the
# claim, the .sha256 and the directories each need a page at some point, whichever one runs out.
LEAVES = [MiB] + [6 * MiB + k * PAGE for k in range(6)]


@pytest.mark.parametrize("leave", LEAVES, ids=["data"] + [f"data+{k}p" for k in range(6)])
def test_a_full_store_is_503_and_blocks_nothing(tmp_path: Path, tiny: Path, leave: int) -> None:
    data = os.urandom(6 * MiB)
    col = Collector(tmp_path, str(tiny / "store"), tokens=write_tokens(tmp_path / "tokens")).start()
    try:
        filler = _fill(tiny, leave)
        status, doc, headers = asyncio.run(post(col.url, body(HELLO, data, chunk=MiB)))
        listed = _listed(col.url)
        assert [b for b in listed if b.get("sha256") is None] == [], "a bundle listed without its .sha256"
        filler.unlink()
        if status != 200:
            assert (status, doc.get("error")) == (503, "store_unavailable"), (status, doc)
            assert "Retry-After" in headers
            # Room again: the same bundle id is stored, not blocked by what the failure left.
            status, doc, _ = asyncio.run(post(col.url, body(HELLO, data, chunk=MiB)))
            assert status == 200 and doc["status"] == "stored", doc
        (only,) = _listed(col.url)
        assert only["sha256"] == doc["sha256"]
    finally:
        col.stop()
