"""End to end: a node image recorded in the netns, uploaded to a collector process (local store and
SeaweedFS), fetched with ``railscope bundles get``, checked with ``sha256sum -c``, and diagnosed by
``doctor --from`` exactly as the recorded image is."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.clients.collector import CollectorClient
from proto.frames import Hello
from proto.keys import bundle_id
from tests.support.collector_env import BUCKET, ROOT, Collector, Weed, running_weed
from tests.support.netns import RailNetns

from tests.support.collector_helpers import AGENT_TOKEN, OPERATOR_TOKEN, write_tokens  # isort: skip

pytestmark = [pytest.mark.netns, pytest.mark.slow]


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _doctor(path: Path) -> dict:
    res = _cli("doctor", "--json", "--from", str(path))
    assert res.returncode in (0, 1, 2), res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_recorded_bundle_through_the_collector_diagnoses_the_same(rails: RailNetns, tmp_path: Path, kind: str,
                                                                   request: pytest.FixtureRequest) -> None:
    image = tmp_path / "img"
    res = rails.railscope("record", "-o", str(image))
    assert res.returncode == 0, res.stderr
    bundle = tmp_path / "bundle.tar.gz"
    with tarfile.open(bundle, "w:gz") as tf:
        tf.add(image, arcname="img")
    incident = "inc-e2e"
    hello = Hello(bundle=bundle_id(incident, "gpu-node-017", "replay/v1"), node="gpu-node-017", cluster="lab",
                  incident=incident, reason="manual", agent="0.1.0", created=int(time.time()), plan="replay/v1")

    tokens = write_tokens(tmp_path / "tokens")
    extra: dict = {}
    store = str(tmp_path / "store")
    if kind == "s3":
        extra["endpoint"] = request.getfixturevalue("weed").endpoint
        store = f"s3://{BUCKET}/railscope"
    col = Collector(tmp_path, store, cluster="lab", tokens=tokens, **extra).start()
    try:
        async def send():  # type: ignore[no-untyped-def]
            async with CollectorClient(col.url, token=AGENT_TOKEN) as client:
                return await client.upload(hello, bundle)

        res = asyncio.run(send())
        assert res.status == "stored"
        assert res.key.startswith(f"lab/{time.strftime('%Y-%m-%d', time.gmtime(hello.created))}/{incident}/"
                                  "gpu-node-017-")
        op = tmp_path / "operator-token"
        op.write_text(OPERATOR_TOKEN)
        op.chmod(0o600)  # a token file readable by others is refused
        ls = _cli("bundles", "--collector", col.url, "--token-file", str(op), "ls", "--json", "--cluster", "lab")
        assert ls.returncode == 0, ls.stderr
        keys = [b["key"] for b in json.loads(ls.stdout)["bundles"]]
        assert keys == [res.key]
        table = _cli("bundles", "--collector", col.url, "--token-file", str(op), "ls")
        assert table.stdout.splitlines()[0].split()[:2] == ["KEY", "NODE"] and res.key in table.stdout
        out = tmp_path / "fetched"
        got = _cli("bundles", "--collector", col.url, "--token-file", str(op), "get", res.key, "-o", str(out))
        assert got.returncode == 0, got.stderr
        ver = _cli("bundles", "--collector", col.url, "--token-file", str(op), "verify", res.key)
        assert ver.returncode == 0 and ver.stdout.strip().endswith("OK")
        denied = _cli("bundles", "--collector", col.url, "ls")
        assert denied.returncode == 1 and "401" in denied.stderr
    finally:
        col.stop()
    name = res.key.rsplit("/", 1)[-1]
    check = subprocess.run(["sha256sum", "-c", name + ".sha256"], cwd=out, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (out / name).read_bytes() == bundle.read_bytes()
    assert _doctor(out / name) == _doctor(image)


def test_railscope_capture_streams_to_the_collector(rails: RailNetns, tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    # The collector runs in the node's namespace: the capture there reaches it on that loopback.
    col = Collector(tmp_path, str(tmp_path / "store"), cluster="lab", tokens=tokens, netns=rails.node).start()
    token = tmp_path / "agent-token"
    token.write_text(AGENT_TOKEN)
    token.chmod(0o600)  # a token file readable by others is refused
    out = tmp_path / "out"
    out.mkdir()
    argv = ("capture", "-o", str(out) + "/", "--collector", col.url, "--collector-token-file", str(token),
            "--node", "gpu-node-017", "--cluster", "lab", "--incident", "inc-cap", "--recorder-gap", "0",
            "--deadline", "30")
    try:
        first = rails.railscope(*argv, timeout=180)
        again = rails.railscope(*argv, timeout=180)  # a second capture for the same incident, node and plan
    finally:
        col.stop()
    assert first.returncode == 0, first.stderr
    lines = first.stdout.strip().splitlines()
    local = Path(lines[0])
    status, key = lines[-1].split()[1:]
    assert status == "stored" and key.startswith("lab/") and "/inc-cap/gpu-node-017-" in key
    stored = tmp_path / "store" / key
    assert stored.read_bytes() == local.read_bytes()  # the streamed bytes are the file's
    assert (tmp_path / "store" / (key + ".sha256")).read_text().split()[0] == lines[1].split()[1]
    assert _doctor(stored) == _doctor(local)
    # the bundle id is (incident, node, plan@start): a second run is a bundle of its own, stored beside
    assert again.returncode == 0, again.stderr
    status2, key2 = again.stdout.strip().splitlines()[-1].split()[1:]
    assert status2 == "stored" and key2 != key and "/inc-cap/gpu-node-017-" in key2
