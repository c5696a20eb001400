"""rdma: statistics and resource *summary counts* (never the per-object listings: the deny-list).

The statistics are firmware reads on mlx5 (drivers/infiniband/hw/mlx5/counters.c mlx5_ib_get_hw_stats:
QUERY_Q_COUNTER, and the congestion and PPCNT counters), one set per port: asked of each rail's RDMA
port, one at a time per PF, never as a dump of every port of every RDMA device (a switchdev PF has one
per representor; a restricted PF's fail). The resource summary is the kernel's own tracking.
"""

from agent.capture.plugin import Command, Plugin

PLUGIN = Plugin("rdma", 2, (
    Command(("rdma", "-j", "statistic", "show", "link", "{rdma}"), firmware="rdma"),
    Command(("rdma", "-j", "res", "show")),
), "per rail port: statistics; resource counts")
