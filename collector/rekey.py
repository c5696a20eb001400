"""A reused capture filed under the incident that asked for it.

An agent answers a capture request with its own event capture of the same cause when one is recent
(``agent.service.pull``: the event's ``--capture-on`` capture within the cooldown), and that bundle is
stored under the event's one-node incident (``linkflapping-<time>``). The on-call engineer follows
the *alert's* incident: :func:`file_under_request` copies the bundle there, under the request's
bundle id, so the incident page lists it with the other nodes' bundles. A copy, not a move: the
event's own incident keeps its bundle. The bytes stream through (the store's reader into its
writer: bounded memory), are hashed on the way, and must match the original's ``.sha256``.
"""

from __future__ import annotations

import hashlib

from proto.keys import BundleKey

from .storage import Store, Stored, StoreError

__all__ = ["file_under_request"]


async def file_under_request(store: Store, stored: Stored, incident: str, bundle: str) -> Stored:
    """``stored`` copied to ``incident`` under the bundle id ``bundle`` (same cluster, node and
    capture time); the copy already there when there is one (a ``done`` sent twice)."""
    key = stored.key
    target = BundleKey(cluster=key.cluster, date=key.date, incident=incident, node=key.node, stamp=key.stamp,
                       bundle=bundle)
    have = await store.stat(target)
    if have is not None:
        return have
    writer = await store.begin(target)
    h = hashlib.sha256()
    n = 0
    try:
        async for piece in store.read(key):
            h.update(piece)
            n += len(piece)
            await writer.write(piece)
    except BaseException:
        await writer.abort()
        raise
    digest = h.hexdigest()
    if stored.sha256 is not None and digest != stored.sha256:
        await writer.abort()
        raise StoreError(f"{key.rel}: its bytes no longer match their .sha256; not copied")
    await writer.commit(digest)
    return Stored(target, n, digest)
