"""devlink: device info, resources and the full parameter list for people; health diagnose of the
rail PFs' reporters (firmware-touching: one at a time per PF). The readers' own devlink commands
(dev, eswitch, watched params, ports, health show) are recorded by replay."""

from agent.capture.plan import Command, Plan

PLAN = Plan("devlink", 1, (
    Command(("devlink", "-j", "dev", "info")),
    Command(("devlink", "-j", "resource", "show", "{handle}")),
    Command(("devlink", "-j", "dev", "param", "show")),
    Command(("devlink", "-j", "health", "diagnose", "{handle}", "reporter", "{reporter}"),
            timeout_s=15.0, firmware="handle"),
), "dev info, resources, params, health diagnose")
