"""Detectors: pure state machines ``step(state, observation, now) -> (state, events)`` (docs/design.md §6).

No pyroute2, no subprocess, no file access (``os``, ``pathlib``, ``io``), no clock (``time``,
``datetime``): the watcher passes the time in, so every detector is tested on recorded observation
sequences. Of the project, the same allow-list as the analysis (tests/unit/test_import_rules.py).
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
