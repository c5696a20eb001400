"""The key scheme and the bundle id: nothing from a request reaches a key unchecked."""

from __future__ import annotations

import pytest

from proto.keys import (
    BundleKey,
    KeyPartError,
    bundle_id,
    check_part,
    check_prefix,
    parse_name,
    parse_rel,
    sha256_line,
)

HOSTILE = ["", ".", "..", "../etc", "a/b", "a\\b", "A", "a b", "a\x00b", "-a", ".a", "_a", "a" * 64, "é",
           "a\nb", "%2e%2e", "a:b"]


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_parts_are_refused(value: str) -> None:
    with pytest.raises(KeyPartError):
        check_part("node", value)


@pytest.mark.parametrize("value", ["a", "gpu-node-017", "n.1_x-2", "0" * 63, "a..b"])
def test_good_parts_pass(value: str) -> None:
    assert check_part("node", value) == value


def test_non_strings_are_refused() -> None:
    for val in (None, 1, b"node", ["a"]):
        with pytest.raises(KeyPartError):
            check_part("node", val)


def test_key_layout() -> None:
    k = BundleKey.build("prod-east", "inc-1", "gpu-node-017", "b0123", 1796117903)
    assert k.key("railscope") == "railscope/prod-east/2026-12-01/inc-1/gpu-node-017-20261201T093823Z-b0123.tar.gz"
    assert k.sha_key("") == "prod-east/2026-12-01/inc-1/gpu-node-017-20261201T093823Z-b0123.tar.gz.sha256"
    assert parse_rel(k.rel) == k
    assert parse_name(k.cluster, k.date, k.incident, k.name) == k


def test_times_out_of_range_are_refused() -> None:
    for created in (0, -1, 10**12):
        with pytest.raises(KeyPartError):
            BundleKey.build("c", "i", "n", "b", created)


def test_parse_name_refuses_a_name_of_another_date_or_shape() -> None:
    k = BundleKey.build("c", "i", "n", "b", 1796117903)
    with pytest.raises(KeyPartError):
        parse_name("c", "2026-12-02", "i", k.name)
    for name in ("n-20261301T000000Z-b.tar.gz", "n-b.tar.gz", k.name + ".sha256", "../" + k.name):
        with pytest.raises(KeyPartError):
            parse_name("c", "2026-12-01", "i", name)
    with pytest.raises(KeyPartError):
        parse_rel("c/2026-12-01/../" + k.name)


def test_bundle_id_is_deterministic_and_a_valid_part() -> None:
    a = bundle_id("inc-1", "gpu-node-017", "replay/v1")
    assert a == bundle_id("inc-1", "gpu-node-017", "replay/v1")
    assert check_part("bundle id", a) == a and len(a) == 25
    others = {bundle_id("inc-2", "gpu-node-017", "replay/v1"), bundle_id("inc-1", "gpu-node-018", "replay/v1"),
              bundle_id("inc-1", "gpu-node-017", "full/v1")}
    assert a not in others and len(others) == 3
    # the separator keeps ("a", "b\0c") and ("a\0b", "c") apart: parts cannot hold \0 anyway
    with pytest.raises(KeyPartError):
        bundle_id("../x", "n", "p")


def test_bundle_id_is_pinned() -> None:
    # Both sides and every released agent must agree: a change here is a wire change (SPEC.md).
    assert bundle_id("inc-1", "gpu-node-017", "replay/v1") == "b" + __import__("hashlib").sha256(
        b"railscope.bundle/v1\0inc-1\0gpu-node-017\0replay/v1").hexdigest()[:24]


def test_prefix_and_sha256_line() -> None:
    assert check_prefix("/railscope/prod/") == "railscope/prod"
    assert check_prefix("") == ""
    with pytest.raises(KeyPartError):
        check_prefix("a/../b")
    assert sha256_line("ab" * 32, "x.tar.gz") == "ab" * 32 + "  x.tar.gz\n"
