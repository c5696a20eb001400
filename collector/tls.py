"""The collector's TLS: a server context from a certificate and key file, loaded again when either
file changes (a cert-manager renewal swaps the Secret's files under the pod), without a restart.

A renewal written in two steps can be seen half done (a new certificate with the old key). A pair
is loaded into a fresh context and only a context that loaded whole replaces the one in use: loading
into the live one would leave it holding the new certificate with the old key (OpenSSL sets the
certificate before it finds the key does not match), and every handshake would fail while the
log said the old pair stayed. Such a pair is said to be refused, the old context serves on, and
the next look tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl

from .config import SettingsError

__all__ = ["CertReloader", "server_context"]

log = logging.getLogger("railscope.collector")

#: How often the files are looked at (a stat of each, no read when nothing changed).
RELOAD_EVERY_S = 5.0


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A TLS 1.2+ server context; ``SettingsError`` names the file that cannot be used."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as exc:
        raise SettingsError(f"--tls-cert-file / --tls-key-file: {exc.filename}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise SettingsError(f"--tls-cert-file {cert_file} / --tls-key-file {key_file}: cannot be used: "
                            f"{getattr(exc, 'reason', None) or exc}") from None
    return ctx


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)  # follows the Secret volume's symlinks: a swap changes the target
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


class CertReloader:
    """Loads the pair into a fresh context whenever either file's inode, mtime or size changes and
    swaps it in (``ctx``) once it loaded; new handshakes use the new pair (the site asks for
    ``ctx`` per connection), connections already open keep theirs."""

    def __init__(self, ctx: ssl.SSLContext, cert_file: str, key_file: str, every_s: float = RELOAD_EVERY_S) -> None:
        self.ctx, self.cert_file, self.key_file, self.every_s = ctx, cert_file, key_file, every_s
        self.seen = (_stamp(cert_file), _stamp(key_file))
        self.reloads = 0
        self._task: asyncio.Task[None] | None = None

    def check(self) -> bool:
        """Load the pair again if it changed; True when a new pair is in use."""
        now = (_stamp(self.cert_file), _stamp(self.key_file))
        if now == self.seen or None in now:
            return False
        try:
            fresh = server_context(self.cert_file, self.key_file)
        except SettingsError as exc:
            # Half a renewal, most likely: the context in use was never touched, so what the log
            # says is so. Looked at again next time.
            log.warning("TLS certificate %s not reloaded (the previous pair stays in use): %s", self.cert_file, exc)
            return False
        self.ctx = fresh
        self.seen = now
        self.reloads += 1
        log.info("TLS certificate %s reloaded", self.cert_file)
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            # On the loop's thread: the context is in use by handshakes there, and OpenSSL's context
            # is not safe to change from another thread while it is used. Two small PEM files.
            self.check()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
