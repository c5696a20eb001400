"""Series of the degradation sources (docs/design.md §3, §5): PHY link quality, PCIe, optics, NIC temperature.

Budget: at most 40 series per rail on top of the rest. Per rail: received / corrected bits and
uncorrectable symbol errors (3), errors per lane (at most 8); per rail PF: PCIe current and max speed
and width (4) and AER totals (3); per rail module: temperature (1), RX power per lane (at most 8) and
the module's own RX power and temperature thresholds (8); per rail PF sensor: temperature and its
critical value (2 each, mlx5 has the ASIC and usually one module sensor). An 8-lane module and two
sensors: 3 + 8 + 7 + 17 + 4 = 39. The corrected-bit ratio is a rate, computed by the recording rule
``railscope:phy_corrected_bit_ratio:rate5m``; per-lane TX power and bias stay in ``railscope doctor``'s
evidence.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from agent.analysis.checks.degradation import lanes_in_use
from agent.analysis.topology import Topology
from agent.metrics.families import Scrape, Subject
from agent.model import Snapshot

__all__ = ["SUBJECT", "render"]

RAIL = ("rail", "plane", "device")
PF = ("pci", "device")
_LANE = re.compile(r"\Arx_err_lane_(\d)_phy\Z")


class Families(Protocol):
    def gauge(self, name: str, doc: str, labels: Any, values: Any, value: float) -> None: ...
    def counter(self, name: str, doc: str, labels: Any, values: Any, value: float) -> None: ...


def _s(value: Any) -> str:
    return "" if value is None else str(value)


def render(fams: Families, snap: Snapshot, topo: Topology) -> None:
    optics = {m.netdev: m for m in snap.optics}
    pf_netdev: dict[str, str] = {}
    for rail in topo.rails:
        if rail.netdev is None:
            continue
        name = rail.netdev.ifname
        if rail.pci:
            pf_netdev.setdefault(rail.pci, name)
        base = (_s(rail.rail), _s(rail.plane), name)
        st = snap.ethtool_of(name)
        c = st.as_dict() if st is not None else {}
        for key, metric, doc in (
            ("rx_bits_phy", "railscope_phy_received",
             "Bits the rail's PHY received at line rate, traffic or not (ethtool rx_bits_phy; promtool forbids the unit bits in a name)."),
            ("rx_corrected_bits_phy", "railscope_phy_fec_corrected",
             "Bits the FEC corrected (ethtool rx_corrected_bits_phy): over received bits, the pre-FEC BER."),
            ("rx_pcs_symbol_err_phy", "railscope_phy_symbol_errors",
             "Symbol errors the FEC could not correct: frames lost (ethtool rx_pcs_symbol_err_phy)."),
        ):
            if key in c:
                fams.counter(metric, doc, RAIL, base, c[key])
        for key in sorted(c):
            m = _LANE.match(key)
            if m:
                fams.counter("railscope_phy_lane_errors", "Raw physical errors per lane (ethtool "
                             "rx_err_lane_<l>_phy): one lane far above the others is one bad fibre or optic.",
                             (*RAIL, "lane"), (*base, m.group(1)), c[key])
        mod = optics.get(name)
        if mod is None:
            continue
        if mod.temperature_c is not None:
            fams.gauge("railscope_optics_temperature_celsius", "The rail transceiver's temperature (ethtool -m).",
                       RAIL, base, mod.temperature_c)
        used = set(lanes_in_use(mod))
        for lane in mod.lanes:
            # only the lanes the module uses: an SR4 in an 8-lane OSFP cage prints lanes 5-8 at 0 mW
            if lane.rx_power_mw is not None and lane.lane in used:
                fams.gauge("railscope_optics_rx_power_watts", "Received optical power per lane (ethtool -m).",
                           (*RAIL, "lane"), (*base, str(lane.lane)), lane.rx_power_mw / 1000.0)
        for quantity, kind, value in mod.thresholds:
            if quantity == "rx_power_mw":
                fams.gauge("railscope_optics_rx_power_threshold_watts",
                           "The module's own RX power thresholds (ethtool -m: low/high warning/alarm).",
                           (*RAIL, "threshold"), (*base, kind), value / 1000.0)
            elif quantity == "temperature_c":
                fams.gauge("railscope_optics_temperature_threshold_celsius",
                           "The module's own temperature thresholds (ethtool -m: low/high warning/alarm).",
                           (*RAIL, "threshold"), (*base, kind), value)
    for link in snap.pcie:
        if link.bdf not in pf_netdev:
            continue
        base = (link.bdf, pf_netdev[link.bdf])
        speed_max = link.max_speed_gts
        if speed_max is not None and link.upstream_max_speed_gts is not None:
            speed_max = min(speed_max, link.upstream_max_speed_gts)
        for val, metric, doc in (
            (link.speed_gts, "railscope_pcie_link_speed_transfers_per_second",
             "The rail PF's trained PCIe link speed per lane (current_link_speed)."),
            (speed_max, "railscope_pcie_link_max_speed_transfers_per_second",
             "The fastest PCIe link speed of the PF or its upstream port, whichever is lower (max_link_speed)."),
        ):
            if val is not None:
                fams.gauge(metric, doc, PF, base, val * 1e9)
        width_max = link.max_width
        if width_max is not None and link.upstream_max_width is not None:
            width_max = min(width_max, link.upstream_max_width)
        for ival, metric, doc in (
            (link.width, "railscope_pcie_link_width_lanes", "The rail PF's trained PCIe link width (current_link_width)."),
            (width_max, "railscope_pcie_link_max_width_lanes",
             "The widest PCIe link of the PF or its upstream port, whichever is lower (max_link_width)."),
        ):
            if ival is not None:
                fams.gauge(metric, doc, PF, base, ival)
        for val2, metric, doc in (
            (link.aer_correctable, "railscope_pcie_aer_correctable_errors", "Correctable AER errors (TOTAL_ERR_COR)."),
            (link.aer_nonfatal, "railscope_pcie_aer_nonfatal_errors", "Non-fatal AER errors (TOTAL_ERR_NONFATAL)."),
            (link.aer_fatal, "railscope_pcie_aer_fatal_errors", "Fatal AER errors (TOTAL_ERR_FATAL)."),
        ):
            if val2 is not None:
                fams.counter(metric, doc, PF, base, val2)
    for s in snap.thermal:
        if s.bdf not in pf_netdev:
            continue
        base3 = (s.bdf, pf_netdev[s.bdf], s.sensor)
        if s.input_c is not None:
            fams.gauge("railscope_nic_temperature_celsius", "A rail PF's mlx5 hwmon sensor (temp<N>_input).",
                       (*PF, "sensor"), base3, s.input_c)
        if s.crit_c is not None:
            fams.gauge("railscope_nic_temperature_critical_celsius",
                       "The sensor's own critical temperature (temp<N>_crit).", (*PF, "sensor"), base3, s.crit_c)


def _render(fams: Families, scrape: Scrape) -> None:
    snap, topo = scrape.state.snapshot, scrape.state.topology
    if snap is not None and topo is not None:
        render(fams, snap, topo)  # type: ignore[arg-type]


SUBJECT = Subject(70, _render)
