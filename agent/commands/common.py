"""Flags shared by the subcommands that judge a node (doctor, metrics, agent) and by those that talk to
the collector (bundles, capture, report, the agent), and how they fail."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agent.config import Expectations
from agent.expectations import add_expectation_flags, expectations_from_args, given_expectations
from agent.model import KernelRow
from agent.settings import Setting, add_flags, duration, duration_or_zero, env_default, regex

__all__ = [
    "COLLECTOR_CA",
    "COLLECTOR_DEADLINE",
    "EXIT_USAGE",
    "LLDP",
    "LLDP_WAIT",
    "SCOPE",
    "add_collector_flags",
    "add_expectation_flags",
    "add_lldp_flag",
    "add_scope_flag",
    "collector_client",
    "env_default",
    "expectations_from_args",
    "fail",
    "given_expectations",
    "judged_by",
]

#: The exit status of bad usage (a flag, a --from path, a --kernel-table that cannot be used).
EXIT_USAGE = 3


def judged_by(args: argparse.Namespace) -> tuple[Expectations, tuple[KernelRow, ...]]:
    """The expectations the flags give and the kernel table they name (read once, at start).

    Raises ``ValueError`` (``KernelTableError`` is one) with a one-line reason for the operator.
    """
    from agent.readers.kernel_table import load_kernel_table

    exp = expectations_from_args(args)
    return exp, load_kernel_table(exp.kernel_table_file)


def fail(command: str, msg: str, status: int = EXIT_USAGE) -> int:
    """``railscope <command>: error: <msg>`` on stderr; returns ``status``. The message is escaped: it
    may quote a path or text from a node image."""
    from agent.report.terminal import safe

    sys.stderr.write(f"railscope {command}: error: {safe(msg)}\n")
    return status


#: ``--exclude-devices``: the devices firmware-touching reads never reach (docs/design.md §3); the agent's too.
SCOPE = Setting(
    "--exclude-devices",
    "Never send a firmware-touching read (ethtool statistics, module EEPROM, pause and FEC, dcb, "
    "RDMA port statistics, devlink per instance) to a device whose PCI address or netdev name "
    "this regular expression matches. "
    "Only rail PFs and the PFs the udev rules name are ever asked. Default: none excluded.",
    type=regex, metavar="REGEX", field="read.exclude_devices")


def add_scope_flag(p: argparse.ArgumentParser) -> None:
    """``--exclude-devices`` (``SCOPE``)."""
    add_flags(p, (SCOPE,))


def _lldp_mode(text: str) -> str:
    from agent.readers.lldp import MODES

    if text not in MODES:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(MODES)}, got {text!r}")
    return text


#: ``--lldp``: how the rails' LLDP neighbours are read (docs/design.md §3)
LLDP = Setting(
    "--lldp",
    "How each rail's LLDP neighbour (the leaf and port it is cabled to) is read: lldpd (lldpcli "
    "-f json show neighbors details, lldpd running on the node), listen (a passive listener on the "
    "rail netdevs: AF_PACKET, ethertype 0x88cc, the 01:80:c2:00:00:0e group only, never "
    "promiscuous, never transmitting; needs CAP_NET_RAW), off. Default: lldpd when lldpcli "
    "answers, else none.",
    type=_lldp_mode, metavar="{off,lldpd,listen}", field="read.lldp")


#: ``doctor --lldp-wait``: how long a one-shot ``--lldp listen`` listens. lldpd transmits every 30 s by default
#: (lldpd(8) ``tx-interval``; IEEE 802.1AB msgTxInterval): one interval and a second hears every rail once
LLDP_WAIT = Setting(
    "--lldp-wait",
    "With --lldp listen: listen for the rails' LLDP frames up to this long before judging, ending as soon as "
    "every rail has heard its neighbour (0: do not wait). A terminal shows the progress. "
    "Default: 31s, one transmit interval of lldpd's default 30 s and a second.",
    type=duration_or_zero, default="31s", metavar="DURATION", field="read.lldp_wait_s")


def add_lldp_flag(p: argparse.ArgumentParser) -> None:
    """``--lldp`` (``LLDP``)."""
    add_flags(p, (LLDP,))


#: ``--collector-ca-file``: how every command that talks to the collector trusts a private CA. One row: the
#: agent's table takes it (in its captures group), bundles, capture and report put it on their parsers.
COLLECTOR_CA = Setting(
    "--collector-ca-file",
    "The CA that issued the collector's TLS certificate: an https --collector is verified against it. "
    "Default: the system's CAs.", metavar="FILE", field="collector_ca_file")

#: ``--deadline`` of bundles and report: how long a collector that answers 503, times out or drops the
#: connection is retried. Not the agent's (its spool is retried for as long as it runs).
COLLECTOR_DEADLINE = Setting(
    "--deadline",
    "How long to keep retrying a collector that answers 503 or 429, times out or drops the connection "
    "(each retry is said on stderr: attempt, next in, until when). A certificate that does not verify, a "
    "refused connection, 401, 403 and 404 end the command at once. Default: 60s.",
    type=duration, default="60s", metavar="DURATION", env=False, chart="none")


def add_collector_flags(p: argparse.ArgumentParser, *, deadline: bool = True, suppress: bool = False) -> None:
    """``--collector-ca-file`` (and ``--deadline`` unless the command has its own) on ``p``. ``suppress``: a
    value given before a nested action is kept when none is given after it (``bundles --collector-ca-file
    CA ls``)."""
    for s in (COLLECTOR_CA, COLLECTOR_DEADLINE) if deadline else (COLLECTOR_CA,):
        if suppress:
            p.add_argument(s.flag, help=s.help, metavar=s.metavar, type=s.type, default=argparse.SUPPRESS)
        else:
            add_flags(p, (s,))


def collector_client(command: str, url: str, args: argparse.Namespace, *, token_file: str | None,
                     token_flag: str, deadline_s: float | None = None) -> Any:
    """The ``CollectorClient`` of a command a person runs: ``--collector-ca-file`` trusted, a permanent
    error final at once (with what to check), transient ones retried until ``--deadline`` with a line on
    stderr for each retry."""
    from agent.clients.collector import CollectorClient
    from agent.report.terminal import safe

    def said(line: str) -> None:
        sys.stderr.write(f"railscope {command}: {safe(line)}\n")
        sys.stderr.flush()

    return CollectorClient(url, token_file=token_file, token_flag=token_flag,
                           ca_file=getattr(args, "collector_ca_file", None), fail_fast=True,
                           deadline_s=deadline_s if deadline_s is not None else getattr(args, "deadline", None),
                           on_retry=said)
