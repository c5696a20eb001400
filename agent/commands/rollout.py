"""``railscope rollout``: did the operators' rollout converge on every node? (docs/design.md §9, read-only.)

Reads the operators' objects from the API server (``--api-server`` with ``--api-token-file``, else the pod's
in-cluster configuration), one LIST per kind, and prints one line per node that has not converged, worst
first, a count of those that have, and a verdict line. ``--wait`` keeps watching (WATCH, no more lists) and
returns when every node converged, or a node is stuck or failed, or ``--timeout`` passed.

Exit status: 0 every node converged, 1 a node is in progress, 2 a node is stuck or failed, 3 bad usage or no
API server.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from agent.settings import duration as _duration

from .common import EXIT_USAGE, env_default, fail
from .kubeapi import DEFAULT_NAMESPACE, add_api_flags, api_config

__all__ = ["DEFAULT_NAMESPACE", "SCHEMA", "register", "run"]

SCHEMA = "railscope.rollout/v1"


def register(p: argparse.ArgumentParser) -> None:
    add_api_flags(p)
    p.add_argument("--node", default=None, metavar="NAME", help="Judge this node alone. Default: every node.")
    p.add_argument("--stuck-after", type=_duration, default=_duration(env_default("stuck-after", "30m") or "30m"),
                   metavar="DURATION", help="A node at the same step longer than this is stuck. Default: 30m.")
    p.add_argument("--resource-prefix", default=env_default("resource-prefix", "nvidia.com"), metavar="PREFIX",
                   help="The SR-IOV device plug-in's resource prefix (rail resources are PREFIX/<resourceName> of "
                        "each SriovNetworkNodePolicy). Default: nvidia.com (the Network Operator's).")
    p.add_argument("--json", action="store_true", help=f"Print {SCHEMA}: nodes, components, findings.")
    p.add_argument("--wait", action="store_true",
                   help="Keep watching until every node converged, or a node is stuck or failed; progress on stderr.")
    p.add_argument("--timeout", type=_duration, default=None, metavar="DURATION",
                   help="With --wait: give up after DURATION (exit 1 while nodes are still in progress). "
                        "Default: no limit.")


def _document(result, findings: list[dict]) -> dict:
    return {"schema": SCHEMA, "nodes": [v.as_json() for v in result.nodes], "components": list(result.components),
            "findings": findings, "skipped": list(result.skipped), "exit": result.exit_code}


def run(args: argparse.Namespace) -> int:
    import asyncio

    from agent.clients.kubernetes import KubeError

    if args.timeout is not None and not args.wait:
        return fail("rollout", "--timeout goes with --wait")
    try:
        config = api_config(args)
    except ValueError as exc:
        return fail("rollout", str(exc))
    except KubeError as exc:
        return fail("rollout", f"no API server: {exc.message or exc} (give --api-server and --api-token-file)")
    try:
        return asyncio.run(_run(args, config))
    except KubeError as exc:
        return fail("rollout", f"the API server {config.server}: {exc}", EXIT_USAGE)


async def _run(args: argparse.Namespace, config) -> int:
    import asyncio

    from agent.analysis.intent import intent_findings
    from agent.analysis.rollout import judge, render_text
    from agent.clients.cluster import ClusterWatch
    from agent.clients.kubernetes import KubeClient
    from agent.report.terminal import safe

    async with KubeClient(config) as client:
        watch = ClusterWatch(client, args.namespace, node=args.node)
        watch.view.resource_prefix = args.resource_prefix
        await watch.sync()
        first_seen: dict = {}
        result = judge(watch.view, time.time(), args.stuck_after, first_seen, only=args.node)
        if args.wait and result.exit_code == 1:
            deadline = None if args.timeout is None else time.monotonic() + args.timeout
            watch.start()
            last = None
            # On a terminal one line updated in place; elsewhere (a CI log) a line per change.
            from agent.commands.progress import TtyLine

            tty = TtyLine(sys.stderr)
            try:
                while result.exit_code == 1:
                    line = _progress(result)
                    if tty.on:
                        tty.update(f"{time.strftime('%H:%M:%S')}  {line}")
                    elif line != last:
                        sys.stderr.write(f"{time.strftime('%H:%M:%S')}  {line}\n")
                        sys.stderr.flush()
                        last = line
                    wait = 5.0 if deadline is None else min(5.0, deadline - time.monotonic())
                    if wait <= 0:
                        break
                    watch.changed.clear()
                    # a change, or a tick: the stuck clock runs without one
                    try:
                        await asyncio.wait_for(watch.changed.wait(), wait)
                    except TimeoutError:
                        pass
                    result = judge(watch.view, time.time(), args.stuck_after, first_seen, only=args.node)
            finally:
                tty.end()
                await watch.stop()
        findings = [f.as_json() for f in intent_findings(watch.view, only=args.node)]
    if args.node and not result.nodes:
        return fail("rollout", f"no node {args.node!r} in the cluster")
    if args.json:
        json.dump(_document(result, findings), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return result.exit_code
    lines = render_text(result, time.time())
    for f in findings:
        lines.insert(-1, f"finding {f['severity']} {f['code']} {f['subject']}: {f['message']}")
    for line in lines:
        print(safe(line))
    return result.exit_code


def _progress(result) -> str:
    c = result.counts()
    return f"{c['converged']}/{len(result.nodes)} converged" + "".join(
        f", {n} {k}" for k, n in c.items() if n and k != "converged")
