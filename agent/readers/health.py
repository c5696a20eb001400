"""devlink health reporters: ``devlink -j health show``, once per devlink interval (docs/design.md §4
``NicHealthError``). Never ``health dump`` or ``diagnose``: a dump writes a firmware core-dump
register (§7)."""

from __future__ import annotations

from typing import Any

from agent.config import ReadConfig
from agent.host import Host
from agent.model import HealthReporter
from agent.readers.common import Notes, parse_json, to_int
from agent.readers.source import Context, Part, Source, part

__all__ = ["ARGV", "SOURCE", "parse_health", "read_health"]

ARGV = ("devlink", "-j", "health", "show")


def _count(value: Any) -> int | None:
    n = to_int(value)  # old iproute2 prints counts as strings
    return n if n is not None and n >= 0 else None


def parse_health(doc: Any) -> tuple[HealthReporter, ...]:
    """``devlink -j health show`` -> reporters, in output order.

    Sample (netdevsim, Linux 6.1; mlx5 lists ``fw`` / ``fw_fatal`` under ``pci/<bdf>`` and ``tx`` /
    ``rx`` under the uplink port, ``auxiliary/mlx5_core.eth.N/65535`` on kernel >= 6.7)::

        {"health":{"netdevsim/netdevsim10":[{"reporter":"empty","state":"healthy","error":0,"recover":0,
          "auto_dump":true},{"reporter":"dummy","state":"healthy","error":0,"recover":0,
          "grace_period":0,"auto_recover":true,"auto_dump":true}]}}

    A handle with a third part is a port's (``pci/0000:0c:00.0/1``); a reporter without a state keeps
    ``state`` None; a count that is not a whole number is None.
    """
    health = doc.get("health") if isinstance(doc, dict) else None
    if not isinstance(health, dict):
        raise ValueError('expected {"health": {<handle>: [...]}}')
    out = []
    for handle, reporters in health.items():
        parts = str(handle).split("/")
        dev = "/".join(parts[:2])
        port = to_int(parts[2]) if len(parts) == 3 else None
        if len(parts) < 2 or len(parts) > 3 or (len(parts) == 3 and port is None):
            continue
        for r in reporters if isinstance(reporters, list) else []:
            if not isinstance(r, dict) or not isinstance(r.get("reporter"), str) or not r["reporter"]:
                continue
            state = r.get("state")
            out.append(HealthReporter(handle=str(handle), dev=dev, port=port, name=r["reporter"],
                                      state=state if isinstance(state, str) and state else None,
                                      error=_count(r.get("error")), recover=_count(r.get("recover"))))
    return tuple(out)


def read_health(host: Host, timeout_s: float = 10.0, notes: Notes | None = None) -> tuple[HealthReporter, ...]:
    """Every reporter the node lists; ``()`` and a note when devlink gives none."""
    notes = notes if notes is not None else Notes()
    res = host.run(list(ARGV), timeout_s=timeout_s)
    if not res.ok:
        notes.command("devlink health", res)
        return ()
    doc, err = parse_json(res.text, " ".join(ARGV), res.truncated)
    if err:
        notes.missing("devlink health", err)
        return ()
    try:
        return parse_health(doc)
    except ValueError as exc:
        notes.missing("devlink health", f"{' '.join(ARGV)}: {exc}")
        return ()


def read_health_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    if ctx.devlink_gone is not None:
        notes.missing("devlink health", ctx.devlink_gone)
        return part("health", notes, fields={"health": ()})
    return part("health", notes, fields={"health": read_health(host, cfg.command_timeout_s, notes)})


SOURCE = Source("health", "the devlink health reporters (devlink -j health show)",
                (ARGV[:3],), 60.0, 60.0, ("health",), read_health_part, order=40, needs=("devlink_gone",),
                lane="devlink")
