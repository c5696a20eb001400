"""What the two event listeners share: one daemon thread that creates AND reads its own socket (a
netlink socket made in one thread and read in another gets no events, pyroute2 #1342), started
once subscribed, stopped within the socket's poll interval."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

__all__ = ["ListenerThread"]


class ListenerThread(ABC):
    """``_run`` (in the thread) sets ``_ready`` once subscribed or given up and returns on ``_stop``."""

    thread_name = "railscope-listener"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        #: why the listener is not (or no longer) listening; None while it listens
        self.error: str | None = None

    @abstractmethod
    def _run(self) -> None:
        """The thread's body: make and read its own socket (a socket made in another thread gets no
        events), set ``_ready``, return on ``_stop``."""

    def start(self, timeout_s: float = 5.0) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        self._ready.wait(timeout_s)

    def stop(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()
