"""The connection bounds on their own: a peer's cap, the replica's total, and accept errors logged
once per period with a count (the clock is an argument)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from proto.connections import ConnectionGuard, limit_accept_errors


def test_a_peer_past_its_cap_is_refused_and_others_are_not() -> None:
    g = ConnectionGuard(per_peer=2, total=3)
    assert g.admit("10.0.0.1") and g.admit("10.0.0.1")
    assert not g.admit("10.0.0.1")
    assert g.admit("10.0.0.2")
    assert not g.admit("10.0.0.3")  # the total
    g.release("10.0.0.1")
    assert g.admit("10.0.0.3") and not g.admit("10.0.0.1")
    assert g.refused == 3 and g.open == {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 1}


def test_accept_errors_are_logged_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    loop = asyncio.new_event_loop()
    try:
        limit_accept_errors(loop, every_s=10.0, clock=lambda: now[0], log=logging.getLogger("railscope.collector"))
        ctx = {"message": "socket.accept() out of system resource", "exception": OSError(24, "Too many open files")}
        with caplog.at_level(logging.ERROR, logger="railscope.collector"):
            for i in range(1000):
                now[0] = i * 0.045  # 45 s of retries
                loop.call_exception_handler(ctx)
    finally:
        loop.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "railscope.collector"]
    assert len(lines) == 5 and "Too many open files" in lines[0] and "(222 more since the last report)" in lines[1]


def test_behind_a_proxy_the_cap_per_peer_applies_only_when_the_proxy_names_its_clients() -> None:
    from collector.config import CollectorSettings, SettingsError, StoreURL

    store = StoreURL(kind="local", path="/tmp/x")
    assert CollectorSettings(store=store, plain_http=True).peer_conn_cap == 0
    named = CollectorSettings(store=store, plain_http=True, proxy_protocol_from=("127.0.0.6/32",))
    assert named.peer_conn_cap == 128 and named.peers_named
    with pytest.raises(SettingsError, match="needs --plain-http"):
        CollectorSettings(store=store, proxy_protocol_from=("127.0.0.6",))
    with pytest.raises(SettingsError, match="not an address"):
        CollectorSettings(store=store, plain_http=True, proxy_protocol_from=("sidecar",))


def test_the_flag_takes_a_repeated_or_comma_list() -> None:
    import argparse

    from agent.commands.collector import register, settings_from_args

    p = argparse.ArgumentParser()
    register(p)
    args = p.parse_args(["--store", "/tmp/x", "--plain-http", "--proxy-protocol-from", "10.0.0.0/24,127.0.0.6",
                         "--proxy-protocol-from", "fd00::/8"])
    assert settings_from_args(args).proxy_protocol_from == ("10.0.0.0/24", "127.0.0.6", "fd00::/8")
    assert settings_from_args(p.parse_args(["--store", "/tmp/x"])).proxy_protocol_from == ()
