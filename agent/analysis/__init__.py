"""Analysis: pure functions from what the readers returned to what it means (docs/design.md §4).

``topology`` (rails, PFs, NICs, representors from a snapshot), ``checks/`` (snapshot + history ->
findings, one module per subject), ``diagnose`` (findings and the rail table) and ``pipeline`` (snapshot
-> topology -> history -> diagnosis, for doctor, metrics --from and the daemon).

May import: ``agent.model``, ``agent.config``, ``agent.naming``, ``agent.findings``, ``agent.safejson``
and the history's parsed form (``agent.readers.history``), nothing else of the project (an allow-list
in tests/unit/test_import_rules.py). Never pyroute2, subprocess, aiohttp or prometheus_client, and no
clock or file of its own: no ``os``, ``pathlib``, ``io``, ``datetime`` or ``time``.
"""
