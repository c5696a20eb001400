#!/usr/bin/env python3
"""Compare the bundles ``railscope capture`` makes on a network-namespace node with two trees of the
code (two commits), apart from times: the manifest's items and every member's bytes.

    git archive BASE | tar -x -C /tmp/before
    sudo python3 scripts/compare_capture.py /tmp/before .

Builds a node namespace with two veth rails (as the tests' ``rails`` fixture), captures with the
first tree twice and the second tree once, and prints what differs. A live node changes between two
reads (``/proc/interrupts``, ``dmesg``): a member that differs between the first tree's two bundles
is *volatile*; its bytes are not compared, only that it is there with the same item. Exit 0 when the
second tree's bundle equals the first's in everything else.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import uuid

#: manifest keys that are times or follow from the time (or are random: a bundle id outside an incident)
TIMES = {"started_at", "ended_at", "duration_s", "bundle_id"}


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)


def make_node() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    node, sw = f"rs-cmp-{tag}", f"rs-cmpsw-{tag}"
    _ip("netns", "add", node)
    _ip("netns", "add", sw)
    for ns in (node, sw):
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.default.disable_ipv6=1"],
                       capture_output=True, check=False)
        _ip("-n", ns, "link", "set", "lo", "up")
    for i in range(2):
        _ip("-n", node, "link", "add", f"net_rail{i}", "mtu", "9000", "type", "veth", "peer", "name", f"peer{i}",
            "netns", sw)
        _ip("-n", node, "addr", "add", f"10.99.{i}.1/24", "dev", f"net_rail{i}")
        _ip("-n", node, "link", "set", f"net_rail{i}", "up")
        _ip("-n", sw, "link", "set", f"peer{i}", "up")
    return node, sw


def capture(tree: str, node: str, out: str) -> dict[str, bytes]:
    os.makedirs(out)
    res = subprocess.run(["ip", "netns", "exec", node, sys.executable, "-m", "agent.cli", "capture", "-o", out + "/",
                          "--node", "cmp-node", "--recorder-gap", "0", "--deadline", "60"],
                         cwd=tree, capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
        raise SystemExit(f"{tree}: capture failed: {res.stderr}")
    path = res.stdout.split()[0]
    members: dict[str, bytes] = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else ""
            if m.isfile():
                members[rel] = tf.extractfile(m).read()  # type: ignore[union-attr]
            elif m.issym():
                members[rel] = b"-> " + m.linkname.encode()
            elif m.isdir() and rel:
                members[rel + "/"] = b""
    return members


def _timeless(doc: object, volatile: set[str]) -> object:
    if isinstance(doc, dict):
        drop = TIMES | ({"bytes", "sha256", "truncated"} if doc.get("path") in volatile else set())
        return {k: _timeless(v, volatile) for k, v in doc.items() if k not in drop}
    if isinstance(doc, list):
        return [_timeless(v, volatile) for v in doc]
    return doc


def compare(a: dict[str, bytes], b: dict[str, bytes], volatile: set[str]) -> list[str]:
    out = []
    for rel in sorted(set(a) | set(b)):
        if rel not in a or rel not in b:
            out.append(f"{rel}: only in the {'first' if rel in a else 'second'} bundle")
        elif rel not in volatile and rel != "manifest.json" and a[rel] != b[rel]:
            out.append(f"{rel}: bytes differ")
    ma, mb = (_timeless(json.loads(x["manifest.json"]), volatile) for x in (a, b))
    ia = {i["path"]: i for i in ma.pop("items")}  # type: ignore[union-attr]
    ib = {i["path"]: i for i in mb.pop("items")}  # type: ignore[union-attr]
    for p in sorted(set(ia) | set(ib)):
        if ia.get(p) != ib.get(p):
            out.append(f"manifest item {p}: {ia.get(p)} != {ib.get(p)}")
    if ma != mb:
        out.append(f"manifest: {json.dumps(ma, sort_keys=True)} != {json.dumps(mb, sort_keys=True)}")
    return out


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 3
    first, second = (os.path.abspath(p) for p in sys.argv[1:])
    node, sw = make_node()
    work = tempfile.mkdtemp(prefix="railscope-compare-")
    try:
        a1 = capture(first, node, f"{work}/a1")
        a2 = capture(first, node, f"{work}/a2")
        b = capture(second, node, f"{work}/b")
    finally:
        subprocess.run(["ip", "netns", "del", node], check=False)
        subprocess.run(["ip", "netns", "del", sw], check=False)
    volatile = {rel for rel in set(a1) | set(a2) if a1.get(rel) != a2.get(rel) and rel != "manifest.json"}
    items = json.loads(a1["manifest.json"])["items"]
    volatile |= {i["path"] for i in items if i["path"] in volatile}
    diffs = compare(a1, b, volatile)
    print(f"{len(a1)} members, {len(items)} manifest items; volatile between two captures of the first tree: "
          f"{', '.join(sorted(volatile)) or 'none'}")
    for line in diffs:
        print(line)
    print("same apart from times" if not diffs else f"{len(diffs)} difference(s)")
    return 0 if not diffs else 1


if __name__ == "__main__":
    sys.exit(main())
