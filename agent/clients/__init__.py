"""Clients of the remote APIs railscope speaks: one per API, and the one reader of token files.

``collector.py`` is the collector's API (uploads, the spool drain, capture requests, bundles);
``agent.py`` is a running agent's data endpoints (events, flight recorder, node image); ``kubernetes.py``
the Kubernetes API (``proto.kube``, re-exported: the collector's cluster watch uses it too) and
``cluster.py`` the operators' objects watched into the rollout's view; the bearer-token file reader
is ``proto.tokens``, for both programs. They may import ``proto``, the node image format and the
spool; never the service, the capture runner or the live host.
"""
