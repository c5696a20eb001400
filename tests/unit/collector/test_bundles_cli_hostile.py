"""``railscope bundles`` prints what a collector answers: a stand-in (not the collector; an aiohttp app
on loopback) answers a listing and a verification holding terminal escapes, which must reach the
terminal as visible text, never as escapes."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from aiohttp import web

ROOT = Path(__file__).resolve().parents[3]
EVIL = "\x1b]0;owned\x07\x1b[2J\x1b[31m"


def _stand_in() -> tuple[str, threading.Event]:
    import asyncio

    ready, stop = threading.Event(), threading.Event()
    url: list[str] = []

    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"bundles": [{"key": f"c/2026-12-01/i/n-x{EVIL}.tar.gz", "node": f"n{EVIL}",
                                               "time": EVIL, "bytes": 1, "sha256": EVIL}]})

    async def verify(request: web.Request) -> web.Response:
        return web.json_response({"key": EVIL, "bytes": 1, "sha256": EVIL, "ok": False, "recorded": EVIL})

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/v1/bundles", listing)
        app.router.add_post("/v1/bundles/{tail:.*}/verify", verify)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait(10)
    return url[0], stop


def test_bundles_ls_and_verify_show_escapes_never_send_them() -> None:
    url, stop = _stand_in()
    try:
        outs = [subprocess.run([sys.executable, "-m", "agent.cli", "bundles", "--collector", url, *args],
                               capture_output=True, text=True, timeout=60, cwd=ROOT)
                for args in (["ls"], ["verify", "c/2026-12-01/i/n-x.tar.gz"])]
    finally:
        stop.set()
    for res in outs:
        assert "\x1b" not in res.stdout and "\x07" not in res.stdout and "\x1b" not in res.stderr, res
    assert "\\x1b]0;owned\\x07" in outs[0].stdout
