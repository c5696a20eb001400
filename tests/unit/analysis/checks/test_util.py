"""The checks' shared wording: rail labels and cut name lists (finding messages are read by people)."""

from __future__ import annotations

from agent.analysis.checks._util import finding, name_list, rail_label


def test_rail_label_names_the_plane_only_on_a_multiplane_node():
    assert rail_label(3, None) == "3"
    assert rail_label(3, 0) == "3 plane 0"


def test_name_list_prints_up_to_eight_names_whole():
    names = [f"eth{n}" for n in range(8)]
    assert name_list(names) == "eth0, eth1, eth2, eth3, eth4, eth5, eth6, eth7"


def test_name_list_cuts_after_eight_with_how_many_more():
    names = [f"eth{n}" for n in range(11)]
    assert name_list(names) == "eth0, eth1, eth2, eth3, eth4, eth5, eth6, eth7 and 3 more"
    assert name_list(names[:9], limit=2) == "eth0, eth1 and 7 more"


def test_finding_takes_the_codes_severity_keeps_the_message_and_drops_none_evidence():
    f = finding("RailMissing", "net_rail1", "rail 1: no netdev", pci="0000:8d:00.0", netdev=None)
    assert (f.code, f.severity, f.subject, f.message, f.evidence) == (
        "RailMissing", "critical", "net_rail1", "rail 1: no netdev", {"pci": "0000:8d:00.0"})
    assert finding("NicHealthError", "pci/0000:8d:00.0", "x", "critical").severity == "critical"
