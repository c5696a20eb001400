"""The rate findings of the degradation codes as events: one per episode, again when worse, re-armed
once gone."""

from __future__ import annotations

from agent.detectors.degradation import initial, step
from agent.findings import Finding


def _f(code: str, sev: str, subject: str = "net_rail1", **ev: object) -> Finding:
    return Finding(code, sev, subject, f"{code} {sev}", {"source": "recorder", **ev})


def test_one_event_per_episode_again_when_worse_and_after_it_ended() -> None:
    st = initial()
    st, evs = step(st, [_f("LinkDegrading", "warning")], 10.0)
    assert [(e.code, e.severity, e.subject, e.ts) for e in evs] == [("LinkDegrading", "warning", "net_rail1", 10.0)]
    assert dict(evs[0].evidence)["source"] == "agent"
    st, evs = step(st, [_f("LinkDegrading", "warning")], 20.0)
    assert evs == ()
    st, evs = step(st, [_f("LinkDegrading", "critical")], 30.0)
    assert [e.severity for e in evs] == ["critical"]
    st, evs = step(st, [], 40.0)
    st, evs = step(st, [_f("LinkDegrading", "warning")], 50.0)
    assert [e.severity for e in evs] == ["warning"]


def test_snapshot_forms_info_and_other_codes_are_not_events() -> None:
    st = initial()
    cumulative = Finding("LinkDegrading", "info", "net_rail0", "", {"rx_pcs_symbol_err_phy": 3})
    no_rate = Finding("PcieErrors", "warning", "pci/0000:8d:00.0", "", {"aer": {"fatal": 1}})
    other = Finding("PfcStorm", "critical", "net_rail0", "", {"source": "recorder"})
    st, evs = step(st, [cumulative, no_rate, other], 1.0)
    assert evs == ()


def test_the_event_read_back_keeps_the_episode_armed() -> None:
    st, evs = step(initial(), [_f("OpticsOutOfRange", "critical", "net_rail0")], 1.0)
    assert len(evs) == 1
    read_back = Finding("OpticsOutOfRange", "critical", "net_rail0", "", {"source": "agent", "event_ts": 1.0})
    st, evs = step(st, [read_back], 2.0)
    assert evs == ()
    st, evs = step(st, [read_back, _f("OpticsOutOfRange", "critical", "net_rail0")], 3.0)
    assert evs == ()
