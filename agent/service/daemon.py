"""The running agent: the composition root. It builds the daemon's parts and wires them, each in
a module of its own with narrow inputs: ``sampling`` (the registry's sources in their threads, their
latest parts), ``link_events`` (the link and devlink listeners, drained in batches), ``link_state``
(what link messages mean to the detectors and to the links' records), ``detection`` (the detectors
over time), ``analysis`` (the pipeline of each new snapshot), ``debounce`` (re-read gaps),
``events`` (the event log), ``captures`` (the daemon's captures), ``pull`` (the request puller and
the spool upload), ``app`` (HTTP).

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
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from prometheus_client import generate_latest

from agent.analysis import pipeline
from agent.analysis.topology import Topology
from agent.capture.job import Job
from agent.capture.recorder import FlightRecorder, incident_counters
from agent.clients.collector import CallOutcomes, CollectorClient
from agent.config import AgentSettings, Thresholds
from agent.detectors.feed import RESTARTS_FIELD, observations_from_snapshot
from agent.detectors.observations import CountersObs
from agent.findings import EVENT_CODES, Diagnosis
from agent.host import Host
from agent.host.netlink.link_events import LinkNote
from agent.metrics.exposition import CONTENT_TYPE, make_registry
from agent.metrics.state import HungSource, MetricsState
from agent.model import Event, Snapshot
from agent.readers import sources as registry
from agent.readers.counters import TRAFFIC
from agent.service.analysis import Analysis
from agent.service.captures import CaptureBusy, CaptureMetrics, Captures
from agent.service.debounce import Debouncer, Handle
from agent.service.detection import Detection
from agent.service.events import EventLog
from agent.service.link_events import LinkEvents
from agent.service.link_state import LinkState
from agent.service.pull import Captured, RequestPuller, RunFn, SpoolUploader
from agent.service.sampling import Sampling
from agent.service.scheduler import Lane, SourceState
from agent.service.selfmetrics import AgentMetrics

__all__ = ["Agent"]

log = logging.getLogger("railscope.agent")
events_log = logging.getLogger("railscope.agent.events")

#: A node where no rail was found serves railscope_rails 0 and no per-rail series: said in the log and on
#: /readyz, with the flags that declare rails, never an empty exposition that looks healthy.
NO_RAILS = ("no rails found: no udev naming rule, --rail-map or --rails names one and no netdev name matches a "
            "template; declare them with --rail-map RAIL=PCI,... (the rail NICs' PCI functions: lspci -D -d 15b3:), "
            "--net-template or --rails N")

#: a link event for a link the agent does not know yet asks for a links sample, at most this often
_RESAMPLE_GAP_S = 2.0
#: a representor or uplink appearing or going asks for devlink and rdma reads, at most this often
_PORTS_RESAMPLE_GAP_S = 30.0


class Agent:
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
        self.links = LinkState()
        self.sampling = Sampling(settings, host_factory, on_part=self._on_part,
                                 rdma_ports=lambda: self.links.rdma_ports, clock=clock)
        roles = self.sampling.roles
        self.events = EventLog(settings.event_history)
        self.recorder: FlightRecorder | None = None
        if settings.recorder_window_s > 0:
            intervals = self.sampling.intervals
            self.recorder = FlightRecorder(incident_counters(settings.expectations.lossless_prio) + TRAFFIC,
                                           window_s=settings.recorder_window_s,
                                           interval_s=min((intervals[n] for n in roles["recorder"] if n in intervals),
                                                          default=1.0))
        self.detection = Detection(Thresholds(lossless_prio=settings.expectations.lossless_prio,
                                              **dict(settings.thresholds)))
        self.analysis = Analysis(settings.expectations, self.events, self.recorder, snapshot=lambda: self.snapshot,
                                 apply=self._apply_analysis, clock=clock)
        # How the calls to the collector ended (uploads, polls, done): railscope_agent_collector_calls_total.
        self.collector_outcomes = CallOutcomes()
        self.budget: Any = None
        self.snapshot: Snapshot | None = None
        self.topology: Topology | None = None
        self.diagnosis: Diagnosis | None = None
        #: the no-rails warning is logged once per episode (again after rails were found)
        self._no_rails_logged = False

        debounce = {"monotonic": monotonic, "call_later": call_later}
        poke = self.sampling.poke
        self.links_debounce = Debouncer(_RESAMPLE_GAP_S, lambda: poke(roles["link-events"]), **debounce)
        self.devlink_debounce = Debouncer(_RESAMPLE_GAP_S, lambda: poke(roles["devlink-events"]), **debounce)
        self.ports_debounce = Debouncer(_PORTS_RESAMPLE_GAP_S, lambda: poke(roles["ports"]), **debounce)
        self.link_events = LinkEvents(settings.event_queue, on_notes=self._on_notes,
                                      on_overrun=lambda: self.links_debounce.poke(True),
                                      on_devlink=self.devlink_debounce.poke, clock=clock)

        self.captures = Captures(settings, host_factory, self.firmware, self.events, self.recorder, clock,
                                    hung_tools=self.sampling.hung_tools,
                                    rail_change=lambda: self.links.last_rail_change)
        #: the collector's one client in the daemon: the spool upload and the request puller share
        #: its session (its token file is read before every request)
        self.collector: CollectorClient | None = None
        if settings.collector_url:
            self.collector = CollectorClient(settings.collector_url, token_file=settings.collector_token_file,
                                             token_flag="--collector-token-file", outcomes=self.collector_outcomes,
                                             ca_file=settings.collector_ca_file, ca_optional=True)
        #: the spool upload, beside the request puller: the keys it stored are the ones requests reuse
        self.uploader: SpoolUploader | None = None
        if self.collector is not None and self.captures.spool is not None:
            self.uploader = SpoolUploader(self.captures.spool, self.collector, interval_s=settings.upload_interval_s,
                                          clock=clock)
        self._lanes: dict[str, Lane] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._render_fut: asyncio.Future[bytes] | None = None
        self._image_lock: asyncio.Lock | None = None
        self.ready = False
        self.started_at = clock()

        rep_include = re.compile(settings.representor_include) if settings.representor_include else None
        self.registry = make_registry(self.metrics_state, clock=clock, representor_include=rep_include,
                                      extra=(AgentMetrics(self), CaptureMetrics(self.captures)))
        self.metrics_content_type = CONTENT_TYPE

    @property
    def firmware(self) -> Any:
        """The firmware gate the samplers hold and every capture takes (``agent.host.firmware``)."""
        return self.sampling.firmware

    @property
    def source_states(self) -> dict[str, SourceState]:
        return self.sampling.states

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self._tasks.append(task)
        return task

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        self._image_lock = asyncio.Lock()
        for name in ("analysis", "render", "image"):
            self._lanes[name] = Lane(name)
        self.analysis.lane = self._lanes["analysis"]
        self.sampling.scheduler.start()
        if self.settings.watch_links:
            await self.link_events.start()
        self._spawn(self.link_events.drain(), "railscope-drain")
        self._spawn(self.sampling.boot(self._spawn), "railscope-boot")
        if self.settings.budget_cpu is not None or self.settings.budget_rss is not None:
            self._spawn(self._guard_budget(), "railscope-budget")
        if self.uploader is not None:
            self._spawn(self.uploader.run(), "railscope-upload")
        log.info("agent started", extra={"listen": self.settings.listen, "port": self.settings.port,
                                         "recorder_window_s": self.settings.recorder_window_s,
                                         "disabled_sources": sorted(self.settings.disabled)})

    async def _guard_budget(self) -> None:
        """The budget guard (agent/service/budget.py) every ``budget_interval_s``."""
        from agent.service.budget import BudgetGuard

        def paused(name: str, on: bool) -> None:
            self.sampling.states[name].paused = on

        self.budget = BudgetGuard(cpu_limit=self.settings.budget_cpu, rss_limit=self.settings.budget_rss,
                                  optional=tuple(s.name for s in self.sampling.sources if s.optional),
                                  pause=lambda n: paused(n, True), resume=lambda n: paused(n, False))
        while True:
            self.budget.check()
            await asyncio.sleep(self.settings.budget_interval_s)

    async def stop(self) -> None:
        for deb in (self.links_debounce, self.devlink_debounce, self.ports_debounce):
            deb.cancel()
        self.sampling.scheduler.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.collector is not None:
            await self.collector.close()
        await self.link_events.stop()
        self.sampling.close()
        for lane in self._lanes.values():
            lane.close()
        log.info("agent stopped")

    # -- results (event loop) ----------------------------------------------------------------
    def _on_part(self, part: registry.Part) -> None:
        sampling = self.sampling
        sampling.parts[part.source] = part
        if RESTARTS_FIELD in part.fields:
            self.detection.on_restarts(part.fields[RESTARTS_FIELD])
        if part.source in sampling.recorder_sources:
            self._apply_counters(part)
            return
        if part.source == sampling.dump:
            links = self.links.on_dump(part.fields.get("links", ()), part.gives.get("rails", ()),
                                       sampling.links_started)
            if links is not part.fields.get("links"):
                part = sampling.parts[part.source] = replace(part, fields={**part.fields, "links": links})
        self.snapshot = sampling.compose(self.snapshot)
        if sampling.dump in sampling.parts:
            self._schedule_analysis()

    def _schedule_analysis(self) -> None:
        self.analysis.schedule(self._spawn)
        self._tasks[:] = [t for t in self._tasks if not t.done()]

    def _apply_analysis(self, out: pipeline.Outcome) -> None:
        snap, topo = out.snapshot, out.topology
        self.topology = topo
        self.diagnosis = out.diagnosis
        self.links.on_topology(topo)
        now = self.clock()
        self._emit_all(self.detection.on_findings(out.diagnosis.findings, now))
        counters_live = any(n in self.sampling.parts for n in self.sampling.recorder_sources)
        obs = [self.links.newest_downs(o) for o in observations_from_snapshot(snap, topo)
               if not (counters_live and isinstance(o, CountersObs))]
        obs.extend(self.links.pciless_obs(snap))
        self._emit_all(self.detection.feed(obs, now))
        if not self.ready:
            self.ready = True
            log.info("first sample taken", extra={"rails": len(topo.rails), "links": len(snap.links)})
        if topo.rails:
            self._no_rails_logged = False
        elif not self._no_rails_logged:
            self._no_rails_logged = True
            log.warning(NO_RAILS, extra={"rails": 0, "links": len(snap.links)})

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
        self._emit_all(self.detection.feed(obs, now))

    def _emit_all(self, events: list[Event]) -> None:
        for ev in events:
            self._emit(ev)

    def emit(self, ev: Event) -> None:
        """An event from outside the detectors (the node watch's RailResourcesLost): logged, counted and
        captured on like a detector's."""
        self._emit(ev)

    def _emit(self, ev: Event) -> None:
        self.events.add(ev)
        self.captures.on_event(ev, self._node())
        level = logging.WARNING if ev.severity in ("warning", "critical") else logging.INFO
        events_log.log(level, ev.message or ev.code, extra={
            "event": ev.code, "severity": ev.severity, "subject": ev.subject, "event_ts": ev.ts,
            "evidence": dict(ev.evidence)})
        if self.sampling.dump in self.sampling.parts:
            self._schedule_analysis()  # the event becomes a railscope_finding now, not at the next sample

    def _node(self) -> str:
        return self.settings.node or (self.snapshot.node if self.snapshot else None) or "node"

    # -- link events -------------------------------------------------------------------------
    def _on_notes(self, notes: list[LinkNote]) -> None:
        part = self.sampling.links()
        out = self.links.on_notes(notes, part.fields.get("links", ()) if part is not None else ())
        if out.links is not None and part is not None:
            # the known links' records follow their messages; a rail's state is judged again at once
            # (its railscope_rail_up, carrier counters and RailLinkDown), a dump is not waited for
            self.sampling.parts[part.source] = replace(part, fields={**part.fields, "links": out.links})
            if out.rail_changed:
                self.snapshot = self.sampling.compose(self.snapshot)
                self._schedule_analysis()
        for ts, ob in out.observations:
            self._emit_all(self.detection.feed([ob], ts))
        if out.unknown:
            self.links_debounce.poke()
        if out.ports:
            self.ports_debounce.poke()

    # -- what the endpoints serve --------------------------------------------------------------
    def metrics_state(self) -> MetricsState:
        sources, hung = self.sampling.status()
        hung.extend(HungSource(src, dev) for src, dev in sorted(self.captures.hung))
        links = self.sampling.links()
        return MetricsState(snapshot=self.snapshot, topology=self.topology, diagnosis=self.diagnosis,
                            sources=tuple(sources), hung=tuple(dict.fromkeys(hung)), event_counts=self.events.counts(),
                            event_codes=tuple(EVENT_CODES), taken_at=links.taken_at if links else None,
                            daemon_restarts=dict(self.detection.restarts.restarts),
                            budget=self.budget.status if self.budget is not None else None)

    async def render_metrics(self) -> bytes:
        """The exposition, rendered in the render thread; concurrent scrapes share one render."""
        if self._render_fut is None or self._render_fut.done():
            self._render_fut = self._lanes["render"].submit(lambda: generate_latest(self.registry))
        return await asyncio.shield(self._render_fut)

    def sample_age(self) -> float | None:
        links = self.sampling.links()
        return None if links is None else round(max(0.0, self.clock() - links.taken_at), 3)

    def warnings(self) -> list[str]:
        """What ``/readyz`` says beside "ready": a state that serves but judges nothing."""
        topo = self.topology
        return [NO_RAILS] if topo is not None and not topo.rails else []

    def waiting_for(self) -> list[str]:
        return self.sampling.waiting_for() or ["analysis"]

    def recorder_jsonl(self) -> str:
        return self.recorder.to_jsonl() if self.recorder is not None else ""

    # -- node images ---------------------------------------------------------------------------
    async def record_image(self, *, reason: str = "requested", incident: str | None = None) -> tuple[str, str]:
        """Record a node image now (with ``recorder.jsonl`` and ``events.json``) as a ``tar.gz``;
        returns (path, bundle name). One at a time."""
        assert self._image_lock is not None
        if self._image_lock.locked():
            raise CaptureBusy()
        async with self._image_lock:
            node = self._node()
            return await self._lanes["image"].submit(lambda: self.captures.record(reason, incident, node))

    def discard_image(self, path: str) -> None:
        self.captures.discard(path)

    # -- capture requests --------------------------------------------------------------------------
    def run_request(self, job: Job, work: str) -> Captured:
        """A request's job as one of the daemon's captures: one at a time with its other captures,
        under its firmware gate, with its events and flight recorder, in ``railscope_captures``
        (blocking: the puller runs it in a worker thread)."""
        res = self.captures.run(job, work + "/")
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
                                     ca_file=self.settings.collector_ca_file, ca_optional=True,
                                     **{k: kw[k] for k in ("rng", "sleep") if k in kw})
            own = True
        return RequestPuller(self.settings, client, run or self.run_request, spool=self.captures.spool,
                             uploaded=self.uploader.uploaded if self.uploader is not None else (),
                             idle=self.captures.idle, own_client=own, **kw)
