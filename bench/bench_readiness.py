"""The readiness sources' cost per interval on an 8-rail GPU node, and ``railscope preflight``'s wall time
as a whole process next to ``railscope doctor``'s.

``python bench/bench_agent.py --readiness`` (or this file) prints:

- ``gpus`` (a sysfs scan every interval, default 60 s): CPU and wall per read through the live host on a
  real directory tree shaped like an HGX node with 8 rails x 127 VFs: 8 GPUs, 8 PCIe switches (root
  port, upstream and two downstream ports each), 8 rail PFs, 1,016 VFs and 64 other functions — 1,128
  entries in ``/sys/bus/pci/devices`` to read ``vendor`` of, the same syscalls as sysfs;
- ``firmware`` (``devlink -j dev info <PF>`` for each of the 8 rail PFs, default 60 s): wall and CPU of
  the 8 commands as the runner spawns them, here against the local devlink (a handle that does not
  exist answers at once: the spawn and netlink cost; a real mlx5 adds its firmware query, which this
  machine cannot show);
- the share of one core each costs at its default interval;
- ``railscope preflight`` and ``railscope doctor`` as whole processes (``python -m agent.cli``,
  interpreter start included) on a node image, median of ``--runs``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RAILS = 8
VFS = 127
OTHERS = 64


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_tree(root: Path) -> list[str]:
    """An HGX-shaped /sys under ``root``; returns the rail PFs' addresses."""
    devices = root / "sys/bus/pci/devices"
    devices.mkdir(parents=True)

    def fn(parent: str, bdf: str, vendor: str, cls: str, numa: int) -> None:
        d = root / "sys/devices" / parent / bdf
        for name, value in (("vendor", vendor), ("class", cls), ("numa_node", str(numa)), ("device", "0x0000")):
            _write(d / name, value + "\n")
        os.symlink(os.path.relpath(d, devices), devices / bdf)

    rails = []
    for i in range(RAILS):
        bus = 0x10 + i * 0x10
        numa = i // 4
        rp = f"pci0000:{bus:02x}/0000:{bus:02x}:01.0"
        usp = f"{rp}/0000:{bus + 1:02x}:00.0"
        fn(f"pci0000:{bus:02x}", f"0000:{bus:02x}:01.0", "0x8086", "0x060400", numa)
        fn(rp, f"0000:{bus + 1:02x}:00.0", "0x1000", "0x060400", numa)
        fn(usp, f"0000:{bus + 2:02x}:00.0", "0x1000", "0x060400", numa)
        fn(usp, f"0000:{bus + 2:02x}:01.0", "0x1000", "0x060400", numa)
        fn(f"{usp}/0000:{bus + 2:02x}:00.0", f"0000:{bus + 3:02x}:00.0", "0x10de", "0x030200", numa)
        pf = f"0000:{bus + 4:02x}:00.0"
        fn(f"{usp}/0000:{bus + 2:02x}:01.0", pf, "0x15b3", "0x020000", numa)
        rails.append(pf)
        for v in range(VFS):
            n = v + 1
            fn(f"{usp}/0000:{bus + 2:02x}:01.0", f"0000:{bus + 4:02x}:{n // 8:02x}.{n % 8}", "0x15b3", "0x020000",
               numa)
    for k in range(OTHERS):
        fn("pci0000:00", f"0000:00:{k // 8:02x}.{k % 8}", "0x8086", "0x088000", 0)
    _write(root / "sys/module/nvidia/version", "570.133.20\n")
    _write(root / "sys/module/nvidia/taint", "PO\n")
    _write(root / "sys/module/nvidia_peermem/version", "570.133.20\n")
    return rails


def _time(fn, runs: int) -> tuple[float, float]:
    cpu, wall = [], []
    for _ in range(runs):
        c0, w0 = time.process_time(), time.perf_counter()
        fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall)


def sources(runs: int) -> dict[str, float]:
    from agent.config import ReadConfig
    from agent.host.live import LiveHost
    from agent.model import PciFunction
    from agent.readers import sources as reg
    from agent.readers.common import Notes

    with tempfile.TemporaryDirectory(prefix="railscope-bench-") as tmp:
        rails = build_tree(Path(tmp))
        host = LiveHost(tmp)
        ctx = reg.Context(rail_bdfs=tuple(rails))
        gpus = reg.by_name("gpus")
        part = gpus.read(host, ReadConfig(), ctx, Notes())
        assert len(part.fields["gpus"].gpus) == RAILS, part
        entries = len(os.listdir(Path(tmp) / "sys/bus/pci/devices"))
        g0_cpu, g0_wall = _time(lambda: gpus.read(host, ReadConfig(), ctx, Notes()), runs)
        # as the agent runs it: the links source has read the rail PFs' VFs (virtfn*), which are no GPUs
        ctx = reg.Context(rail_bdfs=tuple(rails), functions=tuple(
            PciFunction(pf, sriov_numvfs=VFS, virtfns=tuple(f"{pf[:8]}{(v + 1) // 8:02x}.{(v + 1) % 8}"
                                                             for v in range(VFS))) for pf in rails))
        assert len(gpus.read(host, ReadConfig(), ctx, Notes()).fields["gpus"].gpus) == RAILS
        g_cpu, g_wall = _time(lambda: gpus.read(host, ReadConfig(), ctx, Notes()), runs)
    live = LiveHost("/")
    fw = reg.by_name("firmware")
    fctx = reg.Context(rail_bdfs=tuple(rails))
    f_cpu_self, f_wall = _time(lambda: fw.read(live, ReadConfig(), fctx, Notes()), runs)
    # the children's CPU (devlink itself) is not in process_time: take it from the children's times
    t0 = os.times()
    for _ in range(runs):
        fw.read(live, ReadConfig(), fctx, Notes())
    t1 = os.times()
    f_children = ((t1.children_user - t0.children_user) + (t1.children_system - t0.children_system)) / runs
    return {"pci_entries": entries, "gpus_cpu_ms": g_cpu * 1e3, "gpus_wall_ms": g_wall * 1e3,
            "gpus_unskipped_cpu_ms": g0_cpu * 1e3, "gpus_unskipped_wall_ms": g0_wall * 1e3,
            "firmware_cpu_ms": (f_cpu_self + f_children) * 1e3, "firmware_wall_ms": f_wall * 1e3,
            "gpus_core_share_60s": g_cpu / 60.0, "firmware_core_share_60s": (f_cpu_self + f_children) / 60.0}


def processes(runs: int, image: Path) -> dict[str, float]:
    def run(cmd: str) -> float:
        walls = []
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "agent.cli", cmd, "--from", str(image)], cwd=ROOT,
                           capture_output=True, check=False, timeout=120)
            walls.append(time.perf_counter() - t0)
        return statistics.median(walls) * 1e3

    return {"doctor_ms": run("doctor"), "preflight_ms": run("preflight")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=9, help="Runs per figure (median). Default: 9.")
    ap.add_argument("--image", type=Path, default=ROOT / "tests/images/gpudirect-hgx-pix-healthy",
                    help="The node image doctor and preflight read. Default: tests/images/gpudirect-hgx-pix-healthy.")
    args = ap.parse_args(argv)
    s = sources(args.runs)
    print(f"gpus source, {RAILS} rails, {s['pci_entries']} PCI functions: {s['gpus_cpu_ms']:.1f} ms CPU, "
          f"{s['gpus_wall_ms']:.1f} ms wall per read (the VFs the links source knows skipped; "
          f"{s['gpus_unskipped_cpu_ms']:.1f} ms CPU, {s['gpus_unskipped_wall_ms']:.1f} ms wall reading every "
          f"vendor); at 60 s: {s['gpus_core_share_60s'] * 100:.3f} % of a core")
    print(f"firmware source, {RAILS} x devlink -j dev info: {s['firmware_cpu_ms']:.1f} ms CPU (with devlink), "
          f"{s['firmware_wall_ms']:.1f} ms wall per read; at 60 s: {s['firmware_core_share_60s'] * 100:.3f} % of a core")
    p = processes(args.runs, args.image)
    print(f"whole process on {args.image.name}: doctor {p['doctor_ms']:.0f} ms, preflight {p['preflight_ms']:.0f} ms "
          f"(x{p['preflight_ms'] / p['doctor_ms']:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
