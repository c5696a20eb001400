"""The Lease that elects the collector's one watching replica (proto/kube.py LeaseLock) against the API stand-in:
create, renew, no takeover while renewed, takeover once the holder stopped renewing for the Lease's duration (by
the taker's own clock), 409 for the loser of a race; and the stand-in still refuses every other write."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from proto.kube import KubeClient, KubeConfig, KubeError, LeaseLock
from tests.support.kube_apiserver import KubeApi

NAME = "railscope-collector-cluster-view"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _token(tmp: Path) -> str:
    tf = tmp / "token"
    tf.write_text("railscope-test-token")
    tf.chmod(0o600)
    return str(tf)


def test_renew_hold_and_takeover(tmp_path: Path) -> None:
    async def go():
        api = KubeApi()
        api.lease_names = {NAME}
        url = await api.start()
        mono = Clock()
        async with KubeClient(KubeConfig(url, _token(tmp_path))) as c:
            a = LeaseLock(c, "railscope", NAME, "replica-a", duration_s=15, monotonic=mono)
            b = LeaseLock(c, "railscope", NAME, "replica-b", duration_s=15, monotonic=mono)
            steps = [await a.try_acquire(), await b.try_acquire()]  # a creates it; b sees a's
            for _ in range(3):  # a renews every 5 s: b never takes over
                mono.t += 5
                steps += [await a.try_acquire(), await b.try_acquire()]
            mono.t += 14  # a stopped renewing 14 s ago (b's clock): still a's
            steps.append(await b.try_acquire())
            mono.t += 2  # past the duration since b last saw it change: b takes over
            steps.append(await b.try_acquire())
            steps.append(await a.try_acquire())  # a is back: b's now, a follows
            lease = await c.get_json(b.path)
            # a race: both read the same Lease, one write wins, the other is 409 and follows
            mono.t += 100
            stale = LeaseLock(c, "railscope", NAME, "replica-c", duration_s=15, monotonic=mono)
            stale._seen = (lease["metadata"]["resourceVersion"], 0.0)
            await b.try_acquire()  # b renews: the resourceVersion c holds is old
            race = await stale._write("PUT", stale.path, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                                          "metadata": {"name": NAME, "namespace": "railscope",
                                                                       "resourceVersion": lease["metadata"]["resourceVersion"]},
                                                          "spec": stale._spec(lease["spec"], 0)})
            other = LeaseLock(c, "railscope", "another-lease", "replica-a")
            with pytest.raises(KubeError) as forbidden:
                await other.try_acquire()
        await api.stop()
        return api, steps, lease, race, forbidden.value
    api, steps, lease, race, forbidden = asyncio.run(go())
    assert steps == [True, False] + [True, False] * 3 + [False, True, False]
    assert lease["spec"]["holderIdentity"] == "replica-b" and lease["spec"]["leaseTransitions"] == 1
    assert lease["spec"]["leaseDurationSeconds"] == 15 and lease["spec"]["renewTime"].endswith("Z")
    assert race is False and forbidden.status == 403
    assert api.count("write") == 1  # the other Lease's create, refused


def test_no_other_write_gets_through_the_client_or_the_stand_in(tmp_path: Path) -> None:
    async def go():
        api = KubeApi()
        url = await api.start()
        async with KubeClient(KubeConfig(url, _token(tmp_path))) as c:
            with pytest.raises(ValueError, match=r"only write is a coordination\.k8s\.io/v1 Lease"):
                await c._write_lease("POST", "/api/v1/namespaces/railscope/pods", {})
            with pytest.raises(ValueError):
                await c._write_lease("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/railscope/leases/{NAME}", {})
        codes = []
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME}}).encode()
        for method, path in (("POST", "/api/v1/namespaces/railscope/configmaps"),
                             ("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/railscope/leases/{NAME}"),
                             ("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/railscope/leases/{NAME}"),
                             ("POST", f"/apis/coordination.k8s.io/v1/namespaces/railscope/leases/{NAME}")):
            req = urllib.request.Request(url + path, method=method, data=body,
                                         headers={"Authorization": "Bearer railscope-test-token"})
            try:
                await asyncio.to_thread(urllib.request.urlopen, req)
            except urllib.error.HTTPError as exc:
                codes.append(exc.code)
        await api.stop()
        return api, codes
    api, codes = asyncio.run(go())
    assert codes == [403] * 4 and api.count("write") == 4 and api.count("lease") == 0
