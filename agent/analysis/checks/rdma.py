"""RdmaNameMismatch, RdmaLinkDown, RailRdmaMissing and RdmaNetnsModeUnexpected.

Only a rail's own RDMA port is judged (docs/design.md §4 "A rail's RDMA port"): in switchdev the PF's RDMA
device has one port per representor, and those follow their pods. A rail with no netdev is
``RailMissing`` only.

A rail with a netdev and no RDMA device at all (no port in ``rdma link``, no device of its function in
``/sys/class/infiniband``) is ``RailRdmaMissing`` when something says it should have one: a udev rule
names its RDMA device, or its PF is mlx5 with RoCE enabled (the generic devlink param ``enable_roce``,
which mlx5_core registers and so answers with mlx5_ib unloaded), or ``--expect-rdma``. A driver upgrade
that leaves ``mlx5_ib`` / ``ib_core`` unloaded leaves the netdev up and the rail looking healthy while
NCCL falls back to sockets. Otherwise a rail without RDMA is not judged (a TCP-only or software rail).
Another RDMA device on the function under the wrong name is ``RdmaNameMismatch``, not this.

The subject of both RDMA rail codes is the RDMA name the rule expects (``rdma_rail1``): NCCL
(``NCCL_IB_HCA``) and the RDMA device plugin select devices by that name, so a failed
``rdma_rename`` leaves the rail invisible to them while its netdev looks fine. Without an RDMA
rule nothing expects a name, and the subject is the device's own name.
"""

from __future__ import annotations

import re

from agent.analysis.checks._util import Check, finding, name_list, rail_label
from agent.analysis.topology import Rail, Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import Snapshot

# ib_core's netns_mode module parameter: 0 (or N) = exclusive, 1 (or Y) = shared.
# https://docs.kernel.org/infiniband/user_verbs.html ; rdma system show reports the running mode.
_CMDLINE_RE = re.compile(r"(?:^|\s)ib_core\.netns_mode=(\S+)")
_MODPROBE_RE = re.compile(r"netns_mode=(\S+)")


def _mode_word(v: str | None) -> str | None:
    if v is None:
        return None
    low = v.strip().lower()
    if low in ("0", "n", "exclusive", "false"):
        return "exclusive"
    if low in ("1", "y", "shared", "true"):
        return "shared"
    return None


def running_netns_mode(snap: Snapshot) -> str | None:
    """``shared`` / ``exclusive`` as ``rdma system show`` says, else from the module parameter."""
    return _mode_word(snap.rdma_netns) or _mode_word(snap.versions.netns_mode)


def requested_netns_mode(snap: Snapshot) -> tuple[str | None, list[str]]:
    """What the node asks for at the next module load (cmdline wins over modprobe.d), and where."""
    asks: list[tuple[str, str]] = []
    for file, line in snap.versions.modprobe_netns_mode:
        m = _MODPROBE_RE.search(line)
        if m and (word := _mode_word(m.group(1))):
            asks.append((word, f"{file}: {line.strip()}"))
    m = _CMDLINE_RE.search(snap.versions.cmdline or "")
    if m and (word := _mode_word(m.group(1))):
        asks.append((word, f"/proc/cmdline: ib_core.netns_mode={m.group(1)}"))
    if not asks:
        return None, []
    mode = asks[-1][0]
    return mode, [where for word, where in asks if word == mode]


def rdma_subject(rail: Rail) -> str | None:
    """The expected RDMA name (the RDMA rule's), else the name of the rail's RDMA device."""
    if rail.rdma_rule is not None:
        return rail.rdma_rule.name
    if rail.rdma is not None:
        return rail.rdma.dev
    return rail.rdma_device.name if rail.rdma_device is not None else None


def _name_mismatch(rail: Rail) -> Finding | None:
    rule = rail.rdma_rule
    if rule is None or rail.netdev is None:
        return None
    actual = rail.rdma_device.name if rail.rdma_device is not None else None
    if actual == rule.name or (actual is None and (not rail.other_rdma or rule.name in rail.other_rdma)):
        return None
    where = f"{rule.file} line {rule.line}"
    if actual is not None:
        what = f"the RDMA device of {rail.pci} is named {actual}, not {rule.name}"
    else:
        what = f"no RDMA device of {rail.pci} is named {rule.name} (it has {name_list(rail.other_rdma)})"
    return finding(
        "RdmaNameMismatch", rule.name,
        f"rail {rail_label(rail.rail, rail.plane)}: {what} (the RDMA rename did not apply; NCCL_IB_HCA and "
        f"the RDMA device plugin select devices by name)",
        pci=rail.pci, actual=actual, rule=where, netdev=rail.netdev.ifname,
        others=list(rail.other_rdma) or None)


def _driver(snap: Snapshot, rail: Rail) -> str | None:
    """The rail PF's driver: its sysfs driver link, else ``ethtool -i`` of the rail netdev."""
    if rail.pf is not None and rail.pf.driver:
        return rail.pf.driver
    info = snap.driver_of(rail.netdev.ifname) if rail.netdev is not None else None
    return info.driver if info is not None else None


def _why_rdma(snap: Snapshot, rail: Rail, exp: Expectations) -> str | None:
    """What says the rail must have an RDMA device, in words; None when nothing does."""
    if rail.rdma_rule is not None:
        return f"{rail.rdma_rule.file} line {rail.rdma_rule.line} names its RDMA device {rail.rdma_rule.name}"
    pf = rail.pf
    if pf is not None and pf.param("enable_roce") is True and (_driver(snap, rail) or "") == "mlx5_core":
        return f"its PF {pf.handle} is mlx5 with RoCE enabled (devlink param enable_roce true)"
    if exp.rdma:
        return "--expect-rdma"
    return None


def _rdma_missing(snap: Snapshot, rail: Rail, exp: Expectations) -> Finding | None:
    if rail.netdev is None or rail.rdma is not None or rail.rdma_device is not None or rail.other_rdma:
        return None
    why = _why_rdma(snap, rail, exp)
    if why is None:
        return None
    return finding(
        "RailRdmaMissing", rail.expected_netdev,
        f"rail {rail_label(rail.rail, rail.plane)}: {rail.netdev.ifname} has no RDMA device although {why}: "
        "mlx5_ib / ib_core not loaded? NCCL falls back to sockets",
        netdev=rail.netdev.ifname, pci=rail.pci, expected_rdma=rail.expected_rdma, because=why,
        driver=_driver(snap, rail))


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    for rail in topo.rails:
        mismatch = _name_mismatch(rail)
        if mismatch is not None:
            out.append(mismatch)
        missing = _rdma_missing(snap, rail, exp)
        if missing is not None:
            out.append(missing)
        rl = rail.rdma
        if rail.netdev is None or rl is None:
            continue
        bad_state = rl.state is not None and rl.state != "ACTIVE"
        bad_phys = rl.physical_state is not None and rl.physical_state != "LINK_UP"
        if bad_state or bad_phys:
            out.append(finding(
                "RdmaLinkDown", rdma_subject(rail) or rl.dev,
                f"rail {rail_label(rail.rail, rail.plane)}: RDMA port {rl.dev}/{rl.port} is {rl.state or '?'} / {rl.physical_state or '?'}",
                port=rl.port, state=rl.state, physical_state=rl.physical_state, netdev=rl.netdev,
                rail=rail.expected_netdev, device=rl.dev, others=list(rail.other_rdma) or None))

    running = running_netns_mode(snap)
    if running is None:
        return out
    reasons = []
    evidence: dict[str, object] = {"running": running}
    if exp.rdma_netns is not None and running != exp.rdma_netns:
        reasons.append(f"expected {exp.rdma_netns}")
        evidence["expected"] = exp.rdma_netns
    requested, where = requested_netns_mode(snap)
    if requested == "exclusive" and running == "shared":
        reasons.append(f"the node asks for exclusive mode ({'; '.join(where)}) but the running ib_core was "
                       "loaded shared (module not reloaded or node not rebooted)")
        evidence["requested_by"] = where
    if reasons:
        out.append(finding("RdmaNetnsModeUnexpected", "node",
                           f"RDMA netns mode is {running}: " + "; ".join(reasons), **evidence))
    return out


CHECKS = (Check(20, ("RdmaLinkDown", "RdmaNameMismatch", "RdmaNetnsModeUnexpected", "RailRdmaMissing"), lambda i: check(i.snap, i.topo, i.exp)),)
