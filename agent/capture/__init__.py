"""Capture (docs/design.md §7): plug-ins as data (``plugin``, ``plugins/``), one runner, redaction, the streaming archive, upload, spool.

Sits on top: may use the host seam (live and recording), the readers and the analysis; never the
agent service, which runs captures (``recorder`` is the flight recorder's ring and writer, filled by the
daemon and written by the ``agent`` plug-in). Nothing below imports from here.
"""
