"""Parsing a command's JSON leaves nothing behind in the interpreter, however often it runs.

The agent parses ``devlink``, ``rdma`` and health JSON on every read for days. ``json.loads`` with
hooks (or ``json.JSONDecoder()``) builds a decoder per call, and each new decoder's C scanner looks
its settings up by name with fresh strings that CPython 3.11 keeps in its global type attribute cache:
a few hundred bytes more per parse, until the cache's 4,096 entries are full (the kernel lab's
churn test saw the agent grow by about 3 KiB per snapshot). Measured with tracemalloc, by the blocks
the ``json`` package allocated that are still alive after the parses and a garbage collection.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.readers.common import parse_json
from agent.readers.rdma import parse_rdma_links
from agent.safejson import loads_bounded

JSON_DIR = str(Path(json.__file__).parent) + "/*"
DEV_INFO = ('{"info":{"netdevsim/netdevsim10":{"driver":"netdevsim","versions":'
            '{"running":{"fw.mgmt":"10.20.30"},"stored":{"fw.mgmt":"10.20.30"}}}}}')
RDMA_LINKS = ('[{"ifindex":1,"ifname":"rxe0","port":1,"state":"DOWN","physical_state":"DISABLED",'
              '"netdev":"eth0","netdev_index":2}]')


def _json_bytes_left(parse: Callable[[], Any], times: int = 200) -> int:
    parse()  # anything made once (an import, a compiled pattern) is not what is measured
    gc.collect()
    tracemalloc.start()
    try:
        first = tracemalloc.take_snapshot()
        for _ in range(times):
            parse()
        gc.collect()
        last = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    only_json = [tracemalloc.Filter(True, JSON_DIR)]
    return sum(st.size_diff for st in last.filter_traces(only_json).compare_to(first.filter_traces(only_json),
                                                                                "filename"))


@pytest.mark.parametrize("parse", [
    lambda: loads_bounded(DEV_INFO, "devlink -j dev info"),
    lambda: parse_json(DEV_INFO, "devlink -j dev info", False),
    lambda: parse_json(DEV_INFO, "ethtool --json -m", False, pairs=True),
    lambda: parse_rdma_links(RDMA_LINKS),
], ids=["loads_bounded", "parse_json", "parse_json_pairs", "parse_rdma_links"])
def test_two_hundred_parses_leave_no_json_memory(parse: Callable[[], Any]) -> None:
    assert parse()  # the document parses
    assert _json_bytes_left(parse) <= 256
