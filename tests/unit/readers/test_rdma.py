"""rdma reader: JSON and text forms, netns mode, sysfs ports and counters of the asked ports only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agent.host.recorded import open_image
from agent.model import RdmaDevice, RdmaLink, RdmaPort
from agent.readers.common import Notes
from agent.readers.rdma import (
    netns_from_sysfs,
    parse_link_layer,
    parse_rdma_links,
    parse_rdma_system,
    parse_sysfs_state,
    read_rdma,
    read_rdma_devices,
)
from tests.support.imagekit import PUBLIC, make_image, public, recorded_body


def test_links_json_array() -> None:
    out = parse_rdma_links(public("mlx5/rdma-link-show.RECONSTRUCTED.json"))
    assert out == (RdmaLink("mlx5_0", 1, "ACTIVE", "LINK_UP", "p1p1"),
                   RdmaLink("mlx5_1", 1, "DOWN", "DISABLED", "p1p2"))
    text, _ = recorded_body("netdevsim/49-rdma-link-show.txt")
    assert parse_rdma_links(text) == (RdmaLink("rxe0", 1, "DOWN", "DISABLED", "eth0"),)


def test_links_text_with_trailing_space() -> None:
    text = public("mlx5/rdma-link-show-cx6dx.txt")
    assert text.splitlines()[0].endswith("p1p1 ")
    out = parse_rdma_links(text)
    assert [(lk.dev, lk.port, lk.state, lk.netdev) for lk in out] == [
        ("mlx5_0", 1, "ACTIVE", "p1p1"), ("mlx5_1", 1, "ACTIVE", "p1p2")]


def test_links_json_trailing_space_in_netdev() -> None:
    (lk,) = parse_rdma_links('[{"ifname":"mlx5_0","port":1,"state":"ACTIVE","netdev":"p1p1 "}]')
    assert lk.netdev == "p1p1" and lk.physical_state is None


@pytest.mark.parametrize("bad", ['[{"ifname":"mlx5_0",', "error: something broke"])
def test_links_garbage_raises_value_error(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_rdma_links(bad)


def test_system_show_forms() -> None:
    assert parse_rdma_system(public("mlx5/rdma-system-show.RECONSTRUCTED.json")) == "shared"
    assert parse_rdma_system(public("mlx5/rdma-system-show.txt")) == "shared"
    # old iproute2 prints fewer keys
    assert parse_rdma_system('[{"netns":"exclusive"}]') == "exclusive"
    assert parse_rdma_system('{"netns":"exclusive","copy-on-fork":true}') == "exclusive"
    assert parse_rdma_system('[{"copy-on-fork":true}]') is None


@pytest.mark.parametrize(("text", "word"), [
    ("4: ACTIVE\n", "ACTIVE"), ("ACTIVE", "ACTIVE"), ("1: DOWN", "DOWN"),
    ("5: LinkUp", "LINK_UP"), ("LinkUp", "LINK_UP"), ("3: Disabled", "DISABLED"), ("2: Polling", "POLLING"),
    ("6: LinkErrorRecovery", "LINK_ERROR_RECOVERY"), ("", None), ("4: ", None), (None, None),
])
def test_sysfs_state_is_the_rdma_link_word(text: str | None, word: str | None) -> None:
    """sysfs writes ``<n>: <word>`` (CamelCase for phys_state); the model holds what ``rdma link`` prints."""
    assert parse_sysfs_state(text) == word


def test_sysfs_words() -> None:
    assert (parse_link_layer("Ethernet\n"), parse_link_layer("InfiniBand"), parse_link_layer(""),
            parse_link_layer(None)) == ("ethernet", "infiniband", None, None)
    assert (netns_from_sysfs("Y\n"), netns_from_sysfs("N"), netns_from_sysfs("x"), netns_from_sysfs(None)) == (
        "shared", "exclusive", None, None)


def _procfs_image(tmp_path: Path):
    root = tmp_path / "img"
    shutil.copytree(PUBLIC / "procfs" / "sys", root / "fs" / "sys")
    return open_image(str(root))


def test_procfs_devices_counters_only_for_asked_port(tmp_path: Path) -> None:
    host = _procfs_image(tmp_path)
    devs = {d.name: d for d in read_rdma_devices(host, {("mlx5_0", 1)}, [])}
    assert set(devs) == {"hfi1_0", "mlx4_0", "mlx5_0"}
    m = devs["mlx5_0"]
    assert m.fw_ver == "14.28.2006"
    # procfs' fixture has "4: ACTIVE" in phys_state too (upstream quirk; real: "5: LinkUp")
    assert m.ports == (RdmaPort(1, "ACTIVE", "ACTIVE", "infiniband"),)
    names = {name for _, name, _ in m.counters}
    assert {"port_rcv_data", "symbol_error", "out_of_buffer", "rnr_nak_retry_err"} <= names
    # nothing asked of the others: no sysfs reads beyond where they sit
    assert devs["mlx4_0"].ports == () and devs["mlx4_0"].counters == () and devs["mlx4_0"].fw_ver is None


def _switchdev_image(tmp_path: Path, nports: int = 6):
    """A PF RDMA device in switchdev: port 1 is the uplink, 2..N the representors."""
    dev = "/sys/devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0/infiniband/mlx5_0"
    files: dict[str, str | bytes] = {f"{dev}/fw_ver": "28.42.1000\n", f"{dev}/hca_type": "MT4129\n",
                                     f"{dev}/node_guid": "b83f:d203:00aa:0010\n"}
    for p in range(1, nports + 1):
        files[f"{dev}/ports/{p}/state"] = "4: ACTIVE\n"
        files[f"{dev}/ports/{p}/phys_state"] = "5: LinkUp\n"
        files[f"{dev}/ports/{p}/link_layer"] = "Ethernet\n"
        files[f"{dev}/ports/{p}/hw_counters/out_of_buffer"] = f"{p}\n"
    links = [{"ifname": "mlx5_0", "port": 1, "state": "ACTIVE", "physical_state": "LINK_UP", "netdev": "p0"}]
    links += [{"ifname": "mlx5_0", "port": p, "state": "ACTIVE", "physical_state": "LINK_UP",
               "netdev": f"pf0vf{p - 2}"} for p in range(2, nports + 1)]
    return make_image(
        tmp_path / "img", files=files,
        symlinks={"/sys/class/infiniband/mlx5_0": "../../devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0/infiniband/mlx5_0",
                  f"{dev}/device": "../../../0000:0c:00.0"},
        cmds={("rdma", "-j", "link", "show"): (json.dumps(links), 0),
              ("rdma", "-j", "system", "show"): ('[{"netns":"shared"}]', 0)})


def test_switchdev_reads_the_uplink_port_only(tmp_path: Path) -> None:
    host = _switchdev_image(tmp_path)
    notes = Notes()
    links, netns, devs = read_rdma(host, ["p0"], ["0000:0c:00.0"], notes=notes)
    assert len(links) == 6 and netns == "shared"
    (d,) = devs
    assert d.pci == "0000:0c:00.0" and d.hca_type == "MT4129"
    assert d.ports == (RdmaPort(1, "ACTIVE", "LINK_UP", "ethernet"),)
    assert d.counters == ((1, "out_of_buffer", 1),)
    assert notes.unavailable == []


def test_rail_function_without_rdma_link_gets_port_1(tmp_path: Path) -> None:
    host = _switchdev_image(tmp_path)
    devs = read_rdma_devices(host, set(), ["0000:0c:00.0"])
    assert [p.port for p in devs[0].ports] == [1]


def test_no_rdma_tool_falls_back_to_sysfs_netns(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/sys/module/ib_core/parameters/netns_mode": "N\n"})
    notes = Notes()
    links, netns, devs = read_rdma(host, [], [], notes=notes)
    assert (links, netns, devs) == ((), "exclusive", ())
    # one reason for both rdma commands: the second is not run when the first could not be
    assert [s for s, _ in notes.unavailable] == ["rdma", "infiniband"]


def test_corrupt_rdma_json_is_unavailable(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds={("rdma", "-j", "link", "show"): ('[{"ifname":', 0),
                                              ("rdma", "-j", "system", "show"): ("", 0)})
    notes = Notes()
    links, netns, _ = read_rdma(host, [], [], notes=notes)
    assert links == () and netns is None
    reasons = dict(notes.unavailable)
    assert reasons["rdma"].startswith("rdma -j link show: not valid JSON")
    assert "rdma system" not in reasons  # empty output: no mode, nothing wrong with the tool


def test_sf_rdma_device_has_no_pci_function(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={"/sys/class/infiniband/mlx5_2/fw_ver": "28.42.1000\n"},
                      symlinks={"/sys/class/infiniband/mlx5_2/device": "../../../mlx5_core.sf.2"})
    (d,) = read_rdma_devices(host, set(), ["0000:0c:00.0"])
    assert (d.name, d.pci, d.ports) == ("mlx5_2", None, ())


# -- every shape of `rdma link show` since iproute2 4.13. Before 5.5, rdma/link.c link_parse_cb built
# the name as "<dev>/<port>" (snprintf "%s/%u") and printed it as JSON "ifname" and in text after
# "<dev index>/<port>: "; 5.5 and later print "link <dev>/<port>" and JSON "ifname": "<dev>", "port".

OLD_TEXT = ("0/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev ens1f0 \n"
            "1/1: mlx5_1/1: subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state DOWN "
            "physical_state POLLING \n")
OLD_JSON = ('[{"ifindex":0,"port":1,"ifname":"mlx5_0/1","state":"ACTIVE","physical_state":"LINK_UP",'
            '"netdev":"ens1f0","netdev_index":4},{"ifindex":1,"port":1,"ifname":"mlx5_1/1","state":"DOWN",'
            '"physical_state":"POLLING"}]\n')
WANT = (RdmaLink("mlx5_0", 1, "ACTIVE", "LINK_UP", "ens1f0"), RdmaLink("mlx5_1", 1, "DOWN", "POLLING", None))


@pytest.mark.parametrize("text", [
    OLD_TEXT,
    OLD_JSON,
    # one object per line, as a jsonw stream without the enclosing array
    OLD_JSON.strip()[1:-1].replace("},{", "}\n{") + "\n",
    # pretty (-p) output of the same array
    json.dumps(json.loads(OLD_JSON), indent=4),
    # iproute2 >= 5.5
    "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0 \n"
    "link mlx5_1/1 subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state DOWN physical_state POLLING \n",
    '[{"ifindex":0,"ifname":"mlx5_0","port":1,"state":"ACTIVE","physical_state":"LINK_UP","netdev":"ens1f0",'
    '"netdev_index":4},{"ifindex":1,"ifname":"mlx5_1","port":1,"state":"DOWN","physical_state":"POLLING"}]',
    # -d adds a caps line under each entry
    "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0 \n    caps: <CM, IP_BASED_GID>\n"
    "link mlx5_1/1 subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state DOWN physical_state POLLING \n",
], ids=["text<5.5", "json<5.5", "json-stream", "json-pretty", "text>=5.5", "json>=5.5", "text-details"])
def test_every_link_shape_gives_the_same_links(text: str) -> None:
    assert parse_rdma_links(text) == WANT


@pytest.mark.parametrize(("text", "why"), [
    ('[{"ifindex":0,"port":2,"ifname":"mlx5_0/1","state":"ACTIVE"}]', "cannot read device and port"),
    ('[{"ifindex":0,"ifname":"mlx5_0/x","state":"ACTIVE"}]', "cannot read device and port"),
    ('[{"ifindex":0,"ifname":"mlx5_0","state":"ACTIVE"}]', "has no port"),
    ('[{"ifindex":0,"port":1,"state":"ACTIVE"}]', "has no ifname"),
    ('[{"ifindex":0,"ifname":"mlx5 0","port":1}]', "is not an RDMA device name"),
    ('["mlx5_0"]', "is not an object"),
    ("link mlx5_0/1 state ACTIVE\nsomething else\n", "line 2 is in no known form"),
])
def test_a_shape_that_cannot_be_read_is_a_reason_never_a_wrong_name(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_rdma_links(text)


def test_unreadable_shape_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", cmds={
        ("rdma", "-j", "link", "show"): ('[{"ifindex":0,"ifname":"mlx5_0/x","state":"ACTIVE"}]', 0),
        ("rdma", "-j", "system", "show"): ('[{"netns":"exclusive"}]', 0)})
    notes = Notes()
    links, netns, _devs = read_rdma(host, ["ens1f0"], [], notes=notes)
    assert links == () and netns == "exclusive"
    assert [(s, r) for s, r in notes.unavailable if s == "rdma"] == [
        ("rdma", "rdma link show: entry 0: cannot read device and port from ifname 'mlx5_0/x'")]


def test_system_show_shapes_and_an_unknown_netns_word() -> None:
    assert parse_rdma_system("netns shared\n") == "shared"  # iproute2 5.x before copy-on-fork
    assert parse_rdma_system("netns exclusive privileged-qkey off copy-on-fork on\n") == "exclusive"
    assert parse_rdma_system('{"netns":"shared"}\n{"copy-on-fork":true}\n') == "shared"
    with pytest.raises(ValueError, match="neither shared nor exclusive"):
        parse_rdma_system('[{"netns":"isolated"}]')


def test_corrupt_json_is_told_with_the_json_error_and_the_cut() -> None:
    with pytest.raises(ValueError) as exc:
        parse_rdma_links('[{"ifname": "mlx5_0", "port": 1}, {"ifn', truncated=True)
    assert str(exc.value).startswith("rdma -j link show: not valid JSON (") and "output cut at the size cap" in str(exc.value)
    with pytest.raises(ValueError) as exc:
        parse_rdma_links('[{"ifname": "mlx5_0", "port": 1}, {"ifn')
    assert "line 1 column" in str(exc.value) and "size cap" not in str(exc.value)


def test_corrupt_system_show_json_is_told_as_such_never_as_cut() -> None:
    with pytest.raises(ValueError) as exc:
        parse_rdma_system('[{"netns": "shared",')
    assert str(exc.value).startswith("rdma -j system show: not valid JSON (") and "size cap" not in str(exc.value)


def test_the_netns_word_is_read_without_blanks() -> None:
    assert parse_rdma_system('[{"netns": " exclusive\\n"}]') == "exclusive"


@pytest.mark.parametrize(("doc", "seen"), [('[{"netns": 1}]', "'1'"), ('[{"netns": ""}]', "''"),
                                           ('[{"netns": null}]', "'None'")])
def test_a_netns_that_is_no_word_is_not_guessed_and_told_as_printed(doc: str, seen: str) -> None:
    with pytest.raises(ValueError, match=f"netns {seen} is neither shared nor exclusive"):
        parse_rdma_system(doc)


def test_an_unknown_netns_word_is_told_cut_at_40_characters() -> None:
    with pytest.raises(ValueError) as exc:
        parse_rdma_system('[{"netns": "' + "x" * 100 + '"}]')
    assert str(exc.value) == f"rdma system show: netns {'x' * 40!r} is neither shared nor exclusive"


def test_sysfs_netns_mode_as_a_digit() -> None:
    assert (netns_from_sysfs("1\n"), netns_from_sysfs("0")) == ("shared", "exclusive")


def test_json_after_blank_lines_is_json() -> None:
    assert parse_rdma_links('\n  [{"ifname": "mlx5_0", "port": 1, "netdev": "p1p1"}]') == (
        RdmaLink("mlx5_0", 1, None, None, "p1p1"),)


def test_caps_lines_continue_the_entry_whatever_the_indent() -> None:
    text = "link mlx5_0/1 state ACTIVE netdev p1p1\n\tcaps: <CM, IP_BASED_GIDS>\n caps: <CM>\n"
    assert [lk.dev for lk in parse_rdma_links(text)] == ["mlx5_0"]
    with pytest.raises(ValueError, match="line 2 is in no known form"):
        parse_rdma_links("link mlx5_0/1 state ACTIVE\n  mlx5_1 state ACTIVE\n")


def test_text_without_a_link_line_is_told() -> None:
    with pytest.raises(ValueError) as exc:
        parse_rdma_links("    caps: <CM>\n")
    assert str(exc.value) == "rdma link show: no 'link <dev>/<port>' line in the output"


def test_a_text_line_of_no_known_form_is_told_cut_at_80_and_a_bad_name_by_its_line() -> None:
    with pytest.raises(ValueError) as exc:
        parse_rdma_links("z" * 100 + "\n")
    assert str(exc.value) == f"rdma link show: line 1 is in no known form: {'z' * 80!r}"
    with pytest.raises(ValueError, match=r"\Ardma link show: line 1: 'a/b/1' is not an RDMA device name\Z"):
        parse_rdma_links("link a/b/1 state ACTIVE\n")


@pytest.mark.parametrize(("text", "state"), [("4:ACTIVE", "ACTIVE"), ("1: DOWN: x", "DOWN: X"), (" 5: LinkUp \n", "LINK_UP"),
                                             ("4:", None)])
def test_a_sysfs_state_is_everything_after_the_first_colon(text: str, state: str | None) -> None:
    assert parse_sysfs_state(text) == state


class _Rdma:
    """A host whose rdma tool answers as given and whose sysfs is empty; records timeouts."""

    live = True

    def __init__(self, answers: dict) -> None:
        self.answers, self.asked = answers, []

    def run(self, argv, timeout_s=10.0, max_bytes=0):
        from agent.host import CmdResult

        self.asked.append((tuple(argv), timeout_s))
        return self.answers.get(tuple(argv)) or CmdResult(tuple(argv), None, missing=True)

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> None:
        return None

    def listdir(self, path: str) -> None:
        return None


def test_read_rdma_asks_both_commands_with_the_callers_timeout_and_notes_each_failure() -> None:
    from agent.host import CmdResult

    link, system = ("rdma", "-j", "link", "show"), ("rdma", "-j", "system", "show")
    host = _Rdma({link: CmdResult(link, 0, b'[{"ifname": "mlx5_0", "port": 1}, {"ifn', truncated=True),
                  system: CmdResult(system, 1, b"", b"error: Operation not supported\n")})
    notes = Notes()
    links, netns, devices = read_rdma(host, [], [], timeout_s=1.5, notes=notes)  # type: ignore[arg-type]
    assert (links, netns, devices) == ((), None, ())
    assert host.asked == [(link, 1.5), (system, 1.5)]
    assert notes.unavailable[0][0] == "rdma" and "output cut at the size cap" in notes.unavailable[0][1]
    assert notes.unavailable[1] == ("rdma system", "rdma -j system show: exit 1: error: Operation not supported")
    assert notes.unavailable[2] == ("infiniband", "/sys/class/infiniband: not present (no RDMA devices or ib_core not loaded)")
    host = _Rdma({link: CmdResult(link, 0, b"[]"), system: CmdResult(system, 0, b'[{"netns": "private"}]')})
    notes = Notes()
    read_rdma(host, [], [], notes=notes)  # type: ignore[arg-type]
    assert {t for _, t in host.asked} == {10.0}
    assert notes.unavailable[0] == ("rdma system", "rdma system show: netns 'private' is neither shared nor exclusive")
    assert read_rdma(host, [], []) == ((), None, ())  # type: ignore[arg-type]


def test_a_wanted_port_sysfs_lacks_is_skipped_alone_and_identity_is_read(tmp_path: Path) -> None:
    host = _switchdev_image(tmp_path, nports=3)
    (d,) = read_rdma_devices(host, {("mlx5_0", 0), ("mlx5_0", 3)}, [])
    assert d.node_guid == "b83f:d203:00aa:0010" and d.fw_ver == "28.42.1000"
    assert [p.port for p in d.ports] == [3] and d.counters == ((3, "out_of_buffer", 3),)


def test_a_device_not_on_a_rail_keeps_its_pci_function_only(tmp_path: Path) -> None:
    host = _switchdev_image(tmp_path)
    assert read_rdma_devices(host, set(), []) == (RdmaDevice("mlx5_0", "0000:0c:00.0"),)
    assert read_rdma_devices(make_image(tmp_path / "none"), set(), []) == ()


def test_a_counter_is_read_up_to_64_bytes(tmp_path: Path) -> None:
    _switchdev_image(tmp_path, nports=1)
    dev = "/sys/devices/pci0000:0b/0000:0b:01.0/0000:0c:00.0/infiniband/mlx5_0"
    (tmp_path / "img" / "fs" / dev.lstrip("/") / "ports/1/hw_counters/out_of_buffer").write_text("7" + " " * 63 + "9\n")
    (d,) = read_rdma_devices(open_image(str(tmp_path / "img")), {("mlx5_0", 1)}, [])
    assert d.counters == ((1, "out_of_buffer", 7),)
