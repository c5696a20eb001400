"""A known link's record follows its link messages between two dumps (agent/service/link_state.py).

The links dump runs every 15 s; without this a rail's ``railscope_rail_up`` and ``RailLinkDown``
lagged its cable by up to that long, and its carrier counters missed the flaps in between.
"""

from __future__ import annotations

from agent.host.netlink.link_events import LinkNote
from agent.model import Link
from agent.service.link_state import LinkState

T0 = 1000.0


def _dump() -> tuple[Link, ...]:
    return (Link(1, "lo", operstate="UNKNOWN", carrier=1),
            Link(4, "net_rail0", operstate="UP", carrier=1, carrier_changes=2, carrier_up_count=1,
                 carrier_down_count=1, mtu=9000, stats64=(("rx_packets", 5),)),
            Link(5, "eth9", operstate="UP", carrier=1, carrier_changes=2, carrier_up_count=1, carrier_down_count=1))


def _note(ts: float, downs: int, carrier: int, ifindex: int = 4, name: str = "net_rail0") -> LinkNote:
    return LinkNote(ts=ts, ifindex=ifindex, ifname=name, deleted=False, admin_up=True,
                    operstate="UP" if carrier else "LOWERLAYERDOWN", carrier=carrier, carrier_down_count=downs,
                    carrier_up_count=downs - 1 + carrier, carrier_changes=2 * downs - 1 + carrier)


def _state() -> tuple[LinkState, tuple[Link, ...]]:
    st = LinkState()
    return st, st.on_dump(_dump(), rails=("net_rail0",), started=T0 - 1)


def test_a_rails_message_updates_its_record_and_asks_for_no_read() -> None:
    st, links = _state()
    out = st.on_notes([_note(T0, downs=2, carrier=0)], links)
    assert not out.unknown and out.rail_changed and out.links is not None
    rail = out.links[1]
    assert (rail.operstate, rail.carrier, rail.carrier_down_count, rail.carrier_up_count, rail.carrier_changes) == \
        ("LOWERLAYERDOWN", 0, 2, 1, 3)
    assert not rail.is_oper_up
    assert (rail.mtu, rail.stats64) == (9000, (("rx_packets", 5),))  # what the message does not carry stays
    assert out.links[0] is links[0] and out.links[2] is links[2]
    assert st.last_rail_change == (T0, "net_rail0", False)


def test_a_burst_coalesced_into_its_last_message_keeps_the_last_state_and_every_loss() -> None:
    st, links = _state()
    # four flaps; the watcher's queue kept the newest message only (its counters are cumulative)
    out = st.on_notes([_note(T0 + 4, downs=5, carrier=1)], links)
    assert out.links is not None
    rail = out.links[1]
    assert (rail.operstate, rail.carrier, rail.carrier_down_count, rail.carrier_up_count) == ("UP", 1, 5, 5)
    assert out.rail_changed  # the counters moved: carrier_down_changes_total must follow
    assert st.last_rail_change is None  # up before, up after: no change of state to wait out


def test_a_message_that_changes_nothing_patches_nothing() -> None:
    st, links = _state()
    out = st.on_notes([_note(T0, downs=1, carrier=1)], links)
    assert out.links is None and not out.rail_changed and not out.unknown


def test_a_non_rail_link_is_patched_without_judging_the_rails_again() -> None:
    st, links = _state()
    out = st.on_notes([_note(T0, downs=2, carrier=0, ifindex=5, name="eth9")], links)
    assert out.links is not None and out.links[2].carrier == 0
    assert not out.rail_changed and st.last_rail_change is None


def test_a_renamed_link_asks_for_a_read_and_is_not_patched() -> None:
    st, links = _state()
    out = st.on_notes([_note(T0, downs=2, carrier=0, name="eth4")], links)
    assert out.unknown and out.links is None


def test_a_dump_started_before_a_message_does_not_put_the_old_state_back() -> None:
    st, links = _state()
    out = st.on_notes([_note(T0, downs=2, carrier=0)], links)
    assert out.links is not None
    # a dump asked for just before the carrier dropped, answered with the rail still up
    again = st.on_dump(_dump(), rails=("net_rail0",), started=T0 - 0.01)
    rail = again[1]
    assert (rail.carrier, rail.operstate, rail.carrier_down_count) == (0, "LOWERLAYERDOWN", 2)
    # a dump asked for after the message is the newer word, and the message is forgotten
    later = st.on_dump(_dump(), rails=("net_rail0",), started=T0 + 0.5)
    assert later[1] == _dump()[1]
    assert st.on_dump(_dump(), rails=("net_rail0",), started=T0 - 0.01)[1] == _dump()[1]
