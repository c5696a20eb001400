"""``railscope capture``: a bundle of this node — what the readers read (it replays with ``railscope
doctor --from``) plus what an engineer or the vendor's support asks for — as ``<name>.tar.gz`` with
``<name>.tar.gz.sha256`` beside it.

Exit status: 0 a bundle was written (partial if the deadline cut it short: the manifest says what
is missing), 1 no bundle could be written, 3 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys

from agent.commands.common import (
    add_collector_flags,
    add_expectation_flags,
    add_scope_flag,
    env_default,
)
from agent.naming import DEFAULT_NET_TEMPLATES, DEFAULT_RDMA_TEMPLATES
from agent.settings import duration, duration_or_zero


def register_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host-root", default=env_default("host-root", "/"), metavar="DIR",
                   help="Where the node's filesystem is mounted (/host in the DaemonSet). Default: /.")
    p.add_argument("--node", default=env_default("node", None),
                   help="Node name for the manifest and the bundle's name. Default: the node's hostname.")
    p.add_argument("--cluster", default=env_default("cluster", None),
                   help="Cluster name for the manifest; with --collector and --node, the cluster whose node is "
                        "asked to capture. Default: none (null; the collector's own cluster).")
    p.add_argument("--incident", default=None, help="Incident id for the manifest. Default: none (null).")
    p.add_argument("--command-timeout", type=duration, default=10.0, metavar="SECONDS",
                   help="Timeout of each command the readers run (devlink, rdma, ovs-vsctl). Default: 10.")
    add_scope_flag(p)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", default=".", metavar="FILE|DIR",
                   help="Where to write the bundle: a file name (NAME.tar.gz), or a directory that gets "
                        "<node>-<time>.tar.gz. An existing file is never overwritten. Default: the current directory.")
    register_common(p)
    # The judging flags: recorded in the manifest as the expectations in force, so doctor --from,
    # report and diff judge the bundle as this node would be judged (docs/design.md §2).
    add_expectation_flags(p)
    p.add_argument("--reason", default="railscope capture",
                   help="Why the bundle was taken, for the manifest. Default: 'railscope capture'.")
    p.add_argument("--redact", action="store_true",
                   help="Replace IP and MAC addresses, host names, IB GUIDs, RoCE GIDs, pod and namespace names "
                        "with keyed pseudonyms (secrets are always removed). Default: off.")
    p.add_argument("--redact-key-file", default=env_default("redact-key-file", None), metavar="FILE",
                   help="HMAC key for --redact (at least 16 bytes; the chart mounts a cluster Secret), so the same "
                        "address gets the same pseudonym on every node. Default: a random key for this bundle only.")
    p.add_argument("--deadline", type=duration, default=300.0, metavar="SECONDS",
                   help="Overall deadline: what has finished by then is packed (a partial bundle). Default: 300.")
    p.add_argument("--parallel", type=int, default=4, metavar="N",
                   help="Steps run at once (firmware reads stay one at a time per PF). Default: 4.")
    p.add_argument("--recorder-gap", type=duration_or_zero, default=10.0, metavar="SECONDS",
                   help="Without a running agent, recorder.jsonl holds two samples of the rail counters this far "
                        "apart, so rates exist offline; 0 takes one sample. Default: 10.")
    p.add_argument("--agent", default=env_default("agent", None), metavar="unix:PATH|URL",
                   help="A running agent whose events and flight recorder go into the bundle (its data socket, "
                        "unix:/run/railscope/agent.sock in the pod, or http://ADDR:PORT with --agent-token-file). "
                        "If it does not answer, the capture takes its own two samples. Default: none.")
    p.add_argument("--agent-token-file", default=env_default("agent-token-file", None), metavar="FILE",
                   help="Bearer token for --agent over TCP. A token file must be readable by its owner only (mode 0600 or 0400). Default: none.")
    p.add_argument("--pod-netns", action="store_true",
                   help="Also read pod network namespaces (needs CAP_SYS_ADMIN; reads tenant data). Default: off.")
    p.add_argument("--collector", default=env_default("collector", None), metavar="URL",
                   help="Also stream the bundle to this collector as it is produced (the file is written too, "
                        "to send again if the upload fails). Default: none.")
    p.add_argument("--collector-token-file", default=env_default("collector-token-file", None), metavar="FILE",
                   help="The agent token for --collector (a projected ServiceAccount token in a pod), readable "
                        "by its owner only (mode 0600 or 0400). Default: none.")
    # --deadline is the capture's own: a collector answering 503 is retried within it too.
    add_collector_flags(p, deadline=False)
    r = p.add_argument_group("asking a node's agent to capture (operator role)")
    # --token-file, as in `bundles` and `report`: the operator's token file has one name everywhere.
    r.add_argument("--token-file", "--operator-token-file", dest="operator_token_file",
                   default=env_default("token-file", env_default("operator-token-file", None)), metavar="FILE",
                   help="With --collector, queue a capture request for --node and --incident instead of capturing "
                        "here: the node's agent pulls it, captures and uploads. The file holds an operator token, "
                        "readable by its owner only (mode 0600 or 0400), as for railscope bundles and report "
                        "(--operator-token-file is its older name). "
                        "Default: none (capture here).")
    r.add_argument("--wait", action="store_true",
                   help="Queue the request (as --token-file does) and wait until its bundle is stored, "
                        "then print its key. Default: off.")
    r.add_argument("--wait-timeout", type=duration, default=600.0, metavar="SECONDS",
                   help="With --wait: give up after this long (exit 1). Default: 600.")


def read_config(args: argparse.Namespace) -> object:
    from agent.config import ReadConfig

    return ReadConfig(
        command_timeout_s=args.command_timeout,
        net_templates=tuple(args.net_template) if args.net_template else DEFAULT_NET_TEMPLATES,
        rdma_templates=tuple(args.rdma_template) if args.rdma_template else DEFAULT_RDMA_TEMPLATES,
        exclude_devices=getattr(args, "exclude_devices", None),
        rail_map=getattr(args, "rail_map", None),
    )


class _Progress:
    """One line on a terminal: steps done / total and bytes so far."""

    def __init__(self, stream: object) -> None:
        from agent.commands.progress import TtyLine

        self.line = TtyLine(stream)  # type: ignore[arg-type]

    def __call__(self, done: int, total: int, nbytes: int) -> None:
        self.line.update(f"railscope capture: {done}/{total} steps, {nbytes / 1e6:.1f} MB")

    def end(self) -> None:
        self.line.end()


def _request(args: argparse.Namespace) -> int:
    import asyncio

    from agent.service.pull import RequestFailed, queue_request
    from proto.keys import KeyPartError, check_part

    try:
        node = check_part("--node", args.node)
        incident = check_part("--incident", args.incident)
    except KeyPartError as exc:
        print(f"railscope capture: {exc} (--collector needs --node and --incident)", file=sys.stderr)
        return 3
    params = {"pod_netns": bool(args.pod_netns), "redact": bool(args.redact)}
    try:
        req = asyncio.run(queue_request(args.collector, node, incident, token_file=args.operator_token_file,
                                        params=params, wait_s=args.wait_timeout if args.wait else None,
                                        client=_client(args, args.operator_token_file, "--token-file"),
                                        cluster=args.cluster))
    except RequestFailed as exc:
        print(f"railscope capture: {exc}", file=sys.stderr)
        return 1
    except (OSError, TimeoutError, ValueError) as exc:
        print(f"railscope capture: {args.collector}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.wait:
        print(req["bundle"])
    else:
        print(f"railscope capture: request {req['id']} queued for {node} ({incident})", file=sys.stderr)
        print(req["id"])
    return 0


def _client(args: argparse.Namespace, token_file: str | None, token_flag: str) -> object:
    """The collector client of this capture: its retries end within --deadline (and --wait-timeout)."""
    from agent.commands.common import collector_client

    deadline = args.deadline + (args.wait_timeout if args.wait else 0.0)
    return collector_client("capture", args.collector, args, token_file=token_file, token_flag=token_flag,
                            deadline_s=deadline)


def _unusable_token_file(args: argparse.Namespace) -> str | None:
    """Why a token file for --collector cannot be used, said before anything is captured or queued."""
    from proto.tokens import TokenFileError, read_token

    for flag, path in (("--collector-token-file", args.collector_token_file),
                       ("--token-file", args.operator_token_file)):
        if args.collector and path:
            try:
                read_token(path, flag)
            except TokenFileError as exc:
                return str(exc)
    return None


def run(args: argparse.Namespace) -> int:
    if (why := _unusable_token_file(args)) is not None:
        print(f"railscope capture: {why}", file=sys.stderr)
        return 3
    if args.collector and (args.operator_token_file or args.wait):
        return _request(args)
    from agent.capture.job import Job
    from agent.capture.redact import load_key
    from agent.capture.runner import CaptureError, capture_to_file
    from agent.commands.common import expectations_from_args
    from agent.config import expectations_to_json
    from agent.host import HostError
    from agent.host.live import LiveHost

    if args.parallel < 1:
        print("railscope capture: --parallel must be at least 1", file=sys.stderr)
        return 3
    key: bytes | None = None
    if args.redact:
        if args.redact_key_file:
            try:
                key = load_key(args.redact_key_file)
            except (OSError, ValueError) as exc:
                print(f"railscope capture: --redact-key-file: {exc}", file=sys.stderr)
                return 3
        else:
            key = os.urandom(32)
            print("railscope capture: --redact without --redact-key-file: pseudonyms are valid for this bundle "
                  "only", file=sys.stderr)
    elif args.redact_key_file:
        print("railscope capture: --redact-key-file needs --redact", file=sys.stderr)
        return 3
    events, recorder = None, None
    if args.agent:
        from agent.clients.agent import AgentClient, AgentClientError

        try:
            client = AgentClient(args.agent, token_file=args.agent_token_file)
            events, recorder = client.events(), client.recorder()
        except AgentClientError as exc:
            print(f"railscope capture: the agent's events and recorder are not in this bundle: {exc}", file=sys.stderr)
    job = Job("cli", args.node, args.reason, cluster=args.cluster, incident=args.incident, pod_netns=args.pod_netns,
              redact=args.redact, redact_key=key, deadline_s=args.deadline, parallel=args.parallel,
              recorder_gap_s=args.recorder_gap, cfg=read_config(args),  # type: ignore[arg-type]
              events=events, recorder_jsonl=(lambda: recorder) if recorder is not None else None,
              expectations=expectations_to_json(expectations_from_args(args)))
    try:
        host = LiveHost(args.host_root, command_timeout_s=args.command_timeout)
    except HostError as exc:
        print(f"railscope capture: {exc}", file=sys.stderr)
        return 3
    progress = _Progress(sys.stderr) if sys.stderr.isatty() else None
    upload_res = None
    try:
        if args.collector:
            from agent.commands.collector_upload import capture_streamed

            res, upload_res = capture_streamed(args, host, job, progress)
        else:
            res = capture_to_file(host, args.output, job.params(), progress=progress)
    except ValueError as exc:  # a node, cluster or incident the collector's key scheme refuses
        print(f"railscope capture: {exc}", file=sys.stderr)
        return 3
    except CaptureError as exc:
        if progress:
            progress.end()
        print(f"railscope capture: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        if progress:
            progress.end()
        print(f"railscope capture: {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    finally:
        host.close()
    if progress:
        progress.end()
    items = res.manifest["items"]
    skipped = sum(1 for i in items if i.get("skipped"))
    extra = " (partial: the deadline passed; see the manifest)" if res.partial else ""
    print(f"railscope capture: {len(items)} items ({skipped} not available), {res.bytes} bytes{extra}",
          file=sys.stderr)
    print(res.path)
    print(f"sha256 {res.sha256}")
    if upload_res is not None:
        from agent.clients.collector import CollectorError

        if isinstance(upload_res, CollectorError):
            # A refusal (401, 403, 409, 413, 422), a certificate or a refused port is final: sending
            # again cannot help until it is fixed.
            final = "" if upload_res.retryable else ("refused, not sent again: " if upload_res.status else
                                                     "not sent again: ")
            print(f"railscope capture: upload to {args.collector} failed: {final}{upload_res} "
                  f"(the bundle is in {res.path})", file=sys.stderr)
            return 1
        print(f"collector {upload_res.status} {upload_res.key}")
    return 0
