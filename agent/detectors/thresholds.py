"""Every window and threshold the detectors use, in one frozen record the agent maps to flags."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields, replace
from typing import Any

from agent.config import Expectations

__all__ = ["Thresholds"]

_INT_FIELDS = ("flap_count", "config_flap_changes", "lossless_prio")


@dataclass(frozen=True, slots=True)
class Thresholds:
    #: LinkFlapping: this many carrier losses of one rail or uplink ...
    flap_count: int = 3
    #: ... within this many seconds. A flapping link re-arms after a whole window without a
    #: qualifying loss, so one episode gives one event.
    flap_window_s: float = 300.0
    #: ConfigFlapping: this many changes of one value, at least one back to a value it had,
    #: within this many seconds (A -> B -> A is two changes).
    config_flap_changes: int = 2
    config_flap_window_s: float = 600.0
    #: RepresentorStale: a representor for a VF index >= sriov_numvfs older than this.
    representor_grace_s: float = 60.0
    #: The RoCE lossless priority whose pause and discard counters are judged.
    lossless_prio: int = 3
    #: PfcStorm: transmitted pause duration on the lossless prio over wall time ...
    storm_ratio: float = 0.5
    #: ... measured over this many seconds (or between two samples while fewer exist).
    storm_window_s: float = 60.0
    #: PfcStorm / LosslessDrops re-arm after this many seconds without the condition.
    storm_quiet_s: float = 60.0
    drops_quiet_s: float = 60.0
    #: DriverReload: carrier losses and config changes this long after a reload (and since the
    #: sample before it) are the reload's, not flaps.
    reload_grace_s: float = 30.0

    @classmethod
    def from_expectations(cls, exp: Expectations, overrides: Iterable[tuple[str, Any]] = ()) -> Thresholds:
        """The thresholds the doctor also judges by (``--flap-count``, ``--lossless-prio`` ...), then
        ``overrides`` as (field name, value) pairs; an unknown name is a ValueError naming it."""
        base = cls(flap_count=exp.flap_count, flap_window_s=exp.flap_window_s, storm_ratio=exp.storm_ratio,
                   lossless_prio=exp.lossless_prio)
        known = {f.name for f in fields(cls)}
        changes = dict(overrides)
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown detector threshold(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        return replace(base, **changes)

    def __post_init__(self) -> None:
        for name in _INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, float) and value.is_integer():
                # flags and settings may carry every threshold as a float; counts are whole numbers
                object.__setattr__(self, name, int(value))
            elif isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
        if self.flap_count < 1:
            raise ValueError(f"flap_count must be at least 1, got {self.flap_count}")
        if self.config_flap_changes < 2:
            raise ValueError(f"config_flap_changes must be at least 2 (A -> B -> A), got {self.config_flap_changes}")
        if not 0 <= self.lossless_prio <= 7:
            raise ValueError(f"lossless_prio must be 0-7, got {self.lossless_prio}")
        if not 0 < self.storm_ratio <= 1:
            raise ValueError(f"storm_ratio must be in (0, 1], got {self.storm_ratio}")
        for name in ("flap_window_s", "config_flap_window_s", "storm_window_s", "storm_quiet_s",
                     "drops_quiet_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("representor_grace_s", "reload_grace_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
