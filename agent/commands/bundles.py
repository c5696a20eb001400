"""``railscope bundles ls|get|verify``: the collector's bundle API from a terminal.

``ls`` prints a table (``--json`` for the API's document); ``get`` downloads a bundle and its
``.sha256``, with progress on a TTY, and says done only after the bytes hash to the recorded
sha256; ``verify`` asks the collector to re-hash the stored object. Exit status: 0 fine, 1 a digest
mismatch or a refused request, 3 bad usage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

from .common import env_default

_CHUNK = 1 << 20


def _common(p: argparse.ArgumentParser, default: object) -> None:
    p.add_argument("--collector", default=default if default is argparse.SUPPRESS else env_default("collector", None),
                   metavar="URL",
                   help="The collector's URL, e.g. http://railscope-collector:9842. Required (or RAILSCOPE_COLLECTOR).")
    p.add_argument("--token-file", default=default if default is argparse.SUPPRESS else env_default("token-file", None),
                   metavar="FILE",
                   help="A file holding an operator token. Default: none (only an --insecure-dev collector answers).")


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


class _Fail(Exception):
    pass


def _request(args: argparse.Namespace, path: str, method: str = "GET"):  # type: ignore[no-untyped-def]
    headers = {}
    if args.token_file:
        headers["Authorization"] = "Bearer " + Path(args.token_file).read_text().strip()
    req = urllib.request.Request(args.collector.rstrip("/") + path, method=method, headers=headers)
    try:
        return urllib.request.urlopen(req, timeout=60)
    except urllib.error.HTTPError as exc:
        try:
            doc = json.loads(exc.read())
            why = f"{doc.get('error')}: {doc.get('message')}"
        except ValueError:
            why = exc.reason
        raise _Fail(f"collector answered {exc.code} ({why})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise _Fail(f"cannot reach {args.collector}: {getattr(exc, 'reason', exc)}") from None


def _ls(args: argparse.Namespace) -> int:
    from urllib.parse import urlencode

    q = {k: getattr(args, k) for k in ("cluster", "date", "incident", "node") if getattr(args, k)}
    with _request(args, "/v1/bundles" + ("?" + urlencode(q) if q else "")) as resp:
        doc = json.loads(resp.read())
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    rows = [("KEY", "NODE", "TIME", "BYTES", "SHA256")]
    for b in doc["bundles"]:
        rows.append((b["key"], b["node"], b["time"], str(b["bytes"]), (b.get("sha256") or "-")[:12]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _get(args: argparse.Namespace) -> int:
    name = args.key.rsplit("/", 1)[-1]
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    with _request(args, f"/v1/bundles/{args.key}.sha256") as resp:
        sha_line = resp.read().decode()
    recorded = sha_line.split()[0] if sha_line.split() else ""
    tmp = out / f".{name}.part"
    h, n = hashlib.sha256(), 0
    tty = sys.stderr.isatty()
    with _request(args, f"/v1/bundles/{args.key}") as resp, open(tmp, "wb") as fh:
        total = int(resp.headers.get("Content-Length") or 0)
        while data := resp.read(_CHUNK):
            fh.write(data)
            h.update(data)
            n += len(data)
            if tty:
                pct = f" {100 * n // total}%" if total else ""
                print(f"\r{name}: {n >> 20} MiB{pct}", end="", file=sys.stderr, flush=True)
        fh.flush()
        os.fsync(fh.fileno())
    if tty:
        print(file=sys.stderr)
    if total and n != total:
        tmp.unlink(missing_ok=True)
        raise _Fail(f"{name}: short download ({n} of {total} bytes)")
    if h.hexdigest() != recorded:
        tmp.unlink(missing_ok=True)
        raise _Fail(f"{name}: sha256 {h.hexdigest()} is not the recorded {recorded}")
    os.replace(tmp, out / name)
    (out / (name + ".sha256")).write_text(sha_line)
    print(f"{out / name}: {n} bytes, sha256 {recorded} OK")
    return 0


def _verify(args: argparse.Namespace) -> int:
    with _request(args, f"/v1/bundles/{args.key}/verify", method="POST") as resp:
        doc = json.loads(resp.read())
    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        state = "OK" if doc["ok"] else f"MISMATCH (recorded {doc['recorded']})"
        print(f"{doc['key']}: {doc['bytes']} bytes, sha256 {doc['sha256']} {state}")
    return 0 if doc["ok"] else 1


def run(args: argparse.Namespace) -> int:
    if not args.collector:
        print("railscope bundles: --collector URL is required (or RAILSCOPE_COLLECTOR)", file=sys.stderr)
        return 3
    action = {"ls": _ls, "get": _get, "verify": _verify}.get(args.action or "")
    if action is None:
        print("railscope bundles: say ls, get or verify", file=sys.stderr)
        return 3
    try:
        return action(args)
    except _Fail as exc:
        print(f"railscope bundles: {exc}", file=sys.stderr)
        return 1
