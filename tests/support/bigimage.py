"""A synthetic big switchdev node as a node image: N single-port rails, V VFs each, in switchdev.

docs/design.md §10 sizes a big node at 8 rails x 127 VFs: 8 uplinks + 1,016 representors, and one RDMA port
per representor on each PF's RDMA device (only port 1, the uplink's, is a rail's). The VF netdevs
are inside pods, so the host's link dump has uplinks and representors only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

NET_RULES = "etc/udev/rules.d/10-nic-net-interface-naming.rules"
RDMA_RULES = "etc/udev/rules.d/10-nic-rdma-interface-naming.rules"
ETHTOOL_S = "NIC statistics:\n" + "".join(
    f"     {d}_prio{p}_{k}: {p * 10}\n" for p in range(8) for d in ("rx", "tx") for k in ("bytes", "packets")
) + "     rx_prio3_pause: 10\n     tx_prio3_pause: 20\n     rx_prio3_pause_duration: 5\n"


def _w(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _cmd(root: Path, stem: str, out: str, rc: int = 0) -> None:
    _w(root / "cmd" / f"{stem}.stdout", out)
    _w(root / "cmd" / f"{stem}.rc", f"{rc}\n")


def build(root: Path, rails: int = 8, vfs: int = 127) -> Path:
    fs = root / "fs"
    links = [{"ifindex": 1, "ifname": "lo", "operstate": "UNKNOWN", "carrier": 1, "mtu": 65536}]
    dev_show, ports, rdma_links = {}, {}, []
    net_rules, rdma_rules = [], []
    ifindex = 2
    for r in range(rails):
        bdf = f"0000:{0x10 + r:02x}:00.0"
        pf = f"pci/{bdf}"
        sw = f"b83fd2ffff{r:06x}"
        stats = {"rx_bytes": 1, "tx_bytes": 2, "rx_packets": 3, "tx_packets": 4}
        links.append({"ifindex": ifindex, "ifname": f"net_rail{r}", "operstate": "UP", "carrier": 1,
                      "carrier_down_count": 1, "mtu": 9000, "phys_port_name": "p0", "phys_switch_id": sw,
                      "parent_bus": "pci", "parent_dev": bdf, "stats64": stats,
                      "vfinfo": [{"vf": v, "mac": "00:00:00:00:00:00", "link_state": "auto"} for v in range(vfs)]})
        ifindex += 1
        for v in range(vfs):
            links.append({"ifindex": ifindex, "ifname": f"net_rail{r}_{v}", "operstate": "UP", "carrier": 1,
                          "mtu": 9000, "phys_port_name": f"pf0vf{v}", "phys_switch_id": sw,
                          "parent_bus": "pci", "parent_dev": bdf, "stats64": stats})
            ifindex += 1
            ports[f"{pf}/{v + 1}"] = {"type": "eth", "netdev": f"net_rail{r}_{v}", "flavour": "pcivf",
                                      "controller": 0, "pfnum": 0, "vfnum": v, "external": False}
        aux = f"auxiliary/mlx5_core.eth.{r}"
        dev_show[pf] = {"nested_devlink": {aux: {}}}
        dev_show[aux] = {}
        ports[f"{aux}/65535"] = {"type": "eth", "netdev": f"net_rail{r}", "flavour": "physical", "port": 0}
        net_rules.append(f'SUBSYSTEM=="net", ACTION=="add", KERNELS=="{bdf}", NAME="net_rail{r}"')
        rdma_rules.append(f'ACTION=="add", KERNELS=="{bdf}", SUBSYSTEM=="infiniband", '
                          f'RUN+="/usr/bin/rdma dev set %k name rdma_rail{r}"')

        pdir = fs / "sys" / "devices" / "pci0000:00" / bdf
        for name, val in (("sriov_numvfs", vfs), ("sriov_totalvfs", 127), ("vendor", "0x15b3"), ("device", "0x1021")):
            _w(pdir / name, f"{val}\n")
        for v in range(vfs):
            vbdf = f"0000:{0x10 + r:02x}:{(v + 1) // 8:02x}.{(v + 1) % 8}"
            _w(fs / "sys" / "devices" / "pci0000:00" / vbdf / "vendor", "0x15b3\n")
            os.symlink(f"../{bdf}", fs / "sys" / "devices" / "pci0000:00" / vbdf / "physfn")
            os.symlink(f"../{vbdf}", pdir / f"virtfn{v}")
        (fs / "sys" / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../devices/pci0000:00/{bdf}", fs / "sys" / "bus" / "pci" / "devices" / bdf)
        ndir = fs / "sys" / "class" / "net" / f"net_rail{r}"
        _w(ndir / "speed", "400000\n")

        ib = pdir / "infiniband" / f"rdma_rail{r}"
        _w(ib / "fw_ver", "28.42.1000\n")
        _w(ib / "hca_type", "MT4129\n")
        _w(ib / "node_guid", f"b83f:d203:00aa:{r:04x}\n")
        os.symlink("../../../" + bdf, ib / "device")
        (fs / "sys" / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../devices/pci0000:00/{bdf}/infiniband/rdma_rail{r}",
                   fs / "sys" / "class" / "infiniband" / f"rdma_rail{r}")
        for p in range(1, vfs + 2):
            _w(ib / "ports" / str(p) / "state", "4: ACTIVE\n")
            _w(ib / "ports" / str(p) / "phys_state", "5: LinkUp\n")
            _w(ib / "ports" / str(p) / "link_layer", "Ethernet\n")
            _w(ib / "ports" / str(p) / "hw_counters" / "out_of_buffer", f"{p}\n")
            rdma_links.append({"ifname": f"rdma_rail{r}", "port": p, "state": "ACTIVE", "physical_state": "LINK_UP",
                               "netdev": f"net_rail{r}" if p == 1 else f"net_rail{r}_{p - 2}"})

        slug_pf = pf.replace("/", "-").replace(":", "-")
        _cmd(root, f"devlink_-j_dev_eswitch_show_{slug_pf}",
             json.dumps({"dev": {pf: {"mode": "switchdev", "inline-mode": "none", "encap-mode": "basic"}}}))
        for name, val in (("esw_multiport", False), ("flow_steering_mode", "smfs")):
            _cmd(root, f"devlink_-j_dev_param_show_{slug_pf}_name_{name}", json.dumps(
                {"param": {pf: [{"name": name, "type": "driver-specific",
                                 "values": [{"cmode": "runtime", "value": val}]}]}}))
        _cmd(root, f"ethtool_-S_net_rail{r}", ETHTOOL_S)
        _cmd(root, f"ethtool_-i_net_rail{r}", f"driver: mlx5_core\nversion: 25.10-1.7.1\n"
                                              f"firmware-version: 28.42.1000 (MT_0000000838)\nbus-info: {bdf}\n")

    _w(fs / NET_RULES, "\n".join(net_rules) + "\n")
    _w(fs / RDMA_RULES, "\n".join(rdma_rules) + "\n")
    _w(fs / "proc" / "sys" / "kernel" / "osrelease", "6.8.0-60-generic\n")
    _w(fs / "proc" / "sys" / "kernel" / "hostname", "big-node\n")
    _w(fs / "sys" / "module" / "ib_core" / "parameters" / "netns_mode", "N\n")
    _cmd(root, "devlink_-j_dev_show", json.dumps({"dev": dev_show}))
    _cmd(root, "devlink_-j_port_show", json.dumps({"port": ports}))
    _cmd(root, "rdma_-j_link_show", json.dumps(rdma_links))
    _cmd(root, "rdma_-j_system_show", '[{"netns":"exclusive"}]')
    _w(root / "netlink" / "links.json", json.dumps({"links": links}))
    return root
