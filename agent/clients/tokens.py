"""The one reader of bearer-token files (``--token-file``, ``--collector-token-file``, ``--agent-token-file``, …).

Read on every request, since a projected ServiceAccount token is rotated in place by the kubelet. A
token file is refused, with a line that names the file and the fix, when

- others than its owner may read it (group or world read bit: a token readable by the group is as good
  as handed out; the chart mounts its tokens with ``defaultMode: 0400``),
- it is larger than :data:`MAX_TOKEN_BYTES` (a token is a line, not a file someone pointed at by mistake),
- it is empty, or holds whitespace or control characters inside the token (which would end an HTTP
  header early).
"""

from __future__ import annotations

import os
import stat

__all__ = ["MAX_TOKEN_BYTES", "TokenFileError", "read_token"]

#: A projected ServiceAccount token is about 1 KiB; static tokens are shorter.
MAX_TOKEN_BYTES = 16 * 1024


class TokenFileError(OSError):
    """A token file that cannot be used; the message names the file and what to do."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "token file"


def read_token(path: str | os.PathLike[str], flag: str = "token file") -> str:
    """The token held in ``path`` (surrounding whitespace removed), or :class:`TokenFileError`.

    ``flag`` names where the path came from (``--token-file``) so the message points at it.
    """
    where = f"{flag} {os.fspath(path)}"
    try:
        # The check and the read are of one open file: no window for the file to be swapped between them.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise TokenFileError(f"{where}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TokenFileError(f"{where}: not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            who = "its group and others" if mode & stat.S_IRGRP and mode & stat.S_IROTH else (
                "its group" if mode & stat.S_IRGRP else "others")
            raise TokenFileError(f"{where}: readable by {who} (mode {mode:04o}); a token must be readable by its "
                                 f"owner only: chmod 600 {os.fspath(path)}")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(MAX_TOKEN_BYTES + 1)
    except TokenFileError:
        raise
    except OSError as exc:
        raise TokenFileError(f"{where}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_BYTES:
        raise TokenFileError(f"{where}: larger than {MAX_TOKEN_BYTES // 1024} KiB; a token file holds one token")
    try:
        token = data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"{where}: not ASCII text; a token file holds one token") from None
    if not token:
        raise TokenFileError(f"{where}: empty")
    if any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise TokenFileError(f"{where}: holds whitespace or control characters; a token file holds one token")
    return token
