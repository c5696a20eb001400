"""A rail that degrades before it breaks: LinkDegrading, OpticsOutOfRange, NicTemperatureHigh,
PcieLinkDegraded, PcieErrors (docs/design.md §4).

- ``LinkDegrading``: the pre-FEC corrected-bit ratio ``Δrx_corrected_bits_phy / Δrx_bits_phy`` over
  the window in two tiers: above ``ber_warning`` (warning: a margin well below the FEC's limit, the rail
  degrades while FEC still hides it), at / above ``ber_critical`` (the RS(544,514) FEC's design limit
  2.4e-4: frames are about to be lost), or ``rx_pcs_symbol_err_phy`` rose — errors FEC could not
  correct, traffic lost (critical). Judged only over at least 10^12 received bits (an idle or just
  trained link gives too few to mean anything). From one snapshot, a cumulative symbol-error count is
  info. The evidence names the worst lane in use with its share of the rail's corrected bits and its
  ratio to the best lane in use: one bad lane is one bad fibre or optic. ``rx_bits_phy`` counts
  line-rate bits whether or not traffic flows (kernel ``mlx5/counters.rst``).
- ``OpticsOutOfRange``: the module's own warning / alarm flags where it prints them (a raised warning
  flag -> warning, alarm -> critical; the message leads with the flag), else a monitor of ``ethtool -m``
  beyond the module's *own* threshold; a module that prints neither is not judged. Only lanes in use are
  judged (a lane reading zero bias, TX and RX with no flag raised is not), and a down rail whose lasers
  are dark with no flag raised is RailLinkDown's, not a second finding. ``module_bad_shorted`` /
  ``module_bus_stuck`` (critical) or ``module_high_temp`` (warning) rose; cumulative > 0 is info.
- ``NicTemperatureHigh``: a rail PF's hwmon sensor at or above its own ``crit``.
- ``PcieLinkDegraded``: a rail PF trained below min(its max, its upstream port's max), in speed or
  width. A PF at its upstream port's max below its own max sits in a slower slot: evidence only.
  Critical when the link is gone (``current_link_speed`` ``Unknown`` with ``current_link_width`` 63:
  the Link Status register reads all ones), which no comparison would catch: both read as unknown.
- ``PcieErrors``: fatal / non-fatal AER totals > 0 (warning); correctable AER or
  ``rx/tx_pci_signal_integrity`` > 0 are info from one snapshot, warning when they rise. The AER totals
  rise between two flight-recorder lines: each rail's line carries its PF's ``aer_dev_*`` totals.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.analysis.checks._util import Check, finding
from agent.analysis.topology import Rail, Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import (
    AER_COUNTERS,
    AER_FUNCTION,
    ALL_ONES_WIDTH,
    ModuleOptics,
    OpticsLane,
    PcieLink,
    Snapshot,
)
from agent.readers.history import Recorder, Sample

__all__ = ["MIN_BITS", "PHY_COUNTERS", "RATE_COUNTERS", "ber_of", "check", "lane_keys", "lanes_in_use", "recorder_check", "worst_lane"]

#: The fewest received bits a corrected-bit ratio is judged over: below, one error is a ratio of 1e-11.
MIN_BITS = 10**12
LANES = 8


def lane_keys() -> tuple[str, ...]:
    return tuple(f"rx_err_lane_{n}_phy" for n in range(LANES))


#: The PHY and PCIe counters of the ethtool statistics that the degradation codes read (and the flight
#: recorder keeps at 1 s), by their mlx5 names (kernel ``mlx5/counters.rst``).
PHY_COUNTERS: tuple[str, ...] = (
    "rx_bits_phy", "rx_corrected_bits_phy", "rx_pcs_symbol_err_phy", "rx_crc_errors_phy",
    *lane_keys(),
    "module_high_temp", "module_bad_shorted", "module_bus_stuck",
    "rx_pci_signal_integrity", "tx_pci_signal_integrity",
)

#: Everything the rate forms are judged over: the PHY counters and the rail PF's AER totals.
RATE_COUNTERS: tuple[str, ...] = (*PHY_COUNTERS, *AER_COUNTERS, AER_FUNCTION)

#: the counters whose rise is a PcieErrors warning (signal integrity from ethtool, AER from sysfs)
_PCIE_RISING = ("rx_pci_signal_integrity", "tx_pci_signal_integrity", *AER_COUNTERS)

_MODULE_EVENTS = {"module_bad_shorted": "critical", "module_bus_stuck": "critical", "module_high_temp": "warning"}
_QUANTITY = {"temperature_c": ("module temperature", "°C"), "voltage_v": ("module voltage", "V"),
             "tx_bias_ma": ("TX bias", "mA"), "tx_power_mw": ("TX power", "mW"), "rx_power_mw": ("RX power", "mW")}


def ber_of(bits: int, corrected: int) -> float | None:
    """The corrected-bit ratio over ``bits`` received bits; None below ``MIN_BITS`` (too few to judge)."""
    return corrected / bits if bits >= MIN_BITS else None


def worst_lane(lane_errors: dict[int, float], corrected: float | None = None) -> dict[str, object] | None:
    """The worst lane in use, its share of the rail's corrected bits and its ratio to the best lane in use
    (None when no lane counted any).

    A lane reading zero is not compared: mlx5 prints ``rx_err_lane_0..3_phy`` whatever the link's width,
    so a 2-lane 100G PAM4 link reads 0 on lanes 2 and 3 (Dell KB 000286734), and a perfect lane in use
    reads 0 too (``tests/fixtures/public/phy/``): neither gives a ratio, and a zero pulls a median down.
    A median of two lanes says nothing either: on that KB's ``lan0`` one lane carries 99.6 % of the
    corrected bits and is 250x the other, where "worst / median" read 2.0x. The lane counters sum to
    ``rx_corrected_bits_phy`` (the dumps there), so the share is of ``corrected`` where it is given and
    of the lanes' sum otherwise, never above 1. ``lanes_counting`` says which lanes were compared."""
    counting = {n: v for n, v in lane_errors.items() if v > 0}
    if not counting:
        return None
    lane = max(sorted(counting), key=lambda n: counting[n])
    worst = counting[lane]
    total = corrected if corrected is not None and corrected > 0 else sum(counting.values())
    others = {n: v for n, v in counting.items() if n != lane}
    best = min(sorted(others), key=lambda n: others[n]) if others else None
    return {"worst_lane": lane, "worst_lane_errors": worst,
            "worst_lane_share": round(min(1.0, worst / total), 3),
            "best_lane": best,
            "worst_lane_to_best": round(worst / others[best], 1) if best is not None else None,
            "lanes_counting": sorted(counting)}


def _lane_words(ev: dict[str, object]) -> str:
    """``lane 1 carries 99.6 % of the corrected bits, 250.4x lane 0`` for a message; '' without lanes."""
    if "worst_lane" not in ev:
        return ""
    share = ev["worst_lane_share"]
    text = f"lane {ev['worst_lane']} carries {float(share) * 100:.1f} % of the corrected bits"  # type: ignore[arg-type]
    if ev.get("best_lane") is not None:
        return text + f", {ev['worst_lane_to_best']}x lane {ev['best_lane']}"
    return text + " (the only lane counting errors)"


def _rails(topo: Topology) -> Iterable[tuple[Rail, str]]:
    for rail in topo.rails:
        if rail.netdev is not None:
            yield rail, rail.netdev.ifname


def _pcie_findings(link: PcieLink, handle: str, netdev: str | None) -> list[Finding]:
    out: list[Finding] = []
    ends = {"speed_gts": link.speed_gts, "max_speed_gts": link.max_speed_gts, "width": link.width,
            "max_width": link.max_width, "upstream": link.upstream,
            "upstream_max_speed_gts": link.upstream_max_speed_gts, "upstream_max_width": link.upstream_max_width}
    if link.gone:
        # Before any speed / width comparison: the register read all ones, so every other field read
        # from config space is as meaningless as this one (AER included).
        return [finding("PcieLinkDegraded", handle,
                        f"{handle} ({netdev or 'no netdev'}): the PCIe link is gone — current_link_speed Unknown, "
                        f"current_link_width {ALL_ONES_WIDTH} (the Link Status register reads all ones): the "
                        "function fell off its link and carries no traffic", severity="critical", netdev=netdev,
                        link_gone=True, current_link_speed="Unknown", current_link_width=ALL_ONES_WIDTH,
                        upstream=link.upstream)]
    low = []
    slot = []
    for cur, own, up, what in ((link.speed_gts, link.max_speed_gts, link.upstream_max_speed_gts, "speed"),
                               (link.width, link.max_width, link.upstream_max_width, "width")):
        if cur is None or own is None:
            continue
        can = min(own, up) if up is not None else own
        if cur < can:
            low.append(what)
        elif up is not None and cur < own and cur >= up:
            slot.append(what)
    if low:
        out.append(finding("PcieLinkDegraded", handle,
                           f"{handle} ({netdev or 'no netdev'}): PCIe link trained at {_gen(link.speed_gts)} "
                           f"x{link.width} below what both ends support ({' and '.join(low)}): reseat the card or "
                           f"move it to another slot", netdev=netdev, degraded=low, slower_slot=slot or None, **ends))
    aer = {"fatal": link.aer_fatal, "nonfatal": link.aer_nonfatal, "correctable": link.aer_correctable}
    if link.aer_fatal or link.aer_nonfatal:
        out.append(finding("PcieErrors", handle,
                           f"{handle} ({netdev or 'no netdev'}): {link.aer_fatal or 0} fatal and {link.aer_nonfatal or 0} "
                           f"non-fatal PCIe AER error(s) since boot", netdev=netdev, aer=aer))
    elif link.aer_correctable:
        out.append(finding("PcieErrors", handle,
                           f"{handle} ({netdev or 'no netdev'}): {link.aer_correctable} correctable PCIe AER error(s) "
                           "since boot (cumulative; no rate in this snapshot)", severity="info", netdev=netdev,
                           aer=aer))
    return out


def _gen(gts: float | None) -> str:
    gens = {2.5: "Gen1", 5.0: "Gen2", 8.0: "Gen3", 16.0: "Gen4", 32.0: "Gen5", 64.0: "Gen6"}
    return gens.get(gts or 0.0, f"{gts} GT/s" if gts else "unknown speed")


#: a lane reading at most this on each of bias (mA), TX and RX power (mW) reads nothing: 0.0001 mW is the
#: register's least step (-40 dBm), what ethtool prints for a dark lane
_DARK = 0.0001
#: which raised flag leads the message: alarms before warnings, then the module's own state, its laser,
#: and last what it receives (an RX flag alone is the far end's or the fibre's, not this optic's)
_FLAG_ORDER = ("temperature_c", "voltage_v", "tx_bias_ma", "tx_power_mw", "rx_power_mw")
#: what a raised flag tells a technician, by (quantity, side)
_FLAG_MEANS = {
    ("rx_power_mw", "low"): "no light from the far end (check the fibre and the far end)",
    ("rx_power_mw", "high"): "too much light from the far end (a short link without an attenuator?)",
    ("tx_bias_ma", "low"): "its own laser is off or failing (check this module)",
    ("tx_bias_ma", "high"): "its own laser is wearing out (replace this module)",
    ("tx_power_mw", "low"): "its own laser sends too little light (check this module)",
    ("tx_power_mw", "high"): "its own laser sends too much light (replace this module)",
    ("temperature_c", "high"): "it runs hot (check the airflow over the module)",
    ("temperature_c", "low"): "it runs below its own range",
    ("voltage_v", "high"): "its supply voltage is above its range (check the cage and the NIC)",
    ("voltage_v", "low"): "its supply voltage is below its range (check the cage and the NIC)",
}


def _idle(lane: OpticsLane, flags_printed: bool) -> bool:
    """A lane the module does not use: zero bias, zero TX and zero RX power, no flag of it raised (ethtool
    prints 8 lanes per CMIS bank whatever the module uses). ethtool prints no CMIS data-path state, so the
    readings are all there is to tell; a lane missing one of the three is judged, and so is one without
    flags where the other lanes have them (its flags are unknown, not clear)."""
    values = (lane.tx_bias_ma, lane.tx_power_mw, lane.rx_power_mw)
    return (all(v is not None and v <= _DARK for v in values) and not any(on for _, _, on in lane.flags)
            and (bool(lane.flags) or not flags_printed))


def lanes_in_use(mod: ModuleOptics) -> tuple[int, ...]:
    """The lanes of ``mod`` the module uses (docs/design.md §4 "Only lanes in use are judged"): what the check
    judges, and the lanes whose readings the metrics export (a 4-lane optic in an 8-lane cage exports
    4 RX power series, not 4 more reading 0 W)."""
    flags_printed = any(ln.flags for ln in mod.lanes)
    return tuple(ln.lane for ln in mod.lanes if not _idle(ln, flags_printed))


def _span(lanes: list[int]) -> str:
    """[1, 2, 3, 4, 7] -> "1-4, 7"."""
    runs: list[list[int]] = []
    for n in sorted(set(lanes)):
        if runs and runs[-1][1] == n - 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _beyond(mod: ModuleOptics, quantity: str, lane: int | None, val: float | None) -> dict[str, object] | None:
    if val is None:
        return None
    for level in ("alarm", "warning"):
        hi, lo = mod.threshold(quantity, f"high_{level}"), mod.threshold(quantity, f"low_{level}")
        side = "high" if hi is not None and val > hi else "low" if lo is not None and val < lo else None
        if side:
            return {"quantity": quantity, "lane": lane, "value": val, "level": level, "side": side,
                    "threshold": hi if side == "high" else lo}
    return None


def _optics_findings(mod: ModuleOptics, subject: str, link_up: bool | None = None) -> list[Finding]:
    """docs/design.md §4 "Optics thresholds", "Only lanes in use are judged", "The module's flags lead".

    Where the module prints its warning / alarm flags for a quantity, they decide (a raised warning
    flag is warning, a raised alarm flag critical); its values against its own thresholds decide only
    where it prints none (or, CMIS, where ethtool's per-lane flags cannot be trusted to be clear).
    ``link_up`` False: the rail is down; with no flag raised and its lasers dark that is the link's
    finding (RailLinkDown), not a second one here."""
    raised: list[dict[str, object]] = []
    beyond: list[dict[str, object]] = []
    module_flagged = {q for q, _, _ in mod.flags}
    for q, kind, on in mod.flags:
        if on:
            raised.append({"quantity": q, "lane": None, "kind": kind})
    for quantity, val in (("temperature_c", mod.temperature_c), ("voltage_v", mod.voltage_v)):
        if quantity not in module_flagged and (b := _beyond(mod, quantity, None, val)):
            beyond.append(b)
    judged: list[int] = []
    idle: list[int] = []
    dark = True
    flags_printed = any(ln.flags for ln in mod.lanes)
    for lane in mod.lanes:
        if _idle(lane, flags_printed):
            idle.append(lane.lane)
            continue
        judged.append(lane.lane)
        if not (lane.rx_los or lane.tx_los or lane.tx_fault or (lane.tx_bias_ma is not None and lane.tx_bias_ma <= 0)):
            dark = False
        flagged = {q for q, _, _ in lane.flags} if mod.lane_flags_exact else set()
        for q, kind, on in lane.flags:
            if on:
                raised.append({"quantity": q, "lane": lane.lane, "kind": kind})
        for quantity, val in (("tx_bias_ma", lane.tx_bias_ma), ("tx_power_mw", lane.tx_power_mw),
                              ("rx_power_mw", lane.rx_power_mw)):
            if quantity not in flagged and (b := _beyond(mod, quantity, lane.lane, val)):
                beyond.append(b)
    if not mod.thresholds:
        beyond = []  # a module that reports no thresholds is not judged by value: ours would be guesses
    if not raised and not beyond:
        return []
    if link_up is False and not raised and dark:
        return []  # a dark port: its link is down with the lasers off; RailLinkDown already says it
    levels = [str(r["kind"]).split("_")[1] for r in raised] + [str(b["level"]) for b in beyond]
    sev = "critical" if "alarm" in levels else "warning"
    who = f"{mod.netdev}: transceiver {mod.vendor or ''} {mod.part or ''}".replace("  ", " ").rstrip()
    if raised:
        lead = sorted(raised, key=lambda r: (not str(r["kind"]).endswith("alarm"),
                                             _FLAG_ORDER.index(str(r["quantity"]))))[0]
        same = sorted(int(r["lane"]) for r in raised  # type: ignore[call-overload]
                      if r["quantity"] == lead["quantity"] and r["kind"] == lead["kind"] and r["lane"] is not None)
        name, _ = _QUANTITY[str(lead["quantity"])]
        side, level = str(lead["kind"]).split("_")
        where = f" on lane{'s' if len(same) > 1 else ''} {_span(same)}" if same else ""
        others = len(raised) - max(len(same), 1)
        text = (f"{who}: the module raised its {name} {side} {level} flag{where}: "
                f"{_FLAG_MEANS[(str(lead['quantity']), side)]}"
                + (f" ({others} other flag(s) raised)" if others > 0 else "")
                + (f" ({len(beyond)} value(s) beyond its thresholds where it prints no flag)" if beyond else ""))
    else:
        first = beyond[0]
        name, unit = _QUANTITY[str(first["quantity"])]
        where = f" lane {first['lane']}" if first["lane"] is not None else ""
        text = (f"{who}: {name}{where} {first['value']} {unit} {'above' if first['side'] == 'high' else 'below'} "
                f"the module's {first['side']} {first['level']} threshold {first['threshold']} {unit}"
                + (f" ({len(beyond)} value(s) out of range)" if len(beyond) > 1 else ""))
    if idle:
        text += (f" (lane{'s' if len(judged) > 1 else ''} {_span(judged)} judged; {_span(idle)} not in use)"
                 if judged else "")
    lanes = sorted({int(x["lane"]) for x in (*raised, *beyond) if x["lane"] is not None})  # type: ignore[call-overload]
    return [finding("OpticsOutOfRange", subject, text, severity=sev, netdev=mod.netdev, module=mod.identifier,
                    vendor=mod.vendor, part=mod.part, serial=mod.serial, lanes=lanes or None,
                    lanes_judged=judged, lanes_not_in_use=idle or None, flags_raised=raised or None,
                    lane_flags_exact=mod.lane_flags_exact if mod.flags_reported else None,
                    module_state=mod.module_state, beyond=beyond)]


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    """The one-snapshot forms of the five codes."""
    out: list[Finding] = []
    optics = {m.netdev: m for m in snap.optics}
    for rail, name in _rails(topo):
        subject = rail.expected_netdev
        stats = snap.ethtool_of(name)
        c = stats.as_dict() if stats is not None else {}
        sym = c.get("rx_pcs_symbol_err_phy")
        if sym:
            lanes = {n: float(c[k]) for n, k in enumerate(lane_keys()) if k in c}
            out.append(finding("LinkDegrading", subject,
                               f"{name}: {sym} PCS symbol error(s) FEC could not correct since the driver loaded "
                               "(cumulative; no rate in this snapshot)", severity="info", netdev=name,
                               rx_pcs_symbol_err_phy=sym, rx_corrected_bits_phy=c.get("rx_corrected_bits_phy"),
                               rx_bits_phy=c.get("rx_bits_phy"),
                               **(worst_lane(lanes, c.get("rx_corrected_bits_phy")) or {})))
        events = {k: c[k] for k in _MODULE_EVENTS if c.get(k)}
        mod = optics.get(name)
        link_up = rail.netdev.is_oper_up if rail.netdev is not None else None
        found = _optics_findings(mod, subject, link_up) if mod is not None else []
        if not found and events:
            found = [finding("OpticsOutOfRange", subject,
                             f"{name}: the NIC counted transceiver events since the driver loaded: "
                             + ", ".join(f"{k} {v}" for k, v in events.items()) + " (cumulative)",
                             severity="info", netdev=name, counters=events)]
        out.extend(found)
        si = {k: c[k] for k in ("rx_pci_signal_integrity", "tx_pci_signal_integrity") if c.get(k)}
        if si and rail.pci:
            handle = rail.pf.handle if rail.pf is not None else f"pci/{rail.pci}"
            out.append(finding("PcieErrors", handle,
                               f"{handle} ({name}): PCIe signal integrity events since the driver loaded: "
                               + ", ".join(f"{k} {v}" for k, v in si.items()) + " (cumulative)",
                               severity="info", netdev=name, counters=si))
    rail_pfs = {r.pci: r for r in topo.rails if r.pci}
    for link in snap.pcie:
        rail = rail_pfs.get(link.bdf)
        if rail is None:
            continue
        handle = rail.pf.handle if rail.pf is not None else f"pci/{link.bdf}"
        out.extend(_pcie_findings(link, handle, rail.netdev.ifname if rail.netdev else None))
    hot: dict[str, list[dict[str, object]]] = {}
    for s in snap.thermal:
        if s.bdf in rail_pfs and s.input_c is not None and s.crit_c is not None and s.crit_c > 0 \
                and s.input_c >= s.crit_c:
            hot.setdefault(s.bdf, []).append({"sensor": s.sensor, "input_c": s.input_c, "crit_c": s.crit_c,
                                              "highest_c": s.highest_c})
    for bdf, sensors in hot.items():
        rail = rail_pfs[bdf]
        handle = rail.pf.handle if rail.pf is not None else f"pci/{bdf}"
        s0 = sensors[0]
        out.append(finding("NicTemperatureHigh", handle,
                           f"{handle}: sensor {s0['sensor']} at {s0['input_c']} °C, at or above its critical "
                           f"{s0['crit_c']} °C: check the fans and the airflow over the card",
                           netdev=rail.netdev.ifname if rail.netdev else None, sensors=sensors))
    return out


def _delta(first: Sample, last: Sample, key: str) -> int | None:
    a, b = first.get(key), last.get(key)
    if a is None or b is None or b < a:
        return None  # absent, or reset (a driver reload): nothing to say over this window
    return b - a


def rate_findings(subject: str, netdev: str, first: Sample, last: Sample, exp: Expectations,
                  handle: str | None, source: str) -> list[Finding]:
    """The rate forms of LinkDegrading / OpticsOutOfRange / PcieErrors between two samples of one rail."""
    out: list[Finding] = []
    wall = last.ts - first.ts
    if wall <= 0:
        return out
    lanes = {n: float(d) for n, k in enumerate(lane_keys()) if (d := _delta(first, last, k)) is not None}
    sym = _delta(first, last, "rx_pcs_symbol_err_phy")
    bits = _delta(first, last, "rx_bits_phy")
    corr = _delta(first, last, "rx_corrected_bits_phy")
    lane_ev = worst_lane(lanes, corr) or {}
    ber = ber_of(bits, corr) if bits is not None and corr is not None else None
    ev = {"netdev": netdev, "window_s": round(wall, 1), "rx_bits": bits, "rx_corrected_bits": corr,
          "corrected_bit_ratio": ber, "ber_warning": exp.ber_warning, "ber_critical": exp.ber_critical,
          "source": source, **lane_ev}
    lane_txt = f"; {_lane_words(lane_ev)}" if lane_ev else ""
    if sym:
        out.append(finding("LinkDegrading", subject,
                           f"{netdev}: {sym} PCS symbol error(s) FEC could not correct in {wall:.0f} s: frames are "
                           f"being lost{lane_txt}", severity="critical", rx_pcs_symbol_err=sym, **ev))
    elif ber is not None and ber >= exp.ber_critical:
        # at the RS(544,514) FEC's design input BER the FEC is at its limit: uncorrectable codewords follow
        out.append(finding("LinkDegrading", subject,
                           f"{netdev}: pre-FEC corrected-bit ratio {ber:.2e} over {wall:.0f} s at or above "
                           f"{exp.ber_critical:.1e}, the limit FEC corrects: frames are about to be lost{lane_txt}",
                           severity="critical", **ev))
    elif ber is not None and ber > exp.ber_warning:
        out.append(finding("LinkDegrading", subject,
                           f"{netdev}: pre-FEC corrected-bit ratio {ber:.2e} over {wall:.0f} s above {exp.ber_warning:.1e} "
                           f"(FEC still corrects up to {exp.ber_critical:.1e}){lane_txt}", severity="warning", **ev))
    for key, sev in _MODULE_EVENTS.items():
        d = _delta(first, last, key)
        if d:
            out.append(finding("OpticsOutOfRange", subject, f"{netdev}: {key} rose by {d} in {wall:.0f} s",
                               severity=sev, netdev=netdev, counter=key, increase=d, source=source))
    same_pf = first.get(AER_FUNCTION) is not None and first.get(AER_FUNCTION) == last.get(AER_FUNCTION)
    si = {k: d for k in _PCIE_RISING if (k not in AER_COUNTERS or same_pf) and (d := _delta(first, last, k))}
    if si and handle:
        out.append(finding("PcieErrors", handle, f"{handle} ({netdev}): PCIe errors rose in "
                           f"{wall:.0f} s: " + ", ".join(f"{k} +{v}" for k, v in si.items()),
                           severity="warning", netdev=netdev, increase=si, source=source))
    return out


def recorder_check(topo: Topology, exp: Expectations, recorder: Recorder | None) -> list[Finding]:
    """Rates from the flight recorder: the first and last line of a rail within ``ber_window_s`` before
    its newest line."""
    if recorder is None:
        return []
    out: list[Finding] = []
    for rail, name in _rails(topo):
        samples = recorder.of(name)
        if len(samples) < 2:
            continue
        end = samples[-1].ts
        window = [s for s in samples if s.ts >= end - exp.ber_window_s]
        if len(window) < 2:
            continue
        handle = rail.pf.handle if rail.pf is not None else (f"pci/{rail.pci}" if rail.pci else None)
        out.extend(rate_findings(rail.expected_netdev, name, window[0], window[-1], exp, handle, "recorder"))
    return out


CHECKS = (
    Check(70, ("LinkDegrading", "OpticsOutOfRange", "NicTemperatureHigh", "PcieLinkDegraded", "PcieErrors"),
          lambda i: check(i.snap, i.topo, i.exp)),
    # after the events (timeline): an event and the recorder's rate of one cause, equally severe, keep the event
    Check(110, ("LinkDegrading", "OpticsOutOfRange", "PcieErrors"), lambda i: recorder_check(i.topo, i.exp, i.recorder)),
)
