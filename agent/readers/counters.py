"""counters: the rails' incident counters at the flight recorder's resolution (1 s by default).

Each rail's ethtool statistics, one netdev at a time (on mlx5 each is a synchronous firmware read:
ETHTOOL_GSTATS), and, for the daemon's flight recorder, their stats64 traffic and the RDMA loss
counters of their uplink ports (``Part.gives["recorder_counters"]``).
"""

from __future__ import annotations

from agent.config import ReadConfig
from agent.host import Host
from agent.readers.common import Notes, read_word, to_int
from agent.readers.ethtool import read_ethtool
from agent.readers.links import is_representor, read_link_stats
from agent.readers.scope import touchable_netdevs
from agent.readers.source import Context, Part, Source, part

__all__ = ["RDMA_RECORDED", "SOURCE", "TRAFFIC", "read_counters"]

#: RDMA port counters read with every counters sample for the flight recorder.
RDMA_RECORDED = ("out_of_sequence", "packet_seq_err", "local_ack_timeout_err", "np_cnp_sent", "rp_cnp_handled")

#: stats64 keys the recorder keeps beside the incident counters: the traffic around an incident.
TRAFFIC = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_dropped", "tx_dropped")


def read_counters(host: Host, cfg: ReadConfig, ctx: Context, notes: Notes) -> Part:
    """The rails' ethtool statistics, one netdev at a time (on mlx5 each is a firmware read), and with
    ``ctx.recorder`` their stats64 traffic and the RDMA loss counters of their uplink ports."""
    targets = list(ctx.rails)
    if cfg.representor_ethtool:
        targets += sorted(lk.ifname for lk in ctx.links if is_representor(lk))
    allowed = set(touchable_netdevs(targets, ctx.links, cfg.exclude_devices))
    stats, drivers = [], []
    for name in targets:
        if name not in allowed:
            notes.missing(f"ethtool -S {name}", "excluded by --exclude-devices")
            continue
        st, di = read_ethtool(host, [name], cfg.command_timeout_s, notes)
        stats.extend(st)
        drivers.extend(di)
    extra: dict[str, dict[str, int]] = {}
    if ctx.recorder:
        # the RDMA loss counters are firmware reads on mlx5 too: rails --exclude-devices leaves alone only
        for name in (n for n in ctx.rails if n in allowed):
            counters: dict[str, int] = {}
            port = ctx.rdma_ports.get(name)
            if port is not None:
                dev, p = port
                for cname in RDMA_RECORDED:
                    val = to_int(read_word(host, f"/sys/class/infiniband/{dev}/ports/{p}/hw_counters/{cname}", 64))
                    if val is not None:
                        counters[cname] = val
            extra[name] = counters
        for name, pairs in read_link_stats(host, list(ctx.rails), notes).items():
            extra.setdefault(name, {}).update((k, v) for k, v in pairs if k in TRAFFIC)
    return part("counters", notes, fields={"ethtool": tuple(stats), "drivers": tuple(drivers)},
                gives={"recorder_counters": extra})


SOURCE = Source("counters", "the rails' incident counters (ethtool statistics, one netdev at a time; carrier losses; "
                            "RDMA loss counters): the flight recorder's resolution",
                (("ethtool",),), 1.0, 0.0, ("ethtool", "drivers"), read_counters, order=80,
                needs=("rails", "links"), roles=frozenset({"recorder"}), firmware_touching=True)
