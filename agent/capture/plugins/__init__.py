"""The capture plug-ins (docs/design.md §7), one module per plug-in, each declaring ``PLUGIN`` (and, when a
plug-in applies only to some nodes, ``skip(ctx) -> reason | None``). ``replay`` runs first: the
others expand their ``{rail}`` / ``{pf}`` / ``{handle}`` steps from what its readers found."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["PLUGINS", "load"]

PLUGINS: tuple[str, ...] = ("replay", "networking", "devlink", "rdma", "ethtool", "dcb", "ovs", "sriov",
                            "udev", "kernel", "drivers", "processes", "agent")


def load(names: tuple[str, ...] = PLUGINS) -> list[ModuleType]:
    return [importlib.import_module(f"agent.capture.plugins.{n}") for n in names]
