"""udev: every rules directory that can name a NIC or an RDMA device."""

from agent.capture.plugin import File, Plugin

PLUGIN = Plugin("udev", 1, (
    File("/etc/udev/rules.d/*"),
    File("/run/udev/rules.d/*"),
    File("/lib/udev/rules.d/*net*"),
    File("/lib/udev/rules.d/*rdma*"),
), "/etc, /run and /lib udev rules")
