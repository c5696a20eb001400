"""Capture: plans, the runner, the archive, the node spool, and the upload to the collector."""
