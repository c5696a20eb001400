"""The collector's read-only view of the operators' objects (docs/design.md §9 "Cluster scope"): the slice of the
cluster an incident concerns, stored once per incident beside its bundles.

``watch.py`` is the watch (one replica, elected by a Lease), ``slice.py`` the slice and its store, ``page.py``
the incident page's section on the operators' intent. May import what the collector may
(tests/unit/test_import_rules.py): the analysis of the agent (``agent.analysis.rollout`` for the kinds,
``agent.analysis.intent``) and ``proto.kube`` (the Kubernetes client both programs use), never the agent's
clients.
"""
