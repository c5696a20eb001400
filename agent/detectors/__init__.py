"""Detectors: pure state machines ``step(state, observation, now) -> (state, events)`` (DESIGN §6).

No pyroute2, no subprocess, no file access, no clock: the watcher passes the time in, so every
detector is tested on recorded observation sequences.
"""

from agent.config import Thresholds
from agent.detectors.engine import DetectorState, initial, run, step
from agent.detectors.observations import (
    ConfigObs,
    CountersObs,
    DriverObs,
    HealthObs,
    LinkObs,
    Obs,
    RepresentorObs,
)

__all__ = [
    "ConfigObs",
    "CountersObs",
    "DetectorState",
    "DriverObs",
    "HealthObs",
    "LinkObs",
    "Obs",
    "RepresentorObs",
    "Thresholds",
    "initial",
    "run",
    "step",
]
