"""``railscope doctor``: diagnose this node, or a node image / bundle (``--from``).

Exit status: 0 no warning or critical finding, 1 warnings only, 2 any critical, 3 bad usage or an
input that is not a node image (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agent.commands.common import (
    LLDP_WAIT,
    add_expectation_flags,
    add_lldp_flag,
    add_scope_flag,
    env_default,
    fail,
    given_expectations,
    judged_by,
)
from agent.config import Expectations
from agent.host import HostError
from agent.model import Snapshot
from agent.naming import pci_order
from agent.settings import add_flags

__all__ = ["register", "run"]

#: PCI vendor id of Mellanox / NVIDIA networking (ConnectX, BlueField).
_MELLANOX = "0x15b3"


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="source", metavar="PATH",
                   help="Diagnose a node image: a directory, or a bundle .tar.gz with or without its top "
                        "directory. Default: this node, live.")
    p.add_argument("--json", action="store_true",
                   help="Print the railscope.doctor/v1 JSON document instead of the table.")
    p.add_argument("--host-root", default=env_default("host-root", "/"), metavar="DIR",
                   help="Read the live node's files under DIR (/host in the DaemonSet). Default: /.")
    add_expectation_flags(p)
    add_scope_flag(p)
    add_lldp_flag(p)
    add_flags(p, (LLDP_WAIT,))


class LldpProgress:
    """The one line a terminal sees while a one-shot ``--lldp listen`` listens (rewritten in place, erased
    when done): how many rails have heard their neighbour, and how long the window still runs."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.shown = False

    def __call__(self, heard: int, rails: int, left_s: float) -> None:
        if heard >= rails or left_s <= 0:
            self.done()
            return
        self.stream.write(f"\rrailscope doctor: listening for LLDP: {heard}/{rails} rails heard, "
                          f"{left_s:.0f} s left (--lldp-wait) \x1b[K")
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _fail(msg: str) -> int:
    return fail("doctor", msg)


def what_was_found(snap: Snapshot) -> list[str]:
    """Plain words for a node with no rails: is there a ConnectX at all, and what is there."""
    vendor = {fn.bdf: fn.vendor for fn in snap.pci}
    nics = [ln for ln in snap.links if ln.parent_bus == "pci" or ln.parent_dev]
    mlx = [ln for ln in nics if vendor.get(ln.parent_dev or "") == _MELLANOX]
    drivers = {d.netdev: d.driver for d in snap.drivers}
    lines = []
    if not mlx and not snap.rdma_devices:
        lines.append("no ConnectX NIC found")
    else:
        # the ConnectX functions are what a --rail-map names: say them, in PCI order
        fns = sorted({ln.parent_dev for ln in mlx if ln.parent_dev}, key=pci_order)
        example = ",".join(f"{n}={b}" for n, b in enumerate(fns[:2])) or "0=0000:0c:00.0"
        lines.append("ConnectX NIC(s) found, but no udev naming rules and no netdev named like a rail "
                     f"(declare the rails by PCI function with --rail-map, e.g. --rail-map {example}, "
                     "or use --rails N or --net-template)")
    others = [ln for ln in snap.links if ln.ifname != "lo"]
    if others:
        desc = []
        for ln in others:
            extra = ln.kind or drivers.get(ln.ifname) or (f"{ln.parent_bus or 'bus'} {ln.parent_dev}" if ln.parent_dev else None)
            desc.append(f"{ln.ifname} ({extra})" if extra else ln.ifname)
        lines.append(f"netdevs: {', '.join(desc)}")
    else:
        lines.append("netdevs: none besides lo")
    if snap.rdma_devices:
        lines.append("RDMA devices: " + ", ".join(d.name for d in snap.rdma_devices))
    if mlx:
        lines.append("ConnectX PCI functions: " + ", ".join(sorted({ln.parent_dev for ln in mlx if ln.parent_dev},
                                                                   key=pci_order)))
    return lines


def not_judged(exp: Expectations) -> list[str]:
    """What no ``--expect-*`` flag asked for, in words with the flag that would ask."""
    return [f"{what} ({flag})" for what, flag, value in (
        ("eswitch mode", "--expect-eswitch-mode", exp.eswitch_mode),
        ("esw_multiport", "--expect-esw-multiport", exp.esw_multiport),
        ("RDMA netns mode", "--expect-rdma-netns", exp.rdma_netns),
        ("mlx5 driver kind", "--expect-driver", exp.driver),
    ) if value is None]


#: The incident's cluster slice the collector stores beside the incident's bundles (collector/cluster/slice.py).
CLUSTER_SLICE = "cluster.tar.gz"


def with_cluster_slice(diag: Any, source: str) -> Any:
    """``diag`` with the operators' intent against it (RailIntentMismatch, OperatorConfigConflict) where the
    incident's cluster slice lies beside the bundle; else ``diag`` as it is. ``ValueError`` for a slice that
    does not verify."""
    import dataclasses
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(source.rstrip("/"))), CLUSTER_SLICE)
    if not os.path.isfile(path) or not diag.node:
        return diag
    from agent.analysis.cluster_diff import view_of
    from agent.analysis.intent import intent_findings
    from agent.commands.snapshot import SnapshotError, read_snapshot
    from agent.findings import Finding

    try:
        manifest, objects = read_snapshot(path)
    except (SnapshotError, OSError) as exc:
        raise ValueError(f"the incident's cluster slice {path}: {exc}") from None
    found = intent_findings(view_of(objects, manifest), {diag.node: diag.as_json()}, only=diag.node)
    if not found:
        return diag
    return dataclasses.replace(diag, findings=tuple(sorted((*diag.findings, *found), key=Finding.sort_key)),
                               notes=(*diag.notes, f"judged against the incident's cluster slice {path}"))


def run(args: argparse.Namespace) -> int:
    try:
        exp, table = judged_by(args)
    except ValueError as exc:
        return _fail(str(exc))

    from agent.offline import InputError, diagnose_host, open_input

    try:
        if args.source is not None:
            # --from '' is a mistake (an unset variable), never "this node".
            if not args.source.strip():
                return _fail("--from: an empty path is not a node image")
            host = open_input(args.source)
        else:
            from agent.host.live import LiveHost

            host = LiveHost(args.host_root)
    except (InputError, HostError) as exc:
        return _fail(str(exc))

    # a one-shot listen waits for the rails' frames: the terminal sees how far it is, a pipe nothing
    progress = LldpProgress(sys.stderr) if host.live and args.lldp == "listen" and sys.stderr.isatty() else None
    try:
        # A bundle is judged with the expectations it was captured with unless a flag says otherwise.
        got = diagnose_host(host, exp, table, name=args.source or "this node", given=given_expectations(args),
                            exclude_devices=args.exclude_devices, lldp=args.lldp,
                            lldp_wait_s=args.lldp_wait if host.live else 0.0, lldp_progress=progress)
    except InputError as exc:
        return _fail(str(exc))
    finally:
        if progress is not None:
            progress.done()
        host.close()
    diag, snap = got.diagnosis, got.snapshot
    if args.source is not None:
        try:
            diag = with_cluster_slice(diag, args.source)
        except ValueError as exc:
            return _fail(str(exc))

    if args.json:
        from agent.report.jsondoc import strict_json

        doc = diag.as_json()
        if got.judged is not None and got.judged.from_bundle(exp):
            # Only when the bundle changed the judgement: a replay judged as the command line says
            # stays the same document as the live run (doctor --from == live).
            doc["expectations"] = got.judged.as_json()
        json.dump(strict_json(doc), sys.stdout, indent=2, sort_keys=False, allow_nan=False)
        sys.stdout.write("\n")
    else:
        from agent.report.text import render

        render(diag, sys.stdout, source=args.source, found=what_was_found(snap) if not diag.rails else (),
               not_judged=not_judged(got.expectations or exp),
               judged_with=got.judged.words() if got.judged is not None else None)
    return diag.exit_status()
