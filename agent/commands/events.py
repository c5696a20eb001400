"""``railscope events``: the running agent's event log (``/v1/events``), read over its data socket.

In the agent's pod the socket is ``RAILSCOPE_DATA_SOCKET`` (the chart's ``agent.dataSocket``), so
``kubectl exec <pod> -- railscope events`` needs no flag; over TCP the data endpoints need the bearer
token of the agent's ``--data-token-file``. Exit status: 0 the log was read (events or none), 1 the
agent did not answer, 3 bad usage.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time

from agent.settings import duration, env_default

#: where the chart puts the agent's data socket (agent.dataSocket; the agent itself has none by default)
DEFAULT_SOCKET = "/run/railscope/agent.sock"


def register(p: argparse.ArgumentParser) -> None:
    sock = env_default("data-socket", DEFAULT_SOCKET) or DEFAULT_SOCKET
    p.add_argument("--agent", default=f"unix:{sock}", metavar="unix:PATH|http://ADDR:PORT",
                   help=f"The running agent: its data socket, or its TCP address with --agent-token-file. "
                        f"Default: unix:{sock} (RAILSCOPE_DATA_SOCKET, else the chart's agent.dataSocket; "
                        f"an agent started by hand serves a socket only with --data-socket PATH).")
    p.add_argument("--agent-token-file", default=env_default("agent-token-file", None), metavar="FILE",
                   help="The bearer token of the agent's --data-token-file, for --agent over TCP. Default: none.")
    p.add_argument("--code", action="append", default=None, metavar="CODE",
                   help="Only events of this code (LinkFlapping, PfcStorm, DriverReload, ...). Repeatable. "
                        "Default: every code.")
    p.add_argument("--since", type=duration, default=None, metavar="DURATION",
                   help="Only events of the last DURATION (90s, 15m, 2h). Default: the whole log the agent keeps "
                        "(its --event-history).")
    p.add_argument("--json", action="store_true", help="Print {\"events\": [...]} as the agent serves it, filtered.")


def _no_socket(agent: str) -> str | None:
    """Why the data socket ``--agent`` names is not there, and how to make the agent serve it; None where it is."""
    import os

    if not agent.startswith("unix:") or os.path.exists(agent[len("unix:"):]):
        return None
    path = agent[len("unix:"):]
    return (f"no agent data socket at {path}: the agent serves its event log on a Unix socket only when started "
            f"with --data-socket PATH (railscope agent --data-socket {DEFAULT_SOCKET}; the chart's "
            f"agent.dataSocket, {DEFAULT_SOCKET}, is set by default and names it to railscope in the pod as "
            f"RAILSCOPE_DATA_SOCKET). Give --agent unix:PATH for the socket it serves, or --agent http://ADDR:PORT "
            f"with --agent-token-file (the agent's --data-token-file)")


def run(args: argparse.Namespace) -> int:
    from agent.clients.agent import AgentClient, AgentClientError
    from agent.report.terminal import safe

    if (why := _no_socket(args.agent)) is not None:
        print(f"railscope events: {safe(why)}", file=sys.stderr)
        return 1

    try:
        events = AgentClient(args.agent, token_file=args.agent_token_file).events()
    except AgentClientError as exc:
        if exc.usage:
            print(f"railscope events: {exc}", file=sys.stderr)
            return 3
        print(f"railscope events: {exc}", file=sys.stderr)
        return 1
    if args.code:
        events = [e for e in events if isinstance(e, dict) and e.get("code") in set(args.code)]
    if args.since is not None:
        floor = time.time() - float(args.since)
        events = [e for e in events if isinstance(e, dict) and isinstance(e.get("ts"), int | float) and e["ts"] >= floor]
    if args.json:
        json.dump({"events": events}, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if not events:
        print("no events")
        return 0
    for e in events:
        if not isinstance(e, dict):
            continue
        ts = e.get("ts")
        when = (dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                if isinstance(ts, int | float) else "?")
        # text from the agent is escaped before it reaches the terminal, as every other report does
        print(f"{when}  {safe(e.get('severity', '')).upper():8}  {safe(e.get('code', ''))}  "
              f"{safe(e.get('subject', ''))}  {safe(e.get('message', ''))}")
    return 0
