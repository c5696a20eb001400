"""dcb: per rail, PFC, APP (DSCP / priority map), buffers and ETS as the driver holds them.

Each is a firmware read on mlx5: ``dcb <object> show`` asks DCB_CMD_IEEE_GET, which dcbnl answers by
calling every IEEE getter of the driver (net/dcb/dcbnl.c dcbnl_ieee_fill), and mlx5's read registers
(drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c: getets QTCT / QETCR, getpfc PFCC, getbuffer PBMC /
PPTB; getmaxrate QETCR too). So one at a time per PF, rail PFs only, always per rail (``dev``): never a
dump of the node. ``firmware="rail"``: the runner holds the rail PF's gate and --exclude-devices removes it.

https://github.com/torvalds/linux/blob/master/net/dcb/dcbnl.c (dcbnl_ieee_fill),
https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/en_dcbnl.c
(mlx5e_dcbnl_ieee_getets -> mlx5_query_port_prio_tc / _tc_group / _tc_bw_alloc, mlx5e_dcbnl_ieee_getpfc ->
mlx5_query_port_pfc, mlx5e_dcbnl_getbuffer -> mlx5e_port_query_priority2buffer / mlx5e_port_query_buffer).
"""

from agent.capture.plugin import Command, Plugin

PLUGIN = Plugin("dcb", 2, tuple(
    Command(("dcb", "-j", what, "show", "dev", "{rail}"), firmware="rail") for what in ("pfc", "app", "buffer", "ets")
), "per rail: pfc, app, buffer, ets")
