"""The incident pages: operator token (HTTP Basic or bearer) or 401 with a Basic challenge; the fleet
view across nodes; each bundle's report page rendered once from the store and cached beside it."""

from __future__ import annotations

import io
import re
import tarfile
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from collector import pages
from tests.support import script
from tests.support.collector_helpers import (
    AGENT_TOKEN,
    AGENT_TOKEN_18,
    AGENT_TOKEN_N1,
    HELLO,
    OPERATOR_TOKEN,
    body,
    local_settings,
    post,
    run,
    running,
)
from tests.support.pages import basic, bundle_of, fetch

IMAGES = Path(__file__).resolve().parents[2] / "images"
NODES = (("gpu-node-017", AGENT_TOKEN, "rail-link-down"), ("gpu-node-018", AGENT_TOKEN_18, "rail-link-down"),
         ("n1", AGENT_TOKEN_N1, "spectrumx-2rail-healthy"))


async def store_three(url: str) -> dict[str, bytes]:
    out = {}
    for i, (node, token, image) in enumerate(NODES):
        data = bundle_of(image)
        hello = replace(HELLO, node=node, bundle=f"b{i}", incident="inc-fleet")
        status, doc, _ = await post(url, body(hello, data), token=token)
        assert status == 200, doc
        out[doc["key"]] = data
    return out


def test_incident_page_fleet_view_and_report_pages(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)

    async def go() -> None:
        async with running(settings) as (url, _col):
            keys = await store_three(url)
            incident = "/ui/incidents/prod-east/2026-12-01/inc-fleet"

            status, text, headers = await fetch(url, incident)
            assert status == 401 and headers["WWW-Authenticate"].startswith("Basic realm=")
            assert "inc-fleet" not in text and "gpu-node-017" not in text
            status, _, _ = await fetch(url, incident, basic("wrong-token"))
            assert status == 401
            status, _, _ = await fetch(url, incident, {"Authorization": f"Bearer {AGENT_TOKEN}"})
            assert status == 403

            status, text, headers = await fetch(url, incident, basic(OPERATOR_TOKEN))
            assert status == 200 and headers["Content-Type"].startswith("text/html")
            assert "default-src 'none'" in headers["Content-Security-Policy"] and "<script" not in text
            fleet = text[text.index('id=fleet'):text.index('id=nodes')]
            assert re.search(r"RailLinkDown</td><td class=mono>net_rail0</td><td><b>2</b> nodes", fleet)
            assert re.search(r"RdmaLinkDown</td><td class=mono>rdma_rail0</td><td><b>2</b> nodes", fleet)
            assert "gpu-node-017, gpu-node-018" in fleet and "n1" not in fleet
            nodes = text[text.index("id=nodes"):]
            assert nodes.index("gpu-node-017") < nodes.index("gpu-node-018") < nodes.index("<b>n1</b>")
            assert nodes.count("RailLinkDown") == 2 and "OK</span> no findings" in nodes

            for key, data in keys.items():
                status, page, _ = await fetch(url, f"/ui/bundles/{key}", {"Authorization": f"Bearer {OPERATOR_TOKEN}"})
                assert status == 200 and page.startswith("<!DOCTYPE html>") and 'id="rails"' in page
                status, _, _ = await fetch(url, f"/ui/bundles/{key}")
                assert status == 401
                async with aiohttp.ClientSession() as s, s.get(f"{url}/ui/bundles/{key}/download",
                                                               headers=basic(OPERATOR_TOKEN)) as r:
                    assert r.status == 200 and await r.read() == data
            status, text, _ = await fetch(url, "/ui/", basic(OPERATOR_TOKEN))
            assert status == 200 and 'href="/ui/incidents/prod-east/2026-12-01/inc-fleet"' in text

            # The analysis is cached beside each bundle: a bundle whose bytes are now unreadable still
            # gives its page (it is never read again for the same digest).
            store = Path(settings.store.path)
            for key in keys:
                cache = store / f"{key}.analysis.json"
                assert cache.is_file() and cache.stat().st_mode & 0o777 == 0o640, cache
                (store / key).write_bytes(b"not a bundle any more")
            key = next(iter(keys))
            status, page, _ = await fetch(url, f"/ui/bundles/{key}", basic(OPERATOR_TOKEN))
            assert status == 200 and "RailLinkDown" in page
            status, _, _ = await fetch(url, "/v1/bundles?incident=inc-fleet",
                                       {"Authorization": f"Bearer {OPERATOR_TOKEN}"})
            assert status == 200

    run(go())


def test_an_unreadable_bundle_gets_a_page_that_says_so(tmp_path: Path) -> None:
    async def go() -> None:
        async with running(local_settings(tmp_path)) as (url, _col):
            hello = replace(HELLO, incident="inc-bad")
            status, doc, _ = await post(url, body(hello, b"\x1f\x8b\x08\x00 not a gzip stream"))
            assert status == 200
            status, page, _ = await fetch(url, f"/ui/bundles/{doc['key']}", basic(OPERATOR_TOKEN))
            assert status == 422 and "cannot be read" in page
            status, page, _ = await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-bad", basic(OPERATOR_TOKEN))
            assert status == 200 and "UNREADABLE" in page
            status, page, _ = await fetch(url, "/ui/incidents/prod-east/2026-12-01/..", basic(OPERATOR_TOKEN))
            assert status in (400, 404)
            status, page, _ = await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-none", basic(OPERATOR_TOKEN))
            assert status == 404

    run(go())


@pytest.mark.slow
def test_report_of_a_stored_bundle_by_its_key(tmp_path: Path) -> None:
    import asyncio
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    token = tmp_path / "operator-token"
    token.write_text(OPERATOR_TOKEN + "\n")
    token.chmod(0o600)  # a token file readable by others is refused

    def report(url: str, key: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "agent.cli", "report", key, "--collector", url, *extra],
                              capture_output=True, text=True, timeout=120, cwd=root)

    async def go() -> None:
        async with running(local_settings(tmp_path)) as (url, _col):
            keys = await store_three(url)
            key = next(k for k in keys if "gpu-node-017" in k)
            res = await asyncio.to_thread(report, url, key, "--token-file", str(token))
            assert res.returncode == 2, res.stderr  # RailLinkDown is critical
            assert "RailLinkDown  net_rail0" in res.stdout and f"({key})" in res.stdout
            res = await asyncio.to_thread(report, url, key)
            assert res.returncode == 3 and "answered 401" in res.stderr and "Traceback" not in res.stderr
            res = await asyncio.to_thread(report, url, key.replace("b0", "b9"), "--token-file", str(token))
            assert res.returncode == 3 and "answered 404" in res.stderr

    run(go())


def test_bundle_text_is_escaped_on_the_incident_page(tmp_path: Path) -> None:

    make_images = script("tests/images/make_images.py")

    img = make_images.Image.load(IMAGES / "spectrumx-2rail-healthy")
    evil = "<script>alert(1)</script>\x1b[2J"
    make_images.set_events(img, [{"ts": make_images.ENDED_AT - 5, "code": "LinkFlapping", "severity": "warning",
                                  "subject": "net_rail0" + evil, "message": evil, "evidence": {}}])
    img.save(tmp_path / "evil", "evil", {})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(tmp_path / "evil", arcname="evil")

    async def go() -> None:
        async with running(local_settings(tmp_path)) as (url, _col):
            status, doc, _ = await post(url, body(replace(HELLO, incident="inc-evil"), buf.getvalue()))
            assert status == 200
            status, page, _ = await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-evil", basic(OPERATOR_TOKEN))
            assert status == 200 and "LinkFlapping" in page
            assert "<script>" not in page and "&lt;script&gt;" in page and "\x1b" not in page
            status, page, _ = await fetch(url, f"/ui/bundles/{doc['key']}", basic(OPERATOR_TOKEN))
            assert status == 200 and "<script>" not in page and "&lt;script&gt;alert(1)" in page

    run(go())


def test_the_analysis_of_a_page_stays_off_the_live_node() -> None:
    """docs/design.md §1: the collector uses the agent's offline parts only, also for what it imports late."""
    import json
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    probe = ("import json, sys, collector.app, collector.analysis as a\n"
             "from agent.expectations import expectations_from_env\n"
             "d = a.analyse_file(sys.argv[1], 'x', expectations_from_env())\n"
             "print(json.dumps([sorted(d), sorted(sys.modules)]))")
    res = subprocess.run([sys.executable, "-c", probe, str(IMAGES / "pfc-storm-recorder")], capture_output=True,
                         text=True, timeout=60, cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    keys, mods = json.loads(res.stdout)
    assert keys == ["doctor", "html"]
    forbidden = ("agent.host.live", "agent.service", "agent.capture", "pyroute2")
    assert [m for m in mods if any(m == f or m.startswith(f + ".") for f in forbidden)] == []


def test_one_incident_page_analyses_a_bounded_number_of_bundles(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "PAGE_ANALYSES", 1)

    async def go() -> list[int]:
        async with running(local_settings(tmp_path)) as (url, _col):
            await store_three(url)
            pending = []
            for _ in range(4):
                status, text, _h = await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-fleet",
                                               basic(OPERATOR_TOKEN))
                assert status == 200
                pending.append(text.count("analysis pending"))
            return pending

    assert run(go()) == [2, 1, 0, 0]


def test_an_analysis_that_runs_out_of_memory_is_shown_on_the_page(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pages, "ANALYSIS_MEMORY_BYTES", 12 << 20)  # too little to import the analysis

    async def go() -> tuple[int, str, int, str]:
        async with running(local_settings(tmp_path)) as (url, _col):
            keys = await store_three(url)
            status, text, _h = await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-fleet",
                                           basic(OPERATOR_TOKEN))
            rs, rtext, _h = await fetch(url, "/ui/bundles/" + next(iter(keys)), basic(OPERATOR_TOKEN))
            return status, text, rs, rtext

    status, text, rs, rtext = run(go())
    assert status == 200 and text.count("the analysis failed") == 3
    assert rs == 422 and "the analysis failed" in rtext


def test_a_bundles_recorded_expectations_judge_its_report_page(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import shutil

    from agent.expectations import expectations_from_env
    from collector.analysis import analyse_file

    img = tmp_path / "img"
    shutil.copytree(Path(__file__).resolve().parents[2] / "images" / "rail-missing", img, symlinks=True)
    man = json.loads((img / "manifest.json").read_text())
    man["expectations"] = {"rails": 3, "expect_eswitch_mode": "legacy"}
    (img / "manifest.json").write_text(json.dumps(man))
    monkeypatch.delenv("RAILSCOPE_RAILS", raising=False)
    doc = analyse_file(str(img), "x", expectations_from_env())
    found = {(f["code"], f["subject"]) for f in doc["doctor"]["findings"]}
    assert ("RailMissing", "net_rail2") in found and any(c == "EswitchModeUnexpected" for c, _ in found)
    assert doc["doctor"]["expectations"]["rails"] == {"value": 3, "from": "bundle"}
    assert "Judged with: expect_eswitch_mode=legacy (bundle), rails=3 (bundle)" in doc["html"]
    # The collector's own RAILSCOPE_* variables are its command line: they win, and the page says so.
    monkeypatch.setenv("RAILSCOPE_RAILS", "2")
    doc = analyse_file(str(img), "x", expectations_from_env())
    assert ("RailMissing", "net_rail2") not in {(f["code"], f["subject"]) for f in doc["doctor"]["findings"]}
    assert "rails=2 (RAILSCOPE_RAILS; the bundle had 3)" in doc["html"]


def test_the_incidents_list_says_when_how_bad_which_alerts_and_how_many_nodes(tmp_path: Path) -> None:
    """An alert's incident lists its time, the alert's severity and name, its nodes and bundles and their
    size in readable units; an agent's own event capture names its event; a report page links back to
    its incident and to its download."""
    from tests.support.alerts import alert, payload
    from tests.support.collector_helpers import ALERTING_TOKEN

    async def go() -> None:
        async with running(local_settings(tmp_path)) as (url, _col):
            async with aiohttp.ClientSession() as s, s.post(
                    url + "/v1/alerts", data=payload([alert("gpu-node-017", severity="critical"),
                                                      alert("gpu-node-018")]),
                    headers={"Authorization": f"Bearer {ALERTING_TOKEN}"}) as r:
                queued = (await r.json())["queued"]
            incident = queued[0]["incident"]
            for q, token in zip(sorted(queued, key=lambda q: q["node"]), (AGENT_TOKEN, AGENT_TOKEN_18), strict=True):
                hello = replace(HELLO, node=q["node"], bundle=q["id"], incident=incident, plan="node-bundle/v1")
                status, _doc, _ = await post(url, body(hello, bundle_of("rail-link-down")), token=token)
                assert status == 200
            event = replace(HELLO, bundle="bevent1", incident="linkflapping-20261201t093000z")
            status, stored, _ = await post(url, body(event, b"x" * 3000))
            assert status == 200

            status, text, _ = await fetch(url, "/ui/", basic(OPERATOR_TOKEN))
            assert status == 200
            rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr><td class=mono><a href="[^"]*">([^<]+)</a>.*?</tr>',
                                                                  text)}
            row = rows[incident]
            assert "2026-12-01 09:38:23Z" in row  # when it was captured, in words
            assert "CRITICAL</span>" in row and "<td>RailscopeLinkFlapping</td>" in row  # how bad, what asked
            assert "<td>2</td><td>2</td>" in row  # two nodes, two bundles
            assert re.search(r"<td>\d+\.\d KiB</td>", row), row  # a size a person reads
            assert "LinkFlapping (the agent&#x27;s own event)" in rows["linkflapping-20261201t093000z"]
            assert "2.9 KiB" in rows["linkflapping-20261201t093000z"]

            # a report page, and the page of a bundle that cannot be read, lead back and to the download
            status, listing, _ = await fetch(url, f"/v1/bundles?incident={incident}",
                                             {"Authorization": f"Bearer {OPERATOR_TOKEN}"})
            good = re.search(r'"key": ?"([^"]+)"', listing).group(1)  # type: ignore[union-attr]
            for key, want in ((good, 200), (stored["key"], 422)):
                status, page, _ = await fetch(url, f"/ui/bundles/{key}", basic(OPERATOR_TOKEN))
                cluster, date, inc, _name = key.split("/")
                assert status == want and page.index("<nav") < page.index("<h1")
                assert f'href="/ui/incidents/{cluster}/{date}/{inc}">Incident {inc}</a>' in page
                assert re.search(rf'href="/ui/bundles/{re.escape(key)}/download">Download the bundle \([\d.]+ KiB\)</a>',
                                 page)

    run(go())


def test_a_browser_asked_for_its_token_is_counted_apart_from_refused_agents(tmp_path: Path) -> None:
    """A 401 to a page is a login prompt (railscope_collector_page_challenges_total), not a refusal: an
    alert on agents refused (railscope_collector_refusals_total) stays quiet while people open /ui."""
    async def go() -> str:
        async with running(local_settings(tmp_path)) as (url, _col):
            for headers in (None, None, basic("wrong-token")):
                status, _, _ = await fetch(url, "/ui/", headers)
                assert status == 401
            status, _doc, _ = await post(url, body(HELLO, b"x" * 100), token="not-a-token-of-this-collector")
            assert status == 401
            _status, text, _ = await fetch(url, "/metrics")
            return text

    text = run(go())
    assert 'railscope_collector_page_challenges_total{endpoint="ui_index"} 3.0' in text
    assert 'railscope_collector_refusals_total{endpoint="ui_index"' not in text
    assert 'railscope_collector_refusals_total{endpoint="upload",reason="unauthenticated"} 1.0' in text


def _noisy_node(tmp_path: Path) -> bytes:
    """A node whose findings say much: 150 rails' events, each message at the 4,096 characters an event
    keeps, of text outside ASCII (six bytes a character in JSON). Its doctor summary was past the 1 MiB
    the pages read back of a summary."""
    make_images = script("tests/images/make_images.py")
    img = make_images.Image.load(IMAGES / "spectrumx-2rail-healthy")
    make_images.set_events(img, [{"ts": make_images.ENDED_AT - 5 - i, "code": "LinkFlapping", "severity": "warning",
                                  "subject": f"net_rail{i}", "message": f"rail {i} flapped: " + "链路抖动 " * 1000,
                                  "evidence": {}} for i in range(150)])
    img.save(tmp_path / "noisy", "noisy", {})
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        tf.add(tmp_path / "noisy", arcname="noisy")
    return buf.getvalue()


def test_a_big_nodes_summary_fits_the_read_cap_and_its_second_view_analyses_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A summary past the read cap was never read back: every view analysed the bundle again, holding the
    replica's one analysis slot. The summary is written to fit (long lists cut, with a count of all)."""
    import json

    from collector import limits

    analyses = []
    real = pages._analyse_in_child

    async def counted(path: str, source: str) -> dict:
        analyses.append(source)
        return await real(path, source)

    monkeypatch.setattr(pages, "_analyse_in_child", counted)
    data = _noisy_node(tmp_path)
    settings = local_settings(tmp_path)

    async def go() -> tuple[str, str]:
        async with running(settings) as (url, _col):
            status, doc, _ = await post(url, body(replace(HELLO, incident="inc-noisy"), data))
            assert status == 200
            texts = []
            for _ in range(2):
                status, text, _ = await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-noisy", basic(OPERATOR_TOKEN))
                assert status == 200 and "LinkFlapping" in text
                texts.append(text)
            status, _page, _ = await fetch(url, f"/ui/bundles/{doc['key']}", basic(OPERATOR_TOKEN))
            assert status == 200
            return doc["key"], texts[1]

    key, text = run(go())
    assert len(analyses) == 1, analyses  # the second view and the report page read the cache
    summary = (Path(settings.store.path) / f"{key}.analysis.json").read_bytes()
    assert len(summary) <= limits.SUMMARY_BYTES
    doctor = json.loads(summary)["doctor"]
    assert doctor["findings_total"] == 150 and 0 < len(doctor["findings"]) <= limits.SUMMARY_FINDINGS
    assert "and 146 more" in text  # the page counts what the summary cut


def test_the_analysis_lock_map_keeps_no_entry_for_a_bundle_nobody_is_analysing() -> None:
    """One lock per bundle while pages wait on it, none after: listing 10,000 bundles left 10,000 locks."""
    import asyncio
    import gc
    from types import SimpleNamespace

    from aiohttp import web

    from collector.state import ANALYSIS_LOCKS, STATE
    from collector.storage import Stored
    from proto.keys import parse_name

    class Store:
        async def get_small(self, rel: str, cap: int) -> None:
            return None

    app = web.Application()
    pages.setup(app)
    app[STATE] = SimpleNamespace(store=Store())  # type: ignore[assignment]
    request = SimpleNamespace(app=app)

    async def go() -> int:
        for i in range(10_000):
            key = parse_name("prod-east", "2026-12-01", "inc-many", f"n{i}-20261201T093823Z-b{i}.tar.gz")
            got = await pages.analysis_of(request, Stored(key, 100, "0" * 64), analyse=False)  # type: ignore[arg-type]
            assert got.get("pending")
        gc.collect()
        return len(app[ANALYSIS_LOCKS])

    assert asyncio.run(go()) <= 1


def _row(text: str, incident: str) -> str:
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr><td class=mono><a href="[^"]*">([^<]+)</a>.*?</tr>', text)}
    return rows[incident]


def test_the_incidents_list_shows_the_worst_of_the_alert_and_the_findings(tmp_path: Path) -> None:
    """An operator's capture (no alert) and a warning alert whose nodes have critical findings: once their
    bundles are analysed the list says CRITICAL, not "–" nor the alert's WARNING."""
    from tests.support.alerts import alert, payload
    from tests.support.collector_helpers import ALERTING_TOKEN

    async def go() -> tuple[str, str, str, str, str]:
        async with running(local_settings(tmp_path)) as (url, _col):
            await store_three(url)  # inc-fleet: two nodes with RailLinkDown (critical), no alert
            async with aiohttp.ClientSession() as s, s.post(
                    url + "/v1/alerts", data=payload([alert("gpu-node-017", severity="warning")]),
                    headers={"Authorization": f"Bearer {ALERTING_TOKEN}"}) as r:
                q = (await r.json())["queued"][0]
            hello = replace(HELLO, node=q["node"], bundle=q["id"], incident=q["incident"], plan="node-bundle/v1")
            status, stored, _ = await post(url, body(hello, bundle_of("rail-link-down")))
            assert status == 200
            _s, before, _ = await fetch(url, "/ui/", basic(OPERATOR_TOKEN))
            for inc in ("inc-fleet", q["incident"]):
                cluster, date, _i, _n = stored["key"].split("/")
                status, _t, _ = await fetch(url, f"/ui/incidents/{cluster}/{date}/{inc}", basic(OPERATOR_TOKEN))
                assert status == 200
            _s, after, _ = await fetch(url, "/ui/", basic(OPERATOR_TOKEN))
            return (_row(before, "inc-fleet"), _row(before, q["incident"]), _row(after, "inc-fleet"),
                    _row(after, q["incident"]), q["incident"])

    fleet0, alerted0, fleet1, alerted1, _inc = run(go())
    assert "CRITICAL</span>" in fleet1, fleet1  # the findings' worst
    assert "CRITICAL</span>" in alerted1 and "WARNING</span>" not in alerted1, alerted1
    assert "WARNING</span>" in alerted0 and "CRITICAL" not in alerted0  # the alert's, nothing analysed yet
    assert "CRITICAL" not in fleet0 and "not analysed" in fleet0


def test_the_incident_page_shows_each_findings_message_and_each_next_step_once(tmp_path: Path) -> None:
    import html

    from agent.expectations import expectations_from_env
    from agent.findings import next_step
    from collector.analysis import analyse_file

    want = analyse_file(str(IMAGES / "rail-link-down"), "x", expectations_from_env())["doctor"]["findings"]
    assert want

    async def go() -> str:
        async with running(local_settings(tmp_path)) as (url, _col):
            await store_three(url)
            status, text, _ = await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-fleet", basic(OPERATOR_TOKEN))
            assert status == 200
            return text

    text = run(go())
    nodes = text[text.index("id=nodes"):]
    for f in want[:pages.WORST]:
        assert nodes.count(html.escape(f["message"], quote=True)) == 2, f  # on both broken nodes' rows
    steps = {next_step(f["code"]) for f in want} - {None}
    assert steps
    for step in steps:
        assert text.count(html.escape(step, quote=True)) == 1, step
    listed = text[text.index("id=steps"):text.index("id=nodes")]
    assert "RailLinkDown" in listed and "gpu-node-017, gpu-node-018" in listed  # what each step serves


def test_an_analysis_made_again_leaves_one_worst_marker_and_the_list_says_unreadable(tmp_path: Path) -> None:
    """The marker the incidents list reads follows the latest analysis (new expectations judge a bundle
    again); a bundle that cannot be read is analysed, and the list says so rather than "not analysed"."""
    from proto.keys import parse_name

    key = parse_name("prod-east", "2026-12-01", "inc-m", "n1-20261201T093823Z-b1.tar.gz")

    def doc(*sevs: str) -> dict:
        return {"doctor": {"findings": [{"code": "X", "subject": "s", "severity": s} for s in sevs]}}

    async def go() -> tuple[list[list[str]], str]:
        async with running(local_settings(tmp_path)) as (url, col):
            seen = []
            for d in (doc("warning", "critical"), doc(), doc("info"), {"error": "not a bundle"}):
                await pages._cache_put(col, key, d, None)
                seen.append([r.rsplit(".", 1)[1] for r, _t in await col.store.list_small("prod-east/.worst")])
            status, _stored, _ = await post(url, body(replace(HELLO, incident="inc-bad"), b"\x1f\x8b\x08 no gzip"))
            assert status == 200
            await fetch(url, "/ui/incidents/prod-east/2026-12-01/inc-bad", basic(OPERATOR_TOKEN))
            _s, text, _ = await fetch(url, "/ui/", basic(OPERATOR_TOKEN))
            return seen, _row(text, "inc-bad")

    seen, row = run(go())
    assert seen == [["critical"], ["ok"], ["info"], ["unreadable"]]
    assert "1 unreadable" in row and "not analysed" not in row
