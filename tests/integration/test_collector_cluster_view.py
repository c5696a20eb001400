"""The collector's cluster watch (collector/cluster/watch.py) against the API stand-in: the Lease elects the one
replica that watches, and an alert's incident gets its cluster slice once, under its key, whichever replica took
the webhook; a replica that stops leading hands over."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
from aiohttp import web

from agent.commands.snapshot import read_snapshot
from collector.app import handler_args, make_app
from collector.state import CLUSTER
from tests.support import kube_cluster
from tests.support.alerts import alert, payload
from tests.support.collector_helpers import ALERTING_TOKEN, local_settings
from tests.support.kube_apiserver import KubeApi

N = kube_cluster.node_name
LEASE = "railscope/railscope-collector-cluster-view"


async def _replica(settings):  # -> (runner, url, desk)
    app = make_app(settings)
    desk = app[CLUSTER]
    desk.renew_s, desk.duration_s, desk.settle_s = 0.2, 2, 2.0
    runner = web.AppRunner(app, **handler_args(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", desk  # type: ignore[union-attr]


async def _until(cond, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.05)


def test_one_replica_watches_and_each_incident_gets_its_slice_once(tmp_path: Path) -> None:
    tf = tmp_path / "kube-token"
    tf.write_text("railscope-test-token")
    tf.chmod(0o600)

    async def go():
        api = KubeApi()
        api.lease_names = {"railscope-collector-cluster-view"}  # the chart's Role
        kube_cluster.load(api, "healthy", nodes=6, nics=2)
        url = await api.start()
        settings = local_settings(tmp_path, cluster="prod", cluster_view="on", cluster_api_server=url,
                                  cluster_api_token_file=str(tf), cluster_lease=LEASE)
        (ra, ua, a), (rb, _ub, b) = await _replica(settings), await _replica(replace(settings))
        try:
            await _until(lambda: a.synced.is_set() or b.synced.is_set())
            await asyncio.sleep(0.6)  # a few renewals: the follower stays one
            leader, follower = (a, b) if a.synced.is_set() else (b, a)
            assert not follower.synced.is_set() and follower.lock is not None and not follower.lock.held
            lists = api.count("list")
            # the webhook reaches the follower's replica (or either: the slice does not depend on it)
            hook = payload([alert(N(1), severity="critical", incident="inc-7"), alert(N(4), incident="inc-7")])
            async with aiohttp.ClientSession() as s, s.post(ua + "/v1/alerts", data=hook, headers={
                    "Authorization": f"Bearer {ALERTING_TOKEN}"}) as r:
                assert r.status == 200, await r.text()
            await _until(lambda: leader.stored)
            await asyncio.sleep(0.6)  # more ticks: no second store, no second slice
            stored = list(leader.stored) + list(follower.stored)
            writes = api.count("write")
            leader_requests = dict(leader.lock.client.requests)
            # the leader goes: the other takes over (its Lease released on a clean stop) and watches
            await (ra if leader is a else rb).cleanup()
            await _until(lambda: follower.synced.is_set())
            return api, stored, lists, writes, leader_requests, follower
        finally:
            await ra.cleanup()
            await rb.cleanup()
            await api.stop()

    api, stored, lists, writes, leader_requests, follower = asyncio.run(go())
    today = time.strftime("%Y-%m-%d", time.gmtime())  # the incident's first request's date
    assert stored == [f"prod/{today}/inc-7/cluster.tar.gz"]
    manifest, objects = read_snapshot(str(tmp_path / "store" / stored[0]))  # its .sha256 verified too
    assert manifest["incident"] == "inc-7" and manifest["nodes"] == [N(1), N(4)]
    assert sorted(o["metadata"]["name"] for o in objects["nodes"]) == [N(1), N(4)]
    assert {o["status"]["node"] for o in objects["nicdevices"]} == {N(1), N(4)}
    assert objects["daemonsets"] and objects["crds"]  # cluster-wide objects whole
    # one LIST per kind by the one watching replica, then WATCH only; the only writes are the Lease's
    assert lists == leader_requests["list"] <= 20 and leader_requests.get("watch", 0) >= 1
    assert writes == 0 and api.count("lease") >= 3
    assert follower.lock.transitions == 1


def test_the_watch_is_off_outside_a_cluster_and_on_needs_an_api_server(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from collector.config import SettingsError

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert CLUSTER not in make_app(local_settings(tmp_path))  # auto, no API server: off
    with pytest.raises(SettingsError, match="no API server"):
        make_app(local_settings(tmp_path, cluster_view="on"))
