"""optics: the rails' transceivers, ``ethtool -m <rail netdev>`` (module EEPROM), as text or JSON.

On mlx5 a module read is a firmware access (the MCIA register): it runs on the devlink interval, in
the counters' thread after the statistics (one firmware read at a time per PF), for rails only.

Two forms of the same read, parsed into the same ``ModuleOptics``:

- text, what every ethtool prints: the same line names for SFF-8636 (QSFP28 / QSFP56) and CMIS
  (QSFP-DD / OSFP) modules (ethtool ``qsfp.c``, ``cmis.c`` and the shared ``sff-common.c``), the
  module's own thresholds as ``… warning threshold`` / ``… alarm threshold`` lines;
- ``ethtool --json -m``, from ethtool 6.14 on (the first release whose ``-m`` accepts ``--json``:
  ethtool commits c0c0036 "cmis: Enable JSON output support in CMIS modules" and 45591e3 "qsfp: Enable
  JSON output support for SFF8636 modules", NEWS "Version 6.14 - April 7, 2025"). Before it, ethtool
  refuses the option ("ethtool: bad command line argument(s)").

Which form runs is decided once per host (the daemon keeps one host per source: once per process) from
``ethtool --version``, a query of the tool that reaches no device and goes through the host like every
command, so a bundle records it and replays the same choice. When the installed ethtool refuses
``--json -m`` all the same (a build that says 6.14 but refuses it, or a kernel without the netlink
module-EEPROM request, where ethtool falls back to an ioctl that cannot print JSON: "parameter '--json'
can be used only with netlink"), the read of that rail is made again as text at once, and the text form
is kept for the rest of the process: a refusal is a command-line answer, no module read, so no firmware
read is made twice. A node image replays whichever form it recorded.

A module that prints no threshold is never judged by value (docs/design.md §4 "Optics thresholds"); thresholds
in a shape not understood are named in the notes ("not available"), not taken for none. The module's
warning / alarm flags, its per-lane loss-of-signal / Tx fault status and its CMIS Module State are read
too (docs/design.md §4 "The module's flags lead").
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.config import ReadConfig
from agent.host import CmdResult, Host
from agent.model import ModuleOptics, OpticsLane
from agent.readers.common import Notes, parse_json
from agent.readers.scope import pci_of_links, touchable_netdevs
from agent.readers.source import Context, Part, Source, part
from agent.safejson import Pairs

__all__ = [
    "ARGV",
    "JSON_ARGV",
    "JSON_SINCE",
    "MAX_JSON_BYTES",
    "SOURCE",
    "VERSION_ARGV",
    "parse_ethtool_m",
    "parse_ethtool_m_json",
    "parse_ethtool_version",
    "read_optics",
    "refuses_json",
    "reset_forms",
    "uses_json",
]

#: ``ethtool -m <netdev>``
ARGV = ("ethtool", "-m")
#: ``ethtool --json -m <netdev>`` (``--json`` is a global option: before the command)
JSON_ARGV = ("ethtool", "--json", "-m")
#: ``ethtool --version``: the tool's own version, no device
VERSION_ARGV = ("ethtool", "--version")
#: the first ethtool release whose ``-m`` accepts ``--json`` (ethtool.c v6.14: ``.json = true`` on
#: "-m|--dump-module-eeprom|--module-info"; v6.11 has none)
JSON_SINCE = (6, 14)
#: a module's JSON is a few KiB (SFF-8636 about 4 KiB; CMIS with 4 banks about 12 KiB): an answer
#: past this is no module's, and is not parsed
MAX_JSON_BYTES = 256 << 10

_LINE = re.compile(r"\A\s*(?P<key>[^:]+?)\s*:\s*(?P<val>.*?)\s*\Z")
_CHANNEL = re.compile(r"\A(?P<what>.+?)\s*\((?:Channel|Chan)\s*(?P<n>\d{1,2})\)\Z")
_NUM = re.compile(r"\A(-?\d+(?:\.\d+)?)\s*(mA|mW|V|degrees C)\b")

#: per-lane monitor line -> OpticsLane field (SFF-8636, CMIS; SFF-8472 prints one lane without "(Channel N)")
_LANE_KEYS = {
    "laser tx bias current": "tx_bias_ma",
    "laser bias current": "tx_bias_ma",
    "transmit avg optical power": "tx_power_mw",
    "laser output power": "tx_power_mw",
    "rcvr signal avg optical power": "rx_power_mw",
    "receiver signal average optical power": "rx_power_mw",
    "receiver signal oma": "rx_power_mw",
}

#: threshold line stem -> quantity
_THRESHOLD_STEMS = {
    "laser bias current": "tx_bias_ma",
    "laser output power": "tx_power_mw",
    "laser tx power": "tx_power_mw",
    "module temperature": "temperature_c",
    "module voltage": "voltage_v",
    "laser rx power": "rx_power_mw",
}
_THRESHOLD = re.compile(r"\A(?P<stem>.+?) (?P<side>high|low) (?P<level>alarm|warning) threshold\Z")

#: warning / alarm flag stem -> quantity: SFF-8636 and CMIS print "Laser bias current high alarm   (Chan 1)"
#: (6.11+ "Laser bias current high alarm (Chan 1)"), "Laser tx power ...", "Laser rx power ...",
#: "Module temperature high alarm"; SFF-8472 one lane without a channel, its TX "Laser output power ..."
#: (ethtool module-common.c ``module_aw_chan_flags`` / ``module_aw_mod_flags``, sfpdiag.c ``sff8472_aw_flags``)
_FLAG_STEMS = {
    "laser bias current": "tx_bias_ma",
    "laser tx power": "tx_power_mw",
    "laser output power": "tx_power_mw",
    "laser rx power": "rx_power_mw",
    "module temperature": "temperature_c",
    "module voltage": "voltage_v",
}
_FLAG = re.compile(r"\A(?P<stem>laser bias current|laser tx power|laser output power|laser rx power|module temperature"
                   r"|module voltage) (?P<side>high|low) (?P<level>alarm|warning)\Z")
_MODULE_QUANTITIES = ("temperature_c", "voltage_v")
#: per-lane status lines (ethtool 6.5+, "cmis: report LOL / LOS / Tx Fault", "sff-8636: report LOL / LOS /
#: Tx Fault"): "None" when no lane has it, else "[ Yes, No, ... ]" one entry a lane
_STATUS = {"rx loss of signal": "rx_los", "tx loss of signal": "tx_los", "tx fault": "tx_fault"}
#: SFF-8024 identifiers of CMIS modules (QSFP-DD, OSFP, DSFP, QSFP+ with CMIS, SFP-DD, SFP+ with CMIS, ...)
_CMIS_IDS = frozenset({0x18, 0x19, 0x1A, 0x1B, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25})
_IDENT = re.compile(r"\A0x([0-9a-fA-F]{2})\b")
_STATE = re.compile(r"\((?P<name>[^()]{1,40})\)\s*\Z")

#: What ethtool prints on stderr when it refuses ``--json -m``: before 6.14 (ethtool.c
#: ``exit_bad_args``; 6.10+ adds "JSON output not available for this subcommand"), and from 6.14 when
#: the read falls back to the ioctl (``exit_nlonly_param``: the kernel has no netlink module-EEPROM
#: request, before Linux 5.13)
_JSON_REFUSED = ("bad command line argument", "JSON output not available", "can be used only with netlink")
_MAX_LANES = 32  # CMIS: 4 banks of 8 (cmis.c CMIS_MAX_CHANNEL_NUM)
#: notes of one module's unread parts kept at most (an answer of a thousand odd keys is one bad answer)
_MAX_NOTES = 8
_VERSION = re.compile(r"\bethtool version (\d+)\.(\d+)(?:\.(\d+))?")


def _number(val: str) -> float | None:
    m = _NUM.match(val)
    if not m:
        return None
    x = float(m.group(1))
    return x if math.isfinite(x) else None


def _lane_status(val: str) -> list[bool] | None:
    """``None`` -> [] (no lane has it); ``[ Yes, No, ... ]`` -> one bool a lane; anything else None."""
    v = val.strip()
    if v.lower() == "none":
        return []
    if not (v.startswith("[") and v.endswith("]")):
        return None
    out: list[bool] = []
    for piece in v[1:-1].split(",")[:_MAX_LANES]:
        word = piece.strip().lower()
        if word not in ("yes", "no"):
            return None
        out.append(word == "yes")
    return out


def parse_ethtool_m(text: str, netdev: str) -> ModuleOptics:
    """``ethtool -m <if>`` text -> monitors, flags and lane status per lane and the module's thresholds.

    Sample (SFF-8636, a Finisar FTLC1152RGPL6-FB QSFP28 in a ConnectX-4 port, ethtool 5.x; published in
    github.com/robinchrist/100G-CWDM4-docs, README, cut)::

        Identifier                                : 0x11 (QSFP28)
        Vendor name                               : FINISAR CORP.
        Vendor PN                                 : FTLC1152RGPL6-FB
        Module temperature                        : 33.76 degrees C / 92.77 degrees F
        Module voltage                            : 3.2505 V
        Alarm/warning flags implemented           : Yes
        Laser tx bias current (Channel 1)         : 42.068 mA
        Transmit avg optical power (Channel 1)    : 1.0778 mW / 0.33 dBm
        Rcvr signal avg optical power(Channel 1)  : 0.9969 mW / -0.01 dBm
        Laser bias current low alarm    (Chan 1)  : Off
        Laser rx power low warning  (Channel 1)   : Off
        Laser bias current high alarm threshold   : 55.000 mA
        Module temperature high alarm threshold   : 60.00 degrees C / 140.00 degrees F
        Laser rx power low warning threshold      : 0.0631 mW / -12.00 dBm

    CMIS (QSFP-DD / OSFP) prints ``Rcvr signal avg optical power (Channel 1) : 1.1351 mW / 0.55 dBm``
    with a space before the parenthesis and 8 lanes per bank whatever the module uses (ethtool cmis.c),
    ``Module State : 0x03 (ModuleReady)``, and from ethtool 6.5 ``Rx loss of signal : [ Yes, ... ]``
    (or ``None``). Raises ValueError when the text is no module dump (an error message, an empty answer).
    """
    head: dict[str, str] = {}
    lanes: dict[int, dict[str, float]] = {}
    lane_flags: dict[int, list[tuple[str, str, bool]]] = {}
    mod_flags: list[tuple[str, str, bool]] = []
    status: dict[str, list[bool]] = {}
    thresholds: list[tuple[str, str, float]] = []
    temperature = voltage = None
    implemented: bool | None = None
    state: str | None = None
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        key, val = m.group("key"), m.group("val")
        low = " ".join(key.lower().split())
        t = _THRESHOLD.match(low)
        if t:
            quantity = _THRESHOLD_STEMS.get(t.group("stem"))
            x = _number(val)
            if quantity and x is not None:
                thresholds.append((quantity, f"{t.group('side')}_{t.group('level')}", x))
            continue
        c = _CHANNEL.match(key)
        what, lane = (" ".join(c.group("what").lower().split()), int(c.group("n"))) if c else (low, 1)
        f = _FLAG.match(what)
        if f and val.lower() in ("on", "off"):
            quantity = _FLAG_STEMS[f.group("stem")]
            flag = (quantity, f"{f.group('side')}_{f.group('level')}", val.lower() == "on")
            if quantity in _MODULE_QUANTITIES and c is None:
                mod_flags.append(flag)
            elif quantity not in _MODULE_QUANTITIES and 1 <= lane <= _MAX_LANES:
                lane_flags.setdefault(lane, []).append(flag)
            continue
        field = _LANE_KEYS.get(what)
        if field is not None and (c is not None or not what.startswith(("laser tx power", "laser rx power"))):
            x = _number(val)
            if x is not None and 1 <= lane <= _MAX_LANES:
                lanes.setdefault(lane, {})[field] = x
            continue
        if low in _STATUS and c is None:
            got = _lane_status(val)
            if got is not None:
                status[_STATUS[low]] = got
        elif low == "alarm/warning flags implemented":
            implemented = {"yes": True, "no": False}.get(val.lower())
        elif low == "module state" and state is None:
            sm = _STATE.search(val)
            state = sm.group("name") if sm else None
        elif low == "module temperature":
            temperature = _number(val)
        elif low == "module voltage":
            voltage = _number(val)
        elif low in ("identifier", "vendor name", "vendor pn", "vendor sn") and low not in head:
            head[low] = val[:80]
    if "identifier" not in head and not lanes and temperature is None:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise ValueError(f"ethtool -m {netdev}: not a module dump ({first[:80]!r})" if first
                         else f"ethtool -m {netdev}: empty output")
    ident = head.get("identifier")
    im = _IDENT.match(ident or "")
    cmis = state is not None or (im is not None and int(im.group(1), 16) in _CMIS_IDS)
    return _module(netdev, ident, head.get("vendor name"), head.get("vendor pn"), head.get("vendor sn"),
                   temperature, voltage, lanes, lane_flags, mod_flags, status, thresholds, implemented, cmis,
                   state, [])


def _module(netdev: str, identifier: str | None, vendor: str | None, part: str | None, serial: str | None,
            temperature: float | None, voltage: float | None, lanes: dict[int, dict[str, float]],
            lane_flags: dict[int, list[tuple[str, str, bool]]], mod_flags: list[tuple[str, str, bool]],
            status: dict[str, list[bool]], thresholds: list[tuple[str, str, float]], implemented: bool | None,
            cmis: bool, state: str | None, unavailable: list[str]) -> ModuleOptics:
    """One record of what either form printed."""
    if implemented is False:
        # SFF-8636 / SFF-8472 "Alarm/warning flags implemented: No": the flag bits mean nothing
        lane_flags, mod_flags = {}, []
    # A quantity whose thresholds are all 0 has none programmed (an SR4 QSFP+ prints "Laser output power
    # high alarm threshold : 0.0000 mW" for all four): against them every reading would be out of range.
    by_quantity: dict[str, list[float]] = {}
    for q, _, v in thresholds:
        by_quantity.setdefault(q, []).append(v)
    zero = {q for q, vs in by_quantity.items() if len(vs) >= 2 and all(v == 0 for v in vs)}
    for q in sorted(zero):
        unavailable.append(f"the module's {q} thresholds are all 0 (none programmed): that quantity is not judged")
    kept = tuple(dict.fromkeys(t for t in thresholds if t[0] not in zero))
    numbers = set(lanes) | set(lane_flags)
    records = []
    for n in sorted(numbers):
        st = {name: (values[n - 1] if n <= len(values) else False) for name, values in status.items()}
        records.append(OpticsLane(lane=n, **lanes.get(n, {}), flags=tuple(dict.fromkeys(lane_flags.get(n, ()))),
                                  rx_los=st.get("rx_los"), tx_los=st.get("tx_los"), tx_fault=st.get("tx_fault")))
    return ModuleOptics(
        netdev=netdev, identifier=identifier, vendor=vendor, part=part, serial=serial, temperature_c=temperature,
        voltage_v=voltage, lanes=tuple(records), thresholds=kept,
        flags_reported=bool(lane_flags or mod_flags), lane_flags_exact=not cmis,
        flags=tuple(dict.fromkeys(mod_flags)), module_state=state,
        unavailable=tuple(dict.fromkeys(unavailable))[:_MAX_NOTES])


# -- the JSON form ------------------------------------------------------------------------------------

#: JSON key -> (quantity, decimals). ethtool's JSON prints each reading with ``%g`` (json_writer.c
#: ``jsonw_float``: six significant digits) where the text prints ``%.2f`` degrees C, ``%.4f`` V,
#: ``%.3f`` mA and ``%.4f`` mW (sff-common.h ``PRINT_TEMP`` / ``PRINT_VCC`` / ``PRINT_BIAS`` /
#: ``PRINT_xX_PWR``) of the same register. Rounded to the text's decimals, both forms give one record,
#: so a node whose ethtool is upgraded, or a bundle of the other form, reads the same values (the
#: temperature's extra digits are 1/256 degree steps, below what a threshold judges).
_QUANTITY = {
    "module_temperature": ("temperature_c", 2),
    "module_voltage": ("voltage_v", 4),
    "laser_bias_current": ("tx_bias_ma", 3),
    "laser_output_power": ("tx_power_mw", 4),
    "laser_rx_power": ("rx_power_mw", 4),
}
#: per-lane arrays: SFF-8636 one array of 4; CMIS one array of 8 per bank, the key repeated per bank
_LANE_ARRAYS = {
    "laser_tx_bias_current": ("tx_bias_ma", 3),
    "transmit_avg_optical_power": ("tx_power_mw", 4),
    # the first posted form of the JSON series (v1, with "_units" keys) named the RX array so
    "rcvr_signal_avg_optical_power": ("rx_power_mw", 4),
}
#: threshold keys inside a threshold object: ethtool 6.14's ``high_alarm_threshold`` and the form of the
#: rename in review upstream ("sff-common: Fix naming of JSON keys for thresholds", netdev 2025-10:
#: ``laser_bias_current_threshold: {"high_alarm": 80, ...}``)
_THRESHOLD_KEYS = {f"{side}_{level}{suffix}": f"{side}_{level}"
                   for side in ("high", "low") for level in ("alarm", "warning") for suffix in ("_threshold", "")}
#: the renamed threshold objects: ``<quantity>_threshold`` (as posted) or ``<quantity>_thresholds`` (as its
#: commit message spells it)
_THRESHOLD_OBJECTS = {f"{key}{suffix}": key for key in _QUANTITY for suffix in ("_threshold", "_thresholds")}
_FLAG_JSON = re.compile(r"\A(?P<stem>laser_bias_current|laser_tx_power|laser_output_power|laser_rx_power"
                        r"|module_temperature|module_voltage)_(?P<kind>(?:high|low)_(?:alarm|warning))\Z")
_STATUS_JSON = {"rx_loss_of_signal": "rx_los", "tx_loss_of_signal": "tx_los", "tx_fault": "tx_fault"}
#: ethtool's json_writer.c escapes ``'`` as ``\\'``, which JSON has not: a vendor string with an
#: apostrophe would make the whole module unreadable. An escaped backslash before it is kept.
_ESCAPED_QUOTE = re.compile(r"(?<!\\)((?:\\\\)*)\\'")


def _json_number(what: str, key: str, val: Any, digits: int) -> float | None:
    if val is None:  # NaN / Infinity / an overflowing number (agent.safejson): this value unknown
        return None
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise ValueError(f"{what}: {key}: {str(val)[:40]!r} is not a number")
    x = float(val)
    return round(x, digits) if math.isfinite(x) else None


def _json_numbers(what: str, key: str, val: Any, digits: int) -> list[float | None]:
    if not isinstance(val, list):
        raise ValueError(f"{what}: {key}: not a list of lane values")
    return [_json_number(what, key, v, digits) for v in val]


def _json_text(what: str, key: str, val: Any) -> str:
    if not isinstance(val, str):
        raise ValueError(f"{what}: {key}: not a string")
    return val.strip()[:80]


def parse_ethtool_m_json(text: str, netdev: str, truncated: bool = False) -> ModuleOptics:
    """``ethtool --json -m <if>`` (ethtool 6.14+) -> the record ``parse_ethtool_m`` makes of the text.

    Sample (SFF-8636, the Finisar QSFP28 of ``parse_ethtool_m``'s sample; RECONSTRUCTED by ethtool's
    printing rules from that module's text, cut; the keys are ethtool's, units in none of them:
    degrees C, V, mA and mW as ``module_info.json`` of ethtool 6.14 documents)::

        [ {
                "identifier": 17,
                "identifier_description": "QSFP28",
                "vendor_name": "FINISAR CORP.",
                "vendor_pn": "FTLC1152RGPL6-FB",
                "module_temperature": 33.7617,
                "module_voltage": 3.2505,
                "laser_tx_bias_current": [ 42.068,37.926,38.87,37.968 ],
                "transmit_avg_optical_power": [ 1.0778,1.0394,0.9198,1.1533 ],
                "rx_power": {
                    "values": [ 0.9969,0.91,0.9101,0.9713 ],
                    "type": "Rcvr signal avg optical power"
                },
                "laser_rx_power_low_warning": [ false,false,false,false ],
                "module_temperature": {
                    "high_alarm_threshold": 60,
                    "low_alarm_threshold": 10,
                    "high_warning_threshold": 55,
                    "low_warning_threshold": 15
                },
                "laser_rx_power": {
                    "low_warning_threshold": 0.0631
                }
            } ]

    ``module_temperature`` and ``module_voltage`` are keys twice in one object: the reading, then the
    object of its thresholds (sff-common.c ``sff_show_thresholds_json``), so objects are read as
    pairs, never as a dict that keeps only the last. A CMIS module prints ``laser_tx_bias_current``,
    ``transmit_avg_optical_power`` and ``rx_power`` once per bank of 8 lanes (cmis.c), in bank
    order: lanes 9-16 are the second array. SFF-8472 prints one lane as numbers
    (``laser_bias_current``, ``laser_output_power``, ``rx_power.value``). Flags are booleans (module
    level) or one array a bank (``laser_rx_power_low_alarm: [ true,... ]``); lane status is ``false`` or
    ``[ "Yes","No",... ]`` (6.14), booleans from 6.15. The thresholds are read in both forms: the objects
    above and ``<quantity>_threshold: {"high_alarm": ...}`` of the rename in review upstream; a threshold
    object of another shape is named in ``unavailable``. Raises ValueError, one line, for anything that
    is not one module's JSON (an error text, a truncated or oversized answer, a reading of the wrong
    type): nothing of such a module is kept, never part of it.
    """
    what = f"ethtool --json -m {netdev}"
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"{what}: {len(text)} characters, more than any module prints ({MAX_JSON_BYTES}): not read")
    stripped = text.strip()
    if not stripped:
        raise ValueError(f"{what}: empty output")
    if not stripped.startswith("["):
        first = stripped.splitlines()[0]
        raise ValueError(f"{what}: not a module dump ({first[:80]!r})")
    if "\\'" in text:
        text = _ESCAPED_QUOTE.sub(r"\1'", text)
    doc, err = parse_json(text, what, truncated, pairs=True)
    if err is not None:
        raise ValueError(err)
    if not isinstance(doc, list) or len(doc) != 1 or not isinstance(doc[0], Pairs):
        raise ValueError(f"{what}: not one module object in a list (ethtool prints [ {{...}} ])")
    ident: int | None = None
    ident_desc: str | None = None
    head: dict[str, str] = {}
    arrays: dict[str, list[float | None]] = {"tx_bias_ma": [], "tx_power_mw": [], "rx_power_mw": []}
    single: dict[str, float | None] = {}
    thresholds: list[tuple[str, str, float]] = []
    temperature = voltage = None
    flag_arrays: dict[tuple[str, str], list[bool]] = {}
    mod_flags: list[tuple[str, str, bool]] = []
    lane1_flags: list[tuple[str, str, bool]] = []
    status: dict[str, list[bool]] = {}
    implemented: bool | None = None
    state: str | None = None
    unavailable: list[str] = []
    for key, val in doc[0]:
        fl = _FLAG_JSON.match(key.lower().replace(" ", "_")) if isinstance(key, str) else None
        if fl:
            quantity = _QUANTITY[fl.group("stem")][0] if fl.group("stem") in _QUANTITY else \
                _FLAG_STEMS[fl.group("stem").replace("_", " ")]
            kind = fl.group("kind")
            if isinstance(val, bool):  # module level, or SFF-8472's one lane
                (mod_flags if quantity in _MODULE_QUANTITIES else lane1_flags).append((quantity, kind, val))
            elif isinstance(val, list) and all(isinstance(v, bool) for v in val) \
                    and quantity not in _MODULE_QUANTITIES:
                got = flag_arrays.setdefault((quantity, kind), [])  # CMIS: one array a bank, in bank order
                got.extend(val[:_MAX_LANES - len(got)])
            else:
                unavailable.append(f"flag {key[:40]}: not a boolean or a list of them")
            continue
        if key in _STATUS_JSON:
            # 6.14: false, or [ "Yes","No",... ]; 6.15 prints booleans for every lane
            if val is False or val == "None":
                status[_STATUS_JSON[key]] = []
            elif isinstance(val, list) and all(isinstance(v, bool) or v in ("Yes", "No") for v in val):
                status[_STATUS_JSON[key]] = [v is True or v == "Yes" for v in val[:_MAX_LANES]]
            continue
        if key == "alarm/warning_flags_implemented":
            implemented = val if isinstance(val, bool) else None
            continue
        if key == "module_state_description" and isinstance(val, str):
            state = val.strip()[:40]
            continue
        if key in _THRESHOLD_OBJECTS:
            quantity, digits = _QUANTITY[_THRESHOLD_OBJECTS[key]]
            before = len(thresholds)
            if isinstance(val, Pairs):
                for k, v in val:
                    kind = _THRESHOLD_KEYS.get(k)
                    x = _json_number(what, f"{key}.{k}", v, digits) if kind else None
                    if kind and x is not None:
                        thresholds.append((quantity, kind, x))
            if len(thresholds) == before:
                unavailable.append(f"thresholds {key[:40]}: in a shape railscope does not read")
            continue
        if key == "identifier":
            if isinstance(val, bool) or not isinstance(val, int) or not 0 <= val <= 255:
                raise ValueError(f"{what}: identifier: not a byte")
            ident = val
        elif key == "identifier_description":
            ident_desc = _json_text(what, key, val)
        elif key in ("vendor_name", "vendor_pn", "vendor_sn"):
            head.setdefault(key, _json_text(what, key, val))
        elif key in _LANE_ARRAYS:
            field, digits = _LANE_ARRAYS[key]
            arrays[field].extend(_json_numbers(what, key, val, digits))
        elif key == "rx_power":
            if not isinstance(val, Pairs):
                raise ValueError(f"{what}: rx_power: not an object")
            for k, v in val:
                if k == "values":
                    arrays["rx_power_mw"].extend(_json_numbers(what, "rx_power.values", v, 4))
                elif k == "value":
                    single["rx_power_mw"] = _json_number(what, "rx_power.value", v, 4)
        elif key in _QUANTITY:
            quantity, digits = _QUANTITY[key]
            if isinstance(val, Pairs):
                before = len(thresholds)
                for k, v in val:
                    kind = _THRESHOLD_KEYS.get(k)
                    x = _json_number(what, f"{key}.{k}", v, digits) if kind else None
                    if kind and x is not None:
                        thresholds.append((quantity, kind, x))
                if len(thresholds) == before:
                    unavailable.append(f"thresholds {key}: in a shape railscope does not read")
            elif key == "laser_rx_power":
                raise ValueError(f"{what}: laser_rx_power: not an object of thresholds")
            elif quantity == "temperature_c":
                temperature = _json_number(what, key, val, digits)
            elif quantity == "voltage_v":
                voltage = _json_number(what, key, val, digits)
            else:  # SFF-8472: the one lane's reading
                single[quantity] = _json_number(what, key, val, digits)
        elif isinstance(key, str) and "threshold" in key.lower():
            unavailable.append(f"thresholds {key[:40]}: in a shape railscope does not read")
    for field, values in arrays.items():
        if len(values) > _MAX_LANES:
            raise ValueError(f"{what}: {len(values)} lanes of {field}, more than a module has ({_MAX_LANES})")
    lanes: dict[int, dict[str, float]] = {}
    for field, values in arrays.items():
        for i, x in enumerate(values):
            if x is not None:
                lanes.setdefault(i + 1, {})[field] = x
    for field, x in single.items():
        if x is not None:
            lanes.setdefault(1, {}).setdefault(field, x)
    if ident is None and not lanes and temperature is None:
        raise ValueError(f"{what}: no module in the answer (no identifier, lane or temperature)")
    identifier = None
    if ident is not None:
        identifier = f"0x{ident:02x} ({ident_desc})" if ident_desc else f"0x{ident:02x}"
    lane_flags: dict[int, list[tuple[str, str, bool]]] = {}
    for (quantity, kind), values in flag_arrays.items():
        for i, raised in enumerate(values):
            lane_flags.setdefault(i + 1, []).append((quantity, kind, raised))
    if lane1_flags:
        lane_flags.setdefault(1, []).extend(lane1_flags)
    cmis = state is not None or (ident is not None and ident in _CMIS_IDS)
    return _module(netdev, identifier, head.get("vendor_name"), head.get("vendor_pn"), head.get("vendor_sn"),
                   temperature, voltage, lanes, lane_flags, mod_flags, status, thresholds, implemented, cmis,
                   state, unavailable)


# -- which form ------------------------------------------------------------------------------------

def parse_ethtool_version(text: str) -> tuple[int, int, int] | None:
    """``ethtool --version`` -> (major, minor, patch); None when it says no version.

    Sample: ``ethtool version 6.1`` (Debian 12), ``ethtool version 6.14.2`` (Debian 13).
    """
    m = _VERSION.search(text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


_lock = threading.Lock()
#: host -> (whether its reads use ``--json``, its ``ethtool --version`` line), decided once per host
#: object: the daemon keeps one per source; a capture or ``doctor`` makes its own, so a bundle records
#: the ``--version`` it decided by
_forms: weakref.WeakKeyDictionary[Any, tuple[bool, str]] = weakref.WeakKeyDictionary()
#: ``ethtool --version`` lines of live ethtools that refused ``--json -m`` in this process
_refused: set[str] = set()


def reset_forms() -> None:
    """Forget every decision (tests: each starts from a fresh process's state)."""
    with _lock:
        _forms.clear()
        _refused.clear()


def _known(host: Host) -> tuple[bool, str] | None:
    with _lock:
        try:
            return _forms.get(host)
        except TypeError:  # a host that cannot be weakly referenced: decided at every read
            return None


def _remember(host: Host, use_json: bool, line: str) -> None:
    with _lock:
        try:
            _forms[host] = (use_json, line)
        except TypeError:
            pass


def uses_json(host: Host, timeout_s: float = 10.0) -> bool:
    """Whether ``read_optics`` reads ``host`` with ``ethtool --json -m``: its ``ethtool --version`` is
    ``JSON_SINCE`` or later, and no ethtool of that version refused ``--json -m`` in this process. A
    capture's host (``module_text``) reads the text: one module read per rail, the one people read."""
    if getattr(host, "module_text", False):
        return False
    known = _known(host)
    if known is not None:
        return known[0]
    res = host.run(list(VERSION_ARGV), timeout_s=timeout_s, max_bytes=4096)
    version = parse_ethtool_version(res.text) if res.ok else None
    line = res.text.strip().splitlines()[0] if version is not None else ""
    with _lock:
        refused = host.live and line in _refused
    use_json = version is not None and version >= JSON_SINCE and not refused
    _remember(host, use_json, line)
    return use_json


def refuses_json(res: CmdResult) -> bool:
    """``res`` is ethtool refusing ``--json -m`` (its command line, not the module: no EEPROM was read)."""
    if not res.available or res.rc == 0:
        return False
    err = res.stderr.decode("utf-8", "replace")
    return any(s in err for s in _JSON_REFUSED)


def _refused_json(host: Host) -> None:
    """Keep the text form for ``host``, and, live, for every host of this process with the same ethtool."""
    known = _known(host)
    line = known[1] if known else ""
    _remember(host, False, line)
    if host.live and line:
        with _lock:
            _refused.add(line)


def _read_one(host: Host, name: str, use_json: bool, timeout_s: float) -> tuple[CmdResult, bool]:
    """One rail's module: (the answer to parse, whether the next rail uses JSON)."""
    if not use_json:
        return host.run([*ARGV, name], timeout_s=timeout_s), False
    res = host.run([*JSON_ARGV, name], timeout_s=timeout_s, max_bytes=MAX_JSON_BYTES)
    if refuses_json(res):
        _refused_json(host)
        return host.run([*ARGV, name], timeout_s=timeout_s), False
    if res.missing and not res.timed_out and not host.live:
        # A node image that holds the text form (recorded by an ethtool that fell back, or before
        # the JSON form existed): replay what it holds; with neither, the JSON record's reason stands.
        text = host.run([*ARGV, name], timeout_s=timeout_s)
        if text.available:
            return text, True
    return res, True


def _side_by_side(work: list[Callable[[], None]], width: int) -> None:
    """Run ``work`` on up to ``width`` threads and return when all is done; the first exception a
    job raised is raised here. Not ``concurrent.futures``: importing it (logging and more) costs
    every ``doctor`` run about 6 ms."""
    pending = list(reversed(work))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        while True:
            with lock:
                if not pending:
                    return
                job = pending.pop()
            try:
                job()
            except BaseException as exc:  # raised again in the caller's thread
                errors.append(exc)

    threads = [threading.Thread(target=worker, name=f"railscope-optics-{i}", daemon=True)
               for i in range(min(width, len(work)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def read_optics(host: Host, netdevs: Iterable[str], timeout_s: float = 10.0,
                notes: Notes | None = None, pf_of: Mapping[str, str] | None = None,
                parallel: int = 4) -> tuple[ModuleOptics, ...]:
    """``ethtool -m`` (or ``--json -m``, see the module's doc) of each rail netdev.

    One firmware read at a time per PCI function (``pf_of``: netdev -> its function; a netdev not in
    it is its own), up to ``parallel`` functions side by side. What overlaps is each read's own work
    (the ethtool process, its netlink requests, the parse): the kernel runs every module read under
    the RTNL lock (``ethnl_default_doit``, ``dev_ethtool``), so on mlx5 the MCIA register reads
    themselves go one at a time node-wide. The first rail is read alone, so the form is settled before the others
    start. After one read times out live, no other starts (a task stuck in the driver cannot be
    killed, docs/design.md §7): the rest are skipped with a note. Results and notes keep ``netdevs``' order.
    """
    notes = notes if notes is not None else Notes()
    names = list(dict.fromkeys(netdevs))
    if not names:
        return ()
    use_json = uses_json(host, timeout_s)
    hung = threading.Event()
    answers: dict[str, CmdResult] = {}

    def one(name: str, form: bool) -> bool:
        res, form = _read_one(host, name, form, timeout_s)
        answers[name] = res
        if res.timed_out and host.live:
            hung.set()
        return form

    # The first rail alone: it settles the form (an ethtool that lists --json may still refuse it),
    # and on a node whose firmware hangs it is the one read stuck in the driver, not one per function
    # (a stuck module read holds the RTNL lock, so the others would hang behind it, unkillable).
    use_json = one(names[0], use_json)
    groups: dict[str, list[str]] = {}
    for name in names[1:]:
        groups.setdefault((pf_of or {}).get(name) or name, []).append(name)

    def run_group(group: list[str]) -> None:
        form = use_json
        for name in group:
            if hung.is_set():
                return
            form = one(name, form)

    if groups and not hung.is_set():
        if parallel > 1 and len(groups) > 1:
            _side_by_side([lambda g=g: run_group(g) for g in groups.values()], parallel)
        else:
            for g in groups.values():
                run_group(g)
    out = []
    stuck = next((n for n in names if n in answers and answers[n].timed_out), None)
    for name in names:
        source = f"ethtool -m {name}"
        res = answers.get(name)
        if res is None:
            notes.missing(source, f"skipped: ethtool -m {stuck} timed out (firmware may be hung)")
            continue
        if not res.ok:
            notes.command(source, res)
            continue
        try:
            if tuple(res.argv[:len(JSON_ARGV)]) == JSON_ARGV:
                cut = res.truncated or len(res.stdout) >= MAX_JSON_BYTES
                mod = parse_ethtool_m_json(res.text, name, cut)
            else:
                mod = parse_ethtool_m(res.text, name)
        except ValueError as exc:
            notes.missing(source, str(exc))
            continue
        out.append(mod)
        for why in mod.unavailable:  # read, but not all of it: say what, never "no thresholds" in silence
            notes.missing(source, why)
    return tuple(out)


def read_optics_part(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """``ethtool -m`` of each rail netdev (a firmware read: rails only, less --exclude-devices).

    A rail that is a software netdev has no transceiver of its own: the link dump gives it a kind
    (veth, bond, vlan, macvlan, ...) and no parent device, and none of those drivers implements
    ``get_module_info`` or ``get_module_eeprom_by_page``, so ``ethtool -m`` could only answer
    "Operation not supported". It is not asked; a note says why, as the refusal did. A netdev with a
    kind *and* a device under it (IPoIB's ``ib0`` on its PCI function, a DSA port) is a port of
    hardware and is asked.
    """
    allowed = set(touchable_netdevs(ctx.rails, ctx.links, cfg.exclude_devices))
    # a kernel's kind is a short rtnl_link_ops name (veth, macvlan); a bundle's may be anything: the
    # note quotes at most 32 characters of it
    software = {lk.ifname: lk.kind[:32] for lk in ctx.links if lk.kind and not lk.parent_dev}
    targets = []
    for name in ctx.rails:
        if name not in allowed:
            notes.missing(f"ethtool -m {name}", "excluded by --exclude-devices")
        elif name in software:
            notes.missing(f"ethtool -m {name}",
                          f"not read: a {software[name]} with no device under it is a software netdev, no module of its own")
        else:
            targets.append(name)
    optics = read_optics(host, targets, cfg.command_timeout_s, notes, pf_of=pci_of_links(ctx.links)) if targets else ()
    return part("optics", notes, fields={"optics": optics})


SOURCE = Source("optics", "the rails' transceivers (ethtool -m, a firmware read: in the counters' thread, after the "
                          "statistics)",
                (ARGV, JSON_ARGV, VERSION_ARGV), 60.0, 60.0, ("optics",), read_optics_part, order=110,
                needs=("rails", "links"), firmware_touching=True, lane="counters", no_device=(VERSION_ARGV,))
