"""``railscope capture --collector URL``: the capture streamed to the collector while it is produced.

The hello's keys come from the capture job (agent/capture/job.py) and follow proto/SPEC.md: the bundle
id is ``proto.keys.bundle_id(incident, node, plan)`` (so sending the same capture again is a
duplicate); a capture outside any incident gets its own ``manual-<time>`` incident; a node without
``--cluster`` goes under ``default``.
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
    from agent.capture.upload import upload_while_producing

    job = job.for_upload(socket.gethostname(), time.time())
    params = job.params()

    def produce(on_chunk: Any) -> Any:
        return capture_to_file(host, args.output, params, progress=progress, on_chunk=on_chunk)

    return asyncio.run(upload_while_producing(args.collector, job.hello(), produce,
                                              token_file=args.collector_token_file))
