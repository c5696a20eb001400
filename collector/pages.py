"""Incident pages for operators in a browser: server-rendered HTML, no script (operator role).

- ``GET /ui/`` the incidents in the store, newest first, each with the worst of its alert's severity and
  its analysed bundles' findings;
- ``GET /ui/incidents/<cluster>/<date>/<incident>`` an incident: its bundles by node with each node's
  worst findings and their messages, each next step once with the findings it serves, and the fleet view — the same code on the same rail (subject) of N nodes, a hint
  of a fabric cause (one leaf switch, one cable bundle) rather than N broken nodes;
- ``GET /ui/fabric`` the fleet's fabric events: the leaves, planes and optics batches whose rails
  degraded together in this replica's window (``collector.fabric``), their culprits and victims;
- ``GET /ui/bundles/<cluster>/<date>/<incident>/<name>`` a bundle's report: the same page as
  ``railscope report --html``, rendered from the stored bundle with the agent's offline parts
  (recorded host, readers, analysis, report);
- ``GET /ui/bundles/…/<name>/download`` streams the object (the bundle API's fetch).

A browser sends the operator token as HTTP Basic credentials (any user name, the token as the
password: a 401 asks for them with ``WWW-Authenticate: Basic``) or as a bearer token (a proxy, a
script). The analysis of a bundle is cached beside it in the store as small objects: a summary
(``<name>.analysis.json``, the worst findings: all an incident page reads, written to fit the cap it
is read back under), the report page (``<name>.analysis.html``, bounded by the report's own caps) and
an empty marker whose name says the findings' worst severity (``<cluster>/.worst/…/<name>.critical``:
the incidents list reads them from one listing per cluster). The summary is keyed by the bundle's sha256 and the
railscope version and the expectations judged (``RAILSCOPE_<FLAG>`` variables, as doctor reads them),
so no page reads a large bundle twice; analyses run one at a time per replica, off the event loop, and
two pages asking for the same bundle share one analysis (a lock per bundle, held in a weak map while
pages wait on it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import time
import weakref
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from agent import __version__
from agent.expectations import expectations_from_env
from agent.report.html import CSS, esc, pill
from proto.keys import BundleKey, KeyPartError, check_part, parse_name

from . import limits
from .errors import Refused
from .fabric import Event, FabricConfig, correlate, signals_of_doctor
from .state import ANALYSIS_EXPECT, ANALYSIS_LOCKS, ANALYSIS_SLOTS, BOARD, FABRIC, LIMITS, STATE, Collector
from .storage import Stored, StoreError

__all__ = ["analysis_of", "fabric", "incident", "index", "refused", "report", "setup"]

SCHEMA = "railscope.analysis/v1"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_REALM = 'Basic realm="railscope collector", charset="UTF-8"'
#: Worst findings shown per node on the incident page (the report page has them all).
WORST = 4



#: What the incident page adds to the report's styles: a finding and its message as one block.
_CSS = ".finding{margin:.1em 0 .45em}.finding .message{margin-top:.1em}"


def _page(title: str, body: str, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    text = ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
            "img-src data:; form-action 'none'; base-uri 'none'\">"
            "<meta name=viewport content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}{_CSS}</style></head><body><main>{body}"
            f"<footer>railscope collector {esc(__version__)}</footer></main></body></html>\n")
    return web.Response(text=text, status=status, content_type="text/html", headers=_security(headers))


def _security(headers: dict[str, str] | None = None) -> dict[str, str]:
    # Pages hold topology and kernel logs: never cached by a shared proxy, never framed, no script.
    return {"Cache-Control": "private, no-store", "X-Content-Type-Options": "nosniff",
            "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
            "form-action 'none'; base-uri 'none'",
            **(headers or {})}


_TITLES = {400: "Bad key", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 503: "Store unavailable"}


def refused(r: Refused) -> web.Response:
    """A refusal as a page (``collector.guard`` counts it); a 401 asks the browser for credentials."""
    title = _TITLES.get(r.status, str(r.status))
    body = f"<h1>{esc(title)}</h1><p>{esc(r.message)}</p>"
    if r.status in (401, 403):
        body = (f"<h1>{r.status}</h1><p>{esc(r.message)}. This page needs the collector's operator token (as the "
                "password of HTTP Basic credentials, or a bearer token).</p>")
    headers = {"WWW-Authenticate": _REALM} if r.status == 401 else None
    return _page(title, body, r.status, headers)


# -- analysis, cached beside the bundle ------------------------------------------------------------

def _cache_rel(key: BundleKey, suffix: str = ".analysis.json") -> str:
    return f"{key.dir}/{key.name}{suffix}"


async def _cache_read(col: Collector, key: BundleKey, suffix: str, cap: int) -> bytes | None:
    """A cached object beside ``key`` of at most ``cap`` bytes; None when absent, larger or unreadable."""
    try:
        raw = await col.store.get_small(_cache_rel(key, suffix), cap + 1)
    except StoreError:
        col.metrics.storage_errors.labels("read").inc()
        return None
    return None if raw is None or len(raw) > cap else raw


async def _cache_get(col: Collector, key: BundleKey) -> dict[str, Any] | None:
    """The cached summary of ``key``; None when there is none, it cannot be read or is not one."""
    raw = await _cache_read(col, key, ".analysis.json", limits.SUMMARY_BYTES)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None


#: What the incidents list shows of a bundle's findings: an empty object whose name says their worst
#: severity, ``<cluster>/.worst/<date>/<incident>/<name>.critical``: one listing per cluster of these
#: alone (beside the claims' ``<cluster>/.ids/``), never a read per bundle, nor a second listing of them.
#: ``unreadable``: analysed, and the bundle could not be read.
WORST_SEVERITIES = ("critical", "warning", "info", "ok", "unreadable")


def worst_severity(doc: dict[str, Any]) -> str:
    """The worst severity of an analysis' findings, ``ok`` for none, ``unreadable`` for an error document."""
    doctor = doc.get("doctor")
    if "error" in doc or not isinstance(doctor, dict):
        return "unreadable"
    sevs = [str(f.get("severity")) for f in doctor.get("findings", []) if isinstance(f, dict)]
    return min((s for s in sevs if s in _RANK), key=_RANK.__getitem__, default="ok")


async def _cache_put(col: Collector, key: BundleKey, doc: dict[str, Any], page: str | None) -> None:
    """The page first, then the summary that names its digest: a summary is never ahead of its page;
    then the worst-severity marker the incidents list reads (the others of an earlier analysis removed).
    The store writes all 0o640 like the bundle beside them: they quote what the bundle holds."""
    if page is not None:
        await col.store.put_small(_cache_rel(key, ".analysis.html"), page.encode())
    await col.store.put_small(_cache_rel(key), limits.summary_bytes(doc))
    worst = worst_severity(doc)
    for sev in WORST_SEVERITIES:
        if sev == worst:
            await col.store.put_small(_marker_rel(key, sev), b"")
        else:
            await col.store.delete_small(_marker_rel(key, sev))


def _marker_rel(key: BundleKey, sev: str) -> str:
    return f"{key.cluster}/.worst/{key.date}/{key.incident}/{key.name}.{sev}"


#: One analysis may take this long and this much address space; it runs in a process of its own,
#: so a bundle built to exhaust either costs that process, never the collector.
ANALYSIS_TIMEOUT_S = 120.0
ANALYSIS_MEMORY_BYTES = 2 << 30
#: Un-analysed bundles one incident page analyses; the others say "analysis pending" and are
#: analysed by later requests or by their own report page.
PAGE_ANALYSES = 4

async def _analyse_in_child(path: str, source: str) -> dict[str, Any]:
    """``python -m collector.analysis`` bounded in time and memory; a failure is an error document."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "collector.analysis", path, source, str(ANALYSIS_MEMORY_BYTES), env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None

    async def talk() -> tuple[bytes, bytes]:
        # Read with a cap, never whole: the child's answer is what a hostile bundle makes of it.
        out, err = await asyncio.gather(limits.read_capped(proc.stdout, limits.ANALYSIS_OUTPUT_BYTES),
                                        limits.read_capped(proc.stderr, 1 << 20))
        await proc.wait()
        return out, err

    try:
        out, err = await asyncio.wait_for(talk(), ANALYSIS_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {"error": f"the analysis took longer than {ANALYSIS_TIMEOUT_S:g} s", "transient": True}
    except limits.OutputTooLarge:
        proc.kill()
        await proc.wait()
        return {"error": f"the analysis gave more than {limits.ANALYSIS_OUTPUT_BYTES >> 20} MiB"}
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    if proc.returncode != 0:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        why = "out of memory" if "MemoryError" in last[0] else last[0][:200]
        return {"error": f"the analysis failed: {why}".replace(path, source)}
    try:
        # Parsed in a worker thread: megabytes of JSON would hold the event loop (and /healthz).
        doc = await asyncio.get_running_loop().run_in_executor(None, json.loads, out)
    except ValueError:
        return {"error": "the analysis gave no result"}
    return doc if isinstance(doc, dict) else {"error": "the analysis gave no result"}


async def analysis_of(request: web.Request, stored: Stored, analyse: bool = True,
                      page: bool = False) -> dict[str, Any]:
    """The cached analysis of a stored bundle, made (once) when there is none for its digest.

    The summary (``doctor``, the worst findings) only; with ``page`` the report page too, as ``html``.
    With ``analyse`` false, a bundle without a current analysis gives ``{"pending": True}``. Its rails'
    LLDP peers teach the fabric desk each rail's leaf (``collector.fabric.PeerMap``).
    """
    doc = await _analysis_of(request, stored, analyse, page)
    desk = request.app.get(FABRIC)
    if desk is not None and isinstance(doc.get("doctor"), dict):
        try:
            t = datetime.strptime(stored.key.stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
        except ValueError:
            t = None
        if t is not None:
            desk.peers.learn(stored.key.node, doc["doctor"], t, time.time())
    return doc


async def _analysis_of(request: web.Request, stored: Stored, analyse: bool, page: bool) -> dict[str, Any]:
    col = request.app[STATE]
    key = stored.key
    locks = request.app[ANALYSIS_LOCKS]
    # A weak map: the lock lives while a page holds or waits on it, then its entry goes (a map of
    # every bundle ever listed grew without end).
    lock = locks.get(key.rel)
    if lock is None:
        lock = locks[key.rel] = asyncio.Lock()
    async with lock:
        exp = request.app[ANALYSIS_EXPECT]
        # "+recorded": analyses made before bundles' own expectations were applied are stale
        judged = repr(exp) + "+recorded"
        cached = await _cache_get(col, key)
        if cached is not None and cached.get("sha256") == stored.sha256 and cached.get("version") == __version__ \
                and cached.get("expectations") == judged:
            if not page or "error" in cached:
                return cached
            html = await _cache_read(col, key, ".analysis.html", limits.PAGE_BYTES)
            if html is not None:
                return {**cached, "html": html.decode("utf-8", "replace")}
            # The summary without its page (removed, or too large to read back): analysed again.
        if not analyse:
            return {"pending": True, "key": key.rel}
        try:
            async with request.app[ANALYSIS_SLOTS]:
                doc = await _analyse_stored(col, stored, exp)
        except (StoreError, FileNotFoundError) as exc:
            # The store failed, not the bundle: say so on the page, cache nothing, try again next time.
            col.metrics.storage_errors.labels("read").inc()
            return {"error": f"the store could not be read ({exc})", "key": key.rel}
        if doc.pop("transient", False):
            # A timeout may be the machine's load, not the bundle: not cached, tried again later.
            return doc
        doc.update(schema=SCHEMA, sha256=stored.sha256, version=__version__, key=key.rel, expectations=judged)
        html = doc.pop("html", None)
        html = html if isinstance(html, str) else None
        if isinstance(doc.get("doctor"), dict):
            doc["doctor"] = limits.summarise_doctor(doc["doctor"])
        # Written to fit the cap it is read back under: a summary past it was never read, and every
        # view analysed the bundle again in the replica's one analysis slot.
        doc = limits.fit_summary(doc)
        try:
            await _cache_put(col, key, doc, html)
        except Exception as exc:  # a cache that cannot be written costs time, not the page
            col.metrics.storage_errors.labels("write").inc()
            doc.setdefault("cache_error", str(exc)[:200])
        if page and html is not None:
            return {**doc, "html": html}
        return doc


async def _analyse_stored(col: Collector, stored: Stored, exp: Any) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    fd, tmp = tempfile.mkstemp(prefix="railscope-analysis-", suffix=".tar.gz")
    try:
        with os.fdopen(fd, "wb") as fh:
            n = 0
            async for piece in col.store.read(stored.key):
                n += len(piece)
                if n > col.settings.max_bundle_bytes:
                    return {"error": f"{stored.key.name}: larger than the collector's bundle cap"}
                await loop.run_in_executor(None, fh.write, piece)
        return await _analyse_in_child(tmp, stored.key.name)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# -- pages ---------------------------------------------------------------------------------------

def _incident_url(cluster: str, date: str, incident: str) -> str:
    return f"/ui/incidents/{cluster}/{date}/{incident}"


def _bundle_url(key: BundleKey) -> str:
    return f"/ui/bundles/{key.rel}"


async def _list(request: web.Request, with_sha256: bool = True, **filters: str | None) -> list[Stored]:
    col = request.app[STATE]
    try:
        return await col.store.list(filters.get("cluster"), filters.get("date"), filters.get("incident"), None,
                                    with_sha256=with_sha256)
    except StoreError as exc:
        col.metrics.storage_errors.labels("list").inc()
        raise Refused(503, "store_unavailable", str(exc)) from None


def size_words(n: int) -> str:
    """Bytes for people: ``812 B``, ``4.2 KiB``, ``12.3 MiB``, ``1.1 GiB``."""
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n_f = n / 1024
        if n_f < 1024 or unit == "TiB":
            return f"{n_f:.1f} {unit}"
        n = int(n_f)
    return f"{n} B"  # not reached


def _when(stamp: str) -> str:
    """``20261201T093823Z`` as ``2026-12-01 09:38:23Z``."""
    return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z" if len(stamp) == 16 else stamp


_RANK = {"critical": 0, "warning": 1, "info": 2}


def _event_code(incident: str) -> str | None:
    """The event code of an agent's own capture incident (``linkflapping-20261201t093823z``)."""
    from agent.findings import EVENT_CODES

    head = incident.rsplit("-", 1)[0] if re.search(r"-\d{8}t\d{6}z$", incident) else ""
    return next((c for c in EVENT_CODES if c.lower() == head), None)


async def index(request: web.Request) -> web.Response:
    """The incidents, newest first: when, how bad, which alerts, how many nodes, how much to download."""
    # The index shows no digest: on S3 a listing without one GET per bundle (1,000 bundles on SeaweedFS:
    # 3.2 s -> 0.23 s, bench/bench_listing.py).
    found = await _list(request, with_sha256=False)
    found_worst = await _worst_of_bundles(request, {s.key.cluster for s in found})
    incidents: dict[tuple[str, str, str], list[Stored]] = {}
    for s in found:
        incidents.setdefault((s.key.cluster, s.key.date, s.key.incident), []).append(s)
    # What asked for the captures: the requests this replica's board holds (kept a day after done).
    asked: dict[str, tuple[set[str], str | None]] = {}
    board = request.app.get(BOARD)
    if board is not None:
        try:
            await board.fresh()
        except StoreError:
            pass  # the page still lists the bundles
        for r in board.all():
            names, sev = asked.get(r.incident, (set(), None))
            if r.alertname:
                names.add(r.alertname)
            if r.severity in _RANK and (sev is None or _RANK[r.severity] < _RANK[sev]):
                sev = r.severity
            asked[r.incident] = (names, sev)
    rows = []
    for (c, d, i), bundles in sorted(incidents.items(), key=lambda kv: (max(b.key.stamp for b in kv[1]), kv[0]),
                                     reverse=True):
        names, sev = asked.get(i, (set(), None))
        if not names and (code := _event_code(i)) is not None:
            names, sev = {f"{code} (the agent's own event)"}, sev
        stamps = sorted(b.key.stamp for b in bundles)
        when = _when(stamps[0]) + (f" – {_when(stamps[-1])[11:]}" if stamps[-1] != stamps[0] else "")
        nodes = {b.key.node for b in bundles}
        rows.append(
            f'<tr><td class=mono><a href="{esc(_incident_url(c, d, i))}">{esc(i)}</a></td><td class=mono>{esc(when)}</td>'
            f"<td>{_severity_cell(sev, [found_worst.get(b.key.rel) for b in bundles])}</td>"
            f"<td>{esc(', '.join(sorted(names))) or '<span class=muted>asked by an operator or none</span>'}</td>"
            f"<td>{len(nodes)}</td><td>{len(bundles)}</td><td>{esc(size_words(sum(b.bytes for b in bundles)))}</td>"
            f"<td class=mono>{esc(c)}</td></tr>")
    body = ('<h1>Incidents</h1><p class=sub><a href="/ui/fabric">Fabric events</a>: the leaves and planes whose '
            "rails degraded together</p>" + (
        "<table id=incidents><thead><tr><th>Incident</th><th>Captured (UTC)</th><th>Severity</th><th>Alerts</th>"
        f"<th>Nodes</th><th>Bundles</th><th>Size</th><th>Cluster</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        if rows else "<p>No bundles stored.</p>"))
    return _page("railscope incidents", body)


async def _worst_of_bundles(request: web.Request, clusters: Iterable[str]) -> dict[str, str]:
    """Bundle key -> the worst severity of its analysed findings (``ok`` for none), from the markers
    ``_cache_put`` writes: one listing per cluster, no read per bundle."""
    col = request.app[STATE]
    out: dict[str, str] = {}
    for cluster in sorted(clusters):
        top = f"{cluster}/.worst"
        try:
            rels = await col.store.list_small(top)
        except StoreError:
            col.metrics.storage_errors.labels("list").inc()
            continue  # the page still lists the bundles, their findings unsaid
        for rel, _tag in rels:
            head, dot, sev = rel[len(top) + 1:].rpartition(".")
            head = f"{cluster}/{head}"
            rank = WORST_SEVERITIES.index(sev) if dot and sev in WORST_SEVERITIES else None
            if rank is not None and (head not in out or rank < WORST_SEVERITIES.index(out[head])):
                out[head] = sev  # two markers (an analysis' swap of them caught midway): the worse
    return out


def _severity_cell(alert: str | None, bundles: list[str | None]) -> str:
    """The worst of the alert's severity and the analysed bundles' findings; how many are not analysed."""
    known = [b for b in bundles if b is not None]
    worst = min([s for s in [alert, *known] if s in _RANK], key=_RANK.__getitem__, default=None)
    if worst is not None:
        cell = pill(worst)
    elif "ok" in known:
        cell = '<span class="pill ok">OK</span>'
    else:
        cell = "<span class=muted>–</span>"
    if (bad := known.count("unreadable")):
        cell += f" <span class=muted>{bad} unreadable</span>"
    if len(known) < len(bundles):
        cell += (f' <span class=muted>{len(bundles) - len(known)} of {len(bundles)} bundle(s) not analysed: '
                 "open the incident</span>")
    return cell


#: Characters of a finding's message shown on the incident page (the report page has it whole).
MESSAGE_CHARS = 300


class _Steps:
    """The next steps of an incident page: each step once, the worst first, with the findings (code,
    subject, nodes) it serves; a finding or a fleet row links to its step (agent/findings.py NEXT_STEPS)."""

    def __init__(self) -> None:
        self.serves: dict[str, dict[tuple[str, str], set[str]]] = {}
        self.rank: dict[str, int] = {}
        self.number: dict[str, int] = {}

    def add(self, code: Any, subject: Any, nodes: Iterable[str], severity: Any) -> None:
        """Note a finding shown on the page; a code this collector does not know has no step."""
        from agent.findings import next_step

        step = next_step(str(code))
        if step:
            self.serves.setdefault(step, {}).setdefault((str(code), str(subject)), set()).update(nodes)
            self.rank[step] = min(self.rank.get(step, 3), _RANK.get(str(severity), 3))

    def ref(self, code: Any) -> str:
        """The link to ``code``'s step (numbered, once every finding is added); nothing without one."""
        from agent.findings import next_step

        if not self.number:
            order = sorted(self.serves, key=lambda st: (self.rank[st], -len(self.serves[st])))
            self.number = {st: n for n, st in enumerate(order, 1)}
        n = self.number.get(next_step(str(code)) or "")
        return f'<a class="muted next" href="#step-{n}">next step {n}</a>' if n else ""

    def html(self) -> str:
        if not self.serves:
            return ""
        items = []
        for step, n in sorted(self.number.items(), key=lambda kv: kv[1]):
            serves = self.serves[step]
            what = "; ".join(f"<code>{esc(c)}</code> <code>{esc(subj)}</code> on "
                             f"<span class=mono>{_names(sorted(nodes)[:16], len(nodes))}</span>"
                             for (c, subj), nodes in list(serves.items())[:32])
            more = f' <span class=muted>and {len(serves) - 32} more</span>' if len(serves) > 32 else ""
            items.append(f'<li id="step-{n}"><p>{esc(step)}</p><p class=muted>For {what}{more}</p></li>')
        return f"<h2>Next steps</h2><ol id=steps>{''.join(items)}</ol>"


def _message(f: dict[str, Any]) -> str:
    msg = str(f.get("message") or "")
    if not msg:
        return ""
    cut = msg if len(msg) <= MESSAGE_CHARS else msg[:MESSAGE_CHARS - 1] + "…"
    return f"<div class=message>{esc(cut)}</div>"


def _worst(doc: dict[str, Any]) -> list[dict[str, Any]]:
    findings = doc.get("doctor", {}).get("findings", []) if isinstance(doc.get("doctor"), dict) else []
    return [f for f in findings if isinstance(f, dict)][:WORST]


def _fleet(by_node: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, str, str, list[str]]]:
    """(code, subject, worst severity, nodes) seen on two nodes or more, most nodes first."""
    seen: dict[tuple[str, str], tuple[str, set[str]]] = {}
    rank = {"critical": 0, "warning": 1, "info": 2}
    for node, doc in by_node:
        doctor = doc.get("doctor") if isinstance(doc.get("doctor"), dict) else {}
        for f in doctor.get("findings", []):
            if not isinstance(f, dict) or f.get("subject") == "node":
                continue  # node-wide codes say nothing of a shared rail
            k = (str(f.get("code")), str(f.get("subject")))
            sev, nodes = seen.get(k, ("info", set()))
            if rank.get(str(f.get("severity")), 3) < rank.get(sev, 3):
                sev = str(f.get("severity"))
            nodes.add(node)
            seen[k] = (sev, nodes)
    out = [(c, s, sev, sorted(n)) for (c, s), (sev, n) in seen.items() if len(n) >= 2]
    out.sort(key=lambda t: (-len(t[3]), rank.get(t[2], 3), t[0], t[1]))
    return out


def _names(names: list[str], total: int) -> str:
    shown = esc(", ".join(names))
    return shown + (f' <span class=muted>and {total - len(names)} more</span>' if total > len(names) else "")


def _event_html(ev: Event, link: str | None = None) -> str:
    """One fabric event: what it is, how many nodes and rails, who sends pause and who is paused."""
    what = {"leaf": "Leaf", "plane": "Plane", "batch": "Optics batch"}[ev.kind]
    title = esc(ev.title())
    if link:
        title = f'<a href="{esc(link)}">{title}</a>'
    rows = "".join(f"<tr><td class=mono>{esc(n)}</td><td class=mono>{esc(r)}</td><td class=mono>{esc(p)}</td>"
                   f"<td>{pill(sev) if sev in _RANK else esc(sev)}</td><td class=mono>{esc(c)}</td></tr>"
                   for n, r, p, c, sev in ev.members)
    j = ev.to_json()
    sides = []
    if ev.culprits_total:
        sides.append(f"<b>Culprit{'s' if ev.culprits_total > 1 else ''}</b> (sends pause, storms): "
                     f"<span class=mono>{_names(ev.culprits, ev.culprits_total)}</span>")
    if ev.victims_total:
        sides.append(f"<b>Victims</b> (paused by the leaf): <span class=mono>{_names(ev.victims, ev.victims_total)}</span>")
    leaves = (f"<p>Leaves: <span class=mono>{_names(ev.leaves[:16], len(ev.leaves))}</span></p>"
              if ev.kind == "plane" else "")
    plane = f", plane <span class=mono>{esc(ev.plane)}</span>" if ev.plane and ev.kind != "plane" else ""
    return (f'<section class="fabric {esc(ev.kind)}"><h3>{what}: {title}</h3>'
            f"<p><b>{ev.nodes}</b> nodes' rails degraded together since {esc(j['since'])}{plane}; rails "
            f"<span class=mono>{esc(', '.join(j['rails']))}</span>; "
            f"{esc(', '.join(f'{c} ×{n}' for c, n in j['codes'].items()))}.</p>{leaves}"
            + "".join(f"<p>{x}</p>" for x in sides) +
            "<table class=members><thead><tr><th>Node</th><th>Rail</th><th>Peer port</th><th>Severity</th>"
            f"<th>Signal</th></tr></thead><tbody>{rows}</tbody></table></section>")


def _fabric_config(request: web.Request) -> FabricConfig:
    lim = request.app.get(LIMITS)
    if lim is None:
        return FabricConfig()
    return FabricConfig(window_s=lim.fabric_window_s, leaf_min_nodes=lim.leaf_min_nodes,
                        plane_min_leaves=lim.plane_min_leaves)


def _incident_fabric(request: web.Request, incident_id: str, docs: list[tuple[Stored, dict[str, Any]]]) -> str:
    """The fabric event of this incident: as the alerts saw it (this replica's window), and as the
    captured nodes' diagnoses see it (each rail's LLDP neighbour and findings)."""
    parts = []
    desk = request.app.get(FABRIC)
    if desk is not None:
        for ev in desk.ledger.correlation().events:
            if ev.incident == incident_id:
                parts.append("<p class=muted>From the alerts of the event (this collector's window):</p>"
                             + _event_html(ev))
    signals, known = [], []
    stamps = sorted(s.key.stamp for s, d in docs if isinstance(d.get("doctor"), dict))
    # The captures of one incident are judged as one moment (its first capture): their diagnoses say
    # what degraded, not when each node was captured.
    t = datetime.strptime(stamps[0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp() if stamps else 0.0
    for s, d in docs:
        if isinstance(d.get("doctor"), dict) and "error" not in d:
            sig, seen = signals_of_doctor(d["doctor"], t, s.key.node)
            signals += sig
            known += seen
    if stamps and signals:
        cfg = _fabric_config(request)
        found = correlate(signals, FabricConfig(window_s=cfg.window_s, leaf_min_nodes=min(cfg.leaf_min_nodes, 2),
                                                plane_min_leaves=cfg.plane_min_leaves), known).top
        if found:
            parts.append("<p class=muted>From the captured nodes' diagnoses (their rails' LLDP neighbours):</p>"
                         + "".join(_event_html(ev) for ev in found))
    if not parts:
        return ""
    return ("<h2>Fabric</h2><p>Rails of several nodes that degraded together behind one leaf switch or one plane: "
            "look at the switch side first.</p>" + "".join(parts))


async def fabric(request: web.Request) -> web.Response:
    """The fleet's fabric events in this replica's window, most nodes first, each linked to its incident."""
    desk = request.app.get(FABRIC)
    events = desk.ledger.correlation().top if desk is not None else []
    links: dict[str, str] = {}
    if events:
        for s in await _list(request, with_sha256=False):
            links.setdefault(s.key.incident, _incident_url(s.key.cluster, s.key.date, s.key.incident))
    rows = "".join(_event_html(ev, links.get(ev.incident)) + (
        "" if ev.incident in links else f'<p class=muted>Incident <span class=mono>{esc(ev.incident)}</span>: '
        "no bundle stored yet.</p>") for ev in events[:100])
    cfg = _fabric_config(request)
    body = ('<h1>Fabric events<span class="status muted">this collector\'s window</span></h1>'
            f'<p class=sub>Rail alerts that name their leaf (LLDP), grouped by leaf, plane and '
            f"{cfg.window_s / 60:g}-minute window: a leaf is named when {cfg.leaf_min_nodes} of its nodes degraded "
            f"together, a plane when {cfg.plane_min_leaves} of its leaves did. "
            '<a href="/ui/">All incidents</a></p>'
            + (rows or "<p>No leaf, plane or optics batch degraded several nodes' rails together.</p>")
            + (f"<p class=muted>and {len(events) - 100} more events</p>" if len(events) > 100 else ""))
    return _page("railscope fabric events", body)


async def incident(request: web.Request) -> web.Response:
    m = request.match_info
    try:
        cluster, incident_id = check_part("cluster", m["cluster"]), check_part("incident", m["incident"])
        if not _DATE.fullmatch(m["date"]):
            raise KeyPartError("date is yyyy-mm-dd")
    except KeyPartError as exc:
        raise Refused(400, "bad_key", str(exc)) from None
    date = m["date"]
    found = await _list(request, cluster=cluster, date=date, incident=incident_id)
    if not found:
        raise Refused(404, "not_found", f"No bundles for incident {incident_id}")
    # What is analysed already first; then at most PAGE_ANALYSES of the rest, so one request's
    # work stays bounded however many nodes an incident has.
    docs = [(s, await analysis_of(request, s, analyse=False)) for s in found]
    todo = [i for i, (_s, d) in enumerate(docs) if "pending" in d][:PAGE_ANALYSES]
    for i in todo:
        docs[i] = (docs[i][0], await analysis_of(request, docs[i][0]))
    fleet = _fleet((s.key.node, d) for s, d in docs if "error" not in d and "pending" not in d)
    steps = _Steps()
    for c, subj, sev, nodes in fleet:
        steps.add(c, subj, nodes, sev)
    for s, doc in docs:
        if "pending" not in doc and "error" not in doc:
            for f in _worst(doc):
                steps.add(f.get("code"), f.get("subject"), [s.key.node], f.get("severity"))
    rows = []
    for s, doc in docs:
        k = s.key
        if "pending" in doc:
            worst = '<span class="pill info">PENDING</span> analysis pending: open its report or reload'
        elif "error" in doc:
            worst = f'<span class="pill critical">UNREADABLE</span> {esc(doc["error"])}'
        else:
            fs = _worst(doc)
            total = doc["doctor"].get("findings_total", len(doc["doctor"].get("findings", [])))
            worst = "".join(f"<div class=finding>{pill(str(f.get('severity')))} <code>{esc(f.get('code'))}</code> "
                            f"<code>{esc(f.get('subject'))}</code> {steps.ref(f.get('code'))}"
                            f"{_message(f)}</div>" for f in fs) or \
                '<span class="pill ok">OK</span> no findings'
            if total > len(fs):
                worst += f'<div class="muted">and {total - len(fs)} more</div>'
        rows.append(f"<tr><td class=mono><b>{esc(k.node)}</b></td><td class=mono>{esc(k.stamp)}</td><td>{worst}</td>"
                    f'<td><a href="{esc(_bundle_url(k))}">report</a> · <a href="{esc(_bundle_url(k))}/download">'
                    f"download</a> <span class=muted>({esc(size_words(s.bytes))})</span></td></tr>")
    if fleet:
        frows = "".join(f"<tr><td>{pill(sev)}</td><td class=mono>{esc(c)}</td><td class=mono>{esc(subj)}</td>"
                        f"<td><b>{len(nodes)}</b> nodes</td><td class=mono>{esc(', '.join(nodes))}</td>"
                        f"<td>{steps.ref(c)}</td></tr>"
                        for c, subj, sev, nodes in fleet)
        fleet_html = ("<p>The same code on the same rail of several nodes points at what they share (a leaf "
                      "switch, a cable bundle, a fabric setting) before the nodes themselves.</p>"
                      "<table id=fleet><thead><tr><th>Severity</th><th>Code</th><th>Subject</th><th>Seen on</th>"
                      f"<th>Nodes</th><th>Next step</th></tr></thead><tbody>{frows}</tbody></table>")
    else:
        fleet_html = "<p>No finding is shared by two nodes.</p>"
    nodes = sorted({s.key.node for s in found})
    body = (f'<h1>Incident {esc(incident_id)}<span class="status muted">{esc(cluster)} · {esc(date)}</span></h1>'
            f'<p class=sub>{len(found)} bundle(s) from {len(nodes)} node(s). <a href="/ui/">All incidents</a> · '
            '<a href="/ui/fabric">Fabric events</a></p>'
            f"{_incident_fabric(request, incident_id, docs)}"
            f"{await _incident_intent(request, cluster, date, incident_id, docs)}"
            f"<h2>Fleet view</h2>{fleet_html}{steps.html()}"
            "<h2>Bundles by node</h2><table id=nodes><thead><tr><th>Node</th><th>Captured</th><th>Worst findings</th>"
            f"<th>Bundle</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    return _page(f"incident {incident_id}", body)


async def _incident_intent(request: web.Request, cluster: str, date: str, incident_id: str,
                           docs: list[tuple[Stored, dict[str, Any]]]) -> str:
    """The operators' intent against the incident's nodes, from its cluster slice (``collector.cluster.page``)."""
    from .cluster.page import intent_section

    return await intent_section(request.app[STATE].store, cluster, date, incident_id,
                                [(s.key.node, d) for s, d in docs if "error" not in d and "pending" not in d])


def _stored_key(request: web.Request) -> BundleKey:
    m = request.match_info
    return parse_name(m["cluster"], m["date"], m["incident"], m["name"])


async def report(request: web.Request) -> web.Response:
    col = request.app[STATE]
    try:
        key = _stored_key(request)
    except KeyPartError as exc:
        raise Refused(400, "bad_key", str(exc)) from None
    try:
        stored = await col.store.stat(key)
    except StoreError as exc:
        col.metrics.storage_errors.labels("read").inc()
        raise Refused(503, "store_unavailable", str(exc)) from None
    if stored is None:
        raise Refused(404, "not_found", f"No bundle {key.rel}")
    doc = await analysis_of(request, stored, page=True)
    # The way back: the incident this bundle belongs to, its download, every incident.
    nav = (f'<nav class="muted back"><a href="{esc(_incident_url(key.cluster, key.date, key.incident))}">'
           f"Incident {esc(key.incident)}</a> · <a href=\"{esc(_bundle_url(key))}/download\">Download the bundle "
           f"({esc(size_words(stored.bytes))})</a> · <a href=\"/ui/\">All incidents</a></nav>")
    if "error" in doc or "html" not in doc:
        why = doc.get("error", "the analysis gave no page")
        return _page(key.name, f"{nav}<h1>{esc(key.name)}</h1><p>This bundle cannot be read: {esc(why)}</p>", 422)
    return web.Response(text=doc["html"].replace("<main>", "<main>" + nav, 1), content_type="text/html",
                        headers=_security())


def setup(app: web.Application) -> None:
    """What the pages share: one analysis at a time, a lock per bundle, the expectations (the routes,
    under ``/ui/``, are in ``collector.routes``; a download is the bundle API's fetch)."""
    app[ANALYSIS_LOCKS] = weakref.WeakValueDictionary()
    app[ANALYSIS_SLOTS] = asyncio.Semaphore(1)
    app[ANALYSIS_EXPECT] = expectations_from_env()
