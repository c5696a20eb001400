"""Flags shared by the subcommands that judge a node (doctor, metrics, agent), and how they fail."""

from __future__ import annotations

import argparse
import sys

from agent.config import Expectations
from agent.expectations import (  # noqa: F401 (the subcommands' flag helpers, kept importable from here)
    _bool_word,
    _duration,
    _template,
    add_expectation_flags,
    env_default,
    expectations_from_args,
    given_expectations,
)
from agent.model import KernelRow

__all__ = ["EXIT_USAGE", "add_expectation_flags", "add_lldp_flag", "add_scope_flag", "env_default", "expectations_from_args", "fail",
           "given_expectations", "judged_by", "seconds"]

#: The exit status of bad usage (a flag, a --from path, a --kernel-table that cannot be used).
EXIT_USAGE = 3


def seconds(text: str) -> float:
    """A number of seconds (a flag's argparse type starts here and adds its bound)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None


def positive_seconds(text: str) -> float:
    """A flag's number of seconds above zero (a timeout, a deadline)."""
    val = seconds(text)
    if val <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return val


def non_negative_seconds(text: str) -> float:
    """A flag's number of seconds, zero allowed (zero turns the wait off)."""
    val = seconds(text)
    if val < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return val


def duration_or_zero(text: str) -> float:
    """A duration (90s, 15m, 1h), or ``0`` / ``0s`` / ``off`` for none."""
    return 0.0 if text.strip() in ("0", "0s", "off") else _duration(text)


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


def _regex(text: str) -> str:
    import re

    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a regular expression: {exc}") from None
    return text


def add_scope_flag(p: argparse.ArgumentParser) -> None:
    """``--exclude-devices``: the devices firmware-touching reads never reach (DESIGN §3)."""
    p.add_argument("--exclude-devices", type=_regex, default=env_default("exclude-devices", None), metavar="REGEX",
                   help="Never send a firmware-touching read (ethtool statistics, module EEPROM, pause and FEC, dcb, "
                        "RDMA port statistics, devlink per instance) to a device whose PCI address or netdev name "
                        "this regular expression matches. "
                        "Only rail PFs and the PFs the udev rules name are ever asked. Default: none excluded.")


def add_lldp_flag(p: argparse.ArgumentParser) -> None:
    """``--lldp``: how the rails' LLDP neighbours are read (DESIGN §3)."""
    from agent.readers.lldp import MODES

    p.add_argument("--lldp", choices=MODES, default=env_default("lldp", None),
                   help="How each rail's LLDP neighbour (the leaf and port it is cabled to) is read: lldpd (lldpcli "
                        "-f json show neighbors details, lldpd running on the node), listen (a passive listener on the "
                        "rail netdevs: AF_PACKET, ethertype 0x88cc, the 01:80:c2:00:00:0e group only, never "
                        "promiscuous, never transmitting; needs CAP_NET_RAW), off. Default: lldpd when lldpcli "
                        "answers, else none.")
