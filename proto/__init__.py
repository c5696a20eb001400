"""The wire format shared by the agent and the collector: ``SPEC.md``, frames, the key scheme, capture
requests, vectors.

Imports neither ``agent`` nor ``collector`` (docs/design.md §1): only msgpack and the standard library.
"""
