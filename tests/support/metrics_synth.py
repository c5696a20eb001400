"""A synthetic big node for the metrics tests: N single-port ConnectX rails in switchdev, V VFs each.

Built from ``agent.model`` records directly (the shapes the readers return), the way docs/design.md §10 sizes a
big node: 8 rails x 127 VFs = 8 uplinks + 1,016 representors, and in switchdev one RDMA port per
representor on each PF's RDMA device (only the uplink port is a rail's).
"""

from __future__ import annotations

from pathlib import Path

from agent.model import (
    DevlinkDev,
    DevlinkParam,
    DevlinkPort,
    DriverInfo,
    Eswitch,
    EthtoolStats,
    FirmwareInfo,
    GpuState,
    HealthReporter,
    Link,
    PciFunction,
    PciPath,
    RailRule,
    RdmaDevice,
    RdmaLink,
    RdmaPort,
    Snapshot,
    Versions,
)

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "metrics" / "fixtures"
NET_RULES = "/etc/udev/rules.d/10-nic-net-interface-naming.rules"
RDMA_RULES = "/etc/udev/rules.d/10-nic-rdma-interface-naming.rules"

RDMA_COUNTERS = {
    "np_ecn_marked_roce_packets": 912, "np_cnp_sent": 880, "rp_cnp_handled": 1204, "rp_cnp_ignored": 0,
    "out_of_sequence": 3, "packet_seq_err": 1, "implied_nak_seq_err": 0, "local_ack_timeout_err": 2,
    "duplicate_request": 0, "rnr_nak_retry_err": 0, "out_of_buffer": 135, "rx_icrc_encapsulated": 0,
    "roce_adp_retrans": 0, "roce_adp_retrans_to": 0, "roce_slow_restart": 0, "roce_slow_restart_cnps": 0,
    "roce_slow_restart_trans": 0, "req_cqe_error": 22, "resp_cqe_error": 1009, "lifespan": 10,
    "rx_write_requests": 7, "port_rcv_data": 1000, "port_xmit_data": 2000, "port_rcv_packets": 50,
    "port_xmit_packets": 60, "port_xmit_discards": 0, "port_rcv_errors": 0, "symbol_error": 0, "link_downed": 0,
}


def parse_ethtool_s(text: str) -> tuple[tuple[str, int], ...]:
    """``ethtool -S`` text -> (name, value) pairs; comment and header lines skipped."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or ":" not in line:
            continue
        key, _, val = line.rpartition(":")
        key = key.strip()
        try:
            out.append((key, int(val.strip())))
        except ValueError:
            continue
    return tuple(out)


def ethtool_fixture(name: str) -> tuple[tuple[str, int], ...]:
    return parse_ethtool_s((FIXTURES / name).read_text())


HEALTHY_ETHTOOL = "ethtool-S-mlx5-uplink-pfc-prio3-healthy.RECONSTRUCTED.txt"


def pf_bdf(i: int) -> str:
    return f"0000:{0x1a + i * 0x10:02x}:00.0"


def vf_bdf(i: int, v: int) -> str:
    n = v + 1  # VF routing IDs follow the PF: device = n // 8, function = n % 8
    return f"0000:{0x1a + i * 0x10:02x}:{n // 8:02x}.{n % 8}"


def rail_link(i: int, ifindex: int, *, stats: bool = True) -> Link:
    return Link(
        ifindex=ifindex, ifname=f"net_rail{i}", operstate="UP", carrier=1, carrier_changes=4,
        carrier_up_count=2, carrier_down_count=2, mtu=9000, speed_mbps=400_000, address=f"b8:3f:d2:aa:{i:02x}:10",
        phys_port_name="p0", phys_switch_id=f"9a3f21c0ffee{i:04x}", parent_bus="pci", parent_dev=pf_bdf(i),
        stats64=(("rx_bytes", 1000 + i), ("tx_bytes", 2000 + i), ("rx_packets", 10), ("tx_packets", 20),
                 ("rx_errors", 0), ("tx_errors", 0), ("rx_dropped", 1), ("tx_dropped", 0)) if stats else None,
    )


def rep_link(i: int, v: int, ifindex: int, *, up: bool = True) -> Link:
    return Link(
        ifindex=ifindex, ifname=f"net_rail{i}_{v}", operstate="UP" if up else "DOWN", carrier=1 if up else 0,
        mtu=9000, phys_port_name=f"pf0vf{v}", phys_switch_id=f"9a3f21c0ffee{i:04x}",
        parent_bus="pci", parent_dev=pf_bdf(i),
    )


def synthetic_snapshot(rails: int = 8, vfs: int = 127, *, numvfs: int | None = None,
                       drop_reps: frozenset[tuple[int, int]] = frozenset(),
                       taken_at: float = 1_790_000_000.0) -> Snapshot:
    """``rails`` rails with ``vfs`` representors each; ``numvfs`` (default ``vfs``) is what sysfs says,
    so ``numvfs < vfs`` leaves stale representors; ``drop_reps`` removes (rail, vf) representors."""
    numvfs = vfs if numvfs is None else numvfs
    links: list[Link] = [Link(ifindex=1, ifname="lo", operstate="UNKNOWN", carrier=1, mtu=65536)]
    pci: list[PciFunction] = []
    devs: list[DevlinkDev] = []
    health: list[HealthReporter] = []
    esw: list[Eswitch] = []
    params: list[DevlinkParam] = []
    ports: list[DevlinkPort] = []
    rdma_links: list[RdmaLink] = []
    rdma_devs: list[RdmaDevice] = []
    ethtool: list[EthtoolStats] = []
    drivers: list[DriverInfo] = []
    rules: list[RailRule] = []
    counters = ethtool_fixture(HEALTHY_ETHTOOL)
    ifindex = 2
    for i in range(rails):
        bdf = pf_bdf(i)
        links.append(rail_link(i, ifindex))
        ifindex += 1
        for v in range(vfs):
            if (i, v) in drop_reps:
                continue
            links.append(rep_link(i, v, ifindex))
            ports.append(DevlinkPort(handle=f"pci/{bdf}/{v + 1}", dev=f"pci/{bdf}", index=v + 1,
                                     netdev=f"net_rail{i}_{v}", flavour="pcivf", controller=0, pfnum=0,
                                     vfnum=v, external=False))
            rdma_links.append(RdmaLink(dev=f"rdma_rail{i}", port=v + 2, state="ACTIVE",
                                       physical_state="LINK_UP", netdev=f"net_rail{i}_{v}"))
            ifindex += 1
        pci.append(PciFunction(bdf=bdf, sriov_numvfs=numvfs, sriov_totalvfs=127,
                               virtfns=tuple(vf_bdf(i, v) for v in range(numvfs)), driver="mlx5_core"))
        pci.extend(PciFunction(bdf=vf_bdf(i, v), physfn=bdf, driver="mlx5_core") for v in range(numvfs))
        devs.append(DevlinkDev(handle=f"pci/{bdf}"))
        health.extend(HealthReporter(f"pci/{bdf}", f"pci/{bdf}", None, name, "healthy", 0, 0)
                      for name in ("fw", "fw_fatal"))
        esw.append(Eswitch(handle=f"pci/{bdf}", mode="switchdev", inline_mode="none", encap_mode="basic"))
        params.append(DevlinkParam(handle=f"pci/{bdf}", name="esw_multiport", values=(("runtime", False),)))
        params.append(DevlinkParam(handle=f"pci/{bdf}", name="flow_steering_mode", values=(("runtime", "smfs"),)))
        ports.append(DevlinkPort(handle=f"pci/{bdf}/65535", dev=f"pci/{bdf}", index=65535,
                                 netdev=f"net_rail{i}", flavour="physical", controller=0))
        rdma_links.insert(0, RdmaLink(dev=f"rdma_rail{i}", port=1, state="ACTIVE", physical_state="LINK_UP",
                                      netdev=f"net_rail{i}"))
        # Counters on a representor's port too: the collector must ignore every port but the uplink's.
        rdma_devs.append(RdmaDevice(
            name=f"rdma_rail{i}", pci=bdf, fw_ver="28.43.1014", hca_type="MT4129",
            ports=(RdmaPort(1, "ACTIVE", "LINK_UP", "ethernet"),),
            counters=(*((1, k, v) for k, v in RDMA_COUNTERS.items()), (2, "out_of_sequence", 999_999)),
        ))
        ethtool.append(EthtoolStats(netdev=f"net_rail{i}", counters=counters))
        drivers.append(DriverInfo(netdev=f"net_rail{i}", driver="mlx5_core", version="25.10-1.7.1",
                                  firmware="28.43.1014", psid="MT_0000000838", bus_info=bdf))
        rules.append(RailRule(pci=bdf, name=f"net_rail{i}", kind="net", file=NET_RULES, line=i + 1))
        rules.append(RailRule(pci=bdf, name=f"rdma_rail{i}", kind="rdma", file=RDMA_RULES, line=i + 1))
    # HGX: each rail NIC behind the PCIe switch of one GPU (PIX); firmware 28.43.1014 running and stored.
    firmware = tuple(FirmwareInfo(handle=f"pci/{pf_bdf(i)}", driver="mlx5_core",
                                  running=(("fw.version", "28.43.1014"), ("fw", "28.43.1014")),
                                  stored=(("fw.version", "28.43.1014"), ("fw", "28.43.1014")), psid="MT_0000000838")
                     for i in range(rails))

    def switch(i: int) -> str:
        bus = 0x1a + i * 0x10
        return f"/sys/devices/pci0000:{bus - 3:02x}/0000:{bus - 3:02x}:01.0/0000:{bus - 2:02x}:00.0"

    gpus = GpuState(
        gpus=tuple(PciPath(f"0000:{0x1a + i * 0x10 + 1:02x}:00.0",
                           f"{switch(i)}/0000:{0x1a + i * 0x10 - 1:02x}:00.0/0000:{0x1a + i * 0x10 + 1:02x}:00.0",
                           i // 4, "0x030200") for i in range(rails)),
        rail_paths=tuple(PciPath(pf_bdf(i), f"{switch(i)}/0000:{0x1a + i * 0x10 - 1:02x}:01.0/{pf_bdf(i)}", i // 4)
                         for i in range(rails)),
        peer_memory=(("/sys/module/nvidia_peermem/version", "570.133.20"),), nvidia_loaded=True,
        nvidia_version="570.133.20", nvidia_taint="PO")
    return Snapshot(
        taken_at=taken_at, node="gpu-big-01", firmware=firmware, gpus=gpus,
        versions=Versions(kernel="6.8.0-60-generic", hostname="gpu-big-01", cmdline="",
                          mlx5_version="25.10-1.7.1", mlx5_srcversion="7A2D9B04C1E55F0A3B4C2D1",
                          netns_mode="N"),
        links=tuple(links), pci=tuple(pci), devlink_devs=tuple(devs), eswitch=tuple(esw), params=tuple(params),
        ports=tuple(ports), rdma_links=tuple(rdma_links), rdma_netns="exclusive", rdma_devices=tuple(rdma_devs),
        ethtool=tuple(ethtool), drivers=tuple(drivers), rules=tuple(rules), ovs=None, health=tuple(health),
    )
