"""The links re-read gap: link events inside it are deferred to its end, never dropped.

The agent's clock and scheduler are injected, and its links timer is replaced by one that only
counts pokes, so the test steps time exactly and reads no host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from agent.config import AgentSettings
from agent.host.netlink.link_events import LinkNote
from agent.service.daemon import _RESAMPLE_GAP_S, Agent

T0 = 1000.0


@dataclass
class _Call:
    when: float
    fn: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class _FakeTime:
    now: float = T0
    calls: list[_Call] = field(default_factory=list)
    most_pending: int = 0

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay: float, fn: Callable[[], None]) -> _Call:
        assert delay > 0
        call = _Call(self.now + delay, fn)
        self.calls.append(call)
        self.most_pending = max(self.most_pending, len(self.pending()))
        return call

    def advance(self, to: float) -> None:
        """Run what is due up to ``to``, in time order, as an event loop would."""
        while True:
            due = [c for c in self.calls if not c.cancelled and c.when <= to]
            if not due:
                break
            call = min(due, key=lambda c: c.when)
            self.calls.remove(call)
            self.now = call.when
            call.fn()
        self.now = to

    def pending(self) -> list[_Call]:
        return [c for c in self.calls if not c.cancelled]


class _Timer:
    def __init__(self, clock: _FakeTime) -> None:
        self._clock = clock
        self.pokes: list[float] = []

    def poke(self) -> None:
        self.pokes.append(self._clock.now)


def _agent() -> tuple[Agent, _FakeTime, _Timer]:
    fake = _FakeTime()
    agent = Agent(AgentSettings(watch_links=False, recorder_window_s=0), host_factory=lambda: None,  # type: ignore[arg-type,return-value]
                  monotonic=fake.monotonic, call_later=fake.call_later)
    links = _Timer(fake)
    agent.sampling.scheduler.timers["links"] = links  # type: ignore[assignment]
    return agent, fake, links


def _note(ifindex: int, *, deleted: bool = False) -> LinkNote:
    return LinkNote(ts=0.0, ifindex=ifindex, ifname=f"eth{ifindex}", deleted=deleted)


def test_an_event_inside_the_gap_is_read_when_the_gap_ends() -> None:
    agent, fake, links = _agent()
    agent._on_notes([_note(10)])
    assert links.pokes == [T0]
    fake.advance(T0 + 0.5)
    agent._on_notes([_note(10, deleted=True)])
    assert links.pokes == [T0]  # still inside the gap: not now...
    fake.advance(T0 + 10.0)
    assert links.pokes == [T0, T0 + _RESAMPLE_GAP_S]  # ...but at its end, not at the periodic read
    assert fake.pending() == []


def test_a_storm_gives_one_read_per_gap_and_covers_its_last_event() -> None:
    agent, fake, links = _agent()
    last_event = T0
    for i in range(200):  # an event every 50 ms for 10 s
        last_event = T0 + i * 0.05
        fake.advance(last_event)
        agent._on_notes([_note(100 + i)])
    fake.advance(last_event + 10.0)
    gaps = [b - a for a, b in zip(links.pokes, links.pokes[1:], strict=False)]
    assert all(g >= _RESAMPLE_GAP_S for g in gaps), gaps
    assert len(links.pokes) <= 10.0 / _RESAMPLE_GAP_S + 2
    assert links.pokes[-1] >= last_event  # the storm's last change is read, not left to the periodic read
    assert fake.most_pending == 1  # one deferral covers its whole gap


def test_an_overrun_reads_at_once_and_takes_the_deferred_read_with_it() -> None:
    agent, fake, links = _agent()
    agent._on_notes([_note(10)])
    fake.advance(T0 + 0.5)
    agent._on_notes([_note(11)])
    assert len(fake.pending()) == 1
    fake.advance(T0 + 1.0)
    agent.links_debounce.poke(True)  # the watcher lost messages: read now whatever the gap
    assert links.pokes == [T0, T0 + 1.0]
    assert fake.pending() == []  # the read just asked for covers the deferred events
    fake.advance(T0 + 10.0)
    assert links.pokes == [T0, T0 + 1.0]


def test_events_for_known_links_ask_for_no_read() -> None:
    agent, fake, links = _agent()
    agent.links.known_ifindexes = {10}
    agent._on_notes([_note(10)])
    fake.advance(T0 + 10.0)
    assert links.pokes == []
    assert fake.calls == []
