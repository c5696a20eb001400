from __future__ import annotations

import pytest

from agent.config import Thresholds
from agent.detectors import link_flapping
from agent.detectors.observations import LinkObs
from tests.support.detector_replay import replay

KEY = ("0000:1a:00.0", "p0")


def obs(cdc: int | None, *, ifindex: int = 7, carrier: int | None = 1, netdev: str = "net_rail0",
        key: tuple[str, str] = KEY, admin_up: bool | None = None) -> LinkObs:
    return LinkObs(key=key, netdev=netdev, ifindex=ifindex, carrier_down_count=cdc, carrier=carrier,
                   operstate="UP" if carrier else "DOWN", subject="net_rail0", admin_up=admin_up)


def seq_of(*pairs: tuple[float, int | None]) -> list[tuple[float, LinkObs]]:
    return [(t, obs(c)) for t, c in pairs]


CASES = {
    # name: (observations, times at which LinkFlapping fires)
    "steady link": (seq_of((0, 2), (60, 2), (120, 2)), []),
    "one flap": (seq_of((0, 2), (10, 3), (20, 3)), []),
    "two flaps": (seq_of((0, 2), (10, 3), (20, 4)), []),
    "three flaps within the window": (seq_of((0, 2), (10, 3), (20, 4), (30, 5)), [30]),
    "three losses in one delta": (seq_of((0, 2), (60, 5)), [60]),
    "three flaps spread over more than a window": (seq_of((0, 2), (10, 3), (200, 4), (400, 5)), []),
    "counter went down: reset, not losses": (seq_of((0, 9), (10, 0), (20, 0)), []),
    "losses after a reset count from the new baseline": (seq_of((0, 9), (10, 0), (20, 1), (30, 2), (40, 3)), [40]),
    "flapping on: one event per episode": (
        seq_of((0, 0), (10, 1), (20, 2), (30, 3), (40, 4), (100, 5), (250, 6), (500, 7)), [30]),
    "re-arms after a quiet window": (
        seq_of((0, 0), (10, 1), (20, 2), (30, 3), (400, 4), (410, 5), (420, 6)), [30, 420]),
    "still flapping within a window of the last qualifying loss: no re-fire": (
        seq_of((0, 0), (10, 1), (20, 2), (30, 3), (300, 4), (310, 5), (320, 6)), [30]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_link_flapping_table(name: str) -> None:
    seq, fires = CASES[name]
    _, events = replay(link_flapping.step, link_flapping.initial(), seq)
    assert [e.ts for e in events] == fires
    for e in events:
        assert (e.code, e.severity, e.subject) == ("LinkFlapping", "warning", "net_rail0")
        assert dict(e.evidence)["pci"] == KEY[0]


def test_threshold_and_window_are_configurable() -> None:
    th = Thresholds(flap_count=2, flap_window_s=30)
    seq = seq_of((0, 0), (10, 1), (50, 2), (60, 3))
    _, events = replay(link_flapping.step, link_flapping.initial(th), seq)
    assert [e.ts for e in events] == [60]


def test_recreated_netdev_is_a_reset_and_its_bring_up_is_forgiven() -> None:
    seq = [
        (0, obs(4, ifindex=7)),
        (100, obs(5, ifindex=7)),  # the old netdev loses carrier on its way out
        (101, obs(1, ifindex=31)),  # a new netdev for the same function and port, counter restarted
        (103, obs(2, ifindex=31)),  # link training during bring-up
        (110, obs(3, ifindex=31)),
        (112, obs(3, ifindex=31)),
    ]
    state, events = replay(link_flapping.step, link_flapping.initial(), seq)
    assert events == []
    assert state.links[KEY].losses == ()
    # after the grace the new netdev's losses count again
    _, events = replay(link_flapping.step, state, [(200, obs(4, ifindex=31)), (210, obs(5, ifindex=31)),
                                                  (220, obs(6, ifindex=31))])
    assert [e.ts for e in events] == [220]


def test_keyed_by_function_and_port_not_by_name() -> None:
    seq = [(0, obs(0, netdev="eth2")), (10, obs(1, netdev="eth2")), (20, obs(2, netdev="net_rail0")),
           (30, obs(3, netdev="net_rail0"))]
    _, events = replay(link_flapping.step, link_flapping.initial(), seq)
    assert [e.ts for e in events] == [30]
    other = ("0000:1a:00.1", "p1")
    seq = [(0, obs(0)), (10, obs(1)), (20, obs(0, key=other, ifindex=8)), (25, obs(1, key=other, ifindex=8)),
           (30, obs(2))]
    _, events = replay(link_flapping.step, link_flapping.initial(), seq)
    assert events == []


def test_admin_down_is_not_a_carrier_loss() -> None:
    seq = [(0, obs(0)), (10, obs(1, carrier=0, admin_up=False)), (20, obs(1)),
           (30, obs(2, carrier=0, admin_up=False)), (40, obs(2)), (50, obs(3, carrier=0, admin_up=False))]
    _, events = replay(link_flapping.step, link_flapping.initial(), seq)
    assert events == []


def test_without_carrier_down_count_carrier_edges_count() -> None:
    carriers = [1, 0, 1, 0, 0, 1, 0]
    seq = [(10.0 * i, obs(None, carrier=c)) for i, c in enumerate(carriers)]
    _, events = replay(link_flapping.step, link_flapping.initial(), seq)
    assert [e.ts for e in events] == [60]


def test_forgive_drops_recent_losses_and_suppresses_the_grace() -> None:
    state, _ = replay(link_flapping.step, link_flapping.initial(), seq_of((0, 0), (10, 1), (95, 2)))
    state = link_flapping.forgive(state, since=90, now=100)
    assert state.links[KEY].losses == (10,)
    state, events = replay(link_flapping.step, state, seq_of((110, 4)))
    assert events == []
    _, events = replay(link_flapping.step, state, seq_of((140, 5), (150, 6)))
    assert [e.ts for e in events] == [150]


def test_state_is_not_mutated() -> None:
    s0 = link_flapping.initial()
    s1, _ = link_flapping.step(s0, obs(0), 0)
    s2, _ = link_flapping.step(s1, obs(1), 10)
    assert s0.links == {}
    assert s1.links[KEY].losses == ()
    assert s2.links[KEY].losses == (10,)


def test_flap_event_names_the_count_window_and_first_loss() -> None:
    _, events = replay(link_flapping.step, link_flapping.initial(), seq_of((0, 2), (10, 3), (20, 4), (30, 5)))
    (e,) = events
    assert e.message == "net_rail0: 3 carrier losses within 300 s (threshold 3)"
    assert dict(e.evidence) == {"netdev": "net_rail0", "pci": KEY[0], "port": KEY[1], "losses": 3, "window_s": 300.0,
                                "first_loss_ts": 10, "carrier_down_count": 5, "operstate": "UP"}


def test_losses_older_than_the_window_fall_out() -> None:
    th = Thresholds(flap_count=2, flap_window_s=30)
    # 30 s after a loss it is out of the window: the next one alone is one loss
    _, events = replay(link_flapping.step, link_flapping.initial(th), seq_of((0, 0), (10, 1), (40, 2)))
    assert events == []
    _, events = replay(link_flapping.step, link_flapping.initial(th), seq_of((0, 0), (10, 1), (39, 2)))
    assert [e.ts for e in events] == [39]


def test_a_burst_counts_at_most_the_threshold_and_the_episode_ends_after_a_window() -> None:
    th = Thresholds(flap_count=3, flap_window_s=100)
    state, events = replay(link_flapping.step, link_flapping.initial(th), seq_of((0, 0), (10, 50)))
    assert [dict(e.evidence)["losses"] for e in events] == [3]
    assert state.links[KEY].losses == (10, 10, 10)
    _, events = replay(link_flapping.step, state, seq_of((109, 53)))
    assert events == []
    _, events = replay(link_flapping.step, state, seq_of((110, 53)))
    assert [e.ts for e in events] == [110]


def test_the_reload_grace_ends_on_time() -> None:
    th = Thresholds(flap_count=1, reload_grace_s=30)
    state, _ = replay(link_flapping.step, link_flapping.initial(th), [(0, obs(0, ifindex=7)), (100, obs(0, ifindex=9))])
    _, events = replay(link_flapping.step, state, [(129, obs(1, ifindex=9))])
    assert events == []
    _, events = replay(link_flapping.step, state, [(130, obs(1, ifindex=9))])
    assert [e.ts for e in events] == [130]
    # losses the old netdev had before the grace stay
    state, _ = replay(link_flapping.step, link_flapping.initial(Thresholds(flap_count=3, reload_grace_s=30)),
                      [(0, obs(0)), (50, obs(1)), (100, obs(1, ifindex=9))])
    assert state.links[KEY].losses == (50,)


def test_forgive_suppresses_until_the_end_of_the_grace() -> None:
    th = Thresholds(flap_count=1, reload_grace_s=30)
    state, _ = replay(link_flapping.step, link_flapping.initial(th), seq_of((0, 0)))
    state = link_flapping.forgive(state, since=0, now=100)
    _, events = replay(link_flapping.step, state, seq_of((129, 1)))
    assert events == []
    _, events = replay(link_flapping.step, state, seq_of((130, 1)))
    assert [e.ts for e in events] == [130]
    # a second, earlier forgive never shortens the suppression
    assert link_flapping.forgive(link_flapping.forgive(state, 0, 100), 0, 50).suppress_until == 130


def test_a_sample_without_counter_or_carrier_keeps_the_last_known_ones() -> None:
    th = Thresholds(flap_count=1)
    seq = [(0, obs(5)), (10, LinkObs(key=KEY, netdev="net_rail0", subject="net_rail0")), (20, obs(6))]
    _, events = replay(link_flapping.step, link_flapping.initial(th), seq)
    assert [e.ts for e in events] == [20]
    edges = [(0, obs(None, carrier=1)), (10, LinkObs(key=KEY, netdev="net_rail0", ifindex=7)),
             (20, obs(None, carrier=0))]
    _, events = replay(link_flapping.step, link_flapping.initial(th), edges)
    assert [e.ts for e in events] == [20]


def _no_ifindex(cdc: int) -> LinkObs:
    return LinkObs(key=KEY, netdev="net_rail0", carrier_down_count=cdc, carrier=1, subject="net_rail0")


BRING_UP = [(103, obs(2, ifindex=9)), (110, obs(3, ifindex=9)), (112, obs(4, ifindex=9))]


@pytest.mark.parametrize("before", [
    pytest.param([(0, _no_ifindex(4)), (10, obs(4, ifindex=7))], id="first sample without an ifindex"),
    pytest.param([(0, obs(4, ifindex=7)), (10, _no_ifindex(4))], id="a sample without an ifindex in between"),
    pytest.param([(0, obs(0, ifindex=5)), (50, obs(0, ifindex=7))], id="recreated once before"),
])
def test_a_recreation_is_seen_whatever_came_before_it(before) -> None:
    # the losses of the new netdev's bring-up are forgiven
    seq = [*before, (100, obs(1, ifindex=9)), *BRING_UP]
    state, events = replay(link_flapping.step, link_flapping.initial(), seq)
    assert events == []
    assert state.links[KEY].recreated_at == 100


def test_without_carrier_down_count_the_first_edge_of_a_recreated_netdev_counts() -> None:
    th = Thresholds(flap_count=1, reload_grace_s=30)
    seq = [(0, obs(None, ifindex=7, carrier=1)), (100, obs(None, ifindex=9, carrier=1)),
           (200, obs(None, ifindex=9, carrier=0))]
    assert [e.ts for e in replay(link_flapping.step, link_flapping.initial(th), seq)[1]] == [200]


def test_a_recreated_netdev_keeps_its_flapping_episode() -> None:
    # losses at 10, 20, 30 fire; the netdev recreated at 100 goes on flapping after the grace:
    # the same episode, no second event
    seq = [*seq_of((0, 0), (10, 1), (20, 2), (30, 3)), (100, obs(0, ifindex=9)),
           (140, obs(1, ifindex=9)), (150, obs(2, ifindex=9))]
    assert [e.ts for e in replay(link_flapping.step, link_flapping.initial(), seq)[1]] == [30]


def test_a_loss_exactly_a_grace_before_a_recreation_is_the_recreations() -> None:
    th = Thresholds(flap_count=2, reload_grace_s=30)
    seq = [(0, obs(0)), (70, obs(1)), (100, obs(1, ifindex=9)), (140, obs(2, ifindex=9))]
    state, events = replay(link_flapping.step, link_flapping.initial(th), seq)
    assert events == []
    assert state.links[KEY].losses == (140,)


def test_forgive_takes_a_loss_exactly_at_since_as_the_reloads() -> None:
    state, _ = replay(link_flapping.step, link_flapping.initial(), seq_of((0, 0), (10, 1), (95, 2)))
    state = link_flapping.forgive(state, since=95, now=100)
    assert state.links[KEY].losses == (10,)
    assert replay(link_flapping.step, state, seq_of((140, 3)))[1] == []
