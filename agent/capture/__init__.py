"""Capture (DESIGN §7): plans as data, one runner, redaction, the streaming archive, upload, spool.

Sits on top: may use the host seam (live and recording), the readers and the analysis. Nothing below
imports from here.
"""
