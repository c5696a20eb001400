"""The agent's CA for an https collector may be absent: the chart mounts the ``ca.crt`` of the collector's
TLS Secret optional (a ``kubectl create secret tls`` Secret has none), so the agent daemon, given a CA file
that does not exist, verifies the collector against the system's CAs (``SSL_CERT_FILE`` stands in for the
system store here). A CA file that exists is the only CA trusted; a command (``railscope bundles``) still
refuses a CA file that is not there."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import pytest
from aiohttp import web

from agent.clients.collector import CollectorClient, CollectorError, RetryPolicy
from agent.config import AgentSettings
from agent.service.daemon import Agent
from collector.app import make_app
from tests.support import EXAMPLE_IMAGE
from tests.support.collector_helpers import OPERATOR_TOKEN, local_settings
from tests.support.tls_certs import CA, issue, make_ca


async def _listing(tmp_path: Path, issuer: CA, **client_kw: object) -> dict:
    """``GET /v1/bundles`` of a real collector app serving TLS with a certificate of ``issuer``."""
    issue(issuer, tmp_path / "tls.crt", tmp_path / "tls.key")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    runner = web.AppRunner(make_app(local_settings(tmp_path)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with CollectorClient(f"https://127.0.0.1:{port}", token=OPERATOR_TOKEN,
                                   call_retry=RetryPolicy(attempts=1), **client_kw) as c:  # type: ignore[arg-type]
            return await c.list()
    finally:
        await runner.cleanup()


@pytest.fixture
def system_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CA:
    """A CA in the system store (where OpenSSL's default verify paths look)."""
    ca = make_ca(tmp_path / "system")
    monkeypatch.delenv("RAILSCOPE_COLLECTOR_CA_FILE", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.file))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "no-dir"))
    return ca


def test_an_absent_optional_ca_file_means_the_system_cas(tmp_path: Path, system_ca: CA,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    absent = tmp_path / "secret" / "collector-ca.crt"
    with caplog.at_level(logging.WARNING):
        listed = asyncio.run(_listing(tmp_path, system_ca, ca_file=str(absent), ca_optional=True))
    assert "bundles" in listed
    assert any(str(absent) in r.getMessage() and "system" in r.getMessage() for r in caplog.records)


def test_a_present_ca_file_is_the_only_ca_trusted(tmp_path: Path, system_ca: CA) -> None:
    other = make_ca(tmp_path / "other", cn="another CA")
    with pytest.raises(CollectorError):
        asyncio.run(_listing(tmp_path, system_ca, ca_file=str(other.file), ca_optional=True))


def test_a_command_still_refuses_a_ca_file_that_is_not_there(tmp_path: Path, system_ca: CA) -> None:
    with pytest.raises(CollectorError) as err:
        asyncio.run(_listing(tmp_path, system_ca, ca_file=str(tmp_path / "missing.crt")))
    assert err.value.code == "ca_file"


def test_the_agent_daemon_takes_its_ca_file_as_optional(tmp_path: Path) -> None:
    from agent.host.recorded import open_image

    settings = AgentSettings(listen="127.0.0.1", port=0, watch_links=False, node="n1",
                             collector_url="https://collector.railscope.svc:9842",
                             collector_ca_file=str(tmp_path / "collector-ca.crt"))
    agent = Agent(settings, host_factory=lambda: open_image(str(EXAMPLE_IMAGE)))
    assert agent.collector is not None and agent.collector.ca_optional

