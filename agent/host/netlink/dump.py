"""The live host's link dump: one RTM_GETLINK dump on a plain ``AF_NETLINK`` socket, and the
statistics of named links, one RTM_GETLINK each (docs/design.md §3).

The bulk dump asks the kernel for no statistics (``IFLA_EXT_MASK = RTEXT_FILTER_VF |
RTEXT_FILTER_SKIP_STATS``, as ``ip link`` without ``-s``). The kernel honours the mask for the per-VF
``IFLA_VF_STATS`` (``rtnl_fill_vfinfo``: on mlx5 one firmware command per VF), the IPv6 statistics
and the size estimate, but kernels up to at least 6.18 (measured) still fill the ``IFLA_STATS64`` of
every link; the bulk parse skips it, so the records say ``stats64: null`` as the schema wants.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import Any

from agent.host.netlink.codec import (
    NETLINK_ROUTE,
    NLM_F_DUMP_INTR,
    NLMSG_DONE,
    NLMSG_ERROR,
    RTEXT_FILTER_SKIP_STATS,
    RTEXT_FILTER_VF,
    RTM_NEWLINK,
    LayoutCache,
    NetlinkError,
    build_getlink,
    error_code,
    iter_messages,
    parse_link,
)

__all__ = ["LinkReader", "parse_dump", "resolve_masters"]

# One dump answer is at most a few tens of KiB per skb (a PF with 127 VFs is the largest link);
# a receive buffer this large never truncates one, and MSG_TRUNC tells us if it ever did.
_RECV_BUF = 1 << 20
_SOCK_RCVBUF = 4 << 20
_DUMP_ATTEMPTS = 3



class _Dump:
    """Accumulates the answer of one dump, chunk by chunk."""

    def __init__(self, seq: int, cache: LayoutCache | None = None) -> None:
        self.seq = seq
        self.cache: LayoutCache = {} if cache is None else cache
        self.links: list[dict[str, Any]] = []
        self.done = False
        self.interrupted = False
        self.error = 0

    def feed(self, buf: Any, n: int) -> None:
        data = bytes(buf[:n])
        for mtype, mflags, mseq, s, e in iter_messages(data, n):
            if mseq != self.seq:
                continue  # an answer to an earlier, abandoned request
            if mflags & NLM_F_DUMP_INTR:
                self.interrupted = True  # links changed during the dump: it may miss or repeat one
            if mtype == NLMSG_DONE:
                # NLMSG_DONE carries the dump's final status (an int), e.g. -EINTR on new kernels;
                # a bare one (no payload) means success.
                code = error_code(data, s, e) if e - s >= 4 else 0
                if code < 0:
                    self.error = -code
                self.done = True
                return
            if mtype == NLMSG_ERROR:
                self.error = -error_code(data, s, e) or errno.EPROTO
                self.done = True
                return
            if mtype == RTM_NEWLINK:
                link = parse_link(data, s, e, cache=self.cache)
                if link is not None:
                    self.links.append(link)


def resolve_masters(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace master ifindexes by names; drop repeated ifindexes (an interrupted dump may repeat)."""
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    for link in links:
        if link["ifindex"] in seen:
            continue
        seen.add(link["ifindex"])
        out.append(link)
    names = {link["ifindex"]: link["ifname"] for link in out}
    for link in out:
        if link["master"] is not None:
            link["master"] = names.get(link["master"])
    return out


def parse_dump(chunks: list[bytes], seq: int) -> list[dict[str, Any]]:
    """The links in recorded dump answers (as ``recv`` returned them), in the links.json schema.

    Raises NetlinkError when the kernel answered the dump with an error.
    """
    dump = _Dump(seq)
    for chunk in chunks:
        dump.feed(chunk, len(chunk))
        if dump.done:
            break
    if dump.error:
        raise NetlinkError(dump.error, f"RTM_GETLINK dump: {os.strerror(dump.error)}")
    return resolve_masters(dump.links)


class LinkReader:
    """Reads links from the kernel of this process's network namespace. Not thread-safe."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._seq = 0
        self._buf = bytearray(_RECV_BUF)
        self._layouts: LayoutCache = {}
        #: True when the last dump was still interrupted after the retries (see ``dump``).
        self.last_dump_interrupted = False

    def _socket(self) -> socket.socket:
        if self._sock is None:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_ROUTE)
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCK_RCVBUF)
                s.bind((0, 0))
            except OSError:
                s.close()
                raise
            self._sock = s
        return self._sock

    def _reset(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _next_seq(self) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
        return self._seq

    def _recv(self, sock: socket.socket) -> int:
        n = sock.recv_into(self._buf, len(self._buf), socket.MSG_TRUNC)
        if n > len(self._buf):
            # A message larger than the buffer was cut: grow and ask again from scratch.
            self._buf = bytearray(max(n, 2 * len(self._buf)))
            raise OSError(errno.EMSGSIZE, "netlink answer larger than the receive buffer")
        return n

    def _dump_once(self) -> _Dump:
        sock = self._socket()
        dump = _Dump(self._next_seq(), self._layouts)
        sock.send(build_getlink(dump.seq, RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS))
        while not dump.done:
            n = self._recv(sock)
            dump.feed(self._buf, n)
        return dump

    def dump(self) -> list[dict[str, Any]]:
        """Every link of this namespace, without statistics. Raises NetlinkError when unreadable.

        A dump interrupted by link changes (NLM_F_DUMP_INTR, or -EINTR from newer kernels) and a
        receive overrun (ENOBUFS) are retried on a fresh socket; if links keep changing, the last
        answer is returned (``last_dump_interrupted`` is then True) rather than nothing.
        """
        last: _Dump | None = None
        err: OSError | None = None
        for _ in range(_DUMP_ATTEMPTS):
            try:
                dump = self._dump_once()
            except OSError as exc:
                self._reset()  # the socket may hold the rest of a dump we abandoned
                if exc.errno not in (errno.ENOBUFS, errno.EMSGSIZE, errno.EINTR):
                    raise NetlinkError(exc.errno or errno.EIO, f"netlink link dump: {exc.strerror or exc}") from None
                err = exc
                continue
            if dump.error == errno.EINTR or (not dump.error and dump.interrupted):
                last = dump
                continue
            if dump.error:
                raise NetlinkError(dump.error, f"RTM_GETLINK dump: {os.strerror(dump.error)}")
            self.last_dump_interrupted = False
            return resolve_masters(dump.links)
        if last is not None:
            self.last_dump_interrupted = True
            return resolve_masters(last.links)
        assert err is not None
        raise NetlinkError(err.errno or errno.EIO, f"netlink link dump: {err.strerror or err}")

    def stats(self, ifnames: list[str]) -> dict[str, dict[str, int]]:
        """stats64 of the named links; a name that does not exist (any more) is left out."""
        out: dict[str, dict[str, int]] = {}
        for name in dict.fromkeys(ifnames):
            if not name or len(name.encode()) >= 16:
                continue  # IFNAMSIZ: no such link can exist
            link = self._get(name)
            if link is not None and link.get("stats64") is not None and link.get("ifname") == name:
                out[name] = link["stats64"]
        return out

    def _get(self, ifname: str) -> dict[str, Any] | None:
        for _ in range(_DUMP_ATTEMPTS):
            seq = self._next_seq()
            try:
                sock = self._socket()
                sock.send(build_getlink(seq, 0, ifname))
                code = 0
                while not code:
                    n = self._recv(sock)
                    data = bytes(self._buf[:n])
                    for mtype, _flags, mseq, s, e in iter_messages(data, n):
                        if mseq != seq:
                            continue
                        if mtype == RTM_NEWLINK:
                            return parse_link(data, s, e, with_stats=True)
                        if mtype == NLMSG_ERROR:
                            code = -error_code(data, s, e) or errno.EPROTO
                            break
            except OSError as exc:
                self._reset()
                if exc.errno not in (errno.ENOBUFS, errno.EMSGSIZE, errno.EINTR):
                    raise NetlinkError(exc.errno or errno.EIO, f"RTM_GETLINK {ifname}: {exc.strerror or exc}") from None
                continue
            if code in (errno.ENODEV, errno.ENOENT):
                return None  # vanished, or never was
            raise NetlinkError(code, f"RTM_GETLINK {ifname}: {os.strerror(code)}")
        return None

    def close(self) -> None:
        self._reset()

    def __enter__(self) -> LinkReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
