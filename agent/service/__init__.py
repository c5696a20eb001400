"""The node agent service (``railscope agent``): background samplers, the netlink link watcher,
detectors fed from both, the flight recorder, and the aiohttp app that serves ``/metrics``.

Layering (DESIGN §1): this package sits on top. It may use the live host, the readers, the pure
checks and detectors, and the metrics collector; nothing below imports from here.
"""
