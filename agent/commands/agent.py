"""``railscope agent``: run the node agent (``/metrics``, detectors, flight recorder).

Every flag can also come from ``RAILSCOPE_<FLAG>`` (``--links-interval`` -> ``RAILSCOPE_LINKS_INTERVAL``),
so a DaemonSet sets them from its values and the downward API. Exit status: 0 after a clean stop
(SIGTERM / SIGINT), 1 when the agent cannot serve (address not on this node, port taken), 3 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Any

from agent.commands.common import (
    COLLECTOR_CA,
    LLDP,
    SCOPE,
    add_expectation_flags,
    add_lldp_flag,
    add_scope_flag,
)
from agent.settings import (
    Setting,
    add_flags,
    count,
    cpu_quantity,
    duration,
    duration_or_zero,
    ratio,
    read,
    regex,
    size,
)

if TYPE_CHECKING:
    from agent.config import AgentSettings


def _event_codes() -> tuple[str, ...]:
    from agent.findings import EVENT_CODES

    return tuple(EVENT_CODES)


def _codes(text: str) -> frozenset[str]:
    from agent.findings import EVENT_CODES

    codes = frozenset(c.strip() for c in text.replace(" ", ",").split(",") if c.strip())
    unknown = sorted(codes - set(EVENT_CODES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown event code(s) {', '.join(unknown)} "
                                         f"(known: {', '.join(sorted(EVENT_CODES))})")
    return codes


def _parsed(parse: Any) -> Any:
    """``read``'s conversion of a value argparse leaves as text (a default of None given a value by hand)."""
    return lambda v: parse(v) if isinstance(v, str) else v


_SERVING = "serving"
_SAMPLING = "sampling (the scrape never reads the node: it serves the latest sample)"
_BOUNDS = "flight recorder, events and bounds"
_CAPTURES = "captures and data endpoints"
_THRESHOLDS = "detector thresholds"


def _threshold(flag: str, field: str, parse: Any, default: str, text: str) -> Setting:
    return Setting(flag, f"{text} Default: {default}.", type=parse, default=default, group=_THRESHOLDS,
                   field=f"thresholds.{field}")


def own_table() -> tuple[Setting, ...]:
    """The agent's own flags, in ``--help`` order (the judging flags and --exclude-devices follow:
    ``table``). A source's ``--<name>-interval`` comes from the registry."""
    from agent.config import DEFAULT_PORT, ReadConfig
    from agent.readers.sources import SOURCES

    names = ", ".join(src.name for src in SOURCES)
    intervals = []
    for src in SOURCES:
        low = f"; at least {src.min_interval_s:g}s" if src.min_interval_s >= 60 else ""
        default = f"{src.interval_s:g}s"
        intervals.append(Setting(f"--{src.name}-interval", f"Time between two reads of {src.doc}{low}. Default: {default}.",
                                 type=duration, default=default, group=_SAMPLING, field=f"intervals.{src.name}"))
    return (
        # --listen may come from RAILSCOPE_LISTEN (the chart's way), so argparse cannot require it
        Setting("--listen", "The IP address to serve on: the node's IP (status.hostIP from the downward API in a "
                "DaemonSet). Required. All addresses (0.0.0.0, ::) are refused unless --listen-any is "
                "given: the agent runs in the host network, where NetworkPolicy does not apply.",
                metavar="ADDR", group=_SERVING, field="listen", chart="fixed"),
        # never given by the chart: the pod runs in the host network
        Setting("--listen-any", "Allow --listen 0.0.0.0 or ::. Default: off.", kind="switch", default=False,
                group=_SERVING, chart="none"),
        Setting("--port", f"The TCP port to serve on. Default: {DEFAULT_PORT} (clear of node_exporter 9100, DTS 9189, "
                "sriov-network-metrics-exporter 9808 and rdma_exporter 9879, which are refused).",
                type=int, default=str(DEFAULT_PORT), group=_SERVING, field="port"),
        Setting("--host-root", "Where the node's filesystem is mounted (/host in the DaemonSet). Default: /.",
                default="/", metavar="DIR", group=_SERVING, field="host_root", chart="fixed"),
        Setting("--node", "The node name written into recorded node images (spec.nodeName from the downward "
                "API). Default: the node's hostname.", group=_SERVING, field="node", chart="fixed"),
        Setting("--cluster", "The cluster name written into recorded node images. Default: none.",
                group=_SERVING, field="cluster"),
        Setting("--log-level", "Least severe log lines written (JSON, one per line, on stderr). Default: info.",
                default="info", choices=("debug", "info", "warning", "error"), group=_SERVING),
        *intervals,
        Setting("--disable-source", f"Never read this source ({names}): its series and findings are absent and "
                "unavailable says so. Repeatable. Default: every source is read.", kind="list",
                choices=tuple(src.name for src in SOURCES), metavar="NAME", group=_SAMPLING, field="disabled",
                convert=lambda v: frozenset(v or ())),
        Setting("--source-deadline", "A read still running after this long is reported in railscope_source_hung and "
                "never started twice. Default: 20s.", type=duration, default="20s", group=_SAMPLING,
                field="source_deadline_s"),
        Setting("--command-timeout", "Timeout of each command the readers run (devlink, rdma, ovs-vsctl). "
                "Default: 10s.", type=duration, default="10s", group=_SAMPLING, field="command_timeout_s"),
        Setting("--devlink-param", "A devlink param to read on every PF and watch for ConfigFlapping. Repeatable. "
                "Default: esw_multiport, flow_steering_mode and enable_roce.", kind="list", env=False,
                metavar="NAME", group=_SAMPLING, field="read.devlink_params",
                convert=lambda v: tuple(v) if v else ReadConfig().devlink_params),
        Setting("--representor-include", "Representor netdevs matching this regular expression get their own "
                "series. Default: none (representors are counted per PF).", type=regex, metavar="REGEX",
                group=_SAMPLING, field="representor_include"),
        Setting("--recorder-window", "How far back the flight recorder keeps the rails' counter samples "
                "(recorder.jsonl in every node image); 0 turns it off. Default: 15m.", type=duration_or_zero,
                default="15m", group=_BOUNDS, field="recorder_window_s"),
        Setting("--event-history", "Events kept for events.json and /v1/events, oldest dropped first. "
                "Default: 1000.", type=count(1), default="1000", group=_BOUNDS, field="event_history"),
        Setting("--event-queue", "Bound of the queue of link events between the netlink watcher and the detectors "
                "(coalesced per link; the oldest link is dropped when full). Default: 4096.", type=count(1),
                default="4096", group=_BOUNDS, field="event_queue"),
        Setting("--capture-on", "Detector event codes that capture a bundle into the spool, comma separated, of: "
                f"{', '.join(sorted(_event_codes()))}. Default: none.", type=_codes, default="", metavar="CODES",
                group=_CAPTURES, field="capture_on", convert=_parsed(_codes)),
        Setting("--capture-cooldown", "Least time between two event captures of one code on this node: a storm of "
                "events is one bundle. Default: 10m.", type=duration, default="10m", group=_CAPTURES,
                field="capture_cooldown_s"),
        Setting("--capture-deadline", "Overall deadline of one capture; what finished by then is packed. "
                "Default: 300s.", type=duration, default="300s", group=_CAPTURES, field="capture_deadline_s"),
        Setting("--spool", "The node spool: event captures are written here (mode 0700) until uploaded. "
                "Default: none (event captures off).", metavar="DIR", group=_CAPTURES, field="spool_dir"),
        Setting("--spool-max-bytes", "Size cap of the spool; the oldest bundles are dropped first. "
                "Default: 1073741824 (1 GiB).", type=count(1), default=str(1 << 30), metavar="BYTES",
                group=_CAPTURES, field="spool_max_bytes"),
        Setting("--collector", "The collector the spool is emptied into, oldest bundle first (a bundle leaves the "
                "spool only once the collector has it), and that the agent long-polls for capture requests "
                "for --node (so nothing connects into the pod). Default: none (bundles stay in the "
                "spool, no requests).", metavar="URL", group=_CAPTURES, field="collector_url"),
        Setting("--collector-token-file", "The agent's token for --collector (a projected ServiceAccount token, read "
                "before every upload; readable by its owner only, mode 0600 or 0400). Default: none.",
                metavar="FILE", group=_CAPTURES, field="collector_token_file"),
        dataclasses.replace(
            COLLECTOR_CA, group=_CAPTURES,
            help="The CA that issued the collector's TLS certificate: an https --collector is verified against "
                 "it; while the file does not exist (the chart mounts the ca.crt of a TLS Secret that may have "
                 "none), against the system's CAs, with a warning. Default: the system's CAs."),
        Setting("--request-min-interval", "Least time between two captures for capture requests, whoever queued "
                "them; a request inside it waits for a later poll. Default: 5m.", type=duration, default="5m",
                group=_CAPTURES, field="request_min_interval_s"),
        Setting("--request-budget", "Captures for capture requests per hour at most; beyond, requests wait. "
                "Default: 6.", type=count(1), default="6", group=_CAPTURES, field="request_budget"),
        Setting("--allow-pod-netns", "Let a capture request enter pod network namespaces (tenant data; needs "
                "CAP_SYS_ADMIN). Default: off (such a request is captured without them).", kind="switch",
                default=False, group=_CAPTURES, field="allow_pod_netns"),
        Setting("--upload-interval", "How often the spool is tried when the collector was unreachable; a new "
                "capture is sent at once. Default: 30s.", type=duration, default="30s", group=_CAPTURES,
                field="upload_interval_s"),
        Setting("--budget-cpu", "The agent's CPU budget in cores (0.5, or a Kubernetes quantity such as 500m; the "
                "chart gives the pod's limit): past 80%% of it the optional sources (processes) pause until it is "
                "back under 60%%. Default: no budget.", type=cpu_quantity, metavar="CORES", group=_CAPTURES,
                field="budget_cpu", convert=_parsed(cpu_quantity)),
        Setting("--budget-rss", "The agent's memory budget (bytes, or a quantity such as 512Mi; the chart gives the "
                "pod's limit), guarded as --budget-cpu. Default: no budget.", type=size, metavar="BYTES",
                group=_CAPTURES, field="budget_rss", convert=_parsed(size)),
        Setting("--data-socket", "Unix socket serving every endpoint, the data endpoints (/v1/image, /v1/events, "
                "/v1/recorder) included; what railscope capture --agent unix:PATH uses in the pod. "
                "Default: none.", metavar="PATH", group=_CAPTURES, field="data_socket"),
        Setting("--data-token-file", "Bearer token that opens the data endpoints over TCP (re-read when the file "
                "changes). Without it they answer on --data-socket only. Default: none.", metavar="FILE",
                group=_CAPTURES, field="data_token_file"),
        # the agent's own HTTP server keeps the collector's connection bounds (proto.connections)
        Setting("--header-timeout", "A connection to the agent whose request headers are not complete by then is "
                "closed, and so is one idle this long between requests. Default: 10s.", type=duration,
                default="10s", group=_CAPTURES, field="header_timeout_s"),
        Setting("--max-conns-per-peer", "Connections one client address may hold open to the agent; beyond, a new "
                "one is closed at once (0: no cap). The total stays below the descriptor limit regardless. "
                "Default: 32.", type=count(0), default="32", group=_CAPTURES, field="max_conns_per_peer"),
        Setting("--rail-resources", "Extended resources of this node's Node object (status.allocatable) watched for "
                "RailResourcesLost, comma-separated shell patterns; nvidia.com/gpu is never one. Needs the "
                "node watch (an API server and --node). Default: nvidia.com/*,rdma/*,openshift.io/*.",
                default="nvidia.com/*,rdma/*,openshift.io/*", metavar="PATTERNS", group=_CAPTURES,
                field="rail_resources",
                convert=lambda v: tuple(x.strip() for x in str(v).split(",") if x.strip())),
        _threshold("--flap-count", "flap_count", count(1), "3",
                   "LinkFlapping: this many carrier losses of one rail or uplink ..."),
        _threshold("--flap-window", "flap_window_s", duration, "5m", "... within this window raise the event."),
        _threshold("--config-flap-changes", "config_flap_changes", count(1), "2",
                   "ConfigFlapping: this many changes of one value, at least one back to a value it had ..."),
        _threshold("--config-flap-window", "config_flap_window_s", duration, "10m",
                   "... within this window raise the event."),
        _threshold("--representor-grace", "representor_grace_s", duration, "60s",
                   "RepresentorStale: a representor for a VF index at or above sriov_numvfs older than this."),
        _threshold("--storm-ratio", "storm_ratio", ratio, "0.5",
                   "PfcStorm: transmitted pause time on the lossless priority over wall time at or above this ..."),
        _threshold("--storm-window", "storm_window_s", duration, "60s", "... over this window."),
        _threshold("--reload-grace", "reload_grace_s", duration, "30s",
                   "After a driver reload (srcversion changed), carrier losses and config changes this long are the "
                   "reload's, not flaps."),
    )


def table() -> tuple[Setting, ...]:
    """Every flag of ``railscope agent``: its own, the judging flags, --exclude-devices, --lldp."""
    from agent.expectations import TABLE as EXPECTATIONS

    return (*own_table(), *EXPECTATIONS, SCOPE, LLDP)


def register(p: argparse.ArgumentParser) -> None:
    add_flags(p, own_table())
    add_expectation_flags(p)
    add_scope_flag(p)
    add_lldp_flag(p)
    # --listen may come from RAILSCOPE_LISTEN (the chart's way), so argparse cannot require it; the
    # usage line still shows it as required. Usage text is %-formatted by argparse: escape it.
    usage = p.format_usage().removeprefix("usage: ").rstrip("\n").replace("%", "%%")
    p.usage = usage.replace("[--listen ADDR]", "--listen ADDR", 1)


def settings_from_args(args: argparse.Namespace) -> AgentSettings:
    from dataclasses import replace

    from agent.config import (
        AgentSettings,
        ReadConfig,
        SettingsError,
        check_intervals,
        check_listen,
        check_port,
    )
    from agent.expectations import expectations_from_args
    from agent.readers.sources import SOURCES

    if not args.listen:
        raise SettingsError("--listen ADDR is required (or RAILSCOPE_LISTEN): the node's IP address")
    kw = read((*own_table(), SCOPE, LLDP), args)
    kw["listen"] = check_listen(args.listen, args.listen_any)
    kw["port"] = check_port(int(args.port))
    if not os.path.isdir(args.host_root):
        raise SettingsError(f"--host-root {args.host_root}: not a directory")
    if kw["capture_on"] and not kw["spool_dir"]:
        # an event capture is written into the spool (and uploaded from it): without one, --capture-on would
        # capture nothing, and say so nowhere but in a bundle that never comes
        raise SettingsError(f"--capture-on {','.join(sorted(kw['capture_on']))}: event captures are written into "
                            "the spool, and none is given: add --spool DIR (and --collector URL to upload them), "
                            "or drop --capture-on")
    if args.collector and not args.collector.startswith(("http://", "https://")):
        raise SettingsError(f"--collector {args.collector!r}: expected an http:// or https:// URL")
    intervals = kw.pop("intervals")
    check_intervals(intervals, {src.name: src.min_interval_s for src in SOURCES})
    unknown = sorted(kw["disabled"] - set(intervals))
    if unknown:
        raise SettingsError(f"--disable-source {', '.join(unknown)}: no such source (known: {', '.join(intervals)})")
    th = kw.pop("thresholds")
    # the judging flags; the agent's --flap-count, --flap-window and --storm-ratio judge too
    exp = replace(expectations_from_args(args), flap_count=th["flap_count"], flap_window_s=th["flap_window_s"],
                  storm_ratio=th["storm_ratio"])
    read_config = ReadConfig(**kw.pop("read"), command_timeout_s=kw["command_timeout_s"],
                             net_templates=exp.net_templates, rdma_templates=exp.rdma_templates,
                             rail_map=exp.rail_map)
    return AgentSettings(**kw, intervals=tuple(intervals.items()), thresholds=tuple(th.items()), expectations=exp,
                         read=read_config)


def run(args: argparse.Namespace) -> int:
    from agent.config import SettingsError
    from agent.service.logs import setup_logging

    try:
        settings = settings_from_args(args)
    except (SettingsError, ValueError) as exc:
        print(f"railscope agent: {exc}", file=sys.stderr)
        return 3
    from proto.tokens import TokenFileError, read_token

    # Read again before every request (they rotate); a file that can never be used is said now, at
    # start, not in a warning at every upload, poll or data request.
    checks = [(settings.data_token_file, "--data-token-file")]
    if settings.collector_url:
        checks.append((settings.collector_token_file, "--collector-token-file"))
    for path, flag in checks:
        if not path:
            continue
        try:
            read_token(path, flag)
        except TokenFileError as exc:
            print(f"railscope agent: {exc}", file=sys.stderr)
            return 3
    setup_logging(args.log_level)
    from agent.service.app import serve

    return asyncio.run(serve(settings))
