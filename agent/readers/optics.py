"""optics: the rails' transceivers, ``ethtool -m <rail netdev>`` (module EEPROM).

On mlx5 a module read is a firmware access (the MCIA register): it runs on the devlink interval, in
the counters' thread after the statistics (one firmware read at a time per PF), for rails only. The
text is parsed; ethtool prints the same line names for SFF-8636 (QSFP28 / QSFP56) and CMIS
(QSFP-DD / OSFP) modules (ethtool ``qsfp.c``, ``cmis.c`` and the shared ``sff-common.c``), and the
module's own thresholds as ``… warning threshold`` / ``… alarm threshold`` lines. A module that prints
no threshold is never judged (DESIGN §4 "Optics thresholds"). ``ethtool --json -m`` is not used: the
text is what every installed ethtool prints, and what a capture records for people.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from agent.host import Host
from agent.model import ModuleOptics, OpticsLane
from agent.readers.common import Notes

__all__ = ["ARGV", "parse_ethtool_m", "read_optics"]

#: ``ethtool -m <netdev>``
ARGV = ("ethtool", "-m")

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


def _number(val: str) -> float | None:
    m = _NUM.match(val)
    if not m:
        return None
    x = float(m.group(1))
    return x if math.isfinite(x) else None


def parse_ethtool_m(text: str, netdev: str) -> ModuleOptics:
    """``ethtool -m <if>`` text -> monitors per lane and the module's thresholds.

    Sample (SFF-8636, a Finisar FTLC1152RGPL6-FB QSFP28 in a ConnectX-4 port, ethtool 5.x; published in
    github.com/robinchrist/100G-CWDM4-docs, README, cut)::

        Identifier                                : 0x11 (QSFP28)
        Vendor name                               : FINISAR CORP.
        Vendor PN                                 : FTLC1152RGPL6-FB
        Module temperature                        : 33.76 degrees C / 92.77 degrees F
        Module voltage                            : 3.2505 V
        Laser tx bias current (Channel 1)         : 42.068 mA
        Transmit avg optical power (Channel 1)    : 1.0778 mW / 0.33 dBm
        Rcvr signal avg optical power(Channel 1)  : 0.9969 mW / -0.01 dBm
        Laser bias current high alarm threshold   : 55.000 mA
        Module temperature high alarm threshold   : 60.00 degrees C / 140.00 degrees F
        Laser rx power low warning threshold      : 0.0631 mW / -12.00 dBm

    CMIS (QSFP-DD / OSFP) prints ``Rcvr signal avg optical power (Channel 1) : 1.1351 mW / 0.55 dBm``
    with a space before the parenthesis and up to 8 lanes per bank (ethtool cmis.c). Raises ValueError
    when the text is no module dump (an error message, an empty answer).
    """
    head: dict[str, str] = {}
    lanes: dict[int, dict[str, float]] = {}
    thresholds: list[tuple[str, str, float]] = []
    temperature = voltage = None
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        key, val = m.group("key"), m.group("val")
        low = key.lower()
        t = _THRESHOLD.match(low)
        if t:
            quantity = _THRESHOLD_STEMS.get(t.group("stem"))
            x = _number(val)
            if quantity and x is not None:
                thresholds.append((quantity, f"{t.group('side')}_{t.group('level')}", x))
            continue
        c = _CHANNEL.match(key)
        what, lane = (c.group("what").lower().strip(), int(c.group("n"))) if c else (low, 1)
        field = _LANE_KEYS.get(what)
        if field is not None and (c is not None or not what.startswith(("laser tx power", "laser rx power"))):
            x = _number(val)
            if x is not None and 1 <= lane <= 32:
                lanes.setdefault(lane, {})[field] = x
            continue
        if low == "module temperature":
            temperature = _number(val)
        elif low == "module voltage":
            voltage = _number(val)
        elif low in ("identifier", "vendor name", "vendor pn", "vendor sn") and low not in head:
            head[low] = val[:80]
    if "identifier" not in head and not lanes and temperature is None:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise ValueError(f"ethtool -m {netdev}: not a module dump ({first[:80]!r})" if first
                         else f"ethtool -m {netdev}: empty output")
    return ModuleOptics(
        netdev=netdev, identifier=head.get("identifier"), vendor=head.get("vendor name"),
        part=head.get("vendor pn"), serial=head.get("vendor sn"), temperature_c=temperature, voltage_v=voltage,
        lanes=tuple(OpticsLane(lane=n, **lanes[n]) for n in sorted(lanes)),
        thresholds=tuple(dict.fromkeys(thresholds)))


def read_optics(host: Host, netdevs: Iterable[str], timeout_s: float = 10.0,
                notes: Notes | None = None) -> tuple[ModuleOptics, ...]:
    """``ethtool -m`` of each rail netdev, one at a time; after one times out live, the rest are skipped
    (a task stuck in the driver cannot be killed, DESIGN §7)."""
    notes = notes if notes is not None else Notes()
    out = []
    names = list(netdevs)
    for i, name in enumerate(names):
        source = f"ethtool -m {name}"
        res = host.run([*ARGV, name], timeout_s=timeout_s)
        if not res.ok:
            notes.command(source, res)
            if res.timed_out and host.live:
                for rest in names[i + 1:]:
                    notes.missing(f"ethtool -m {rest}", f"skipped: ethtool -m {name} timed out (firmware may be hung)")
                break
            continue
        try:
            out.append(parse_ethtool_m(res.text, name))
        except ValueError as exc:
            notes.missing(source, str(exc))
    return tuple(out)
