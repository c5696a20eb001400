"""devlink: device info, resources and the full parameter list for people; health diagnose of the
rail PFs' reporters (firmware-touching: one at a time per PF). The readers' own devlink commands
(dev, eswitch, watched params, ports, health show, dev info of the rail PFs) are recorded by replay.

``dev info`` is a firmware read on mlx5 (devlink.c mlx5_devlink_info_get -> fw.c mlx5_fw_version_query:
MCQI / MCQS registers), and so is ``dev param show`` on kernels with the permanent parameters of
lib/nv_param.c (MNVDA register). Both are asked of each rail PF's handle, never as a dump, which would
reach every mlx5 function of the node (an HGX baseboard's restricted PF answers with a kernel warning
each time).
"""

from agent.capture.plan import Command, Plan

PLAN = Plan("devlink", 2, (
    Command(("devlink", "-j", "dev", "info", "{handle}"), firmware="handle"),
    Command(("devlink", "-j", "resource", "show", "{handle}")),
    Command(("devlink", "-j", "dev", "param", "show", "{handle}"), firmware="handle"),
    Command(("devlink", "-j", "health", "diagnose", "{handle}", "reporter", "{reporter}"),
            timeout_s=15.0, firmware="handle"),
), "dev info, resources, params, health diagnose")
