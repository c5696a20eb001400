#!/usr/bin/env python3
"""Compare two ``scripts/doctor_all.sh`` output directories: every image's ``doctor --json`` must be
byte-identical, except for what a list of new sources and codes adds.

    scripts/doctor_all.sh /tmp/before          # on the old commit
    scripts/doctor_all.sh /tmp/after           # on the new one
    scripts/doctor_compare.py /tmp/before /tmp/after --source pcie --source thermal --source optics \\
        --source-prefix "ethtool -m " --code LinkDegrading ...

Allowed differences: entries added to ``unavailable`` whose source is one of ``--source`` (or starts
with a ``--source-prefix``), findings added with one of the ``--code`` codes, and keys added to a
``rails[]`` row (``--rail-key``). Anything else — a changed or removed finding, another exit status, a
changed rail value — is reported and makes the exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _split(text: str) -> tuple[str, dict | None]:
    body, _, tail = text.rpartition("exit ")
    try:
        return tail.strip(), json.loads(body) if body.strip() else None
    except ValueError:
        return tail.strip(), None


def compare(before: dict, after: dict, sources: set[str], prefixes: tuple[str, ...], codes: set[str],
            rail_keys: set[str]) -> list[str]:
    problems = []
    def new_source(s: str) -> bool:
        return s in sources or s.startswith(prefixes)
    kept = [u for u in after.get("unavailable", []) if not new_source(u["source"])]
    if kept != before.get("unavailable", []):
        problems.append("unavailable differs beyond the new sources")
    kept_f = [f for f in after.get("findings", []) if f["code"] not in codes]
    if kept_f != before.get("findings", []):
        problems.append("findings differ beyond the new codes")
    rb, ra = before.get("rails", []), after.get("rails", [])
    if len(rb) != len(ra):
        problems.append("rails[] length differs")
    for b, a in zip(rb, ra, strict=False):
        if {k: v for k, v in a.items() if k not in rail_keys} != b:
            problems.append(f"rail {b.get('rail')} differs beyond the new keys")
    for k in set(before) | set(after):
        if k not in ("unavailable", "findings", "rails") and before.get(k) != after.get(k):
            problems.append(f"{k} differs")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--source", action="append", default=[], help="A new source name. Repeatable.")
    ap.add_argument("--source-prefix", action="append", default=[], help="A new source name prefix. Repeatable.")
    ap.add_argument("--code", action="append", default=[], help="A new finding code. Repeatable.")
    ap.add_argument("--rail-key", action="append", default=[], help="A new rails[] key. Repeatable.")
    args = ap.parse_args()
    bad = 0
    names = sorted(p.name for p in args.before.glob("*.json"))
    for name in names:
        tb = (args.before / name).read_text()
        ta_path = args.after / name
        if not ta_path.exists():
            print(f"{name}: missing after")
            bad += 1
            continue
        ta = ta_path.read_text()
        if ta == tb:
            continue
        eb, db = _split(tb)
        ea, da = _split(ta)
        problems = [] if eb == ea else [f"exit {eb} -> {ea}"]
        if db is None or da is None:
            problems.append("not JSON")
        else:
            problems += compare(db, da, set(args.source), tuple(args.source_prefix), set(args.code),
                                set(args.rail_key))
        if problems:
            bad += 1
            print(f"{name}: " + "; ".join(problems))
    print(f"{len(names)} images compared, {bad} with differences beyond the new sources and codes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
