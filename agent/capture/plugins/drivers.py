"""drivers: version, srcversion and parameters of the NIC and RDMA modules, from sysfs (the
container has no module tree for ``modinfo``)."""

from agent.capture.plugin import File, Plugin

_MODULES = ("mlx5_core", "mlx5_ib", "ib_core", "nvidia_peermem")

PLUGIN = Plugin("drivers", 1, tuple(
    File(f"/sys/module/{mod}/{what}", 64 << 10)
    for mod in _MODULES for what in ("version", "srcversion", "parameters/*")
), "mlx5_core, mlx5_ib, ib_core, nvidia_peermem: version, srcversion, parameters")
