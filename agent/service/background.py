"""A coroutine that runs for as long as the agent's HTTP app does (the node watch, the request puller)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from aiohttp import web

__all__ = ["run_with_app"]


def run_with_app(app: web.Application, make: Callable[[], Coroutine[Any, Any, Any]], name: str) -> None:
    """Start ``make()`` as a task when ``app`` starts; cancel it, and wait for it, when the app stops."""

    async def ctx(_app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(make(), name=name)
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    app.cleanup_ctx.append(ctx)
