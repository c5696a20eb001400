"""Report: text (and later HTML) renderings of a diagnosis, a report, a diff, for people.

May import the analysis and the records; never the host seam's live parts, the service or the metrics.
Every string that comes from a node or an image is escaped before it reaches a terminal.
"""
