"""Hostile node images, made byte by byte: tar members that ``tarfile`` would refuse to write (devices,
FIFOs, absolute and ``..`` names, oversized GNU / PAX headers), bombs, and the example image with
one part broken. Each case says what ``railscope doctor --from`` must do with it.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BASE = Path(__file__).resolve().parents[1] / "images" / "spectrumx-2rail-healthy"
_BLOCK = 512


def header(name: bytes, typ: bytes = b"0", size: int = 0, link: bytes = b"", mode: int = 0o644) -> bytes:
    """One POSIX ustar header block, checksum included."""
    b = bytearray(_BLOCK)
    b[0:len(name[:100])] = name[:100]
    b[100:108] = b"%07o\0" % mode
    b[108:116] = b[116:124] = b"0000000\0"
    b[124:136] = b"%011o\0" % size if size < 8 ** 11 else b"\x80" + size.to_bytes(11, "big")
    b[136:148] = b"%011o\0" % 1772359200
    b[148:156] = b" " * 8
    b[156:157] = typ
    b[157:157 + len(link[:100])] = link[:100]
    b[257:265] = b"ustar\x0000"
    b[148:156] = b"%06o\0 " % sum(b)
    return bytes(b)


def pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % _BLOCK)


def member(name: str | bytes, data: bytes = b"", typ: bytes = b"0", link: str | bytes = b"") -> bytes:
    """A member; names and link targets past 100 bytes get GNU long-name / long-link headers."""
    n = name.encode() if isinstance(name, str) else name
    ln = link.encode() if isinstance(link, str) else link
    out = b""
    if len(n) > 100:
        out += header(b"././@LongLink", b"L", len(n) + 1) + pad(n + b"\0")
    if len(ln) > 100:
        out += header(b"././@LongLink", b"K", len(ln) + 1) + pad(ln + b"\0")
    return out + header(n, typ, len(data) if typ == b"0" else 0, ln, 0o755 if typ == b"5" else 0o644) + pad(data)


def base_members(top: str = "node-2026-bundle", replace: dict[str, bytes] | None = None) -> list[bytes]:
    """The example image as members under one top directory, with some files' bytes replaced."""
    replace = replace or {}
    out = [member(top + "/", typ=b"5")]
    for dirpath, dirnames, filenames in os.walk(BASE):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, BASE)
        for name in sorted(dirnames + filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            arc = f"{top}/{rel}"
            if os.path.islink(full):
                out.append(member(arc, typ=b"2", link=os.readlink(full)))
            elif os.path.isdir(full):
                out.append(member(arc + "/", typ=b"5"))
            elif rel not in replace:
                out.append(member(arc, Path(full).read_bytes()))
    for rel, data in replace.items():
        out.append(member(f"{top}/{rel}", data))
    return out


def bundle(members: list[bytes], *, end: bool = True) -> bytes:
    return gzip.compress(b"".join(members) + (b"\0" * (2 * _BLOCK) if end else b""), 6)


def zeros_gz(head: bytes, n: int, tail: bytes = b"") -> bytes:
    """``head`` + ``n`` zero bytes + ``tail``, gzip-compressed in chunks (a bomb, built cheaply)."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [comp.compress(head)]
    chunk = b"\0" * (1 << 20)
    left = n
    while left > 0:
        out.append(comp.compress(chunk[:min(left, len(chunk))]))
        left -= len(chunk)
    out.append(comp.compress(tail))
    out.append(comp.flush())
    return b"".join(out)


def symlink_chain_escape(target_dir: str) -> bytes:
    """CVE-2025-4517's shape: a chain of symlinks through 247-character directories whose resolved
    path passes PATH_MAX (where ``os.path.realpath`` gives up), a link that climbs out through it,
    and a file written through that link."""
    comp = "d" * 247
    steps = "abcdefghijklmnop"
    members = base_members()
    path = ""
    for step in steps:
        members.append(member(os.path.join(path, comp) + "/", typ=b"5"))
        members.append(member(os.path.join(path, step), typ=b"2", link=comp))
        path = os.path.join(path, comp)
    linkpath = os.path.join(*steps, "l" * 254)
    members.append(member(linkpath, typ=b"2", link="../" * len(steps)))
    members.append(member("escape", typ=b"2", link=linkpath + "/../" * 20 + target_dir.lstrip("/")))
    members.append(member("escape/owned", b"written through the chain"))
    return bundle(members)


@dataclass(frozen=True)
class Case:
    """``refuse``: exit 3 and one line holding ``expect``. ``diagnose``: a diagnosis (exit 0-2) whose
    ``unavailable`` has ``expect`` in the reason of source ``source`` (no check when ``source`` is "")."""

    name: str
    make: Callable[[Path], bytes | Path]
    outcome: str
    expect: str
    source: str = ""


def _json_case(rel: str, data: bytes) -> Callable[[Path], bytes]:
    return lambda _tmp: bundle(base_members(replace={rel: data}))


def _events(*events: object) -> bytes:
    return json.dumps({"events": list(events)}).encode()


_EV = {"ts": 1772359100, "code": "LinkFlapping", "severity": "warning", "subject": "net_rail0", "message": "m"}
_DEEP = b"[" * 100_000 + b"]" * 100_000


def _links_with(extra: list[object]) -> bytes:
    doc = json.loads((BASE / "netlink" / "links.json").read_bytes())
    doc["links"].extend(extra)
    return json.dumps(doc).encode()


def tar_cases(canary: Path) -> list[Case]:
    """Bundles (``.tar.gz``). ``canary`` is a directory outside the image that nothing may touch."""
    c = str(canary)
    return [
        Case("symlink-chain-escape", lambda _t: symlink_chain_escape(c), "refuse", "inside a file or symlink"),
        Case("hardlink-escape-absolute", lambda _t: bundle([*base_members(), member("x", typ=b"1", link=f"{c}/secret")]),
             "refuse", "has an absolute name"),
        Case("hardlink-escape-dotdot", lambda _t: bundle([*base_members(), member("x", typ=b"1", link="../../etc/passwd")]),
             "refuse", "climbs out with '..'"),
        Case("hardlink-to-a-missing-member", lambda _t: bundle([*base_members(), member("x", typ=b"1", link="nope")]),
             "refuse", "hard link to 'nope', which is not a file of the archive"),
        Case("absolute-member", lambda _t: bundle([*base_members(), member(f"{c}/owned", b"x")]), "refuse",
             "has an absolute name"),
        Case("dotdot-member", lambda _t: bundle([*base_members(), member("node-2026-bundle/../../owned", b"x")]),
             "refuse", "climbs out with '..'"),
        Case("character-device", lambda _t: bundle([*base_members(), member("node-2026-bundle/fs/dev/mem", typ=b"3")]),
             "refuse", "is a character device"),
        Case("block-device", lambda _t: bundle([*base_members(), member("node-2026-bundle/fs/dev/sda", typ=b"4")]),
             "refuse", "is a block device"),
        Case("fifo", lambda _t: bundle([*base_members(), member("node-2026-bundle/events.json.fifo", typ=b"6")]),
             "refuse", "is a FIFO"),
        Case("gnu-long-name-bomb", lambda _t: zeros_gz(header(b"././@LongLink", b"L", 256 << 20), 256 << 20),
             "refuse", "GNU long name of 256.0 MiB"),
        Case("pax-header-bomb", lambda _t: zeros_gz(header(b"PaxHeader/x", b"x", 256 << 20), 256 << 20),
             "refuse", "PAX header of 256.0 MiB"),
        Case("pax-path-too-long", lambda _t: bundle([
            header(b"PaxHeader/x", b"x", 5012) + pad(b"5012 path=" + b"a" * 5001 + b"\n"), member("x", b"1")]),
            "refuse", "member name of 5001 bytes"),
        # The header says 2 GiB; the body is cut short on purpose: a reader that refuses at the header
        # never gets there, one that reads first would report a damaged archive instead.
        Case("file-bomb-manifest", lambda _t: zeros_gz(b"".join(base_members()[:1]) + header(
            b"node-2026-bundle/manifest.json", b"0", 2 << 30), 1 << 20), "refuse",
            "is 2.0 GiB, more than the 32.0 MiB one file may have"),
        Case("total-bomb", lambda _t: zeros_gz(b"".join(
            header(f"b/fs/f{i}".encode(), b"0", 30 << 20) + b"\0" * (30 << 20) for i in range(4)) +
            header(b"b/fs/f4", b"0", 30 << 20), 1 << 20), "refuse", "more than 128.0 MiB in all"),
        Case("member-bomb", lambda _t: gzip.compress(b"".join(header(f"b/fs/{i}".encode()) for i in range(100_001)), 1),
             "refuse", "more than 100000 members"),
        Case("deep-path", lambda _t: bundle([*base_members(), member("node-2026-bundle/fs/" + "a/" * 2000 + "x", b"1")]),
             "refuse", "more than 128 directories deep"),
        # gzip magic with compression method 7 (only 8, deflate, exists): the gzip layer always refuses
        # it; random bytes after the magic sometimes decoded into a non-tar instead.
        Case("not-gzip", lambda _t: b"\x1f\x8b\x07" + os.urandom(4000), "refuse", "damaged archive"),
        Case("cut-short", lambda _t: bundle(base_members())[:20_000], "refuse", "damaged archive"),
        Case("random-bytes", lambda _t: os.urandom(4096), "refuse", "neither a node image directory nor a tar.gz"),
        Case("no-image-inside", lambda _t: bundle([member("notes.txt", b"hello")]), "refuse",
             "not a railscope node image"),
        Case("sparse-member", lambda _t: bundle([*base_members(), member("node-2026-bundle/fs/s", typ=b"S")]),
             "refuse", "is a GNU sparse file"),
        Case("file-below-a-file", lambda _t: bundle([*base_members(), member("node-2026-bundle/events.json/x", b"1")]),
             "refuse", "inside a file or symlink"),
        # best effort: the bad part is named, the rest diagnosed
        Case("non-utf8-name", lambda _t: bundle([*base_members(), member(b"node-2026-bundle/fs/\xff\xfe", b"x")]),
             "diagnose", "name is not UTF-8, left out", "image"),
        Case("symlink-escape-absolute", lambda _t: bundle([*base_members(), member(
            "node-2026-bundle/cmd/rdma_-j_link_show.stderr", typ=b"2", link=f"{c}/secret")]), "diagnose", ""),
        Case("symlink-escape-dotdot", lambda _t: bundle([*base_members(), member(
            "node-2026-bundle/fs/proc/cmdline.x", typ=b"2", link="../../../../../../../../../" + c + "/secret")]),
             "diagnose", ""),
        Case("deep-json-manifest", _json_case("manifest.json", b'{"items": ' + _DEEP + b"}"), "diagnose",
             "nested deeper than 64 levels", "manifest"),
        Case("deep-json-events", _json_case("events.json", b'{"events": ' + _DEEP + b"}"), "diagnose",
             "nested deeper than 64 levels", "events"),
        Case("deep-json-links", _json_case("netlink/links.json", _DEEP), "diagnose", "nested deeper than 64",
             "netlink"),
        Case("deep-json-command", _json_case("cmd/devlink_-j_dev_show.stdout", _DEEP), "diagnose",
             "nested deeper than 64", "devlink"),
        Case("manifest-items-5", _json_case("manifest.json", b'{"node": "n", "items": 5}'), "diagnose",
             "items: not a list", "manifest"),
        Case("manifest-wrong-types", _json_case("manifest.json", json.dumps({
            "node": ["x"], "ended_at": 5, "items": [
                {"path": "cmd/x.stdout", "kind": "command", "argv": ["x"], "duration_s": "1.0"},
                {"path": 5}, {"path": "a", "rc": "0"}, {"path": "a", "sha256": 1}, "x", None]}).encode()),
             "diagnose", "6 malformed item(s) ignored", "manifest"),
        Case("manifest-not-an-object", _json_case("manifest.json", b"[1, 2]"), "diagnose", "not a JSON object",
             "manifest"),
        # NaN / Infinity read as null, which is "not given": the item stands, the output stays strict JSON
        Case("manifest-nan", _json_case("manifest.json", b'{"items": [{"path": "a", "duration_s": NaN, '
                                                         b'"bytes": Infinity}]}'), "diagnose", ""),
        Case("links-not-a-list", _json_case("netlink/links.json", b'{"links": 5}'), "diagnose",
             'expected {"links"', "netlink"),
        Case("links-wrong-types", _json_case("netlink/links.json", _links_with([
            7, "x", None, {"ifindex": "9", "ifname": 9}, {"ifindex": 99, "ifname": "9" * 5000, "mtu": "x",
                                                          "stats64": [1], "vfinfo": 5, "carrier": float("nan")}])),
             "diagnose", "3 entry(ies) that are not objects ignored", "netlink"),
        Case("links-absurd-names", _json_case("netlink/links.json", _links_with([
            {"ifindex": 99, "ifname": "9" * 5000}, {"ifindex": -1, "ifname": "eth9"}, {"ifindex": 98, "ifname": ""},
            {"ifindex": 97, "ifname": "a/b"}, {"ifindex": True, "ifname": "eth8"}])),
             "diagnose", "5 link(s) without a positive ifindex and a name of 1-15 characters ignored", "netlink"),
        Case("events-not-a-list", _json_case("events.json", b'{"events": {}}'), "diagnose", "expected", "events"),
        Case("events-wrong-types", _json_case("events.json", _events(
            {**_EV, "ts": "yesterday"}, {**_EV, "ts": -5}, {**_EV, "code": "OwnedByBundle"}, {**_EV, "subject": 7},
            {**_EV, "code": 5}, {**_EV, "evidence": [1]}, "x", None)),
             "diagnose", "7 malformed event(s) ignored, 1 unknown code(s)", "events"),
        Case("events-nan-ts", _json_case("events.json", b'{"events": [{"ts": NaN, "code": "LinkFlapping", '
                                                        b'"subject": "net_rail0"}]}'), "diagnose",
             "1 malformed event(s) ignored", "events"),
        Case("recorder-bad-lines", _json_case("recorder.jsonl", b"\n".join([
            b'{"ts": 1772359000, "netdev": "net_rail0", "counters": {"rx_prio3_discards": -5, "x": 1.5}}',
            b'{"ts": NaN, "netdev": "net_rail0", "counters": {}}',
            b'{"ts": Infinity, "netdev": "net_rail0", "counters": {}}',
            b'{"ts": 1, "netdev": "' + b"9" * 5000 + b'", "counters": {}}',
            b"[" * 100_000, b"\xff\xfe", b'{"ts": 1, "netdev": "net_rail0", "counters": 5}'])),
             "diagnose", "6 malformed line(s) ignored (first: line 2), 2 counter value(s)", "recorder"),
        Case("command-wrong-types", _json_case("cmd/devlink_-j_dev_show.stdout", b'{"dev": [1, "x", null]}'),
             "diagnose", ""),
        Case("command-nan", _json_case("cmd/rdma_-j_link_show.stdout", b'[{"ifname": NaN, "port": Infinity}]'),
             "diagnose", ""),
        Case("rc-garbage", _json_case("cmd/rdma_-j_link_show.rc", b"9" * 5000), "diagnose", "not an exit status",
             "rdma"),
    ]


def dir_cases(canary: Path) -> list[tuple[str, Callable[[Path], Path], str, str, str]]:
    """Directory images: (name, make(tmp) -> path, outcome, expect, source)."""
    import shutil
    import socket

    def copy(tmp: Path) -> Path:
        dst = tmp / "img"
        shutil.copytree(BASE, dst, symlinks=True)
        return dst

    def fs_is_root(tmp: Path) -> Path:
        d = copy(tmp)
        shutil.rmtree(d / "fs")
        os.symlink("/", d / "fs")
        return d

    def stderr_link(tmp: Path) -> Path:
        d = copy(tmp)
        os.symlink(str(canary / "secret"), d / "cmd" / "rdma_-j_link_show.stderr")
        (d / "cmd" / "rdma_-j_link_show.rc").write_text("1\n")
        return d

    def fifo(tmp: Path) -> Path:
        d = copy(tmp)
        (d / "events.json").unlink()
        os.mkfifo(d / "events.json")
        return d

    def socket_(tmp: Path) -> Path:
        d = copy(tmp)
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(d / "cmd" / "s.sock"))
        s.close()
        return d

    def links_dev_zero(tmp: Path) -> Path:
        d = copy(tmp)
        (d / "netlink" / "links.json").unlink()
        os.symlink("/dev/zero", d / "netlink" / "links.json")
        return d

    def big_sparse(tmp: Path) -> Path:
        d = copy(tmp)
        with open(d / "manifest.json", "r+b") as fh:
            fh.truncate(2 << 30)
        return d

    def deep(tmp: Path) -> Path:
        d = copy(tmp)
        p = d / "fs"
        fd = os.open(p, os.O_RDONLY)
        for _ in range(200):  # made through dir fds: the path itself would pass PATH_MAX
            os.mkdir("a", dir_fd=fd)
            nfd = os.open("a", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        os.close(fd)
        return d

    def non_utf8(tmp: Path) -> Path:
        d = copy(tmp)
        with open(os.path.join(os.fsencode(d / "fs"), b"\xff\xfe"), "wb") as fh:
            fh.write(b"x")
        return d

    return [
        ("dir-fs-is-root", fs_is_root, "diagnose", "", ""),
        ("dir-stderr-symlink-out", stderr_link, "diagnose", "", ""),
        ("dir-fifo-events", fifo, "refuse", "'events.json' is a FIFO", ""),
        ("dir-socket", socket_, "refuse", "'cmd/s.sock' is a socket", ""),
        ("dir-links-to-dev-zero", links_dev_zero, "diagnose", "netlink/links.json: not in this image", "netlink"),
        ("dir-file-bomb", big_sparse, "refuse", "'manifest.json' is 2.0 GiB, more than the 32.0 MiB", ""),
        ("dir-deep", deep, "refuse", "more than 128 directories deep", ""),
        ("dir-non-utf8-name", non_utf8, "diagnose", "name is not UTF-8, left out", "image"),
    ]
