"""kernel: release, command line, modules, modprobe options, the kernel log's tail, interrupts."""

from agent.capture.plugin import Command, File, Plugin

PLUGIN = Plugin("kernel", 1, (
    Command(("uname", "-a")),
    File("/proc/cmdline", 64 << 10),
    File("/proc/modules"),
    File("/etc/modprobe.d/*"),
    # The newest 4 MiB of the ring buffer: the lines around the incident.
    Command(("dmesg",), max_bytes=4 << 20),
    File("/proc/interrupts", 8 << 20),
), "uname, cmdline, modules, modprobe.d, dmesg tail, interrupts")
