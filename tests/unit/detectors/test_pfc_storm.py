from __future__ import annotations

from collections.abc import Callable

import pytest

from agent.config import Thresholds
from agent.detectors import pfc_storm
from agent.detectors.observations import CountersObs
from tests.support.detector_replay import replay

# Counter names and values in the shape of the public ethtool -S samples
# (tests/fixtures/public/mlx5/ethtool-S-mlx5-uplink-pfc-prio3-*.RECONSTRUCTED.txt).
BASE = {"rx_prio3_pause": 41927, "rx_prio3_pause_duration": 8134, "tx_prio3_pause": 1000,
        "tx_prio3_pause_duration": 3_981_220_457, "rx_prio3_pause_transition": 39218,
        "tx_pause_storm_warning_events": 0, "tx_pause_storm_error_events": 0}


def sample(**over: int) -> CountersObs:
    return CountersObs("net_rail0", {**BASE, **over}, subject="net_rail0")


def series(seconds: range, tx_us_per_s: Callable[[int], float] = lambda t: 0,
           rx_us_per_s: Callable[[int], float] = lambda t: 0,
           extra: Callable[[int], dict[str, int]] = lambda t: {}) -> list[tuple[float, CountersObs]]:
    """1 s samples whose pause durations grow at the given µs per wall second."""
    out = []
    tx = BASE["tx_prio3_pause_duration"]
    rx = BASE["rx_prio3_pause_duration"]
    for t in seconds:
        tx += int(tx_us_per_s(t))
        rx += int(rx_us_per_s(t))
        out.append((float(t), sample(tx_prio3_pause_duration=tx, rx_prio3_pause_duration=rx, **extra(t))))
    return out


def two(dt: float, tx_us: int) -> list[tuple[float, CountersObs]]:
    return [(0.0, sample()), (dt, sample(tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + tx_us))]


CASES = {
    # name: (observations, [(time, severity)] of the events)
    "normal PFC activity": (series(range(120), tx_us_per_s=lambda t: 20_000), []),
    "transmitted pause 70 % of wall time, sustained: one event": (
        series(range(300), tx_us_per_s=lambda t: 700_000), [(1.0, "critical")]),
    "a short burst does not reach 50 % over the last 60 s": (
        series(range(200), tx_us_per_s=lambda t: 900_000 if 100 <= t < 110 else 0), []),
    # 90 % from t=100: the last 60 s reach 50 % once 34 of them were paused (34 x 0.9 / 60)
    "a long burst does, once it fills half the window": (
        series(range(200), tx_us_per_s=lambda t: 900_000 if t >= 100 else 0), [(133.0, "critical")]),
    "received pause alone (a victim): evidence, not a storm": (
        series(range(120), rx_us_per_s=lambda t: 990_000), []),
    "storm error events rose": (
        series(range(10), extra=lambda t: {"tx_pause_storm_error_events": 3 if t >= 5 else 0}),
        [(5.0, "critical")]),
    "storm warning events rose: warning": (
        series(range(10), extra=lambda t: {"tx_pause_storm_warning_events": 1 if t >= 5 else 0}),
        [(5.0, "warning")]),
    "counter reset (driver reload) never fires": (
        [(0.0, sample(tx_pause_storm_error_events=3)), (1.0, sample(tx_pause_storm_error_events=3)),
         (2.0, sample(tx_prio3_pause_duration=10, tx_pause_storm_error_events=0)),
         (3.0, sample(tx_prio3_pause_duration=20, tx_pause_storm_error_events=0))], []),
    "cumulative storm events from before the agent started are not a rise": (
        [(0.0, sample(tx_pause_storm_error_events=3)), (1.0, sample(tx_pause_storm_error_events=3))], []),
    "between two samples: 60 % of 10 s": (two(10, 6_000_000), [(10.0, "critical")]),
    "between two samples: 30 % of 10 s": (two(10, 3_000_000), []),
    "no PFC counters (off or unsupported)": (
        [(0.0, CountersObs("net_rail0", {"rx_bytes": 1})), (1.0, CountersObs("net_rail0", {"rx_bytes": 2}))], []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_pfc_storm_table(name: str) -> None:
    seq, fires = CASES[name]
    _, events = replay(pfc_storm.step, pfc_storm.initial(), seq)
    assert [(e.ts, e.severity) for e in events] == fires
    for e in events:
        assert (e.code, e.subject) == ("PfcStorm", "net_rail0")


def test_ratio_is_measured_over_the_window() -> None:
    _, events = _run(series(range(61), tx_us_per_s=lambda t: 600_000))
    ev = dict(events[0].evidence)
    assert ev["tx_pause_ratio"] == pytest.approx(0.6, abs=0.01)
    state, _ = _run(series(range(200), tx_us_per_s=lambda t: 0))
    assert 60 <= state.ports["net_rail0"].durations[-1][0] - state.ports["net_rail0"].durations[0][0] <= 61


def test_history_is_bounded_whatever_the_sample_rate() -> None:
    seq = [(t / 10, sample(tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + t * 40_000)) for t in range(3000)]
    state, events = _run(seq)
    assert len(state.ports["net_rail0"].durations) <= 2 * 120 + 2  # 600 samples in 60 s without thinning
    assert events == []  # 40 ms of pause per 100 ms: 40 %
    state, events = _run(seq[:1000] + [(100.0 + t / 10, sample(
        tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + 40_000_000 + t * 90_000)) for t in range(1, 600)])
    assert len(events) == 1 and dict(events[0].evidence)["ratio_window_s"] >= 60


def test_rearms_after_quiet_and_thresholds_are_flags() -> None:
    busy = lambda t: 800_000 if t < 100 or t >= 300 else 0  # noqa: E731
    _, events = _run(series(range(400), tx_us_per_s=busy))
    assert [e.ts for e in events] == [1.0, 300.0 + _first_crossing(busy, 300)]
    th = Thresholds(storm_ratio=0.9, lossless_prio=3)
    _, events = _run(series(range(100), tx_us_per_s=lambda t: 800_000), th)
    assert events == []


def test_lossless_prio_selects_the_counters() -> None:
    seq = [(float(t), CountersObs("net_rail0", {"tx_prio5_pause_duration": t * 900_000})) for t in range(5)]
    _, events = _run(seq, Thresholds(lossless_prio=5))
    assert [e.ts for e in events] == [1.0]
    _, events = _run(seq)
    assert events == []


def _run(seq, th: Thresholds | None = None):
    state = pfc_storm.initial(th)
    events = []
    for now, obs in seq:
        state, evs = pfc_storm.step(state, obs, now)
        events.extend(evs)
    return state, events


def _first_crossing(rate: Callable[[int], float], start: int) -> int:
    """Seconds after ``start`` until the 60 s ratio of ``rate`` reaches 0.5."""
    for dt in range(1, 120):
        window = range(max(start + dt - 60, 0) + 1, start + dt + 1)
        if sum(rate(t) for t in window) / (len(window) * 1e6) >= 0.5:
            return dt
    raise AssertionError("never crosses")


def test_storm_event_names_the_cause_and_gives_both_directions_as_evidence() -> None:
    _, events = _run(two(10, 6_000_000))
    (e,) = events
    assert e.message == "net_rail0: pause storm on prio 3: tx_prio3_pause_duration 60% of wall time over 10 s"
    assert dict(e.evidence) == {
        "netdev": "net_rail0", "prio": 3, "tx_pause_ratio": 0.6, "rx_pause_ratio": 0.0, "ratio_window_s": 10.0,
        "storm_error_events_delta": 0, "storm_warning_events_delta": 0, "tx_pause_frames": 1000,
        "rx_pause_frames": 41927, "causes": ["tx_prio3_pause_duration 60% of wall time over 10 s"]}


def test_exactly_the_ratio_is_a_storm() -> None:
    assert [e.severity for e in _run(two(10, 5_000_000))[1]] == ["critical"]
    assert _run(two(10, 4_999_000))[1] == []


def test_watchdog_and_ratio_together_are_one_event_with_both_causes() -> None:
    seq = [(0.0, sample()), (10.0, sample(tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + 7_000_000,
                                          tx_pause_storm_error_events=2, rx_prio3_pause_duration=BASE["rx_prio3_pause_duration"] + 1_234_500))]
    (e,) = _run(seq)[1]
    assert e.message == ("net_rail0: pause storm on prio 3: tx_pause_storm_error_events +2; "
                         "tx_prio3_pause_duration 70% of wall time over 10 s")
    assert dict(e.evidence)["rx_pause_ratio"] == 0.1235
    assert dict(e.evidence)["storm_error_events_delta"] == 2


def test_watchdog_warning_event_is_a_warning_with_its_cause() -> None:
    (e,) = _run(series(range(10), extra=lambda t: {"tx_pause_storm_warning_events": 1 if t >= 5 else 0}))[1]
    assert (e.severity, e.message) == (
        "warning", "net_rail0: NIC pause-storm watchdog warning on prio 3: tx_pause_storm_warning_events +1")
    ev = dict(e.evidence)
    assert (ev["causes"], ev["storm_warning_events_delta"], ev["ratio_window_s"]) == (
        ["tx_pause_storm_warning_events +1"], 1, 5.0)


def test_watchdog_warnings_are_one_event_per_episode_and_silent_during_a_critical_one() -> None:
    warn = series(range(200), extra=lambda t: {"tx_pause_storm_warning_events": t // 5})
    assert [e.ts for e in _run(warn)[1]] == [5.0]
    # a critical storm at t=1 keeps its episode open while warnings keep rising
    crit = series(range(30), tx_us_per_s=lambda t: 900_000 if t < 3 else 0,
                  extra=lambda t: {"tx_pause_storm_warning_events": t})
    assert [(e.ts, e.severity) for e in _run(crit)[1]] == [(1.0, "critical")]


def test_received_pause_that_went_down_has_no_ratio() -> None:
    seq = [(0.0, sample()), (10.0, sample(tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + 6_000_000,
                                          rx_prio3_pause_duration=0))]
    (e,) = _run(seq)[1]
    assert dict(e.evidence)["rx_pause_ratio"] is None


def test_a_sample_without_the_duration_counter_restarts_the_ratio() -> None:
    seq = [(0.0, sample()), (5.0, CountersObs("net_rail0", {"rx_bytes": 1}, subject="net_rail0")),
           (10.0, sample(tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + 6_000_000))]
    assert _run(seq)[1] == []


@pytest.mark.parametrize("t0", [0.0, 1_764_000_000.0])  # from the epoch, and on a real clock
def test_a_port_unseen_for_an_hour_is_forgotten(t0: float) -> None:
    state, _ = _run([(t0, sample()), (t0 + 3599, CountersObs("net_rail1", {}, subject="net_rail1"))])
    assert set(state.ports) == {"net_rail0", "net_rail1"}
    state, _ = _run([(t0, sample()), (t0 + 3600, CountersObs("net_rail1", {}, subject="net_rail1"))])
    assert set(state.ports) == {"net_rail1"}


def test_each_rail_is_its_own_port() -> None:
    other = CountersObs("net_rail1", {**BASE, "tx_pause_storm_error_events": 5}, subject="net_rail1")
    seq = [(0.0, sample()), (1.0, other), (2.0, sample(tx_pause_storm_error_events=1))]
    assert [(e.ts, e.subject) for e in _run(seq)[1]] == [(2.0, "net_rail0")]


@pytest.mark.parametrize(("times", "error_at", "span"), [
    # the ratio is measured from the newest sample at least a window old
    pytest.param((0.0, 10.0), 200.0, 190.0, id="the anchor is one sample before the window"),
    pytest.param((0.0, 10.0, 20.0), 130.0, 120.0, id="the anchor moves on"),
    # samples closer than a 120th of the window (1 s here) thin out: the newest replaces the one
    # before it, which was within 1 s of its own predecessor ...
    pytest.param((0.0, 0.5, 0.75), 120.625, 120.625, id="from the second sample on"),
    pytest.param((0.0, 0.5, 1.0), 120.75, 120.25, id="1 s apart is not closer"),
    # ... and only that one: the history before it stays
    pytest.param((*(10.0 * i for i in range(11)), 100.25, 100.5), 130.5, 120.5, id="the rest of the history stays"),
])
def test_the_ratio_window_starts_at_the_newest_sample_a_window_old(times, error_at: float, span: float) -> None:
    th = Thresholds(storm_window_s=120)
    for t0 in (0.0, 1_764_000_000.0):  # from the epoch, and on a real clock
        seq = [(t0 + t, sample()) for t in times] + [(t0 + error_at, sample(tx_pause_storm_error_events=1))]
        (e,) = _run(seq, th)[1]
        assert dict(e.evidence)["ratio_window_s"] == pytest.approx(span)


def test_without_the_duration_counter_an_event_has_no_ratio_window() -> None:
    seq = [(0.0, CountersObs("net_rail0", {pfc_storm.ERROR_EVENTS: 0}, subject="net_rail0")),
           (10.0, CountersObs("net_rail0", {pfc_storm.ERROR_EVENTS: 1}, subject="net_rail0"))]
    (e,) = _run(seq)[1]
    ev = dict(e.evidence)
    assert (ev["tx_pause_ratio"], ev["ratio_window_s"]) == (None, 0.0)


def test_two_samples_at_the_same_time_give_no_ratio() -> None:
    # the netlink and periodic feeds may both sample a rail at one time: no wall time, no ratio
    seq = [(0.0, sample()), (0.0, sample(tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + 1000))]
    assert _run(seq)[1] == []
    (e,) = _run([*seq, (10.0, sample(tx_prio3_pause_duration=BASE["tx_prio3_pause_duration"] + 6_000_000))])[1]
    assert dict(e.evidence)["ratio_window_s"] == 10.0
