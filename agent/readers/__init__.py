"""Readers: the node's state through the ``Host`` seam, as the frozen records of ``agent.model``.

One module per subject, named after it: ``links`` (rtnetlink dump), ``pci`` (SR-IOV in sysfs),
``devlink``, ``health`` (devlink health reporters), ``rdma``, ``ethtool``, ``versions``, ``udev`` (rail
naming rules) and ``ovs``. Each has pure ``parse_*`` functions (raw text / JSON -> records, a sample of
the input in the docstring) and a thin ``read_*`` function that calls the host's doors and notes why a
source gave nothing (``common.Notes``). ``sources`` declares the sources the agent schedules (the
registry); ``snapshot.take_snapshot`` runs each once; ``history`` parses ``events.json`` and
``recorder.jsonl``; ``kernel_table`` reads the validated-kernel table (the agent's own files, shipped
and ``--kernel-table``, not the node's) for the callers that hand it to ``diagnose``.

May import (docs/design.md §1): the host seam, ``agent.model``, ``agent.config``, ``agent.naming``,
``agent.findings``; nothing above the readers (tests/unit/test_import_rules.py).
"""
