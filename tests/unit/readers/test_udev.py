"""udev reader: nic-configuration-operator naming rules -> RailRule with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.model import RailRule
from agent.readers.common import Notes
from agent.readers.udev import NET_RULES, RDMA_RULES, parse_rules, read_rules
from tests.support.imagekit import make_image, public


def _section(marker: str) -> str:
    """The lines of the public sample after ``marker`` up to the next ``# ---`` / ``# =====`` header."""
    out, on = [], False
    for line in public("mlx5/udev-nic-configuration-operator.txt").splitlines():
        if line.startswith(marker):
            on = True
            continue
        if on and line.startswith(("# ---", "# =====")):
            break
        if on:
            out.append(line)
    return "\n".join(out) + "\n"


def test_operator_readme_rules() -> None:
    net = parse_rules(_section("# --- /etc/udev/rules.d/10-nic-net-interface-naming.rules"), NET_RULES, "net")
    assert [(r.pci, r.name, r.line) for r in net] == [
        ("0000:1a:00.0", "net_0_0_0", 4), ("0000:1a:00.1", "net_0_1_0", 5),
        ("0000:3a:00.0", "net_1_0_1", 6), ("0000:3a:00.1", "net_1_1_1", 7)]
    rdma = parse_rules(_section("# --- /etc/udev/rules.d/10-nic-rdma-interface-naming.rules"), RDMA_RULES, "rdma")
    assert [(r.pci, r.name) for r in rdma] == [
        ("0000:1a:00.0", "rdma_0_0_0"), ("0000:1a:00.1", "rdma_0_1_0"),
        ("0000:3a:00.0", "rdma_1_0_1"), ("0000:3a:00.1", "rdma_1_1_1")]
    assert all(r.kind == "rdma" and r.file == RDMA_RULES for r in rdma)


def test_rdma_rename_program_form_and_noise() -> None:
    text = ('# comment KERNELS=="0000:01:00.0", NAME="nope"\n'
            'ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="infiniband", '
            'PROGRAM="rdma_rename %k NAME_FIXED rdma_rail0"\n'
            'ACTION=="add", KERNELS=="0000:2a:00.0", SUBSYSTEM=="infiniband", '
            'RUN+="/usr/bin/rdma dev set %k name rdma_rail1"\n'
            'ACTION=="add", KERNELS=="not-a-pci", RUN+="/usr/bin/rdma dev set %k name x"\n'
            'ACTION=="add", KERNELS=="0000:3a:00.0", RUN+="/bin/true"\n')
    rules = parse_rules(text, RDMA_RULES, "rdma")
    assert rules == (RailRule("0000:1a:00.0", "rdma_rail0", "rdma", RDMA_RULES, 2),
                     RailRule("0000:2a:00.0", "rdma_rail1", "rdma", RDMA_RULES, 3))


def test_name_too_long_is_kept_for_the_check() -> None:
    (r,) = parse_rules('SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1A:00.0", NAME="net_rail0_plane0_long"\n',
                       NET_RULES, "net")
    assert r.name == "net_rail0_plane0_long" and r.pci == "0000:1a:00.0"


def test_read_rules_files(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={
        NET_RULES: 'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:0c:00.0", NAME="net_rail0"\n'})
    notes = Notes()
    rules = read_rules(host, notes)
    assert rules == (RailRule("0000:0c:00.0", "net_rail0", "net", NET_RULES, 1),)
    assert notes.unavailable == [("udev rdma rules", f"{RDMA_RULES}: not present")]


# A site's own rules file, as github.com/schmaustech/gpu-nic-rail-mapping (README) generates it for a
# Dell XE9680 H200 node: rails and storage NICs in one file, net and RDMA rules side by side.
SITE = "/etc/udev/rules.d/70-persistent-net.rules"
SITE_TEXT = (
    'ACTION=="add", KERNELS=="0000:18:00.0", SUBSYSTEM=="net", NAME="eth_rail0"\n'
    'ACTION=="add", KERNELS=="0000:18:00.0", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FIXED roce_rail0"\n'
    'ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="net", NAME="eth_sec0"\n'
    'ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="infiniband", PROGRAM="rdma_rename %k NAME_FIXED roce_sec0"\n'
)
# learn.microsoft.com, HBv5-series, "Known Issues with IB RDMA and NUMA Node Affinity"
AZURE = "/etc/udev/rules.d/99-rdma-persistent-naming.rules"
AZURE_TEXT = (
    'ACTION=="add", SUBSYSTEMS=="pci", KERNELS=="0101:00:00.0", PROGRAM="rdma_rename %k NAME_FIXED mlx5_ib0"\n'
    'ACTION=="add", SUBSYSTEMS=="pci", KERNELS=="0102:00:00.0", PROGRAM="rdma_rename %k NAME_FIXED mlx5_ib1"\n'
)


def test_site_file_has_both_kinds_on_their_lines() -> None:
    rules = parse_rules(SITE_TEXT, SITE)
    assert [(r.pci, r.kind, r.name, r.line) for r in rules] == [
        ("0000:18:00.0", "net", "eth_rail0", 1), ("0000:18:00.0", "rdma", "roce_rail0", 2),
        ("0000:1a:00.0", "net", "eth_sec0", 3), ("0000:1a:00.0", "rdma", "roce_sec0", 4)]


def test_pci_domains_other_than_0000() -> None:
    rules = parse_rules(AZURE_TEXT, AZURE)
    assert [(r.pci, r.kind, r.name) for r in rules] == [
        ("0101:00:00.0", "rdma", "mlx5_ib0"), ("0102:00:00.0", "rdma", "mlx5_ib1")]
    # Grace Hopper: PCI domain 0002 (the same write-up's GH200 node)
    (gh,) = parse_rules('ACTION=="add", KERNELS=="0002:01:00.0", SUBSYSTEM=="net", NAME="eth_rail0"\n', SITE)
    assert gh.pci == "0002:01:00.0"


@pytest.mark.parametrize(("line", "why"), [
    ('ACTION=="add", KERNELS=="0000:s2:00.0", SUBSYSTEM=="net", NAME="eth_rail2"',
     'KERNELS=="0000:s2:00.0" is not a PCI function address'),
    ('ACTION=="add", KERNELS=="0000:1a:00", SUBSYSTEM=="net", NAME="eth_rail2"',
     'KERNELS=="0000:1a:00" is not a PCI function address'),
    ('ACTION=="add", KERNELS=="0000:1a:00.0, SUBSYSTEM=="net", NAME="eth_rail2"', "unbalanced quotes"),
])
def test_unparseable_naming_line_is_a_problem_with_file_and_line(line: str, why: str) -> None:
    problems: list = []
    assert parse_rules("# header\n" + line + "\n", SITE, None, problems) == ()
    assert [(p.file, p.line) for p in problems] == [(SITE, 2)]
    assert why in str(problems[0]) and str(problems[0]).startswith(f"{SITE} line 2: ")


def test_rules_keyed_by_other_things_are_not_rail_rules_and_not_problems() -> None:
    text = ('SUBSYSTEM=="net", ACTION=="add", ATTR{address}=="b8:3f:d2:aa:00:10", NAME="mgmt0"\n'
            'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1a:00.*", NAME="eth_rail9"\n'
            'SUBSYSTEM=="block", KERNELS=="0000:1a:00.0", NAME="disk0"\n'
            'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1a:00.0", RUN+="/bin/true"\n')
    problems: list = []
    assert parse_rules(text, SITE, None, problems) == () and problems == []


def test_read_rules_reads_every_file_and_reports_bad_lines(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={
        NET_RULES: 'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:0c:00.0", NAME="net_rail0"\n',
        SITE: SITE_TEXT + 'ACTION=="add", KERNELS=="0000:s2:00.0", SUBSYSTEM=="net", NAME="eth_rail2"\n',
        AZURE: AZURE_TEXT,
        "/etc/udev/rules.d/README": 'KERNELS=="0000:77:00.0", NAME="not_a_rules_file"\n',
    })
    notes = Notes()
    rules = read_rules(host, notes)
    assert [(r.file, r.line, r.name) for r in rules] == [
        (NET_RULES, 1, "net_rail0"),
        (SITE, 1, "eth_rail0"), (SITE, 2, "roce_rail0"), (SITE, 3, "eth_sec0"), (SITE, 4, "roce_sec0"),
        (AZURE, 1, "mlx5_ib0"), (AZURE, 2, "mlx5_ib1")]
    assert notes.unavailable == [
        ("udev rdma rules", f"{RDMA_RULES}: not present"),
        ("udev rules", f'{SITE} line 5: KERNELS=="0000:s2:00.0" is not a PCI function address')]


def test_substituted_names_are_not_expected_names_and_bad_names_are_problems() -> None:
    problems: list = []
    text = ('SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1a:00.0", NAME="$env{ID_NET_NAME}"\n'
            'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1a:00.1", NAME="eth:rail1"\n')
    assert parse_rules(text, SITE, None, problems) == ()
    assert [str(p) for p in problems] == [f"{SITE} line 2: 'eth:rail1' is not a valid device name"]


@pytest.mark.parametrize("line", [
    'SUBSYSTEM=="net", ACTION=="add", KERNELS=="0000:1a:00.0", NAME=net_rail0',
    'ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="infiniband", RUN+="/usr/bin/rdma dev set %k name"',
])
def test_a_rename_that_cannot_be_read_is_a_problem(line: str) -> None:
    problems: list = []
    assert parse_rules(line + "\n", NET_RULES, None, problems) == ()
    assert [(p.file, p.line) for p in problems] == [(NET_RULES, 1)] and "cannot read" in problems[0].why


def test_a_bad_line_is_shown_printable_and_cut_at_120_characters() -> None:
    head = 'KERNELS=="0000:1a:00.0", NAME="x'  # an odd number of quotes
    exact = head + "y" * (120 - len(head))
    long = head + "\x1b" + "y" * 200
    problems: list = []
    parse_rules(exact + "\n" + long + "\n", SITE, None, problems)
    assert [p.why for p in problems] == [f"unbalanced quotes: {exact}",
                                         f"unbalanced quotes: {(head + '?' + 'y' * 200)[:120]}..."]


def test_each_bad_line_or_name_is_its_own_problem_and_the_rest_are_read() -> None:
    rdma = 'RUN+="/usr/bin/rdma dev set %k name {}"'
    lines = [
        '# SUBSYSTEM=="net", KERNELS=="0000:1a:01.1", NAME="commented_out"',
        'ACTION=="add", GOTO="end"',
        'KERNELS=="0000:1a:00.0", NAME="x',
        'KERNELS=="0000:1a:00.0", NAME=unquoted',
        'SUBSYSTEM=="net", KERNELS=="rail*", NAME="eth9"',
        'SUBSYSTEM=="net", KERNELS=="0000:' + "z" * 50 + '", NAME="eth9"',
        'KERNELS=="0000:1a:00.1", NAME="", ' + rdma.format("rdma_one"),
        'KERNELS=="0000:1a:00.2", NAME="%k", ' + rdma.format("rdma_two"),
        'KERNELS=="0000:1a:00.3", NAME="eth%n"',
        'KERNELS=="0000:1a:00.4", NAME=".", ' + rdma.format("rdma_four"),
        'KERNELS=="0000:1a:00.5", NAME=".."',
        'KERNELS=="0000:1a:00.6", NAME="a/' + "b" * 48 + '"',
        'ACTION=="add", KERNELS=="0000:1a:00.7", SUBSYSTEM=="infiniband", ' + rdma.format("mlx5:7"),
        'SUBSYSTEM=="net", KERNELS=="0000:1a:01.0", NAME="net_rail8"',
    ]
    problems: list = []
    rules = parse_rules("\n".join(lines) + "\n", SITE, None, problems)
    assert [(r.pci, r.kind, r.name, r.line) for r in rules] == [
        ("0000:1a:00.1", "rdma", "rdma_one", 7), ("0000:1a:00.2", "rdma", "rdma_two", 8),
        ("0000:1a:00.4", "rdma", "rdma_four", 10), ("0000:1a:00.7", "rdma", "mlx5:7", 13),
        ("0000:1a:01.0", "net", "net_rail8", 14)]
    assert [(p.file, p.line, p.why) for p in problems] == [
        (SITE, 3, 'unbalanced quotes: KERNELS=="0000:1a:00.0", NAME="x'),
        (SITE, 4, 'a rename this reader cannot read: KERNELS=="0000:1a:00.0", NAME=unquoted'),
        (SITE, 6, f'KERNELS=="0000:{"z" * 35}..." is not a PCI function address'),
        (SITE, 7, "empty NAME"),
        (SITE, 10, "'.' is not a valid device name"),
        (SITE, 11, "'..' is not a valid device name"),
        (SITE, 12, f"'a/{'b' * 38}...' is not a valid device name"),
    ]


def test_a_kind_asked_for_keeps_that_kind_only() -> None:
    text = ('ACTION=="add", KERNELS=="0000:1a:00.0", SUBSYSTEM=="infiniband", RUN+="/usr/bin/rdma dev set %k name r0"\n'
            'SUBSYSTEM=="net", KERNELS=="0000:1a:00.0", NAME="net_rail0"\n')
    assert [(r.kind, r.name) for r in parse_rules(text, NET_RULES, "net")] == [("net", "net_rail0")]
    assert [(r.kind, r.name) for r in parse_rules(text, RDMA_RULES, "rdma")] == [("rdma", "r0")]


def test_a_naming_line_keyed_by_no_kernels_match_is_skipped_alone_and_problems_need_no_list() -> None:
    text = ('SUBSYSTEM=="net", ATTR{address}=="b8:3f:d2:aa:00:10", NAME="mgmt0"\n'
            'KERNELS=="0000:1a:00.0", NAME="x\n'
            'SUBSYSTEM=="net", KERNELS=="0000:1a:00.0", NAME="net_rail0"\n')
    assert [(r.name, r.line) for r in parse_rules(text, SITE)] == [("net_rail0", 3)]


def test_each_operator_file_gives_its_own_kind_and_one_absent_stops_nothing(tmp_path: Path) -> None:
    host = make_image(tmp_path / "img", files={RDMA_RULES: (
        'SUBSYSTEM=="net", KERNELS=="0000:0c:00.0", NAME="not_from_this_file"\n'
        'ACTION=="add", KERNELS=="0000:0c:00.0", SUBSYSTEM=="infiniband", RUN+="/usr/bin/rdma dev set %k name rdma_rail0"\n')})
    notes = Notes()
    assert read_rules(host, notes) == (RailRule("0000:0c:00.0", "rdma_rail0", "rdma", RDMA_RULES, 2),)
    assert notes.unavailable == [("udev net rules", f"{NET_RULES}: not present")]
    assert read_rules(host) == (RailRule("0000:0c:00.0", "rdma_rail0", "rdma", RDMA_RULES, 2),)


def test_a_rules_file_is_read_up_to_1_mib(tmp_path: Path) -> None:
    pad = "#" * ((1 << 20) - 1) + "\n"
    rule = 'SUBSYSTEM=="net", KERNELS=="0000:0c:00.0", NAME="net_rail0"\n'
    host = make_image(tmp_path / "img", files={NET_RULES: pad + rule, SITE: pad + rule,
                                               AZURE: "#" * ((1 << 20) - len(rule) - 1) + "\n" + rule})
    assert [r.file for r in read_rules(host)] == [AZURE]


class _VanishingRulesHost:
    """A rules directory whose listing names a file that is gone (or unreadable) when it is read."""

    def __init__(self, files: dict[str, str | None]) -> None:
        self.files = files

    def glob(self, pattern: str) -> list[str]:
        return sorted(self.files)

    def read_text(self, path: str, max_bytes: int = 1 << 20) -> str | None:
        return self.files.get(path)


def test_a_site_rules_file_gone_when_read_skips_itself_only() -> None:
    # udev may rewrite a rules file (or a package remove it) between the listing and the read.
    later = "/etc/udev/rules.d/80-site.rules"
    host = _VanishingRulesHost({"/etc/udev/rules.d/70-gone.rules": None,
                                later: 'SUBSYSTEM=="net", KERNELS=="0000:0c:00.0", NAME="eth_rail0"\n'})
    assert read_rules(host) == (RailRule("0000:0c:00.0", "eth_rail0", "net", later, 1),)  # type: ignore[arg-type]
