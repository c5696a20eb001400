"""The agent client against the real agent app over a node image: over TCP with a token file, and the
data socket; events, recorder and image, and the refusals."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from pathlib import Path

import pytest
from aiohttp import web

from agent.clients.agent import AgentClient, AgentClientError, fetch_image
from agent.config import AgentSettings
from agent.host.recorded import open_image
from agent.service.app import _unix_site, make_app
from agent.service.daemon import Agent

TOKEN = "agent-client-data-token-0123456789"


def _files(tmp_path: Path, mode: int = 0o600) -> tuple[str, str]:
    server = tmp_path / "data-token"
    server.write_text(TOKEN + "\n")
    server.chmod(0o600)
    client = tmp_path / "client-token"
    client.write_text(TOKEN + "\n")
    client.chmod(mode)
    return str(server), str(client)


def _serve(agent: Agent, body, unix: str | None = None):  # type: ignore[no-untyped-def]
    async def main():  # type: ignore[no-untyped-def]
        runner = web.AppRunner(make_app(agent))
        await runner.setup()
        site = _unix_site(runner, unix) if unix else web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = "unix:" + unix if unix else f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        try:
            for _ in range(300):
                if agent.ready:
                    break
                await asyncio.sleep(0.02)
            return await asyncio.get_running_loop().run_in_executor(None, body, url)
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def _agent(image: Path, **kw: object) -> Agent:
    settings = AgentSettings(listen="127.0.0.1", port=0, intervals=(("counters", 0.2), ("links", 1.0)),
                             watch_links=False, node="gpu-node-7", **kw)  # type: ignore[arg-type]
    return Agent(settings, host_factory=lambda: open_image(str(image)))


def test_events_recorder_and_image_over_tcp_with_a_token_file(example_image: Path, tmp_path: Path) -> None:
    server, client = _files(tmp_path)
    agent = _agent(example_image, data_token_file=server)

    def body(url: str) -> tuple:
        c = AgentClient(url, token_file=client)
        image = c.image(reason="test", incident="inc-1")
        written = fetch_image(url, str(tmp_path / "img"), token_file=client)
        return c.events(), c.recorder(), image, written

    events, recorder, image, written = _serve(agent, body)
    assert events == []
    assert recorder is not None and all(json.loads(line) for line in recorder.decode().splitlines())
    with tarfile.open(fileobj=io.BytesIO(image)) as tf:
        manifest = next(m for m in tf.getmembers() if m.name.endswith("/manifest.json"))
        meta = json.load(tf.extractfile(manifest))  # type: ignore[arg-type]
    assert meta["reason"] == "test" and meta["incident"] == "inc-1"
    assert (Path(written) / "manifest.json").is_file()


def test_a_recorder_that_is_off_is_none_not_an_error(example_image: Path, tmp_path: Path) -> None:
    server, client = _files(tmp_path)
    agent = _agent(example_image, data_token_file=server, recorder_window_s=0.0)

    def body(url: str):  # type: ignore[no-untyped-def]
        return AgentClient(url, token_file=client).recorder()

    assert _serve(agent, body) is None


def test_the_data_socket_needs_no_token(example_image: Path, tmp_path: Path) -> None:
    agent = _agent(example_image)

    def body(url: str) -> tuple:
        c = AgentClient(url)
        return c.events(), c.recorder() is not None

    assert _serve(agent, body, unix=str(tmp_path / "run" / "agent.sock")) == ([], True)


def test_refusals_name_their_cause(example_image: Path, tmp_path: Path) -> None:
    server, loose = _files(tmp_path, mode=0o604)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token\n")
    wrong.chmod(0o600)
    agent = _agent(example_image, data_token_file=server)

    def body(url: str) -> dict[str, AgentClientError]:
        out = {}
        for name, kw in (("loose", {"token_file": loose}), ("wrong", {"token_file": str(wrong)}), ("none", {})):
            with pytest.raises(AgentClientError) as info:
                AgentClient(url, **kw).events()  # type: ignore[arg-type]
            out[name] = info.value
        return out

    got = _serve(agent, body)
    assert got["loose"].usage and f"--agent-token-file {loose}: readable by others (mode 0604)" in str(got["loose"])
    assert f"chmod 600 {loose}" in str(got["loose"])
    assert got["wrong"].status == 401 and not got["wrong"].usage
    assert got["none"].status in (401, 403)
    with pytest.raises(AgentClientError, match="expected unix:PATH or http://ADDR:PORT") as bad:
        AgentClient("ftp://x")
    assert bad.value.usage
    with pytest.raises(AgentClientError, match=r"Connection refused|No such file"):
        AgentClient("unix:" + str(tmp_path / "no.sock")).events()
