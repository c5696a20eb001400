"""Documents for tools: strict JSON (RFC 8259).

Python's ``json`` writes ``NaN`` and ``Infinity`` bare, which strict readers (``jq``, Go, browsers)
refuse; a rate over zero time, or a value read from a hostile image, can be one.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["strict_json"]


def strict_json(obj: Any) -> Any:
    """``obj`` with NaN / Infinity as ``null`` and tuples / sets as lists, so ``json.dumps(...,
    allow_nan=False)`` gives RFC 8259 JSON (a rate over zero time is NaN in Python)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): strict_json(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict_json(v) for v in obj]
    if isinstance(obj, set | frozenset):
        return [strict_json(v) for v in sorted(obj, key=str)]
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    return str(obj)
