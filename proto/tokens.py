"""The one reader of bearer-token files, for the agent, its clients and the collector alike
(``--token-file``, ``--collector-token-file``, ``--data-token-file``, the collector's
``--agent-token-file`` / ``--operator-token-file`` / ``--alerting-token-file``); here because both
sides may import ``proto`` (tests/unit/test_import_rules.py).

Read on every request, since a projected ServiceAccount token is rotated in place by the kubelet. A
token file is refused, with a line that names the file and the fix, when

- others than its owner may read it (group or world read bit: a token readable by the group is as good
  as handed out; the chart mounts its tokens with ``defaultMode: 0400``). A server running as a user
  of its own may be given ``own_group``: a file its own group may read (a Secret volume mounted
  ``0440`` with the pod's ``fsGroup``: the pod's processes alone) is then taken,
- it is larger than :data:`MAX_TOKEN_BYTES` (a token is a line, not a file someone pointed at by
  mistake; a list of tokens, :func:`read_token_list`, at most :data:`MAX_TOKEN_LIST_BYTES`),
- it is empty, or holds whitespace or control characters inside the token (which would end an HTTP
  header early).
"""

from __future__ import annotations

import os
import stat

__all__ = ["MAX_TOKEN_BYTES", "MAX_TOKEN_LIST_BYTES", "TokenFileError", "read_token", "read_token_list"]

#: A projected ServiceAccount token is about 1 KiB; static tokens are shorter.
MAX_TOKEN_BYTES = 16 * 1024
#: A file of tokens, one line each (the collector's agent tokens: ``<node> <token> [<cluster>]``,
#: well under 100 bytes a node): room for tens of thousands of nodes.
MAX_TOKEN_LIST_BYTES = 4 << 20


class TokenFileError(OSError):
    """A token file that cannot be used; the message names the file and what to do."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "token file"


def _read(path: str | os.PathLike[str], flag: str, limit: int, own_group: bool) -> str:
    """The file's text after the checks every token file passes (see the module's docstring)."""
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
        group = bool(mode & stat.S_IRGRP) and not (own_group and st.st_gid == os.getegid())
        if group or mode & stat.S_IROTH:
            who = "its group and others" if group and mode & stat.S_IROTH else ("its group" if group else "others")
            raise TokenFileError(f"{where}: readable by {who} (mode {mode:04o}); a token must be readable by its "
                                 f"owner only: chmod 600 {os.fspath(path)}")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    except TokenFileError:
        raise
    except OSError as exc:
        raise TokenFileError(f"{where}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        what = "a token file holds one token" if limit == MAX_TOKEN_BYTES else "a token file holds a token a line"
        raise TokenFileError(f"{where}: larger than {limit // 1024} KiB; {what}")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise TokenFileError(f"{where}: not ASCII text; a token file holds tokens only") from None


def read_token(path: str | os.PathLike[str], flag: str = "token file", own_group: bool = False) -> str:
    """The token held in ``path`` (surrounding whitespace removed), or :class:`TokenFileError`.

    ``flag`` names where the path came from (``--token-file``) so the message points at it.
    """
    where = f"{flag} {os.fspath(path)}"
    token = _read(path, flag, MAX_TOKEN_BYTES, own_group).strip()
    if not token:
        raise TokenFileError(f"{where}: empty")
    if any(not 0x21 <= ord(c) <= 0x7E for c in token):
        raise TokenFileError(f"{where}: holds whitespace or control characters; a token file holds one token")
    return token


def read_token_list(path: str | os.PathLike[str], flag: str = "token file", own_group: bool = False) -> str:
    """The text of a file of tokens, a line each (parsed by its reader), after the same checks as
    :func:`read_token`, or :class:`TokenFileError`."""
    text = _read(path, flag, MAX_TOKEN_LIST_BYTES, own_group)
    if any(c not in "\t\n\r" and not 0x20 <= ord(c) <= 0x7E for c in text):
        raise TokenFileError(f"{flag} {os.fspath(path)}: holds control characters; a token file holds a token a line")
    return text
