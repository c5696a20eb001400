"""``web.AppKey`` declarations of the agent app, in one place (aiohttp-demos ``typedefs.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from agent.service.daemon import Agent

__all__ = ["AGENT"]

AGENT: web.AppKey[Agent] = web.AppKey("agent")
