"""The central service: ingest, storage, the bundle API (docs/design.md §9).

May import ``proto`` and the offline parts of the agent (recorded host, image, readers, analysis and
``agent.offline`` that runs them, report, the judging flags of ``agent.expectations``) and nothing else
of it: an allow-list in tests/unit/test_import_rules.py.
"""
