"""The node agent daemon (``railscope agent``), one module per job: ``sampling`` (the registry's
sources in their threads and their latest parts, on ``scheduler``'s timers and lanes), ``link_state``
(what link messages mean to the detectors), ``link_events`` (the link and devlink listeners,
drained in batches), ``detection`` (the detectors over time), ``analysis``
(the pipeline of each new snapshot), ``debounce`` (re-read gaps, deferred and never dropped),
``events`` (the bounded event log), ``captures`` (the daemon's captures), ``pull`` (the request puller
and the spool upload), ``tracked_host`` (a host per thread that serialises firmware reads), ``app``
(the aiohttp app and its runner), ``background`` (a task for the app's lifetime: the node watch, the
request puller) and ``daemon`` (the composition root that wires them).

May import (docs/design.md §1): everything below it (the live host and its netlink listeners, the readers and
their registry, the pure analysis and detectors, the metrics); nothing below imports from here.
"""
