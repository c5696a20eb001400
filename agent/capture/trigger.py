"""When a detector event captures a bundle (docs/design.md §6): only configured codes (``--capture-on``),
and at most one capture per code and node per cooldown (``--capture-cooldown``), so that a storm of
events is one bundle; and when the capture may start (``settle_wait``). Pure: the clock is an argument.

An event capture waits until the rails' links have settled before it snapshots the node. A
``LinkFlapping`` fires at a carrier loss, often with the cable already on its way back: a bundle
snapshotted at once replays to a ``RailLinkDown`` that was over a moment later, and the bundle's
headline is a rail that is in fact up, while the flaps themselves are in its ``events.json`` and
``recorder.jsonl`` anyway. So the capture waits until no rail's operstate or carrier changed for
``SETTLE_S``, at most ``SETTLE_MAX_S`` (a rail that never stops flapping is captured as it is, and the
manifest says so; ``agent.capture.manifest.settle_note``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SETTLE_MAX_S", "SETTLE_S", "CaptureTrigger", "settle_wait"]

#: quiet needed before an event capture snapshots: twice the 1 s the kernel's linkwatch may take to
#: move operstate after carrier (net/core/link_watch.c), so a flap's way back has been seen
SETTLE_S = 2.0
#: the longest an event capture waits for the links to settle
SETTLE_MAX_S = 30.0


@dataclass
class CaptureTrigger:
    codes: frozenset[str] = frozenset()
    cooldown_s: float = 600.0
    #: (code, node) -> when its last capture was started
    last: dict[tuple[str, str], float] = field(default_factory=dict)

    def wants(self, code: str, node: str, now: float) -> bool:
        """True (and the cooldown starts) when an event of ``code`` on ``node`` should capture now."""
        if code not in self.codes:
            return False
        key = (code, node)
        prev = self.last.get(key)
        if prev is not None and now - prev < self.cooldown_s:
            return False
        self.last[key] = now
        return True


def settle_wait(last_change: float | None, now: float, since: float, quiet_s: float = SETTLE_S,
                max_s: float = SETTLE_MAX_S) -> float:
    """Seconds an event capture that began waiting at ``since`` still waits at ``now``: until ``quiet_s``
    after the rails' ``last_change`` (None: none seen), and never past ``since + max_s``."""
    if last_change is None:
        return 0.0
    return max(0.0, min(last_change + quiet_s, since + max_s) - now)
