"""``railscope agent``: run the node agent (``/metrics``, detectors, flight recorder).

Every flag can also come from ``RAILSCOPE_<FLAG>`` (``--links-interval`` -> ``RAILSCOPE_LINKS_INTERVAL``),
so a DaemonSet sets them from its values and the downward API. Exit status: 0 after a clean stop
(SIGTERM / SIGINT), 1 when the agent cannot serve (address not on this node, port taken), 3 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from agent.commands.common import (
    _bool_word,
    _duration,
    _regex,
    add_expectation_flags,
    add_scope_flag,
    duration_or_zero,
    env_default,
    expectations_from_args,
)

#: Detector thresholds: flag -> (Thresholds field, parser, default text, help).
_THRESHOLDS: tuple[tuple[str, str, str, str], ...] = (
    ("flap-count", "flap_count", "3", "LinkFlapping: this many carrier losses of one rail or uplink ..."),
    ("flap-window", "flap_window_s", "5m", "... within this window raise the event."),
    ("config-flap-changes", "config_flap_changes", "2",
     "ConfigFlapping: this many changes of one value, at least one back to a value it had ..."),
    ("config-flap-window", "config_flap_window_s", "10m", "... within this window raise the event."),
    ("representor-grace", "representor_grace_s", "60s",
     "RepresentorStale: a representor for a VF index at or above sriov_numvfs older than this."),
    ("storm-ratio", "storm_ratio", "0.5",
     "PfcStorm: transmitted pause time on the lossless priority over wall time at or above this ..."),
    ("storm-window", "storm_window_s", "60s", "... over this window."),
    ("reload-grace", "reload_grace_s", "30s",
     "After a driver reload (srcversion changed), carrier losses and config changes this long are the "
     "reload's, not flaps."),
)
if TYPE_CHECKING:
    from agent.config import AgentSettings

_INTS = {"flap-count", "config-flap-changes"}
_FLOATS = {"storm-ratio"}


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {n}")
    return n


def _ratio(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"expected a ratio in (0, 1], got {x}")
    return x


def _cpu_quantity(text: str) -> float:
    """Cores: ``0.5``, ``2``, or millicores ``500m`` (Kubernetes' CPU quantity)."""
    t = str(text).strip()
    try:
        val = float(t[:-1]) / 1000 if t.endswith("m") else float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected cores such as 0.5 or 500m, got {text!r}") from None
    if not val > 0:
        raise argparse.ArgumentTypeError("a CPU budget must be positive")
    return val


_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _bytes_quantity(text: str) -> int:
    """Bytes: ``536870912``, or a Kubernetes memory quantity (``512Mi``, ``1G``)."""
    t = str(text).strip()
    mult = next((m for u, m in _UNITS.items() if t.endswith(u)), 1)
    num = next((t[: -len(u)] for u in _UNITS if t.endswith(u)), t)
    try:
        val = int(float(num) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes such as 536870912 or 512Mi, got {text!r}") from None
    if val <= 0:
        raise argparse.ArgumentTypeError("a memory budget must be positive")
    return val


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


def register(p: argparse.ArgumentParser) -> None:
    from agent.config import DEFAULT_PORT

    g = p.add_argument_group("serving")
    g.add_argument("--listen", default=env_default("listen", None), metavar="ADDR",
                   help="The IP address to serve on: the node's IP (status.hostIP from the downward API in a "
                        "DaemonSet). Required. All addresses (0.0.0.0, ::) are refused unless --listen-any is "
                        "given: the agent runs in the host network, where NetworkPolicy does not apply.")
    g.add_argument("--listen-any", action="store_true",
                   default=_bool_word(env_default("listen-any", "false") or "false"),
                   help="Allow --listen 0.0.0.0 or ::. Default: off.")
    g.add_argument("--port", type=int, default=env_default("port", str(DEFAULT_PORT)),
                   help=f"The TCP port to serve on. Default: {DEFAULT_PORT} (clear of node_exporter 9100, DTS 9189, "
                        "sriov-network-metrics-exporter 9808 and rdma_exporter 9879, which are refused).")
    g.add_argument("--host-root", default=env_default("host-root", "/"), metavar="DIR",
                   help="Where the node's filesystem is mounted (/host in the DaemonSet). Default: /.")
    g.add_argument("--node", default=env_default("node", None),
                   help="The node name written into recorded node images (spec.nodeName from the downward "
                        "API). Default: the node's hostname.")
    g.add_argument("--cluster", default=env_default("cluster", None),
                   help="The cluster name written into recorded node images. Default: none.")
    g.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                   default=env_default("log-level", "info"),
                   help="Least severe log lines written (JSON, one per line, on stderr). Default: info.")

    s = p.add_argument_group("sampling (the scrape never reads the node: it serves the latest sample)")
    from agent.readers.sources import SOURCES

    for src in SOURCES:
        low = f"; at least {src.min_interval_s:g}s" if src.min_interval_s >= 60 else ""
        default = f"{src.interval_s:g}s"
        s.add_argument(f"--{src.name}-interval", type=_duration, default=env_default(f"{src.name}-interval", default),
                       help=f"Time between two reads of {src.doc}{low}. Default: {default}.")
    names = ", ".join(src.name for src in SOURCES)
    s.add_argument("--disable-source", action="append", choices=[src.name for src in SOURCES], default=None,
                   metavar="NAME",
                   help=f"Never read this source ({names}): its series and findings are absent and "
                        "unavailable says so. Repeatable. Default: every source is read.")
    s.add_argument("--source-deadline", type=_duration, default=env_default("source-deadline", "20s"),
                   help="A read still running after this long is reported in railscope_source_hung and never "
                        "started twice. Default: 20s.")
    s.add_argument("--command-timeout", type=_duration, default=env_default("command-timeout", "10s"),
                   help="Timeout of each command the readers run (devlink, rdma, ovs-vsctl). Default: 10s.")
    s.add_argument("--devlink-param", action="append", default=None, metavar="NAME",
                   help="A devlink param to read on every PF and watch for ConfigFlapping. Repeatable. "
                        "Default: esw_multiport, flow_steering_mode and enable_roce.")
    s.add_argument("--representor-include", type=_regex, default=env_default("representor-include", None),
                   metavar="REGEX",
                   help="Representor netdevs matching this regular expression get their own series. "
                        "Default: none (representors are counted per PF).")

    r = p.add_argument_group("flight recorder, events and bounds")
    r.add_argument("--recorder-window", type=duration_or_zero, default=env_default("recorder-window", "15m"),
                   help="How far back the flight recorder keeps the rails' counter samples (recorder.jsonl in "
                        "every node image); 0 turns it off. Default: 15m.")
    r.add_argument("--event-history", type=_count, default=env_default("event-history", "1000"),
                   help="Events kept for events.json and /v1/events, oldest dropped first. Default: 1000.")
    r.add_argument("--event-queue", type=_count, default=env_default("event-queue", "4096"),
                   help="Bound of the queue of link events between the netlink watcher and the detectors "
                        "(coalesced per link; the oldest link is dropped when full). Default: 4096.")

    c = p.add_argument_group("captures and data endpoints")
    c.add_argument("--capture-on", type=_codes, default=env_default("capture-on", ""), metavar="CODES",
                   help="Detector event codes that capture a bundle into the spool, comma separated, of: "
                        f"{', '.join(sorted(_event_codes()))}. Default: none.")
    c.add_argument("--capture-cooldown", type=_duration, default=env_default("capture-cooldown", "10m"),
                   help="Least time between two event captures of one code on this node: a storm of events is "
                        "one bundle. Default: 10m.")
    c.add_argument("--capture-deadline", type=_duration, default=env_default("capture-deadline", "300s"),
                   help="Overall deadline of one capture; what finished by then is packed. Default: 300s.")
    c.add_argument("--spool", default=env_default("spool", None), metavar="DIR",
                   help="The node spool: event captures are written here (mode 0700) until uploaded. "
                        "Default: none (event captures off).")
    c.add_argument("--spool-max-bytes", type=_count, default=env_default("spool-max-bytes", str(1 << 30)),
                   metavar="BYTES", help="Size cap of the spool; the oldest bundles are dropped first. "
                                         "Default: 1073741824 (1 GiB).")
    c.add_argument("--collector", default=env_default("collector", None), metavar="URL",
                   help="The collector the spool is emptied into, oldest bundle first (a bundle leaves the spool "
                        "only once the collector has it), and that the agent long-polls for capture requests "
                        "for --node (so nothing connects into the pod). Default: none (bundles stay in the "
                        "spool, no requests).")
    c.add_argument("--collector-token-file", default=env_default("collector-token-file", None), metavar="FILE",
                   help="The agent's token for --collector (a projected ServiceAccount token, read before every "
                        "upload; readable by its owner only, mode 0600 or 0400). Default: none.")
    c.add_argument("--collector-ca-file", default=env_default("collector-ca-file", None), metavar="FILE",
                   help="The CA that issued the collector's TLS certificate: an https --collector is verified "
                        "against it. Default: the system's CAs.")
    c.add_argument("--request-min-interval", type=_duration, default=env_default("request-min-interval", "5m"),
                   help="Least time between two captures for capture requests, whoever queued them; a request "
                        "inside it waits for a later poll. Default: 5m.")
    c.add_argument("--request-budget", type=_count, default=env_default("request-budget", "6"),
                   help="Captures for capture requests per hour at most; beyond, requests wait. Default: 6.")
    c.add_argument("--allow-pod-netns", action="store_true",
                   default=_bool_word(env_default("allow-pod-netns", "false") or "false"),
                   help="Let a capture request enter pod network namespaces (tenant data; needs CAP_SYS_ADMIN). "
                        "Default: off (such a request is captured without them).")
    c.add_argument("--upload-interval", type=_duration, default=env_default("upload-interval", "30s"),
                   help="How often the spool is tried when the collector was unreachable; a new capture is "
                        "sent at once. Default: 30s.")
    c.add_argument("--budget-cpu", type=_cpu_quantity, default=env_default("budget-cpu", None), metavar="CORES",
                   help="The agent's CPU budget in cores (0.5, or a Kubernetes quantity such as 500m; the chart gives "
                        "the pod's limit): past 80%% of it the optional sources (processes) pause until it is back "
                        "under 60%%. Default: no budget.")
    c.add_argument("--budget-rss", type=_bytes_quantity, default=env_default("budget-rss", None), metavar="BYTES",
                   help="The agent's memory budget (bytes, or a quantity such as 512Mi; the chart gives the pod's "
                        "limit), guarded as --budget-cpu. Default: no budget.")
    c.add_argument("--data-socket", default=env_default("data-socket", None), metavar="PATH",
                   help="Unix socket serving every endpoint, the data endpoints (/v1/image, /v1/events, "
                        "/v1/recorder) included; what railscope capture --agent unix:PATH uses in the pod. "
                        "Default: none.")
    c.add_argument("--data-token-file", default=env_default("data-token-file", None), metavar="FILE",
                   help="Bearer token that opens the data endpoints over TCP (re-read when the file changes). "
                        "Without it they answer on --data-socket only. Default: none.")
    c.add_argument("--header-timeout", type=_duration, default=env_default("header-timeout", "10s"),
                   help="A connection to the agent whose request headers are not complete by then is closed, and "
                        "so is one idle this long between requests. Default: 10s.")
    c.add_argument("--max-conns-per-peer", type=_count, default=env_default("max-conns-per-peer", "32"),
                   help="Connections one client address may hold open to the agent; beyond, a new one is closed "
                        "at once (0: no cap). The total stays below the descriptor limit regardless. Default: 32.")

    c.add_argument("--rail-resources", default=env_default("rail-resources", "nvidia.com/*,rdma/*,openshift.io/*"),
                   metavar="PATTERNS",
                   help="Extended resources of this node's Node object (status.allocatable) watched for "
                        "RailResourcesLost, comma-separated shell patterns; nvidia.com/gpu is never one. Needs the "
                        "node watch (an API server and --node). Default: nvidia.com/*,rdma/*,openshift.io/*.")

    t = p.add_argument_group("detector thresholds")
    for flag, _field, default, helptext in _THRESHOLDS:
        kind = _count if flag in _INTS else _ratio if flag in _FLOATS else _duration
        t.add_argument(f"--{flag}", type=kind, default=env_default(flag, default),
                       help=f"{helptext} Default: {default}.")
    add_expectation_flags(p)
    add_scope_flag(p)
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

    if not args.listen:
        raise SettingsError("--listen ADDR is required (or RAILSCOPE_LISTEN): the node's IP address")
    listen = check_listen(args.listen, args.listen_any)
    port = check_port(int(args.port))
    if not os.path.isdir(args.host_root):
        raise SettingsError(f"--host-root {args.host_root}: not a directory")
    if args.collector and not args.collector.startswith(("http://", "https://")):
        raise SettingsError(f"--collector {args.collector!r}: expected an http:// or https:// URL")
    from agent.readers.sources import SOURCES

    intervals = {src.name: getattr(args, f"{src.name}_interval") for src in SOURCES}
    check_intervals(intervals, {src.name: src.min_interval_s for src in SOURCES})
    env_off = env_default("disable-source", None)
    disabled = frozenset(args.disable_source or (env_off.replace(",", " ").split() if env_off else ()))
    unknown = sorted(disabled - set(intervals))
    if unknown:
        raise SettingsError(f"--disable-source {', '.join(unknown)}: no such source (known: {', '.join(intervals)})")
    thresholds = tuple((fld, getattr(args, flag.replace("-", "_"))) for flag, fld, _d, _h in _THRESHOLDS)
    th = dict(thresholds)
    exp = replace(expectations_from_args(args), flap_count=th["flap_count"], flap_window_s=th["flap_window_s"],
                  storm_ratio=th["storm_ratio"])
    read = ReadConfig(
        devlink_params=tuple(args.devlink_param) if args.devlink_param else ReadConfig().devlink_params,
        command_timeout_s=args.command_timeout,
        net_templates=exp.net_templates,
        rdma_templates=exp.rdma_templates,
        exclude_devices=args.exclude_devices,
    )
    return AgentSettings(
        listen=listen, port=port, host_root=args.host_root,
        intervals=tuple(intervals.items()), disabled=disabled, source_deadline_s=args.source_deadline,
        command_timeout_s=args.command_timeout, recorder_window_s=args.recorder_window,
        event_history=args.event_history, event_queue=args.event_queue, node=args.node, cluster=args.cluster,
        representor_include=args.representor_include, expectations=exp, read=read, thresholds=thresholds,
        capture_on=args.capture_on if isinstance(args.capture_on, frozenset) else _codes(args.capture_on),
        capture_cooldown_s=args.capture_cooldown, capture_deadline_s=args.capture_deadline,
        spool_dir=args.spool, spool_max_bytes=args.spool_max_bytes, collector_url=args.collector,
        collector_ca_file=args.collector_ca_file, request_min_interval_s=args.request_min_interval, request_budget=args.request_budget,
        allow_pod_netns=bool(args.allow_pod_netns),
        collector_token_file=args.collector_token_file, upload_interval_s=args.upload_interval,
        data_socket=args.data_socket, data_token_file=args.data_token_file,
        header_timeout_s=float(args.header_timeout), max_conns_per_peer=int(args.max_conns_per_peer),
        budget_cpu=_cpu_quantity(args.budget_cpu) if isinstance(args.budget_cpu, str) else args.budget_cpu,
        budget_rss=_bytes_quantity(args.budget_rss) if isinstance(args.budget_rss, str) else args.budget_rss,
        rail_resources=tuple(x.strip() for x in str(args.rail_resources).split(",") if x.strip()),
    )


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
