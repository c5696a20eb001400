"""The registry's sources sampled in the background, and their latest parts (docs/design.md §1: the daemon
names no source; what it needs of one is a declared role).

Each source reads the node in its own daemon thread through its own host (a ``LiveHost`` each: a
netlink socket is never shared between threads), wrapped in a ``TrackedHost`` that takes the firmware
gate and notes the device it is on (a read that hangs is reported by device). The parts come back to
the event loop (``on_part``); the latest of each is kept here and composed into the snapshot.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any

from agent.config import AgentSettings
from agent.host import Host
from agent.host.firmware import FirmwareGate
from agent.metrics.state import HungSource, SourceStatus
from agent.model import Snapshot
from agent.readers import sources as registry
from agent.readers.common import Notes
from agent.readers.links import LinkCache
from agent.service.scheduler import Scheduler, SourceState
from agent.service.tracked_host import Progress, TrackedHost

__all__ = ["Sampling"]

log = logging.getLogger("railscope.agent")


class Sampling:
    def __init__(self, settings: AgentSettings, host_factory: Callable[[], Host], *,
                 on_part: Callable[[registry.Part], None], rdma_ports: Callable[[], Mapping[str, Any]],
                 clock: Callable[[], float]) -> None:
        """``on_part`` takes each read's part on the event loop; ``rdma_ports`` are the rails' RDMA ports
        as the link state knows them (a context of the reads)."""
        self.settings = settings
        self.clock = clock
        self._host_factory = host_factory
        self._rdma_ports = rdma_ports
        self.sources = tuple(s for s in registry.SOURCES if s.name not in settings.disabled)
        self.intervals = {s.name: settings.interval_s(s.name, s.interval_s) for s in self.sources}
        # the roles of docs/design.md §1's registry (agent.readers.source.ROLES), by name
        self.roles = {r: tuple(s.name for s in registry.with_role(r)) for r in registry.ROLES}
        self.recorder_sources = frozenset(self.roles["recorder"])
        #: the source of the netlink link dump (the links every other part is keyed by)
        self.dump = next((s.name for s in registry.SOURCES if s.netlink), None)
        self.parts: dict[str, registry.Part] = {}
        #: when the last links read started (unix s; set in its thread before its part reaches the loop)
        self.links_started: float | None = None
        self._disabled_notes = tuple((name, "disabled (--disable-source)") for name in sorted(settings.disabled))
        self._link_cache = LinkCache()
        #: one firmware read at a time per PCI function: the samplers and every capture take it
        self.firmware = FirmwareGate()
        self._progress = {src.name: Progress() for src in self.sources}
        self._hosts: dict[str, Host] = {}
        self.scheduler = Scheduler(self.sources, self.intervals, run=self._read, on_done=on_part,
                                   deadline_s=settings.source_deadline_s,
                                   current_device=lambda name: self._progress[name].get)

    @property
    def states(self) -> dict[str, SourceState]:
        return self.scheduler.states

    # -- lifecycle ---------------------------------------------------------------------------
    async def boot(self, spawn: Callable[[Coroutine[Any, Any, Any], str], Any]) -> None:
        """First sample in registry order (rules before links, links before the rest); a source that
        hangs at boot delays the others by at most its deadline."""
        deadline = self.settings.source_deadline_s
        for src in self.sources:
            timer = self.scheduler.timers[src.name]
            spawn(timer.drive(), f"railscope-{src.name}")
            if src.name in self.roles["boot"]:
                try:
                    async with asyncio.timeout(deadline + 1.0):
                        await timer.first_done.wait()
                except TimeoutError:
                    log.warning("first sample late", extra={"source": src.name})

    def close(self) -> None:
        self.scheduler.close()
        for host in list(self._hosts.values()):
            try:
                host.close()
            except Exception:  # closing a socket of a lane stuck in the kernel may fail; exit anyway
                log.debug("closing a host failed", exc_info=True)

    def poke(self, names: tuple[str, ...]) -> None:
        for name in names:
            self.scheduler.poke(name)

    # -- the reads (worker threads) ------------------------------------------------------------
    def _host(self, src: str) -> Host:
        host = self._hosts.get(src)
        if host is None:
            host = self._hosts[src] = TrackedHost(self._host_factory(), self._progress[src], self.firmware)
        return host

    def _context(self) -> registry.Context:
        ctx = registry.Context(rdma_ports=dict(self._rdma_ports()), link_cache=self._link_cache, recorder=True)
        for src in registry.SOURCES:
            part = self.parts.get(src.name)
            if part is not None:
                ctx = registry.after(ctx, part)
        return ctx

    def _read(self, src: registry.Source) -> registry.Part:
        if src.name == self.dump:
            # when the dump was asked for: link messages read after it may be newer than its answer
            self.links_started = self.clock()
        return src.read(self._host(src.name), self.settings.read, self._context(), Notes())

    # -- the parts (event loop) ----------------------------------------------------------------
    def links(self) -> registry.Part | None:
        """The latest part of the link dump."""
        return self.parts.get(self.dump) if self.dump else None

    def compose(self, previous: Snapshot | None) -> Snapshot:
        snap = registry.compose(previous, self.parts)
        if self._disabled_notes:
            snap = replace(snap, unavailable=snap.unavailable + self._disabled_notes)
        if self.settings.node:
            snap = replace(snap, node=self.settings.node)
        return snap

    def hung_tools(self) -> frozenset[tuple[str, str]]:
        """(tool, device) of every hung read, for a capture to skip."""
        tools = {s.name: s.tools for s in self.sources}
        out = set()
        for src, st in self.states.items():
            for dev in st.hung:
                out.update((tool, dev) for tool in tools.get(src, ()))
        return frozenset(out)

    def status(self) -> tuple[list[SourceStatus], list[HungSource]]:
        """What ``railscope_source_*`` says of each source: its last run, and the reads hung in it."""
        sources, hung = [], []
        for src, st in self.states.items():
            if st.runs:
                sources.append(SourceStatus(src, bool(st.last_success), st.last_duration_s or 0.0))
            hung.extend(HungSource(src, dev) for dev in sorted(st.hung))
        return sources, hung

    def waiting_for(self) -> list[str]:
        """The boot sources that have not read once yet."""
        states = self.states
        return [src for src in self.roles["boot"] if src in states and not states[src].runs]
