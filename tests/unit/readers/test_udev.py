"""udev reader: nic-configuration-operator naming rules -> RailRule with file and line."""

from __future__ import annotations

from pathlib import Path

from agent.model import RailRule
from agent.readers.common import Notes
from agent.readers.udev import NET_RULES, RDMA_RULES, parse_rules, read_rules

from .imagekit import make_image, public


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
