"""The streaming archive: one top directory, the digest computed while writing equals the bytes'
digest, and the chunk callback sees exactly the bytes written (what the uploader sends)."""

from __future__ import annotations

import hashlib
import io
import tarfile

import pytest

from agent.capture.archive import BundleWriter, sha256_line
from agent.capture.redact import Redactor


def test_members_under_one_top_directory_and_the_digest_of_the_stream() -> None:
    out = io.BytesIO()
    chunks: list[bytes] = []
    w = BundleWriter(out, "node-a-20261201T000000Z", Redactor(), on_chunk=chunks.append)
    w.add_bytes("cmd/ip_-d_-s_link_show.stdout", b"1: lo: <LOOPBACK>\n")
    w.add_symlink("fs/sys/class/net/net_rail0", "../../devices/virtual/net/net_rail0")
    w.add_stream("fs/var/log/big.log", (b"line %d password=x\n" % i for i in range(10000)))
    w.add_dir("netlink")
    nbytes, digest = w.close()
    data = out.getvalue()
    assert nbytes == len(data) and digest == hashlib.sha256(data).hexdigest()
    assert b"".join(chunks) == data
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        names = tf.getnames()
        assert {n.split("/")[0] for n in names} == {"node-a-20261201T000000Z"}
        link = tf.getmember("node-a-20261201T000000Z/fs/sys/class/net/net_rail0")
        assert link.issym() and link.linkname == "../../devices/virtual/net/net_rail0"
        big = tf.extractfile("node-a-20261201T000000Z/fs/var/log/big.log").read()  # type: ignore[union-attr]
    assert b"password=x" not in big and big.count(b"password=[redacted]") == 10000
    assert sha256_line(digest, "/spool/b.tar.gz") == f"{digest}  b.tar.gz\n"


@pytest.mark.parametrize("top", ["", "a/b", "..", "."])
def test_a_bad_top_directory_is_refused(top: str) -> None:
    with pytest.raises(ValueError):
        BundleWriter(io.BytesIO(), top)
