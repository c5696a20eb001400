"""Capture plug-ins as data (docs/design.md §7): the steps a plug-in declares, and the deny-list.

A plug-in only *declares* what to collect; ``agent.capture.runner`` runs every plug-in, with the
timeouts, size caps, order, manifest and redaction. A step's argv or glob may hold placeholders
that the runner expands from what the readers found on the node:

- ``{rail}``: each rail netdev and uplink (one step per rail);
- ``{pf}``: each PCI function of a rail (``0000:1a:00.0``);
- ``{handle}``: each devlink handle of a rail PF (``pci/0000:1a:00.0``);
- ``{rdma}``: each rail's RDMA port (``mlx5_0/1``);
- ``{reporter}`` with ``{handle}``: each health reporter of that handle;
- ``{netns}``: each named network namespace (pod sandboxes), only with ``--pod-netns``.

Two guards are checked on the declared argv, before anything runs, and again on every argv after
placeholder expansion: the *allowlist* (``ALLOWLIST``: per tool, the read-only subcommand paths and
options the plug-ins and the readers use; anything else is refused) and the *deny-list* (``DENY_LIST``,
docs/design.md §7: the commands never to run, named so a refusal says why). A plug-in that names a refused
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
    "ALLOWLIST",
    "DENY_LIST",
    "Command",
    "DenyEntry",
    "File",
    "Generated",
    "Plugin",
    "PluginRefused",
    "Step",
    "check_plugin",
    "denied",
    "not_allowed",
    "refusal",
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
    health diagnose``): it names the placeholder whose PF it touches (``"rail"``, ``"handle"``,
    ``"rdma"`` or ``"pf"``). Such reads run one at a time per PF, and once one hangs the rest of that
    PF's are skipped.
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
class Plugin:
    """One plug-in's steps. ``version`` goes into the manifest: bump it when the steps change."""

    name: str
    version: int
    steps: tuple[Step, ...] = field(default_factory=tuple)
    description: str = ""


class PluginRefused(Exception):
    """A plug-in names a denied command; nothing of it runs."""

    def __init__(self, plugin: str, argv: tuple[str, ...], entry: str) -> None:
        self.plugin = plugin
        self.argv = argv
        self.entry = entry
        where = entry if entry.startswith("not on the allowlist") else f"on the deny-list ({entry})"
        super().__init__(f"plug-in {plugin!r} refused: {' '.join(argv)!r} is {where}")


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


def _appctl_timeout(argv: tuple[str, ...]) -> bool:
    """Whether ``ovs-appctl``'s own options bound the wait: ``-T SECS`` / ``-TSECS`` / ``--timeout=SECS``
    / ``--timeout SECS``. ``-t``/``--target`` names the daemon (``-t 5`` contacts a daemon called
    "5") and is no timeout. Options end at the first word that is not one (its optstring starts
    with ``+``): a ``--timeout`` after the command is the command's argument, not ovs-appctl's."""
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        a = argv[i]
        if a in ("-T", "--timeout"):
            return i + 1 < len(argv)
        if a.startswith("--timeout=") or (a.startswith("-T") and len(a) > 2):
            return True
        i += 2 if a in ("-t", "--target") else 1
    return False


def _appctl_without_timeout(argv: tuple[str, ...]) -> bool:
    # A stuck vswitchd would hold ovs-appctl forever without --timeout.
    return _tool(argv) == "ovs-appctl" and not _appctl_timeout(argv)


def _named(*tools: str) -> Callable[[tuple[str, ...]], bool]:
    return lambda argv: _tool(argv) in tools


def _shell(argv: tuple[str, ...]) -> bool:
    words = _words(argv)
    if _tool(argv) == "ip" and len(words) >= 2 and _is(words[0], "netns", 2) and _is(words[1], "exec", 1):
        return True  # ip netns exec runs any command
    return _tool(argv) in _WRAPPERS


# Tools that run another command, or a program text of their own (find -exec, awk system()).
_WRAPPERS = ("sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "fish", "ash", "busybox", "env", "xargs", "sudo",
             "su", "runuser", "doas", "pkexec", "nsenter", "unshare", "chroot", "setsid", "timeout", "nice",
             "ionice", "nohup", "stdbuf", "taskset", "chrt", "strace", "ltrace", "gdb", "watch", "flock",
             "script", "find", "awk", "gawk", "mawk", "nawk", "sed", "python", "python3", "perl", "ruby", "lua",
             "tclsh", "node", "systemd-run", "capsh", "setpriv", "ip-netns")


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
    DenyEntry("ovs-appctl without --timeout", "a stuck ovs-vswitchd would hold the command forever "
              "(-T/--timeout bounds the wait; -t/--target only names the daemon)",
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


def refusal(argv: Iterable[str]) -> str | None:
    """Why ``argv`` must not run (the deny-list entry, else the allowlist's reason), or None."""
    args = tuple(str(a) for a in argv)
    if not args:
        return "an empty argv"
    entry = denied(args)
    if entry is not None:
        return entry.name
    return not_allowed(args)


def check_plugin(plugin: Plugin) -> None:
    """Raise ``PluginRefused`` when any step of ``plugin`` names a refused command."""
    for step in plugin.steps:
        if isinstance(step, Command):
            why = refusal(step.argv)
            if why is not None:
                raise PluginRefused(plugin.name, step.argv, why)


_PLACEHOLDER = re.compile(r"\{(rail|pf|handle|rdma|reporter|netns)\}")


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


# -- the allowlist ------------------------------------------------------------------------------
#
# Every argv must match one of these read-only forms; anything else is refused (a wrapper, a batch
# file, an option that hides the next word, an abbreviation of a state-changing verb). The forms are
# the ones the plug-ins and the readers use (tests/unit/capture/test_allowlist.py walks both).


@dataclass(frozen=True, slots=True)
class _Level:
    """One keyword level of an iproute2-style command line.

    ``known`` lists every keyword the tool accepts at this level *in the order it tries them*:
    iproute2 takes any prefix of a keyword and the first keyword it is a prefix of wins
    (``matches()`` in lib/utils.c, https://git.kernel.org/pub/scm/network/iproute2/iproute2.git),
    so ``ip link s`` is ``set``. ``allowed`` maps the read-only keywords (and exact aliases) to the
    next level, ``"args"`` (any further non-option words: filters and object names) or ``"end"``.
    """

    known: tuple[str, ...]
    allowed: dict[str, _Level | str]

    def resolve(self, word: str) -> _Level | str | None:
        if word in self.allowed:
            return self.allowed[word]
        hit = next((k for k in (*self.known, *_CHANGE_VERBS) if k.startswith(word)), None)
        if hit is None or hit not in self.allowed:
            return None
        # An abbreviation that could also name a state-changing verb is refused whatever the order.
        if any(v.startswith(word) for v in _CHANGE_VERBS):
            return None
        return self.allowed[hit]


def _lv(known: str, **allowed: _Level | str) -> _Level:
    return _Level(tuple(known.split()), dict(allowed))


_SHOW = "show list lst"


def _shows(known: str, leaf: str = "args") -> _Level:
    return _lv(known, **{k: leaf for k in _SHOW.split() if k in known.split()})


@dataclass(frozen=True, slots=True)
class _Iproute:
    """An iproute2-family tool: global options (flag -> takes a value), then keyword levels."""

    options: dict[str, bool]
    top: _Level

    def check(self, argv: tuple[str, ...]) -> str | None:
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            opt = argv[i]
            if opt not in self.options:
                return f"option {opt!r} is not one of the read-only options {sorted(self.options)}"
            i += 2 if self.options[opt] else 1
        if i > len(argv):
            return f"option {argv[-1]!r} needs a value"
        level: _Level | str | None = self.top
        path: list[str] = []
        for word in argv[i:]:
            if level == "args":
                if word.startswith("-"):
                    return f"option {word!r} after {' '.join(path)!r}"
                continue
            if level == "end" or not isinstance(level, _Level):
                return f"{word!r} after {' '.join(path)!r}"
            level = level.resolve(word)
            if level is None:
                return f"{' '.join([*path, word])!r} is not a read-only subcommand"
            path.append(word)
        if isinstance(level, _Level):
            return f"{' '.join(path) or 'nothing'!r} names no read-only subcommand"
        return None


@dataclass(frozen=True, slots=True)
class _Exact:
    """A tool whose read-only forms are listed: ``flags`` (a subset, any order), then ``operands``
    non-option words."""

    forms: tuple[tuple[frozenset[str], int], ...]

    def check(self, argv: tuple[str, ...]) -> str | None:
        flags = frozenset(a for a in argv[1:] if a.startswith("-"))
        words = [a for a in argv[1:] if not a.startswith("-")]
        for allowed, operands in self.forms:
            if flags <= allowed and len(words) == operands:
                return None
        return "not one of its read-only forms"


@dataclass(frozen=True, slots=True)
class _Ethtool:
    """``ethtool OPTION DEVICE``: exactly one query option (ethtool(8)) and the device; ``--json``
    before the options that print JSON; ``ethtool --version`` (the optics reader's form choice)."""

    queries: frozenset[str]
    json_queries: frozenset[str] = frozenset()

    def check(self, argv: tuple[str, ...]) -> str | None:
        if argv[1:] == ("--version",):
            return None
        args = argv[2:] if len(argv) > 1 and argv[1] == "--json" else argv[1:]
        allowed = self.json_queries if len(args) < len(argv) - 1 else self.queries
        if len(args) == 2 and args[0] in allowed and not args[1].startswith("-"):
            return None
        return (f"only 'ethtool {{{','.join(sorted(self.queries))}}} DEVICE', "
                f"'ethtool --json {{{','.join(sorted(self.json_queries))}}} DEVICE' or 'ethtool --version' is allowed")


@dataclass(frozen=True, slots=True)
class _Ovs:
    """An OVS client: ``--opt=value`` options (``value_opts`` take the next word), one command.

    Only one command: ``ovs-vsctl`` chains commands after ``--`` (ovs-vsctl(8)), so ``--`` is refused.
    """

    options: tuple[str, ...]
    value_opts: tuple[str, ...]
    commands: dict[str, tuple[int, frozenset[str]]]  # command -> (max operands, allowed trailing flags)

    def check(self, argv: tuple[str, ...]) -> str | None:
        i = 1
        while i < len(argv) and argv[i].startswith("-"):
            opt = argv[i]
            if opt in self.value_opts:
                i += 2
                continue
            if opt == "--" or not opt.startswith(self.options):
                return f"option {opt!r} is not one of {sorted((*self.options, *self.value_opts))}"
            i += 1
        if i >= len(argv):
            return "no command"
        cmd, rest = argv[i], argv[i + 1:]
        if cmd not in self.commands:
            return f"{cmd!r} is not one of the read-only commands {sorted(self.commands)}"
        most, flags = self.commands[cmd]
        words = [a for a in rest if not a.startswith("-")]
        bad = [a for a in rest if a.startswith("-") and a not in flags]
        if bad or len(words) > most:
            return f"{' '.join(rest)!r} after {cmd!r}"
        return None


@dataclass(frozen=True, slots=True)
class _Forms:
    """A tool whose read-only argvs are listed whole: lldpcli's other commands (``configure``,
    ``update``, ``pause``) change what lldpd sends, so only its queries are taken, word for word."""

    forms: frozenset[tuple[str, ...]]

    def check(self, argv: tuple[str, ...]) -> str | None:
        if argv[1:] in self.forms:
            return None
        return "only " + " or ".join(repr(" ".join((argv[0], *f))) for f in sorted(self.forms))


_IP_TOP = ("address addrlabel maddress route rule neighbor neighbour ntable ntbl link l2tp fou ila macsec "
           "tunnel tuntap tap token tcpmetrics tcp_metrics monitor xfrm mroute mrule netns netconf vrf sr "
           "nexthop mptcp ioam stats help")

#: tool (argv[0] exactly as the plug-ins and readers write it) -> its read-only forms
ALLOWLIST: dict[str, _Iproute | _Exact | _Ethtool | _Ovs | _Forms] = {
    # ip(8): ip/ip.c, ip/iplink.c, ip/ipaddress.c, ip/iproute.c, ip/iprule.c, ip/ipneigh.c, ip/ipnetns.c
    "ip": _Iproute(
        {"-d": False, "-s": False, "-4": False, "-6": False, "-j": False, "-p": False, "-n": True},
        _lv(_IP_TOP,
            link=_shows("add set change replace delete show lst list xstats afstats property help"),
            address=_shows("add change chg replace delete list show lst flush save showdump restore help"),
            route=_shows("add change chg replace prepend append test delete list show lst get flush save "
                         "restore showdump help"),
            rule=_shows("add delete list show lst flush save restore help"),
            neighbor=_shows("add change chg replace delete list show lst get flush help"),
            neighbour=_shows("add change chg replace delete list show lst get flush help"),
            netns=_lv("list show lst list-id monitor add attach set delete identify pids exec help",
                      list="end"))),
    # devlink(8): devlink/devlink.c
    "devlink": _Iproute(
        {"-j": False, "-p": False},
        _lv("dev port lc sb monitor dpipe resource region health trap rate help",
            dev=_lv("show list eswitch reload param info flash selftests help",
                    show="args", list="args", info="args",
                    eswitch=_lv("set show", show="args"),
                    param=_lv("set show list", show="args", list="args")),
            port=_shows("show list set split unsplit param function health add del help"),
            resource=_lv("show set", show="args"),
            health=_lv("help recover diagnose dump set show list test",
                       show="args", list="args", diagnose="args"))),
    # rdma(8): rdma/rdma.c, rdma/link.c, rdma/res.c, rdma/stat.c, rdma/sys.c
    "rdma": _Iproute(
        {"-j": False, "-p": False, "-d": False},
        _lv("help dev link resource statistic system",
            link=_shows("show list add delete set help"),
            resource=_shows("show list qp cm_id cq mr pd ctx srq help", "end"),
            res=_shows("show list qp cm_id cq mr pd ctx srq help", "end"),
            statistic=_shows("show list qp mode set unset help"),
            system=_lv("show set help", show="end"))),
    # dcb(8): dcb/dcb.c and dcb/dcb_<object>.c
    "dcb": _Iproute(
        {"-j": False, "-p": False, "-s": False},
        _lv("app apptrust buffer dcbx ets maxrate pfc rewr help",
            **{o: _lv("show set add del replace flush help", show="args") for o in ("app", "buffer", "ets", "pfc")})),
    # ethtool(8): query options only
    "ethtool": _Ethtool(frozenset({"-i", "-S", "-k", "-l", "-g", "-a", "--show-fec", "-m"}), frozenset({"-m"})),
    # ovs-vsctl(8): "show" and "list TABLE [RECORD...]"
    "ovs-vsctl": _Ovs(("--timeout=", "--format=", "--columns=", "--data=", "--no-headings", "--bare"), (),
                      {"show": (0, frozenset()), "list": (64, frozenset())}),
    # ovs-appctl(8): -T/--timeout bounds the wait; the plug-ins' read-only commands. -t/--target is not
    # taken: it would point a command at any daemon's or program's control socket, and the plug-ins
    # only ever ask ovs-vswitchd (the default target).
    "ovs-appctl": _Ovs(("--timeout=",), ("-T",),
                       {"dpctl/show": (1, frozenset({"-s"})), "upcall/show": (0, frozenset()),
                        "coverage/show": (0, frozenset())}),
    # lldpcli(8): the lldp source's query (what lldpd heard on the rails), never a configure command
    "lldpcli": _Forms(frozenset({("-f", "json", "show", "neighbors", "details")})),
    # uname(1); dmesg(1) bare: -c/-C clear the ring buffer, -n sets the console level
    "uname": _Exact(((frozenset({"-a", "-r", "-s", "-n", "-m", "-v"}), 0),)),
    "dmesg": _Exact(((frozenset(), 0),)),
}


def not_allowed(argv: Iterable[str]) -> str | None:
    """Why ``argv`` is not on the allowlist (``"not on the allowlist: ..."``), or None."""
    args = tuple(str(a) for a in argv)
    if not args:
        return "not on the allowlist: an empty argv"
    spec = ALLOWLIST.get(args[0])
    if spec is None:
        return f"not on the allowlist: {args[0]!r} is not a read-only tool the capture knows"
    why = spec.check(args)
    return None if why is None else f"not on the allowlist: {args[0]}: {why}"
