"""``railscope bundles ls|get|verify``: the collector's bundle API from a terminal.

``ls`` prints a table (``--json`` for the API's document); ``get`` downloads a bundle and its
``.sha256``, with progress on a TTY, and says done only after the bytes hash to the recorded
sha256; ``verify`` asks the collector to re-hash the stored object. Exit status: 0 fine, 1 a digest
mismatch or a refused request, 3 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from agent.clients.collector import CollectorClient, CollectorError

from .common import EXIT_USAGE, add_collector_flags, collector_client, env_default


def _common(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--collector", default=default if default is argparse.SUPPRESS else env_default("collector", None),
                   metavar="URL",
                   help="The collector's URL, e.g. http://railscope-collector:9842. Required (or RAILSCOPE_COLLECTOR).")
    p.add_argument("--token-file", default=default if default is argparse.SUPPRESS else env_default("token-file", None),
                   metavar="FILE",
                   help="A file holding an operator token, readable by its owner only (mode 0600 or 0400). Default: "
                        "none (only an --insecure-dev collector answers).")
    add_collector_flags(p, suppress=default is argparse.SUPPRESS)


def register(p: argparse.ArgumentParser) -> None:
    _common(p, None)
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    ls = sub.add_parser("ls", help="List stored bundles.")
    for name in ("cluster", "date", "incident", "node"):
        ls.add_argument(f"--{name}", default=None, help=f"Only bundles of this {name}.")
    ls.add_argument("--json", action="store_true", help="Print the API's JSON document.")
    get = sub.add_parser("get", help="Download a bundle and its .sha256, checked.")
    get.add_argument("key", help="<cluster>/<yyyy-mm-dd>/<incident>/<name>.tar.gz, as ls prints it.")
    get.add_argument("-o", "--output", default=".", metavar="DIR", help="Where to write both files. Default: .")
    ver = sub.add_parser("verify", help="Ask the collector to re-hash a stored bundle.")
    ver.add_argument("key")
    ver.add_argument("--json", action="store_true")
    # The same options after the action (`bundles ls --collector URL`): SUPPRESS keeps a value given
    # before the action when none is given after it.
    for action in (ls, get, ver):
        _common(action, argparse.SUPPRESS)


async def _ls(client: CollectorClient, args: argparse.Namespace) -> int:
    doc = await client.list(**{k: getattr(args, k) for k in ("cluster", "date", "incident", "node")})
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    rows = [("KEY", "NODE", "TIME", "BYTES", "SHA256")]
    for b in doc["bundles"]:
        # What the collector answers reaches a terminal: its control characters (escapes) are shown, not run.
        rows.append(tuple(_shown(v) for v in (b.get("key"), b.get("node"), b.get("time"), b.get("bytes"),
                                               str(b.get("sha256") or "-")[:12])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _shown(value: object) -> str:
    """A value of the collector's answer for a terminal: control characters as ``\\xNN``."""
    text = "-" if value is None else str(value)
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


async def _get(client: CollectorClient, args: argparse.Namespace) -> int:
    from agent.commands.progress import TtyLine

    name = _shown(args.key.rsplit("/", 1)[-1])
    line = TtyLine(sys.stderr)

    def progress(n: int, total: int | None) -> None:
        pct = f" of {total / 1e6:.1f} MB, {100 * n // total}%" if total else ""
        line.update(f"{name}: {n / 1e6:.1f} MB{pct}")

    try:
        path, recorded = await client.get(args.key, Path(args.output), progress=progress if line.on else None)
    finally:
        line.end()
    print(f"{path}: {path.stat().st_size} bytes, sha256 {recorded} OK")
    return 0


async def _verify(client: CollectorClient, args: argparse.Namespace) -> int:
    doc = await client.verify(args.key)
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        state = "OK" if doc["ok"] else f"MISMATCH (recorded {_shown(doc.get('recorded'))})"
        print(f"{_shown(doc.get('key'))}: {_shown(doc.get('bytes'))} bytes, sha256 {_shown(doc.get('sha256'))} {state}")
    return 0 if doc["ok"] else 1


def run(args: argparse.Namespace) -> int:
    if not args.collector:
        print("railscope bundles: --collector URL is required (or RAILSCOPE_COLLECTOR)", file=sys.stderr)
        return 3
    action = {"ls": _ls, "get": _get, "verify": _verify}.get(args.action or "")
    if action is None:
        print("railscope bundles: say ls, get or verify", file=sys.stderr)
        return 3
    async def call() -> int:
        async with collector_client("bundles", args.collector, args, token_file=args.token_file,
                                    token_flag="--token-file") as client:
            return await action(client, args)

    try:
        return asyncio.run(call())
    except CollectorError as exc:
        print(f"railscope bundles: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.code in ("token_file", "bad_key") else 1
