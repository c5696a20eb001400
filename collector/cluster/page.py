"""The incident page's section on the operators' intent (``collector.pages`` calls :func:`intent_section`): each
node's RailIntentMismatch and the objects' OperatorConfigConflict, judged from the incident's cluster slice
(``collector.cluster.slice``) against the rails of each node's analysed bundle (the summary's ``rails[]``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from agent.analysis.cluster_diff import view_of
from agent.analysis.intent import intent_findings
from agent.report.html import esc, pill

from ..storage import Store, StoreError
from .slice import MAX_SLICE_BYTES, read_slice, slice_rel

__all__ = ["intent_findings_of", "intent_section"]


async def intent_findings_of(store: Store, cluster: str, date: str, incident: str,
                             doctors: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """The intent findings of the incident's nodes (``doctors``: node -> its doctor summary), as JSON; None
    where the incident has no slice. ``ValueError`` for a slice that does not verify."""
    rel = slice_rel(cluster, date, incident)
    data = await store.get_small(rel, MAX_SLICE_BYTES)
    if data is None:
        return None
    side = await store.get_small(rel + ".sha256", 4096)
    want = side.decode("ascii", "replace").split()[0] if side else None

    def judge() -> list[dict[str, Any]]:
        manifest, objects = read_slice(data, want)
        view = view_of(objects, manifest)
        out = {(f.code, f.subject, f.message): f for f in intent_findings(view)}  # the objects' own conflicts
        for node, doc in doctors.items():
            for f in intent_findings(view, {node: doc}, only=node):
                out.setdefault((f.code, f.subject, f.message), f)
        return [f.as_json() for f in sorted(out.values(), key=lambda f: f.sort_key())]

    # Parsed off the event loop: the cluster-wide objects (CRDs with their schemas) are megabytes.
    return await asyncio.get_running_loop().run_in_executor(None, judge)


async def intent_section(store: Store, cluster: str, date: str, incident: str,
                         docs: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """The section's HTML: ``docs`` are (node, analysis document) of the incident's bundles."""
    doctors = {node: d["doctor"] for node, d in docs if isinstance(d.get("doctor"), dict)}
    try:
        found = await intent_findings_of(store, cluster, date, incident, doctors)
    except (StoreError, OSError) as exc:
        return f"<h2>Operators' intent</h2><p>The cluster slice could not be read: {esc(str(exc)[:200])}</p>"
    except ValueError as exc:
        return f"<h2>Operators' intent</h2><p>The cluster slice is unreadable: {esc(str(exc)[:200])}</p>"
    if found is None:
        return ("<h2>Operators' intent</h2><p class=muted>No cluster slice for this incident (the collector's "
                "cluster view is off, or was not leading when the incident began).</p>")
    if not found:
        return ("<h2>Operators' intent</h2><p>The incident's cluster slice agrees with its nodes: no "
                "RailIntentMismatch, no OperatorConfigConflict.</p>")
    rows = "".join(
        f"<tr><td>{pill(str(f['severity']))}</td><td class=mono>{esc(f['code'])}</td>"
        f"<td class=mono>{esc((f.get('evidence') or {}).get('node', ''))}</td><td class=mono>{esc(f['subject'])}</td>"
        f"<td>{esc(f['message'])}</td></tr>" for f in found)
    return ("<h2>Operators' intent</h2><p>What the operators' objects ask, in the incident's cluster slice, "
            "against what each node's bundle shows.</p><table id=intent><thead><tr><th>Severity</th><th>Code</th>"
            f"<th>Node</th><th>Subject</th><th>Finding</th></tr></thead><tbody>{rows}</tbody></table>")
