"""The agent's sources compose the same snapshot that ``take_snapshot`` reads in one go."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from agent.config import ReadConfig
from agent.host.recorded import open_image
from agent.readers.common import Notes
from agent.readers.links import parse_links
from agent.readers.snapshot import take_snapshot
from agent.service.sampling import (
    LinkCache,
    compose,
    read_config,
    read_counters,
    read_devlink_part,
    read_links_part,
    read_rdma_part,
)


class _Dumps:
    def __init__(self, dumps: list[list[dict] | None]) -> None:
        self.dumps = dumps
        self.links_error = "netlink/links.json: not in this image"

    def links(self) -> list[dict] | None:
        return self.dumps.pop(0)


def test_link_cache_reads_like_the_reader_and_reuses_unchanged_records(example_image: Path) -> None:
    dump = json.loads((example_image / "netlink" / "links.json").read_text())["links"]
    changed = copy.deepcopy(dump)
    changed[3]["carrier_down_count"] += 1
    cache = LinkCache()
    host = _Dumps([copy.deepcopy(dump), copy.deepcopy(dump), changed, None])
    first = cache.links(host, Notes())  # type: ignore[arg-type]
    assert first == parse_links(dump)
    second = cache.links(host, Notes())  # type: ignore[arg-type]
    assert all(a is b for a, b in zip(first, second, strict=True))
    third = cache.links(host, Notes())  # type: ignore[arg-type]
    assert third == parse_links(changed)
    assert third[3] is not second[3] and third[3].carrier_down_count == second[3].carrier_down_count + 1
    assert third[0] is second[0]
    notes = Notes()
    assert cache.links(host, notes) == ()  # type: ignore[arg-type]
    assert notes.unavailable == [("netlink", "netlink/links.json: not in this image")]


def test_composed_parts_equal_one_snapshot(example_image: Path) -> None:
    cfg = ReadConfig()
    with open_image(str(example_image)) as host:
        whole = take_snapshot(host, cfg)
        conf = read_config(host, cfg)
        links = read_links_part(host, cfg, conf.fields["rules"])
        parts = {
            "config": conf, "links": links,
            "devlink": read_devlink_part(host, cfg, links.fields["pci"], links.rail_bdfs),
            "rdma": read_rdma_part(host, cfg, links.rails, links.rail_bdfs),
            "counters": read_counters(host, cfg, links.rails, {}),
        }
    composed = compose(None, parts)
    assert links.rails == ("net_rail0", "net_rail1")
    for name in ("versions", "links", "pci", "devlink_devs", "eswitch", "params", "ports", "rdma_links",
                 "rdma_netns", "rdma_devices", "ethtool", "drivers", "rules", "ovs", "busy"):
        assert getattr(composed, name) == getattr(whole, name), name
    assert sorted(composed.unavailable) == sorted(whole.unavailable)
