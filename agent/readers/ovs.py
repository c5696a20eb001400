"""Open vSwitch interfaces (``ovs-vsctl --format=json ... list Interface``), when OVS runs on the node.

A port whose netdev is gone shows ``ifindex 0``, or ``error`` / ``ofport -1`` after a restart;
``link_state down`` alone is normal (a representor follows its VF's state).
"""

from __future__ import annotations

import os
from typing import Any

from agent.host import Host
from agent.model import OvsInterface
from agent.readers.common import Notes, parse_json, to_int

__all__ = ["DB_SOCKETS", "OVS_ARGV", "db_sockets", "parse_ovs_interfaces", "read_ovs"]

DB_SOCKETS = ("/var/run/openvswitch/db.sock", "/run/openvswitch/db.sock")
OVS_ARGV = ["ovs-vsctl", "--format=json", "--columns=name,type,ifindex,ofport,link_state,error",
            "list", "Interface"]


def db_sockets() -> tuple[str, ...]:
    """Where the db socket the OVS tools will contact is (below the host root).

    With ``OVS_RUNDIR`` set the tools connect to ``$OVS_RUNDIR/db.sock`` and nowhere else
    (ovs-vsctl(8)), and the command runner passes the variable on to them, so that socket is the
    one to look for. Unset (a node as deployed): the run directories OVS is built with."""
    rundir = os.environ.get("OVS_RUNDIR")
    return (os.path.join(rundir, "db.sock"),) if rundir else DB_SOCKETS


def _atom(value: Any) -> Any:
    """An OVSDB JSON value -> a plain one: ``["set", []]`` -> None, ``["set", [x]]`` -> x,
    ``["uuid", "..."]`` -> the uuid string; scalars as they are."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        tag, body = value
        if tag == "set":
            items = body if isinstance(body, list) else []
            return _atom(items[0]) if len(items) == 1 else None
        if tag in ("uuid", "named-uuid"):
            return body
        if tag == "map":
            return None
    return value


def _str(value: Any) -> str | None:
    v = _atom(value)
    return v if isinstance(v, str) and v != "" else None


def parse_ovs_interfaces(doc: Any) -> tuple[OvsInterface, ...]:
    """OVSDB table JSON -> interfaces.

    Sample::

        {"data":[["net_rail0_0","",12,1,"up",["set",[]]],
                 ["net_rail0_3","",0,-1,"down","could not open network device net_rail0_3 (No such device)"]],
         "headings":["name","type","ifindex","ofport","link_state","error"]}
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("headings"), list) or not isinstance(doc.get("data"), list):
        raise ValueError('expected {"headings": [...], "data": [[...], ...]}')
    heads = [str(h) for h in doc["headings"]]
    out = []
    for row in doc["data"]:
        if not isinstance(row, list):
            continue
        r = dict(zip(heads, row, strict=False))
        name = _str(r.get("name"))
        if name is None:
            continue
        out.append(OvsInterface(
            name=name,
            type=_str(r.get("type")),
            ifindex=to_int(_atom(r.get("ifindex"))),
            ofport=to_int(_atom(r.get("ofport"))),
            link_state=_str(r.get("link_state")),
            error=_str(r.get("error")),
        ))
    return tuple(out)


def read_ovs(host: Host, timeout_s: float = 10.0, notes: Notes | None = None) -> tuple[OvsInterface, ...] | None:
    """The interfaces, or None when OVS is not on the node (no db socket) or did not answer."""
    notes = notes if notes is not None else Notes()
    socks = db_sockets()
    sock = next((s for s in socks if host.exists(s)), None)
    if sock is None and not host.live:
        # A node image keeps no sockets: the recorded command says whether OVS answered.
        res = host.run(OVS_ARGV, timeout_s=timeout_s)
        if res.missing:
            notes.missing("ovs", res.reason or f"no OVS db socket at {' or '.join(socks)}")
            return None
    elif sock is None:
        notes.missing("ovs", f"no OVS db socket at {' or '.join(socks)}")
        return None
    else:
        res = host.run(OVS_ARGV, timeout_s=timeout_s)
    if not res.ok:
        notes.command("ovs", res)
        return None
    doc, err = parse_json(res.text, "ovs-vsctl list Interface", res.truncated)
    if err:
        notes.missing("ovs", err)
        return None
    try:
        return parse_ovs_interfaces(doc)
    except ValueError as exc:
        notes.missing("ovs", f"ovs-vsctl list Interface: {exc}")
        return None
