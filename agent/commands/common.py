"""Flags shared by the subcommands that judge a node (doctor, metrics, agent), and how they fail."""

from __future__ import annotations

import argparse
import sys

from agent.config import Expectations
from agent.expectations import add_expectation_flags, expectations_from_args, given_expectations
from agent.model import KernelRow
from agent.settings import Setting, add_flags, duration_or_zero, env_default, regex

__all__ = [
    "EXIT_USAGE",
    "LLDP",
    "LLDP_WAIT",
    "SCOPE",
    "add_expectation_flags",
    "add_lldp_flag",
    "add_scope_flag",
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


#: ``--exclude-devices``: the devices firmware-touching reads never reach (DESIGN §3); the agent's too.
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


#: ``--lldp``: how the rails' LLDP neighbours are read (DESIGN §3)
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
