"""railscope agent: host access, readers, checks, detectors, metrics and capture for one node."""

__version__ = "0.1.0"
