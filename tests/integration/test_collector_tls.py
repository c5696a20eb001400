"""The collector over TLS, as a process over SeaweedFS, with a CA and certificates made here: it
serves HTTPS only, a client that does not trust its CA gets no answer, a bundle goes through, and a
renewed certificate is served without a restart; without a certificate it refuses to start unless
plain HTTP is asked for."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.collector_env import BUCKET, ROOT, Collector, Weed, running_weed
from tests.support.tls_certs import issue, make_ca, served_serial

from tests.support.collector_helpers import AGENT_TOKEN, HELLO, OPERATOR_TOKEN, body, write_tokens  # isort: skip

pytestmark = pytest.mark.slow


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


async def _upload(url: str, ctx: ssl.SSLContext, raw: bytes) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {AGENT_TOKEN}", "Content-Type": "application/vnd.railscope.frames+msgpack"}
    async with aiohttp.ClientSession() as s, s.post(url + "/v1/bundles", data=raw, headers=headers, ssl=ctx) as r:
        return r.status, await r.json(content_type=None)


def test_collector_serves_tls_and_reloads_a_renewed_certificate(tmp_path: Path, weed: Weed) -> None:
    ca = make_ca(tmp_path / "pki")
    cert, key = tmp_path / "pki" / "tls.crt", tmp_path / "pki" / "tls.key"
    first = issue(ca, cert, key)
    col = Collector(tmp_path, f"s3://{BUCKET}/railscope", "--tls-cert-file", str(cert), "--tls-key-file", str(key),
                    endpoint=weed.endpoint, tokens=write_tokens(tmp_path / "tokens"), ca_file=str(ca.file)).start()
    try:
        assert col.url.startswith("https://")
        trusting = ssl.create_default_context(cafile=str(ca.file))
        with urllib.request.urlopen(col.url + "/healthz", timeout=5, context=trusting) as r:
            assert r.status == 200
        # Plain HTTP on the same port gets no answer; a client without the CA refuses the server.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(col.url.replace("https://", "http://") + "/healthz", timeout=5).read()
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(col.url + "/healthz", timeout=5, context=ssl.create_default_context())
        status, doc = asyncio.run(_upload(col.url, trusting, body(HELLO, b"bundle bytes over tls")))
        assert status == 200 and doc["status"] == "stored", doc
        req = urllib.request.Request(col.url + "/v1/bundles", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
        with urllib.request.urlopen(req, timeout=5, context=trusting) as r:
            assert HELLO.bundle in r.read().decode()

        # The CLI verifies the collector with --collector-ca-file; without it, it refuses the server.
        (tmp_path / "tokens" / "operator").chmod(0o600)  # the CLI reads only a token file of its owner
        cli = [sys.executable, "-m", "agent.cli", "bundles", "--collector", col.url, "--token-file",
               str(tmp_path / "tokens" / "operator")]
        res = subprocess.run([*cli, "--collector-ca-file", str(ca.file), "ls"], capture_output=True, text=True,
                             timeout=60, cwd=ROOT)
        assert res.returncode == 0 and HELLO.bundle in res.stdout, res.stderr
        res = subprocess.run([*cli, "ls"], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert res.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in res.stderr, res.stderr
        stored = doc["key"]
        out = tmp_path / "got"
        res = subprocess.run([*cli, "--collector-ca-file", str(ca.file), "get", stored, "-o", str(out)],
                             capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert res.returncode == 0, res.stderr
        got = sorted(out.iterdir())
        assert [p.name for p in got] == [stored.rsplit("/", 1)[1], stored.rsplit("/", 1)[1] + ".sha256"]
        # as a capture writes its bundle: 0600, it holds topology and kernel logs
        assert {oct(p.stat().st_mode & 0o777) for p in got} == {"0o600"}

        assert served_serial("127.0.0.1", col.port, ca.file) == first
        second = issue(ca, cert, key)  # a renewal: new key, new certificate, swapped in place
        deadline = time.monotonic() + 30
        while served_serial("127.0.0.1", col.port, ca.file) != second:
            assert time.monotonic() < deadline, "the renewed certificate was never served"
            time.sleep(0.5)
        with urllib.request.urlopen(col.url + "/healthz", timeout=5, context=trusting) as r:
            assert r.status == 200
    finally:
        col.stop()


def test_collector_without_a_certificate_refuses_plain_http_unless_asked(tmp_path: Path) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    argv = [sys.executable, "-m", "agent.cli", "collector", "--port", "1", "--store", str(tmp_path / "store"),
            "--operator-token-file", tokens["operator_token_file"]]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 3 and "--tls-cert-file" in res.stderr and "--insecure-dev" in res.stderr
    ca = make_ca(tmp_path / "pki")
    issue(ca, tmp_path / "a.crt", tmp_path / "a.key")
    issue(ca, tmp_path / "b.crt", tmp_path / "b.key")
    res = subprocess.run([*argv, "--tls-cert-file", str(tmp_path / "a.crt"), "--tls-key-file", str(tmp_path / "b.key")],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 3 and "cannot be used" in res.stderr  # a certificate with another's key
