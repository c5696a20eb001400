"""The central service: ingest, storage, the bundle API (DESIGN §9).

May import ``proto`` and the offline parts of the agent (recorded host, image, readers, analysis,
report); never the live host, the capture runner or the agent service.
"""
