"""``railscope doctor`` live with a site's own udev rules file in a temporary host root.

The namespace's links are real (veth rails, read through rtnetlink); the files come from a
temporary ``--host-root`` holding ``/etc/udev/rules.d/70-persistent-net.rules`` as a site writes it
(github.com/schmaustech/gpu-nic-rail-mapping's format: net and RDMA rules side by side, storage NICs
beside the rails) and no nic-configuration-operator file. A veth has no PCI function, so the rails
the rules name by PCI function have no netdev: the node must say so (RailMissing on the expected
names), never "OK" as it did when only the operator's files were read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.netns import RailNetns

pytestmark = pytest.mark.netns

SITE = "/etc/udev/rules.d/70-persistent-net.rules"
RULES = (
    'ACTION=="add", KERNELS=="0000:18:00.0", SUBSYSTEM=="net", NAME="eth_rail0"\n'
    'ACTION=="add", KERNELS=="0000:18:00.0", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FIXED roce_rail0"\n'
    'ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="net", NAME="eth_sec0"\n'
    'ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FIXED roce_sec0"\n'
    'ACTION=="add", KERNELS=="0000:3a:00.0", SUBSYSTEM=="net", NAME="eth_rail1"\n'
    'ACTION=="add", KERNELS=="0000:3a:00.0", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FIXED roce_rail1"\n'
    'ACTION=="add", KERNELS=="0000:s2:00.0", SUBSYSTEM=="net", NAME="eth_rail2"\n'
)


def rail_findings(doc: dict) -> list[tuple[str, str, str]]:
    # veths have no PFC counters (PfcDisabled): only the rail codes are this test's
    return [(f["code"], f["severity"], f["subject"]) for f in doc["findings"] if f["code"].startswith("Rail")]


def doctor(rails: RailNetns, root: Path, *args: str) -> tuple[int, dict]:
    res = rails.railscope("doctor", "--json", "--rails", "2", "--host-root", str(root), *args)
    assert res.returncode in (0, 1, 2), res.stderr
    return res.returncode, json.loads(res.stdout)


def test_site_rules_file_names_the_rails(rails: RailNetns, tmp_path: Path) -> None:
    root = tmp_path / "host"
    (root / "etc/udev/rules.d").mkdir(parents=True)

    # Without any rules file the veths are the two rails --rails asks for, by their template names.
    _rc, doc = doctor(rails, root)
    assert rail_findings(doc) == []
    assert [(r["rail"], r["netdev"]) for r in doc["rails"]] == [(0, "net_rail0"), (1, "net_rail1")]

    (root / SITE.lstrip("/")).write_text(RULES)
    rc, doc = doctor(rails, root)
    assert rc == 2
    # The malformed line 7 is a finding of its own on the rules file, besides "not available".
    assert rail_findings(doc) == [("RailMissing", "critical", "eth_rail0"), ("RailMissing", "critical", "eth_rail1"),
                                  ("RailRuleUnreadable", "warning", SITE)]
    assert [(r["rail"], r["pci"], r["netdev"]) for r in doc["rails"]] == [
        (0, "0000:18:00.0", None), (1, "0000:3a:00.0", None)]
    assert {"source": "udev rules",
            "reason": f'{SITE} line 7: KERNELS=="0000:s2:00.0" is not a PCI function address'} in doc["unavailable"]

    # An operator file naming the same function wins over the site's file (the expected name), and the
    # two rules naming one function differently are a conflict of their own: only one wins at boot.
    (root / "etc/udev/rules.d/10-nic-net-interface-naming.rules").write_text(
        'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:18:00.0", NAME="net_rail0"\n')
    _rc, doc = doctor(rails, root)
    assert rail_findings(doc) == [("RailMissing", "critical", "eth_rail1"), ("RailMissing", "critical", "net_rail0"),
                                  ("RailNamingConflict", "critical", "pci/0000:18:00.0"),
                                  ("RailRuleUnreadable", "warning", SITE)]
