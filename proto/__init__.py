"""The wire format shared by the agent and the collector: ``SPEC.md``, frames, the key scheme, capture
requests, vectors; and what both programs speak to others with: the token-file reader (``tokens.py``) and the
Kubernetes API client (``kube.py``, on ``kubernetes_asyncio``, imported when a client is made).

Imports neither ``agent`` nor ``collector`` (docs/design.md §1): msgpack, the standard library, and for ``kube.py``
kubernetes_asyncio and aiohttp.
"""
