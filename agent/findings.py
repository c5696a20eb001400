"""Finding and event codes, severities and the ``railscope.doctor/v1`` document (docs/design.md §4).

``EVENT_CODES`` is separate from the finding ``CODES``: ``DriverReload`` is an event (it explains the
flaps it would otherwise cause), never a finding. Events of the other codes become findings as they
are when ``railscope doctor`` reads ``events.json`` (docs/design.md §4 "Time").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CLUSTER_CODES", "CODES", "CODE_RULES", "CODE_SUBJECTS", "EVENT_CODES", "NEXT_STEPS", "SEVERITIES",
           "Diagnosis", "Finding", "PeerRow", "RailRow", "next_step", "severity_rank"]

SEVERITIES = ("critical", "warning", "info")

#: code -> default severity. Stable: metrics, alert rules and tests use these words.
CODES: dict[str, str] = {
    "RailMissing": "critical",
    "RailNameMismatch": "critical",
    "RdmaNameMismatch": "critical",
    "RailTemplateInvalid": "critical",
    "RailRuleUnreadable": "warning",
    "RailLinkDown": "critical",
    "RdmaLinkDown": "critical",
    "RdmaNetnsModeUnexpected": "warning",
    "RepresentorStale": "warning",
    "EswitchModeUnexpected": "warning",
    "EswMultiportUnexpected": "warning",
    "PfcDisabled": "warning",
    "GlobalPauseEnabled": "warning",
    "PfcStorm": "critical",
    "LosslessDrops": "critical",
    "LinkFlapping": "warning",
    "ConfigFlapping": "warning",
    "FirmwareSkew": "info",
    "DriverKernelUnvalidated": "warning",
    "NicHealthError": "warning",
    "LinkDegrading": "warning",
    "OpticsOutOfRange": "warning",
    "NicTemperatureHigh": "warning",
    "PcieLinkDegraded": "warning",
    "PcieErrors": "warning",
    "FirmwarePendingActivation": "info",
    "GpuDirectNotReady": "warning",
    "MtuMismatch": "warning",
    "DriverNotDoca": "warning",
    "RailNamingConflict": "critical",
    "RailResourcesLost": "critical",
    "RailRdmaMissing": "critical",
    "FirmwareStoredUnreadable": "warning",
    "PfcPeerMismatch": "warning",
    "RailPeerMismatch": "warning",
}

#: code -> default severity of every event a detector emits.
EVENT_CODES: dict[str, str] = {
    **{code: CODES[code] for code in ("LinkFlapping", "ConfigFlapping", "RepresentorStale", "PfcStorm",
                                      "LosslessDrops", "NicHealthError")},
    **{code: CODES[code] for code in ("LinkDegrading", "OpticsOutOfRange", "PcieErrors")},
    "DriverReload": "info",
    # frames above a rail's MTU arrive (rx_oversize_pkts_phy rose): the rising form of MtuMismatch
    "MtuMismatch": CODES["MtuMismatch"],
    # the device plugin advertised 0 of a rail resource after more: only the API server knows (docs/design.md §4)
    "RailResourcesLost": CODES["RailResourcesLost"],
}

#: code -> default severity of the findings judged from the cluster's objects (docs/design.md §4, §9): `railscope
#: rollout`, the collector's incident view. No node image carries the objects, so no node image has them.
CLUSTER_CODES: dict[str, str] = {
    "RailIntentMismatch": "critical",
    "OperatorConfigConflict": "warning",
}

#: code -> what to do next: the command to run, the setting to check, who owns the fix. One source for
#: doctor, report, the collector's pages and the alerts' runbooks (their annotation links to
#: docs/codes.md, generated from these tables by scripts/gen_codes_doc.py; a test checks both).
NEXT_STEPS: dict[str, str] = {
    "RailMissing": (
        "Find the function that did not come up: `lspci -d 15b3:` and `dmesg | grep mlx5` for a probe failure, "
        "the PF's sriov_numvfs, and the NIC naming rule's (or --rail-map's) PCI address. A driver container still starting leaves "
        "rails missing for a minute. Owner: the node's hardware / driver team."),
    "RailNameMismatch": (
        "The udev rename did not apply (the SR-IOV policies and the CNI select rails by name): check the rule's PCI "
        "address in /etc/udev/rules.d/10-nic-net-interface-naming.rules and run `udevadm test "
        "/sys/class/net/<actual name>`. Owner: whoever writes the naming rules (the Network Operator's "
        "NicConfigurationTemplate or the site's provisioning)."),
    "RdmaNameMismatch": (
        "rdma_rename did not apply (NCCL_IB_HCA and the RDMA device plugin select devices by name): compare "
        "/etc/udev/rules.d/10-nic-rdma-interface-naming.rules with `rdma link show`, run `udevadm test` on the RDMA "
        "device, and restart the device plugin once fixed. Owner: whoever writes the naming rules."),
    "RailTemplateInvalid": (
        "A netdev name over 15 characters (IFNAMSIZ) never applies: shorten the template in the naming rules file "
        "(the subject), e.g. net_rail%rail_id% instead of the multiplane template. Owner: the Network Operator's "
        "NicConfigurationTemplate or the site's provisioning."),
    "RailRuleUnreadable": (
        "Fix the line the finding names (its number and why are in the message and evidence): `udevadm verify "
        "<file>` (systemd 254+) or `udevadm test` on the rail's netdev shows what udev makes of it; until then "
        "railscope judges the rail without it. Owner: whoever writes the naming rules (the Network Operator's "
        "NicConfigurationTemplate or the site's provisioning)."),
    "RailLinkDown": (
        "`ip -s link show <netdev>` and `ethtool <netdev>` for carrier and speed, `ethtool -m <netdev>` for the "
        "optic; then the cable and the switch port. A bundle's recorder.jsonl shows the carrier losses before. "
        "Owner: the data-centre / fabric team (cable, optic, leaf port)."),
    "RdmaLinkDown": (
        "`rdma link show` and /sys/class/infiniband/<device>/ports/1/{state,phys_state}; with the rail netdev down "
        "too, fix the link first (the rail's carrier). Owner: the fabric team, or the driver team when the netdev is up."),
    "RdmaNetnsModeUnexpected": (
        "/sys/module/ib_core/parameters/netns_mode against the cluster's choice (exclusive for per-pod RDMA); a node "
        "that asks for exclusive in /etc/modprobe.d or on the kernel command line but runs shared needs ib_core "
        "reloaded or a reboot. Owner: the node image / provisioning team."),
    "RepresentorStale": (
        "Representors whose VF is gone leak OVS ports and flows: compare `ovs-vsctl show` with the PF's "
        "sriov_numvfs (the evidence names them) and look for a failed CNI DEL in the kubelet log. Owner: the "
        "SR-IOV operator / CNI owners."),
    "EswitchModeUnexpected": (
        "`devlink dev eswitch show <pci>`; check the SriovNetworkNodePolicy's eSwitchMode for this PF and the SR-IOV "
        "config daemon's log (a mode change needs the VFs removed first). Owner: the SR-IOV operator's policies."),
    "EswMultiportUnexpected": (
        "`devlink dev param show <pci> name esw_multiport` on every PF of the NIC; the value is runtime-only and a "
        "driver reload or reboot loses it until whatever sets it runs again. Owner: the Network Operator / the "
        "node's NIC configuration."),
    "PfcDisabled": (
        "`dcb pfc show dev <netdev>` (or `mlnx_qos -i <netdev>`) for the lossless priority (--lossless-prio) against "
        "the switch port's PFC; settings lost after a driver reload are the usual cause. Owner: the NIC QoS "
        "configuration (Network Operator's NicConfigurationTemplate or the site's mlnx_qos job)."),
    "GlobalPauseEnabled": (
        "`ethtool -a <netdev>`: turn 802.3x global pause off (`ethtool -A <netdev> rx off tx off`) where PFC is "
        "used, in the NIC configuration that sets it, not by hand. Owner: the NIC QoS configuration."),
    "PfcStorm": (
        "The node is pausing the fabric: a receiver that cannot drain (a stuck process, PCIe back-pressure, a GPU "
        "not consuming). The bundle's recorder.jsonl shows the pause duration per second; check rx_out_of_buffer "
        "and the rail's PCIe counters. Owner: the workload / node owner first, then the fabric team."),
    "LosslessDrops": (
        "`dcb pfc show dev <netdev>` and `dcb buffer show dev <netdev>` against the switch port's PFC and headroom; "
        "mlnx_qos settings lost after a driver reload are the usual cause. Owner: the NIC QoS configuration and "
        "the fabric team (switch PFC)."),
    "LinkFlapping": (
        "The rail loses carrier again and again: `ethtool -m <netdev>` for the optic, then the cable and the switch "
        "port; the bundle's recorder.jsonl has carrier_down_count per second. Owner: the data-centre / fabric team."),
    "ConfigFlapping": (
        "Two controllers fight over the NIC (the SR-IOV operator and a script, two policies selecting one PF): the "
        "finding names the PF and the values; check the SriovNetworkNodePolicies that select it and the config "
        "daemon's log. Owner: the SR-IOV operator's policies."),
    "FirmwareSkew": (
        "`devlink dev info` on each PF (or railscope_firmware_info by node): finish the firmware rollout so that "
        "every NIC of one model runs one version. Owner: the firmware rollout (NIC lifecycle team)."),
    "DriverKernelUnvalidated": (
        "The DOCA driver runs on a kernel its validated table does not cover: check the kernel against the DOCA "
        "release notes, pin the kernel or move the driver; add a row with --kernel-table once validated. Owner: "
        "the node image team with the driver owner."),
    "NicHealthError": (
        "`devlink health show <pci>` for the reporter, its state and error count, and `dmesg | grep mlx5` around "
        "the first error; fw_fatal means the firmware stopped and the NIC needs a reset (a bundle holds `devlink "
        "health diagnose`). Owner: the node's hardware team, with NVIDIA support for repeated fw_fatal."),
    "LinkDegrading": (
        "`railscope doctor` names the worst lane and its share of the corrected bits; "
        "`ethtool -S <rail> | grep -E 'corrected_bits|symbol_err|err_lane'` "
        "twice a minute apart: one lane far above the others is one fibre or optic (clean the connector, then swap "
        "it), every lane high points at the switch port or the cage. Owner: the data-centre / fabric team."),
    "OpticsOutOfRange": (
        "`ethtool -m <rail>`: the flag the message leads with, on the lanes the evidence names: an RX power low flag "
        "alone is no light from the far end (check the fibre and the far end before this optic), low RX power with "
        "light arriving a dirty connector or a bad fibre (clean, reseat, swap), high TX bias or temperature an "
        "ageing laser (replace the optic). Owner: the data-centre / fabric team."),
    "NicTemperatureHigh": (
        "/sys/bus/pci/devices/<bdf>/hwmon/hwmon*/temp*_input against temp*_crit, and the chassis fans and airflow "
        "over the card (the BMC, `ipmitool sdr`); drain the node before the NIC throttles. Owner: the node's "
        "hardware team."),
    "PcieLinkDegraded": (
        "`lspci -vv -s <bdf>`: LnkSta against LnkCap, and the upstream port's; a link trained below both ends needs "
        "the card reseated or moved (drain first). A link that is gone (speed Unknown, width 63: config space reads "
        "all ones) carries nothing: drain the node, check `dmesg` for AER / DPC / surprise link down, then "
        "reseat or replace the card. Owner: the node's hardware team."),
    "PcieErrors": (
        "/sys/bus/pci/devices/<bdf>/aer_dev_* and `dmesg | grep -i aer` for the failing device; reseat the card or "
        "riser and open a hardware ticket when fatal errors repeat. Owner: the node's hardware team."),
    "FirmwarePendingActivation": (
        "`devlink dev info <pci>`: running against stored. Activate the flashed image in a maintenance window "
        "(mlxfwreset, or a cold reboot of the drained node) and check that running equals stored; `railscope "
        "preflight` fails until then. Owner: the firmware rollout (NIC lifecycle team)."),
    "GpuDirectNotReady": (
        "`ls /sys/module/nvidia_peermem /sys/kernel/mm/memory_peers` and `cat /sys/module/nvidia/taint`: load "
        "nvidia_peermem (GPU Operator driver.rdma.enabled=true) or run the open GPU kernel modules on Linux >= 5.12 "
        "for DMA-BUF, then check that NCCL_DEBUG=INFO says GDR on the rails. Owner: the GPU Operator / driver team."),
    "MtuMismatch": (
        "`ip link show <netdev>` against the other rails and the switch port; the MTU comes from the NicClusterPolicy "
        "/ SriovNetworkNodePolicy (mtu) and is lost when a driver reload recreates the netdev before the policy "
        "applies again. Owner: the Network Operator's policies, with the fabric team for the switch side."),
    "PfcPeerMismatch": (
        "Compare the leaf port's PFC (the evidence names the leaf and port from LLDP; `nv show interface <port> qos "
        "pfc` on Cumulus / NVUE, `show running-config interfaces <port>` on Arista) with the rail's lossless "
        "priority (`mlnx_qos -i <netdev>`, --lossless-prio): RoCE loses frames when the two disagree. Owner: the "
        "fabric team for the switch, the Network Operator's QoS settings for the host."),
    "RailPeerMismatch": (
        "The rail's cable reaches another leaf or port than the cabling map says (a repair swapped two cables, or the "
        "map is stale): check the port label on both ends against --cabling and `lldpcli show neighbors` on the node. "
        "Owner: the data-centre operations team (cabling), with whoever keeps the cabling map."),
    "DriverNotDoca": (
        "The DOCA driver container restores the inbox driver when its pod ends: the Network Operator's driver pod on "
        "this node and its log, `cat /sys/module/mlx5_core/version`. Owner: the Network Operator (ofedDriver)."),
    "RailNamingConflict": (
        "`grep -n KERNELS /etc/udev/rules.d/*.rules`: keep one rule per PCI function and one function per name "
        "(nic-configuration-operator's files are the rails' own), remove the other rule, reboot; the evidence lists "
        "the file and line of each rule. Owner: whoever writes the naming rules."),
    "RailRdmaMissing": (
        "`lsmod | grep -E 'mlx5_ib|ib_core'` and `rdma link show`: a driver upgrade that left mlx5_ib (or ib_core) "
        "unloaded leaves the netdev up and no RDMA device, and NCCL falls back to sockets. `dmesg | grep -i mlx5_ib` "
        "for a load failure; reload the driver stack (the DOCA driver pod, or `modprobe mlx5_ib`) on a drained "
        "node. Owner: the Network Operator (ofedDriver) / the node image team."),
    "FirmwareStoredUnreadable": (
        "The NIC could not report its stored firmware (255.255.65535) — a failed or interrupted flash: check `devlink "
        "dev info <pci>` and the flash log (`dmesg | grep -E 'mlxfw|mlx5_fw'`, the firmware updater's output) "
        "before any reset, and reflash a known image with mlxfwmanager / flint before the next reboot. Owner: the "
        "firmware rollout (NIC lifecycle team)."),
    "RailResourcesLost": (
        "Stop the rollout. `kubectl describe node <node>` for allocatable and capacity, then the RDMA / SR-IOV device "
        "plugin pod on the node and its log (a restart that found no devices, a changed selector, rails renamed "
        "under it). Owner: the Network Operator (device plugin)."),
    "RailIntentMismatch": (
        "Read the object and field in the evidence against the node (`railscope doctor` on it): a template written "
        "for another platform's PCI layout, a rename that needs the reboot the NicDevice waits for, or a VF count "
        "something else set. Fix the object or the node, then `railscope rollout --node NODE`. Owner: whoever "
        "owns the operator's custom resources."),
    "OperatorConfigConflict": (
        "Make one owner of each setting: `disablePlugins: [mellanox]` in the SriovOperatorConfig when the NIC "
        "Configuration Operator manages the NICs, `numVfs: 1` with `spectrumXOptimized`, a released chart instead "
        "of a `-beta` one. Owner: the cluster's operator deployment."),
}

#: code -> its rule: when railscope raises it (docs/design.md §4). Rows for codes not raised yet wait for them.
CODE_RULES: dict[str, str] = {
    "RailMissing": "a rail the udev rules (or --rails, --rail-map) expect has no netdev",
    "RailNameMismatch": "the PCI function a rule names has an uplink netdev with another name (rename failed)",
    "RdmaNameMismatch": "the PCI function an RDMA rule names has an RDMA device with another name (rename failed)",
    "RailTemplateInvalid": ("a naming rule's netdev name is longer than 15 characters (IFNAMSIZ) and can never "
                            "apply: one finding for the rules file, instead of one per rail"),
    "RailRuleUnreadable": ("a naming rule line of /etc/udev/rules.d cannot be read (not a PCI function address, "
                           "unbalanced quotes, an empty or invalid name): one finding per rules file, the lines "
                           "in the evidence; the line is also listed under not available"),
    "RailLinkDown": "a rail netdev is not oper up or has no carrier",
    "RdmaLinkDown": "a rail's RDMA port is not ACTIVE / LINK_UP",
    "RdmaNetnsModeUnexpected": ("the RDMA netns mode differs from --expect-rdma-netns, or the node asks for exclusive "
                                "mode (kernel command line or /etc/modprobe.d) while the running mode is shared"),
    "RepresentorStale": ("a PF has representors for VF indexes at or above its sriov_numvfs (or VFs are 0), or OVS "
                         "ports whose netdev is gone: one finding per PF, the names in the evidence"),
    "EswitchModeUnexpected": "a PF with VFs is not in the eswitch mode --expect-eswitch-mode names",
    "EswMultiportUnexpected": ("a NIC's esw_multiport differs from --expect-esw-multiport, or the PFs of one NIC "
                               "read different values (torn LAG state)"),
    "PfcDisabled": "the lossless priority (--lossless-prio, default 3) has no pause counters on a rail",
    "GlobalPauseEnabled": "802.3x global pause is on for a rail",
    "PfcStorm": ("tx_pause_storm_error_events rose, or transmitted pause duration on the lossless priority grew "
                 "to 50 % of wall time or more over the last 60 s"),
    "LosslessDrops": "discards on the lossless priority rose",
    "LinkFlapping": "N carrier losses or more of one rail or uplink in a window (default 3 in 5 min)",
    "ConfigFlapping": ("sriov_numvfs, the eswitch mode or a devlink param changed back and forth in a window "
                       "(default 2 changes in 10 min)"),
    "FirmwareSkew": "rails of the same NIC model on one node run different firmware",
    "DriverKernelUnvalidated": ("the DOCA driver runs on a kernel its table row marks as beyond the validated range "
                                "(info when the kernel line is not in the table)"),
    "NicHealthError": ("a devlink health reporter of a rail's PF (or one of its ports) is in state error: critical "
                       "for fw_fatal, warning otherwise; errors on a reporter now healthy are info"),
    "LinkDegrading": ("a rail's pre-FEC corrected-bit ratio over the window is above --ber-warning, well below the "
                      "FEC's limit (warning), or at / above --ber-critical, the RS(544,514) FEC's 2.4e-4, or "
                      "rx_pcs_symbol_err_phy rose (critical)"),
    "OpticsOutOfRange": ("a rail's transceiver raised its own warning (warning) or alarm (critical) flag in "
                         "ethtool -m, or, where it prints no flag, reads a value beyond its own thresholds, on a "
                         "lane in use; or a module error counter rose"),
    "NicTemperatureHigh": "a rail PF's ASIC sensor is at or above its own critical temperature",
    "PcieLinkDegraded": ("a rail PF's PCIe link trained below the speed or width both ends support (warning), or is "
                         "gone: current_link_speed Unknown with current_link_width 63, the link status register "
                         "reads all ones (critical)"),
    "PcieErrors": ("a rail PF counted fatal or non-fatal AER errors; correctable errors are info, warning when "
                   "they rise"),
    "FirmwarePendingActivation": "a NIC's stored firmware differs from the running one: flashed, waiting for a reset",
    "GpuDirectNotReady": ("the node has rails and NVIDIA GPUs but no GPUDirect RDMA path (no peer-memory module "
                          "and no DMA-BUF path)"),
    "MtuMismatch": ("a rail's MTU differs from --expect-mtu, or from the most common MTU of the node's rails, or "
                    "exceeds its LLDP peer's maximum frame size less 18 bytes (22 with a VLAN tag); or oversize frames "
                    "arrive"),
    "DriverNotDoca": "with --expect-driver doca: the rail PFs run the inbox mlx5 driver",
    "RailNamingConflict": ("two udev rules name one PCI function differently, or give one name to two functions: "
                           "only one can win at boot"),
    "RailResourcesLost": ("an extended resource of the node (--rail-resources) dropped to 0 allocatable after it "
                          "was above 0: the device plugin lost the rails"),
    "RailRdmaMissing": ("a rail has no RDMA device although its udev rules name one, or its PF is mlx5 with RoCE "
                        "enabled (devlink param enable_roce), or --expect-rdma is given"),
    "FirmwareStoredUnreadable": ("a NIC reports its stored firmware as 255.255.65535 (mlx5: the pending image could "
                                 "not be read, a failed or interrupted flash); never a FirmwarePendingActivation"),
    "PfcPeerMismatch": ("the rail's LLDP peer advertises PFC on other priorities than the rail's lossless priority, or "
                        "PFC off where the rail has it on (or the reverse)"),
    "RailPeerMismatch": "--cabling names another leaf or port for the rail than its LLDP neighbour (miscabled after a repair)",
    "RailIntentMismatch": ("the operator's intent for the node (the NicInterfaceNameTemplate's PCI → rail mapping, a "
                           "NicDevice's `InterfaceNameApplied=True` port name, the SriovNetworkNodeState's `interfaces`: "
                           "numVfs, eSwitchMode, mtu) disagrees with what the node's agent reports at that PCI address; "
                           "the object and field in the evidence"),
    "OperatorConfigConflict": ("the operators' objects contradict each other or the guide's rules: the SR-IOV "
                               "operator's mellanox plug-in enabled (no `mellanox` in `disablePlugins`) while "
                               "NicConfigurationTemplates exist, `spectrumXOptimized` with `numVfs != 1`, a `-beta` "
                               "`helm.sh/chart` version"),
}

#: code -> what a finding's subject names (docs/design.md §4), so that one finding maps to one alert.
CODE_SUBJECTS: dict[str, str] = {
    "RailMissing": "the expected rail netdev name (`net_rail1`); the PCI function for a --rail-map rail no rule names",
    "RailNameMismatch": "the expected rail netdev name (`net_rail1`)",
    "RdmaNameMismatch": "the expected RDMA device name (`rdma_rail1`)",
    "RailTemplateInvalid": "the rules file's absolute path on the host (`/etc/udev/rules.d/10-nic-net-interface-naming.rules`)",
    "RailRuleUnreadable": "the rules file's absolute path on the host",
    "RailLinkDown": "the expected rail netdev name (`net_rail1`)",
    "RdmaLinkDown": "the expected RDMA device name (`rdma_rail1`)",
    "RdmaNetnsModeUnexpected": "`node`",
    "RepresentorStale": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "EswitchModeUnexpected": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "EswMultiportUnexpected": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "PfcDisabled": "the expected rail netdev name (`net_rail1`)",
    "GlobalPauseEnabled": "the expected rail netdev name (`net_rail1`)",
    "PfcStorm": "the expected rail netdev name (`net_rail1`)",
    "LosslessDrops": "the expected rail netdev name (`net_rail1`)",
    "LinkFlapping": "the expected rail netdev name (`net_rail1`)",
    "ConfigFlapping": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "FirmwareSkew": "`node`",
    "DriverKernelUnvalidated": "`node`",
    "NicHealthError": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "LinkDegrading": "the expected rail netdev name (`net_rail1`)",
    "OpticsOutOfRange": "the expected rail netdev name (`net_rail1`)",
    "NicTemperatureHigh": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "PcieLinkDegraded": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "PcieErrors": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "FirmwarePendingActivation": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "GpuDirectNotReady": "`node`",
    "MtuMismatch": "the expected rail netdev name (`net_rail1`)",
    "DriverNotDoca": "`node`",
    "RailNamingConflict": "the PF's devlink handle when one function has two names, else the name given twice",
    "RailResourcesLost": "the extended resource's name (`nvidia.com/rail0`)",
    "RailRdmaMissing": "the expected rail netdev name (`net_rail1`)",
    "FirmwareStoredUnreadable": "the PF's devlink handle (`pci/0000:1a:00.1`)",
    "PfcPeerMismatch": "the expected rail netdev name (`net_rail1`)",
    "RailPeerMismatch": "the expected rail netdev name (`net_rail1`)",
    "RailIntentMismatch": "the rail netdev (the PF's PCI address where the node has no netdev there)",
    "OperatorConfigConflict": "the object, `<kind>/<namespace>/<name>`",
}


def next_step(code: str) -> str | None:
    """What to do about a finding of ``code``, or None for a code this version does not know (a bundle
    from a newer agent)."""
    return NEXT_STEPS.get(code)


def severity_rank(sev: str) -> int:
    """0 for critical, 1 warning, 2 info (lower sorts first)."""
    try:
        return SEVERITIES.index(sev)
    except ValueError:
        return len(SEVERITIES)


@dataclass(frozen=True)
class Finding:
    code: str
    severity: str
    subject: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def sort_key(self) -> tuple[int, bytes, bytes]:
        return (severity_rank(self.severity), self.code.encode(), self.subject.encode())

    def as_json(self) -> dict[str, Any]:
        return {"code": self.code, "severity": self.severity, "subject": self.subject,
                "message": self.message, "evidence": self.evidence}


@dataclass(frozen=True, slots=True)
class PeerRow:
    """``rails[].peer``: the rail's LLDP neighbour. ``pfc`` the priorities it has PFC on (None: it sends no
    PFC TLV); ``seen`` unix seconds of its last frame."""

    system: str | None
    port: str | None
    mfs: int | None = None
    pfc: tuple[int, ...] | None = None
    seen: float | None = None

    def as_json(self) -> dict[str, Any]:
        return {"system": self.system, "port": self.port, "mfs": self.mfs,
                "pfc": list(self.pfc) if self.pfc is not None else None, "seen": self.seen}

    @property
    def label(self) -> str:
        """``leaf:port`` as the doctor table's PEER column shows it."""
        return f"{self.system or '?'}:{self.port or '?'}"


@dataclass(frozen=True)
class RailRow:
    """One line of ``rails[]`` in the doctor document."""

    rail: int
    plane: int | None
    netdev: str | None
    rdma: str | None
    pci: str | None
    oper: str | None = None  # "up" | "down" | None (no netdev)
    speed_mbps: int | None = None
    #: the rail netdev's MTU (what SR-IOV's SriovNetworkNodeState asks is judged against it); None: no netdev
    mtu: int | None = None
    rdma_state: str | None = None
    driver: str | None = None
    driver_version: str | None = None
    firmware: str | None = None
    psid: str | None = None
    eswitch_mode: str | None = None
    esw_multiport: bool | None = None
    numvfs: int | None = None
    representors: int | None = None
    #: the GPU nearest the rail PF in the PCIe tree, and how near (``nvidia-smi topo -m`` words)
    gpu: str | None = None
    gpu_link: str | None = None
    #: the switch port the rail is cabled to (its LLDP neighbour); None without one
    peer: PeerRow | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "rail": self.rail, "plane": self.plane, "netdev": self.netdev, "rdma": self.rdma,
            "pci": self.pci, "oper": self.oper, "speed_mbps": self.speed_mbps, "mtu": self.mtu,
            "rdma_state": self.rdma_state, "driver": self.driver,
            "driver_version": self.driver_version, "firmware": self.firmware, "psid": self.psid,
            "eswitch_mode": self.eswitch_mode, "esw_multiport": self.esw_multiport,
            "numvfs": self.numvfs, "representors": self.representors,
            "gpu": self.gpu, "gpu_link": self.gpu_link,
            "peer": self.peer.as_json() if self.peer is not None else None,
        }


@dataclass(frozen=True)
class Diagnosis:
    node: str | None
    kernel: str | None
    rails: tuple[RailRow, ...]
    findings: tuple[Finding, ...]
    #: source -> reason, for what could not be read (shown to people, not part of the contract)
    unavailable: tuple[tuple[str, str], ...] = ()
    #: what people must know of how the node was judged (``--rails 8`` against rules that name 4)
    notes: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": "railscope.doctor/v1",
            "node": self.node,
            "kernel": self.kernel,
            "rails": [r.as_json() for r in self.rails],
            "findings": [f.as_json() for f in self.findings],
            "unavailable": [{"source": s, "reason": r} for s, r in self.unavailable],
            **({"notes": list(self.notes)} if self.notes else {}),
        }

    def exit_status(self) -> int:
        """0 clean, 1 warnings only, 2 any critical (the ``railscope doctor`` contract)."""
        sev = {f.severity for f in self.findings}
        if "critical" in sev:
            return 2
        if "warning" in sev:
            return 1
        return 0
