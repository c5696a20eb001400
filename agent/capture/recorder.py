"""The flight recorder's ring and its writer: 1 s samples of every rail's incident counters for the last 15 minutes
(docs/design.md §6), written into every node image as ``recorder.jsonl``. The daemon fills one from its
samplers; the ``agent`` capture plug-in fills one from two samples when no daemon runs. It sits in
capture, below the service, so that capture never imports the daemon.

Each line is ``{"ts": <unix s>, "netdev": ..., "counters": {<raw ethtool / sysfs name>: <value>}}``,
one per rail per second, oldest first. A counter the rail does not have is left out of its line
(absent means off or unsupported, never 0).

Memory is bounded by construction: every row is an ``array('Q')`` over one fixed list of counter
names, at most ``window_s / interval_s`` rows per netdev and at most ``max_netdevs`` netdevs.
8 rails x 900 s x 24 counters hold about 2.6 MB (``tests/unit/service/test_recorder.py`` measures it).
"""

from __future__ import annotations

import heapq
import io
import json
import math
import sys
import threading
from array import array
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from agent.analysis.checks.degradation import RATE_COUNTERS

__all__ = ["FlightRecorder", "incident_counters"]

#: Stands for "no such counter on this netdev" in a row: a real u64 counter never reaches it.
_ABSENT = (1 << 64) - 1


def incident_counters(lossless_prio: int = 3) -> tuple[str, ...]:
    """The counters that explain an incident on a rail, by their raw ethtool / sysfs names."""
    p = lossless_prio
    return (
        # PFC on the lossless priority: frames, and pause time in µs (mlx5 counters.rst)
        f"rx_prio{p}_pause", f"tx_prio{p}_pause",
        f"rx_prio{p}_pause_duration", f"tx_prio{p}_pause_duration",
        f"rx_prio{p}_pause_transition",
        # the NIC's stall watchdog
        "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
        # drops on the lossless priority, and port-level drops for context
        f"rx_prio{p}_discards", f"rx_prio{p}_buf_discard", f"rx_prio{p}_cong_discard",
        "rx_discards_phy", "rx_out_of_buffer",
        # carrier losses (netlink IFLA_CARRIER_DOWN_COUNT) and the PHY's own count
        "carrier_down_count", "link_down_events_phy",
        # PCIe back-pressure, the classic cause of NIC-originated pause storms
        "outbound_pci_stalled_rd", "outbound_pci_stalled_wr",
        "outbound_pci_stalled_rd_events", "outbound_pci_stalled_wr_events",
        "outbound_pci_buffer_overflow",
        # RDMA loss on the uplink port (hw_counters) and DCQCN
        "out_of_sequence", "packet_seq_err", "local_ack_timeout_err",
        "np_cnp_sent", "rp_cnp_handled",
        # link quality, lanes, module and PCIe signal events, the PF's AER totals (LinkDegrading,
        # OpticsOutOfRange, PcieErrors)
        *RATE_COUNTERS,
    )


@dataclass(slots=True)
class _Series:
    rows: deque[tuple[float, array]]


class FlightRecorder:
    """A bounded, thread-safe ring of counter samples per rail netdev.

    ``add`` is called by the sampler once a second per rail; ``write`` by a capture, possibly from
    another thread. Samples closer together than half the interval replace the previous one, so
    a burst of calls cannot push history out early.
    """

    def __init__(self, counters: tuple[str, ...] | None = None, *, window_s: float = 900.0,
                 interval_s: float = 1.0, max_netdevs: int = 64) -> None:
        if window_s <= 0 or interval_s <= 0:
            raise ValueError("window_s and interval_s must be positive")
        self.counters: tuple[str, ...] = counters if counters is not None else incident_counters()
        self.window_s = window_s
        self.interval_s = interval_s
        self.max_netdevs = max_netdevs
        self._maxlen = math.ceil(window_s / interval_s) + 1
        self._series: dict[str, _Series] = {}
        self._lock = threading.Lock()
        #: samples refused: older than the netdev's last one (clock stepped back), or a netdev
        #: past ``max_netdevs``
        self.refused = 0

    def add(self, ts: float, netdev: str, counters: Mapping[str, Any]) -> None:
        row = array("Q", [_ABSENT]) * len(self.counters)
        # ethtool -S of an mlx5 uplink has about a thousand keys: look up the few recorded ones
        for i, name in enumerate(self.counters):
            value = counters.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _ABSENT:
                row[i] = value
        with self._lock:
            series = self._series.get(netdev)
            if series is None:
                self._prune(ts)
                if len(self._series) >= self.max_netdevs:
                    self.refused += 1
                    return
                series = self._series[netdev] = _Series(deque(maxlen=self._maxlen))
            rows = series.rows
            if rows:
                last = rows[-1][0]
                if ts < last:
                    self.refused += 1
                    return
                if ts - last < self.interval_s / 2:
                    rows.pop()
            rows.append((ts, row))
            cut = ts - self.window_s
            while rows and rows[0][0] < cut:
                rows.popleft()

    def _prune(self, now: float) -> None:
        """Forget netdevs with nothing in the window (renamed or gone)."""
        cut = now - self.window_s
        for name in [n for n, s in self._series.items() if not s.rows or s.rows[-1][0] < cut]:
            del self._series[name]

    def netdevs(self) -> list[str]:
        with self._lock:
            return sorted(self._series)

    def __len__(self) -> int:
        """Samples held, all netdevs together."""
        with self._lock:
            return sum(len(s.rows) for s in self._series.values())

    def nbytes(self) -> int:
        """Approximate memory held by the samples (rows, their arrays and timestamps)."""
        with self._lock:
            total = 0
            for s in self._series.values():
                total += sys.getsizeof(s.rows)
                for ts, row in s.rows:
                    total += sys.getsizeof((ts, row)) + sys.getsizeof(ts) + sys.getsizeof(row)
            return total

    def lines(self, since: float | None = None) -> Iterator[str]:
        """``recorder.jsonl`` lines (no newline), oldest first, netdevs in name order within a second."""
        with self._lock:
            snapshot = {name: list(s.rows) for name, s in self._series.items()}
        names = self.counters
        merged = heapq.merge(*([(ts, netdev, row) for ts, row in rows] for netdev, rows in sorted(snapshot.items())),
                             key=lambda r: (r[0], r[1]))
        for ts, netdev, row in merged:
            if since is not None and ts < since:
                continue
            counters = {names[i]: v for i, v in enumerate(row) if v != _ABSENT}
            yield json.dumps({"ts": _ts(ts), "netdev": netdev, "counters": counters}, separators=(",", ":"))

    def edges(self, window_s: float, keys: tuple[str, ...]) -> dict[str, list[tuple[float, dict[str, int]]]]:
        """Per netdev, its first and last sample within ``window_s`` before its newest, ``keys`` only:
        the two samples a rate over a window needs (``--ber-window``), without copying the ring."""
        idx = [(i, name) for i, name in enumerate(self.counters) if name in keys]
        out: dict[str, list[tuple[float, dict[str, int]]]] = {}
        with self._lock:
            for netdev, s in self._series.items():
                rows = s.rows
                if len(rows) < 2:
                    continue
                end = rows[-1][0]
                first = next(r for r in rows if r[0] >= end - window_s)
                if first is rows[-1]:
                    continue
                out[netdev] = [(ts, {name: row[i] for i, name in idx if row[i] != _ABSENT})
                               for ts, row in (first, rows[-1])]
        return out

    def to_jsonl(self, since: float | None = None) -> str:
        return "".join(line + "\n" for line in self.lines(since))

    def write(self, fileobj: IO[str] | IO[bytes], since: float | None = None) -> int:
        """Write ``recorder.jsonl`` into a text or binary file object; returns the bytes written."""
        total = 0
        binary = not isinstance(fileobj, io.TextIOBase)
        for line in self.lines(since):
            data = (line + "\n").encode()
            fileobj.write(data if binary else data.decode())  # type: ignore[arg-type]
            total += len(data)
        return total


def _ts(ts: float) -> float | int:
    return int(ts) if float(ts).is_integer() else round(ts, 3)
