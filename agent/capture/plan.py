"""Capture plans as data (DESIGN §7): the steps a plug-in declares, and the deny-list.

A plug-in only *declares* what to collect; ``agent.capture.runner`` runs every plan, with the
timeouts, size caps, order, manifest and redaction. A step's argv or glob may hold placeholders
that the runner expands from what the readers found on the node:

- ``{rail}``: each rail netdev and uplink (one step per rail);
- ``{pf}``: each PCI function of a rail (``0000:1a:00.0``);
- ``{handle}``: each devlink handle of a rail PF (``pci/0000:1a:00.0``);
- ``{reporter}`` with ``{handle}``: each health reporter of that handle;
- ``{netns}``: each named network namespace (pod sandboxes), only with ``--pod-netns``.

The deny-list is checked on the declared argv, before anything runs: a plan that names a denied
command is refused whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.capture.context import CaptureContext

__all__ = [
    "DENY_LIST",
    "Command",
    "DenyEntry",
    "File",
    "Generated",
    "Plan",
    "PlanRefused",
    "Step",
    "check_plan",
    "denied",
]

#: dmesg and logs keep their newest 4 MiB; a command's JSON keeps its head (see ``keep``).
DEFAULT_MAX_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class File:
    """Copy the files matching ``glob`` (node paths; ``*`` within a component, ``**`` any depth).

    Each file keeps its last ``max_bytes`` (a log's newest lines matter most).
    """

    glob: str
    max_bytes: int = 1 << 20


@dataclass(frozen=True, slots=True)
class Command:
    """Run ``argv`` (never a shell) with a timeout; stdout keeps its last ``max_bytes``.

    ``firmware`` marks a read that reaches the NIC's firmware (``ethtool -S``/``-m``, ``devlink
    health diagnose``): it names the placeholder whose PF it touches (``"rail"``, ``"handle"`` or
    ``"pf"``). Such reads run one at a time per PF, and once one hangs the rest of that PF's are
    skipped.
    """

    argv: tuple[str, ...]
    timeout_s: float = 10.0
    max_bytes: int = DEFAULT_MAX_BYTES
    firmware: str | None = None
    keep: str = "tail"


@dataclass(frozen=True, slots=True)
class Generated:
    """A file made by ``fn(context) -> bytes`` (``recorder.jsonl``), written as ``name``."""

    name: str
    fn: Callable[[CaptureContext], bytes]
    timeout_s: float = 30.0


Step = File | Command | Generated


@dataclass(frozen=True, slots=True)
class Plan:
    """One plug-in's steps. ``version`` goes into the manifest: bump it when the steps change."""

    name: str
    version: int
    steps: tuple[Step, ...] = field(default_factory=tuple)
    description: str = ""


class PlanRefused(Exception):
    """A plan names a denied command; nothing of it runs."""

    def __init__(self, plan: str, argv: tuple[str, ...], entry: str) -> None:
        self.plan = plan
        self.argv = argv
        self.entry = entry
        super().__init__(f"plan {plan!r} refused: {' '.join(argv)!r} is on the deny-list ({entry})")


# -- the deny-list ------------------------------------------------------------------------------

def _words(argv: tuple[str, ...]) -> list[str]:
    """The positional words of an iproute2-style argv (options and their ``-x`` flags dropped)."""
    return [a for a in argv[1:] if not a.startswith("-")]


def _is(word: str, keyword: str, least: int = 3) -> bool:
    """iproute2 accepts any prefix of a keyword (``devlink health du``): match prefixes too."""
    return word == keyword or (len(word) >= min(least, len(keyword)) and keyword.startswith(word))


def _tool(argv: tuple[str, ...]) -> str:
    return argv[0].rsplit("/", 1)[-1] if argv else ""


def _devlink_words(argv: tuple[str, ...], *path: str) -> bool:
    if _tool(argv) != "devlink":
        return False
    words = _words(argv)
    return len(words) >= len(path) and all(_is(w, k, 2) for w, k in zip(words, path, strict=False))


# Verbs that change state in iproute2, devlink, rdma, dcb, tc and the OVS tools.
_CHANGE_VERBS = ("set", "add", "del", "delete", "change", "replace", "flush", "reload", "reset",
                 "remove", "clear", "append", "prepend", "save", "restore", "destroy", "create",
                 "flash", "trigger", "recover", "test")
_STATEFUL_TOOLS = ("ip", "devlink", "rdma", "dcb", "tc", "bridge", "ovs-vsctl", "ovs-ofctl", "ovs-dpctl",
                   "ovs-appctl", "nmcli", "sysctl", "lldptool", "mlnx_qos")


def _any_set(argv: tuple[str, ...]) -> bool:
    tool = _tool(argv)
    if tool not in _STATEFUL_TOOLS:
        return False
    if tool == "sysctl":
        return any(a.startswith("-w") or "=" in a for a in argv[1:])
    for w in _words(argv):
        base = w.split("/", 1)[-1]  # ovs-appctl dpif/set-...
        if base in _CHANGE_VERBS or base.startswith(("set", "add-", "del-", "remove-", "mod-", "--may-exist")):
            return True
        if tool != "ovs-appctl" and any(_is(w, v, 3) for v in ("set", "change", "replace", "flush", "reload")):
            return True
    return False


# ethtool options that change the device (ethtool(8)); -d/-e/-t are their own entry.
_ETHTOOL_SETTERS = {"-s", "-A", "-C", "-G", "-K", "-L", "-E", "-f", "-N", "-U", "-X", "-W", "-r", "-p"}
_ETHTOOL_LONG_SETTERS = ("--change", "--pause", "--coalesce", "--set-", "--features", "--offload",
                         "--change-eeprom", "--flash", "--config-", "--identify", "--negotiate",
                         "--reset", "--set-channels", "--set-ring", "--set-fec", "--set-eee",
                         "--set-priv-flags", "--set-rxfh-indir", "--rxfh", "--per-queue", "--set-phy-tunable",
                         "--set-tunable", "--set-module", "--set-plca-cfg", "--set-mm", "--set-pse")


def _ethtool_setter(argv: tuple[str, ...]) -> bool:
    if _tool(argv) != "ethtool":
        return False
    return any(a in _ETHTOOL_SETTERS or a.startswith(_ETHTOOL_LONG_SETTERS) for a in argv[1:])


def _ethtool_dump(argv: tuple[str, ...]) -> bool:
    if _tool(argv) != "ethtool":
        return False
    return any(a in ("-d", "-e", "-t", "--register-dump", "--eeprom-dump", "--test") for a in argv[1:])


def _rdma_objects(argv: tuple[str, ...]) -> bool:
    """``rdma res show`` (summary counts) is allowed; any object listing is not (``mr``: memory
    keys; ``qp``, ``cm_id``: tenant process names; the rest: the same kind of per-tenant detail)."""
    if _tool(argv) != "rdma":
        return False
    words = _words(argv)
    if not words or not _is(words[0], "resource", 1) or words[0][0] != "r":
        return False
    rest = [w for w in words[1:] if not (_is(w, "show", 1) or _is(w, "list", 1))]
    return bool(rest)


def _dump_flows(argv: tuple[str, ...]) -> bool:
    return _tool(argv) in ("ovs-appctl", "ovs-dpctl", "ovs-ofctl") and \
        any(a.endswith("dump-flows") for a in argv[1:])


def _appctl_without_timeout(argv: tuple[str, ...]) -> bool:
    # A stuck vswitchd would hold ovs-appctl forever without -t.
    return _tool(argv) == "ovs-appctl" and not any(a == "-t" or a.startswith(("--timeout", "-t")) for a in argv[1:])


def _named(*tools: str) -> Callable[[tuple[str, ...]], bool]:
    return lambda argv: _tool(argv) in tools


def _shell(argv: tuple[str, ...]) -> bool:
    words = _words(argv)
    if _tool(argv) == "ip" and len(words) >= 2 and _is(words[0], "netns", 2) and _is(words[1], "exec", 1):
        return True  # ip netns exec runs any command
    return _tool(argv) in ("sh", "bash", "dash", "zsh", "ksh", "busybox", "env", "xargs", "sudo", "nsenter",
                           "chroot", "python", "python3", "perl")


@dataclass(frozen=True, slots=True)
class DenyEntry:
    name: str
    why: str
    match: Callable[[tuple[str, ...]], bool]


DENY_LIST: tuple[DenyEntry, ...] = (
    DenyEntry("devlink health dump", "writes a firmware core-dump register",
              lambda a: _devlink_words(a, "health", "dump")),
    DenyEntry("devlink region", "reads raw firmware memory regions (snapshots are taken on the device)",
              lambda a: _devlink_words(a, "region")),
    DenyEntry("devlink dev reload", "reloads the driver and resets the NIC",
              lambda a: _devlink_words(a, "dev", "reload")),
    DenyEntry("any set", "a verb that changes state (set, add, del, flush, ...)", _any_set),
    DenyEntry("ethtool setters", "ethtool options that change the device (-s -A -C -G -K -L -N -X ...)",
              _ethtool_setter),
    DenyEntry("ethtool -d/-e/-t", "register dumps, EEPROM dumps and self-tests stall or reset the NIC",
              _ethtool_dump),
    DenyEntry("mlxconfig", "firmware configuration tool", _named("mlxconfig", "mstconfig")),
    DenyEntry("mlxreg", "raw register access", _named("mlxreg", "mstreg")),
    DenyEntry("mstflint", "firmware burning tool", _named("mstflint", "flint")),
    DenyEntry("mstfwreset", "resets the NIC's firmware", _named("mstfwreset", "mlxfwreset")),
    DenyEntry("rdma res show mr|qp|cm_id", "memory keys and tenant process names; summary counts only",
              _rdma_objects),
    DenyEntry("ovs-appctl dpctl/dump-flows", "a full flow dump stalls ovs-vswitchd", _dump_flows),
    DenyEntry("ovs-appctl without -t", "a stuck ovs-vswitchd would hold the command forever",
              _appctl_without_timeout),
    DenyEntry("module loading", "the agent never loads or removes a kernel module",
              _named("modprobe", "insmod", "rmmod", "depmod")),
    DenyEntry("a shell or wrapper", "argv only: no shell, interpreter or privilege wrapper", _shell),
)


def denied(argv: Iterable[str]) -> DenyEntry | None:
    """The deny-list entry ``argv`` hits, or None."""
    args = tuple(str(a) for a in argv)
    for entry in DENY_LIST:
        if args and entry.match(args):
            return entry
    return None


def check_plan(plan: Plan) -> None:
    """Raise ``PlanRefused`` when any step of ``plan`` names a denied command."""
    for step in plan.steps:
        if isinstance(step, Command):
            if not step.argv:
                raise PlanRefused(plan.name, step.argv, "an empty argv")
            entry = denied(step.argv)
            if entry is not None:
                raise PlanRefused(plan.name, step.argv, entry.name)


_PLACEHOLDER = re.compile(r"\{(rail|pf|handle|reporter|netns)\}")


def placeholders(step: Step) -> tuple[str, ...]:
    """The placeholders a step's argv or glob uses, in order of first use."""
    text: Any
    if isinstance(step, Command):
        text = " ".join(step.argv)
    elif isinstance(step, File):
        text = step.glob
    else:
        return ()
    seen: list[str] = []
    for m in _PLACEHOLDER.finditer(text):
        if m.group(1) not in seen:
            seen.append(m.group(1))
    return tuple(seen)
