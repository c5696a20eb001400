"""The bulk link dump asks the kernel for no statistics: seen on the wire through nlmon.

``scenario_nostats`` opened a packet socket on an ``nlmon`` device (the kernel's netlink tap) while
the agent's ``LiveHost.links()`` dumped every link, with the 4 VF representors present; then while
``ip link show`` and ``ip -s -d link show`` did the same, as the contrast. Every netlink message in
both directions was decoded in the guest.

What this proves, and what it does not:
- the request the kernel received carries ``IFLA_EXT_MASK`` with ``RTEXT_FILTER_SKIP_STATS``;
- the kernel honoured it: no ``IFLA_VF_STATS`` in the PF's VF list and no IPv6 statistics, where
  the same kernel puts them in the answers to ``ip -s link``. (iproute2 6.1, Debian 12, sends
  ``RTEXT_FILTER_VF`` alone with or without ``-s``: there the agent's dump is cheaper than ``ip link``.)
- the 6.1 kernel still fills ``IFLA_STATS64`` / ``IFLA_STATS`` of every link whatever the mask
  (``rtnl_fill_stats`` is unconditional); the agent skips them while parsing, so its records carry
  ``stats64: null`` outside the rails. What that costs on mlx5 (``ndo_get_stats64`` of each
  representor) is not visible on netdevsim.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.klab, pytest.mark.timeout(1500)]

RTEXT_FILTER_VF = 1 << 0
RTEXT_FILTER_SKIP_STATS = 1 << 3
NLM_F_DUMP = 0x300


@pytest.fixture(scope="module")
def wire(klab):
    return klab.scenario("nostats")


def _links(capture):
    return [r for r in capture["replies"] if r["ifname"]]


def test_the_agent_sends_one_dump_request_with_skip_stats(wire):
    reqs = wire["agent_links"]["requests"]
    assert len(reqs) == 1, reqs
    assert reqs[0]["flags"] & NLM_F_DUMP == NLM_F_DUMP
    assert reqs[0]["ext_mask"] & RTEXT_FILTER_SKIP_STATS
    assert reqs[0]["ext_mask"] & RTEXT_FILTER_VF


def test_representors_were_present_and_in_the_dump(wire):
    reps = set(wire["representors"])
    assert len(reps) == 4
    assert reps <= {r["ifname"] for r in _links(wire["agent_links"])}
    assert reps <= {r["ifname"] for r in wire["agent_records"]}


def test_kernel_left_vf_and_ipv6_statistics_out_of_the_agents_dump(wire):
    agent = _links(wire["agent_links"])
    with_vfs = [r for r in agent if r["vfs"]]
    assert with_vfs, "no link with VFs in the dump: the PF's VF list is missing"
    assert all(r["vf_stats"] == 0 for r in agent)
    assert not any(r["inet6_stats"] for r in agent)


def test_the_same_kernel_fills_them_for_a_dump_without_the_flag(wire):
    ip_s = wire["ip_s_link"]
    assert all(not (req["ext_mask"] or 0) & RTEXT_FILTER_SKIP_STATS for req in ip_s["requests"])
    links = _links(ip_s)
    pf = [r for r in links if r["vfs"]]
    assert pf and all(r["vf_stats"] == r["vfs"] for r in pf)
    assert any(r["inet6_stats"] for r in links)
    assert wire["ip_s_link"]["bytes"] > wire["agent_links"]["bytes"]


def test_stats64_is_in_every_answer_but_not_in_the_agents_records(wire):
    # Documents the kernel's behaviour the agent relies on parsing around (see the module doc).
    assert all(r["stats64"] for r in _links(wire["agent_links"]))
    assert all(rec["stats64"] is None for rec in wire["agent_records"])
