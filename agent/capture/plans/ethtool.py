"""ethtool: per rail, driver info, statistics, offloads, channels, rings, pause, FEC and the module
EEPROM. ``-S`` and ``-m`` reach the firmware on mlx5: one at a time per PF. ``-i`` / ``-S`` are
the readers' own, recorded by replay; so is ``-m`` where the optics reader reads the text. Where it
reads ``--json -m`` (ethtool 6.14+), replay records that and this plan still reads the text a person
reads: one more module read per rail and capture, through the same firmware gate."""

from agent.capture.plan import Command, Plan

PLAN = Plan("ethtool", 1, (
    Command(("ethtool", "-i", "{rail}")),
    Command(("ethtool", "-S", "{rail}"), firmware="rail"),
    Command(("ethtool", "-k", "{rail}")),
    Command(("ethtool", "-l", "{rail}")),
    Command(("ethtool", "-g", "{rail}")),
    Command(("ethtool", "-a", "{rail}")),
    Command(("ethtool", "--show-fec", "{rail}")),
    Command(("ethtool", "-m", "{rail}"), firmware="rail"),
), "per rail: -i -S -k -l -g -a --show-fec -m")
