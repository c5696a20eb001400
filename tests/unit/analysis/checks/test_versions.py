"""FirmwareSkew and DriverKernelUnvalidated."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agent.analysis.checks.versions import (
    KernelRow,
    beyond,
    doca_line,
    parse_driver_version,
    parse_kernel,
    version_key,
)
from agent.analysis.diagnose import diagnose
from agent.config import Expectations
from agent.readers.kernel_table import KernelTableError, load_kernel_table, parse_kernel_table
from tests.support import nodes

TABLE = (KernelRow("26.01", "generic", "6.8.0", "6.8.0-100", "test"),)


def found(snap, table=TABLE):
    return [(f.code, f.severity, f.subject) for f in diagnose(snap, Expectations(), kernel_table=table).findings]


def test_firmware_skew_on_same_model():
    snap = nodes.node()
    snap = replace(snap, drivers=tuple(replace(d, firmware="28.43.1014") if d.netdev == "net_rail1" else d
                                       for d in snap.drivers))
    assert found(snap) == [("FirmwareSkew", "info", "node")]


@pytest.mark.parametrize(("driver", "kernel", "want"), [
    ("26.01-0.5.2", "6.8.0-60-generic", None),
    ("26.01-0.5.2", "6.8.0-100-generic", None),
    ("26.01-0.5.2", "6.8.0-101-generic", "warning"),
    ("26.01-0.5.2", "6.8.0-1013-nvidia", "info"),
    ("26.01-0.5.2", "6.11.0-20-generic", "info"),
    ("25.10-1.7.1", "6.8.0-200-generic", None),  # no row for the driver line
    ("6.8.0-60-generic", "6.8.0-160-generic", None),  # inbox driver
])
def test_driver_kernel(driver, kernel, want):
    snap = nodes.node(driver_version=driver, kernel=kernel)
    assert found(snap) == ([("DriverKernelUnvalidated", want, "node")] if want else [])


def test_parsers():
    assert version_key("6.8.0-60") < version_key("6.8.0-100")
    assert doca_line("25.10-1.7.1") == "25.10" and doca_line("6.8.0-60-generic") is None
    k = parse_kernel("5.15.0-105.115-generic")
    assert (k.line, k.abi, k.flavour) == ("5.15.0", "5.15.0-105.115", "generic")


def test_shipped_table_and_extra_file(tmp_path):
    shipped = load_kernel_table()
    assert any(r.driver == "26.01" and r.max_abi == "6.8.0-100" for r in shipped)
    extra = tmp_path / "k.json"
    extra.write_text('[{"driver": "26.01", "flavour": "nvidia", "kernel_line": "6.8.0", "max_abi": "6.8.0-1020"}]')
    rows = load_kernel_table(str(extra))
    assert len(rows) == len(shipped) + 1
    snap = nodes.node(driver_version="26.01-0.5.2", kernel="6.8.0-1013-nvidia")
    assert found(snap, rows) == []
    with pytest.raises(KernelTableError):
        parse_kernel_table("{", "x.json")
    with pytest.raises(KernelTableError):
        load_kernel_table(str(tmp_path / "nope.json"))


# -- strings of real fleets, each with where it was seen

#: (uname -r, where seen, (line, abi, flavour, family))
KERNELS = [
    ("6.8.0-60-generic", "the shared example image, Ubuntu 24.04", ("6.8.0", "6.8.0-60", "generic", "ubuntu")),
    ("5.15.0-105-generic", "a public benchmark report, Ubuntu 22.04.4 LTS", ("5.15.0", "5.15.0-105", "generic", "ubuntu")),
    ("5.15.0-1040-azure", "a CI runner's uname, Ubuntu 22.04.2 on Azure", ("5.15.0", "5.15.0-1040", "azure", "ubuntu")),
    ("6.8.0-1012-aws", "uname -a of an EC2 host, Ubuntu 24.04", ("6.8.0", "6.8.0-1012", "aws", "ubuntu")),
    ("6.5.0-1019-nvidia-64k", "a Grace Hopper MGX node, Ubuntu 22.04.5 (BlueField-3 benchmark README)",
     ("6.5.0", "6.5.0-1019", "nvidia-64k", "ubuntu")),
    ("6.17.0-1014-nvidia-64k", "GB200 NVL72 racks, Ubuntu 24.04.4 (public cluster notes)",
     ("6.17.0", "6.17.0-1014", "nvidia-64k", "ubuntu")),
    ("5.14.0-427.50.1.el9_4.aarch64", "RHEL / Rocky 9.4 nodes (issue 9)", ("5.14.0", "5.14.0-427.50.1", "el9_4", "rhel")),
    ("5.14.0-362.el9_3.x86_64", "a public distro-detection script's table, RHEL / CentOS 9",
     ("5.14.0", "5.14.0-362", "el9_3", "rhel")),
    ("5.15.0-307.178.5.el9uek.x86_64", "a public table of Azure Oracle Linux 9.5 images (UEK)",
     ("5.15.0", "5.15.0-307.178.5", "el9uek", "rhel")),
    ("5.14.0-362.8.1.el9_3.x86_64", "Oracle Linux's RHCK example beside UEK, uname -r",
     ("5.14.0", "5.14.0-362.8.1", "el9_3", "rhel")),
    ("6.1.106-116.188.amzn2023.x86_64", "Amazon Linux 2023 nodes (issue 9)",
     ("6.1", "6.1.106-116.188", "amzn2023", "amazon")),
    ("6.1.134-152.225.amzn2023.x86_64", "kubectl get nodes of an EKS cluster, Amazon Linux 2023.7.20250512",
     ("6.1", "6.1.134-152.225", "amzn2023", "amazon")),
    ("5.14.21-150500.55.39-default", "uname -a in a public Ansible run, SLES 15 SP5",
     ("5.14.21", "5.14.21-150500.55.39", "default", "suse")),
    ("5.14.21-150500.55.52-default", "os_info of a SUSE Linux Enterprise Server 15 SP5 host",
     ("5.14.21", "5.14.21-150500.55.52", "default", "suse")),
]


@pytest.mark.parametrize(("release", "seen", "want"), KERNELS, ids=[k[0] for k in KERNELS])
def test_kernel_releases_of_real_fleets(release, seen, want):
    k = parse_kernel(release)
    assert k is not None, seen
    assert (k.line, k.abi, k.flavour, k.family) == want, seen


@pytest.mark.parametrize("release", ["", "linux", "6.8", "6.8.0-60-Generic", "6.8.0-60-generic; rm -rf /"])
def test_not_a_kernel_release(release):
    assert parse_kernel(release) is None or parse_kernel(release).flavour is None


#: (driver version, where seen, (kind, line))
DRIVERS = [
    ("25.10-1.7.1", "the shared example image (DOCA-OFED)", ("ofed", "25.10")),
    ("23.10-1.1.9", "MLNX_OFED 23.10 LTS on fleets (issue 9)", ("ofed", "23.10")),
    ("5.0-2.1.8", "MLNX_OFED_LINUX-5.0-2.1.8.0, Azure's InfiniBand setup guide and HPC clusters",
     ("mlnx_ofed", "5.0")),
    ("4.9-7.1.0.0", "MLNX_OFED 4.9 LTS package numbering", ("mlnx_ofed", "4.9")),
    ("5.0-0", "the inbox mlx5 DRIVER_VERSION before Linux 5.x dropped it", ("inbox", None)),
    ("6.8.0-60-generic", "the inbox driver on Ubuntu 24.04: ethtool -i reports the kernel release", ("inbox", None)),
    ("5.14.0-427.50.1.el9_4.aarch64", "the inbox driver on RHEL 9.4", ("inbox", None)),
]


@pytest.mark.parametrize(("version", "seen", "want"), DRIVERS, ids=[d[0] for d in DRIVERS])
def test_driver_versions_of_real_fleets(version, seen, want):
    d = parse_driver_version(version)
    assert (d.kind, d.line) == want, seen


def test_unknown_driver_version_is_no_line():
    assert parse_driver_version("mlx5 custom build") == parse_driver_version("mlx5 custom build")
    assert doca_line("mlx5 custom build") is None and parse_driver_version("") is None


def test_abi_compares_at_the_rows_precision():
    assert not beyond("6.8.0-100.115", "6.8.0-100") and beyond("6.8.0-101", "6.8.0-100")
    assert beyond("5.14.0-427.50.1", "5.14.0-427.13.1") and not beyond("5.14.0-427", "5.14.0-427.13.1")


@pytest.mark.parametrize(("driver", "kernel", "want"), [
    ("5.8-1.0.1", "5.14.0-427.50.1.el9_4.x86_64", "warning"),
    ("5.8-1.0.1", "5.14.0-427.13.1.el9_4.x86_64", None),
    ("5.8-1.0.1", "5.14.0-503.11.1.el9_5.x86_64", "info"),  # another RHEL minor: another flavour
    ("23.10-1.1.9", "6.1.106-116.188.amzn2023.x86_64", None),
    ("23.10-1.1.9", "6.1.134-152.225.amzn2023.x86_64", "warning"),
])
def test_rows_for_other_distributions(driver, kernel, want):
    # Test rows in the table's schema (not shipped data): a RHEL 9.4 row and an Amazon Linux 2023 row.
    table = (KernelRow("5.8", "el9_4", "5.14.0", "5.14.0-427.13.1", "test"),
             KernelRow("23.10", "amzn2023", "6.1", "6.1.106-116.188", "test"))
    snap = nodes.node(driver_version=driver, kernel=kernel)
    assert found(snap, table) == ([("DriverKernelUnvalidated", want, "node")] if want else [])


def test_rhel_variants_are_their_own_flavour():
    # RHEL for Real Time and the 64k-page aarch64 kernel append "+rt" / "+64k" after the arch: their
    # modules are built apart, so a row for el9_4 never judges them.
    rt = parse_kernel("5.14.0-427.13.1.el9_4.x86_64+rt")
    assert (rt.flavour, rt.arch, rt.abi) == ("el9_4+rt", "x86_64", "5.14.0-427.13.1")
    assert parse_kernel("5.14.0-427.13.1.el9_4.aarch64+64k").flavour == "el9_4+64k"


ROW = {"driver": "26.01", "flavour": "nvidia", "kernel_line": "6.8.0", "max_abi": "6.8.0-1020"}


def test_kernel_table_is_rows_or_a_bare_list_each_row_naming_its_source():
    want = (KernelRow("26.01", "nvidia", "6.8.0", "6.8.0-1020", "site notes"),)
    assert parse_kernel_table(json.dumps({"rows": [{**ROW, "source": "site notes"}]}), "k.json") == want
    assert parse_kernel_table(json.dumps([{**ROW, "source": "site notes"}]), "k.json") == want
    # A row without a source is sourced to the file it came from.
    assert parse_kernel_table(json.dumps([ROW]), "k.json")[0].source == "k.json"


@pytest.mark.parametrize(("text", "why"), [
    ("{", "k.json: not JSON"),
    ('{"table": []}', 'k.json: expected {"rows": [...]} or a list of rows'),
    ('["26.01"]', "k.json: row 0 needs the strings driver, flavour, kernel_line, max_abi"),
    (json.dumps([ROW, {**ROW, "max_abi": 100}]), "k.json: row 1 needs the strings"),
    (json.dumps([{**ROW, "flavour": ""}]), "k.json: row 0 needs the strings"),
    (json.dumps([{k: v for k, v in ROW.items() if k != "driver"}]), "k.json: row 0 needs the strings"),
])
def test_kernel_table_errors_name_the_file_and_the_fault(text, why):
    with pytest.raises(KernelTableError) as exc:
        parse_kernel_table(text, "k.json")
    assert str(exc.value).startswith(why)


def test_kernel_table_file_rows_are_sourced_to_the_file(tmp_path):
    extra = tmp_path / "k.json"
    extra.write_text(json.dumps([ROW]))
    assert load_kernel_table(str(extra))[-1].source == str(extra)


def test_kernel_table_file_errors_say_why_in_one_line(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(KernelTableError) as exc:
        load_kernel_table(str(missing))
    assert str(exc.value) == f"--kernel-table {missing}: No such file or directory"


def test_kernel_table_file_is_read_up_to_one_mib(tmp_path):
    # A bounded read: a file past 1 MiB is cut there, and so is never valid JSON.
    big = tmp_path / "big.json"
    big.write_text("[" + json.dumps(ROW) + " " * (1 << 20) + "]")
    with pytest.raises(KernelTableError, match="not JSON"):
        load_kernel_table(str(big))
    fits = tmp_path / "fits.json"
    fits.write_text("[" + json.dumps(ROW) + " " * ((1 << 20) - 200) + "]")
    assert load_kernel_table(str(fits))[-1].max_abi == "6.8.0-1020"


@pytest.mark.parametrize(("release", "want"), [
    ("5.14.0-427.50.1.el9_4.aarch64", ("5.14.0", "5.14.0-427.50.1", "el9_4", "rhel", "aarch64")),
    ("5.14.0-427.13.1.el9_4.x86_64+rt", ("5.14.0", "5.14.0-427.13.1", "el9_4+rt", "rhel", "x86_64")),
    # Amazon and Azure Linux updates move the upstream release: the line is major.minor.
    ("6.1.106-116.188.amzn2023.x86_64", ("6.1", "6.1.106-116.188", "amzn2023", "amazon", "x86_64")),
    ("6.6.47.1-1.azl3", ("6.6", "6.6.47.1-1", "azl3", "azurelinux", None)),
    ("6.8.0-60-generic", ("6.8.0", "6.8.0-60", "generic", "ubuntu", None)),
    ("6.8.0-1013-nvidia-64k", ("6.8.0", "6.8.0-1013", "nvidia-64k", "ubuntu", None)),
    ("6.1.0-27-cloud-amd64", ("6.1.0", "6.1.0-27", "cloud-amd64", "debian", None)),
    ("6.1.0-27-arm64", ("6.1.0", "6.1.0-27", "arm64", "debian", None)),
    ("5.14.21-150500.55.65-default", ("5.14.21", "5.14.21-150500.55.65", "default", "suse", None)),
    ("6.8.0-60", ("6.8.0", "6.8.0-60", None, None, None)),
    ("6.1.100+", ("6.1.100", "6.1.100", None, None, None)),
])
def test_kernel_release_forms(release, want):
    k = parse_kernel(f" {release}\n")
    assert k.release == release
    assert (k.line, k.abi, k.flavour, k.family, k.arch) == want


def test_firmware_skew_lists_each_firmware_with_its_rails():
    snap = nodes.node(rails=4)
    snap = replace(snap, drivers=tuple(replace(d, firmware="28.43.1014") if d.netdev in ("net_rail1", "net_rail3") else d
                                       for d in snap.drivers))
    (f,) = diagnose(snap, Expectations(), kernel_table=()).findings
    assert f.message == ("rails of NIC model MT4129 run different firmware: 28.42.1000 on net_rail0, net_rail2; "
                         "28.43.1014 on net_rail1, net_rail3")
    assert f.evidence == {"model": "MT4129", "firmware": {"28.42.1000": ["net_rail0", "net_rail2"],
                                                          "28.43.1014": ["net_rail1", "net_rail3"]}}
    # Two skewed models are one finding for the node, each model in it.
    two = replace(snap, rdma_devices=tuple(replace(d, hca_type="MT4131") if d.name in ("rdma_rail2", "rdma_rail3") else d
                                           for d in snap.rdma_devices))
    (f,) = diagnose(two, Expectations(), kernel_table=()).findings
    assert f.message == ("rails of NIC model MT4129 run different firmware: 28.42.1000 on net_rail0; 28.43.1014 on "
                         "net_rail1; rails of NIC model MT4131 run different firmware: 28.42.1000 on net_rail2; "
                         "28.43.1014 on net_rail3")
    assert f.evidence == {"models": {"MT4129": {"28.42.1000": ["net_rail0"], "28.43.1014": ["net_rail1"]},
                                     "MT4131": {"28.42.1000": ["net_rail2"], "28.43.1014": ["net_rail3"]}}}


def test_different_models_may_run_different_firmware():
    snap = replace(nodes.node(), drivers=tuple(replace(d, firmware="32.43.1014") if d.netdev == "net_rail1" else d
                                               for d in nodes.node().drivers))
    snap = replace(snap, rdma_devices=tuple(replace(d, hca_type="MT41692") if d.name == "rdma_rail1" else d
                                            for d in snap.rdma_devices))
    assert found(snap) == []


def test_without_hca_type_the_psid_is_the_model():
    snap = nodes.node()
    snap = replace(snap, rdma_devices=tuple(replace(d, hca_type=None) for d in snap.rdma_devices),
                   drivers=tuple(replace(d, firmware="28.43.1014") if d.netdev == "net_rail1" else d for d in snap.drivers))
    (f,) = diagnose(snap, Expectations(), kernel_table=()).findings
    assert f.evidence["model"] == "MT_0000000838"
    other_psid = replace(snap, drivers=tuple(replace(d, psid="MT_0000001093") if d.netdev == "net_rail1" else d
                                             for d in snap.drivers))
    assert found(other_psid) == []
    no_model = replace(snap, drivers=tuple(replace(d, psid=None) for d in snap.drivers))
    assert found(no_model) == []


def test_firmware_from_the_rdma_device_when_ethtool_has_none():
    snap = nodes.node()
    snap = replace(snap, drivers=tuple(replace(d, firmware=None) for d in snap.drivers),
                   rdma_devices=tuple(replace(d, fw_ver="28.43.1014 (MT_0000000838)") if d.name == "rdma_rail1" else d
                                      for d in snap.rdma_devices))
    (f,) = diagnose(snap, Expectations(), kernel_table=()).findings
    assert f.evidence["firmware"] == {"28.42.1000": ["net_rail0"], "28.43.1014": ["net_rail1"]}


def test_a_rail_without_a_netdev_has_no_firmware_to_compare():
    snap = nodes.drop_link(nodes.node(rails=3), "net_rail2")
    snap = replace(snap, rdma_devices=tuple(replace(d, fw_ver="28.43.1014") if d.name == "rdma_rail2" else d
                                            for d in snap.rdma_devices))
    assert found(snap) == [("RailMissing", "critical", "net_rail2")]


def test_driver_kernel_findings_say_which_driver_kernel_and_row():
    def only(kernel):
        (f,) = diagnose(nodes.node(driver_version="26.01-0.5.2", kernel=kernel), Expectations(),
                        kernel_table=TABLE).findings
        assert (f.code, f.subject) == ("DriverKernelUnvalidated", "node")
        return f.severity, f.message, f.evidence
    assert only("6.8.0-101-generic") == (
        "warning", "driver 26.01-0.5.2 runs on kernel 6.8.0-101-generic, beyond the validated 6.8.0-100-generic (test)",
        {"driver": "26.01-0.5.2", "kernel": "6.8.0-101-generic", "max_abi": "6.8.0-100", "source": "test"})
    assert only("6.11.0-20-generic") == (
        "info", "driver 26.01-0.5.2 on kernel 6.11.0-20-generic: kernel line 6.11.0 (generic) has no validated row "
        "for driver 26.01 (unknown, not wrong)",
        {"driver": "26.01-0.5.2", "kernel": "6.11.0-20-generic", "known": ["6.8.0-generic"]})
    assert only("6.8.0-60")[1].endswith("kernel line 6.8.0 (no flavour) has no validated row for driver 26.01 "
                                        "(unknown, not wrong)")
    assert only("weird") == ("info", "driver 26.01-0.5.2 on kernel weird: not a kernel release the table knows",
                             {"driver": "26.01-0.5.2", "kernel": "weird"})


def test_the_newest_row_of_a_kernel_line_judges():
    table = (KernelRow("26.01", "generic", "6.8.0", "6.8.0-100", "a"), KernelRow("26.01", "generic", "6.8.0", "6.8.0-120", "b"),
             KernelRow("26.01", "generic", "6.8.0", "6.8.0-90", "c"))
    assert found(nodes.node(driver_version="26.01-0.5.2", kernel="6.8.0-110-generic"), table) == []
    (f,) = diagnose(nodes.node(driver_version="26.01-0.5.2", kernel="6.8.0-121-generic"), Expectations(),
                    kernel_table=table).findings
    assert (f.evidence["max_abi"], f.evidence["source"]) == ("6.8.0-120", "b")


def test_driver_version_from_ethtool_when_the_module_version_is_unread():
    snap = nodes.node(driver_version="26.01-0.5.2", kernel="6.8.0-101-generic")
    snap = replace(snap, versions=replace(snap.versions, mlx5_version=None))
    assert found(snap) == [("DriverKernelUnvalidated", "warning", "node")]
    first_gone = nodes.drop_link(snap, "net_rail0")
    assert ("DriverKernelUnvalidated", "warning", "node") in found(first_gone)
    assert found(replace(snap, drivers=())) == []


def test_firmware_skew_is_judged_past_rails_without_a_netdev_or_a_model():
    def skewed(snap):
        return replace(snap, drivers=tuple(replace(d, firmware="28.43.1014") if d.netdev == "net_rail2" else d
                                           for d in snap.drivers))
    first_gone = skewed(nodes.drop_link(nodes.node(rails=3), "net_rail0"))
    assert ("FirmwareSkew", "info", "node") in found(first_gone)
    no_model = skewed(nodes.node(rails=3))
    no_model = replace(no_model, rdma_devices=tuple(replace(d, hca_type=None) if d.name == "rdma_rail0" else d
                                                    for d in no_model.rdma_devices),
                       drivers=tuple(replace(d, psid=None) if d.netdev == "net_rail0" else d for d in no_model.drivers))
    (f,) = diagnose(no_model, Expectations(), kernel_table=()).findings
    assert f.evidence["firmware"] == {"28.42.1000": ["net_rail1"], "28.43.1014": ["net_rail2"]}


def test_without_ethtool_or_hca_type_a_rail_has_no_model():
    snap = replace(nodes.node(), drivers=(), rdma_devices=tuple(replace(d, hca_type=None) for d in nodes.node().rdma_devices))
    assert found(snap) == []


def test_skew_of_several_models_is_one_finding_on_node():
    snap = nodes.node(rails=4)
    snap = replace(snap, drivers=tuple(replace(d, firmware="28.43.1014") if d.netdev in ("net_rail1", "net_rail3") else d
                                       for d in snap.drivers),
                   rdma_devices=tuple(replace(d, hca_type="MT4131") if d.name in ("rdma_rail2", "rdma_rail3") else d
                                      for d in snap.rdma_devices))
    assert found(snap) == [("FirmwareSkew", "info", "node")]
