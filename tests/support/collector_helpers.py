"""A real collector app on a loopback port for the tests, with token files and frame builders."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import aiohttp
from aiohttp import web

from collector.app import handler_args, make_app
from collector.config import CollectorSettings, StoreURL
from collector.state import STATE, Collector
from proto.frames import Chunk, End, Hello, encode

AGENT_TOKEN = "agent-token-gpu-node-017-0123456789"
AGENT_TOKEN_18 = "agent-token-gpu-node-018-0123456789"
AGENT_TOKEN_N1 = "agent-token-n1-00000000000000000000"
OPERATOR_TOKEN = "operator-token-0123456789abcdef"
ALERTING_TOKEN = "alerting-token-0123456789abcdef"
CREATED = 1796117903  # 2026-12-01T09:38:23Z

HELLO = Hello(bundle="b0123456789abcdef01234567", node="gpu-node-017", cluster="prod-east", incident="inc-1",
              reason="LinkFlapping", agent="0.1.0", created=CREATED, plan="replay/v1")


def write_tokens(d: Path) -> dict[str, str]:
    d.mkdir(parents=True, exist_ok=True)
    (d / "agent").write_text(f"# node token\ngpu-node-017 {AGENT_TOKEN}\ngpu-node-018 {AGENT_TOKEN_18}\n"
                             f"n1 {AGENT_TOKEN_N1}\n")
    (d / "operator").write_text(OPERATOR_TOKEN + "\n")
    (d / "alerting").write_text(ALERTING_TOKEN + "\n")
    for name in ("agent", "operator", "alerting"):
        (d / name).chmod(0o600)  # token files are read only when their owner alone may read them
    return {"agent_token_file": str(d / "agent"), "operator_token_file": str(d / "operator"),
            "alerting_token_file": str(d / "alerting")}


def local_settings(tmp_path: Path, **kw: object) -> CollectorSettings:
    # The agent tokens are bound to HELLO's cluster (an agent token is always bound to one).
    base = CollectorSettings(store=StoreURL(kind="local", path=str(tmp_path / "store")), cluster=HELLO.cluster,
                             **write_tokens(tmp_path / "tokens"))  # type: ignore[arg-type]
    return replace(base, **kw)  # type: ignore[arg-type]


@asynccontextmanager
async def running(settings: CollectorSettings) -> AsyncIterator[tuple[str, Collector]]:
    app = make_app(settings)
    runner = web.AppRunner(app, **handler_args(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}", app[STATE]
    finally:
        await runner.cleanup()


def body(hello: Hello, data: bytes, chunk: int = 1 << 16, end: End | None = None) -> bytes:
    parts = [encode(hello)]
    for seq, off in enumerate(range(0, len(data), chunk)):
        parts.append(encode(Chunk(seq, data[off:off + chunk])))
    parts.append(encode(end or End(len(data), hashlib.sha256(data).hexdigest())))
    return b"".join(parts)


async def post(url: str, raw: bytes | Iterable[bytes], token: str | None = AGENT_TOKEN,
               expect100: bool = False) -> tuple[int, dict, dict]:
    headers = {"Content-Type": "application/vnd.railscope.frames+msgpack"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/bundles", data=raw, headers=headers,
                                                    expect100=expect100) as r:
        return r.status, await r.json(content_type=None), dict(r.headers)


async def get(url: str, path: str, token: str | None = OPERATOR_TOKEN, method: str = "GET") -> tuple[int, bytes, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as s, s.request(method, url + path, headers=headers) as r:
        return r.status, await r.read(), dict(r.headers)


def files(root: Path) -> list[str]:
    """Every file under the store, hidden temporary ones included; not the bundle-id claims
    (``<cluster>/.ids/``), which :func:`claims` lists."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).parts[1:2] != (".ids",))


def claims(root: Path) -> list[str]:
    """The bundle-id claims of the local store: ``<cluster>/.ids/<node>+<bundle>``."""
    return sorted(str(p.relative_to(root)) for p in root.glob("*/.ids/*")) if root.exists() else []


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def spool_bundle(root: Path, hello: Hello, data: bytes, created_at: float, sha: str | None = None) -> Path:
    """A bundle in the node spool as ``agent.capture.spool.Spool.capture`` leaves it (the .sha256 last)."""
    import json

    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    name = f"{hello.node}-{hello.bundle}"
    p = root / f"{name}.tar.gz"
    p.write_bytes(data)
    digest = sha or hashlib.sha256(data).hexdigest()
    (root / f"{name}.tar.gz.sha256").write_text(f"{digest}  {p.name}\n")
    meta = {**hello.to_json(), "name": name, "bytes": len(data), "sha256": digest, "partial": False,
            "spooled_at": created_at}
    (root / f"{name}.json").write_text(json.dumps(meta))
    return p
