"""What a node is judged against: the expectation flags of doctor, report, diff, metrics and the agent,
and their ``RAILSCOPE_<FLAG>`` variables, parsed into ``agent.config.Expectations``.

The collector judges stored bundles with the same variables (``expectations_from_env``); it reaches this
module, never the CLI's commands.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from agent.config import EXPECTATION_FLAGS, Expectations
from agent.naming import DEFAULT_NET_TEMPLATES, DEFAULT_RDMA_TEMPLATES, validate_template

__all__ = ["add_expectation_flags", "add_template_flags", "env_default", "expectations_from_args",
           "expectations_from_env", "given_expectations", "read_cabling", "stated_by_env"]


def env_default(name: str, default: str | None) -> str | None:
    """Every flag can also come from ``RAILSCOPE_<NAME>`` (flag words upper-cased, ``-`` -> ``_``)."""
    return os.environ.get("RAILSCOPE_" + name.upper().replace("-", "_"), default)


def _bool_word(text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "yes", "on", "1", "enabled"):
        return True
    if low in ("false", "no", "off", "0", "disabled"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _prio(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a priority 0-7, got {text!r}") from None
    if not 0 <= n <= 7:
        raise argparse.ArgumentTypeError(f"expected a priority 0-7, got {n}")
    return n


def _one_of(*words: str) -> Any:
    """A ``choices`` flag's type: argparse checks a typed value against ``choices`` but never a default,
    so without it a ``RAILSCOPE_*`` variable that is not one of the words would silently judge nothing
    (and be recorded into a bundle's manifest). argparse does run a string default through ``type``."""

    def check(text: str) -> str:
        if text not in words:
            raise argparse.ArgumentTypeError(f"expected {' or '.join(words)}, got {text!r}")
        return text

    return check


def _template(text: str) -> str:
    why = validate_template(text)
    if why:
        raise argparse.ArgumentTypeError(why)
    return text


def _duration(text: str) -> float:
    """Seconds, or with a unit: 90s, 15m, 1h."""
    t = text.strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        val = float(t[:-1]) * mult if mult else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 900, 15m or 1h, got {text!r}") from None
    if val <= 0:
        raise argparse.ArgumentTypeError("a duration must be positive")
    return val


def _ber(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a ratio such as 2.4e-4, got {text!r}") from None
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"expected a ratio in (0, 1), got {x}")
    return x


#: the namespace attribute naming the expectation flags given on the command line
_GIVEN = "_expectations_given"


def _mark(namespace: argparse.Namespace, dest: str) -> None:
    given = getattr(namespace, _GIVEN, None)
    if given is None:
        given = set()
        setattr(namespace, _GIVEN, given)
    given.add(dest)


class _Store(argparse._StoreAction):
    """``store`` that remembers the flag was given: a bundle's recorded value yields only to a flag
    the operator typed, never to a flag's default."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


class _StoreTrue(argparse._StoreConstAction):
    """``store_true`` that remembers the flag was given (as ``_Store``)."""

    def __init__(self, option_strings: list[str], dest: str, default: Any = None, help: str | None = None) -> None:
        super().__init__(option_strings, dest, const=True, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


def _expect_true(text: str | None) -> bool | None:
    """A flag that states an expectation by being there (``--expect-rdma``), from its variable: a true
    word is the flag, a false word or nothing is no expectation (never "expect none")."""
    if text is None or not text.strip():
        return None
    try:
        return True if _bool_word(text) else None
    except argparse.ArgumentTypeError:
        raise SystemExit(f"RAILSCOPE_EXPECT_RDMA: expected true or false, got {text!r}") from None


class _Append(argparse._AppendAction):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


def given_expectations(args: argparse.Namespace) -> dict[str, str]:
    """Expectations field -> where the command line stated it: the flag (``--rails``) or its variable
    (``RAILSCOPE_RAILS``). A field absent here is the flag's default."""
    typed = getattr(args, _GIVEN, set())
    out = {}
    for name, flag in EXPECTATION_FLAGS.items():
        dest = flag.lstrip("-").replace("-", "_")
        var = "RAILSCOPE_" + dest.upper()
        if dest in typed:
            out[name] = flag
        elif os.environ.get(var) and hasattr(args, dest) and dest not in ("net_template", "rdma_template"):
            out[name] = var  # the template flags read no variable
    return out


def stated_by_env() -> dict[str, str]:
    """The expectations the ``RAILSCOPE_<FLAG>`` variables state (the collector's command line): they
    override a bundle's recorded values, the others yield to them (DESIGN §2)."""
    p = argparse.ArgumentParser(add_help=False)
    add_expectation_flags(p)
    return given_expectations(p.parse_args([]))


def add_template_flags(g: Any) -> None:
    """``--net-template`` / ``--rdma-template``: which names are rails (the readers' and the checks')."""
    g.add_argument("--net-template", type=_template, action=_Append, default=None,
                   help="Netdev name template in the operator's syntax, e.g. net_rail%%rail_id%%. Repeatable. "
                        f"Default: {', '.join(DEFAULT_NET_TEMPLATES).replace('%', '%%')} tried in order.")
    g.add_argument("--rdma-template", type=_template, action=_Append, default=None,
                   help="RDMA device name template. Repeatable. Default: "
                        f"{', '.join(DEFAULT_RDMA_TEMPLATES).replace('%', '%%')}.")


def add_expectation_flags(p: argparse.ArgumentParser, *, templates: bool = True) -> None:
    """The judging flags; ``templates=False`` where the command declares ``--net-template`` itself."""
    g = p.add_argument_group("expectations (nothing is judged unless asked)")
    g.add_argument("--lossless-prio", action=_Store, type=_prio, default=int(env_default("lossless-prio", "3") or 3),
                   help="The RoCE lossless priority whose PFC counters are judged. Default: 3.")
    g.add_argument("--expect-eswitch-mode", action=_Store, choices=("switchdev", "legacy"),
                   type=_one_of("switchdev", "legacy"),
                   default=env_default("expect-eswitch-mode", None),
                   help="Report PFs with VFs whose eswitch is in another mode. Default: no expectation.")
    g.add_argument("--expect-esw-multiport", action=_Store, type=_bool_word, default=env_default("expect-esw-multiport", None),
                   help="Report NICs whose esw_multiport (LAG) is not this value (true/false). "
                        "Default: no expectation; a torn value across the PFs of one NIC is always reported.")
    g.add_argument("--expect-rdma-netns", action=_Store, choices=("shared", "exclusive"),
                   type=_one_of("shared", "exclusive"),
                   default=env_default("expect-rdma-netns", None),
                   help="Report an RDMA netns mode other than this. Default: no expectation (a node that asks "
                        "for exclusive mode in modprobe.d or the cmdline but runs shared is always reported).")
    g.add_argument("--rails", action=_Store, type=int, default=env_default("rails", None),
                   help="Expect rails 0..N-1, named by the first net template with only %%rail_id%%. Where udev "
                        "naming rules exist they win for the rails they name, and the rails of 0..N-1 they do not "
                        "name are expected too (a note says which won). Default: the rails the udev rules name, "
                        "else none.")
    if templates:
        add_template_flags(g)
    g.add_argument("--event-window", action=_Store, type=_duration, default=_duration(env_default("event-window", "15m") or "15m"),
                   help="Agent events this long before the capture time become findings. Default: 15m.")
    # The two tiers of LinkDegrading (DESIGN §4): a warning well below the FEC's limit, so a rail is seen
    # degrading before it costs GPU time, and critical at the limit itself.
    g.add_argument("--ber-warning", action=_Store, type=_ber,
                   default=_ber(env_default("ber-warning", "1e-5") or "1e-5"),
                   help="LinkDegrading: a pre-FEC corrected-bit ratio (rx_corrected_bits_phy / rx_bits_phy) above "
                        "this over --ber-window is a warning: the link degrades while FEC still corrects it. "
                        "Default: 1e-5, 24x below the FEC limit (--ber-critical): the least strict link-degrade "
                        "BER threshold Junos accepts on 400GbE PAM4 ports (Junos CLI Reference, "
                        "link-degrade-monitor thresholds: 1E-5 to 1E-10).")
    g.add_argument("--ber-critical", action=_Store, type=_ber,
                   default=_ber(env_default("ber-critical", "2.4e-4") or "2.4e-4"),
                   help="LinkDegrading: a corrected-bit ratio at or above this over --ber-window is critical: "
                        "FEC is at its limit and frames are about to be lost. Default: 2.4e-4, the BER IEEE 802.3 "
                        "(802.3bs / 802.3cd PAM4 PMDs) specifies at the input of the RS(544,514) KP4 FEC.")
    g.add_argument("--ber-window", action=_Store, type=_duration,
                   default=_duration(env_default("ber-window", "5m") or "5m"),
                   help="LinkDegrading: the window the corrected-bit ratio and symbol errors are measured over "
                        "(two samples of the agent, the flight recorder's span). Default: 5m.")
    g.add_argument("--kernel-table", action=_Store, default=env_default("kernel-table", None), metavar="FILE",
                   help="A JSON file of extra validated-kernel rows for DriverKernelUnvalidated, added to the "
                        "shipped table. Default: the shipped table only.")
    add_readiness_flags(g)
    g.add_argument("--cabling", action=_Store, type=_cabling_file, default=_env_cabling(), metavar="FILE",
                   help="RailPeerMismatch: a CSV cabling map, one line per rail: node,rail,leaf,port (rail: its number "
                        "or its netdev name; leaf: the switch's LLDP system name or chassis ID; port: its LLDP port ID "
                        "or description). A rail whose LLDP neighbour is another leaf or port is reported. "
                        "Default: no map.")


def read_cabling(path: str) -> tuple[tuple[str, str, str, str], ...]:
    """``--cabling FILE`` -> its rows; ValueError naming the file and line of what is not a row. A header line
    (``node,rail,leaf,port``), blank lines and ``#`` comments are skipped."""
    import csv

    from agent.config import CABLING_FIELD, CABLING_ROWS

    rows: list[tuple[str, str, str, str]] = []
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            for n, row in enumerate(csv.reader(fh), 1):
                cells = [c.strip() for c in row]
                if not cells or not any(cells) or cells[0].startswith("#"):
                    continue
                if [c.lower() for c in cells] == ["node", "rail", "leaf", "port"]:
                    continue
                if len(cells) != 4 or not all(0 < len(c) <= CABLING_FIELD for c in cells):
                    raise ValueError(f"{path}:{n}: expected node,rail,leaf,port (each 1-{CABLING_FIELD} characters)")
                if len(rows) >= CABLING_ROWS:
                    raise ValueError(f"{path}: more than {CABLING_ROWS} rows")
                rows.append((cells[0], cells[1], cells[2], cells[3]))
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path}: not a CSV file of text ({exc})") from None
    return tuple(rows)


def _cabling_file(text: Any) -> Any:
    if not isinstance(text, str):
        return text  # already read (the variable's default)
    try:
        return read_cabling(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _env_cabling() -> tuple[tuple[str, str, str, str], ...] | None:
    path = env_default("cabling", None)
    if not path:
        return None
    try:
        return read_cabling(path)
    except ValueError as exc:
        raise SystemExit(f"RAILSCOPE_CABLING: {exc}") from None


def _mtu(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an MTU in bytes, got {text!r}") from None
    if not 68 <= n <= 65535:  # ETH_MIN_MTU .. the largest netdev MTU
        raise argparse.ArgumentTypeError(f"expected an MTU of 68-65535 bytes, got {n}")
    return n


def add_readiness_flags(g: argparse._ArgumentGroup) -> None:
    """The expectations of the readiness codes (MtuMismatch, DriverNotDoca, RailRdmaMissing)."""
    g.add_argument("--expect-mtu", action=_Store, type=_mtu, default=env_default("expect-mtu", None),
                   help="Report rails whose MTU is not this many bytes (e.g. 9000 or 4200). Default: no value; "
                        "a rail whose MTU differs from the most common MTU of the node's rails is reported.")
    g.add_argument("--expect-driver", action=_Store, choices=("doca",), type=_one_of("doca"),
                   default=env_default("expect-driver", None),
                   help="doca: report rail PFs that run the inbox mlx5 driver (the DOCA driver container "
                        "restores the inbox driver when its pod ends). Default: no expectation.")
    g.add_argument("--expect-rdma", action=_StoreTrue, default=_expect_true(env_default("expect-rdma", None)),
                   help="Report every rail without an RDMA device (RailRdmaMissing). Default: only rails whose udev "
                        "rules name an RDMA device, or whose PF is mlx5 with RoCE enabled (devlink param "
                        "enable_roce), are expected to have one.")


def expectations_from_args(args: argparse.Namespace) -> Expectations:
    rails = args.rails
    if isinstance(rails, str):
        rails = int(rails)
    esw = args.expect_esw_multiport
    if isinstance(esw, str):
        esw = _bool_word(esw)
    return Expectations(
        lossless_prio=args.lossless_prio,
        eswitch_mode=args.expect_eswitch_mode,
        esw_multiport=esw,
        rdma_netns=args.expect_rdma_netns,
        rails=rails,
        net_templates=tuple(args.net_template) if args.net_template else DEFAULT_NET_TEMPLATES,
        rdma_templates=tuple(args.rdma_template) if args.rdma_template else DEFAULT_RDMA_TEMPLATES,
        event_window_s=args.event_window,
        kernel_table_file=args.kernel_table,
        ber_warning=getattr(args, "ber_warning", 1e-5),
        ber_critical=getattr(args, "ber_critical", 2.4e-4),
        ber_window_s=getattr(args, "ber_window", 300.0),
        mtu=int(args.expect_mtu) if getattr(args, "expect_mtu", None) is not None else None,
        driver=getattr(args, "expect_driver", None),
        rdma=True if getattr(args, "expect_rdma", None) else None,
        cabling=getattr(args, "cabling", None) or None,
    )


def expectations_from_env() -> Expectations:
    """The expectations of the ``RAILSCOPE_<FLAG>`` variables alone (``RAILSCOPE_RAILS=8``,
    ``RAILSCOPE_EXPECT_ESWITCH_MODE=switchdev``), as the flags' defaults read them; else nothing expected."""
    p = argparse.ArgumentParser(add_help=False)
    add_expectation_flags(p)
    return expectations_from_args(p.parse_args([]))
