"""config: the udev naming rules and the OVS interfaces, read together on a slow interval: they change
with the operators (a new NicInterfaceNameTemplate, an OVS restart), not by the second.

The rules come first in every sample: they say which PCI functions are rails (``provides``), and
the links source reads its rails from them.
"""

from __future__ import annotations

from agent.config import ReadConfig
from agent.host import Host
from agent.readers.common import Notes
from agent.readers.ovs import read_ovs
from agent.readers.source import Context, Part, Source, part
from agent.readers.udev import RuleProblem, read_rules

__all__ = ["SOURCE", "read_config"]


def read_config(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """udev naming rules and OVS interfaces: they change with the operators, not by the second."""
    problems: list[RuleProblem] = []
    rules = read_rules(host, notes, problems)
    ovs = read_ovs(host, cfg.command_timeout_s, notes)
    return part("config", notes, fields={"rules": rules, "ovs": ovs,
                                         "rule_problems": tuple((p.file, p.line, p.why) for p in problems)},
                gives={"rules": rules})


SOURCE = Source("config", "the udev naming rules and OVS interfaces",
                (("ovs-vsctl",),), 60.0, 0.0, ("rules", "ovs", "rule_problems"), read_config,
                order=10, provides=("rules",), roles=frozenset({"boot"}))
