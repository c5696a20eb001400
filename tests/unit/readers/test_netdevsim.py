"""A devlink instance on a bus other than PCI (netdevsim): its handle, eswitch, params and SR-IOV.

The node image is made by hand from the outputs recorded on a real Linux 6.1 kernel with netdevsim
(``tests/fixtures/public/netdevsim/``): ``07`` dev show, ``10`` params, ``31`` eswitch in switchdev,
``33`` the link dump, ``34`` the ports. The sysfs facts come from the same recording session:
``/sys/bus/netdevsim/devices/netdevsim10/`` holds ``sriov_numvfs`` (``4`` after the write of step 25)
and a ``driver`` link, and has no ``sriov_totalvfs`` (step 24: ``No such file or directory``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from agent.analysis.topology import build_topology
from agent.config import Expectations, ReadConfig
from agent.host.recorded import RecordedHost
from agent.model import DevlinkDev, Link, PciFunction
from agent.readers.common import Notes
from agent.readers.devlink import pf_handles, pf_of_handle, read_devlink
from agent.readers.pci import bus_devices_of_links, read_bus_devices
from agent.readers.snapshot import take_snapshot
from tests.support.imagekit import make_image, recorded_body

HANDLE = "netdevsim/netdevsim10"
SYSFS = "/sys/bus/netdevsim/devices/netdevsim10"
PARAMS = ("max_macs", "test1")


def _doc(rel: str) -> Any:
    text, rc = recorded_body(rel)
    assert rc == 0
    return json.loads(text)


def _links(uplink: str) -> list[dict[str, Any]]:
    """``ip -d -j link show`` of the switchdev step -> the link dump of a node image."""
    out = []
    for ln in _doc("netdevsim/33-ip-d-link-switchdev.txt"):
        name = uplink if ln["ifname"] == "eth0" else ln["ifname"]
        out.append({
            "ifindex": ln["ifindex"], "ifname": name, "operstate": ln["operstate"], "carrier": 0,
            "mtu": ln["mtu"], "address": ln.get("address"), "phys_port_name": ln.get("phys_port_name"),
            "phys_switch_id": ln.get("phys_switch_id"), "parent_bus": ln.get("parentbus"),
            "parent_dev": ln.get("parentdev"), "master": None, "kind": None,
        })
    return out


def _param_of(name: str) -> str:
    """``devlink -j dev param show netdevsim/netdevsim10 name <p>``: the dump of step 10, that param only."""
    doc = _doc("netdevsim/10-devlink-dev-param-show.txt")
    return json.dumps({"param": {HANDLE: [p for p in doc["param"][HANDLE] if p["name"] == name]}})


def _cmds(uplink: str) -> dict[tuple[str, ...], tuple[str, int]]:
    ports = json.dumps(_doc("netdevsim/34-devlink-port-show-switchdev.txt")).replace('"eth0"', json.dumps(uplink))
    cmds: dict[tuple[str, ...], tuple[str, int]] = {
        ("devlink", "-j", "dev", "show"): (json.dumps(_doc("netdevsim/07-devlink-dev-show.txt")), 0),
        ("devlink", "-j", "dev", "eswitch", "show", HANDLE):
            (json.dumps(_doc("netdevsim/31-devlink-eswitch-show-switchdev.txt")), 0),
        ("devlink", "-j", "port", "show"): (ports, 0),
        ("devlink", "-j", "health", "show"): (json.dumps(_doc("netdevsim/39-devlink-health-show.txt")), 0),
    }
    for name in PARAMS:
        cmds[("devlink", "-j", "dev", "param", "show", HANDLE, "name", name)] = (_param_of(name), 0)
    return cmds


def netdevsim_image(root: Path, uplink: str = "eth0") -> RecordedHost:
    """netdevsim10 in switchdev with 4 VFs; its uplink (``eth0`` as recorded) may be given a rail's name."""
    return make_image(
        root,
        files={f"{SYSFS}/sriov_numvfs": "4\n", f"{SYSFS}/uevent": "", f"{SYSFS}/new_port": "",
               f"{SYSFS}/del_port": ""},
        symlinks={f"{SYSFS}/driver": "../../bus/netdevsim/drivers/netdevsim",
                  f"{SYSFS}/subsystem": "../../bus/netdevsim"},
        cmds=_cmds(uplink),
        links=_links(uplink),
    )


def _link(ifname: str, bus: str | None, dev: str | None, ifindex: int = 2) -> Link:
    return Link(ifindex=ifindex, ifname=ifname, parent_bus=bus, parent_dev=dev)


# -- sysfs ------------------------------------------------------------------------------------


def test_sriov_of_a_netdevsim_device_is_read_from_its_own_bus(tmp_path: Path) -> None:
    host = netdevsim_image(tmp_path / "img")
    links = [_link("eth0", "netdevsim", "netdevsim10"), _link("eth1", "netdevsim", "netdevsim10", 3)]
    (fn,) = read_bus_devices(host, links)
    assert fn == PciFunction("netdevsim10", sriov_numvfs=4, sriov_totalvfs=None, driver="netdevsim")
    assert not fn.is_vf


def test_only_devices_with_sriov_files_on_a_pf_bus_are_read(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={
        "/sys/bus/virtio/devices/virtio0/uevent": "",
        "/sys/bus/auxiliary/devices/mlx5_core.sf.2/sriov_numvfs": "0\n",
        "/sys/bus/netdevsim/devices/netdevsim11/sriov_numvfs": "0\n",
    })
    links = [_link("ens3", "virtio", "virtio0"), _link("enp8s0f0s2", "auxiliary", "mlx5_core.sf.2", 3),
             _link("eth5", "netdevsim", "netdevsim11", 4), _link("eth6", "netdevsim", "netdevsim12", 5),
             _link("ens1f0", "pci", "0000:08:00.0", 6), _link("lo", None, None, 1),
             _link("evil", "netdevsim", "../../../etc", 7)]
    # an SF is a function of its PF, a PCI parent is read_pci's, a path-like name is never a path
    assert bus_devices_of_links(links) == [("netdevsim", "netdevsim11"), ("netdevsim", "netdevsim12"),
                                           ("virtio", "virtio0")]
    # virtio0 has no SR-IOV files, netdevsim12 no directory: neither is a function
    assert read_bus_devices(host, links) == (PciFunction("netdevsim11", sriov_numvfs=0),)


# -- devlink handles --------------------------------------------------------------------------


def test_a_link_parent_on_another_bus_is_a_pf_handle_when_devlink_lists_it() -> None:
    links = [_link("eth0", "netdevsim", "netdevsim10"), _link("eth9", "netdevsim", "netdevsim99", 9),
             _link("enp8s0f0s2", "auxiliary", "mlx5_core.sf.2", 3), _link("ens1f0", "pci", "0000:08:00.0", 4)]
    fns = [PciFunction("0000:08:00.0", sriov_numvfs=0, sriov_totalvfs=8),
           PciFunction("netdevsim10", sriov_numvfs=4, sriov_totalvfs=16)]
    devs = [DevlinkDev("pci/0000:08:00.0"), DevlinkDev(HANDLE), DevlinkDev("auxiliary/mlx5_core.sf.2")]
    # netdevsim99 is not a devlink instance; an SF instance is never queried as a PF
    assert pf_handles(devs, fns, [], links) == ["pci/0000:08:00.0", HANDLE]
    # without devlink's list nothing proves netdevsim10 is an instance: only PCI PFs (as before)
    assert pf_handles(None, fns, [], links) == ["pci/0000:08:00.0"]
    # and no links: exactly the PCI rule
    assert pf_handles(devs, fns, []) == ["pci/0000:08:00.0"]


def test_a_netdevsim_port_belongs_to_its_listed_instance() -> None:
    devs = [DevlinkDev(HANDLE), DevlinkDev("pci/0000:0c:00.0", nested=("auxiliary/mlx5_core.eth.0",)),
            DevlinkDev("auxiliary/mlx5_core.eth.0"), DevlinkDev("auxiliary/mlx5_core.sf.2")]
    assert pf_of_handle(devs, f"{HANDLE}/128") == HANDLE
    assert pf_of_handle(devs, HANDLE) == HANDLE
    assert pf_of_handle(devs, "netdevsim/netdevsim99/0") is None
    assert pf_of_handle(devs, "auxiliary/mlx5_core.eth.0/65535") == "pci/0000:0c:00.0"
    assert pf_of_handle(devs, "auxiliary/mlx5_core.sf.2/0") is None


def test_read_devlink_queries_the_netdevsim_instance(tmp_path: Path) -> None:
    host = netdevsim_image(tmp_path / "img")
    links = [Link(**{k: v for k, v in ln.items() if k in ("ifindex", "ifname", "parent_bus", "parent_dev")})
             for ln in _links("eth0")]
    notes = Notes()
    st = read_devlink(host, read_bus_devices(host, links), [], PARAMS, notes=notes, links=links)
    assert [(e.handle, e.mode) for e in st.eswitch] == [(HANDLE, "switchdev")]
    assert {(p.handle, p.name): p.values for p in st.params} == {
        (HANDLE, "max_macs"): (("driverinit", 32),), (HANDLE, "test1"): (("driverinit", True),)}
    assert [(p.netdev, p.vfnum) for p in st.ports if p.flavour == "pcivf"] == [
        ("eth1", 0), ("eth2", 1), ("eth3", 2), ("eth4", 3)]
    assert notes.unavailable == [] and notes.busy == []


# -- the whole read and the topology -----------------------------------------------------------


def test_snapshot_and_topology_of_a_netdevsim_rail(tmp_path: Path) -> None:
    host = netdevsim_image(tmp_path / "img", uplink="net_rail0")
    snap = take_snapshot(host, ReadConfig(devlink_params=PARAMS), now=0.0)
    assert [(e.handle, e.mode) for e in snap.eswitch] == [(HANDLE, "switchdev")]
    assert snap.pci_function("netdevsim10") == PciFunction("netdevsim10", sriov_numvfs=4, driver="netdevsim")
    assert not [u for u in snap.unavailable if u[0].startswith("devlink")]

    topo = build_topology(snap, Expectations())
    (rail,) = topo.rails
    pf = rail.pf
    assert (rail.netdev_name, rail.pci) == ("net_rail0", "netdevsim10")
    assert (pf.bdf, pf.handle, pf.netdev) == ("netdevsim10", HANDLE, "net_rail0")
    assert (pf.numvfs, pf.totalvfs, pf.eswitch_mode, pf.driver) == (4, None, "switchdev", "netdevsim")
    assert pf.param("max_macs") == 32 and pf.param("test1") is True
    assert [(r.netdev, r.index) for r in pf.representors] == [("eth1", 0), ("eth2", 1), ("eth3", 2), ("eth4", 3)]
    assert pf.stale_representors == ()
    assert [p.handle for p in topo.pfs] == [HANDLE]


def test_netdevsims_health_reporters_belong_to_its_rail_pf(tmp_path: Path) -> None:
    """The recorded ``devlink -j health show`` of a real netdevsim: two reporters on the instance,
    healthy; one of them in error is the PF's NicHealthError (the kernel lab breaks it for real)."""
    from agent.analysis.checks import health

    host = netdevsim_image(tmp_path / "img", uplink="net_rail0")
    snap = take_snapshot(host, ReadConfig(devlink_params=PARAMS), now=0.0)
    assert [(r.dev, r.port, r.name, r.state, r.error) for r in snap.health] == [
        (HANDLE, None, "empty", "healthy", 0), (HANDLE, None, "dummy", "healthy", 0)]
    topo = build_topology(snap, Expectations())
    assert health.check(snap, topo, Expectations()) == []
    broken = dataclasses.replace(snap, health=(snap.health[0], dataclasses.replace(snap.health[1], state="error",
                                                                                   error=1)))
    (f,) = health.check(broken, topo, Expectations())
    assert (f.code, f.severity, f.subject) == ("NicHealthError", "warning", HANDLE)
