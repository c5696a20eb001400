"""``railscope preflight``: the upgrade gate as one command — is this node ready to take NCCL jobs again?

Run on the node (or in the agent pod) after a Network Operator, DOCA driver or firmware upgrade, before
uncordoning. Each check prints one line (``ok``, ``FAIL`` or ``skip`` with why), then one verdict line;
exit 0 when every check passed or was skipped, 1 when one failed, 3 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from dataclasses import dataclass
from typing import Any

from agent.commands.common import (
    add_expectation_flags,
    add_scope_flag,
    env_default,
    fail,
    given_expectations,
    judged_by,
)
from agent.commands.kubeapi import add_api_flags, api_config, api_given

__all__ = ["CHECKS", "register", "run"]

#: check name -> the doctor codes that fail it (every other warning or critical finding fails "findings")
CHECKS: dict[str, tuple[str, ...]] = {
    "rails": ("RailMissing", "RailNameMismatch", "RailTemplateInvalid", "RailLinkDown", "RailNamingConflict"),
    "rdma": ("RdmaLinkDown", "RdmaNameMismatch", "RailRdmaMissing"),
    "gpudirect": ("GpuDirectNotReady",),
    "firmware": ("FirmwarePendingActivation", "FirmwareStoredUnreadable"),
    "mtu": ("MtuMismatch",),
    "driver": ("DriverNotDoca",),
}

HELP = """\
The upgrade gate for one node. It checks, from what this node's readers see:
  rails      every rail the udev rules (or --rails) expect has its netdev, named as the rule says, up
  rdma       every rail's RDMA port is ACTIVE and named as its rule says, and every rail that must have
             an RDMA device has one (its udev rule names one, its PF is mlx5 with RoCE enabled, or
             --expect-rdma): a driver upgrade that left mlx5_ib unloaded fails here
  gpudirect  on a GPU node, NCCL finds a GPUDirect RDMA path (nvidia_peermem, or DMA-BUF with the open
             GPU kernel modules on Linux >= 5.12)
  firmware   no NIC runs other firmware than it has flashed (the upgrade's reset has happened), and
             every NIC can report its stored firmware (255.255.65535: a failed flash)
  mtu        every rail has --expect-mtu, or the MTU of the other rails
  driver     with --expect-driver doca: the DOCA driver, not the inbox one
  findings   no other warning or critical finding of railscope doctor
  resources  the Node object advertises every --rail-resources resource it lists above 0 (needs an API
             server: in-cluster, or --api-server; skipped without one)
  rollout    this node's rollout verdict (`railscope rollout --node`) is converged: the operators' objects
             read from the API server, one LIST per kind (skipped without an API server, one that cannot
             be reached, or a ServiceAccount that may not read them; --rollout fails then instead)
  since      with --since BUNDLE: nothing got worse than in that capture (railscope diff's regressions)

It cannot see east-west traffic: no packet is sent to another node, so a wrong switch port, PFC or
routing between nodes passes here. Run nccl-tests (all_reduce_perf) or ib_write_bw across nodes for
that. It reads only; it never changes the node.
"""


def register(p: argparse.ArgumentParser) -> None:
    p.description = HELP
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--since", metavar="BUNDLE",
                   help="A capture of this node from before the upgrade (a bundle .tar.gz or a node image "
                        "directory): fail on any regression since. Default: none.")
    p.add_argument("--from", dest="source", metavar="PATH",
                   help="Judge a node image instead of this node (a directory or a bundle .tar.gz). Default: "
                        "this node, live.")
    p.add_argument("--host-root", default=env_default("host-root", "/"), metavar="DIR",
                   help="Read the live node's files under DIR (/host in the DaemonSet). Default: /.")
    p.add_argument("--json", action="store_true", help="Print the checks and the verdict as JSON.")
    p.add_argument("--node", default=env_default("node", None),
                   help="This node's name in Kubernetes, for the resources check. Default: RAILSCOPE_NODE, "
                        "else the node's hostname.")
    p.add_argument("--rail-resources", default=env_default("rail-resources", "nvidia.com/*,rdma/*,openshift.io/*"),
                   metavar="PATTERNS",
                   help="Extended resources that must be allocatable above 0, comma-separated shell patterns; "
                        "nvidia.com/gpu is never one. Only the resources the node lists are judged. Default: "
                        "nvidia.com/*,rdma/*,openshift.io/*.")
    p.add_argument("--rollout", action="store_true",
                   help="Require the rollout check: without an API server (or one that cannot be reached) it fails "
                        "instead of being skipped. Default: the check runs whenever an API server is given or "
                        "in-cluster.")
    add_api_flags(p)
    add_expectation_flags(p)
    # the node's own read: the firmware reads doctor and the agent keep off a device keep off it here too
    add_scope_flag(p)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # ok | FAIL | skip
    detail: str

    def as_json(self) -> dict[str, str]:
        return {"check": self.name, "status": self.status.lower(), "detail": self.detail}


def _resources(args: argparse.Namespace, node: str | None) -> Check:
    if not api_given(args):
        # not in a pod: spare the import of the Kubernetes client (aiohttp) a whole process would pay
        return Check("resources", "skip", "no API server (not in a pod; --api-server)")
    import asyncio

    from agent.clients.kubernetes import KubeClient, KubeError
    from agent.detectors.rail_resources import parse_allocatable

    try:
        # The token file keeps this check's rule of before: read as it is (the agent's ServiceAccount token
        # and a copy of it are group-readable where the chart does not set a mode).
        cfg = api_config(args, owner_only=False)
    except KubeError:
        return Check("resources", "skip", "no API server (not in a pod; --api-server)")
    if not node:
        return Check("resources", "skip", "no node name (--node)")
    patterns = tuple(x.strip() for x in str(args.rail_resources).split(",") if x.strip())

    async def get() -> Any:
        async with KubeClient(cfg, timeout=10) as client:
            return await client.get_json("/api/v1/nodes/" + urllib.parse.quote(node, safe=""))

    try:
        obj: Any = asyncio.run(get())
    except KubeError as exc:
        what = f"HTTP Error {exc.status}: {exc.reason}" if exc.status else exc.message or str(exc)
        return Check("resources", "FAIL", f"GET node {node}: {what}")
    alloc = parse_allocatable(obj if isinstance(obj, dict) else {}, patterns)
    if not alloc:
        return Check("resources", "skip", f"node {node} lists no resource matching {','.join(patterns)}")
    zero = sorted(k for k, v in alloc.items() if v <= 0)
    if zero:
        return Check("resources", "FAIL", f"0 allocatable: {', '.join(zero)} (the device plugin advertises no rails)")
    return Check("resources", "ok", ", ".join(f"{k}={v}" for k, v in sorted(alloc.items())))


def _rollout(args: argparse.Namespace, node: str | None) -> Check:
    """The node's own convergence verdict (docs/design.md §9), as ``railscope rollout --node`` gives it: run whenever an
    API server is given or in-cluster; where there is none, none that answers as one, or the ServiceAccount may
    not read the operators' objects, skipped and said so (with ``--rollout``: failed)."""
    bad = "FAIL" if args.rollout else "skip"
    if not api_given(args):
        return Check("rollout", bad, "no API server (not in a pod; --api-server)")
    if not node:
        return Check("rollout", "skip", "no node name (--node)")
    import asyncio
    import time

    from agent.analysis.rollout import KIND_BY_KEY, judge
    from agent.clients.cluster import ClusterWatch
    from agent.clients.kubernetes import KubeClient, KubeError

    try:
        cfg = api_config(args, owner_only=False)
    except KubeError:
        return Check("rollout", bad, "no API server (not in a pod; --api-server)")

    async def verdict() -> Any:
        async with KubeClient(cfg) as client:
            watch = ClusterWatch(client, args.namespace, node=node)
            await watch.sync()
        return judge(watch.view, time.time(), only=node), watch.view.missing

    try:
        result, missing = asyncio.run(verdict())
    except KubeError as exc:
        if exc.status in (0, 404):  # nothing answers, or what answers serves no Kubernetes API
            return Check("rollout", bad, f"the API server cannot be read: {exc}")
        return Check("rollout", "FAIL", f"the API server: {exc}")
    if f"{KIND_BY_KEY['nodes'].name} (forbidden)" in missing:
        return Check("rollout", bad, "this ServiceAccount may not read the operators' objects (forbidden: "
                                     + ", ".join(m.removesuffix(" (forbidden)") for m in missing
                                                 if m.endswith("(forbidden)")) + ")")
    if not result.nodes:
        return Check("rollout", "FAIL", f"no node {node} in the cluster")
    v = result.nodes[0]
    if v.verdict == "converged":
        return Check("rollout", "ok", "converged" + (f" (skipped, not in this cluster: {', '.join(result.skipped)})"
                                                     if result.skipped else ""))
    return Check("rollout", "FAIL", f"{v.verdict}: {v.step}: {v.reason}")


def _verdicts(diag: Any, exp: Any, snap: Any) -> list[Check]:
    out = []
    claimed: set[str] = set()
    for name, codes in CHECKS.items():
        claimed.update(codes)
        bad = [f for f in diag.findings if f.code in codes and (f.severity != "info" or name == "firmware")]
        if bad:
            out.append(Check(name, "FAIL", "; ".join(f"{f.code} {f.subject}" for f in bad)))
            continue
        if name == "rails":
            up = sum(1 for r in diag.rails if r.oper == "up")
            out.append(Check(name, "ok" if diag.rails else "FAIL",
                             f"{up} of {len(diag.rails)} rail(s) up" if diag.rails else "no rails found"))
        elif name == "rdma":
            active = sum(1 for r in diag.rails if r.rdma_state == "ACTIVE")
            out.append(Check(name, "ok", f"{active} RDMA port(s) ACTIVE"))
        elif name == "gpudirect":
            gpus = snap.gpus.gpus if snap.gpus is not None else ()
            out.append(Check(name, "ok", f"{len(gpus)} GPU(s), GPUDirect RDMA path present") if gpus
                       else Check(name, "skip", "no NVIDIA GPU on this node"))
        elif name == "firmware":
            out.append(Check(name, "ok", f"{len(snap.firmware)} PF(s): running = stored") if snap.firmware
                       else Check(name, "skip", "devlink dev info not available"))
        elif name == "mtu":
            out.append(Check(name, "ok", f"rails at MTU {exp.mtu}" if exp.mtu else "the rails agree"))
        elif name == "driver":
            out.append(Check(name, "ok", "DOCA / OFED mlx5 driver") if exp.driver
                       else Check(name, "skip", "no --expect-driver"))
    other = [f for f in diag.findings if f.code not in claimed and f.severity in ("critical", "warning")]
    out.append(Check("findings", "FAIL" if other else "ok",
                     "; ".join(f"{f.code} {f.subject} ({f.severity})" for f in other) or "no other warning"))
    return out


def _load(path: str | None, exp: Any, table: Any, host_root: str, exclude_devices: str | None = None,
          given: dict[str, str] | None = None) -> Any:
    """This node (``path`` None) or a node image, read and diagnosed by the one offline pipeline; an
    image is judged with the expectations it records except those the command line states (``given``)."""
    from agent.offline import diagnose_host, diagnose_image

    if path is None:
        from agent.host.live import LiveHost

        with LiveHost(host_root) as host:
            return diagnose_host(host, exp, table, name="this node", exclude_devices=exclude_devices)
    return diagnose_image(path, exp, table, given=given)


def run(args: argparse.Namespace) -> int:
    from agent.host import HostError
    from agent.offline import InputError

    try:
        exp, table = judged_by(args)
    except ValueError as exc:
        return fail("preflight", str(exc))
    if args.source is not None and not args.source.strip():
        return fail("preflight", "--from: an empty path is not a node image")
    given = given_expectations(args)
    before = None
    if args.since:
        try:
            before = _load(args.since, exp, table, args.host_root, given=given)
        except (InputError, HostError) as exc:
            return fail("preflight", f"--since: {exc}")
    # This node, live, is judged as the capture it is compared with, unless the command line says otherwise
    # (as ``railscope diff BUNDLE live``): the capture's --expect-mtu must not become "the rails agree" here.
    live_exp = before.judged.expectations if before is not None and before.judged is not None else exp
    try:
        now = _load(args.source, live_exp if args.source is None else exp, table, args.host_root,
                    args.exclude_devices, given)
    except (InputError, HostError) as exc:
        return fail("preflight", str(exc))
    diag, snap = now.diagnosis, now.snapshot
    # the checks say what the diagnosis was judged with: a bundle's recorded --expect-* under the flags
    now_exp = now.expectations or exp
    checks = _verdicts(diag, now_exp, snap)
    node = args.node or diag.node
    checks.append(_resources(args, node))
    checks.append(_rollout(args, node))
    if before is not None:
        from agent.analysis.diff import Side, diff

        before_exp = before.expectations or exp
        # --ber-warning judges the corrected-bit ratio between the captures (BerHigh), each side with the
        # expectations it was judged with, as in diff
        d = diff(Side(args.since, before.snapshot, before.topology, before.diagnosis, before_exp.lossless_prio,
                      ber_warning=before_exp.ber_warning),
                 Side(args.source or "live", now.snapshot, now.topology, now.diagnosis, now_exp.lossless_prio,
                      ber_warning=now_exp.ber_warning))
        checks.append(Check("since", "FAIL" if d.regressions else "ok",
                            "; ".join(f"{i.code} {i.subject}" for i in d.regressions)
                            or f"no regression since {os.path.basename(args.since.rstrip('/'))}"))
    else:
        checks.append(Check("since", "skip", "no --since capture"))
    failed = [c.name for c in checks if c.status == "FAIL"]
    rails = len(diag.rails)
    verdict = (f"PREFLIGHT FAIL: {node or 'this node'}: {len(failed)} check(s) failed: {', '.join(failed)}"
               if failed else f"PREFLIGHT PASS: {node or 'this node'} is ready ({rails} rail(s), "
                              f"{sum(c.status == 'ok' for c in checks)} check(s) ok, "
                              f"{sum(c.status == 'skip' for c in checks)} skipped)")
    if args.json:
        json.dump({"schema": "railscope.preflight/v1", "node": node, "ready": not failed,
                   "checks": [c.as_json() for c in checks], "verdict": verdict}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        from agent.findings import NEXT_STEPS
        from agent.report.terminal import safe

        for c in checks:
            sys.stdout.write(f"{c.status:5} {c.name:10} {safe(c.detail)}\n")
            if c.status == "FAIL":
                for code in dict.fromkeys(w for w in c.detail.replace(";", " ").split() if w in NEXT_STEPS):
                    sys.stdout.write(f"{'':16} next: {NEXT_STEPS[code]}\n")
        sys.stdout.write(safe(verdict) + "\n")
    return 1 if failed else 0
