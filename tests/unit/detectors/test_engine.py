"""The detectors together, on recorded node timelines: a driver reload is one DriverReload event,
not a flood of flaps, config changes, stale representors or counter alarms."""

from __future__ import annotations

import pytest

from agent.config import Expectations
from agent.detectors import (
    ConfigObs,
    CountersObs,
    DriverObs,
    LinkObs,
    RepresentorObs,
    Thresholds,
    initial,
    run,
    step,
)
from agent.findings import EVENT_CODES

RAILS = {  # key -> (netdev, PF handle, ifindex before the reload, after)
    ("0000:1a:00.0", "p0"): ("net_rail0", "pci/0000:1a:00.0", 4, 14),
    ("0000:9a:00.0", "p0"): ("net_rail1", "pci/0000:9a:00.0", 5, 15),
}
SRC_A, SRC_B = "A1B2C3D4E5F60718293A4B5", "F00DCAFE0123456789ABCDE"


def link(key, *, cdc: int, after: bool, carrier: int = 1) -> LinkObs:
    netdev, _, before_idx, after_idx = RAILS[key]
    return LinkObs(key=key, netdev=netdev, ifindex=after_idx if after else before_idx, carrier_down_count=cdc,
                   carrier=carrier, operstate="UP" if carrier else "DOWN", subject=netdev)


def sample(*, src: str, numvfs: int, reps: int, counters_base: int, cdc: int, after: bool,
           driver_first: bool = True) -> list:
    """One periodic sample of the node, as the feed makes it."""
    obs: list = []
    for key, (netdev, pf, _, _) in RAILS.items():
        obs.append(link(key, cdc=cdc, after=after))
        obs.append(ConfigObs(pf, "sriov_numvfs", numvfs))
        obs.append(ConfigObs(pf, "eswitch_mode", "switchdev" if numvfs else "legacy"))
        obs.append(RepresentorObs(pf, numvfs, tuple(range(reps)), tuple(f"{netdev}_{i}" for i in range(reps))))
        # cumulative since the driver loaded: the reload zeroes them, normal PFC activity goes on
        obs.append(CountersObs(netdev, {"tx_prio3_pause_duration": counters_base * 1000,
                                        "rx_prio3_discards": 7 if counters_base >= 5000 else 0,
                                        "tx_pause_storm_error_events": 2 if counters_base >= 5000 else 0},
                               subject=netdev))
    driver = [DriverObs(src, "25.10-1.7.1" if src == SRC_A else "6.8.0-60-generic")]
    return driver + obs if driver_first else obs + driver


def timeline(*, link_events: bool, same_driver: bool = False, driver_first: bool = True) -> list[tuple[float, list]]:
    src_after = SRC_A if same_driver else SRC_B
    out: list[tuple[float, list]] = []
    for t in range(0, 100, 10):
        out.append((float(t), sample(src=SRC_A, numvfs=8, reps=8, counters_base=5000, cdc=1, after=False)))
    if link_events:
        # netlink, within a second: the old netdevs lose carrier on their way out, the new ones
        # appear with fresh counters and train their links
        for key in RAILS:
            out.append((100.0, [link(key, cdc=2, after=False, carrier=0)]))
        for key in RAILS:
            out.append((101.0, [link(key, cdc=1, after=True, carrier=0)]))
        for dt, cdc in ((103.0, 1), (104.0, 2), (106.0, 2), (107.0, 3)):
            for key in RAILS:
                out.append((dt, [link(key, cdc=cdc, after=True, carrier=int(cdc == 1 or dt in (106.0,)))]))
    out.append((110.0, sample(src=src_after, numvfs=0, reps=0, counters_base=0, cdc=3, after=True,
                              driver_first=driver_first)))
    for t in range(120, 400, 10):
        numvfs = 8 if t >= 200 else 0  # the SR-IOV operator restores the VFs a while later
        reps = 8 if t >= 210 else 0
        out.append((float(t), sample(src=src_after, numvfs=numvfs, reps=reps, counters_base=(t - 110),
                                     cdc=3, after=True)))
    return out


def play(tl: list[tuple[float, list]], th: Thresholds | None = None):
    state = initial(th)
    events = []
    for now, batch in tl:
        state, evs = run(state, batch, now)
        events.extend(evs)
    return state, events


@pytest.mark.parametrize(("link_events", "same_driver", "driver_first"), [
    (True, False, True),  # link events first, then the srcversion change in the next sample
    (False, False, True),  # samples only: the srcversion change comes with the recreated netdevs
    (False, False, False),  # ... after the sample's links and config values in the same batch
    (True, True, True),  # the same driver reloaded: srcversion unchanged, every rail recreated
])
def test_driver_reload_is_one_event_and_nothing_else(link_events: bool, same_driver: bool,
                                                    driver_first: bool) -> None:
    _, events = play(timeline(link_events=link_events, same_driver=same_driver, driver_first=driver_first))
    assert [(e.code, e.severity, e.subject) for e in events] == [("DriverReload", "info", "node")]
    ev = dict(events[0].evidence)
    if link_events:
        assert events[0].ts == 101.0
    if link_events or not driver_first:
        assert ev["reason"] == "netdevs recreated"
    else:
        assert ev["reason"] == "srcversion changed"
        assert (ev["old_srcversion"], ev["new_srcversion"]) == (SRC_A, SRC_B)


def test_without_the_reload_the_same_changes_are_flaps() -> None:
    """The control: the same config fight and carrier losses, without a reload, do fire."""
    th = Thresholds()
    state = initial(th)
    key = next(iter(RAILS))
    seq = [(0.0, link(key, cdc=1, after=False)), (10.0, link(key, cdc=2, after=False)),
           (20.0, link(key, cdc=3, after=False)), (30.0, link(key, cdc=4, after=False)),
           (0.0, ConfigObs("pci/0000:1a:00.0", "eswitch_mode", "switchdev")),
           (110.0, ConfigObs("pci/0000:1a:00.0", "eswitch_mode", "legacy")),
           (200.0, ConfigObs("pci/0000:1a:00.0", "eswitch_mode", "switchdev"))]
    codes = []
    for now, obs in seq:
        state, evs = step(state, obs, now)
        codes.extend((e.code, e.ts) for e in evs)
    assert codes == [("LinkFlapping", 30.0), ("ConfigFlapping", 200.0)]


def test_one_rail_recreated_is_not_a_driver_reload() -> None:
    key = next(iter(RAILS))
    tl = [(0.0, [link(k, cdc=1, after=False) for k in RAILS]),
          (50.0, [link(key, cdc=1, after=True)]),
          (60.0, [link(key, cdc=1, after=True)])]
    _, events = play(tl)
    assert events == []


def test_every_event_code_is_registered() -> None:
    _, events = play(timeline(link_events=True))
    assert {e.code for e in events} <= set(EVENT_CODES)
    assert EVENT_CODES["DriverReload"] == "info"


def test_unknown_observation_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^not an observation: object$"):
        step(initial(), object(), 0.0)  # type: ignore[arg-type]


def test_thresholds_from_expectations_and_overrides() -> None:
    th = Thresholds.from_expectations(Expectations(flap_count=5, lossless_prio=4, storm_ratio=0.7),
                                      [("reload_grace_s", 45.0), ("config_flap_changes", 3.0)])
    assert (th.flap_count, th.lossless_prio, th.storm_ratio, th.reload_grace_s, th.config_flap_changes) == \
        (5, 4, 0.7, 45.0, 3)
    assert isinstance(th.config_flap_changes, int)
    with pytest.raises(ValueError, match=r"unknown detector threshold.*flap_cnt"):
        Thresholds.from_expectations(Expectations(), [("flap_cnt", 3)])
    with pytest.raises(ValueError, match="flap_count must be a whole number"):
        Thresholds(flap_count=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lossless_prio"):
        Thresholds(lossless_prio=9)


KEY0 = next(iter(RAILS))


def _feed(seq, th: Thresholds | None = None):
    state = initial(th)
    events = []
    for now, obs in seq:
        state, evs = step(state, obs, now)
        events.extend((e.code, e.ts) for e in evs)
    return state, events


def test_a_reload_forgives_the_losses_since_the_driver_was_last_seen_fine() -> None:
    # srcversion read fine at 100, changed at 160: the loss at 110 was the reload's, the one at 50 was not
    before = [(0.0, DriverObs(SRC_A)), (0.0, link(KEY0, cdc=0, after=False)), (50.0, link(KEY0, cdc=1, after=False)),
              (100.0, DriverObs(SRC_A)), (110.0, link(KEY0, cdc=2, after=False))]
    state, events = _feed([*before, (160.0, DriverObs(SRC_B))])
    assert events == [("DriverReload", 160.0)]
    assert state.link.links[KEY0].losses == (50.0,)
    # without the reload the same losses and one more are a flap
    assert _feed([*before, (200.0, link(KEY0, cdc=3, after=False))])[1] == [("LinkFlapping", 200.0)]


def test_a_first_reload_forgives_the_grace_before_it() -> None:
    th = Thresholds(reload_grace_s=30)
    other = ("0000:9a:00.0", "p0")
    seq = [(0.0, link(KEY0, cdc=0, after=False)), (0.0, link(other, cdc=0, after=False)),
           (40.0, link(KEY0, cdc=1, after=False)), (75.0, link(KEY0, cdc=2, after=False)),
           (80.0, link(KEY0, cdc=0, after=True)), (81.0, link(other, cdc=0, after=True))]
    state, events = _feed(seq, th)
    assert events == [("DriverReload", 81.0)]
    assert state.link.links[KEY0].losses == (40.0,)
    # the config detector takes the grace after the reload as the new baseline
    assert state.config.suppress_until == 111.0


def test_counters_feed_both_pfc_detectors_storm_first() -> None:
    seq = [(0.0, CountersObs("net_rail0", {"tx_pause_storm_error_events": 0, "rx_prio3_discards": 0})),
           (1.0, CountersObs("net_rail0", {"tx_pause_storm_error_events": 1, "rx_prio3_discards": 4}))]
    assert _feed(seq)[1] == [("PfcStorm", 1.0), ("LosslessDrops", 1.0)]


def test_representor_and_health_observations_reach_their_detectors() -> None:
    from agent.detectors import HealthObs

    th = Thresholds(representor_grace_s=0)
    seq = [(0.0, RepresentorObs("pci/0000:1a:00.0", 0, (0,), ("net_rail0_0",))),
           (0.0, HealthObs("pci/0000:1a:00.0", "fw", "pci/0000:1a:00.0", "healthy", 0)),
           (9.0, HealthObs("pci/0000:1a:00.0", "fw", "pci/0000:1a:00.0", "healthy", 1))]
    assert _feed(seq, th)[1] == [("RepresentorStale", 0.0), ("NicHealthError", 9.0)]


def test_run_feeds_a_batch_in_order_at_one_time() -> None:
    batch = [CountersObs("net_rail0", {"rx_prio3_discards": 0}), CountersObs("net_rail0", {"rx_prio3_discards": 2})]
    _, events = run(initial(), batch, 5.0)
    assert [(e.code, e.ts) for e in events] == [("LosslessDrops", 5.0)]


def test_the_engine_gives_its_thresholds_to_every_detector() -> None:
    th = Thresholds(flap_count=5, lossless_prio=4, reload_grace_s=45.0)
    state = initial(th)
    parts = (state.link, state.config, state.representors, state.storm, state.drops, state.driver, state.health)
    assert state.th == th
    assert all(p.th == th for p in parts)


def test_a_representor_leak_is_judged_across_samples() -> None:
    leak = RepresentorObs("pci/0000:1a:00.0", 0, (0,), ("net_rail0_0",))
    assert _feed([(0.0, leak), (30.0, leak), (60.0, leak)])[1] == [("RepresentorStale", 60.0)]


def test_a_reload_forgives_the_whole_grace_before_it_even_when_the_driver_was_seen_within_it() -> None:
    th = Thresholds(reload_grace_s=30)
    # losses at 75 and 80; the driver read fine at 90 and changed at 100: both losses were the reload's
    seq = [(0.0, DriverObs(SRC_A)), (0.0, link(KEY0, cdc=0, after=False)), (75.0, link(KEY0, cdc=1, after=False)),
           (80.0, link(KEY0, cdc=2, after=False)), (90.0, DriverObs(SRC_A)), (100.0, DriverObs(SRC_B)),
           (140.0, link(KEY0, cdc=3, after=False))]
    state, events = _feed(seq, th)
    assert events == [("DriverReload", 100.0)]
    assert state.link.links[KEY0].losses == (140.0,)


def test_a_reload_seen_before_any_driver_sample_forgives_the_grace_before_it() -> None:
    th = Thresholds(reload_grace_s=30)
    other = ("0000:9a:00.0", "p0")
    # KEY0 recreated at 100 and losing carrier at 130, once its own recreation grace is over; the
    # other rail recreated at 130 makes it a reload, whose grace the loss at 130 is in
    seq = [(0.0, link(KEY0, cdc=0, after=False)), (0.0, link(other, cdc=0, after=False)),
           (100.0, link(KEY0, cdc=0, after=True)), (130.0, link(KEY0, cdc=1, after=True)),
           (130.0, link(other, cdc=0, after=True)), (170.0, link(KEY0, cdc=2, after=True)),
           (180.0, link(KEY0, cdc=3, after=True))]
    state, events = _feed(seq, th)
    assert events == [("DriverReload", 130.0)]
    assert state.link.links[KEY0].losses == (170.0, 180.0)
