"""The feed, on the example node image: what one sample gives the detectors, and the detectors'
verdicts on timelines made by changing that sample the way an incident would."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.detectors import ConfigObs, CountersObs, DriverObs, LinkObs, RepresentorObs, initial, run
from agent.detectors.feed import link_keys_by_ifindex, link_obs, link_subjects, observations_from_snapshot
from agent.host.recorded import open_image
from agent.model import EthtoolStats, Snapshot
from agent.readers.snapshot import take_snapshot

RAIL0 = ("0000:0c:00.0", "p0")


@pytest.fixture
def snap(example_image: Path) -> Snapshot:
    return take_snapshot(open_image(str(example_image)))


def feed(s: Snapshot):
    return observations_from_snapshot(s, build_topology(s, Expectations()))


def with_link(s: Snapshot, ifname: str, **changes) -> Snapshot:
    return replace(s, links=tuple(replace(ln, **changes) if ln.ifname == ifname else ln for ln in s.links))


def with_numvfs(s: Snapshot, bdf: str, n: int) -> Snapshot:
    return replace(s, pci=tuple(replace(f, sriov_numvfs=n) if f.bdf == bdf else f for f in s.pci))


def with_counters(s: Snapshot, netdev: str, **over: int) -> Snapshot:
    def bump(st: EthtoolStats) -> EthtoolStats:
        return replace(st, counters=tuple({**st.as_dict(), **over}.items())) if st.netdev == netdev else st
    return replace(s, ethtool=tuple(bump(st) for st in s.ethtool))


def play(samples: list[tuple[float, Snapshot]]):
    state = initial()
    events = []
    for now, s in samples:
        state, evs = run(state, feed(s), now)
        events.extend(evs)
    return events


def test_one_sample_of_the_healthy_image(snap: Snapshot) -> None:
    obs = feed(snap)
    assert isinstance(obs[0], DriverObs)
    links = {o.key: o for o in obs if isinstance(o, LinkObs)}
    # the two rails only: not the representors, not the management NIC
    assert set(links) == {RAIL0, ("0000:8d:00.0", "p0")}
    assert links[RAIL0].subject == "net_rail0"
    reps = {o.handle: o for o in obs if isinstance(o, RepresentorObs)}
    assert (reps["pci/0000:0c:00.0"].numvfs, reps["pci/0000:0c:00.0"].vf_indexes) == (1, (0,))
    assert reps["pci/0000:0c:00.0"].names == ("net_rail0_0",)
    config = {(o.handle, o.name): o.value for o in obs if isinstance(o, ConfigObs)}
    assert config[("pci/0000:0c:00.0", "sriov_numvfs")] == 1
    assert config[("pci/0000:0c:00.0", "eswitch_mode")] == "switchdev"
    assert config[("pci/0000:0c:00.0", "param:esw_multiport")] is False
    counters = {o.subject: o.counters for o in obs if isinstance(o, CountersObs)}
    assert set(counters) == {"net_rail0", "net_rail1"}
    assert "tx_prio3_pause_duration" in counters["net_rail0"]
    assert "carrier_down_count" in counters["net_rail0"]
    assert "out_of_sequence" in counters["net_rail0"]  # the RDMA uplink port's hw_counters


def test_the_healthy_image_sampled_for_ten_minutes_gives_no_event(snap: Snapshot) -> None:
    assert play([(float(t), snap) for t in range(0, 600, 10)]) == []


def test_incidents_made_from_the_image(snap: Snapshot) -> None:
    cdc = snap.link("net_rail0").carrier_down_count
    flapping = [(0.0, snap)] + [(10.0 * i, with_link(snap, "net_rail0", carrier_down_count=cdc + i))
                                for i in range(1, 4)]
    assert [(e.code, e.subject) for e in play(flapping)] == [("LinkFlapping", "net_rail0")]

    leak = with_numvfs(snap, "0000:8d:00.0", 0)
    assert [(e.code, e.subject, e.ts) for e in play([(0.0, snap), (10.0, leak), (40.0, leak), (70.0, leak)])] \
        == [("RepresentorStale", "pci/0000:8d:00.0", 70.0)]

    drops = with_counters(snap, "net_rail1", rx_prio3_discards=snap.ethtool_of("net_rail1").get("rx_prio3_discards") + 5)
    assert [(e.code, e.subject) for e in play([(0.0, snap), (1.0, drops)])] == [("LosslessDrops", "net_rail1")]


def test_link_messages_map_to_their_rail(snap: Snapshot) -> None:
    topo = build_topology(snap, Expectations())
    subjects = link_subjects(topo)
    rail0 = snap.link("net_rail0")
    assert link_obs(rail0, subjects).key == RAIL0
    assert link_obs(snap.link("net_rail0_0"), subjects) is None  # a representor
    orphan = replace(rail0, parent_dev=None)
    assert link_obs(orphan, subjects) is None
    assert link_obs(orphan, subjects, keys_by_ifindex=link_keys_by_ifindex(topo)).key == RAIL0
    assert link_obs(replace(rail0, ifname="eth4"), subjects, admin_up=False).admin_up is False
