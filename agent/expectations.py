"""What a node is judged against: the expectation flags of doctor, report, diff, metrics and the agent,
and their ``RAILSCOPE_<FLAG>`` variables, parsed into ``agent.config.Expectations``.

``TABLE`` declares them (``agent.settings``): one ``Setting`` per ``Expectations`` field, its flag the
one ``agent.config.EXPECTATION_FLAGS`` records in a bundle's manifest. ``--flap-count``, ``--flap-window``
and ``--storm-ratio`` judge too but are flags of the agent alone (its detector thresholds,
``agent.commands.agent``).

The collector judges stored bundles with the same variables (``expectations_from_env``); it reaches this
module, never the CLI's commands.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from agent.config import EXPECTATION_FLAGS, Expectations
from agent.naming import (
    DEFAULT_NET_TEMPLATES,
    DEFAULT_RDMA_TEMPLATES,
    RAIL_MAP_MAX,
    RailMapError,
    parse_rail_map,
    rail_map_from_pairs,
    validate_template,
)
from agent.settings import Setting, add_flags, bool_word, duration, env_default, value_of

__all__ = [
    "TABLE",
    "add_expectation_flags",
    "env_default",
    "expectations_from_args",
    "expectations_from_env",
    "given_expectations",
    "rail_map_arg",
    "read_cabling",
    "read_rail_map",
    "stated_by_env",
]


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


def _ber(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a ratio such as 2.4e-4, got {text!r}") from None
    if not 0 < x < 1:
        raise argparse.ArgumentTypeError(f"expected a ratio in (0, 1), got {x}")
    return x


def _mtu(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an MTU in bytes, got {text!r}") from None
    if not 68 <= n <= 65535:  # ETH_MIN_MTU .. the largest netdev MTU
        raise argparse.ArgumentTypeError(f"expected an MTU of 68-65535 bytes, got {n}")
    return n


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


class _Append(argparse._AppendAction):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self.dest)


_GROUP = "expectations (nothing is judged unless asked)"


def _e(field: str, help: str, **kw: Any) -> Setting:
    """The setting of the ``Expectations`` field ``field``, under the flag the manifest records it by."""
    return Setting(EXPECTATION_FLAGS[field], help, field=field, group=_GROUP, **kw)


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




def read_rail_map(path: str) -> tuple[tuple[int, str], ...]:
    """``--rail-map FILE`` -> its (rail, PCI function) pairs: one ``RAIL PCI`` per line (``0 0000:0c:00.0``),
    blank lines and ``#`` comments skipped; ``RailMapError`` naming the file and line of what is not one."""
    pairs = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                text = line.split("#", 1)[0].strip()
                if not text:
                    continue
                cells = text.split()
                if len(cells) != 2:
                    raise RailMapError(f"{path}:{n}: expected RAIL PCI, e.g. 0 0000:0c:00.0, got {text[:60]!r}")
                if len(pairs) >= RAIL_MAP_MAX:
                    raise RailMapError(f"{path}: more than {RAIL_MAP_MAX} rails")
                pairs.append((f"{path}:{n}", cells[0], cells[1]))
    except FileNotFoundError:
        raise RailMapError(f"{path}: no such file (a map on the command line is RAIL=PCI pairs, e.g. "
                           "0=0000:0c:00.0,1=0000:8d:00.0)") from None
    except OSError as exc:
        raise RailMapError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RailMapError(f"{path}: not a text file") from None
    try:
        return rail_map_from_pairs(pairs)
    except RailMapError as exc:
        if not pairs:
            raise RailMapError(f"{path}: names no rail (one RAIL PCI per line, e.g. 0 0000:0c:00.0)") from None
        raise exc from None


def rail_map_arg(text: Any) -> Any:
    """``--rail-map``'s type: ``0=0000:0c:00.0,1=0000:8d:00.0`` or the name of a file of ``RAIL PCI`` lines."""
    if not isinstance(text, str):
        return text  # already read (the variable's default)
    if not text.strip():
        raise argparse.ArgumentTypeError("empty: expected RAIL=PCI pairs (0=0000:0c:00.0,1=0000:8d:00.0) or a file")
    try:
        # RAIL=PCI pairs, unless a file of that name exists (a file's name rarely has an "=")
        inline = "=" in text and not os.path.exists(text)
        return parse_rail_map(text) if inline else read_rail_map(text)
    except RailMapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: The judging flags, in ``--help`` order.
TABLE: tuple[Setting, ...] = (
    _e("lossless_prio", "The RoCE lossless priority whose PFC counters are judged. Default: 3.",
       type=_prio, default="3"),
    _e("eswitch_mode", "Report PFs with VFs whose eswitch is in another mode. Default: no expectation.",
       type=_one_of("switchdev", "legacy"), choices=("switchdev", "legacy")),
    _e("esw_multiport", "Report NICs whose esw_multiport (LAG) is not this value (true/false). "
       "Default: no expectation; a torn value across the PFs of one NIC is always reported.", type=bool_word),
    _e("rdma_netns", "Report an RDMA netns mode other than this. Default: no expectation (a node that asks "
       "for exclusive mode in modprobe.d or the cmdline but runs shared is always reported).",
       type=_one_of("shared", "exclusive"), choices=("shared", "exclusive")),
    _e("rails", "Expect rails 0..N-1, named by the first net template with only %%rail_id%%. Where udev "
       "naming rules exist they win for the rails they name, and the rails of 0..N-1 they do not "
       "name are expected too (a note says which won). Default: the rails the udev rules name, "
       "else none.", type=int),
    # the chart passes a list value as the repeated flag: the template flags read no variable
    _e("net_templates", "Netdev name template in the operator's syntax, e.g. net_rail%%rail_id%%. Repeatable. "
       f"Default: {', '.join(DEFAULT_NET_TEMPLATES).replace('%', '%%')} tried in order.",
       type=_template, kind="list", env=False, convert=lambda v: tuple(v) if v else DEFAULT_NET_TEMPLATES),
    _e("rdma_templates", "RDMA device name template. Repeatable. Default: "
       f"{', '.join(DEFAULT_RDMA_TEMPLATES).replace('%', '%%')}.",
       type=_template, kind="list", env=False, convert=lambda v: tuple(v) if v else DEFAULT_RDMA_TEMPLATES),
    _e("event_window_s", "Agent events this long before the capture time become findings. Default: 15m.",
       type=duration, default="15m"),
    # The two tiers of LinkDegrading (docs/design.md §4): a warning well below the FEC's limit, so a rail is seen
    # degrading before it costs GPU time, and critical at the limit itself.
    _e("ber_warning", "LinkDegrading: a pre-FEC corrected-bit ratio (rx_corrected_bits_phy / rx_bits_phy) above "
       "this over --ber-window is a warning: the link degrades while FEC still corrects it. "
       "Default: 1e-5, 24x below the FEC limit (--ber-critical): the least strict link-degrade "
       "BER threshold Junos accepts on 400GbE PAM4 ports (Junos CLI Reference, "
       "link-degrade-monitor thresholds: 1E-5 to 1E-10).", type=_ber, default="1e-5"),
    _e("ber_critical", "LinkDegrading: a corrected-bit ratio at or above this over --ber-window is critical: "
       "FEC is at its limit and frames are about to be lost. Default: 2.4e-4, the BER IEEE 802.3 "
       "(802.3bs / 802.3cd PAM4 PMDs) specifies at the input of the RS(544,514) KP4 FEC.",
       type=_ber, default="2.4e-4"),
    _e("ber_window_s", "LinkDegrading: the window the corrected-bit ratio and symbol errors are measured over "
       "(two samples of the agent, the flight recorder's span). Default: 5m.", type=duration, default="5m"),
    # the chart writes agent.kernelTable's rows into a ConfigMap and gives the file
    _e("kernel_table_file", "A JSON file of extra validated-kernel rows for DriverKernelUnvalidated, added to the "
       "shipped table. Default: the shipped table only.", metavar="FILE", chart="file"),
    # the readiness codes (MtuMismatch, DriverNotDoca, RailRdmaMissing)
    _e("mtu", "Report rails whose MTU is not this many bytes (e.g. 9000 or 4200). Default: no value; "
       "a rail whose MTU differs from the most common MTU of the node's rails is reported.", type=_mtu),
    _e("driver", "doca: report rail PFs that run the inbox mlx5 driver (the DOCA driver container "
       "restores the inbox driver when its pod ends). Default: no expectation.",
       type=_one_of("doca"), choices=("doca",)),
    # a flag that states an expectation by being there: a false word in its variable is no expectation
    # (never "expect none")
    _e("rdma", "Report every rail without an RDMA device (RailRdmaMissing). Default: only rails whose udev "
       "rules name an RDMA device, or whose PF is mlx5 with RoCE enabled (devlink param "
       "enable_roce), are expected to have one.", kind="switch", convert=lambda v: True if v else None),
    # the map is read when the flag is parsed (its rows are the expectation a bundle records: its own
    # node's); the chart writes agent.cabling's rows into a ConfigMap and gives the file
    _e("cabling", "RailPeerMismatch: a CSV cabling map, one line per rail: node,rail,leaf,port (rail: its number "
       "or its netdev name; leaf: the switch's LLDP system name or chassis ID; port: its LLDP port ID "
       "or description). A rail whose LLDP neighbour is another leaf or port is reported. "
       "Default: no map.", type=_cabling_file, metavar="FILE", chart="file", convert=lambda v: v or None),
    # read when the flag is parsed: the pairs, not the file's name, are what a bundle records
    _e("rail_map", "The rails by PCI function, for nodes whose netdevs keep names no template matches "
       "(enp12s0f0np0, ens1f0np0): RAIL=PCI pairs, comma separated (0=0000:0c:00.0,1=0000:8d:00.0), or a file "
       "of one 'RAIL PCI' line per rail. The uplink of each function is the rail, whatever its name; a udev rule "
       "naming the function still says what the name should be. The map wins over the udev rules and "
       "--rails for the rails it names (a note says where they disagree). Default: no map.",
       type=rail_map_arg, metavar="MAP|FILE", convert=lambda v: v or None),
)

#: the flags that remember being given (``given_expectations``)
_TRACKED = {"value": _Store, "switch": _StoreTrue, "list": _Append}


def given_expectations(args: argparse.Namespace) -> dict[str, str]:
    """Expectations field -> where the command line stated it: the flag (``--rails``) or its variable
    (``RAILSCOPE_RAILS``). A field absent here is the flag's default."""
    typed = getattr(args, _GIVEN, set())
    silent = {s.dest for s in TABLE if not s.env}
    out = {}
    for name, flag in EXPECTATION_FLAGS.items():
        dest = flag.lstrip("-").replace("-", "_")
        var = "RAILSCOPE_" + dest.upper()
        if dest in typed:
            out[name] = flag
        elif os.environ.get(var) and hasattr(args, dest) and dest not in silent:
            out[name] = var
    return out


def _env_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(add_help=False)
    add_expectation_flags(p)
    return p.parse_args([])


def stated_by_env() -> dict[str, str]:
    """The expectations the ``RAILSCOPE_<FLAG>`` variables state (the collector's command line): they
    override a bundle's recorded values, the others yield to them (docs/design.md §2)."""
    return given_expectations(_env_args())


def add_expectation_flags(p: argparse.ArgumentParser, *, templates: bool = True) -> None:
    """The judging flags; ``templates=False`` where the command declares ``--net-template`` itself."""
    add_flags(p, (s for s in TABLE if templates or s.kind != "list"), actions=_TRACKED)


def expectations_from_args(args: argparse.Namespace) -> Expectations:
    """The ``Expectations`` of the parsed judging flags (a flag the parser lacks keeps its default)."""
    return Expectations(**{s.field: value_of(s, args) for s in TABLE if s.field and hasattr(args, s.dest)})


def expectations_from_env() -> Expectations:
    """The expectations of the ``RAILSCOPE_<FLAG>`` variables alone (``RAILSCOPE_RAILS=8``,
    ``RAILSCOPE_EXPECT_ESWITCH_MODE=switchdev``), as the flags' defaults read them; else nothing expected."""
    return expectations_from_args(_env_args())
