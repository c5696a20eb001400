"""devlink reader: iproute2 JSON shapes old and new, nested instances, PF handles, busy vs missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.host import CmdResult
from agent.model import DevlinkDev, DevlinkParam, Eswitch, PciFunction
from agent.readers.common import Notes
from agent.readers.devlink import (
    parse_bool_value,
    parse_dev_show,
    parse_eswitch,
    parse_params,
    parse_ports,
    pf_handles,
    pf_of_handle,
    read_devlink,
)
from tests.support.imagekit import make_image, public, recorded_body


def _j(rel: str):
    return json.loads(public(rel))


def test_dev_show_nested_and_old_kernel() -> None:
    devs = parse_dev_show(_j("mlx5/devlink-dev-show.RECONSTRUCTED.json"))
    assert devs[0] == DevlinkDev("pci/0000:08:00.0", ("auxiliary/mlx5_core.eth.0",))
    assert {d.handle for d in devs} == {"pci/0000:08:00.0", "pci/0000:08:00.1",
                                        "auxiliary/mlx5_core.eth.0", "auxiliary/mlx5_core.eth.1"}
    assert pf_of_handle(devs, "auxiliary/mlx5_core.eth.1/131071") == "pci/0000:08:00.1"
    assert pf_of_handle(devs, "auxiliary/mlx5_core.eth.0") == "pci/0000:08:00.0"
    assert pf_of_handle(devs, "pci/0000:08:00.0/1") == "pci/0000:08:00.0"
    assert pf_of_handle(devs, "auxiliary/mlx5_core.sf.2/0") is None

    old = parse_dev_show(_j("mlx5/devlink-dev-show-old-kernel.RECONSTRUCTED.json"))
    assert old == (DevlinkDev("pci/0000:03:00.0"), DevlinkDev("pci/0000:03:00.1"))


def test_dev_show_netdevsim_recording() -> None:
    text, rc = recorded_body("netdevsim/07-devlink-dev-show.txt")
    assert rc == 0
    assert parse_dev_show(json.loads(text)) == (DevlinkDev("netdevsim/netdevsim10"),)


def test_eswitch_shapes() -> None:
    esw = parse_eswitch(_j("mlx5/devlink-dev-eswitch-show.RECONSTRUCTED.json"), "pci/0000:c1:00.1")
    assert (esw.mode, esw.inline_mode, esw.encap_mode) == ("switchdev", "link", "basic")
    aux = parse_eswitch({"dev": {"auxiliary/mlx5_core.eth.0": {}}}, "auxiliary/mlx5_core.eth.0")
    assert aux.mode is None
    # old iproute2 printed "encap enable" (devlink-eswitch-show.txt, sriov-network-device-plugin #395)
    old = parse_eswitch({"dev": {"pci/0000:03:00.0": {"mode": "switchdev", "inline-mode": "none",
                                                      "encap": "enable"}}}, "pci/0000:03:00.0")
    assert old.encap_mode == "enable"
    for rel, mode in (("netdevsim/11-devlink-eswitch-show-initial.txt", "legacy"),
                      ("netdevsim/31-devlink-eswitch-show-switchdev.txt", "switchdev")):
        text, _ = recorded_body(rel)
        assert parse_eswitch(json.loads(text), "netdevsim/netdevsim10").mode == mode


def test_params_bool_strings_and_empty_values() -> None:
    (old,) = parse_params(_j("mlx5/devlink-param-show-netdevsim-oldiproute2.json"))
    assert old.values == (("driverinit", False),) and old.value() is False
    (empty,) = parse_params(_j("mlx5/devlink-dev-param-show-empty-values.RECONSTRUCTED.json"))
    assert empty.name == "flow_steering_mode" and empty.values == () and empty.value() is None
    (braces,) = parse_params({"param": {"pci/0000:24:00.0": [{"name": "flow_steering_mode", "values": [{}]}]}})
    assert braces.values == ()
    full = {p.name: p for p in parse_params(_j("mlx5/devlink-dev-param-show-mlx5.RECONSTRUCTED.json"))}
    assert full["esw_multiport"].value() is False
    assert full["enable_roce"].value("driverinit") is True
    assert full["flow_steering_mode"].value() == "dmfs"
    text, _ = recorded_body("netdevsim/10-devlink-dev-param-show.txt")
    nsim = {p.name: p.value() for p in parse_params(json.loads(text))}
    assert nsim == {"max_macs": 32, "test1": True}
    lines = public("mlx5/devlink-param-show-dgx-spark.jsonl").splitlines()
    assert parse_params(json.loads(lines[0]))[0].value() == 8192


def test_ports_flavours_controller_and_old_kernels() -> None:
    ports = {p.handle: p for p in parse_ports(_j("mlx5/devlink-port-show-switchdev.RECONSTRUCTED.json"))}
    up = ports["pci/0000:07:00.0/65535"]
    assert (up.dev, up.index, up.flavour, up.netdev, up.pfnum) == ("pci/0000:07:00.0", 65535, "physical", "enp7s0f0", None)
    vf = ports["pci/0000:07:00.0/1"]
    assert (vf.flavour, vf.controller, vf.pfnum, vf.vfnum, vf.external) == ("pcivf", 0, 0, 0, False)
    sf = ports["pci/0000:06:00.0/32768"]
    assert (sf.flavour, sf.sfnum, sf.vfnum) == ("pcisf", 88, None)

    (ext,) = parse_ports(_j("mlx5/devlink-port-show-external-vf.json"))
    assert (ext.controller, ext.external, ext.vfnum) == (1, True, 1)
    (early,) = parse_ports(_j("mlx5/devlink-port-show-vf-early.json"))
    assert (early.controller, early.external, early.pfnum, early.vfnum) == (None, None, 0, 1)

    aux = parse_ports({"port": {"auxiliary/mlx5_core.eth.5/262143": {
        "type": "eth", "netdev": "p1", "flavour": "physical", "port": 1, "splittable": False}}})
    assert (aux[0].dev, aux[0].index) == ("auxiliary/mlx5_core.eth.5", 262143)

    text, _ = recorded_body("netdevsim/34-devlink-port-show-switchdev.txt")
    nsim = parse_ports(json.loads(text))
    assert [p.vfnum for p in nsim if p.flavour == "pcivf"] == [0, 1, 2, 3]


@pytest.mark.parametrize("doc", [[], {"dev": []}, "x", None])
def test_wrong_shapes_raise_value_error(doc: object) -> None:
    with pytest.raises(ValueError):
        parse_dev_show(doc)


def test_pf_handles_skip_vfs_and_unknown_instances() -> None:
    fns = [PciFunction("0000:0c:00.0", sriov_numvfs=1, sriov_totalvfs=16),
           PciFunction("0000:0c:00.1", physfn="0000:0c:00.0"),
           PciFunction("0000:a1:00.0", sriov_totalvfs=128),
           PciFunction("0000:b0:00.0")]
    assert pf_handles(None, fns, ["0000:b0:00.0"]) == ["pci/0000:0c:00.0", "pci/0000:a1:00.0", "pci/0000:b0:00.0"]
    devs = [DevlinkDev("pci/0000:0c:00.0"), DevlinkDev("pci/0000:0c:00.1"), DevlinkDev("auxiliary/mlx5_core.eth.0")]
    assert pf_handles(devs, fns, ["0000:b0:00.0"]) == ["pci/0000:0c:00.0"]


DEV_SHOW = ('{"dev":{"pci/0000:0c:00.0":{"nested_devlink":{"auxiliary/mlx5_core.eth.0":{}}},'
            '"auxiliary/mlx5_core.eth.0":{},"pci/0000:8d:00.0":{},"pci/0000:0c:00.1":{}}}')
FNS = [PciFunction("0000:0c:00.0", sriov_numvfs=1, sriov_totalvfs=16, virtfns=("0000:0c:00.1",)),
       PciFunction("0000:0c:00.1", physfn="0000:0c:00.0"),
       PciFunction("0000:8d:00.0", sriov_numvfs=0, sriov_totalvfs=16)]


def _esw(handle: str, mode: str) -> str:
    return json.dumps({"dev": {handle: {"mode": mode, "inline-mode": "none", "encap-mode": "basic"}}})


@pytest.mark.parametrize(("given", "want"), [
    (True, True), ("true", True), (" True ", True), (1, True), ("1", True), ("on", True), ("enabled", True),
    (False, False), ("false", False), (0, False), ("0", False), ("off", False), ("disabled", False),
    ("maybe", None), (None, None), (2.5, None),
])
def test_bool_param_values_in_every_form(given: object, want: bool | None) -> None:
    """A boolean param reads as bool from a JSON bool (iproute2), the string (old iproute2), a 0/1
    or an on/off / enabled/disabled word (hand-made images); the topology then only checks the type."""
    assert parse_bool_value(given) is want
    doc = {"param": {"pci/0000:0c:00.0": [{"name": "esw_multiport", "values": [{"cmode": "runtime", "value": given}]}]}}
    (p,) = parse_params(doc)
    # A value no form reads stays as printed (evidence), and is judged as "not available".
    assert p.value() is (want if want is not None else given)


def test_only_boolean_params_are_read_as_booleans() -> None:
    doc = {"param": {"pci/0000:0c:00.0": [
        {"name": "flow_steering_mode", "values": [{"cmode": "runtime", "value": "on"}]},
        {"name": "max_macs", "values": [{"cmode": "driverinit", "value": 1}]},
        {"name": "enable_roce", "values": [{"cmode": "driverinit", "value": "true"}]}]}}
    assert {p.name: p.value() for p in parse_params(doc)} == {
        "flow_steering_mode": "on", "max_macs": 1, "enable_roce": True}


def _param(handle: str, name: str, value: object) -> str:
    return json.dumps({"param": {handle: [{"name": name, "type": "driver-specific",
                                           "values": [{"cmode": "runtime", "value": value}]}]}})


def _cmds() -> dict:
    return {
        ("devlink", "-j", "dev", "show"): (DEV_SHOW, 0),
        ("devlink", "-j", "dev", "eswitch", "show", "pci/0000:0c:00.0"): (_esw("pci/0000:0c:00.0", "switchdev"), 0),
        ("devlink", "-j", "dev", "eswitch", "show", "pci/0000:8d:00.0"): (_esw("pci/0000:8d:00.0", "legacy"), 0),
        ("devlink", "-j", "dev", "param", "show", "pci/0000:0c:00.0", "name", "esw_multiport"):
            (_param("pci/0000:0c:00.0", "esw_multiport", "true"), 0),
        ("devlink", "-j", "dev", "param", "show", "pci/0000:8d:00.0", "name", "esw_multiport"):
            (_param("pci/0000:8d:00.0", "esw_multiport", False), 0),
        ("devlink", "-j", "port", "show"): ('{"port":{"pci/0000:0c:00.0/1":{"type":"eth","netdev":"r0_0",'
                                            '"flavour":"pcivf","pfnum":0,"vfnum":0}}}', 0),
    }


def test_read_devlink_queries_pf_handles_only(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds=_cmds())
    notes = Notes()
    st = read_devlink(host, FNS, ["0000:0c:00.0"], ("esw_multiport",), notes=notes)
    assert st.devs_known
    assert {e.handle: e.mode for e in st.eswitch} == {"pci/0000:0c:00.0": "switchdev", "pci/0000:8d:00.0": "legacy"}
    assert {p.handle: p.value() for p in st.params} == {"pci/0000:0c:00.0": True, "pci/0000:8d:00.0": False}
    assert [p.netdev for p in st.ports] == ["r0_0"]
    assert notes.unavailable == [] and notes.busy == []


def test_not_supported_is_a_fact_and_param_errors_are_noted(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds={
        **_cmds(),
        ("devlink", "-j", "dev", "eswitch", "show", "pci/0000:8d:00.0"):
            ('{"dev":{}}', 1, "kernel answers: Operation not supported\n"),
        ("devlink", "-j", "dev", "param", "show", "pci/0000:8d:00.0", "name", "esw_multiport"):
            ('{"param":{}}', 1, "kernel answers: Invalid argument\n"),
    })
    notes = Notes()
    st = read_devlink(host, FNS, [], ("esw_multiport",), notes=notes)
    assert {e.handle: e.mode for e in st.eswitch} == {"pci/0000:0c:00.0": "switchdev", "pci/0000:8d:00.0": None}
    assert [p.handle for p in st.params] == ["pci/0000:0c:00.0"]
    assert notes.unavailable == [("devlink pci/0000:8d:00.0",
                                  "devlink -j dev param show pci/0000:8d:00.0 name esw_multiport: exit 1: "
                                  "kernel answers: Invalid argument")]


def test_timeout_is_busy_not_unavailable_tool(tmp_path: Path) -> None:
    argv = ["devlink", "-j", "dev", "eswitch", "show", "pci/0000:8d:00.0"]
    manifest = {"schema": "railscope.bundle/v1", "node": "n1", "items": [
        {"path": None, "kind": "command", "argv": argv, "rc": None, "duration_s": 10.0, "timed_out": True}]}
    cmds = _cmds()
    del cmds[tuple(argv)]
    host = make_image(tmp_path / "img", cmds=cmds, manifest=manifest)
    notes = Notes()
    st = read_devlink(host, FNS, [], ("esw_multiport",), notes=notes)
    assert notes.busy == ["pci/0000:8d:00.0"]
    assert [e.handle for e in st.eswitch] == ["pci/0000:0c:00.0"]
    # a busy instance is not asked for its params (they would time out too)
    assert [p.handle for p in st.params] == ["pci/0000:0c:00.0"]


def test_missing_tool_stops_early(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img")
    notes = Notes()
    st = read_devlink(host, FNS, [], notes=notes)
    assert (st.devs, st.eswitch, st.params, st.ports) == ((), (), (), ())
    assert notes.unavailable == [("devlink", "devlink -j dev show: not recorded in this image")]


def test_corrupt_json_is_unavailable_with_reason(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds={**_cmds(),
        ("devlink", "-j", "dev", "show"): ('{"dev":{"pci/0000:0c:00.0":{', 0),
        ("devlink", "-j", "port", "show"): ('{"port": []}', 0),
    })
    notes = Notes()
    st = read_devlink(host, FNS, [], ("esw_multiport",), notes=notes)
    assert not st.devs_known
    reasons = dict(notes.unavailable)
    assert reasons["devlink"].startswith("devlink -j dev show: not valid JSON")
    assert reasons["devlink ports"] == 'devlink -j port show: expected {"port": {<handle>/<index>: {...}}}'
    # without the instance list the PF handles are still queried
    assert {e.handle for e in st.eswitch} == {"pci/0000:0c:00.0", "pci/0000:8d:00.0"}


def test_dev_show_timeout_marks_every_pf_busy_and_asks_nothing_more(tmp_path: Path) -> None:
    argv = ["devlink", "-j", "dev", "show"]
    manifest = {"schema": "railscope.bundle/v1", "items": [
        {"path": None, "kind": "command", "argv": argv, "rc": None, "duration_s": 10.0, "timed_out": True}]}
    host = make_image(tmp_path / "img", cmds=_cmds(), manifest=manifest)
    notes = Notes()
    st = read_devlink(host, FNS, ["0000:0c:00.0"], notes=notes)
    assert notes.busy == ["devlink", "pci/0000:0c:00.0", "pci/0000:8d:00.0"]
    assert (st.eswitch, st.params, st.ports) == ((), (), ())


def test_no_devlink_family_asks_nothing_more(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds={
        ("devlink", "-j", "dev", "show"): ("", 1, "Failed to connect to devlink Netlink\n")})
    notes = Notes()
    st = read_devlink(host, FNS, ["0000:0c:00.0"], notes=notes)
    assert (st.eswitch, st.params, st.ports) == ((), (), ())
    assert notes.unavailable == [("devlink", "devlink -j dev show: exit 1: Failed to connect to devlink Netlink")]


def test_output_cut_at_the_size_cap_says_so(tmp_path: Path) -> None:
    argv = ["devlink", "-j", "port", "show"]
    manifest = {"schema": "railscope.bundle/v1", "items": [
        {"path": "cmd/devlink_-j_port_show.stdout", "kind": "command", "argv": argv, "rc": 0,
         "truncated": True}]}
    host = make_image(tmp_path / "img", manifest=manifest, cmds={
        **_cmds(), tuple(argv): ('{"port":{"pci/0000:0c:00.0/1":{"type":"eth","netdev":"r0', 0)})
    notes = Notes()
    st = read_devlink(host, FNS, [], ("esw_multiport",), notes=notes)
    assert st.ports == ()
    reason = dict(notes.unavailable)["devlink ports"]
    assert reason.startswith("devlink -j port show: not valid JSON") and reason.endswith("output cut at the size cap)")


def test_a_pci_handle_names_its_pf_whether_devlink_listed_it_or_not() -> None:
    assert pf_of_handle((), "pci/0000:0c:00.0/1") == "pci/0000:0c:00.0"
    assert pf_of_handle((), "pci/0000:0c:00.0") == "pci/0000:0c:00.0"


@pytest.mark.parametrize(("parse", "shape"), [
    (parse_dev_show, '{"dev": {<handle>: {...}}}'),
    (lambda doc: parse_eswitch(doc, "pci/0000:0c:00.0"), '{"dev": {<handle>: {...}}}'),
    (parse_params, '{"param": {<handle>: [...]}}'),
    (parse_ports, '{"port": {<handle>/<index>: {...}}}'),
])
@pytest.mark.parametrize("doc", [[], "x", None, {}, {"dev": [], "param": 1, "port": "x"}])
def test_another_document_raises_with_the_shape_expected(parse, shape: str, doc: object) -> None:
    with pytest.raises(ValueError) as exc:
        parse(doc)
    assert str(exc.value) == f"expected {shape}"


def test_nested_handles_as_an_object_a_list_or_a_word() -> None:
    doc = {"dev": {"pci/0000:0c:00.0": {"nested_devlink": ["auxiliary/mlx5_core.eth.0", 3]},
                   "pci/0000:0c:00.1": {"nested_devlink": "auxiliary/mlx5_core.eth.1"},
                   "pci/0000:0d:00.0": {"nested_devlink": ""},
                   "pci/0000:0d:00.1": {"nested_devlink": 5},
                   "pci/0000:0e:00.0": "junk",
                   "pci/0000:0e:00.1": ["junk"]}}
    assert parse_dev_show(doc) == (DevlinkDev("pci/0000:0c:00.0", ("auxiliary/mlx5_core.eth.0",)),
                                   DevlinkDev("pci/0000:0c:00.1", ("auxiliary/mlx5_core.eth.1",)),
                                   DevlinkDev("pci/0000:0d:00.0"), DevlinkDev("pci/0000:0d:00.1"),
                                   DevlinkDev("pci/0000:0e:00.0"), DevlinkDev("pci/0000:0e:00.1"))


def test_eswitch_is_the_asked_handles_or_the_one_device_answering() -> None:
    two = {"dev": {"pci/0000:0c:00.0": {"mode": "legacy"}, "pci/0000:0c:00.1": {"mode": "switchdev"}}}
    assert parse_eswitch(two, "pci/0000:0c:00.1").mode == "switchdev"
    assert parse_eswitch(two, "pci/0000:0c:00.0").mode == "legacy"
    assert parse_eswitch(two, "pci/0000:99:00.0").mode is None  # two others: neither is the asked one
    # one device answering under another spelling of the handle is the asked one
    one = {"dev": {"pci/0000:0C:00.0": {"mode": "switchdev"}}}
    assert parse_eswitch(one, "pci/0000:0c:00.0") == Eswitch("pci/0000:0c:00.0", "switchdev")
    assert parse_eswitch({"dev": {"pci/0000:0c:00.0": "switchdev"}}, "pci/0000:0c:00.0").mode is None
    assert parse_eswitch({"dev": {}}, "pci/0000:0c:00.0").mode is None


def test_params_bad_entries_skip_themselves_only() -> None:
    good = {"name": "esw_multiport", "values": [{"cmode": "runtime", "value": False}]}
    doc = {"param": {"pci/0000:0c:00.0": None, "pci/0000:0c:00.1": {"name": "x"},
                     "pci/0000:0d:00.0": ["junk", {"name": 3}, {"values": []},
                                          {"name": "flow_steering_mode", "values": None},
                                          {"name": "enable_roce", "values": ["value", {"value": 1},
                                                                            {"cmode": "driverinit"},
                                                                            {"cmode": "runtime", "value": True}]},
                                          good]}}
    assert parse_params(doc) == (
        DevlinkParam("pci/0000:0d:00.0", "flow_steering_mode", ()),
        DevlinkParam("pci/0000:0d:00.0", "enable_roce", (("runtime", True),)),
        DevlinkParam("pci/0000:0d:00.0", "esw_multiport", (("runtime", False),)))


def test_ports_bad_entries_skip_themselves_only_and_bad_fields_are_none() -> None:
    doc = {"port": {"pci/0000:0c:00.0/x": {"netdev": "a"}, "1": {"netdev": "b"},
                    "pci/0000:0c:00.0/1": "junk",
                    "pci/0000:0c:00.0/2": {"netdev": "", "flavour": 5, "external": "true"},
                    "pci/0000:0c:00.0/3": {"netdev": 7, "external": "false"},
                    "pci/0000:0c:00.0/4": {"netdev": "r0_3", "flavour": "pcivf", "external": "yes"}}}
    assert [(p.index, p.netdev, p.flavour, p.external) for p in parse_ports(doc)] == [
        (1, None, None, None), (2, None, None, True), (3, None, None, False), (4, "r0_3", "pcivf", None)]


def test_a_vf_is_never_a_handle_even_as_a_rail_and_an_unread_rail_function_still_is() -> None:
    fns = [PciFunction("0000:0c:00.0", sriov_totalvfs=16), PciFunction("0000:0c:00.1", physfn="0000:0c:00.0")]
    assert pf_handles(None, fns, ["0000:0c:00.1", "0000:1a:00.0"]) == ["pci/0000:0c:00.0", "pci/0000:1a:00.0"]


class _Devlink:
    """A host whose devlink answers are given per argv; it records each command's timeout."""

    live = True

    def __init__(self, answers: dict[tuple[str, ...], CmdResult]) -> None:
        self.answers, self.asked = answers, []

    def run(self, argv, timeout_s=10.0, max_bytes=8 << 20) -> CmdResult:
        self.asked.append((tuple(argv), timeout_s))
        return self.answers.get(tuple(argv)) or CmdResult(tuple(argv), None, missing=True)


def _ok(argv: tuple[str, ...], doc: object) -> CmdResult:
    return CmdResult(argv, 0, json.dumps(doc).encode())


PF0, PF1 = "pci/0000:0c:00.0", "pci/0000:8d:00.0"
SHOW = ("devlink", "-j", "dev", "show")
PORTS = ("devlink", "-j", "port", "show")


def _esw_argv(h: str) -> tuple[str, ...]:
    return ("devlink", "-j", "dev", "eswitch", "show", h)


def _param_argv(h: str, name: str) -> tuple[str, ...]:
    return ("devlink", "-j", "dev", "param", "show", h, "name", name)


def test_every_devlink_command_gets_the_callers_timeout_and_10_s_by_default() -> None:
    host = _Devlink({SHOW: _ok(SHOW, {"dev": {PF0: {}}}), PORTS: _ok(PORTS, {"port": {}}),
                     _esw_argv(PF0): _ok(_esw_argv(PF0), {"dev": {PF0: {"mode": "legacy"}}})})
    fns = [PciFunction("0000:0c:00.0", sriov_totalvfs=8)]
    read_devlink(host, fns, [], ("esw_multiport",), timeout_s=3.5)  # type: ignore[arg-type]
    assert [a for a, _ in host.asked] == [SHOW, _esw_argv(PF0), _param_argv(PF0, "esw_multiport"), PORTS]
    assert {t for _, t in host.asked} == {3.5}
    host.asked.clear()
    read_devlink(host, fns, [])  # type: ignore[arg-type]
    assert {t for _, t in host.asked} == {10.0}


def test_each_devlink_failure_is_noted_under_its_source_and_the_rest_is_read() -> None:
    mixed = {"param": {PF1: [{"name": "esw_multiport", "values": [{"cmode": "runtime", "value": True}]}],
                       PF0: [{"name": "other", "values": [{"cmode": "runtime", "value": 1}]},
                             {"name": "esw_multiport", "values": [{"cmode": "runtime", "value": False}]}]}}
    host = _Devlink({
        SHOW: _ok(SHOW, {"dev": {PF0: {}, PF1: {}}}),
        _esw_argv(PF0): _ok(_esw_argv(PF0), {"eswitch": {}}),
        _param_argv(PF0, "esw_multiport"): _ok(_param_argv(PF0, "esw_multiport"), mixed),
        _param_argv(PF0, "flow_steering_mode"): _ok(_param_argv(PF0, "flow_steering_mode"), {"x": 1}),
        _esw_argv(PF1): CmdResult(_esw_argv(PF1), 2, b"", b"kernel answers: No such device\n"),
        _param_argv(PF1, "esw_multiport"): CmdResult(_param_argv(PF1, "esw_multiport"), None, timed_out=True,
                                                     duration_s=10.0),
        PORTS: CmdResult(PORTS, 1, b"", b"kernel answers: Invalid argument\n"),
    })
    notes = Notes()
    st = read_devlink(host, [PciFunction("0000:0c:00.0", sriov_totalvfs=8), PciFunction("0000:8d:00.0", sriov_totalvfs=8)],  # type: ignore[arg-type]
                      [], ("esw_multiport", "flow_steering_mode"), notes=notes)
    assert st.eswitch == () and st.ports == ()
    assert st.params == (DevlinkParam(PF0, "esw_multiport", (("runtime", False),)),)
    assert _param_argv(PF1, "flow_steering_mode") not in [a for a, _ in host.asked]  # busy: not asked
    assert notes.busy == [PF1]
    assert notes.unavailable == [
        (f"devlink {PF0}", f'devlink -j dev eswitch show {PF0}: expected {{"dev": {{<handle>: {{...}}}}}}'),
        (f"devlink {PF0}", f'devlink -j dev param show {PF0} name flow_steering_mode: expected {{"param": {{<handle>: [...]}}}}'),
        (f"devlink {PF1}", f"devlink -j dev eswitch show {PF1}: exit 2: kernel answers: No such device"),
        (f"devlink {PF1}", f"devlink -j dev param show {PF1} name esw_multiport: timed out after 10.0s: busy, not down "
                           "(the SR-IOV daemon holds the devlink lock while it creates VFs); not judged"),
        ("devlink ports", "devlink -j port show: exit 1: kernel answers: Invalid argument"),
    ]


def test_a_dev_show_of_another_shape_is_noted_and_the_pfs_still_asked() -> None:
    host = _Devlink({SHOW: _ok(SHOW, {"devices": []}),
                     PORTS: CmdResult(PORTS, None, timed_out=True, duration_s=10.0),
                     _esw_argv(PF0): CmdResult(_esw_argv(PF0), 1, b"", b"\xffOperation not supported\n")})
    notes = Notes()
    st = read_devlink(host, [PciFunction("0000:0c:00.0", sriov_totalvfs=8)], [], (), notes=notes)  # type: ignore[arg-type]
    assert not st.devs_known and st.eswitch == (Eswitch(PF0, None),)
    assert notes.busy == ["devlink"]
    assert notes.unavailable[0] == ("devlink", 'devlink -j dev show: expected {"dev": {<handle>: {...}}}')
    assert notes.unavailable[1][0] == "devlink ports" and "busy, not down" in notes.unavailable[1][1]


def test_one_pfs_failures_stop_neither_its_next_param_nor_the_next_pf() -> None:
    # Each eswitch and param answer is judged alone: a busy PF, a param the image lacks, one the
    # kernel refuses and one of another shape each lose only themselves.
    PF2 = "pci/0000:9a:00.0"
    a, b, c, d = "missing_param", "refused_param", "odd_param", "esw_multiport"
    refused = CmdResult(_param_argv(PF1, b), 1, b"", b"kernel answers: Invalid argument\n")
    host = _Devlink({
        SHOW: _ok(SHOW, {"dev": {PF0: {}, PF1: {}, PF2: {}}}), PORTS: _ok(PORTS, {"port": {}}),
        _esw_argv(PF0): CmdResult(_esw_argv(PF0), None, timed_out=True, duration_s=10.0),
        _esw_argv(PF1): CmdResult(_esw_argv(PF1), 0, b'{"dev":{"pci/0000:8d:00.0":{"mode":'),
        _param_argv(PF1, b): refused,
        _param_argv(PF1, c): _ok(_param_argv(PF1, c), {"x": 1}),
        _param_argv(PF1, d): _ok(_param_argv(PF1, d), {"param": {PF1: [
            {"name": d, "values": [{"cmode": "runtime", "value": True}]}]}}),
        _esw_argv(PF2): CmdResult(_esw_argv(PF2), 1, b"", b"kernel answers: No such device\n"),
    })
    fns = [PciFunction(h.removeprefix("pci/"), sriov_totalvfs=8) for h in (PF0, PF1, PF2)]
    notes = Notes()
    st = read_devlink(host, fns, [], (a, b, c, d), notes=notes)  # type: ignore[arg-type]
    asked = [argv for argv, _ in host.asked]
    assert not any(argv[:5] == ("devlink", "-j", "dev", "param", "show") and argv[5] == PF0 for argv in asked)
    assert [argv for argv in asked if argv[5:6] == (PF2,)] == [_esw_argv(PF2)] + [_param_argv(PF2, n) for n in (a, b, c, d)]
    assert st.params == (DevlinkParam(PF1, d, (("runtime", True),)),)
    assert st.eswitch == ()
    assert notes.busy == [PF0]
    busy = ("busy, not down (the SR-IOV daemon holds the devlink lock while it creates VFs); not judged")
    assert notes.unavailable[:6] == [
        (f"devlink {PF0}", f"devlink -j dev eswitch show {PF0}: timed out after 10.0s: {busy}"),
        (f"devlink {PF1}", f"devlink -j dev eswitch show {PF1}: not valid JSON (Expecting value at line 1 column 36)"),
        (f"devlink {PF1}", "devlink: not available"),  # the stand-in host: no answer for this argv
        (f"devlink {PF1}", f"devlink -j dev param show {PF1} name {b}: exit 1: kernel answers: Invalid argument"),
        (f"devlink {PF1}", f'devlink -j dev param show {PF1} name {c}: expected {{"param": {{<handle>: [...]}}}}'),
        (f"devlink {PF2}", f"devlink -j dev eswitch show {PF2}: exit 1: kernel answers: No such device"),
    ]


def test_an_eswitch_answer_from_a_failed_command_is_not_trusted() -> None:
    # A non-zero exit is a failure even when the tool printed a document before failing.
    host = _Devlink({SHOW: _ok(SHOW, {"dev": {PF0: {}}}), PORTS: _ok(PORTS, {"port": {}}),
                     _esw_argv(PF0): CmdResult(_esw_argv(PF0), 2, json.dumps({"dev": {PF0: {"mode": "switchdev"}}}).encode(),
                                               b"kernel answers: Device or resource busy\n")})
    notes = Notes()
    st = read_devlink(host, [PciFunction("0000:0c:00.0", sriov_totalvfs=8)], [], (), notes=notes)  # type: ignore[arg-type]
    assert st.eswitch == ()
    assert notes.unavailable == [(f"devlink {PF0}", f"devlink -j dev eswitch show {PF0}: exit 2: "
                                                    "kernel answers: Device or resource busy")]


def test_enable_roce_is_read_by_default_and_as_a_boolean() -> None:
    # mlx5 devlink.rst "Read RoCE enablement state" (tests/fixtures/public/mlx5/devlink-param-show-enable-roce.txt):
    # name enable_roce type generic, cmode driverinit value true; the JSON of the mlx5 param list
    from pathlib import Path

    from agent.readers.devlink import DEFAULT_PARAMS

    assert "enable_roce" in DEFAULT_PARAMS
    fix = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "mlx5"
    text = (fix / "devlink-param-show-enable-roce.txt").read_text()
    assert "name enable_roce type generic" in text and "cmode driverinit value true" in text
    got = {p.name: p for p in parse_params(json.loads((fix / "devlink-dev-param-show-mlx5.RECONSTRUCTED.json").read_text()))}
    assert got["enable_roce"].value() is True and got["enable_roce"].values == (("driverinit", True),)
