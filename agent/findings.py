"""Finding and event codes, severities and the ``railscope.doctor/v1`` document (DESIGN §4).

``EVENT_CODES`` is separate from the finding ``CODES``: ``DriverReload`` is an event (it explains the
flaps it would otherwise cause), never a finding. Events of the other codes become findings as they
are when ``railscope doctor`` reads ``events.json`` (DESIGN §4 "Time").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CODES", "EVENT_CODES", "NEXT_STEPS", "SEVERITIES", "Diagnosis", "Finding", "RailRow", "severity_rank"]

SEVERITIES = ("critical", "warning", "info")

#: code -> default severity. Stable: metrics, alert rules and tests use these words.
CODES: dict[str, str] = {
    "RailMissing": "critical",
    "RailNameMismatch": "critical",
    "RdmaNameMismatch": "critical",
    "RailTemplateInvalid": "critical",
    "RailLinkDown": "critical",
    "RdmaLinkDown": "critical",
    "RdmaNetnsModeUnexpected": "warning",
    "RepresentorStale": "warning",
    "EswitchModeUnexpected": "warning",
    "EswMultiportUnexpected": "warning",
    "PfcDisabled": "warning",
    "GlobalPauseEnabled": "warning",
    "PfcStorm": "critical",
    "LosslessDrops": "critical",
    "LinkFlapping": "warning",
    "ConfigFlapping": "warning",
    "FirmwareSkew": "info",
    "DriverKernelUnvalidated": "warning",
    "NicHealthError": "warning",
    "LinkDegrading": "warning",
    "OpticsOutOfRange": "warning",
    "NicTemperatureHigh": "warning",
    "PcieLinkDegraded": "warning",
    "PcieErrors": "warning",
}

#: code -> default severity of every event a detector emits.
EVENT_CODES: dict[str, str] = {
    **{code: CODES[code] for code in ("LinkFlapping", "ConfigFlapping", "RepresentorStale", "PfcStorm",
                                      "LosslessDrops", "NicHealthError")},
    **{code: CODES[code] for code in ("LinkDegrading", "OpticsOutOfRange", "PcieErrors")},
    "DriverReload": "info",
}


#: code -> the next step for a person: what to run, what to check, who owns it (one or two sentences).
NEXT_STEPS: dict[str, str] = {
    "LinkDegrading": "Run `ethtool -S <rail> | grep -E 'corrected_bits|symbol_err|err_lane'` twice a minute apart "
                     "and compare the lanes: one lane far above the others is one fibre or optic; clean or swap it "
                     "(network/DC operations), and check the switch port's counters for the same link.",
    "OpticsOutOfRange": "Run `ethtool -m <rail>` and compare the named lane with the module's thresholds: low RX power "
                        "means a dirty connector or bad fibre (clean, then reseat or swap the optic), high TX bias or "
                        "temperature an ageing laser (replace the transceiver); DC operations own the optic.",
    "NicTemperatureHigh": "Check `sensors` / `/sys/bus/pci/devices/<bdf>/hwmon/*/temp*_input` and the chassis fans and "
                          "airflow over the card (BMC / `ipmitool sdr`); the hardware team owns cooling.",
    "PcieLinkDegraded": "Compare `lspci -vv -s <bdf>` LnkCap with LnkSta and the upstream port's: a link trained below "
                        "both ends needs the card reseated or moved to another slot (hardware team); a slower slot is "
                        "a placement choice.",
    "PcieErrors": "Read `/sys/bus/pci/devices/<bdf>/aer_dev_*` and `dmesg | grep -i aer` for the failing lane or "
                  "device; reseat the card or the riser, and open a hardware ticket if fatal errors repeat.",
}


def severity_rank(sev: str) -> int:
    """0 for critical, 1 warning, 2 info (lower sorts first)."""
    try:
        return SEVERITIES.index(sev)
    except ValueError:
        return len(SEVERITIES)


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    subject: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def sort_key(self) -> tuple[int, bytes, bytes]:
        return (severity_rank(self.severity), self.code.encode(), self.subject.encode())

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "subject": self.subject,
                "message": self.message, "evidence": self.evidence}


@dataclass(frozen=True)
class RailRow:
    """One line of ``rails[]`` in the doctor document."""

    rail: int
    plane: int | None
    netdev: str | None
    rdma: str | None
    pci: str | None
    oper: str | None = None  # "up" | "down" | None (no netdev)
    speed_mbps: int | None = None
    rdma_state: str | None = None
    driver: str | None = None
    driver_version: str | None = None
    firmware: str | None = None
    psid: str | None = None
    eswitch_mode: str | None = None
    esw_multiport: bool | None = None
    numvfs: int | None = None
    representors: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "rail": self.rail, "plane": self.plane, "netdev": self.netdev, "rdma": self.rdma,
            "pci": self.pci, "oper": self.oper, "speed_mbps": self.speed_mbps,
            "rdma_state": self.rdma_state, "driver": self.driver,
            "driver_version": self.driver_version, "firmware": self.firmware, "psid": self.psid,
            "eswitch_mode": self.eswitch_mode, "esw_multiport": self.esw_multiport,
            "numvfs": self.numvfs, "representors": self.representors,
        }


@dataclass(frozen=True)
class Diagnosis:
    node: str | None
    kernel: str | None
    rails: tuple[RailRow, ...]
    findings: tuple[Finding, ...]
    #: source -> reason, for what could not be read (shown to people, not part of the contract)
    unavailable: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": "railscope.doctor/v1",
            "node": self.node,
            "kernel": self.kernel,
            "rails": [r.as_json() for r in self.rails],
            "findings": [f.as_json() for f in self.findings],
            "unavailable": [{"source": s, "reason": r} for s, r in self.unavailable],
        }

    def exit_status(self) -> int:
        """0 clean, 1 warnings only, 2 any critical (the ``railscope doctor`` contract)."""
        sev = {f.severity for f in self.findings}
        if "critical" in sev:
            return 2
        if "warning" in sev:
            return 1
        return 0
