"""Clients of the remote APIs railscope speaks: one per API, and the one reader of token files.

``collector.py`` is the collector's API (uploads, the spool drain, capture requests, bundles);
``agent.py`` is a running agent's data endpoints (events, flight recorder, node image); ``tokens.py``
reads a bearer token from a file, for both. They may import ``proto``, the node image format and the
spool; never the service, the capture runner or the live host.
"""
