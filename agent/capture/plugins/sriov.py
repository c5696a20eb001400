"""sriov: each rail PF's SR-IOV sysfs (counts, VF links) and the SR-IOV operator's applied config."""

from agent.capture.plugin import File, Plugin

PLUGIN = Plugin("sriov", 1, (
    File("/sys/bus/pci/devices/{pf}/sriov_*", 4096),
    File("/sys/bus/pci/devices/{pf}/virtfn*", 4096),
    File("/etc/sriov-operator/**"),
    File("/etc/sriov_config.json"),
), "PF sriov_* and virtfn*, /etc/sriov-operator, /etc/sriov_config.json")
