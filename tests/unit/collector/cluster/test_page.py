"""The incident page's section on the operators' intent (collector/cluster/page.py, hooked into
collector/pages.py): the incident's cluster slice judged against each node's analysed bundle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from collector.cluster.slice import store_slice
from collector.storage.local import LocalStore
from tests.support import kube_cluster
from tests.support.collector_helpers import (
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

PAGE = "/ui/incidents/prod-east/2026-12-01/inc-intent"


def test_the_incident_page_shows_the_nodes_intent_findings(tmp_path: Path) -> None:
    settings = local_settings(tmp_path)

    async def go() -> tuple[str, str]:
        async with running(settings) as (url, col):
            # n1 runs spectrumx-2rail-healthy: net_rail0 at 0000:0c:00.0, net_rail1 at 0000:8d:00.0
            hello = replace(HELLO, node="n1", bundle="b1", incident="inc-intent")
            status, doc, _ = await post(url, body(hello, bundle_of("spectrumx-2rail-healthy")), token=AGENT_TOKEN_N1)
            assert status == 200, doc
            status, before, _ = await fetch(url, PAGE, basic(OPERATOR_TOKEN))
            assert status == 200
            objects = kube_cluster.node_slice_objects("n1", [("0000:0c:00.0", "net_rail0"), ("0000:8d:00.0", "eth_r1")])
            assert await store_slice(col.store, "prod-east", "2026-12-01", "inc-intent", ["n1"], objects, 0.0)
            status, after, _ = await fetch(url, PAGE, basic(OPERATOR_TOKEN))
            assert status == 200
            return before, after

    before, after = run(go())
    assert "No cluster slice for this incident" in before and "id=intent" not in before
    section = after[after.index("id=intent"):after.index("<h2>Fleet view")]
    assert "RailIntentMismatch" in section and "net_rail1" in section and "<td class=mono>n1</td>" in section
    assert "InterfaceNameApplied=True with eth_r1" in section


def test_a_slice_that_does_not_verify_is_said_so(tmp_path: Path) -> None:
    from collector.cluster.page import intent_section

    async def go() -> str:
        store = LocalStore(local_settings(tmp_path))
        await store.start()
        try:
            rel = await store_slice(store, "prod", "2026-12-01", "inc-1", ["n1"],
                                    kube_cluster.node_slice_objects("n1", [("0000:0c:00.0", "net_rail0")]), 0.0)
            assert rel
            await store.put_small(rel + ".sha256", b"0" * 64 + b"  cluster.tar.gz\n")
            return await intent_section(store, "prod", "2026-12-01", "inc-1", [])
        finally:
            await store.close()

    assert "unreadable: the cluster slice does not match its .sha256" in run(go())
