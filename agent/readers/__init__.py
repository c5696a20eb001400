"""Readers: the node's state through the ``Host`` seam, as the frozen records of ``agent.model``.

One module per source, named after it: ``links`` (rtnetlink dump), ``pci`` (SR-IOV in sysfs),
``devlink``, ``rdma``, ``ethtool``, ``versions``, ``udev`` (rail naming rules) and ``ovs``. Each has
pure ``parse_*`` functions (raw text / JSON -> records, a sample of the input in the docstring) and a
thin ``read_*`` function that calls the host's doors and notes why a source gave nothing
(``common.Notes``). ``agent.readers.snapshot.take_snapshot`` runs them in dependency order.
"""
