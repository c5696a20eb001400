"""``railscope diff BEFORE AFTER``: what got worse, what changed and how the counters moved between
two captures of one node (the upgrade gate).

Each side is a node image directory, a bundle ``.tar.gz`` or ``live`` (this node, now). Exit status by
``--fail-on``: regression (default) 1 when any regression; change 1 when any regression or change;
never 0. 3 on bad usage or a side that is not a node image.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agent.commands.common import (
    add_expectation_flags,
    add_scope_flag,
    env_default,
    fail,
    given_expectations,
    judged_by,
)

__all__ = ["LIVE", "register", "run"]

#: the word that means "this node, now" where a path is expected (``diff BEFORE live``)
LIVE = "live"



def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("before", metavar="BEFORE",
                   help="The earlier capture: a node image directory, a bundle .tar.gz, or 'live'.")
    p.add_argument("after", metavar="AFTER",
                   help="The later capture: a node image directory, a bundle .tar.gz, or 'live'.")
    p.add_argument("--json", action="store_true", help="Print the railscope.diff/v1 JSON document.")
    p.add_argument("--fail-on", choices=("regression", "change", "never"), default="regression",
                   help="Exit 1 on any regression (default), on any regression or change, or never.")
    p.add_argument("--host-root", default=env_default("host-root", "/"), metavar="DIR",
                   help="For a 'live' side: read the node's files under DIR. Default: /.")
    add_expectation_flags(p)
    # a live side is a read of this node like doctor's; an image side is read with the same scope, so the
    # two sides compare like for like
    add_scope_flag(p)


def _fail(msg: str) -> int:
    return fail("diff", msg)


def _started(manifest: dict | None) -> bool:
    # The snapshot's time falls back to started_at when ended_at is missing (readers/snapshot.py).
    return isinstance(manifest, dict) and isinstance(manifest.get("started_at"), str)


def run(args: argparse.Namespace) -> int:
    from agent.analysis.diff import Side, diff
    from agent.host import HostError
    from agent.offline import InputError, diagnose_host, diagnose_image

    if args.before == LIVE and args.after == LIVE:
        return _fail("BEFORE and AFTER cannot both be live")
    from agent.commands.snapshot import is_snapshot

    if is_snapshot(args.before) or is_snapshot(args.after):
        return _cluster(args)
    try:
        exp, table = judged_by(args)
    except ValueError as exc:
        return _fail(str(exc))
    given = given_expectations(args)
    inputs = (args.before, args.after)
    got: dict[str, Any] = {}
    # A live side is judged as the bundle it is compared with, unless the command line says otherwise:
    # "diff BEFORE live" after an upgrade must not lose the rails the capture expected.
    for name in sorted(inputs, key=lambda s: s == LIVE):
        other = got.get(inputs[1] if name == inputs[0] else inputs[0])
        try:
            if name == LIVE:
                from agent.host.live import LiveHost

                base = other.judged.expectations if other is not None and other.judged is not None else exp
                with LiveHost(args.host_root) as host:
                    got[name] = diagnose_host(host, base, table, name=name, exclude_devices=args.exclude_devices)
            else:
                got[name] = diagnose_image(name, exp, table, given=given, exclude_devices=args.exclude_devices)
        except (InputError, HostError) as exc:
            return _fail(str(exc))
    sides, judged = [], []
    for name in inputs:
        g = got[name]
        judged.append(g.judged)
        side_exp = g.expectations or exp
        timed = name == LIVE or g.history.capture_time is not None or _started(g.manifest)
        sides.append(Side(name, g.snapshot, g.topology, g.diagnosis, side_exp.lossless_prio, timed,
                          ber_warning=side_exp.ber_warning))
    result = diff(sides[0], sides[1])
    if args.json:
        doc = result.as_json()
        for part, j in zip(("before", "after"), judged, strict=True):
            # only where the bundle's own expectations changed the judgement (optional in railscope.diff/v1)
            if j is not None and j.from_bundle(exp) and isinstance(doc.get(part), dict):
                doc[part]["expectations"] = j.as_json()
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from agent.report.diff_text import render_diff
        from agent.report.terminal import safe

        render_diff(result, sys.stdout)
        for part, j in zip(("before", "after"), judged, strict=True):
            if j is not None:
                sys.stdout.write(f"{part} judged with: {safe(j.words())}\n")
    return result.exit_status(args.fail_on)


def _cluster(args: argparse.Namespace) -> int:
    """Two cluster snapshots (``railscope snapshot --cluster``): what regressed and what changed."""
    from agent.analysis.cluster_diff import cluster_diff
    from agent.commands.snapshot import SnapshotError, is_snapshot, read_snapshot
    from agent.report.terminal import safe

    if not (is_snapshot(args.before) and is_snapshot(args.after)):
        return _fail("a cluster snapshot is compared with another cluster snapshot only")
    try:
        d = cluster_diff(read_snapshot(args.before), read_snapshot(args.after))
    except (SnapshotError, OSError, ValueError) as exc:
        return _fail(str(exc))
    if args.json:
        json.dump(d.as_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        for item in d.regressions:
            print(safe(f"REGRESSION {item.kind:<11} {item.message}"))
        for item in d.changes:
            print(safe(f"change     {item.kind:<11} {item.message}"))
        print(f"{len(d.regressions)} regression(s), {len(d.changes)} change(s)")
    if args.fail_on == "never":
        return 0
    return 1 if d.regressions or (args.fail_on == "change" and d.changes) else 0
