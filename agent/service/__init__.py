"""The node agent daemon (``railscope agent``), one module per job: ``scheduler`` (the registry's
sources, each in its own thread at its own interval), ``link_state`` (what link messages mean to the
detectors), ``debounce`` (re-read gaps, deferred and never dropped), ``events`` (the bounded event
log), ``capture`` (node images on request), ``tracked_host`` (a host per thread
that serialises firmware reads), ``app`` (the aiohttp app and its runner), ``background`` (a task for
the app's lifetime: the node watch, the request puller) and ``daemon`` (the wiring).

May import (DESIGN §1): everything below it (the live host and its netlink listeners, the readers and
their registry, the pure analysis and detectors, the metrics); nothing below imports from here.
"""
