"""The Kubernetes client (agent/clients/kubernetes.py) against the API stand-in: paging, informers, 410 Gone,
bookmarks, token rotation, in-cluster configuration over TLS, and the stand-in's own fidelity."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import urllib.request
from pathlib import Path

import pytest

from agent.clients.kubernetes import Gone, Informer, KubeClient, KubeConfig, KubeError, discover
from tests.support import kube_cluster, tls_certs
from tests.support.kube_apiserver import KubeApi

NS = kube_cluster.NS
NICDEV = f"/apis/configuration.net.nvidia.com/v1alpha1/namespaces/{NS}/nicdevices"


def _token(tmp: Path, value: str = "railscope-test-token") -> str:
    f = tmp / "token"
    f.write_text(value)
    f.chmod(0o600)
    return str(f)


async def _served(tmp: Path, scenario: str = "healthy", nodes: int = 4, **kw) -> tuple[KubeApi, KubeClient]:
    tf = _token(tmp)
    api = KubeApi(token_file=tf, **kw)
    kube_cluster.load(api, scenario, nodes=nodes)
    url = await api.start()
    return api, KubeClient(KubeConfig(url, tf))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


def test_list_pages_and_discovery(tmp_path: Path) -> None:
    async def go():
        api, c = await _served(tmp_path, nodes=70)  # 560 NicDevices: two pages of 500
        seen = []
        inf = Informer(c, NICDEV, lambda t, o: seen.append(o["metadata"]["name"]))
        await inf.list()
        served = await discover(c, {"configuration.net.nvidia.com", "spectrumx.nvidia.com", "no.such.group"})
        await c.close()
        await api.stop()
        return seen, api, served
    seen, api, served = run(go())
    assert len(seen) == len(set(seen)) == 560
    assert api.count("list", "nicdevices") == 2
    assert "nicdevices" in served["configuration.net.nvidia.com"]["v1alpha1"]
    assert "spectrumxrailpoolconfigs" in served["spectrumx.nvidia.com"]["v1alpha2"]
    assert "no.such.group" not in served


def test_watch_resumes_after_a_drop_from_the_bookmark_and_relists_after_410(tmp_path: Path) -> None:
    async def go():
        api, c = await _served(tmp_path, bookmark_interval=0.1)
        events: list[tuple[str, str]] = []
        inf = Informer(c, NICDEV, lambda t, o: events.append((t, o["metadata"]["name"])), watch_timeout=30)
        task = asyncio.ensure_future(inf.run())
        await inf.synced.wait()
        listed = len(events)
        await asyncio.sleep(0.3)
        # an unrelated kind changes: only a bookmark moves the informer's resourceVersion past it
        api.apply({**kube_cluster._find(kube_cluster.healthy(4), "Node", "gpu-node-00000")})
        await asyncio.sleep(0.3)
        api.drop_watches()  # a connection reset: resume from the last resourceVersion, no relist
        await asyncio.sleep(0.3)
        kube_cluster.touch(api, "gpu-node-00001")
        for _ in range(100):
            if any(t == "MODIFIED" for t, _n in events):
                break
            await asyncio.sleep(0.05)
        lists_before_410 = api.count("list", "nicdevices")
        # 410: compaction past the informer's resourceVersion, and an object deleted meanwhile
        gone = next(n for t, n in events if "gpu-node-00003" in n)
        api.expire_watches()
        api.delete("configuration.net.nvidia.com/v1alpha1", "NicDevice", gone, NS)
        api.compact()
        for _ in range(100):
            if ("DELETED", gone) in events:
                break
            await asyncio.sleep(0.05)
        task.cancel()
        await c.close()
        await api.stop()
        return api, events, listed, lists_before_410, inf
    api, events, listed, lists_before_410, inf = run(go())
    assert listed == 32
    assert ("MODIFIED", kube_cluster.node_name(1) + "-1021-mt0240100") in events
    assert lists_before_410 == 1, "a dropped watch resumes without a second LIST"
    assert inf.relists == 1 and api.count("list", "nicdevices") == 2
    assert any(t == "DELETED" for t, _n in events), "an object deleted in the 410 gap is dropped by the relist"
    assert api.count("write") == 0


def test_a_rotated_token_is_used_at_once(tmp_path: Path) -> None:
    async def go():
        api, c = await _served(tmp_path)
        await c.get_json("/api")
        api.rotate_token("rotated-token")  # the kubelet swaps the file; the old token is refused
        doc = await c.get_json("/api")
        await c.close()
        await api.stop()
        return api, doc
    api, doc = run(go())
    assert doc["kind"] == "APIVersions"
    assert api.count("unauthorized") == 0


def test_in_cluster_configuration_over_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = tmp_path / "sa"
    ca = tls_certs.make_ca(sa)
    tls_certs.issue(ca, sa / "server.crt", sa / "server.key")
    (sa / "ca.crt").write_bytes(ca.file.read_bytes())
    (sa / "token").write_text("in-cluster-token")
    (sa / "token").chmod(0o644)  # as the kubelet mounts it by default: the in-cluster reader accepts it
    (sa / "namespace").write_text(NS)

    async def go():
        api = KubeApi(token="in-cluster-token")
        kube_cluster.load(api, "healthy", nodes=2)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(sa / "server.crt", sa / "server.key")
        url = await api.start(ssl_context=ctx)
        host, port = url.removeprefix("https://").split(":")
        cfg = KubeConfig.in_cluster(str(sa), {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port})
        async with KubeClient(cfg) as c:
            nodes = await c.get_json("/api/v1/nodes", verb="list")
        await api.stop()
        return cfg, nodes
    cfg, nodes = run(go())
    assert cfg.namespace == NS and cfg.server.startswith("https://127.0.0.1:")
    assert [n["metadata"]["name"] for n in nodes["items"]] == ["gpu-node-00000", "gpu-node-00001"]
    with pytest.raises(KubeError) as exc:
        KubeConfig.in_cluster(str(sa), {})
    assert exc.value.reason == "NotInCluster"


def test_errors_are_typed(tmp_path: Path) -> None:
    async def go():
        api, c = await _served(tmp_path)
        out = {}
        for path, q in (("/apis/spectrumx.nvidia.com/v1alpha2/nosuchkind", {}),
                        (NICDEV, {"continue": "bad"}),
                        (NICDEV, {"fieldSelector": "status.node=gpu-node-00000"})):
            try:
                await c.get_json(path, q)
            except KubeError as exc:
                out[path + str(q)] = exc.status
        api.compact()
        try:
            inf = Informer(c, NICDEV, lambda t, o: None)
            inf.rv = "1"
            await inf.watch_once()
        except Gone as exc:
            out["gone"] = exc.status
        await c.close()
        unreachable = KubeClient(KubeConfig("http://127.0.0.1:9"))
        try:
            await unreachable.get_json("/api")
        except KubeError as exc:
            out["unreachable"] = exc.status
        await unreachable.close()
        await api.stop()
        return out
    out = run(go())
    # a CRD's field selectors are metadata.* only: status.node is refused as the real server does
    assert sorted(out.values()) == [0, 400, 400, 404, 410]


def test_the_stand_in_refuses_every_write_and_counts_it(tmp_path: Path) -> None:
    async def go():
        api, c = await _served(tmp_path)
        await c.close()
        codes = []
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            req = urllib.request.Request(api.url + NICDEV, method=method, data=b"{}",
                                         headers={"Authorization": "Bearer railscope-test-token"})
            try:
                await asyncio.to_thread(urllib.request.urlopen, req)
            except urllib.error.HTTPError as exc:
                codes.append(exc.code)
        await api.stop()
        return api, codes
    api, codes = run(go())
    assert codes == [403] * 4 and api.count("write") == 4


def test_the_stand_in_label_and_field_selectors(tmp_path: Path) -> None:
    async def go():
        api, c = await _served(tmp_path)
        pods = await c.get_json(f"/api/v1/namespaces/{NS}/pods",
                                {"labelSelector": "nvidia.com/ofed-driver", "fieldSelector": "spec.nodeName=gpu-node-00001"})
        notin = await c.get_json(f"/api/v1/namespaces/{NS}/pods", {"labelSelector": "app.rdma notin (x),!app.sriov"})
        await c.close()
        await api.stop()
        return pods, notin
    pods, notin = run(go())
    assert [p["metadata"]["name"] for p in pods["items"]] == ["mofed-ubuntu22.04-7c9d8c6b5-ds-00001"]
    assert {p["metadata"]["labels"].popitem()[0] for p in notin["items"]} == {"nvidia.com/ofed-driver", "app.rdma",
                                                                             "app.nicconfig"}
    assert json.dumps(pods)  # plain JSON all the way
    assert os.sep
