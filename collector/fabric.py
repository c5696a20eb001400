"""Fabric correlation: which leaf or plane degraded many nodes' rails together (pure).

A Spectrum-X fault that costs GPU time is often not a node's: a leaf switch, a plane, a batch of optics.
Each rail knows its leaf from LLDP (``railscope_rail_peer_info{peer_system, peer_port}``, joined onto the
rail alerts by the shipped rules; ``rails[].peer`` in a diagnosis). Signals — a rail alert or a rail
finding of one node — are grouped by (leaf, time window); a leaf whose ``leaf_min_nodes`` nodes degraded
together is a *leaf event*, a plane with ``plane_min_leaves`` such leaves a *plane event* (it absorbs
them). Optics findings of one module batch (vendor and part) spread over several leaves are a *batch
event*: those rails say nothing of their leaf.

Culprits and victims, where the counters say so: the node that storms sends pause (a PfcStorm alert or
finding, ``pause="tx"``); a leaf's victims are paused by it (``pause="rx"``).

Time: windows are fixed buckets of ``window_s`` (Unix time / window_s), so every collector replica files
the same event under the same incident id; an event covers its first bucket and the next, so a fault whose
alerts straddle a boundary stays one event. Cost: one pass over the signals into (key, bucket) aggregates
(a dict each), then passes over the aggregates: linear in the signals; memory is the aggregates, whose
member lists are capped (:data:`KEEP`) — node names are counted in sets, nothing else is kept per signal.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

__all__ = ["KEEP", "Correlation", "Event", "FabricConfig", "Ledger", "PeerMap", "Signal", "choose", "correlate",
           "event_incident", "signal_of_alert", "signals_of_doctor"]

#: members named per event (the worst first); the others are counted
KEEP = 8
_SLUG = re.compile(r"[^a-z0-9]+")
#: an alert or finding code that says the rail sends pause (it storms): the culprit's side
TX_CODES = frozenset({"PfcStorm", "RailscopePfcStorm"})
_RANK = {"critical": 3, "error": 3, "warning": 2, "info": 1}


@dataclass(frozen=True, slots=True)
class FabricConfig:
    window_s: float = 300.0
    leaf_min_nodes: int = 4
    plane_min_leaves: int = 3
    #: where the leaf's (plane's) size is known (every diagnosis of a fleet, healthy ones too), at
    #: least this share of its nodes (leaves) must have degraded
    leaf_min_share: float = 0.25
    plane_min_share: float = 0.5
    #: nodes of one optics batch on two leaves or more
    batch_min_nodes: int = 3


@dataclass(frozen=True, slots=True)
class Signal:
    """One rail of one node degraded at ``t``: an alert, or a finding of a diagnosis."""

    node: str
    rail: str
    t: float
    leaf: str = ""
    port: str = ""
    plane: str = ""
    code: str = ""
    severity: str = ""
    #: "tx" (the rail sends pause: it storms), "rx" (the switch pauses it: a victim) or ""
    pause: str = ""
    #: an optics module's vendor and part, for an optics finding
    batch: str = ""

    @property
    def rank(self) -> int:
        return _RANK.get(self.severity, 0)


def _text(v: Any, n: int = 128) -> str:
    return v[:n] if isinstance(v, str) else ("" if v is None else str(v)[:n])


def signal_of_alert(labels: Mapping[str, str], t: float) -> Signal | None:
    """A rail alert that names its leaf (``peer_system``), as a signal; None for any other alert."""
    node, leaf = labels.get("node"), labels.get("peer_system")
    if not node or not leaf:
        return None
    name = labels.get("alertname", "")
    pause = "tx" if name in TX_CODES or labels.get("code") in TX_CODES else ""
    if labels.get("direction") in ("tx", "rx"):
        pause = labels["direction"]
    return Signal(node=node, rail=_text(labels.get("rail") or labels.get("device") or labels.get("subject")),
                  t=t, leaf=_text(leaf), port=_text(labels.get("peer_port")), plane=_text(labels.get("plane")),
                  code=_text(labels.get("code") or name), severity=_text(labels.get("severity"), 32), pause=pause)


class PeerMap:
    """Each node's rails' leaves as its stored diagnoses say (``rails[].peer`` of a bundle's doctor document),
    for the rail alerts whose labels do not name one (a Prometheus without the shipped join rules, an
    alert of another source, a rail whose exporter series came after the alert).

    Bounded: at most ``max_nodes`` nodes (past it the node learned longest ago goes) and ``MAX_RAILS``
    rails a node; a diagnosis older than ``max_age_s`` teaches nothing and an entry that old is not used
    (a rail recabled since would be filed under its old leaf). A newer diagnosis of a node replaces what an
    older one said, never the reverse (an incident page may analyse an old bundle after a new one). An
    alert's own peer labels always win.
    """

    MAX_RAILS = 64

    def __init__(self, max_nodes: int = 50_000, max_age_s: float = 7 * 86400.0) -> None:
        self.max_nodes = max_nodes
        self.max_age_s = max_age_s
        #: node -> (the diagnosis's time, rail key -> (leaf, port, plane)); insertion order: oldest learned first
        self._nodes: dict[str, tuple[float, dict[str, tuple[str, str, str]]]] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    @staticmethod
    def _keys(rail: str, plane: str, device: str) -> list[str]:
        return [k for k in ((f"rail {rail}/{plane}" if rail else ""), (f"dev {device}" if device else "")) if k]

    def learn(self, node: str, doc: Mapping[str, Any], t: float, now: float) -> int:
        """What the diagnosis ``doc`` of ``node`` made at ``t`` says of its rails' peers; the rails learned."""
        node = _text(node).lower()
        if not node or now - t > self.max_age_s:
            return 0
        old = self._nodes.get(node)
        if old is not None and old[0] > t:
            return 0
        rails = doc.get("rails") if isinstance(doc.get("rails"), list) else []
        got: dict[str, tuple[str, str, str]] = {}
        n = 0
        for r in rails[:self.MAX_RAILS]:
            peer = r.get("peer") if isinstance(r, dict) else None
            if not isinstance(peer, dict) or not _text(peer.get("system")):
                continue
            n += 1
            entry = (_text(peer.get("system")), _text(peer.get("port")), _text(r.get("plane")))
            for k in self._keys(_text(r.get("rail")), entry[2], _text(r.get("netdev"))):
                got[k] = entry
        if not got:
            return 0
        self._nodes.pop(node, None)
        self._nodes[node] = (t, got)
        while len(self._nodes) > self.max_nodes:
            del self._nodes[next(iter(self._nodes))]
        return n

    def peer(self, node: str, rail: str, plane: str, device: str, now: float) -> tuple[str, str, str] | None:
        """(leaf, port, plane) of the node's rail (by its rail and plane, else its netdev), or None."""
        got = self._nodes.get(_text(node).lower())
        if got is None or now - got[0] > self.max_age_s:
            return None
        for k in self._keys(rail, plane, device):
            if k in got[1]:
                return got[1][k]
        return None

    def labels(self, labels: Mapping[str, str], now: float) -> Mapping[str, str]:
        """``labels`` with ``peer_system`` / ``peer_port`` (and ``plane``) from a stored diagnosis where the
        alert names a node and a rail but no leaf; else ``labels`` as they are."""
        if labels.get("peer_system") or not labels.get("node"):
            return labels
        rail, device = _text(labels.get("rail")), _text(labels.get("device") or labels.get("subject"))
        if not rail and not device:
            return labels
        got = self.peer(labels["node"], rail, _text(labels.get("plane")), device, now)
        if got is None:
            return labels
        leaf, port, plane = got
        return {**labels, "peer_system": leaf, "peer_port": port, **({"plane": plane} if plane and not
                                                                      labels.get("plane") else {})}

    def hook(self, hook: Any, now: float) -> Any:
        """An Alertmanager payload (``collector.alerts.Webhook``) whose rail alerts name their leaf where a
        stored diagnosis knows it: the same payload when none changes."""
        if not self._nodes:
            return hook
        alerts = tuple(a if (lab := self.labels(a.labels, now)) is a.labels else replace(a, labels=lab)
                       for a in hook.alerts)
        if all(x is y for x, y in zip(alerts, hook.alerts, strict=True)):
            return hook
        return replace(hook, alerts=alerts)


def signals_of_doctor(doc: Mapping[str, Any], t: float, node: str | None = None) -> tuple[list[Signal], list[tuple[str, str]]]:
    """The degraded rails of one diagnosis (``doctor --json``) as signals, and every (leaf, plane) its
    rails hang on (so the fleet's leaf sizes are known). A finding's subject is the rail netdev."""
    node = node or _text(doc.get("node"))
    rails = doc.get("rails") if isinstance(doc.get("rails"), list) else []
    by_netdev: dict[str, dict[str, Any]] = {}
    seen: list[tuple[str, str]] = []
    for r in rails:
        if not isinstance(r, dict):
            continue
        peer = r.get("peer") if isinstance(r.get("peer"), dict) else {}
        by_netdev[_text(r.get("netdev"))] = {"rail": _text(r.get("rail")), "plane": _text(r.get("plane")),
                                              "leaf": _text(peer.get("system")), "port": _text(peer.get("port"))}
        if peer.get("system"):
            seen.append((_text(peer.get("system")), _text(r.get("plane"))))
    out = []
    findings = doc.get("findings") if isinstance(doc.get("findings"), list) else []
    for f in findings:
        if not isinstance(f, dict) or f.get("severity") not in ("critical", "warning"):
            continue
        rail = by_netdev.get(_text(f.get("subject")))
        if rail is None:
            continue  # node-wide, or a PF that is no rail: nothing of a shared leaf
        code = _text(f.get("code"))
        ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
        pause = "tx" if code in TX_CODES else ("rx" if _text(ev.get("pause")) == "rx" else "")
        batch = f"{_text(ev.get('vendor'), 40)} {_text(ev.get('part'), 40)}".strip() if code == "OpticsOutOfRange" else ""
        out.append(Signal(node=node, rail=rail["rail"], t=t, leaf=rail["leaf"], port=rail["port"],
                          plane=rail["plane"], code=code, severity=_text(f.get("severity"), 32), pause=pause,
                          batch=batch))
    return out, seen


@dataclass
class Event:
    """Rails of several nodes that degraded together: a leaf, a plane or an optics batch."""

    kind: str  # leaf | plane | batch
    key: str  # the leaf's system name, the plane, the batch
    bucket: int  # the first window (Unix time // window_s)
    window_s: float
    nodes: int = 0
    rails: set[str] = field(default_factory=set)
    planes: dict[str, int] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    #: the worst members (node, rail, port, code, severity), at most KEEP
    members: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    culprits: list[str] = field(default_factory=list)
    culprits_total: int = 0
    victims: list[str] = field(default_factory=list)
    victims_total: int = 0
    #: the leaves of a plane event
    leaves: list[str] = field(default_factory=list)
    #: a leaf event's plane event, once absorbed
    parent: Event | None = None
    first_t: float = 0.0
    #: every member node -> (its worst rank, its earliest signal): the capture policy picks the worst
    #: few and a sample of the whole event from it, not of one webhook
    node_rank: dict[str, tuple[int, float]] = field(default_factory=dict, repr=False)
    #: (worst, sample) -> the nodes :func:`choose` picked (an event is made once per correlation)
    chosen: dict[tuple[int, int], set[str]] = field(default_factory=dict, repr=False)
    tx_nodes: set[str] = field(default_factory=set, repr=False)
    rx_nodes: set[str] = field(default_factory=set, repr=False)

    @property
    def incident(self) -> str:
        return event_incident(self.kind, self.key, self.bucket, self.window_s)

    @property
    def top(self) -> Event:
        return self.parent.top if self.parent is not None else self

    @property
    def plane(self) -> str:
        return self.key if self.kind == "plane" else max(self.planes, key=lambda p: (self.planes[p], p), default="")

    def title(self) -> str:
        if self.kind == "leaf":
            return f"leaf {self.key}"
        if self.kind == "plane":
            return f"plane {self.key}" if self.key else "the fabric (rails without a plane)"
        return f"optics batch {self.key}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "incident": self.incident, "nodes": self.nodes,
                "rails": sorted(self.rails)[:KEEP], "plane": self.plane, "leaves": self.leaves[:64],
                "leaves_total": len(self.leaves), "codes": dict(sorted(self.codes.items())),
                "culprits": self.culprits, "culprits_total": self.culprits_total,
                "victims": self.victims, "victims_total": self.victims_total,
                "since": datetime.fromtimestamp(self.first_t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "members": [dict(zip(("node", "rail", "port", "code", "severity"), m, strict=True))
                            for m in self.members]}


def event_incident(kind: str, key: str, bucket: int, window_s: float) -> str:
    """``fabric-<kind>-<slug>-<yyyymmddThhmmZ of the window>-<10 hex>``: a key part (``proto.keys``),
    the same on every replica for the same event."""
    stamp = datetime.fromtimestamp(int(bucket * window_s), UTC).strftime("%Y%m%dt%H%Mz")
    digest = hashlib.sha256(f"railscope.fabric/v1\0{kind}\0{key}\0{bucket}\0{window_s:g}".encode()).hexdigest()[:10]
    slug = _SLUG.sub("-", key.lower()).strip("-")[:20].strip("-") or "none"
    return f"fabric-{kind}-{slug}-{stamp}-{digest}"


class _Agg:
    """The signals of one key in one window."""

    __slots__ = ("codes", "first_t", "nodes", "planes", "rails", "rx", "tx", "worst")

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[int, float]] = {}
        self.rails: set[str] = set()
        self.planes: dict[str, int] = {}
        self.codes: dict[str, int] = {}
        self.tx: set[str] = set()
        self.rx: set[str] = set()
        self.worst: dict[str, tuple[int, Signal]] = {}
        self.first_t = float("inf")

    def add(self, s: Signal) -> None:
        old_n = self.nodes.get(s.node)
        if old_n is None or (s.rank, -s.t) > (old_n[0], -old_n[1]):
            self.nodes[s.node] = (s.rank, s.t)
        if len(self.rails) < 64:
            self.rails.add(s.rail)
        self.planes[s.plane] = self.planes.get(s.plane, 0) + 1
        self.codes[s.code] = self.codes.get(s.code, 0) + 1
        (self.tx if s.pause == "tx" else self.rx if s.pause == "rx" else set()).add(s.node)
        self.first_t = min(self.first_t, s.t)
        old = self.worst.get(s.node)
        if old is None or s.rank > old[0]:
            self.worst[s.node] = (s.rank, s)
        if len(self.worst) > 4 * KEEP:  # keep the worst few: prune to KEEP by rank, then name
            keep = sorted(self.worst.items(), key=lambda kv: (-kv[1][0], kv[0]))[:KEEP]
            self.worst = dict(keep)


def _chain(buckets: Iterable[int]) -> dict[int, int]:
    """bucket -> the first bucket of its event: an event covers its first bucket and the next."""
    out: dict[int, int] = {}
    start: int | None = None
    for b in sorted(buckets):
        if start is None or b > start + 1:
            start = b
        out[b] = start
    return out


def _merge(aggs: list[_Agg]) -> _Agg:
    if len(aggs) == 1:
        return aggs[0]
    m = _Agg()
    for a in aggs:
        for n, r in a.nodes.items():
            if n not in m.nodes or (r[0], -r[1]) > (m.nodes[n][0], -m.nodes[n][1]):
                m.nodes[n] = r
        m.rails |= set(list(a.rails)[:64 - len(m.rails)]) if len(m.rails) < 64 else set()
        for k, v in a.planes.items():
            m.planes[k] = m.planes.get(k, 0) + v
        for k, v in a.codes.items():
            m.codes[k] = m.codes.get(k, 0) + v
        m.tx |= a.tx
        m.rx |= a.rx
        m.first_t = min(m.first_t, a.first_t)
        for n, w in a.worst.items():
            if n not in m.worst or w[0] > m.worst[n][0]:
                m.worst[n] = w
    return m


def _event(kind: str, key: str, bucket: int, cfg: FabricConfig, agg: _Agg) -> Event:
    ev = Event(kind=kind, key=key, bucket=bucket, window_s=cfg.window_s, nodes=len(agg.nodes),
               rails=set(agg.rails), planes=dict(agg.planes), codes=dict(agg.codes), first_t=agg.first_t,
               node_rank=agg.nodes)
    worst = sorted(agg.worst.values(), key=lambda w: (-w[0], w[1].node))[:KEEP]
    ev.members = [(s.node, s.rail, s.port, s.code, s.severity) for _r, s in worst]
    ev.tx_nodes, ev.rx_nodes = agg.tx, agg.rx
    _name_sides(ev)
    return ev


def _name_sides(ev: Event) -> None:
    """Culprits send pause (they storm); victims are paused and send none."""
    victims = ev.rx_nodes - ev.tx_nodes
    ev.culprits, ev.culprits_total = sorted(ev.tx_nodes)[:KEEP], len(ev.tx_nodes)
    ev.victims, ev.victims_total = sorted(victims)[:KEEP], len(victims)


@dataclass
class Correlation:
    """The events of a set of signals, and which event each (leaf | batch, window) belongs to."""

    config: FabricConfig
    events: list[Event]
    _by_leaf: dict[tuple[str, int], Event] = field(default_factory=dict)
    _by_batch: dict[tuple[str, int], Event] = field(default_factory=dict)
    _by_plane: dict[tuple[str, int], Event] = field(default_factory=dict)

    @property
    def top(self) -> list[Event]:
        """The events no other absorbed, most nodes first."""
        return sorted((e for e in self.events if e.parent is None), key=lambda e: (-e.nodes, e.kind, e.key))

    def event_of(self, s: Signal) -> Event | None:
        """The outermost event ``s`` belongs to (a plane before its leaf), or None: a rail alone.

        A rail of a plane whose event is open belongs to it even where its own leaf has shown too few
        nodes yet: the whole plane degraded."""
        b = int(s.t // self.config.window_s)
        for table, key in ((self._by_batch, s.batch), (self._by_leaf, s.leaf), (self._by_plane, s.plane)):
            if not key and table is not self._by_plane:
                continue
            for bucket in (b, b - 1):
                ev = table.get((key, bucket))
                if ev is not None:
                    return ev.top
        return None


def correlate(signals: Iterable[Signal], config: FabricConfig | None = None,
              known: Iterable[tuple[str, str]] = ()) -> Correlation:
    """The leaf, plane and optics-batch events of ``signals``.

    ``known``: every (leaf, plane) of the fleet's rails, degraded or not (from diagnoses), for the
    share thresholds; without it (alerts only) the absolute thresholds decide alone.
    """
    cfg = config or FabricConfig()
    w = cfg.window_s
    leaves: dict[tuple[str, int], _Agg] = {}
    batches: dict[tuple[str, int], _Agg] = {}
    batch_leaves: dict[tuple[str, int], set[str]] = {}
    batched: list[Signal] = []
    for s in signals:
        b = int(s.t // w)
        if s.batch:
            batches.setdefault((s.batch, b), _Agg()).add(s)
            batch_leaves.setdefault((s.batch, b), set()).add(s.leaf)
            batched.append(s)
        elif s.leaf:
            leaves.setdefault((s.leaf, b), _Agg()).add(s)
    events: list[Event] = []
    corr = Correlation(cfg, events)
    # Optics batches first: a batch on several leaves explains its rails; a batch on one leaf does not.
    by_key: dict[str, list[int]] = {}
    for key, b in batches:
        by_key.setdefault(key, []).append(b)
    for key, bs in by_key.items():
        groups: dict[int, list[int]] = {}
        for b, start in _chain(bs).items():
            groups.setdefault(start, []).append(b)
        for start, members in groups.items():
            agg = _merge([batches[(key, b)] for b in members])
            spread = set().union(*(batch_leaves[(key, b)] for b in members))
            if len(agg.nodes) >= cfg.batch_min_nodes and len(spread - {""}) >= 2:
                ev = _event("batch", key, start, cfg, agg)
                events.append(ev)
                for b in members:
                    corr._by_batch[(key, b)] = ev
    for s in batched:  # the optics of no batch event count for their leaf
        if s.leaf and (s.batch, int(s.t // w)) not in corr._by_batch:
            leaves.setdefault((s.leaf, int(s.t // w)), _Agg()).add(s)
    sizes: dict[str, int] = {}
    plane_sizes: dict[str, set[str]] = {}
    for leaf, plane in known:
        sizes[leaf] = sizes.get(leaf, 0) + 1
        plane_sizes.setdefault(plane, set()).add(leaf)
    by_leaf: dict[str, list[int]] = {}
    for key, b in leaves:
        by_leaf.setdefault(key, []).append(b)
    leaf_events: list[Event] = []
    for key, bs in by_leaf.items():
        groups = {}
        for b, start in _chain(bs).items():
            groups.setdefault(start, []).append(b)
        for start, members in groups.items():
            agg = _merge([leaves[(key, b)] for b in members])
            n = len(agg.nodes)
            if n < cfg.leaf_min_nodes or (key in sizes and n < cfg.leaf_min_share * sizes[key]):
                continue
            ev = _event("leaf", key, start, cfg, agg)
            leaf_events.append(ev)
            for b in members:
                corr._by_leaf[(key, b)] = ev
    events.extend(leaf_events)
    # Planes: leaf events of one plane starting in one window and the next.
    by_plane: dict[str, dict[int, list[Event]]] = {}
    for ev in leaf_events:
        by_plane.setdefault(ev.plane, {}).setdefault(ev.bucket, []).append(ev)
    for plane, starts in by_plane.items():
        groups2: dict[int, list[Event]] = {}
        for b, start in _chain(starts).items():
            groups2.setdefault(start, []).extend(starts[b])
        for start, evs in groups2.items():
            names = sorted({e.key for e in evs})
            known_leaves = len(plane_sizes.get(plane, ()))
            if len(names) < cfg.plane_min_leaves or (known_leaves and len(names) < cfg.plane_min_share * known_leaves):
                continue
            pe = Event(kind="plane", key=plane, bucket=start, window_s=w, leaves=names,
                       first_t=min(e.first_t for e in evs))
            worst: list[tuple[int, tuple[str, str, str, str, str]]] = []
            for e in evs:
                e.parent = pe
                for n, r in e.node_rank.items():
                    if n not in pe.node_rank or (r[0], -r[1]) > (pe.node_rank[n][0], -pe.node_rank[n][1]):
                        pe.node_rank[n] = r
                pe.rails |= set(list(e.rails)[:64])
                for k, v in e.codes.items():
                    pe.codes[k] = pe.codes.get(k, 0) + v
                pe.planes[plane] = pe.planes.get(plane, 0) + e.nodes
                pe.tx_nodes |= e.tx_nodes
                pe.rx_nodes |= e.rx_nodes
                worst += [(_RANK.get(m[4], 0), m) for m in e.members]
            pe.nodes = len(pe.node_rank)
            _name_sides(pe)
            corr._by_plane[(plane, start)] = corr._by_plane[(plane, start + 1)] = pe
            pe.members = [m for _r, m in sorted(worst, key=lambda x: (-x[0], x[1][0]))[:KEEP]]
            events.append(pe)
    return corr


class Ledger:
    """The rail signals of recent alerts, bounded: what one collector replica correlates.

    A resend of the same alert (same node, rail, leaf, code) updates its entry, never adds one; an entry
    unseen for ``keep_s`` is dropped (longer than Alertmanager's default ``repeat_interval``, 4h, so a
    resend of a long fault finds its event again rather than an incident of its own), and past
    ``max_signals`` the stalest go first. Each replica keeps
    its own: an event's incident id depends only on its leaf or plane and window, so replicas that each
    see part of an event's alerts still file them under one incident (a small event split between
    replicas may fall under the thresholds on each).
    """

    def __init__(self, config: FabricConfig | None = None, max_signals: int = 200_000,
                 keep_s: float = 6 * 3600.0) -> None:
        self.config = config or FabricConfig()
        self.max_signals = max_signals
        self.keep_s = keep_s
        #: (node, rail, leaf, code) -> (signal, first seen, last seen) by the clock of observe()
        self._signals: dict[tuple[str, str, str, str], tuple[Signal, float, float]] = {}
        self._corr: Correlation | None = None
        #: when a signal not seen before last arrived (the event still growing)
        self.last_new = float("-inf")

    def __len__(self) -> int:
        return len(self._signals)

    def observe(self, signals: Iterable[Signal], now: float) -> None:
        for s in signals:
            k = (s.node, s.rail, s.leaf, s.code)
            old = self._signals.get(k)
            if old is None:
                self._signals[k] = (s, now, now)
                self._corr = None
                self.last_new = max(self.last_new, now)
            else:
                keep = old[0] if old[0].t <= s.t and old[0].rank >= s.rank else s
                if keep is not old[0]:
                    self._corr = None
                self._signals[k] = (keep, old[1], now)
        if len(self._signals) > self.max_signals:
            self.prune(now)

    def prune(self, now: float) -> None:
        horizon = now - max(2 * self.config.window_s, self.keep_s)
        stale = [k for k, (_s, _f, last) in self._signals.items() if last < horizon]
        if len(self._signals) - len(stale) > self.max_signals:
            rest = sorted((v[2], k) for k, v in self._signals.items() if v[2] >= horizon)
            stale += [k for _t, k in rest[:len(self._signals) - len(stale) - self.max_signals]]
        for k in stale:
            del self._signals[k]
        if stale:
            self._corr = None

    def first_seen(self, s: Signal) -> float | None:
        got = self._signals.get((s.node, s.rail, s.leaf, s.code))
        return None if got is None else got[1]

    def correlation(self) -> Correlation:
        if self._corr is None:
            self._corr = correlate((v[0] for v in self._signals.values()), self.config)
        return self._corr


def choose(event: Event, worst: int, sample: int) -> set[str]:
    """The nodes of ``event`` worth a capture: the ``worst`` by severity (then the earliest), plus a
    deterministic sample of the rest — chosen over the whole event, so the webhooks of one node each
    (Alertmanager's ``group_by: [alertname, node]``) agree on the same few."""
    cached = event.chosen.get((worst, sample))
    if cached is not None:
        return cached
    ranked = sorted(event.node_rank.items(), key=lambda kv: (-kv[1][0], kv[1][1], kv[0]))
    top = [n for n, _r in ranked[:worst]]
    inc = event.incident
    rest = sorted((n for n, _r in ranked[worst:]),
                  key=lambda n: hashlib.sha256(f"{inc}\0{n}".encode()).hexdigest())
    got = event.chosen[(worst, sample)] = set(top) | set(rest[:sample])
    return got
