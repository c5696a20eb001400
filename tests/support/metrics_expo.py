"""Helpers shared by the metrics tests: build a state, read an exposition back."""

from __future__ import annotations

import dataclasses
import shutil
from functools import lru_cache
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agent.analysis.topology import build_topology
from agent.config import Expectations
from agent.findings import Diagnosis, Finding
from agent.metrics.state import BudgetStatus, HungSource, MetricsState, SourceStatus
from agent.model import DaemonProcess, EthtoolStats, LldpNeighbor, Snapshot


def state_for(snap: Snapshot, **kw) -> MetricsState:
    return MetricsState(snapshot=snap, topology=build_topology(snap, Expectations()), **kw)


#: The project root. Not imported from tests/conftest.py: another directory's conftest module can
#: shadow that name when several test directories run together.
ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "tests" / "images"


def have(tool: str) -> bool:
    return shutil.which(tool) is not None


@lru_cache(maxsize=16)
def series(text: bytes) -> list[tuple[str, dict[str, str], float]]:
    """Every sample as (name, labels, value); cached, so callers must not modify the result."""
    out = []
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out.append((s.name, dict(s.labels), s.value))
    return out


def value(text: bytes, name: str, **labels: str) -> float:
    hits = [v for n, lab, v in series(text) if n == name and all(lab.get(k) == w for k, w in labels.items())]
    assert len(hits) == 1, f"{name}{labels}: {len(hits)} series"
    return hits[0]


def names(text: bytes) -> set[str]:
    return {n for n, _, _ in series(text)}


def full_state() -> MetricsState:
    """A small node on which every family the collector knows has at least one series (with
    ``representor_include``): PFC and 802.3x global pause, representor traffic, findings, a hung
    source, events."""
    from tests.support.metrics_synth import HEALTHY_ETHTOOL, ethtool_fixture, synthetic_snapshot

    snap = synthetic_snapshot(2, 2)
    globalp = ethtool_fixture("ethtool-S-mlx5-cx4lx-grep-discard-pause.txt")
    ethtool = (EthtoolStats("net_rail0", ethtool_fixture(HEALTHY_ETHTOOL)), EthtoolStats("net_rail1", globalp))
    stats = (("rx_bytes", 1), ("tx_bytes", 2), ("rx_packets", 3), ("tx_packets", 4))
    links = tuple(dataclasses.replace(lk, stats64=stats) if lk.ifname == "net_rail0_1" else lk for lk in snap.links)
    snap = dataclasses.replace(snap, ethtool=ethtool, links=links, processes=DAEMON_PROCESSES)
    snap = with_degradation(snap)
    # the lldp source: rail 0's leaf port (railscope_rail_peer_info)
    snap = dataclasses.replace(snap, lldp=(LldpNeighbor("net_rail0", "listen", system="leaf-02", port_id="swp1",
                                                        port_id_type="ifname"),))
    diag = Diagnosis("n", "k", (), (Finding("RailMissing", "critical", "net_rail3", ""),))
    return state_for(snap, diagnosis=diag, sources=(SourceStatus("links", True, 0.1),),
                     hung=(HungSource("counters", "net_rail0"),), event_codes=("LinkFlapping",),
                     daemon_restarts={"ovs-vswitchd": 1},
                     budget=BudgetStatus(cpu_ratio=0.1, rss_bytes=1 << 26, cpu_limit=0.5, rss_limit=1 << 29,
                                         paused=("processes",), pauses=1))


#: an ovs-vswitchd of the processes source (railscope_daemon_*)
DAEMON_PROCESSES = (DaemonProcess("ovs-vswitchd", "ovs-vswitchd", 4242, 1, "S", 1_700_000_000.0, 19.0, 1 << 24, 13),)


def with_degradation(snap: Snapshot) -> Snapshot:
    """``snap`` with the degradation sources read on rail 0: PHY counters, PCIe, a QSFP28 module
    (a real ``ethtool -m`` sample), an mlx5 hwmon sensor."""
    from agent.model import NicSensor, PcieLink
    from agent.readers.optics import parse_ethtool_m

    rail0 = snap.link("net_rail0")
    assert rail0 is not None and rail0.parent_dev
    bdf = rail0.parent_dev
    phy = (("rx_bits_phy", 10**15), ("rx_corrected_bits_phy", 10**8), ("rx_pcs_symbol_err_phy", 0),
           ("rx_err_lane_0_phy", 25_000_000), ("rx_err_lane_1_phy", 25_000_000))
    ethtool = tuple(dataclasses.replace(st, counters=st.counters + phy) if st.netdev == "net_rail0" else st
                    for st in snap.ethtool)
    text = (IMAGES.parent / "fixtures" / "public" / "optics" / "ethtool-m-qsfp28-finisar-cwdm4.txt").read_text()
    return dataclasses.replace(
        snap, ethtool=ethtool, optics=(parse_ethtool_m(text, "net_rail0"),),
        pcie=(PcieLink(bdf, 32.0, 32.0, 16, 16, "0000:00:01.0", 32.0, 16, 0, 0, 0),),
        thermal=(NicSensor(bdf, "asic", 62.0, 105.0, 70.0),))
