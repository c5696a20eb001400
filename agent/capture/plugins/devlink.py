"""devlink: device info and resources for people; health diagnose of the rail PFs' reporters
(firmware-touching: one at a time per PF). The readers' own devlink commands (dev, eswitch, the watched
params, ports, health show, dev info of the rail PFs) are recorded by replay.

``dev info`` is a firmware read on mlx5 (devlink.c mlx5_devlink_info_get -> fw.c mlx5_fw_version_query:
MCQI / MCQS registers): it is asked of each rail PF's handle, never as a dump, which would reach every
mlx5 function of the node (an HGX baseboard's restricted PF answers with a kernel warning each time).
Parameters are read by the readers, per rail PF and name (``esw_multiport``, ``flow_steering_mode``,
``enable_roce`` and every ``--devlink-param``): iproute2 6.1 (Debian 12's, this image's) cannot show one device's
parameters without a name ("Parameter name expected", seen in the kernel lab), and the dump of all reaches
every function — on kernels with lib/nv_param.c a firmware read (MNVDA register) of each."""

from agent.capture.plugin import Command, Plugin

PLUGIN = Plugin("devlink", 3, (
    Command(("devlink", "-j", "dev", "info", "{handle}"), firmware="handle"),
    Command(("devlink", "-j", "resource", "show", "{handle}")),
    Command(("devlink", "-j", "health", "diagnose", "{handle}", "reporter", "{reporter}"),
            timeout_s=15.0, firmware="handle"),
), "dev info, resources, health diagnose")
