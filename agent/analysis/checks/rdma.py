"""RdmaLinkDown and RdmaNetnsModeUnexpected.

Only a rail's own RDMA port is judged (DESIGN §4 "A rail's RDMA port"): in switchdev the PF's RDMA
device has one port per representor, and those follow their pods. A rail with no netdev is
``RailMissing`` only; a rail with no RDMA device raises nothing here.
"""

from __future__ import annotations

import re

from agent.analysis.checks._util import finding, rail_label
from agent.analysis.topology import Topology
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


def check(snap: Snapshot, topo: Topology, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    for rail in topo.rails:
        rl = rail.rdma
        if rail.netdev is None or rl is None:
            continue
        bad_state = rl.state is not None and rl.state != "ACTIVE"
        bad_phys = rl.physical_state is not None and rl.physical_state != "LINK_UP"
        if bad_state or bad_phys:
            out.append(finding(
                "RdmaLinkDown", rl.dev,
                f"rail {rail_label(rail.rail, rail.plane)}: RDMA port {rl.dev}/{rl.port} is {rl.state or '?'} / {rl.physical_state or '?'}",
                port=rl.port, state=rl.state, physical_state=rl.physical_state, netdev=rl.netdev,
                rail=rail.expected_netdev))

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
