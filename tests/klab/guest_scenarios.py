"""The kernel lab scenarios: run INSIDE the lab guest by ``scripts/klab/guest.sh``, never on the host.

The guest is a real Debian 6.1 kernel with netdevsim (devlink, SR-IOV VFs, switchdev VF
representors), rdma_rxe (RDMA links) and nlmon (a netlink tap). Each scenario sets the node up with
the kernel's own interfaces (sysfs, ``devlink``, ``ip``, ``rdma``), runs railscope's agent code
against it (``LiveHost``, the readers, topology, detectors, the metrics collector, the CLI) and
writes what both sides saw to ``<out>/results.json``. The verdicts are the host-side tests in
``tests/klab/test_klab_*.py``; this file only records, so one broken scenario never hides the others.

Run: ``PYTHONPATH=<project>:<guest-site> python3 tests/klab/guest_scenarios.py --out /out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

NSIM = "/sys/bus/netdevsim"
NSIM_DEBUGFS = "/sys/kernel/debug/netdevsim"
DEV = "netdevsim10"  # 2 physical ports, 4 VFs, switchdev: the NIC under test
DEV2 = "netdevsim11"  # 1 port, legacy: a second NIC, so that the node has two rails
HANDLE = f"netdevsim/{DEV}"
SYSDEV = f"{NSIM}/devices/{DEV}"
#: VFs for the busy scenario: netdevsim holds the devlink lock while it creates all representors.
BUSY_VFS = 1024
CHURN_CYCLES = 5
#: Memory is traced from this cycle on (the first ones warm caches: regexes, imports, sockets).
CHURN_TRACE_FROM = 1
PROJECT = Path(__file__).resolve().parent.parent.parent


# ------------------------------------------------------------------------------------------------
# small helpers (test-side setup may change the lab: it is a throwaway kernel)


def sh(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip()}")
    return res


def sh_json(*argv: str) -> Any:
    return json.loads(sh(*argv).stdout)


def write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return None


def plain(obj: Any) -> Any:
    """Records -> JSON-able values (dataclasses, tuples, frozensets, bytes)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (set, frozenset)):
        return sorted(plain(v) for v in obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return obj


def netdevs_of(dev: str) -> dict[str, str]:
    """phys_port_name -> netdev name, for the netdevs whose parent device is ``dev``."""
    out = {}
    for name in sorted(os.listdir("/sys/class/net")):
        if os.path.basename(os.path.realpath(f"/sys/class/net/{name}/device")) != dev:
            continue
        ppn = read(f"/sys/class/net/{name}/phys_port_name")
        if ppn:
            out[ppn] = name
    return out


def representors_now() -> dict[int, str]:
    """VF index -> representor netdev of DEV, straight from sysfs."""
    out = {}
    for ppn, name in netdevs_of(DEV).items():
        m = re.fullmatch(r"pf0vf([0-9]+)", ppn)
        if m:
            out[int(m.group(1))] = name
    return out


def wait_for(cond: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)


def set_numvfs(n: int) -> None:
    # netdevsim refuses N -> M with both non-zero (EBUSY), like mlx5: go through 0.
    cur = int(read(f"{SYSDEV}/sriov_numvfs") or 0)
    if cur == n:
        return
    if cur and n:
        write(f"{SYSDEV}/sriov_numvfs", "0")
    write(f"{SYSDEV}/sriov_numvfs", str(n))


def set_eswitch(mode: str) -> None:
    sh("devlink", "dev", "eswitch", "set", HANDLE, "mode", mode)


def eswitch_now() -> str | None:
    return sh_json("devlink", "-j", "dev", "eswitch", "show", HANDLE)["dev"][HANDLE].get("mode")


# ------------------------------------------------------------------------------------------------
# scenarios


def scenario_setup() -> dict[str, Any]:
    """Two netdevsim NICs: netdevsim10 (2 ports, 4 VFs, switchdev) and netdevsim11 (1 port).

    Port p1 of each becomes a rail (``net_rail0`` / ``net_rail1``) with a soft-RoCE device renamed
    to ``rdma_rail0`` / ``rdma_rail1``, as the NIC operator's udev rules would name them.
    """
    sh("ip", "link", "set", "dev", "lo", "up")  # the agent daemon serves on 127.0.0.1
    write(f"{NSIM}/new_device", "10 2")
    write(f"{NSIM}/new_device", "11 1")
    wait_for(lambda: len(netdevs_of(DEV)) == 2 and len(netdevs_of(DEV2)) == 1, what="netdevsim ports")
    # max_vfs can only change while no VF exists; the busy scenario needs many.
    write(f"{NSIM_DEBUGFS}/{DEV}/max_vfs", str(BUSY_VFS))
    for dev, rail in ((DEV, 0), (DEV2, 1)):
        name = netdevs_of(dev)["p1"]
        sh("ip", "link", "set", "dev", name, "name", f"net_rail{rail}")
        sh("ip", "link", "set", "dev", f"net_rail{rail}", "up")
    set_numvfs(4)
    set_eswitch("switchdev")
    wait_for(lambda: len(representors_now()) == 4, what="4 representors")
    for rail in (0, 1):
        sh("rdma", "link", "add", f"rxe{rail}", "type", "rxe", "netdev", f"net_rail{rail}")
        sh("rdma", "dev", "set", f"rxe{rail}", "name", f"rdma_rail{rail}")
    wait_for(lambda: all(link.get("state") == "ACTIVE" for link in sh_json("rdma", "-j", "link", "show")),
             what="RDMA links ACTIVE")
    return {
        "netdevs": {DEV: netdevs_of(DEV), DEV2: netdevs_of(DEV2)},
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
    }


def scenario_representors() -> dict[str, Any]:
    """The agent's snapshot and topology against what the kernel's own tools say."""
    from agent.analysis.topology import build_topology
    from agent.config import Expectations, ReadConfig
    from agent.host.live import LiveHost
    from agent.readers.devlink import parse_eswitch, parse_params
    from agent.readers.snapshot import take_snapshot

    raw = {
        "port_show": sh_json("devlink", "-j", "port", "show"),
        "eswitch_show": sh_json("devlink", "-j", "dev", "eswitch", "show", HANDLE),
        "param_show": sh_json("devlink", "-j", "dev", "param", "show"),
        "rdma_link_show": sh_json("rdma", "-j", "link", "show"),
        "ip_link": sh_json("ip", "-d", "-j", "link", "show"),
        "sysfs_representors": {str(k): v for k, v in representors_now().items()},
        "sriov_numvfs": read(f"{SYSDEV}/sriov_numvfs"),
    }
    host = LiveHost()
    try:
        snap = take_snapshot(host, ReadConfig())
        topo = build_topology(snap, Expectations())
        # The devlink reader queries pci/<bdf> handles only (docs/design.md §4); netdevsim's instance is
        # netdevsim/<dev>. The reader's own parsers are run here on the real devlink answers, read
        # through the live host's command door.
        esw = host.run(["devlink", "-j", "dev", "eswitch", "show", HANDLE])
        params = {}
        for name in ("max_macs", "test1"):
            res = host.run(["devlink", "-j", "dev", "param", "show", HANDLE, "name", name])
            params[name] = plain(parse_params(json.loads(res.text))) if res.ok else res.why()
        parsed = {
            "eswitch": plain(parse_eswitch(json.loads(esw.text), HANDLE)) if esw.ok else esw.why(),
            "params": params,
        }
    finally:
        host.close()
    return {
        "raw": raw,
        "snapshot": {
            "ports": plain(snap.ports),
            "eswitch": plain(snap.eswitch),
            "params": plain(snap.params),
            "rdma_links": plain(snap.rdma_links),
            "links": [{"ifname": ln.ifname, "phys_port_name": ln.phys_port_name,
                       "phys_switch_id": ln.phys_switch_id, "parent_bus": ln.parent_bus,
                       "parent_dev": ln.parent_dev, "stats64": plain(ln.stats64),
                       "vfinfo": plain(ln.vfinfo)} for ln in snap.links],
            "unavailable": plain(snap.unavailable),
            "busy": plain(snap.busy),
        },
        "topology": {
            "pfs": [{"bdf": pf.bdf, "handle": pf.handle, "netdev": pf.netdev, "switch_id": pf.switch_id,
                     "numvfs": pf.numvfs, "eswitch_mode": pf.eswitch_mode,
                     "representors": [{"netdev": r.netdev, "kind": r.kind, "pfnum": r.pfnum,
                                       "index": r.index, "stale": r.stale, "devlink_pfnum": r.devlink_pfnum}
                                      for r in pf.representors],
                     "stale": list(pf.stale_representors)} for pf in topo.pfs],
            "rails": [{"rail": r.rail, "netdev": r.netdev_name, "pci": r.pci,
                       "rdma": plain(r.rdma)} for r in topo.rails],
            "representor_names": sorted(topo.representor_names),
        },
        "parsed": parsed,
    }


# -- nlmon: what the link dump asks the kernel ----------------------------------------------------

_NLMSG = struct.Struct("=IHHII")
_RTA = struct.Struct("=HH")
RTM_NEWLINK, RTM_GETLINK = 16, 18
IFLA_STATS, IFLA_VFINFO_LIST, IFLA_STATS64, IFLA_AF_SPEC, IFLA_EXT_MASK = 7, 22, 23, 26, 29
IFLA_IFNAME = 3
IFLA_VF_INFO, IFLA_VF_STATS = 1, 8
IFLA_INET6_STATS, IFLA_INET6_ICMP6STATS = 3, 6


def _attrs(buf: bytes, off: int, end: int) -> list[tuple[int, int, int]]:
    out = []
    while off + 4 <= end:
        alen, atype = _RTA.unpack_from(buf, off)
        if alen < 4 or off + alen > end:
            break
        out.append((atype & 0x3FFF, off + 4, off + alen))
        off += (alen + 3) & ~3
    return out


def _decode_frames(frames: list[bytes]) -> dict[str, Any]:
    """Netlink frames from nlmon -> the RTM_GETLINK requests and a summary of each RTM_NEWLINK."""
    requests, replies = [], []
    for frame in frames:
        off = 0
        while off + _NLMSG.size <= len(frame):
            mlen, mtype, mflags, _seq, _pid = _NLMSG.unpack_from(frame, off)
            if mlen < _NLMSG.size or off + mlen > len(frame):
                break
            body, end = off + _NLMSG.size + 16, off + mlen  # after struct ifinfomsg
            if mtype == RTM_GETLINK:
                mask = None
                for t, s, _e in _attrs(frame, body, end):
                    if t == IFLA_EXT_MASK:
                        mask = struct.unpack_from("=I", frame, s)[0]
                requests.append({"flags": mflags, "ext_mask": mask})
            elif mtype == RTM_NEWLINK:
                rec: dict[str, Any] = {"ifname": None, "stats64": False, "stats": False, "vfs": 0,
                                       "vf_stats": 0, "inet6_stats": False}
                for t, s, e in _attrs(frame, body, end):
                    if t == IFLA_IFNAME:
                        rec["ifname"] = frame[s:e].split(b"\0")[0].decode()
                    elif t == IFLA_STATS64:
                        rec["stats64"] = True
                    elif t == IFLA_STATS:
                        rec["stats"] = True
                    elif t == IFLA_VFINFO_LIST:
                        for vt, vs, ve in _attrs(frame, s, e):
                            if vt == IFLA_VF_INFO:
                                rec["vfs"] += 1
                                rec["vf_stats"] += any(a == IFLA_VF_STATS for a, _, _ in _attrs(frame, vs, ve))
                    elif t == IFLA_AF_SPEC:
                        for ft, fs, fe in _attrs(frame, s, e):
                            if ft == socket.AF_INET6:
                                rec["inet6_stats"] = any(a in (IFLA_INET6_STATS, IFLA_INET6_ICMP6STATS)
                                                         for a, _, _ in _attrs(frame, fs, fe))
                replies.append(rec)
            off += (mlen + 3) & ~3
    return {"requests": requests, "replies": replies, "bytes": sum(len(f) for f in frames)}


def _tap(action: Callable[[], Any]) -> dict[str, Any]:
    """Run ``action`` with a packet socket on nlmon0 open; decode the netlink traffic it caused."""
    eth_p_all = 0x0003
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(eth_p_all))
    try:
        sock.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE: root may exceed rmem_max
        sock.bind(("nlmon0", 0))
        sock.settimeout(0.3)
        action()
        frames = []
        while True:
            try:
                frames.append(sock.recv(1 << 20))
            except TimeoutError:
                break
    finally:
        sock.close()
    return _decode_frames(frames)


def scenario_nostats() -> dict[str, Any]:
    """The agent's bulk link dump, seen on the wire by the kernel's netlink tap, with reps present."""
    from agent.host.live import LiveHost

    sh("ip", "link", "add", "nlmon0", "type", "nlmon")
    sh("ip", "link", "set", "nlmon0", "up")
    host = LiveHost()
    got: dict[str, Any] = {}
    try:
        host.links()  # opens the agent's netlink socket outside the window
        got["agent_links"] = _tap(lambda: got.setdefault("records", host.links()))
    finally:
        host.close()
    records = got.pop("records") or []
    got["agent_records"] = [{"ifname": r["ifname"], "stats64": r.get("stats64"),
                             "vfinfo": len(r["vfinfo"]) if r.get("vfinfo") else 0} for r in records]
    got["ip_link"] = _tap(lambda: sh("ip", "link", "show"))
    got["ip_d_link"] = _tap(lambda: sh("ip", "-d", "link", "show"))
    got["ip_s_link"] = _tap(lambda: sh("ip", "-s", "-d", "link", "show"))
    got["representors"] = sorted(representors_now().values())
    sh("ip", "link", "del", "nlmon0")
    return got


#: The same expectations live and offline; they make the doctor judge something on this node.
DOCTOR_FLAGS = ("--expect-rdma-netns", "exclusive", "--expect-eswitch-mode", "switchdev")


def scenario_doctor_record(out: Path) -> dict[str, Any]:
    """``railscope doctor --json`` live in the guest and ``railscope record`` of the same node.

    Rail 1 is taken down first, so the diagnosis has findings to compare (RailLinkDown, RdmaLinkDown),
    besides the RDMA netns expectation the guest (shared mode) does not meet.
    """
    sh("ip", "link", "set", "dev", "net_rail1", "down")
    wait_for(lambda: any(link.get("state") != "ACTIVE" for link in sh_json("rdma", "-j", "link", "show")),
             what="rdma_rail1 to leave ACTIVE")
    took: dict[str, float] = {}
    try:
        t = time.monotonic()
        live = sh(sys.executable, "-m", "agent.cli", "doctor", "--json", *DOCTOR_FLAGS, check=False)
        took["doctor_s"] = round(time.monotonic() - t, 2)
        (out / "doctor-live.json").write_text(live.stdout)
        (out / "doctor-live.stderr").write_text(live.stderr)
        # Recorded on the guest's tmpfs, then packed into one file for /out: the image is a few
        # hundred small files, and each file operation on the 9p share costs ~0.1 s under emulation.
        image = Path("/tmp/klab-image/image-guest")
        t = time.monotonic()
        rec = sh(sys.executable, "-m", "agent.cli", "record", "-o", str(image), check=False)
        took["record_s"] = round(time.monotonic() - t, 2)
        (out / "record.stderr").write_text(rec.stderr)
        bundle = out / "image-guest.tar.gz"
        with tarfile.open(bundle, "w:gz") as tar:
            tar.add(image, arcname=image.name)
        # The whole bundle, as an operator takes it: one tar.gz and its .sha256, copied to /out.
        t = time.monotonic()
        cap = sh(sys.executable, "-m", "agent.cli", "capture", "-o", "/tmp/klab-image/capture-guest.tar.gz",
                 "--node", "klab-node", "--recorder-gap", "2", check=False)
        took["capture_s"] = round(time.monotonic() - t, 2)
        (out / "capture.stderr").write_text(cap.stderr)
        for suffix in ("", ".sha256"):
            src = Path("/tmp/klab-image/capture-guest.tar.gz" + suffix)
            if src.exists():
                (out / src.name).write_bytes(src.read_bytes())
        t = time.monotonic()
        again = sh(sys.executable, "-m", "agent.cli", "doctor", "--json", *DOCTOR_FLAGS, check=False)
        took["doctor_after_s"] = round(time.monotonic() - t, 2)
        t = time.monotonic()
        sh(sys.executable, "-c", "import agent.cli, agent.readers.snapshot, agent.analysis.diagnose")
        took["python_imports_s"] = round(time.monotonic() - t, 2)
        (out / "doctor-live-after.json").write_text(again.stdout)
    finally:
        sh("ip", "link", "set", "dev", "net_rail1", "up")
    return {"doctor_rc": live.returncode, "record_rc": rec.returncode, "doctor_after_rc": again.returncode,
            "image": bundle.name, "flags": list(DOCTOR_FLAGS), "took": took,
            "capture_rc": cap.returncode, "capture": "capture-guest.tar.gz"}


def _metric_lines(text: str, name: str) -> dict[str, float]:
    """``name{labels} value`` lines of an exposition -> labels text -> value."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            head, _, value = line.rpartition(" ")
            out[head[len(name):]] = float(value)
    return out


def _agent_objects() -> dict[str, int]:
    """Live objects of the agent's own classes (records, topology, state), by class."""
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        cls = type(obj)
        module = getattr(cls, "__module__", None)
        # some extension types expose __module__ as a descriptor, not a string
        if isinstance(module, str) and module.startswith("agent."):
            name = f"{cls.__module__}.{cls.__qualname__}"
            counts[name] = counts.get(name, 0) + 1
    return counts


def _rss_kb() -> int | None:
    for line in (read("/proc/self/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def scenario_churn(out: Path) -> dict[str, Any]:
    """Create and remove the VFs repeatedly; scrape the agent's collector after each change.

    One live host, one registry and one collector for the whole run, as in the agent daemon; only
    the state it serves is swapped. Memory is traced from the second cycle on, leaving out what this
    file allocates for its own records, so growth is the agent's (and its libraries') own.
    """
    import tracemalloc

    from prometheus_client import CollectorRegistry, generate_latest

    from agent.analysis.topology import build_topology
    from agent.config import Expectations, ReadConfig
    from agent.host.live import LiveHost
    from agent.metrics.exporter import NodeMetrics
    from agent.metrics.state import MetricsState
    from agent.readers.snapshot import take_snapshot

    host = LiveHost()
    current: list[MetricsState] = [MetricsState()]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeMetrics(lambda: current[0], representor_include=r"."))
    cfg, exp = ReadConfig(), Expectations()
    # Records go to a file as they are made: nothing of this file's stays alive in the process.
    log_path = out / "churn.jsonl"
    log = log_path.open("w")
    # this file's own records and tracemalloc's snapshots are not the agent's memory
    mine = [tracemalloc.Filter(False, __file__), tracemalloc.Filter(False, tracemalloc.__file__)]
    first: Any = None
    try:
        for cycle in range(CHURN_CYCLES):
            if cycle == CHURN_TRACE_FROM:
                gc.collect()
                tracemalloc.start()
                first = tracemalloc.take_snapshot().filter_traces(mine)
            for want in (0, 4):
                set_numvfs(want)
                if want:
                    set_eswitch("switchdev")
                wait_for(lambda want=want: len(representors_now()) == want, what=f"{want} representors")
                snap = take_snapshot(host, cfg)
                current[0] = MetricsState(snapshot=snap, topology=build_topology(snap, exp))
                text = generate_latest(registry).decode()
                del snap
                log.write(json.dumps({
                    "step": True, "cycle": cycle, "numvfs": want,
                    "kernel_representors": sorted(representors_now().values()),
                    "representors": _metric_lines(text, "railscope_representors"),
                    "representors_stale": _metric_lines(text, "railscope_representors_stale"),
                    "representor_up": _metric_lines(text, "railscope_representor_up"),
                    "representor_stale": _metric_lines(text, "railscope_representor_stale"),
                    "series": sum(1 for ln in text.splitlines() if ln and not ln.startswith("#")),
                }) + "\n")
                del text
            if tracemalloc.is_tracing():
                gc.collect()
                # counted before tracemalloc's own snapshot exists, which would add to the count
                gc_objects, agent_objects = len(gc.get_objects()), _agent_objects()
                traced = tracemalloc.take_snapshot().filter_traces(mine)
                by_file = {str(st.traceback).rsplit(":", 1)[0]: st.size for st in traced.statistics("filename")}
                log.write(json.dumps({
                    "step": False, "cycle": cycle,
                    "traced_bytes": sum(by_file.values()),
                    "traced_by_file": by_file,
                    "gc_objects": gc_objects,
                    "agent_objects": agent_objects,
                    "rss_kb": _rss_kb(),
                    "growth_by_line": [[str(st.traceback), st.size_diff]
                                       for st in traced.compare_to(first, "lineno")[:10] if st.size_diff],
                }) + "\n")
                del traced
    finally:
        tracemalloc.stop()
        host.close()
        log.close()
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    return {"steps": [r for r in records if r.pop("step")], "memory": [r for r in records if "traced_bytes" in r]}


def scenario_config_flapping() -> dict[str, Any]:
    """Flip eswitch mode and sriov_numvfs from outside; feed the agent's detectors what it reads."""
    from agent.detectors import ConfigObs, initial, step
    from agent.host.live import LiveHost
    from agent.readers.devlink import parse_eswitch

    host = LiveHost()

    def observe(state: Any, log: list[dict[str, Any]]) -> Any:
        # What the agent reads for this PF: numvfs from sysfs, the eswitch mode from devlink -j.
        now = time.time()
        numvfs_text = host.read_text(f"{SYSDEV}/sriov_numvfs")
        res = host.run(["devlink", "-j", "dev", "eswitch", "show", HANDLE])
        mode = parse_eswitch(json.loads(res.text), HANDLE).mode if res.ok else None
        obs = [ConfigObs(HANDLE, "sriov_numvfs", int(numvfs_text) if numvfs_text else None),
               ConfigObs(HANDLE, "eswitch_mode", mode)]
        events = []
        for o in obs:
            state, evs = step(state, o, now)
            events.extend(plain(e.as_json()) for e in evs)
        log.append({"t": now, "numvfs": obs[0].value, "eswitch_mode": mode, "events": events})
        return state

    phases: dict[str, list[dict[str, Any]]] = {}
    try:
        # A: one change that stays (4 VFs switchdev -> no VFs; netdevsim returns to legacy with it).
        log: list[dict[str, Any]] = []
        st = observe(initial(), log)
        set_numvfs(0)
        for _ in range(3):
            st = observe(st, log)
            time.sleep(0.2)
        phases["single_change"] = log
        # B: the SR-IOV operator re-applying its policy: 4 -> 0 -> 4 (the kernel requires the 0).
        set_numvfs(4)
        set_eswitch("switchdev")
        log = []
        st = observe(initial(), log)
        for want in (0, 4):
            set_numvfs(want)
            if want:
                set_eswitch("switchdev")
            st = observe(st, log)
            time.sleep(0.2)
        phases["numvfs_reapply"] = log
        # B': two operators fighting over the count: 4 -> 2 -> 4, each change through 0.
        log = []
        st = observe(initial(), log)
        for want in (0, 2, 0, 4):
            write(f"{SYSDEV}/sriov_numvfs", str(want))
            if want:
                set_eswitch("switchdev")
            st = observe(st, log)
            time.sleep(0.2)
        phases["numvfs_flap"] = log
        # C: eswitch mode alone back and forth, the VFs staying: switchdev -> legacy -> switchdev.
        log = []
        st = observe(initial(), log)
        for mode in ("legacy", "switchdev"):
            set_eswitch(mode)
            st = observe(st, log)
            time.sleep(0.2)
        phases["eswitch_flap"] = log
    finally:
        host.close()
    return {"phases": phases, "handle": HANDLE}


DAEMON_PORT = 9841
DAEMON_TOKEN = "klab-daemon-token-0123456789"
DAEMON_CYCLES = 3
#: How long the daemon may take to show a representor change in /metrics (link events trigger a
#: read; under emulation one read takes seconds).
DAEMON_CONVERGE_S = 60.0


def _http(path: str, timeout: float = 30.0) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    try:
        # The data endpoints answer over TCP only with the daemon's bearer token (--data-token-file).
        req = urllib.request.Request(f"http://127.0.0.1:{DAEMON_PORT}{path}",
                                     headers={"Authorization": f"Bearer {DAEMON_TOKEN}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, b""


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM the agent daemon, SIGKILL it past 30 s; its exit status."""
    proc.terminate()
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def _rss_of(pid: int) -> int | None:
    for line in (read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return None


def scenario_daemon(out: Path) -> dict[str, Any]:
    """The node agent daemon (``railscope agent``) through representor churn, then its node image.

    VFs are created and removed while the daemon runs; after each change /metrics is polled until
    its representor series match the kernel. Then the daemon records a node image (/v1/image) and
    ``railscope doctor`` runs live at the same moment, for the host to compare.
    """
    log = (out / "agent-daemon.log").open("w")
    token_file = out / "daemon-token"
    token_file.write_text(DAEMON_TOKEN + "\n")
    token_file.chmod(0o600)
    argv = [sys.executable, "-m", "agent.cli", "agent", "--listen", "127.0.0.1", "--port", str(DAEMON_PORT),
            "--representor-include", ".", "--node", "klab-node", "--cluster", "klab",
            "--data-token-file", str(token_file)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    steps: list[dict[str, Any]] = []
    rss: list[dict[str, Any]] = []
    result: dict[str, Any] = {"argv": argv[3:], "steps": steps, "rss_kb": rss, "flags": list(DOCTOR_FLAGS)}
    try:
        t0 = time.monotonic()
        wait_for(lambda: proc.poll() is not None or _http("/readyz", 5)[0] == 200, timeout=180,
                 what="the agent to be ready")
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited with {proc.returncode} (see agent-daemon.log)")
        result["ready_s"] = round(time.monotonic() - t0, 2)
        for cycle in range(DAEMON_CYCLES):
            for want in (0, 4):
                set_numvfs(want)
                if want:
                    set_eswitch("switchdev")
                wait_for(lambda want=want: len(representors_now()) == want, what=f"{want} representors")
                kernel = sorted(representors_now().values())
                t = time.monotonic()
                seen: dict[str, Any] = {}

                def converged(want: int = want, kernel: list[str] = kernel, seen: dict[str, Any] = seen) -> bool:
                    status, body = _http("/metrics")
                    if status != 200:
                        return False
                    text = body.decode()
                    count = _metric_lines(text, "railscope_representors").get(
                        '{device="net_rail0",pci="netdevsim10"}')
                    up = sorted(re.search(r'device="([^"]+)"', k).group(1)
                                for k in _metric_lines(text, "railscope_representor_up"))
                    seen.update(count=count, up=up)
                    return count == want and up == kernel

                try:
                    wait_for(converged, timeout=DAEMON_CONVERGE_S, what="/metrics to follow")
                    ok = True
                except TimeoutError:
                    ok = False
                steps.append({"cycle": cycle, "numvfs": want, "kernel_representors": kernel, "converged": ok,
                              "seconds": round(time.monotonic() - t, 2), **seen})
            status, body = _http("/metrics")
            threads = _metric_lines(body.decode(), "railscope_agent_threads").get("") if status == 200 else None
            rss.append({"cycle": cycle, "rss_kb": _rss_of(proc.pid), "threads": threads})
        result["devlink_event"] = _devlink_event_read()
        status, body = _http("/v1/image?reason=klab", timeout=300)
        result["image_status"] = status
        if status == 200:
            (out / "agent-image.tar.gz").write_bytes(body)
        live = sh(sys.executable, "-m", "agent.cli", "doctor", "--json", *DOCTOR_FLAGS, check=False)
        (out / "doctor-live-daemon.json").write_text(live.stdout)
        status, body = _http("/v1/events")
        result["events"] = json.loads(body) if status == 200 else None
    finally:
        result["exit_rc"] = _stop(proc)
        log.close()
    return result


def _devlink_runs() -> float | None:
    status, body = _http("/metrics")
    if status != 200:
        return None
    return _metric_lines(body.decode(), "railscope_agent_source_runs_total").get('{source="devlink"}')


def _devlink_event_read() -> dict[str, Any]:
    """A devlink param change (no link event) and how long until the daemon read devlink again.

    The daemon's devlink reads are first left to settle (no count change for 5 s), so a read seen
    after the change is the one its devlink notification asked for, not a representor poke's.
    """
    stable_since, last = time.monotonic(), _devlink_runs()
    deadline = stable_since + 90.0
    while time.monotonic() - stable_since < 5.0 and time.monotonic() < deadline:
        time.sleep(0.25)
        now = _devlink_runs()
        if now != last:
            stable_since, last = time.monotonic(), now
    before = last
    t = time.monotonic()
    sh("devlink", "dev", "param", "set", HANDLE, "name", "test1", "value", "false", "cmode", "driverinit")
    after = before
    while time.monotonic() - t < 75.0:
        after = _devlink_runs()
        if after is not None and before is not None and after > before:
            break
        time.sleep(0.1)
    return {"runs_before": before, "runs_after": after, "seconds": round(time.monotonic() - t, 2)}


#: Classes whose instances make up the agent's picture of the node: their live count must not grow
#: with churn (a vanished representor's records kept anywhere, e.g. in the links cache, would).
STRUCTURAL = ("agent.model.Link", "agent.model.VfInfo", "agent.model.DevlinkPort", "agent.model.Snapshot",
              "agent.analysis.topology.Representor", "agent.analysis.topology.Pf", "agent.analysis.topology.Rail", "agent.analysis.topology.Topology")
DAEMON_MEMORY_CYCLES = 5


def scenario_daemon_memory(out: Path) -> dict[str, Any]:
    """The agent daemon's runtime (``agent.service.daemon.Agent``) in this process, through churn.

    The same object ``railscope agent`` runs, started here so that its live objects can be counted
    exactly: after each create/remove cycle, once /metrics shows the kernel's representors, the
    agent's record objects and its threads are counted (the least of eight counts a few tenths of a
    second apart, so a sample being read at that moment is not taken for a leak). The periodic links
    read is 5 s here (default 15 s) to keep the run short; the flight recorder is off, since it
    grows by design until its window is full.
    """
    import asyncio

    from agent.config import AgentSettings
    from agent.service.daemon import Agent

    log_path = out / "daemon-memory.jsonl"

    async def run() -> dict[str, Any]:
        agent = Agent(AgentSettings(intervals=(("links", 5.0),), recorder_window_s=0, representor_include=".",
                                    node="klab-node"))
        await agent.start()
        log = log_path.open("w")
        try:
            t0 = time.monotonic()
            while not agent.ready:
                if time.monotonic() - t0 > 180:
                    raise TimeoutError("the agent did not take its first sample")
                await asyncio.sleep(0.2)
            for cycle in range(DAEMON_MEMORY_CYCLES):
                for want in (0, 4):
                    await asyncio.to_thread(_churn_to, want)
                    kernel = sorted(representors_now().values())
                    t = time.monotonic()
                    while True:
                        text = (await agent.render_metrics()).decode()
                        up = sorted(re.search(r'device="([^"]+)"', k).group(1)
                                    for k in _metric_lines(text, "railscope_representor_up"))
                        if up == kernel or time.monotonic() - t > DAEMON_CONVERGE_S:
                            break
                        await asyncio.sleep(0.2)
                    log.write(json.dumps({"step": True, "cycle": cycle, "numvfs": want, "kernel": kernel,
                                          "up": up, "seconds": round(time.monotonic() - t, 2)}) + "\n")
                del text
                counts: list[dict[str, int]] = []
                for _ in range(8):
                    gc.collect()
                    objs = _agent_objects()
                    counts.append({k: objs.get(k, 0) for k in STRUCTURAL})
                    await asyncio.sleep(0.3)
                log.write(json.dumps({
                    "step": False, "cycle": cycle,
                    "structural": {k: min(c[k] for c in counts) for k in STRUCTURAL},
                    "threads": threading.active_count(),
                    "rss_kb": _rss_kb(),
                }) + "\n")
                log.flush()
        finally:
            await agent.stop()
            log.close()
        return {}

    asyncio.run(run())
    records = [json.loads(line) for line in log_path.read_text().splitlines()]
    return {"steps": [r for r in records if r.pop("step")], "memory": [r for r in records if "threads" in r]}


def _churn_to(want: int) -> None:
    set_numvfs(want)
    if want:
        set_eswitch("switchdev")
    wait_for(lambda: len(representors_now()) == want, what=f"{want} representors")


def scenario_busy() -> dict[str, Any]:
    """A snapshot while netdevsim creates many VFs under the devlink lock: devlink is busy, not down."""
    from agent.analysis.diagnose import diagnose
    from agent.config import Expectations, ReadConfig
    from agent.host.live import LiveHost
    from agent.readers.kernel_table import load_kernel_table
    from agent.readers.snapshot import take_snapshot

    set_numvfs(0)
    set_eswitch("switchdev")  # netdevsim creates a representor per VF, all under the devlink lock
    timeout_s = 0.3
    exp = Expectations()
    table = load_kernel_table()
    done: dict[str, float] = {}

    def create() -> None:
        t = time.monotonic()
        write(f"{SYSDEV}/sriov_numvfs", str(BUSY_VFS))
        done["write_s"] = time.monotonic() - t
        done["end"] = time.monotonic()

    writer = threading.Thread(target=create)
    host = LiveHost()
    try:
        writer.start()
        # sriov_numvfs reads the new count as soon as netdevsim took the lock and began.
        wait_for(lambda: read(f"{SYSDEV}/sriov_numvfs") == str(BUSY_VFS), what="numvfs write started")
        t0 = time.monotonic()
        during = take_snapshot(host, ReadConfig(command_timeout_s=timeout_s))
        t1 = time.monotonic()
        writer.join(300)
        t2 = time.monotonic()
        after = take_snapshot(host, ReadConfig())
        t3 = time.monotonic()
    finally:
        host.close()
    return {
        "vfs": BUSY_VFS, "timeout_s": timeout_s,
        "snapshot_started_before_write_end": t0 < done.get("end", 0.0),
        "write_s": done.get("write_s"), "snapshot_s": t1 - t0, "after_snapshot_s": t3 - t2,
        "during": {"busy": plain(during.busy), "unavailable": plain(during.unavailable),
                   "ports": len(during.ports), "links": len(during.links),
                   "findings": [[f.code, f.severity, f.subject] for f in diagnose(during, exp, kernel_table=table).findings]},
        "after": {"busy": plain(after.busy), "unavailable": plain(after.unavailable),
                  "ports": len(after.ports), "links": len(after.links),
                  "findings": [[f.code, f.severity, f.subject] for f in diagnose(after, exp, kernel_table=table).findings]},
        "representors_after": len(representors_now()),
    }


# ------------------------------------------------------------------------------------------------


def _break_health(path: str) -> None:
    """One ``devlink_health_report`` on netdevsim's dummy reporter. With ``fail_recover`` on, the
    write returns the failed auto-recovery's error (EINVAL): the reporter is then in error, as wanted.
    One unbuffered write: a second report while in error would be refused (ECANCELED)."""
    import errno

    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, b"klab")
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ECANCELED):
            raise
    finally:
        os.close(fd)


def scenario_health(out: Path) -> dict[str, Any]:
    """netdevsim's ``dummy`` devlink health reporter broken and recovered through its debugfs.

    ``fail_recover`` keeps the reporter in ``error`` after ``break_health`` (its auto-recovery fails),
    then ``devlink health recover`` (the lab's, not the agent's: the agent never changes NIC state)
    makes it healthy again with the error counted. At each step the live doctor pipeline judges the
    node; meanwhile the daemon's runtime (in this process, the health source every second) must
    raise the NicHealthError event for the rising error count.
    """
    import asyncio

    from agent.analysis import pipeline
    from agent.config import AgentSettings, Expectations, ReadConfig
    from agent.host.live import LiveHost
    from agent.readers.snapshot import take_snapshot
    from agent.service.daemon import Agent

    dbg = f"{NSIM_DEBUGFS}/{DEV}/health"

    def judge() -> dict[str, Any]:
        host = LiveHost()
        try:
            snap = take_snapshot(host, ReadConfig())
        finally:
            host.close()
        diag = pipeline.run(snap, Expectations(), ()).diagnosis
        return {"reporters": plain(snap.health), "findings": [plain(f.as_json()) for f in diag.findings
                                                             if f.code == "NicHealthError"],
                "health_show": sh_json("devlink", "-j", "health", "show")}

    async def run() -> dict[str, Any]:
        agent = Agent(AgentSettings(intervals=(("links", 5.0), ("health", 1.0)), recorder_window_s=0,
                                    node="klab-node"))
        await agent.start()
        steps: dict[str, Any] = {}
        try:
            t0 = time.monotonic()
            while not agent.ready:
                if time.monotonic() - t0 > 180:
                    raise TimeoutError("the agent did not take its first sample")
                await asyncio.sleep(0.2)
            await asyncio.sleep(3.0)  # two health reads at least: the baseline count
            steps["healthy"] = await asyncio.to_thread(judge)
            write(f"{dbg}/fail_recover", "1")
            _break_health(f"{dbg}/break_health")
            steps["broken"] = await asyncio.to_thread(judge)
            t = time.monotonic()
            while not [e for e in agent.events.recent() if e.code == "NicHealthError"]:
                if time.monotonic() - t > 60:
                    break
                await asyncio.sleep(0.2)
            steps["event_after_s"] = round(time.monotonic() - t, 2)
            write(f"{dbg}/fail_recover", "0")
            sh("devlink", "health", "recover", HANDLE, "reporter", "dummy")
            steps["recovered"] = await asyncio.to_thread(judge)
            await asyncio.sleep(2.0)
            text = (await agent.render_metrics()).decode()
            steps["metrics"] = {k: v for k, v in _metric_lines(text, "railscope_devlink_health_reporter_errors_total").items()}
            steps["events"] = [plain(e.as_json()) for e in agent.events.recent() if e.code == "NicHealthError"]
        finally:
            await agent.stop()
        return steps

    return asyncio.run(run())


def scenario_firmware() -> dict[str, Any]:
    """The firmware source on the real kernel: netdevsim's ``devlink dev info`` (``fw.mgmt`` running and
    stored, both ``10.20.30``: nsim_dev_info_get fixes them), read live for the rail PFs only, judged by
    the doctor pipeline (no FirmwarePendingActivation), served by the metrics collector; then the
    same snapshot with a stored version the lab cannot flash (netdevsim's ``devlink dev flash`` only
    emits status notifications and never changes what ``dev info`` says) judged as pending."""
    from dataclasses import replace

    from agent.analysis import pipeline
    from agent.config import Expectations, ReadConfig
    from agent.host.live import LiveHost
    from agent.metrics.exposition import render
    from agent.metrics.state import MetricsState
    from agent.readers.snapshot import take_snapshot

    shown = sh_json("devlink", "-j", "dev", "info", HANDLE)
    host = LiveHost()
    try:
        snap = take_snapshot(host, ReadConfig())
    finally:
        host.close()
    out = pipeline.run(snap, Expectations(), ())
    metrics = render(MetricsState(snapshot=snap, topology=out.topology, diagnosis=out.diagnosis)).decode()
    flashed = replace(snap, firmware=tuple(
        replace(fi, stored=tuple((k, "10.20.31") for k, _v in fi.stored)) if fi.handle == HANDLE else fi
        for fi in snap.firmware))
    pending = pipeline.run(flashed, Expectations(), ()).diagnosis
    flash = subprocess.run(["devlink", "dev", "flash", HANDLE, "file", "dummy"], capture_output=True, text=True,
                           timeout=60, check=False)
    return {"dev_info": shown, "firmware": plain(snap.firmware),
            "rails": [plain(r.as_json()) for r in out.diagnosis.rails],
            "findings": [plain(f.as_json()) for f in out.diagnosis.findings
                         if f.code == "FirmwarePendingActivation"],
            "unavailable": [list(u) for u in snap.unavailable if u[0] == "firmware"],
            "metrics": {k: v for k, v in _metric_lines(metrics, "railscope_firmware_pending_activation").items()},
            "pf_firmware_info": [ln for ln in metrics.splitlines() if ln.startswith("railscope_pf_firmware_info")],
            "pending_findings": [plain(f.as_json()) for f in pending.findings if f.code == "FirmwarePendingActivation"],
            "flash_rc": flash.returncode,
            "dev_info_after_flash": sh_json("devlink", "-j", "dev", "info", HANDLE)}


# ------------------------------------------------------------------------------------------------
# pcie: a real PCIe link and real AER handling (QEMU e1000e behind a pcie-root-port; run-tier.sh)

PCIE_RAIL = "net_rail2"
#: PCI_ERR_COR_RCVR (receiver error) and PCI_ERR_UNC_COMP_TIME (completion timeout, non-fatal by the
#: default severity) of include/uapi/linux/pci_regs.h
AER_COR_RCVR = 0x00000001
AER_UNC_COMP_TIME = 0x00004000


def _pcie_cap(bdf: str) -> dict[str, Any] | None:
    """The link capability and status straight from config space (the PCI Express capability, id
    0x10: LNKCAP at +0x0c, LNKSTA at +0x12): what the kernel's sysfs files are computed from, read
    without them, so the reader is compared with the device and not with itself."""
    try:
        cfg = Path(f"/sys/bus/pci/devices/{bdf}/config").read_bytes()
    except OSError:
        return None
    ptr, seen = cfg[0x34] & 0xFC, 0
    while ptr and seen < 48 and ptr + 0x14 <= len(cfg):
        if cfg[ptr] == 0x10:
            lnkcap = struct.unpack_from("<I", cfg, ptr + 0x0C)[0]
            lnksta = struct.unpack_from("<H", cfg, ptr + 0x12)[0]
            speeds = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
            return {"max_speed_gts": speeds.get(lnkcap & 0xF), "max_width": (lnkcap >> 4) & 0x3F,
                    "speed_gts": speeds.get(lnksta & 0xF), "width": (lnksta >> 4) & 0x3F}
        ptr, seen = cfg[ptr + 1] & 0xFC, seen + 1
    return None


def _aer_inject(bdf: str, uncor: int = 0, cor: int = 0) -> None:
    """One error through the kernel's AER injector (drivers/pci/pcie/aer_inject.c, ``struct
    aer_error_inj``: bus, dev, fn, uncor_status, cor_status, header_log0..3, domain): the AER driver
    then handles it as if the root port had reported it, and counts it in the device's aer_dev_*."""
    dom, bus, rest = bdf.split(":")
    dev, fn = rest.split(".")
    blob = struct.pack("<BBBxIIIIIII", int(bus, 16), int(dev, 16), int(fn, 16), uncor, cor, 0, 0, 0, 0,
                       int(dom, 16))
    fd = os.open("/dev/aer_inject", os.O_WRONLY)
    try:
        os.write(fd, blob)
    finally:
        os.close(fd)


def _aer_total(bdf: str, kind: str, total: str) -> int | None:
    for line in (read(f"/sys/bus/pci/devices/{bdf}/aer_dev_{kind}") or "").splitlines():
        name, _, n = line.partition(" ")
        if name == total:
            return int(n)
    return None


def scenario_pcie(out: Path) -> dict[str, Any]:
    """The pcie source on a real kernel. QEMU's e1000e (a PCIe endpoint with AER) behind a PCIe root
    port becomes rail ``net_rail2``. Read: its link and its upstream port's from sysfs, beside the
    config space's own LNKCAP / LNKSTA; one snapshot and the doctor pipeline (no finding: an endpoint
    at its own maximum under a faster port). The reader on the root port: the lab's one link trained
    below its maximum. Then the agent daemon (pcie every 5 s) while the kernel's AER driver handles
    injected errors: a correctable one (info once, warning while it rises: /v1/events), then a
    non-fatal one (warning from one snapshot), the series in /metrics, a node image from the daemon
    and ``railscope doctor`` live at the same moment, for the host to compare."""
    from agent.analysis import pipeline
    from agent.analysis.checks.degradation import _pcie_findings
    from agent.config import Expectations, ReadConfig
    from agent.host.live import LiveHost
    from agent.readers.pcie import read_pcie
    from agent.readers.snapshot import take_snapshot

    nics = [n for n in os.listdir("/sys/class/net")
            if os.path.basename(os.path.realpath(f"/sys/class/net/{n}/device/driver")) == "e1000e"]
    if len(nics) != 1:
        raise RuntimeError(f"expected one e1000e netdev (run-tier.sh's QEMU adds it), found {nics}")
    orig = nics[0]
    resolved = os.path.realpath(f"/sys/class/net/{orig}/device")
    bdf = os.path.basename(resolved)
    port = os.path.basename(os.path.dirname(resolved))
    result: dict[str, Any] = {"netdev": orig, "bdf": bdf, "resolved": resolved, "root_port": port,
                              "config": {bdf: _pcie_cap(bdf), port: _pcie_cap(port)},
                              "sysfs": {b: {f: read(f"/sys/bus/pci/devices/{b}/{f}") for f in (
                                  "current_link_speed", "current_link_width", "max_link_speed",
                                  "max_link_width")} for b in (bdf, port)}}
    sh("ip", "link", "set", "dev", orig, "name", PCIE_RAIL)
    sh("ip", "link", "set", "dev", PCIE_RAIL, "up")
    try:
        host = LiveHost()
        try:
            result["read"] = plain(read_pcie(host, [bdf]))
            root = read_pcie(host, [port])
            snap = take_snapshot(host, ReadConfig())
        finally:
            host.close()
        result["root_port_read"] = plain(root)
        result["root_port_judged"] = [plain(f.as_json()) for f in _pcie_findings(root[0], f"pci/{port}", None)]
        diag = pipeline.run(snap, Expectations(), ()).diagnosis
        result["snapshot_pcie"] = plain(snap.pcie)
        result["rails"] = [plain(r.as_json()) for r in diag.rails]
        result["findings_before"] = [plain(f.as_json()) for f in diag.findings
                                     if f.code in ("PcieLinkDegraded", "PcieErrors")]
        result["unavailable_before"] = [list(u) for u in snap.unavailable if u[0] == "pcie"]
        result.update(_pcie_daemon(out, bdf))
    finally:
        sh("ip", "link", "set", "dev", PCIE_RAIL, "down", check=False)
        sh("ip", "link", "set", "dev", PCIE_RAIL, "name", orig, check=False)
    return result


def _pcie_daemon(out: Path, bdf: str) -> dict[str, Any]:
    log = (out / "agent-pcie.log").open("w")
    token_file = out / "daemon-token"
    token_file.write_text(DAEMON_TOKEN + "\n")
    token_file.chmod(0o600)
    argv = [sys.executable, "-m", "agent.cli", "agent", "--listen", "127.0.0.1", "--port", str(DAEMON_PORT),
            "--node", "klab-node", "--cluster", "klab", "--data-token-file", str(token_file),
            "--pcie-interval", "5s", "--ber-window", "5m"]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    res: dict[str, Any] = {"daemon_argv": argv[3:]}
    series = "railscope_pcie_aer_correctable_errors_total"

    def metric(name: str) -> dict[str, float]:
        status, body = _http("/metrics")
        return _metric_lines(body.decode(), name) if status == 200 else {}

    def events(code: str) -> list[dict[str, Any]]:
        status, body = _http("/v1/events")
        doc = json.loads(body) if status == 200 else {}
        return [e for e in doc.get("events", []) if e.get("code") == code]

    try:
        wait_for(lambda: proc.poll() is not None or _http("/readyz", 5)[0] == 200, timeout=180,
                 what="the agent to be ready")
        if proc.poll() is not None:
            raise RuntimeError(f"the agent exited with {proc.returncode} (see agent-pcie.log)")
        wait_for(lambda: any(bdf in k for k in metric(series)), timeout=60, what=f"{series} of {bdf}")
        res["pcie_series_before"] = [ln for ln in _http("/metrics")[1].decode().splitlines()
                                     if ln.startswith("railscope_pcie_") and bdf in ln]
        # a correctable receiver error, as the root port would have reported it
        _aer_inject(bdf, cor=AER_COR_RCVR)
        wait_for(lambda: _aer_total(bdf, "correctable", "TOTAL_ERR_COR") == 1, timeout=30,
                 what="the AER driver to count the correctable error")
        res["aer_correctable_after_inject"] = read(f"/sys/bus/pci/devices/{bdf}/aer_dev_correctable")
        t = time.monotonic()
        wait_for(lambda: bool(events("PcieErrors")), timeout=60, what="a PcieErrors event")
        res["event_seconds"] = round(time.monotonic() - t, 2)
        res["events_correctable"] = events("PcieErrors")
        res["metrics_after_correctable"] = {k: v for k, v in metric(series).items()}
        # a non-fatal uncorrectable error: the AER driver's recovery runs e1000e's error handlers
        _aer_inject(bdf, uncor=AER_UNC_COMP_TIME)
        wait_for(lambda: _aer_total(bdf, "nonfatal", "TOTAL_ERR_NONFATAL") == 1, timeout=60,
                 what="the AER driver to count the non-fatal error")
        res["aer_nonfatal_after_inject"] = read(f"/sys/bus/pci/devices/{bdf}/aer_dev_nonfatal")
        wait_for(lambda: any(bdf in k and v == 1 for k, v in metric("railscope_pcie_aer_nonfatal_errors_total").items()),
                 timeout=60, what="railscope_pcie_aer_nonfatal_errors to follow")
        res["pcie_series_after"] = [ln for ln in _http("/metrics")[1].decode().splitlines()
                                    if ln.startswith("railscope_pcie_") and bdf in ln]
        res["finding_series"] = [ln for ln in _http("/metrics")[1].decode().splitlines()
                                 if ln.startswith("railscope_finding") and "Pcie" in ln]
        status, body = _http("/v1/image?reason=klab-pcie", timeout=300)
        res["image_status"] = status
        if status == 200:
            (out / "agent-pcie-image.tar.gz").write_bytes(body)
        live = sh(sys.executable, "-m", "agent.cli", "doctor", "--json", check=False)
        (out / "doctor-live-pcie.json").write_text(live.stdout)
        res["dmesg_aer"] = [ln for ln in sh("dmesg").stdout.splitlines() if "AER" in ln or "aer" in ln][-20:]
    finally:
        res["exit_rc"] = _stop(proc)
        log.close()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/out")
    ap.add_argument("--only", action="append", help="run only these scenarios (setup always runs)")
    args = ap.parse_args()
    out = Path(args.out)
    results: dict[str, Any] = {"schema": "railscope.klab/v1", "scenarios": {}}
    scenarios: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("setup", scenario_setup),
        ("representors", scenario_representors),
        ("nostats", scenario_nostats),
        ("doctor_record", lambda: scenario_doctor_record(out)),
        ("churn", lambda: scenario_churn(out)),
        ("config_flapping", scenario_config_flapping),
        ("daemon", lambda: scenario_daemon(out)),
        ("daemon_memory", lambda: scenario_daemon_memory(out)),
        ("busy", scenario_busy),
        ("health", lambda: scenario_health(out)),
        ("firmware", scenario_firmware),
        ("pcie", lambda: scenario_pcie(out)),
    ]
    for name, fn in scenarios:
        if args.only and name != "setup" and name not in args.only:
            continue
        t0 = time.monotonic()
        entry: dict[str, Any] = {"ok": False, "error": None, "data": None}
        try:
            entry["data"] = fn()
            entry["ok"] = True
        except Exception:
            entry["error"] = traceback.format_exc()
        entry["seconds"] = round(time.monotonic() - t0, 3)
        results["scenarios"][name] = entry
        print(f"{name}: {'ok' if entry['ok'] else 'ERROR'} in {entry['seconds']} s", flush=True)
        if entry["error"]:
            print(entry["error"], flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=True, default=str))
        if name == "setup" and not entry["ok"]:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
