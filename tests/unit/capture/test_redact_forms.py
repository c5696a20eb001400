"""Redaction as a table of forms: each form's own sample loses its secret; the thirteen forms once
missed (modprobe.d and the kernel command line, udev, JSON pair arrays, Kubernetes env, bare JWTs,
base64 PEM keys, OVS IPsec PSKs) are gone; and, as a property, no planted secret of any form
survives any capture plug-in that copies files, whatever surrounds it and wherever a chunk ends."""

from __future__ import annotations

import base64
import gzip
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.capture.plugins import drivers, kernel, sriov, udev
from agent.capture.redact import FORMS, Redactor
from agent.capture.runner import CaptureParams, capture
from agent.host.live import LiveHost
from tests.support.capture_kit import plugin

PEM = base64.b64encode(b"-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEApem64-s3cret\n-----END RSA PRIVATE KEY-----\n")
JWT = b"eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6andOczNjcmV0In0.c2lnLXMzY3JldA"

#: (where it is met, the line a capture copies, the secret in it)
MISSED = (
    ("modprobe.d psk=", b"options mlx5_ipsec_helper psk=modprobe-psk-1\n", b"modprobe-psk-1"),
    ("modprobe.d pass=", b"options cifs_creds pass=modprobe-pass-2\n", b"modprobe-pass-2"),
    ("modprobe.d pwd=", b"options nbd_auth pwd=modprobe-pwd-3\n", b"modprobe-pwd-3"),
    ("cmdline psk=", b"BOOT_IMAGE=/vmlinuz ro wifi.psk=cmdline-psk-4 quiet\n", b"cmdline-psk-4"),
    ("cmdline pass=", b"BOOT_IMAGE=/vmlinuz ro iscsi.pass=cmdline-pass-5 quiet\n", b"cmdline-pass-5"),
    ("cmdline pwd=", b"root=/dev/sda1 bmc_pwd=cmdline-pwd-6 console=ttyS0\n", b"cmdline-pwd-6"),
    ("udev ENV{SECRET_TOKEN}", b'SUBSYSTEM=="net", ENV{SECRET_TOKEN}="udev-token-7"\n', b"udev-token-7"),
    ("JSON pair array", b'{"params":[["password","json-pair-8"],["user","admin"]]}\n', b"json-pair-8"),
    ("Kubernetes env", b'{"env":[{"name":"DB_PASSWORD","value":"k8s-env-9"}]}\n', b"k8s-env-9"),
    ("bare JWT", b"audit: token " + JWT + b" refused\n", b"c2lnLXMzY3JldA"),
    ("base64 PEM key", b"  key.pem: " + PEM + b"\n", PEM[24:60]),
    ("ovs-vsctl show PSK", b'        Interface ipsec0\n            type: gre\n'
                           b'            options: {psk=ovs-show-psk-12, remote_ip="10.9.0.2"}\n', b"ovs-show-psk-12"),
    ("ovs-vsctl list Interface PSK",
     b'{"data":[[["uuid","5e1d"],"ipsec0",["map",[["psk","ovs-list-psk-13"],["remote_ip","10.9.0.2"]]]]]}\n',
     b"ovs-list-psk-13"),
)


#: The forms a third review planted and every one reached the bundle: (where, line, secret).
GH = b"ghp_" + b"A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
ROUND3 = (
    ("YAML password with spaces", b"  password: correct horse battery staple\n", b"horse battery staple"),
    ("token as a URL's user", b"url = https://" + GH + b"@github.com/org/repo.git\n", GH),
    ("empty URL user", b"REDIS_URL=redis://:redis-url-pw-3@cache:6379/0\n", b"redis-url-pw-3"),
    ("dracut netroot on the cmdline", b"BOOT_IMAGE=/vmlinuz ro netroot=iscsi:admin:iscsi-pw-4@10.0.0.9::3260::"
                                      b"iqn.2009-06.example:t0 quiet\n", b"iscsi-pw-4"),
    ("dracut netroot in dmesg", b"[    0.000000] Kernel command line: ro netroot=iscsi:u:dmesg-iscsi-5@10.0.0.9"
                                b"::3260::iqn.2009-06.example:t0\n", b"dmesg-iscsi-5"),
    ("Slack webhook", b'webhook_url: "https://hooks.slack.com/services/T0ABC/B0DEF/slackhookpw6xyz"\n',
     b"slackhookpw6xyz"),
    ("GitHub token", b"GH_TOKEN_VALUE " + GH + b"\n", GH),
    ("GitHub fine-grained token", b"auth github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123\n",
     b"github_pat_11ABCDEFG0abcdefghijkl_mnopqrstuvwxyz0123"),
    ("GitLab token", b"remote glpat-xY9zW8vU7tS6rQ5pO4nM rejected\n", b"glpat-xY9zW8vU7tS6rQ5pO4nM"),
    ("Slack bot token", b"bot xoxb-1234567890-0987654321-AbCdEfGhIjKl\n", b"xoxb-1234567890-0987654321-AbCdEfGhIjKl"),
    ("Hugging Face token", b"HF hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345\n", b"hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"),
    ("sk- key", b"OPENAI sk-proj-AbCdEfGhIjKlMnOpQrStUv\n", b"sk-proj-AbCdEfGhIjKlMnOpQrStUv"),
    ("Google API key", b"maps AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q\n", b"AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"),
    ("AWS access key id", b"aws AKIAIOSFODNN7EXAMPLE ASIAY34FZKBOKMUTVV7A\n", b"AKIAIOSFODNN7EXAMPLE"),
    ("any *_KEY=", b"STRIPE_SIGNING_KEY=whsec-key-pw-15\n", b"whsec-key-pw-15"),
    ("ipmitool -P", b"ipmitool -I lanplus -H 10.0.0.5 -U root -P ipmi-pw-16 power status\n", b"ipmi-pw-16"),
)


@pytest.mark.parametrize(("where", "line", "secret"), ROUND3, ids=[m[0] for m in ROUND3])
def test_a_form_the_third_review_planted_is_redacted(where: str, line: bytes, secret: bytes) -> None:
    out = Redactor().redact(line)
    assert secret not in out, out
    assert b"[redacted]" in out


@pytest.mark.parametrize(("where", "line", "secret"), MISSED, ids=[m[0] for m in MISSED])
def test_a_form_once_missed_is_redacted(where: str, line: bytes, secret: bytes) -> None:
    out = Redactor().redact(line)
    assert secret not in out, out
    assert b"[redacted]" in out


@pytest.mark.parametrize("form", FORMS, ids=[f.name for f in FORMS])
def test_each_form_removes_its_own_sample(form) -> None:  # type: ignore[no-untyped-def]
    assert form.secret in form.sample
    out = Redactor().redact(form.sample)
    assert form.secret not in out and b"[redacted]" in out, out
    # what is not secret around it stays: redaction takes the value, never the line
    assert out.split(b"[redacted]")[0] == form.sample[:len(out.split(b"[redacted]")[0])]


def test_what_only_looks_like_a_form_is_kept() -> None:
    text = (b"options mlx5_core bypass=1 passthrough=0\n"
            b'ENV{ID_NET_NAME}="net_rail0"\n'
            b'[["mtu","9000"],["remote_ip","10.0.0.2"]]\n'
            + base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n") + b"\n")
    assert Redactor().redact(text) == text


_SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=10,
                  max_size=24).map(lambda s: ("Zq" + s).encode())
_AROUND = st.text(alphabet="abcdefghij klmnop\tqrstuvwxyz0123456789.:/_", max_size=60).map(str.encode)
#: each form's sample with its secret swapped for a drawn one (the sample says where a secret goes)
_PLANTED = st.tuples(st.sampled_from([f for f in FORMS if f.name not in ("pem-base64", "jwt")]), _SECRET)


def _plant(form, secret: bytes) -> bytes:  # type: ignore[no-untyped-def]
    return form.sample.replace(form.secret, secret)


@settings(max_examples=300, deadline=None)
@given(planted=_PLANTED, before=_AROUND, after=_AROUND, cut=st.integers(min_value=0, max_value=400))
def test_no_planted_secret_survives_any_context_or_chunk_boundary(planted, before: bytes, after: bytes,
                                                                   cut: int) -> None:  # type: ignore[no-untyped-def]
    form, secret = planted
    text = before + b"\n" + _plant(form, secret) + b" " + after + b"\n"
    cut = min(cut, len(text))
    out = b"".join(Redactor().stream([text[:cut], text[cut:]]))
    assert secret not in out, (form.name, out)


#: every plug-in that copies files
_COPYING = {"kernel": kernel, "udev": udev, "sriov": sriov, "drivers": drivers}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secrets=st.lists(_SECRET, min_size=len(MISSED), max_size=len(MISSED), unique=True),
       plugin_name=st.sampled_from(sorted(_COPYING)))
def test_no_planted_secret_survives_a_plugin(tmp_path: Path, secrets: list[bytes], plugin_name: str) -> None:
    """Every plug-in that copies files, over a root where every file its File steps name holds every
    form (the third review's too), through the runner into the archive."""
    mod = _COPYING[plugin_name]
    root = tmp_path / f"root-{plugin_name}-{secrets[0].decode()}"
    # A JWT or a base64 PEM block is one encoded whole: those two keep their own secret.
    fixed = ("bare JWT", "base64 PEM key")
    lines = b"".join(line if w in fixed else line.replace(old, new)
                     for (w, line, old), new in zip(MISSED, secrets, strict=True))
    planted = [old if w in fixed else new for (w, _line, old), new in zip(MISSED, secrets, strict=True)]
    lines += b"".join(line for _w, line, _s in ROUND3)
    planted += [secret for _w, _line, secret in ROUND3]
    steps = tuple(s for s in mod.PLUGIN.steps if type(s).__name__ == "File")
    # Every file the steps name (a per-rail path, {pf}, is the rails' and left out here).
    rels = {s.glob.lstrip("/").replace("**", "deep").replace("*", "planted") for s in steps if "{" not in s.glob}
    assert rels, plugin_name
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(lines)
    out = io.BytesIO()
    steps = tuple(s for s in mod.PLUGIN.steps if type(s).__name__ == "File")
    plug = type(mod.PLUGIN)(mod.PLUGIN.name, mod.PLUGIN.version, steps)
    capture(LiveHost(str(root)), out, CaptureParams(node="n", nice=0), plugin_modules=[plugin(plug)],
            staging_dir=str(tmp_path))
    raw = gzip.decompress(out.getvalue())
    assert b"[redacted]" in raw  # the files were copied
    for secret in planted:
        assert secret not in raw, (plugin_name, secret)
