"""The running agent: the registry's sources sampled in the background, detectors, events, the
flight recorder — wired together. Each job has its own module: ``scheduler`` (the sources' timers and
threads), ``link_state`` (what link messages mean to the detectors and to the links' records),
``debounce`` (re-read gaps), ``events`` (the event log), ``capture`` (node images),
``app`` (HTTP).

Threads and where state lives:

- each source of ``agent/readers/sources.py`` reads the node in its own daemon thread through its own
  ``LiveHost`` (a netlink socket is never shared between threads);
- the link listener thread reads rtnetlink events into a bounded, coalescing queue;
- the devlink listener thread turns devlink notifications into devlink reads;
- the analysis thread runs the pipeline (topology, diagnosis) of each new snapshot;
- everything else — the latest parts, the detector state, the hung marks — is touched only on the
  event loop, so nothing there needs a lock. ``EventLog`` and ``FlightRecorder`` are thread-safe
  because a capture reads them from its own thread.

The scrape renders the latest state; it never waits for a source.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from prometheus_client import generate_latest

from agent.analysis import pipeline
from agent.analysis.checks.degradation import RATE_COUNTERS
from agent.analysis.topology import Topology
from agent.capture.job import Job
from agent.capture.recorder import FlightRecorder, incident_counters
from agent.clients.collector import CallOutcomes, CollectorClient
from agent.config import AgentSettings, Thresholds
from agent.detectors import daemon_restarts, engine
from agent.detectors import degradation as degradation_events
from agent.detectors.feed import RESTARTS_FIELD, observations_from_snapshot
from agent.detectors.observations import CountersObs
from agent.findings import EVENT_CODES, Diagnosis
from agent.host import Host
from agent.host.firmware import FirmwareGate
from agent.host.netlink.devlink_events import DevlinkWatcher
from agent.host.netlink.link_events import LinkNote, LinkWatcher
from agent.metrics.exposition import CONTENT_TYPE, make_registry
from agent.metrics.state import HungSource, MetricsState, SourceStatus
from agent.model import Event, Snapshot
from agent.readers import sources as registry
from agent.readers.common import Notes
from agent.readers.counters import TRAFFIC
from agent.readers.history import History, Recorder, Sample
from agent.readers.kernel_table import load_kernel_table
from agent.readers.links import LinkCache
from agent.service.capture import CaptureFailed, ImageBusy, ImageCapture
from agent.service.coalesce import CoalescingQueue
from agent.service.debounce import Debouncer, Handle
from agent.service.events import EventLog
from agent.service.link_state import LinkState
from agent.service.pull import Captured, RequestPuller, RunFn, SpoolUploader
from agent.service.scheduler import Lane, Scheduler, SourceState
from agent.service.selfmetrics import AgentCollector
from agent.service.tracked_host import Progress, TrackedHost

__all__ = ["Agent", "CaptureFailed", "ImageBusy"]

log = logging.getLogger("railscope.agent")
events_log = logging.getLogger("railscope.agent.events")

#: a link event for a link the agent does not know yet asks for a links sample, at most this often
_RESAMPLE_GAP_S = 2.0
#: a representor or uplink appearing or going asks for devlink and rdma reads, at most this often
_PORTS_RESAMPLE_GAP_S = 30.0
#: link notes handled per turn of the event loop, so that a storm never starves the scrape
_DRAIN_BATCH = 512


class Agent:
    ImageBusy = ImageBusy
    CaptureFailed = CaptureFailed

    def __init__(self, settings: AgentSettings, *, host_factory: Callable[[], Host] | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 call_later: Callable[[float, Callable[[], None]], Handle] | None = None) -> None:
        """``monotonic`` and ``call_later`` (default: the running loop's) time the re-read gaps."""
        self.settings = settings
        self.clock = clock
        if host_factory is None:
            from agent.host.live import LiveHost

            def host_factory() -> Host:
                return LiveHost(settings.host_root, command_timeout_s=settings.command_timeout_s)
        self._host_factory = host_factory
        self.sources = tuple(s for s in registry.SOURCES if s.name not in settings.disabled)
        intervals = {s.name: settings.interval_s(s.name, s.interval_s) for s in self.sources}
        # the roles of DESIGN §1's registry (agent.readers.source.ROLES), by name: the daemon names no source
        role = {r: tuple(s.name for s in registry.with_role(r)) for r in registry.ROLES}
        self._boot_sources = role["boot"]
        self._recorder_sources = frozenset(role["recorder"])
        self._dump = next((s.name for s in registry.SOURCES if s.netlink), None)
        self.thresholds = Thresholds(lossless_prio=settings.expectations.lossless_prio,
                                     **dict(settings.thresholds))
        self.events = EventLog(settings.event_history)
        self._degradation = degradation_events.initial()
        self.recorder: FlightRecorder | None = None
        if settings.recorder_window_s > 0:
            self.recorder = FlightRecorder(incident_counters(settings.expectations.lossless_prio) + TRAFFIC,
                                           window_s=settings.recorder_window_s,
                                           interval_s=min((intervals[n] for n in role["recorder"] if n in intervals),
                                                          default=1.0))
        self.queue: CoalescingQueue[LinkNote] = CoalescingQueue(settings.event_queue)
        self.watcher: LinkWatcher | None = None
        self.devlink_watcher: DevlinkWatcher | None = None
        self.detectors = engine.initial(self.thresholds)
        self._kernel_table = load_kernel_table(settings.expectations.kernel_table_file)
        self._rep_include = re.compile(settings.representor_include) if settings.representor_include else None

        self._parts: dict[str, registry.Part] = {}
        self.restarts = daemon_restarts.RestartState()
        # How the calls to the collector ended (uploads, polls, done): railscope_agent_collector_calls_total.
        self.collector_outcomes = CallOutcomes()
        self.budget: Any = None
        self.snapshot: Snapshot | None = None
        self.topology: Topology | None = None
        self.diagnosis: Diagnosis | None = None
        self.links = LinkState()
        #: when the last links read started (unix s; set in its thread before its part reaches the loop)
        self._links_started: float | None = None
        self._disabled_notes = tuple((name, "disabled (--disable-source)") for name in sorted(settings.disabled))

        debounce = {"monotonic": monotonic, "call_later": call_later}
        self.links_debounce = Debouncer(_RESAMPLE_GAP_S, partial(self._poke, role["link-events"]), **debounce)
        self.devlink_debounce = Debouncer(_RESAMPLE_GAP_S, partial(self._poke, role["devlink-events"]), **debounce)
        self.ports_debounce = Debouncer(_PORTS_RESAMPLE_GAP_S, partial(self._poke, role["ports"]), **debounce)

        self._link_cache = LinkCache()
        #: one firmware read at a time per PCI function: the samplers and every capture take it
        self.firmware = FirmwareGate()
        self._progress = {src.name: Progress() for src in self.sources}
        self.scheduler = Scheduler(self.sources, intervals, run=self._read, on_done=self._on_part,
                                   deadline_s=settings.source_deadline_s,
                                   current_device=lambda name: self._progress[name].get)
        self.capture = ImageCapture(settings, host_factory, self.firmware, self.events, self.recorder, clock,
                                    hung_tools=self._hung_tools, rail_change=lambda: self.links.last_rail_change)
        #: the collector's one client in the daemon: the spool upload and the request puller share
        #: its session (its token file is read before every request)
        self.collector: CollectorClient | None = None
        if settings.collector_url:
            self.collector = CollectorClient(settings.collector_url, token_file=settings.collector_token_file,
                                             token_flag="--collector-token-file", outcomes=self.collector_outcomes,
                                             ca_file=settings.collector_ca_file)
        #: the spool upload, beside the request puller: the keys it stored are the ones requests reuse
        self.uploader: SpoolUploader | None = None
        if self.collector is not None and self.capture.spool is not None:
            self.uploader = SpoolUploader(self.capture.spool, self.collector, interval_s=settings.upload_interval_s,
                                          clock=clock)
        self._lanes: dict[str, Lane] = {}
        self._hosts: dict[str, Host] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._wake: asyncio.Event | None = None
        self._analysis_dirty = False
        self._analysis_running = False
        self._render_fut: asyncio.Future[bytes] | None = None
        self._image_lock: asyncio.Lock | None = None
        self.ready = False
        self.started_at = clock()
        self.registry = make_registry(self.metrics_state, clock=clock, representor_include=self._rep_include,
                                      extra=(AgentCollector(self), self.capture))
        self.metrics_content_type = CONTENT_TYPE

    @property
    def source_states(self) -> dict[str, SourceState]:
        return self.scheduler.states

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._image_lock = asyncio.Lock()
        for name in ("analysis", "render", "image"):
            self._lanes[name] = Lane(name)
        self.scheduler.start()
        if self.settings.watch_links:
            wake = self._wake

            def _wake_loop() -> None:
                loop.call_soon_threadsafe(wake.set)

            self.watcher = LinkWatcher(self.queue, _wake_loop, on_overrun=lambda: loop.call_soon_threadsafe(
                self.links_debounce.poke, True), clock=self.clock)
            self.watcher.start()
            self.devlink_watcher = DevlinkWatcher(lambda: loop.call_soon_threadsafe(self.devlink_debounce.poke))
            await loop.run_in_executor(None, self.devlink_watcher.start)
        self._tasks.append(asyncio.create_task(self._drain(), name="railscope-drain"))
        self._tasks.append(asyncio.create_task(self._boot(), name="railscope-boot"))
        if self.settings.budget_cpu is not None or self.settings.budget_rss is not None:
            self._tasks.append(asyncio.create_task(self._guard_budget(), name="railscope-budget"))
        if self.uploader is not None:
            self._tasks.append(asyncio.create_task(self.uploader.run(), name="railscope-upload"))
        log.info("agent started", extra={"listen": self.settings.listen, "port": self.settings.port,
                                         "recorder_window_s": self.settings.recorder_window_s,
                                         "disabled_sources": sorted(self.settings.disabled)})

    async def _guard_budget(self) -> None:
        """The budget guard (agent/service/budget.py) every ``budget_interval_s``."""
        from agent.service.budget import BudgetGuard

        def paused(name: str, on: bool) -> None:
            self.scheduler.states[name].paused = on

        self.budget = BudgetGuard(cpu_limit=self.settings.budget_cpu, rss_limit=self.settings.budget_rss,
                                  optional=tuple(s.name for s in self.sources if s.optional),
                                  pause=lambda n: paused(n, True), resume=lambda n: paused(n, False))
        while True:
            self.budget.check()
            await asyncio.sleep(self.settings.budget_interval_s)

    async def _boot(self) -> None:
        """First sample in registry order (rules before links, links before the rest); a source that
        hangs at boot delays the others by at most its deadline."""
        deadline = self.settings.source_deadline_s
        for src in self.sources:
            timer = self.scheduler.timers[src.name]
            self._tasks.append(asyncio.create_task(timer.drive(), name=f"railscope-{src.name}"))
            if src.name in self._boot_sources:
                try:
                    async with asyncio.timeout(deadline + 1.0):
                        await timer.first_done.wait()
                except TimeoutError:
                    log.warning("first sample late", extra={"source": src.name})

    async def stop(self) -> None:
        for deb in (self.links_debounce, self.devlink_debounce, self.ports_debounce):
            deb.cancel()
        self.scheduler.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.collector is not None:
            await self.collector.close()
        if self.watcher is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.watcher.stop)
        if self.devlink_watcher is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.devlink_watcher.stop)
        self.scheduler.close()
        for lane in self._lanes.values():
            lane.close()
        for host in list(self._hosts.values()):
            try:
                host.close()
            except Exception:  # closing a socket of a lane stuck in the kernel may fail; exit anyway
                log.debug("closing a host failed", exc_info=True)
        log.info("agent stopped")

    # -- the sources (worker threads) ----------------------------------------------------------
    def _host(self, src: str) -> Host:
        host = self._hosts.get(src)
        if host is None:
            host = self._hosts[src] = TrackedHost(self._host_factory(), self._progress[src], self.firmware)
        return host

    def _context(self) -> registry.Context:
        ctx = registry.Context(rdma_ports=dict(self.links.rdma_ports), link_cache=self._link_cache, recorder=True)
        for src in registry.SOURCES:
            part = self._parts.get(src.name)
            if part is not None:
                ctx = registry.after(ctx, part)
        return ctx

    def _read(self, src: registry.Source) -> registry.Part:
        if src.name == self._dump:
            # when the dump was asked for: link messages read after it may be newer than its answer
            self._links_started = self.clock()
        return src.read(self._host(src.name), self.settings.read, self._context(), Notes())

    # -- results (event loop) ----------------------------------------------------------------
    def _on_part(self, part: registry.Part) -> None:
        self._parts[part.source] = part
        if RESTARTS_FIELD in part.fields:
            self.restarts = daemon_restarts.step(self.restarts, part.fields[RESTARTS_FIELD])
        if part.source in self._recorder_sources:
            self._apply_counters(part)
            return
        if part.source == self._dump:
            links = self.links.on_dump(part.fields.get("links", ()), part.gives.get("rails", ()), self._links_started)
            if links is not part.fields.get("links"):
                part = self._parts[part.source] = replace(part, fields={**part.fields, "links": links})
        self.snapshot = self._compose()
        if self._dump in self._parts:
            self._schedule_analysis()

    def _compose(self) -> Snapshot:
        snap = registry.compose(self.snapshot, self._parts)
        if self._disabled_notes:
            snap = replace(snap, unavailable=snap.unavailable + self._disabled_notes)
        if self.settings.node:
            snap = replace(snap, node=self.settings.node)
        return snap

    def _schedule_analysis(self) -> None:
        if self._analysis_running:
            self._analysis_dirty = True
            return
        self._analysis_running = True
        self._tasks.append(asyncio.create_task(self._analyse(), name="railscope-analysis"))
        self._tasks[:] = [t for t in self._tasks if not t.done()]

    async def _analyse(self) -> None:
        try:
            while True:
                self._analysis_dirty = False
                snap = self.snapshot
                if snap is None:
                    return
                since = self.clock() - self.settings.expectations.event_window_s
                events = tuple(self.events.recent(since))
                try:
                    out = await self._lanes["analysis"].submit(partial(self._analysis_work, snap, events))
                except Exception:
                    log.exception("analysis failed")
                    return
                self._apply_analysis(out)
                if not self._analysis_dirty:
                    return
        finally:
            self._analysis_running = False

    def _analysis_work(self, snap: Snapshot, events: tuple[Event, ...]) -> pipeline.Outcome:
        # The window ends now, not at the newest event: an old event must age out even when no newer
        # one arrives (and an event newer than the last sample still counts).
        return pipeline.run(snap, self.settings.expectations, self._kernel_table,
                            history=History(events=events, recorder=self._phy_rates()), capture_time=self.clock())

    def _phy_rates(self) -> Recorder | None:
        """The flight recorder's first and last PHY sample of each rail within ``--ber-window``: the two
        samples LinkDegrading, the rising OpticsOutOfRange and PcieErrors are judged between live. Only
        the PHY counters: the other recorder checks stay with their detectors."""
        if self.recorder is None:
            return None
        edges = self.recorder.edges(self.settings.expectations.ber_window_s, RATE_COUNTERS)
        return Recorder(tuple((nd, tuple(Sample(ts, tuple(sorted(c.items()))) for ts, c in rows))
                              for nd, rows in sorted(edges.items())))

    def _apply_analysis(self, out: pipeline.Outcome) -> None:
        snap, topo = out.snapshot, out.topology
        self.topology = topo
        self.diagnosis = out.diagnosis
        self.links.on_topology(topo)
        now = self.clock()
        self._degradation, rate_events = degradation_events.step(self._degradation, out.diagnosis.findings, now)
        for ev in rate_events:
            self._emit(ev)
        counters_live = any(n in self._parts for n in self._recorder_sources)
        obs = [self.links.newest_downs(o) for o in observations_from_snapshot(snap, topo)
               if not (counters_live and isinstance(o, CountersObs))]
        obs.extend(self.links.pciless_obs(snap))
        self._feed(obs, now)
        if not self.ready:
            self.ready = True
            log.info("first sample taken", extra={"rails": len(topo.rails), "links": len(snap.links)})

    def _apply_counters(self, part: registry.Part) -> None:
        snap = self.snapshot
        if snap is None:
            return
        snap = replace(snap, **part.fields)
        self.snapshot = snap
        topo = self.topology
        if topo is None:
            return
        now = part.taken_at
        obs = []
        for netdev, subject, counters in self.links.counter_samples(snap, topo, part.gives.get("recorder_counters", {})):
            if self.recorder is not None:
                self.recorder.add(now, netdev, counters)
            obs.append(CountersObs(netdev, counters, subject=subject))
        self._feed(obs, now)

    def _feed(self, observations: list[Any], now: float) -> None:
        for ob in observations:
            self.detectors, events = engine.step(self.detectors, ob, now)
            for ev in events:
                self._emit(ev)

    def emit(self, ev: Event) -> None:
        """An event from outside the detectors (the node watch's RailResourcesLost): logged, counted and
        captured on like a detector's."""
        self._emit(ev)

    def _emit(self, ev: Event) -> None:
        self.events.add(ev)
        self.capture.on_event(ev, self.settings.node or (self.snapshot.node if self.snapshot else None) or "node")
        level = logging.WARNING if ev.severity in ("warning", "critical") else logging.INFO
        events_log.log(level, ev.message or ev.code, extra={
            "event": ev.code, "severity": ev.severity, "subject": ev.subject, "event_ts": ev.ts,
            "evidence": dict(ev.evidence)})
        if self._dump in self._parts:
            self._schedule_analysis()  # the event becomes a railscope_finding now, not at the next sample

    # -- link events -------------------------------------------------------------------------
    async def _drain(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                batch = self.queue.drain(_DRAIN_BATCH)
                if not batch:
                    break
                self._on_notes(batch)
                await asyncio.sleep(0)

    def _on_notes(self, notes: list[LinkNote]) -> None:
        part = self._parts.get(self._dump) if self._dump else None
        out = self.links.on_notes(notes, part.fields.get("links", ()) if part is not None else ())
        if out.links is not None and part is not None:
            # the known links' records follow their messages; a rail's state is judged again at once
            # (its railscope_rail_up, carrier counters and RailLinkDown), a dump is not waited for
            self._parts[part.source] = replace(part, fields={**part.fields, "links": out.links})
            if out.rail_changed:
                self.snapshot = self._compose()
                self._schedule_analysis()
        for ts, ob in out.observations:
            self._feed([ob], ts)
        if out.unknown:
            self.links_debounce.poke()
        if out.ports:
            self.ports_debounce.poke()

    def _poke(self, names: tuple[str, ...]) -> None:
        for name in names:
            self.scheduler.poke(name)

    # -- what the endpoints serve --------------------------------------------------------------
    def metrics_state(self) -> MetricsState:
        sources = []
        hung = []
        for src, st in self.scheduler.states.items():
            if st.runs:
                sources.append(SourceStatus(src, bool(st.last_success), st.last_duration_s or 0.0))
            hung.extend(HungSource(src, dev) for dev in sorted(st.hung))
        hung.extend(HungSource(src, dev) for src, dev in sorted(self.capture.hung))
        links = self._parts.get(self._dump) if self._dump else None
        return MetricsState(snapshot=self.snapshot, topology=self.topology, diagnosis=self.diagnosis,
                            sources=tuple(sources), hung=tuple(dict.fromkeys(hung)), event_counts=self.events.counts(),
                            event_codes=tuple(EVENT_CODES), taken_at=links.taken_at if links else None,
                            daemon_restarts=dict(self.restarts.restarts),
                            budget=self.budget.status if self.budget is not None else None)

    async def render_metrics(self) -> bytes:
        """The exposition, rendered in the render thread; concurrent scrapes share one render."""
        if self._render_fut is None or self._render_fut.done():
            self._render_fut = self._lanes["render"].submit(lambda: generate_latest(self.registry))
        return await asyncio.shield(self._render_fut)

    def sample_age(self) -> float | None:
        links = self._parts.get(self._dump) if self._dump else None
        return None if links is None else round(max(0.0, self.clock() - links.taken_at), 3)

    def waiting_for(self) -> list[str]:
        states = self.scheduler.states
        return [src for src in self._boot_sources if src in states and not states[src].runs] or ["analysis"]

    def recorder_jsonl(self) -> str:
        return self.recorder.to_jsonl() if self.recorder is not None else ""

    # -- node images ---------------------------------------------------------------------------
    async def record_image(self, *, reason: str = "requested", incident: str | None = None) -> tuple[str, str]:
        """Record a node image now (with ``recorder.jsonl`` and ``events.json``) as a ``tar.gz``;
        returns (path, bundle name). One at a time."""
        assert self._image_lock is not None
        if self._image_lock.locked():
            raise ImageBusy()
        async with self._image_lock:
            node = self.settings.node or (self.snapshot.node if self.snapshot else None) or "node"
            return await self._lanes["image"].submit(lambda: self.capture.record(reason, incident, node))

    def _hung_tools(self) -> frozenset[tuple[str, str]]:
        """(tool, device) of every hung read, for a capture to skip."""
        tools = {s.name: s.tools for s in self.sources}
        out = set()
        for src, st in self.scheduler.states.items():
            for dev in st.hung:
                out.update((tool, dev) for tool in tools.get(src, ()))
        return frozenset(out)

    def discard_image(self, path: str) -> None:
        self.capture.discard(path)

    # -- capture requests --------------------------------------------------------------------------
    def run_request(self, job: Job, work: str) -> Captured:
        """A request's job as one of the daemon's captures: one at a time with its other captures,
        under its firmware gate, with its events and flight recorder, in ``railscope_captures``
        (blocking: the puller runs it in a worker thread)."""
        res = self.capture.run(job, work + "/")
        assert res.path is not None
        return Captured(res.path, res.sha256)

    def request_puller(self, url: str | None = None, *, token_file: str | None = None, run: RunFn | None = None,
                       **kw: Any) -> RequestPuller:
        """The request puller, given what it needs of the daemon: its settings, the collector's client
        (the daemon's, shared with the spool upload; for another ``url`` or token file, one the puller
        owns), the run function, the spool and the keys the spool upload stored."""
        client, own = self.collector, False
        if client is None or url is not None or token_file is not None:
            client = CollectorClient(url or self.settings.collector_url or "",
                                     token_file=token_file or self.settings.collector_token_file,
                                     token_flag="--collector-token-file", outcomes=self.collector_outcomes,
                                     ca_file=self.settings.collector_ca_file,
                                     **{k: kw[k] for k in ("rng", "sleep") if k in kw})
            own = True
        return RequestPuller(self.settings, client, run or self.run_request, spool=self.capture.spool,
                             uploaded=self.uploader.uploaded if self.uploader is not None else (),
                             idle=self.capture.idle, own_client=own, **kw)
