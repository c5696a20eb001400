"""``new_link``: the link reader's faster constructor builds a ``Link`` that is a ``Link`` in every respect."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from agent.model import Link, VfInfo, _fast_init, new_link
from agent.readers.links import parse_link

FIELDS = dict(ifindex=7, ifname="net_rail3", operstate="UP", carrier=1, carrier_changes=4, carrier_up_count=2,
              carrier_down_count=2, mtu=9000, address="b8:3f:d2:aa:00:13", phys_port_name="p0",
              phys_switch_id="9a3f21c0ffee0001", parent_bus="pci", parent_dev="0000:0c:00.0", master="bond0",
              kind=None, stats64=(("rx_bytes", 5),), vfinfo=(VfInfo(vf=0, mac="02:00:00:00:00:01"),),
              speed_mbps=400000)


def test_the_fast_constructor_is_in_use() -> None:
    # CPython allows the __class__ assignment; were it refused, new_link would be Link itself (and slow)
    assert new_link is not Link


def test_a_fast_link_is_a_link() -> None:
    fast, slow = new_link(**FIELDS), Link(**FIELDS)
    assert type(fast) is Link and isinstance(fast, Link)
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    assert dataclasses.replace(fast, mtu=1500) == Link(**{**FIELDS, "mtu": 1500})
    assert pickle.loads(pickle.dumps(fast)) == slow and copy.copy(fast) == slow
    assert new_link(7, "net_rail3") == Link(7, "net_rail3")  # positional, defaults filled
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.mtu = 1500  # type: ignore[misc]


def test_parse_link_builds_the_same_link() -> None:
    d = {k: v for k, v in FIELDS.items() if k not in ("stats64", "vfinfo", "speed_mbps")}
    d["stats64"] = {"rx_bytes": 5}
    d["vfinfo"] = [{"vf": 0, "mac": "02:00:00:00:00:01"}]
    assert parse_link(d) == Link(**{**FIELDS, "speed_mbps": None})


def test_a_default_factory_keeps_the_plain_constructor() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithFactory:
        name: str
        tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)

    assert _fast_init(WithFactory) is WithFactory
