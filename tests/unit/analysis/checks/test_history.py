"""Rates from the flight recorder, events as findings, and one finding per code and subject."""

from __future__ import annotations

import json

from agent.analysis.checks import merge
from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from agent.findings import Finding
from agent.host.image import Manifest
from agent.model import Event
from agent.readers.history import capture_time_of, parse_events, parse_recorder
from tests.support import nodes

T0 = nodes.TAKEN_AT - 120


def recorder(rows):
    data = "\n".join(json.dumps({"ts": ts, "netdev": nd, "counters": c}) for ts, nd, c in rows).encode()
    rec, why = parse_recorder(data)
    assert why is None
    return rec


def series(netdev, n, **per_second):
    """n one-second samples; each counter grows by its per-second step (a list gives values as they are)."""
    rows = []
    for i in range(n):
        c = {k: (v[i] if isinstance(v, list) else v * i) for k, v in per_second.items()}
        rows.append((T0 + i, netdev, c))
    return rows


def found(snap=None, exp=None, **kw):
    diag = diagnose(snap or nodes.node(), exp or Expectations(), kernel_table=(), **kw)
    return [(f.code, f.severity, f.subject) for f in diag.findings]


def test_quiet_recorder_gives_nothing():
    rec = recorder(series("net_rail0", 90, tx_prio3_pause_duration=1000, carrier_down_count=0))
    assert found(recorder=rec) == []


def test_pause_duration_over_half_the_wall_time_is_a_storm():
    rec = recorder(series("net_rail0", 90, tx_prio3_pause_duration=600_000))
    assert found(recorder=rec) == [("PfcStorm", "critical", "net_rail0")]
    rec = recorder(series("net_rail0", 90, tx_prio3_pause_duration=400_000))
    assert found(recorder=rec) == []


def test_received_pause_alone_is_not_a_storm():
    rec = recorder(series("net_rail0", 90, rx_prio3_pause_duration=1_000_000))
    assert found(recorder=rec) == []


def test_only_the_last_60_s_count():
    dur = [i * 900_000 for i in range(30)] + [29 * 900_000] * 60
    assert found(recorder=recorder(series("net_rail0", 90, tx_prio3_pause_duration=dur))) == []


def test_two_samples_ten_seconds_apart_give_a_rate():
    rows = [(T0, "net_rail0", {"tx_pause_storm_error_events": 0}), (T0 + 10, "net_rail0", {"tx_pause_storm_error_events": 1})]
    assert found(recorder=recorder(rows)) == [("PfcStorm", "critical", "net_rail0")]


def test_rising_lossless_discards_are_critical_and_stand_alone_over_info():
    snap = nodes.set_counters(nodes.node(), "net_rail1", rx_prio3_discards=50)
    rec = recorder(series("net_rail1", 10, rx_prio3_discards=[40] * 5 + [50] * 5))
    assert found(snap, recorder=rec) == [("LosslessDrops", "critical", "net_rail1")]
    assert found(snap) == [("LosslessDrops", "info", "net_rail1")]


def test_flapping_needs_n_losses_in_the_window():
    three = [0] * 10 + [1] * 10 + [2] * 10 + [3] * 10
    assert found(recorder=recorder(series("net_rail0", 40, carrier_down_count=three))) == [
        ("LinkFlapping", "warning", "net_rail0")]
    assert found(exp=Expectations(flap_count=4), recorder=recorder(series("net_rail0", 40, carrier_down_count=three))) == []
    assert found(exp=Expectations(flap_window_s=15),
                 recorder=recorder(series("net_rail0", 40, carrier_down_count=three))) == []


def test_counter_reset_counts_nothing():
    reset = [5] * 10 + [0] * 10 + [1] * 10
    assert found(recorder=recorder(series("net_rail0", 30, carrier_down_count=reset))) == []


def test_representor_series_are_ignored():
    rec = recorder(series("net_rail0_0", 40, carrier_down_count=1))
    assert found(recorder=rec) == []


def test_events_within_the_window_become_findings():
    end = nodes.TAKEN_AT
    events = (
        Event(end - 2000, "LinkFlapping", "warning", "net_rail1", "old"),
        Event(end - 60, "ConfigFlapping", "warning", "pci/0000:8d:00.0", "numvfs 4->0->4"),
        Event(end - 30, "LinkFlapping", "warning", "net_rail0", "3 carrier losses"),
    )
    assert found(events=events, capture_time=end) == [
        ("ConfigFlapping", "warning", "pci/0000:8d:00.0"), ("LinkFlapping", "warning", "net_rail0")]
    # without a capture time, the newest event is "now"
    assert len(found(events=events)) == 2
    assert len(found(exp=Expectations(event_window_s=45), events=events, capture_time=end)) == 1


def test_more_severe_of_event_and_snapshot_stands_alone():
    a = Finding("PfcStorm", "info", "net_rail0", "cumulative")
    b = Finding("PfcStorm", "critical", "net_rail0", "event")
    c = Finding("PfcStorm", "warning", "net_rail0", "other")
    assert merge([a, b, c]) == (b,) and merge([a, b, c])[0].message == "event"


def test_sorted_by_severity_code_subject_bytes():
    fs = [Finding("B", "info", "x", ""), Finding("Z", "critical", "b", ""), Finding("Z", "critical", "B", ""),
          Finding("A", "warning", "a", "")]
    assert [(f.code, f.subject) for f in merge(fs)] == [("Z", "B"), ("Z", "b"), ("A", "a"), ("B", "x")]


def test_malformed_history_is_a_reason_not_a_crash():
    events, why = parse_events(b'{"events": [{"ts": 1, "code": "LinkFlapping", "subject": "net_rail0"}, 7]}')
    assert len(events) == 1 and events[0].severity == "warning" and "1 malformed" in why
    assert parse_events(b"{not json")[1].startswith("events.json: not JSON")
    rec, why = parse_recorder(b'{"ts": 1, "netdev": "a", "counters": {"x": 1}}\ngarbage\n')
    assert rec.netdevs == ("a",) and "line 2" in why
    assert parse_recorder(b"")[0] is None
    assert capture_time_of(Manifest(ended_at="2026-10-28T14:20:33Z")) == nodes.TAKEN_AT
    assert capture_time_of(Manifest(ended_at="yesterday")) is None
    assert capture_time_of(None) is None


def findings(snap=None, exp=None, **kw):
    return diagnose(snap or nodes.node(), exp or Expectations(), kernel_table=(), **kw).findings


def test_storm_finding_says_how_long_and_how_much_with_received_pause_as_evidence():
    rec = recorder(series("net_rail0", 90, tx_prio3_pause_duration=600_000, rx_prio3_pause_duration=100_000))
    (f,) = findings(recorder=rec)
    assert f.message == "net_rail0: in the last 60 s it sent pause on priority 3 for 60% of the time"
    assert f.evidence == {"netdev": "net_rail0", "window_s": 60.0, "tx_pause_storm_error_events": 0,
                          "tx_prio3_pause_duration_us": 36_000_000, "tx_pause_share": 0.6,
                          "rx_prio3_pause_duration_us": 6_000_000, "source": "recorder"}


def test_storm_at_exactly_the_ratio_and_the_watchdog_are_both_named():
    storms = [0] * 89 + [2]
    rec = recorder(series("net_rail0", 90, tx_prio3_pause_duration=500_000, tx_pause_storm_error_events=storms))
    (f,) = findings(recorder=rec)
    assert f.message == ("net_rail0: in the last 60 s the pause-storm watchdog fired 2 time(s) "
                         "and it sent pause on priority 3 for 50% of the time")
    assert (f.evidence["tx_pause_storm_error_events"], f.evidence["tx_pause_share"]) == (2, 0.5)


def test_storm_on_another_lossless_priority_reads_its_counters():
    rec = recorder(series("net_rail0", 90, tx_prio5_pause_duration=600_000, tx_prio3_pause_duration=0))
    storms = [f for f in findings(exp=Expectations(lossless_prio=5), recorder=rec) if f.code == "PfcStorm"]
    assert [f.evidence["tx_prio5_pause_duration_us"] for f in storms] == [36_000_000]
    assert findings(recorder=rec) == ()


def test_two_samples_further_apart_than_the_storm_window_still_give_a_rate():
    rows = [(T0, "net_rail0", {"tx_pause_storm_error_events": 0}), (T0 + 120, "net_rail0", {"tx_pause_storm_error_events": 1})]
    (f,) = findings(recorder=recorder(rows))
    assert f.message == "net_rail0: in the last 120 s the pause-storm watchdog fired 1 time(s)"
    assert f.evidence["window_s"] == 120.0


def test_one_sample_gives_no_rate():
    rows = [(T0, "net_rail0", {"tx_pause_storm_error_events": 5, "carrier_down_count": 9, "rx_prio3_discards": 3})]
    assert findings(recorder=recorder(rows)) == ()


def test_lossless_drops_sum_every_lossless_discard_counter():
    rec = recorder(series("net_rail1", 10, rx_prio3_discards=[40] * 5 + [50] * 5,
                          rx_prio3_cong_discard=[0] * 9 + [2], rx_prio3_buf_discard=[7] * 10, rx_discards_phy=[0] * 9 + [9]))
    (f,) = findings(recorder=rec)
    assert (f.code, f.subject) == ("LosslessDrops", "net_rail1")
    assert f.message == "net_rail1: 12 packet(s) of the lossless priority 3 dropped in the 9 s the flight recorder covers"
    assert f.evidence == {"netdev": "net_rail1", "increase": {"rx_prio3_discards": 10, "rx_prio3_cong_discard": 2},
                          "source": "recorder"}


def test_flapping_finding_names_the_count_window_and_last_loss():
    three = [0] * 10 + [1] * 10 + [2] * 10 + [3] * 10 + [3] * 5
    (f,) = findings(recorder=recorder(series("net_rail0", 45, carrier_down_count=three)))
    assert f.message == "net_rail0: 3 carrier losses within 300 s (threshold 3)"
    # The last loss is the step that rose (sample 30), not the newest sample.
    assert f.evidence == {"netdev": "net_rail0", "carrier_losses": 3, "window_s": 300.0, "last_loss_ts": T0 + 30,
                          "source": "recorder"}


def test_losses_exactly_a_window_apart_are_in_one_window():
    exp = Expectations(flap_window_s=20)
    three = [0] * 10 + [1] * 10 + [2] * 10 + [3] * 10
    assert [f.evidence["carrier_losses"] for f in findings(exp=exp, recorder=recorder(
        series("net_rail0", 40, carrier_down_count=three)))] == [3]


def test_a_sample_without_the_counter_is_skipped_not_a_reset():
    rows = [(T0 + i, "net_rail0", {"carrier_down_count": n} if n is not None else {"rx_bytes": i})
            for i, n in enumerate([0, 1, None, 2, None, 3])]
    assert [(f.code, f.evidence["carrier_losses"]) for f in findings(recorder=recorder(rows))] == [("LinkFlapping", 3)]


def test_a_renamed_rail_is_judged_under_its_expected_name():
    snap = nodes.replace_link(nodes.node(), "net_rail1", ifname="enp141s0f0np0")
    rec = recorder(series("enp141s0f0np0", 90, tx_prio3_pause_duration=600_000))
    assert [(f.code, f.subject) for f in findings(snap, recorder=rec) if f.code == "PfcStorm"] == [
        ("PfcStorm", "net_rail1")]


def test_a_series_of_a_netdev_that_is_not_a_rail_is_judged_under_its_own_name():
    rec = recorder(series("eth5", 90, tx_prio3_pause_duration=600_000))
    assert [(f.code, f.subject) for f in findings(recorder=rec)] == [("PfcStorm", "eth5")]


def test_each_series_is_judged():
    rec = recorder(series("net_rail0", 90, tx_prio3_pause_duration=600_000)
                   + series("net_rail1", 90, tx_prio3_pause_duration=600_000))
    assert [f.subject for f in findings(recorder=rec)] == ["net_rail0", "net_rail1"]
    rep = recorder(series("net_rail0_0", 40, carrier_down_count=1) + series("net_rail1", 90, tx_prio3_pause_duration=600_000))
    assert [f.subject for f in findings(recorder=rep)] == ["net_rail1"]


def test_event_finding_keeps_the_agents_words_and_says_how_long_before():
    ev = Event(nodes.TAKEN_AT - 42, "PfcStorm", "critical", "net_rail0", "storm", (("netdev", "net_rail0"),))
    (f,) = findings(events=(ev,), capture_time=nodes.TAKEN_AT)
    assert (f.code, f.severity, f.subject) == ("PfcStorm", "critical", "net_rail0")
    assert f.message == "storm (agent event, 42 s before the capture)"
    assert f.evidence == {"netdev": "net_rail0", "event_ts": nodes.TAKEN_AT - 42}
    bare = Event(nodes.TAKEN_AT, "LinkFlapping", "warning", "net_rail1")
    assert findings(events=(bare,))[0].message == "LinkFlapping event (agent event, 0 s before the capture)"


def test_event_window_includes_both_ends_and_nothing_after_the_capture():
    end = nodes.TAKEN_AT
    exp = Expectations(event_window_s=100)
    events = (Event(end - 100, "LinkFlapping", "warning", "net_rail0"), Event(end, "LinkFlapping", "warning", "net_rail1"),
              Event(end + 1, "PfcStorm", "critical", "net_rail0"), Event(end - 101, "PfcStorm", "critical", "net_rail1"))
    assert [(f.code, f.subject) for f in findings(exp=exp, events=events, capture_time=end)] == [
        ("LinkFlapping", "net_rail0"), ("LinkFlapping", "net_rail1")]


def test_exactly_the_storm_ratio_without_the_watchdog_is_a_storm():
    (f,) = findings(recorder=recorder(series("net_rail0", 90, tx_prio3_pause_duration=500_000)))
    assert f.message == "net_rail0: in the last 60 s it sent pause on priority 3 for 50% of the time"


def test_when_only_the_last_sample_is_in_the_window_the_last_two_give_the_rate():
    rows = [(T0, "net_rail0", {"tx_pause_storm_error_events": 0}), (T0 + 100, "net_rail0", {"tx_pause_storm_error_events": 0}),
            (T0 + 200, "net_rail0", {"tx_pause_storm_error_events": 1})]
    (f,) = findings(recorder=recorder(rows))
    assert f.evidence["window_s"] == 100.0


def test_a_one_second_rate_counts_and_samples_at_one_time_give_none():
    rows = [(T0, "net_rail0", {"tx_prio3_pause_duration": 0}), (T0 + 1, "net_rail0", {"tx_prio3_pause_duration": 600_000})]
    assert [f.evidence["tx_pause_share"] for f in findings(recorder=recorder(rows))] == [0.6]
    same_time = [(T0, "net_rail0", {"tx_prio3_pause_duration": 0}), (T0, "net_rail0", {"tx_prio3_pause_duration": 600_000})]
    assert findings(recorder=recorder(same_time)) == ()


def test_a_reset_does_not_cancel_the_drops_before_it():
    rec = recorder(series("net_rail1", 4, rx_prio3_discards=[0, 10, 0, 0]))
    (f,) = findings(recorder=rec)
    assert f.evidence["increase"] == {"rx_prio3_discards": 10}


def test_no_carrier_loss_is_no_flap_whatever_the_threshold():
    rec = recorder(series("net_rail0", 40, carrier_down_count=0))
    assert findings(exp=Expectations(flap_count=1), recorder=rec) == ()


def test_the_flap_count_is_the_most_losses_in_any_window():
    #                 0  10  40  50  60 : window 25 s -> 40, 50, 60 are the most in one window
    downs = [0] * 100
    for t in (0, 10, 40, 50, 60):
        downs[t:] = [d + 1 for d in downs[t:]]
    rec = recorder(series("net_rail0", 70, carrier_down_count=downs))
    got = findings(exp=Expectations(flap_window_s=25), recorder=rec)
    assert [(f.evidence["carrier_losses"], f.evidence["last_loss_ts"]) for f in got] == [(3, T0 + 60)]
    assert findings(exp=Expectations(flap_window_s=25, flap_count=4), recorder=rec) == ()


def test_losses_leaving_the_window_are_subtracted_by_their_size():
    # losses: 1 at +1, 1 at +2, 2 at +50, 1 at +51; within 10 s the most are the 3 of +50 and +51
    downs = [0] + [1] + [2] * 48 + [4, 5]
    rec = recorder(series("net_rail0", 52, carrier_down_count=downs))
    got = findings(exp=Expectations(flap_window_s=10), recorder=rec)
    assert [(f.evidence["carrier_losses"], f.evidence["last_loss_ts"]) for f in got] == [(3, T0 + 51)]


def test_the_pause_share_is_given_to_three_decimals():
    rows = [(T0, "net_rail0", {"tx_prio3_pause_duration": 0}), (T0 + 3, "net_rail0", {"tx_prio3_pause_duration": 2_000_000})]
    assert [f.evidence["tx_pause_share"] for f in findings(recorder=recorder(rows))] == [0.667]
