"""Every setting declared once: a program's flags are one table of ``Setting`` records.

A ``Setting`` names its flag, how its text is parsed, its default (the text ``--help`` shows), its help,
its group in ``--help``, the settings field it fills, whether a ``RAILSCOPE_<FLAG>`` variable gives it
(``--links-interval`` -> ``RAILSCOPE_LINKS_INTERVAL``) and how the Helm chart gives it (``chart``: a
value of its own, ``agent.<flagInCamelCase>`` / ``collector.flags.<flagInCamelCase>``; fixed by the chart;
or not in the chart). The tables:

- ``railscope agent``: ``agent.commands.agent.table()`` (its ``--<source>-interval`` flags are made from
  the source registry, ``agent.readers.sources``);
- ``railscope collector``: ``agent.commands.collector.TABLE``;
- the Kubernetes API server flags of rollout, snapshot --cluster and preflight:
  ``agent.commands.kubeapi.API_TABLE``;
- the judging flags of doctor, metrics, preflight, diff, capture, record and the agent:
  ``agent.expectations.TABLE`` (its flags are ``agent.config.EXPECTATION_FLAGS``, which a bundle's
  manifest records).

``add_flags`` puts a table's flags on a parser, ``read`` takes their values back from the parsed
arguments, keyed by settings field, for the program's ``settings_from_args`` to build its dataclass.
``tests/unit/deploy/test_settings_chart.py`` holds the chart's ``values.yaml``, ``values.schema.json``
and the DaemonSet's and Deployment's arguments and environment against the tables.

Adding a flag is one ``Setting`` in its program's table, plus the field it names in the settings
dataclass (``agent.config.AgentSettings``, ``collector.config.CollectorSettings``); with ``chart="value"``
(the default) also the key in ``values.yaml``, with its comment, and the property in
``values.schema.json``: the chart test names whatever is missing. E.g. an agent flag ``--cabling FILE``::

    Setting("--cabling", "The cabling map ... Default: none.", metavar="FILE", group=_SAMPLING,
            field="cabling_file"),

in ``agent.commands.agent.own_table``, ``cabling_file: str | None = None`` in ``AgentSettings`` and
``agent.cabling: null`` in the chart. A judging flag (doctor, preflight, the agent ... judge by it) goes
in ``agent.expectations.TABLE`` instead, named by its ``Expectations`` field: the field, its flag in
``EXPECTATION_FLAGS`` and its manifest validator (``_VALID``) are in ``agent.config``, and the
collector's pods get it too (``railscope.expectationKeys`` in the chart's ``_helpers.tpl``). A source's
``--<name>-interval`` needs nothing: it is made from the source's ``SOURCE``.

The parsers below are the only ones the flags use: one each for durations, counts, sizes, ratios,
regular expressions and true / false words. A size is bytes or a number with a binary unit, ``k``,
``M``, ``G`` or ``T`` in either case, optionally followed by ``i``, ``iB`` or ``B`` (``B`` alone: bytes): ``8M``, ``4G`` and
``64k`` (the collector's defaults) and the Kubernetes memory quantities the chart passes from the pod's
limits (``192Mi``, ``512Mi``) read alike, as powers of 1024. A Kubernetes decimal suffix (``1G`` =
10^9) reads as binary too.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Setting", "add_flags", "bool_word", "count", "cpu_quantity", "duration", "duration_or_zero",
           "env_default", "ratio", "read", "regex", "size"]


def env_default(name: str, default: str | None) -> str | None:
    """Every flag can also come from ``RAILSCOPE_<NAME>`` (flag words upper-cased, ``-`` -> ``_``)."""
    return os.environ.get("RAILSCOPE_" + name.upper().replace("-", "_"), default)


# --- the parsers ---------------------------------------------------------------------------------


def bool_word(text: str) -> bool:
    """true / yes / on / 1 / enabled, or false / no / off / 0 / disabled."""
    low = text.strip().lower()
    if low in ("true", "yes", "on", "1", "enabled"):
        return True
    if low in ("false", "no", "off", "0", "disabled"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def _seconds(text: str) -> float:
    t = text.strip().lower()
    mult = _DURATION_UNITS.get(t[-1:], None)
    try:
        return float(t[:-1]) * mult if mult else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 900, 15m or 1h, got {text!r}") from None


def duration(text: str) -> float:
    """Seconds, or with a unit: 90s, 15m, 1h; above zero."""
    val = _seconds(text)
    if val <= 0:
        raise argparse.ArgumentTypeError("a duration must be positive")
    return val


def duration_or_zero(text: str) -> float:
    """A duration (90s, 15m, 1h), or ``0`` / ``0s`` / ``off`` for none."""
    if text.strip().lower() == "off":
        return 0.0
    val = _seconds(text)
    if val < 0:
        raise argparse.ArgumentTypeError("a duration must not be negative")
    return val


def count(minimum: int) -> Callable[[str], int]:
    """A whole number of at least ``minimum`` (0 where 0 means "no cap" or "none")."""

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"expected at least {minimum}, got {n}")
        return n

    parse.__name__ = "count"
    return parse


def ratio(text: str) -> float:
    """A ratio in (0, 1]."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"expected a ratio in (0, 1], got {x}")
    return x


def cpu_quantity(text: str) -> float:
    """Cores: ``0.5``, ``2``, or millicores ``500m`` (Kubernetes' CPU quantity)."""
    t = str(text).strip()
    try:
        val = float(t[:-1]) / 1000 if t.endswith("m") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected cores such as 0.5 or 500m, got {text!r}") from None
    if not val > 0:
        raise argparse.ArgumentTypeError("a CPU budget must be positive")
    return val


#: as the chart's schema says it (values.schema.json ``definitions.size``)
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(?:([kKmMgGtT])i?[bB]?|[bB])?")
_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def size(text: str) -> int:
    """Bytes, or with a binary unit: 64k, 8M, 4G, 512Mi, 1GiB (see the module's docstring)."""
    m = _SIZE.fullmatch(str(text).strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 8M, 4G or 512Mi, got {text!r}")
    n = int(float(m.group(1)) * (_SIZE_UNITS[m.group(2).lower()] if m.group(2) else 1))
    if n <= 0:
        raise argparse.ArgumentTypeError("a size must be positive")
    return n


def regex(text: str) -> str:
    """A regular expression (kept as text: the settings hold it, the reader compiles it)."""
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"not a valid regular expression: {exc}") from None
    return text


# --- the record and what is made of a table ------------------------------------------------------

#: ``Setting.chart``: a value of its own in ``values.yaml`` (a scalar reaches the program as its
#: variable, a list as the repeated flag); set by the chart itself (``--listen``: the node's IP);
#: written by the chart into a file whose path it gives (``--kernel-table``: ``agent.kernelTable``'s
#: rows); not in the chart at all.
CHART_KINDS = ("value", "fixed", "file", "none")


@dataclass(frozen=True)
class Setting:
    #: the flag, ``--links-interval``
    flag: str
    help: str
    #: the argparse type: text -> value, raising ``argparse.ArgumentTypeError`` with a reason
    type: Callable[[str], Any] | None = None
    #: the default as text (``--help`` shows it; argparse parses it as it parses the flag's value), or a
    #: value (``False`` for a switch); None: no value
    default: Any = None
    #: the title of its group in ``--help``; "" for the parser's own options
    group: str = ""
    #: the settings field it fills (``thresholds.flap_count``: the entry of a nested group); None: the
    #: command reads it itself
    field: str | None = None
    #: "value" (one value), "switch" (no value: given is true; its variable a true / false word),
    #: "list" (repeatable; its variable, if it reads one, a comma or space separated list)
    kind: str = "value"
    #: read from ``RAILSCOPE_<FLAG>`` when the flag is not given
    env: bool = True
    #: how the Helm chart gives it, one of ``CHART_KINDS``
    chart: str = "value"
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    #: applied to the parsed value by ``read`` (a list into a tuple, a comma list split)
    convert: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if not self.flag.startswith("--") or self.kind not in ("value", "switch", "list") \
                or self.chart not in CHART_KINDS:
            raise ValueError(f"bad setting {self.flag}: kind {self.kind!r}, chart {self.chart!r}")

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def variable(self) -> str | None:
        """``RAILSCOPE_<FLAG>``, or None where the flag reads no variable."""
        return "RAILSCOPE_" + self.dest.upper() if self.env else None

    @property
    def helm_key(self) -> str | None:
        """The key of its value in the chart's section (``linksInterval``), or None where it has none."""
        if self.chart not in ("value", "file"):
            return None
        first, *rest = self.flag[2:].split("-")
        return first + "".join(w.capitalize() for w in rest)


def _switch_default(s: Setting) -> Any:
    """A switch's default: True when its variable is a true word, else the declared default (False,
    or None for "no expectation"). A variable that is no true / false word is refused at start."""
    text = os.environ.get(s.variable) if s.variable else None
    if text is None or not text.strip():
        return s.default
    try:
        return True if bool_word(text) else s.default
    except argparse.ArgumentTypeError:
        raise SystemExit(f"{s.variable}: expected true or false, got {text!r}") from None


def add_flags(p: argparse.ArgumentParser, table: Iterable[Setting], *,
              actions: Mapping[str, type[argparse.Action]] | None = None,
              groups: dict[str, Any] | None = None) -> None:
    """The table's flags on ``p``, in table order, each in its group (made at its first setting; pass
    ``groups`` to share them between calls). ``actions`` replaces argparse's action per kind
    ("value", "switch", "list"). A value's default is its variable's text where that is set."""
    groups = {} if groups is None else groups
    for s in table:
        if s.group not in groups:
            groups[s.group] = p.add_argument_group(s.group) if s.group else p
        kw: dict[str, Any] = {"help": s.help}
        if s.metavar:
            kw["metavar"] = s.metavar
        if s.choices:
            kw["choices"] = s.choices
        action = (actions or {}).get(s.kind)
        if s.kind == "switch":
            kw.update(action=action or "store_true", default=_switch_default(s))
        elif s.kind == "list":
            kw.update(action=action or "append", default=None)
            if s.type is not None:
                kw["type"] = s.type
        else:
            if action is not None:
                kw["action"] = action
            if s.type is not None:
                kw["type"] = s.type
            kw["default"] = env_default(s.dest, s.default) if s.env else s.default
        groups[s.group].add_argument(s.flag, **kw)


def value_of(s: Setting, args: argparse.Namespace) -> Any:
    """The setting's parsed value (a list that reads a variable takes it when the flag is not given)."""
    value = getattr(args, s.dest)
    if s.kind == "list" and value is None and s.variable and os.environ.get(s.variable):
        value = os.environ[s.variable].replace(",", " ").split()
    return s.convert(value) if s.convert is not None else value


def read(table: Iterable[Setting], args: argparse.Namespace) -> dict[str, Any]:
    """Settings field -> value, for every setting of ``table`` with a field; ``group.name`` fields
    become ``{"group": {"name": value}}``."""
    out: dict[str, Any] = {}
    for s in table:
        if s.field is None:
            continue
        value = value_of(s, args)
        head, _, name = s.field.partition(".")
        if name:
            out.setdefault(head, {})[name] = value
        else:
            out[head] = value
    return out
