"""dcb: per rail, PFC, APP (DSCP / priority map), buffers and ETS as the driver holds them."""

from agent.capture.plan import Command, Plan

PLAN = Plan("dcb", 1, tuple(
    Command(("dcb", "-j", what, "show", "dev", "{rail}")) for what in ("pfc", "app", "buffer", "ets")
), "per rail: pfc, app, buffer, ets")
