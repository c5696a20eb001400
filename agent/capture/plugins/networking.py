"""networking: the host namespace's links, addresses, routes, rules and neighbours (iproute2)."""

from agent.capture.plugin import Command, Plugin

PLUGIN = Plugin("networking", 1, (
    Command(("ip", "-d", "-s", "link", "show")),
    Command(("ip", "-d", "addr", "show")),
    Command(("ip", "route", "show", "table", "all")),
    Command(("ip", "-6", "route", "show", "table", "all")),
    Command(("ip", "rule", "show")),
    Command(("ip", "neigh", "show")),
    Command(("ip", "-s", "-d", "link", "show", "{rail}"), max_bytes=1 << 20),
    # Pod sandboxes, only with --pod-netns: entering them needs CAP_SYS_ADMIN and shows tenant data.
    Command(("ip", "-n", "{netns}", "-d", "-s", "link", "show"), max_bytes=1 << 20),
    Command(("ip", "-n", "{netns}", "-d", "addr", "show"), max_bytes=1 << 20),
    Command(("ip", "-n", "{netns}", "route", "show", "table", "all"), max_bytes=1 << 20),
), "ip link / addr / route / rule / neigh; pod namespaces with --pod-netns")
