"""The collector under hostile input and load, as a process of its own over SeaweedFS: what one
small bundle can make a page cost, and what half-sent requests can hold."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.collector_env import BUCKET, Collector, Weed, running_weed
from tests.support.hostile_bundles import hostile_bundle

from tests.support.collector_helpers import AGENT_TOKEN, AGENT_TOKEN_18, HELLO, OPERATOR_TOKEN, body, post, write_tokens  # isort: skip

pytestmark = pytest.mark.slow
MiB = 1 << 20


@pytest.fixture
def weed(tmp_path: Path) -> Iterator[Weed]:
    with running_weed(tmp_path / "weed") as w:
        yield w


def _get(url: str, token: str = OPERATOR_TOKEN, timeout: float = 300) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_hostile_bundles_keep_pages_and_collector_small(tmp_path: Path, weed: Weed) -> None:
    tokens = write_tokens(tmp_path / "tokens")
    col = Collector(tmp_path, f"s3://{BUCKET}/railscope", endpoint=weed.endpoint, tokens=tokens).start()
    try:
        keys = {}
        # 70,000 events of 300 characters (a 31 MB events.json in a bundle of a few hundred KiB),
        # and a recorder naming 50,000 netdevs.
        for name, node, token, data in (
                ("events", HELLO.node, AGENT_TOKEN, hostile_bundle(events=70_000, message=300)),
                ("netdevs", "gpu-node-018", AGENT_TOKEN_18, hostile_bundle(events=0, netdevs=50_000))):
            hello = replace(HELLO, node=node, bundle=f"b-{name}", incident="inc-hostile")
            status, doc, _ = asyncio.run(post(col.url, body(hello, data), token=token))
            assert status == 200, doc
            keys[name] = doc["key"]
        base_rss = col.rss_peak_kib()
        sizes = {}
        for name, key in keys.items():
            status, page = _get(f"{col.url}/ui/bundles/{key}")
            assert status == 200, page[:300]
            sizes[name] = len(page)
        date = keys["events"].split("/")[1]
        status, inc = _get(f"{col.url}/ui/incidents/{HELLO.cluster}/{date}/inc-hostile")
        assert status == 200 and b"gpu-node-018" in inc
        peak = col.rss_peak_kib()
        print(f"collector peak RSS {peak / 1024:.0f} MiB (before the pages {base_rss / 1024:.0f} MiB); "
              f"report pages {sizes['events'] / MiB:.2f} MiB (events), {sizes['netdevs'] / MiB:.2f} MiB (netdevs); "
              f"incident page {len(inc) / 1024:.0f} KiB")
        assert sizes["events"] < 2 * MiB and sizes["netdevs"] < 2 * MiB and len(inc) < 256 * 1024
        assert peak < 256 * 1024, f"collector peak RSS {peak / 1024:.0f} MiB"
        # The first events and series are shown, the rest counted.
        assert "69,800 more events" in _get(f"{col.url}/ui/bundles/{keys['events']}")[1].decode()
        assert "49,968 more netdevs" in _get(f"{col.url}/ui/bundles/{keys['netdevs']}")[1].decode()
        # /healthz was never starved meanwhile, and the analysis cache is two objects per bundle.
        assert _get(f"{col.url}/healthz")[0] == 200
    finally:
        col.stop()


def _half_sent(n: int, port: int, source: str) -> list:
    """``n`` connections from ``source`` that send a request line and one header, never the blank line."""
    import socket

    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def test_half_sent_requests_neither_starve_healthz_nor_stay_open(tmp_path: Path) -> None:
    import socket
    import time

    tokens = write_tokens(tmp_path / "tokens")
    # Not --plain-http (collector_env's default on loopback): behind a proxy there is no cap per address.
    col = Collector(tmp_path, str(tmp_path / "store"), "--header-timeout", "3s", "--max-conns-per-peer", "64",
                    "--insecure-dev", tokens=tokens)
    # A descriptor limit a few hundred connections reach, as a node's ulimit would at a larger scale.
    col.argv = ["prlimit", "--nofile=256:256", *col.argv]
    col.start()
    socks: list[socket.socket] = []
    try:
        socks = _half_sent(300, col.port, "127.0.0.2")
        started = time.monotonic()
        # Another peer is served at once, /healthz included.
        with urllib.request.urlopen(col.url + "/healthz", timeout=5) as r:
            assert r.status == 200
        # Past the header deadline the server has closed every half-sent request.
        time.sleep(max(0.0, started + 5 - time.monotonic()))
        still_open = 0
        for s in socks:
            s.settimeout(2)
            try:
                if s.recv(1024) != b"":
                    continue  # answered (408 or 400) and closed: it is not held
            except TimeoutError:
                still_open += 1
            except OSError:
                pass
        assert still_open == 0, f"{still_open} of {len(socks)} half-sent requests still open"
        log = col.log.read_bytes()
        assert len(log) < 256 * 1024, f"the collector logged {len(log)} bytes"
    finally:
        for s in socks:
            s.close()
        col.stop()


def _post_json(url: str, path: str, data: bytes, token: str) -> tuple[int, dict]:
    import json

    req = urllib.request.Request(url + path, data=data, method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, {"raw": body[:200].decode("utf-8", "replace")}


def _webhook(starts_at: str) -> bytes:
    import json

    return json.dumps({"version": "4", "groupKey": "{}:{alertname=\"RailLinkDown\"}", "status": "firing",
                       "receiver": "railscope", "alerts": [
                           {"status": "firing", "labels": {"alertname": "RailLinkDown", "node": "gpu-node-017"},
                            "startsAt": starts_at}]}).encode()


def test_hostile_json_is_a_400_never_a_500(tmp_path: Path) -> None:
    from tests.support.collector_helpers import ALERTING_TOKEN

    col = Collector(tmp_path, str(tmp_path / "store"), tokens=write_tokens(tmp_path / "tokens")).start()
    try:
        deep = b"[" * 100_000 + b"]" * 100_000
        got = {
            "nested alerts": _post_json(col.url, "/v1/alerts", b'{"version":"4","alerts":' + deep + b"}",
                                        ALERTING_TOKEN),
            "UTC year 0": _post_json(col.url, "/v1/alerts", _webhook("0001-01-01T00:30:00+01:00"), ALERTING_TOKEN),
            "UTC year 10000": _post_json(col.url, "/v1/alerts", _webhook("9999-12-31T23:30:00-01:00"),
                                         ALERTING_TOKEN),
            "nested request": _post_json(col.url, "/v1/requests", b'{"node":' + b"[" * 8000 + b"]" * 8000 + b"}", OPERATOR_TOKEN),
        }
        assert {k: s for k, (s, _d) in got.items()} == dict.fromkeys(got, 400), got
        assert all(d.get("error") in ("bad_json", "bad_alert", "bad_request") for _s, d in got.values()), got
        # and it still serves a good one
        status, doc = _post_json(col.url, "/v1/alerts", _webhook("2026-12-01T09:38:23Z"), ALERTING_TOKEN)
        assert status == 200, doc
    finally:
        col.stop()


def test_a_refused_header_line_never_puts_a_token_in_the_log(tmp_path: Path) -> None:
    import socket

    col = Collector(tmp_path, str(tmp_path / "store"), tokens=write_tokens(tmp_path / "tokens")).start()
    secret = "s3cret-bearer-0123456789abcdef"
    bad = (b"GET /v1/bundles HTTP/1.1\r\nHost: x\r\n",
           # a control character in the value: aiohttp refuses the line and logs what it refused
           b"Authorization: Bearer " + secret.encode() + b"\x01\r\n\r\n",
           b"Authorization: Basic " + __import__("base64").b64encode(f"op:{secret}".encode()) + b"\x7f\r\n\r\n",
           b"X-Long: " + b"a" * 9000 + b" Bearer " + secret.encode() + b"\r\n\r\n")
    try:
        for tail in bad[1:]:
            with socket.create_connection(("127.0.0.1", col.port), timeout=5) as s:
                s.sendall(bad[0] + tail)
                answer = s.recv(4096)
                assert answer.split(b" ")[1].startswith(b"4"), answer[:80]
        time.sleep(0.5)
        log = col.log.read_text(errors="replace")
        assert "Error handling request" in log or "Bad" in log  # the refusal is logged ...
        assert secret not in log and __import__("base64").b64encode(f"op:{secret}".encode()).decode() not in log
    finally:
        col.stop()


async def _trickle(url: str, token: str, hello, seconds: float) -> int:  # type: ignore[no-untyped-def]
    """An upload that sends its hello, then one small chunk every 0.3 s for ``seconds``: its status."""
    import aiohttp

    from proto.frames import Chunk, encode

    async def gen():  # type: ignore[no-untyped-def]
        yield encode(hello)
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        seq = 0
        while loop.time() < end:
            yield encode(Chunk(seq, b"x" * 64))
            seq += 1
            await asyncio.sleep(0.3)

    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/vnd.railscope.frames+msgpack"}
    try:
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/bundles", data=gen(), headers=headers) as r:
            return r.status
    except (aiohttp.ClientError, ConnectionError):
        return -1


def test_one_node_cannot_hold_every_upload_slot(tmp_path: Path) -> None:
    col = Collector(tmp_path, str(tmp_path / "store"), "--max-inflight", "3",
                    tokens=write_tokens(tmp_path / "tokens")).start()

    async def go() -> tuple[list[int], int]:
        trickles = [asyncio.create_task(_trickle(col.url, AGENT_TOKEN, replace(HELLO, bundle=f"t{i}"), 8))
                    for i in range(3)]
        await asyncio.sleep(1.5)
        other = replace(HELLO, node="gpu-node-018", bundle="other")
        status, _doc, _ = await post(col.url, body(other, b"a bundle of another node"), token=AGENT_TOKEN_18)
        return list(await asyncio.gather(*trickles)), status

    try:
        trickles, other = asyncio.run(go())
    finally:
        col.stop()
    assert other == 200, "another node's upload found every slot held by one node"
    assert trickles.count(429) >= 1  # the node's own uploads beyond its cap


def test_an_upload_has_a_deadline(tmp_path: Path) -> None:
    col = Collector(tmp_path, str(tmp_path / "store"), "--max-upload-duration", "2s",
                    tokens=write_tokens(tmp_path / "tokens")).start()
    try:
        started = time.monotonic()
        status = asyncio.run(_trickle(col.url, AGENT_TOKEN, HELLO, 20))
        took = time.monotonic() - started
    finally:
        col.stop()
    assert status == 408 and took < 10, (status, took)


def test_requests_written_straight_into_the_store_are_served_within_the_collectors_caps(tmp_path: Path) -> None:
    """Anyone who can write the bucket's _requests/ bypasses the alert policy; serving applies the caps
    again: one request of a node at a time, none within the cooldown after its last capture."""
    import json

    from proto.requests import request_for

    store = tmp_path / "store"
    col = Collector(tmp_path, str(store), tokens=write_tokens(tmp_path / "tokens")).start()
    try:
        now = time.time()
        for i in range(10):
            req = request_for(f"inc-{i}", HELLO.node, now=now + i, ttl_s=1800, params={"pod_netns": True},
                              cluster=HELLO.cluster)
            path = store / req.object_key()
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(req.dumps())
        status, page = _get(f"{col.url}/v1/requests?node={HELLO.node}&wait=0", token=AGENT_TOKEN)
        assert status == 200
        served = json.loads(page)["requests"]
        assert [r["incident"] for r in served] == ["inc-0"], [r["incident"] for r in served]
    finally:
        col.stop()


def test_behind_a_proxy_one_address_is_the_whole_fleet_and_has_no_cap_of_its_own(tmp_path: Path) -> None:
    # --plain-http: TLS ends in a sidecar, so every agent's connection comes from the sidecar's
    # address; a cap per address would reset every agent past it. The total still bounds them.
    import select
    import time

    col = Collector(tmp_path, str(tmp_path / "store"), "--max-conns-per-peer", "4", "--header-timeout", "5s",
                    tokens=write_tokens(tmp_path / "tokens"))
    assert "--plain-http" in col.argv
    col.start()
    socks = _half_sent(12, col.port, "127.0.0.2")
    try:
        time.sleep(0.5)
        closed = 0
        for s in select.select(socks, [], [], 0)[0]:
            try:
                closed += s.recv(1) == b""
            except OSError:
                closed += 1
        assert closed == 0, f"{closed} of 12 connections from the proxy's address closed by a per-peer cap of 4"
    finally:
        for s in socks:
            s.close()
        col.stop()


def test_behind_a_proxy_that_names_its_clients_each_client_has_its_cap(tmp_path: Path) -> None:
    # --proxy-protocol-from: the sidecar (127.0.0.2 here) begins each connection with a PROXY header
    # naming the agent; the cap per address is then each agent's, not the sidecar's, and a connection
    # from the sidecar without a header is refused.
    import select
    import socket
    import time

    col = Collector(tmp_path, str(tmp_path / "store"), "--max-conns-per-peer", "4", "--header-timeout", "5s",
                    "--proxy-protocol-from", "127.0.0.2/32", tokens=write_tokens(tmp_path / "tokens"))
    col.start()
    socks = []
    try:
        def one(client: str, port: int) -> socket.socket:
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", col.port))
            s.sendall(f"PROXY TCP4 {client} 127.0.0.1 {port} {col.port}\r\n".encode()
                      + b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            return s

        # 12 agents, 3 connections each: 36 connections from the sidecar, none past an agent's cap.
        socks = [one(f"10.2.0.{i + 1}", 40000 + k) for i in range(12) for k in range(3)]
        # One agent with 6: two past its cap of 4.
        greedy = [one("10.3.0.1", 41000 + k) for k in range(6)]
        time.sleep(0.5)

        def closed(group: list) -> int:
            n = 0
            for s in select.select(group, [], [], 0)[0]:
                try:
                    n += s.recv(1) == b""
                except OSError:
                    n += 1
            return n

        assert closed(socks) == 0, "an agent's connections were closed by the sidecar's count"
        assert closed(greedy) == 2
        bare = socket.create_connection(("127.0.0.1", col.port), source_address=("127.0.0.2", 0))
        bare.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        bare.settimeout(5)
        assert b"PROXY protocol header refused" in bare.recv(4096)
        bare.close()
        socks += greedy
    finally:
        for s in socks:
            s.close()
        col.stop()
