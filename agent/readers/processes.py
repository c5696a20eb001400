"""The daemons a rail depends on: their processes' start time, CPU, RSS and threads.

A rail works only while the processes around it do: ``ovs-vswitchd`` and ``ovsdb-server`` (switchdev
offload; vswitchd spins at 100 % of a core when hardware offload fails and every packet takes the
slow path), the DOCA driver container's entrypoint (it holds the DOCA mlx5 driver loaded), the SR-IOV network config daemon (a daemon restarting in a loop re-creates VFs each
time), the SR-IOV and RDMA device plugins (the node's rail resources), and the NVIDIA driver
container's script that loads ``nvidia-peermem``.

Which processes are read: on a live node, every process is named by its ``/proc/<pid>/comm`` under
the host root (read here, not through the host door) and only the daemons of ``DAEMONS`` are read
further. A name is anyone's (any user can run a copy of any binary named ``ovs-vswitchd``), so a
process of a daemon's name is the daemon only when its executable (``/proc/<pid>/exe``, as the process
sees it: inside a container's image for a container) is where that daemon is installed (``EXES``; a
script's is its shell, and a daemon confirmed by a marker in its own root needs none) and its cgroup
(``/proc/<pid>/cgroup``) is a system service's or a container's, not a user session's
(``user.slice``, ``session-N.scope``, ``user@UID.service``). The live pass checks both before anything
goes through the host door; then ``exe``, ``cgroup``, ``stat`` and ``status`` of each daemon go
through the host's file door, so a recording holds exactly those files — never a tenant's process
names — and a node image replays the same confirmation by listing its own ``/proc`` (``doctor
--from`` reads what the live read read). ``/proc/<pid>/environ`` is never read and
the command line is not read here at all (the capture plug-in records it redacted).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable

from agent.config import ReadConfig
from agent.host import Host
from agent.model import DaemonProcess
from agent.readers.common import Notes
from agent.readers.source import Context, Part, Source, part

__all__ = ["DAEMONS", "EXES", "MARKERS", "SOURCE", "USER_HZ", "daemon_of", "exe_installed", "parse_stat",
           "parse_status", "read_processes", "system_cgroup"]

#: daemon word -> the kernel names (``comm``: 15 characters at most, longer names are cut) of its processes.
DAEMONS: dict[str, tuple[str, ...]] = {
    "ovs-vswitchd": ("ovs-vswitchd",),
    "ovsdb-server": ("ovsdb-server",),
    # sriov-network-operator's config daemon: "sriov-network-config-daemon", cut by the kernel
    "sriov-config-daemon": ("sriov-network-c",),
    # sriov-network-device-plugin's binary, and k8s-rdma-shared-dev-plugin's "k8s-rdma-shared-dp" cut
    "sriov-device-plugin": ("sriovdp",),
    "rdma-device-plugin": ("k8s-rdma-shared", "rdma-shared-dp"),
    # the GPU driver container's script ("nvidia-driver"), which also reloads nvidia-peermem
    # ("nvidia-driver reload_nvidia_peermem" in the nvidia-peermem-ctr container)
    "nvidia-driver": ("nvidia-driver",),
    # the DOCA (MLNX_OFED) driver container's entrypoint, which loads the DOCA mlx5 driver and, with
    # RESTORE_DRIVER_ON_POD_TERMINATION, puts the inbox one back when its pod ends; its name alone is any
    # container's, so it counts only with the marker below in its own root
    "doca-driver": ("entrypoint.sh",),
}

#: daemon -> files that must exist in the process's own root (``/proc/<pid>/root``) for a process of that
#: name to be the daemon: the DOCA driver container ships ``ofed_info`` (its entrypoint runs
#: ``ofed_info -s``; github.com/Mellanox/ofed-docker entrypoint.sh), another image's entrypoint does not.
MARKERS: dict[str, tuple[str, ...]] = {
    "doca-driver": ("/usr/bin/ofed_info", "/usr/sbin/ofed_info"),
}

#: the interpreters a script daemon's ``exe`` names (the kernel's ``exe`` of a script is its shell)
SHELLS = ("/bin/bash", "/usr/bin/bash", "/bin/sh", "/usr/bin/sh", "/bin/dash", "/usr/bin/dash")

#: daemon -> where its executable is installed, as the process sees its own root: a packaged
#: daemon's paths, a container image's (each image's Dockerfile), a script's shell. A path ending
#: in "/" is a directory of them. Daemons of ``MARKERS`` are confirmed by their marker instead.
EXES: dict[str, tuple[str, ...]] = {
    # /usr/sbin (RHEL, DOCA-OVS, and Debian's alternatives link, which the kernel resolves to
    # /usr/lib/openvswitch-switch/ovs-vswitchd: openvswitch-switch.postinst), /usr/local/sbin (a
    # source build's prefix)
    "ovs-vswitchd": ("/usr/sbin/ovs-vswitchd", "/usr/local/sbin/ovs-vswitchd",
                     "/usr/lib/openvswitch-switch/ovs-vswitchd", "/usr/lib/openvswitch/"),
    "ovsdb-server": ("/usr/sbin/ovsdb-server", "/usr/local/sbin/ovsdb-server", "/usr/lib/openvswitch/"),
    # sriov-network-operator's Dockerfile: COPY ... sriov-network-config-daemon /usr/bin/
    "sriov-config-daemon": ("/usr/bin/sriov-network-config-daemon",),
    # sriov-network-device-plugin's Dockerfile: COPY ... build/sriovdp /usr/bin/
    "sriov-device-plugin": ("/usr/bin/sriovdp",),
    # k8s-rdma-shared-dev-plugin's Dockerfile: COPY ... build/k8s-rdma-shared-dp /bin/
    "rdma-device-plugin": ("/bin/k8s-rdma-shared-dp", "/usr/bin/k8s-rdma-shared-dp", "/bin/rdma-shared-dp",
                           "/usr/bin/rdma-shared-dp"),
    # gpu-driver-container's nvidia-driver is a bash script
    "nvidia-driver": SHELLS,
}

#: a user session's cgroup: logind's slice and session scopes, the user's own service manager
_SESSION = re.compile(r"(^|/)(user\.slice|user-\d+\.slice|session-[^/]*\.scope|user@\d+\.service)(/|$)")

_BY_NAME = {name: daemon for daemon, names in DAEMONS.items() for name in names}

#: Clock ticks per second of the times in /proc/<pid>/stat: USER_HZ, which the kernel fixes at 100
#: for userspace on every architecture a GPU node runs (x86_64, arm64), whatever CONFIG_HZ is.
USER_HZ = 100

#: A node runs a few of each; a table far longer than this is not a table of daemons.
MAX_PROCESSES = 256


def daemon_of(name: str) -> str | None:
    """The daemon a process of this kernel name belongs to, or None."""
    return _BY_NAME.get(name)


def exe_installed(daemon: str, link: str | None, pid: int) -> bool:
    """Whether ``link`` (the text of ``/proc/<pid>/exe``) is where ``daemon`` is installed. The kernel
    writes the path as the process sees it (a container's: inside its image), with `` (deleted)``
    once a package upgrade replaced the file; a node image stores the link relative to its
    directory, which ``/proc/<pid>`` resolves back to the same path."""
    if daemon in MARKERS:
        return True  # confirmed by the marker in its own root
    if not link:
        return False
    if link.endswith(" (deleted)"):
        link = link[:-len(" (deleted)")]
    path = posixpath.normpath(posixpath.join(f"/proc/{pid}", link))
    return any(path == p or (p.endswith("/") and path.startswith(p)) for p in EXES.get(daemon, ()))


def system_cgroup(text: str | None) -> bool:
    """Whether ``/proc/<pid>/cgroup`` places the process in a system service or a container (or the
    root cgroup of a node without systemd), not in a user's session. Each line is
    ``id:controllers:path``; read from inside a cgroup namespace (the agent's pod) a path outside it
    starts with ``/..``, which the pattern does not mind.

    >>> system_cgroup("0::/system.slice/openvswitch-switch.service\\n")
    True
    >>> system_cgroup("0::/user.slice/user-1000.slice/session-3.scope\\n")
    False
    """
    if not text:
        return False
    paths = [line.split(":", 2)[2] for line in text.splitlines() if line.count(":") >= 2]
    return bool(paths) and not any(_SESSION.search(p) for p in paths)


def parse_stat(text: str) -> dict[str, object] | None:
    """The fields of ``/proc/<pid>/stat`` the source uses, or None when it is not one. A sample (an
    ``ovs-vswitchd`` of a lab node):

    >>> d = parse_stat("4242 (ovs-vswitchd) S 1 4242 4242 0 -1 4194560 9461 0 0 0 1520 377 0 0 10 -10 "
    ...                "13 0 2385 6082256896 12171 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 3 0 0 0 0 0")
    >>> (d["name"], d["state"], d["ppid"], d["utime"], d["stime"], d["threads"], d["starttime"])
    ('ovs-vswitchd', 'S', 1, 1520, 377, 13, 2385)

    The name sits in parentheses and may itself hold spaces and parentheses: it ends at the *last* ``)``.
    """
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        return None
    rest = text[end + 1:].split()
    # after the name: state(3) ppid(4) ... utime(14) stime(15) ... num_threads(20) ... starttime(22)
    if len(rest) < 20:
        return None
    try:
        return {"pid": int(text[:start]), "name": text[start + 1:end], "state": rest[0], "ppid": int(rest[1]),
                "utime": int(rest[11]), "stime": int(rest[12]), "threads": int(rest[17]), "starttime": int(rest[19])}
    except ValueError:
        return None


def parse_status(text: str) -> dict[str, object]:
    """``Name``, ``PPid``, ``Threads`` and ``VmRSS`` (bytes) of ``/proc/<pid>/status``.

    >>> parse_status("Name:\\tovsdb-server\\nState:\\tS (sleeping)\\nPPid:\\t1\\nVmRSS:\\t   10240 kB\\nThreads:\\t1\\n")
    {'name': 'ovsdb-server', 'ppid': 1, 'rss_bytes': 10485760, 'threads': 1}
    """
    out: dict[str, object] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        try:
            if key == "Name":
                out["name"] = value
            elif key == "PPid":
                out["ppid"] = int(value)
            elif key == "VmRSS" and value.endswith("kB"):
                out["rss_bytes"] = int(value[:-2].strip()) * 1024
            elif key == "Threads":
                out["threads"] = int(value)
        except ValueError:
            continue
    return out


def _boot_time(host: Host) -> float | None:
    text = host.read_text("/proc/stat", 1 << 20) or ""
    for line in text.splitlines():
        if line.startswith("btime "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def _proc_root(host: Host) -> str | None:
    """Where the live node's /proc is (``<host root>/proc``), through any wrapper of the live host."""
    h: object = host
    for _ in range(8):
        root = getattr(h, "host_root", None)
        if isinstance(root, str):
            return os.path.join(root, "proc")
        h = getattr(h, "inner", None)
        if h is None:
            return None
    return None


def _comm(proc_root: str, pid: str) -> str | None:
    """The kernel name of ``pid``: its ``comm`` file, the ``(name)`` of its ``stat`` without the rest
    of the line (the kernel formats ``stat`` field by field: 8 us against 6 per process, and no
    parse), read in binary: a text-mode open costs a string that CPython 3.11 keeps in its type
    cache, per open, and this runs for every process of the node."""
    try:
        fd = os.open(os.path.join(proc_root, pid, "comm"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # gone between the listing and the read, or not ours to read
    try:
        data = os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    # comm ends with a newline; a name may itself hold one (prctl PR_SET_NAME): cut the last only
    return data[:-1].decode("utf-8", "replace") if data.endswith(b"\n") else None


def _live_pids(proc_root: str, notes: Notes) -> list[int] | None:
    """The pids of the daemons' processes, named by their kernel name (``comm``), read
    here and never through the host door: the names of every other process on the node stay out of a
    recording.

    Not psutil: ``process_iter`` keeps a module-wide cache of a Process per pid it saw, and
    ``Process.name()`` reads the command line of every process whose name is 15 characters long
    (then gives the longer name, which ``DAEMONS``' cut names do not match) in text mode.
    """
    if not os.path.isdir(proc_root):
        notes.missing("processes", f"{proc_root}: not mounted")
        return None
    try:
        entries = os.listdir(proc_root)
    except OSError as exc:
        notes.missing("processes", f"{proc_root}: {exc.strerror or exc}")
        return None
    pids = []
    for entry in entries:
        if entry.isdigit() and entry.isascii():
            name = _comm(proc_root, entry)
            daemon = daemon_of(name) if name is not None else None
            # a daemon is confirmed here (its executable, its cgroup, a marked one's marker), before
            # anything of it goes through the host door, so a recording never holds another
            # process of the same name
            if daemon is not None and _live_confirmed(proc_root, entry, daemon):
                pids.append(int(entry))
    return sorted(pids)


def _read_small(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, 16 << 10).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _live_confirmed(proc_root: str, pid: str, daemon: str) -> bool:
    try:
        link: str | None = os.readlink(os.path.join(proc_root, pid, "exe"))
    except OSError:
        link = None  # gone, a kernel thread, or not ours to read: not confirmed
    if not exe_installed(daemon, link, int(pid)):
        return False
    if not system_cgroup(_read_small(os.path.join(proc_root, pid, "cgroup"))):
        return False
    return daemon not in MARKERS or any(
        os.path.isfile(os.path.join(proc_root, pid, "root", m.lstrip("/"))) for m in MARKERS[daemon])


def _confirmed(host: Host, pid: int, daemon: str) -> bool:
    """The live pass's confirmation again, through the host door: a recording keeps the ``exe`` link,
    the ``cgroup`` file and a marked daemon's marker, so a replay confirms the process as the live
    read did."""
    return (exe_installed(daemon, host.readlink(f"/proc/{pid}/exe"), pid)
            and system_cgroup(host.read_text(f"/proc/{pid}/cgroup", 16 << 10))
            and (daemon not in MARKERS or _marked(host, pid, daemon)))


def _marked(host: Host, pid: int, daemon: str) -> bool:
    """Whether a process of a marked daemon's name has the daemon's marker in its root, read through
    the host door: the recording keeps the marker (``ofed_info``, the driver's version script), so a
    replay confirms the process as the live read did."""
    return any(host.read_text(f"/proc/{pid}/root{m}", 64 << 10) is not None for m in MARKERS.get(daemon, ()))


def _recorded_pids(host: Host) -> list[int]:
    return sorted(int(n) for n in host.listdir("/proc") or () if n.isdigit())


def read_processes(host: Host, notes: Notes) -> tuple[DaemonProcess, ...]:
    """The processes of ``DAEMONS`` on the node, sorted by daemon then pid."""
    if host.live:
        root = _proc_root(host)
        if root is None:
            notes.missing("processes", "the live host names no root to find /proc under")
            return ()
        pids: Iterable[int] | None = _live_pids(root, notes)
        if pids is None:
            return ()
    else:
        pids = _recorded_pids(host)
    boot = _boot_time(host)
    out = []
    for pid in list(pids)[:MAX_PROCESSES]:
        status_text = host.read_text(f"/proc/{pid}/status", 64 << 10)
        if status_text is None:
            continue  # gone since it was listed
        status = parse_status(status_text)
        daemon = daemon_of(str(status.get("name", "")))
        if daemon is None or not _confirmed(host, pid, daemon):
            continue
        stat = parse_stat(host.read_text(f"/proc/{pid}/stat", 4096) or "") or {}
        start = (boot + int(stat["starttime"]) / USER_HZ  # type: ignore[call-overload]
                 if boot is not None and "starttime" in stat else None)
        cpu = ((int(stat["utime"]) + int(stat["stime"])) / USER_HZ  # type: ignore[call-overload]
               if "utime" in stat else None)
        out.append(DaemonProcess(
            daemon=daemon, name=str(status["name"]), pid=pid,
            ppid=status.get("ppid", stat.get("ppid")),  # type: ignore[arg-type]
            state=stat.get("state"),  # type: ignore[arg-type]
            start_time=round(start, 2) if start is not None else None,
            cpu_seconds=cpu, rss_bytes=status.get("rss_bytes"),  # type: ignore[arg-type]
            threads=status.get("threads", stat.get("threads")),  # type: ignore[arg-type]
        ))
    out.sort(key=lambda p: (p.daemon, p.pid))
    return tuple(out)


def read_processes_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The daemons a rail depends on: start time, CPU, RSS and threads of each of their processes."""
    return part("processes", notes, fields={"processes": read_processes(host, notes)})


SOURCE = Source("processes", "the processes of the daemons a rail depends on (OVS, the SR-IOV config daemon, the device "
                             "plugins, the NVIDIA driver container): start time, CPU, RSS",
                (), 15.0, 1.0, ("processes",), read_processes_part, order=120, optional=True)
