"""The collector's incident pages in a browser: three netns nodes capture bundles for one incident,
upload them to a collector process backed by SeaweedFS, and headless Chromium (JavaScript off) loads
the incident page and a report page with the operator token, and gets 401 without it."""

from __future__ import annotations

import asyncio
import html
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.clients.collector import CollectorClient
from agent.findings import next_step
from proto.frames import Hello
from proto.keys import bundle_id
from tests.support import chromium
from tests.support.collector_env import BUCKET, Collector, Weed, running_weed
from tests.support.netns import RailNetns, ip, netns_available

pytestmark = [pytest.mark.netns, pytest.mark.slow]

NODES = ("node-a", "node-b", "node-c")
OPERATOR = "operator-token-pages-0123456789abcdef"
INCIDENT = "inc-fabric"


@pytest.fixture
def nodes() -> Iterator[dict[str, RailNetns]]:
    why = netns_available()
    if why:
        pytest.skip(why)
    if chromium.chromium_binary() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    tag = uuid.uuid4().hex[:6]
    envs = {n: RailNetns(node=f"rs-p{n[-1]}-{tag}", switch=f"rs-ps{n[-1]}-{tag}") for n in NODES}
    try:
        for env in envs.values():
            ip("netns", "add", env.node)
            ip("netns", "add", env.switch)
            for i in range(2):
                ip("-n", env.node, "link", "add", f"net_rail{i}", "mtu", "9000", "type", "veth", "peer", "name",
                    f"peer{i}", "netns", env.switch)
                ip("-n", env.switch, "link", "set", f"peer{i}", "up")
                ip("-n", env.node, "link", "set", f"net_rail{i}", "up")
            for i in range(2):
                env.set_peer(i, "up")
        yield envs
    finally:
        for env in envs.values():
            ip("netns", "del", env.node, check=False)
            ip("netns", "del", env.switch, check=False)


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


def test_incident_and_report_pages_in_chromium(nodes: dict[str, RailNetns], weed: Weed, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # veth rails are rails by expectation only (no PCI function, no udev rule): the collector's
    # reports judge with the same RAILSCOPE_* expectations as doctor.
    monkeypatch.setenv("RAILSCOPE_RAILS", "2")
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    agent_tokens = {n: f"agent-token-{n}-0123456789abcdef" for n in NODES}
    (tokens / "agent").write_text("".join(f"{n} {t}\n" for n, t in agent_tokens.items()))
    (tokens / "agent").chmod(0o600)  # token files: their owner's alone
    (tokens / "operator").write_text(OPERATOR + "\n")
    (tokens / "operator").chmod(0o600)  # token files: their owner's alone
    col = Collector(tmp_path, f"s3://{BUCKET}/railscope", endpoint=weed.endpoint, cluster="lab",
                    tokens={"agent_token_file": str(tokens / "agent"),
                            "operator_token_file": str(tokens / "operator")}).start()
    try:
        # A fabric fault: rail 0's link is down on two of the three nodes.
        nodes["node-a"].set_peer(0, "down")
        nodes["node-b"].set_peer(0, "down")
        keys = {}
        for node, env in nodes.items():
            out = tmp_path / f"{node}.tar.gz"
            res = env.railscope("capture", "-o", str(out), "--node", node, "--cluster", "lab", "--incident",
                                INCIDENT, "--recorder-gap", "0", timeout=180)
            assert res.returncode == 0, res.stderr
            hello = Hello(bundle=bundle_id(INCIDENT, node, "replay/v1"), node=node, cluster="lab", incident=INCIDENT,
                          reason="manual", agent="0.1.0", created=int(time.time()), plan="replay/v1")
            async def send(hello: Hello = hello, out: Path = out, token: str = agent_tokens[node]):  # type: ignore[no-untyped-def]
                async with CollectorClient(col.url, token=token) as client:
                    return await client.upload(hello, out)

            got = asyncio.run(send())
            assert got.status == "stored"
            keys[node] = got.key
        date = keys["node-a"].split("/")[1]
        incident_url = f"{col.url}/ui/incidents/lab/{date}/{INCIDENT}"
        auth = {"Authorization": f"Bearer {OPERATOR}"}

        denied = chromium.load(incident_url, boxes=("#nodes",))
        assert denied.status == 401 and "#nodes" not in denied.boxes and "node-a" not in denied.dom

        page = chromium.load(incident_url, headers=auth, boxes=("#nodes", "#fleet", "#steps"))
        (tmp_path / "incident.png").write_bytes(page.png)
        assert page.status == 200 and page.requests == [incident_url]
        for node in NODES:
            assert node in page.dom
        assert "RailLinkDown" in page.dom and "<b>2</b> nodes" in page.dom
        # each finding says what it is; each next step is said once, with the findings it serves
        nodes_dom = page.dom[page.dom.index('id="nodes"'):]
        assert nodes_dom.count("rail 0: net_rail0 is not up") == 2
        step = html.escape(next_step("RailLinkDown") or "", quote=False)
        assert step and page.dom.count(step) == 1
        steps_dom = page.dom[page.dom.index('id="steps"'):page.dom.index('id="nodes"')]
        assert "RailLinkDown" in steps_dom and "node-a, node-b" in steps_dom
        _w, _h, rows = chromium.decode_png(page.png)
        assert chromium.ink(rows, page.boxes["#nodes"]) > 1500  # the node list is drawn
        assert chromium.ink(rows, page.boxes["#fleet"]) > 800  # and the shared finding
        assert chromium.ink(rows, page.boxes["#steps"]) > 800  # and the steps

        # the incidents list: no alert asked for these captures, their findings say how bad
        listing = chromium.load(f"{col.url}/ui/", headers=auth, boxes=("#incidents",))
        assert listing.status == 200 and "CRITICAL" in listing.dom

        report_url = f"{col.url}/ui/bundles/{keys['node-a']}"
        denied = chromium.load(report_url, boxes=("#rails",))
        assert denied.status == 401 and "#rails" not in denied.boxes
        rep = chromium.load(report_url, headers=auth, boxes=("#rails", "#findings-h"))
        (tmp_path / "report.png").write_bytes(rep.png)
        assert rep.status == 200 and rep.requests == [report_url]
        assert "RailLinkDown" in rep.dom and "net_rail0" in rep.dom
        _w, _h, rows = chromium.decode_png(rep.png)
        assert chromium.ink(rows, rep.boxes["#rails"]) > 1000
        # The analysis sits beside the bundle in the bucket.
        assert f"railscope/{keys['node-a']}.analysis.json" in weed.objects("railscope/")
    finally:
        col.stop()
