"""Netlink, the live host's third door: one rtnetlink wire codec (``codec.py``), the link dump
(``dump.py``), and the two event listeners the daemon runs (``link_events.py``: rtnetlink link
messages, decoded with the same codec; ``devlink_events.py``: devlink's generic-netlink
notifications through pyroute2).

Part of the host seam: it imports nothing of the readers, checks, metrics or service.
"""
