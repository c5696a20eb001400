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

from agent.commands.common import add_expectation_flags, env_default, fail, judged_by

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


def _fail(msg: str) -> int:
    return fail("diff", msg)


def _started(manifest: dict | None) -> bool:
    # The snapshot's time falls back to started_at when ended_at is missing (readers/snapshot.py).
    return isinstance(manifest, dict) and isinstance(manifest.get("started_at"), str)


def run(args: argparse.Namespace) -> int:
    from agent.analysis.diff import Side, diff
    from agent.host import HostError
    from agent.offline import SourceError, diagnose_host, diagnose_image

    if args.before == LIVE and args.after == LIVE:
        return _fail("BEFORE and AFTER cannot both be live")
    try:
        exp, table = judged_by(args)
    except ValueError as exc:
        return _fail(str(exc))
    sides = []
    for source in (args.before, args.after):
        try:
            if source == LIVE:
                from agent.host.live import LiveHost

                with LiveHost(args.host_root) as host:
                    got = diagnose_host(host, exp, table, source=source)
            else:
                got = diagnose_image(source, exp, table)
        except (SourceError, HostError) as exc:
            return _fail(str(exc))
        timed = source == LIVE or got.history.capture_time is not None or _started(got.manifest)
        sides.append(Side(source, got.snapshot, got.topology, got.diagnosis, exp.lossless_prio, timed,
                          ber_warning=exp.ber_warning))
    result = diff(sides[0], sides[1])
    if args.json:
        json.dump(result.as_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from agent.report.diff_text import render_diff

        render_diff(result, sys.stdout)
    return result.exit_status(args.fail_on)
