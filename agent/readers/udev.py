"""udev naming rules: PCI function -> the netdev / RDMA name it should get, from every rules file.

nic-configuration-operator writes two files (https://github.com/Mellanox/nic-configuration-operator,
``pkg/udev/manager.go``); sites that name rails themselves write their own, with net and RDMA rules in
one file (``70-persistent-net.rules``, Azure's ``99-rdma-persistent-naming.rules``). This reader
returns every naming rule keyed by a PCI function, of any file; which of them name rails is
``agent.naming.rail_rules``. The rule says what the name *should* be; the link dump says what it *is*.
"""

from __future__ import annotations

import re

from agent.host import Host
from agent.model import OPERATOR_RULE_FILES, RailRule
from agent.readers.common import BDF_RE, Notes

__all__ = ["NET_RULES", "RDMA_RULES", "RULES_GLOB", "RuleProblem", "parse_rules", "read_rules"]

NET_RULES, RDMA_RULES = OPERATOR_RULE_FILES
RULES_GLOB = "/etc/udev/rules.d/*.rules"

_KERNELS = re.compile(r'(?:^|[\s,])KERNELS=="(?P<key>[^"]*)"')
# A value meant as a PCI function (three separators) that is not one: "0000:s2:00.0", "0000:1a:00".
_PCI_LIKE = re.compile(r"\A[0-9A-Za-z]+:[0-9A-Za-z]+(?::[0-9A-Za-z]+)?(?:\.[0-9A-Za-z]*)?\Z")
_NAME = re.compile(r'(?:^|[\s,])NAME:?="(?P<name>[^"]*)"')
_SUBSYSTEM = re.compile(r'(?:^|[\s,])SUBSYSTEM=="(?P<s>[^"]*)"')
# Two forms of the RDMA rename: the operator's RUN+="/usr/bin/rdma dev set %k name X" and
# rdma-core's PROGRAM="rdma_rename %k NAME_FIXED X" (rdma-core kernel-boot/rdma_rename.c).
_RDMA_RUN = re.compile(r'RUN\+?="[^"]*\brdma\s+dev\s+set\s+%k\s+name\s+(?P<name>[^"\s]+)\s*"')
_RDMA_RENAME = re.compile(r'PROGRAM="[^"]*\brdma_rename\s+%k\s+NAME_FIXED\s+(?P<name>[^"\s]+)\s*"')
# What the kernel refuses in a device name (net/core/dev.c dev_valid_name: "/", ":", whitespace).
_IFNAME = re.compile(r"\A[^/:\s]+\Z")
_RDMA_NAME = re.compile(r"\A[^/\s]{1,63}\Z")  # IB_DEVICE_NAME_MAX 64 with the NUL
_NAMING_WORDS = re.compile(r"\bNAME:?=|\brdma_rename\b|\brdma\s+dev\s+set\b")


class RuleProblem(ValueError):
    """A naming line that cannot be read: ``file``, ``line`` and why."""

    def __init__(self, file: str, line: int, why: str) -> None:
        super().__init__(f"{file} line {line}: {why}")
        self.file, self.line, self.why = file, line, why


def _kind_of(text: str) -> list[tuple[str, str]]:
    """``(kind, name)`` of the renames a rule line does."""
    out = []
    m = _NAME.search(text)
    sub = _SUBSYSTEM.search(text)
    if m and (sub is None or sub.group("s") == "net"):
        out.append(("net", m.group("name")))
    for pat in (_RDMA_RUN, _RDMA_RENAME):
        r = pat.search(text)
        if r:
            out.append(("rdma", r.group("name")))
            break
    return out


def _show(text: str, limit: int = 120) -> str:
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_rules(text: str, file: str, kind: str | None = None,
                problems: list[RuleProblem] | None = None) -> tuple[RailRule, ...]:
    """Rules text -> ``RailRule`` per naming line keyed by a PCI function, with its line number.

    ``kind`` (``net`` / ``rdma``) keeps only that kind; None keeps both (a site's file has both).
    A naming line whose key looks like a PCI function but is not one, or whose quotes do not close,
    is appended to ``problems`` (never dropped in silence). A rule keyed by something else (a MAC
    address, a glob) is not a rail rule and is skipped. Any PCI domain (Azure ``0101``, Grace
    Hopper ``0002``) is a function; hex is lower-cased.

    Samples::

        SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1a:00.0", NAME="net_rail0"
        ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="infiniband", RUN+="/usr/bin/rdma dev set %k name rdma_rail0"
        ACTION=="add", KERNELS=="0000:18:00.0", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FIXED roce_rail0"
        ACTION=="add", SUBSYSTEMS=="pci", KERNELS=="0101:00:00.0", PROGRAM="rdma_rename %k NAME_FIXED mlx5_ib0"
    """
    problems = problems if problems is not None else []
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not _NAMING_WORDS.search(s):
            continue
        if s.count('"') % 2:
            problems.append(RuleProblem(file, n, f"unbalanced quotes: {_show(s)}"))
            continue
        found = _kind_of(s)
        if not found and not _NAME.search(s):
            # "NAME=net_rail0" unquoted, "rdma dev set %k name" without a name: udev would not
            # rename either, and the rail it meant must not vanish without a word
            problems.append(RuleProblem(file, n, f"a rename this reader cannot read: {_show(s)}"))
            continue
        renames = [(k, name) for k, name in found if kind is None or k == kind]
        if not renames:
            continue
        km = _KERNELS.search(s)
        if km is None:
            continue
        key = km.group("key")
        if not BDF_RE.match(key):
            if _PCI_LIKE.match(key):
                problems.append(RuleProblem(file, n, f'KERNELS=="{_show(key, 40)}" is not a PCI function address'))
            continue
        for k, name in renames:
            if not name:
                problems.append(RuleProblem(file, n, f"empty {'NAME' if k == 'net' else 'RDMA name'}"))
                continue
            if "%" in name or "$" in name:
                continue  # a substitution (NAME="$env{ID_NET_NAME}"): no fixed name to expect
            if not (_IFNAME if k == "net" else _RDMA_NAME).match(name) or name in (".", ".."):
                problems.append(RuleProblem(file, n, f"{_show(name, 40)!r} is not a valid device name"))
                continue
            out.append(RailRule(pci=key.lower(), name=name, kind=k, file=file, line=n))
    return tuple(out)


def read_rules(host: Host, notes: Notes | None = None, problems_out: list[RuleProblem] | None = None) -> tuple[RailRule, ...]:
    """Every naming rule of ``/etc/udev/rules.d/*.rules``, the operator's files first.

    An absent operator file is normal (no operator, or no rails named by it) and noted as such; a
    line that cannot be parsed is noted as unavailable with its file and line, and appended to
    ``problems_out`` when given (the snapshot's ``rule_problems``, a finding).
    """
    notes = notes if notes is not None else Notes()
    paths = sorted(set(host.glob(RULES_GLOB)) - set(OPERATOR_RULE_FILES))
    out: list[RailRule] = []
    problems: list[RuleProblem] = []
    for path, kind in ((NET_RULES, "net"), (RDMA_RULES, "rdma")):
        text = host.read_text(path, 1 << 20)
        if text is None:
            notes.missing(f"udev {kind} rules", f"{path}: not present")
            continue
        out.extend(parse_rules(text, path, kind, problems))
    for path in paths:
        text = host.read_text(path, 1 << 20)
        if text is None:
            continue
        out.extend(parse_rules(text, path, None, problems))
    for p in problems:
        notes.missing("udev rules", str(p))
    if problems_out is not None:
        problems_out.extend(problems)
    return tuple(out)
