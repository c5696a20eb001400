"""The running agent: sources sampled in the background, detectors, events, the flight recorder.

Threads and where state lives:

- each source (``config``, ``links``, ``devlink``, ``rdma``, ``counters``) reads the node in its own
  daemon thread through its own ``LiveHost`` (a netlink socket is never shared between threads);
- the link watcher thread reads rtnetlink events into a bounded, coalescing queue;
- the devlink watcher thread turns devlink notifications into devlink reads (``_poke_devlink``);
- the analysis thread builds the topology and the diagnosis of each new snapshot;
- everything else — the latest parts, the detector state, the hung marks — is touched only on the
  event loop, so nothing there needs a lock. ``EventLog`` and ``FlightRecorder`` are thread-safe
  because a capture reads them from its own thread.

The scrape renders the latest state; it never waits for a source.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest

from agent.analysis.diagnose import diagnose, load_kernel_table
from agent.analysis.topology import Topology, build_topology
from agent.detectors import engine
from agent.detectors.feed import (
    link_keys_by_ifindex,
    link_obs,
    link_subjects,
    observations_from_snapshot,
    rail_counters,
)
from agent.detectors.observations import CountersObs, LinkObs
from agent.detectors.thresholds import Thresholds
from agent.events import EVENT_CODES, EventLog
from agent.findings import Diagnosis
from agent.host import Host
from agent.metrics.collector import RailscopeCollector
from agent.metrics.exposition import CONTENT_TYPE
from agent.metrics.state import HungSource, MetricsState, SourceStatus
from agent.model import Event, Snapshot
from agent.service.coalesce import CoalescingQueue
from agent.service.devlink_watch import DevlinkWatcher
from agent.service.flight_recorder import FlightRecorder, incident_counters
from agent.service.hostproxy import TrackedHost
from agent.service.lanes import Lane, SourceState, SourceTimer
from agent.service.sampling import (
    SOURCES,
    TRAFFIC,
    LinkCache,
    Part,
    Progress,
    compose,
    read_config,
    read_counters,
    read_devlink_part,
    read_links_part,
    read_rdma_part,
)
from agent.service.selfmetrics import AgentCollector
from agent.service.settings import AgentSettings
from agent.service.watcher import LinkNote, LinkWatcher

__all__ = ["Agent", "ImageBusy", "ImageError"]

log = logging.getLogger("railscope.agent")
events_log = logging.getLogger("railscope.agent.events")

#: a link event for a link the agent does not know yet asks for a links sample, at most this often
_RESAMPLE_GAP_S = 2.0
#: a representor or uplink appearing or going asks for devlink and rdma reads, at most this often
_PORTS_RESAMPLE_GAP_S = 30.0
#: link notes handled per turn of the event loop, so that a storm never starves the scrape
_DRAIN_BATCH = 512


class ImageBusy(Exception):
    """A node image is already being recorded."""


class ImageError(Exception):
    """The node image could not be recorded; the message says why."""


class Agent:
    ImageBusy = ImageBusy
    ImageError = ImageError

    def __init__(self, settings: AgentSettings, *, host_factory: Callable[[], Host] | None = None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 call_later: Callable[[float, Callable[[], None]], _Handle] | None = None) -> None:
        """``monotonic`` and ``call_later`` (default: the running loop's) time the re-read gaps."""
        self.settings = settings
        self.clock = clock
        self._monotonic = monotonic
        self._call_later = call_later or _loop_call_later
        if host_factory is None:
            from agent.host.live import LiveHost

            def host_factory() -> Host:
                return LiveHost(settings.host_root, command_timeout_s=settings.command_timeout_s)
        self._host_factory = host_factory
        self.thresholds = Thresholds(lossless_prio=settings.expectations.lossless_prio,
                                     **dict(settings.thresholds))
        self.events = EventLog(settings.event_history)
        self.recorder: FlightRecorder | None = None
        if settings.recorder_window_s > 0:
            self.recorder = FlightRecorder(incident_counters(settings.expectations.lossless_prio) + TRAFFIC,
                                           window_s=settings.recorder_window_s,
                                           interval_s=settings.counters_interval_s)
        self.queue: CoalescingQueue[LinkNote] = CoalescingQueue(settings.event_queue)
        self.watcher: LinkWatcher | None = None
        self.devlink_watcher: DevlinkWatcher | None = None
        self.detectors = engine.initial(self.thresholds)
        self._kernel_table = load_kernel_table(settings.expectations.kernel_table_file)
        self._rep_include = re.compile(settings.representor_include) if settings.representor_include else None

        self._parts: dict[str, Part] = {}
        self.snapshot: Snapshot | None = None
        self.topology: Topology | None = None
        self.diagnosis: Diagnosis | None = None
        self._subjects: dict[tuple[str, str], str] = {}
        self._keys_by_ifindex: dict[int, tuple[str, str]] = {}
        self._pciless: dict[str, str] = {}  # rail netdev without a PCI function -> subject
        self._known_ifindexes: set[int] = set()
        #: ifindex -> the newest carrier_down_count seen (link message or dump); see _newest_downs
        self._downs: dict[int, int] = {}
        self._ifindex_of: dict[str, int] = {}
        self._rdma_ports: dict[str, tuple[str, int]] = {}
        # -inf, not 0: the monotonic clock starts at boot, and an agent started within a gap of it
        # must still read at the first event.
        self._last_links_poke = float("-inf")
        self._last_ports_poke = float("-inf")
        self._links_deferred: _Handle | None = None
        self._last_devlink_poke = float("-inf")
        self._devlink_deferred: _Handle | None = None

        self._link_cache = LinkCache()
        self._fw_lock = threading.Lock()
        self._states = {src: SourceState(src, self._interval(src)) for src in SOURCES}
        self._progress = {src: Progress() for src in SOURCES}
        self._lanes: dict[str, Lane] = {}
        self._hosts: dict[str, Host] = {}
        self._timers: dict[str, SourceTimer] = {}
        self._tasks: list[asyncio.Task[Any]] = []
        self._wake: asyncio.Event | None = None
        self._analysis_dirty = False
        self._analysis_running = False
        self._render_fut: asyncio.Future[bytes] | None = None
        self._image_lock: asyncio.Lock | None = None
        self.ready = False
        self.started_at = clock()

        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(RailscopeCollector(self.metrics_state, clock=clock,
                                                  representor_include=self._rep_include))
        self.registry.register(AgentCollector(self))
        self.metrics_content_type = CONTENT_TYPE

    # -- configuration -----------------------------------------------------------------------
    def _interval(self, src: str) -> float:
        s = self.settings
        return {"config": s.config_interval_s, "links": s.links_interval_s, "devlink": s.devlink_interval_s,
                "rdma": s.rdma_interval_s, "counters": s.counters_interval_s}[src]

    @property
    def source_states(self) -> dict[str, SourceState]:
        return self._states

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._image_lock = asyncio.Lock()
        for name in (*SOURCES, "analysis", "render", "image"):
            self._lanes[name] = Lane(name)
        runs: dict[str, Callable[[], Part]] = {
            "config": self._read_config, "links": self._read_links, "devlink": self._read_devlink,
            "rdma": self._read_rdma, "counters": self._read_counters,
        }
        for src in SOURCES:
            self._timers[src] = SourceTimer(
                self._states[src], self._lanes[src], runs[src], self._on_part,
                deadline_s=self.settings.source_deadline_s, current_device=self._progress[src].get)
        if self.settings.watch_links:
            wake = self._wake

            def _wake_loop() -> None:
                loop.call_soon_threadsafe(wake.set)

            self.watcher = LinkWatcher(self.queue, _wake_loop, on_overrun=lambda: loop.call_soon_threadsafe(
                self._poke_links, True), clock=self.clock)
            self.watcher.start()
            self.devlink_watcher = DevlinkWatcher(lambda: loop.call_soon_threadsafe(self._poke_devlink))
            await loop.run_in_executor(None, self.devlink_watcher.start)
        self._tasks.append(asyncio.create_task(self._drain(), name="railscope-drain"))
        self._tasks.append(asyncio.create_task(self._boot(), name="railscope-boot"))
        log.info("agent started", extra={"listen": self.settings.listen, "port": self.settings.port,
                                         "recorder_window_s": self.settings.recorder_window_s})

    async def _boot(self) -> None:
        """First sample in dependency order (rules before links, links before the rest); a source
        that hangs at boot delays the others by at most its deadline."""
        deadline = self.settings.source_deadline_s
        for src in SOURCES:
            timer = self._timers[src]
            self._tasks.append(asyncio.create_task(timer.drive(), name=f"railscope-{src}"))
            if src in ("config", "links"):
                try:
                    async with asyncio.timeout(deadline + 1.0):
                        await timer.first_done.wait()
                except TimeoutError:
                    log.warning("first sample late", extra={"source": src})

    async def stop(self) -> None:
        if self._links_deferred is not None:
            self._links_deferred.cancel()
            self._links_deferred = None
        if self._devlink_deferred is not None:
            self._devlink_deferred.cancel()
            self._devlink_deferred = None
        for timer in self._timers.values():
            timer.stopped = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self.watcher is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.watcher.stop)
        if self.devlink_watcher is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.devlink_watcher.stop)
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
            host = self._hosts[src] = TrackedHost(self._host_factory(), self._progress[src], self._fw_lock)
        return host

    def _read_config(self) -> Part:
        return read_config(self._host("config"), self.settings.read)

    def _read_links(self) -> Part:
        cfg = self._parts.get("config")
        rules = cfg.fields.get("rules", ()) if cfg else ()
        return read_links_part(self._host("links"), self.settings.read, rules, self._link_cache)

    def _read_devlink(self) -> Part:
        links = self._parts.get("links")
        functions = links.fields.get("pci", ()) if links else ()
        return read_devlink_part(self._host("devlink"), self.settings.read, functions,
                                 links.rail_bdfs if links else (), links.fields.get("links", ()) if links else ())

    def _read_rdma(self) -> Part:
        links = self._parts.get("links")
        return read_rdma_part(self._host("rdma"), self.settings.read, links.rails if links else (),
                              links.rail_bdfs if links else ())

    def _read_counters(self) -> Part:
        links = self._parts.get("links")
        return read_counters(self._host("counters"), self.settings.read, links.rails if links else (),
                             dict(self._rdma_ports), self._progress["counters"])

    # -- results (event loop) ----------------------------------------------------------------
    def _on_part(self, part: Part) -> None:
        self._parts[part.source] = part
        if part.source == "counters":
            self._apply_counters(part)
            return
        if part.source == "links":
            # Rebuilt from each dump, so links gone while their deletion note was dropped are forgotten.
            links = part.fields.get("links", ())
            self._known_ifindexes = {lk.ifindex for lk in links}
            self._downs = {lk.ifindex: max(lk.carrier_down_count, self._downs.get(lk.ifindex, 0))
                           for lk in links if lk.carrier_down_count is not None}
            self._ifindex_of = {lk.ifname: lk.ifindex for lk in links}
        self.snapshot = compose(self.snapshot, self._parts)
        if self.settings.node:
            self.snapshot = replace(self.snapshot, node=self.settings.node)
        if "links" in self._parts:
            self._schedule_analysis()

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
                    topo, diag = await self._lanes["analysis"].submit(partial(self._analysis_work, snap, events))
                except Exception:
                    log.exception("analysis failed")
                    return
                self._apply_analysis(snap, topo, diag)
                if not self._analysis_dirty:
                    return
        finally:
            self._analysis_running = False

    def _analysis_work(self, snap: Snapshot, events: tuple[Event, ...]) -> tuple[Topology, Diagnosis]:
        exp = self.settings.expectations
        topo = build_topology(snap, exp)
        # The window ends now, not at the newest event: an old event must age out even when no newer
        # one arrives (and an event newer than the last sample still counts).
        return topo, diagnose(snap, exp, events=events, topology=topo, kernel_table=self._kernel_table,
                              capture_time=self.clock())

    def _apply_analysis(self, snap: Snapshot, topo: Topology, diag: Diagnosis) -> None:
        self.topology = topo
        self.diagnosis = diag
        self._subjects = link_subjects(topo)
        self._keys_by_ifindex = link_keys_by_ifindex(topo)
        self._pciless = {r.netdev.ifname: r.expected_netdev for r in topo.rails
                         if r.pci is None and r.netdev is not None}
        self._rdma_ports = {r.netdev.ifname: (r.rdma.dev, r.rdma.port) for r in topo.rails
                            if r.netdev is not None and r.rdma is not None}
        now = self.clock()
        counters_live = "counters" in self._parts
        obs = [self._newest_downs(o) for o in observations_from_snapshot(snap, topo)
               if not (counters_live and isinstance(o, CountersObs))]
        obs.extend(self._pciless_obs(snap))
        self._feed(obs, now)
        if not self.ready:
            self.ready = True
            log.info("first sample taken", extra={"rails": len(topo.rails), "links": len(snap.links)})

    def _pciless_obs(self, snap: Snapshot) -> list[LinkObs]:
        """Rails with no PCI function (a virtual netdev named like a rail, as in a test netns) are
        keyed by their name: the detectors' (function, port) key does not exist for them."""
        out = []
        for name, subject in self._pciless.items():
            lk = snap.link(name)
            if lk is not None:
                out.append(LinkObs(key=("", name), netdev=name, ifindex=lk.ifindex,
                                   carrier_down_count=self._downs.get(lk.ifindex, lk.carrier_down_count),
                                   carrier=lk.carrier, operstate=lk.operstate, subject=subject))
        return out

    def _newest_downs(self, ob: Any) -> Any:
        """A dump is read before it is analysed: a link message in between already gave the detectors
        a newer carrier loss count. Going back to the dump's count would look like a counter reset,
        and the next message would count the same loss twice."""
        if isinstance(ob, LinkObs) and ob.ifindex is not None and ob.ifindex in self._downs:
            return replace(ob, carrier_down_count=self._downs[ob.ifindex])
        return ob

    def _apply_counters(self, part: Part) -> None:
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
        for netdev, subject, counters in rail_counters(snap, topo):
            idx = self._ifindex_of.get(netdev)
            if idx in self._downs:
                counters["carrier_down_count"] = self._downs[idx]
            counters.update(part.extra.get(netdev, {}))
            if self.recorder is not None:
                self.recorder.add(now, netdev, counters)
            obs.append(CountersObs(netdev, counters, subject=subject))
        self._feed(obs, now)

    def _feed(self, observations: list[Any], now: float) -> None:
        for ob in observations:
            self.detectors, events = engine.step(self.detectors, ob, now)
            for ev in events:
                self._emit(ev)

    def _emit(self, ev: Event) -> None:
        self.events.add(ev)
        level = logging.WARNING if ev.severity in ("warning", "critical") else logging.INFO
        events_log.log(level, ev.message or ev.code, extra={
            "event": ev.code, "severity": ev.severity, "subject": ev.subject, "event_ts": ev.ts,
            "evidence": dict(ev.evidence)})
        if "links" in self._parts:
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
        unknown = ports = False
        for note in notes:
            new = note.deleted or note.ifindex not in self._known_ifindexes
            if new:
                unknown = True
                # A NIC port (representor, uplink) came or went: devlink ports and rdma links changed
                # with it. Reading them now (rate-limited) stands in for devlink's own notifications.
                ports = ports or bool(note.phys_port_name)
            if note.deleted:
                self._known_ifindexes.discard(note.ifindex)
                continue
            if note.ifname:
                self._ifindex_of[note.ifname] = note.ifindex
            if note.carrier_down_count is not None:
                self._downs[note.ifindex] = max(note.carrier_down_count, self._downs.get(note.ifindex, 0))
            ob = link_obs(note, self._subjects, admin_up=note.admin_up, keys_by_ifindex=self._keys_by_ifindex)
            if ob is None and note.ifname in self._pciless:
                ob = LinkObs(key=("", note.ifname), netdev=note.ifname, ifindex=note.ifindex,
                             carrier_down_count=note.carrier_down_count, carrier=note.carrier,
                             operstate=note.operstate, admin_up=note.admin_up, subject=self._pciless[note.ifname])
            if ob is not None:
                self._feed([ob], note.ts)
        if unknown:
            self._poke_links()
        if ports:
            self._poke_ports()

    def _poke_links(self, overrun: bool = False) -> None:
        """Ask for a links read now, or, inside the gap after the last one, when the gap ends. An
        event in the gap is deferred, never dropped: it may be the only sign of a change (a
        representor removed right after another was created) before the periodic read, seconds
        later. One deferred read covers every event of its gap."""
        wait = self._last_links_poke + _RESAMPLE_GAP_S - self._monotonic()
        if overrun or wait <= 0:
            self._links_poke_now()
        elif self._links_deferred is None:
            self._links_deferred = self._call_later(wait, self._links_poke_now)

    def _links_poke_now(self) -> None:
        if self._links_deferred is not None:
            self._links_deferred.cancel()  # this read covers the events it was waiting for
            self._links_deferred = None
        self._last_links_poke = self._monotonic()
        timer = self._timers.get("links")
        if timer is not None:
            timer.poke()

    def _poke_devlink(self) -> None:
        """A devlink notification: read devlink now, or when the re-read gap ends (deferred, never
        dropped, one read per gap), as ``_poke_links`` does for links."""
        wait = self._last_devlink_poke + _RESAMPLE_GAP_S - self._monotonic()
        if wait <= 0:
            self._devlink_poke_now()
        elif self._devlink_deferred is None:
            self._devlink_deferred = self._call_later(wait, self._devlink_poke_now)

    def _devlink_poke_now(self) -> None:
        if self._devlink_deferred is not None:
            self._devlink_deferred.cancel()
            self._devlink_deferred = None
        self._last_devlink_poke = self._monotonic()
        timer = self._timers.get("devlink")
        if timer is not None:
            timer.poke()

    def _poke_ports(self) -> None:
        now = self._monotonic()
        if now - self._last_ports_poke >= _PORTS_RESAMPLE_GAP_S:
            self._last_ports_poke = now
            for src in ("devlink", "rdma"):
                timer = self._timers.get(src)
                if timer is not None:
                    timer.poke()

    # -- what the endpoints serve --------------------------------------------------------------
    def metrics_state(self) -> MetricsState:
        sources = []
        hung = []
        for src, st in self._states.items():
            if st.runs:
                sources.append(SourceStatus(src, bool(st.last_success), st.last_duration_s or 0.0))
            hung.extend(HungSource(src, dev) for dev in sorted(st.hung))
        links = self._parts.get("links")
        return MetricsState(snapshot=self.snapshot, topology=self.topology, diagnosis=self.diagnosis,
                            sources=tuple(sources), hung=tuple(hung), event_counts=self.events.counts(),
                            event_codes=tuple(EVENT_CODES), taken_at=links.taken_at if links else None)

    async def render_metrics(self) -> bytes:
        """The exposition, rendered in the render thread; concurrent scrapes share one render."""
        if self._render_fut is None or self._render_fut.done():
            self._render_fut = self._lanes["render"].submit(lambda: generate_latest(self.registry))
        return await asyncio.shield(self._render_fut)

    def sample_age(self) -> float | None:
        links = self._parts.get("links")
        return None if links is None else round(max(0.0, self.clock() - links.taken_at), 3)

    def waiting_for(self) -> list[str]:
        return [src for src in ("config", "links") if not self._states[src].runs] or ["analysis"]

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
            hung = self._hung_tools()
            return await self._lanes["image"].submit(lambda: self._record_image_sync(reason, incident, hung))

    def _hung_tools(self) -> frozenset[tuple[str, str]]:
        """(tool, device) of every hung read, for a capture to skip."""
        tools = {"devlink": ("devlink",), "rdma": ("rdma",), "config": ("ovs-vsctl",), "counters": ("ethtool",)}
        out = set()
        for src, st in self._states.items():
            for dev in st.hung:
                out.update((tool, dev) for tool in tools.get(src, ()))
        return frozenset(out)

    def _record_image_sync(self, reason: str, incident: str | None,
                           hung: frozenset[tuple[str, str]] = frozenset()) -> tuple[str, str]:
        from agent.capture.replay import RecordError, record_image

        node = self.settings.node or (self.snapshot.node if self.snapshot else None) or "node"
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock()))
        name = re.sub(r"[^A-Za-z0-9._-]", "-", f"{node}-{stamp}")
        work = tempfile.mkdtemp(prefix="railscope-image-")
        try:
            out = os.path.join(work, name)
            host = TrackedHost(self._host_factory(), Progress(), self._fw_lock, hung=hung)
            try:
                record_image(host, out, node=node, cluster=self.settings.cluster, incident=incident,
                             reason=reason, events=self.events.to_json()["events"], cfg=self.settings.read)
            finally:
                host.close()
            if self.recorder is not None:
                _add_generated(out, "recorder.jsonl", self.recorder.to_jsonl().encode())
            path = os.path.join(work, name + ".tar.gz")
            with tarfile.open(path, "w:gz", compresslevel=6) as tf:
                tf.add(out, arcname=name)
            shutil.rmtree(out, ignore_errors=True)
            if os.path.getsize(path) > self.settings.image_max_bytes:
                raise ImageError(f"the node image is larger than {self.settings.image_max_bytes} bytes")
            return path, name
        except RecordError as exc:
            shutil.rmtree(work, ignore_errors=True)
            raise ImageError(str(exc)) from None
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise

    def discard_image(self, path: str) -> None:
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


class _Handle(Protocol):
    def cancel(self) -> None: ...


def _loop_call_later(delay: float, fn: Callable[[], None]) -> _Handle:
    return asyncio.get_running_loop().call_later(delay, fn)


def _add_generated(image: str, rel: str, data: bytes) -> None:
    """Write a generated file into a recorded image and list it in its manifest."""
    import hashlib
    import json

    with open(os.path.join(image, rel), "wb") as fh:
        fh.write(data)
    mpath = os.path.join(image, "manifest.json")
    with open(mpath, encoding="utf-8") as fh:
        manifest = json.load(fh)
    items = [it for it in manifest.get("items", []) if it.get("path") != rel]
    items.append({"path": rel, "kind": "generated", "argv": None, "rc": None, "duration_s": 0.0,
                  "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "truncated": False,
                  "timed_out": False, "skipped": False})
    manifest["items"] = sorted(items, key=lambda it: str(it.get("path")))
    with open(mpath, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
