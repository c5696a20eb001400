"""NicHealthError: a rail PF's devlink health reporter (or its port's) in error; severity the worst."""

from __future__ import annotations

from dataclasses import replace

from agent.model import HealthReporter
from tests.support import nodes
from tests.support.nodes import found

PF0, PF1 = (f"pci/{b}" for b in nodes.PCIS[:2])


def rep(handle: str, name: str, state: str | None = "healthy", error: int | None = 0,
        recover: int | None = 0) -> HealthReporter:
    parts = handle.split("/")
    return HealthReporter(handle, "/".join(parts[:2]), int(parts[2]) if len(parts) == 3 else None, name, state,
                          error, recover)


def aux_of(pf: str) -> str:
    """The PF's nested auxiliary instance, as devlink dev show lists it (kernel >= 6.7)."""
    snap = nodes.node()
    return next(d.nested[0] for d in snap.devlink_devs if d.handle == pf)


def healthy() -> tuple[HealthReporter, ...]:
    out = []
    for pf in (PF0, PF1):
        out += [rep(pf, "fw"), rep(pf, "fw_fatal"), rep(f"{aux_of(pf)}/65535", "tx"), rep(f"{aux_of(pf)}/65535", "rx")]
    return tuple(out)


def with_health(*changes: HealthReporter, extra: tuple[HealthReporter, ...] = ()):
    keyed = {(r.handle, r.name): r for r in healthy()}
    for r in changes:
        keyed[(r.handle, r.name)] = r
    return replace(nodes.node(), health=tuple(keyed.values()) + extra)


def test_healthy_reporters_raise_nothing():
    assert found(with_health()) == []


def test_fw_fatal_in_error_is_critical():
    assert found(with_health(rep(PF0, "fw_fatal", "error", 1))) == [("NicHealthError", "critical", PF0)]


def test_any_other_reporter_in_error_is_a_warning():
    assert found(with_health(rep(PF1, "fw", "error", 2))) == [("NicHealthError", "warning", PF1)]


def test_a_port_reporter_of_the_nested_auxiliary_instance_is_its_pfs():
    snap = with_health(rep(f"{aux_of(PF1)}/65535", "tx", "error", 4, 3))
    assert found(snap) == [("NicHealthError", "warning", PF1)]


def test_a_port_reporter_under_the_pci_handle_is_its_pfs():
    snap = with_health(extra=(rep(f"{PF0}/1", "rx", "error", 1),))
    assert found(snap) == [("NicHealthError", "warning", PF0)]


def test_errors_on_a_reporter_now_healthy_are_info():
    assert found(with_health(rep(PF0, "fw", "healthy", 3, 3))) == [("NicHealthError", "info", PF0)]


def test_one_finding_per_pf_with_the_worst_severity_and_every_reporter_in_evidence():
    snap = with_health(rep(PF0, "fw", "error", 1), rep(PF0, "fw_fatal", "error", 1),
                       rep(f"{aux_of(PF0)}/65535", "rx", "healthy", 2, 2))
    from agent.analysis.diagnose import diagnose
    from agent.config import Expectations

    (f,) = diagnose(snap, Expectations(), kernel_table=()).findings
    assert (f.code, f.severity, f.subject) == ("NicHealthError", "critical", PF0)
    assert {(r["reporter"], r["state"], r["error"]) for r in f.evidence["reporters"]} == {
        ("fw", "error", 1), ("fw_fatal", "error", 1), ("tx", "healthy", 0), ("rx", "healthy", 2)}


def test_a_vfs_reporter_and_another_bus_are_not_judged():
    vf = f"pci/{nodes.vf_of(nodes.PCIS[0])}"
    snap = with_health(extra=(rep(vf, "vnic", "error", 5), rep("netdevsim/netdevsim1", "dummy", "error", 1)))
    assert found(snap) == []


def test_a_reporter_without_a_state_is_not_judged():
    assert found(with_health(rep(PF0, "fw_fatal", None, 9))) == []


def only(snap):
    from agent.analysis.diagnose import diagnose
    from agent.config import Expectations

    (f,) = diagnose(snap, Expectations(), kernel_table=()).findings
    return f


def test_health_finding_names_the_pf_and_the_reporters_in_error_with_every_reporter_in_evidence():
    f = only(with_health(rep(PF0, "fw", "error", 1), rep(PF0, "fw_fatal", "error", 1, 2)))
    assert f.message == f"{PF0} (net_rail0): devlink health reporter(s) in error: fw, fw_fatal"
    assert f.evidence["netdev"] == "net_rail0"
    assert f.evidence["reporters"] == [
        {"handle": PF0, "reporter": "fw", "state": "error", "error": 1, "recover": 0},
        {"handle": PF0, "reporter": "fw_fatal", "state": "error", "error": 1, "recover": 2},
        {"handle": f"{aux_of(PF0)}/65535", "reporter": "tx", "state": "healthy", "error": 0, "recover": 0},
        {"handle": f"{aux_of(PF0)}/65535", "reporter": "rx", "state": "healthy", "error": 0, "recover": 0}]


def test_recovered_errors_name_the_reporters_that_had_them():
    f = only(with_health(rep(PF0, "fw", "healthy", 3, 3), rep(f"{aux_of(PF0)}/65535", "tx", "healthy", 1, 1)))
    assert f.severity == "info"
    assert f.message == (f"{PF0} (net_rail0): devlink health reporter(s) recovered from errors since the driver "
                         "loaded: fw, tx")


def test_an_error_beside_recovered_ones_names_only_the_reporter_in_error():
    f = only(with_health(rep(PF0, "fw", "healthy", 3, 3), rep(PF0, "fw_fatal", "error", 1)))
    assert (f.severity, f.message) == ("critical", f"{PF0} (net_rail0): devlink health reporter(s) in error: fw_fatal")


def test_a_warning_beside_an_info_is_a_warning():
    f = only(with_health(rep(PF0, "fw", "healthy", 3, 3), rep(f"{aux_of(PF0)}/65535", "rx", "error", 1)))
    assert f.severity == "warning"


def test_every_rail_pf_is_judged():
    snap = with_health(rep(PF0, "fw", "error", 1), rep(PF1, "fw", "error", 1))
    assert found(snap) == [("NicHealthError", "warning", PF0), ("NicHealthError", "warning", PF1)]


def test_a_pf_whose_netdev_is_gone_says_so():
    from agent.analysis.diagnose import diagnose
    from agent.config import Expectations

    snap = nodes.drop_link(with_health(rep(PF1, "fw", "error", 1)), "net_rail1")
    (f,) = [f for f in diagnose(snap, Expectations(), kernel_table=()).findings if f.code == "NicHealthError"]
    assert f.message == f"{PF1} (no netdev): devlink health reporter(s) in error: fw"
    recovered = nodes.drop_link(with_health(rep(PF1, "fw", "healthy", 1, 1)), "net_rail1")
    (f,) = [f for f in diagnose(recovered, Expectations(), kernel_table=()).findings if f.code == "NicHealthError"]
    assert f.message.startswith(f"{PF1} (no netdev): devlink health reporter(s) recovered")
