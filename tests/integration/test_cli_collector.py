"""The CLI against a collector it cannot simply reach: a TLS collector whose certificate a private CA
signed (trusted with --collector-ca-file, refused at once without it, with the hint), a closed port
(refused at once), a collector that answers 503 (retried with a line per retry, ended by --deadline).
Every command that talks to the collector is run as a person runs it."""

from __future__ import annotations

import asyncio
import http.server
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.collector_env import ROOT, Collector, free_port
from tests.support.tls_certs import issue, make_ca

from tests.support.collector_helpers import AGENT_TOKEN, HELLO, OPERATOR_TOKEN, body, write_tokens  # isort: skip


async def _upload(url: str, ctx: ssl.SSLContext, raw: bytes) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/vnd.railscope.frames+msgpack"}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/bundles", data=raw, headers=headers, ssl=ctx) as r:
        return r.status, await r.json(content_type=None)


@pytest.fixture
def tls_collector(tmp_path: Path) -> Iterator[tuple[Collector, Path, Path, str]]:
    """A TLS collector (the embedded store: no S3 needed) whose certificate a CA made here signed; the
    collector, the CA file, the operator's token file, a stored bundle's key."""
    ca = make_ca(tmp_path / "pki")
    cert, key = tmp_path / "pki" / "tls.crt", tmp_path / "pki" / "tls.key"
    issue(ca, cert, key)
    tokens = write_tokens(tmp_path / "tokens")
    col = Collector(tmp_path, str(tmp_path / "store"), "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                    "--cluster", HELLO.cluster, tokens=tokens, ca_file=str(ca.file)).start()
    try:
        status, doc = asyncio.run(_upload(col.url, ssl.create_default_context(cafile=str(ca.file)),
                                          body(HELLO, b"bundle bytes over tls")))
        assert status == 200, doc
        yield col, ca.file, Path(tokens["operator_token_file"]), doc["key"]
    finally:
        col.stop()


def _cli(*argv: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAILSCOPE_")}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "agent.cli", *argv], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)})
    return res, time.monotonic() - t0


def _commands(url: str, token: Path, key: str, out: Path) -> dict[str, list[str]]:
    """Every command that talks to the collector, as a person runs it."""
    agent_token = out.parent / "agent-token"
    agent_token.write_text(AGENT_TOKEN + "\n")
    agent_token.chmod(0o600)
    (out.parent / "host").mkdir(exist_ok=True)  # an empty node: the capture is small and quick
    (out.parent / "captured").mkdir(exist_ok=True)
    return {
        "capture upload": ["capture", "--host-root", str(out.parent / "host"), "--node", "gpu-node-017",
                           "--recorder-gap", "0", "-o", f"{out.parent / 'captured'}/", "--collector", url,
                           "--collector-token-file", str(agent_token), "--cluster", HELLO.cluster],
        "bundles ls": ["bundles", "--collector", url, "--token-file", str(token), "ls"],
        "bundles get": ["bundles", "get", key, "-o", str(out), "--collector", url, "--token-file", str(token)],
        "report": ["report", "--collector", url, "--token-file", str(token), key],
        "capture request": ["capture", "--collector", url, "--token-file", str(token), "--node", "gpu-node-017",
                            "--incident", "inc-1", "--cluster", HELLO.cluster],
    }


def test_every_collector_command_trusts_a_private_ca_by_flag_and_fails_fast_without_it(
        tmp_path: Path, tls_collector: tuple[Collector, Path, Path, str]) -> None:
    col, ca_file, token, key = tls_collector
    for name, argv in _commands(col.url, token, key, tmp_path / "got").items():
        res, took = _cli(*argv, "--collector-ca-file", str(ca_file))
        assert "unrecognized arguments" not in res.stderr and "CERTIFICATE" not in res.stderr, (name, res.stderr)
        # report: the stored bytes are no bundle (it got them); the others succeed
        assert res.returncode == (3 if name == "report" else 0), (name, res.stderr)
        if name == "capture upload":
            assert "collector stored " in res.stdout, res.stdout
        res, took = _cli(*argv)
        assert res.returncode != 0 and took < 5, (name, took, res.stderr)
        assert "CERTIFICATE_VERIFY_FAILED" in res.stderr and "--collector-ca-file" in res.stderr, (name, res.stderr)
        assert "Traceback" not in res.stderr and "attempt" not in res.stderr, (name, res.stderr)
    # plain HTTP to the TLS-only port: said at once, https:// suggested
    res, took = _cli("bundles", "--collector", col.url.replace("https://", "http://"), "--token-file", str(token), "ls")
    assert res.returncode == 1 and took < 5 and "https://" in res.stderr.split("(")[-1], res.stderr
    # a token the collector does not know, and a key it does not hold: final, with what to check
    bad = tmp_path / "bad-token"
    bad.write_text("not-a-token\n")
    bad.chmod(0o600)
    res, took = _cli("bundles", "--collector", col.url, "--collector-ca-file", str(ca_file), "--token-file", str(bad),
                     "ls")
    assert res.returncode == 1 and took < 5 and "401" in res.stderr and "--token-file" in res.stderr, res.stderr
    res, took = _cli("bundles", "--collector", col.url, "--collector-ca-file", str(ca_file), "--token-file", str(token),
                     "get", key.replace(".tar.gz", "x.tar.gz"), "-o", str(tmp_path / "none"))
    assert res.returncode == 1 and took < 5 and "404" in res.stderr and "bundles ls" in res.stderr, res.stderr


def test_a_closed_port_fails_fast_with_a_hint(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(OPERATOR_TOKEN + "\n")
    token.chmod(0o600)
    url = f"http://127.0.0.1:{free_port()}"
    key = f"prod-east/2026-12-01/inc-1/gpu-node-017-20261201T093823Z-{HELLO.bundle}.tar.gz"
    for name, argv in _commands(url, token, key, tmp_path / "got").items():
        res, took = _cli(*argv)
        assert res.returncode != 0 and took < 5, (name, took, res.stderr)
        assert "is the collector running" in res.stderr and "Traceback" not in res.stderr, (name, res.stderr)


class _Busy(http.server.BaseHTTPRequestHandler):
    """A collector that is there but cannot take anything now: 503, come back in a second."""

    def do_GET(self) -> None:
        doc = b'{"error": "unavailable", "message": "the store does not answer"}'
        self.send_response(503)
        self.send_header("Retry-After", "1")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(doc)))
        self.end_headers()
        self.wfile.write(doc)

    do_POST = do_GET

    def log_message(self, *_args: object) -> None:
        pass


def test_a_collector_answering_503_is_retried_with_progress_until_the_deadline(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        res, took = _cli("bundles", "--collector", url, "ls", "--deadline", "4s")
        assert res.returncode == 1 and took < 4 + 3, (took, res.stderr)
        lines = [x for x in res.stderr.splitlines() if "attempt" in x]
        assert len(lines) >= 2, res.stderr  # Retry-After 1 s, a 4 s deadline: several attempts
        assert re.search(r"503 unavailable.*attempt 1 failed, next in \d+\.\d s, until \d\d:\d\d:\d\d", lines[0])
        assert "gave up" in res.stderr and "--deadline 4 s" in res.stderr, res.stderr
        # TLS asked of a plain-HTTP port: said at once
        res, took = _cli("bundles", "--collector", url.replace("http://", "https://"), "ls")
        assert res.returncode == 1 and took < 5 and "http://" in res.stderr.split("(")[-1], res.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_a_collector_that_never_answers_ends_by_the_deadline(tmp_path: Path) -> None:
    """A connection taken and never answered (a hung collector, a black-holing proxy): each attempt's
    wait for an answer is bounded by the time left, so the command ends by --deadline, not after
    minutes of reads waiting."""
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen(16)  # the kernel takes the connections; nobody reads them
        res, took = _cli("bundles", "--collector", f"http://127.0.0.1:{port}", "ls", "--deadline", "3s")
    assert res.returncode == 1 and took < 3 + 3, (took, res.stderr)
    assert "--deadline 3 s" in res.stderr and "Traceback" not in res.stderr, res.stderr
