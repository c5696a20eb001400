"""Each capture plug-in's firmware reads (docs/design.md §3 "Which functions are touched", §7): the rail's go
through its PCI function's firmware gate; an excluded rail and an mlx5 function that is no rail get none.

On mlx5 these reach the firmware (drivers/net/ethernet/mellanox/mlx5/core, torvalds/linux):
``ethtool -a`` en_ethtool.c mlx5e_get_pauseparam -> port.c mlx5_query_port_pause (PFCC register);
``ethtool --show-fec`` mlx5e_get_fecparam -> en/port.c mlx5e_get_fec_mode (PPLM); ``dcb <obj> show``
dcbnl's DCB_CMD_IEEE_GET calls every getter of en_dcbnl.c (getets QTCT / QETCR, getmaxrate QETCR,
getpfc PFCC, getbuffer PBMC / PPTB); ``devlink dev info`` devlink.c mlx5_devlink_info_get (MCQI / MCQS);
``devlink health diagnose`` and ``rdma statistic`` the reporters' and counters' commands.

The node: two rails on two PFs and a third SR-IOV capable mlx5 function (``ens7f0np0`` on
``0000:a1:00.0``, listed by devlink, with an RDMA device) that is no rail: an HGX baseboard's
restricted PF, whose register reads fail and flood the kernel log. Commands are recorded, not run.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from agent.capture.plugin import Command, Plugin
from agent.capture.plugins import dcb, devlink, ethtool, rdma
from agent.capture.runner import CaptureParams, capture
from agent.config import ReadConfig
from agent.host import CmdResult
from agent.host.firmware import FirmwareGate
from agent.host.live import LiveHost
from agent.model import DevlinkDev, EthtoolStats, HealthReporter, Link, RdmaLink, Snapshot
from tests.support.capture_kit import manifest

#: netdev -> its PCI function; r0 and r1 are the rails (they have ethtool statistics), ens7f0np0 is not
PF = {"r0": "0000:0a:00.0", "r1": "0000:0b:00.0", "ens7f0np0": "0000:a1:00.0"}
RAILS = ("r0", "r1")
#: every word a step's argv names a device by -> that device's PCI function
WORDS = {**PF, **{f"pci/{pf}": pf for pf in PF.values()},
         **{f"mlx5_{i}/1": PF[n] for i, n in enumerate(PF)}}


def _snapshot() -> Snapshot:
    return Snapshot(
        taken_at=0.0, node="n",
        links=tuple(Link(ifindex=i + 1, ifname=n, parent_bus="pci", parent_dev=pf) for i, (n, pf) in enumerate(PF.items())),
        ethtool=tuple(EthtoolStats(n, ()) for n in RAILS),
        devlink_devs=tuple(DevlinkDev(f"pci/{pf}") for pf in PF.values()),
        rdma_links=tuple(RdmaLink(f"mlx5_{i}", 1, netdev=n) for i, n in enumerate(PF)),
        health=tuple(HealthReporter(f"pci/{pf}", f"pci/{pf}", None, "fw", "healthy") for pf in PF.values()))


class GateWatchingHost(LiveHost):
    """A live host over an empty root whose commands are kept, not run: for each, the PCI function it
    names and whether that function's gate was held by the thread that ran it."""

    def __init__(self, root: str, gate: FirmwareGate) -> None:
        super().__init__(root)
        self.gate = gate
        self.seen: list[tuple[tuple[str, ...], str | None, bool]] = []
        self._lock = threading.Lock()

    def run(self, argv: Any, timeout_s: float | None = None, max_bytes: int = 8 << 20, **kw: Any) -> CmdResult:
        args = tuple(str(a) for a in argv)
        pf = next((WORDS[a] for a in args[1:] if a in WORDS), None)
        with self._lock:
            self.seen.append((args, pf, pf is not None and self._held_here(pf)))
        return CmdResult(args, 0, b"{}\n")

    def _held_here(self, key: str) -> bool:
        # another thread cannot take it now; the lock is re-entrant, so this thread could
        free: list[bool] = []

        def probe() -> None:
            got = self.gate.acquire(key, 0)
            if got:
                self.gate.release(key)
            free.append(got)

        th = threading.Thread(target=probe)
        th.start()
        th.join()
        return not free[0]


def _firmware_steps(mod: ModuleType) -> list[Command]:
    return [s for s in mod.PLUGIN.steps if isinstance(s, Command) and s.firmware]


def _capture(tmp_path: Path, mod: ModuleType, exclude: str | None) -> tuple[GateWatchingHost, dict[tuple[str, ...], Any]]:
    snap = _snapshot()
    replay = SimpleNamespace(PLUGIN=Plugin("replay", 1, ()), record=lambda ctx, rec: snap)
    gate = FirmwareGate()
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    host = GateWatchingHost(str(root), gate)
    out = io.BytesIO()
    capture(host, out, CaptureParams(node="n", nice=0, recorder_gap_s=0, firmware_gate=gate,
                                     cfg=ReadConfig(exclude_devices=exclude)),
            plugin_modules=[replay, SimpleNamespace(PLUGIN=mod.PLUGIN)], staging_dir=str(tmp_path))
    items = {tuple(i["argv"]): i for i in manifest(out.getvalue())["items"] if i.get("argv")}
    return host, items


PLUGINS = {"ethtool": ethtool, "dcb": dcb, "devlink": devlink, "rdma": rdma}
#: what reaches the firmware on mlx5, by the commands' own words (see the module's doc), not the plugins' marks
FIRMWARE: dict[str, tuple[tuple[str, ...], ...]] = {
    "ethtool": (("ethtool", "-S"), ("ethtool", "-a"), ("ethtool", "--show-fec"), ("ethtool", "-m")),
    "dcb": (("dcb",),),
    "devlink": (("devlink", "-j", "dev", "info"), ("devlink", "-j", "health", "diagnose")),
    "rdma": (("rdma", "-j", "statistic"),),
}


@pytest.mark.parametrize("name", ["ethtool", "dcb"])
def test_pause_fec_and_dcb_are_marked_firmware_per_rail(name: str) -> None:
    marked = {s.argv for s in _firmware_steps(PLUGINS[name])}
    want = ({("ethtool", "-a", "{rail}"), ("ethtool", "--show-fec", "{rail}")} if name == "ethtool" else
            {("dcb", "-j", w, "show", "dev", "{rail}") for w in ("pfc", "app", "buffer", "ets")})
    assert want <= marked
    assert all(s.firmware == "rail" for s in _firmware_steps(PLUGINS[name]) if s.argv in want)


@pytest.mark.parametrize("exclude", [r"0000:0b:00\.0", r"^r1$"], ids=["by-pci-address", "by-netdev"])
@pytest.mark.parametrize("name", list(PLUGINS))
def test_a_plugins_firmware_reads_reach_the_rail_through_its_gate_and_nothing_else(
        tmp_path: Path, name: str, exclude: str) -> None:
    host, items = _capture(tmp_path, PLUGINS[name], exclude)

    def firmware(argv: tuple[str, ...]) -> bool:
        return any(argv[:len(p)] == p for p in FIRMWARE[name])

    ran = [(argv, pf, held) for argv, pf, held in host.seen if firmware(argv)]
    assert ran, f"{name}: no firmware step ran"
    # the rail r0 (PF 0a) gets every firmware step, each while the runner holds that PF's gate
    assert {pf for _, pf, _ in ran} == {PF["r0"]}, ran
    assert all(held for _, _, held in ran), [a for a, _, h in ran if not h]
    assert len(ran) == len({a for a, _, _ in ran})  # each once
    # the excluded rail's are in the bundle as skipped, saying why; the function that is no rail's are not even listed
    skipped = [argv for argv, it in items.items() if firmware(argv) and it.get("skipped")]
    assert skipped and all(WORDS[next(a for a in argv[1:] if a in WORDS)] == PF["r1"] for argv in skipped)
    assert all(items[a]["reason"] == "excluded by --exclude-devices" for a in skipped)
    assert not [a for a in items if any(w in ("ens7f0np0", "pci/0000:a1:00.0", "mlx5_2/1") for w in a)]
