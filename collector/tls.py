"""The collector's TLS: a server context from a certificate and key file, loaded again when either
file changes (a cert-manager renewal swaps the Secret's files under the pod), without a restart.

A renewal written in two steps can be seen half done (a new certificate with the old key): such a
pair fails to load, the context keeps the pair it has, and the next look tries again.
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
    """Loads the pair into ``ctx`` again whenever either file's inode, mtime or size changes; new
    handshakes use the new pair, connections already open keep theirs."""

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
            self.ctx.load_cert_chain(self.cert_file, self.key_file)
        except (ssl.SSLError, OSError) as exc:
            # Half a renewal, most likely: keep serving the pair in use, look again next time.
            log.warning("TLS certificate %s not reloaded (the previous one stays in use): %s", self.cert_file, exc)
            return False
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
