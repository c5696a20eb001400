"""Redaction before bytes reach the archive (docs/design.md §7).

Secrets are always removed: private key blocks, bearer tokens, ``Authorization`` and cookie headers,
kubeconfig credentials, ``password=`` style pairs and YAML block scalars under such keys,
``--password VALUE`` style flags, registry ``auth`` entries and ``curl -u user:password``, a
``password: value`` to the end of its line, any ``*_KEY=``, a URL's user and password, dracut's
``netroot=iscsi:user:password@``, Slack webhook URLs, tokens known by their prefix (GitHub, GitLab,
Slack, Hugging Face, ``sk-``, Google, AWS) and ``ipmitool -P``. With a key (``--redact``), addresses and
names become keyed HMAC pseudonyms of the same shape: IPv4 / IPv6 addresses (RoCE GIDs are IPv6),
MACs and other colon-separated hardware addresses, IB GUIDs, host names, pod and namespace names.
The same input gives the same pseudonym with the same key on every node, and no map file exists:
the key is the only way back.

A pseudonym keeps the form of what it replaces (a MAC stays a unicast, locally administered MAC;
an IPv4 address stays a dotted quad), so the readers parse a redacted bundle as they parse any and
the checks reach the same findings.

Redaction works line by line over a stream (``Redactor.stream``) so that a large file never sits
in memory whole; a line longer than ``MAX_LINE`` is cut into pieces.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["FORMS", "MAX_LINE", "Form", "Redactor", "load_key"]

MAX_LINE = 1 << 20
MARK = b"[redacted]"

_PEM_BEGIN = re.compile(rb"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY|[A-Z0-9 ]*PRIVATE KEY BLOCK)-----")
_PEM_END = re.compile(rb"-----END [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----")
_SECRET_WORDS = (rb"password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
                 rb"client-key-data|client-certificate-data|credentials?")
#: short keys that name a password where a word ends: ``psk=`` (OVS IPsec, wpa_supplicant), ``pass=``,
#: ``pwd=`` (module options in modprobe.d, the kernel command line); ``bypass=`` is no password
_SHORT_WORDS = rb"(?:psk|pass|pwd)"
#: a value: quoted whole, or up to a separator
_VALUE = rb"(\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s,;}\]]+)"


@dataclass(frozen=True)
class Form:
    """One form a secret takes in what a capture copies. ``repl`` b"" keeps the value's quotes
    (``key: "[redacted]"``: JSON stays JSON); ``needles`` are what the form cannot match without
    (lower case), a plain substring test before the regex. ``sample`` holds ``secret``: the form's
    test plants it and checks it is gone."""

    name: str
    pattern: re.Pattern[bytes]
    repl: bytes | Callable[[re.Match[bytes]], bytes]
    needles: tuple[bytes, ...]
    sample: bytes
    secret: bytes


def _pem_base64(m: re.Match[bytes]) -> bytes:
    """A base64 PEM block (``LS0tLS1CRUdJTi`` is base64 of ``-----BEGIN``): gone when it is a key."""
    head = m.group(0)[:96]
    try:
        text = base64.b64decode(head[: len(head) // 4 * 4])
    except ValueError:
        return m.group(0)
    return MARK if b"PRIVATE KEY" in text else m.group(0)


#: Every form of secret redaction removes, always (with or without ``--redact``).
FORMS: tuple[Form, ...] = (
    # HTTP headers and their curl / log forms: the whole value goes.
    Form("authorization-header", re.compile(rb"(?i)\b((?:proxy-)?authorization[ \t]*[:=][ \t]*)[^\r\n]+"),
         rb"\1" + MARK, (b"authorization",), b"Authorization: Negotiate YIIkeRBERBEROS", b"YIIkeRBERBEROS"),
    Form("bearer", re.compile(rb"(?i)\b(bearer[ \t]+)[A-Za-z0-9._~+/=-]{4,}"), rb"\1" + MARK, (b"bearer",),
         b"curl -H 'X-Auth: Bearer sk-live-51Hbearer' https://x", b"sk-live-51Hbearer"),
    Form("basic", re.compile(rb"(?i)\b(basic[ \t]+)[A-Za-z0-9+/=]{8,}"), rb"\1" + MARK, (b"basic",),
         b"proxy said: Basic dXNlcjpiYXNpYy1wdw==", b"dXNlcjpiYXNpYy1wdw"),
    # "password: correct horse battery staple": a YAML / INI / log value after ": " is the rest of
    # the line unless quoted (the pair above stops at the first space and took "correct" only).
    Form("secret-colon-line", re.compile(
        rb"(?i)(?<![\w.-])(\"?[\w.-]{0,40}?(?:" + _SECRET_WORDS + rb")[\w.-]{0,40}\"?[ \t]*:[ \t]+)"
        rb"([^\"'\s][^\r\n]*)"), b"", (b"pass", b"secret", b"token", b"key", b"credential"),
        b"password: correct horse battery staple", b"horse battery staple"),
    # kubeconfig and YAML / JSON / INI credentials: "token: ...", "client-key-data: ...",
    # "password=...", '"secret": "..."'.
    Form("secret-key-pair", re.compile(
        rb"(?i)(?<![\w.-])(\"?[\w.-]{0,40}?(?:" + _SECRET_WORDS + rb")[\w.-]{0,40}\"?[ \t]*[:=][ \t]*)" + _VALUE),
        b"", (b"pass", b"secret", b"token", b"key", b"credential"), b'{"db_password": "pair-hunter2"}',
        b"pair-hunter2"),
    # Any NAME_KEY=value / name_key: value (STRIPE_SECRET_KEY, ENCRYPTION_KEY, a .env file).
    Form("key-suffix-pair", re.compile(
        rb"(?i)(?<![\w.-])(\"?[\w.-]{1,40}?_key\"?[ \t]*[:=][ \t]*)" + _VALUE), b"", (b"_key",),
        b"ENCRYPTION_KEY=keysuffix-s3cret", b"keysuffix-s3cret"),
    # psk= / pass= / pwd=: module options (modprobe.d), the kernel command line, OVS's
    # ``options: {psk=...}`` in ``ovs-vsctl show`` and ``options : {psk=...}`` in ``list Interface``.
    Form("short-key-pair", re.compile(
        rb"(?i)(?<![\w.-])((?:[\w.-]{0,40}[_.-])?" + _SHORT_WORDS + rb"[ \t]*=[ \t]*)" + _VALUE),
        b"", (b"psk", b"pass", b"pwd"), b"options cifs_helper pwd=pwd-s3cret pass=pass-s3cret psk=psk-s3cret",
        b"-s3cret"),
    # udev: ENV{SECRET_TOKEN}="...", E{DB_PASS}:="..." (udev(7) assignment keys).
    Form("udev-env", re.compile(
        rb"(?i)(\b(?:ENV|E)\{[\w.-]{0,40}?(?:" + _SECRET_WORDS + rb"|" + _SHORT_WORDS + rb")[\w.-]{0,40}\}"
        rb"[ \t]*[:+]?=[ \t]*)" + _VALUE), b"", (b"env{", b"e{"),
        b'ACTION=="add", ENV{SECRET_TOKEN}="udev-s3cret", RUN+="/bin/true"', b"udev-s3cret"),
    # JSON pairs as arrays: ["password","..."], and OVS's --format=json maps
    # ["map",[["psk","..."],["remote_ip","..."]]] (ovs-vsctl(8) "list Interface").
    Form("json-pair-array", re.compile(
        rb"(?i)(\[[ \t]*\"[\w.-]{0,40}?(?:" + _SECRET_WORDS + rb"|" + _SHORT_WORDS + rb")[\w.-]{0,40}\"[ \t]*,[ \t]*)"
        rb"(\"(?:[^\"\\\r\n]|\\.)*\")"), b"", (b"pass", b"secret", b"token", b"key", b"credential", b"psk", b"pwd"),
        b'"options":["map",[["psk","ovs-psk-s3cret"],["remote_ip","10.0.0.2"]]]', b"ovs-psk-s3cret"),
    # Kubernetes env: {"name":"DB_PASSWORD","value":"..."} (a pod spec in JSON, kubectl -o json).
    Form("k8s-env-value", re.compile(
        rb"(?i)(\"name\"[ \t]*:[ \t]*\"[\w.-]{0,80}?(?:" + _SECRET_WORDS + rb"|" + _SHORT_WORDS + rb")[\w.-]{0,80}\""
        rb"[ \t]*,[ \t]*\"value\"[ \t]*:[ \t]*)(\"(?:[^\"\\\r\n]|\\.)*\")"), b"", (b'"value"',),
        b'"env":[{"name":"DB_PASSWORD","value":"k8s-env-s3cret"}]', b"k8s-env-s3cret"),
    # A JSON Web Token on its own (a ServiceAccount token in a log line): header.payload.signature,
    # the first two base64url JSON objects ("eyJ" is base64 of '{"').
    Form("jwt", re.compile(rb"(?<![\w-])eyJ[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*"), MARK,
         (b"eyj",), b"token rejected: eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJqd3QtczNjcmV0In0.c2lnbmF0dXJl end",
         b"eyJzdWIiOiJqd3QtczNjcmV0In0"),
    # A PEM private key as base64 (a Secret's tls.key, a kubeconfig dump without its key name).
    Form("pem-base64", re.compile(rb"LS0tLS1CRUdJTi[A-Za-z0-9+/]{8,}={0,2}"), _pem_base64, (b"ls0tls1crudjti",),
         b"tls.key: " + base64.b64encode(b"-----BEGIN PRIVATE KEY-----\nMIIEvpem-s3cret\n-----END PRIVATE KEY-----\n"),
         base64.b64encode(b"-----BEGIN PRIVATE KEY-----\nMIIEvpem-s3cret\n-----END PRIVATE KEY-----\n")[20:50]),
    # Cookies are credentials (RFC 6265): the whole header value goes.
    Form("cookie", re.compile(rb"(?i)\b((?:set-)?cookie[ \t]*:[ \t]*)[^\r\n]+"), rb"\1" + MARK, (b"cookie",),
         b"Set-Cookie: sid=cookie-s3cret; HttpOnly", b"cookie-s3cret"),
    # Space-separated flags: "--password hunter2", "kubeadm join ... --token abcdef.0123456789abcdef"
    # (kubeadm-join(1)); the "--flag=value" form is the pair above. A next "-..." word is a flag.
    Form("flag-value", re.compile(
        rb"(?i)((?<![\w-])--?[\w-]{0,40}?(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|"
        rb"private[_-]?key|credentials?)[\w-]{0,40}[ \t]+)(\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s\"'-][^\s]*)"), b"",
        (b"pass", b"secret", b"token", b"key", b"credential"), b"kubeadm join --token flag-s3cret --v 2",
        b"flag-s3cret"),
    # Docker's config.json ("auth": base64 of user:password, "identitytoken") and containerd's
    # registry configs (auth = "...", identitytoken = "...").
    Form("registry-auth", re.compile(
        rb"(?i)(?<![\w.-])(\"?(?:auth|identitytoken|identity_token|registrytoken)\"?[ \t]*[:=][ \t]*)" + _VALUE),
        b"", (b"auth", b"identity", b"registrytoken"), b'{"auths":{"r.io":{"auth":"cmVnLXMzY3JldA=="}}}',
        b"cmVnLXMzY3JldA"),
    # curl -u / --user / -U / --proxy-user USER:PASSWORD (curl(1)), also glued: -uuser:pw.
    Form("curl-user", re.compile(rb"(\bcurl\b[^\r\n]*?[ \t](?:-u|-U|--user|--proxy-user)(?:[ \t]+|=)?)(?!-)[^\s]+"),
         rb"\1" + MARK, (b"curl",), b"curl -s -u admin:curl-s3cret https://bmc", b"curl-s3cret"),
    # URLs with a user:password part.
    Form("url-userinfo", re.compile(rb"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,30}://[^/\s:@]{0,256}:)[^@\s/]{1,256}@"),
         rb"\1" + MARK + b"@", (b"://",), b"remote: https://git:url-s3cret@git.example/x.git", b"url-s3cret"),
    # A URL whose user is all there is: often a token (https://ghp_...@github.com, https://<key>@sentry).
    Form("url-user", re.compile(rb"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]{0,30}://)[^/\s:@\[\]]{1,256}@"),
         rb"\1" + MARK + b"@", (b"://",), b"pip index https://urluser-s3cret@pypi.example/simple", b"urluser-s3cret"),
    # dracut's iSCSI root: netroot=iscsi:[user:password[:reverse-user:reverse-password]@]server:...
    # (dracut.cmdline(7)), on /proc/cmdline and in what dmesg repeats of it.
    Form("dracut-iscsi", re.compile(rb"(?i)(\bnetroot=iscsi:)[^\s@]*@"), rb"\1" + MARK + b"@", (b"netroot=iscsi:",),
         b"ro netroot=iscsi:admin:iscsi-s3cret@10.0.0.9::3260::iqn.2009-06.example:t0 quiet", b"iscsi-s3cret"),
    # Slack's incoming webhooks: the URL is the credential (https://api.slack.com/messaging/webhooks).
    Form("slack-webhook", re.compile(rb"(?i)(https?://hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/)"
                                     rb"[^\s\"'<>]+"), rb"\1" + MARK, (b"hooks.slack",),
         b"url: https://hooks.slack.com/services/T0001/B0002/slackhook-s3cret", b"slackhook-s3cret"),
    # Tokens known by their prefix wherever they stand: GitHub (ghp_ gho_ ghu_ ghs_ ghr_ github_pat_),
    # GitLab (glpat-), Slack (xoxa- xoxb- xoxp- xoxr-), Hugging Face (hf_), OpenAI-style (sk-),
    # Google API keys (AIza), AWS access key ids (AKIA / ASIA).
    Form("token-prefix", re.compile(
        rb"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{10,}|github_pat_[A-Za-z0-9_]{10,}|glpat-[A-Za-z0-9_-]{10,}|"
        rb"xox[abpr]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{10,}|sk-[A-Za-z0-9_-]{10,}|AIza[0-9A-Za-z_-]{35}|"
        rb"(?:AKIA|ASIA)[0-9A-Z]{16})(?![\w-])"), MARK,
        (b"ghp_", b"gho_", b"ghu_", b"ghs_", b"ghr_", b"github_pat_", b"glpat-", b"xox", b"hf_", b"sk-", b"aiza",
         b"akia", b"asia"),
        b"export GH=ghp_prefixs3cretprefixs3cretAB0123", b"prefixs3cretprefixs3cretAB0123"),
    # ipmitool -P <password>, -k / -y <Kg key> (ipmitool(1)), spaced or glued.
    Form("ipmitool-password", re.compile(rb"(\bipmitool\b[^\r\n]*?[ \t]-[Pky][ \t]*)(?!-)[^\s]+"),
         rb"\1" + MARK, (b"ipmitool",), b"ipmitool -I lanplus -H bmc -U admin -P ipmi-s3cret chassis status",
         b"ipmi-s3cret"),
)

# One pass for every kind of address so that a match is never re-redacted.
_HEX2 = rb"[0-9A-Fa-f]{2}"
_ADDR = re.compile(
    rb"(?P<hw>(?<![0-9A-Fa-f:])" + _HEX2 + rb"(?::" + _HEX2 + rb"){5,19}(?![0-9A-Fa-f:]))"
    rb"|(?P<guid>(?<![0-9A-Fa-f:])[0-9A-Fa-f]{4}(?::[0-9A-Fa-f]{4}){3}(?![0-9A-Fa-f:]))"
    rb"|(?P<v6>(?<![0-9A-Za-z:.])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?:\.\d{1,3}){0,3}(?![0-9A-Za-z:]))"
    rb"|(?P<v4>(?<![\w.-])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]|-\d))"
)
# Names the node and Kubernetes carry by key: "pod=...", "namespace: ...", OVS external_ids.
_K8S_NAME = re.compile(
    rb"(?i)(\b(?:k8s_)?(?:pod(?:[_-]?name)?|namespace|pod[_-]?namespace|netns)\"?[ \t]*[:=][ \t]*\"?)"
    rb"([a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?)(?=[\"\s,;}\]]|$)")

# A YAML block scalar under a secret key ("password: |", "token: >-", YAML 1.2 §8.1): the value
# is on the next, more-indented lines, which ``stream`` replaces.
_BLOCK_KEY = re.compile(rb"(?im)^([ \t]*(?:-[ \t]+)?)(\"?[\w.-]{1,80}\"?)[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*(?:#.*)?\r?$")
_BLOCK_SECRET = re.compile(rb"(?i)password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
                           rb"client-key-data|client-certificate-data|credentials?|^\"?auth\"?$")


def _block_key(line: bytes) -> int | None:
    """The key's column when ``line`` opens a block scalar under a secret key, else None."""
    m = _BLOCK_KEY.match(line.rstrip(b"\n"))
    if m is None or not _BLOCK_SECRET.search(m.group(2)):
        return None
    return len(m.group(1))


def _keep_quotes(m: re.Match[bytes]) -> bytes:
    """``key: value`` -> ``key: [redacted]``; a quoted value keeps its quotes (JSON stays JSON)."""
    val = m.group(2)
    if val[:1] in (b'"', b"'"):
        return m.group(1) + val[:1] + MARK + val[:1]
    return m.group(1) + MARK


_KEEP_V4 = {"0.0.0.0", "255.255.255.255"}


def load_key(path: str) -> bytes:
    """The HMAC key from ``--redact-key-file`` (its bytes, surrounding whitespace stripped)."""
    with open(path, "rb") as fh:
        key = fh.read(1 << 16).strip()
    if len(key) < 16:
        raise ValueError(f"{path}: a redaction key needs at least 16 bytes")
    return key


class Redactor:
    """Redacts bytes. ``key`` None: secrets only; a key: secrets and pseudonyms too."""

    def __init__(self, key: bytes | None = None, names: Iterable[str] = ()) -> None:
        self.key = key
        self._names: list[tuple[bytes, bytes]] = []
        if key is not None:
            for name in sorted({n for n in names if n and len(n) >= 2}, key=len, reverse=True):
                self._names.append((name.encode(), self.pseudonym("host", name).encode()))
        self._names_re = (re.compile(rb"(?<![\w-])(" + b"|".join(re.escape(n) for n, _ in self._names)
                                     + rb")(?![\w-])") if self._names else None)
        self._name_map = dict(self._names)
        self._memo: dict[bytes, bytes] = {}

    @property
    def pseudonymising(self) -> bool:
        return self.key is not None

    # -- pseudonyms -------------------------------------------------------------------------
    def _mac(self, kind: str, value: str) -> bytes:
        assert self.key is not None
        return hmac.new(self.key, kind.encode() + b"\0" + value.encode(), hashlib.sha256).digest()

    def pseudonym(self, kind: str, value: str) -> str:
        """The pseudonym of ``value`` (``kind``: host, pod, namespace), e.g. ``host-3f9a0c12d4``."""
        return f"{kind}-{self._mac(kind, value).hex()[:10]}"

    def _hw(self, text: str) -> str:
        octets = text.split(":")
        low = text.lower()
        if low.replace(":", "").strip("0") == "" or low.replace(":", "").strip("f") == "":
            return text  # all zeros / broadcast: no one's address
        digest = self._mac("hw", low)
        raw = bytearray(digest[: len(octets)])
        if len(octets) == 6:
            raw[0] = (raw[0] | 0x02) & 0xFE  # locally administered, unicast
        out = ":".join(f"{b:02x}" for b in raw)
        return out.upper() if text.isupper() else out

    def _guid(self, text: str) -> str:
        digest = self._mac("guid", text.lower()).hex()[:16]
        return ":".join(digest[i:i + 4] for i in range(0, 16, 4))

    def _v4(self, text: str) -> str | None:
        try:
            addr = ipaddress.IPv4Address(text)
        except ValueError:
            return None
        if text in _KEEP_V4 or addr.is_loopback or text.startswith("255."):
            return None  # loopback, any, netmasks: nothing identifying
        digest = self._mac("ipv4", str(addr))
        return ".".join(str(b) for b in digest[:4])

    def _v6(self, text: str) -> str | None:
        if text.count(":") < 2:
            return None
        try:
            addr = ipaddress.IPv6Address(text)
        except ValueError:
            return None
        if addr.is_loopback or addr.is_unspecified:
            return None
        digest = self._mac("ipv6", addr.exploded)
        new = ipaddress.IPv6Address(digest[:16])
        # A GID or an address printed in full keeps its full form; a compressed one stays short.
        return new.exploded if len(text) == 39 else new.compressed

    def _addr(self, m: re.Match[bytes]) -> bytes:
        raw = m.group(0)
        hit = self._memo.get(raw)
        if hit is not None:
            return hit
        out_b = self._addr_new(m)
        if len(self._memo) < 100_000:
            self._memo[raw] = out_b
        return out_b

    def _addr_new(self, m: re.Match[bytes]) -> bytes:
        text = m.group(0).decode("ascii")
        kind = m.lastgroup
        out: str | None
        if kind == "hw":
            out = self._hw(text)
        elif kind == "guid":
            out = self._guid(text)
        elif kind == "v6":
            out = self._v6(text)
        else:
            out = self._v4(text)
        return m.group(0) if out is None else out.encode("ascii")

    def _k8s(self, m: re.Match[bytes]) -> bytes:
        key = m.group(1).lower()
        kind = "namespace" if b"namespace" in key or b"netns" in key else "pod"
        return m.group(1) + self.pseudonym(kind, m.group(2).decode("ascii", "replace")).encode()

    # -- bytes ------------------------------------------------------------------------------
    def line(self, data: bytes) -> bytes:
        """Redact one line (no PEM state: ``stream`` handles key blocks)."""
        low = data.lower()
        for form in FORMS:
            # A plain substring test first: most blocks hold no keyword, and the regexes are slow.
            if any(n in low for n in form.needles):
                data = form.pattern.sub(form.repl or _keep_quotes, data)
                low = data.lower()
        if self.key is None:
            return data
        data = _ADDR.sub(self._addr, data)
        data = _K8S_NAME.sub(self._k8s, data)
        if self._names_re is not None:
            data = self._names_re.sub(lambda m: self._name_map[m.group(1)], data)
        return data

    def text(self, value: str) -> str:
        """Redact a short string (a manifest field)."""
        return self.redact(value.encode()).decode("utf-8", "replace")

    def redact(self, data: bytes) -> bytes:
        """Redact a whole buffer (it holds one member: ``stream`` for a large one)."""
        return b"".join(self.stream([data]))

    def stream(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Redact a byte stream line by line; at most one partial line (``MAX_LINE``) is held."""
        in_key = False
        block: list[Any] = [None, False]  # a secret block scalar: [key column or None, value marked]
        rest = b""

        def lines(buf: bytes, final: bool) -> tuple[list[bytes], bytes]:
            parts = buf.split(b"\n")
            tail = b"" if final else parts.pop()
            out = [p + b"\n" for p in parts]
            if final and out:
                out[-1] = out[-1][:-1]
            return out, tail

        def per_line(ls: list[bytes]) -> Iterator[bytes]:
            nonlocal in_key
            for ln in ls:
                if block[0] is not None:
                    body = ln.rstrip(b"\r\n")
                    indent = len(body) - len(body.lstrip(b" \t"))
                    if not body.strip():
                        yield ln
                        continue
                    if indent > block[0]:
                        if not block[1]:
                            block[1] = True
                            yield body[:indent] + MARK + ln[len(body):]
                        continue
                    block[0] = None
                col = _block_key(ln)
                if col is not None and not in_key:
                    block[0], block[1] = col, False
                    yield ln
                    continue
                if in_key:
                    end = _PEM_END.search(ln)
                    if end:
                        in_key = False
                        yield ln[end.start():]
                    continue
                m = _PEM_BEGIN.search(ln)
                if m:
                    end = _PEM_END.search(ln, m.end())
                    if end:
                        yield self.line(ln[:m.end()]) + MARK + ln[end.start():]
                    else:
                        in_key = True
                        yield self.line(ln[:m.end()]) + b"\n" + MARK + b"\n"
                    continue
                yield self.line(ln)

        def emit(ls: list[bytes]) -> Iterator[bytes]:
            joined = b"".join(ls)
            if not in_key and block[0] is None and b"-----BEGIN" not in joined and not (
                    (b"|" in joined or b">" in joined) and any(_block_key(ln) is not None for ln in ls)):
                # Every pattern stays within a line: the whole block goes through the regexes at once.
                yield self.line(joined)
                return
            yield from per_line(ls)

        for chunk in chunks:
            if not chunk:
                continue
            buf = rest + chunk
            ls, rest = lines(buf, False)
            if len(rest) > MAX_LINE:
                ls.append(rest)
                rest = b""
            out = b"".join(emit(ls))
            if out:
                yield out
        if rest:
            ls, _ = lines(rest, True)
            out = b"".join(emit(ls))
            if out:
                yield out
