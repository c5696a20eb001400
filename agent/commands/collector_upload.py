"""``railscope capture --collector URL``: the capture streamed to the collector while it is produced.

The hello's keys come from the capture job (agent/capture/job.py) and follow proto/SPEC.md: the
bundle id is ``proto.keys.bundle_id(incident, node, plan)`` with the capture's start time in the plan
string, so sending the same capture again is a duplicate while a second capture of the node in the
same incident is a bundle of its own (never a 409); a capture outside any incident gets its own
``manual-<time>`` incident; a node without ``--cluster`` goes under ``default``.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time
from typing import Any


def capture_streamed(args: argparse.Namespace, host: Any, job: Any, progress: Any) -> tuple[Any, Any]:
    """Capture ``job`` (``agent.capture.job.Job``) into ``--output`` and stream it to ``--collector``."""
    from agent.capture.runner import capture_to_file
    from agent.commands.capture import _client

    job = job.for_upload(socket.gethostname(), time.time())
    params = job.params()

    def produce(on_chunk: Any) -> Any:
        return capture_to_file(host, args.output, params, progress=progress, on_chunk=on_chunk)

    async def send() -> tuple[Any, Any]:
        async with _client(args, args.collector_token_file, "--collector-token-file") as client:
            return await client.upload_while_producing(job.hello(), produce)

    return asyncio.run(send())
