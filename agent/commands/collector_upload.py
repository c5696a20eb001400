"""``railscope capture --collector URL``: the capture streamed to the collector while it is produced.

The hello's keys follow proto/SPEC.md: the bundle id is ``proto.keys.bundle_id(incident, node, plan)``
(so sending the same capture again is a duplicate); a capture outside any incident gets its own
``manual-<time>`` incident; a node without ``--cluster`` goes under ``default``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
from dataclasses import replace
from typing import Any

from agent import __version__
from proto.frames import Hello
from proto.keys import bundle_id, check_part


def capture_streamed(args: argparse.Namespace, host: Any, params: Any, progress: Any) -> tuple[Any, Any]:
    from agent.capture.runner import capture_to_file
    from agent.capture.upload import DEFAULT_CLUSTER
    from agent.clients.collector import CollectorClient

    now = time.time()
    node = check_part("node", (params.node or socket.gethostname()).lower())
    incident = check_part("incident", params.incident or time.strftime("manual-%Y%m%d-%H%M%S", time.gmtime(now)))
    cluster = check_part("cluster", params.cluster or DEFAULT_CLUSTER)
    plan = "capture/v1:" + ",".join(params.plugins)
    bid = bundle_id(incident, node, plan)
    params = replace(params, node=node, incident=incident, cluster=cluster, bundle_id=bid)
    hello = Hello(bundle=bid, node=node, cluster=cluster, incident=incident, reason=params.reason or "",
                  agent=__version__, created=int(now), plan=plan)

    def produce(on_chunk: Any) -> Any:
        return capture_to_file(host, args.output, params, progress=progress, on_chunk=on_chunk)

    async def send() -> tuple[Any, Any]:
        async with CollectorClient(args.collector, token_file=args.collector_token_file,
                                   token_flag="--collector-token-file") as client:
            return await client.upload_while_producing(hello, produce)

    return asyncio.run(send())
