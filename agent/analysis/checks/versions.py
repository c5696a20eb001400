"""FirmwareSkew and DriverKernelUnvalidated (node-wide, subject ``node``).

The DOCA-OFED driver (and MLNX_OFED from 23.04) reports its version as ``YY.MM-x.y.z``, older
MLNX_OFED as ``N.N-x.y.z`` (``5.0-2.1.8``); the *line* (``YY.MM`` / ``N.N``) keys the table. The
inbox driver reports the kernel release (or, before Linux 5.x, its fixed ``5.0-0``) and has no table
to be checked against. NVIDIA ships precompiled driver images per kernel flavour (``-generic``,
``-nvidia``, ``-aws``, ``-azure``; ``el9_4`` for RHEL 9.4, ``amzn2023``, SUSE's ``default``), so a
row never judges another flavour's kernel.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.analysis.checks._util import Check, finding
from agent.analysis.topology import Rail, Topology
from agent.config import Expectations
from agent.findings import Finding
from agent.model import KernelRow, Snapshot

# The DOCA-OFED and MLNX_OFED 23.04+ numbering: YY.MM-x.y.z (25.10-1.7.1, 23.10-1.1.9, 24.10-0.7.0.0).
_YYMM_RE = re.compile(r"\A(?P<line>\d{2}\.(?:0[1-9]|1[0-2]))-\d+(?:\.\d+)+\Z")
# MLNX_OFED up to 5.9: N.N-x.y.z[.w] (5.0-2.1.8, 4.9-7.1.0.0, 5.8-1.0.1).
_OFED_RE = re.compile(r"\A(?P<line>[1-9]\.\d{1,2})-\d+\.\d+\.\d+(?:\.\d+)?\Z")
# The inbox driver's DRIVER_VERSION before Linux 5.x dropped it ("5.0-0", "3.0-1"); newer inbox
# drivers report the kernel release instead (ethtool -i "version: 6.8.0-60-generic").
_INBOX_OLD_RE = re.compile(r"\A\d\.\d-\d\Z")

_LINE = r"(?P<line>\d+\.\d+(?:\.\d+){0,2})"
_NUM = r"(?P<abi>\d+(?:\.\d+)*)"
_ARCH = r"(?:\.(?P<arch>x86_64|aarch64|ppc64le|s390x|i686|noarch))?"
#: (family, pattern) for ``uname -r``, tried in order.
_KERNEL_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # RHEL and its rebuilds (Rocky, Alma, Oracle's RHCK and UEK), Fedora:
    # 5.14.0-427.50.1.el9_4.x86_64, 4.18.0-553.el8_10.x86_64, 5.14.0-427.13.1.el9_4.x86_64+rt,
    # 5.14.0-427.el9.aarch64+64k, 5.15.0-300.163.18.el9uek.x86_64
    ("rhel", re.compile(rf"\A{_LINE}-{_NUM}\.(?P<flavour>el\d+(?:_\d+)?(?:uek)?|fc\d+){_ARCH}"
                        r"(?:\+(?P<variant>[a-z0-9_]+))?\Z")),
    # Amazon Linux 2 / 2023: 5.10.227-219.884.amzn2.x86_64, 6.1.106-116.188.amzn2023.x86_64
    ("amazon", re.compile(rf"\A{_LINE}-{_NUM}\.(?P<flavour>amzn\d+){_ARCH}\Z")),
    # Azure Linux 3 / CBL-Mariner 2: 6.6.47.1-1.azl3, 5.15.167.1-2.cm2
    ("azurelinux", re.compile(rf"\A{_LINE}-{_NUM}\.(?P<flavour>azl\d+|cm\d+){_ARCH}\Z")),
    # Ubuntu, Debian and SUSE: 6.8.0-60-generic, 6.8.0-1013-nvidia-64k, 5.15.0-1073-azure,
    # 6.1.0-27-cloud-amd64, 5.14.21-150500.55.65-default
    ("deb-suse", re.compile(rf"\A{_LINE}-{_NUM}-(?P<flavour>[a-z][a-z0-9]*(?:-[a-z0-9]+)*)\Z")),
    # no flavour at all: 6.8.0-60; Container-Optimized OS: 6.1.100+
    ("plain", re.compile(rf"\A{_LINE}(?:-{_NUM})?\+?\Z")),
)


@dataclass(frozen=True, slots=True)
class KernelRelease:
    release: str
    line: str
    abi: str  # <line>-<every number of the ABI / build part>
    flavour: str | None
    #: rhel | amazon | azurelinux | ubuntu | debian | suse | None
    family: str | None = None
    arch: str | None = None


@dataclass(frozen=True, slots=True)
class DriverVersion:
    raw: str
    #: "ofed" (DOCA-OFED / MLNX_OFED YY.MM numbering), "mlnx_ofed" (N.N-x.y.z), "inbox", None (unknown)
    kind: str | None
    line: str | None  # the row key of the kernel table: 25.10, 5.8; None for inbox / unknown


def _family(form: str, flavour: str | None, abi: str | None) -> str | None:
    if form != "deb-suse":
        return None if form == "plain" else form
    # SUSE's build part starts with the service pack's base (150500 = SLE 15 SP5)
    if abi and re.match(r"\A1[5-9]0[0-9]00\.", abi):
        return "suse"
    if flavour and re.fullmatch(r"(?:cloud-|rt-)?(?:amd64|arm64|i386|ppc64el|s390x)", flavour):
        return "debian"
    return "ubuntu"


def parse_kernel(release: str | None) -> KernelRelease | None:
    """``uname -r`` -> line, ABI and flavour; None if it is no kernel release this knows.

    >>> k = parse_kernel("5.14.0-427.50.1.el9_4.aarch64")
    >>> (k.line, k.abi, k.flavour, k.family)
    ('5.14.0', '5.14.0-427.50.1', 'el9_4', 'rhel')
    >>> parse_kernel("6.8.0-1013-nvidia").flavour
    'nvidia'
    """
    if not release:
        return None
    rel = release.strip()
    for form, pat in _KERNEL_FORMS:
        m = pat.match(rel)
        if not m:
            continue
        g = m.groupdict()
        line, abi, flavour = g["line"], g.get("abi"), g.get("flavour")
        if g.get("variant"):
            flavour = f"{flavour}+{g['variant']}"
        full = f"{line}-{abi}" if abi else line
        if form in ("amazon", "azurelinux"):
            # Their updates move the upstream stable release itself (6.1.106 -> 6.1.134): the line
            # is major.minor, and the ABI the whole release.
            line = ".".join(line.split(".")[:2])
        return KernelRelease(rel, line, full, flavour, _family(form, flavour, abi), g.get("arch"))
    return None


def version_key(v: str) -> tuple[int, ...]:
    """Compare kernel releases numerically part by part: ``6.8.0-60`` < ``6.8.0-100``."""
    return tuple(int(x) for x in re.findall(r"\d+", v))


def beyond(abi: str, max_abi: str) -> bool:
    """``abi`` is newer than ``max_abi``, compared to the precision of ``max_abi``.

    A row says ``6.8.0-100``: ``6.8.0-100.115`` (an upload of that ABI) is not beyond it;
    ``5.14.0-427.50.1`` is beyond ``5.14.0-427.13.1``.
    """
    limit = version_key(max_abi)
    return version_key(abi)[:len(limit)] > limit


def parse_driver_version(version: str | None) -> DriverVersion | None:
    """The mlx5 driver's version string -> which driver and which table line.

    >>> parse_driver_version("5.0-2.1.8").kind, parse_driver_version("23.10-1.1.9").line
    ('mlnx_ofed', '23.10')
    >>> parse_driver_version("6.8.0-60-generic").kind
    'inbox'
    """
    if not version or not version.strip():
        return None
    v = version.strip()
    if m := _YYMM_RE.match(v):
        return DriverVersion(v, "ofed", m.group("line"))
    if _INBOX_OLD_RE.match(v) or (parse_kernel(v) is not None and not _OFED_RE.match(v)):
        return DriverVersion(v, "inbox", None)
    if m := _OFED_RE.match(v):
        return DriverVersion(v, "mlnx_ofed", m.group("line"))
    return DriverVersion(v, None, None)


def doca_line(version: str | None) -> str | None:
    """``25.10-1.7.1`` -> ``25.10``, ``5.8-1.0.1`` -> ``5.8``; an inbox or unknown version -> None."""
    parsed = parse_driver_version(version)
    return parsed.line if parsed is not None else None


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
    if beyond(kernel.abi, best.max_abi):
        return [finding("DriverKernelUnvalidated", "node",
                        f"driver {version} runs on kernel {kernel.release}, beyond the validated {best.max_abi}-"
                        f"{best.flavour} ({best.source})", driver=version, kernel=kernel.release,
                        max_abi=best.max_abi, source=best.source)]
    return []


CHECKS = (Check(90, ("FirmwareSkew", "DriverKernelUnvalidated"), lambda i: check(i.snap, i.topo, i.exp, i.kernel_table)),)
