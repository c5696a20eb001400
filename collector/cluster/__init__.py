"""The collector's read-only view of the operators' objects (docs/design.md §9 "Cluster scope"): the slice of the
cluster an incident concerns, stored once per incident beside its bundles.

May import what the collector may (tests/unit/test_import_rules.py): the analysis of the agent
(``agent.analysis.rollout`` for the kinds), never the agent's clients.
"""
