"""ethtool reader: -S text (key whitespace, colliding names, errors), -i text, live ioctl results."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from agent.readers.common import Notes
from agent.readers.ethtool import (
    parse_drvinfo,
    parse_ethtool_i,
    parse_ethtool_s,
    parse_firmware,
    read_ethtool,
)
from tests.support.imagekit import make_image, public, recorded_body


def test_pfc_prio3_counters_present_and_others_missing() -> None:
    st = parse_ethtool_s(public("mlx5/ethtool-S-mlx5-uplink-pfc-prio3-healthy.RECONSTRUCTED.txt"), "p0")
    c = st.as_dict()
    for key in ("rx_prio3_pause", "tx_prio3_pause", "rx_prio3_pause_duration", "tx_prio3_pause_duration",
                "rx_prio3_pause_transition", "tx_pause_storm_warning_events", "tx_pause_storm_error_events"):
        assert key in c, key
    assert "rx_prio0_pause" not in c  # PFC off on prio 0: missing, never 0
    assert st.get("rx_prio0_pause") is None
    storm = parse_ethtool_s(public("mlx5/ethtool-S-mlx5-uplink-pfc-prio3-storm.RECONSTRUCTED.txt"), "p0")
    assert storm.get("tx_pause_storm_error_events") == 3


def test_trailing_spaces_in_names_are_stripped() -> None:
    text = ("NIC statistics:\n"
            "     tx_pause_storm_warning_events : 4\n"
            "\trx_prio3_pause:   51022  \n"
            "     rx_vport_rdma_unicast_packets: 20693166921\n")
    st = parse_ethtool_s(text, "p0")
    assert st.counters == (("tx_pause_storm_warning_events", 4), ("rx_prio3_pause", 51022),
                           ("rx_vport_rdma_unicast_packets", 20693166921))


def test_real_ofed_output_without_pfc() -> None:
    st = parse_ethtool_s(public("mlx5/ethtool-S-mlx5-uplink-ofed-nopfc.txt"), "ens1f0")
    c = st.as_dict()
    assert c["rx_packets"] == 1226 and c["tx_pause_storm_error_events"] == 0
    assert not any(k.startswith(("rx_prio", "tx_prio")) and k.endswith("_pause") for k in c)


def test_grep_excerpt_without_header() -> None:
    text = public("mlx5/ethtool-S-mlx5-cx4lx-grep-discard-pause.txt")
    with pytest.raises(ValueError):
        parse_ethtool_s(text, "eth03")
    st = parse_ethtool_s(text, "eth03", require_header=False)
    assert st.get("rx_steer_missed_packets") == 24627
    assert any(k.startswith("rx_global_pause") for k, _ in st.counters)


def test_node_exporter_fixtures_colliding_names_and_error() -> None:
    st = parse_ethtool_s(public("node_exporter/ethtool/eth0/statistics"), "eth0")
    c = st.as_dict()
    # raw names are kept: "duplicate metric" and "duplicate_metric" are distinct counters here
    assert c["duplicate metric"] == 1 and c["duplicate_metric"] == 2
    assert c["port.rx_dropped"] == 12028
    with pytest.raises(ValueError, match="not statistics output"):
        parse_ethtool_s(public("node_exporter/ethtool/bond0/statistics"), "bond0")


def test_firmware_token_and_psid() -> None:
    assert parse_firmware("28.43.1014 (MT_0000000838)") == ("28.43.1014", "MT_0000000838")
    assert parse_firmware("14.23.1020") == ("14.23.1020", None)
    assert parse_firmware("10.20.30 ") == ("10.20.30", None)
    assert parse_firmware("") == (None, None)


def test_ethtool_i_samples() -> None:
    # these files hold several samples, each after a "# --- <where it came from>" line
    modern = parse_ethtool_i(public("mlx5/ethtool-i-mlx5-inbox-modern.txt").split("# ---")[1], "eth0")
    assert (modern.driver, modern.version, modern.firmware, modern.psid, modern.bus_info) == (
        "mlx5_core", "6.5.0-14-generic", "14.18.2030", "HP_2420110034", "0000:01:00.0")
    first_doca = public("mlx5/ethtool-i-mlx5-ofed-doca.txt").split("# ---")[1]
    doca = parse_ethtool_i(first_doca, "eth0")
    assert (doca.version, doca.firmware) == ("24.10-3.2.5", "14.32.1010")
    old = parse_ethtool_i(public("mlx5/ethtool-i-mlx5-inbox-ubuntu1604.txt"), "eth0")
    assert (old.version, old.psid) == ("3.0-1 (January 2015)", None)
    text, _ = recorded_body("netdevsim/14-ethtool-i.txt")
    nsim = parse_ethtool_i(text, "eth0")
    assert (nsim.driver, nsim.firmware, nsim.bus_info) == ("netdevsim", "10.20.30", "netdevsim10")
    rep = parse_ethtool_i("driver: mlx5e_rep\nbus-info:\n", "pf0hpf")
    assert (rep.driver, rep.bus_info) == ("mlx5e_rep", None)
    with pytest.raises(ValueError):
        parse_ethtool_i("Cannot get driver information: Operation not supported\n", "x")


def test_live_drvinfo_dict() -> None:
    di = parse_drvinfo({"driver": "mlx5_core", "version": "25.10-1.7.1",
                        "fw_version": "28.42.1000 (MT_0000000838)", "bus_info": "0000:0c:00.0"}, "net_rail0")
    assert (di.firmware, di.psid, di.bus_info) == ("28.42.1000", "MT_0000000838", "0000:0c:00.0")


class _IoctlHost:
    """The live host's ethtool doors answer directly; nothing else is asked."""

    live = True

    def __init__(self) -> None:
        self.asked: list[str] = []

    def ethtool_stats(self, ifname: str):
        self.asked.append(ifname)
        return [("rx_prio3_pause ", 7), ("tx_pause_storm_warning_events  ", 0)]

    def ethtool_drvinfo(self, ifname: str):
        return {"driver": "mlx5_core", "version": "6.8.0-60-generic", "fw_version": "28.42.1000 (MT_1)",
                "bus_info": "0000:0c:00.0"}

    def run(self, argv, timeout_s=10.0, max_bytes=0):
        raise AssertionError(f"no command expected, got {argv}")


def test_live_ioctl_path_strips_keys_and_runs_no_command() -> None:
    host = _IoctlHost()
    stats, infos = read_ethtool(host, ["net_rail0", "net_rail1"])  # type: ignore[arg-type]
    assert host.asked == ["net_rail0", "net_rail1"]
    assert stats[0].counters == (("rx_prio3_pause", 7), ("tx_pause_storm_warning_events", 0))
    assert infos[1].psid == "MT_1"


def test_recorded_path_and_failures(tmp_path: Path) -> None:
    s_text, s_rc = recorded_body("netdevsim/15-ethtool-S.txt")
    host = make_image(tmp_path / "img", cmds={
        ("ethtool", "-S", "p0"): (public("mlx5/ethtool-S-mlx5-uplink-pfc-prio3-healthy.RECONSTRUCTED.txt"), 0),
        ("ethtool", "-i", "p0"): (public("mlx5/ethtool-i-mlx5-inbox-modern.txt").split("# ---")[1], 0),
        ("ethtool", "-S", "eth0"): (s_text, s_rc),
    })
    notes = Notes()
    stats, infos = read_ethtool(host, ["p0", "eth0"], notes=notes)
    assert [s.netdev for s in stats] == ["p0"] and [i.netdev for i in infos] == ["p0"]
    reasons = dict(notes.unavailable)
    assert reasons["ethtool -S eth0"] == "ethtool -S eth0: exit 94"
    assert reasons["ethtool -i eth0"] == "ethtool -i eth0: not recorded in this image"


def test_live_timeout_skips_the_remaining_rails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stuck firmware read: the first ethtool hangs, the others are not even started."""
    from agent.host.live import LiveHost

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls"
    tool = bindir / "ethtool"
    tool.write_text(f"#!{sys.executable}\nimport sys, time\n"
                    f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\ntime.sleep(60)\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ.get('PATH', '')}")
    host = LiveHost(str(tmp_path))
    notes = Notes()
    # no such netdevs here, so the ioctls answer None and the command is the fallback
    stats, infos = read_ethtool(host, ["rsnoexist0", "rsnoexist1", "rsnoexist2"], timeout_s=1.0, notes=notes)
    assert stats == () and infos == ()
    assert log.read_text().splitlines() == ["-S rsnoexist0"]
    reasons = dict(notes.unavailable)
    assert "timed out" in reasons["ethtool -S rsnoexist0"]
    assert reasons["ethtool -S rsnoexist2"] == "skipped: ethtool on rsnoexist0 timed out (firmware may be hung)"


def test_ethtool_i_without_a_driver_line_says_what_it_got() -> None:
    with pytest.raises(ValueError) as exc:
        parse_ethtool_i("\n  Cannot get driver information: Operation not supported\n", "net_rail0")
    assert str(exc.value) == "ethtool -i net_rail0: no driver line ('Cannot get driver information: Operation not supported')"
    with pytest.raises(ValueError) as exc:
        parse_ethtool_i("x" * 100 + "\n", "net_rail0")
    assert str(exc.value) == f"ethtool -i net_rail0: no driver line ({'x' * 80!r})"
    for empty in ("", "\n  \n"):
        with pytest.raises(ValueError, match=r"\Aethtool -i net_rail0: empty output\Z"):
            parse_ethtool_i(empty, "net_rail0")


def test_ethtool_i_fields_need_a_colon() -> None:
    with pytest.raises(ValueError, match="no driver line"):
        parse_ethtool_i("driver\nversion\n", "net_rail0")


def test_ethtool_i_fields_it_does_not_print_are_none() -> None:
    di = parse_ethtool_i("driver: mlx5e_rep\n", "pf0hpf")
    assert (di.driver, di.version, di.firmware, di.psid, di.bus_info) == ("mlx5e_rep", None, None, None, None)


def test_ethtool_s_counts_after_the_header_only_and_bad_lines_skip_themselves() -> None:
    text = ("rx_prio3_pause: 9\n"  # before the header: not a counter
            "Statistics:\n"
            "# a comment: 5\n"
            "     no separator here\n"
            "     : 4\n"
            "     rx_prio3_pause: 51022\n"
            "     weird: value: 7\n"
            "     rx_negative: -1\n"
            "     rx_wide: 18446744073709551616\n"
            "     rx_max: 18446744073709551615\n"
            "     rx_text: many\n"
            "     tx_prio3_pause: 3\n")
    st = parse_ethtool_s(text, "net_rail0")
    assert st.counters == (("rx_prio3_pause", 51022), ("weird: value", 7), ("rx_max", (1 << 64) - 1),
                           ("tx_prio3_pause", 3))


def test_ethtool_s_that_is_not_statistics_says_what_it_got() -> None:
    with pytest.raises(ValueError) as exc:
        parse_ethtool_s("\nCannot get stats strings information: Operation not supported\n", "net_rail0")
    assert str(exc.value) == ("ethtool -S net_rail0: not statistics output "
                              "('Cannot get stats strings information: Operation not supported')")
    with pytest.raises(ValueError) as exc:
        parse_ethtool_s("q" * 100, "net_rail0")
    assert str(exc.value) == f"ethtool -S net_rail0: not statistics output ({'q' * 80!r})"
    with pytest.raises(ValueError, match=r"\Aethtool -S net_rail0: empty output\Z"):
        parse_ethtool_s(" \n", "net_rail0")
    with pytest.raises(ValueError, match="not statistics output"):
        parse_ethtool_s("just words\n", "net_rail0", require_header=False)


def test_drvinfo_values_that_are_not_text_are_none() -> None:
    di = parse_drvinfo({"driver": 5, "version": None, "fw_version": [], "bus_info": " "}, "x")  # type: ignore[dict-item]
    assert (di.driver, di.version, di.firmware, di.bus_info) == (None, None, None, None)


class _FallbackHost:
    """The ioctl doors fail (or answer None) and the commands answer as given; records timeouts."""

    def __init__(self, answers: dict, live: bool = True, ioctl_error: bool = True) -> None:
        self.answers, self.live, self.ioctl_error, self.asked = answers, live, ioctl_error, []

    def ethtool_stats(self, ifname: str):
        if self.ioctl_error:
            raise OSError("Operation not supported")
        return None

    def ethtool_drvinfo(self, ifname: str):
        if self.ioctl_error:
            raise OSError("No such device")
        return None

    def run(self, argv, timeout_s=10.0, max_bytes=0):
        from agent.host import CmdResult

        self.asked.append((tuple(argv), timeout_s))
        got = self.answers.get(tuple(argv))
        if got == "hang":
            return CmdResult(tuple(argv), None, timed_out=True, duration_s=timeout_s)
        return CmdResult(tuple(argv), 0, got.encode()) if got is not None else CmdResult(tuple(argv), None, missing=True)


def test_failed_ioctls_are_noted_and_the_commands_asked_with_the_callers_timeout() -> None:
    host = _FallbackHost({("ethtool", "-S", "r0"): "NIC statistics:\n  rx_prio3_pause: 4\n",
                          ("ethtool", "-i", "r0"): "driver: mlx5_core\n",
                          ("ethtool", "-S", "r1"): "garbage\n", ("ethtool", "-i", "r1"): "garbage\n"})
    notes = Notes()
    stats, infos = read_ethtool(host, ["r0", "r1"], timeout_s=2.5, notes=notes)  # type: ignore[arg-type]
    assert [(s.netdev, s.counters) for s in stats] == [("r0", (("rx_prio3_pause", 4),))]
    assert [(i.netdev, i.driver) for i in infos] == [("r0", "mlx5_core")]
    assert {t for _, t in host.asked} == {2.5}
    assert notes.unavailable == [
        ("ethtool -S r0", "ETHTOOL_GSTATS r0: Operation not supported"),
        ("ethtool -i r0", "ETHTOOL_GDRVINFO r0: No such device"),
        ("ethtool -S r1", "ETHTOOL_GSTATS r1: Operation not supported"),
        ("ethtool -S r1", "ethtool -S r1: not statistics output ('garbage')"),
        ("ethtool -i r1", "ETHTOOL_GDRVINFO r1: No such device"),
        ("ethtool -i r1", "ethtool -i r1: no driver line ('garbage')"),
    ]
    host.asked.clear()
    read_ethtool(host, ["r0"])  # type: ignore[arg-type]
    assert {t for _, t in host.asked} == {10.0}


@pytest.mark.parametrize("which", ["-S", "-i"])
def test_a_live_hang_skips_every_later_netdev_and_a_recorded_one_nothing(which: str) -> None:
    answers = {("ethtool", "-S", n): "NIC statistics:\n  x: 1\n" for n in ("r0", "r1", "r2", "r3")}
    answers |= {("ethtool", "-i", n): "driver: mlx5_core\n" for n in ("r0", "r1", "r2", "r3")}
    answers[("ethtool", which, "r1")] = "hang"
    notes = Notes()
    stats, _ = read_ethtool(_FallbackHost(answers, ioctl_error=False), ["r0", "r1", "r2", "r3"], notes=notes)  # type: ignore[arg-type]
    assert [s.netdev for s in stats] == (["r0"] if which == "-S" else ["r0", "r1"])
    skipped = [(s, r) for s, r in notes.unavailable if r.startswith("skipped")]
    assert skipped == [(f"ethtool -S {n}", "skipped: ethtool on r1 timed out (firmware may be hung)") for n in ("r2", "r3")]
    stats, infos = read_ethtool(_FallbackHost(answers, live=False, ioctl_error=False), ["r0", "r1", "r2"])  # type: ignore[arg-type]
    assert len(stats) + len(infos) == 5  # the one timed-out answer is missing, nothing else


class _PerNetdevIoctlHost:
    """Live ioctl doors that answer each netdev with its own values and record whom they were asked."""

    live = True

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def ethtool_stats(self, ifname: str):
        self.asked.append(("stats", ifname))
        return [("rx_prio3_pause", 10 if ifname == "net_rail0" else 20)]

    def ethtool_drvinfo(self, ifname: str):
        self.asked.append(("drvinfo", ifname))
        return {"driver": "mlx5_core", "version": "1", "fw_version": f"28.42.{ifname[-1]}",
                "bus_info": "0000:0c:00.0" if ifname == "net_rail0" else "0000:8d:00.0"}

    def run(self, argv, timeout_s=10.0, max_bytes=0):
        raise AssertionError(f"no command expected, got {argv}")


def test_each_ioctl_answer_is_asked_by_name_and_carries_the_netdev_it_was_asked_for() -> None:
    # The counters and the driver info are joined to rails by netdev name: an answer filed under
    # no name (or another's) would put one rail's PFC counters on another.
    host = _PerNetdevIoctlHost()
    stats, infos = read_ethtool(host, ["net_rail0", "net_rail1"])  # type: ignore[arg-type]
    assert host.asked == [("stats", "net_rail0"), ("drvinfo", "net_rail0"),
                          ("stats", "net_rail1"), ("drvinfo", "net_rail1")]
    assert [(s.netdev, s.counters) for s in stats] == [("net_rail0", (("rx_prio3_pause", 10),)),
                                                       ("net_rail1", (("rx_prio3_pause", 20),))]
    assert [(i.netdev, i.firmware, i.bus_info) for i in infos] == [("net_rail0", "28.42.0", "0000:0c:00.0"),
                                                                  ("net_rail1", "28.42.1", "0000:8d:00.0")]


def test_ethtool_s_header_is_the_statistics_line_not_any_line_ending_in_a_colon() -> None:
    # An error message that ends in a colon is not the header: the counters after it are not trusted.
    with pytest.raises(ValueError, match="not statistics output"):
        parse_ethtool_s("Cannot get stats for these queues:\n  rx_prio3_pause: 9\n", "net_rail0")
    st = parse_ethtool_s("  nic STATISTICS :\n  rx_prio3_pause: 9\n", "net_rail0")
    assert st.counters == (("rx_prio3_pause", 9),)
