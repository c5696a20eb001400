"""Small helpers shared by the checks (pure)."""

from __future__ import annotations

from typing import Any

from agent.findings import CODES, Finding


def finding(code: str, subject: str, message: str, severity: str | None = None, **evidence: Any) -> Finding:
    """A finding with the code's default severity unless one is given; None evidence is dropped."""
    return Finding(code, severity or CODES[code], subject, message,
                   {k: v for k, v in evidence.items() if v is not None})


def rail_label(rail: int, plane: int | None) -> str:
    """``"1"``, or ``"1 plane 0"`` on a multiplane node (rail numbers repeat across planes)."""
    return str(rail) if plane is None else f"{rail} plane {plane}"


def name_list(names: list[str] | tuple[str, ...], limit: int = 8) -> str:
    """``a, b, c`` — cut after ``limit`` names with how many more (a node can leak hundreds of
    representors: the message stays one readable line, the evidence keeps them all)."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f" and {len(names) - limit} more"
