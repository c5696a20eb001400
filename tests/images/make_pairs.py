#!/usr/bin/env python3
"""Pairs of node images for ``railscope diff``: the base image before, and after one named change.

Each pair is built from the base image ``spectrumx-2rail-healthy/`` with the mutations of
``make_images.py`` (plus a few of its own for upgrades and counters); nothing is written into the
checked-in images. The AFTER image's manifest says it was captured ``AFTER_S`` seconds later, so
counter deltas have a time to be rates over.

    python tests/images/make_pairs.py --out /tmp/pairs          # every pair, as <out>/<name>/{before,after}
    python tests/images/make_pairs.py --out /tmp/pairs rail-down

The table test ``tests/unit/analysis/test_diff.py`` builds them in a temporary directory.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_images as mi

AFTER_S = 600


def _later(img: mi.Image) -> None:
    for key in ("started_at", "ended_at"):
        t = datetime.fromisoformat(img.manifest[key].replace("Z", "+00:00")).timestamp() + AFTER_S
        img.manifest[key] = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def vfs_fewer(img: mi.Image) -> None:
    """PF 0000:8d:00.0 went from 1 VF to none: its VF and the VF's representor are gone."""
    mi.eswitch_legacy(img)  # removes the representor and its devlink port
    argv = ["devlink", "-j", "dev", "eswitch", "show", "pci/0000:8d:00.0"]
    img.set_jcmd(argv, {"dev": {"pci/0000:8d:00.0": {"mode": "switchdev", "inline-mode": "none",
                                                     "encap-mode": "basic"}}})
    img.write("/sys/bus/pci/devices/0000:8d:00.0/sriov_numvfs", "0\n")
    img.update_link("net_rail1", vfinfo=[])


def representor_lost(img: mi.Image) -> None:
    """The representor of VF 0 of PF 0000:8d:00.0 is gone while the VF stays (switchdev, 1 VF)."""
    mi.eswitch_legacy(img)
    argv = ["devlink", "-j", "dev", "eswitch", "show", "pci/0000:8d:00.0"]
    img.set_jcmd(argv, {"dev": {"pci/0000:8d:00.0": {"mode": "switchdev", "inline-mode": "none",
                                                     "encap-mode": "basic"}}})


def multiport_on(img: mi.Image) -> None:
    """``esw_multiport`` of PF 0000:8d:00.0 is true now (a watched devlink param changed)."""
    argv = ["devlink", "-j", "dev", "param", "show", "pci/0000:8d:00.0", "name", "esw_multiport"]
    doc = img.jcmd(argv)
    doc["param"]["pci/0000:8d:00.0"][0]["values"][0]["value"] = True
    img.set_jcmd(argv, doc)


def upgrade(img: mi.Image) -> None:
    """A DOCA driver, firmware and kernel bump with nothing else changed."""
    mi.set_driver(img, version="25.10-2.1.0", firmware="28.43.1014")
    for rdma in ("rdma_rail0", "rdma_rail1"):
        img.write(f"/sys/class/infiniband/{rdma}/fw_ver", "28.43.1014\n")
    mi.set_kernel(img, "6.8.0-65-generic")


def mtu_4200(img: mi.Image) -> None:
    img.update_link("net_rail1", mtu=4200)
    img.write("/sys/class/net/net_rail1/mtu", "4200\n")


def rename_rail1(img: mi.Image) -> None:
    mi.rename_netdev(img, "net_rail1", "enp141s0f0np0")


def counters_grow(img: mi.Image) -> None:
    """600 s of traffic: 6,000 prio-3 pause frames sent, 30 s of pause time, on net_rail0."""
    c = mi.counters(img, "net_rail0")
    mi.set_counters(img, "net_rail0", tx_prio3_pause=c["tx_prio3_pause"] + 6000,
                    tx_prio3_pause_duration=c["tx_prio3_pause_duration"] + 30_000_000)


def counters_reset(img: mi.Image) -> None:
    """The driver was reloaded: net_rail0's counters started again from (almost) zero."""
    mi.set_counters(img, "net_rail0", tx_prio3_pause=7, rx_prio3_pause=3, tx_prio3_pause_duration=100,
                    rx_prio3_pause_duration=50)


@dataclass(frozen=True)
class Pair:
    name: str
    before: tuple[Callable[[mi.Image], None], ...]
    after: tuple[Callable[[mi.Image], None], ...]
    #: (code, subject) of the regressions and of the changes the diff must report, exactly
    regressions: tuple[tuple[str, str], ...] = ()
    changes: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()


PAIRS: tuple[Pair, ...] = (
    Pair("identical", (), ()),
    Pair("rail-down", (), (lambda i: mi.link_down(i, "net_rail0", "rdma_rail0"),),
         (("RailDown", "net_rail0"), ("RdmaPortDown", "rdma_rail0"))),
    Pair("rail-lost", (), (mi.rail_missing,), (("RailLost", "net_rail1"),)),
    Pair("rail-renamed", (), (rename_rail1,), (("RailRenamed", "net_rail1"),)),
    Pair("rdma-down", (), (lambda i: mi.rdma_down(i, "rdma_rail1", "DOWN", "POLLING", "1: DOWN", "2: Polling"),),
         (("RdmaPortDown", "rdma_rail1"),)),
    Pair("vfs-fewer", (), (vfs_fewer,), (("VfsFewer", "pci/0000:8d:00.0"),)),
    Pair("representor-lost", (), (representor_lost,), (("RepresentorsLost", "pci/0000:8d:00.0"),)),
    Pair("eswitch-legacy", (), (mi.eswitch_legacy,), (("EswitchModeChanged", "pci/0000:8d:00.0"),),
         args=("--expect-eswitch-mode", "switchdev")),
    Pair("param-changed", (), (multiport_on,), (("DevlinkParamChanged", "pci/0000:8d:00.0"),)),
    Pair("netns-shared", (), (mi.netns_shared,), (("RdmaNetnsChanged", "node"),)),
    Pair("pfc-lost", (), (mi.pfc_disabled,), (("PfcLost", "net_rail1"),)),
    Pair("finding-new", (), (mi.global_pause,), (("FindingNew", "net_rail0"),)),
    Pair("rail-back", (mi.rail_missing,), (), changes=(("RailAdded", "net_rail1"), ("FindingResolved", "net_rail1"))),
    Pair("finding-resolved", (mi.global_pause,), (), changes=(("FindingResolved", "net_rail0"),)),
    Pair("upgrade", (), (upgrade,),
         changes=(("DriverChanged", "node"), ("FirmwareChanged", "net_rail0"), ("FirmwareChanged", "net_rail1"),
                  ("KernelChanged", "node"))),
    Pair("upgrade-broke-a-rail", (), (upgrade, lambda i: mi.link_down(i, "net_rail0", "rdma_rail0"), counters_grow),
         (("RailDown", "net_rail0"), ("RdmaPortDown", "rdma_rail0")),
         (("DriverChanged", "node"), ("FirmwareChanged", "net_rail0"), ("FirmwareChanged", "net_rail1"),
          ("KernelChanged", "node"))),
    # Both captures have rail 1 under its kernel name on the same PCI function: the same rail. Its MTU
    # no longer matches rail 0's: a regression, beside the change of the value.
    Pair("renamed-both", (rename_rail1,), (mtu_4200, rename_rail1), (("MtuMismatched", "net_rail1"),),
         changes=(("MtuChanged", "net_rail1"),)),
    Pair("counters-grow", (), (counters_grow,)),
    Pair("counters-reset", (), (counters_reset,)),
)


def build(out: Path, only: set[str] | None = None) -> list[Pair]:
    base = mi.Image.load(mi.HERE / mi.BASE)
    made = []
    for pair in PAIRS:
        if only and pair.name not in only:
            continue
        for side, muts in (("before", pair.before), ("after", pair.after)):
            img = base.copy()
            for m in muts:
                m(img)
            if side == "after":
                _later(img)
            readme = (f"# {pair.name} ({side})\n\nA diff pair generated by `tests/images/make_pairs.py` from "
                      f"`{mi.BASE}`; not a checked-in image.\n")
            img.save(out / pair.name / side, readme, {"regressions": [list(r) for r in pair.regressions],
                                                      "changes": [list(c) for c in pair.changes]})
        made.append(pair)
    return made


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, metavar="DIR", help="Write <DIR>/<pair>/{before,after}.")
    ap.add_argument("names", nargs="*", help="Only these pairs. Default: all.")
    args = ap.parse_args()
    for pair in build(args.out, set(args.names) or None):
        print(pair.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
