"""Two captures of one node compared object by object: regressions, changes, counter rates.

The upgrade gate (``railscope diff BEFORE AFTER``): an operator captures a node, upgrades its driver
or firmware, captures again, and stops the rollout when the node got worse. Objects are matched by
identities that survive a reboot, a driver reload and a renamed netdev, never by ifindex or netdev
order:

- a **rail** by its rail and plane number (from the naming rule or template), with its PCI function;
  a rail whose netdev vanished is looked for again on the same PCI function (an uplink there under
  another name is a rename, not a loss), or, for a rail without one (veth, virtual NICs), by the
  netdev's MAC address;
- a **PF** by its devlink handle (``pci/<bdf>``);
- a **representor** by its PF and VF index (``pf0vf3`` of ``pci/0000:1a:00.0``), never its name;
- a **finding** by code and subject, the doctor document's identity.

**Regressions**: a rail or its RDMA port lost or down, a rail renamed away from its rule, fewer VFs or
representors, an eswitch mode or a watched devlink param changed, the RDMA netns mode changed, PFC no
longer on the lossless priority, a rail whose LLDP neighbour is another leaf or port (recabled), and any warning or critical finding that was not there (or is more
severe now). A new finding that one of the structural regressions already explains (``RailLinkDown``
for a rail that went down) is attached to it, so one cause is one line.

**Changes**: kernel, driver and firmware versions, MTU, speed, VFs up, rails or representors added,
a source that could be read before and not now, findings resolved or eased.

The readiness rows (firmware running / stored, GPUDirect paths and module, the rails' MTU against each
other, the driver kind) are ``diff_readiness``'s: GPUDirect lost and a rail whose MTU no longer matches
the other rails are regressions.

**Counters**: per rail, the deltas of the incident counters (pause frames and duration on the
lossless priority, discards, storm events, carrier losses, the RDMA uplink port's loss counters)
over the time between the captures, as rates. A counter that went backwards was reset (a driver
reload recreates every counter): it is a reset, never a negative rate.

Pure: no I/O, no clock; the capture times are the snapshots' ``taken_at``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.analysis import diff_readiness
from agent.analysis.topology import Pf, Rail, Topology
from agent.findings import Diagnosis, severity_rank
from agent.model import Link, Snapshot

__all__ = [
    "CHANGE_CODES",
    "REGRESSION_CODES",
    "CounterDelta",
    "Diff",
    "Item",
    "Side",
    "counter_names",
    "diff",
    "moved",
]

SCHEMA = "railscope.diff/v1"

#: regression code -> the doctor finding codes it explains (folded into it, not listed again)
REGRESSION_CODES: dict[str, tuple[str, ...]] = {
    "RailLost": ("RailMissing",),
    "RailDown": ("RailLinkDown",),
    "RailRenamed": ("RailNameMismatch", "RailMissing"),
    "RdmaPortLost": ("RdmaLinkDown", "RdmaNameMismatch"),
    "RdmaPortDown": ("RdmaLinkDown",),
    "VfsFewer": ("RepresentorStale",),
    "RepresentorsLost": (),
    "EswitchModeChanged": ("EswitchModeUnexpected",),
    "DevlinkParamChanged": ("EswMultiportUnexpected",),
    "RdmaNetnsChanged": ("RdmaNetnsModeUnexpected",),
    "PfcLost": ("PfcDisabled",),
    "SpeedLower": (),
    "PcieLinkLower": ("PcieLinkDegraded",),
    "BerHigh": ("LinkDegrading",),
    # a rail whose LLDP neighbour is another leaf or port: recabled (a repair), the cabling map's finding
    "RailPeerChanged": ("RailPeerMismatch",),
    "FindingNew": (),
    "FindingWorse": (),
}

CHANGE_CODES: tuple[str, ...] = (
    "KernelChanged", "DriverChanged", "FirmwareChanged", "MtuChanged", "SpeedChanged", "VfsUpChanged",
    "VfsMore", "RepresentorsAdded", "RailAdded", "RailUp", "RdmaPortUp", "RailPciChanged", "SourceLost",
    "FindingNew", "FindingResolved", "FindingEased", "PcieLinkChanged",
)

REGRESSION_CODES.update(diff_readiness.REGRESSIONS)
CHANGE_CODES += diff_readiness.CHANGES

_RDMA_LOSS = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "implied_nak_seq_err",
              "rnr_nak_retry_err", "duplicate_request", "out_of_buffer", "rx_icrc_encapsulated",
              "port_xmit_discards", "port_rcv_errors", "link_downed")


def counter_names(prio: int) -> tuple[tuple[str, str], ...]:
    """(counter, unit) compared per rail; ``us`` counters are pause time in microseconds (mlx5 counters.rst)."""
    p = prio
    return (
        (f"tx_prio{p}_pause", "frames"), (f"rx_prio{p}_pause", "frames"),
        (f"tx_prio{p}_pause_duration", "us"), (f"rx_prio{p}_pause_duration", "us"),
        (f"rx_prio{p}_discards", "packets"), (f"rx_prio{p}_buf_discard", "packets"),
        (f"rx_prio{p}_cong_discard", "packets"), ("rx_discards_phy", "packets"),
        ("tx_pause_storm_warning_events", "events"), ("tx_pause_storm_error_events", "events"),
        ("carrier_down_count", "events"),
        *((name, "packets" if name != "link_downed" else "events") for name in _RDMA_LOSS),
    )


@dataclass(frozen=True)
class Side:
    """One capture: what the readers saw, and what the analysis made of it."""

    source: str  # the path given, or "live"
    snapshot: Snapshot
    topology: Topology
    diagnosis: Diagnosis
    lossless_prio: int = 3
    #: ``taken_at`` is a real capture time (a live read, or a manifest's ``ended_at``); a hand-made
    #: image without one gets the wall clock of its reading, which makes no rate
    timed: bool = True
    #: ``--ber-warning``: a corrected-bit ratio between the two captures above it is a regression
    ber_warning: float = 1e-5

    @property
    def taken_at(self) -> float:
        return self.snapshot.taken_at


@dataclass(frozen=True)
class Item:
    """One regression or change: what changed on which object, from what to what."""

    code: str
    subject: str  # the doctor subject convention: expected rail netdev, PF handle, "node", ...
    before: Any
    after: Any
    message: str
    key: tuple[tuple[str, Any], ...] = ()  # the stable identity (rail/plane/pci, pf, vf, finding code)
    severity: str | None = None  # for finding items
    findings: tuple[str, ...] = ()  # new doctor findings this item explains ("RailLinkDown net_rail0")

    def sort_key(self) -> tuple[bytes, bytes, str]:
        return (self.code.encode(), self.subject.encode(), repr(self.key))

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "subject": self.subject, "key": dict(self.key),
                               "before": self.before, "after": self.after, "message": self.message}
        if self.severity is not None:
            out["severity"] = self.severity
        if self.findings:
            out["findings"] = list(self.findings)
        return out


@dataclass(frozen=True)
class CounterDelta:
    """One counter of one rail across the two captures."""

    subject: str
    rail: int
    plane: int | None
    counter: str
    unit: str
    before: int
    after: int
    seconds: float | None  # None when the captures have no times, or are not in time order
    reset: bool  # the counter went backwards: no delta, no rate

    @property
    def delta(self) -> int | None:
        return None if self.reset else self.after - self.before

    @property
    def rate(self) -> float | None:
        """Per second; for ``us`` counters, the share of wall time (0..1 per direction)."""
        d = self.delta
        if d is None or not self.seconds:
            return None
        r = d / self.seconds
        return r / 1e6 if self.unit == "us" else r

    def as_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "rail": self.rail, "plane": self.plane, "counter": self.counter,
                "unit": self.unit, "before": self.before, "after": self.after, "delta": self.delta,
                "seconds": self.seconds, "rate": self.rate, "reset": self.reset}


@dataclass(frozen=True)
class Diff:
    before: Side
    after: Side
    regressions: tuple[Item, ...]
    changes: tuple[Item, ...]
    counters: tuple[CounterDelta, ...] = field(default=())

    @property
    def seconds(self) -> float | None:
        """AFTER's capture time minus BEFORE's; None when either side has no capture time."""
        if not (self.before.timed and self.after.timed):
            return None
        return self.after.taken_at - self.before.taken_at

    def exit_status(self, fail_on: str = "regression") -> int:
        """``--fail-on``: regression (default) -> 1 on any regression; change -> 1 on any regression or
        change; never -> 0."""
        if fail_on == "never":
            return 0
        if self.regressions:
            return 1
        if fail_on == "change" and self.changes:
            return 1
        return 0

    def as_json(self) -> dict[str, Any]:
        """``railscope.diff/v1``: ``before`` / ``after`` (source, node, kernel, captured_at, rails, finding
        counts), ``seconds`` between them (null without capture times), ``regressions`` and ``changes``
        (code, subject, key, before, after, message; severity for findings; the new doctor findings an
        item explains in ``findings``), and ``counters`` (subject, rail, plane, counter, unit, before,
        after, delta, seconds, rate, reset; delta and rate null on a reset). Tools compare code, subject
        and key; messages are for people."""
        return {
            "schema": SCHEMA,
            "before": _side_json(self.before),
            "after": _side_json(self.after),
            "seconds": self.seconds,
            "regressions": [i.as_json() for i in self.regressions],
            "changes": [i.as_json() for i in self.changes],
            "counters": [c.as_json() for c in self.counters],
        }


def utc_text(t: float) -> str:
    """Unix seconds as RFC 3339 UTC text (``2026-10-28T14:20:33Z``), by arithmetic: the analysis is
    pure and reaches no clock, so no ``datetime`` (the civil-from-days algorithm of H. Hinnant's
    "chrono-Compatible Low-Level Date Algorithms")."""
    secs = int(t // 1)
    days, rem = divmod(secs, 86400)
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (month <= 2)
    return f"{year:04d}-{month:02d}-{day:02d}T{rem // 3600:02d}:{rem % 3600 // 60:02d}:{rem % 60:02d}Z"


def _side_json(side: Side) -> dict[str, Any]:
    d = side.diagnosis
    return {
        "source": side.source,
        "node": d.node,
        "kernel": d.kernel,
        "captured_at": utc_text(side.taken_at) if side.timed else None,
        "rails": len(d.rails),
        "findings": {s: sum(1 for f in d.findings if f.severity == s) for s in ("critical", "warning", "info")},
    }


# --------------------------------------------------------------------------------------------
# matching


@dataclass(frozen=True)
class _RailPair:
    key: tuple[int, int | None]
    before: Rail | None
    after: Rail | None
    #: the after side's netdev of a rail whose own identity found none (renamed off its template)
    after_link: Link | None = None

    @property
    def subject(self) -> str:
        r = self.before or self.after
        assert r is not None
        return r.expected_netdev

    def key_json(self) -> tuple[tuple[str, Any], ...]:
        r = self.before or self.after
        assert r is not None
        return (("rail", self.key[0]), ("plane", self.key[1]), ("pci", r.pci))


def _rail_key(r: Rail) -> tuple[int, int | None]:
    return (r.rail, r.plane)


def _find_moved(before: Rail, snap: Snapshot, taken: set[str]) -> Link | None:
    """The netdev of a rail that left its template: on the same PCI function, else the same MAC."""
    if before.netdev is None:
        return None
    old = before.netdev
    cands = [ln for ln in snap.links if ln.ifname not in taken and ln.kind == old.kind]
    if before.pci:
        same_fn = [ln for ln in cands if ln.parent_dev == before.pci
                   and (ln.phys_port_name == old.phys_port_name or not ln.phys_switch_id)]
        if same_fn:
            return min(same_fn, key=lambda ln: ln.ifindex)
        return None
    if old.address:
        same_mac = [ln for ln in cands if ln.address == old.address and ln.parent_dev is None]
        if len(same_mac) == 1:
            return same_mac[0]
    return None


def _pair_rails(a: Side, b: Side) -> list[_RailPair]:
    ra = {_rail_key(r): r for r in a.topology.rails}
    rb = {_rail_key(r): r for r in b.topology.rails}
    taken = {r.netdev.ifname for r in b.topology.rails if r.netdev is not None}
    pairs = []
    for k in sorted(set(ra) | set(rb), key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        before, after = ra.get(k), rb.get(k)
        moved = None
        if before is not None and (after is None or after.netdev is None):
            moved = _find_moved(before, b.snapshot, taken)
            if moved is not None:
                taken.add(moved.ifname)
        pairs.append(_RailPair(k, before, after, moved))
    return pairs


def _link_of(pair: _RailPair) -> tuple[Link | None, Link | None]:
    lb = pair.before.netdev if pair.before is not None else None
    la = pair.after.netdev if pair.after is not None and pair.after.netdev is not None else pair.after_link
    return lb, la


# --------------------------------------------------------------------------------------------
# the comparison


class _Out:
    def __init__(self) -> None:
        self.regressions: list[Item] = []
        self.changes: list[Item] = []

    def reg(self, code: str, subject: str, before: Any, after: Any, message: str,
            key: tuple[tuple[str, Any], ...] = ()) -> None:
        self.regressions.append(Item(code, subject, before, after, message, key))

    def chg(self, code: str, subject: str, before: Any, after: Any, message: str,
            key: tuple[tuple[str, Any], ...] = ()) -> None:
        self.changes.append(Item(code, subject, before, after, message, key))


def _rails(out: _Out, pairs: list[_RailPair], a: Side, b: Side) -> None:
    prio_keys_a = _pfc_keys(a)
    prio_keys_b = _pfc_keys(b)
    for p in pairs:
        subj, key = p.subject, p.key_json()
        before, after = p.before, p.after
        lb, la = _link_of(p)
        if before is None:
            assert after is not None
            out.chg("RailAdded", subj, None, after.netdev_name, f"rail {_label(p.key)} added "
                    f"({after.netdev_name or 'no netdev'} on {after.pci or 'no PCI function'})", key)
            continue
        if lb is None:
            # Missing before: nothing of it can get worse; its coming back is a change.
            if la is not None:
                out.chg("RailAdded", subj, None, la.ifname, f"rail {_label(p.key)}: {la.ifname} is back", key)
            continue
        if la is None:
            out.reg("RailLost", subj, lb.ifname, None,
                    f"rail {_label(p.key)}: {lb.ifname} is gone"
                    + (f" from {before.pci}" if before.pci else ""), key)
            continue
        if after is not None and before.pci and after.pci and before.pci != after.pci:
            out.chg("RailPciChanged", subj, before.pci, after.pci,
                    f"rail {_label(p.key)} moved from {before.pci} to {after.pci}", key)
        expected = after.expected_netdev if after is not None else before.expected_netdev
        if la.ifname != lb.ifname and la.ifname != expected:
            out.reg("RailRenamed", subj, lb.ifname, la.ifname,
                    f"rail {_label(p.key)}: {lb.ifname} is now {la.ifname} (expected {expected})", key)
        if lb.is_oper_up and not la.is_oper_up:
            out.reg("RailDown", subj, "up", "down", f"{la.ifname}: link down ({la.operstate}, carrier "
                    f"{la.carrier})", key)
        elif not lb.is_oper_up and la.is_oper_up:
            out.chg("RailUp", subj, "down", "up", f"{la.ifname}: link up", key)
        if lb.mtu != la.mtu and lb.mtu is not None and la.mtu is not None:
            out.chg("MtuChanged", subj, lb.mtu, la.mtu, f"{la.ifname}: MTU {lb.mtu} -> {la.mtu}", key)
        sb, sa = _speed(lb), _speed(la)
        if sb is not None and sa is not None and sa < sb:
            # a rail that trained slower (400G -> 200G) halves what it carries: the upgrade gate must stop
            out.reg("SpeedLower", subj, sb, sa, f"{la.ifname}: speed {sb} -> {sa} Mb/s (lower)", key)
        elif sb != sa and sb is not None and sa is not None:
            out.chg("SpeedChanged", subj, sb, sa, f"{la.ifname}: speed {sb} -> {sa} Mb/s", key)
        _degradation(out, p, a, b, lb, la, subj, key)
        _rail_versions(out, p, a, b, subj, key, la.ifname)
        if prio_keys_a.get(lb.ifname) and prio_keys_b.get(la.ifname) is False:
            out.reg("PfcLost", subj, True, False, f"{la.ifname}: no PFC counters for the lossless priority "
                    f"{b.lossless_prio} any more (PFC off)", key)
        _peer(out, a, b, lb, la, subj, key, p.key)
        _rdma_port(out, p, key)


def _peer(out: _Out, a: Side, b: Side, lb: Link, la: Link, subj: str, key: tuple[tuple[str, Any], ...],
          rail_key: tuple[int, int | None]) -> None:
    """A rail whose LLDP neighbour changed leaf or port between the captures: a regression (the rail is cabled
    elsewhere). A neighbour heard on one side only is not judged: no frame is a state, not a recabling."""
    nb, na = a.snapshot.neighbor_of(lb.ifname), b.snapshot.neighbor_of(la.ifname)
    if nb is None or na is None:
        return
    before, after = (nb.leaf, nb.port), (na.leaf, na.port)
    if before != after:
        out.reg("RailPeerChanged", subj, f"{nb.leaf}:{nb.port}", f"{na.leaf}:{na.port}",
                f"rail {_label(rail_key)}: {la.ifname} is cabled to {na.leaf}:{na.port}, it was {nb.leaf}:{nb.port}",
                key)


def _pcie_of(side: Side, rail: Rail | None) -> Any:
    if rail is None or not rail.pci:
        return None
    return next((x for x in side.snapshot.pcie if x.bdf == rail.pci), None)


def _degradation(out: _Out, p: _RailPair, a: Side, b: Side, lb: Link, la: Link, subj: str,
                 key: tuple[tuple[str, Any], ...]) -> None:
    """PCIe speed / width of the rail PF, and the corrected-bit ratio between the two captures."""
    xb, xa = _pcie_of(a, p.before), _pcie_of(b, p.after or p.before)
    if xb is not None and xa is not None:
        wb, wa = (xb.speed_gts, xb.width), (xa.speed_gts, xa.width)
        if None not in wb and None not in wa and wb != wa:
            handle = f"pci/{xa.bdf}"
            text = f"{handle} ({la.ifname}): PCIe {wb[0]} GT/s x{wb[1]} -> {wa[0]} GT/s x{wa[1]}"
            if wa[0] < wb[0] or wa[1] < wb[1]:  # type: ignore[operator]
                out.reg("PcieLinkLower", handle, f"{wb[0]} GT/s x{wb[1]}", f"{wa[0]} GT/s x{wa[1]}",
                        text + " (lower: the card cannot feed its rail at line rate)", key)
            else:
                out.chg("PcieLinkChanged", handle, f"{wb[0]} GT/s x{wb[1]}", f"{wa[0]} GT/s x{wa[1]}", text, key)
    sb, sa = a.snapshot.ethtool_of(lb.ifname), b.snapshot.ethtool_of(la.ifname)
    if sb is None or sa is None:
        return
    bits0, bits1 = sb.get("rx_bits_phy"), sa.get("rx_bits_phy")
    corr0, corr1 = sb.get("rx_corrected_bits_phy"), sa.get("rx_corrected_bits_phy")
    if None in (bits0, bits1, corr0, corr1) or bits1 < bits0 or corr1 < corr0:  # type: ignore[operator]
        return  # absent, or reset between the captures (a driver reload): no ratio
    bits, corr = bits1 - bits0, corr1 - corr0  # type: ignore[operator]
    if bits >= 10**12 and corr / bits > b.ber_warning:
        out.reg("BerHigh", subj, None, f"{corr / bits:.2e}",
                f"{la.ifname}: pre-FEC corrected-bit ratio {corr / bits:.2e} between the captures, above "
                f"{b.ber_warning:.1e}", key)


def _label(key: tuple[int, int | None]) -> str:
    return str(key[0]) if key[1] is None else f"{key[0]} plane {key[1]}"


def _speed(ln: Link) -> int | None:
    return ln.speed_mbps if ln.speed_mbps is not None and ln.speed_mbps > 0 else None


def _pfc_keys(side: Side) -> dict[str, bool]:
    """netdev -> the lossless priority has pause counters (absent: ethtool not read for it)."""
    p = side.lossless_prio
    out = {}
    for st in side.snapshot.ethtool:
        c = st.as_dict()
        out[st.netdev] = f"rx_prio{p}_pause" in c or f"tx_prio{p}_pause" in c
    return out


def _rail_versions(out: _Out, p: _RailPair, a: Side, b: Side, subj: str, key: tuple[tuple[str, Any], ...],
                   ifname: str) -> None:
    rb = _row(a, p.key)
    ra = _row(b, p.key)
    if rb is None or ra is None:
        return
    if rb.firmware != ra.firmware and rb.firmware and ra.firmware:
        out.chg("FirmwareChanged", subj, rb.firmware, ra.firmware,
                f"{ifname}: firmware {rb.firmware} -> {ra.firmware}", key)


def _row(side: Side, key: tuple[int, int | None]) -> Any:
    for r in side.diagnosis.rails:
        if (r.rail, r.plane) == key:
            return r
    return None


def _rdma_port(out: _Out, p: _RailPair, key: tuple[tuple[str, Any], ...]) -> None:
    before, after = p.before, p.after
    if before is None or before.rdma is None:
        return
    subj = before.expected_rdma or before.rdma.dev
    rkey = (*key, ("rdma", before.rdma.dev))
    now = after.rdma if after is not None else None
    if now is None:
        out.reg("RdmaPortLost", subj, f"{before.rdma.dev}/{before.rdma.port}", None,
                f"rail {_label(p.key)}: RDMA port {before.rdma.dev}/{before.rdma.port} is gone", rkey)
        return
    was_up, is_up = before.rdma.state == "ACTIVE", now.state == "ACTIVE"
    if was_up and not is_up:
        out.reg("RdmaPortDown", subj, before.rdma.state, now.state,
                f"{now.dev}/{now.port}: {now.state or 'no state'} ({now.physical_state or '?'})", rkey)
    elif not was_up and is_up:
        out.chg("RdmaPortUp", subj, before.rdma.state, now.state, f"{now.dev}/{now.port}: ACTIVE", rkey)


def _pfs(out: _Out, a: Side, b: Side) -> None:
    pa = {pf.handle: pf for pf in a.topology.pfs}
    pb = {pf.handle: pf for pf in b.topology.pfs}
    for h in sorted(set(pa) & set(pb)):
        before, after = pa[h], pb[h]
        key = (("pf", h),)
        if before.numvfs is not None and after.numvfs is not None:
            if after.numvfs < before.numvfs:
                out.reg("VfsFewer", h, before.numvfs, after.numvfs,
                        f"sriov_numvfs {before.numvfs} -> {after.numvfs}", key)
            elif after.numvfs > before.numvfs:
                out.chg("VfsMore", h, before.numvfs, after.numvfs,
                        f"sriov_numvfs {before.numvfs} -> {after.numvfs}", key)
        _representors(out, h, before, after)
        if before.eswitch_mode and after.eswitch_mode and before.eswitch_mode != after.eswitch_mode:
            out.reg("EswitchModeChanged", h, before.eswitch_mode, after.eswitch_mode,
                    f"eswitch mode {before.eswitch_mode} -> {after.eswitch_mode}", key)
        pb_params, pa_params = dict(before.params), dict(after.params)
        for name in sorted(set(pb_params) & set(pa_params)):
            vb, va = pb_params[name], pa_params[name]
            if vb is not None and va is not None and vb != va:
                out.reg("DevlinkParamChanged", h, vb, va, f"devlink param {name} {_word(vb)} -> {_word(va)}",
                        (*key, ("param", name)))


def _rep_key(r: Any) -> tuple[str, int]:
    return (r.kind, r.index)


def _representors(out: _Out, h: str, before: Pf, after: Pf) -> None:
    rb = {_rep_key(r): r for r in before.representors}
    ra = {_rep_key(r): r for r in after.representors}
    lost = sorted(k for k in rb if k not in ra)
    if before.eswitch_mode == "switchdev" and after.eswitch_mode not in (None, "switchdev"):
        lost = []  # legacy mode has no representors: EswitchModeChanged says it
    # Representors of VFs that no longer exist are explained by VfsFewer.
    vfs_now = after.numvfs
    unexplained = [k for k in lost if not (k[0] == "vf" and vfs_now is not None
                                           and before.numvfs is not None and vfs_now < before.numvfs
                                           and k[1] >= vfs_now)]
    if unexplained:
        names = [rb[k].netdev for k in unexplained]
        out.reg("RepresentorsLost", h, len(rb), len(ra),
                f"{len(unexplained)} representor(s) gone: " + ", ".join(
                    f"{rb[k].netdev} ({k[0]} {k[1]})" for k in unexplained[:8])
                + (f" and {len(unexplained) - 8} more" if len(unexplained) > 8 else ""),
                (("pf", h), ("vfs", [k[1] for k in unexplained]), ("netdevs", names)))
    added = sorted(k for k in ra if k not in rb)
    if added:
        out.chg("RepresentorsAdded", h, len(rb), len(ra),
                f"{len(added)} representor(s) added", (("pf", h), ("vfs", [k[1] for k in added])))
    # Over the VFs both captures have: a lost or added representor is its own item.
    both = [k for k in rb if k in ra and k[0] == "vf"]
    up_b = sum(1 for k in both if rb[k].up)
    up_a = sum(1 for k in both if ra[k].up)
    if up_b != up_a:
        out.chg("VfsUpChanged", h, up_b, up_a, f"VFs up (their representors up) {up_b} -> {up_a} of {len(both)}",
                (("pf", h),))


def _word(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def _node(out: _Out, a: Side, b: Side) -> None:
    va, vb = a.snapshot.versions, b.snapshot.versions
    if va.kernel and vb.kernel and va.kernel != vb.kernel:
        out.chg("KernelChanged", "node", va.kernel, vb.kernel, f"kernel {va.kernel} -> {vb.kernel}")
    db, da = _driver_word(a), _driver_word(b)
    if db and da and db != da:
        out.chg("DriverChanged", "node", db, da, f"driver {db} -> {da}")
    if a.snapshot.rdma_netns and b.snapshot.rdma_netns and a.snapshot.rdma_netns != b.snapshot.rdma_netns:
        out.reg("RdmaNetnsChanged", "node", a.snapshot.rdma_netns, b.snapshot.rdma_netns,
                f"RDMA netns mode {a.snapshot.rdma_netns} -> {b.snapshot.rdma_netns}")
    ua = {s for s, _ in a.snapshot.unavailable}
    before_links = {lk.ifname for lk in a.snapshot.links}
    after_links = {lk.ifname for lk in b.snapshot.links}
    for src, why in b.snapshot.unavailable:
        # a per-netdev source (``ethtool -m net_rail1``) of a netdev the first capture did not have was
        # never read before: a rail that came back or was renamed says so itself
        word = src.rsplit(" ", 1)[-1]
        if word in after_links and word not in before_links:
            continue
        if src not in ua:
            ua.add(src)
            out.chg("SourceLost", "node", "read", why, f"{src}: could be read before, not now ({why})",
                    (("source", src),))


def _driver_word(side: Side) -> str | None:
    v = side.snapshot.versions
    versions = sorted({r.driver_version for r in side.diagnosis.rails if r.driver_version})
    version = v.mlx5_version or (versions[0] if len(versions) == 1 else ", ".join(versions) or None)
    if version is None and v.mlx5_srcversion is None:
        return None
    # srcversion changes on every driver swap, even to the same version string (docs/design.md §3).
    return f"{version or '?'}" + (f" (srcversion {v.mlx5_srcversion})" if v.mlx5_srcversion else "")


def _findings(out: _Out, a: Side, b: Side) -> None:
    fa = {(f.code, f.subject): f for f in a.diagnosis.findings}
    fb = {(f.code, f.subject): f for f in b.diagnosis.findings}
    explained: dict[tuple[str, str], Item] = {}
    for item in out.regressions:
        for code in REGRESSION_CODES.get(item.code, ()):
            explained.setdefault((code, item.subject), item)
    folded: dict[int, list[str]] = {}
    for k in sorted(fb, key=lambda k: fb[k].sort_key()):
        f = fb[k]
        old = fa.get(k)
        fkey = (("finding", f.code),)
        if old is not None and severity_rank(f.severity) >= severity_rank(old.severity):
            if severity_rank(f.severity) > severity_rank(old.severity):
                out.chg("FindingEased", f.subject, old.severity, f.severity,
                        f"{f.code} {f.subject}: {old.severity} -> {f.severity}", fkey)
            continue
        serious = f.severity in ("critical", "warning")
        owner = explained.get(k)
        if serious and owner is not None:
            folded.setdefault(id(owner), []).append(f"{f.code} {f.subject}")
            continue
        if old is not None:
            out.regressions.append(Item("FindingWorse", f.subject, old.severity, f.severity,
                                        f"{f.code}: {old.severity} -> {f.severity}: {f.message}", fkey, f.severity))
        elif serious:
            out.regressions.append(Item("FindingNew", f.subject, None, f.severity, f"{f.code}: {f.message}",
                                        fkey, f.severity))
        else:
            out.changes.append(Item("FindingNew", f.subject, None, f.severity, f"{f.code}: {f.message}",
                                    fkey, f.severity))
    # A finding of a rail that is gone is not resolved: the regression that lost the rail says it.
    gone = {i.subject for i in out.regressions if i.code in ("RailLost", "RailRenamed", "RdmaPortLost")}
    for k, f in fa.items():
        if k not in fb and f.subject not in gone:
            out.changes.append(Item("FindingResolved", f.subject, f.severity, None, f"{f.code}: resolved",
                                    (("finding", f.code),), f.severity))
    if folded:
        out.regressions = [Item(i.code, i.subject, i.before, i.after, i.message, i.key, i.severity,
                                tuple(folded[id(i)])) if id(i) in folded else i for i in out.regressions]


def _counters(pairs: list[_RailPair], a: Side, b: Side) -> list[CounterDelta]:
    seconds = b.taken_at - a.taken_at if a.timed and b.timed else 0.0
    secs = seconds if seconds > 0 else None
    names = counter_names(b.lossless_prio)
    out = []
    for p in pairs:
        lb, la = _link_of(p)
        if lb is None or la is None or p.before is None:
            continue
        cb = _rail_counters(a.snapshot, p.before, lb)
        ca = _rail_counters(b.snapshot, p.after, la)
        for name, unit in names:
            if name in cb and name in ca:
                out.append(CounterDelta(p.subject, p.key[0], p.key[1], name, unit, cb[name], ca[name], secs,
                                        ca[name] < cb[name]))
    return out


def _rail_counters(snap: Snapshot, rail: Rail | None, link: Link) -> dict[str, int]:
    c: dict[str, int] = {}
    st = snap.ethtool_of(link.ifname)
    if st is not None:
        c.update(st.as_dict())
    if link.carrier_down_count is not None:
        c["carrier_down_count"] = link.carrier_down_count
    if rail is not None and rail.rdma is not None and rail.rdma_device is not None:
        for port, name, val in rail.rdma_device.counters:
            if port == rail.rdma.port:
                c.setdefault(name, val)
    return c


def diff(before: Side, after: Side) -> Diff:
    """Compare two captures of one node (see the module doc)."""
    out = _Out()
    pairs = _pair_rails(before, after)
    _rails(out, pairs, before, after)
    _pfs(out, before, after)
    _node(out, before, after)
    diff_readiness.rows(out, before, after)
    _findings(out, before, after)
    return Diff(before, after, tuple(sorted(out.regressions, key=Item.sort_key)),
                tuple(sorted(out.changes, key=Item.sort_key)), tuple(_counters(pairs, before, after)))


def moved(counters: Iterable[CounterDelta]) -> list[CounterDelta]:
    """The counters a person needs to see: the ones that moved, and resets."""
    return [c for c in counters if c.reset or c.delta]
