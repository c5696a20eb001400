"""rdma: statistics and resource *summary counts* (never the per-object listings: the deny-list)."""

from agent.capture.plan import Command, Plan

PLAN = Plan("rdma", 1, (
    Command(("rdma", "-j", "statistic", "show")),
    Command(("rdma", "-j", "res", "show")),
), "statistics and resource counts")
