"""ethtool: per rail, driver info, statistics, offloads, channels, rings, pause, FEC and the module
EEPROM. ``-S``, ``-a``, ``--show-fec`` and ``-m`` reach the firmware on mlx5: one at a time per PF,
rail PFs only. ``-i`` / ``-S`` / ``-m`` are the readers' own, recorded by replay: in a capture the optics
reader reads the text form even where the installed ethtool prints ``--json -m`` (6.14+), so each
module is read once per capture (docs/design.md §7) and the bundle holds what a person reads."""

from agent.capture.plugin import Command, Plugin

# The firmware reads on mlx5 (drivers/net/ethernet/mellanox/mlx5/core): -S the PPCNT counter groups,
# -a en_ethtool.c mlx5e_get_pauseparam -> port.c mlx5_query_port_pause -> mlx5_query_pfcc_reg (PFCC
# register), --show-fec mlx5e_get_fecparam -> en/port.c mlx5e_get_fec_mode (ACCESS_REG of PPLM), -m MCIA.
# Each is a synchronous command to the NIC's firmware, hence ``firmware="rail"``: the runner holds the
# rail PF's gate for it and --exclude-devices removes it. -k / -l / -g answer from the driver's own state.
#   https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/en_ethtool.c
#   https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/port.c
#   https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/en/port.c
PLUGIN = Plugin("ethtool", 2, (
    Command(("ethtool", "-i", "{rail}")),
    Command(("ethtool", "-S", "{rail}"), firmware="rail"),
    Command(("ethtool", "-k", "{rail}")),
    Command(("ethtool", "-l", "{rail}")),
    Command(("ethtool", "-g", "{rail}")),
    Command(("ethtool", "-a", "{rail}"), firmware="rail"),
    Command(("ethtool", "--show-fec", "{rail}"), firmware="rail"),
    Command(("ethtool", "-m", "{rail}"), firmware="rail"),
), "per rail: -i -S -k -l -g -a --show-fec -m")
