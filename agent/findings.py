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
    "FirmwarePendingActivation": "info",
    "GpuDirectNotReady": "warning",
    "MtuMismatch": "warning",
    "DriverNotDoca": "warning",
    "RailNamingConflict": "critical",
    "RailResourcesLost": "critical",
}

#: code -> default severity of every event a detector emits.
EVENT_CODES: dict[str, str] = {
    **{code: CODES[code] for code in ("LinkFlapping", "ConfigFlapping", "RepresentorStale", "PfcStorm",
                                      "LosslessDrops", "NicHealthError")},
    "DriverReload": "info",
    # frames above a rail's MTU arrive (rx_oversize_pkts_phy rose): the rising form of MtuMismatch
    "MtuMismatch": CODES["MtuMismatch"],
    # the device plugin advertised 0 of a rail resource after more: only the API server knows (DESIGN §4)
    "RailResourcesLost": CODES["RailResourcesLost"],
}

#: code -> what to run or check next, and who owns the fix: the line a person reads after the finding.
NEXT_STEPS: dict[str, str] = {
    "FirmwarePendingActivation": "Activate the flashed image in a maintenance window (mlxfwreset or a cold reboot of "
                                 "the node, drained) and check `devlink dev info` again; the firmware owner schedules it.",
    "GpuDirectNotReady": "Load nvidia_peermem (GPU Operator driver.rdma.enabled=true) or run the open GPU kernel "
                         "modules on kernel >= 5.12 for DMA-BUF, then check NCCL_DEBUG=INFO says GDR; the GPU "
                         "Operator owner fixes it.",
    "MtuMismatch": "Compare `ip link show <rail>` with the other rails and the switch port; the NicClusterPolicy / "
                   "SR-IOV network owner sets the MTU.",
    "DriverNotDoca": "Check the DOCA driver pod (Network Operator ofedDriver) on this node: when it ended, the inbox "
                     "driver came back; the Network Operator owner restarts or fixes it.",
    "RailNamingConflict": "Keep one naming rule per PCI function and one function per name in "
                          "/etc/udev/rules.d (nic-configuration-operator's files win); the node image owner "
                          "removes the other rule and reboots.",
    "RailResourcesLost": "Stop the rollout; check the RDMA / SR-IOV device plugin pod and its config on this node "
                         "(`kubectl describe node` allocatable); the Network Operator owner restarts the plugin.",
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
    #: the GPU nearest the rail PF in the PCIe tree, and how near (``nvidia-smi topo -m`` words)
    gpu: str | None = None
    gpu_link: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "rail": self.rail, "plane": self.plane, "netdev": self.netdev, "rdma": self.rdma,
            "pci": self.pci, "oper": self.oper, "speed_mbps": self.speed_mbps,
            "rdma_state": self.rdma_state, "driver": self.driver,
            "driver_version": self.driver_version, "firmware": self.firmware, "psid": self.psid,
            "eswitch_mode": self.eswitch_mode, "esw_multiport": self.esw_multiport,
            "numvfs": self.numvfs, "representors": self.representors,
            "gpu": self.gpu, "gpu_link": self.gpu_link,
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
