"""Progress of long work (a capture, a download, a rollout waited on) as one line that updates in place
on stderr, when stderr is a terminal; nothing otherwise, so a log or a pipe gets no ``\\r`` litter."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["TtyLine"]

#: Updates closer together than this are not drawn (a download calls once per MiB).
MIN_INTERVAL_S = 0.1


class TtyLine:
    """One updating line on ``stream`` (stderr by default) if it is a terminal; else does nothing."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        try:
            self.on = self.stream.isatty()
        except (AttributeError, ValueError):  # a closed or replaced stream
            self.on = False
        self.shown = False
        self._last = 0.0
        self._pending = ""

    def update(self, text: str) -> None:
        if not self.on:
            return
        self._pending = text
        now = time.monotonic()
        if self.shown and now - self._last < MIN_INTERVAL_S:
            return
        self._draw(text)
        self._last = now

    def _draw(self, text: str) -> None:
        # \r to the line's start, \x1b[K clears what a longer line before left on it
        self.stream.write(f"\r{text}\x1b[K")
        self.stream.flush()
        self.shown = True

    def end(self) -> None:
        """The last state drawn, then a newline: what follows starts on a line of its own."""
        if not self.shown:
            return
        self._draw(self._pending)
        self.stream.write("\n")
        self.stream.flush()
        self.shown = False
