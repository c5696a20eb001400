"""``railscope record``: read this node the way the agent does and write it as a node image directory.

The image replays with ``railscope doctor --from DIR`` to the same diagnosis as ``railscope doctor``
gave live. Exit status: 0 written, 1 the image could not be written, 3 bad usage (including an
output directory that is not empty: an image is never overwritten).
"""

from __future__ import annotations

import argparse
import sys

from agent.commands.common import (
    add_expectation_flags,
    add_scope_flag,
    env_default,
    expectations_from_args,
)
from agent.naming import DEFAULT_NET_TEMPLATES, DEFAULT_RDMA_TEMPLATES
from agent.settings import duration


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", required=True, metavar="DIR",
                   help="Directory to write the node image into. It must not exist or be empty.")
    p.add_argument("--host-root", default=env_default("host-root", "/"), metavar="DIR",
                   help="Where the node's filesystem is mounted (/host in the DaemonSet). Default: /.")
    p.add_argument("--node", default=env_default("node", None),
                   help="Node name for the manifest. Default: the node's hostname.")
    p.add_argument("--cluster", default=env_default("cluster", None),
                   help="Cluster name for the manifest. Default: none (null).")
    p.add_argument("--incident", default=None, help="Incident id for the manifest. Default: none (null).")
    p.add_argument("--reason", default="railscope record",
                   help="Why the image was taken, for the manifest. Default: 'railscope record'.")
    add_scope_flag(p)
    p.add_argument("--agent", default=env_default("agent", None), metavar="URL",
                   help="Fetch the image from a running agent (GET URL/v1/image: recorded now, with its flight "
                        "recorder and events) instead of reading this node. Default: read this node.")
    p.add_argument("--agent-token-file", default=env_default("agent-token-file", None), metavar="FILE",
                   help="Bearer token for --agent (the agent's --data-token-file). A token file must be readable by its owner only (mode 0600 or 0400). Default: none.")
    p.add_argument("--command-timeout", type=duration, default=10.0, metavar="SECONDS",
                   help="Timeout of each command the readers run (devlink, rdma, ovs-vsctl). Default: 10.")
    # Recorded in the manifest as the expectations in force, so the image replays as judged here.
    add_expectation_flags(p)


def run(args: argparse.Namespace) -> int:
    if args.agent:
        import signal

        from agent.clients.agent import AgentClientError, fetch_image

        # SIGTERM (a pod stopping, a timeout(1)) becomes an exit that runs the clean-up of the
        # half-written image, instead of killing the process with it on disk.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

        try:
            fetch_image(args.agent, args.output, reason=args.reason, incident=args.incident,
                        token_file=args.agent_token_file)
        except AgentClientError as exc:
            from agent.report.terminal import safe

            print(f"railscope record: {safe(exc)}", file=sys.stderr)
            return 3 if exc.usage else 1
        print(f"railscope record: wrote {args.output} from {args.agent}", file=sys.stderr)
        return 0
    from agent.capture.replay import record_image
    from agent.capture.runner import CaptureError
    from agent.config import ReadConfig, expectations_to_json
    from agent.host import HostError
    from agent.host.live import LiveHost

    cfg = ReadConfig(
        command_timeout_s=args.command_timeout,
        net_templates=tuple(args.net_template) if args.net_template else DEFAULT_NET_TEMPLATES,
        rdma_templates=tuple(args.rdma_template) if args.rdma_template else DEFAULT_RDMA_TEMPLATES,
        exclude_devices=args.exclude_devices,
        rail_map=getattr(args, "rail_map", None),
    )
    try:
        host = LiveHost(args.host_root, command_timeout_s=args.command_timeout)
    except HostError as exc:
        print(f"railscope record: {exc}", file=sys.stderr)
        return 3
    try:
        snap, manifest = record_image(host, args.output, node=args.node, cluster=args.cluster,
                                      incident=args.incident, reason=args.reason, cfg=cfg,
                                      expectations=expectations_to_json(expectations_from_args(args)))
    except CaptureError as exc:
        print(f"railscope record: {exc}", file=sys.stderr)
        return 3 if "not empty" in str(exc) or "not a directory" in str(exc) else 1
    except OSError as exc:
        print(f"railscope record: {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        host.close()
    items = manifest["items"]
    skipped = sum(1 for i in items if i.get("skipped"))
    from agent.report.terminal import safe

    print(f"railscope record: wrote {args.output}: node {safe(manifest['node'] or '?')}, "
          f"{len(snap.links)} links, {len(items)} items ({skipped} not available)", file=sys.stderr)
    return 0
