"""Representors, devlink ports, eswitch mode, params and RDMA links, read by the agent on a real kernel.

The guest made netdevsim10 with 2 physical ports, 4 VFs and eswitch switchdev, and soft-RoCE links on
the rails (``scenario_representors`` in guest_scenarios.py). Ground truth is what the kernel's own
tools printed in the same guest (``devlink -j``, ``rdma -j``, sysfs); the agent's view is its snapshot
and topology, taken through ``LiveHost``.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]

HANDLE = "netdevsim/netdevsim10"


@pytest.fixture(scope="module")
def rep(klab):
    return klab.scenario("representors")


@pytest.fixture(scope="module")
def p2(klab):
    """The kernel's name of netdevsim10's port p2 (not a rail): it depends on probe order (the lab's
    PCIe NIC is probed first and takes eth0)."""
    return klab.scenario("setup")["netdevs"]["netdevsim10"]["p2"]


def _pf(rep, bdf):
    pfs = {pf["bdf"]: pf for pf in rep["topology"]["pfs"]}
    assert bdf in pfs, f"the topology has no PF for {bdf}: {sorted(pfs)}"
    return pfs[bdf]


def test_exactly_four_representors_each_mapped_to_its_vf_by_devlink_port(rep, p2):
    kernel_ports = rep["raw"]["port_show"]["port"]
    vf_ports = {body["netdev"]: body for body in kernel_ports.values() if body.get("flavour") == "pcivf"}
    assert len(vf_ports) == 4, kernel_ports

    reps = _pf(rep, "netdevsim10")["representors"]
    assert len(reps) == 4
    assert sorted(r["index"] for r in reps) == [0, 1, 2, 3]
    sysfs = {int(k): v for k, v in rep["raw"]["sysfs_representors"].items()}
    for r in reps:
        assert r["kind"] == "vf" and r["pfnum"] == 0 and not r["stale"]
        # the agent's VF index (from phys_port_name pf0vfN) is the one devlink gives the port
        port = vf_ports[r["netdev"]]
        assert port["vfnum"] == r["index"] and port["pfnum"] == r["pfnum"]
        assert sysfs[r["index"]] == r["netdev"]
        # the devlink port agrees on pfnum, so no disagreement is recorded as evidence
        assert r["devlink_pfnum"] is None
    # netdevsim11 has no VFs: nothing is attributed to it, and no uplink is taken for a representor
    assert _pf(rep, "netdevsim11")["representors"] == []
    assert set(rep["topology"]["representor_names"]) == set(vf_ports)
    assert {"net_rail0", "net_rail1", p2}.isdisjoint(rep["topology"]["representor_names"])


def test_snapshot_ports_are_the_real_devlink_port_dump(rep, p2):
    kernel = {
        (handle, body.get("netdev"), body.get("flavour"), body.get("pfnum"), body.get("vfnum"))
        for handle, body in rep["raw"]["port_show"]["port"].items()
    }
    agent = {(p["handle"], p["netdev"], p["flavour"], p["pfnum"], p["vfnum"]) for p in rep["snapshot"]["ports"]}
    assert agent == kernel
    assert {p["dev"] for p in rep["snapshot"]["ports"]} == {HANDLE, "netdevsim/netdevsim11"}
    physical = sorted(p["netdev"] for p in rep["snapshot"]["ports"] if p["flavour"] == "physical")
    assert physical == sorted([p2, "net_rail0", "net_rail1"])


def test_representors_share_the_uplinks_switch_id_and_parent(rep, p2):
    links = {ln["ifname"]: ln for ln in rep["snapshot"]["links"]}
    uplink = links["net_rail0"]
    assert uplink["phys_port_name"] == "p1" and uplink["parent_bus"] == "netdevsim"
    assert uplink["parent_dev"] == "netdevsim10"
    assert _pf(rep, "netdevsim10")["switch_id"] == uplink["phys_switch_id"]
    for r in _pf(rep, "netdevsim10")["representors"]:
        ln = links[r["netdev"]]
        assert ln["phys_port_name"] == f"pf0vf{r['index']}"
        assert ln["phys_switch_id"] == uplink["phys_switch_id"]
        assert ln["parent_dev"] == "netdevsim10"
    # the other NIC has its own switch id
    assert links["net_rail1"]["phys_switch_id"] != uplink["phys_switch_id"]
    # VF info of the PF: 4 VFs, from the same bulk dump (RTEXT_FILTER_VF)
    assert len(uplink["vfinfo"]) == 4
    # statistics are read for the rails only, never for representors or other links
    assert uplink["stats64"] is not None and links["net_rail1"]["stats64"] is not None
    assert all(links[r]["stats64"] is None for r in rep["topology"]["representor_names"])
    assert links[p2]["stats64"] is None


def test_eswitch_mode_and_params_parsed_from_the_real_devlink_json(rep):
    kernel_mode = rep["raw"]["eswitch_show"]["dev"][HANDLE]["mode"]
    assert kernel_mode == "switchdev"
    esw = rep["parsed"]["eswitch"]
    assert isinstance(esw, dict), esw
    assert esw["handle"] == HANDLE and esw["mode"] == kernel_mode

    kernel_params = {p["name"]: {v["cmode"]: v["value"] for v in p["values"]}
                     for p in rep["raw"]["param_show"]["param"][HANDLE]}
    for name, parsed in rep["parsed"]["params"].items():
        assert isinstance(parsed, list) and len(parsed) == 1, parsed
        assert parsed[0]["handle"] == HANDLE and parsed[0]["name"] == name
        assert dict(map(tuple, parsed[0]["values"])) == kernel_params[name]
    # netdevsim's params: a generic u32 and a driver-specific bool (a real bool, not "true")
    assert rep["parsed"]["params"]["max_macs"][0]["values"] == [["driverinit", 32]]
    assert rep["parsed"]["params"]["test1"][0]["values"] == [["driverinit", True]]


def test_snapshot_reads_eswitch_of_the_pf_instance(rep):
    """take_snapshot itself reads eswitch mode and SR-IOV of the PF's devlink instance.

    netdevsim's instance lives on its own bus: the uplink's parent is ``netdevsim/netdevsim10``, which
    ``devlink dev show`` lists, so that is the PF handle (not ``pci/<bdf>``), and its ``sriov_numvfs``
    is under ``/sys/bus/netdevsim/devices/``.
    """
    kernel_mode = rep["raw"]["eswitch_show"]["dev"][HANDLE]["mode"]
    modes = {e["handle"]: e["mode"] for e in rep["snapshot"]["eswitch"]}
    assert modes[HANDLE] == kernel_mode == "switchdev"
    assert sorted(modes) == [HANDLE, "netdevsim/netdevsim11"]  # each device by its own bus, none as pci/
    pf = _pf(rep, "netdevsim10")
    assert pf["handle"] == HANDLE
    assert pf["eswitch_mode"] == kernel_mode
    assert pf["numvfs"] == int(str(rep["raw"]["sriov_numvfs"]).strip()) == 4
    assert pf["stale"] == []


def test_rdma_links_from_the_real_rdma_json(rep):
    kernel = {(ln["ifname"], ln["port"], ln["state"], ln["physical_state"], ln["netdev"])
              for ln in rep["raw"]["rdma_link_show"]}
    agent = {(ln["dev"], ln["port"], ln["state"], ln["physical_state"], ln["netdev"])
             for ln in rep["snapshot"]["rdma_links"]}
    assert agent == kernel
    assert ("rdma_rail0", 1, "ACTIVE", "LINK_UP", "net_rail0") in agent
    rails = {r["rail"]: r for r in rep["topology"]["rails"]}
    assert rails[0]["netdev"] == "net_rail0" and rails[0]["rdma"]["dev"] == "rdma_rail0"
    assert rails[1]["netdev"] == "net_rail1" and rails[1]["rdma"]["dev"] == "rdma_rail1"
