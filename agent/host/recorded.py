"""A recorded host: a node image (docs/design.md §2) from a directory, a ``.tar.gz``, or the bundle's bytes.

``fs/<path>`` answers the files door, ``cmd/<slug>.{stdout,stderr,rc}`` the commands door,
``netlink/links.json`` the netlink door, the manifest and the generated files the image door. The
image is read into memory by ``agent.host.image`` (never extracted: a bundle is untrusted input), so
nothing of it touches the filesystem and nothing is left behind. A file or command the image lacks
is "not available on that node", never an error. Only an input that is not an image at all (or that
breaks a rule of ``agent.host.image``) raises ``HostError``.
"""

from __future__ import annotations

import os
from typing import IO, Any

from agent.host import CmdResult, HostError, slug
from agent.host.image import (
    LIMITS,
    ImageFS,
    ImageTree,
    JSONError,
    Limits,
    Manifest,
    ManifestItem,
    load_json,
    open_tree,
    parse_manifest,
)
from agent.host.paths import FilesDoor

__all__ = ["RecordedHost", "open_image"]


class RecordedHost(FilesDoor):
    """Answers the three doors, and the image door, from a node image read into memory."""

    live = False

    def __init__(self, tree: ImageTree | str | os.PathLike[str] | bytes | IO[bytes]) -> None:
        if not isinstance(tree, ImageTree):
            tree = open_tree(tree)
        self.tree = tree
        self.name = tree.name
        self.image = self
        self.fs = ImageFS(tree)
        self.manifest: Manifest | None = None
        problems: list[tuple[str, str]] = [("image", why) for why in tree.problems]
        raw = tree.file("manifest.json")
        if raw is not None:
            self.manifest, why = parse_manifest(raw)
            problems += [("manifest", w) for w in why]
        elif tree.resolve(tree.base, "manifest.json") in tree.dirs:
            problems.append(("manifest", "manifest.json: not a file"))
        self.problems: tuple[tuple[str, str], ...] = tuple(problems)
        self._items: dict[str, ManifestItem] = {
            slug(item.argv): item for item in (self.manifest.items if self.manifest else ()) if item.argv is not None
        }
        self._links: list[dict[str, Any]] | None = None
        self._links_loaded = False
        self.links_error: str | None = None

    # -- the image door ---------------------------------------------------------------------
    def file(self, name: str) -> bytes | None:
        return self.tree.file(name)

    # -- commands ---------------------------------------------------------------------------
    def run(self, argv: list[str] | tuple[str, ...], timeout_s: float = 10.0,
            max_bytes: int = 8 << 20, keep: str = "head") -> CmdResult:
        argv = tuple(str(a) for a in argv)
        stem = f"cmd/{slug(argv)}"
        item = self._items.get(slug(argv))
        duration = item.duration_s if item else 0.0
        if item and item.timed_out:
            return CmdResult(argv, None, timed_out=True, duration_s=duration,
                             reason=f"{' '.join(argv)}: timed out when the image was recorded")
        out = self.tree.file(stem + ".stdout")
        if out is None:
            if item and item.skipped:
                return CmdResult(argv, None, missing=True, reason=item.reason or "skipped")
            return CmdResult(argv, None, missing=True, reason=f"{' '.join(argv)}: not recorded in this image")
        err = (self.tree.file(stem + ".stderr") or b"")[: 1 << 20]
        out = out[:max_bytes]
        # Without a .rc file the manifest's rc stands; hand-made images often have neither (success).
        rc: int | None = item.rc if item and item.rc is not None else 0
        rc_text = self.tree.file(stem + ".rc")
        if rc_text is not None:
            word = rc_text[:64].strip() or b"0"
            if not (word.lstrip(b"-").isdigit() and len(word) <= 11):
                return CmdResult(argv, None, out, err, missing=True, reason=f"{stem}.rc: not an exit status")
            rc = int(word)
        return CmdResult(argv, rc, out, err, duration_s=duration, truncated=bool(item and item.truncated))

    # -- netlink ----------------------------------------------------------------------------
    def _load_links(self) -> None:
        if self._links_loaded:
            return
        self._links_loaded = True
        raw = self.tree.file("netlink/links.json")
        if raw is None:
            self.links_error = "netlink/links.json: not in this image"
            return
        try:
            doc = load_json(raw, "netlink/links.json")
        except JSONError as exc:
            self.links_error = str(exc)
            return
        links = doc.get("links") if isinstance(doc, dict) else None
        if not isinstance(links, list):
            self.links_error = 'netlink/links.json: expected {"links": [ {...}, ... ]}'
            return
        good = [x for x in links if isinstance(x, dict)]
        if len(good) != len(links):
            # One bad entry costs that entry, not the whole dump (readers/links.py checks each field).
            self.problems += (("netlink", f"netlink/links.json: {len(links) - len(good)} entry(ies) "
                                          "that are not objects ignored"),)
        named = [x for x in good if _link_key_ok(x)]
        if len(named) != len(good):
            self.problems += (("netlink", f"netlink/links.json: {len(good) - len(named)} link(s) without a "
                                          "positive ifindex and a name of 1-15 characters ignored"),)
        self._links = named

    def links(self) -> list[dict[str, Any]] | None:
        self._load_links()
        if self._links is None:
            return None
        # Bulk dumps carry no statistics (docs/design.md §3); link_stats() gives them per rail.
        return [{**link, "stats64": None} for link in self._links]

    def link_stats(self, ifnames: list[str]) -> dict[str, dict[str, int]]:
        self._load_links()
        want = set(ifnames)
        return {
            link["ifname"]: dict(link["stats64"])
            for link in self._links or []
            if isinstance(link.get("ifname"), str) and link["ifname"] in want and isinstance(link.get("stats64"), dict)
        }

    def ethtool_stats(self, ifname: str) -> list[tuple[str, int]] | None:
        return None

    def ethtool_drvinfo(self, ifname: str) -> dict[str, str] | None:
        return None

    def close(self) -> None:
        """Nothing to release: the image lives in memory and nothing of it was written anywhere."""

    def __enter__(self) -> RecordedHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _link_key_ok(link: dict[str, Any]) -> bool:
    """A positive ifindex and an interface name the kernel could hold (IFNAMSIZ: 15 characters)."""
    ifindex, ifname = link.get("ifindex"), link.get("ifname")
    return (isinstance(ifindex, int) and not isinstance(ifindex, bool) and 0 < ifindex < (1 << 31)
            and isinstance(ifname, str) and 0 < len(ifname) <= 15 and "/" not in ifname)


def open_image(source: str | os.PathLike[str] | bytes | IO[bytes], limits: Limits = LIMITS,
               name: str | None = None) -> RecordedHost:
    """Open a node image: a directory, a ``.tar.gz`` with or without one top directory, the bytes of
    one, or a binary file object. Raises ``HostError`` with one line for anything that is not an
    image or breaks a rule of ``agent.host.image``."""
    try:
        return RecordedHost(open_tree(source, limits, name))
    except MemoryError:
        raise HostError(f"{name or source!s}: too large to read into memory") from None
