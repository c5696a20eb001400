"""The one capture runner (docs/design.md §7): every plug-in's steps, run the same way.

1. Every plug-in is checked against the deny-list before anything runs; a plug-in naming a denied
   command is refused whole (listed in the manifest with the entry), the others go on.
2. *replay* runs first: the snapshot readers through a ``RecordingHost`` into the staging tree.
3. The other plug-ins are expanded from what it found (``{rail}``, ``{pf}``, ``{handle}``) and run by
   a bounded pool of niced worker threads: commands as argv with ``LC_ALL=C``, a timeout that kills
   the process group and a size cap that keeps the tail; firmware-touching reads one at a time per
   PF, and after one hangs the rest of that PF's are skipped.
4. At the overall deadline whatever finished is packed (a partial bundle, never nothing); every
   step is in the manifest with its outcome, including those that never started and why.
5. The staging tree is packed by ``BundleWriter``: redacted, gzipped and hashed in one pass.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import logging
import math
import os
import posixpath
import queue
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import IO, Any

from agent import __version__
from agent.capture import manifest as mf
from agent.capture.archive import BundleWriter, DirWriter, write_sha256_file
from agent.capture.context import CaptureContext, fill_from_snapshot
from agent.capture.plugin import (
    Command,
    File,
    Generated,
    Plugin,
    PluginRefused,
    Step,
    check_plugin,
    placeholders,
    refusal,
)
from agent.capture.plugins import PLUGINS, load
from agent.capture.redact import Redactor
from agent.config import ReadConfig, cabling_of_node
from agent.host import Host, slug
from agent.host.firmware import FirmwareGate
from agent.host.image import SCHEMA, Manifest, manifest_to_json
from agent.host.paths import NotRegularFile
from agent.host.recording import RecordingHost
from agent.model import Snapshot
from agent.readers.scope import excluded, netdevs_on_functions

__all__ = ["CaptureError", "CaptureParams", "CaptureResult", "bundle_name", "capture", "capture_to_dir", "capture_to_file"]

log = logging.getLogger("railscope.capture")

_NAME_BAD = re.compile(r"[^a-z0-9._-]")


class CaptureError(Exception):
    """No bundle could be written (the output is not writable, it exists already)."""


@dataclass(frozen=True)
class CaptureParams:
    node: str | None = None
    cluster: str | None = None
    incident: str | None = None
    reason: str | None = None
    #: HMAC key for pseudonyms (``--redact``); None: secrets only
    redact_key: bytes | None = None
    deadline_s: float = 300.0
    parallel: int = 4
    nice: int = 10
    recorder_gap_s: float = 10.0
    cfg: ReadConfig = field(default_factory=ReadConfig)
    events: list[dict[str, Any]] | None = None
    recorder_jsonl: Callable[[], bytes] | None = None
    #: PFs or devices (netdev, devlink handle) whose firmware reads hung earlier: not tried again
    skip_firmware: frozenset[str] = frozenset()
    #: (tool, device) of reads stuck in the agent's own samplers ("" device: all of that tool's):
    #: never started a second time
    hung_tools: frozenset[tuple[str, str]] = frozenset()
    #: the daemon's firmware gate (``agent.host.firmware.FirmwareGate``), shared with its samplers:
    #: each firmware-touching step holds its PCI function's lock; None outside the daemon
    firmware_gate: FirmwareGate | None = None
    plugins: tuple[str, ...] = PLUGINS
    pod_netns: bool = False
    bundle_id: str | None = None
    name: str | None = None
    #: the judging expectations in force where the capture runs (``agent.config.expectations_to_json``),
    #: written to the manifest so a replay judges as the node did (docs/design.md §2); None: none stated
    expectations: dict[str, Any] | None = None
    #: what the trigger says of the capture, first in the manifest's ``notes`` (an event capture's wait
    #: for the links to settle)
    notes: tuple[str, ...] = ()


@dataclass
class CaptureResult:
    name: str
    bundle_id: str
    bytes: int
    sha256: str
    manifest: dict[str, Any]
    #: (source, device) of every firmware read that hung (``railscope_source_hung``)
    hung: tuple[tuple[str, str], ...]
    partial: bool
    path: str | None = None
    #: what the replay readers saw (None when replay did not run or finish)
    snapshot: Snapshot | None = None
    #: when the capture started, Unix seconds
    started_ts: float = 0.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def bundle_name(node: str | None, when: float | None = None) -> str:
    """``<node>-<yyyymmddThhmmssZ>``, in the collector's key alphabet."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when if when is not None else time.time()))
    base = _NAME_BAD.sub("-", (node or "node").lower()).strip("-.") or "node"
    return f"{base[:40]}-{stamp}"


def _nice_thread(nice: int) -> None:
    # setpriority on a thread id changes that thread alone (Linux); its children inherit it.
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(
                os.PRIO_PROCESS, threading.get_native_id()) + nice))
        except (OSError, AttributeError):
            pass


def _source_of(argv: tuple[str, ...]) -> str:
    from agent.readers.sources import source_of

    return source_of(list(argv)) or os.path.basename(argv[0])


def _device_of(argv: tuple[str, ...]) -> str:
    """What a stuck command was reading: the devlink handle or the netdev, else ""."""
    for tok in argv[1:]:
        if tok.startswith(("pci/", "auxiliary/")):
            return tok
    if argv and os.path.basename(argv[0]) == "ethtool" and len(argv) >= 3:
        return argv[-1]
    return ""


@dataclass
class _Task:
    plugin: str
    step: Step
    binding: dict[str, str]
    rel: str  # manifest path (for a File step: its glob under fs/)
    fw_key: str | None = None
    state: str = "queued"  # queued | running | done


class _Run:
    """One capture: staging tree, items, the worker pool."""

    def __init__(self, host: Host, params: CaptureParams, staging: str,
                 progress: Callable[[int, int, int], None] | None) -> None:
        self.host = host
        self.params = params
        self.staging = staging
        self.tmp = os.path.join(staging, ".tmp")
        os.makedirs(self.tmp)
        self.rec = RecordingHost(host, staging, guard=refusal)
        self.lock = threading.RLock()
        self.sealed = False
        self.items: dict[str, dict[str, Any]] = {}
        self.notes: list[str] = list(params.notes)
        self.hung: list[tuple[str, str]] = []
        self.fw_hung: dict[str, str] = {}  # fw key -> what hung
        self.progress = progress
        self.done = 0
        self.total = 0
        self.bytes = 0
        self.t0 = time.monotonic()
        self.deadline = self.t0 + params.deadline_s
        self.started_at = time.time()
        self.plugins: list[dict[str, Any]] = []
        self.partial = False

    # -- bookkeeping ----------------------------------------------------------------------------
    def left(self) -> float:
        return self.deadline - time.monotonic()

    def put_item(self, it: dict[str, Any]) -> None:
        with self.lock:
            if self.sealed:
                return
            self.items[it["path"]] = it
            self.bytes += int(it.get("bytes") or 0)

    def tick(self) -> None:
        with self.lock:
            self.done += 1
            done, total, nbytes = self.done, self.total, self.bytes
        if self.progress is not None:
            self.progress(done, total, nbytes)

    def _place(self, rel: str, data: bytes | None = None, src: str | None = None) -> bool:
        """Put bytes (or a finished temporary file) at ``rel`` in the staging tree, unless sealed."""
        dst = os.path.join(self.staging, rel)
        with self.lock:
            if self.sealed:
                if src:
                    os.unlink(src)
                return False
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.islink(dst):
                os.unlink(dst)
            if src is not None:
                os.replace(src, dst)
            else:
                with open(dst, "wb") as fh:
                    fh.write(data or b"")
            return True

    # -- replay ---------------------------------------------------------------------------------
    def replay(self, ctx: CaptureContext, mod: ModuleType) -> None:
        box: dict[str, Any] = {}

        def work() -> None:
            _nice_thread(self.params.nice)
            try:
                box["snap"] = mod.record(ctx, self.rec)
            except Exception as exc:  # a reader bug must not cost the whole bundle
                log.exception("replay failed")
                box["error"] = f"{type(exc).__name__}: {exc}"

        th = threading.Thread(target=work, name="capture-replay", daemon=True)
        th.start()
        th.join(max(0.0, self.left()))
        if th.is_alive():
            self.partial = True
            self.notes.append(f"replay: not finished by the capture deadline ({self.params.deadline_s:g}s)")
            return
        if "error" in box:
            self.notes.append(f"replay: {box['error']}")
        snap = box.get("snap")
        if snap is not None:
            fill_from_snapshot(ctx, snap)

    def finish_replay(self, ctx: CaptureContext) -> None:
        with self.lock:
            try:
                recorded = self.rec.items(events=self.params.events)
            except OSError as exc:
                self.notes.append(f"replay: {exc}")
                return
            for it in recorded:
                doc = it.as_json()
                doc.setdefault("plugin", "replay")
                self.items.setdefault(doc["path"], doc)

    # -- expansion ------------------------------------------------------------------------------
    def _bindings(self, ctx: CaptureContext, names: tuple[str, ...]) -> list[dict[str, str]]:
        if not names:
            return [{}]
        if "reporter" in names:
            return [{"handle": h, "reporter": r} for h, r in ctx.reporters]
        out: list[dict[str, str]] = [{}]
        for name in names:
            values = {"rail": ctx.rails, "pf": ctx.pfs, "handle": ctx.handles, "rdma": ctx.rdma_ports,
                      "netns": ctx.netns}[name]
            out = [{**b, name: v} for b in out for v in values]
        return out

    def expand(self, ctx: CaptureContext, plug: Plugin) -> tuple[list[_Task], int]:
        tasks: list[_Task] = []
        replayed = 0
        # A step aimed at a PF (its devlink handle, an RDMA port on it) is left out when
        # --exclude-devices names any netdev on that PF, as the readers leave its devlink and RDMA
        # counters alone (``touchable_bdfs``); a rail's own step goes by its name and its PF.
        on_pf = (netdevs_on_functions(ctx.snapshot.links) if ctx.cfg.exclude_devices and ctx.snapshot is not None
                 else {})
        for step in plug.steps:
            names = placeholders(step)
            binds = self._bindings(ctx, names)
            if not binds:
                rel = self._rel(step, {})
                why = f"nothing to read: no {'/'.join(names)} on this node"
                if "netns" in names and not ctx.pod_netns:
                    why = "pod network namespaces are read only with --pod-netns (tenant data, CAP_SYS_ADMIN)"
                self.put_item(mf.item(rel, _kind(step), argv=getattr(step, "argv", None), skipped=True,
                                      reason=why, plugin=plug.name))
                continue
            for b in binds:
                rel = self._rel(step, b)
                if isinstance(step, Command) and rel in self.items:
                    replayed += 1  # the readers' own command, recorded by replay
                    continue
                fw = None
                if isinstance(step, Command) and step.firmware:
                    val = b.get(step.firmware, "")
                    fw = (ctx.rail_pf.get(val) if step.firmware == "rail" else
                          ctx.handle_pf.get(val) if step.firmware == "handle" else
                          ctx.rdma_pf.get(val) if step.firmware == "rdma" else val) or val
                    also = on_pf.get(fw, ()) if step.firmware != "rail" else ()
                    if excluded(ctx.cfg.exclude_devices, val, fw, *also):
                        self.put_item(mf.item(rel, _kind(step), argv=_argv(_Task(plug.name, step, b, rel, fw)),
                                              skipped=True, reason="excluded by --exclude-devices",
                                              plugin=plug.name))
                        continue
                tasks.append(_Task(plug.name, step, b, rel, fw))
        return tasks, replayed

    @staticmethod
    def _rel(step: Step, b: dict[str, str]) -> str:
        if isinstance(step, Command):
            return f"cmd/{slug([_fill(a, b) for a in step.argv])}.stdout"
        if isinstance(step, File):
            return "fs" + _fill(step.glob, b)
        return step.name

    # -- execution ------------------------------------------------------------------------------
    def run_task(self, ctx: CaptureContext, t: _Task) -> None:
        step = t.step
        try:
            if isinstance(step, Command):
                self._command(t, step)
            elif isinstance(step, File):
                self._files(t, step)
            else:
                self._generated(ctx, t, step)
        except Exception as exc:  # one broken step is an item, never a lost bundle
            log.exception("capture step failed", extra={"step": t.rel})
            self.put_item(mf.item(t.rel, _kind(step), argv=getattr(step, "argv", None), skipped=True,
                                  reason=f"failed: {type(exc).__name__}: {exc}", plugin=t.plugin))

    def _command(self, t: _Task, step: Command) -> None:
        argv = tuple(_fill(a, t.binding) for a in step.argv)
        # Checked again once expanded: a rail or namespace name is the node's, not the plug-in's.
        why = refusal(argv)
        if why is not None:
            self.put_item(mf.item(t.rel, "command", argv=argv, skipped=True, reason=f"refused: {why}",
                                  plugin=t.plugin))
            self.notes.append(f"refused: {' '.join(argv)!r}: {why}")
            return
        if t.fw_key is not None:
            why = self.fw_hung.get(t.fw_key) or next(
                (f"firmware reads on {d} hung in an earlier read" for d in self.params.skip_firmware
                 if d in (t.fw_key, *t.binding.values())), None)
            if why:
                self.put_item(mf.item(t.rel, "command", argv=argv, skipped=True,
                                      reason=f"skipped: {why}", plugin=t.plugin))
                return
        tool = os.path.basename(argv[0])
        stuck = next(((tl, dev) for tl, dev in self.params.hung_tools if tl == tool and (not dev or dev in argv)), None)
        if stuck is not None:
            self.put_item(mf.item(t.rel, "command", argv=argv, skipped=True, plugin=t.plugin,
                                  reason=f"skipped: {tool} is stuck in the agent's own read of {stuck[1] or 'it'}"))
            return
        left = self.left()
        if left <= 0:
            self.put_item(mf.item(t.rel, "command", argv=argv, skipped=True, reason=self._late(), plugin=t.plugin))
            return
        timeout = min(step.timeout_s, max(left, 0.1))
        gate = self.params.firmware_gate
        if self.host.live and t.fw_key is not None and gate is not None:
            # Never wait past the deadline: the holder may be a read stuck in the driver.
            if not gate.acquire(t.fw_key, timeout=max(0.0, left - 0.5)):
                self.put_item(mf.item(t.rel, "command", argv=argv, skipped=True, plugin=t.plugin,
                                      reason="skipped: another firmware read held the NIC until the deadline"))
                return
            try:
                timeout = min(step.timeout_s, max(self.left(), 0.1))
                res = self.host.run(argv, timeout_s=timeout, max_bytes=step.max_bytes, keep=step.keep)
            finally:
                gate.release(t.fw_key)
        else:
            res = self.host.run(argv, timeout_s=timeout, max_bytes=step.max_bytes, keep=step.keep)
        base = t.rel[: -len(".stdout")]
        if res.missing:
            self.put_item(mf.item(t.rel, "command", argv=argv, skipped=True, reason=res.why(), plugin=t.plugin))
            return
        if not self._place(t.rel, res.stdout):
            return
        if res.stderr:
            self._place(base + ".stderr", res.stderr)
        if res.rc is not None:
            self._place(base + ".rc", f"{res.rc}\n".encode())
        reason = res.why() if res.timed_out else None
        if res.timed_out and timeout < step.timeout_s:
            reason = f"cut by the capture deadline ({self.params.deadline_s:g}s) after {res.duration_s:.1f}s"
            self._late()
        it = mf.item(t.rel, "command", argv=argv, rc=res.rc, duration_s=res.duration_s, nbytes=len(res.stdout),
                     truncated=res.truncated, timed_out=res.timed_out, plugin=t.plugin, reason=reason)
        self.put_item(it)
        if res.timed_out and t.fw_key is not None and timeout >= step.timeout_s:
            with self.lock:
                self.fw_hung[t.fw_key] = f"{' '.join(argv)} on {t.fw_key} hung (timed out after {res.duration_s:.1f}s)"
                self.hung.append((_source_of(argv), _device_of(argv) or t.fw_key))
                self.notes.append(f"firmware: {' '.join(argv)} timed out; the rest of {t.fw_key}'s firmware "
                                  "reads were skipped")

    def _late(self) -> str:
        self.partial = True
        if not any("deadline" in n for n in self.notes):
            self.notes.append(f"deadline: steps were cut or not started after {self.params.deadline_s:g}s")
        return f"not started: the capture deadline ({self.params.deadline_s:g}s) had passed"

    def _glob(self, pattern: str) -> list[str]:
        if "**" not in pattern:
            return self.host.glob(pattern)
        head, _, tail = pattern.partition("**")
        tail = tail.lstrip("/")
        out: list[str] = []
        for base in self.host.glob(head.rstrip("/") or "/"):
            out.extend(p for p in self.host.walk(base) if not tail or fnmatch.fnmatchcase(posixpath.basename(p), tail))
        return sorted(out)

    def _files(self, t: _Task, step: File) -> None:
        pattern = _fill(step.glob, t.binding)
        paths = self._glob(pattern)
        if not paths:
            self.put_item(mf.item(t.rel, "file", skipped=True, reason=f"{pattern}: no such file on this node",
                                  plugin=t.plugin))
            return
        for path in paths:
            if self.left() <= 0:
                self.put_item(mf.item("fs" + path, "file", skipped=True, reason=self._late(), plugin=t.plugin))
                continue
            if self.host.readlink(path) is not None:
                with self.lock:
                    if not self.sealed:
                        self.rec.readlink(path)  # the symlink, and those on its way, as symlinks
                self.put_item(mf.item("fs" + path, "file", plugin=t.plugin))
                continue
            with self.lock:
                if self.sealed:
                    return
                resolved = self.rec.realpath(path)  # mirrors the symlinks on the way
            if resolved is None or self.host.listdir(path) is not None:
                continue  # gone, or a directory (its files are matched by a glob of their own)
            t0 = time.monotonic()
            fd, tmp = tempfile.mkstemp(dir=self.tmp)
            try:
                with os.fdopen(fd, "wb") as fh:
                    nbytes, truncated = self.host.copy_tail(path, step.max_bytes, fh)
            except OSError as exc:
                os.unlink(tmp)
                why = "not available: not a regular file" if isinstance(exc, NotRegularFile) else exc.strerror or exc
                self.put_item(mf.item("fs" + resolved, "file", skipped=True, reason=f"{path}: {why}", plugin=t.plugin))
                continue
            rel = "fs" + resolved
            if self._place(rel, src=tmp):
                self.put_item(mf.item(rel, "file", duration_s=time.monotonic() - t0, nbytes=nbytes,
                                      truncated=truncated, plugin=t.plugin))

    def _generated(self, ctx: CaptureContext, t: _Task, step: Generated) -> None:
        t0 = time.monotonic()
        data = step.fn(ctx)
        if self._place(t.rel, data):
            self.put_item(mf.item(t.rel, "generated", duration_s=time.monotonic() - t0, nbytes=len(data),
                                  plugin=t.plugin))

    # -- the pool -------------------------------------------------------------------------------
    def execute(self, ctx: CaptureContext, tasks: list[_Task]) -> None:
        units: list[list[_Task]] = []
        chains: dict[str, list[_Task]] = {}
        for t in tasks:
            if t.fw_key is not None:
                chains.setdefault(t.fw_key, []).append(t)
            else:
                units.append([t])
        # Firmware chains first: they are the slowest and run one read at a time each.
        units = list(chains.values()) + units
        with self.lock:
            self.total = len(tasks)
        q: queue.Queue[list[_Task] | None] = queue.Queue()
        for u in units:
            q.put(u)
        finished = threading.Event()
        pending = [len(units)]

        def worker() -> None:
            _nice_thread(self.params.nice)
            while True:
                try:
                    unit = q.get_nowait()
                except queue.Empty:
                    return
                if unit is None:
                    return
                for t in unit:
                    if self.sealed:
                        break
                    t.state = "running"
                    if self.left() <= 0 and not isinstance(t.step, Generated):
                        self.put_item(mf.item(t.rel, _kind(t.step), argv=_argv(t), skipped=True,
                                              reason=self._late(), plugin=t.plugin))
                    else:
                        self.run_task(ctx, t)
                    t.state = "done"
                    self.tick()
                with self.lock:
                    pending[0] -= 1
                    if pending[0] == 0:
                        finished.set()

        if not units:
            return
        for i in range(max(1, min(self.params.parallel, len(units)))):
            threading.Thread(target=worker, name=f"capture-{i}", daemon=True).start()
        # A step that gave up at the deadline gets a moment to say why before the bundle is sealed.
        if not finished.wait(max(0.0, self.left())):
            finished.wait(0.5)
        with self.lock:
            self.sealed = True
            late = [t for t in tasks if t.state != "done"]
        if late:
            self.partial = True
            self.notes.append(f"deadline: {len(late)} step(s) unfinished after {self.params.deadline_s:g}s")
            for t in late:
                why = (f"not finished by the capture deadline ({self.params.deadline_s:g}s)"
                       if t.state == "running" else self._late())
                self.items.setdefault(t.rel, mf.item(t.rel, _kind(t.step), argv=_argv(t), skipped=True,
                                                     reason=why, plugin=t.plugin))

    # -- pack -----------------------------------------------------------------------------------
    def pack(self, writer: BundleWriter, manifest: Manifest) -> Manifest:
        """Pack the staging tree, then ``manifest`` with the packed items (``manifest.json``, last)."""
        for dirpath, dirs, files in os.walk(self.staging):
            dirs.sort()
            rel_dir = os.path.relpath(dirpath, self.staging)
            if rel_dir == ".":
                dirs[:] = [d for d in dirs if d != ".tmp"]
            for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]):
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if rel == "manifest.json":
                    continue
                full = os.path.join(dirpath, name)
                try:
                    got = writer.add_path(rel, full)
                except OSError as exc:
                    self.notes.append(f"{rel}: not packed ({exc.strerror or exc})")
                    continue
                it = self.items.get(rel)
                if got is not None and it is not None and not it.get("skipped"):
                    it["bytes"], it["sha256"] = got
            for d in list(dirs):
                full = os.path.join(dirpath, d)
                if not os.path.islink(full) and not os.listdir(full):
                    writer.add_dir(d if rel_dir == "." else f"{rel_dir}/{d}")
        manifest = dataclasses.replace(manifest, items=tuple(mf.as_item(self.items[k]) for k in sorted(self.items)))
        writer.add_bytes("manifest.json", manifest_to_json(manifest).encode())
        return manifest


_PLACE = re.compile(r"\{(rail|pf|handle|rdma|reporter|netns)\}")


def _fill(text: str, binding: dict[str, str]) -> str:
    """Put a binding's values into a step's argv word or glob; unbound placeholders stay."""
    if "{" not in text:
        return text
    return _PLACE.sub(lambda m: binding.get(m.group(1), m.group(0)), text)


def _kept_times(host: Host) -> dict[str, Any]:
    """A node image captured again keeps its capture time: the event windows are measured from it."""
    m = host.image.manifest if host.image is not None else None
    if host.live or m is None:
        return {}
    return {k: v for k, v in (("started_at", m.started_at), ("ended_at", m.ended_at)) if v is not None}


def _kind(step: Step) -> str:
    return "command" if isinstance(step, Command) else "file" if isinstance(step, File) else "generated"


def _argv(t: _Task) -> list[str] | None:
    if isinstance(t.step, Command):
        return [_fill(a, t.binding) for a in t.step.argv]
    return None


def capture(host: Host, out: IO[bytes] | None, params: CaptureParams, *,
            plugin_modules: list[ModuleType] | None = None, staging_dir: str | None = None,
            on_chunk: Callable[[bytes], None] | None = None,
            progress: Callable[[int, int, int], None] | None = None,
            unique: Callable[[str], bool] | None = None) -> CaptureResult:
    """Capture ``host`` into a bundle written to ``out`` (and/or ``on_chunk``). Never raises for
    what the node lacks; raises ``OSError`` only when the bundle itself cannot be written.
    ``unique(name)`` says whether a bundle name is free (a second capture within the same second
    gets ``<name>-2``)."""
    def writer(name: str, redactor: Redactor, staging: str, mtime: float) -> BundleWriter:
        return BundleWriter(out, name, redactor, on_chunk=on_chunk, tmp_dir=staging, mtime=mtime)

    return _capture(host, params, writer, plugin_modules=plugin_modules, staging_dir=staging_dir, progress=progress,
                    unique=unique)


def _capture(host: Host, params: CaptureParams, make_writer: Callable[[str, Redactor, str, float], Any], *,
             plugin_modules: list[ModuleType] | None = None, staging_dir: str | None = None,
             progress: Callable[[int, int, int], None] | None = None,
             unique: Callable[[str], bool] | None = None) -> CaptureResult:
    mods = plugin_modules if plugin_modules is not None else load(params.plugins)
    bundle_id = params.bundle_id or uuid.uuid4().hex[:16]
    staging = tempfile.mkdtemp(prefix=".railscope-capture-", dir=staging_dir)
    try:
        run = _Run(host, params, staging, progress)
        ctx = CaptureContext(host=host, cfg=params.cfg, events=params.events, recorder_jsonl=params.recorder_jsonl,
                             recorder_gap_s=params.recorder_gap_s, deadline=run.deadline, pod_netns=params.pod_netns)
        ok: list[ModuleType] = []
        for mod in mods:
            plug: Plugin = mod.PLUGIN
            entry: dict[str, Any] = {"name": plug.name, "version": plug.version, "description": plug.description}
            try:
                check_plugin(plug)
            except PluginRefused as exc:
                entry["refused"] = str(exc)
                run.notes.append(str(exc))
                log.error("capture plug-in refused", extra={"plugin": plug.name, "entry": exc.entry})
            else:
                ok.append(mod)
            run.plugins.append(entry)
        replay = next((m for m in ok if m.PLUGIN.name == "replay"), None)
        if replay is not None:
            run.replay(ctx, replay)
            run.finish_replay(ctx)
        snap = ctx.snapshot
        node = params.node or (snap.node if snap else None) or "node"
        tasks: list[_Task] = []
        for mod in ok:
            if mod is replay:
                continue
            entry = next(e for e in run.plugins if e["name"] == mod.PLUGIN.name)
            why = mod.skip(ctx) if hasattr(mod, "skip") else None
            if why:
                entry["skipped"] = why
                for step in mod.PLUGIN.steps:
                    rel = run._rel(step, {k: "{" + k + "}" for k in placeholders(step)})
                    run.put_item(mf.item(rel, _kind(step), argv=getattr(step, "argv", None), skipped=True,
                                         reason=why, plugin=mod.PLUGIN.name))
                continue
            got, replayed = run.expand(ctx, mod.PLUGIN)
            entry["steps"] = len(got)
            if replayed:
                entry["recorded_by_replay"] = replayed
            tasks.extend(got)
        run.execute(ctx, tasks)

        redactor = Redactor()
        if params.redact_key is not None:
            names = {node}
            if snap is not None and snap.versions.hostname:
                names.add(snap.versions.hostname)
                names.add(snap.versions.hostname.split(".")[0])
            redactor = Redactor(params.redact_key, names)
        shown_node = redactor.text(node) if redactor.pseudonymising else node
        name = params.name or bundle_name(shown_node, run.started_at)
        if params.name is None and unique is not None:
            base, n = name, 1
            while not unique(name) and n < 1000:
                n += 1
                name = f"{base}-{n}"
        ended = time.time()
        times = {"started_at": _iso(run.started_at),
                 # Rounded up: an event of the last second must fall inside the window that ends here.
                 "ended_at": _iso(math.ceil(ended)),
                 **_kept_times(host)}
        expectations = params.expectations
        if expectations is not None:
            # the cabling map's rows of this node only: the bundle is this node's (RailPeerMismatch replays)
            expectations = cabling_of_node(expectations, (node, snap.node if snap else None,
                                                          snap.versions.hostname if snap else None))
        extra: dict[str, Any] = {
            "bundle_id": bundle_id,
            **({"expectations": expectations} if expectations is not None else {}),
            "capture": {
                "deadline_s": params.deadline_s, "parallel": params.parallel, "nice": params.nice,
                "redact": redactor.pseudonymising, "pod_netns": params.pod_netns,
                "recorder_gap_s": params.recorder_gap_s, "plugins": list(params.plugins),
                "partial": run.partial, "duration_s": round(time.monotonic() - run.t0, 3),
            },
            "plugins": run.plugins,
            "notes": run.notes,
            "hung": [{"source": s, "device": d} for s, d in sorted(set(run.hung))],
        }
        manifest = Manifest(schema=SCHEMA, node=shown_node, cluster=params.cluster, incident=params.incident,
                            reason=params.reason, agent_version=__version__, extra=extra, **times)
        writer = make_writer(name, redactor, staging, ended)
        manifest = run.pack(writer, manifest)
        nbytes, digest = writer.close()
        return CaptureResult(name, bundle_id, nbytes, digest, manifest.as_json(), tuple(sorted(set(run.hung))),
                             run.partial,
                             snapshot=snap, started_ts=run.started_at)
    finally:
        # A worker stuck past the deadline (a read hung in the driver) may still hold a file here.
        shutil.rmtree(staging, ignore_errors=True)


def output_path(out: str, name: str) -> str:
    """``-o FILE|DIR``: a directory (existing, or ending in ``/``) gets ``<name>.tar.gz`` inside."""
    if out.endswith("/") or os.path.isdir(out):
        return os.path.join(out, name + ".tar.gz")
    return out


def capture_to_file(host: Host, out: str, params: CaptureParams, *,
                    before_sha256: Callable[[CaptureResult], None] | None = None, **kw: Any) -> CaptureResult:
    """Capture into a file (``out``: a file, or a directory for ``<name>.tar.gz``), written under a
    temporary name and renamed when complete, with ``<file>.sha256`` beside it."""
    node = params.node
    probe_name = params.name or bundle_name(node)
    target = os.path.abspath(output_path(out, probe_name))
    if params.name is None and not (out.endswith("/") or os.path.isdir(out)):
        base = os.path.basename(target)
        for ext in (".tar.gz", ".tgz"):
            if base.endswith(ext):
                base = base[: -len(ext)]
        params = _replace(params, name=_NAME_BAD.sub("-", base.lower()) or probe_name)
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"{parent}: cannot create ({exc.strerror or exc})") from None
    fd, part = tempfile.mkstemp(prefix=".railscope-", suffix=".tar.gz.part", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            def free(name: str) -> bool:
                return not os.path.lexists(os.path.join(parent, name + ".tar.gz"))

            res = capture(host, fh, params, staging_dir=parent, unique=free if params.name is None else None, **kw)
            fh.flush()
            os.fsync(fh.fileno())
        if params.name is None:
            target = os.path.abspath(output_path(out, res.name))
        if os.path.lexists(target):
            raise CaptureError(f"{target}: exists, refusing to overwrite")
        os.chmod(part, 0o600)
        os.rename(part, target)
    except BaseException:
        if os.path.exists(part):
            os.unlink(part)
        raise
    res.path = target
    if before_sha256 is not None:
        before_sha256(res)
    # Last: a bundle with its .sha256 is complete (the uploader sends only those).
    write_sha256_file(target, res.sha256)
    return res


def _replace(params: CaptureParams, **kw: Any) -> CaptureParams:
    import dataclasses

    return dataclasses.replace(params, **kw)


def capture_to_dir(host: Host, out_dir: str, params: CaptureParams, **kw: Any) -> CaptureResult:
    """Capture into a node image *directory* (``railscope record``). ``out_dir`` must not exist or
    be empty; the image is built beside it and moved into place at the end, so a failure leaves no
    half image behind."""
    out_dir = os.path.abspath(out_dir)
    _check_out_dir(out_dir)
    parent = os.path.dirname(out_dir)
    try:
        os.makedirs(parent, exist_ok=True)
        work = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.", dir=parent)
    except OSError as exc:
        raise CaptureError(f"{out_dir}: cannot write here ({exc.strerror or exc})") from None
    image = os.path.join(work, "image")
    try:
        res = _capture(host, params, lambda name, red, staging, mtime: DirWriter(image, red),
                       staging_dir=work, **kw)
        _check_out_dir(out_dir)
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)
        os.rename(image, out_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res.path = out_dir
    return res


def _check_out_dir(out_dir: str) -> None:
    if os.path.lexists(out_dir):
        if not os.path.isdir(out_dir):
            raise CaptureError(f"{out_dir}: exists and is not a directory")
        if os.listdir(out_dir):
            raise CaptureError(f"{out_dir}: directory is not empty, refusing to overwrite")
