"""FirmwareSkew and DriverKernelUnvalidated (node-wide, subject ``node``).

The DOCA/OFED driver reports its version as ``YY.MM-x.y.z`` (its *line* is ``YY.MM``); the inbox
driver reports the kernel release and has no table to be checked against. NVIDIA ships precompiled
driver images per kernel flavour (``-generic``, ``-nvidia``, ``-aws``, ``-azure``), so a row never
judges another flavour's kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.analysis.checks._util import finding
from agent.analysis.topology import Rail, Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import Snapshot

_DOCA_RE = re.compile(r"\A(?P<line>\d{2}\.\d{2})-\d+(?:\.\d+)*")
# 6.8.0-60-generic, 6.8.0-1013-nvidia, 5.15.0-105.115-generic (Ubuntu's full upload number)
_KERNEL_RE = re.compile(r"\A(?P<line>\d+\.\d+(?:\.\d+)?)-(?P<abi>\d+)(?:\.[0-9.]+)?(?:-(?P<flavour>[a-z0-9][a-z0-9-]*))?\Z")


@dataclass(frozen=True, slots=True)
class KernelRow:
    driver: str  # YY.MM
    flavour: str
    kernel_line: str
    max_abi: str  # <kernel_line>-<abi>
    source: str = ""


@dataclass(frozen=True, slots=True)
class KernelRelease:
    release: str
    line: str
    abi: str  # <line>-<abi number>
    flavour: str | None


def parse_kernel(release: str | None) -> KernelRelease | None:
    """``6.8.0-60-generic`` -> line ``6.8.0``, abi ``6.8.0-60``, flavour ``generic``; None if not that form.

    >>> parse_kernel("6.8.0-1013-nvidia").flavour
    'nvidia'
    """
    if not release:
        return None
    m = _KERNEL_RE.match(release.strip())
    if not m:
        return None
    return KernelRelease(release.strip(), m.group("line"), f"{m.group('line')}-{m.group('abi')}", m.group("flavour"))


def version_key(v: str) -> tuple[int, ...]:
    """Compare kernel releases numerically part by part: ``6.8.0-60`` < ``6.8.0-100``."""
    return tuple(int(x) for x in re.findall(r"\d+", v))


def doca_line(version: str | None) -> str | None:
    """``25.10-1.7.1`` -> ``25.10``; an inbox version (the kernel release) -> None."""
    if not version:
        return None
    m = _DOCA_RE.match(version.strip())
    return m.group("line") if m else None


def driver_version(snap: Snapshot, topo: Topology) -> str | None:
    if snap.versions.mlx5_version:
        return snap.versions.mlx5_version.strip()
    for rail in topo.rails:
        if rail.netdev is not None:
            d = snap.driver_of(rail.netdev.ifname)
            if d is not None and d.version:
                return d.version
    return None


def check(snap: Snapshot, topo: Topology, exp: Expectations, table: tuple[KernelRow, ...] = ()) -> list[Finding]:
    return firmware_skew(snap, topo) + driver_kernel(snap, topo, table)


def _firmware(snap: Snapshot, rail: Rail) -> tuple[str | None, str | None]:
    d = snap.driver_of(rail.netdev.ifname) if rail.netdev is not None else None
    fw = d.firmware if d is not None and d.firmware else None
    if fw is None and rail.rdma_device is not None and rail.rdma_device.fw_ver:
        fw = rail.rdma_device.fw_ver.split()[0]
    model = None
    if rail.rdma_device is not None and rail.rdma_device.hca_type:
        model = rail.rdma_device.hca_type
    elif d is not None and d.psid:
        model = d.psid
    return fw, model


def firmware_skew(snap: Snapshot, topo: Topology) -> list[Finding]:
    by_model: dict[str, dict[str, list[str]]] = {}
    for rail in topo.rails:
        if rail.netdev is None:
            continue
        fw, model = _firmware(snap, rail)
        if fw is None or model is None:
            # Without hca_type or PSID nothing says two rails are the same model: different
            # adapters (a BlueField-3 beside a ConnectX-7) legitimately run different firmware.
            continue
        by_model.setdefault(model, {}).setdefault(fw, []).append(rail.expected_netdev)
    # One finding for the node (subject "node"), every skewed model in it: two findings with the same
    # code and subject would be merged into one and the second model's skew lost.
    skewed = {model: {fw: names for fw, names in sorted(fws.items())}
              for model, fws in sorted(by_model.items()) if len(fws) > 1}
    if not skewed:
        return []
    desc = "; ".join(f"rails of NIC model {model} run different firmware: "
                     + "; ".join(f"{fw} on {', '.join(names)}" for fw, names in fws.items())
                     for model, fws in skewed.items())
    if len(skewed) == 1:
        ((model, fws),) = skewed.items()
        return [finding("FirmwareSkew", "node", desc, model=model, firmware=fws)]
    return [finding("FirmwareSkew", "node", desc, models=skewed)]


def driver_kernel(snap: Snapshot, topo: Topology, table: tuple[KernelRow, ...]) -> list[Finding]:
    version = driver_version(snap, topo)
    line = doca_line(version)
    if line is None:
        return []
    rows = [r for r in table if r.driver == line]
    if not rows:
        return []
    kernel = parse_kernel(snap.versions.kernel)
    if kernel is None:
        if not snap.versions.kernel:
            return []
        return [finding("DriverKernelUnvalidated", "node",
                        f"driver {version} on kernel {snap.versions.kernel}: not a kernel release the table knows",
                        severity="info", driver=version, kernel=snap.versions.kernel)]
    same = [r for r in rows if r.flavour == kernel.flavour and r.kernel_line == kernel.line]
    if not same:
        known = sorted({f"{r.kernel_line}-{r.flavour}" for r in rows})
        return [finding("DriverKernelUnvalidated", "node",
                        f"driver {version} on kernel {kernel.release}: kernel line {kernel.line} "
                        f"({kernel.flavour or 'no flavour'}) has no validated row for driver {line} (unknown, "
                        f"not wrong)", severity="info", driver=version, kernel=kernel.release, known=known)]
    best = max(same, key=lambda r: version_key(r.max_abi))
    if version_key(kernel.abi) > version_key(best.max_abi):
        return [finding("DriverKernelUnvalidated", "node",
                        f"driver {version} runs on kernel {kernel.release}, beyond the validated {best.max_abi}-"
                        f"{best.flavour} ({best.source})", driver=version, kernel=kernel.release,
                        max_abi=best.max_abi, source=best.source)]
    return []
