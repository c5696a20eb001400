"""PROXY protocol headers (HAProxy's proxy-protocol.txt, v1 and v2) read strictly and bounded: the
specification's own examples, a header arriving a byte at a time, and every malformed form refused
as soon as it cannot become a header."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from proto.connections import ProxyHeaderError, ProxyProtocol, parse_proxy_header

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "proxy"
SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def _v2(ver_cmd: int, fam: int, block: bytes) -> bytes:
    return SIG + bytes([ver_cmd, fam]) + struct.pack("!H", len(block)) + block


def test_the_specs_v1_example_names_its_client_and_leaves_the_request() -> None:
    data = (FIX / "haproxy-spec-v1-example.bin").read_bytes()
    n, source = parse_proxy_header(data)  # type: ignore[misc]
    assert source == ("192.168.0.1", 56324)
    assert data[n:].startswith(b"GET / HTTP/1.1\r\n")


def test_the_longest_tcp4_line_and_unknown() -> None:
    line = (FIX / "haproxy-spec-v1-tcp4-longest.bin").read_bytes()
    assert parse_proxy_header(line) == (56, ("255.255.255.255", 65535))
    assert parse_proxy_header((FIX / "haproxy-spec-v1-unknown.bin").read_bytes()) == (15, None)
    worst = b"PROXY UNKNOWN " + b"f" * 80 + b"\r\n"  # anything before the CRLF is ignored (107 at most)
    assert parse_proxy_header(worst) == (len(worst), None)


def test_tcp6() -> None:
    line = b"PROXY TCP6 2001:db8::1 2001:db8::2 40000 9842\r\n"
    assert parse_proxy_header(line) == (len(line), ("2001:db8::1", 40000))


def test_v2_tcp4_and_the_nlb_health_check() -> None:
    data = (FIX / "RECONSTRUCTED-v2-tcp4-spec-example.bin").read_bytes()
    n, source = parse_proxy_header(data)  # type: ignore[misc]
    assert (n, source) == (28, ("192.168.0.1", 56324)) and data[n:].startswith(b"GET /")
    local = (FIX / "RECONSTRUCTED-v2-local-nlb-healthcheck.bin").read_bytes()
    assert parse_proxy_header(local) == (len(local), None)  # LOCAL: the block skipped, the proxy's endpoints


def test_v2_tcp6_with_tlvs() -> None:
    block = bytes(range(16)) + bytes(16) + struct.pack("!HH", 50000, 443)
    tlvs = bytes([0x01]) + struct.pack("!H", 2) + b"h2" + bytes([0xEA]) + struct.pack("!H", 5) + b"\x01vpce"
    n, source = parse_proxy_header(_v2(0x21, 0x21, block + tlvs))  # type: ignore[misc]
    assert n == 16 + len(block) + len(tlvs) and source == ("1:203:405:607:809:a0b:c0d:e0f", 50000)


@pytest.mark.parametrize("name", ["haproxy-spec-v1-example.bin", "RECONSTRUCTED-v2-tcp4-spec-example.bin"])
def test_a_header_cut_anywhere_waits_for_the_rest(name: str) -> None:
    data = (FIX / name).read_bytes()
    n, _ = parse_proxy_header(data)  # type: ignore[misc]
    for cut in range(1, n):
        assert parse_proxy_header(data[:cut]) is None, cut


@pytest.mark.parametrize("data", [
    b"GET / HTTP/1.1\r\n",                                   # no header at all
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\n",      # a lone LF
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\r\n",  # a lone CR
    b"PROXY TCP4 192.168.000.1 192.168.0.11 56324 443\r\n",  # heading zeroes
    b"PROXY TCP4 192.168.0.1 192.168.0.11 056324 443\r\n",
    b"PROXY TCP4 192.168.0.1 192.168.0.11 65536 443\r\n",    # past 65535
    b"PROXY TCP4 192.168.0.1 192.168.0.11 +1 443\r\n",
    b"PROXY TCP4  192.168.0.1 192.168.0.11 56324 443\r\n",   # two spaces
    b"PROXY TCP4 2001:db8::1 192.168.0.11 56324 443\r\n",    # the wrong family
    b"PROXY TCP6 192.168.0.1 2001:db8::2 56324 443\r\n",
    b"PROXY TCP4 192.168.0.1 192.168.0.11 56324\r\n",        # a field short
    b"PROXY UDP4 192.168.0.1 192.168.0.11 56324 443\r\n",
    b"PROXY TCP4 " + b"1" * 120,                             # no CRLF within 107 bytes
    b"PROXY UNKNOWN " + b"f" * 92 + b"\r\n",                 # 108 bytes
    b"proxy TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
    b"\r\n\r\n\x00\r\nQUIX\n\x21\x11\x00\x0c",                # not the v2 signature
    _v2(0x11, 0x11, bytes(12)),                              # version 1 in a v2 header
    _v2(0x22, 0x11, bytes(12)),                              # an unassigned command
    _v2(0x21, 0x41, bytes(12)),                              # an unassigned family
    _v2(0x21, 0x13, bytes(12)),                              # an unassigned protocol
    _v2(0x21, 0x12, bytes(12)),                              # UDP: not a stream
    _v2(0x21, 0x11, bytes(8)),                               # shorter than its addresses
    _v2(0x21, 0x11, bytes(12) + b"\x01\x00\x05ab"),          # a TLV longer than the header
    _v2(0x21, 0x11, bytes(12) + b"\x01\x00"),                # a truncated TLV
    SIG + b"\x21\x11\xff\xff",                               # 64 KiB announced: more than a proxy sends
])
def test_malformed_headers_are_refused(data: bytes) -> None:
    with pytest.raises(ProxyHeaderError):
        parse_proxy_header(data)


def test_garbage_is_refused_from_its_first_bytes() -> None:
    for data in (b"G", b"PROXY\t", b"\r\n\r\n\x01"):
        with pytest.raises(ProxyHeaderError):
            parse_proxy_header(data)


def test_trusted_proxies_by_address_and_network() -> None:
    p = ProxyProtocol(["10.0.0.0/24", "127.0.0.6", "fd00::/8"])
    assert p.trusts("10.0.0.7") and p.trusts("127.0.0.6") and p.trusts("::ffff:10.0.0.9") and p.trusts("fd00::1")
    assert not p.trusts("10.0.1.7") and not p.trusts("127.0.0.1") and not p.trusts("?")
