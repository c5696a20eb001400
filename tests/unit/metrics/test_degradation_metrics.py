"""Series of the degradation sources: within the budget of docs/design.md §5 (at most 40 per rail), and the
values of a node image with every source read."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from agent.cli import main
from agent.metrics.exposition import render
from agent.model import NicSensor, OpticsLane, PcieLink
from agent.readers.optics import parse_ethtool_m
from tests.support.metrics_expo import IMAGES, have, series, state_for, value
from tests.support.metrics_synth import synthetic_snapshot


def _count(snap) -> int:  # type: ignore[no-untyped-def]
    body = render(state_for(snap), clock=lambda: snap.taken_at)
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def test_an_8_rail_127_vf_node_stays_within_40_series_per_rail() -> None:
    snap = synthetic_snapshot(8, 127)
    before = _count(snap)
    text = (IMAGES.parent / "fixtures" / "public" / "optics" / "ethtool-m-qsfp28-finisar-cwdm4.txt").read_text()
    mod = parse_ethtool_m(text, "x")
    lanes8 = tuple(OpticsLane(n, 40.0, 1.0, 1.0) for n in range(1, 9))  # an 8-lane (800G) module
    phy = (("rx_bits_phy", 1), ("rx_corrected_bits_phy", 1), ("rx_pcs_symbol_err_phy", 1),
           *((f"rx_err_lane_{n}_phy", 1) for n in range(8)))
    rails = [lk for lk in snap.links if lk.ifname.startswith("net_rail") and lk.ifname.count("_") == 1]
    assert len(rails) == 8
    after = _count(dataclasses.replace(
        snap, ethtool=tuple(dataclasses.replace(st, counters=st.counters + phy) for st in snap.ethtool),
        optics=tuple(dataclasses.replace(mod, netdev=lk.ifname, lanes=lanes8) for lk in rails),
        pcie=tuple(PcieLink(lk.parent_dev or "", 32.0, 32.0, 16, 16, "0000:00:01.0", 32.0, 16, 0, 0, 0)
                   for lk in rails),
        thermal=tuple(s for lk in rails for s in (NicSensor(lk.parent_dev or "", "asic", 60.0, 105.0, 70.0),
                                                  NicSensor(lk.parent_dev or "", "Module0", 40.0, 75.0, 45.0)))))
    assert (after - before) / 8 <= 40
    assert after <= 1500  # the node budget (1,077 -> 1,389 when this was written)


def test_values_of_the_degradation_image(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["metrics", "--from", str(IMAGES / "degradation-sources-healthy")]) == 0
    text = capsysbinary.readouterr().out
    assert value(text, "railscope_pcie_link_speed_transfers_per_second", pci="0000:0c:00.0") == 32e9
    assert value(text, "railscope_pcie_link_width_lanes", pci="0000:8d:00.0") == 16
    assert value(text, "railscope_pcie_aer_fatal_errors_total", pci="0000:8d:00.0") == 0
    assert value(text, "railscope_nic_temperature_celsius", pci="0000:0c:00.0", sensor="asic") == 62.0
    assert value(text, "railscope_optics_rx_power_watts", device="net_rail0", lane="1") == pytest.approx(0.0009969)
    assert value(text, "railscope_optics_rx_power_threshold_watts", device="net_rail1",
                 threshold="low_warning") == pytest.approx(0.0000631)
    assert value(text, "railscope_phy_lane_errors_total", device="net_rail1", lane="2") > 0
    assert {lab["lane"] for n, lab, _ in series(text) if n == "railscope_phy_lane_errors_total"} == {"0", "1", "2", "3"}
    if have("promtool"):
        res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60,
                             check=False)
        assert res.returncode == 0 and not res.stdout.strip() and not res.stderr.strip(), res.stderr.decode()


def test_a_pf_trained_at_x8_exports_both_widths(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert main(["metrics", "--from", str(IMAGES / "pcie-link-degraded")]) == 0
    text = capsysbinary.readouterr().out
    assert value(text, "railscope_pcie_link_width_lanes", pci="0000:0c:00.0") == 8
    assert value(text, "railscope_pcie_link_max_width_lanes", pci="0000:0c:00.0") == 16
    assert value(text, "railscope_finding", code="PcieLinkDegraded", subject="pci/0000:0c:00.0") == 1


def test_a_4_lane_optic_in_an_8_lane_cage_exports_its_4_lanes_only(capsys) -> None:
    """A 400G DR4 in an OSFP prints lanes 5-8 at 0 mW: those are not in use and get no RX power series
    (a panel of them would show four dark lanes on a healthy link)."""
    import re
    from pathlib import Path

    from agent.cli import main

    image = Path(__file__).resolve().parents[2] / "images" / "optics-400g-dr4-4-of-8-lanes-healthy"
    main(["metrics", "--from", str(image)])
    out = capsys.readouterr().out
    lanes = re.findall(r'railscope_optics_rx_power_watts\{device="net_rail1",lane="(\d)"', out)
    assert lanes == ["1", "2", "3", "4"]
