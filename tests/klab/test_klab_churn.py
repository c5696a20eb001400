"""Representor churn: the agent's representor metrics follow the kernel, with no stale series and no leak.

``scenario_churn`` created and removed netdevsim10's 4 VFs (switchdev) five times. After each change
one long-lived ``NodeMetrics`` (per-representor series switched on with an include filter) was
scraped from a fresh live snapshot, as the agent daemon does. Memory of the guest's Python process
was traced from the second cycle on, leaving out the scenario's own records; the live objects of
the agent's own classes were counted after each cycle.
"""

from __future__ import annotations

import re

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]

PF = '{device="net_rail0",pci="netdevsim10"}'
#: Allowed growth of the traced memory per create/remove cycle once warm, outside the link reader's
#: layout cache (bounded, checked on its own). What remains is interpreter free lists filling up
#: (measured: about 1 KiB per cycle, falling); a snapshot kept alive per cycle would be > 20 KiB.
LEAK_BYTES_PER_CYCLE = 4096
NETLINK = "agent/host/netlink/codec.py"

@pytest.fixture(scope="module")
def churn(klab):
    return klab.scenario("churn")


def test_the_kernel_really_churned(churn):
    steps = churn["steps"]
    assert len(steps) >= 8
    assert [len(s["kernel_representors"]) for s in steps] == [0, 4] * (len(steps) // 2)


def test_representor_count_follows_the_kernel(churn):
    for s in churn["steps"]:
        assert s["representors"][PF] == len(s["kernel_representors"]), s
        assert s["representors_stale"][PF] == 0, s


def test_no_stale_per_representor_series(churn):
    for s in churn["steps"]:
        series = {re.search(r'device="([^"]+)"', k).group(1) for k in s["representor_up"]}
        assert series == set(s["kernel_representors"]), s
        assert set(s["representor_stale"]) == set(s["representor_up"])


def test_series_count_returns_to_the_same_value(churn):
    by_numvfs = {}
    for s in churn["steps"]:
        by_numvfs.setdefault(s["numvfs"], set()).add(s["series"])
    assert all(len(v) == 1 for v in by_numvfs.values()), by_numvfs
    assert by_numvfs[4].pop() - by_numvfs[0].pop() == 2 * 4  # representor_up + representor_stale


def test_no_agent_record_outlives_its_cycle(churn):
    """Exact: the live objects of the agent's classes are the same after every cycle.

    Only the link reader's layout cache may grow (it learns message shapes), up to its fixed cap.
    """
    from agent.host.netlink import codec as netlink

    mem = churn["memory"]
    assert len(mem) >= 3
    layout = "agent.host.netlink.codec._Layout"
    records = [{k: v for k, v in m["agent_objects"].items() if k != layout} for m in mem]
    assert records[0].get("agent.model.Link", 0) >= 4  # the state being served holds the current links
    assert records[0].get("agent.analysis.topology.Representor") == 4
    for m, rec in zip(mem[1:], records[1:], strict=True):
        assert rec == records[0], (m["cycle"], rec, records[0])
    cap = netlink._MAX_LAYOUTS * netlink._MAX_LAYOUTS_PER_LENGTH
    assert all(m["agent_objects"].get(layout, 0) <= cap for m in mem)


def test_no_leak_in_the_agents_memory(churn):
    mem = churn["memory"]
    assert len(mem) >= 3

    def outside_cache(m):
        return sum(size for path, size in m["traced_by_file"].items() if not path.endswith(NETLINK))

    cycles = mem[-1]["cycle"] - mem[0]["cycle"]
    growth = outside_cache(mem[-1]) - outside_cache(mem[0])
    assert growth <= LEAK_BYTES_PER_CYCLE * cycles, [(m["cycle"], m["growth_by_line"]) for m in mem]
