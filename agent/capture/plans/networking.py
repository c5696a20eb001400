"""networking: the host namespace's links, addresses, routes, rules and neighbours (iproute2)."""

from agent.capture.plan import Command, Plan

PLAN = Plan("networking", 1, (
    Command(("ip", "-d", "-s", "link", "show")),
    Command(("ip", "-d", "addr", "show")),
    Command(("ip", "route", "show", "table", "all")),
    Command(("ip", "-6", "route", "show", "table", "all")),
    Command(("ip", "rule", "show")),
    Command(("ip", "neigh", "show")),
    Command(("ip", "-s", "-d", "link", "show", "{rail}"), max_bytes=1 << 20),
), "ip link / addr / route / rule / neigh")
