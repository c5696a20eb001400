"""Hand-built snapshots for the pure topology and check tests.

``node()`` gives the healthy Spectrum-X node of the shared example image (two single-port ConnectX-7
NICs in switchdev, one VF and one representor each, PFC on prio 3, DOCA 25.10 on 6.8.0-60-generic);
tests change it with ``dataclasses.replace`` and the helpers below, so each test states only the fault.
"""

from __future__ import annotations

from dataclasses import replace

from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from agent.model import (
    DevlinkDev,
    DevlinkParam,
    DevlinkPort,
    DriverInfo,
    Eswitch,
    EthtoolStats,
    Link,
    OvsInterface,
    PciFunction,
    RailRule,
    RdmaDevice,
    RdmaLink,
    RdmaPort,
    Snapshot,
    Versions,
)

NET_RULES = "/etc/udev/rules.d/10-nic-net-interface-naming.rules"
RDMA_RULES = "/etc/udev/rules.d/10-nic-rdma-interface-naming.rules"
TAKEN_AT = 1_793_197_233.0  # 2026-10-28T14:20:33Z

#: the prio-3 PFC counters of a healthy uplink (ethtool -S, cut to what the checks read)
PFC3 = {
    "rx_prio3_pause": 14337, "rx_prio3_pause_duration": 28674, "tx_prio3_pause": 4432,
    "tx_prio3_pause_duration": 17728, "rx_prio3_pause_transition": 7058,
    "tx_pause_storm_warning_events": 0, "tx_pause_storm_error_events": 0,
    "rx_prio3_discards": 0, "rx_prio3_buf_discard": 0, "rx_prio3_cong_discard": 0,
    "rx_pause_ctrl_phy": 14337, "tx_pause_ctrl_phy": 4432, "rx_discards_phy": 0,
}

PCIS = ("0000:0c:00.0", "0000:8d:00.0", "0000:1a:00.0", "0000:9b:00.0",
        "0000:3c:00.0", "0000:4d:00.0", "0000:5a:00.0", "0000:6b:00.0")
SWITCH_IDS = tuple(f"{n:x}2a10003d23fb8".rjust(16, "c") for n in range(0xd4, 0xdc))


def vf_of(pf: str, n: int = 0) -> str:
    """The BDF of VF n: functions 1-7 of the PF's device, then the next devices (as ARI numbers them)."""
    bus, dev = pf[:-4], int(pf[-4:-2], 16)
    slot = n + 1
    return f"{bus}{dev + slot // 8:02x}.{slot % 8}"


def node(rails: int = 2, *, mode: str = "switchdev", numvfs: int = 1, rules: bool = True,
         fw: str = "28.42.1000", kernel: str = "6.8.0-60-generic", driver_version: str = "25.10-1.7.1",
         netns: str = "exclusive") -> Snapshot:
    links = [Link(1, "lo", "UNKNOWN", 1, mtu=65536)]
    pci, devs, esw, params, ports, rdma_links, rdevs, eth, drivers, rule_list = ([] for _ in range(10))
    ifindex = 2
    for r in range(rails):
        bdf, sw = PCIS[r], SWITCH_IDS[r]
        name, rdma = f"net_rail{r}", f"rdma_rail{r}"
        links.append(Link(ifindex, name, "UP", 1, 2, 1, 1, 9000, f"b8:3f:d2:7a:40:{r:02x}", "p0", sw, "pci", bdf,
                          stats64=(("rx_bytes", 1), ("tx_bytes", 1))))
        ifindex += 1
        for v in range(numvfs):
            links.append(Link(ifindex, f"{name}_{v}", "UP", 1, 2, 1, 1, 9000, None, f"pf0vf{v}", sw, "pci", bdf))
            ifindex += 1
            ports.append(DevlinkPort(f"pci/{bdf}/{v + 1}", f"pci/{bdf}", v + 1, f"{name}_{v}", "pcivf", 0, 0, v))
        pci.append(PciFunction(bdf, numvfs, 8, virtfns=tuple(vf_of(bdf, v) for v in range(numvfs)),
                               driver="mlx5_core"))
        pci.extend(PciFunction(vf_of(bdf, v), physfn=bdf, driver="mlx5_core") for v in range(numvfs))
        aux = f"auxiliary/mlx5_core.eth.{r}"
        devs.append(DevlinkDev(f"pci/{bdf}", (aux,)))
        devs.append(DevlinkDev(aux))
        esw.append(Eswitch(f"pci/{bdf}", mode, "none", "basic"))
        params.append(DevlinkParam(f"pci/{bdf}", "esw_multiport", (("runtime", False),)))
        params.append(DevlinkParam(f"pci/{bdf}", "flow_steering_mode", (("runtime", "smfs"),)))
        ports.append(DevlinkPort(f"{aux}/65535", aux, 65535, name, "physical"))
        rdma_links.append(RdmaLink(rdma, 1, "ACTIVE", "LINK_UP", name))
        rdevs.append(RdmaDevice(rdma, bdf, fw, "MT4129", f"b83f:d203:007a:40{r:02x}",
                                (RdmaPort(1, "ACTIVE", "LINK_UP", "ethernet"),)))
        eth.append(EthtoolStats(name, tuple(PFC3.items())))
        drivers.append(DriverInfo(name, "mlx5_core", driver_version, fw, "MT_0000000838", bdf))
        if rules:
            rule_list.append(RailRule(bdf, name, "net", NET_RULES, 4 + r))
            rule_list.append(RailRule(bdf, rdma, "rdma", RDMA_RULES, 4 + r))
    return Snapshot(
        taken_at=TAKEN_AT,
        node="gpu-node-017",
        versions=Versions(kernel=kernel, hostname="gpu-node-017", cmdline="ro iommu=pt",
                          mlx5_version=driver_version, netns_mode="N" if netns == "exclusive" else "Y"),
        links=tuple(links), pci=tuple(pci), devlink_devs=tuple(devs), eswitch=tuple(esw),
        params=tuple(params), ports=tuple(ports), rdma_links=tuple(rdma_links), rdma_netns=netns,
        rdma_devices=tuple(rdevs), ethtool=tuple(eth), drivers=tuple(drivers), rules=tuple(rule_list),
    )


def replace_link(snap: Snapshot, name: str, /, **changes: object) -> Snapshot:
    return replace(snap, links=tuple(replace(ln, **changes) if ln.ifname == name else ln for ln in snap.links))


def drop_link(snap: Snapshot, ifname: str) -> Snapshot:
    return replace(snap, links=tuple(ln for ln in snap.links if ln.ifname != ifname))


def add_link(snap: Snapshot, link: Link) -> Snapshot:
    return replace(snap, links=(*snap.links, link))


def set_counters(snap: Snapshot, netdev: str, **values: int | None) -> Snapshot:
    """Change ethtool counters of a netdev; a value of None removes the key (off / unsupported)."""
    out = []
    for st in snap.ethtool:
        if st.netdev == netdev:
            d = st.as_dict()
            for k, v in values.items():
                if v is None:
                    d.pop(k, None)
                else:
                    d[k] = v
            st = EthtoolStats(netdev, tuple(d.items()))
        out.append(st)
    return replace(snap, ethtool=tuple(out))


def set_numvfs(snap: Snapshot, bdf: str, numvfs: int | None) -> Snapshot:
    return replace(snap, pci=tuple(replace(fn, sriov_numvfs=numvfs) if fn.bdf == bdf else fn for fn in snap.pci))


def set_param(snap: Snapshot, handle: str, name: str, value: object) -> Snapshot:
    return replace(snap, params=tuple(
        DevlinkParam(p.handle, p.name, (("runtime", value),)) if (p.handle, p.name) == (handle, name) else p
        for p in snap.params))


def set_mode(snap: Snapshot, handle: str, mode: str | None) -> Snapshot:
    return replace(snap, eswitch=tuple(replace(e, mode=mode) if e.handle == handle else e for e in snap.eswitch))


def with_ovs(snap: Snapshot, *itfs: OvsInterface) -> Snapshot:
    return replace(snap, ovs=tuple(itfs))


def found(snap: Snapshot, exp: Expectations | None = None) -> list[tuple[str, str, str]]:
    """``(code, severity, subject)`` of every finding the checks give ``snap``, in their order."""
    exp = exp or Expectations()
    return [(f.code, f.severity, f.subject) for f in diagnose(snap, exp, kernel_table=()).findings]
