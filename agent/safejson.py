"""JSON from a node image, parsed within bounds (docs/design.md §2: an image is untrusted input).

``load_json`` is the parser of every JSON file of an image (manifest, link dump, events, flight
recorder lines, recorded command outputs): nesting deeper than 64 levels is refused before the
recursive parser sees it, and ``NaN``, ``Infinity``, numbers that overflow a double and numbers of
more than 40 digits read as ``null``, so each field's validator drops one field, never the file.

Pure (bytes in, values out): the readers, ``agent.host.image`` and the history parser the checks
use all share it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "JSONError", "Pairs", "load_json", "loads_bounded"]


class JSONError(ValueError):
    """A JSON document refused: one line, ``what: why``."""


#: Deepest nesting any JSON file of an image needs is about 6 (links -> vfinfo -> vf); the bound
#: keeps the recursive parser and everything that walks the result far from the interpreter's limit.
MAX_JSON_DEPTH = 64
_STRINGS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_BRACKETS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
#: a JSON number longer than this is no counter, index or time of a node (u64 has 20 digits)
_MAX_NUMBER = 40


def _depth(data: bytes) -> int:
    from itertools import accumulate

    brackets = _STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS)
    if len(brackets) <= 1:
        return len(brackets)
    # +1 / -1 per bracket as signed bytes: the running sum's maximum is the depth, at C speed.
    return max(accumulate(memoryview(brackets.translate(_BRACKETS)).cast("b")))


def _number(text: str) -> float | None:
    if len(text) > _MAX_NUMBER:
        return None
    x = float(text)
    return x if math.isfinite(x) else None


def _integer(text: str) -> int | None:
    return int(text) if len(text) <= _MAX_NUMBER else None


def _constant(_name: str) -> None:
    return None


#: One decoder for every document. ``json.loads`` with hooks builds a decoder per call, and each
#: new decoder's C scanner fetches its six settings by name with fresh strings that CPython 3.11
#: keeps in its global type attribute cache (up to 4,096 of them, about 60 bytes each): the memory
#: of a long-running agent then grows by a few KiB per read for hours. A decoder holds no state
#: between documents (its scanner's key memo is cleared after each), so one is shared.
_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_number, parse_int=_integer)


class Pairs(tuple):  # type: ignore[type-arg]
    """A JSON object as its ``(key, value)`` pairs in document order, duplicate keys kept.

    Some tools print one key twice in one object (ethtool ``--json -m``: ``module_temperature`` is the
    reading, then the object of its thresholds; CMIS modules repeat a lane array once per bank), where a
    ``dict`` keeps only the last. A tuple subclass, so an array (a ``list``) is never mistaken for one.
    """

    __slots__ = ()


#: The same rules, objects as ``Pairs`` (one shared decoder, for the reason above).
_PAIRS_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_number, parse_int=_integer,
                                  object_pairs_hook=Pairs)


def loads_bounded(text: str, what: str, max_depth: int = MAX_JSON_DEPTH, pairs: bool = False) -> Any:
    """``json.loads`` with the rules of ``load_json`` for text already decoded (a command's output).
    Raises ``JSONError`` for nesting deeper than ``max_depth``, ``json.JSONDecodeError`` for text that
    is not JSON. ``pairs``: objects come as ``Pairs`` (duplicate keys kept) instead of dicts."""
    if text.count("[") + text.count("{") > max_depth and _depth(text.encode("utf-8", "surrogatepass")) > max_depth:
        raise JSONError(f"{what}: JSON nested deeper than {max_depth} levels, ignored")
    try:
        if text.startswith("\ufeff"):  # as json.loads refuses it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return (_PAIRS_DECODER if pairs else _DECODER).decode(text)
    except RecursionError:
        raise JSONError(f"{what}: JSON nested deeper than {max_depth} levels, ignored") from None


def load_json(data: bytes, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Parse one JSON document of an image. ``NaN``, ``Infinity``, numbers that overflow a double and
    numbers of more than 40 digits read as ``null`` (so a field validator drops them, one field, not
    the file). Raises ``JSONError`` (``what: ...``) for text that is not UTF-8 JSON or nests deeper
    than ``max_depth``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONError(f"{what}: not UTF-8 (byte {exc.start})") from None
    try:
        return loads_bounded(text, what, max_depth)
    except JSONError:
        raise
    except ValueError as exc:  # json.JSONDecodeError
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise JSONError(f"{what}: not JSON ({msg[:120]})") from None
