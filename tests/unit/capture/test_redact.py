"""Redaction: secrets always, keyed pseudonyms on request, in the archive's bytes."""

from __future__ import annotations

import gzip
import io
import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.capture.plugin import Command, File, Plugin
from agent.capture.redact import Redactor
from agent.capture.runner import CaptureParams, capture
from agent.host.live import LiveHost
from agent.host.recorded import open_image
from tests.support.capture_kit import members, plugin, script

KEY = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\nAAAAMwAAAAtzc2gtZW\n" \
      b"-----END OPENSSH PRIVATE KEY-----\n"
TOKEN = b"eyJhbGciOiJSUzI1NiIsImtpZCI6Ik1yNjVtQVJ3"
SECRETS = (b"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ", b"AAAAMwAAAAtzc2gtZW", TOKEN, b"hunter2-s3cret",
           b"kubeconf-token-value", b"cGFzc3dvcmQ")


def test_planted_secrets_are_absent_from_the_gunzipped_archive(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc/sriov-operator").mkdir(parents=True)
    (root / "etc/sriov-operator/id_ed25519").write_bytes(KEY)
    (root / "etc/sriov-operator/kubeconfig").write_bytes(
        b"users:\n- name: a\n  user:\n    token: kubeconf-token-value\n    client-key-data: cGFzc3dvcmQ\n")
    (root / "etc/app.conf").write_bytes(b"[db]\npassword=hunter2-s3cret\nhost=db1\n")
    talk = script(tmp_path, "talk", f"echo 'Authorization: Bearer {TOKEN.decode()}'\n"
                                    f"printf '%s' '{KEY.decode()}'\necho 'db_password: \"hunter2-s3cret\"'\n")
    plug = Plugin("t", 1, (File("/etc/sriov-operator/**"), File("/etc/app.conf"), Command((talk,))))
    out = io.BytesIO()
    capture(LiveHost(str(root)), out, CaptureParams(node="n", nice=0), plugin_modules=[plugin(plug)], staging_dir=str(tmp_path))
    raw = gzip.decompress(out.getvalue())
    for secret in SECRETS:
        assert secret not in raw, secret
    got = members(out.getvalue())
    assert got["fs/etc/app.conf"] == b"[db]\npassword=[redacted]\nhost=db1\n"
    assert got["fs/etc/sriov-operator/id_ed25519"].startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----\n[redacted]\n")
    cmd = next(v for k, v in got.items() if k.endswith("talk.stdout"))
    assert b"Authorization: [redacted]" in cmd and b'db_password: "[redacted]"' in cmd
    # the manifest's digest is that of the redacted bytes, as stored
    import hashlib

    m = json.loads(got["manifest.json"])
    it = next(i for i in m["items"] if i["path"] == "fs/etc/app.conf")
    assert it["sha256"] == hashlib.sha256(got["fs/etc/app.conf"]).hexdigest()


def test_pseudonyms_are_keyed_stable_and_keep_their_form() -> None:
    a, a2, b = Redactor(b"k" * 32), Redactor(b"k" * 32), Redactor(b"j" * 32)
    text = b"lladdr 0a:1b:2c:3d:4e:5f via 10.99.0.2 gid fe80:0000:0000:0000:0a1b:2cff:fe3d:4e5f guid 0a1b:2c03:003d:4e5f\n"
    ra, ra2, rb = a.redact(text), a2.redact(text), b.redact(text)
    assert ra == ra2 and ra != rb
    words = ra.split()
    mac, ip, gid, guid = words[1], words[3], words[5], words[7]
    assert mac != b"0a:1b:2c:3d:4e:5f" and int(mac[:2], 16) & 0x03 == 0x02  # local, unicast
    ipaddress.IPv4Address(ip.decode())
    assert len(gid) == 39 and ipaddress.IPv6Address(gid.decode())
    assert len(guid) == 19 and guid.count(b":") == 3
    for original in (b"0a:1b:2c:3d:4e:5f", b"10.99.0.2", b"0a1b:2cff:fe3d:4e5f", b"0a1b:2c03:003d:4e5f"):
        assert original not in ra
    # what identifies no one stays: broadcast, loopback, any, netmasks
    keep = b"brd ff:ff:ff:ff:ff:ff 127.0.0.1 0.0.0.0 255.255.255.0 ::1 00:00:00:00:00:00\n"
    assert a.redact(keep) == keep
    # versions and times are not addresses
    other = b"version 24.10-1.1.4.0 fw 28.43.1014 at 12:34:56 srcversion 4F2C0D\n"
    assert a.redact(other) == other


def test_host_pod_and_namespace_names() -> None:
    r = Redactor(b"k" * 32, names=["gpu-node-017"])
    out = r.redact(b'gpu-node-017 kernel: x\nexternal_ids: {pod_name="trainer-7", namespace="team-a"}\n')
    assert b"gpu-node-017" not in out and b"trainer-7" not in out and b"team-a" not in out
    assert out.startswith(r.pseudonym("host", "gpu-node-017").encode() + b" kernel")
    assert r.pseudonym("pod", "trainer-7").encode() in out


def test_a_line_split_across_chunks_is_still_redacted() -> None:
    r = Redactor()
    data = b"aaa\nuser password=hunter2-s3cret tail\nzzz\n"
    for cut in range(1, len(data)):
        assert b"".join(r.stream([data[:cut], data[cut:]])) == b"aaa\nuser password=[redacted] tail\nzzz\n"


IMAGES = Path(__file__).resolve().parents[2] / "images"


@pytest.mark.parametrize("name", ["representor-stale", "esw-multiport-torn", "firmware-skew", "link-flapping-events"])
@pytest.mark.slow
def test_a_redacted_image_gives_the_same_findings(name: str, tmp_path: Path) -> None:
    example_image = IMAGES / name
    out = tmp_path / "r.tar.gz"
    with open_image(str(example_image)) as img, open(out, "wb") as fh:
        capture(img, fh, CaptureParams(redact_key=b"k" * 32, nice=0, recorder_gap_s=0, plugins=("replay", "agent")),
                staging_dir=str(tmp_path))

    def doctor(path: Path) -> dict:
        res = subprocess.run([sys.executable, "-m", "agent.cli", "doctor", "--json", "--from", str(path)],
                             capture_output=True, text=True, timeout=120)
        assert res.returncode in (0, 1, 2), res.stderr
        return json.loads(res.stdout)

    want, got = doctor(example_image), doctor(out)
    assert want["findings"]
    assert [(f["code"], f["severity"], f["subject"]) for f in got["findings"]] == \
        [(f["code"], f["severity"], f["subject"]) for f in want["findings"]]
    raw = gzip.decompress(out.read_bytes())
    node = json.loads((example_image / "manifest.json").read_text())["node"] \
        if (example_image / "manifest.json").exists() else None
    assert node is None or node.encode() not in raw
    links = json.loads((example_image / "netlink/links.json").read_text())["links"]
    for lk in links:
        if lk.get("address") and lk["address"] != "00:00:00:00:00:00":
            assert lk["address"].encode() not in raw


def test_a_key_with_an_empty_value_never_takes_the_next_line() -> None:
    r = Redactor()
    assert r.redact(b"secret=\n10\nAuthorization:\nnext\n") == b"secret=\n10\nAuthorization:\nnext\n"


GAPS = (
    b"data:\n  password: |\n    blk-secret-1\n    blk-secret-2\n\n    blk-secret-3\n  user: admin\n"
    b"- token: >-\n    blk-folded-secret\nafter: kept\n"
    b"kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:0f0f\n"
    b"agent --password flag-hunter2 --verbose\n"
    b'{"auths": {"reg.example.com": {"auth": "dXNlcjpyZWctcGFzcw=="}}}\n'
    b'  auth = "Y3RyOmN0ci1wYXNz"\n'
    b"curl -sS -u admin:curl-pw https://bmc.example/redfish\n"
    b"curl --user=admin:curl-pw2 https://x\n"
    b"Cookie: session=cookie-secret-1\n"
    b"Set-Cookie: session=cookie-secret-2; Path=/; HttpOnly\n"
)
GAP_SECRETS = (b"blk-secret-1", b"blk-secret-2", b"blk-secret-3", b"blk-folded-secret", b"0123456789abcdef",
               b"flag-hunter2", b"dXNlcjpyZWctcGFzcw", b"Y3RyOmN0ci1wYXNz", b"curl-pw", b"curl-pw2",
               b"cookie-secret-1", b"cookie-secret-2")


def test_block_scalars_flags_registry_auth_curl_and_cookies_are_redacted() -> None:
    out = Redactor().redact(GAPS)
    for secret in GAP_SECRETS:
        assert secret not in out, secret
    lines = out.split(b"\n")
    # the YAML stays YAML: the key, one marker at the value's indent, the next key kept
    assert lines[1:4] == [b"  password: |", b"    [redacted]", b""] and lines[4] == b"  user: admin"
    assert b"- token: >-\n    [redacted]\nafter: kept\n" in out
    assert b"--token [redacted] --discovery" in out and b"--password [redacted] --verbose" in out
    assert b'"auth": "[redacted]"' in out and b'auth = "[redacted]"' in out
    assert b"-u [redacted] https://bmc.example/redfish" in out and b"Cookie: [redacted]\n" in out


def test_the_new_patterns_hold_across_every_chunk_boundary() -> None:
    r = Redactor()
    whole = r.redact(GAPS)
    for cut in range(1, len(GAPS)):
        assert b"".join(r.stream([GAPS[:cut], GAPS[cut:]])) == whole, cut
    assert b"".join(r.stream(GAPS[i:i + 1] for i in range(len(GAPS)))) == whole


def test_a_block_scalar_under_a_plain_key_and_a_flag_followed_by_a_flag_are_kept() -> None:
    text = b"description: |\n  not a secret\nrun --token --verbose\n"
    assert Redactor().redact(text) == text
    keyed = Redactor(b"k" * 32).redact(b"password: |\n  10.0.0.1\nvia 10.0.0.1\n")
    assert b"10.0.0.1" not in keyed and keyed.startswith(b"password: |\n  [redacted]\nvia ")
