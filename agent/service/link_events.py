"""The node's link and devlink notifications, as the daemon takes them: the rtnetlink listener
thread fills a bounded, coalescing queue that the event loop drains in batches (a storm never starves
the scrape), and the devlink listener thread asks for devlink reads. What a batch of link notes means
is the daemon's (``on_notes``, with ``agent.service.link_state``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agent.host.netlink.devlink_events import DevlinkWatcher
from agent.host.netlink.link_events import LinkNote, LinkWatcher
from agent.service.coalesce import CoalescingQueue

__all__ = ["LinkEvents"]

#: link notes handled per turn of the event loop, so that a storm never starves the scrape
DRAIN_BATCH = 512


class LinkEvents:
    def __init__(self, capacity: int, *, on_notes: Callable[[list[LinkNote]], None],
                 on_overrun: Callable[[], None], on_devlink: Callable[[], None],
                 clock: Callable[[], float]) -> None:
        """``on_notes`` takes each batch on the event loop; ``on_overrun`` (the kernel dropped link
        messages) and ``on_devlink`` (a devlink notification) are called there too."""
        self.queue: CoalescingQueue[LinkNote] = CoalescingQueue(capacity)
        self.watcher: LinkWatcher | None = None
        self.devlink_watcher: DevlinkWatcher | None = None
        self._on_notes = on_notes
        self._on_overrun = on_overrun
        self._on_devlink = on_devlink
        self._clock = clock
        self._wake: asyncio.Event | None = None

    async def start(self) -> None:
        """Start both listeners (on the event loop); ``drain`` then runs as a task of its own."""
        loop = asyncio.get_running_loop()
        wake = self._wake = asyncio.Event()

        def _wake_loop() -> None:
            loop.call_soon_threadsafe(wake.set)

        self.watcher = LinkWatcher(self.queue, _wake_loop, on_overrun=lambda: loop.call_soon_threadsafe(
            self._on_overrun), clock=self._clock)
        self.watcher.start()
        self.devlink_watcher = DevlinkWatcher(lambda: loop.call_soon_threadsafe(self._on_devlink))
        await loop.run_in_executor(None, self.devlink_watcher.start)

    async def drain(self) -> None:
        """Hand the queued notes to ``on_notes``, a batch per turn of the event loop, whenever woken."""
        if self._wake is None:
            self._wake = asyncio.Event()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while True:
                batch = self.queue.drain(DRAIN_BATCH)
                if not batch:
                    break
                self._on_notes(batch)
                await asyncio.sleep(0)

    async def stop(self) -> None:
        loop = asyncio.get_running_loop()
        if self.watcher is not None:
            await loop.run_in_executor(None, self.watcher.stop)
        if self.devlink_watcher is not None:
            await loop.run_in_executor(None, self.devlink_watcher.stop)
