"""``railscope capture --collector`` when the collector refuses the bundle for good: the command ends
at once (no retry can fix a 401, 403, 409, 413 or 422), says why and where the bundle is on disk.

A real collector process in the node's network namespace; the capture streams to it as it runs.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent.clients.collector import CollectorClient, CollectorError
from tests.support.collector_env import Collector
from tests.support.netns import RailNetns

from tests.support.collector_helpers import AGENT_TOKEN, HELLO, local_settings, running, write_tokens  # isort: skip

#: what a capture of the netns node takes at the most here (no NIC, nothing slow to read)
DEADLINE_S = 30


def test_a_refusal_after_the_hello_frees_the_producer_and_every_reader(tmp_path: Path) -> None:
    """A 403 comes once the collector read the hello (the body has started): the capture still
    finishes, and no thread is left waiting for a chunk (``asyncio.run`` would wait for it)."""
    token = tmp_path / "token"
    token.write_text(AGENT_TOKEN)
    token.chmod(0o600)  # the token reader refuses files others may read
    made: list[int] = []

    def produce(on_chunk) -> str:  # type: ignore[no-untyped-def]
        for _ in range(3):
            on_chunk(os.urandom(200_000))
            made.append(1)
        # The capture is still reading the node when the 403 comes: the request body's read of
        # the next chunk is waiting on the queue, and it is the first to wait there.
        time.sleep(1.5)
        for _ in range(30):  # more chunks than the queue holds, then the end
            on_chunk(os.urandom(200_000))
            made.append(1)
        return "bundle written"

    async def go() -> tuple[object, object]:
        async with running(local_settings(tmp_path)) as (url, _col):
            async with CollectorClient(url, token_file=str(token)) as client:
                return await client.upload_while_producing(replace(HELLO, node="gpu-node-018"), produce)

    before = threading.active_count()
    done: list[tuple[object, object]] = []
    th = threading.Thread(target=lambda: done.append(asyncio.run(go())), daemon=True)
    th.start()
    th.join(60)
    assert not th.is_alive(), "upload_while_producing never returned after a 403"
    produced, res = done[0]
    assert produced == "bundle written" and len(made) == 33
    assert isinstance(res, CollectorError) and res.status == 403 and not res.retryable
    assert threading.active_count() <= before + 1  # asyncio.run() joined its executor's threads


@pytest.mark.netns
@pytest.mark.slow
@pytest.mark.parametrize(("node", "token", "status", "limits"), [
    ("gpu-node-018", AGENT_TOKEN, "403", ()),  # a token bound to another node: the first mistake made
    ("gpu-node-017", "not-a-token-of-this-collector-000", "401", ()),
    ("gpu-node-017", AGENT_TOKEN, "413", ("--max-bundle-size", "2000")),  # refused mid-stream
])
def test_a_refused_upload_ends_the_capture_at_once_and_names_the_bundle(
        rails: RailNetns, tmp_path: Path, node: str, token: str, status: str, limits: tuple[str, ...]) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    col = Collector(tmp_path, str(tmp_path / "store"), *limits, cluster="lab", tokens=tokens, netns=rails.node).start()
    token_file = tmp_path / "agent-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    try:
        res = rails.railscope("capture", "-o", str(out) + "/", "--collector", col.url, "--collector-token-file",
                              str(token_file), "--node", node, "--cluster", "lab", "--incident", "inc-refused",
                              "--recorder-gap", "0", "--deadline", str(DEADLINE_S), timeout=DEADLINE_S + 60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"railscope capture still running {DEADLINE_S + 60} s after a {status} (it hangs)")
    finally:
        col.stop()
    took = time.monotonic() - t0
    bundles = sorted(out.glob("*.tar.gz"))
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert status in res.stderr and "retry" not in res.stderr.lower().replace("retrying cannot", ""), res.stderr
    assert len(bundles) == 1 and str(bundles[0]) in res.stderr, (bundles, res.stderr)
    assert Path(str(bundles[0]) + ".sha256").exists()  # the bundle is complete, to send again later
    assert took < DEADLINE_S + 30
    assert not list((tmp_path / "store").rglob("*.tar.gz"))  # nothing stored
