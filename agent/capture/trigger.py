"""When a detector event captures a bundle (DESIGN §6): only configured codes (``--capture-on``),
and at most one capture per code and node per cooldown (``--capture-cooldown``), so that a storm of
events is one bundle. Pure: the clock is an argument."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CaptureTrigger"]


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
