"""``railscope agent`` flags: bind only where told, clear of the other exporters, env like flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cli import build_parser, main
from agent.commands.agent import settings_from_args
from agent.config import DEFAULT_PORT, RESERVED_PORTS, SettingsError


def _settings(argv: list[str]):
    args = build_parser("agent").parse_args(["agent", *argv])
    return settings_from_args(args)


def test_listen_is_required(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RAILSCOPE_LISTEN", raising=False)
    assert main(["agent"]) == 3
    err = capsys.readouterr().err
    assert "--listen" in err and "Traceback" not in err


@pytest.mark.parametrize("addr", ["0.0.0.0", "::", "[::]"])
def test_all_addresses_are_refused_without_listen_any(addr: str) -> None:
    with pytest.raises(SettingsError, match="all addresses"):
        _settings(["--listen", addr])
    assert _settings(["--listen", addr, "--listen-any"]).listen in ("0.0.0.0", "::")


def test_not_an_address_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agent", "--listen", "node-1.example"]) == 3
    assert "not an IP address" in capsys.readouterr().err


@pytest.mark.parametrize("port", sorted(RESERVED_PORTS))
def test_the_ports_of_the_other_node_exporters_are_refused(port: int) -> None:
    with pytest.raises(SettingsError, match=RESERVED_PORTS[port]):
        _settings(["--listen", "10.0.0.7", "--port", str(port)])


def test_defaults() -> None:
    s = _settings(["--listen", "10.0.0.7"])
    assert s.listen == "10.0.0.7"
    assert s.port == DEFAULT_PORT and DEFAULT_PORT not in RESERVED_PORTS
    iv = dict(s.intervals)
    assert iv["links"] == 15 and iv["devlink"] == 60 and iv["rdma"] == 60 and iv["config"] == 60
    assert iv["counters"] == 1 and s.recorder_window_s == 900 and s.disabled == frozenset()
    assert s.representor_include is None
    # The watched devlink params default to the reader's own list (a class attribute of a slotted
    # dataclass is a member descriptor, not the default: reading it broke every devlink sample).
    assert s.read.devlink_params == ("esw_multiport", "flow_steering_mode", "enable_roce")
    assert _settings(["--listen", "10.0.0.7", "--devlink-param", "x"]).read.devlink_params == ("x",)


def test_every_flag_reads_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAILSCOPE_LISTEN", "192.0.2.10")
    monkeypatch.setenv("RAILSCOPE_PORT", "9842")
    monkeypatch.setenv("RAILSCOPE_LINKS_INTERVAL", "30s")
    monkeypatch.setenv("RAILSCOPE_RECORDER_WINDOW", "0")
    monkeypatch.setenv("RAILSCOPE_FLAP_COUNT", "5")
    monkeypatch.setenv("RAILSCOPE_FLAP_WINDOW", "2m")
    monkeypatch.setenv("RAILSCOPE_REPRESENTOR_INCLUDE", "^net_rail0_")
    monkeypatch.setenv("RAILSCOPE_LISTEN_ANY", "false")
    s = _settings([])
    assert (s.listen, s.port, s.interval_s("links", 15), s.recorder_window_s) == ("192.0.2.10", 9842, 30, 0)
    assert dict(s.thresholds)["flap_count"] == 5 and dict(s.thresholds)["flap_window_s"] == 120
    assert s.expectations.flap_count == 5 and s.expectations.flap_window_s == 120
    assert s.representor_include == "^net_rail0_"


def test_devlink_and_rdma_are_never_read_more_often_than_every_minute() -> None:
    with pytest.raises(SettingsError, match="at least 60s"):
        _settings(["--listen", "10.0.0.7", "--devlink-interval", "10s"])
    with pytest.raises(SettingsError, match="at least 60s"):
        _settings(["--listen", "10.0.0.7", "--rdma-interval", "30"])


def test_bad_values_exit_3_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--links-interval", "soon"], ["--representor-include", "("], ["--flap-count", "0"],
                 ["--host-root", "/nonexistent/railscope"]):
        try:
            rc = main(["agent", "--listen", "127.0.0.1", *argv])
        except SystemExit as exc:  # argparse's own usage errors
            rc = exc.code
        assert rc == 3
        err = capsys.readouterr().err
        assert "error" in err or "railscope agent:" in err
        assert "Traceback" not in err


def test_help_documents_every_flag_with_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["agent", "--help"])
    out = capsys.readouterr().out
    for flag in ("--listen", "--port", "--links-interval", "--recorder-window", "--flap-count", "--rails"):
        assert flag in out
    assert out.count("Default:") >= 20


def test_an_address_not_on_this_node_exits_1_and_a_bad_kernel_table_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): never configured here.
    assert main(["agent", "--listen", "192.0.2.55", "--port", "19843"]) == 1
    assert "cannot listen on 192.0.2.55" in capsys.readouterr().err
    bad = tmp_path / "table.json"
    bad.write_text("{not json")
    assert main(["agent", "--listen", "127.0.0.1", "--port", "19843", "--kernel-table", str(bad)]) == 3
    err = capsys.readouterr().err
    assert "table.json" in err and "Traceback" not in err


@pytest.mark.parametrize(("mode", "why"), [(0o644, "readable by its group and others (mode 0644)"),
                                           (0o640, "readable by its group (mode 0640)")])
def test_a_collector_token_file_others_may_read_stops_the_agent_at_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int, why: str) -> None:
    token = tmp_path / "collector-token"
    token.write_text("agent-token\n")
    token.chmod(mode)
    assert main(["agent", "--listen", "127.0.0.1", "--node", "n1", "--collector", "http://127.0.0.1:9",
                 "--collector-token-file", str(token)]) == 3
    err = capsys.readouterr().err
    assert f"--collector-token-file {token}: {why}" in err and f"chmod 600 {token}" in err
    assert "Traceback" not in err


def test_the_budget_takes_the_pods_limits_as_kubernetes_writes_them(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    s = _settings(["--listen", "127.0.0.1", "--budget-cpu", "500m", "--budget-rss", "512Mi"])
    assert (s.budget_cpu, s.budget_rss) == (0.5, 512 << 20)
    monkeypatch.setenv("RAILSCOPE_BUDGET_CPU", "2")
    monkeypatch.setenv("RAILSCOPE_BUDGET_RSS", "1073741824")
    s = _settings(["--listen", "127.0.0.1"])
    assert (s.budget_cpu, s.budget_rss) == (2.0, 1 << 30)
    monkeypatch.delenv("RAILSCOPE_BUDGET_CPU")
    monkeypatch.delenv("RAILSCOPE_BUDGET_RSS")
    assert (_settings(["--listen", "127.0.0.1"]).budget_cpu, _settings(["--listen", "127.0.0.1"]).budget_rss) == (None, None)
    with pytest.raises(SystemExit) as exc:
        main(["agent", "--listen", "127.0.0.1", "--budget-rss", "lots"])
    assert exc.value.code == 3 and "512Mi" in capsys.readouterr().err
