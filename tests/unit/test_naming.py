"""Which naming rules name rails: operator files, site files by template, conflicts (docs/design.md §4)."""

from __future__ import annotations

import pytest

from agent import naming
from agent.model import RailRule
from agent.naming import net_twin, parse_name, rail_rules, rdma_twin

NET = "/etc/udev/rules.d/10-nic-net-interface-naming.rules"
RDMA = "/etc/udev/rules.d/10-nic-rdma-interface-naming.rules"
SITE = "/etc/udev/rules.d/70-persistent-net.rules"
AZURE = "/etc/udev/rules.d/99-rdma-persistent-naming.rules"


def names(rules: tuple[RailRule, ...]) -> list[tuple[str, str, str]]:
    return [(r.pci, r.kind, r.name) for r in rules]


def test_every_operator_rule_names_a_rail_whatever_its_name() -> None:
    rules = (RailRule("0000:1a:00.0", "storage0", "net", NET, 1), RailRule("0000:1a:00.0", "x", "rdma", RDMA, 1))
    assert names(rail_rules(rules)) == [("0000:1a:00.0", "net", "storage0"), ("0000:1a:00.0", "rdma", "x")]


def test_site_rules_name_rails_by_template_and_keep_their_pairs() -> None:
    rules = (RailRule("0000:18:00.0", "eth_rail0", "net", SITE, 1),
             RailRule("0000:18:00.0", "roce_rail0", "rdma", SITE, 2),
             RailRule("0000:1a:00.0", "eth_sec0", "net", SITE, 3),
             RailRule("0000:1a:00.0", "roce_sec0", "rdma", SITE, 4),
             RailRule("0101:00:00.0", "mlx5_ib0", "rdma", AZURE, 1))
    assert names(rail_rules(rules)) == [("0000:18:00.0", "net", "eth_rail0"), ("0000:18:00.0", "rdma", "roce_rail0"),
                                        ("0101:00:00.0", "rdma", "mlx5_ib0")]
    # a given template makes a site's own naming a rail too
    assert ("0000:1a:00.0", "net", "eth_sec0") in names(rail_rules(rules, ("eth_sec%rail_id%",)))


def test_operator_file_wins_over_a_site_file_for_one_function() -> None:
    rules = (RailRule("0000:18:00.0", "eth_rail0", "net", SITE, 1),
             RailRule("0000:18:00.0", "roce_rail0", "rdma", SITE, 2),
             RailRule("0000:18:00.0", "net_rail0", "net", NET, 4))
    assert names(rail_rules(rules)) == [("0000:18:00.0", "net", "net_rail0"), ("0000:18:00.0", "rdma", "roce_rail0")]


def test_twins_and_site_templates() -> None:
    assert rdma_twin("net_rail%rail_id%") == "rdma_rail%rail_id%"
    assert rdma_twin("eth_rail%rail_id%") == "roce_rail%rail_id%"
    assert net_twin("roce_rail%rail_id%") == "eth_rail%rail_id%" and net_twin("mlx5_ib%rail_id%") is None
    assert parse_name("mlx5_ib3", ("mlx5_ib%rail_id%",)).rail == 3


def test_parse_port_name_forms() -> None:
    parse = naming.parse_port_name
    assert parse("p1").index == 1 and not parse("p1").is_representor
    assert parse("pf0sf88").kind == "sf"
    assert parse("c1pf0vf3").controller == 1
    assert parse("pf0").kind == "pf" and parse("pf0").is_representor
    assert parse("eth0") is None
    # ASCII digits only (the kernel prints %u); more digits than int() converts names no port
    assert parse("pf\u0663vf1") is None
    assert parse("p" + "1" * 5000) is None


def test_vf_netdev_names_and_pci_order() -> None:
    assert naming.is_vf_netdev_of("net_rail0_12", "net_rail0")
    assert not naming.is_vf_netdev_of("net_rail0_12", "net_rail")
    names = ["0000:8d:00.0", "10000:00:00.0", "0000:0c:00.0", "netdevsim10", "netdevsim1"]
    assert sorted(names, key=naming.pci_order) == [
        "0000:0c:00.0", "0000:8d:00.0", "10000:00:00.0", "netdevsim1", "netdevsim10"]


def test_a_rail_map_is_rail_equals_pci_pairs_sorted_by_rail_in_sysfs_case() -> None:
    assert naming.parse_rail_map("1=0000:8D:00.0, 0=0000:0c:00.0") == ((0, "0000:0c:00.0"), (1, "0000:8d:00.0"))
    # Hyper-V's wider PCI domains (Azure) are PCI functions too
    assert naming.parse_rail_map("0=0101:00:00.0") == ((0, "0101:00:00.0"),)


@pytest.mark.parametrize("text, why", [
    ("0=0c:00.0", "'0c:00.0' has no PCI domain: write it as sysfs does, 0000:0c:00.0 (lspci -D prints it so)"),
    ("0=0000:0c:00.0,1=0000:0c:00.0", "0000:0c:00.0 is given for rails 0 and 1: one function is one rail"),
    ("0=0000:0c:00.0,0=0000:8d:00.0", "rail 0 is given twice (0000:0c:00.0 and 0000:8d:00.0)"),
    ("rail0=0000:0c:00.0", "rail 'rail0' is not a rail number 0-1023"),
    ("1024=0000:0c:00.0", "rail '1024' is not a rail number 0-1023"),
    ("-1=0000:0c:00.0", "rail '-1' is not a rail number 0-1023"),
    ("0=0000:0c:20.0", "'0000:0c:20.0' is not a PCI function address such as 0000:0c:00.0"),
    ("0=0000:0c:00.8", "is not a PCI function address"),
    ("0=net_rail0", "is not a PCI function address"),
    ("0=0000:0c:00.0,", "entry 2 '': expected RAIL=PCI"),
    ("0:0000:0c:00.0", "entry 1 '0:0000:0c:00.0': expected RAIL=PCI"),
])
def test_a_rail_map_entry_that_is_not_a_rail_and_a_pci_function_is_refused_by_name(text: str, why: str) -> None:
    with pytest.raises(naming.RailMapError) as exc:
        naming.parse_rail_map(text)
    assert why in str(exc.value)
